"""The attention backward's kernels, each timed as a kernel (captured in a CUDA graph, replayed:
regret.kernel_us), at the issue's shapes and a few more: the Triton backward (its dK / dV and dq
kernels), the native dK / dV kernel (cuda/attention/dkdv.cu), Triton's dq and the native dQ kernel
(cuda/attention/dq.cu); two native candidates the model offers are their sums, the third is the dK / dV
kernel with dQ fused in (timed with its fp32 buffer's zeroing and conversion). Each native
result is compared with Triton's (relative Frobenius error), so a wrong kernel shows beside its time.

Count: the backward is 2.5x the forward's useful FLOPs (S, dP, dV, dK, dQ: five products over the
causal pairs against the forward's two); dK / dV recompute S and dP beside dV and dK (4 of 5), dQ
recomputes them beside dQ (3 of 5): TFLOP/s here are on the 2.5x count.

    python bench/attention/backward_probe.py [--out PREFIX] [--budget-s 200]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))
from attention_table import make_inputs, useful_flops  # noqa: E402
from bench_common import add_device_arguments, close_report, open_report, short_error  # noqa: E402
from regret import backward_parts, kernel_us  # noqa: E402

SHAPES = ((64, 1024, 4, 128), (256, 512, 2, 128), (32, 4096, 4, 128), (512, 256, 4, 64), (32, 2048, 1, 128),
          (16, 4096, 2, 64))
DRY_RUN_SHAPES = ((3, 16, 2, 64),)
PARTS = ("triton_bwd", "native_dkdv", "triton_dq", "native_dq", "native_fused")


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop starting shapes past this")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run(args, device, prefix, meta) -> dict:
    gpu = device.type == "cuda"
    started = time.perf_counter()
    rows = []
    for shape in (SHAPES if gpu else DRY_RUN_SHAPES):
        if time.perf_counter() - started > args.budget_s:
            rows.append(dict(shape=shape, skipped="past the budget"))
            continue
        lengths, offsets, q, k, v = make_inputs(shape, device)
        grad = torch.randn_like(q)
        flops = 2.5 * useful_flops(lengths, shape[2], shape[3])
        for kind in ("hstu", "softmax"):
            row = dict(shape=shape, kind=kind, gflop=flops / 1e9)
            try:
                fns = backward_parts(f"{'hstu' if kind == 'hstu' else 'jagged'}_attention_backward", q, k, v, grad,
                                     offsets, shape[1])
                dq, dk, dv = fns["triton_bwd"]()
                row["norm_dq"], row["norm_dk"], row["norm_dv"] = (float(t.double().norm()) for t in (dq, dk, dv))
                ndk, ndv = fns["native_dkdv"]()
                row["err_dk"], row["err_dv"] = rel_err(ndk, dk), rel_err(ndv, dv)
                row["err_dq"] = rel_err(fns["native_dq"](), dq)
                row["err_triton_dq"] = rel_err(fns["triton_dq"](), dq)
                fdq, fdk, fdv = fns["native_fused"]()
                row["err_fused_dq"], row["err_fused_dk"], row["err_fused_dv"] = (
                    rel_err(a, b) for a, b in ((fdq, dq), (fdk, dk), (fdv, dv)))
                if gpu:
                    for part in PARTS:
                        row[f"{part}_us"] = kernel_us(fns[part], device)
                    row["native_tdq_us"] = row["native_dkdv_us"] + row["triton_dq_us"]
                    row["native_ndq_us"] = row["native_dkdv_us"] + row["native_dq_us"]
                    for what in ("triton_bwd", "native_tdq", "native_ndq", "native_fused"):
                        row[f"{what}_tflops"] = flops / row[f"{what}_us"] / 1e6
            except Exception as e:  # noqa: BLE001
                row["error"] = short_error(e)
            rows.append(row)
            print(row, flush=True)
        del q, k, v, grad
    return dict(rows=rows)


def markdown(meta, report) -> str:
    lines = [f"# Attention backward kernels ({meta['gpu']}, {meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, revision {meta['revision']}; bf16, causal, lengths "
             "uniform in [1, N]; each part timed as a kernel (CUDA graph replay, do_bench median); TF on 2.5x the "
             "forward's useful FLOPs. dkdv+tdq: native dK / dV + Triton dq; dkdv+ndq: both native; fused: dK / dV "
             "with dQ fused in (its fp32 buffer's zeroing and conversion included). err: native vs Triton, relative "
             "Frobenius.", "",
             "| shape | op | triton bwd us | native dkdv us | triton dq us | native dq us | dkdv+tdq us (x) | "
             "dkdv+ndq us (x) | fused us (x) | TF triton / dkdv+ndq / fused | err dq / dk / dv | err fused dq / dk / dv |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        label = "B{} N{} H{} D{}".format(*r["shape"])
        if "skipped" in r or "error" in r:
            lines.append(f"| {label} | {r.get('kind', '')} | {r.get('skipped') or r.get('error')} ||||||||||")
            continue
        if "triton_bwd_us" not in r:
            lines.append(f"| {label} | {r['kind']} | (dry run) |||||||| {r['err_dq']:.1e} / {r['err_dk']:.1e} / "
                         f"{r['err_dv']:.1e} | {r['err_fused_dq']:.1e} / {r['err_fused_dk']:.1e} / "
                         f"{r['err_fused_dv']:.1e} |")
            continue
        t = r["triton_bwd_us"]
        lines.append(
            f"| {label} | {r['kind']} | {t:.0f} | {r['native_dkdv_us']:.0f} | {r['triton_dq_us']:.0f} | "
            f"{r['native_dq_us']:.0f} | {r['native_tdq_us']:.0f} ({t / r['native_tdq_us']:.2f}) | "
            f"{r['native_ndq_us']:.0f} ({t / r['native_ndq_us']:.2f}) | {r['native_fused_us']:.0f} "
            f"({t / r['native_fused_us']:.2f}) | {r['triton_bwd_tflops']:.0f} / {r['native_ndq_tflops']:.0f} / "
            f"{r['native_fused_tflops']:.0f} | {r['err_dq']:.1e} / {r['err_dk']:.1e} / {r['err_dv']:.1e} | "
            f"{r['err_fused_dq']:.1e} / {r['err_fused_dk']:.1e} / {r['err_fused_dv']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-backward_probe", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
