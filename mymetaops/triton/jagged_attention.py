"""Softmax flash attention over jagged sequences (Triton): forward and a deterministic backward.

Semantics. Sequence b is the rows offsets[b] .. offsets[b + 1] of the jagged q, k, v. For each
sequence, head h and row i of it:
    out_i = sum_j softmax_j(scale * q_i . k_j) v_j   over the allowed j of the same sequence
(causal: j <= i, positions counted from the sequence's first row; non-causal: all of them);
scale = 1 / sqrt(Dqk) unless given. lse_i = log(sum_j exp(scale * q_i . k_j)) (natural log, of
the scaled scores, fp32) is kept for the backward.

Layout.
  * q, k: [total_L, H, Dqk]; v: [total_L, H, Dv]; out, dq, dk, dv: contiguous, shaped and typed as
    their input (fp16, bf16 or fp32; fp32 accumulation everywhere, one rounding at the store).
    Inputs (q, k, v, out, grad_out) may have any row and head strides; a last dim that is not
    contiguous is made so by an explicit `.contiguous()` copy in the launcher.
  * lse, delta: [H, total_L] fp32, contiguous: a q block's values of one head are one contiguous
    run (coalesced stores in the forward, loads in the backward).
  * seq_offsets: [B + 1] int32 or int64, on the inputs' device. Offsets are clamped to
    [0, total_L] and a sequence's length to [0, max_seq_len], so no access leaves the tensors
    whatever the values; lengths above max_seq_len are a caller error (the rows past max_seq_len
    are then left unwritten).
  * Rows outside [offsets[0], offsets[B]) (no sequence) get out = 0, lse = 0 and dq = dk = dv = 0.
    Every element of every output is written by a kernel (outputs come from torch.empty).

Schedule (FlashAttention-2).
  * Forward, one program per (sequence, head, q block of BLOCK_M rows): the q block is loaded once,
    k/v blocks of BLOCK_N rows stream through it (both products on tl.dot, the loop software-
    pipelined over num_stages buffers), with an online softmax in base 2 (log2(e) folded into the
    score scale, so one multiply-add and one exp2 per score) and an fp32 accumulator rescaled per
    block. Causal: only k blocks up to the q block's last row are visited, split into a mask-free
    part (blocks wholly below the diagonal) and a masked part (the diagonal blocks; non-causal: the
    sequence's last, partial block). A program whose block starts past its sequence's length does
    no attention work.
  * Backward without atomics (deterministic): a preprocess kernel writes delta_i = out_i . dout_i;
    one program per (sequence, head, k/v block of BLOCK_N rows) holds k, v and the fp32 dk, dv
    accumulators and streams the q blocks that can see it (causal: from the diagonal on),
    recomputing p from lse; one program per (sequence, head, q block) holds q, dout and the fp32 dq
    accumulator and streams k/v blocks as the forward does. The same mask-free / masked split.
  * Grids are 1-D over (block, sequence, head), run in groups of consecutive (sequence, head)
    pairs, about 4 x SMs programs each, so that the programs running at once share the k/v of few
    pairs in L2 (attention_checks.grid_position, group_size); within a group the block index is
    the outer one: the forward and dq kernels start with each pair's last q block, dk/dv with the
    first k/v block, the blocks with the most work under causal masking, so the cheap ones fill
    the group's tail (longest first). B * H has no 65535 cap as on a grid dim 1 (a grid past
    what the runtime takes is launched in chunks, common.grid_chunks). Grid sizes come from host
    ints only (max_seq_len, B = seq_offsets.numel() - 1, H, total_L): no device sync. Given an
    error record, the forward also checks seq_offsets in the same launch (attention_checks).
    The programs of sequence 0 also zero the rows before offsets[0], those of sequence B - 1 the
    rows from offsets[B] on (each program a block-strided share of its head's rows); at least one
    block per (sequence, head) is launched even when max_seq_len is 0.
  * Addresses: each block's base pointer is computed in int64 (row * stride can pass 2^31); the
    in-tile offsets stay int32 (the launcher checks block * stride < 2^31).

Tiles: `AttentionConfig` (no autotuning); `default_config` picks one per kernel, head dims, dtype
and vendor, with the reasons next to the tables. fp32 operands use tl.dot's "ieee" precision (no
TF32), fp16 / bf16 ones the tensor cores (MFMA / wgmma).
"""
from __future__ import annotations

import functools

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from mymetaops.triton import attention_checks as checks
from mymetaops.triton.common import cdiv, check_error_record
from mymetaops.triton.launch import Launcher

LOG2E = 1.4426950408889634
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_KERNELS = ("fwd", "dkdv", "dq")


