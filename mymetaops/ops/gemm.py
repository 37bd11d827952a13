"""The GEMM family's Python half: the public wrappers, fake kernels, and the hooks into the GPU
dispatch (exact problems, Triton launchers). The checks, kernels, fp8_linear and the autograd of
gemm and fp8_linear are C++ (csrc/gemm/); the model that picks a kernel is mymetaops.model.gemm and
mymetaops.model.quantize_fp8.

Conventions (FBGEMM's, which torch._scaled_mm shares): `wq` is [N, K] (nn.Linear's weight layout),
scales dequantize -- x ~= xq.float() * x_scale[:, None] -- and are rowwise ([M], [N]) or one
element each (tensorwise). The FP8 format follows the device: `fp8_dtype(device)`.
"""
from __future__ import annotations

import functools

import torch

from mymetaops import _C, model
from mymetaops._backend import current_backend
from mymetaops.configs import TritonGemmConfig, TritonQuantizeConfig
from mymetaops.ops import dispatch

_ops = torch.ops.mymetaops
_FP8_NAMES = {"Float8_e4m3fn": torch.float8_e4m3fn, "Float8_e4m3fnuz": torch.float8_e4m3fnuz}
_DTYPES = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
_DTYPE_NAMES = {0: "fp32", 1: "fp16", 2: "bf16"}


def fp8_dtype(device=None) -> torch.dtype:
    """The FP8 dtype of a device: torch.float8_e4m3fnuz on gfx942 (MI300X/MI325X, max 240),
    torch.float8_e4m3fn on NVIDIA, gfx950 and the CPU (max 448). The quantize ops use it."""
    device = torch.device(device) if device is not None else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    return _FP8_NAMES[_C._fp8_dtype(str(device))]


