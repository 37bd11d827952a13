// The grouped GEMM instances of jagged_dense_bmm with y[b] [K, N] N-contiguous (the forward's y), kernel 1 (2x1 clusters): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kDenseN, false, 1>() {
  return detail::entry<Operands::kDenseN, false, 1>();
}
template <>
const Instance& instance<Operands::kDenseN, true, 1>() {
  return detail::entry<Operands::kDenseN, true, 1>();
}
}  // namespace mymetaops::cuda::jagged_bmm
