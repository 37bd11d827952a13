#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8Medium>() {
  return detail::fp8_entry<kFp8Medium>();
}
}  // namespace mymetaops::cuda::gemm
