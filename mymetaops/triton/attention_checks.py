"""What the Triton attention kernels (hstu_attention.py, jagged_attention.py) share about their
inputs: a program's place in the grid (grouped, longest first), a sequence's bounds from
seq_offsets, and the value checks of seq_offsets (and num_targets) that record the first bad entry
in the device error record (mymetaops/triton/common.py, csrc/include/mymetaops/errors.h) without a
host sync; the next call, check_errors() or validate=True raises it. The kernels clamp what they
read, so bad values never make them read or write outside their tensors.

Rules: seq_offsets[0] = 0, non-decreasing, seq_offsets[B] = total_L, every length <= max_seq_len;
num_targets[b] in [0, length of b].

The forward kernels check as they go: the program of (block 0, head 0) of sequence b checks entry
b (and entry B when b = B - 1), from the offsets it loads anyway (check_sequence). Where no forward
program runs (B = 0, total_L = 0, HSTU's max_seq_len = 0) the launchers queue check_values, a
kernel that checks every entry. Several bad entries: the record is first-claim-wins, so the one
recorded may not be the lowest-index one; a single bad entry is reported exactly.
"""
from __future__ import annotations

import functools

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
GROUP_WAVES = 4  # a group of grid_position holds about GROUP_WAVES x SMs programs (group_size)
INTERPRETER_SMS = 4  # "SM count" for CPU tensors (interpreter): small, so the tests' grids have several groups


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def group_size(device: torch.device, num_blocks: int, heads: int) -> int:
    """(sequence, head) pairs per group of grid_position, for num_blocks blocks per pair: about
    GROUP_WAVES x SMs programs a group. The programs that run at once then share few pairs, whose
    K/V stay in L2 (the block index outermost over every pair made B32 N4096 H4 D128 6-8% slower
    on the H200); several waves a group, so that a group's costly blocks finish while its cheap
    ones fill the SMs. Whole sequences a group (a multiple of heads, rounded down): the Hopper
    kernel's groups that split a sequence's heads ran 1.02-1.16x slower (bench/attention/NOTES.md,
    run 48); here the rounding gave 1.007x geomean over regret.py's Triton kernel times, up to 1.12x
    at B16 N4096 H2 equal lengths (run 49, H100)."""
    sms = INTERPRETER_SMS
    if device.type == "cuda":
        sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    whole = max(heads, 1)  # H = 0 launches nothing, but must not divide by zero
    return max(1, common.cdiv(GROUP_WAVES * sms, num_blocks) // whole) * whole


def launch(launcher, num_blocks: int, seqs: int, heads: int, device: torch.device, before: tuple,
           after: tuple = ()) -> None:
    """launcher(*before, program_base, group_size, *after) over num_blocks x seqs x heads programs,
    in grid_position's order (a launcher of mymetaops/triton/launch.py), in as many launches as the
    runtime needs."""
    group = group_size(device, num_blocks, heads)
    for base, count in common.grid_chunks(num_blocks * seqs * heads, device, launcher.meta["num_warps"]):
        launcher((count,), device, *before, base, group, *after)


@triton.jit
def grid_position(program_base, num_seqs, num_heads, num_blocks, group_size, LOW_BLOCKS_FIRST: tl.constexpr):
    """(block int32, sequence int32, head int64) of this program. The (sequence, head) pairs, b * H + h,
    are cut into groups of group_size consecutive pairs (the last group holds what is left), run one
    group after the other. Within a group the block index is the outer one, so the blocks with the
    most causal work start first and the cheap ones fill the group's tail (longest first): the high
    query blocks (forward, dq) or, LOW_BLOCKS_FIRST, the low key blocks (dk/dv). group_size >= B * H
    is one group: the block index outermost over every pair. int64: B * H * blocks may pass 2^31
    (the launch is then split at program_base)."""
    pid = tl.program_id(0).to(tl.int64) + program_base
    pairs = tl.full((), 1, tl.int64) * num_seqs * num_heads
    group_programs = tl.full((), 1, tl.int64) * group_size * num_blocks
    group = pid // group_programs
    first = group * group_size
    size = tl.minimum(pairs - first, group_size)  # the last group: the pairs left
    local = pid - group * group_programs
    rank = local // size
    bh = first + local - rank * size
    b = bh // num_heads
    if LOW_BLOCKS_FIRST:
        block = rank
    else:
        block = num_blocks - 1 - rank
    return block.to(tl.int32), b.to(tl.int32), bh - b * num_heads


@triton.jit
def sequence(offsets_ptr, b, num_seqs, total_rows, max_seq_len):
    """(first row int64, length int32, offsets[b], offsets[b + 1]) of sequence b: the rows clamped
    to [0, total_rows], the length to [0, max_seq_len]."""
    start, end, start_raw, end_raw = common.segment_bounds(offsets_ptr, b, num_seqs + 1, total_rows)
    length = tl.minimum(tl.maximum(end - start, 0), max_seq_len).to(tl.int32)
    return start, length, start_raw, end_raw


@triton.jit
def entry_error(i, value, prev, nxt, targets, batch, total, max_seq_len, HAS_TARGETS: tl.constexpr):
    """(code, reported value, bound) of entry i of seq_offsets (value, after prev, before nxt) and
    of num_targets[i] (targets), code 0 when fine; elementwise, on scalars or blocks of entries.
    The rules in order: the first offset, decreasing, the last offset, the length, the targets."""
    length = nxt - value
    code = tl.where((i == 0) & (value != 0), OFFSET_NOT_AT_END, 0)
    bound = value * 0
    code = tl.where((code == 0) & (i > 0) & (value < prev), DECREASING_OFFSET, code)
    last = (i == batch) & (value != total)
    bound = tl.where((code == 0) & last, total, bound)
    code = tl.where((code == 0) & last, OFFSET_NOT_AT_END, code)
    long = (i < batch) & (length > max_seq_len)
    bound = tl.where((code == 0) & long, max_seq_len, bound)
    report = tl.where((code == 0) & long, length, value)
    code = tl.where((code == 0) & long, LENGTH_ABOVE_MAX, code)
    if HAS_TARGETS:
        bad = (i < batch) & ((targets < 0) | (targets > tl.maximum(length, 0)))
        bound = tl.where((code == 0) & bad, tl.maximum(length, 0), bound)
        report = tl.where((code == 0) & bad, targets, report)
        code = tl.where((code == 0) & bad, TARGETS_OUT_OF_RANGE, code)
    return code, report, bound


@triton.jit
def check_sequence(offsets_ptr, errors_ptr, b, start_raw, end_raw, targets_raw, batch, total, max_seq_len, op,
                   HAS_TARGETS: tl.constexpr):
    """Record entry b of seq_offsets / num_targets if bad, and entry B when b is the last
    sequence; start_raw, end_raw = offsets[b], offsets[b + 1] and targets_raw = num_targets[b]
    as the caller loaded them (int64)."""
    prev = tl.load(offsets_ptr + b - 1, mask=b > 0, other=0).to(tl.int64)
    code, report, bound = entry_error(b, start_raw, prev, end_raw, targets_raw, batch, total, max_seq_len,
                                      HAS_TARGETS)
    common.record_error(errors_ptr, code.to(tl.int64), op, b, report, bound)
    if b == batch - 1:
        code, report, bound = entry_error(b + 1, end_raw, start_raw, end_raw, targets_raw, batch, total,
                                          max_seq_len, False)
        common.record_error(errors_ptr, code.to(tl.int64), op, b + 1, report, bound)


@triton.jit
def _check_kernel(offsets_ptr, targets_ptr, errors_ptr, batch, total, max_seq_len, op,
                  HAS_TARGETS: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    entry = i <= batch
    value = tl.load(offsets_ptr + i, mask=entry, other=0).to(tl.int64)
    prev = tl.load(offsets_ptr + i - 1, mask=entry & (i > 0), other=0).to(tl.int64)
    nxt = tl.load(offsets_ptr + i + 1, mask=i < batch, other=0).to(tl.int64)
    targets = value
    if HAS_TARGETS:
        targets = tl.load(targets_ptr + i, mask=i < batch, other=0).to(tl.int64)
    code, report, bound = entry_error(i, value, prev, nxt, targets, batch, total, max_seq_len, HAS_TARGETS)
    code = tl.where(entry, code, 0)
    # The first bad entry of the block is the one recorded.
    first = tl.min(tl.where(code != 0, i, batch + BLOCK + 1), axis=0)
    pick = i == first
    if first <= batch:
        common.record_error(errors_ptr, tl.sum(tl.where(pick, code, 0), axis=0).to(tl.int64), op, first,
                            tl.sum(tl.where(pick, report, 0), axis=0), tl.sum(tl.where(pick, bound, 0), axis=0))


def check_values(seq_offsets: torch.Tensor, num_targets: torch.Tensor | None, total: int, max_seq_len: int,
                 op: int, errors: torch.Tensor) -> None:
    """Queue the check of every entry of seq_offsets / num_targets (no sync); bad entries land in
    `errors`. For the calls where no forward program runs (see the module docstring)."""
    batch = seq_offsets.numel() - 1
    targets = num_targets if num_targets is not None else seq_offsets
    _check_kernel[(common.cdiv(batch + 1, BLOCK),)](
        seq_offsets, targets, errors, batch, total, max_seq_len, op,
        HAS_TARGETS=num_targets is not None, BLOCK=BLOCK)