def quantize_fp8_rowwise(x: torch.Tensor, scale_ub: torch.Tensor | None = None,
                         fp8_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(xq, x_scale): one scale per row of the last dimension, x ~= xq.float() * x_scale[..., None].

    amax = max |x| over the row (min(amax, scale_ub) when given: FBGEMM's clamp for outliers);
    scale = amax / fp8_max. One pass over x, no host sync. fp8_dtype defaults to the device's."""
    return _ops.quantize_fp8_rowwise(x, scale_ub, fp8_dtype)


def quantize_fp8_tensorwise(x: torch.Tensor, fp8_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(xq, scale): one fp32 scale for the whole tensor, x ~= xq.float() * scale. One launch (the
    global amax is exchanged inside it), no host sync."""
    return _ops.quantize_fp8_tensorwise(x, fp8_dtype)


def fp8_gemm(xq: torch.Tensor, wq: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor,
             bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """out[M, N] = (xq[M, K] @ wq[N, K].T) * x_scale[:, None] * w_scale[None, :] + bias, fp32
    accumulation, one rounding to out_dtype (bfloat16, float16 or float32). Scales rowwise or
    tensorwise; K a multiple of 16; bias [N] in out_dtype. Not differentiable (use fp8_linear)."""
    return _ops.fp8_gemm(xq, wq, x_scale, w_scale, bias, out_dtype)


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a[M, K] @ b[K, N] (+ bias[N]) in bfloat16 or float16 with fp32 accumulation: torch.mm's
    semantics, with the kernel (cuBLAS, native, Triton) picked per shape by mymetaops.model.
    Differentiable."""
    return _ops.gemm(a, b, bias)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """nn.functional.linear in FP8 for training: x [..., K] and weight [N, K] in bf16/fp16 are
    quantized rowwise on the fly; the forward and the input gradient run FP8 GEMMs, the weight
    gradient (K = the batch) a bf16/fp16 GEMM. K and N must be multiples of 16."""
    return _ops.fp8_linear(x, weight, bias)


# ---- fake kernels (shapes for torch.compile / meta tensors; the checks are the C++ ones) -------

@torch.library.register_fake("mymetaops::quantize_fp8_rowwise")
def _quantize_rowwise_fake(x, scale_ub=None, fp8_dtype=None):
    _ops._quantize_fp8_check(x, scale_ub, fp8_dtype)
    fp8 = fp8_dtype or _fake_fp8_dtype(x)
    return x.new_empty(x.shape, dtype=fp8), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake("mymetaops::quantize_fp8_tensorwise")
def _quantize_tensorwise_fake(x, fp8_dtype=None):
    _ops._quantize_fp8_check(x, None, fp8_dtype)
    fp8 = fp8_dtype or _fake_fp8_dtype(x)
    return x.new_empty(x.shape, dtype=fp8), x.new_empty((), dtype=torch.float32)


def _fake_fp8_dtype(x):
    return fp8_dtype(x.device) if x.device.type in ("cuda", "cpu") else torch.float8_e4m3fn


@torch.library.register_fake("mymetaops::fp8_gemm")
def _fp8_gemm_fake(xq, wq, x_scale, w_scale, bias=None, out_dtype=None):
    _ops._fp8_gemm_check(xq, wq, x_scale, w_scale, bias, out_dtype)
    return xq.new_empty((xq.shape[0], wq.shape[0]), dtype=out_dtype or torch.bfloat16)


@torch.library.register_fake("mymetaops::_fp8_gemm_native")
def _fp8_gemm_native_fake(xq, wq, x_scale, w_scale, bias, out_dtype, config):
    return _fp8_gemm_fake(xq, wq, x_scale, w_scale, bias, out_dtype)


@torch.library.register_fake("mymetaops::gemm")
def _gemm_fake(a, b, bias=None):
    _ops._gemm_check(a, b, bias)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("mymetaops::_gemm_native")
def _gemm_native_fake(a, b, bias, config):
    return _gemm_fake(a, b, bias)


@torch.library.register_fake("mymetaops::fp8_linear")
def _fp8_linear_fake(x, weight, bias=None):
    _ops._fp8_linear_check(x, weight, bias)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# ---- the family's hooks into the GPU dispatch ---------------------------------------------------

def _exact_gemm_problem(op):
    def exact(fields):
        if op == "fp8_gemm":
            m, n, k, fnuz, rowwise, out, bias = fields
            return model.gemm.GemmProblem(m, n, k, "fp8", _DTYPE_NAMES[out], "rowwise" if rowwise else "tensorwise",
                                          bool(bias), "e4m3fnuz" if fnuz else "e4m3fn")
        m, n, k, dtype, layout, native, bias = fields
        return model.gemm.GemmProblem(m, n, k, _DTYPE_NAMES[dtype], _DTYPE_NAMES[dtype], "none", bool(bias), "",
                                      model.gemm.LAYOUTS[layout], bool(native))
    return exact


def _exact_quantize_problem(fields):
    rows, cols, dtype, align = fields
    return model.quantize_fp8.QuantizeProblem(rows, cols, _DTYPE_NAMES[dtype], align)


@functools.cache
def _triton_gemm():
    from mymetaops.triton import gemm as triton_gemm  # imports triton: lazily
    return triton_gemm


@functools.cache
def _triton_quantize():
    from mymetaops.triton import quantize_fp8 as triton_quantize
    return triton_quantize


def _run_triton_gemm(op, config, *args):
    """Launch a Triton config with the arguments the C++ kernels pass (csrc/gemm/gemm_gpu.cpp), which
    checked them (the op's argument checks): the launchers that skip the Triton module's own."""
    config = TritonGemmConfig(*config)
    if op == "fp8_gemm":
        return _triton_gemm().launch_fp8_gemm(*args, config)
    return _triton_gemm().launch_gemm(*args, config)


def _run_triton_quantize(op, config, *args):
    config = TritonQuantizeConfig(*config)
    x, scale_ub, xq, scale = args
    if op == "quantize_fp8_rowwise":
        _triton_quantize().quantize_fp8_rowwise(x, scale_ub, xq, scale, config)
    else:
        _triton_quantize().quantize_fp8_tensorwise(x, xq, scale, config)
    return xq


@functools.cache
def _native_gemm_table_is(vendor: str) -> bool:
    """The model indexes the build's native GEMM table with its own mirror of the vendor's table
    (model.gemm_kernels): native kernels are offered only where the two are the same."""
    built = [tuple(r) for r in _C._native_gemm_kernels()]
    return built == [r.as_native_tuple() for r in model.gemm_kernels.native_table(vendor)]


dispatch.register(("fp8_gemm",), _exact_gemm_problem("fp8_gemm"), _run_triton_gemm, _native_gemm_table_is)
dispatch.register(("gemm",), _exact_gemm_problem("gemm"), _run_triton_gemm, _native_gemm_table_is)
dispatch.register(model.quantize_fp8.OPS, _exact_quantize_problem, _run_triton_quantize)


# ---- GPU entry points of a build without native kernels (Triton or the vendor op) ----------------

def _choice(op, device, problem):
    index = device.index if device.index is not None else torch.cuda.current_device()
    choice = dispatch.decide_bucket(op, index, current_backend(), problem).choice
    return choice, dispatch.config_ints(choice.config)


def _fp8_gemm_without_native(xq, wq, x_scale, w_scale, bias=None, out_dtype=None):
    _ops._fp8_gemm_check(xq, wq, x_scale, w_scale, bias, out_dtype)
    out_dtype = out_dtype or torch.bfloat16
    problem = model.gemm.problem_of_fp8(xq, wq, x_scale, w_scale, bias, out_dtype)
    choice, config = _choice("fp8_gemm", xq.device, problem)
    if choice.backend == "vendor":
        rowwise = problem.scaling == "rowwise"
        sa = x_scale.reshape(-1, 1) if rowwise else x_scale.reshape(())
        sb = w_scale.reshape(1, -1) if rowwise else w_scale.reshape(())
        return torch._scaled_mm(xq, wq.t(), sa, sb, bias=bias, out_dtype=out_dtype,
                                 use_fast_accum=xq.shape[1] <= model.gemm.FAST_ACCUM_MAX_K)
    out = xq.new_empty((xq.shape[0], wq.shape[0]), dtype=out_dtype)
    bias = bias.contiguous() if bias is not None else None  # as the C++ op passes it
    return _run_triton_gemm("fp8_gemm", config, xq, wq, x_scale, w_scale, bias, out)


def _gemm_without_native(a, b, bias=None):
    _ops._gemm_check(a, b, bias)
    choice, config = _choice("gemm", a.device, model.gemm.problem_of_gemm(a, b, bias))
    if choice.backend == "vendor":
        return torch.addmm(bias, a, b) if bias is not None else torch.mm(a, b)
    bias = bias.contiguous() if bias is not None else None
    return _run_triton_gemm("gemm", config, a, b, bias, a.new_empty((a.shape[0], b.shape[1])))


def _quantize_without_native(op, x, scale_ub, fp8):
    _ops._quantize_fp8_check(x, scale_ub, fp8)
    fp8 = fp8 or fp8_dtype(x.device)
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    _, config = _choice(op, x.device, model.quantize_fp8.QuantizeProblem(
        rows.shape[0], rows.shape[1], _DTYPE_NAMES[{torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[x.dtype]],
        model.quantize_fp8.align_of(x)))
    xq = torch.empty(x.shape, dtype=fp8, device=x.device)
    scale = torch.empty(x.shape[:-1] if op == "quantize_fp8_rowwise" else (), dtype=torch.float32, device=x.device)
    _run_triton_quantize(op, config, rows, scale_ub, xq.view(rows.shape), scale.view(-1))
    return xq, scale


if not dispatch.native_available():
    torch.library.register_kernel("mymetaops::fp8_gemm", "cuda", _fp8_gemm_without_native)
    torch.library.register_kernel("mymetaops::gemm", "cuda", _gemm_without_native)
    torch.library.register_kernel(
        "mymetaops::quantize_fp8_rowwise", "cuda",
        lambda x, scale_ub=None, fp8_dtype=None: _quantize_without_native("quantize_fp8_rowwise", x, scale_ub, fp8_dtype))
    torch.library.register_kernel(
        "mymetaops::quantize_fp8_tensorwise", "cuda",
        lambda x, fp8_dtype=None: _quantize_without_native("quantize_fp8_tensorwise", x, None, fp8_dtype))

__all__ = ["fp8_dtype", "quantize_fp8_rowwise", "quantize_fp8_tensorwise", "fp8_gemm", "gemm", "fp8_linear"]
