#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8Tiny>() {
  return detail::fp8_entry<kFp8Tiny>();
}
}  // namespace mymetaops::cuda::gemm
