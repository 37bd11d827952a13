"""Tile sweep of the Triton attention kernels at the bench shapes: each candidate config through
the launchers (mymetaops/triton/hstu_attention.py, jagged_attention.py), beside the default config
and the public op (whose gap to the launcher is the per-call host cost). What the defaults and the
model's tile costs are chosen from; not a timed test.

    python bench/attention/config_sweep.py [--out PREFIX] [--budget-s 300]
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
FWD = {64: [(128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3), (128, 128, 4, 2)],
       128: [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2),
             (64, 128, 4, 2)]}
# (dkdv config, dq config) backward candidates at D = 128.
BWD = [((32, 64, 8, 3), (128, 32, 8, 3)), ((64, 64, 4, 2), (64, 64, 4, 2)), ((64, 128, 8, 2), (128, 64, 8, 2)),
       ((32, 128, 4, 2), (64, 32, 4, 3)), ((64, 64, 8, 3), (128, 64, 8, 3))]
BWD_SHAPES = (0, 2)


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--budget-s", type=float, default=300.0)


def run(args, device, prefix, meta) -> dict:
    import mymetaops
    from mymetaops.triton import hstu_attention as hstu
    from mymetaops.triton import jagged_attention as sm
    started = time.perf_counter()
    rows = []
    shapes = SHAPES if device.type == "cuda" else ((3, 16, 2, 16),)
    for index, shape in enumerate(shapes):
        batch, n, heads, dim = shape
        lengths, offsets, q, k, v = make_inputs(shape, device)
        flops = useful_flops(lengths, heads, dim)
        ops = {
            "hstu": (lambda c: hstu.hstu_attention_fwd(q, k, v, offsets, n, ALPHA, config=c), hstu.HstuConfig,
                     lambda: mymetaops.hstu_attention(q, k, v, offsets, n, ALPHA)),
            "softmax": (lambda c: sm.jagged_attention_fwd(q, k, v, offsets, n, config=c), sm.AttentionConfig,
                        lambda: mymetaops.jagged_attention(q, k, v, offsets, n)),
        }
        for op, (launch, config_type, public) in ops.items():
            base = dict(shape=list(shape), op=op, direction="fwd")
            rows.append(dict(base, config="public op", us=median_us(public, device)))
            rows.append(dict(base, config="default", us=median_us(lambda: launch(None), device)))
            for cfg in FWD.get(dim, []):
                if time.perf_counter() - started > args.budget_s:
                    break
                try:
                    us = median_us(lambda: launch(config_type(*cfg)), device)
                    rows.append(dict(base, config=list(cfg), us=us))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(base, config=list(cfg), error=short_error(e)))
        if index in BWD_SHAPES and dim == 128:
            grad = torch.randn_like(q)
            out_h = hstu.hstu_attention_fwd(q, k, v, offsets, n, ALPHA)
            out_s, lse = sm.jagged_attention_fwd(q, k, v, offsets, n)
            del out_h
            for cfg_kv, cfg_q in [(None, None)] + BWD:
                if time.perf_counter() - started > args.budget_s:
                    break
                label = "default" if cfg_kv is None else [list(cfg_kv), list(cfg_q)]
                for op in ("hstu", "softmax"):
                    try:
                        if op == "hstu":
                            pair = None if cfg_kv is None else (hstu.HstuConfig(*cfg_kv), hstu.HstuConfig(*cfg_q))
                            fn = lambda: hstu.hstu_attention_bwd(grad, q, k, v, offsets, n, ALPHA, config=pair)  # noqa: E731
                        else:
                            kv = None if cfg_kv is None else sm.AttentionConfig(*cfg_kv)
                            dq = None if cfg_q is None else sm.AttentionConfig(*cfg_q)
                            fn = lambda: sm.jagged_attention_bwd(grad, q, k, v, out_s, lse, offsets, n,  # noqa: E731
                                                                 config=kv, dq_config=dq)
                        rows.append(dict(shape=list(shape), op=op, direction="bwd", config=label,
                                         us=median_us(fn, device)))
                    except Exception as e:  # noqa: BLE001
                        rows.append(dict(shape=list(shape), op=op, direction="bwd", config=label, error=short_error(e)))
        for r in rows:
            if r["shape"] == list(shape) and "us" in r and "tflops" not in r:
                r["tflops"] = (flops if r["direction"] == "fwd" else 2.5 * flops) / r["us"] / 1e6
        del q, k, v
    return dict(rows=rows)


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
