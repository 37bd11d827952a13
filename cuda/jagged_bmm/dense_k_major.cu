// The grouped GEMM instances of jagged_dense_bmm with y[b] K-contiguous (the backward's y^T and grad^T): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kDenseK, false>() {
  return detail::entry<Operands::kDenseK, false>();
}
template <>
const Instance& instance<Operands::kDenseK, true>() {
  return detail::entry<Operands::kDenseK, true>();
}
}  // namespace mymetaops::cuda::jagged_bmm
