"""Triton GEMM kernels: the FP8 GEMM with rowwise or tensorwise scales and the bf16/fp16 GEMM.

Semantics are those of the native launchers (csrc/include/mymetaops/gemm.h):
  * fp8_gemm: out[M, N] = (sum_k float(xq[m, k]) * float(wq[n, k])) * x_scale[m] * w_scale[n] + bias[n],
    accumulated in fp32 and rounded once to out.dtype (bf16, fp16 or fp32); on NVIDIA, past
    K = FAST_ACCUM_MAX_K the MMA's partial sums are promoted into fp32 after every BLOCK_K step.
    xq [M, K] and wq [N, K]
    are float8_e4m3fn or float8_e4m3fnuz (the same for both), last dim contiguous, any row stride;
    K % 16 == 0. Each scale is rowwise ([M] / [N]) or a tensorwise scalar (numel 1), independently
    (gemm.h uses one mode for both; mixing costs nothing here). bias is [N] in out.dtype or None.
  * gemm: out[M, N] = a[M, K] @ b[K, N] + bias[N] (torch.mm / addmm), a, b, bias and out in bf16 or
    fp16 (fp32 also accepted, which the interpreter tests use), any strides, fp32 accumulation,
    bias added in fp32 before the one rounding.
Both write a preallocated `out` (any row stride, unit column stride) and return it.

Kernel shape (`mymetaops.configs.TritonGemmConfig`): a BLOCK_M x BLOCK_N output tile per step of a
program, BLOCK_K-deep steps of K (the last one masked when K % BLOCK_K != 0), M/N edges masked.
Tiles are walked in grouped order (GROUP_M tiles of M share a run of N tiles, so the N operand stays
in L2). persistent=1: min(tiles, SMs/CUs) programs each loop over tiles (tile = pid, pid + P, ...);
persistent=0: one program per tile (the same loop, run once). Under the interpreter (CPU tensors)
the "SM count" is 4, so the persistent loop runs there too.

Load path of fp8_gemm, chosen per call by `fp8_use_tma` (an explicit rule, never a fallback after a
failure: a TMA launch that fails raises):
  TMA (host-side `triton.tools.tensor_descriptor.TensorDescriptor`, present in Triton 3.6 and 3.8) when
    the problem has at least mymetaops.model.gemm.TRITON_FP8_TMA_MIN_MACS multiply-adds (the
    descriptors cost host time per launch) and TMA can load the operands (`fp8_tma_possible`): the
    tensors are on an NVIDIA GPU of compute capability >= 9 (torch.version.hip is None), the
    descriptor class imports, K > 0, and xq / wq have 16-byte aligned base addresses and row
    strides. TMA zero-fills out-of-bounds boxes, so no masks are needed in the K loop.
  pointers otherwise: small problems, AMD, the interpreter, older GPUs, Triton without descriptors,
    misaligned operands. `fp8_gemm(..., use_tma=False / True)` forces a path (tests compare the two
    on a GPU); use_tma=True where TMA cannot load the operands raises ValueError.
gemm always uses pointers (its operands come with any strides).

Valid configs (anything else raises ValueError): block_m, block_n powers of two in [16, 256];
block_k a power of two in [32, 256] (fp8) / [16, 128] (gemm); group_m >= 1; num_warps 1..16 (power of
two); num_stages >= 1; persistent 0 or 1.

Suggested configs (no autotuning: the analytical model picks one of these per problem):
FP8_CONFIGS_NVIDIA, FP8_CONFIGS_AMD, BF16_CONFIGS_NVIDIA, BF16_CONFIGS_AMD. Each is checked by
scripts/check_triton_targets.py to compile for its vendor's targets (gfx942 + gfx950 / sm_90)
without spills and within the LDS / shared memory budget (gfx942 64 KB, gfx950 160 KB, Hopper
228 KB). Their performance is unmeasured on AMD (no AMD GPU in this project).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from mymetaops.configs import TritonGemmConfig
from mymetaops.model.gemm import FAST_ACCUM_MAX_K, TRITON_FP8_TMA_MIN_MACS
from mymetaops.triton.common import is_pow2

try:  # host-side TMA descriptors (Triton >= 3.4); absent: the pointer path everywhere
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - depends on the Triton version
    TensorDescriptor = None

if TYPE_CHECKING:
    pass

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
GEMM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INTERPRETER_SMS = 4  # "SM count" for CPU tensors (interpreter): small, so persistent loops iterate

_C = TritonGemmConfig
# NVIDIA (Hopper, 228 KB smem): 128x128/128x256 tiles with 3-4 stages are the usual H100/H200 FP8
# sweet spot. Every FP8 tile has 64+ rows: a warpgroup's wgmma covers 64 rows, and with fewer Triton
# falls back to mma.sync on fp8 upcast to fp16 (checked by scripts/check_triton_targets.py), so the
# small-M shapes (M <= 256) use 64-row tiles that are narrow in N (more tiles) and deep in K.
FP8_CONFIGS_NVIDIA = [
    _C(128, 256, 128, 8, 8, 3, 1),  # large M, N
    _C(128, 128, 128, 8, 8, 4, 1),  # large, more tiles per wave
    _C(64, 128, 128, 8, 4, 4, 1),  # medium M
    _C(64, 128, 256, 8, 4, 3, 1),  # small M (<= 256), deep K steps
    _C(64, 32, 256, 1, 4, 4, 1),  # tiny M (<= 64): narrow tiles, so many SMs share the weight read
    _C(64, 64, 128, 4, 4, 4, 0),  # small N/K: many small tiles, one program each
]
# AMD (gfx942 64 KB / gfx950 160 KB LDS; Triton's stream pipeliner wants num_stages 2): 256x256
# fits gfx942's 64 KB LDS only with block_k 64 at 2 stages, so the large tile is 256x256x64.
FP8_CONFIGS_AMD = [
    _C(256, 128, 128, 8, 8, 2, 1),  # large M, N
    _C(128, 128, 128, 8, 4, 2, 1),  # large, more tiles
    _C(64, 128, 128, 8, 4, 2, 1),  # medium M
    _C(32, 64, 256, 8, 4, 2, 1),  # small M (<= 256)
    _C(16, 64, 256, 1, 4, 2, 1),  # tiny M
    _C(64, 64, 128, 4, 4, 2, 0),  # small N/K
]
BF16_CONFIGS_NVIDIA = [
    _C(128, 256, 64, 8, 8, 3, 1),  # large M, N
    _C(128, 128, 64, 8, 4, 4, 1),  # large, more tiles
    _C(64, 128, 64, 8, 4, 4, 1),  # medium M
    _C(32, 64, 128, 8, 4, 4, 1),  # small M
    _C(16, 64, 128, 1, 4, 4, 1),  # tiny M
    _C(64, 64, 64, 4, 4, 4, 0),  # small N/K
]
BF16_CONFIGS_AMD = [
    _C(256, 256, 32, 8, 8, 2, 1),  # large M, N (LDS 64 KB on gfx942 at 2 stages)
    _C(128, 128, 64, 8, 4, 2, 1),  # large, more tiles
    _C(64, 128, 64, 8, 4, 2, 1),  # medium M
    _C(32, 64, 128, 8, 4, 2, 1),  # small M
    _C(16, 64, 128, 1, 4, 2, 1),  # tiny M
    _C(64, 64, 64, 4, 4, 2, 0),  # small N/K
]
del _C


# ---------------------------------------------------------------- kernels


@triton.jit
def _tile_coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of a linear tile index in grouped order."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    group = tile // tiles_per_group
    first_m = group * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    in_group = tile % tiles_per_group
    return first_m + in_group % group_m, in_group // group_m


@triton.jit
def _store_tile(acc, out_ptr, stride_om, bias_ptr, rows, cols, M, N, HAS_BIAS: tl.constexpr):
    """out[rows, cols] = acc (+ bias[cols]), fp32 until the one rounding to out's dtype."""
    col_mask = cols < N
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    ptrs = out_ptr + rows.to(tl.int64)[:, None] * stride_om + cols[None, :]
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows < M)[:, None] & col_mask[None, :])




