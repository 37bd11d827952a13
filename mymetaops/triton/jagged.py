"""Triton kernels of the jagged family: jagged <-> dense conversions and elementwise ops, softmax
(forward and backward), index_select (forward and backward), jagged x dense and jagged x jagged bmm.

Semantics are those of the native launchers (csrc/include/mymetaops/jagged.h), argument for
argument. One jagged dim: offsets [B + 1] (int32 or int64) delimit sequence b's rows
offsets[b] .. offsets[b + 1] of a jagged tensor of `total` rows; its dense form is
[B, max_length, D]. Position (b, j) holds row offsets[b] + j when j < min(length_b, max_length); a
jagged row at no such position (past max_length, before offsets[0], after offsets[B]) has none.
Offsets are clamped to [0, total] and an end below its start is an empty sequence, so nothing is
read or written outside the tensors, whatever the values. Arithmetic is fp32 (one rounding to the
output dtype); rows have unit column stride and any row stride; every output is written whole (the
launchers write into a preallocated, contiguous `out` and return it; index_select's backward is the
one accumulating into a zeroed `out`).

  * jagged_dense(op, ...): op as JaggedDenseOp of jagged.h:
      0 to_padded_dense: dense out = x at each position, padding_value elsewhere
      1 to_jagged:       jagged out = dense at the row's position, 0 for a row without one
      2 add_dense:       dense out = x at each position (0 elsewhere) + dense
      3 add_jagged:      jagged out = x + dense at the row's position, x for a row without one
      4 mul:             jagged out = x * dense at the row's position, 0 for a row without one
  * jagged_softmax: per sequence and column, softmax over the sequence's first min(length,
    max_length) rows; backward (grad_output given, values = the forward's output):
    out = values * (grad_output - sum over those rows of grad_output * values). Every other row of
    out is 0.
  * jagged_index_select: forward out[output_offsets[i] + j] = values[input_offsets[indices[i]] + j]
    for the rows of output sequence i that its source sequence has (0 for the others); backward
    atomically adds grad_output's rows into a float32 out the caller zeroed (a sequence selected
    twice gets both). An index outside [0, B) is recorded; its rows are 0 (forward) / skipped
    (backward).
  * jagged_dense_bmm: out[total, N]: the rows j < min(length_b, max_length) of sequence b get
    x_row @ y[b] (fp32 accumulation, one rounding); every other row of out is 0.
  * jagged_jagged_bmm: out[B, M, N] = sum over the first min(length_b, max_length) rows of
    sequence b of outer(x_row, y_row), accumulated in fp32 (a sequence without rows gets 0).
A row that bad (decreasing) offsets put in two sequences gets either one's value.

Error record (`errors`, the DeviceErrorRecord of csrc/include/mymetaops/errors.h, optional): every
offsets value is checked whenever a record is given, whatever B, D or max_length: offsets[b] < 0
(NEGATIVE_OFFSET), offsets[b] < offsets[b - 1] (DECREASING_OFFSET), offsets[b] > total
(OFFSET_PAST_END, bound = total); the position is b, the first bad one of the entries a program
checks (programs race: first record wins). jagged_index_select checks every index instead
(INDEX_OUT_OF_RANGE, bound = B); the glue builds its offsets. ErrorOp: 4 to_padded_dense,
5 to_jagged, 6 the elementwise ops (2, 3, 4), 7 softmax (both directions), 8 index_select (both),
9 both bmm.

Kernel shapes. Memory-bound kernels (`mymetaops.configs.TritonJaggedConfig`): a program moves a
[block_rows, block_d] tile; grid dim 1 = cdiv(D, block_d) column blocks.
  * dense outputs (ops 0, 2): grid dim 0 over tiles of block_rows consecutive flat positions
    (b * max_length + j); each position loads its sequence's two offsets (cached gathers).
  * jagged outputs (ops 1, 3, 4) and index_select: grid dim 0 over tiles of block_rows rows; each
    row finds its sequence by a vectorized binary search of the offsets (ceil(log2(B + 2)) steps
    of block_rows cached gathers).
  * softmax: one program per (sequence, column block), looping over the sequence's rows in
    block_rows steps: an online max / sum pass (reduced over the rows every step), then a write
    pass (backward: a sum pass, then a write pass). Program 0 also zeroes the rows before
    offsets[0], the last one the rows from offsets[B] on.
  Where a record is given, grid dim 0 has at least cdiv(B + 1, block_rows) programs (cdiv(indices,
  block_rows) for index_select) and program i of column block 0 checks entries
  [i * block_rows, (i + 1) * block_rows); the softmax program b checks entries b (and B when last).
  Grid dim 0 is launched in chunks where it would exceed what the runtime accepts.
bmm kernels (`mymetaops.configs.TritonGemmConfig`; block_k is the reduction step: K for
jagged_dense_bmm, the sequence's rows for jagged_jagged_bmm): tiles (b, m tile, n tile), b major,
grouped order (group_m) within a sequence, over max(B, 1) sequences x max(1, cdiv(max_length or M,
block_m)) x max(1, cdiv(N, block_n)). persistent=0: one program per tile; persistent=1:
min(tiles, SMs/CUs) programs loop over tiles (tile = pid, pid + P, ...; the interpreter's "SM
count" is 4). In jagged_dense_bmm a tile past its sequence's min(length, max_length) rows exits
early; the m-tile-0 tiles of sequence b write zeros to its rows past max_length (looping
block_m rows at a time), those of sequence 0 to the rows before offsets[0], those of the last
sequence to the rows from offsets[B] on. fp32 operands use tl.dot's "ieee" precision (no TF32).
jagged_dense_bmm wraps a tile's rows past the sequence's end onto its rows (results never
stored), so x is masked along K only; columns are masked (a wrap would hide their contiguity).

Valid configs (anything else raises ValueError):
  * TritonJaggedConfig: block_rows and block_d powers of two in [1, 1024], block_rows * block_d
    <= 16384, num_warps 1, 2, 4, 8 or 16.
  * TritonGemmConfig: block_m, block_n powers of two in [16, 256]; block_k a power of two in
    [16, 128]; group_m >= 1; num_warps 1..16 (power of two); num_stages >= 1; persistent 0 or 1.
Suggested configs (unmeasured on a GPU so far; each compiles for its vendor's targets, see
scripts/check_triton_targets.py): JAGGED_CONFIGS_NVIDIA / _AMD and BMM_CONFIGS_NVIDIA / _AMD. The
bmm ones are for bf16 / fp16 operands (MFMA / wgmma or mma.sync, no spills on Triton 3.6 and 3.8).
fp32 operands (the "ieee" FMA path, e.g. the interpreter tests) spill with 64x128 and larger tiles
(gfx942 / gfx950 scratch, sm_90 stack): give them tiles of at most 64x64 (64x64x64, 32x64x64,
16x64x128 compile spill-free on every target there, but for 32x64x64 on sm_90 with Triton 3.8:
16 bytes of stack).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from mymetaops.configs import TritonGemmConfig, TritonJaggedConfig
from mymetaops.triton import gemm as gemm_kernels
from mymetaops.triton.common import (INDEX_OUT_OF_RANGE, OFFSET_PAST_END, check_error_record, grid_chunks, is_pow2,
                                     offset_error, record_error)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
INTERPRETER_SMS = 4  # "SM count" for CPU tensors (interpreter): small, so persistent loops iterate

# JaggedDenseOp of jagged.h.
TO_PADDED_DENSE, TO_JAGGED, ADD_DENSE, ADD_JAGGED, MUL = range(5)
DENSE_OUTPUT_OPS = (TO_PADDED_DENSE, ADD_DENSE)
# ErrorOp of errors.h.
OP_TO_PADDED_DENSE = 4
OP_DENSE_TO_JAGGED = 5
OP_ELEMENTWISE = 6
OP_SOFTMAX = tl.constexpr(7)
OP_INDEX_SELECT = tl.constexpr(8)
OP_BMM = tl.constexpr(9)
ERROR_OP_OF = {TO_PADDED_DENSE: OP_TO_PADDED_DENSE, TO_JAGGED: OP_DENSE_TO_JAGGED, ADD_DENSE: OP_ELEMENTWISE,
               ADD_JAGGED: OP_ELEMENTWISE, MUL: OP_ELEMENTWISE}

_J = TritonJaggedConfig
# Memory-bound kernels. A [block_rows, block_d] tile of 2-8K elements per program; block_d about
# D (D = 1, 1-D values, gets a column of 1024 rows). NVIDIA: 32-lane warps.
JAGGED_CONFIGS_NVIDIA = [
    _J(32, 128, 4),  # D 65..128 (and a column block of larger D)
    _J(16, 256, 4),  # D 129..256
    _J(8, 512, 8),  # D > 256
    _J(64, 32, 2),  # D 17..32
    _J(256, 8, 2),  # D 2..8
    _J(1024, 1, 4),  # D 1
]
# AMD: 64-lane wavefronts, so the same tiles with as many or fewer wavefronts.
JAGGED_CONFIGS_AMD = [
    _J(32, 128, 4),
    _J(16, 256, 4),
    _J(8, 512, 8),
    _J(64, 32, 1),
    _J(256, 8, 2),
    _J(1024, 1, 4),
]
_G = TritonGemmConfig
# bmm: the tile rows are sequence rows (jagged_dense_bmm) or x's columns (jagged_jagged_bmm).
# Short sequences favour short tiles (fewer wasted rows); persistent ones skip empty tiles cheaply.
BMM_CONFIGS_NVIDIA = [
    _G(128, 128, 64, 8, 8, 3, 0),  # long sequences, large K / N
    _G(64, 128, 64, 8, 4, 3, 0),  # medium
    _G(64, 64, 64, 4, 4, 3, 0),  # small N / M
    _G(32, 64, 64, 1, 4, 3, 0),  # short sequences
    _G(16, 64, 128, 1, 4, 3, 0),  # very short sequences, deep K steps
    _G(64, 128, 64, 8, 4, 3, 1),  # persistent: many empty tiles (max_length >> typical length)
]
# AMD (gfx942 64 KB / gfx950 160 KB LDS; the stream pipeliner wants num_stages 2).
BMM_CONFIGS_AMD = [
    _G(128, 128, 64, 8, 8, 2, 0),
    _G(64, 128, 64, 8, 4, 2, 0),
    _G(64, 64, 64, 4, 4, 2, 0),
    _G(32, 64, 64, 1, 4, 2, 0),
    _G(16, 64, 128, 1, 4, 2, 0),
    _G(64, 128, 64, 8, 4, 2, 1),
]
del _J, _G


# ---------------------------------------------------------------- shared device helpers


@triton.jit
def _clamp(value, total):
    return tl.minimum(tl.maximum(value, 0), total)


@triton.jit
def _check_offsets(errors_ptr, OP: tl.constexpr, offsets_ptr, first, end, total, BLOCK: tl.constexpr):
    """Record the first bad entry of offsets[first .. min(first + BLOCK, end)), if any."""
    i = first + tl.arange(0, BLOCK).to(tl.int64)
    inside = i < end
    value = tl.load(offsets_ptr + i, mask=inside, other=0).to(tl.int64)
    prev = tl.load(offsets_ptr + i - 1, mask=inside & (i > 0), other=0).to(tl.int64)
    prev = tl.where(i > 0, prev, value)  # offsets[0] has no predecessor
    code = tl.where(inside, offset_error(value, prev, total), 0)
    if tl.max(code) != 0:
        position = tl.min(tl.where(code != 0, i, first + BLOCK))
        at = i == position
        first_code = tl.sum(tl.where(at, code, 0))
        bound = tl.where(first_code == OFFSET_PAST_END, total, 0).to(tl.int64)
        record_error(errors_ptr, first_code, OP, position, tl.sum(tl.where(at, value, 0)), bound)


@triton.jit
def _find_sequence(offsets_ptr, rows, num_offsets, total, steps):
    """Per row, the last b in [0, num_offsets) whose clamped offset is <= row (-1 if none): the row's
    sequence when offsets are sorted, a candidate to verify otherwise. A binary search of `steps`
    (= num_offsets.bit_length()) vectorized steps."""
    lo = tl.zeros_like(rows)
    hi = lo + num_offsets
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        value = _clamp(tl.load(offsets_ptr + mid, mask=active, other=0).to(tl.int64), total)
        right = active & (value <= rows)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    return lo - 1


@triton.jit
def _zero_rows(out_ptr, lo, hi, dim, cols, col_mask, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[lo .. hi, cols] = 0 (out contiguous, `dim` columns)."""
    zeros = tl.zeros([BLOCK_ROWS, BLOCK_D], dtype=out_ptr.dtype.element_ty)
    for r0 in range(lo, hi, BLOCK_ROWS):
        rows = r0 + tl.arange(0, BLOCK_ROWS).to(tl.int64)
        tl.store(out_ptr + rows[:, None] * dim + cols[None, :], zeros,
                 mask=(rows < hi)[:, None] & col_mask[None, :])


