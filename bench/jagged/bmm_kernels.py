"""Every native jagged bmm kernel of the build, one by one, beside the default call path and a copy
of the same bytes: which one the model should pick, and how far each is from the copy ceiling.

    python bench/jagged/bmm_kernels.py [--out PREFIX] [--dry-run]

Per shape of the issue (jagged_harness.SHAPES, D = N = 256, bf16, lengths uniform in [1, max_L]),
forward of jagged_dense_bmm (x [T, K] . y[b] [K, N]) and jagged_jagged_bmm (x_b^T . y_b, out
[B, M, N]): `_jagged_*_bmm_native(..., config=[kernel])` for each kernel index of
`_C._native_jagged_bmm_kernels()`, the public wrapper (the model's choice), and a copy of the bytes
the call must move. TFLOP/s on the useful (jagged) work; the share of a bf16 8192^3 torch.mm measured
in the same run. Outputs <prefix>.json and .md (default bench/results/<date>-<gpu>-jagged-bmm_kernels).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_common import add_device_arguments, median_us  # noqa: E402
from jagged_harness import (BF16, SHAPES, flops, fmt, make_case, max_rel_err, moved_bytes,  # noqa: E402
                            report_main)

MM_SIZE, DRY_RUN_MM_SIZE = 8192, 64


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-jagged-bmm_kernels)")


def _copy(nbytes: float, device):
    src = torch.ones(max(1, int(nbytes // 4)), dtype=BF16, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _mm_tflops(device, n: int) -> float:
    a = torch.randn(n, n, device=device, dtype=BF16)
    b = torch.randn(n, n, device=device, dtype=BF16)
    return 2.0 * n ** 3 / median_us(lambda: torch.mm(a, b), device) / 1e6


def run(args, device, prefix, meta) -> dict:
    import mymetaops
    from mymetaops import _C
    ops = torch.ops.mymetaops
    gpu = device.type == "cuda"
    kernels = list(_C._native_jagged_bmm_kernels()) if gpu else []
    shapes = SHAPES if gpu else ((8, 16, 16),)
    bmm_d = 256 if gpu else 16
    mm = _mm_tflops(device, MM_SIZE if gpu else DRY_RUN_MM_SIZE)
    rows = []
    for shape in shapes:
        for op in ("jagged_dense_bmm", "jagged_jagged_bmm"):
            case = make_case(op, shape, device, bmm_d=bmm_d)
            s, (x, y) = case.sizes, case.inputs
            L = s.max_length
            nbytes, work = moved_bytes(op, "fwd", s), flops(op, "fwd", s)
            copy_us = median_us(_copy(nbytes, device), device)
            if op == "jagged_dense_bmm":
                public = lambda: mymetaops.jagged_dense_bmm(x, case.offsets, y, L)[0]  # noqa: E731
                native = lambda k: ops._jagged_dense_bmm_native(x, case.offsets, y, L, [k])  # noqa: E731
            else:
                public = lambda: mymetaops.jagged_jagged_bmm(x, y, case.offsets, L)  # noqa: E731
                native = lambda k: ops._jagged_jagged_bmm_native(x, y, case.offsets, L, [k])  # noqa: E731
            ref = public()
            calls = [("public (model's choice)", public)] + [(name, (lambda k=k: native(k)))
                                                              for k, name in enumerate(kernels)]
            for name, fn in calls:
                err = max_rel_err(fn(), ref)
                us = median_us(fn, device)
                rows.append(dict(shape="x".join(map(str, shape)), op=op, kernel=name, us=us, copy_us=copy_us,
                                 tbps=nbytes / us / 1e6, copy_tbps=nbytes / copy_us / 1e6,
                                 tflops=work / us / 1e6, mm_share=work / us / 1e6 / mm, rel_err=err))
            del case, x, y, ref
    return dict(mm_tflops=mm, kernels=kernels, rows=rows)


def markdown(meta, report) -> str:
    lines = [f"# Native jagged bmm kernels, one by one ({meta['gpu']}, {meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, revision {meta['revision']}; bf16 torch.mm "
             f"{MM_SIZE}^3: {report['mm_tflops']:.0f} TFLOP/s (the bound: 50% of it).", "",
             "| shape | op | kernel | us | TB/s | copy of the bytes TB/s | TFLOP/s | share of mm | rel err vs public |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['shape']} | {r['op']} | {r['kernel']} | {r['us']:.1f} | {r['tbps']:.2f} | "
                     f"{r['copy_tbps']:.2f} | {r['tflops']:.0f} | {r['mm_share']:.2f} | {fmt(r['rel_err'], '{:.1e}')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(report_main(sys.argv[1:], __doc__, add_arguments, run, markdown, "jagged-bmm_kernels"))
