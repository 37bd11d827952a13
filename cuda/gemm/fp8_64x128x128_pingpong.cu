#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8SmallM>() {
  return detail::fp8_entry<kFp8SmallM>();
}
}  // namespace mymetaops::cuda::gemm
