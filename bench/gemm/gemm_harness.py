"""What the GEMM benchmarks share: the timer (do_bench median on a GPU, wall time on the CPU), the
run's metadata, acceptance checks, output paths, and a fallback quantizer.

Named gemm_harness (not harness) so that it never shadows bench/embedding_bag/harness.py when both
folders are on sys.path (pytest collects both). Every script also runs on the CPU (`--device cpu`,
alias `--dry-run`): tiny shapes, the CPU reference kernels, the Triton interpreter, wall-clock
"timings" that mean nothing -- it checks the plumbing where no GPU is.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import inspect
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = REPO / "bench" / "results"
for _p in (str(HERE), str(REPO), str(REPO / "bench")):  # this folder's modules, this checkout's mymetaops
    if _p not in sys.path:                                  # and bench_common, from anywhere
        sys.path.insert(0, _p)

import torch  # noqa: E402
from bench_common import git_revision, interleaved_medians, sync, wall_per_iteration  # noqa: E402,F401

# Measured FP8 / bf16 dense ceilings (TFLOP/s): DESIGN.md, H200, torch 2.11 (_scaled_mm and torch.mm
# at 8192^3). Other chips: the best measured in the run.
FP8_CEILING_TFLOPS = {"H200": 1270.0}
BF16_CEILING_TFLOPS = {"H200": 770.0}
DRY_RUN_HARDWARE = "H200"  # the CPU has no GPU to detect: decisions are made for this one


def add_device_arguments(parser) -> None:
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a plumbing check)")
    parser.add_argument("--dry-run", action="store_true",
                        help="= --device cpu: tiny shapes, CPU kernels, fake timings (numbers mean nothing)")


def device_of(args) -> torch.device:
    if args.dry_run:
        args.device = "cpu"
    device = torch.device(args.device)
    if device.type == "cpu":
        # Before any Triton kernel is defined: on the CPU, Triton runs in its interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.dry_run = True
    elif device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@functools.cache
def _do_bench():
    from triton.testing import do_bench
    params = inspect.signature(do_bench).parameters
    return do_bench, "return_mode" in params, "quantiles" in params


def median_us(fn, device: torch.device, warmup_ms: float = 10, rep_ms: float = 30) -> float:
    """GPU: triton.testing.do_bench's median (CUDA events, L2 flushed before each call), in us.
    CPU (dry runs): the median wall time of 3 calls."""
    if device.type == "cuda":
        do_bench, has_mode, has_quantiles = _do_bench()
        if has_mode:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        elif has_quantiles:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5])
        else:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms)
        if isinstance(ms, (list, tuple)):
            ms = ms[0]
        return float(ms) * 1e3
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def hardware(device: torch.device):
    from mymetaops import model
    if device.type == "cuda":
        return model.detect_hardware(device)
    return model.get_hardware(DRY_RUN_HARDWARE)


def run_meta(device: torch.device) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        gpu, hw = torch.cuda.get_device_name(device), hardware(device).name
    else:
        gpu, hw = f"CPU {platform.machine()} (dry run: numbers mean nothing)", DRY_RUN_HARDWARE
    return dict(date=datetime.date.today().isoformat(), gpu=gpu, hardware=hw, torch=torch.__version__,
                cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None), triton=triton_version,
                python=platform.python_version(), revision=git_revision())


def meta_line(meta: dict) -> str:
    return (f"{meta['gpu']}, {meta['date']}; torch {meta['torch']}, CUDA {meta['cuda']}, triton {meta['triton']}, "
            f"Python {meta['python']}; revision {meta['revision']}")


def gpu_slug(meta: dict) -> str:
    name = "CPU-dry-run" if meta["gpu"].startswith("CPU") else meta["gpu"].split(" (")[0]
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def default_prefix(meta: dict, what: str) -> Path:
    """bench/results/<date>-<gpu>-<what> (dry runs: under /tmp, never among the recorded results)."""
    base = RESULTS if not meta["gpu"].startswith("CPU") else Path(os.environ.get("TMPDIR", "/tmp")) / "mymetaops-bench"
    return base / f"{meta['date']}-{gpu_slug(meta)}-{what}"


def report_main(argv, doc: str, add_arguments, run, markdown, what: str, extra=None) -> int:
    """A benchmark script's main: parse its arguments, run it, and write <prefix>.json and .md
    (prefix: --out, else default_prefix(meta, what)). extra(prefix, meta, result, args), if given,
    writes more files first and returns what markdown() takes after (meta, result)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    device = device_of(args)
    meta = run_meta(device)
    result = run(args, device)
    prefix = Path(args.out) if args.out else default_prefix(meta, what)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    more = extra(prefix, meta, result, args) if extra else ()
    text = markdown(meta, result, *more)
    Path(f"{prefix}.json").write_text(json.dumps(dict(meta, **result), indent=1, default=str))
    Path(f"{prefix}.md").write_text(text)
    print(text)
    print(f"written: {prefix}.json, {prefix}.md")
    return 0


def check(name: str, value, bound, at_most: bool, fmt: str = "{:.2f}") -> dict:
    """An acceptance check: `value` <= bound (at_most) or >= bound; bound None: reported only."""
    if value is None:
        return dict(name=name, value=None, shown="n/a", required="", passed=None)
    shown = fmt.format(value)
    if bound is None:
        return dict(name=name, value=value, shown=shown, required="(reported)", passed=None)
    passed = value <= bound if at_most else value >= bound
    return dict(name=name, value=value, shown=shown, required=("<= " if at_most else ">= ") + fmt.format(bound),
                passed=bool(passed))


def checks_markdown(checks: list[dict]) -> list[str]:
    lines = ["| check | measured | required | |", "|---|---|---|---|"]
    for c in checks:
        verdict = {True: "PASS", False: "FAIL", None: ""}[c["passed"]]
        lines.append(f"| {c['name']} | {c['shown']} | {c['required']} | {verdict} |")
    return lines


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


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    import math
    return math.exp(sum(math.log(v) for v in values) / len(values))


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def cuda_usable(device: torch.device) -> str:
    """'' when the device still works after an error, else why not (a sticky CUDA error)."""
    if device.type != "cuda":
        return ""
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
    except Exception as e:  # noqa: BLE001
        return short_error(e)
    return ""
