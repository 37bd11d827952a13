"""Small helpers shared by the Triton kernel families: offsets (bags / jagged segments), the device
error record, grid chunking, powers of two.

Offsets: `num_offsets` entries, num_segments + 1 (FBGEMM form) or num_segments (torch's default
form, the last segment ending at num_indices); clamped to [0, num_indices] when used.

The error record is the DeviceErrorRecord of csrc/include/mymetaops/errors.h: 8 int64 words,
[0] claimed, [1] code (written last), [2] op, [3] position, [4] value, [5] bound. On a GPU it is a
pinned host tensor, valid on the device through unified addressing.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ERROR_RECORD_WORDS = 8
# ErrorCode of errors.h.
INDEX_OUT_OF_RANGE = tl.constexpr(1)
NEGATIVE_OFFSET = tl.constexpr(2)
DECREASING_OFFSET = tl.constexpr(3)
OFFSET_PAST_END = tl.constexpr(4)


@triton.jit
def segment_bounds(offsets_ptr, seg, num_offsets, num_indices):
    """(start, end, start_raw, end_raw) of segment seg: offsets[seg] .. offsets[seg + 1], or
    num_indices past the last offset. start and end are clamped to [0, num_indices]; an end below
    its start leaves `range(start, end, ...)` empty, so it needs no clamping to start."""
    start_raw = tl.load(offsets_ptr + seg).to(tl.int64)
    has_end = seg + 1 < num_offsets
    # Selected after the load: `other` would be cast to int32 for int32 offsets.
    end_raw = tl.where(has_end, tl.load(offsets_ptr + seg + 1, mask=has_end, other=0).to(tl.int64),
                       num_indices)
    start = tl.minimum(tl.maximum(start_raw, 0), num_indices)
    return start, tl.minimum(end_raw, num_indices), start_raw, end_raw


@triton.jit
def offset_error(value, prev, num_indices):
    """ErrorCode of an offset `value` that follows `prev`, 0 if it is fine. One value can break
    several rules: negative is reported before decreasing, decreasing before past the end."""
    return tl.where(value < 0, NEGATIVE_OFFSET,
                    tl.where(value < prev, DECREASING_OFFSET,
                             tl.where(value > num_indices, OFFSET_PAST_END, 0)))


@triton.jit
def record_error(errors_ptr, code, op, position, value, bound):
    """Record a bad value unless the record is claimed already (first one wins); nothing when code
    is 0. The code goes last, with release semantics at system scope, so the host that sees it
    non-zero reads complete fields."""
    if code != 0:
        zero = tl.full((), 0, tl.int64)
        if tl.atomic_cas(errors_ptr, zero, zero + 1, scope="sys") == 0:
            tl.store(errors_ptr + 2, op)
            tl.store(errors_ptr + 3, position)
            tl.store(errors_ptr + 4, value)
            tl.store(errors_ptr + 5, bound)
            tl.atomic_xchg(errors_ptr + 1, code, sem="release", scope="sys")


def check_error_record(errors: torch.Tensor | None, device: torch.device) -> None:
    """Raise ValueError unless errors is None or an error record the kernels on `device` can write."""
    if errors is None:
        return
    if errors.dtype != torch.int64 or errors.shape != (ERROR_RECORD_WORDS,) or not errors.is_contiguous():
        raise ValueError(f"errors must be a contiguous int64 tensor of {ERROR_RECORD_WORDS} words, "
                         f"got {errors.dtype} {tuple(errors.shape)}")
    if errors.device != device and not (errors.device.type == "cpu" and errors.is_pinned()):
        raise ValueError(f"errors must be on {device} or in pinned host memory, got {errors.device}")


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host ints: triton.cdiv is a JIT-callable wrapper, ~7 us a call on the host."""
    return -(-a // b)


def is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def max_programs(device: torch.device, num_warps: int) -> int:
    """Most programs one launch may have along grid dim 0."""
    if device.type == "cuda" and torch.version.hip is not None:
        # HSA dispatch packets count a dimension's work-items in 32 bits (64-lane wavefronts assumed;
        # 32-lane ones only make this bound conservative).
        return (2**32 - 1) // (num_warps * 64)
    return 2**31 - 1  # CUDA gridDim.x; no limit under the interpreter


def grid_chunks(n: int, device: torch.device, num_warps: int):
    """(first program, program count) of each launch covering n programs along grid dim 0."""
    step = max_programs(device, num_warps)
    for base in range(0, n, step):
        yield base, min(step, n - base)
