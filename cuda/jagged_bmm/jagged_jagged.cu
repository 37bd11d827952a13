// The grouped GEMM instances of jagged_jagged_bmm (and the backward's weight gradient of jagged_dense_bmm), kernel 0 (no cluster): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kJagged, false, 0>() {
  return detail::entry<Operands::kJagged, false, 0>();
}
template <>
const Instance& instance<Operands::kJagged, true, 0>() {
  return detail::entry<Operands::kJagged, true, 0>();
}
}  // namespace mymetaops::cuda::jagged_bmm
