// The native jagged bmm instances of the CUDA build, as the launcher (jagged_bmm.cu) sees them: one
// record of entry points per compiled CUTLASS grouped GEMM. Light on purpose (no CUTLASS headers):
// each instance .cu includes grouped_gemm.cuh on its own, so ninja builds them in parallel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mymetaops/jagged.h"

namespace mymetaops {
namespace cuda {
namespace jagged_bmm {

// How an instance reads its operands per sequence b (GEMM terms: out_b [M, N] = A_b [M, K] . B_b).
enum class Operands : int32_t {
  kDenseN = 0,   // jagged_dense_bmm, y[b] [K, N] N-contiguous: A = x_b (rows), B = y[b]
  kDenseK = 1,   // jagged_dense_bmm, y[b] K-contiguous (the backward's y^T): B = y[b] read K-major
  kJagged = 2,   // jagged_jagged_bmm: A = x_b^T (M-contiguous), B = y_b (N-contiguous), K = rows
};

struct Instance {
  // Bytes of workspace a launch needs: the per-sequence problem arrays and CUTLASS's own.
  int64_t (*workspace)(const JaggedBmmArgs& args, int device);
  LaunchError (*launch)(const JaggedBmmArgs& args, int device, cudaStream_t stream);
};

// Defined (specialized) by the instance files: one per operand form, bf16 (kHalf false) or fp16.
template <Operands kOperands, bool kHalf>
const Instance& instance();

}  // namespace jagged_bmm
}  // namespace cuda
}  // namespace mymetaops
