"""Where the HSTU forward's time goes at the issue's shapes, without hardware counters: the Triton
forward launcher beside two kernels on the same grid that do less -- "grid only" (each program
decodes its (block, sequence, head) and reads its offsets, nothing else) and "Q copy" (that, then
one tile load of its Q block and one store) -- and the forward with other tiles. Differences of
these bound the per-program cost that is not attention work. do_bench medians, bf16, causal,
lengths uniform in [1, N].

    python bench/attention/latency_probe.py [--out PREFIX]
    python bench/attention/latency_probe.py --dry-run     # CPU plumbing check (tiny shapes)
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))  # the repo: mymetaops without an install
from attention_table import ALPHA, SHAPES, make_inputs, useful_flops  # noqa: E402
from bench_common import add_device_arguments, close_report, median_us, open_report, short_error  # noqa: E402

DRY_RUN_SHAPES = ((3, 40, 2, 32),)
# Other forward tiles (block_m, block_n, warps, stages): fewer stages, 32-key steps (less shared
# memory), 32-row blocks (mma.sync, more programs), 8 warps.
OTHER_TILES = ((64, 64, 4, 2), (64, 32, 4, 4), (32, 64, 4, 3), (32, 32, 2, 3), (64, 64, 8, 3), (128, 64, 8, 2))


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")


def run(device) -> dict:
    from mymetaops.triton import attention_checks as checks
    from mymetaops.triton import hstu_attention as hstu
    from mymetaops.triton.common import cdiv
    from probe_kernels import grid_only, q_copy  # after open_report: see that module
    tiles = [hstu.HstuConfig(*t) for t in OTHER_TILES]
    rows = []
    for shape in (SHAPES if device.type == "cuda" else DRY_RUN_SHAPES):
        batch, n, heads, dim = shape
        lengths, offsets, q, k, v = make_inputs(shape, device)
        total = q.shape[0]
        config = hstu.default_config(dim, dim, q.dtype)
        blocks = cdiv(n, config.block_m)
        group = checks.group_size(q.device, blocks, heads)
        grid = (blocks * batch * heads,)
        out = torch.empty_like(q)
        sink = torch.empty(batch * heads, dtype=torch.int64, device=device)

        def forward(c=None):
            return hstu.forward(q, k, v, offsets, n, ALPHA, True, None, 0, 0, c, None, 0)
        row = dict(shape=list(shape), programs=grid[0], default=str(config),
                   gflop=useful_flops(lengths, heads, dim) / 1e9)
        row["forward_us"] = median_us(forward, device)
        row["grid_only_us"] = median_us(lambda: grid_only[grid](offsets, sink, group, total, batch, heads, n,
                                                                 BLOCK=config.block_m, num_warps=4), device)
        row["q_copy_us"] = median_us(lambda: q_copy[grid](q, out, offsets, q.stride(0), q.stride(1), group, total,
                                                           batch, heads, n, D=dim, BLOCK=config.block_m,
                                                           num_warps=4), device)
        for c in tiles:
            try:
                row[f"tiles {c}"] = median_us(lambda: forward(c), device)
            except Exception as e:  # noqa: BLE001
                row[f"tiles {c} error"] = short_error(e)
        rows.append(row)
    return dict(rows=rows)


def markdown(meta, report) -> str:
    tiles = ["M{} N{} w{} s{}".format(*t) for t in OTHER_TILES]
    lines = [f"# HSTU forward: per-program cost ({meta['gpu']}, {meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, revision {meta['revision']}; us, do_bench medians; "
             "the forward launcher with its default tiles, kernels on its grid that only decode / copy Q, the "
             "forward with other tiles.", "",
             "| shape | programs | forward us (TF) | grid only | Q copy | " + " | ".join(tiles) + " |",
             "|---|---|---|---|---|" + "---|" * len(tiles)]
    for r in report["rows"]:
        tf = r["gflop"] * 1e3 / r["forward_us"]
        cells = [f"{r[f'tiles {t}']:.1f}" if f"tiles {t}" in r else "ERR" for t in tiles]
        lines.append(f"| B{r['shape'][0]} N{r['shape'][1]} H{r['shape'][2]} D{r['shape'][3]} | {r['programs']} | "
                     f"{r['forward_us']:.1f} ({tf:.0f}) | {r['grid_only_us']:.1f} | {r['q_copy_us']:.1f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-latency_probe", cpu_threads=1)
    result = run(device)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
