#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8SmallNSwapped>() {
  return detail::fp8_entry<kFp8SmallNSwapped>();
}
}  // namespace mymetaops::cuda::gemm
