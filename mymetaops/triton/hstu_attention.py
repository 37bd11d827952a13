"""HSTU attention over jagged sequences in Triton: forward and a deterministic backward.

Semantics are those of generative-recommenders' `hstu_mha` (its float reference
`pytorch_hstu_mha` with `_get_valid_attn_mask`): per sequence b and head h, with N = max_seq_len,

    out[i] = sum_j mask(i, j) * silu(alpha * q_i . k_j) / N * v_j        (no softmax)

Layout. q, k: [total_L, H, Dqk]; v: [total_L, H, Dv]; seq_offsets: [B + 1] int32/int64, sequence
b owning rows seq_offsets[b] .. seq_offsets[b + 1] (length L_b <= N: longer ones are a caller
error, their rows past N are left unwritten). num_targets: optional [B] integer tensor. The output
(and dq, dk, dv) are new contiguous tensors of the input dtype; q, k, v and grad_out may have any
row and head strides but need a unit stride in the last dim (the launchers call .contiguous() on a
tensor without one, which copies it). Every output row is written: the rows of each sequence, and
zeros for rows before seq_offsets[0] and from seq_offsets[B] on. fp32 accumulation; fp32 inputs use
tl.dot's "ieee" precision (no TF32). Addresses are int64 (rows x strides may pass 2^31); the
element offsets within one streamed block are int32 (block rows x row stride < 2^31).

Mask (exactly `_get_valid_attn_mask`, positions i (query), j (key) within a sequence of length L,
c = contextual_seq_len, nt = num_targets[b] or 0, w = max_attn_len):
    id(x)  = max(x - c + 1, 0) if c > 0 else x;  M = L - nt + (1 - c if c > 0 else 0)
    id(x)  = min(id(x), M)     when num_targets is given (all targets share the id M)
    d      = id(i) - id(j)
    valid  = (i == j) or (d > 0 if causal else d != 0)
    valid &= (d if causal else |d|) <= w                        when w > 0
    valid |= id(i) == 0 and id(j) < M                           when c > 0 (contextual rows)
Keys j >= L do not exist. So: causal rows see strictly earlier ids (and themselves); targets see the
non-targets (within the window) and themselves but not each other; the first c rows (id 0) see
every non-target key; non-causal makes the id rule symmetric. Leaving num_targets out equals nt = 0.

Schedule. One program per (BLOCK_M query rows, sequence, head) in the forward and the dq kernel,
per (BLOCK_N key rows, sequence, head) in the dk/dv kernel, on a 1-D grid of
cdiv(N, block) * B * H programs (no 65535 limit on B * H; launched in chunks past what the runtime
takes, common.grid_chunks; a program past its sequence's end exits at once). The grid runs the
(sequence, head) pairs in groups of consecutive pairs, about 4 x SMs programs each (attention_checks.
grid_position, group_size: the programs that run at once share the K/V of few pairs in L2); within
a group the block index is the outer one: the forward and dq start with each pair's last query
block, dk/dv with the first key block, which under the causal mask hold the most work, so the
cheap blocks fill the group's tail (longest first). The forward also checks seq_offsets /
num_targets when given an error record (attention_checks: one launch per call).
  * forward: the query block (and the fp32 accumulator) stays in registers; key/value blocks stream
    through, S = Q K^T and acc += silu(alpha S) V with tl.dot, 1/N applied once at the end.
  * dk/dv: a key/value block stays resident with fp32 dk, dv; query/dO blocks stream through:
    S^T = K Q^T, dv += silu(alpha S^T) dO, dP^T = V dO^T, dk += (dP^T * silu'(alpha S^T)) Q, with
    silu'(z) = sig(z) (1 + z (1 - sig(z))) = sig + silu(z) (1 - sig); alpha / N and 1 / N applied
    at the end.
  * sig: 0.5 tanh(z / 2) + 0.5 on tanh.approx.f32 for fp16 / bf16 on NVIDIA GPUs (one MUFU op a
    score instead of exp2 and a reciprocal), 1 / (1 + exp2(-z log2 e)) elsewhere (_sigmoid).
  * dq: a query/dO block stays resident; key/value blocks stream through: S = Q K^T, dP = dO V^T,
    dq += (dP * silu'(alpha S)) K. Two kernels instead of atomics: deterministic, and no fp32
    scratch for dq, at the price of computing S and dP twice.
Each program first bounds the blocks it has to visit from the mask structure (causal: keys up to
the block's last row; window: ids within w; contextual rows: every key), then splits that range
into a masked head, a mask-free interior (blocks where every (row, key) pair is valid and every key
exists: no mask, no row bound on the loads) and a masked tail. Under the plain causal mask the
interior is every key block left of the diagonal, so only the one or two diagonal blocks compute a
mask. The dk/dv kernel also visits the contextual query rows (before its causal range) as a masked
segment of their own.

Tiles: one `HstuConfig` per kernel; `default_config(dqk, dv, dtype, kernel=..., vendor=...)` picks
from DEFAULT_CONFIGS (the reasons are stated there), and the launchers take an optional config. No autotuning, no host
synchronisation (grids come from B, H and max_seq_len).
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from mymetaops.triton import attention_checks as checks
from mymetaops.triton.common import cdiv, check_error_record
from mymetaops.triton.launch import Launcher

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
LOG2E = tl.constexpr(1.4426950408889634)
MASKED_Z = tl.constexpr(-1.0e4)  # a masked pair's score: sigmoid underflows to 0, so silu and silu' are 0
# Shared memory (LDS) a config may plan for, bytes: sm_90 lets a block opt into 227 KB (leave room
# for the scratch Triton adds for layout conversions); gfx942 has 64 KB of LDS. gfx950 (160 KB) gets
# the gfx942 tiles, so one AMD table serves both.
SMEM_BUDGET = {"nvidia": 200 * 1024, "amd": 64 * 1024}
KERNELS = ("fwd", "dkdv", "dq")


@dataclass(frozen=True)
class HstuConfig:
    """Tiles of one HSTU kernel. Forward and dq: a program owns block_m query rows and steps
    through the keys block_n at a time. dk/dv: a program owns block_n key rows and steps through
    the queries block_m at a time. Powers of two >= 16 (tl.dot's minimum)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def __str__(self) -> str:
        return f"M{self.block_m} N{self.block_n} w{self.num_warps} s{self.num_stages}"


_C = HstuConfig
# Defaults: per kernel, (largest padded head dim, config); the padded head dim is
# max(16, next_pow2(max(Dqk, Dv))). Every entry compiles for its vendor's targets in bf16 and fp16
# without spills (scratch / local memory), MFMA / wgmma present, within the LDS / shared-memory
# budget (scripts/check_triton_targets.py). NVIDIA's D <= 128 entries are the fastest of
# bench/attention/config_sweep.py on the H200 (2026-12-02, Triton 3.6; bench/results/
# 2026-12-02-NVIDIA_H200-attention-config_sweep.md); D = 256 and AMD's are not measured.
DEFAULT_CONFIGS = {
    # NVIDIA sm_90 forward: 64 resident query rows on 4 warps (one warpgroup, wgmma's M) and 64-key
    # steps, 3 stages. 128 rows on 8 warps ran 10-50% slower at every D <= 128 shape: 194 against
    # 157 TFLOP/s at B64 N1024 H4 D128, 360 against 320 at B32 N4096, 89 against 177 us at B512
    # N256 D64 (twice the programs to spread short sequences over). With targets, window or
    # contextual masks the 64-row tiles spill (Triton 3.8): those keep "fwd_masked", the 128-row
    # tiles on 8 warps (the fp32 accumulator and S take ~200 of 255 registers). D = 256: 128 x 32.
    ("nvidia", "fwd"): ((64, _C(64, 64, 4, 3)), (128, _C(64, 64, 4, 3)), (256, _C(128, 32, 8, 2))),
    ("nvidia", "fwd_masked"): ((64, _C(128, 128, 8, 3)), (128, _C(128, 64, 8, 3)), (256, _C(128, 32, 8, 2))),
    # dk/dv: two fp32 [block_n, D] accumulators stay in registers. D <= 64: 128 resident keys, 32
    # streamed query rows. D = 128: 128 resident keys (a 64-row wgmma per warpgroup) and 64-row
    # query steps on 8 warps; the 64 resident keys on 8 warps of the old default left the second
    # warpgroup recomputing the first one's S^T tile, and ran 1.3-1.6x slower on the H200 (613
    # against 457 us at B64 N1024 H4 D128, 3168 against 1995 at B32 N4096, with the dq tiles
    # below). These tiles spilled on Triton 3.8 until _dkdv_steps kept fewer score tiles live;
    # with targets, window or contextual masks they still spill 8 bytes: "dkdv_masked" streams
    # 32 query rows.
    # 64 x 64 on 4 warps (403 us, the fastest measured) still spills (~200 bytes: 128 accumulator
    # registers a thread leave too few). D = 256: 32 x 32 (mma.sync there: every 64-row wgmma
    # tiling of D = 256 spills).
    ("nvidia", "dkdv"): ((64, _C(32, 128, 8, 2)), (128, _C(64, 128, 8, 2)), (256, _C(32, 32, 8, 2))),
    # dq: one accumulator, so 128 resident query rows; 64 streamed keys for D <= 128 (measured with
    # the dk/dv tiles above), 32 for D = 256. With targets, window or contextual masks the 128 x 64
    # tiles spill at D = 128 (Triton 3.8): "dq_masked" keeps 32 streamed keys there.
    ("nvidia", "dkdv_masked"): ((64, _C(32, 128, 8, 2)), (128, _C(32, 128, 8, 2)), (256, _C(32, 32, 8, 2))),
    ("nvidia", "dq"): ((64, _C(128, 64, 8, 2)), (128, _C(128, 64, 8, 2)), (256, _C(128, 32, 8, 2))),
    ("nvidia", "dq_masked"): ((64, _C(128, 64, 8, 2)), (128, _C(128, 32, 8, 3)), (256, _C(128, 32, 8, 2))),
    # AMD gfx942 / gfx950 (64-lane wavefronts): 4 wavefronts (256 lanes, as many as 8 NVIDIA warps)
    # hold the same resident blocks; num_stages 2 is the stream pipeliner's register prefetch over
    # one LDS buffer of the streamed tiles (16-36 KB on gfx942). Where two stages spill or push
    # VGPRs + AGPRs toward 512 (one wave per SIMD), one stage and a narrower streamed block.
    ("amd", "fwd"): ((64, _C(128, 64, 4, 2)), (128, _C(128, 64, 4, 2)), (256, _C(64, 32, 4, 2))),
    ("amd", "dkdv"): ((64, _C(32, 128, 4, 2)), (128, _C(32, 64, 4, 2)), (256, _C(16, 32, 4, 1))),
    ("amd", "dq"): ((64, _C(128, 32, 4, 2)), (128, _C(128, 32, 4, 2)), (256, _C(64, 32, 4, 1))),
}
del _C


def _block_d(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


def _vendor(vendor: str | None) -> str:
    if vendor is None:
        return "amd" if torch.version.hip is not None else "nvidia"
    if vendor not in SMEM_BUDGET:
        raise ValueError(f"vendor must be 'nvidia' or 'amd', got {vendor!r}")
    return vendor


def _smem_estimate(config: HstuConfig, dqk: int, dv: int, elem: int, kernel: str = "fwd",
                   vendor: str = "nvidia") -> int:
    """Bytes of shared memory / LDS the operand tiles take, as Triton 3.8 lays them out: NVIDIA
    keeps the resident block (Q; Q and dO; K and V) and num_stages buffers of the streamed tiles
    there (exact for the NVIDIA defaults), AMD one buffer of the streamed tiles (the resident block
    lives in registers, a second stage prefetches into registers). The AMD figure is gfx942's, within
    ~25% of the compiler's; gfx950 takes up to twice as much for the forward (67 KB at D = 128, of
    its 160 KB)."""
    dqk, dv = _block_d(dqk), _block_d(dv)
    resident_rows, streamed_rows = ((config.block_n, config.block_m) if kernel == "dkdv"
                                    else (config.block_m, config.block_n))
    streamed = streamed_rows * (dqk + dv)
    if vendor == "amd":
        return elem * streamed
    resident = resident_rows * (dqk if kernel == "fwd" else dqk + dv)
    return elem * (resident + config.num_stages * streamed)


@functools.lru_cache(maxsize=None)  # per call otherwise: ~6-19 us of host time, 3 calls a step
def default_config(dqk: int, dv: int, dtype: torch.dtype = torch.bfloat16, *, kernel: str = "fwd",
                   vendor: str | None = None, masked: bool = False) -> HstuConfig:
    """The default tiles of `kernel` ('fwd', 'dkdv' or 'dq') for head dims (dqk, dv) and the
    operand dtype on `vendor` ('nvidia' / 'amd'; default: AMD under ROCm torch, else NVIDIA).
    4-byte fp32 operands get their stages, then the streamed block, then the resident block halved
    until the tiles fit the vendor's shared memory."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    vendor = _vendor(vendor)
    table = DEFAULT_CONFIGS.get((vendor, f"{kernel}_masked") if masked else None, DEFAULT_CONFIGS[vendor, kernel])
    width = _block_d(max(dqk, dv))
    config = next((c for d, c in table if width <= d), table[-1][1])
    elem = torch.empty((), dtype=dtype).element_size()
    streamed = "block_m" if kernel == "dkdv" else "block_n"
    resident = "block_n" if kernel == "dkdv" else "block_m"
    while _smem_estimate(config, dqk, dv, elem, kernel, vendor) > SMEM_BUDGET[vendor]:
        if config.num_stages > 1:
            config = replace(config, num_stages=config.num_stages - 1)
        elif getattr(config, streamed) > 16:
            config = replace(config, **{streamed: getattr(config, streamed) // 2})
        elif getattr(config, resident) > 16:
            config = replace(config, **{resident: getattr(config, resident) // 2})
        else:
            break
    return config


# ---------------------------------------------------------------- device helpers


@triton.jit
def _ids(pos, ctx, max_id, HAS_CONTEXT: tl.constexpr, HAS_TARGETS: tl.constexpr):
    """The mask's id of positions `pos`: contextual rows collapse to 0, targets to max_id."""
    t = pos
    if HAS_CONTEXT:
        t = tl.maximum(pos - ctx + 1, 0)
    if HAS_TARGETS:
        t = tl.minimum(t, max_id)
    return t


@triton.jit
def _first_with_id_at_least(lim, ctx, HAS_CONTEXT: tl.constexpr):
    """First position whose id is >= lim (lim <= max_id)."""
    if HAS_CONTEXT:
        first = tl.where(lim <= 0, 0, lim + ctx - 1)
    else:
        first = tl.maximum(lim, 0)
    return first


@triton.jit
def _end_with_id_at_most(lim, ctx, max_id, seq_len, HAS_CONTEXT: tl.constexpr):
    """One past the last position (< seq_len) whose id is <= lim (lim >= 0)."""
    if HAS_CONTEXT:
        end = lim + ctx
    else:
        end = lim + 1
    return tl.where(lim >= max_id, seq_len, tl.minimum(end, seq_len))


@triton.jit
def _valid(pi, pj, seq_len, ctx, max_id, max_attn_len, CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr,
           HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr):
    """mask(i, j) for query positions pi and key positions pj (broadcast against each other)."""
    ti = _ids(pi, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    tj = _ids(pj, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    d = ti - tj
    if CAUSAL:
        ok = d > 0
    else:
        ok = d != 0
    ok = ok | (pi == pj)
    if HAS_WINDOW:
        if CAUSAL:
            ok = ok & (d <= max_attn_len)
        else:
            ok = ok & (tl.abs(d) <= max_attn_len)
    if HAS_CONTEXT:
        ok = ok | ((ti == 0) & (tj < max_id))
    return ok & (pj < seq_len)


@triton.jit
def _split(lo, start, end, hi, BLOCK: tl.constexpr):
    """[lo, a) masked, [a, b) mask-free (whole blocks inside [start, end)), [b, hi) masked."""
    a = tl.minimum(lo + tl.cdiv(tl.maximum(start - lo, 0), BLOCK) * BLOCK, hi)
    b = tl.minimum(a + (tl.maximum(end - a, 0) // BLOCK) * BLOCK, hi)
    return a, b


@triton.jit
def _query_block_plan(m0, seq_len, ntargets, ctx, max_id, max_attn_len, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr,
                      HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr):
    """Key ranges of query rows [m0, m0 + BLOCK_M): (lo, a, b, hi), keys [lo, a) and [b, hi) masked,
    [a, b) every pair valid. Rows are < seq_len (m0 < seq_len)."""
    m1 = tl.minimum(m0 + BLOCK_M, seq_len)
    t_lo = _ids(m0, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    t_hi = _ids(m1 - 1, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    zero = m0 * 0
    lo = zero
    start = zero
    if CAUSAL:
        hi = m1  # strictly smaller ids are earlier positions; the diagonal ends the block
    else:
        hi = zero + seq_len
    if HAS_WINDOW:
        lo = _first_with_id_at_least(t_lo - max_attn_len, ctx, HAS_CONTEXT)
        start = _first_with_id_at_least(t_hi - max_attn_len, ctx, HAS_CONTEXT)
        if not CAUSAL:
            hi = _end_with_id_at_most(t_hi + max_attn_len, ctx, max_id, seq_len, HAS_CONTEXT)
    # Mask-free keys: earlier non-target keys (their ids are below every row's); non-causal rows
    # that are no targets see every key in the window.
    nontarget_end = seq_len - ntargets
    if CAUSAL:
        end = tl.minimum(m0, nontarget_end)
    else:
        if HAS_WINDOW:
            end = _end_with_id_at_most(t_lo + max_attn_len, ctx, max_id, seq_len, HAS_CONTEXT)
        else:
            end = zero + seq_len
        if HAS_TARGETS:
            end = tl.where(m1 > nontarget_end, tl.minimum(m0, nontarget_end), end)
    if HAS_TARGETS:
        end = tl.where(max_id > 0, end, 0)  # every id collapsed: only the diagonal survives
    if HAS_CONTEXT:
        ctx_rows = m0 < ctx  # contextual rows see every non-target key
        lo = tl.where(ctx_rows, 0, lo)
        hi = tl.where(ctx_rows, seq_len, hi)
        end = tl.where(ctx_rows, 0, end)
    a, b = _split(lo, start, end, hi, BLOCK_N)
    return lo, a, b, hi


@triton.jit
def _key_block_plan(n0, seq_len, ntargets, ctx, max_id, max_attn_len, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr,
                    HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr):
    """Query ranges of key rows [n0, n0 + BLOCK_N): (ctx_end, lo, a, b, hi): contextual rows
    [0, ctx_end) masked (those before lo), rows [lo, a) and [b, hi) masked, [a, b) every pair valid."""
    n1 = tl.minimum(n0 + BLOCK_N, seq_len)
    tk_lo = _ids(n0, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    tk_hi = _ids(n1 - 1, ctx, max_id, HAS_CONTEXT, HAS_TARGETS)
    zero = n0 * 0
    hi = zero + seq_len
    nontarget_end = seq_len - ntargets
    if CAUSAL:
        lo = n0  # only later rows (and the diagonal) see a key
        start = n1
    else:
        lo = zero
        start = zero
    if HAS_WINDOW:
        hi = _end_with_id_at_most(tk_hi + max_attn_len, ctx, max_id, seq_len, HAS_CONTEXT)
        end = _end_with_id_at_most(tk_lo + max_attn_len, ctx, max_id, seq_len, HAS_CONTEXT)
        if not CAUSAL:
            lo = _first_with_id_at_least(tk_lo - max_attn_len, ctx, HAS_CONTEXT)
            start = _first_with_id_at_least(tk_hi - max_attn_len, ctx, HAS_CONTEXT)
    else:
        end = zero + seq_len
    if HAS_TARGETS:
        # A target key is seen by its own row only (causal) or by the non-target rows (non-causal).
        if CAUSAL:
            end = tl.where(n1 > nontarget_end, 0, end)
        else:
            end = tl.where(n1 > nontarget_end, tl.minimum(end, nontarget_end), end)
        end = tl.where(max_id > 0, end, 0)
    ctx_end = zero
    if HAS_CONTEXT:
        start = tl.maximum(start, ctx)  # contextual rows follow their own rule: masked
        ctx_end = tl.minimum(tl.minimum(lo, ctx), seq_len)
    a, b = _split(lo, start, end, hi, BLOCK_M)
    return ctx_end, lo, a, b, hi


@triton.jit
def _load_tile(ptrs, rows, row_limit, cols, num_cols, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    if MASK_ROWS:
        if MASK_COLS:
            x = tl.load(ptrs, mask=(rows[:, None] < row_limit) & (cols[None, :] < num_cols), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < row_limit, other=0.0)
    else:
        if MASK_COLS:
            x = tl.load(ptrs, mask=cols[None, :] < num_cols, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _mm(a, b, acc, IEEE: tl.constexpr):
    if IEEE:
        r = tl.dot(a, b, acc, input_precision="ieee")
    else:
        r = tl.dot(a, b, acc)
    return r


@triton.jit
def _tanh_approx(x):
    """tanh(x) by PTX's tanh.approx.f32 (NVIDIA only): one MUFU op, relative error ~2^-11."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _sigmoid(z, SIGMOID: tl.constexpr):
    """sigmoid(z), formed as SIGMOID says (_sigmoid_form). "tanh": 0.5 tanh(z / 2) + 0.5 (NVIDIA,
    fp16 / bf16), one MUFU op where exp2 and a division take two, which at D = 128 cost as many SM
    cycles as the two products; its ~2^-11 relative error is about the rounding of p to fp16.
    "rcp": 1 / (1 + 2^(-z log2 e)) with an approximate reciprocal (AMD, where a division compiles
    to the IEEE sequence of v_div_*). "div": that with a division. Every form gives exactly 0 at
    MASKED_Z: tanh saturates to -1, 2^(1e4 log2 e) overflows to inf."""
    if SIGMOID == "tanh":
        sig = 0.5 * _tanh_approx(0.5 * z) + 0.5
    elif SIGMOID == "rcp":
        sig = libdevice.fast_dividef(1.0, 1.0 + tl.exp2(-z * LOG2E))
    else:
        sig = 1.0 / (1.0 + tl.exp2(-z * LOG2E))
    return sig


@triton.jit
def _silu_grad(z, SIGMOID: tl.constexpr):
    """silu'(z) = sig + z sig (1 - sig). "tanh": from t = tanh(z / 2) as (1 + t) / 2 +
    (z / 2) (1 - t^2) / 2, with no sig tile live (the dq kernel's 128 x 64 tiles at D = 128 spill
    on sm_90 otherwise); 0 at MASKED_Z, where t = -1."""
    if SIGMOID == "tanh":
        hz = 0.5 * z
        t = _tanh_approx(hz)
        g = 0.5 + 0.5 * t + hz * (0.5 - 0.5 * t * t)
    else:
        sig = _sigmoid(z, SIGMOID)
        g = sig + z * sig * (1.0 - sig)
    return g


@triton.jit
def _zero_rows(ptr, first, last, h, stride_m, stride_h, NUM_COLS: tl.constexpr, BLOCK_ROWS: tl.constexpr,
               BLOCK_COLS: tl.constexpr):
    """ptr[first .. last, h, :NUM_COLS] = 0 (first, last int64)."""
    zeros = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=ptr.dtype.element_ty)
    rows = tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    base = ptr + h.to(tl.int64) * stride_h
    count = (last - first).to(tl.int32)
    for r0 in range(0, count, BLOCK_ROWS):
        r = first + r0 + rows
        tl.store(base + r[:, None] * stride_m + cols[None, :], zeros,
                 mask=(r[:, None] < last) & (cols[None, :] < NUM_COLS))


@triton.jit
def _zero_outside(ptr, seq_offsets, b, num_seqs, total_rows, h, stride_m, stride_h, NUM_COLS: tl.constexpr,
                  BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Sequence 0 zeroes the rows before offsets[0], the last one those from offsets[B] on."""
    if b == 0:
        first = tl.minimum(tl.maximum(tl.load(seq_offsets).to(tl.int64), 0), total_rows)
        _zero_rows(ptr, first * 0, first, h, stride_m, stride_h, NUM_COLS, BLOCK_ROWS, BLOCK_COLS)
    if b == num_seqs - 1:
        last = tl.minimum(tl.maximum(tl.load(seq_offsets + num_seqs).to(tl.int64), 0), total_rows)
        _zero_rows(ptr, last, last * 0 + total_rows, h, stride_m, stride_h, NUM_COLS, BLOCK_ROWS, BLOCK_COLS)


@triton.jit
def _program(seq_offsets, num_targets, errors, error_op, program_base, group_size, total_rows, num_seqs, num_heads,
             max_seq_len, ctx, BLOCK: tl.constexpr, LOW_BLOCKS_FIRST: tl.constexpr, HAS_TARGETS: tl.constexpr,
             HAS_CONTEXT: tl.constexpr, CHECK: tl.constexpr):
    """(block, sequence b, head h, first row int64, length, number of targets, max id) of this
    program. Bad values (offsets outside [0, total_rows] or decreasing, lengths above max_seq_len,
    targets outside [0, length]) are a caller error: clamped here, so nothing is read or written out
    of bounds, and recorded in `errors` when CHECK (by the programs of block 0, head 0, before any
    of them can exit)."""
    num_blocks = tl.cdiv(max_seq_len, BLOCK)
    block, b, h = checks.grid_position(program_base, num_seqs, num_heads, num_blocks, group_size, LOW_BLOCKS_FIRST)
    seq_start, seq_len, start_raw, end_raw = checks.sequence(seq_offsets, b, num_seqs, total_rows, max_seq_len)
    targets_raw = start_raw * 0
    if HAS_TARGETS:
        targets_raw = tl.load(num_targets + b).to(tl.int64)
    if CHECK:
        if (block == 0) & (h == 0):
            checks.check_sequence(seq_offsets, errors, b, start_raw, end_raw, targets_raw, num_seqs, total_rows,
                                  max_seq_len, error_op, HAS_TARGETS)
    ntargets = tl.minimum(tl.maximum(targets_raw, 0), seq_len).to(tl.int32)
    max_id = seq_len - ntargets
    if HAS_CONTEXT:
        max_id = max_id - ctx + 1
    return block, b, h, seq_start, seq_len, ntargets, max_id


@triton.jit
def _resident(ptr, stride_m, stride_h, h, seq_start, offs, seq_len, NUM_COLS: tl.constexpr,
              BLOCK_COLS: tl.constexpr):
    """The tile of head h at the sequence's positions offs, rows past seq_len read as 0."""
    cols = tl.arange(0, BLOCK_COLS)
    rows = seq_start + offs
    return _load_tile(ptr + h * stride_h + rows[:, None] * stride_m + cols[None, :], offs, seq_len, cols, NUM_COLS,
                      True, BLOCK_COLS != NUM_COLS)


@triton.jit
def _streamed(ptr, stride_m, stride_h, h, seq_start, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """(pointer to the sequence's row 0 of head h, int64 row step, in-block offsets): the int32
    offsets of a [BLOCK_ROWS, BLOCK_COLS] block, which stays within one sequence."""
    step = tl.full((), 1, tl.int64) * stride_m
    offs = tl.arange(0, BLOCK_ROWS)[:, None] * stride_m + tl.arange(0, BLOCK_COLS)[None, :]
    return ptr + h * stride_h + seq_start * step, step, offs


@triton.jit
def _store_rows(ptr, stride_m, stride_h, h, seq_start, offs, seq_len, value, NUM_COLS: tl.constexpr,
                BLOCK_COLS: tl.constexpr):
    """ptr[seq_start + offs, h, :NUM_COLS] = value for the positions offs below seq_len."""
    cols = tl.arange(0, BLOCK_COLS)
    rows = seq_start + offs
    tl.store(ptr + h * stride_h + rows[:, None] * stride_m + cols[None, :], value.to(ptr.dtype.element_ty),
             mask=(offs[:, None] < seq_len) & (cols[None, :] < NUM_COLS))


# ---------------------------------------------------------------- forward


@triton.jit
def _fwd_steps(acc, q, k_base, v_base, k_offs, v_offs, stride_k, stride_v, start, end, offs_m, seq_len, ctx, max_id,
               max_attn_len, alpha, MASKED: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
               BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr, IEEE: tl.constexpr,
               SIGMOID: tl.constexpr):
    """acc += sum over key blocks [start, end) of silu(alpha Q K^T) V (masked when MASKED). k_base /
    v_base: scalar pointers to key row 0; k_offs / v_offs: the [BLOCK_N, D] element offsets of a block."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_base += start.to(tl.int64) * stride_k
    v_base += start.to(tl.int64) * stride_v
    for n0 in range(start, end, BLOCK_N):
        keys = n0 + offs_n
        k = _load_tile(k_base + k_offs, keys, seq_len, offs_dqk, DQK, MASKED, BLOCK_DQK != DQK)
        v = _load_tile(v_base + v_offs, keys, seq_len, offs_dv, DV, MASKED, BLOCK_DV != DV)
        z = _mm(q, tl.trans(k), None, IEEE) * alpha
        p = z * _sigmoid(z, SIGMOID)
        if MASKED:
            ok = _valid(offs_m[:, None], keys[None, :], seq_len, ctx, max_id, max_attn_len, CAUSAL, HAS_TARGETS,
                        HAS_WINDOW, HAS_CONTEXT)
            p = tl.where(ok, p, 0.0)
        acc = _mm(p.to(v.dtype), v, acc, IEEE)
        k_base += stride_k * BLOCK_N
        v_base += stride_v * BLOCK_N
    return acc


@triton.jit
def _hstu_fwd_kernel(
    Q, K, V, Out, seq_offsets, num_targets, errors, error_op,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    total_rows, num_seqs, num_heads, max_seq_len, max_attn_len, contextual_seq_len, alpha, inv_n, program_base,
    group_size,
    CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr,
    DQK: tl.constexpr, DV: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SIGMOID: tl.constexpr, CHECK: tl.constexpr,
):
    ctx = contextual_seq_len
    block, b, h, seq_start, seq_len, ntargets, max_id = _program(
        seq_offsets, num_targets, errors, error_op, program_base, group_size, total_rows, num_seqs, num_heads,
        max_seq_len, ctx, BLOCK_M, False, HAS_TARGETS, HAS_CONTEXT, CHECK)
    if block == 0:
        _zero_outside(Out, seq_offsets, b, num_seqs, total_rows, h, stride_om, stride_oh, DV, BLOCK_M, BLOCK_DV)
    m0 = block * BLOCK_M
    if m0 >= seq_len:
        return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = _resident(Q, stride_qm, stride_qh, h, seq_start, offs_m, seq_len, DQK, BLOCK_DQK)
    k_base, stride_k, k_offs = _streamed(K, stride_km, stride_kh, h, seq_start, BLOCK_N, BLOCK_DQK)
    v_base, stride_v, v_offs = _streamed(V, stride_vm, stride_vh, h, seq_start, BLOCK_N, BLOCK_DV)
    lo, a, b2, hi = _query_block_plan(m0, seq_len, ntargets, ctx, max_id, max_attn_len, BLOCK_M, BLOCK_N, CAUSAL,
                                      HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    acc = _fwd_steps(acc, q, k_base, v_base, k_offs, v_offs, stride_k, stride_v, lo, a, offs_m, seq_len, ctx, max_id,
                     max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                     HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    acc = _fwd_steps(acc, q, k_base, v_base, k_offs, v_offs, stride_k, stride_v, a, b2, offs_m, seq_len, ctx, max_id,
                     max_attn_len, alpha, False, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                     HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    acc = _fwd_steps(acc, q, k_base, v_base, k_offs, v_offs, stride_k, stride_v, b2, hi, offs_m, seq_len, ctx, max_id,
                     max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                     HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    _store_rows(Out, stride_om, stride_oh, h, seq_start, offs_m, seq_len, acc * inv_n, DV, BLOCK_DV)


# ---------------------------------------------------------------- backward: dk, dv


@triton.jit
def _dkdv_steps(dk, dv, k, v, q_base, do_base, q_offs, do_offs, stride_q, stride_do, start, end, row_limit, offs_n,
                seq_len, ctx, max_id, max_attn_len, alpha, MASKED: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
                BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr, IEEE: tl.constexpr,
                SIGMOID: tl.constexpr):
    """dv += silu(alpha S^T) dO, dk += (dP^T silu'(alpha S^T)) Q over query rows [start, end)
    (rows >= row_limit read as 0); offs_n are the resident key positions. Masked pairs get the
    score MASKED_Z, where silu and silu' are 0, so one select serves both products; silu' is
    formed from p = silu(z) as sig + p (1 - sig), so z dies before dP^T is computed (the fewest
    [BLOCK_N, BLOCK_M] fp32 tiles live at once: 64 x 128 tiles on 8 warps fit sm_90 without spills)."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_base += start.to(tl.int64) * stride_q
    do_base += start.to(tl.int64) * stride_do
    for m0 in range(start, end, BLOCK_M):
        qrows = m0 + offs_m
        q = _load_tile(q_base + q_offs, qrows, row_limit, offs_dqk, DQK, MASKED, BLOCK_DQK != DQK)
        do = _load_tile(do_base + do_offs, qrows, row_limit, offs_dv, DV, MASKED, BLOCK_DV != DV)
        z = _mm(k, tl.trans(q), None, IEEE) * alpha  # [BLOCK_N, BLOCK_M]
        if MASKED:
            ok = _valid(qrows[None, :], offs_n[:, None], seq_len, ctx, max_id, max_attn_len, CAUSAL, HAS_TARGETS,
                        HAS_WINDOW, HAS_CONTEXT) & (qrows[None, :] < row_limit)
            z = tl.where(ok, z, MASKED_Z)
        sig = _sigmoid(z, SIGMOID)
        p = z * sig
        g = sig + p * (1.0 - sig)
        dp = _mm(v, tl.trans(do), None, IEEE)
        dv = _mm(p.to(do.dtype), do, dv, IEEE)
        dk = _mm((dp * g).to(q.dtype), q, dk, IEEE)
        q_base += stride_q * BLOCK_M
        do_base += stride_do * BLOCK_M
    return dk, dv


@triton.jit
def _hstu_bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV_, seq_offsets, num_targets,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh,
    stride_dkm, stride_dkh, stride_dvm, stride_dvh,
    total_rows, num_seqs, num_heads, max_seq_len, max_attn_len, contextual_seq_len, alpha, inv_n, program_base,
    group_size,
    CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr,
    DQK: tl.constexpr, DV: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SIGMOID: tl.constexpr,
):
    ctx = contextual_seq_len
    block, b, h, seq_start, seq_len, ntargets, max_id = _program(
        seq_offsets, num_targets, None, 0, program_base, group_size, total_rows, num_seqs, num_heads,
        max_seq_len, ctx, BLOCK_N, True, HAS_TARGETS, HAS_CONTEXT, False)
    if block == 0:
        _zero_outside(DK, seq_offsets, b, num_seqs, total_rows, h, stride_dkm, stride_dkh, DQK, BLOCK_N, BLOCK_DQK)
        _zero_outside(DV_, seq_offsets, b, num_seqs, total_rows, h, stride_dvm, stride_dvh, DV, BLOCK_N, BLOCK_DV)
    n0 = block * BLOCK_N
    if n0 >= seq_len:
        return
    offs_n = n0 + tl.arange(0, BLOCK_N)
    k = _resident(K, stride_km, stride_kh, h, seq_start, offs_n, seq_len, DQK, BLOCK_DQK)
    v = _resident(V, stride_vm, stride_vh, h, seq_start, offs_n, seq_len, DV, BLOCK_DV)
    q_base, stride_q, q_offs = _streamed(Q, stride_qm, stride_qh, h, seq_start, BLOCK_M, BLOCK_DQK)
    do_base, stride_do, do_offs = _streamed(DO, stride_dom, stride_doh, h, seq_start, BLOCK_M, BLOCK_DV)
    ctx_end, lo, a, b2, hi = _key_block_plan(n0, seq_len, ntargets, ctx, max_id, max_attn_len, BLOCK_M, BLOCK_N,
                                             CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT)
    dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    if HAS_CONTEXT:  # the contextual rows before the main range
        dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, q_offs, do_offs, stride_q, stride_do, ctx_end * 0,
                             ctx_end, ctx_end, offs_n, seq_len, ctx, max_id, max_attn_len, alpha, True, DQK, DV,
                             BLOCK_DQK, BLOCK_DV, BLOCK_M, CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, q_offs, do_offs, stride_q, stride_do, lo, a, seq_len, offs_n,
                         seq_len, ctx, max_id, max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_M,
                         CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, q_offs, do_offs, stride_q, stride_do, a, b2, seq_len, offs_n,
                         seq_len, ctx, max_id, max_attn_len, alpha, False, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_M,
                         CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, q_offs, do_offs, stride_q, stride_do, b2, hi, seq_len, offs_n,
                         seq_len, ctx, max_id, max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_M,
                         CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    _store_rows(DK, stride_dkm, stride_dkh, h, seq_start, offs_n, seq_len, dk * (alpha * inv_n), DQK, BLOCK_DQK)
    _store_rows(DV_, stride_dvm, stride_dvh, h, seq_start, offs_n, seq_len, dv * inv_n, DV, BLOCK_DV)


# ---------------------------------------------------------------- backward: dq


@triton.jit
def _dq_steps(dq, q, do, k_base, v_base, k_offs, v_offs, stride_k, stride_v, start, end, offs_m, seq_len, ctx, max_id,
              max_attn_len, alpha, MASKED: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
              BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
              HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr, IEEE: tl.constexpr,
              SIGMOID: tl.constexpr):
    """dq += (dO V^T * silu'(alpha Q K^T)) K over key blocks [start, end); masked pairs as in
    _dkdv_steps (silu' of MASKED_Z is 0), silu' formed before dP so that z is dead by then."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_base += start.to(tl.int64) * stride_k
    v_base += start.to(tl.int64) * stride_v
    for n0 in range(start, end, BLOCK_N):
        keys = n0 + offs_n
        k = _load_tile(k_base + k_offs, keys, seq_len, offs_dqk, DQK, MASKED, BLOCK_DQK != DQK)
        v = _load_tile(v_base + v_offs, keys, seq_len, offs_dv, DV, MASKED, BLOCK_DV != DV)
        z = _mm(q, tl.trans(k), None, IEEE) * alpha
        if MASKED:
            ok = _valid(offs_m[:, None], keys[None, :], seq_len, ctx, max_id, max_attn_len, CAUSAL, HAS_TARGETS,
                        HAS_WINDOW, HAS_CONTEXT)
            z = tl.where(ok, z, MASKED_Z)
        g = _silu_grad(z, SIGMOID)
        dp = _mm(do, tl.trans(v), None, IEEE)
        dq = _mm((dp * g).to(k.dtype), k, dq, IEEE)
        k_base += stride_k * BLOCK_N
        v_base += stride_v * BLOCK_N
    return dq


@triton.jit
def _hstu_bwd_dq_kernel(
    Q, K, V, DO, DQ, seq_offsets, num_targets,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh, stride_dqm, stride_dqh,
    total_rows, num_seqs, num_heads, max_seq_len, max_attn_len, contextual_seq_len, alpha, inv_n, program_base,
    group_size,
    CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CONTEXT: tl.constexpr,
    DQK: tl.constexpr, DV: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, SIGMOID: tl.constexpr,
):
    ctx = contextual_seq_len
    block, b, h, seq_start, seq_len, ntargets, max_id = _program(
        seq_offsets, num_targets, None, 0, program_base, group_size, total_rows, num_seqs, num_heads,
        max_seq_len, ctx, BLOCK_M, False, HAS_TARGETS, HAS_CONTEXT, False)
    if block == 0:
        _zero_outside(DQ, seq_offsets, b, num_seqs, total_rows, h, stride_dqm, stride_dqh, DQK, BLOCK_M, BLOCK_DQK)
    m0 = block * BLOCK_M
    if m0 >= seq_len:
        return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = _resident(Q, stride_qm, stride_qh, h, seq_start, offs_m, seq_len, DQK, BLOCK_DQK)
    do = _resident(DO, stride_dom, stride_doh, h, seq_start, offs_m, seq_len, DV, BLOCK_DV)
    k_base, stride_k, k_offs = _streamed(K, stride_km, stride_kh, h, seq_start, BLOCK_N, BLOCK_DQK)
    v_base, stride_v, v_offs = _streamed(V, stride_vm, stride_vh, h, seq_start, BLOCK_N, BLOCK_DV)
    lo, a, b2, hi = _query_block_plan(m0, seq_len, ntargets, ctx, max_id, max_attn_len, BLOCK_M, BLOCK_N, CAUSAL,
                                      HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT)
    dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
    dq = _dq_steps(dq, q, do, k_base, v_base, k_offs, v_offs, stride_k, stride_v, lo, a, offs_m, seq_len, ctx, max_id,
                   max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                   HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    dq = _dq_steps(dq, q, do, k_base, v_base, k_offs, v_offs, stride_k, stride_v, a, b2, offs_m, seq_len, ctx, max_id,
                   max_attn_len, alpha, False, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                   HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    dq = _dq_steps(dq, q, do, k_base, v_base, k_offs, v_offs, stride_k, stride_v, b2, hi, offs_m, seq_len, ctx, max_id,
                   max_attn_len, alpha, True, DQK, DV, BLOCK_DQK, BLOCK_DV, BLOCK_N, CAUSAL, HAS_TARGETS,
                   HAS_WINDOW, HAS_CONTEXT, IEEE, SIGMOID)
    _store_rows(DQ, stride_dqm, stride_dqh, h, seq_start, offs_m, seq_len, dq * (alpha * inv_n), DQK, BLOCK_DQK)


# ---------------------------------------------------------------- launchers


def _check_config(config) -> HstuConfig:
    if not isinstance(config, HstuConfig):
        raise ValueError(f"config must be an HstuConfig, got {type(config).__name__}")
    for name in ("block_m", "block_n"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {value}")
    if config.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps}")
    if config.num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {config.num_stages}")
    return config


def _rows(t: torch.Tensor) -> torch.Tensor:
    """The tensor with a unit stride in its last dim: as is when it has one, else a contiguous copy."""
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _indices(seq_offsets: torch.Tensor, num_targets: torch.Tensor | None):
    """seq_offsets and num_targets with a unit stride (the kernels index them as arrays)."""
    return seq_offsets.contiguous(), None if num_targets is None else num_targets.contiguous()


def _check_inputs(q, k, v, seq_offsets, num_targets, max_seq_len, grad_out=None):
    for name, t in (("q", q), ("k", k), ("v", v)) + ((("grad_out", grad_out),) if grad_out is not None else ()):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{name} must be a 3-D fp32/fp16/bf16 tensor, got "
                             f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be {q.dtype} on {q.device}, got {t.dtype} on {t.device}")
    if k.shape != q.shape:
        raise ValueError(f"k must have q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:2] != q.shape[:2]:
        raise ValueError(f"v must be [{q.shape[0]}, {q.shape[1]}, Dv], got {tuple(v.shape)}")
    if grad_out is not None and grad_out.shape != v.shape:
        raise ValueError(f"grad_out must have v's shape {tuple(v.shape)}, got {tuple(grad_out.shape)}")
    if min(q.shape[1], q.shape[2], v.shape[2]) < 1:
        raise ValueError(f"H, Dqk and Dv must be >= 1, got q {tuple(q.shape)}, v {tuple(v.shape)}")
    if (not isinstance(seq_offsets, torch.Tensor) or seq_offsets.dim() != 1 or seq_offsets.dtype not in INDEX_DTYPES
            or seq_offsets.numel() < 1):
        raise ValueError("seq_offsets must be a 1-D int32/int64 tensor of B + 1 >= 1 entries")
    if seq_offsets.device != q.device:
        raise ValueError(f"seq_offsets must be on {q.device}, got {seq_offsets.device}")
    if num_targets is not None:
        if (not isinstance(num_targets, torch.Tensor) or num_targets.dim() != 1
                or num_targets.dtype not in INDEX_DTYPES or num_targets.numel() != seq_offsets.numel() - 1):
            raise ValueError(f"num_targets must be a 1-D int32/int64 tensor of B = {seq_offsets.numel() - 1} entries")
        if num_targets.device != q.device:
            raise ValueError(f"num_targets must be on {q.device}, got {num_targets.device}")
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be an int >= 0, got {max_seq_len!r}")


def _sigmoid_form(device_type: str, dtype: torch.dtype) -> str:
    """How the kernels form sigmoid (_sigmoid): tanh.approx on NVIDIA GPUs for fp16 / bf16 operands
    (fp32 ones keep fp32 accuracy), an approximate reciprocal on AMD GPUs, a division under the
    interpreter (it runs no inline assembly or extern calls, whatever the tensors' device)."""
    if device_type != "cuda" or not isinstance(_hstu_fwd_kernel, triton.runtime.JITFunction):
        return "div"
    if torch.version.hip is not None:
        return "rcp"
    return "div" if dtype == torch.float32 else "tanh"


@functools.lru_cache(maxsize=None)
def _launcher(kernel, device_type: str, dtype: torch.dtype, dqk: int, dv: int, causal: bool, has_targets: bool,
              has_window: bool, has_context: bool, config: HstuConfig, check: bool | None = None) -> Launcher:
    """The launch plan of one kernel for one head shape, dtype, mask and tiles (check: the
    forward's CHECK; None for the backward kernels, which have none)."""
    meta = dict(CAUSAL=bool(causal), HAS_TARGETS=has_targets, HAS_WINDOW=has_window, HAS_CONTEXT=has_context,
                DQK=dqk, DV=dv, BLOCK_DQK=_block_d(dqk), BLOCK_DV=_block_d(dv), BLOCK_M=config.block_m,
                BLOCK_N=config.block_n, IEEE=dtype == torch.float32, SIGMOID=_sigmoid_form(device_type, dtype),
                num_warps=config.num_warps, num_stages=config.num_stages)
    if check is not None:
        meta["CHECK"] = check
    return Launcher(kernel, meta)


def _plan(kernel, q, dv: int, causal, num_targets, max_attn_len, contextual_seq_len, config, check=None):
    return _launcher(kernel, q.device.type, q.dtype, q.shape[2], dv, bool(causal), num_targets is not None,
                     max_attn_len > 0, contextual_seq_len > 0, config, check)


def _scalars(total: int, batch: int, heads: int, max_seq_len: int, alpha, max_attn_len: int,
             contextual_seq_len: int) -> tuple:
    return (total, batch, heads, max_seq_len, int(max_attn_len), int(contextual_seq_len), float(alpha),
            1.0 / max(max_seq_len, 1))


def _is_masked(num_targets, max_attn_len: int, contextual_seq_len: int) -> bool:
    return num_targets is not None or max_attn_len > 0 or contextual_seq_len > 0


def hstu_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor,
                       max_seq_len: int, alpha: float, causal: bool = True, num_targets: torch.Tensor | None = None,
                       max_attn_len: int = 0, contextual_seq_len: int = 0, config: HstuConfig | None = None, *,
                       errors: torch.Tensor | None = None, error_op: int = 0) -> torch.Tensor:
    """HSTU attention forward (see the module docstring): out [total_L, H, Dv] in q's dtype.
    errors: a device error record (common.py); when given, the values of seq_offsets and
    num_targets are checked by the same launch (attention_checks), a bad one recorded with `error_op`."""
    _check_inputs(q, k, v, seq_offsets, num_targets, max_seq_len)
    check_error_record(errors, q.device)
    return forward(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len, contextual_seq_len,
                   None if config is None else _check_config(config), errors, error_op)


def forward(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len, contextual_seq_len,
            config: HstuConfig | None, errors, error_op: int) -> torch.Tensor:
    """hstu_attention_fwd after its argument checks (the ops layer checks them once, itself)."""
    q, k, v, seq_offsets, num_targets = _rows(q), _rows(k), _rows(v), *_indices(seq_offsets, num_targets)
    total, H, dqk = q.shape
    dv = v.shape[2]
    out = torch.empty((total, H, dv), dtype=q.dtype, device=q.device)
    batch = seq_offsets.shape[0] - 1
    if total == 0 or batch == 0 or max_seq_len == 0:  # no forward program has work
        if errors is not None:
            checks.check_values(seq_offsets, num_targets, total, max_seq_len, error_op, errors)
        return out.zero_()
    if config is None:
        config = default_config(dqk, dv, q.dtype, kernel="fwd",
                                masked=_is_masked(num_targets, max_attn_len, contextual_seq_len))
    launcher = _plan(_hstu_fwd_kernel, q, dv, causal, num_targets, max_attn_len, contextual_seq_len, config,
                     errors is not None)
    (qm, qh, _), (km, kh, _), (vm, vh, _), (om, oh, _) = q.stride(), k.stride(), v.stride(), out.stride()
    checks.launch(launcher, cdiv(max_seq_len, config.block_m), batch, H, q.device,
                  (q, k, v, out, seq_offsets, num_targets, errors, error_op, qm, qh, km, kh, vm, vh, om, oh,
                   *_scalars(total, batch, H, max_seq_len, alpha, max_attn_len, contextual_seq_len)))
    return out


def hstu_attention_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       seq_offsets: torch.Tensor, max_seq_len: int, alpha: float, causal: bool = True,
                       num_targets: torch.Tensor | None = None, max_attn_len: int = 0, contextual_seq_len: int = 0,
                       config: HstuConfig | tuple[HstuConfig, HstuConfig] | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of hstu_attention_fwd's output against grad_out, in q's dtype.
    config: None (each kernel's default), one HstuConfig for both kernels, or a pair
    (dk/dv kernel's, dq kernel's)."""
    _check_inputs(q, k, v, seq_offsets, num_targets, max_seq_len, grad_out)
    if config is not None:
        config = tuple(map(_check_config, (config, config) if not isinstance(config, tuple) else config))
    return backward(grad_out, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                    contextual_seq_len, config)


def backward(grad_out, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
             contextual_seq_len, config: tuple[HstuConfig, HstuConfig] | None = None):
    """hstu_attention_bwd after its argument checks; config: None or the (dk/dv, dq) pair."""
    q, k, v, grad_out = _rows(q), _rows(k), _rows(v), _rows(grad_out)
    seq_offsets, num_targets = _indices(seq_offsets, num_targets)
    total, H, dqk = q.shape
    dv_dim = v.shape[2]
    dq = torch.empty((total, H, dqk), dtype=q.dtype, device=q.device)
    dk = torch.empty((total, H, dqk), dtype=q.dtype, device=q.device)
    dv = torch.empty((total, H, dv_dim), dtype=q.dtype, device=q.device)
    if total == 0:
        return dq, dk, dv
    batch = seq_offsets.shape[0] - 1
    if batch == 0 or max_seq_len == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if config is None:
        masked = _is_masked(num_targets, max_attn_len, contextual_seq_len)
        config = tuple(default_config(dqk, dv_dim, q.dtype, kernel=kernel, masked=masked) for kernel in ("dkdv", "dq"))
    dkdv_config, dq_config = config
    (qm, qh, _), (km, kh, _), (vm, vh, _), (gm, gh, _) = q.stride(), k.stride(), v.stride(), grad_out.stride()
    inputs = (qm, qh, km, kh, vm, vh, gm, gh)
    scalars = _scalars(total, batch, H, max_seq_len, alpha, max_attn_len, contextual_seq_len)
    (dkm, dkh, _), (dvm, dvh, _) = dk.stride(), dv.stride()
    checks.launch(_plan(_hstu_bwd_dkdv_kernel, q, dv_dim, causal, num_targets, max_attn_len, contextual_seq_len,
                        dkdv_config), cdiv(max_seq_len, dkdv_config.block_n), batch, H, q.device,
                  (q, k, v, grad_out, dk, dv, seq_offsets, num_targets, *inputs, dkm, dkh, dvm, dvh, *scalars))
    _launch_dq(grad_out, q, k, v, dq, seq_offsets, num_targets, max_seq_len, causal, max_attn_len,
               contextual_seq_len, dq_config, inputs, scalars)
    return dq, dk, dv


def _launch_dq(grad_out, q, k, v, dq, seq_offsets, num_targets, max_seq_len, causal, max_attn_len,
               contextual_seq_len, config, inputs, scalars):
    dqm, dqh, _ = dq.stride()
    checks.launch(_plan(_hstu_bwd_dq_kernel, q, v.shape[2], causal, num_targets, max_attn_len, contextual_seq_len,
                        config), cdiv(max_seq_len, config.block_m), seq_offsets.shape[0] - 1, q.shape[1], q.device,
                  (q, k, v, grad_out, dq, seq_offsets, num_targets, *inputs, dqm, dqh, *scalars))


def backward_dq(grad_out, q, k, v, seq_offsets, max_seq_len, alpha, causal):
    """dq alone (the dq kernel of `backward`, default tiles, no masks): the native dK / dV kernel
    (cuda/attention/dkdv.cu) computes dk and dv beside it. Arguments as `backward`'s."""
    total, H, dqk = q.shape
    dq = torch.empty((total, H, dqk), dtype=q.dtype, device=q.device)
    batch = seq_offsets.shape[0] - 1
    if total == 0 or batch == 0 or max_seq_len == 0:
        return dq.zero_()
    (qm, qh, _), (km, kh, _), (vm, vh, _), (gm, gh, _) = q.stride(), k.stride(), v.stride(), grad_out.stride()
    _launch_dq(grad_out, q, k, v, dq, seq_offsets.contiguous(), None, max_seq_len, causal, 0, 0,
               default_config(dqk, v.shape[2], q.dtype, kernel="dq", masked=False), (qm, qh, km, kh, vm, vh, gm, gh),
               _scalars(total, batch, H, max_seq_len, alpha, 0, 0))
    return dq
