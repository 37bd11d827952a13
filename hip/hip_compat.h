// The vendor and architecture differences the hip/ kernels need, behind a few names, so the
// kernels themselves carry no #ifdef. Two settings:
//  * AMD (clang -x hip / hipcc): CDNA targets gfx90a, gfx942, gfx950, all wave64.
//  * The HIP-on-CUDA shim (nvcc -x cu -I hip/shim), used to test the kernels' logic on NVIDIA
//    GPUs: wave (warp) size 32.
// It needs only HIP headers that Debian's ROCm 5.2 has, and no device library (ocml/ockl):
// conversions go through compiler types and bit operations.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "mymetaops/errors.h"

#if defined(__HIP_PLATFORM_AMD__)
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__GFX9__)
#error "hip/ kernels are written for CDNA (gfx9 family, wave64); RDNA is not a target"
#endif
#else
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#endif

namespace mymetaops::hip_compat {

// Lanes per wavefront (warp). Host code validates configs against it, device code sizes groups.
#if defined(__HIP_PLATFORM_AMD__)
constexpr int kWaveSize = 64;
#else
constexpr int kWaveSize = 32;
#endif

// Index of the calling thread in its (1-D) block and of the block in the grid. Debian's ROCm 5.2
// headers implement threadIdx/blockIdx as calls into the ockl device library, which is not linked
// without device libraries (-nogpulib): the calls would stay external and force a call frame and
// spills. The compiler builtins read the hardware registers directly.
#if defined(__HIP_PLATFORM_AMD__)
__device__ inline unsigned thread_in_block() { return __builtin_amdgcn_workitem_id_x(); }
__device__ inline unsigned block_in_grid() { return __builtin_amdgcn_workgroup_id_x(); }
#else
__device__ inline unsigned thread_in_block() { return threadIdx.x; }
__device__ inline unsigned block_in_grid() { return blockIdx.x; }
#endif

template <typename To, typename From>
__host__ __device__ inline To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  return __builtin_bit_cast(To, from);
}

// 16-bit floats travel as raw bits; all arithmetic is fp32. Narrowing rounds to nearest even and
// keeps NaN a NaN (the compiler's own conversions; gfx950 has them in hardware).
__device__ inline float bfloat16_bits_to_float(uint16_t bits) {
  return bit_cast<float>(uint32_t(bits) << 16);
}

#if defined(__HIP_PLATFORM_AMD__)
__device__ inline float half_bits_to_float(uint16_t bits) {
  return static_cast<float>(bit_cast<_Float16>(bits));
}
__device__ inline uint16_t float_to_half_bits(float x) {
  return bit_cast<uint16_t>(static_cast<_Float16>(x));
}
__device__ inline uint16_t float_to_bfloat16_bits(float x) {
  return bit_cast<uint16_t>(static_cast<__bf16>(x));
}
#else
__device__ inline float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
__device__ inline uint16_t float_to_half_bits(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
__device__ inline uint16_t float_to_bfloat16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
#endif

// Load of an embedding-table row slice (2, 4, 8 or 16 bytes, naturally aligned) with a streaming
// cache hint: tables are far bigger than the caches (MI300X: 256 MB Infinity Cache), so a row read
// by a lookup is rarely still there for the next one; the hint keeps the caches for indices,
// offsets and grad rows. On AMD a 16-byte access is one global_load_dwordx4 ... nt.
template <int kBytes>
struct RawBits;  // the integer (vector) type one load of kBytes moves
#if defined(__HIP_PLATFORM_AMD__)
template <>
struct RawBits<2> {
  using type = uint16_t;
};
template <>
struct RawBits<4> {
  using type = uint32_t;
};
template <>
struct RawBits<8> {
  using type = uint32_t __attribute__((ext_vector_type(2)));
};
template <>
struct RawBits<16> {
  using type = uint32_t __attribute__((ext_vector_type(4)));
};

template <typename T>
__device__ inline T load_streaming(const T* p) {
  using Raw = typename RawBits<sizeof(T)>::type;
  return bit_cast<T>(__builtin_nontemporal_load(reinterpret_cast<const Raw*>(p)));
}
#else
template <>
struct RawBits<2> {
  using type = unsigned short;
};
template <>
struct RawBits<4> {
  using type = unsigned;
};
template <>
struct RawBits<8> {
  using type = uint2;
};
template <>
struct RawBits<16> {
  using type = uint4;
};

template <typename T>
__device__ inline T load_streaming(const T* p) {
  using Raw = typename RawBits<sizeof(T)>::type;
  return bit_cast<T>(__ldcs(reinterpret_cast<const Raw*>(p)));  // evict-first: the same hint
}
#endif

// Called between the row loads of a batch and their use. The batches issue all their row loads
// before using any (vmcnt waits in issue order); clang-22's gfx950 schedule starts accumulating an
// unroll-8 batch before its last loads are issued, so there nothing may cross this point. Not on
// gfx942: there the schedule keeps the batch, and constrained it spills (clang-19).
#if defined(__gfx950__)
__device__ inline void rows_issued() { __builtin_amdgcn_sched_barrier(0); }
#else
__device__ inline void rows_issued() {}
#endif

// Two fp32 values computed together: on CDNA3/4 one v_pk_fma_f32 does both FMAs. The kernels pair
// adjacent columns of one row explicitly through this: left to itself, the SLP vectorizer pairs
// terms of different rows, and the shuffles that needs push register use into spills.
#if defined(__HIP_PLATFORM_AMD__)
using Float2 = float __attribute__((ext_vector_type(2)));
__device__ inline Float2 fma2(Float2 a, Float2 b, Float2 c) {
  return __builtin_elementwise_fma(a, b, c);
}
#else
using Float2 = float2;
__device__ inline Float2 fma2(Float2 a, Float2 b, Float2 c) {
  return {fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y)};
}
#endif