# ---------------------------------------------------------------- jagged <-> dense


@triton.jit
def _dense_output_kernel(
    x_ptr, offsets_ptr, dense_ptr, out_ptr, errors_ptr,
    batch, max_length, num_positions, total, dim, num_offsets, x_row_stride, dense_batch_stride, dense_row_stride,
    padding_value, program_base,
    OP: tl.constexpr, ERROR_OP: tl.constexpr, HAS_ERRORS: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Ops 0 and 2: out [batch, max_length, dim] walked by flat position."""
    tile = program_base + tl.program_id(0).to(tl.int64)
    pos = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_range = pos < num_positions
    b = pos // tl.maximum(max_length, 1)
    j = pos - b * max_length
    start = _clamp(tl.load(offsets_ptr + b, mask=in_range, other=0).to(tl.int64), total)
    end = _clamp(tl.load(offsets_ptr + b + 1, mask=in_range, other=0).to(tl.int64), total)
    has_row = in_range & (j < end - start)
    row = start + j
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    x = tl.load(x_ptr + row[:, None] * x_row_stride + cols[None, :], mask=has_row[:, None] & col_mask[None, :],
                other=0.0).to(tl.float32)
    if OP == 0:
        res = tl.where(has_row[:, None], x, padding_value)
    else:
        d = tl.load(dense_ptr + b[:, None] * dense_batch_stride + j[:, None] * dense_row_stride + cols[None, :],
                    mask=in_range[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        res = tl.where(has_row[:, None], x + d, d)
    tl.store(out_ptr + pos[:, None] * dim + cols[None, :], res.to(out_ptr.dtype.element_ty),
             mask=in_range[:, None] & col_mask[None, :])
    if HAS_ERRORS:
        if tl.program_id(1) == 0:
            _check_offsets(errors_ptr, ERROR_OP, offsets_ptr, tile * BLOCK_ROWS, num_offsets, total, BLOCK_ROWS)


@triton.jit
def _jagged_output_kernel(
    x_ptr, offsets_ptr, dense_ptr, out_ptr, errors_ptr,
    batch, max_length, total, dim, num_offsets, search_steps, x_row_stride, dense_batch_stride, dense_row_stride,
    program_base,
    OP: tl.constexpr, ERROR_OP: tl.constexpr, HAS_ERRORS: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Ops 1, 3 and 4: out [total, dim] walked by row."""
    tile = program_base + tl.program_id(0).to(tl.int64)
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_range = rows < total
    b = _find_sequence(offsets_ptr, rows, num_offsets, total, search_steps)
    has_seq = in_range & (b >= 0) & (b < batch)
    start = _clamp(tl.load(offsets_ptr + b, mask=has_seq, other=0).to(tl.int64), total)
    end = _clamp(tl.load(offsets_ptr + b + 1, mask=has_seq, other=0).to(tl.int64), total)
    j = rows - start
    has_pos = has_seq & (rows < end) & (j < max_length)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    d = tl.load(dense_ptr + b[:, None] * dense_batch_stride + j[:, None] * dense_row_stride + cols[None, :],
                mask=has_pos[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
    if OP == 1:
        res = d  # 0 where there is no position
    else:
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=in_range[:, None] & col_mask[None, :],
                    other=0.0).to(tl.float32)
        if OP == 3:
            res = tl.where(has_pos[:, None], x + d, x)
        else:
            res = tl.where(has_pos[:, None], x * d, 0.0)
    tl.store(out_ptr + rows[:, None] * dim + cols[None, :], res.to(out_ptr.dtype.element_ty),
             mask=in_range[:, None] & col_mask[None, :])
    if HAS_ERRORS:
        if tl.program_id(1) == 0:
            _check_offsets(errors_ptr, ERROR_OP, offsets_ptr, tile * BLOCK_ROWS, num_offsets, total, BLOCK_ROWS)


# ---------------------------------------------------------------- softmax


@triton.jit
def _softmax_kernel(
    values_ptr, grad_ptr, offsets_ptr, out_ptr, errors_ptr,
    batch, max_length, total, dim, num_offsets, values_row_stride, grad_row_stride, program_base, last_program,
    BACKWARD: tl.constexpr, HAS_ERRORS: tl.constexpr, REDUCE_EACH_STEP: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (sequence b, column block); with batch 0 one program zeroes every row."""
    b = program_base + tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    offs_r = tl.arange(0, BLOCK_ROWS)
    start = _clamp(tl.load(offsets_ptr + b).to(tl.int64), total)
    if b == 0:
        _zero_rows(out_ptr, 0, start, dim, cols, col_mask, BLOCK_ROWS, BLOCK_D)
    if b == last_program:
        _zero_rows(out_ptr, _clamp(tl.load(offsets_ptr + batch).to(tl.int64), total), total, dim, cols, col_mask,
                   BLOCK_ROWS, BLOCK_D)
    if b < batch:
        end = _clamp(tl.load(offsets_ptr + b + 1).to(tl.int64), total)
        stop = start + tl.minimum(tl.maximum(end - start, 0), max_length)
        if BACKWARD:
            # dot = sum over the rows of grad * y (a tile-shaped accumulator with several warps: the
            # rows are split across warps, so reduce once at the end).
            if REDUCE_EACH_STEP:
                acc = tl.zeros([BLOCK_D], dtype=tl.float32)
            else:
                acc = tl.zeros([BLOCK_ROWS, BLOCK_D], dtype=tl.float32)
            for r0 in range(start, stop, BLOCK_ROWS):
                rows = r0 + offs_r
                mask = (rows < stop)[:, None] & col_mask[None, :]
                y = tl.load(values_ptr + rows[:, None] * values_row_stride + cols[None, :], mask=mask, other=0.0)
                g = tl.load(grad_ptr + rows[:, None] * grad_row_stride + cols[None, :], mask=mask, other=0.0)
                if REDUCE_EACH_STEP:
                    acc += tl.sum(y.to(tl.float32) * g.to(tl.float32), axis=0)
                else:
                    acc += y.to(tl.float32) * g.to(tl.float32)
            if REDUCE_EACH_STEP:
                dot = acc
            else:
                dot = tl.sum(acc, axis=0)
            for r0 in range(start, end, BLOCK_ROWS):
                rows = r0 + offs_r
                live = rows < stop
                mask = live[:, None] & col_mask[None, :]
                y = tl.load(values_ptr + rows[:, None] * values_row_stride + cols[None, :], mask=mask,
                            other=0.0).to(tl.float32)
                g = tl.load(grad_ptr + rows[:, None] * grad_row_stride + cols[None, :], mask=mask,
                            other=0.0).to(tl.float32)
                res = tl.where(live[:, None], y * (g - dot[None, :]), 0.0)
                tl.store(out_ptr + rows[:, None] * dim + cols[None, :], res.to(out_ptr.dtype.element_ty),
                         mask=(rows < end)[:, None] & col_mask[None, :])
        else:
            top = tl.full([BLOCK_D], float("-inf"), tl.float32)
            total_exp = tl.zeros([BLOCK_D], dtype=tl.float32)
            for r0 in range(start, stop, BLOCK_ROWS):
                rows = r0 + offs_r
                mask = (rows < stop)[:, None] & col_mask[None, :]
                v = tl.load(values_ptr + rows[:, None] * values_row_stride + cols[None, :], mask=mask,
                            other=float("-inf")).to(tl.float32)
                new_top = tl.maximum(top, tl.max(v, axis=0))
                # A column all -inf so far: shift by 0, so that exp(-inf - shift) = 0, not NaN.
                shift = tl.where(new_top == float("-inf"), 0.0, new_top)
                total_exp = total_exp * tl.exp(top - shift) + tl.sum(tl.exp(v - shift[None, :]), axis=0)
                top = new_top
            shift = tl.where(top == float("-inf"), 0.0, top)
            total_exp = tl.where(col_mask, total_exp, 1.0)  # columns past dim: no 0 / 0
            for r0 in range(start, end, BLOCK_ROWS):
                rows = r0 + offs_r
                live = rows < stop
                v = tl.load(values_ptr + rows[:, None] * values_row_stride + cols[None, :],
                            mask=live[:, None] & col_mask[None, :], other=float("-inf")).to(tl.float32)
                res = tl.where(live[:, None], tl.exp(v - shift[None, :]) / total_exp[None, :], 0.0)
                tl.store(out_ptr + rows[:, None] * dim + cols[None, :], res.to(out_ptr.dtype.element_ty),
                         mask=(rows < end)[:, None] & col_mask[None, :])
    if HAS_ERRORS:
        if tl.program_id(1) == 0:  # entry b, and the last program entry batch too
            _check_offsets(errors_ptr, OP_SOFTMAX, offsets_ptr, b, tl.where(b == last_program, num_offsets, b + 1),
                           total, 2)


# ---------------------------------------------------------------- index_select


@triton.jit
def _index_select_kernel(
    values_ptr, input_offsets_ptr, output_offsets_ptr, indices_ptr, out_ptr, errors_ptr,
    dim, values_row_stride, num_indices, batch, num_input_rows, num_output_rows, search_steps, program_base,
    BACKWARD: tl.constexpr, HAS_ERRORS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Programs over output rows (forward: rows of out; backward: rows of grad_output)."""
    tile = program_base + tl.program_id(0).to(tl.int64)
    if HAS_ERRORS:  # first: nothing of the main path is live across it
        if tl.program_id(1) == 0:
            k = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            inside = k < num_indices
            value = tl.load(indices_ptr + k, mask=inside, other=0).to(tl.int64)
            bad = inside & ((value < 0) | (value >= batch))
            if tl.max(bad.to(tl.int32)) != 0:
                position = tl.min(tl.where(bad, k, k + BLOCK_ROWS))
                record_error(errors_ptr, INDEX_OUT_OF_RANGE, OP_INDEX_SELECT, position,
                             tl.sum(tl.where(k == position, value, 0)), batch)
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_range = rows < num_output_rows
    i = _find_sequence(output_offsets_ptr, rows, num_indices + 1, num_output_rows, search_steps)
    has_seq = in_range & (i >= 0) & (i < num_indices)
    out_start = _clamp(tl.load(output_offsets_ptr + i, mask=has_seq, other=0).to(tl.int64), num_output_rows)
    out_end = _clamp(tl.load(output_offsets_ptr + i + 1, mask=has_seq, other=0).to(tl.int64), num_output_rows)
    index = tl.load(indices_ptr + i, mask=has_seq, other=0).to(tl.int64)
    good = has_seq & (rows < out_end) & (index >= 0) & (index < batch)
    src_start = _clamp(tl.load(input_offsets_ptr + index, mask=good, other=0).to(tl.int64), num_input_rows)
    src_end = _clamp(tl.load(input_offsets_ptr + index + 1, mask=good, other=0).to(tl.int64), num_input_rows)
    src = src_start + (rows - out_start)
    valid = good & (src < src_end)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    mask = valid[:, None] & col_mask[None, :]
    if BACKWARD:
        g = tl.load(values_ptr + rows[:, None] * values_row_stride + cols[None, :], mask=mask, other=0.0)
        tl.atomic_add(out_ptr + src[:, None] * dim + cols[None, :], g.to(tl.float32), mask=mask, sem="relaxed")
    else:
        v = tl.load(values_ptr + src[:, None] * values_row_stride + cols[None, :], mask=mask, other=0.0)
        tl.store(out_ptr + rows[:, None] * dim + cols[None, :], v, mask=in_range[:, None] & col_mask[None, :])


# ---------------------------------------------------------------- bmm


@triton.jit
def _bmm_tile(tile, m_tiles, n_tiles, GROUP_M: tl.constexpr):
    """(b, pid_m, pid_n) of a linear tile index: sequence-major, grouped order within a sequence."""
    per_sequence = m_tiles * n_tiles
    b = tile // per_sequence
    t = tile - b * per_sequence
    tiles_per_group = GROUP_M * n_tiles
    group = t // tiles_per_group
    first_m = group * GROUP_M
    group_m = tl.minimum(m_tiles - first_m, GROUP_M)
    in_group = t - group * tiles_per_group
    return b.to(tl.int64), first_m + in_group % group_m, in_group // group_m


@triton.jit
def _sequence_bounds(offsets_ptr, b, batch, total):
    """Clamped (start, end) of sequence b; (start, start) for b >= batch (the one tile set of batch 0)."""
    start = _clamp(tl.load(offsets_ptr + b).to(tl.int64), total)
    end = _clamp(tl.load(offsets_ptr + b + 1, mask=b < batch, other=0).to(tl.int64), total)
    return start, tl.where(b < batch, end, start)


@triton.jit
def _jagged_dense_bmm_kernel(
    x_ptr, y_ptr, offsets_ptr, out_ptr, errors_ptr,
    batch, max_length, total, K, N, num_offsets, m_tiles, n_tiles, num_tiles, tile_base, tile_step,
    last_sequence, stride_xm, stride_xk, stride_yb, stride_yk, stride_yn,
    HAS_ERRORS: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """out [total, N] (contiguous) = x [total, K] @ y [batch, K, N] per sequence."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
    a_step = tl.full((), BLOCK_K, tl.int64) * stride_xk
    b_step = tl.full((), BLOCK_K, tl.int64) * stride_yk
    for tile in range(tile_base + tl.program_id(0), num_tiles, tile_step):
        b, pid_m, pid_n = _bmm_tile(tile, m_tiles, n_tiles, GROUP_M)
        start, end = _sequence_bounds(offsets_ptr, b, batch, total)
        n = tl.minimum(tl.maximum(end - start, 0), max_length)
        cols = pid_n * BLOCK_N + offs_n
        col_mask = cols < N
        if pid_m * BLOCK_M < n:
            rows = pid_m * BLOCK_M + offs_m
            # Edge rows wrap onto the sequence's rows (never stored), so x's loads are masked along K
            # only; y's columns are masked (a wrap there would hide their contiguity: one 64-bit
            # pointer per element instead of per vector, hundreds of registers).
            a_rows = start + rows % n
            a_ptrs = x_ptr + a_rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
            b_ptrs = y_ptr + b * stride_yb + offs_k[:, None] * stride_yk + cols.to(tl.int64)[None, :] * stride_yn
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                if EVEN_K:
                    a = tl.load(a_ptrs)
                    w = tl.load(b_ptrs, mask=col_mask[None, :], other=0.0)
                else:
                    k_left = K - k0
                    a = tl.load(a_ptrs, mask=(offs_k < k_left)[None, :], other=0.0)
                    w = tl.load(b_ptrs, mask=(offs_k < k_left)[:, None] & col_mask[None, :], other=0.0)
                if IEEE:
                    acc = tl.dot(a, w, acc, input_precision="ieee")
                else:
                    acc = tl.dot(a, w, acc)
                a_ptrs += a_step
                b_ptrs += b_step
            out_rows = start + rows
            tl.store(out_ptr + out_rows[:, None] * N + cols[None, :], acc.to(out_ptr.dtype.element_ty),
                     mask=(rows < n)[:, None] & col_mask[None, :])
        if pid_m == 0:
            # Rows with no product: past max_length, before offsets[0], from offsets[batch] on.
            _zero_rows(out_ptr, start + n, end, N, cols, col_mask, BLOCK_M, BLOCK_N)
            if b == 0:
                _zero_rows(out_ptr, 0, start, N, cols, col_mask, BLOCK_M, BLOCK_N)
            if b == last_sequence:
                _zero_rows(out_ptr, _clamp(tl.load(offsets_ptr + batch).to(tl.int64), total), total, N, cols,
                           col_mask, BLOCK_M, BLOCK_N)
            if HAS_ERRORS:
                if pid_n == 0:
                    _check_offsets(errors_ptr, OP_BMM, offsets_ptr, b,
                                   tl.where(b == last_sequence, num_offsets, b + 1), total, 2)


@triton.jit
def _jagged_jagged_bmm_kernel(
    x_ptr, y_ptr, offsets_ptr, out_ptr, errors_ptr,
    batch, max_length, total, M, N, num_offsets, m_tiles, n_tiles, num_tiles, tile_base, tile_step,
    last_sequence, stride_xr, stride_xm, stride_yr, stride_yn,
    HAS_ERRORS: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """out [batch, M, N] (contiguous) = x_b^T [M, rows] @ y_b [rows, N] per sequence."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(tile_base + tl.program_id(0), num_tiles, tile_step):
        b, pid_m, pid_n = _bmm_tile(tile, m_tiles, n_tiles, GROUP_M)
        start, end = _sequence_bounds(offsets_ptr, b, batch, total)
        n = tl.minimum(tl.maximum(end - start, 0), max_length)
        m_idx = pid_m * BLOCK_M + offs_m
        n_idx = pid_n * BLOCK_N + offs_n
        # Masks, not a wrap onto valid columns: a wrap would hide the columns' contiguity (one 64-bit
        # pointer per element instead of per vector: spills on sm_90).
        m_mask = (m_idx < M)[None, :]
        n_mask = (n_idx < N)[None, :]
        x_cols = m_idx.to(tl.int64)[None, :] * stride_xm
        y_cols = n_idx.to(tl.int64)[None, :] * stride_yn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, n, BLOCK_K):
            r = k0 + offs_k
            rows = start + r
            live = (r < n)[:, None]
            a = tl.load(x_ptr + rows[:, None] * stride_xr + x_cols, mask=live & m_mask, other=0.0)
            w = tl.load(y_ptr + rows[:, None] * stride_yr + y_cols, mask=live & n_mask, other=0.0)
            if IEEE:
                acc = tl.dot(tl.trans(a), w, acc, input_precision="ieee")
            else:
                acc = tl.dot(tl.trans(a), w, acc)
        if b < batch:
            tl.store(out_ptr + b * M * N + m_idx.to(tl.int64)[:, None] * N + n_idx[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=(m_idx < M)[:, None] & (n_idx < N)[None, :])
        if HAS_ERRORS:
            if (pid_m == 0) & (pid_n == 0):
                _check_offsets(errors_ptr, OP_BMM, offsets_ptr, b, tl.where(b == last_sequence, num_offsets, b + 1),
                               total, 2)


# ---------------------------------------------------------------- argument checks


def validate_config(config: TritonJaggedConfig) -> None:
    """Raise ValueError unless `config` is a valid TritonJaggedConfig (module docstring)."""
    if not isinstance(config, TritonJaggedConfig):
        raise ValueError(f"config must be a TritonJaggedConfig, got {type(config).__name__}")
    if not (is_pow2(config.block_rows) and config.block_rows <= 1024):
        raise ValueError(f"block_rows must be a power of two in [1, 1024], got {config.block_rows}")
    if not (is_pow2(config.block_d) and config.block_d <= 1024):
        raise ValueError(f"block_d must be a power of two in [1, 1024], got {config.block_d}")
    if config.block_rows * config.block_d > 16384:
        raise ValueError(f"block_rows * block_d must be <= 16384, got {config.block_rows} * {config.block_d}")
    if config.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps}")


def validate_bmm_config(config: TritonGemmConfig) -> None:
    """Raise ValueError unless `config` is a valid TritonGemmConfig for the bmm kernels: the rules
    of the 16-bit GEMM kernel's configs (mymetaops/triton/gemm.py)."""
    if not isinstance(config, TritonGemmConfig):
        raise ValueError(f"config must be a TritonGemmConfig, got {type(config).__name__}")
    gemm_kernels.validate_config(config, fp8=False)


def _check_index_tensor(t: torch.Tensor, name: str, device: torch.device, min_numel: int = 0) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must be a 1-D int32/int64 tensor, got "
                         f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
    if t.numel() < min_numel:
        raise ValueError(f"{name} needs at least {min_numel} entries, got {t.numel()}")
    if t.numel() > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def _check_rows(t: torch.Tensor, name: str, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    """A [..., D] input: the given shape, dtype and device, unit column stride."""
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise ValueError(f"{name} must be {list(shape)} {dtype}, got "
                         f"{tuple(getattr(t, 'shape', ()))} {getattr(t, 'dtype', type(t).__name__)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have unit column stride, got strides {t.stride()}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def _check_out(out: torch.Tensor, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) or out.dtype != dtype \
            or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {list(shape)} {dtype} tensor, got "
                         f"{tuple(getattr(out, 'shape', ()))} {getattr(out, 'dtype', type(out).__name__)}")
    if out.device != device:
        raise ValueError(f"out must be on {device}, got {out.device}")


def _check_float(t: torch.Tensor, name: str, dims: int) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != dims or t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be a {dims}-D fp32/fp16/bf16 tensor, got "
                         f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")


def _check_max_length(max_length) -> int:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
        raise ValueError(f"max_length must be an int >= 0, got {max_length!r}")
    return max_length


@functools.lru_cache(maxsize=None)
def _sm_count(device_type: str, index: int) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(index).multi_processor_count
    return INTERPRETER_SMS


def _device_index(device: torch.device) -> int:
    if device.index is not None or device.type != "cuda":
        return device.index or 0
    return torch.cuda.current_device()


# ---------------------------------------------------------------- launchers


def jagged_dense(op: int, x: torch.Tensor | None, offsets: torch.Tensor, dense: torch.Tensor | None,
                 out: torch.Tensor, max_length: int, padding_value: float, config: TritonJaggedConfig,
                 errors: torch.Tensor | None = None) -> torch.Tensor:
    """JaggedDenseOp `op` (module docstring) written into `out`, which is returned. x [total, D]
    (None for op 1), dense [B, max_length, D] (None for op 0); out [B, max_length, D] (ops 0, 2) or
    [total, D] (ops 1, 3, 4), contiguous, in the inputs' dtype."""
    validate_config(config)
    if op not in ERROR_OP_OF:
        raise ValueError(f"op must be a JaggedDenseOp 0..4, got {op!r}")
    max_length = _check_max_length(max_length)
    if (x is None) != (op == TO_JAGGED) or (dense is None) != (op == TO_PADDED_DENSE):
        raise ValueError(f"op {op}: x must be {'None' if op == TO_JAGGED else 'given'} and dense "
                         f"{'None' if op == TO_PADDED_DENSE else 'given'}")
    if x is not None:
        _check_float(x, "x", 2)
    if dense is not None:
        _check_float(dense, "dense", 3)
    source = x if x is not None else dense
    dtype, device = source.dtype, source.device
    _check_index_tensor(offsets, "offsets", device, min_numel=1)
    batch = offsets.numel() - 1
    dim = source.size(-1)
    if op == TO_JAGGED:
        if not isinstance(out, torch.Tensor) or out.dim() != 2:
            raise ValueError("out must be a 2-D [total, D] tensor for op 1 (to_jagged)")
        total = out.size(0)
    else:
        total = x.size(0)
        _check_rows(x, "x", (total, dim), dtype, device)
    if dense is not None:
        _check_rows(dense, "dense", (batch, max_length, dim), dtype, device)
    dense_out = op in DENSE_OUTPUT_OPS
    _check_out(out, (batch, max_length, dim) if dense_out else (total, dim), dtype, device)
    check_error_record(errors, device)
    if out.numel() == 0 and errors is None:
        return out

    rows = batch * max_length if dense_out else total
    tiles = triton.cdiv(rows, config.block_rows)
    if errors is not None:  # enough programs to check every offsets entry
        tiles = max(tiles, triton.cdiv(batch + 1, config.block_rows))
    column_blocks = max(1, triton.cdiv(dim, config.block_d))
    x_stride = x.stride(0) if x is not None else 0
    dense_strides = (dense.stride(0), dense.stride(1)) if dense is not None else (0, 0)
    common = dict(OP=op, ERROR_OP=ERROR_OP_OF[op], HAS_ERRORS=errors is not None, BLOCK_ROWS=config.block_rows,
                  BLOCK_D=config.block_d, num_warps=config.num_warps)
    for base, n in grid_chunks(tiles, device, config.num_warps):
        if dense_out:
            _dense_output_kernel[(n, column_blocks)](
                x, offsets, dense, out, errors,
                batch, max_length, rows, total, dim, offsets.numel(), x_stride, *dense_strides,
                float(padding_value), base, **common)
        else:
            _jagged_output_kernel[(n, column_blocks)](
                x, offsets, dense, out, errors,
                batch, max_length, total, dim, offsets.numel(), offsets.numel().bit_length(), x_stride,
                *dense_strides, base, **common)
    return out


def jagged_softmax(values: torch.Tensor, offsets: torch.Tensor, max_length: int, out: torch.Tensor,
                   config: TritonJaggedConfig, grad_output: torch.Tensor | None = None,
                   errors: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax per sequence and column over its first min(length, max_length) rows (0 elsewhere),
    or with grad_output its backward (values = the forward's output), written into `out` [total, D]
    (contiguous, values' dtype), which is returned."""
    validate_config(config)
    max_length = _check_max_length(max_length)
    _check_float(values, "values", 2)
    dtype, device = values.dtype, values.device
    total, dim = values.shape
    _check_rows(values, "values", (total, dim), dtype, device)
    if grad_output is not None:
        _check_float(grad_output, "grad_output", 2)
        _check_rows(grad_output, "grad_output", (total, dim), dtype, device)
    _check_index_tensor(offsets, "offsets", device, min_numel=1)
    _check_out(out, (total, dim), dtype, device)
    check_error_record(errors, device)
    if out.numel() == 0 and errors is None:
        return out
    batch = offsets.numel() - 1
    programs = max(batch, 1)  # with no sequence, one program zeroes every row
    for base, n in grid_chunks(programs, device, config.num_warps):
        _softmax_kernel[(n, max(1, triton.cdiv(dim, config.block_d)))](
            values, grad_output, offsets, out, errors,
            batch, max_length, total, dim, offsets.numel(), values.stride(0),
            grad_output.stride(0) if grad_output is not None else 0, base, programs - 1,
            BACKWARD=grad_output is not None, HAS_ERRORS=errors is not None,
            REDUCE_EACH_STEP=config.num_warps == 1, BLOCK_ROWS=config.block_rows, BLOCK_D=config.block_d,
            num_warps=config.num_warps)
    return out


def jagged_index_select(values: torch.Tensor, input_offsets: torch.Tensor, output_offsets: torch.Tensor,
                        indices: torch.Tensor, out: torch.Tensor, backward: bool, config: TritonJaggedConfig,
                        errors: torch.Tensor | None = None) -> torch.Tensor:
    """launch_jagged_index_select of jagged.h. Forward: values [num_input_rows, D], out
    [num_output_rows, D] in values' dtype (every row written). Backward: values is grad_output
    [num_output_rows, D], out a float32 [num_input_rows, D] accumulator the caller zeroed.
    input_offsets [B + 1], output_offsets [num_indices + 1], indices [num_indices]."""
    validate_config(config)
    if not isinstance(backward, bool):
        raise ValueError(f"backward must be a bool, got {backward!r}")
    _check_float(values, "values", 2)
    dtype, device = values.dtype, values.device
    dim = values.size(1)
    _check_rows(values, "values", tuple(values.shape), dtype, device)
    _check_index_tensor(input_offsets, "input_offsets", device, min_numel=1)
    _check_index_tensor(indices, "indices", device)
    _check_index_tensor(output_offsets, "output_offsets", device, min_numel=indices.numel() + 1)
    if output_offsets.numel() != indices.numel() + 1:
        raise ValueError(f"output_offsets must have num_indices + 1 = {indices.numel() + 1} entries, "
                         f"got {output_offsets.numel()}")
    if not isinstance(out, torch.Tensor) or out.dim() != 2:
        raise ValueError("out must be a 2-D tensor")
    if backward:
        num_output_rows, num_input_rows = values.size(0), out.size(0)
        _check_out(out, (num_input_rows, dim), torch.float32, device)
    else:
        num_input_rows, num_output_rows = values.size(0), out.size(0)
        _check_out(out, (num_output_rows, dim), dtype, device)
    check_error_record(errors, device)
    num_indices = indices.numel()
    if errors is None and (dim == 0 or num_output_rows == 0):
        return out
    tiles = triton.cdiv(num_output_rows, config.block_rows)
    if errors is not None:  # enough programs to check every index
        tiles = max(tiles, triton.cdiv(num_indices, config.block_rows))
    for base, n in grid_chunks(tiles, device, config.num_warps):
        _index_select_kernel[(n, max(1, triton.cdiv(dim, config.block_d)))](
            values, input_offsets, output_offsets, indices, out, errors,
            dim, values.stride(0), num_indices, input_offsets.numel() - 1, num_input_rows, num_output_rows,
            (num_indices + 1).bit_length(), base,
            BACKWARD=backward, HAS_ERRORS=errors is not None, BLOCK_ROWS=config.block_rows,
            BLOCK_D=config.block_d, num_warps=config.num_warps)
    return out


def _bmm_launches(config: TritonGemmConfig, num_tiles: int, device: torch.device):
    """(first tile, programs, tile step) of each launch: one program per tile (chunked where the
    runtime needs it), or min(tiles, SMs) programs striding over all tiles."""
    if config.persistent:
        programs = min(num_tiles, _sm_count(device.type, _device_index(device)))
        yield 0, programs, programs
    else:
        for base, n in grid_chunks(num_tiles, device, config.num_warps):
            yield base, n, num_tiles


def jagged_dense_bmm(x: torch.Tensor, offsets: torch.Tensor, y: torch.Tensor, out: torch.Tensor, max_length: int,
                     config: TritonGemmConfig, errors: torch.Tensor | None = None) -> torch.Tensor:
    """out[total, N] = x[rows of b] @ y[b] per sequence b over its first min(length, max_length)
    rows, 0 for every other row; x [total, K], y [B, K, N] (any strides, one dtype), out contiguous
    in x's dtype. Written into `out`, which is returned."""
    validate_bmm_config(config)
    max_length = _check_max_length(max_length)
    _check_float(x, "x", 2)
    _check_float(y, "y", 3)
    dtype, device = x.dtype, x.device
    _check_index_tensor(offsets, "offsets", device, min_numel=1)
    batch = offsets.numel() - 1
    (total, k), n = x.shape, y.size(2)
    if tuple(y.shape) != (batch, k, n) or y.dtype != dtype or y.device != device:
        raise ValueError(f"y must be [{batch}, {k}, N] {dtype} on {device}, got {tuple(y.shape)} {y.dtype} "
                         f"on {y.device}")
    _check_out(out, (total, n), dtype, device)
    check_error_record(errors, device)
    if out.numel() == 0 and errors is None:
        return out
    m_tiles = max(1, triton.cdiv(max_length, config.block_m))
    n_tiles = max(1, triton.cdiv(n, config.block_n))
    num_tiles = max(batch, 1) * m_tiles * n_tiles
    for base, programs, step in _bmm_launches(config, num_tiles, device):
        _jagged_dense_bmm_kernel[(programs,)](
            x, y, offsets, out, errors,
            batch, max_length, total, k, n, offsets.numel(), m_tiles, n_tiles, num_tiles, base, step,
            max(batch, 1) - 1, x.stride(0), x.stride(1), y.stride(0), y.stride(1), y.stride(2),
            HAS_ERRORS=errors is not None, EVEN_K=k % config.block_k == 0, IEEE=dtype == torch.float32,
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
            num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def jagged_jagged_bmm(x: torch.Tensor, y: torch.Tensor, offsets: torch.Tensor, out: torch.Tensor, max_length: int,
                      config: TritonGemmConfig, errors: torch.Tensor | None = None) -> torch.Tensor:
    """out[b] = sum over sequence b's first min(length, max_length) rows of outer(x_row, y_row), fp32
    accumulation; x [total, M], y [total, N] (any strides, one dtype), out [B, M, N] contiguous in
    x's dtype. Written into `out`, which is returned."""
    validate_bmm_config(config)
    max_length = _check_max_length(max_length)
    _check_float(x, "x", 2)
    _check_float(y, "y", 2)
    dtype, device = x.dtype, x.device
    _check_index_tensor(offsets, "offsets", device, min_numel=1)
    batch = offsets.numel() - 1
    (total, m), n = x.shape, y.size(1)
    if tuple(y.shape) != (total, n) or y.dtype != dtype or y.device != device:
        raise ValueError(f"y must be [{total}, N] {dtype} on {device}, got {tuple(y.shape)} {y.dtype} on {y.device}")
    _check_out(out, (batch, m, n), dtype, device)
    check_error_record(errors, device)
    if out.numel() == 0 and errors is None:
        return out
    m_tiles = max(1, triton.cdiv(m, config.block_m))
    n_tiles = max(1, triton.cdiv(n, config.block_n))
    num_tiles = max(batch, 1) * m_tiles * n_tiles
    for base, programs, step in _bmm_launches(config, num_tiles, device):
        _jagged_jagged_bmm_kernel[(programs,)](
            x, y, offsets, out, errors,
            batch, max_length, total, m, n, offsets.numel(), m_tiles, n_tiles, num_tiles, base, step,
            max(batch, 1) - 1, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
            HAS_ERRORS=errors is not None, IEEE=dtype == torch.float32,
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
            num_warps=config.num_warps, num_stages=config.num_stages)
    return out
