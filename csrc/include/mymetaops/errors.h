// Bad index and offset values found by the kernels, reported without a host synchronization.
//
// Kernels never read or write outside their tensors: a bad value is clamped or skipped (and its
// bag comes out NaN). They also record the first bad value they meet in a DeviceErrorRecord that
// lives in pinned host memory (mapped into the device's address space: with unified addressing a
// pinned host pointer is valid on the device as it is). The host reads it with a plain load, no
// synchronization, at the start of the next call on that device and in mymetaops.check_errors(),
// and raises a Python exception naming the op, the position and the value.
//
// Layout (int64 words, so the Python side can read it as a pinned int64 tensor):
//   [0] claimed: 0, or 1 once a kernel has claimed the record (atomic compare-and-swap)
//   [1] code:    ErrorCode, written last (after a system-scope fence), so that the fields below
//                are complete when the host sees it non-zero
//   [2] op:      ErrorOp
//   [3] position: index into indices (kIndexOutOfRange) or into offsets (the offset errors)
//   [4] value:   the bad index or offset
//   [5] bound:   num_rows (kIndexOutOfRange) or what offsets index (kOffsetPastEnd: indices,
//                rows); 0 otherwise
// The host clears [1] then [0] after reporting.
#pragma once
#include <cstdint>

namespace mymetaops {

constexpr int kErrorRecordWords = 8;

enum ErrorWord : int {
  kErrClaimed = 0,
  kErrCode = 1,
  kErrOp = 2,
  kErrPosition = 3,
  kErrValue = 4,
  kErrBound = 5,
};

enum class ErrorCode : int64_t {
  kNone = 0,
  kIndexOutOfRange = 1,  // indices[position] = value is not in [0, bound)
  kNegativeOffset = 2,   // offsets[position] = value < 0
  kDecreasingOffset = 3, // offsets[position] = value < offsets[position - 1]
  kOffsetPastEnd = 4,    // offsets[position] = value > bound (the number of indices or rows)
  kNegativeLength = 5,   // lengths[position] = value < 0
  kLengthAboveMax = 6,   // sequence position is value rows long, more than bound (max_seq_len)
  kOffsetNotAtEnd = 7,   // offsets[position] = value, where it must be bound (0 first, total_L last)
  kTargetsOutOfRange = 8 // num_targets[position] = value is not in [0, bound] (its sequence's length)
};

// The op that found the value (numbers shared with mymetaops/ops/errors.py).
enum class ErrorOp : int64_t {
  kEmbeddingBag = 1,
  kEmbeddingBagBackward = 2,
  kEmbeddingBagPerSampleWeightsBackward = 3,
  kJaggedToPaddedDense = 4,
  kDenseToJagged = 5,
  kJaggedDenseElementwise = 6,
  kJaggedSoftmax = 7,
  kJaggedIndexSelect = 8,
  kJaggedBmm = 9,
  kHstuAttention = 10,
  kJaggedAttention = 11,
};

}  // namespace mymetaops
