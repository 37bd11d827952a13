"""hstu_attention and jagged_attention as users call them (the public wrappers, default arguments),
forward and forward+backward, at the issue's four shapes, beside flex_attention with a document
mask (softmax, causal, jagged) in the same run, and the first call of each shape (JIT included).

    python bench/attention/attention_table.py [--out PREFIX] [--budget-s 300] [--no-flex]
    python bench/attention/attention_table.py --dry-run      # CPU plumbing check (tiny shapes)

Shapes (B, N, H, D): lengths uniform in [1, N] (seeded), causal, bf16, q = k = v width D.
TFLOP/s on the useful jagged work: forward 4 D H sum_b L_b (L_b + 1) / 2 (two products over the
causal pairs), forward+backward 3.5x that (the backward recomputes q.k and adds three products).
Medians of triton.testing.do_bench (L2 flushed). do_bench's flush leaves the GPU idle while the
host issues the next call, so where the host's fwd+bwd path (~300 us) is near the kernels' time the
cell holds host time; the "loop" columns time fwd+bwd back to back (20 calls between two syncs,
median of 3), the pace of a training loop whose host runs ahead. Outputs <prefix>.json / .md (default
bench/results/<date>-<gpu>-attention).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))  # the repo: mymetaops without an install
from bench_common import (add_device_arguments, check, checks_markdown, close_report, median_us,  # noqa: E402
                          open_report, short_error, sync_free, wall_per_iteration)

SHAPES = ((64, 1024, 4, 128), (256, 512, 2, 128), (32, 4096, 4, 128), (512, 256, 4, 64))
DRY_RUN_SHAPES = ((3, 16, 2, 16),)
# The bars (TFLOP/s, H200): hstu forward per shape, hstu fwd+bwd on shapes 0 and 2, and
# jagged_attention >= 2x flex_attention (>= 400 forward on shape 0).
HSTU_FWD_BAR = (400, 300, 550, 150)
HSTU_FWDBWD_BAR = {0: 300, 2: 300}
SOFTMAX_FWD_BAR = {0: 400}
ALPHA = 1.0 / 128 ** 0.5
SEED = 0
LOOP_CALLS, LOOP_REPS = 20, 3


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop starting shapes past this")
    parser.add_argument("--no-flex", action="store_true", help="skip the flex_attention anchor")


def make_inputs(shape, device, dtype=torch.bfloat16):
    batch, n, heads, dim = shape
    g = torch.Generator().manual_seed(SEED)
    lengths = torch.randint(1, n + 1, (batch,), generator=g)
    offsets = torch.zeros(batch + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    total = int(offsets[-1])
    gd = torch.Generator(device=device).manual_seed(SEED + 1)
    q, k, v = (torch.randn(total, heads, dim, device=device, dtype=dtype, generator=gd) for _ in range(3))
    return lengths, offsets.to(device), q, k, v


def useful_flops(lengths, heads, dim) -> float:
    pairs = float((lengths * (lengths + 1) // 2).sum())
    return 4.0 * dim * heads * pairs


def _fwd_bwd(fn, q, k, v):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    grad = torch.ones_like(q)  # any fixed grad: the backward's cost does not depend on its values

    def run():
        out = fn(*leaves)
        torch.autograd.grad(out, leaves, grad)
    return run


def flex_anchor(lengths, q, k, v):
    """flex_attention over the concatenated sequences with a causal document mask ([1, H, T, D])."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    total = q.shape[0]
    doc = torch.repeat_interleave(torch.arange(lengths.numel(), device=q.device), lengths.to(q.device))

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    block_mask = create_block_mask(mask_mod, None, None, total, total, device=q.device)
    compiled = torch.compile(flex_attention)

    def call(q, k, v):
        out = compiled(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                       block_mask=block_mask)
        return out[0].transpose(0, 1)
    return call


