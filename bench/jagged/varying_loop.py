"""The jagged family as a training loop calls it, on batches whose lengths are redrawn every step
(B and max_L fixed): add positional embeddings to a jagged batch, pad it, a small dense layer, back
to jagged, loss = sum, backward -- ours beside the same loop written with aten's conversions and
plain torch ops, with no synchronization inside the loop.

Per step (B = 1024 sequences, max_L = 256, D = 128, bf16; lengths uniform in [1, max_L], new every
step; pos_emb a learned [max_L, D] table, linear a torch.nn.Linear(D, D)):
  ours   h = mymetaops.jagged_dense_elementwise_add_jagged_output(values, offsets,
                                                                  pos_emb.expand(B, max_L, D))[0]
         p = mymetaops.jagged_to_padded_dense(h, offsets, max_L)
         out = mymetaops.dense_to_jagged(linear(p), offsets, total_L)[0]
  aten   h = values + aten._padded_dense_to_jagged_forward(pos_emb.expand(B, max_L, D), [offsets], total_L)
         p = aten._jagged_to_padded_dense_forward(h, [offsets], [max_L], 0.0)
         out = aten._padded_dense_to_jagged_forward(linear(p), [offsets], total_L)
         (aten's conversions have no derivative: each one's backward is the other, as NJT runs them)
  then   out.sum().backward()
Reports: ms per step of each loop (steps back to back, synchronized at the end only); host us per
call (a second pass that synchronizes before each step, so the GPU is idle and each call's wall
time is its host path; median over steps); the decision cache's hits and misses over our loop
(mymetaops.ops.dispatch.cache_info(): total_L changes every step, B, max_L and D do not); whether
our loop runs under torch.cuda.set_sync_debug_mode("error"); and the first step's loss and
gradients of both loops against each other (max relative error).

    python bench/jagged/varying_loop.py [--steps 100] [--budget-s 45] [--out PREFIX]
    python bench/jagged/varying_loop.py --dry-run   # CPU: a few steps at small sizes
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jagged_harness import (BF16, REL_ERR_BOUND, add_device_arguments, aten_to_jagged, aten_to_padded,  # noqa: E402
                            check, checks_markdown, fmt, max_rel_err, meta_line, offsets_of, report_main,
                            short_error, sync)
import torch  # noqa: E402

import mymetaops  # noqa: E402
import mymetaops.ops  # noqa: E402,F401
from mymetaops.ops import dispatch  # noqa: E402

SIZES = (1024, 256, 128)  # B, max_L, D
DRY_RUN_SIZES = (8, 16, 16)
DRY_RUN_STEPS = 4
HOST_STEPS = 20  # steps of the host-time pass (each synchronized first)
SYNC_STEPS = 5  # steps run under set_sync_debug_mode("error")
WARMUP_STEPS = 2
CALLS = ("add positions (jagged out)", "pad", "linear", "back to jagged", "sum", "backward")


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=45.0, help="all passes together")
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-jagged-varying_loop)")


# The three jagged calls of a step, per implementation: add(values, offsets, y, total),
# pad(h, offsets, max_L, total), back(q, offsets, total).
IMPLS = {
    "mymetaops": dict(
        add=lambda v, o, y, t: mymetaops.jagged_dense_elementwise_add_jagged_output(v, o, y)[0],
        pad=lambda h, o, L, t: mymetaops.jagged_to_padded_dense(h, o, L),
        back=lambda q, o, t: mymetaops.dense_to_jagged(q, o, t)[0]),
    "aten": dict(
        add=lambda v, o, y, t: v + aten_to_jagged(y, o, t),
        pad=lambda h, o, L, t: aten_to_padded(h, o, L, t),
        back=lambda q, o, t: aten_to_jagged(q, o, t)),
}


def make_params(max_length, dim, device, seed):
    torch.manual_seed(seed)
    pos = torch.nn.Parameter(0.02 * torch.randn(max_length, dim, dtype=BF16).to(device))
    linear = torch.nn.Linear(dim, dim, device=device, dtype=BF16)
    return pos, linear


def clone_params(params):
    pos, linear = params
    twin = torch.nn.Linear(linear.in_features, linear.out_features, device=linear.weight.device,
                           dtype=linear.weight.dtype)
    with torch.no_grad():
        twin.weight.copy_(linear.weight)
        twin.bias.copy_(linear.bias)
    return torch.nn.Parameter(pos.detach().clone()), twin


def make_batches(steps, batch, max_length, dim, device, seed):
    """(values [total_L, D], offsets [B + 1] int64, total_L) per step, made before the loop (the
    host-to-device copies are the data loader's, not the step's)."""
    g = torch.Generator().manual_seed(seed)
    dg = torch.Generator(device=device).manual_seed(seed + 1)
    out = []
    for _ in range(steps):
        lengths = torch.randint(1, max_length + 1, (batch,), generator=g)
        total = int(lengths.sum())
        out.append((torch.randn(total, dim, device=device, dtype=BF16, generator=dg),
                    offsets_of(lengths).to(device), total))
    return out


def step(impl, params, b, clock=None):
    """One training step; with `clock` (a dict of lists), each call's wall time is appended."""
    pos, linear = params
    values, offsets, total = b
    batch, (max_length, dim) = offsets.numel() - 1, pos.shape
    for p in (pos, linear.weight, linear.bias):
        p.grad = None
    t = time.perf_counter()

    def lap(name):
        nonlocal t
        if clock is not None:
            now = time.perf_counter()
            clock[name].append(now - t)
            t = now
    f = IMPLS[impl]
    h = f["add"](values, offsets, pos.expand(batch, max_length, dim), total)
    lap(CALLS[0])
    p = f["pad"](h, offsets, max_length, total)
    lap(CALLS[1])
    q = linear(p)
    lap(CALLS[2])
    out = f["back"](q, offsets, total)
    lap(CALLS[3])
    loss = out.sum()
    lap(CALLS[4])
    loss.backward()
    lap(CALLS[5])
    return loss


