"""Tile sweep of the Triton attention kernels at the bench shapes: each candidate config through
the launchers (mymetaops/triton/hstu_attention.py, jagged_attention.py), beside the default config
and the public op (whose gap to the launcher is the per-call host cost). What the defaults and the
model's tile costs are chosen from; not a timed test.

    python bench/attention/config_sweep.py [--out PREFIX] [--budget-s 120] [--forward-only]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))
from attention_table import ALPHA, SHAPES, make_inputs, useful_flops  # noqa: E402
from bench_common import add_device_arguments, close_report, median_us, open_report, short_error  # noqa: E402

# (block_m, block_n, num_warps, num_stages) forward candidates per head dim.
# The 64-row tiles with fewer or narrower stages take less shared memory (more programs per SM for
# the short-sequence shapes, whose programs are latency-bound).
FWD = {64: [(128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3), (128, 128, 4, 2),
            (64, 64, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (32, 32, 2, 2)],
       128: [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2),
             (64, 128, 4, 2), (64, 64, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3), (32, 64, 4, 2)]}
# (dk/dv config, dq config) backward candidates per op and head dim, beside the defaults: the old
# defaults, the fastest of the 2026-12-02 sweep (which spill on Triton 3.8: the reference to
# beat) and tiles that compile without spills on Triton 3.8 (scripts/check_triton_targets.py).
BWD = {
    ("hstu", 128): [((32, 64, 8, 2), (128, 32, 8, 3)),  # the defaults before 2026-12
                    ((64, 64, 4, 2), (64, 64, 4, 2)),  # fastest measured; spills
                    ((32, 128, 8, 2), (128, 64, 8, 2)), ((64, 128, 8, 2), (128, 32, 8, 3)),
                    ((32, 64, 4, 1), (64, 32, 4, 2)), ((16, 64, 4, 2), (64, 64, 8, 2))],
    ("hstu", 64): [((64, 128, 8, 2), (128, 64, 8, 2)), ((64, 64, 4, 2), (128, 64, 8, 2)),
                   ((64, 128, 8, 3), (128, 64, 8, 3))],
    ("softmax", 128): [((64, 128, 8, 2), (128, 64, 8, 2)),  # fastest measured; spills
                       ((32, 128, 8, 2), (64, 64, 4, 2)), ((32, 128, 8, 2), (128, 32, 8, 3)),
                       ((32, 64, 8, 3), (64, 64, 4, 2))],
    ("softmax", 64): [((64, 128, 8, 2), (128, 64, 8, 2)), ((32, 128, 8, 2), (128, 64, 8, 2))],
}
BWD_SHAPES = (0, 2, 3)


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--budget-s", type=float, default=120.0,
                        help="wall time for all measurements, JIT compiles included (default 120): the backward "
                             "candidates go first, a measurement is started only within the budget")
    parser.add_argument("--forward-only", action="store_true", help="skip the backward candidates")


def run(args, device, prefix, meta) -> dict:
    import mymetaops
    from mymetaops.triton import hstu_attention as hstu
    from mymetaops.triton import jagged_attention as sm
    started = time.perf_counter()
    rows = []

    def measure(row, fn):
        """Append row with fn's time (or error); False once the budget is spent (nothing run)."""
        if time.perf_counter() - started > args.budget_s:
            return False
        try:
            rows.append(dict(row, us=median_us(fn, device)))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(row, error=short_error(e)))
        return True

    shapes = SHAPES if device.type == "cuda" else ((3, 16, 2, 16),)
    inputs = {shape: make_inputs(shape, device) for shape in shapes}
    # Backward first: its candidates are what the defaults wait on.
    for index, shape in enumerate(shapes):
        batch, n, heads, dim = shape
        # Dry run (CPU): one candidate per op, the plumbing only.
        candidates = {op: BWD.get((op, dim), []) if device.type == "cuda" else BWD[op, 128][:1]
                      for op in ("hstu", "softmax")}
        if args.forward_only or (index not in BWD_SHAPES and device.type == "cuda") or not any(candidates.values()):
            continue
        _, offsets, q, k, v = inputs[shape]
        grad = torch.randn_like(q)
        out_s, lse = sm.jagged_attention_fwd(q, k, v, offsets, n)
        for op in ("hstu", "softmax"):
            for pair in [None] + candidates[op]:
                label = "default" if pair is None else [list(pair[0]), list(pair[1])]
                if op == "hstu":
                    configs = None if pair is None else (hstu.HstuConfig(*pair[0]), hstu.HstuConfig(*pair[1]))
                    fn = lambda: hstu.hstu_attention_bwd(grad, q, k, v, offsets, n, ALPHA, config=configs)  # noqa: E731
                else:
                    kv, dq = (None, None) if pair is None else (sm.AttentionConfig(*pair[0]),
                                                                sm.AttentionConfig(*pair[1]))
                    fn = lambda: sm.jagged_attention_bwd(grad, q, k, v, out_s, lse, offsets, n,  # noqa: E731
                                                         config=kv, dq_config=dq)
                measure(dict(shape=list(shape), op=op, direction="bwd", config=label), fn)
        del grad, out_s, lse
    for shape in shapes:
        _, n, _, dim = shape
        _, offsets, q, k, v = inputs[shape]
        ops = {
            "hstu": (lambda c: hstu.hstu_attention_fwd(q, k, v, offsets, n, ALPHA, config=c), hstu.HstuConfig,
                     lambda: mymetaops.hstu_attention(q, k, v, offsets, n, ALPHA)),
            "softmax": (lambda c: sm.jagged_attention_fwd(q, k, v, offsets, n, config=c), sm.AttentionConfig,
                        lambda: mymetaops.jagged_attention(q, k, v, offsets, n)),
        }
        for op, (launch, config_type, public) in ops.items():
            base = dict(shape=list(shape), op=op, direction="fwd")
            measure(dict(base, config="public op"), public)
            measure(dict(base, config="default"), lambda: launch(None))
            for cfg in FWD.get(dim, []):
                if not measure(dict(base, config=list(cfg)), lambda: launch(config_type(*cfg))):
                    break
    for r in rows:
        if "us" in r:
            lengths = inputs[tuple(r["shape"])][0]
            flops = useful_flops(lengths, r["shape"][2], r["shape"][3])
            r["tflops"] = (flops if r["direction"] == "fwd" else 2.5 * flops) / r["us"] / 1e6
    return dict(rows=rows, budget_s=args.budget_s, spent_s=time.perf_counter() - started)


def markdown(meta, report) -> str:
    lines = [f"# Attention tile sweep ({meta['gpu']}, {meta['date']}, torch {meta['torch']}, triton {meta['triton']}, "
             f"revision {meta['revision']})", "", "bwd TFLOP/s: 2.5x the forward's useful FLOPs.", "",
             "| shape | op | dir | config (block_m, block_n, warps, stages) | us | TFLOP/s |", "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        shown = f"{r['us']:.1f} | {r['tflops']:.0f}" if "us" in r else f"ERR {r['error']} |"
        lines.append(f"| B{r['shape'][0]} N{r['shape'][1]} H{r['shape'][2]} D{r['shape'][3]} | {r['op']} | "
                     f"{r['direction']} | {r['config']} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-config_sweep", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
