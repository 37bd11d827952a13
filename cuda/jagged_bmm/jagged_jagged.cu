// The grouped GEMM instances of jagged_jagged_bmm (and the backward's weight gradient of jagged_dense_bmm): bf16 and fp16.
#include "grouped_gemm.cuh"

namespace mymetaops::cuda::jagged_bmm {
template <>
const Instance& instance<Operands::kJagged, false>() {
  return detail::entry<Operands::kJagged, false>();
}
template <>
const Instance& instance<Operands::kJagged, true>() {
  return detail::entry<Operands::kJagged, true>();
}
}  // namespace mymetaops::cuda::jagged_bmm