def loop(impl, params, batches, device, deadline, per_step_sync=False, clock=None):
    """(seconds, steps done) over `batches` (all, or those before the deadline)."""
    sync(device)
    start, done = time.perf_counter(), 0
    for b in batches:
        if per_step_sync:
            sync(device)
        step(impl, params, b, clock)
        done += 1
        if time.monotonic() > deadline:
            break
    sync(device)
    return time.perf_counter() - start, done


def first_step_error(ours, aten, batch):
    """Loss and every gradient of one step of each, max relative error (ours vs aten)."""
    got, ref = [], []
    for impl, params, into in (("mymetaops", ours, got), ("aten", aten, ref)):
        loss = step(impl, params, batch)
        pos, linear = params
        into += [loss.detach().reshape(1), pos.grad, linear.weight.grad, linear.bias.grad]
    return max_rel_err(got, ref)


def run(args, device, prefix, meta):
    batch, max_length, dim = DRY_RUN_SIZES if args.dry_run else SIZES
    steps = min(args.steps, DRY_RUN_STEPS) if args.dry_run else args.steps
    gpu = device.type == "cuda"
    started = time.monotonic()
    budget = args.budget_s
    ours = make_params(max_length, dim, device, args.seed)
    aten = clone_params(ours)
    warm = make_batches(WARMUP_STEPS, batch, max_length, dim, device, args.seed + 1000)
    batches = make_batches(steps, batch, max_length, dim, device, args.seed)
    result = dict(batch=batch, max_length=max_length, dim=dim, steps_asked=steps, host_steps=min(HOST_STEPS, steps),
                  totals=[b[2] for b in batches], errors={}, host_us={}, ms_per_step={}, steps={})
    rel = None
    before_warmup = dispatch.cache_info()
    try:
        rel = first_step_error(ours, aten, batches[0])
    except Exception as e:  # noqa: BLE001
        result["errors"]["first step"] = short_error(e)
    cache = {}
    for impl, params in (("mymetaops", ours), ("aten", aten)):
        try:
            loop(impl, params, warm, device, float("inf"))
            before = dispatch.cache_info()
            # The two throughput passes get 35% of the budget each, the host passes 10% each.
            seconds, done = loop(impl, params, batches, device, started + budget * (0.35 if impl == "mymetaops" else 0.7))
            after = dispatch.cache_info()
            if impl == "mymetaops":
                cache = dict(hits=after["hits"] - before["hits"], misses=after["misses"] - before["misses"],
                             misses_with_warmup=after["misses"] - before_warmup["misses"], size=after["size"])
            result["ms_per_step"][impl] = 1e3 * seconds / done
            result["steps"][impl] = done
        except Exception as e:  # noqa: BLE001  (one loop failing is reported, the other still runs)
            result["errors"][impl] = short_error(e)
    for impl, params, share in (("mymetaops", ours, 0.8), ("aten", aten, 0.9)):
        if impl in result["errors"]:
            continue
        clock = {name: [] for name in CALLS}
        loop(impl, params, batches[:HOST_STEPS], device, started + budget * share, per_step_sync=True, clock=clock)
        result["host_us"][impl] = {name: 1e6 * statistics.median(v) for name, v in clock.items() if v}
        result["host_us"][impl]["step (sum of the medians)"] = sum(result["host_us"][impl].values())
    sync_error = None
    if gpu and "mymetaops" not in result["errors"]:
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
        try:
            for b in batches[:SYNC_STEPS]:
                step("mymetaops", ours, b)
        except RuntimeError as e:  # a host sync
            sync_error = short_error(e)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        sync(device)
    ms = result["ms_per_step"]
    host = result["host_us"]
    step_host = {k: v.get("step (sum of the medians)") for k, v in host.items()}
    result.update(cache=cache, sync_error=sync_error, rel_err=rel, elapsed_s=time.monotonic() - started)
    result["checks"] = [
        check("varying loop: step time, aten loop / ours (fwd+bwd, lengths redrawn every step)",
              ms["aten"] / ms["mymetaops"] if "aten" in ms and "mymetaops" in ms else None, None, False),
        check("varying loop: host us per step, ours / aten (calls timed on an idle GPU)",
              step_host["mymetaops"] / step_host["aten"] if step_host.get("aten") and step_host.get("mymetaops")
              else None, None, True),
        check(f"varying loop: decision-cache misses over our {result['steps'].get('mymetaops', 0)} steps "
              f"({cache.get('misses_with_warmup', '—')} with the first {WARMUP_STEPS + 1} steps; "
              f"hits {cache.get('hits', '—')})", cache.get("misses"), None, True, "{:.0f}"),
        dict(name="varying loop: no host sync in our loop (set_sync_debug_mode('error'))",
             value=sync_error is None, shown="pass" if sync_error is None else f"FAIL: {sync_error}",
             required="pass" if gpu else "(GPU only)",
             passed=(sync_error is None and "mymetaops" not in result["errors"]) if gpu else None),
        check("varying loop: first step, loss and gradients, ours vs aten (max rel err)", rel, REL_ERR_BOUND, True,
              "{:.1e}"),
    ]
    return result


