// Device helpers of the jagged family's CUDA kernels (cuda/jagged.cu, cuda/jagged_bmm/): reading
// offsets the way csrc/include/mymetaops/jagged.h defines them (clamped to [0, total], an end
// below its start an empty sequence) and checking every entry into the error record.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_utils.cuh"
#include "mymetaops/errors.h"

namespace mymetaops {
namespace cuda {

__device__ __forceinline__ bool unlikely(bool c) { return __builtin_expect(c, 0); }

__device__ __forceinline__ int64_t thread_in_grid() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t threads_in_grid() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <typename IndexT>
__device__ __forceinline__ int64_t clamped_offset(const IndexT* offsets, int64_t i, int64_t total) {
  return min(max(static_cast<int64_t>(__ldg(offsets + i)), int64_t{0}), total);
}

// Sequence b: rows [start, start + length), its offsets clamped to [0, total]; an end below its
// start is an empty sequence.
struct Seq {
  int64_t start, length;
};

template <typename IndexT>
__device__ __forceinline__ Seq sequence(const IndexT* offsets, int64_t b, int64_t total) {
  const int64_t start = clamped_offset(offsets, b, total);
  return {start, max(clamped_offset(offsets, b + 1, total) - start, int64_t{0})};
}

// Records the bad entries of offsets[0 .. batch] (jagged.h), each entry checked by one thread of a
// grid-stride loop (first, stride): every entry is checked, whatever the main loop covers.
template <typename IndexT>
__device__ void check_offsets(const IndexT* offsets, int64_t batch, int64_t total, int64_t* errors,
                              ErrorOp op, int64_t first, int64_t stride) {
  if (errors == nullptr) return;
  for (int64_t i = first; i <= batch; i += stride) {
    const int64_t value = __ldg(offsets + i);
    // The order of the CPU checks, the HIP and the Triton kernels: negative, decreasing, past the end.
    if (unlikely(value < 0)) {
      record_error(errors, op, ErrorCode::kNegativeOffset, i, value, 0);
    } else if (unlikely(i > 0 && value < static_cast<int64_t>(__ldg(offsets + i - 1)))) {
      record_error(errors, op, ErrorCode::kDecreasingOffset, i, value, 0);
    } else if (unlikely(value > total)) {
      record_error(errors, op, ErrorCode::kOffsetPastEnd, i, value, total);
    }
  }
}

}  // namespace cuda
}  // namespace mymetaops
