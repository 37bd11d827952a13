"""Host cost per call: what a tiny embedding_bag costs on the host, torch and ours in one run.

Wall time per call over back-to-back calls (synchronized before and after only) on a 1000 x 64 fp32
table, 32 bags of 8 int64 indices: the GPU finishes each call sooner than the host issues the next,
so this is the per-call path from Python to the launch. Median of the repetitions; the rows take
turns within each repetition. Also checks that the default path never synchronizes the host, under
torch.cuda.set_sync_debug_mode("error").

    python bench/embedding_bag/host_cost.py [--calls 2000] [--reps 7] [--device cpu --smoke]
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

# harness first: it puts this checkout on sys.path
from harness import check, interleaved_medians
import mymetaops
import mymetaops.ops  # noqa: F401  (registers torch.ops.mymetaops)

NAME = "host_cost"
ROWS, DIM, BAGS, BAG_SIZE = 1000, 64, 32, 8
# The previous session's H200 measurement (forward, us per call), before the C++ dispatch; the
# wrapper's default then validated the indices with a host sync (52.2 us with validate=False).
BEFORE_US = {"add_ (floor)": 6.0, "F.embedding_bag": 10.4, "raw op": 31.2, "wrapper (default)": 120.0}
BOUNDS = {"raw op": 1.3, "wrapper (default)": 1.5}  # x F.embedding_bag's time, both passes
FORWARD, FORWARD_BACKWARD = "forward", "forward+backward"


def add_arguments(parser):
    parser.add_argument("--calls", type=int, default=2000, help="host cost: calls per repetition")
    parser.add_argument("--reps", type=int, default=7, help="host cost: repetitions (median)")


def _calls(indices, offsets):
    op = torch.ops.mymetaops.embedding_bag
    return {
        "F.embedding_bag": lambda w: F.embedding_bag(indices, w, offsets, mode="sum"),
        "raw op": lambda w: op(w, indices, offsets, 0, None, -1, False),
        "wrapper (default)": lambda w: mymetaops.embedding_bag(indices, w, offsets, mode="sum"),
        "wrapper (validate=True)": lambda w: mymetaops.embedding_bag(indices, w, offsets, mode="sum",
                                                                     validate=True),
    }


def _training_step(call, weight, grad):
    def step():
        weight.grad = None
        call(weight).backward(grad)
    return step


def sync_free(fn, device) -> str:
    """'pass' when fn runs under torch.cuda.set_sync_debug_mode("error"), else why not."""
    if device.type != "cuda":  # smoke runs: nothing to synchronize with; the call still runs
        fn()
        return "n/a (CPU)"
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as e:
        return "FAIL: " + str(e).splitlines()[0][:120]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return "pass"


def run(args, device):
    calls, reps = (50, 3) if args.smoke else (args.calls, args.reps)
    g = torch.Generator(device=device).manual_seed(0)
    weight = torch.randn(ROWS, DIM, device=device, generator=g)
    indices = torch.randint(0, ROWS, (BAGS * BAG_SIZE,), device=device, generator=g)
    offsets = torch.arange(0, BAGS * BAG_SIZE, BAG_SIZE, device=device)
    grad = torch.randn(BAGS, DIM, device=device, generator=g)
    trained = weight.clone().requires_grad_()
    floor = torch.zeros(1, device=device)
    calls_of = _calls(indices, offsets)
    fns = {(FORWARD, "add_ (floor)"): lambda: floor.add_(1)}
    fns.update({(FORWARD, name): functools.partial(call, weight) for name, call in calls_of.items()})
    fns.update({(FORWARD_BACKWARD, name): _training_step(calls_of[name], trained, grad)
                for name in ("F.embedding_bag", "raw op", "wrapper (default)")})
    seconds = interleaved_medians(fns, calls, reps, device, warmup=3 if args.smoke else 200)
    mymetaops.check_errors()

    rows, checks = [], []
    for (kind, name), s in seconds.items():
        ratio = s / seconds[(kind, "F.embedding_bag")]
        bound = BOUNDS.get(name)
        rows.append(dict(kind=kind, call=name, us=s * 1e6, vs_torch=ratio, bound=bound,
                         before_us=BEFORE_US.get(name) if kind == FORWARD else None))
        if bound is not None:
            checks.append(check(f"host cost {kind}, {name} / F.embedding_bag", ratio, bound, at_most=True))

    # The default path must not synchronize: a warmed call, and a new shape (a decision-cache miss).
    fresh_weight = torch.randn(3000, 32, device=device, generator=g, requires_grad=True)
    fresh_indices = torch.randint(0, 3000, (777 * 5,), device=device, generator=g)
    fresh_offsets = torch.arange(0, 777 * 5, 5, device=device)
    fresh_grad = torch.randn(777, 32, device=device, generator=g)
    default = calls_of["wrapper (default)"]
    sync_checks = {
        "warm call": sync_free(_training_step(default, trained, grad), device),
        "new shape": sync_free(lambda: mymetaops.embedding_bag(fresh_indices, fresh_weight, fresh_offsets,
                                                               mode="sum").backward(fresh_grad), device),
    }
    mymetaops.check_errors()
    for what, verdict in sync_checks.items():
        checks.append(dict(name=f"no host sync in the default forward+backward ({what})", value=verdict,
                           shown=verdict, required="pass",
                           passed=None if verdict.startswith("n/a") else verdict == "pass"))
    return dict(name=NAME, rows=rows, sync_debug=sync_checks, checks=checks,
                markdown=markdown(rows, sync_checks, calls, reps))


def markdown(rows, sync_checks, calls, reps):
    lines = [f"## Host cost per call ({ROWS} x {DIM} fp32, {BAGS} bags of {BAG_SIZE}, int64; median of "
             f"{reps} x {calls} back-to-back calls)", "",
             "| pass | call | before, us (previous session) | us/call | x F.embedding_bag | bound |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        before = f"{r['before_us']:.1f}" if r["before_us"] is not None else ""
        bound = f"<= {r['bound']}x" if r["bound"] is not None else ""
        lines.append(f"| {r['kind']} | {r['call']} | {before} | {r['us']:.1f} | {r['vs_torch']:.2f}x | {bound} |")
    lines += ["", "Before: the previous session's H200 forward; its wrapper default validated with a host "
              "sync (52.2 us with validate=False).",
              "No host sync in the default forward+backward (set_sync_debug_mode('error')): "
              + ", ".join(f"{k}: {v}" for k, v in sync_checks.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    import run_all
    run_all.main(only=[NAME])
