// HIP-on-CUDA shim: just enough of HIP for the MFMA-free hip/ kernels to compile with nvcc and run
// on an NVIDIA GPU, so that their logic is tested on the machines we have. It is not a port of
// HIP: it maps the few names hip/ uses onto CUDA and nothing else. Use: nvcc -x cu -I hip/shim.
// (ROCm's own nvidia_detail headers would do this, but Debian's ROCm 5.2 copy does not compile
// against CUDA 13.)
#pragma once

#include <cuda_runtime.h>

// hip_compat.h picks the vendor branch from this macro, as real HIP headers would define it.
#define __HIP_PLATFORM_NVIDIA__ 1

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
constexpr hipError_t hipSuccess = cudaSuccess;

inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline const char* hipGetErrorString(hipError_t error) { return cudaGetErrorString(error); }

// HIP's shuffles take no member mask: lanes exchange within aligned segments of `width` lanes.
// CUDA's *_sync forms need the set of lanes taking part, and naming the whole warp would hang or
// be undefined when other segments of the warp have diverged (groups of lanes own different bags
// and leave their loops at different times). The caller's segment is exactly the set that
// exchanges, so it is the mask.
template <typename T>
__device__ inline T __shfl_xor(T var, int lane_mask, int width = warpSize) {
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  const unsigned segment_mask =
      width >= 32 ? 0xffffffffu : ((1u << width) - 1u) << (lane & ~unsigned(width - 1));
  return __shfl_xor_sync(segment_mask, var, lane_mask, width);
}
