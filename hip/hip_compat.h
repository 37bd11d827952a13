// The vendor and architecture differences the hip/ kernels need, behind a few names, so the
// kernels themselves carry no #ifdef. Two settings:
//  * AMD (clang -x hip / hipcc): CDNA targets gfx90a, gfx942, gfx950, all wave64.
//  * The HIP-on-CUDA shim (nvcc -x cu -I hip/shim), used to test the kernels' logic on NVIDIA
//    GPUs: wave (warp) size 32.
// It needs only HIP headers that Debian's ROCm 5.2 has, and no device library (ocml/ockl):
// conversions go through compiler types and bit operations.
#pragma once

#include <hip/hip_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>

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

// ---------------------------------------------------------------------------------------------
// The GEMM family's arch differences (hip/gemm/).

// The CDNA generation a pass compiles for. Kernels written for one generation wrap their body in
// `if constexpr (Tile::kArch == kDeviceCdna)`: the gfx942 pass then holds only the gfx942
// bodies, the gfx950 pass only the gfx950 ones; the other kernels (and every kernel in the host
// pass, on gfx90a and through the shim) are a trap that is never launched.
enum class Cdna : int32_t { kNone = 0, kGfx942 = 942, kGfx950 = 950 };
#if defined(__gfx942__)
constexpr Cdna kDeviceCdna = Cdna::kGfx942;
#elif defined(__gfx950__)
constexpr Cdna kDeviceCdna = Cdna::kGfx950;
#else
constexpr Cdna kDeviceCdna = Cdna::kNone;
#endif

// LDS one workgroup may allocate: 64 KB on CDNA3 (gfx942), 160 KB on CDNA4 (gfx950).
constexpr int lds_budget_bytes(Cdna arch) { return arch == Cdna::kGfx950 ? 163840 : 65536; }

// The FP8 format each generation's MFMA reads: gfx942 has e4m3fnuz (max 240, one NaN 0x80, no
// -0, exponent bias 8), gfx950 the OCP e4m3fn of NVIDIA (max 448, bias 7).
constexpr bool fp8_is_fnuz(Cdna arch) { return arch == Cdna::kGfx942; }
constexpr const char* cdna_name(Cdna arch) {
  return arch == Cdna::kGfx942 ? "gfx942" : arch == Cdna::kGfx950 ? "gfx950" : "none";
}

// The generation of the calling thread's current device, from hipDeviceProp_t.gcnArchName
// ("gfx942:sramecc+:xnack-"), asked once per device and cached (a race only repeats the query).
// Through the shim (NVIDIA): kNone.
inline Cdna current_device_cdna() {
#if defined(__HIP_PLATFORM_AMD__)
  constexpr int kMaxDevices = 64;
  static std::atomic<int32_t> cache[kMaxDevices] = {};  // 0: not asked yet, else Cdna + 1
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess || device < 0 || device >= kMaxDevices) {
    (void)hipGetLastError();
    return Cdna::kNone;
  }
  int32_t known = cache[device].load(std::memory_order_relaxed);
  if (known == 0) {
    Cdna arch = Cdna::kNone;
    hipDeviceProp_t prop;
    if (hipGetDeviceProperties(&prop, device) == hipSuccess) {
      const auto is = [&](const char* name) {
        const size_t n = std::strlen(name);
        return std::strncmp(prop.gcnArchName, name, n) == 0 &&
               (prop.gcnArchName[n] == '\0' || prop.gcnArchName[n] == ':');
      };
      arch = is("gfx942") ? Cdna::kGfx942 : is("gfx950") ? Cdna::kGfx950 : Cdna::kNone;
    } else {
      (void)hipGetLastError();
    }
    known = static_cast<int32_t>(arch) + 1;
    cache[device].store(known, std::memory_order_relaxed);
  }
  return static_cast<Cdna>(known - 1);
#else
  return Cdna::kNone;
#endif
}

// A kernel body that must never run (another generation's kernel): stops the wave loudly.
__device__ inline void trap() {
#if defined(__HIP_PLATFORM_AMD__)
  __builtin_trap();
#else
  __trap();
#endif
}

// Workgroup barrier that also orders LDS accesses. HIP 5.2's __syncthreads() calls the device
// library's __atomic_work_item_fence (not linked here): the compiler's own fences and barrier.
#if defined(__HIP_PLATFORM_AMD__)
__device__ inline void block_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#else
__device__ inline void block_sync() { __syncthreads(); }
#endif

