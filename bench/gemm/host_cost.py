"""Host cost per call of the GEMM family: tiny shapes, torch's op in the same run.

Wall time per call over back-to-back calls (synchronized before and after only) at M = N = K = 64:
the GPU finishes each call sooner than the host issues the next, so this is the per-call path
from Python to the launch. Median of --reps repetitions of --calls calls; the rows take turns
within each repetition. Rows: mymetaops.fp8_gemm (the wrapper), torch.ops.mymetaops.fp8_gemm (the
raw op), torch._scaled_mm (rowwise, default arguments, as a user calls it); quantize_fp8_rowwise
vs the same in torch ops (amax, divide, clamp, cast) and vs a bare cast (one torch op: the floor);
mymetaops.gemm vs torch.mm (bf16); fp8_linear forward and forward+backward vs F.linear (bf16);
add_ (the floor of any launch); and the paths behind the default one: fp8_gemm and gemm forced to
Triton (through the dispatch, and the Triton kernel called directly, FP8 with TMA descriptors and
with pointers) and fp8_gemm forced native. Then each op once, warm, under
torch.cuda.set_sync_debug_mode("error"), and once on a new shape (a decision-cache miss): no host
sync allowed. Limit: fp8_gemm (wrapper) <= 1.2x torch._scaled_mm.

    python bench/gemm/host_cost.py [--calls 2000] [--reps 7] [--out PREFIX] [--dry-run]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_harness import (add_device_arguments, check, checks_markdown, meta_line, report_main,  # noqa: E402
                          torch_quantize_rowwise)
from bench_common import host_cost_rows_markdown, no_sync_checks, sync_free, time_host_calls  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mymetaops  # noqa: E402
import mymetaops.ops  # noqa: E402,F401
from mymetaops import use_backend  # noqa: E402
from mymetaops.model.gemm_kernels import TRITON_CONFIGS  # noqa: E402

NAME = "host_cost"
SIZE = 64
BF16 = torch.bfloat16
# (row, its torch counterpart, bound on the ratio or None)
PAIRS = [
    ("fp8_gemm: mymetaops.fp8_gemm (wrapper)", "fp8_gemm: torch._scaled_mm", 1.2),
    ("fp8_gemm: torch.ops.mymetaops.fp8_gemm (raw op)", "fp8_gemm: torch._scaled_mm", None),
    ("quantize: mymetaops.quantize_fp8_rowwise", "quantize: torch ops (amax, divide, clamp, cast)", None),
    ("gemm: mymetaops.gemm", "gemm: torch.mm", None),
    ("linear fwd: mymetaops.fp8_linear", "linear fwd: F.linear (bf16)", None),
    ("linear fwd+bwd: mymetaops.fp8_linear", "linear fwd+bwd: F.linear (bf16)", None),
]


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--calls", type=int, default=2000, help="calls per repetition")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (median)")
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-gemm-host_cost)")


def _inputs(device, size, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(size, size, device=device, dtype=BF16, generator=g)
    w = torch.randn(size, size, device=device, dtype=BF16, generator=g)
    return x, w


def calls(device):
    x, w = _inputs(device, SIZE, 0)
    fp8 = mymetaops.fp8_dtype(device)
    xq, xs = mymetaops.quantize_fp8_rowwise(x)
    wq, ws = mymetaops.quantize_fp8_rowwise(w)
    op = torch.ops.mymetaops
    floor = torch.zeros(1, device=device)
    wt = w.t()
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    grad = torch.randn_like(x)

    def fwd_bwd(linear):
        def step():
            xg.grad = wg.grad = None
            linear(xg, wg).backward(grad)
        return step

    triton_gemm = _triton_module()
    fp8_config, bf16_config = (TRITON_CONFIGS[("nvidia", kind)][2] for kind in ("fp8", "16bit"))
    out8 = torch.empty(SIZE, SIZE, device=device, dtype=BF16)
    out16 = torch.empty(SIZE, SIZE, device=device, dtype=BF16)

    def forced(backend, fn):
        def call():
            with use_backend(backend):
                fn()
        return call

    return {
        "add_ (floor)": lambda: floor.add_(1),
        "fp8_gemm: mymetaops.fp8_gemm (wrapper)": lambda: mymetaops.fp8_gemm(xq, wq, xs, ws),
        "fp8_gemm: torch.ops.mymetaops.fp8_gemm (raw op)": lambda: op.fp8_gemm(xq, wq, xs, ws, None, BF16),
        "fp8_gemm: torch._scaled_mm": lambda: torch._scaled_mm(xq, wq.t(), xs[:, None], ws[None, :], out_dtype=BF16),
        "quantize: mymetaops.quantize_fp8_rowwise": lambda: mymetaops.quantize_fp8_rowwise(x),
        "quantize: torch ops (amax, divide, clamp, cast)": lambda: torch_quantize_rowwise(x, fp8),
        "quantize: x.to(fp8) (one torch op, the floor)": lambda: x.to(fp8),
        "gemm: mymetaops.gemm": lambda: mymetaops.gemm(x, wt),
        "gemm: torch.mm": lambda: torch.mm(x, wt),
        "linear fwd: mymetaops.fp8_linear": lambda: mymetaops.fp8_linear(x, w),
        "linear fwd: F.linear (bf16)": lambda: F.linear(x, w),
        "linear fwd+bwd: mymetaops.fp8_linear": fwd_bwd(mymetaops.fp8_linear),
        "linear fwd+bwd: F.linear (bf16)": fwd_bwd(F.linear),
        # The paths behind the default one, each as the dispatch runs it and as a direct call:
        # a Triton choice costs the C++-to-Python launch on top of Triton's own launch.
        "fp8_gemm, backend triton: mymetaops.fp8_gemm": forced("triton", lambda: mymetaops.fp8_gemm(xq, wq, xs, ws)),
        "fp8_gemm, backend triton: Triton kernel, TMA descriptors": lambda: triton_gemm.fp8_gemm(
            xq, wq, xs, ws, None, out8, fp8_config, use_tma=device.type == "cuda"),
        "fp8_gemm, backend triton: Triton kernel, pointers": lambda: triton_gemm.fp8_gemm(
            xq, wq, xs, ws, None, out8, fp8_config, use_tma=False),
        "fp8_gemm, backend native: mymetaops.fp8_gemm": forced("native", lambda: mymetaops.fp8_gemm(xq, wq, xs, ws)),
        "gemm, backend triton: mymetaops.gemm": forced("triton", lambda: mymetaops.gemm(x, wt)),
        "gemm, backend triton: Triton kernel": lambda: triton_gemm.gemm(x, wt, None, out16, bf16_config),
    }


def _triton_module():
    from mymetaops.triton import gemm  # imports Triton
    return gemm


def sync_checks(device, fns) -> dict:
    """Each op warm (its decision cached), and the public ops on new shapes (decision-cache misses)."""
    out = {}
    for name in ("fp8_gemm: mymetaops.fp8_gemm (wrapper)", "quantize: mymetaops.quantize_fp8_rowwise",
                 "gemm: mymetaops.gemm", "linear fwd+bwd: mymetaops.fp8_linear"):
        out[f"{name.split(': ')[1]}, warm"] = sync_free(fns[name], device)
    x, w = _inputs(device, 96, 1)
    x2 = torch.randn(80, 96, device=device, dtype=BF16)  # new M as well

    def new_shapes():
        xq, xs = mymetaops.quantize_fp8_rowwise(x2)
        wq, ws = mymetaops.quantize_fp8_rowwise(w)
        mymetaops.fp8_gemm(xq, wq, xs, ws)
        mymetaops.gemm(x2, w.t())
        xg = x2.clone().requires_grad_()
        mymetaops.fp8_linear(xg, w.clone().requires_grad_()).sum().backward()
    out["quantize, fp8_gemm, gemm, fp8_linear fwd+bwd, new shapes (cache misses)"] = sync_free(new_shapes, device)
    return out


def run(args, device):
    calls_n, reps = (20, 3) if args.dry_run else (args.calls, args.reps)
    seconds, rows = time_host_calls(calls(device), calls_n, reps, device, warmup=3 if args.dry_run else 100)
    mymetaops.check_errors()
    checks = []
    ratios = {}
    for ours, theirs, bound in PAIRS:
        if ours in seconds and theirs in seconds:
            ratios[ours] = seconds[ours] / seconds[theirs]
            checks.append(check(f"host cost {ours} / {theirs.split(': ')[1]}", ratios[ours], bound, at_most=True))
        else:
            checks.append(dict(name=f"host cost {ours} / {theirs.split(': ')[1]}", value=None, shown="error",
                               required=f"<= {bound:.2f}" if bound else "(reported)", passed=False if bound else None))
    for r in rows:
        r["ratio"] = ratios.get(r["call"])
    sync = sync_checks(device, calls(device))
    mymetaops.check_errors()
    checks += no_sync_checks(sync)
    return dict(name=NAME, size=SIZE, calls=calls_n, reps=reps, rows=rows, sync_debug=sync, checks=checks)


def markdown(meta, result) -> str:
    lines = [f"# GEMM family host cost per call on {meta_line(meta)}", ""] + checks_markdown(result["checks"])
    lines += ["", f"## Host cost per call (M = N = K = {result['size']}, bf16 / e4m3 rowwise; median of "
                  f"{result['reps']} x {result['calls']} back-to-back calls)", ""]
    lines += host_cost_rows_markdown(result["rows"])
    return "\n".join(lines) + "\n"


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "gemm-host_cost")


if __name__ == "__main__":
    sys.exit(main())
