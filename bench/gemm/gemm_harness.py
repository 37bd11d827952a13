"""What the GEMM benchmarks share: their ceilings, report_main and a fallback quantizer; the timer,
the run's metadata, acceptance checks and output paths come from bench/bench_common.py (re-exported).

Named gemm_harness (not harness) so that it never shadows bench/embedding_bag/harness.py when both
folders are on sys.path (pytest collects both). Every script also runs on the CPU (`--device cpu`,
alias `--dry-run`): tiny shapes, the CPU reference kernels, the Triton interpreter, wall-clock
"timings" that mean nothing -- it checks the plumbing where no GPU is.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (str(HERE), str(REPO), str(REPO / "bench")):  # this folder's modules, this checkout's mymetaops
    if _p not in sys.path:                                  # and bench_common, from anywhere
        sys.path.insert(0, _p)

import torch  # noqa: E402
from bench_common import (add_device_arguments, check, checks_markdown, cuda_usable,  # noqa: E402,F401
                          default_prefix, device_of, geomean, hardware, interleaved_medians, median_us,
                          meta_line, run_meta, short_error, sync, wall_per_iteration)
from bench_common import close_report, open_report  # noqa: E402

# Measured FP8 / bf16 dense ceilings (TFLOP/s): DESIGN.md, H200, torch 2.11 (_scaled_mm and torch.mm
# at 8192^3). Other chips: the best measured in the run.
FP8_CEILING_TFLOPS = {"H200": 1270.0}
BF16_CEILING_TFLOPS = {"H200": 770.0}


def report_main(argv, doc: str, add_arguments, run, markdown, what: str, extra=None) -> int:
    """A benchmark script's main: parse its arguments, run it, and write <prefix>.json and .md
    (prefix: --out, else default_prefix(meta, what)). extra(prefix, meta, result, args), if given,
    writes more files first and returns what markdown() takes after (meta, result)."""
    args, device, meta, prefix = open_report(argv, doc, add_arguments, what)
    result = run(args, device)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    more = extra(prefix, meta, result, args) if extra else ()
    close_report(prefix, meta, result, markdown(meta, result, *more))
    return 0


def torch_quantize_rowwise(x: torch.Tensor, fp8: torch.dtype):
    """Rowwise FP8 quantization in plain torch ops (amax, scale, divide, clamp, cast): the anchor of
    quantize_fp8_rowwise, and the fallback when it fails."""
    fmax = torch.finfo(fp8).max
    scale = x.abs().amax(dim=-1).float().clamp(min=1e-12) / fmax
    xq = (x.float() / scale[..., None]).clamp(-fmax, fmax).to(fp8)
    return xq, scale


def torch_quantize_tensorwise(x: torch.Tensor, fp8: torch.dtype):
    fmax = torch.finfo(fp8).max
    scale = x.abs().amax().float().clamp(min=1e-12) / fmax
    return (x.float() / scale).clamp(-fmax, fmax).to(fp8), scale