// Sums each of v[0..N) over the aligned group of `width` lanes (a power of two <= kWaveSize) that
// holds the calling lane; every lane of the group gets the totals. All lanes of the group must be
// active. The N reductions advance step by step together: independent chains that overlap.
#if defined(__HIP_PLATFORM_AMD__)
// A butterfly needs any pairing of lanes per step, not xor exactly: within a 16-lane DPP row,
// the quad permutes and the (half-)row mirrors pair lanes as xor 1, 2, 4, 8 would, and they run on
// the VALU through DPP instead of the LDS crossbar. The 16-lane step uses ds_swizzle (bit mode,
// xor 16, no address VGPR); only the 32-lane step, a full wave64 group, needs ds_bpermute.
namespace dpp {
constexpr int kQuadXor1 = 0xb1;        // quad_perm:[1,0,3,2]
constexpr int kQuadXor2 = 0x4e;        // quad_perm:[2,3,0,1]
constexpr int kRowHalfMirror = 0x141;  // lane i <-> 7 - i within each 8 lanes
constexpr int kRowMirror = 0x140;      // lane i <-> 15 - i within each 16 lanes
constexpr int kAllRows = 0xf, kAllBanks = 0xf;
constexpr int kSwizzleXor16 = 0x1f | (0x10 << 10);  // ds_swizzle bit mode: and 0x1f, xor 0x10
}  // namespace dpp

// bound_ctrl (no "old" operand) lets the compiler fuse the move into the add: v_add_f32_dpp.
template <int kCtrl>
__device__ inline float dpp_move(float v) {
  return bit_cast<float>(
      __builtin_amdgcn_mov_dpp(bit_cast<int>(v), kCtrl, dpp::kAllRows, dpp::kAllBanks, true));
}

// The group width is fixed per instance: run-time width tests here would be turned into selects,
// i.e. lane masks held in SGPRs for the whole kernel.
template <int kWidth, int N>
__device__ inline void group_sum_fixed(float (&v)[N]) {
  if constexpr (kWidth > 1)
    for (int i = 0; i < N; ++i) v[i] += dpp_move<dpp::kQuadXor1>(v[i]);
  if constexpr (kWidth > 2)
    for (int i = 0; i < N; ++i) v[i] += dpp_move<dpp::kQuadXor2>(v[i]);
  if constexpr (kWidth > 4)
    for (int i = 0; i < N; ++i) v[i] += dpp_move<dpp::kRowHalfMirror>(v[i]);
  if constexpr (kWidth > 8)
    for (int i = 0; i < N; ++i) v[i] += dpp_move<dpp::kRowMirror>(v[i]);
  if constexpr (kWidth > 16) {
    for (int i = 0; i < N; ++i)
      v[i] += bit_cast<float>(__builtin_amdgcn_ds_swizzle(bit_cast<int>(v[i]), dpp::kSwizzleXor16));
  }
  if constexpr (kWidth > 32)
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor(v[i], 32, kWaveSize);
}

template <int N>
__device__ inline void group_sum(float (&v)[N], int width) {
  switch (width) {  // uniform: a scalar jump
    case 2: return group_sum_fixed<2>(v);
    case 4: return group_sum_fixed<4>(v);
    case 8: return group_sum_fixed<8>(v);
    case 16: return group_sum_fixed<16>(v);
    case 32: return group_sum_fixed<32>(v);
    case 64: return group_sum_fixed<64>(v);
    default: return;  // width 1: nothing to add
  }
}
#else
template <int N>
__device__ inline void group_sum(float (&v)[N], int width) {
  for (int mask = 1; mask < width; mask <<= 1)
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor(v[i], mask, width);
}
#endif

// What the device error record (mymetaops/errors.h) needs to publish a record to the host: a
// system-scope fence, and a store the host sees. On AMD, HIP's __threadfence_system is a
// device-library call (not linked here), and a system-scope atomic store keeps the code out of any
// cache the host does not see.
#if defined(__HIP_PLATFORM_AMD__)
__device__ inline void fence_system() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }
__device__ inline void store_system(int64_t* p, int64_t value) {
  __hip_atomic_store(p, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
#else
__device__ inline void fence_system() { __threadfence_system(); }
__device__ inline void store_system(int64_t* p, int64_t value) {
  *static_cast<volatile int64_t*>(p) = value;
}
#endif

// Records a bad value in the DeviceErrorRecord `errors` (nullptr: do not record) unless a kernel
// has claimed it already: the first one wins. Rare path only: the record is pinned host memory, so
// each access crosses the host link.
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
  fence_system();
  store_system(errors + kErrCode, static_cast<int64_t>(code));
}

// Launchers check after every launch; nullptr means success.
inline const char* launch_error() {
  const hipError_t error = hipGetLastError();
  return error == hipSuccess ? nullptr : hipGetErrorString(error);
}

}  // namespace mymetaops::hip_compat