// Register vectors the MFMA builtins take: 16 fp32 accumulators of a 32x32 output block, and
// 8 x 32-bit words of operand bytes. The shim has plain structs with the same indexing.
#if defined(__HIP_PLATFORM_AMD__)
using F32x16 = float __attribute__((ext_vector_type(16)));
using I32x8 = int32_t __attribute__((ext_vector_type(8)));
using U32x4 = uint32_t __attribute__((ext_vector_type(4)));
#else
template <typename T, int N>
struct RegVec {
  T v[N];
  __host__ __device__ T& operator[](int i) { return v[i]; }
  __host__ __device__ const T& operator[](int i) const { return v[i]; }
};
using F32x16 = RegVec<float, 16>;
using I32x8 = RegVec<int32_t, 8>;
using U32x4 = RegVec<uint32_t, 4>;
#endif

// The FP8 x FP8 -> fp32 MFMA of each generation, on a 32x32 output block (F32x16; lane l holds
// column l % 32 and rows 8 * (i / 4) + 4 * (l / 32) + i % 4 of element i). Lane l gives row l % 32
// of A and column l % 32 of B, kLaneBytes fp8 bytes each, taken from words[0 .. kLaneBytes / 4):
// the instruction pairs byte j of lane l's A with byte j of lane l's B (over both lane halves),
// so any assignment of k to (lane half, byte) works as long as A and B use the same one.
//  * gfx942: v_mfma_f32_32x32x16_fp8_fp8, K = 16, 8 bytes (a long) per lane, e4m3fnuz.
//  * gfx950: v_mfma_f32_32x32x64_f8f6f4, K = 64, 32 bytes (8 ints) per lane, cbsz = blgp = 0
//    (both operands OCP fp8 e4m3). The builtin is the block-scaled one; with both scales 0 the
//    backend selects the unscaled instruction (as composable_kernel relies on), i.e. no scaling.
// Another arch's pass (and the shim) compiles the call to a trap: the kernels keep it out of
// their bodies there anyway.
template <Cdna kArch>
struct Fp8Mfma;
template <>
struct Fp8Mfma<Cdna::kGfx942> {
  static constexpr int kK = 16;
  static constexpr int kLaneBytes = 8;
  __device__ static F32x16 run(const uint32_t* words, const uint32_t* b_words, F32x16 acc) {
#if defined(__gfx942__)
    const long a = static_cast<long>((uint64_t(words[1]) << 32) | words[0]);
    const long b = static_cast<long>((uint64_t(b_words[1]) << 32) | b_words[0]);
    return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, acc, 0, 0, 0);
#else
    (void)words, (void)b_words;
    trap();
    return acc;
#endif
  }
};
template <>
struct Fp8Mfma<Cdna::kGfx950> {
  static constexpr int kK = 64;
  static constexpr int kLaneBytes = 32;
  __device__ static F32x16 run(const uint32_t* words, const uint32_t* b_words, F32x16 acc) {
#if defined(__gfx950__)
    I32x8 a, b;
    for (int i = 0; i < 8; ++i) a[i] = static_cast<int32_t>(words[i]);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<int32_t>(b_words[i]);
    return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, acc, 0, 0, 0, 0, 0, 0);
#else
    (void)words, (void)b_words;
    trap();
    return acc;
#endif
  }
};

// Whether this build runs on MFMA hardware (AMD). Through the shim, MFMA kernels that opt in
// compute each MFMA block with plain fp32 FMAs instead (same tile, same accumulator layout), so
// their tiling and index logic is tested on NVIDIA GPUs; kernels choose with `if constexpr`.
#if defined(__HIP_PLATFORM_AMD__)
constexpr bool kHasMfma = true;
#else
constexpr bool kHasMfma = false;
#endif

