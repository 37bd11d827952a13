// HIP-on-CUDA shim (see hip_runtime.h): HIP's fp16 header is CUDA's.
#pragma once

#include <cuda_fp16.h>
