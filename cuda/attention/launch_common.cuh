// Host-side pieces the attention launchers share (attention.cu, dkdv.cu, dq.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cutlass/numeric_types.h>

#include "../cuda_utils.cuh"
#include "fwd_kernel.cuh"
#include "mymetaops/types.h"

namespace mymetaops {
namespace cuda {
namespace attention {

// launch(T{}, Int<D>{}, IndexT{}) for the arguments' element type (bf16 / fp16), head dim (64 or
// 128) and offsets type (int32 / int64): the kernels' template instances.
template <typename Launch>
LaunchError dispatch_types(DType dtype, int head_dim, DType offsets_dtype, Launch&& launch) {
  auto with_index = [&](auto t, auto d) {
    return offsets_dtype == DType::kInt32 ? launch(t, d, int32_t{}) : launch(t, d, int64_t{});
  };
  auto with_dim = [&](auto t) { return head_dim == 64 ? with_index(t, Int<64>{}) : with_index(t, Int<128>{}); };
  return dtype == DType::kBFloat16 ? with_dim(cutlass::bfloat16_t{}) : with_dim(cutlass::half_t{});
}

// kernel<<<ctas, threads, smem>>>(p) after opting into smem bytes of dynamic shared memory.
template <typename Kernel, typename Params>
LaunchError launch_with_smem(Kernel kernel, int64_t ctas, int smem, cudaStream_t stream, const Params& p,
                             int threads = kThreads) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    return launch_status();
  }
  kernel<<<static_cast<unsigned>(ctas), threads, smem, stream>>>(p);
  return launch_status();
}

}  // namespace attention
}  // namespace cuda
}  // namespace mymetaops
