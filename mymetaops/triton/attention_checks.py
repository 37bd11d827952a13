"""The value checks of the attention ops on the GPU, without a host sync: one small kernel reads
seq_offsets (and num_targets) and records the first bad entry in the device error record
(mymetaops/triton/common.py, csrc/include/mymetaops/errors.h), which the next call, check_errors()
or validate=True raises. The attention kernels clamp what they read, so bad values never make
them read or write outside their tensors.

Rules: seq_offsets[0] = 0, non-decreasing, seq_offsets[B] = total_L, every length <= max_seq_len;
num_targets[b] in [0, length of b].
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mymetaops.triton import common

DECREASING_OFFSET = tl.constexpr(3)
LENGTH_ABOVE_MAX = tl.constexpr(6)
OFFSET_NOT_AT_END = tl.constexpr(7)
TARGETS_OUT_OF_RANGE = tl.constexpr(8)
OP_HSTU_ATTENTION, OP_JAGGED_ATTENTION = 10, 11  # ErrorOp of errors.h
BLOCK = 1024  # entries per program: B is rarely above a few thousand, one or two programs


@triton.jit
def _check_kernel(offsets_ptr, targets_ptr, errors_ptr, batch, total, max_seq_len, op,
                  HAS_TARGETS: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    entry = i <= batch
    value = tl.load(offsets_ptr + i, mask=entry, other=0).to(tl.int64)
    prev = tl.load(offsets_ptr + i - 1, mask=entry & (i > 0), other=0).to(tl.int64)
    nxt = tl.load(offsets_ptr + i + 1, mask=i < batch, other=0).to(tl.int64)
    length = nxt - value
    code = tl.where((i == 0) & (value != 0), OFFSET_NOT_AT_END, 0)
    bound = tl.zeros_like(value)
    code = tl.where((code == 0) & (i > 0) & (value < prev), DECREASING_OFFSET, code)
    last = (i == batch) & (value != total)
    bound = tl.where((code == 0) & last, total, bound)
    code = tl.where((code == 0) & last, OFFSET_NOT_AT_END, code)
    long = (i < batch) & (length > max_seq_len)
    bound = tl.where((code == 0) & long, max_seq_len, bound)
    report = tl.where((code == 0) & long, length, value)
    code = tl.where((code == 0) & long, LENGTH_ABOVE_MAX, code)
    if HAS_TARGETS:
        targets = tl.load(targets_ptr + i, mask=i < batch, other=0).to(tl.int64)
        bad = (i < batch) & ((targets < 0) | (targets > tl.maximum(length, 0)))
        bound = tl.where((code == 0) & bad, tl.maximum(length, 0), bound)
        report = tl.where((code == 0) & bad, targets, report)
        code = tl.where((code == 0) & bad, TARGETS_OUT_OF_RANGE, code)
    code = tl.where(entry, code, 0)
    # The first bad entry of the block is the one recorded.
    first = tl.min(tl.where(code != 0, i, batch + BLOCK + 1), axis=0)
    pick = i == first
    if first <= batch:
        common.record_error(errors_ptr, tl.sum(tl.where(pick, code, 0), axis=0).to(tl.int64), op, first,
                            tl.sum(tl.where(pick, report, 0), axis=0), tl.sum(tl.where(pick, bound, 0), axis=0))


def check_values(seq_offsets: torch.Tensor, num_targets: torch.Tensor | None, total: int, max_seq_len: int,
                 op: int, errors: torch.Tensor) -> None:
    """Queue the check of seq_offsets / num_targets (no sync); bad entries land in `errors`."""
    batch = seq_offsets.numel() - 1
    targets = num_targets if num_targets is not None else seq_offsets
    _check_kernel[(triton.cdiv(batch + 1, BLOCK),)](
        seq_offsets, targets, errors, batch, total, max_seq_len, op,
        HAS_TARGETS=num_targets is not None, BLOCK=BLOCK)
