// The grouped GEMM instances of jagged_dense_bmm with y[b] K-contiguous (the backward's y^T and grad^T), kernel 0 (no cluster): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kDenseK, false, 0>() {
  return detail::entry<Operands::kDenseK, false, 0>();
}
template <>
const Instance& instance<Operands::kDenseK, true, 0>() {
  return detail::entry<Operands::kDenseK, true, 0>();
}
}  // namespace mymetaops::cuda::jagged_bmm
