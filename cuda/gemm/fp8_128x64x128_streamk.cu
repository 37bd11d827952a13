#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8Narrow>() {
  return detail::fp8_entry<kFp8Narrow>();
}
}  // namespace mymetaops::cuda::gemm