def markdown(meta, result) -> str:
    r = result
    totals = r["totals"]
    lines = [f"# Jagged varying-length training loop on {meta_line(meta)}", "", *checks_markdown(r["checks"]), "",
             f"B = {r['batch']} sequences, max_L = {r['max_length']}, D = {r['dim']} (bf16), lengths uniform in "
             f"[1, {r['max_length']}] redrawn every step (total_L {min(totals)}..{max(totals)}); per step: positional "
             f"embeddings added (jagged output), pad, nn.Linear(D, D), back to jagged (total_L given), loss = sum, "
             f"backward. No synchronization inside the loop.", ""]
    for what, e in r["errors"].items():
        lines += [f"> {what}: ERROR {e}", ""]
    lines += ["| loop | ms/step | steps | host us/step | " + " | ".join(CALLS) + " |",
              "|---|---|---|---|" + "---|" * len(CALLS)]
    for impl, label in (("mymetaops", "ours (mymetaops)"), ("aten", "aten conversions + torch")):
        host = r["host_us"].get(impl, {})
        lines.append(f"| {label} | {fmt(r['ms_per_step'].get(impl), '{:.3f}')} | {r['steps'].get(impl, '—')} | "
                     f"{fmt(host.get('step (sum of the medians)'))} | "
                     + " | ".join(fmt(host.get(name)) for name in CALLS) + " |")
    c = r["cache"]
    lines += ["", f"Host us per call: median over {r['host_steps']} steps, each started on an idle GPU. Decision cache "
                  f"over our loop: {c.get('hits', '—')} hits, {c.get('misses', '—')} misses "
                  f"({c.get('misses_with_warmup', '—')} counting the first steps: the numerics check and "
                  f"{WARMUP_STEPS} warm-up steps)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "jagged-varying_loop")


if __name__ == "__main__":
    sys.exit(main())
