#include "gemm_kernels.cuh"

namespace mymetaops::cuda::gemm {
template <>
const Fp8Instance& fp8_instance<kFp8SplitK>() {
  return detail::fp8_entry<kFp8SplitK>();
}
}  // namespace mymetaops::cuda::gemm
