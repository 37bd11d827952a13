#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8LargeTall>() {
  return detail::fp8_entry<kFp8LargeTall>();
}
}  // namespace mymetaops::cuda::gemm