// The 16-bit float MFMA on a 32x32 output block, K = 8: v_mfma_f32_32x32x8_bf16 (kBf16) or
// v_mfma_f32_32x32x8_f16 (gfx942 / gfx950 names; gfx90a calls them ..._32x32x8bf16_1k and
// ..._32x32x8f16). acc has Fp8Mfma's layout. Lane l gives row l % 32 of A and column l % 32 of B,
// 4 values each in two words (low half first): as with Fp8Mfma, values are paired by (lane half,
// slot), so any assignment of k to them works as long as A and B use the same one. Elsewhere (the
// host pass, the shim) a trap: kernels keep the call out of their bodies there (kHasMfma).
template <bool kBf16>
__device__ inline F32x16 mfma_32x32x8_16bit(uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1,
                                            F32x16 acc) {
#if defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx950__)
  using U32x2 = uint32_t __attribute__((ext_vector_type(2)));
  const U32x2 a = {a0, a1}, b = {b0, b1};
  if constexpr (kBf16) {
    using S16x4 = short __attribute__((ext_vector_type(4)));
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(bit_cast<S16x4>(a), bit_cast<S16x4>(b), acc, 0,
                                                    0, 0);
  } else {
    using F16x4 = _Float16 __attribute__((ext_vector_type(4)));
    return __builtin_amdgcn_mfma_f32_32x32x8f16(bit_cast<F16x4>(a), bit_cast<F16x4>(b), acc, 0, 0,
                                                0);
  }
#else
  (void)a0, (void)a1, (void)b0, (void)b1;
  trap();
  return acc;
#endif
}

// 16-byte LDS access (ds_read_b128 / ds_write_b128) and 16-byte global load.
__device__ inline U32x4 load16(const void* p) { return *static_cast<const U32x4*>(p); }
__device__ inline void store16(void* p, U32x4 v) { *static_cast<U32x4*>(p) = v; }

// Launchers check after every launch; nullptr means success.
inline const char* launch_error() {
  const hipError_t error = hipGetLastError();
  return error == hipSuccess ? nullptr : hipGetErrorString(error);
}

// ---------------------------------------------------------------------------------------------
// FP8 quantize (hip/gemm/quantize_fp8.hip): the tensorwise grid barrier and its grid size.

// Agent (device) scope acquire load and release store of a 32-bit workspace word.
#if defined(__HIP_PLATFORM_AMD__)
__device__ inline uint32_t load_acquire_device(const uint32_t* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ inline void store_release_device(uint32_t* p, uint32_t value) {
  __hip_atomic_store(p, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ inline void spin_pause() { __builtin_amdgcn_s_sleep(1); }
// HIP 5.2's __threadfence() calls the device library's __atomic_work_item_fence (not linked).
__device__ inline void fence_device() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
#else
__device__ inline uint32_t load_acquire_device(const uint32_t* p) {
  uint32_t value;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  return value;
}
__device__ inline void store_release_device(uint32_t* p, uint32_t value) {
  asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(p), "r"(value) : "memory");
}
__device__ inline void spin_pause() { __nanosleep(64); }
__device__ inline void fence_device() { __threadfence(); }
#endif

// Blocks of `threads` threads of `kernel` (no dynamic LDS) that the current device holds at once,
// over all its CUs/SMs (>= 1); nullptr or the runtime's error.
template <typename Kernel>
inline const char* max_resident_blocks(Kernel kernel, int threads, int* blocks) {
#if defined(__HIP_PLATFORM_AMD__)
  int device = 0, per_cu = 0, cus = 0;
  if (hipGetDevice(&device) != hipSuccess ||
      hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_cu, kernel, threads, 0) != hipSuccess ||
      hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess)
    return launch_error();
#else
  int device = 0, per_cu = 0, cus = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_cu, kernel, threads, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&cus, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return launch_error();
#endif
  *blocks = per_cu * cus > 0 ? per_cu * cus : 1;
  return nullptr;
}

// The calling thread's current device (its index), for per-device caches.
inline const char* current_device(int* device) {
#if defined(__HIP_PLATFORM_AMD__)
  return hipGetDevice(device) == hipSuccess ? nullptr : launch_error();
#else
  return cudaGetDevice(device) == cudaSuccess ? nullptr : launch_error();
#endif
}

// Zeroes `bytes` at p, in order on `stream`.
inline const char* memset_zero_async(void* p, size_t bytes, void* stream) {
#if defined(__HIP_PLATFORM_AMD__)
  return hipMemsetAsync(p, 0, bytes, static_cast<hipStream_t>(stream)) == hipSuccess
             ? nullptr
             : launch_error();
#else
  return cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream)) == cudaSuccess
             ? nullptr
             : launch_error();
#endif
}

}  // namespace mymetaops::hip_compat
