// Both layouts of B share a table row: w[N, K] and w[K, N] (GemmArgs.w_kn).
#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const GemmInstance& bf16_instance<kBf16Large, false>() {
  return detail::bf16_entry<kBf16Large, false>();
}
template <>
const GemmInstance& bf16_instance<kBf16Large, true>() {
  return detail::bf16_entry<kBf16Large, true>();
}
}  // namespace mymetaops::cuda::gemm
