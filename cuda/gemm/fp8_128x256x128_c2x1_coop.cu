#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8Large>() {
  return detail::fp8_entry<kFp8Large>();
}
}  // namespace mymetaops::cuda::gemm