def run(args, device, prefix, meta) -> dict:
    import mymetaops
    gpu = device.type == "cuda"
    shapes = SHAPES if gpu else DRY_RUN_SHAPES
    started = time.perf_counter()
    rows, checks = [], []
    for index, shape in enumerate(shapes):
        if time.perf_counter() - started > args.budget_s:
            rows.append(dict(shape=shape, skipped="past the budget"))
            continue
        batch, n, heads, dim = shape
        lengths, offsets, q, k, v = make_inputs(shape, device)
        flops = useful_flops(lengths, heads, dim)
        calls = {
            "hstu": lambda q, k, v: mymetaops.hstu_attention(q, k, v, offsets, n, ALPHA),
            "softmax": lambda q, k, v: mymetaops.jagged_attention(q, k, v, offsets, n),
        }
        row = dict(shape=shape, total=q.shape[0], gflop_fwd=flops / 1e9)
        if gpu and not args.no_flex:
            try:  # its dense block mask needs total_L^2 bytes: the longest shape may not fit an 80 GB card
                calls["flex"] = flex_anchor(lengths, q, k, v)
            except torch.OutOfMemoryError as e:
                row["flex_error"] = short_error(e)
                torch.cuda.empty_cache()
        for name, fn in calls.items():
            try:
                t0 = time.perf_counter()
                fn(q, k, v)
                if gpu:
                    torch.cuda.synchronize(device)
                row[f"{name}_first_call_s"] = time.perf_counter() - t0
                fwd = median_us(lambda: fn(q, k, v), device)
                both = median_us(_fwd_bwd(fn, q, k, v), device)
                loop = 1e6 * sorted(wall_per_iteration(_fwd_bwd(fn, q, k, v), LOOP_CALLS, device)
                                    for _ in range(LOOP_REPS))[LOOP_REPS // 2]
                row[f"{name}_fwd_us"], row[f"{name}_fwdbwd_us"], row[f"{name}_fwdbwd_loop_us"] = fwd, both, loop
                row[f"{name}_fwd_tflops"] = flops / fwd / 1e6
                row[f"{name}_fwdbwd_tflops"] = 3.5 * flops / both / 1e6
                row[f"{name}_fwdbwd_loop_tflops"] = 3.5 * flops / loop / 1e6
            except Exception as e:  # noqa: BLE001
                row[f"{name}_error"] = short_error(e)
        row["sync"] = sync_free(_fwd_bwd(calls["hstu"], q, k, v), device)
        rows.append(row)
        label = "B{} N{} H{} D{}".format(*shape)
        if gpu:
            checks.append(check(f"hstu fwd {label}: TFLOP/s", row.get("hstu_fwd_tflops"), HSTU_FWD_BAR[index], False,
                                "{:.0f}", missing_fails=True))
            if index in HSTU_FWDBWD_BAR:
                for what in ("fwdbwd", "fwdbwd_loop"):
                    checks.append(check(f"hstu {what} {label}: TFLOP/s", row.get(f"hstu_{what}_tflops"),
                                        HSTU_FWDBWD_BAR[index], False, "{:.0f}", missing_fails=True))
            for what in ("fwd", "fwdbwd", "fwdbwd_loop"):
                ours, flex = row.get(f"softmax_{what}_tflops"), row.get(f"flex_{what}_tflops")
                checks.append(check(f"jagged_attention {what} {label}: x flex_attention", ours / flex if ours and flex
                                    else None, 2.0, False, missing_fails=True))
            if index in SOFTMAX_FWD_BAR:
                checks.append(check(f"jagged_attention fwd {label}: TFLOP/s", row.get("softmax_fwd_tflops"),
                                    SOFTMAX_FWD_BAR[index], False, "{:.0f}", missing_fails=True))
            checks.append(dict(name=f"no host sync {label} (hstu fwd+bwd)", value=row["sync"], shown=row["sync"],
                               required="pass", passed=row["sync"] == "pass"))
        del q, k, v
        torch.cuda.empty_cache() if gpu else None  # flex's block masks leave tens of GB reserved
    return dict(rows=rows, checks=checks)


def _cell(row, key, spec="{:.0f}"):
    if key in row:
        return spec.format(row[key])
    name = key.split("_")[0]
    return "ERR" if f"{name}_error" in row else "—"


def markdown(meta, report) -> str:
    lines = [f"# Jagged attention ({meta['gpu']}, {meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, revision {meta['revision']}; bf16, causal, lengths "
             "uniform in [1, N]; TFLOP/s on the useful jagged work (fwd+bwd: 3.5x the forward's FLOPs).", "",
             "| shape | total_L | hstu fwd TF | hstu fwd+bwd TF (loop) | softmax fwd TF | softmax fwd+bwd TF (loop) | "
             "flex fwd TF | flex fwd+bwd TF (loop) | first call s (hstu / softmax / flex) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        label = "B{} N{} H{} D{}".format(*r["shape"])
        if "skipped" in r:
            lines.append(f"| {label} | skipped: {r['skipped']} |||||||| ")
            continue
        first = " / ".join(_cell(r, f"{n}_first_call_s", "{:.2f}") for n in ("hstu", "softmax", "flex"))
        both = {n: f"{_cell(r, f'{n}_fwdbwd_tflops')} ({_cell(r, f'{n}_fwdbwd_loop_tflops')})"
                for n in ("hstu", "softmax", "flex")}
        lines.append(f"| {label} | {r['total']} | {_cell(r, 'hstu_fwd_tflops')} | {both['hstu']} | "
                     f"{_cell(r, 'softmax_fwd_tflops')} | {both['softmax']} | "
                     f"{_cell(r, 'flex_fwd_tflops')} | {both['flex']} | {first} |")
    errors = [(r, k, v) for r in report["rows"] for k, v in r.items() if k.endswith("_error")]
    if errors:
        lines += ["", "Errors:"] + [f"- {r['shape']} {k}: {v}" for r, k, v in errors]
    lines += ["", "## Checks (the issue's bars)", ""] + checks_markdown(report["checks"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
