"""Triton FP8 quantization kernels: rowwise and tensorwise scales.

Semantics are those of the native launcher (csrc/include/mymetaops/gemm.h, QuantizeFp8Args):
    amax  = max |x| over the row (rowwise) or the whole tensor (tensorwise);
            rowwise with scale_ub: amax = min(amax, *scale_ub)
    inv   = fp8_max / max(amax, 1e-12)           (fp32, IEEE division: tl.math.div_rn)
    xq    = fp8(clamp(x * inv, -fp8_max, fp8_max)), round to nearest even
    scale = 1 / inv                              (IEEE division), so x ~= float(xq) * scale
fp8_max is 448 for float8_e4m3fn and 240 for float8_e4m3fnuz; the format is xq's dtype.
x is [rows, cols] fp32/fp16/bf16 with unit column stride and any row stride; xq is [rows, cols] in
the fp8 dtype (unit column stride, any row stride); scale is fp32 [rows] (rowwise) or [1]
(tensorwise). A row of zeros (or a row of no columns) gets amax 0: xq 0, scale 1e-12 / fp8_max.
e4m3fnuz has no negative zero (its 0x80 is NaN): values that round to zero are written as +0.

The fp32 -> fp8 rounding is the hardware conversion (`.to(fp8)`: cvt.rn.satfinite on Hopper,
v_cvt_pk_fp8_f32 on CDNA) on a GPU; on CPU tensors (Triton's interpreter, whose own fp8 conversion
rounds wrongly) the kernels round with integer ops instead (`_to_fp8_bits`, SOFTWARE_CVT), which
the tests check bit for bit against torch's conversion.

Kernel shapes (`mymetaops.configs.TritonQuantizeConfig`):
  * rowwise: one program per block_rows rows; it reads its rows twice, block_cols columns per step:
    once for the amax, once to quantize (the second read mostly hits L2).
  * tensorwise: two launches, unlike the native kernel's single one. The first finds the global
    amax: a grid-stride loop over [block_rows, block_cols] tiles, each program reducing its tiles and
    doing one atomic max into a 4-byte fp32 workspace (allocated with torch.zeros on x's device per
    call; amax >= 0, so an int32 atomic max on the float's bits orders like the floats). The second
    reads it, quantizes in the same tile loop, and its program 0 writes the scale. The workspace is
    zeroed on the current stream before the first launch, so nothing carries over between calls.

Valid configs (anything else raises ValueError): block_rows a power of two in [1, 64], block_cols a
power of two in [16, 4096], block_rows * block_cols <= 16384, num_warps 1, 2, 4, 8 or 16.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from mymetaops.triton.common import is_pow2

if TYPE_CHECKING:  # the launchers only read the config's fields
    from mymetaops.configs import TritonQuantizeConfig

X_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
AMAX_FLOOR = 1e-12
INTERPRETER_PROGRAMS = 4  # tensorwise grid on CPU tensors (interpreter): small, so the loops iterate
PROGRAMS_PER_SM = 8  # tensorwise grid on a GPU: at most this many programs per SM/CU


@triton.jit
def _to_fp8_bits(v, BIAS: tl.constexpr, NO_NEG_ZERO: tl.constexpr):
    """fp8 e4m3 code (int32 in [0, 255]) of finite fp32 values within the format's range, rounded to
    nearest even with integer ops: Triton's interpreter rounds fp32 -> fp8 wrongly (no carry into
    the exponent, wrong subnormals), so the interpreter path (SOFTWARE_CVT) uses this instead."""
    a = tl.abs(v)
    bits = a.to(tl.int32, bitcast=True)
    # Normal: keep 3 mantissa bits, ties to even; a carry moves into the exponent by itself.
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - ((127 - BIAS) << 3)
    # Subnormal (below 2^(1 - BIAS)): m * 2^(-2 - BIAS), m = rne(a * 2^(2 + BIAS)) in [0, 8]; adding
    # and removing 2^23 rounds to an integer in fp32 (m = 8 is the smallest normal, code 8).
    scaled = a * (2.0 ** (2 + BIAS))
    sub = ((scaled + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(a < 2.0 ** (1 - BIAS), sub, normal)
    negative = bits != v.to(tl.int32, bitcast=True)
    if NO_NEG_ZERO:
        negative = negative & (code != 0)
    return tl.where(negative, code | 0x80, code)


@triton.jit
def _quantize_values(x, inv, FP8_MAX: tl.constexpr, NO_NEG_ZERO: tl.constexpr, SOFTWARE_CVT: tl.constexpr,
                     out_dtype: tl.constexpr):
    v = x * inv
    v = tl.minimum(tl.maximum(v, -FP8_MAX), FP8_MAX)
    if SOFTWARE_CVT:
        # Exponent bias: 7 for e4m3fn, 8 for e4m3fnuz.
        q = _to_fp8_bits(v, 8 if NO_NEG_ZERO else 7, NO_NEG_ZERO).to(tl.uint8).to(out_dtype, bitcast=True)
    else:
        if NO_NEG_ZERO:
            # e4m3fnuz: |v| <= 2^-11 rounds (to even) to zero, which must be +0 (0x80 is NaN there).
            v = tl.where(tl.abs(v) <= 0.00048828125, 0.0, v)
        q = v.to(out_dtype)
    return q


@triton.jit
def _inv_scale(amax, FP8_MAX: tl.constexpr):
    """(inv, scale) of an amax, as fp32 IEEE divisions."""
    inv = tl.math.div_rn(tl.full((), FP8_MAX, tl.float32), tl.maximum(amax, 1e-12))
    return inv, tl.math.div_rn(tl.full((), 1.0, tl.float32), inv)


@triton.jit
def _rowwise_kernel(
    x_ptr, xq_ptr, scale_ptr, scale_ub_ptr, rows, cols, stride_x, stride_xq,
    HAS_UB: tl.constexpr, FP8_MAX: tl.constexpr, NO_NEG_ZERO: tl.constexpr, SOFTWARE_CVT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = r < rows
    offs = tl.arange(0, BLOCK_COLS)
    x_rows = x_ptr + r[:, None] * stride_x
    amax = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for c in range(0, cols, BLOCK_COLS):
        cc = c + offs
        x = tl.load(x_rows + cc[None, :], mask=row_mask[:, None] & (cc < cols)[None, :], other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
    if HAS_UB:
        amax = tl.minimum(amax, tl.load(scale_ub_ptr))
    inv, scale = _inv_scale(amax, FP8_MAX)
    tl.store(scale_ptr + r, scale, mask=row_mask)
    xq_rows = xq_ptr + r[:, None] * stride_xq
    for c in range(0, cols, BLOCK_COLS):
        cc = c + offs
        mask = row_mask[:, None] & (cc < cols)[None, :]
        x = tl.load(x_rows + cc[None, :], mask=mask, other=0.0).to(tl.float32)
        q = _quantize_values(x, inv[:, None], FP8_MAX, NO_NEG_ZERO, SOFTWARE_CVT, xq_ptr.dtype.element_ty)
        tl.store(xq_rows + cc[None, :], q, mask=mask)


@triton.jit
def _tile_ptrs(t, rows, cols, stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """(row offsets * stride + col offsets, mask) of tile t of the [rows, cols] tensor, row-block major."""
    col_blocks = tl.cdiv(cols, BLOCK_COLS)
    r = (t // col_blocks).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    c = (t % col_blocks) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    return r[:, None] * stride + c[None, :], (r < rows)[:, None] & (c < cols)[None, :]


@triton.jit
def _amax_kernel(x_ptr, amax_bits_ptr, rows, cols, stride_x, num_tiles, num_programs,
                 BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    amax = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    for t in range(tl.program_id(0), num_tiles, num_programs):
        offs, mask = _tile_ptrs(t, rows, cols, stride_x, BLOCK_ROWS, BLOCK_COLS)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)))
    tl.atomic_max(amax_bits_ptr, tl.max(tl.max(amax, axis=1), axis=0).to(tl.int32, bitcast=True))


@triton.jit
def _tensorwise_kernel(
    x_ptr, xq_ptr, scale_ptr, amax_bits_ptr, rows, cols, stride_x, stride_xq, num_tiles, num_programs,
    FP8_MAX: tl.constexpr, NO_NEG_ZERO: tl.constexpr, SOFTWARE_CVT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    amax = tl.load(amax_bits_ptr).to(tl.float32, bitcast=True)
    inv, scale = _inv_scale(amax, FP8_MAX)
    if tl.program_id(0) == 0:
        tl.store(scale_ptr, scale)
    for t in range(tl.program_id(0), num_tiles, num_programs):
        offs, mask = _tile_ptrs(t, rows, cols, stride_x, BLOCK_ROWS, BLOCK_COLS)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        q = _quantize_values(x, inv, FP8_MAX, NO_NEG_ZERO, SOFTWARE_CVT, xq_ptr.dtype.element_ty)
        q_offs, _ = _tile_ptrs(t, rows, cols, stride_xq, BLOCK_ROWS, BLOCK_COLS)
        tl.store(xq_ptr + q_offs, q, mask=mask)


def validate_config(config: TritonQuantizeConfig) -> None:
    """Raise ValueError unless `config` is one the module docstring lists as valid."""
    if not (is_pow2(config.block_rows) and config.block_rows <= 64):
        raise ValueError(f"block_rows must be a power of two in [1, 64], got {config.block_rows}")
    if not (is_pow2(config.block_cols) and 16 <= config.block_cols <= 4096):
        raise ValueError(f"block_cols must be a power of two in [16, 4096], got {config.block_cols}")
    if config.block_rows * config.block_cols > 16384:
        raise ValueError(f"block_rows * block_cols must be <= 16384, got {config.block_rows} * {config.block_cols}")
    if config.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps}")


def _check(x: torch.Tensor, xq: torch.Tensor, scale: torch.Tensor, scale_numel: int) -> None:
    if x.dim() != 2 or x.dtype not in X_DTYPES or (x.stride(1) != 1 and x.size(1) > 1):
        raise ValueError(f"x must be 2-D fp32/fp16/bf16 with unit column stride, got {x.dtype} "
                         f"{tuple(x.shape)} strides {x.stride()}")
    if xq.shape != x.shape or xq.dtype not in FP8_MAX or xq.device != x.device \
            or (xq.stride(1) != 1 and xq.size(1) > 1):
        raise ValueError(f"xq must be {tuple(x.shape)} float8_e4m3fn/float8_e4m3fnuz with unit column stride "
                         f"on {x.device}, got {xq.dtype} {tuple(xq.shape)} strides {xq.stride()}")
    if scale.dtype != torch.float32 or scale.numel() != scale_numel or scale.device != x.device \
            or (scale_numel > 1 and not scale.is_contiguous()):
        raise ValueError(f"scale must be a contiguous fp32 tensor of {scale_numel} elements on {x.device}, "
                         f"got {scale.dtype} {tuple(scale.shape)}")


@functools.lru_cache(maxsize=None)
def _max_programs(device_type: str, index: int) -> int:
    if device_type == "cuda":
        return PROGRAMS_PER_SM * torch.cuda.get_device_properties(index).multi_processor_count
    return INTERPRETER_PROGRAMS


def quantize_fp8_rowwise(x: torch.Tensor, scale_ub: torch.Tensor | None, xq: torch.Tensor, scale: torch.Tensor,
                         config: TritonQuantizeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row of x into xq with its scale (scale_ub: an optional fp32 device scalar
    bounding the amax). Returns (xq, scale)."""
    validate_config(config)
    _check(x, xq, scale, x.size(0))
    if scale_ub is not None and (scale_ub.dtype != torch.float32 or scale_ub.numel() != 1
                                 or scale_ub.device != x.device):
        raise ValueError(f"scale_ub must be one fp32 element on {x.device}, got {scale_ub.dtype} "
                         f"{tuple(scale_ub.shape)} on {scale_ub.device}")
    rows, cols = x.shape
    if rows == 0:
        return xq, scale
    _rowwise_kernel[(triton.cdiv(rows, config.block_rows),)](
        x, xq, scale, scale_ub, rows, cols, x.stride(0), xq.stride(0),
        HAS_UB=scale_ub is not None, FP8_MAX=FP8_MAX[xq.dtype], NO_NEG_ZERO=xq.dtype == torch.float8_e4m3fnuz,
        SOFTWARE_CVT=x.device.type != "cuda",
        BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols, num_warps=config.num_warps,
    )
    return xq, scale


