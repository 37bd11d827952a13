"""Triton kernels for embedding_bag: forward, weight backward and per-sample-weights backward.

Semantics are those of the native kernels (csrc/include/mymetaops/embedding_bag.h): offsets with
num_bags + 1 entries (include_last_offset, FBGEMM form) or num_bags (torch's default form, the last
bag ending at num_indices), clamped to [0, num_indices], an end below its start is an empty bag;
fp32 accumulation; entries equal to padding_idx (>= 0) skipped and not counted for the mean; an
out-of-range index is never dereferenced and makes its bag NaN (forward) or is skipped. Given an
error record (`errors`, csrc/include/mymetaops/errors.h), the forward and the per-sample-weights
backward also record the first bad index or offset they meet; each program checks its bag's start
and end offset and the indices inside the bag, so with no bags nothing is checked.

Kernel shapes (`mymetaops.configs.TritonEmbeddingBagConfig`):
  * forward: one program per (bag, BLOCK_D columns); each step loads BLOCK_L indices, then a
    [BLOCK_L, BLOCK_D] tile of rows, so BLOCK_L independent row loads are in flight per program.
  * weight backward: one program per (sorted position, BLOCK_D columns); only the program at the
    start of a run of equal rows works, walking its run BLOCK_L positions per step (deterministic,
    no atomics).
  * per-sample-weights backward: one program per bag covering the whole dim in BLOCK_D chunks,
    since each output element is a dot product over dim.

Valid configs (anything else raises ValueError):
  * block_l: power of two in [1, 256]
  * block_d: power of two in [16, 1024]; columns past dim are masked and cost no memory traffic,
    so a dim below 16 simply uses block_d = 16
  * block_l * block_d <= 16384 (the tile lives in registers; larger ones only spill)
  * num_warps: 1, 2, 4, 8 or 16
With one warp the forward and weight backward reduce each step's tile at once; with more they keep
a tile-shaped fp32 accumulator (see `_acc_init`), so registers grow with
block_l * block_d / (num_warps * warp size), doubled when num_warps > 1.
scripts/check_triton_targets.py reports registers and spills per target.

Choosing a config (H200, Triton 3.6, random rows): the forward reached 4.08 TB/s (fp32, D 128,
L 32: block_l 32, block_d 128, 1 warp), 96% of the copy bandwidth; one warp per program with
16-32 rows in flight was best on every tested shape, 8 warps up to 10x slower. The weight backward
is latency-bound (one program per position, short runs): 1 warp, small block_l, block_d = dim.

Programs along grid dim 0 are launched in chunks when a grid would exceed what the runtime
accepts (ROCm counts work-items of one dimension in 32 bits), so any number of bags/positions works.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from mymetaops.triton.common import (INDEX_OUT_OF_RANGE, OFFSET_PAST_END, check_error_record, grid_chunks,
                                     is_pow2, offset_error, record_error, segment_bounds)

if TYPE_CHECKING:  # the launchers only read the config's fields; no runtime import of the package
    from mymetaops.configs import TritonEmbeddingBagConfig

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_INDEX_DTYPES = (torch.int32, torch.int64)
# ErrorOp of errors.h.
OP_FORWARD = tl.constexpr(1)
OP_PER_SAMPLE_WEIGHTS_BACKWARD = tl.constexpr(3)


@triton.jit
def _offsets_error(bag, start_raw, end_raw, num_offsets, num_indices):
    """(code, position, value) of the first bad offset of a bag, its start then its end; code 0: none."""
    # The start's predecessor is the previous bag's start: that bag checks the pair.
    start_code = offset_error(start_raw, start_raw, num_indices)
    end_code = tl.where(bag + 1 < num_offsets, offset_error(end_raw, start_raw, num_indices), 0)
    return (tl.where(start_code != 0, start_code, end_code), tl.where(start_code != 0, bag, bag + 1),
            tl.where(start_code != 0, start_raw, end_raw))


# A real call, and the bag read again: the kernels' loops only count bad indices and keep no more
# values live than without a record. With the record, an H200 (Triton 3.6) ran the forward 0-9%
# and the per-sample-weights backward 0-5% slower than without one; tracking the first bad
# position in the loops and inlining this cost up to 33% and 12%.
@triton.jit(noinline=True)
def _record_bag_error(errors_ptr, OP: tl.constexpr, indices_ptr, offsets_ptr, bag, num_offsets, num_rows, num_indices,
                      padding_idx, BLOCK_L: tl.constexpr):
    """Record the first bad value of a bag known to hold one: its start offset, then its end offset,
    then its first out-of-range index."""
    start, end, start_raw, end_raw = segment_bounds(offsets_ptr, bag, num_offsets, num_indices)
    code, position, value = _offsets_error(bag, start_raw, end_raw, num_offsets, num_indices)
    if code == 0:
        first_bad = end
        for pos in range(start, end, BLOCK_L):
            p = pos + tl.arange(0, BLOCK_L)
            rows = tl.load(indices_ptr + p, mask=p < end, other=0).to(tl.int64)
            bad = (p < end) & ((rows != padding_idx) | (padding_idx < 0)) & ((rows < 0) | (rows >= num_rows))
            first_bad = tl.minimum(first_bad, tl.min(tl.where(bad, p, end)))
        position = first_bad
        value = tl.load(indices_ptr + first_bad, mask=first_bad < end, other=0).to(tl.int64)
    code = tl.where(code == 0, INDEX_OUT_OF_RANGE, code)
    bound = tl.where(code == INDEX_OUT_OF_RANGE, num_rows, tl.where(code == OFFSET_PAST_END, num_indices, 0))
    record_error(errors_ptr, code, OP, position, value, bound)


# Column sums over a bag's / run's rows. With several warps the tile's rows are split across warps,
# so reducing over BLOCK_L on every step would go through shared memory and barriers: keep a
# tile-shaped accumulator and reduce once at the end. With one warp that reduction stays in
# registers and shuffles, and a tile-shaped accumulator would only double the registers per row in
# flight. The launchers set REDUCE_EACH_STEP = (num_warps == 1).
@triton.jit
def _acc_init(BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, REDUCE_EACH_STEP: tl.constexpr):
    if REDUCE_EACH_STEP:
        return tl.zeros([BLOCK_D], dtype=tl.float32)
    else:
        return tl.zeros([BLOCK_L, BLOCK_D], dtype=tl.float32)


@triton.jit
def _acc_add(acc, tile, REDUCE_EACH_STEP: tl.constexpr):
    if REDUCE_EACH_STEP:
        return acc + tl.sum(tile, axis=0)
    else:
        return acc + tile


@triton.jit
def _acc_result(acc, REDUCE_EACH_STEP: tl.constexpr):
    if REDUCE_EACH_STEP:
        return acc
    else:
        return tl.sum(acc, axis=0)


@triton.jit
def _forward_kernel(
    weight_ptr, indices_ptr, offsets_ptr, psw_ptr, out_ptr, errors_ptr,
    num_rows, dim, weight_row_stride, num_indices, num_offsets, padding_idx, bag_base,
    MEAN: tl.constexpr, HAS_PSW: tl.constexpr, HAS_ERRORS: tl.constexpr, REDUCE_EACH_STEP: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bag = bag_base + tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end, start_raw, end_raw = segment_bounds(offsets_ptr, bag, num_offsets, num_indices)
    offsets_code, _, _ = _offsets_error(bag, start_raw, end_raw, num_offsets, num_indices)

    acc = _acc_init(BLOCK_L, BLOCK_D, REDUCE_EACH_STEP)
    kept_count = tl.zeros([BLOCK_L], dtype=tl.int32)
    oob_count = tl.zeros([BLOCK_L], dtype=tl.int32)
    for pos in range(start, end, BLOCK_L):
        p = pos + tl.arange(0, BLOCK_L)
        in_bag = p < end
        rows = tl.load(indices_ptr + p, mask=in_bag, other=0).to(tl.int64)
        kept = in_bag & ((rows != padding_idx) | (padding_idx < 0))
        in_range = (rows >= 0) & (rows < num_rows)
        # 64-bit row offsets: rows * stride exceeds 2^31 on large tables.
        w = tl.load(weight_ptr + rows[:, None] * weight_row_stride + cols[None, :],
                    mask=(kept & in_range)[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        if HAS_PSW:
            scale = tl.load(psw_ptr + p, mask=kept, other=0.0).to(tl.float32)
            w = w * scale[:, None]
        acc = _acc_add(acc, w, REDUCE_EACH_STEP)
        kept_count += kept.to(tl.int32)
        oob_count += (kept & ~in_range).to(tl.int32)

    pooled = _acc_result(acc, REDUCE_EACH_STEP)
    if MEAN:  # an empty bag stays 0
        pooled = pooled / tl.maximum(tl.sum(kept_count), 1).to(tl.float32)
    any_bad_index = tl.sum(oob_count) > 0
    pooled = tl.where(any_bad_index, float("nan"), pooled)
    tl.store(out_ptr + bag * dim + cols, pooled.to(out_ptr.dtype.element_ty), mask=col_mask)
    if HAS_ERRORS:
        # The column blocks of a bag all meet the same values: one records them.
        if (tl.program_id(1) == 0) & ((offsets_code != 0) | any_bad_index):
            _record_bag_error(errors_ptr, OP_FORWARD, indices_ptr, offsets_ptr, bag, num_offsets, num_rows,
                              num_indices, padding_idx, BLOCK_L)


@triton.jit
def _backward_kernel(
    grad_out_ptr, sorted_rows_ptr, sorted_bags_ptr, sorted_scales_ptr, grad_weight_ptr,
    grad_out_row_stride, num_positions, num_rows, num_bags, dim, pos_base,
    HAS_SCALES: tl.constexpr, REDUCE_EACH_STEP: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pos = pos_base + tl.program_id(0).to(tl.int64)
    row = tl.load(sorted_rows_ptr + pos).to(tl.int64)
    prev = tl.load(sorted_rows_ptr + pos - 1, mask=pos > 0, other=-1).to(tl.int64)
    # The run-start program owns the row; markers (>= num_rows) are skipped.
    if (row == prev) | (row < 0) | (row >= num_rows):
        return

    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    acc = _acc_init(BLOCK_L, BLOCK_D, REDUCE_EACH_STEP)
    more = tl.full((), True, tl.int1)
    while more:
        q = pos + tl.arange(0, BLOCK_L)
        # Rows are sorted, so the run is a prefix of this block. The bags are loaded alongside the
        # rows (not masked by in_run) so the two loads overlap instead of forming a chain.
        in_plan = q < num_positions
        in_run = tl.load(sorted_rows_ptr + q, mask=in_plan, other=-1).to(tl.int64) == row
        bags = tl.load(sorted_bags_ptr + q, mask=in_plan, other=0)
        read = in_run & (bags >= 0) & (bags < num_bags)
        g = tl.load(grad_out_ptr + bags[:, None] * grad_out_row_stride + cols[None, :],
                    mask=read[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        if HAS_SCALES:
            scale = tl.load(sorted_scales_ptr + q, mask=in_run, other=0.0)  # overlaps the grad_output load
            g = g * scale[:, None]
        acc = _acc_add(acc, g, REDUCE_EACH_STEP)
        pos += BLOCK_L
        more = tl.sum(in_run.to(tl.int32)) == BLOCK_L  # a full block: the run may go on
    grad = _acc_result(acc, REDUCE_EACH_STEP)
    tl.store(grad_weight_ptr + row * dim + cols, grad.to(grad_weight_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _psw_backward_kernel(
    grad_out_ptr, weight_ptr, indices_ptr, offsets_ptr, out_ptr, errors_ptr,
    grad_out_row_stride, weight_row_stride, num_rows, dim, num_indices, num_offsets, padding_idx, bag_base,
    HAS_ERRORS: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bag = bag_base + tl.program_id(0).to(tl.int64)
    start, end, start_raw, end_raw = segment_bounds(offsets_ptr, bag, num_offsets, num_indices)
    offsets_code, _, _ = _offsets_error(bag, start_raw, end_raw, num_offsets, num_indices)
    oob_count = tl.zeros([BLOCK_L], dtype=tl.int32)  # as in the forward
    for pos in range(start, end, BLOCK_L):
        p = pos + tl.arange(0, BLOCK_L)
        in_bag = p < end
        rows = tl.load(indices_ptr + p, mask=in_bag, other=0).to(tl.int64)
        kept = in_bag & ((rows != padding_idx) | (padding_idx < 0))
        in_range = (rows >= 0) & (rows < num_rows)
        used = kept & in_range
        oob_count += (kept & ~in_range).to(tl.int32)
        dot = tl.zeros([BLOCK_L], dtype=tl.float32)
        for d in range(0, dim, BLOCK_D):
            cols = d + tl.arange(0, BLOCK_D)
            col_mask = cols < dim
            g = tl.load(grad_out_ptr + bag * grad_out_row_stride + cols, mask=col_mask, other=0.0)
            w = tl.load(weight_ptr + rows[:, None] * weight_row_stride + cols[None, :],
                        mask=used[:, None] & col_mask[None, :], other=0.0)
            # Warps split the rows first, so this reduction over columns stays within a warp.
            dot += tl.sum(w.to(tl.float32) * g.to(tl.float32)[None, :], axis=1)
        tl.store(out_ptr + p, dot.to(out_ptr.dtype.element_ty), mask=in_bag)
    if HAS_ERRORS:
        if (offsets_code != 0) | (tl.sum(oob_count) > 0):
            _record_bag_error(errors_ptr, OP_PER_SAMPLE_WEIGHTS_BACKWARD, indices_ptr, offsets_ptr, bag, num_offsets,
                              num_rows, num_indices, padding_idx, BLOCK_L)


def validate_config(config: TritonEmbeddingBagConfig) -> None:
    """Raise ValueError unless `config` is one the module docstring lists as valid."""
    if not (is_pow2(config.block_l) and config.block_l <= 256):
        raise ValueError(f"block_l must be a power of two in [1, 256], got {config.block_l}")
    if not (is_pow2(config.block_d) and 16 <= config.block_d <= 1024):
        raise ValueError(f"block_d must be a power of two in [16, 1024], got {config.block_d}")
    if config.block_l * config.block_d > 16384:
        raise ValueError(f"block_l * block_d must be <= 16384, got {config.block_l} * {config.block_d}")
    if config.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps}")


def _check_weight(weight: torch.Tensor) -> None:
    if weight.dim() != 2 or weight.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"weight must be 2-D fp32/fp16/bf16, got {tuple(weight.shape)} {weight.dtype}")
    if weight.stride(1) != 1 and weight.size(1) > 1:
        raise ValueError(f"weight must have unit column stride, got strides {weight.stride()}")


def _num_bags(indices: torch.Tensor, offsets: torch.Tensor, include_last_offset: bool) -> int:
    if indices.dtype not in _INDEX_DTYPES or offsets.dtype != indices.dtype:
        raise ValueError(f"indices/offsets must share int32 or int64, got {indices.dtype}/{offsets.dtype}")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise ValueError("indices and offsets must be 1-D")
    if include_last_offset and offsets.numel() == 0:
        raise ValueError("with include_last_offset, offsets needs num_bags + 1 >= 1 entries")
    # 1-D inputs are read with unit stride.
    if indices.stride(0) != 1 and indices.numel() > 1 or offsets.stride(0) != 1 and offsets.numel() > 1:
        raise ValueError("indices and offsets must be contiguous")
    return offsets.numel() - 1 if include_last_offset else offsets.numel()


def embedding_bag_forward(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: int,
                          per_sample_weights: torch.Tensor | None, padding_idx: int, include_last_offset: bool,
                          config: TritonEmbeddingBagConfig, errors: torch.Tensor | None = None) -> torch.Tensor:
    """[num_bags, dim] pooled rows (mode 0 = sum, 1 = mean) in weight's dtype; bad values are
    recorded in `errors` (ErrorOp 1) when given."""
    validate_config(config)
    _check_weight(weight)
    num_bags = _num_bags(indices, offsets, include_last_offset)
    check_error_record(errors, weight.device)
    if mode not in (0, 1):
        raise ValueError(f"mode must be 0 (sum) or 1 (mean), got {mode}")
    if per_sample_weights is not None:
        if mode != 0:
            raise ValueError("per_sample_weights are only supported in sum mode")
        if per_sample_weights.shape != indices.shape or per_sample_weights.dtype != weight.dtype \
                or (per_sample_weights.numel() > 1 and per_sample_weights.stride(0) != 1):
            raise ValueError("per_sample_weights must be contiguous, shaped like indices, in weight's dtype")
    num_rows, dim = weight.shape
    out = torch.empty((num_bags, dim), dtype=weight.dtype, device=weight.device)
    # With dim 0 one column block still runs: it checks the bags' values.
    column_blocks = max(1, triton.cdiv(dim, config.block_d))
    for base, n in grid_chunks(num_bags, weight.device, config.num_warps):
        _forward_kernel[(n, column_blocks)](
            weight, indices, offsets, per_sample_weights, out, errors,
            num_rows, dim, weight.stride(0), indices.numel(), offsets.numel(), padding_idx, base,
            MEAN=mode == 1, HAS_PSW=per_sample_weights is not None, HAS_ERRORS=errors is not None,
            REDUCE_EACH_STEP=config.num_warps == 1,
            BLOCK_L=config.block_l, BLOCK_D=config.block_d, num_warps=config.num_warps,
        )
    return out


def embedding_bag_backward(grad_output: torch.Tensor, sorted_rows: torch.Tensor, sorted_bags: torch.Tensor,
                           sorted_scales: torch.Tensor | None, num_rows: int,
                           config: TritonEmbeddingBagConfig) -> torch.Tensor:
    """[num_rows, dim] grad_weight in grad_output's dtype from the row-sorted backward plan; bags
    outside [0, grad_output.shape[0]) are skipped, never read."""
    validate_config(config)
    _check_weight(grad_output)
    num_positions = sorted_rows.numel()
    if sorted_rows.dtype not in _INDEX_DTYPES or sorted_bags.dtype != torch.int64 \
            or sorted_bags.numel() != num_positions:
        raise ValueError("sorted_rows must be int32/int64 and sorted_bags int64 of the same length")
    if sorted_scales is not None and (sorted_scales.dtype != torch.float32 or sorted_scales.numel() != num_positions):
        raise ValueError("sorted_scales must be fp32 of the plan's length")
    if any(t is not None and t.numel() > 1 and t.stride(0) != 1 for t in (sorted_rows, sorted_bags, sorted_scales)):
        raise ValueError("the backward plan's tensors must be contiguous")
    num_bags, dim = grad_output.shape
    grad_weight = torch.zeros((num_rows, dim), dtype=grad_output.dtype, device=grad_output.device)
    if dim == 0 or num_rows == 0:
        return grad_weight
    for base, n in grid_chunks(num_positions, grad_output.device, config.num_warps):
        _backward_kernel[(n, triton.cdiv(dim, config.block_d))](
            grad_output, sorted_rows, sorted_bags, sorted_scales, grad_weight,
            grad_output.stride(0), num_positions, num_rows, num_bags, dim, base,
            HAS_SCALES=sorted_scales is not None, REDUCE_EACH_STEP=config.num_warps == 1,
            BLOCK_L=config.block_l, BLOCK_D=config.block_d, num_warps=config.num_warps,
        )
    return grad_weight


def embedding_bag_per_sample_weights_backward(grad_output: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                                              offsets: torch.Tensor, padding_idx: int, include_last_offset: bool,
                                              config: TritonEmbeddingBagConfig,
                                              errors: torch.Tensor | None = None) -> torch.Tensor:
    """[num_indices] dot(grad_output[bag], weight[row]) per position, in weight's dtype; 0 elsewhere
    (a position in two bags, which only decreasing offsets make, gets either bag's value). Bad
    values are recorded in `errors` (ErrorOp 3) when given."""
    validate_config(config)
    _check_weight(weight)
    _check_weight(grad_output)
    num_bags = _num_bags(indices, offsets, include_last_offset)
    check_error_record(errors, weight.device)
    num_rows, dim = weight.shape
    if grad_output.shape != (num_bags, dim) or grad_output.dtype != weight.dtype:
        raise ValueError(f"grad_output must be [{num_bags}, {dim}] in weight's dtype")
    # Zeros: positions outside every bag are never written.
    out = torch.zeros(indices.numel(), dtype=weight.dtype, device=weight.device)
    for base, n in grid_chunks(num_bags, weight.device, config.num_warps):
        _psw_backward_kernel[(n,)](
            grad_output, weight, indices, offsets, out, errors,
            grad_output.stride(0), weight.stride(0), num_rows, dim, indices.numel(), offsets.numel(),
            padding_idx, base,
            HAS_ERRORS=errors is not None, BLOCK_L=config.block_l, BLOCK_D=config.block_d,
            num_warps=config.num_warps,
        )
    return out
