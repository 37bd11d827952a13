// Small device helpers shared by the CUDA kernels: raw vector loads/stores of 2..16 bytes, the
// element <-> fp32 conversions of the table dtypes, the device error record, and the launch-status
// check.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "mymetaops/errors.h"
#include "mymetaops/types.h"

namespace mymetaops {
namespace cuda {

// VEC bytes held as 32-bit words (a 2-byte vector uses the low half of one word), so every
// vector width is the same register array and all indexing is compile-time. Loads and stores
// take 2, 4, 8 or 16 bytes; wider ones only pack scalars (get_elt / set_bits).
template <int VEC>
struct RawVec {
  static_assert(VEC == 2 || VEC % 4 == 0, "vector width");
  static constexpr int kWords = VEC >= 4 ? VEC / 4 : 1;
  uint32_t w[kWords];
};

// Loads of table rows: read-only path (ld.global.nc) that does not allocate in L1, since a
// randomly gathered row is not re-read by the same SM (measured on an H200: 1-10% faster than
// allocating loads, most for 128-byte rows). The predicate lives inside the asm so the
// load is predicated rather than branched around, and a skipped load yields zeros.
// Not volatile: the compiler may hoist/schedule these freely (the memory is read-only).
template <int VEC>
__device__ __forceinline__ RawVec<VEC> load_streaming(const void* ptr, bool pred) {
  RawVec<VEC> v;
  const int p = pred;
  if constexpr (VEC == 16) {
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
        : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
        : "l"(ptr), "r"(p));
  } else if constexpr (VEC == 8) {
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"
        " @p ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n}"
        : "=r"(v.w[0]), "=r"(v.w[1])
        : "l"(ptr), "r"(p));
  } else if constexpr (VEC == 4) {
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, 0;\n"
        " @p ld.global.nc.L1::no_allocate.u32 %0, [%1];\n}"
        : "=r"(v.w[0])
        : "l"(ptr), "r"(p));
  } else {
    uint16_t h;
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b16 %0, 0;\n"
        " @p ld.global.nc.L1::no_allocate.u16 %0, [%1];\n}"
        : "=h"(h)
        : "l"(ptr), "r"(p));
    v.w[0] = h;
  }
  return v;
}

// Read-only load that does allocate in L1: for data re-read by the same SM (a bag's grad row).
template <int VEC>
__device__ __forceinline__ RawVec<VEC> load_cached(const void* ptr) {
  RawVec<VEC> v;
  if constexpr (VEC == 16) {
    const uint4 x = __ldg(static_cast<const uint4*>(ptr));
    v.w[0] = x.x, v.w[1] = x.y, v.w[2] = x.z, v.w[3] = x.w;
  } else if constexpr (VEC == 8) {
    const uint2 x = __ldg(static_cast<const uint2*>(ptr));
    v.w[0] = x.x, v.w[1] = x.y;
  } else if constexpr (VEC == 4) {
    v.w[0] = __ldg(static_cast<const uint32_t*>(ptr));
  } else {
    v.w[0] = __ldg(static_cast<const unsigned short*>(ptr));
  }
  return v;
}

template <int VEC>
__device__ __forceinline__ void store_vec(void* ptr, const RawVec<VEC>& v) {
  if constexpr (VEC == 16) {
    *static_cast<uint4*>(ptr) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  } else if constexpr (VEC == 8) {
    *static_cast<uint2*>(ptr) = make_uint2(v.w[0], v.w[1]);
  } else if constexpr (VEC == 4) {
    *static_cast<uint32_t*>(ptr) = v.w[0];
  } else {
    *static_cast<unsigned short*>(ptr) = static_cast<unsigned short>(v.w[0]);
  }
}

// Conversions between a table element's bits (zero-extended to 32) and fp32.
template <typename T>
struct Elt;

template <>
struct Elt<float> {
  __device__ static float to_float(uint32_t bits) { return __uint_as_float(bits); }
  __device__ static uint32_t from_float(float x) { return __float_as_uint(x); }
};

template <>
struct Elt<__half> {
  __device__ static float to_float(uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  __device__ static uint32_t from_float(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

template <>
struct Elt<__nv_bfloat16> {
  __device__ static float to_float(uint32_t bits) { return __uint_as_float(bits << 16); }
  __device__ static uint32_t from_float(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};

// Element i of a vector of T, and its store counterpart (i is a compile-time constant after
// unrolling, so the shifts and masks fold away).
template <typename T, int VEC>
__device__ __forceinline__ float get_elt(const RawVec<VEC>& v, int i) {
  if constexpr (sizeof(T) == 4) {
    return Elt<T>::to_float(v.w[i]);
  } else {
    return Elt<T>::to_float((v.w[i / 2] >> (16 * (i % 2))) & 0xffffu);
  }
}

// Stores the bits of element i (zero-extended to 32); even elements first, odd ones OR in.
template <typename T, int VEC>
__device__ __forceinline__ void set_bits(RawVec<VEC>& v, int i, uint32_t bits) {
  if constexpr (sizeof(T) == 4) {
    v.w[i] = bits;
  } else if (i % 2 == 0) {
    v.w[i / 2] = bits;
  } else {
    v.w[i / 2] |= bits << 16;
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void set_elt(RawVec<VEC>& v, int i, float x) {
  set_bits<T>(v, i, Elt<T>::from_float(x));
}

// The bits of one scalar of T, zero-extended (per-sample weights).
template <typename T>
__device__ __forceinline__ uint32_t load_bits(const T* ptr) {
  return load_cached<sizeof(T)>(ptr).w[0];
}

// Records a bad value in the DeviceErrorRecord `errors` (mymetaops/errors.h; nullptr: do not
// record) unless a kernel has claimed it already: the first one wins. Rare path only: the record
// is pinned host memory, so each access crosses the host link.
__device__ inline void record_error(int64_t* errors, ErrorOp op, ErrorCode code, int64_t position,
                                    int64_t value, int64_t bound) {
  if (errors == nullptr) return;
  if (atomicCAS(reinterpret_cast<unsigned long long*>(errors + kErrClaimed), 0ull, 1ull) != 0ull)
    return;
  errors[kErrOp] = static_cast<int64_t>(op);
  errors[kErrPosition] = position;
  errors[kErrValue] = value;
  errors[kErrBound] = bound;
  // The host reads the fields once it sees the code: they must be visible to it first.
  __threadfence_system();
  *static_cast<volatile int64_t*>(errors + kErrCode) = static_cast<int64_t>(code);
}

// Status of the launch just made (also reports an earlier asynchronous error, as every CUDA
// launch check does).
inline LaunchError launch_status() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Makes the current device's primary context current on this thread. Driver-API calls the runtime
// does not wrap (cuTensorMapEncodeTiled: CuTe's TMA descriptors) need one, and a thread that has
// made no runtime call yet has none: the autograd engine's device thread runs the backward (and
// checkpointed forwards), and torch skips cudaSetDevice there when the device number already
// matches. Descriptors built without it fail (CUDA_ERROR_INVALID_CONTEXT) and the kernel then
// faults (H200, run 21).
inline LaunchError bind_device_context() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    return cudaGetErrorString(cudaGetLastError());
  }
  return nullptr;
}

}  // namespace cuda
}  // namespace mymetaops
