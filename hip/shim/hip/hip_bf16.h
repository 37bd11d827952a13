// HIP-on-CUDA shim (see hip_runtime.h): HIP's bf16 header (ROCm >= 5.7) is CUDA's.
#pragma once

#include <cuda_bf16.h>
