"""Shared by the GEMM family's tests: float64 references, random FP8 operands, tolerances."""
from __future__ import annotations

import torch

# Tolerances, stated once. FP8 GEMMs: relative Frobenius error against the float64 product of the
# dequantized operands (the bound for bf16 out is 1e-2; fp16/fp32 out are tighter).
FP8_GEMM_RTOL = {torch.bfloat16: 1e-2, torch.float16: 4e-3, torch.float32: 2e-3}
# bf16/fp16 GEMMs against float64: fp32 accumulation, one rounding of the output.
GEMM_RTOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# An e4m3 value has 3 mantissa bits: rounding is within half a unit, 2^-4 relative, above the
# subnormal range; below it the absolute step is the smallest subnormal times the scale.
FP8_RELATIVE_STEP = 2.0 ** -4
FP8_SUBNORMAL = {torch.float8_e4m3fn: 2.0 ** -9, torch.float8_e4m3fnuz: 2.0 ** -10}
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
FORMATS = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    denom = ref.norm().item()
    return (out.double() - ref).norm().item() / (denom if denom else 1.0)


def quantize_reference(x: torch.Tensor, fp8: torch.dtype, rowwise: bool, scale_ub=None):
    """gemm.h's formula, step by step in fp32 (what every backend must reproduce bit for bit)."""
    xf = x.float()
    if rowwise:
        amax = xf.abs().amax(-1) if x.shape[-1] else torch.zeros(x.shape[:-1], device=x.device)
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub.float())
        inv = torch.full_like(amax, FP8_MAX[fp8]) / amax.clamp_min(1e-12)  # a true division
        xq = (xf * inv.unsqueeze(-1)).clamp(-FP8_MAX[fp8], FP8_MAX[fp8]).to(fp8)
    else:
        amax = xf.abs().max() if x.numel() else torch.zeros((), device=x.device)
        inv = torch.full_like(amax, FP8_MAX[fp8]) / amax.clamp_min(1e-12)
        xq = (xf * inv).clamp(-FP8_MAX[fp8], FP8_MAX[fp8]).to(fp8)
    return xq, torch.ones_like(inv) / inv


def fp8_operands(m, n, k, fp8=torch.float8_e4m3fn, rowwise=True, device="cpu", seed=None, row_pad=0):
    """Fresh random xq [m, k], wq [n, k] with scales; row_pad > 0 makes the rows strided views."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed if seed is not None else torch.randint(0, 2**31, ()).item())
    x = torch.randn(m, k + row_pad, generator=g)[:, :k]
    w = torch.randn(n, k + row_pad, generator=g)[:, :k]
    x = x * torch.exp(torch.randn(m, 1, generator=g))  # rows of different magnitudes
    xq, xs = quantize_reference(x, fp8, rowwise)
    wq, ws = quantize_reference(w, fp8, rowwise)
    if row_pad:  # strided rows, K contiguous: copy into the leading columns of wider buffers
        xb = torch.zeros(m, k + row_pad, dtype=fp8)
        wb = torch.zeros(n, k + row_pad, dtype=fp8)
        xb[:, :k] = xq
        wb[:, :k] = wq
        xq, wq = xb[:, :k], wb[:, :k]
    return xq.to(device), wq.to(device), xs.to(device), ws.to(device)


def fp8_gemm_reference(xq, wq, x_scale, w_scale, bias=None) -> torch.Tensor:
    """float64 product of the dequantized operands."""
    x = xq.double() * (x_scale.double().reshape(-1, 1) if x_scale.numel() > 1 or w_scale.numel() > 1
                       else x_scale.double().reshape(()))
    w = wq.double() * (w_scale.double().reshape(-1, 1) if x_scale.numel() > 1 or w_scale.numel() > 1
                       else w_scale.double().reshape(()))
    out = x @ w.t()
    return out + bias.double() if bias is not None else out


def poison(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan")) if t.is_floating_point() else t
