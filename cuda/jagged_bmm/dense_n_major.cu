// The grouped GEMM instances of jagged_dense_bmm with y[b] [K, N] N-contiguous (the forward's y), kernel 0 (no cluster): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kDenseN, false, 0>() {
  return detail::entry<Operands::kDenseN, false, 0>();
}
template <>
const Instance& instance<Operands::kDenseN, true, 0>() {
  return detail::entry<Operands::kDenseN, true, 0>();
}
}  // namespace mymetaops::cuda::jagged_bmm