@triton.jit
def _fp8_gemm_kernel(
    x, w, x_scale_ptr, w_scale_ptr, bias_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_om, num_programs,
    X_ROWWISE: tl.constexpr, W_ROWWISE: tl.constexpr, HAS_BIAS: tl.constexpr, USE_TMA: tl.constexpr,
    EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, IMPRECISE_ACC: tl.constexpr,
):
    """x, w: pointers to xq / wq, or (USE_TMA) host-side descriptors with [BLOCK_M, BLOCK_K] /
    [BLOCK_N, BLOCK_K] blocks. IMPRECISE_ACC: None (the MMA's own accumulation over all of K) or a
    K length after which partial sums are promoted into a full fp32 accumulator."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)
    if not X_ROWWISE:
        x_scale = tl.load(x_scale_ptr)
    if not W_ROWWISE:
        w_scale = tl.load(w_scale_ptr)
    for tile in range(tl.program_id(0), num_tiles, num_programs):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if USE_TMA:
            for ks in range(0, k_steps):
                a = x.load([pid_m * BLOCK_M, ks * BLOCK_K])
                b = w.load([pid_n * BLOCK_N, ks * BLOCK_K])
                acc = tl.dot(a, tl.trans(b), acc, max_num_imprecise_acc=IMPRECISE_ACC)
        else:
            # Edge rows/columns wrap onto valid ones (their results are never stored), so the
            # loads need no M/N masks; 64-bit row offsets (M * stride can pass 2^31).
            a_rows = tl.max_contiguous(tl.multiple_of(rows % M, BLOCK_M), BLOCK_M).to(tl.int64)
            b_rows = tl.max_contiguous(tl.multiple_of(cols % N, BLOCK_N), BLOCK_N).to(tl.int64)
            a_ptrs = x + a_rows[:, None] * stride_xm + offs_k[None, :]
            b_ptrs = w + b_rows[:, None] * stride_wn + offs_k[None, :]
            for ks in range(0, k_steps):
                if EVEN_K:
                    a = tl.load(a_ptrs)
                    b = tl.load(b_ptrs)
                else:
                    k_mask = (offs_k < K - ks * BLOCK_K)[None, :]
                    a = tl.load(a_ptrs, mask=k_mask, other=0.0)
                    b = tl.load(b_ptrs, mask=k_mask, other=0.0)
                acc = tl.dot(a, tl.trans(b), acc, max_num_imprecise_acc=IMPRECISE_ACC)
                a_ptrs += BLOCK_K
                b_ptrs += BLOCK_K
        # (acc * x_scale) * w_scale, in gemm.h's order.
        if X_ROWWISE:
            acc = acc * tl.load(x_scale_ptr + rows, mask=rows < M, other=0.0)[:, None]
        else:
            acc = acc * x_scale
        if W_ROWWISE:
            acc = acc * tl.load(w_scale_ptr + cols, mask=cols < N, other=0.0)[None, :]
        else:
            acc = acc * w_scale
        _store_tile(acc, out_ptr, stride_om, bias_ptr, rows, cols, M, N, HAS_BIAS)


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, bias_ptr, out_ptr,
    M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om, num_programs,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """Strides of 1 are specialized to constants by the JIT, so a contiguous operand gets
    vectorized loads along its contiguous dimension."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_tiles, num_programs):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        a_rows = tl.max_contiguous(tl.multiple_of(rows % M, BLOCK_M), BLOCK_M).to(tl.int64)
        b_cols = tl.max_contiguous(tl.multiple_of(cols % N, BLOCK_N), BLOCK_N).to(tl.int64)
        a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k.to(tl.int64)[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k.to(tl.int64)[:, None] * stride_bk + b_cols[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(0, k_steps):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                k_left = K - ks * BLOCK_K
                a = tl.load(a_ptrs, mask=(offs_k < k_left)[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k < k_left)[:, None], other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        _store_tile(acc, out_ptr, stride_om, bias_ptr, rows, cols, M, N, HAS_BIAS)


# ---------------------------------------------------------------- launchers


def validate_config(config: TritonGemmConfig, fp8: bool) -> None:
    """Raise ValueError unless `config` is one the module docstring lists as valid."""
    for name in ("block_m", "block_n"):
        v = getattr(config, name)
        if not (is_pow2(v) and 16 <= v <= 256):
            raise ValueError(f"{name} must be a power of two in [16, 256], got {v}")
    lo, hi = (32, 256) if fp8 else (16, 128)
    if not (is_pow2(config.block_k) and lo <= config.block_k <= hi):
        raise ValueError(f"block_k must be a power of two in [{lo}, {hi}], got {config.block_k}")
    if config.group_m < 1:
        raise ValueError(f"group_m must be >= 1, got {config.group_m}")
    if not (is_pow2(config.num_warps) and config.num_warps <= 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps}")
    if config.num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {config.num_stages}")
    if config.persistent not in (0, 1):
        raise ValueError(f"persistent must be 0 or 1, got {config.persistent}")


@functools.lru_cache(maxsize=None)
def _sm_count(device_type: str, index: int) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(index).multi_processor_count
    return INTERPRETER_SMS


@functools.lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def _index(device: torch.device) -> int:
    if device.index is not None or device.type != "cuda":
        return device.index or 0
    return torch.cuda.current_device()


def num_programs(config: TritonGemmConfig, m: int, n: int, device: torch.device) -> int:
    """Programs of a launch: one per tile, or min(tiles, SMs/CUs) when persistent."""
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    if not config.persistent:
        return tiles
    return min(tiles, _sm_count(device.type, _index(device)))


def _tma_aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0


# Host-side descriptors cost about 30 us per launch (H200: 65 us per call with them, 35 us with
# pointers, at 64^3; bench/results/2026-12-01-NVIDIA_H200-gemm-host_cost.md). Below
# TRITON_FP8_TMA_MIN_MACS multiply-adds (about 50 us of FP8 MMA on an H200) the kernel is shorter
# than that launch path, so back-to-back calls would wait on the host: pointers are used. The model
# costs the two paths apart (model.gemm.triton_cost_key), so the threshold lives there.


def fp8_tma_possible(xq: torch.Tensor, wq: torch.Tensor) -> bool:
    """Whether TMA descriptors can load these operands (the requirements of the module docstring)."""
    if TensorDescriptor is None or xq.device.type != "cuda" or torch.version.hip is not None:
        return False
    if _capability_major(_index(xq.device)) < 9:
        return False
    return xq.size(1) > 0 and _tma_aligned(xq) and _tma_aligned(wq)


def fp8_use_tma(xq: torch.Tensor, wq: torch.Tensor) -> bool:
    """The load-path rule of the module docstring: TMA descriptors where possible and the problem
    has at least TRITON_FP8_TMA_MIN_MACS multiply-adds, else pointers."""
    return xq.size(0) * wq.size(0) * xq.size(1) >= TRITON_FP8_TMA_MIN_MACS and fp8_tma_possible(xq, wq)


def _check_out(out: torch.Tensor, m: int, n: int, bias: torch.Tensor | None, device: torch.device) -> None:
    if out.shape != (m, n) or out.dtype not in OUT_DTYPES or (out.stride(1) != 1 and n > 1):
        raise ValueError(f"out must be [{m}, {n}] bf16/fp16/fp32 with unit column stride, got "
                         f"{tuple(out.shape)} {out.dtype} strides {out.stride()}")
    if out.device != device:
        raise ValueError(f"out must be on {device}, got {out.device}")
    if bias is not None and (bias.shape != (n,) or bias.dtype != out.dtype or bias.device != device
                             or (bias.stride(0) != 1 and n > 1)):
        raise ValueError(f"bias must be a contiguous [{n}] tensor in out's dtype on {device}, got "
                         f"{tuple(bias.shape)} {bias.dtype}")


def fp8_gemm(xq: torch.Tensor, wq: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor,
             bias: torch.Tensor | None, out: torch.Tensor, config: TritonGemmConfig,
             use_tma: bool | None = None) -> torch.Tensor:
    """out = (xq . wq^T in fp32) * x_scale * w_scale + bias, written into `out`, which is returned.
    use_tma None: the rule of `fp8_use_tma`; False: pointers; True: TMA (ValueError if not allowed)."""
    validate_config(config, fp8=True)
    if xq.dim() != 2 or wq.dim() != 2 or xq.dtype not in FP8_DTYPES or wq.dtype != xq.dtype:
        raise ValueError(f"xq and wq must be 2-D and share float8_e4m3fn or float8_e4m3fnuz, got "
                         f"{xq.dtype} {tuple(xq.shape)} / {wq.dtype} {tuple(wq.shape)}")
    (m, k), (n, k_w) = xq.shape, wq.shape
    if k_w != k or k % 16:
        raise ValueError(f"xq [M, K] and wq [N, K] need the same K, a multiple of 16; got K {k} / {k_w}")
    if (xq.stride(1) != 1 and k > 1) or (wq.stride(1) != 1 and k > 1):
        raise ValueError(f"xq and wq need unit column stride, got {xq.stride()} / {wq.stride()}")
    device = xq.device
    if wq.device != device:
        raise ValueError(f"xq and wq must be on the same device, got {device} / {wq.device}")
    for name, s, rows in (("x_scale", x_scale, m), ("w_scale", w_scale, n)):
        if s.dtype != torch.float32 or s.numel() not in (1, rows) or s.device != device \
                or (s.numel() > 1 and not s.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous fp32 tensor of {rows} (rowwise) or 1 (tensorwise) "
                             f"elements on {device}, got {s.dtype} {tuple(s.shape)} on {s.device}")
    _check_out(out, m, n, bias, device)
    if use_tma and not fp8_tma_possible(xq, wq):
        raise ValueError("use_tma=True but TMA cannot load these operands (see fp8_tma_possible)")
    return launch_fp8_gemm(xq, wq, x_scale, w_scale, bias, out, config, use_tma)


def launch_fp8_gemm(xq, wq, x_scale, w_scale, bias, out, config: TritonGemmConfig,
                    use_tma: bool | None = None) -> torch.Tensor:
    """fp8_gemm without its argument checks, for callers that made them (the C++ op, before it
    hands a Triton choice over): a launch path of a few microseconds less. use_tma None: the rule."""
    if out.numel() == 0:
        return out
    if use_tma is None:
        use_tma = fp8_use_tma(xq, wq)
    return _launch_fp8_gemm(xq, wq, x_scale, w_scale, bias, out, config, use_tma)


def _launch_fp8_gemm(xq, wq, x_scale, w_scale, bias, out, config: TritonGemmConfig, use_tma: bool) -> torch.Tensor:
    """The launch of checked, non-empty arguments; the tests also call it with use_tma=True under the
    interpreter (which runs descriptor loads on CPU tensors) to check the TMA path's indexing."""
    (m, k), n, device = xq.shape, wq.size(0), xq.device
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    if use_tma:
        x = TensorDescriptor(xq, [m, k], [xq.stride(0), 1], [bm, bk])
        w = TensorDescriptor(wq, [n, k], [wq.stride(0), 1], [bn, bk])
    else:
        x, w = xq, wq
    programs = num_programs(config, m, n, device)
    _fp8_gemm_kernel[(programs,)](
        x, w, x_scale, w_scale, bias, out,
        m, n, k, xq.stride(0), wq.stride(0), out.stride(0), programs,
        X_ROWWISE=x_scale.numel() != 1, W_ROWWISE=w_scale.numel() != 1, HAS_BIAS=bias is not None,
        USE_TMA=use_tma, EVEN_K=k % bk == 0, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config.group_m,
        IMPRECISE_ACC=bk if k > FAST_ACCUM_MAX_K and device.type == "cuda" and torch.version.hip is None else None,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
         config: TritonGemmConfig) -> torch.Tensor:
    """out = a @ b (+ bias), fp32 accumulation, written into `out`, which is returned."""
    validate_config(config, fp8=False)
    if a.dim() != 2 or b.dim() != 2 or a.dtype not in GEMM_DTYPES or b.dtype != a.dtype:
        raise ValueError(f"a and b must be 2-D and share bf16/fp16/fp32, got {a.dtype} {tuple(a.shape)} / "
                         f"{b.dtype} {tuple(b.shape)}")
    (m, k), (k_b, n) = a.shape, b.shape
    if k_b != k:
        raise ValueError(f"a [M, K] and b [K, N] need the same K, got {k} / {k_b}")
    device = a.device
    if b.device != device:
        raise ValueError(f"a and b must be on the same device, got {device} / {b.device}")
    _check_out(out, m, n, bias, device)
    if out.dtype != a.dtype:
        raise ValueError(f"out must be in the inputs' dtype {a.dtype}, got {out.dtype}")
    return launch_gemm(a, b, bias, out, config)


def launch_gemm(a, b, bias, out, config: TritonGemmConfig) -> torch.Tensor:
    """gemm without its argument checks, for callers that made them (as launch_fp8_gemm)."""
    if out.numel() == 0:
        return out
    (m, k), n, device = a.shape, b.size(1), a.device
    programs = num_programs(config, m, n, device)
    _gemm_kernel[(programs,)](
        a, b, bias, out,
        m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), programs,
        HAS_BIAS=bias is not None, EVEN_K=k % config.block_k == 0,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