def quantize_fp8_tensorwise(x: torch.Tensor, xq: torch.Tensor, scale: torch.Tensor,
                            config: TritonQuantizeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x into xq with one scale (two launches, see the module docstring). Returns (xq, scale)."""
    validate_config(config)
    _check(x, xq, scale, 1)
    rows, cols = x.shape
    amax_bits = torch.zeros(1, dtype=torch.int32, device=x.device)  # fp32 0.0 as bits
    num_tiles = triton.cdiv(rows, config.block_rows) * triton.cdiv(cols, config.block_cols)
    index = x.device.index if x.device.index is not None or x.device.type != "cuda" else torch.cuda.current_device()
    programs = max(1, min(num_tiles, _max_programs(x.device.type, index or 0)))
    if num_tiles:
        _amax_kernel[(programs,)](x, amax_bits, rows, cols, x.stride(0), num_tiles, programs,
                                  BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols,
                                  num_warps=config.num_warps)
    # Also with no elements: the scale of an amax of 0 is written.
    _tensorwise_kernel[(programs,)](
        x, xq, scale, amax_bits, rows, cols, x.stride(0), xq.stride(0), num_tiles, programs,
        FP8_MAX=FP8_MAX[xq.dtype], NO_NEG_ZERO=xq.dtype == torch.float8_e4m3fnuz,
        SOFTWARE_CVT=x.device.type != "cuda",
        BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols, num_warps=config.num_warps,
    )
    return xq, scale