@dataclass(frozen=True)
class AttentionConfig:
    """Tiles of one attention kernel. block_m: q rows per step (forward, dq: held by the program;
    dkdv: streamed); block_n: k/v rows per step (forward, dq: streamed; dkdv: held). Powers of two
    >= 16 (tl.dot's minimum)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


# Defaults, by kernel and the padded head dim D = max(64, BLOCK_DQK, BLOCK_DV) (fp16 / bf16).
# Chosen from cross-compiles (registers, spills, shared memory / LDS on Triton 3.6 and 3.8), not
# from GPU timings: none have been measured yet.
# NVIDIA (sm_90: 227 KB shared memory per block, 255 registers per thread; the operands loaded
# from memory sit in shared memory, the accumulators and score tiles in registers):
#  * fwd: 128-row q blocks amortize each k/v block over the most rows (two 64-row wgmma
#    warpgroups at 8 warps); k/v stream in 64-row blocks over 3 stages: shared memory q + 3 (k + v)
#    = 64 KB (D = 64) / 128 KB (D = 128). D = 64 with 4 warps (one warpgroup, 252 registers: two
#    blocks fit an SM); D = 128 with 8 warps (255 registers, no spill; 64 x 64 tiles at 4 warps
#    spill). D = 256: a 256-wide fp32 accumulator leaves room for 64 x 32 tiles only (242
#    registers; 128-row q blocks or 64-row k/v blocks spill).
#  * dkdv: the program holds k, v and the dk, dv accumulators for block_n k rows and streams q,
#    dout in 32-row steps (the transposed score tiles are [block_n, 32]): 128 held rows at D = 64
#    (236 registers), 64 at D = 128 (252; 128 spills on 3.6), 32 at D = 256 (223), all 8 warps.
#  * dq: holds 128 q rows (64 at D = 256), dout and dq; k/v stream in 64-row steps at D = 64 (175
#    registers) and 32-row ones above (216 / 249: 64-row ones spill at D = 128).
_NVIDIA = {
    "fwd": {64: AttentionConfig(128, 64, 4, 3), 128: AttentionConfig(64, 64, 4, 3),
            256: AttentionConfig(64, 32, 8, 2)},
    "dkdv": {64: AttentionConfig(32, 128, 8, 3), 128: AttentionConfig(32, 64, 8, 3),
             256: AttentionConfig(32, 32, 8, 2)},
    "dq": {64: AttentionConfig(128, 64, 8, 3), 128: AttentionConfig(128, 32, 8, 3),
           256: AttentionConfig(64, 32, 8, 2)},
}
# Measured (bench/attention/config_sweep.py, H200, Triton 3.6, 2026-12-02): at D = 128 the forward
# is fastest with 64 x 64 tiles on 4 warps (198 against 175 TFLOP/s at B64 N1024 H4, 342 against
# 333 at B32 N4096 H4; no spill on Triton 3.8 either), the fwd entry above. The backward was
# fastest with 64 x 128 dk/dv and 128 x 64 dq tiles on 8 warps, 2 stages (544 against 614 us,
# 2429 against 3105), but those spill on Triton 3.8 (336 / 8 bytes of stack): not defaults.
# AMD (gfx942: 64 KB LDS, 512 VGPRs + AGPRs per lane at 4 waves per workgroup but only 256 at 8,
# where everything below spills; gfx950: 160 KB LDS): 4 waves of 64 lanes everywhere, 2 stages
# (the streamed tiles double-buffered in LDS; at most 36 KB on gfx942) unless noted. Register
# counts are Triton 3.8's on gfx942 (3.6 needs up to ~100 more).
#  * fwd: 128-row q blocks; 64-row k/v blocks at D = 64 (235 registers: two waves per SIMD), 32-row
#    ones at D = 128 (245, two waves per SIMD; 64-row ones need ~470 and spill a VGPR on gfx942),
#    64 x 32 at D = 256 (337).
#  * dkdv: held k/v blocks of 128 rows with 16-row q steps (D = 64, 344; 32-row steps spill on
#    3.6), 64 rows with 16-row steps (D = 128, 350; 32-row steps spill), 32 rows with 16-row steps
#    and 1 stage (D = 256, 270; 2 stages spill on 3.6).
#  * dq: 128 x 32 (D = 64, 198), 64 x 32 (D = 128, 333), 64 x 16 (D = 256, 308).
_AMD = {
    "fwd": {64: AttentionConfig(128, 64, 4, 2), 128: AttentionConfig(128, 32, 4, 2),
            256: AttentionConfig(64, 32, 4, 2)},
    "dkdv": {64: AttentionConfig(16, 128, 4, 2), 128: AttentionConfig(16, 64, 4, 2),
             256: AttentionConfig(16, 32, 4, 1)},
    "dq": {64: AttentionConfig(128, 32, 4, 2), 128: AttentionConfig(64, 32, 4, 2),
           256: AttentionConfig(64, 16, 4, 2)},
}


def _block_d(d: int) -> int:
    """The padded head dim: the next power of two >= max(d, 16) (tl.dot's minimum K)."""
    return max(16, triton.next_power_of_2(d))


@functools.lru_cache(maxsize=None)  # per call otherwise: ~6-19 us of host time, 3 calls a step
def default_config(dqk: int, dv: int, dtype: torch.dtype, kernel: str = "fwd",
                   vendor: str | None = None) -> AttentionConfig:
    """The default tiles of `kernel` ("fwd", "dkdv" or "dq") for head dims dqk, dv and `dtype`.
    vendor "nvidia" or "amd"; None: this torch's (ROCm build: amd). fp32 (meant for testing)
    halves the streamed block and uses at most 2 stages: its tiles take twice the memory and its
    "ieee" dots run on FMA units (unchecked for spills). Head dims past 256 (correct, not tuned)
    halve the held block too."""
    if kernel not in _KERNELS:
        raise ValueError(f"kernel must be one of {_KERNELS}, got {kernel!r}")
    if vendor is None:
        vendor = "amd" if torch.version.hip is not None else "nvidia"
    if vendor not in ("nvidia", "amd"):
        raise ValueError(f"vendor must be 'nvidia' or 'amd', got {vendor!r}")
    d = max(64, _block_d(dqk), _block_d(dv))
    table = (_AMD if vendor == "amd" else _NVIDIA)[kernel]
    config = table[min(d, 256)]
    if dtype == torch.float32 or d > 256:
        held_m = kernel != "dkdv"
        bm, bn = config.block_m, config.block_n
        if held_m:
            bn = max(16, bn // 2)
            bm = bm if d <= 256 else max(16, bm // 2)
        else:
            bm = max(16, bm // 2)
            bn = bn if d <= 256 else max(16, bn // 2)
        config = AttentionConfig(bm, bn, config.num_warps, min(config.num_stages, 2))
    return config


def _check_config(config: AttentionConfig) -> None:
    for name in ("block_m", "block_n"):
        v = getattr(config, name)
        if not (isinstance(v, int) and v >= 16 and v & (v - 1) == 0 and v <= 256):
            raise ValueError(f"{name} must be a power of two in [16, 256], got {v!r} ({config})")
    if config.num_warps not in (1, 2, 4, 8, 16) or config.num_stages < 1:
        raise ValueError(f"num_warps must be 1..16 (power of two) and num_stages >= 1, got {config}")


# ---------------------------------------------------------------- device helpers


@triton.jit
def _program(offsets_ptr, errors_ptr, error_op, program_base, total_rows, max_seq_len, num_heads, num_seqs,
             num_blocks, group_size, LOW_BLOCKS_FIRST: tl.constexpr, CHECK: tl.constexpr):
    """(block, sequence b, head h int64, first row int64, length, offsets[b + 1]) of this program.
    Offsets are clamped (attention_checks.sequence); when CHECK, the program of block 0, head 0
    records sequence b's bad offsets in errors_ptr."""
    block, b, h = checks.grid_position(program_base, num_seqs, num_heads, num_blocks, group_size, LOW_BLOCKS_FIRST)
    start, n, start_raw, end_raw = checks.sequence(offsets_ptr, b, num_seqs, total_rows, max_seq_len)
    if CHECK:
        if (block == 0) & (h == 0):
            checks.check_sequence(offsets_ptr, errors_ptr, b, start_raw, end_raw, end_raw * 0, num_seqs, total_rows,
                                  max_seq_len, error_op, False)
    return block, b, h, start, n, end_raw


@triton.jit
def _key_ranges(m0, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(full_hi, masked_hi) for the q block at m0: the k/v blocks [0, full_hi) need no mask,
    [full_hi, masked_hi) do (causal: the diagonal ones; non-causal: the sequence's partial last)."""
    if CAUSAL:
        full_hi = (m0 // BLOCK_N) * BLOCK_N  # blocks wholly before the q block's first row
        masked_hi = tl.minimum(m0 + BLOCK_M, n)
    else:
        full_hi = (n // BLOCK_N) * BLOCK_N
        masked_hi = n
    return full_hi, masked_hi


@triton.jit
def _load_tile(base, rows, row_stride, cols, n_rows, D: tl.constexpr, BLOCK_D: tl.constexpr,
               MASK_ROWS: tl.constexpr):
    """base[rows, cols] as [R, BLOCK_D] (rows < n_rows when MASK_ROWS, cols < D unless D ==
    BLOCK_D; 0 elsewhere). `base` points at the tile's first row; offsets stay int32."""
    ptrs = base + rows[:, None] * row_stride + cols[None, :]
    if MASK_ROWS:
        if D == BLOCK_D:
            tile = tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
        else:
            tile = tl.load(ptrs, mask=(rows < n_rows)[:, None] & (cols < D)[None, :], other=0.0)
    else:
        if D == BLOCK_D:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=(cols < D)[None, :], other=0.0)
    return tile


@triton.jit
def _store_tile(base, rows, row_stride, cols, n_rows, value, D: tl.constexpr, BLOCK_D: tl.constexpr):
    ptrs = base + rows[:, None] * row_stride + cols[None, :]
    if D == BLOCK_D:
        tl.store(ptrs, value.to(base.dtype.element_ty), mask=(rows < n_rows)[:, None])
    else:
        tl.store(ptrs, value.to(base.dtype.element_ty), mask=(rows < n_rows)[:, None] & (cols < D)[None, :])


@triton.jit
def _dot(a, b, acc, IEEE: tl.constexpr):
    if IEEE:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _zero_rows(base, row_stride, lo, hi, first, step, D: tl.constexpr, BLOCK_R: tl.constexpr,
               BLOCK_D: tl.constexpr):
    """base[r, :D] = 0 for the rows r in [lo, hi) of the BLOCK_R-row blocks first, first + step, ...
    (a program's share of the rows outside every sequence)."""
    rows = tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    zeros = tl.zeros([BLOCK_R, BLOCK_D], dtype=base.dtype.element_ty)
    for r0 in range(lo + first * BLOCK_R, hi, step * BLOCK_R):
        tile = base + r0 * row_stride
        ptrs = tile + rows[:, None] * row_stride + cols[None, :]
        tl.store(ptrs, zeros, mask=(rows < hi - r0)[:, None] & (cols < D)[None, :])


@triton.jit
def _zero_outside(head, row_stride, b, num_seqs, start, end_raw, total_rows, first, step, D: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rows outside every sequence: before offsets[0] (sequence 0's programs), from offsets[B] on
    (sequence B - 1's, end_raw = offsets[B]), shared among that sequence's block programs of each
    head (blocks first, first + step, ...)."""
    if b == 0:
        _zero_rows(head, row_stride, 0, start, first, step, D, BLOCK_R, BLOCK_D)
    if b == num_seqs - 1:
        last = tl.minimum(tl.maximum(end_raw, start), total_rows)
        _zero_rows(head, row_stride, last, total_rows, first, step, D, BLOCK_R, BLOCK_D)


# ---------------------------------------------------------------- forward


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_head, v_head, start, stride_km, stride_vm, lo, hi, m0, n, qk_scale,
               offs_m, offs_n, offs_dqk, offs_dv, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
               IEEE: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr):
    """The k/v blocks [lo, hi) (multiples of BLOCK_N) through the online softmax. MASKED: mask the
    k rows past the sequence and, when causal, those after the q row. k_head / v_head point at
    row 0 of the head; the block pointers advance in int64."""
    k_blk = k_head + (start + lo) * stride_km
    v_blk = v_head + (start + lo) * stride_vm
    for n0 in range(lo, hi, BLOCK_N):
        k = _load_tile(k_blk, offs_n, stride_km, offs_dqk, n - n0, DQK, BLOCK_DQK, MASKED)
        v = _load_tile(v_blk, offs_n, stride_vm, offs_dv, n - n0, DV, BLOCK_DV, MASKED)
        s = _dot(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), IEEE) * qk_scale
        if MASKED:
            allowed = (n0 + offs_n < n)[None, :]
            if CAUSAL:
                allowed = allowed & ((n0 + offs_n)[None, :] <= (m0 + offs_m)[:, None])
            s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], IEEE)
        m_i = m_new
        k_blk += BLOCK_N * stride_km
        v_blk += BLOCK_N * stride_vm
    return acc, l_i, m_i


@triton.jit
def _jagged_attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, offsets_ptr, out_ptr, lse_ptr, errors_ptr, error_op,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    total_rows, max_seq_len, num_heads, num_seqs, num_m_blocks, program_base, group_size, qk_scale,
    CAUSAL: tl.constexpr, IEEE: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    CHECK: tl.constexpr,
):
    """out, lse of one (sequence, head, q block), the highest q blocks of a group of pairs first
    (attention_checks.grid_position). qk_scale = scale * log2(e)."""
    pid_m, b, h64, start, n, end_raw = _program(offsets_ptr, errors_ptr, error_op, program_base, total_rows,
                                                max_seq_len, num_heads, num_seqs, num_m_blocks, group_size, False,
                                                CHECK)
    out_head = out_ptr + h64 * stride_oh
    lse_head = lse_ptr + h64 * total_rows
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    m0 = pid_m * BLOCK_M
    if m0 < n:
        q = _load_tile(q_ptr + h64 * stride_qh + (start + m0) * stride_qm, offs_m, stride_qm, offs_dqk, n - m0,
                       DQK, BLOCK_DQK, True)
        k_head = k_ptr + h64 * stride_kh
        v_head = v_ptr + h64 * stride_vh
        acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)  # finite: exp2(m_i - m_new) never sees inf - inf
        full_hi, masked_hi = _key_ranges(m0, n, BLOCK_M, BLOCK_N, CAUSAL)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_head, v_head, start, stride_km, stride_vm, 0, full_hi,
                                   m0, n, qk_scale, offs_m, offs_n, offs_dqk, offs_dv, False, CAUSAL, IEEE, DQK,
                                   DV, BLOCK_M, BLOCK_N, BLOCK_DQK, BLOCK_DV)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_head, v_head, start, stride_km, stride_vm, full_hi,
                                   masked_hi, m0, n, qk_scale, offs_m, offs_n, offs_dqk, offs_dv, True, CAUSAL,
                                   IEEE, DQK, DV, BLOCK_M, BLOCK_N, BLOCK_DQK, BLOCK_DV)
        # Every row has its diagonal (or, past the sequence, row 0) allowed: l_i >= 1.
        acc = acc / l_i[:, None]
        _store_tile(out_head + (start + m0) * stride_om, offs_m, stride_om, offs_dv, n - m0, acc, DV, BLOCK_DV)
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # natural log of the scaled scores' exp-sum
        tl.store(lse_head + start + m0 + offs_m, lse, mask=offs_m < n - m0)
    _zero_outside(out_head, stride_om, b, num_seqs, start, end_raw, total_rows, pid_m, num_m_blocks, DV, BLOCK_M,
                  BLOCK_DV)
    # lse: a head's row is one fp32 value (D = 1, row stride 1).
    _zero_outside(lse_head, 1, b, num_seqs, start, end_raw, total_rows, pid_m, num_m_blocks, 1, BLOCK_M, 1)


# ---------------------------------------------------------------- backward


@triton.jit
def _bwd_preprocess_kernel(
    out_ptr, do_ptr, delta_ptr, stride_om, stride_oh, stride_dom, stride_doh, total_rows,
    DV: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """delta[h, r] = sum_d out[r, h, d] * dout[r, h, d] (fp32) for BLOCK_R rows of head h."""
    r0 = tl.program_id(0).to(tl.int64) * BLOCK_R
    h = tl.program_id(1).to(tl.int64)
    rows = tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_DV)
    o = _load_tile(out_ptr + h * stride_oh + r0 * stride_om, rows, stride_om, cols, total_rows - r0, DV,
                   BLOCK_DV, True)
    do = _load_tile(do_ptr + h * stride_doh + r0 * stride_dom, rows, stride_dom, cols, total_rows - r0, DV,
                    BLOCK_DV, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(delta_ptr + h * total_rows + r0 + rows, delta, mask=rows < total_rows - r0)


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_head, do_head, lse_seq, delta_seq, start, stride_qm, stride_dom, lo, hi, n0, n,
                qk_scale, offs_m, offs_n, offs_dqk, offs_dv, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                IEEE: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr):
    """dk, dv of the held k/v block (rows n0 ..) over the q blocks [lo, hi) (multiples of
    BLOCK_M), in transposed form: scores [BLOCK_N, BLOCK_M]. lse_seq / delta_seq point at the
    sequence's first row of the head."""
    q_blk = q_head + (start + lo) * stride_qm
    do_blk = do_head + (start + lo) * stride_dom
    for m0 in range(lo, hi, BLOCK_M):
        q = _load_tile(q_blk, offs_m, stride_qm, offs_dqk, n - m0, DQK, BLOCK_DQK, MASKED)
        do = _load_tile(do_blk, offs_m, stride_dom, offs_dv, n - m0, DV, BLOCK_DV, MASKED)
        if MASKED:
            in_seq = offs_m < n - m0
            lse2 = tl.load(lse_seq + m0 + offs_m, mask=in_seq, other=0.0) * 1.4426950408889634
            delta = tl.load(delta_seq + m0 + offs_m, mask=in_seq, other=0.0)
        else:
            lse2 = tl.load(lse_seq + m0 + offs_m) * 1.4426950408889634
            delta = tl.load(delta_seq + m0 + offs_m)
        s_t = _dot(k, tl.trans(q), tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32), IEEE)
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED:
            allowed = (offs_m < n - m0)[None, :]
            if CAUSAL:
                allowed = allowed & ((m0 + offs_m)[None, :] >= (n0 + offs_n)[:, None])
            p_t = tl.where(allowed, p_t, 0.0)
        dv = _dot(p_t.to(do.dtype), do, dv, IEEE)
        dp_t = _dot(v, tl.trans(do), tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32), IEEE)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = _dot(ds_t.to(q.dtype), q, dk, IEEE)
        q_blk += BLOCK_M * stride_qm
        do_blk += BLOCK_M * stride_dom
    return dk, dv


@triton.jit
def _jagged_attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, offsets_ptr, dk_ptr, dv_ptr,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh,
    stride_dkm, stride_dkh, stride_dvm, stride_dvh,
    total_rows, max_seq_len, num_heads, num_seqs, num_n_blocks, program_base, group_size, qk_scale, sm_scale,
    CAUSAL: tl.constexpr, IEEE: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """dk, dv of one (sequence, head, k/v block), the lowest k/v blocks of a group of pairs first:
    under causal masking they see the most q rows."""
    pid_n, b, h64, start, n, end_raw = _program(offsets_ptr, None, 0, program_base, total_rows, max_seq_len,
                                                num_heads, num_seqs, num_n_blocks, group_size, True, False)
    dk_head = dk_ptr + h64 * stride_dkh
    dv_head = dv_ptr + h64 * stride_dvh
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    n0 = pid_n * BLOCK_N
    if n0 < n:
        k = _load_tile(k_ptr + h64 * stride_kh + (start + n0) * stride_km, offs_n, stride_km, offs_dqk, n - n0,
                       DQK, BLOCK_DQK, True)
        v = _load_tile(v_ptr + h64 * stride_vh + (start + n0) * stride_vm, offs_n, stride_vm, offs_dv, n - n0,
                       DV, BLOCK_DV, True)
        q_head = q_ptr + h64 * stride_qh
        do_head = do_ptr + h64 * stride_doh
        lse_seq = lse_ptr + h64 * total_rows + start
        delta_seq = delta_ptr + h64 * total_rows + start
        dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
        full_end = (n // BLOCK_M) * BLOCK_M  # q blocks wholly inside the sequence end before this
        if CAUSAL:
            # q blocks that hold a row before one of the block's k rows: masked.
            diag_lo = (n0 // BLOCK_M) * BLOCK_M
            diag_end = tl.cdiv(n0 + BLOCK_N, BLOCK_M) * BLOCK_M
            dk, dv = _dkdv_inner(dk, dv, k, v, q_head, do_head, lse_seq, delta_seq, start, stride_qm, stride_dom,
                                 diag_lo, tl.minimum(diag_end, n), n0, n, qk_scale, offs_m, offs_n, offs_dqk,
                                 offs_dv, True, CAUSAL, IEEE, DQK, DV, BLOCK_M, BLOCK_N, BLOCK_DQK, BLOCK_DV)
        else:
            diag_end = 0
        dk, dv = _dkdv_inner(dk, dv, k, v, q_head, do_head, lse_seq, delta_seq, start, stride_qm, stride_dom,
                             diag_end, full_end, n0, n, qk_scale, offs_m, offs_n, offs_dqk, offs_dv, False, CAUSAL,
                             IEEE, DQK, DV, BLOCK_M, BLOCK_N, BLOCK_DQK, BLOCK_DV)
        # The sequence's last, partial q block (none when the diagonal part reached the end).
        dk, dv = _dkdv_inner(dk, dv, k, v, q_head, do_head, lse_seq, delta_seq, start, stride_qm, stride_dom,
                             tl.maximum(full_end, diag_end), n, n0, n, qk_scale, offs_m, offs_n, offs_dqk,
                             offs_dv, True, CAUSAL, IEEE, DQK, DV, BLOCK_M, BLOCK_N, BLOCK_DQK, BLOCK_DV)
        _store_tile(dk_head + (start + n0) * stride_dkm, offs_n, stride_dkm, offs_dqk, n - n0, dk * sm_scale, DQK,
                    BLOCK_DQK)
        _store_tile(dv_head + (start + n0) * stride_dvm, offs_n, stride_dvm, offs_dv, n - n0, dv, DV, BLOCK_DV)
    _zero_outside(dk_head, stride_dkm, b, num_seqs, start, end_raw, total_rows, pid_n, num_n_blocks, DQK, BLOCK_N,
                  BLOCK_DQK)
    _zero_outside(dv_head, stride_dvm, b, num_seqs, start, end_raw, total_rows, pid_n, num_n_blocks, DV, BLOCK_N,
                  BLOCK_DV)


@triton.jit
def _dq_inner(dq, q, do, lse2, delta, k_head, v_head, start, stride_km, stride_vm, lo, hi, m0, n, qk_scale,
              offs_m, offs_n, offs_dqk, offs_dv, MASKED: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr,
              DQK: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr):
    """dq of the held q block over the k/v blocks [lo, hi) (multiples of BLOCK_N)."""
    k_blk = k_head + (start + lo) * stride_km
    v_blk = v_head + (start + lo) * stride_vm
    for n0 in range(lo, hi, BLOCK_N):
        k = _load_tile(k_blk, offs_n, stride_km, offs_dqk, n - n0, DQK, BLOCK_DQK, MASKED)
        v = _load_tile(v_blk, offs_n, stride_vm, offs_dv, n - n0, DV, BLOCK_DV, MASKED)
        s = _dot(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), IEEE)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            allowed = (n0 + offs_n < n)[None, :]
            if CAUSAL:
                allowed = allowed & ((n0 + offs_n)[None, :] <= (m0 + offs_m)[:, None])
            p = tl.where(allowed, p, 0.0)
        dp = _dot(do, tl.trans(v), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), IEEE)
        ds = p * (dp - delta[:, None])
        dq = _dot(ds.to(k.dtype), k, dq, IEEE)
        k_blk += BLOCK_N * stride_km
        v_blk += BLOCK_N * stride_vm
    return dq


@triton.jit
def _jagged_attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, offsets_ptr, dq_ptr,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh,
    stride_dqm, stride_dqh,
    total_rows, max_seq_len, num_heads, num_seqs, num_m_blocks, program_base, group_size, qk_scale, sm_scale,
    CAUSAL: tl.constexpr, IEEE: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """dq of one (sequence, head, q block), programs ordered as the forward's."""
    pid_m, b, h64, start, n, end_raw = _program(offsets_ptr, None, 0, program_base, total_rows, max_seq_len,
                                                num_heads, num_seqs, num_m_blocks, group_size, False, False)
    dq_head = dq_ptr + h64 * stride_dqh
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    m0 = pid_m * BLOCK_M
    if m0 < n:
        row0 = start + m0
        q = _load_tile(q_ptr + h64 * stride_qh + row0 * stride_qm, offs_m, stride_qm, offs_dqk, n - m0, DQK,
                       BLOCK_DQK, True)
        do = _load_tile(do_ptr + h64 * stride_doh + row0 * stride_dom, offs_m, stride_dom, offs_dv, n - m0, DV,
                        BLOCK_DV, True)
        in_seq = offs_m < n - m0
        lse2 = tl.load(lse_ptr + h64 * total_rows + row0 + offs_m, mask=in_seq, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_ptr + h64 * total_rows + row0 + offs_m, mask=in_seq, other=0.0)
        k_head = k_ptr + h64 * stride_kh
        v_head = v_ptr + h64 * stride_vh
        dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
        full_hi, masked_hi = _key_ranges(m0, n, BLOCK_M, BLOCK_N, CAUSAL)
        dq = _dq_inner(dq, q, do, lse2, delta, k_head, v_head, start, stride_km, stride_vm, 0, full_hi, m0, n, qk_scale,
                       offs_m, offs_n, offs_dqk, offs_dv, False, CAUSAL, IEEE, DQK, DV, BLOCK_M, BLOCK_N,
                       BLOCK_DQK, BLOCK_DV)
        dq = _dq_inner(dq, q, do, lse2, delta, k_head, v_head, start, stride_km, stride_vm, full_hi, masked_hi, m0, n,
                       qk_scale, offs_m, offs_n, offs_dqk, offs_dv, True, CAUSAL, IEEE, DQK, DV, BLOCK_M,
                       BLOCK_N, BLOCK_DQK, BLOCK_DV)
        _store_tile(dq_head + row0 * stride_dqm, offs_m, stride_dqm, offs_dqk, n - m0, dq * sm_scale, DQK,
                    BLOCK_DQK)
    _zero_outside(dq_head, stride_dqm, b, num_seqs, start, end_raw, total_rows, pid_m, num_m_blocks, DQK, BLOCK_M,
                  BLOCK_DQK)


# ---------------------------------------------------------------- launchers


def _new_output(shape, dtype, device) -> torch.Tensor:
    """Every output's allocation (uninitialized: the kernels write every element; the tests
    replace this with a NaN fill to check that)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _rows(t: torch.Tensor, name: str, dtype: torch.dtype, device: torch.device, shape: tuple | None = None
          ) -> torch.Tensor:
    """t checked as a [total_L, H, D] tensor; a last dim that is not contiguous is copied."""
    if not isinstance(t, torch.Tensor) or t.dim() != 3:
        raise ValueError(f"{name} must be a 3-D [total_L, H, D] tensor, got {getattr(t, 'shape', type(t))}")
    if t.dtype != dtype or t.device != device:
        raise ValueError(f"{name} must be {dtype} on {device}, got {t.dtype} on {t.device}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name} must be of shape {shape}, got {tuple(t.shape)}")
    if t.stride(2) != 1 and t.size(2) > 1:
        t = t.contiguous()
    # In-tile offsets are int32: a block's rows * row stride must stay below 2^31.
    if max(t.stride(0), t.stride(1)) * 256 >= 2**31:
        raise ValueError(f"{name}'s strides {t.stride()} are too large (row stride * 256 must be < 2^31)")
    return t


def _inputs(q, k, v, seq_offsets, max_seq_len, scale):
    if not isinstance(q, torch.Tensor) or q.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"q must be an fp16, bf16 or fp32 tensor, got {getattr(q, 'dtype', type(q))}")
    dtype, device = q.dtype, q.device
    q = _rows(q, "q", dtype, device)
    total, heads, dqk = q.shape
    k = _rows(k, "k", dtype, device, (total, heads, dqk))
    v = _rows(v, "v", dtype, device)
    if tuple(v.shape[:2]) != (total, heads):
        raise ValueError(f"v must be [{total}, {heads}, Dv], got {tuple(v.shape)}")
    if (not isinstance(seq_offsets, torch.Tensor) or seq_offsets.dim() != 1 or seq_offsets.numel() < 1
            or seq_offsets.dtype not in (torch.int32, torch.int64) or seq_offsets.device != device):
        raise ValueError(f"seq_offsets must be a 1-D int32/int64 tensor of B + 1 >= 1 entries on {device}")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be an int >= 0, got {max_seq_len!r}")
    if dqk < 1 or v.size(2) < 1 or heads < 1:
        raise ValueError(f"H, Dqk and Dv must be >= 1, got q {tuple(q.shape)}, v {tuple(v.shape)}")
    if scale is None:
        scale = 1.0 / math.sqrt(dqk)
    return q, k, v, seq_offsets, float(scale)


@functools.lru_cache(maxsize=None)
def _launcher(kernel, causal: bool, dtype: torch.dtype, dqk: int, dv: int, config: AttentionConfig,
              check: bool | None = None) -> Launcher:
    """The launch plan of one kernel for one head shape, dtype, mask and tiles (check: the
    forward's CHECK; None for the backward kernels, which have none)."""
    meta = dict(CAUSAL=bool(causal), IEEE=dtype == torch.float32, DQK=dqk, DV=dv, BLOCK_M=config.block_m,
                BLOCK_N=config.block_n, BLOCK_DQK=_block_d(dqk), BLOCK_DV=_block_d(dv), num_warps=config.num_warps,
                num_stages=config.num_stages)
    if check is not None:
        meta["CHECK"] = check
    return Launcher(kernel, meta)


@functools.lru_cache(maxsize=None)
def _preprocess_launcher(dv: int, block_r: int) -> Launcher:
    return Launcher(_bwd_preprocess_kernel, dict(DV=dv, BLOCK_R=block_r, BLOCK_DV=_block_d(dv), num_warps=4))


def jagged_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor,
                         max_seq_len: int, causal: bool = True, scale: float | None = None,
                         config: AttentionConfig | None = None, *, errors: torch.Tensor | None = None,
                         error_op: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [total_L, H, Dv] in q's dtype, lse [H, total_L] fp32); see the module docstring.
    errors: a device error record (common.py); when given, the values of seq_offsets are checked
    by the same launch (attention_checks), a bad one recorded with `error_op`."""
    q, k, v, seq_offsets, scale = _inputs(q, k, v, seq_offsets, max_seq_len, scale)
    check_error_record(errors, q.device)
    if config is not None:
        _check_config(config)
    return forward(q, k, v, seq_offsets, max_seq_len, causal, scale, config, errors, error_op)


def forward(q, k, v, seq_offsets, max_seq_len: int, causal: bool, scale: float, config: AttentionConfig | None,
            errors, error_op: int) -> tuple[torch.Tensor, torch.Tensor]:
    """jagged_attention_fwd after its argument checks (the ops layer checks them once, itself);
    q, k, v with a unit last stride, scale a float."""
    seq_offsets = seq_offsets.contiguous()
    total, heads, dqk = q.shape
    dv = v.shape[2]
    device, dtype = q.device, q.dtype
    out = _new_output((total, heads, dv), dtype, device)
    lse = _new_output((heads, total), torch.float32, device)
    batch = seq_offsets.shape[0] - 1
    if total == 0 or batch == 0:  # no program: every row (if any) is outside
        if errors is not None:
            checks.check_values(seq_offsets, None, total, max_seq_len, error_op, errors)
        out.zero_()
        lse.zero_()
        return out, lse
    config = config or default_config(dqk, dv, dtype, "fwd")
    num_m = max(1, cdiv(max_seq_len, config.block_m))  # >= 1: the zeroing and checks need a program
    (qm, qh, _), (km, kh, _), (vm, vh, _), (om, oh, _) = q.stride(), k.stride(), v.stride(), out.stride()
    checks.launch(_launcher(_jagged_attn_fwd_kernel, causal, dtype, dqk, dv, config, errors is not None), num_m,
                  batch, heads, device, (q, k, v, seq_offsets, out, lse, errors, error_op, qm, qh, km, kh, vm, vh,
                                          om, oh, total, max_seq_len, heads, batch, num_m), (scale * LOG2E,))
    return out, lse


def jagged_attention_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor, lse: torch.Tensor, seq_offsets: torch.Tensor, max_seq_len: int,
                         causal: bool = True, scale: float | None = None, config: AttentionConfig | None = None,
                         dq_config: AttentionConfig | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) shaped and typed as q, k, v (contiguous) from the forward's out and lse.
    `config`: the dk/dv kernel's tiles (block_n k/v rows held, block_m q rows streamed);
    `dq_config`: the dq kernel's (block_m q rows held, block_n k/v rows streamed), `config` when
    only that is given; defaults from default_config."""
    q, k, v, seq_offsets, scale = _inputs(q, k, v, seq_offsets, max_seq_len, scale)
    total, heads, dqk = q.shape
    dv_dim = v.size(2)
    dtype, device = q.dtype, q.device
    grad_out = _rows(grad_out, "grad_out", dtype, device, (total, heads, dv_dim))
    out = _rows(out, "out", dtype, device, (total, heads, dv_dim))
    if (not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or tuple(lse.shape) != (heads, total)
            or lse.device != device):
        raise ValueError(f"lse must be a float32 [{heads}, {total}] tensor on {device}")
    for c in (config, dq_config):
        if c is not None:
            _check_config(c)
    return backward(grad_out, q, k, v, out, lse.contiguous(), seq_offsets, max_seq_len, causal, scale, config,
                    dq_config or config)


def backward(grad_out, q, k, v, out, lse, seq_offsets, max_seq_len: int, causal: bool, scale: float,
             config: AttentionConfig | None = None, dq_config: AttentionConfig | None = None):
    """jagged_attention_bwd after its argument checks: every tensor with a unit last stride, lse
    contiguous, scale a float; config / dq_config None for the defaults."""
    seq_offsets = seq_offsets.contiguous()
    total, heads, dqk = q.shape
    dv_dim = v.shape[2]
    device, dtype = q.device, q.dtype
    dq = _new_output(q.shape, dtype, device)
    dk = _new_output(k.shape, dtype, device)
    dv = _new_output(v.shape, dtype, device)
    batch = seq_offsets.shape[0] - 1
    if total == 0:
        return dq, dk, dv
    if batch == 0:
        for t in (dq, dk, dv):
            t.zero_()
        return dq, dk, dv
    dkdv_config = config or default_config(dqk, dv_dim, dtype, "dkdv")
    dq_config = dq_config or default_config(dqk, dv_dim, dtype, "dq")

    delta = backward_delta(grad_out, out)
    (qm, qh, _), (km, kh, _), (vm, vh, _), (gm, gh, _) = q.stride(), k.stride(), v.stride(), grad_out.stride()
    strides = (qm, qh, km, kh, vm, vh, gm, gh)
    scalars = (scale * LOG2E, scale)
    (dkm, dkh, _), (dvm, dvh, _) = dk.stride(), dv.stride()
    num_n = max(1, cdiv(max_seq_len, dkdv_config.block_n))
    checks.launch(_launcher(_jagged_attn_bwd_dkdv_kernel, causal, dtype, dqk, dv_dim, dkdv_config), num_n,
                  batch, heads, device, (q, k, v, grad_out, lse, delta, seq_offsets, dk, dv, *strides, dkm, dkh, dvm,
                                          dvh, total, max_seq_len, heads, batch, num_n), scalars)
    _launch_dq(q, k, v, grad_out, lse, delta, seq_offsets, dq, max_seq_len, causal, dq_config, strides, scalars)
    return dq, dk, dv


def backward_delta(grad_out, out) -> torch.Tensor:
    """delta [H, total_L] fp32 = rowsum(dO * O), the backward's preprocess (rows >= 1)."""
    total, heads, dv_dim = out.shape
    delta = _new_output((heads, total), torch.float32, out.device)
    block_r = 64 if _block_d(dv_dim) <= 128 else 32
    (om, oh, _), (gm, gh, _) = out.stride(), grad_out.stride()
    _preprocess_launcher(dv_dim, block_r)((cdiv(total, block_r), heads), out.device, out, grad_out, delta, om, oh,
                                          gm, gh, total)
    return delta


def _launch_dq(q, k, v, grad_out, lse, delta, seq_offsets, dq, max_seq_len, causal, config, strides, scalars):
    (total, heads, dqk), (dqm, dqh, _), batch = q.shape, dq.stride(), seq_offsets.shape[0] - 1
    num_m = max(1, cdiv(max_seq_len, config.block_m))
    checks.launch(_launcher(_jagged_attn_bwd_dq_kernel, causal, q.dtype, dqk, v.shape[2], config), num_m,
                  batch, heads, q.device, (q, k, v, grad_out, lse, delta, seq_offsets, dq, *strides, dqm, dqh, total,
                                            max_seq_len, heads, batch, num_m), scalars)


def backward_dq(grad_out, q, k, v, lse, delta, seq_offsets, max_seq_len: int, causal: bool, scale: float):
    """dq alone (the dq kernel of `backward`, default tiles) from lse and backward_delta's delta:
    the native dK / dV kernel (cuda/attention/dkdv.cu) computes dk and dv beside it. Arguments as
    `backward`'s; total_L >= 1 and B >= 1."""
    dq = _new_output(q.shape, q.dtype, q.device)
    (qm, qh, _), (km, kh, _), (vm, vh, _), (gm, gh, _) = q.stride(), k.stride(), v.stride(), grad_out.stride()
    _launch_dq(q, k, v, grad_out, lse, delta, seq_offsets.contiguous(), dq, max_seq_len, causal,
               default_config(q.shape[2], v.shape[2], q.dtype, "dq"), (qm, qh, km, kh, vm, vh, gm, gh),
               (scale * LOG2E, scale))
    return dq


class _JaggedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, seq_offsets, max_seq_len, causal, scale):
        out, lse = jagged_attention_fwd(q, k, v, seq_offsets, max_seq_len, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse, seq_offsets)
        ctx.args = (max_seq_len, causal, scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, seq_offsets = ctx.saved_tensors
        max_seq_len, causal, scale = ctx.args
        dq, dk, dv = jagged_attention_bwd(grad_out, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale)
        return dq, dk, dv, None, None, None, None


def jagged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor,
                     max_seq_len: int, causal: bool = True, scale: float | None = None) -> torch.Tensor:
    """out [total_L, H, Dv] (module docstring), differentiable in q, k and v (default tiles)."""
    return _JaggedAttention.apply(q, k, v, seq_offsets, max_seq_len, causal, scale)
