// The grouped GEMM instances of jagged_dense_bmm with y[b] [K, N] N-contiguous (the forward's y): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kDenseN, false>() {
  return detail::entry<Operands::kDenseN, false>();
}
template <>
const Instance& instance<Operands::kDenseN, true>() {
  return detail::entry<Operands::kDenseN, true>();
}
}  // namespace mymetaops::cuda::jagged_bmm
