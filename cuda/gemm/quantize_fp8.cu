// CUDA FP8 quantization (semantics: csrc/include/mymetaops/gemm.h, QuantizeFp8Args; the shared
// host checks: csrc/include/mymetaops/quantize_launch.h).
//
// Memory-bound: a call moves rows * cols * (in_bytes + 1) + rows * 4 bytes (rowwise), e.g.
// 131072 x 4096 bf16 = 1.61 GB, 0.38 ms at the H200's 4.27 TB/s copy rate. Everything below is
// about reading x once, 16 bytes per lane, with enough bytes in flight: ~1 us of latency at
// 4.27 TB/s is ~4.3 MB, ~32 KB per SM.
//
// Rowwise: a group of lanes owns a row (4, 16 or 32 lanes of a warp for short rows, a whole block
// for long ones; kRowConfigs) and keeps it in registers: each lane issues its kN 16-byte loads,
// the group reduces |x| to amax (shuffles, then shared memory across warps), computes the scale and
// quantizes from the registers. One read of x, one write of xq. The configs hold up to 4096
// vectors (32768 bf16 / 16384 fp32 columns); longer rows take a two-pass block loop that re-reads
// the row, from L2 mostly (rare for this op: the GEMM's K).
// Tensorwise: one launch with a grid-wide barrier (see quantize_tensorwise_kernel).
//
// Conversion: cvt.rn.satfinite.e4m3x2.f32 (cuda_fp8.h, __NV_SATFINITE): round to nearest even,
// saturation to +-448 (the same as clamping first), any NaN -> 0x7f. e4m3fnuz is an AMD (gfx942)
// format: NVIDIA has no fnuz GEMM, so the launcher rejects it (LaunchError) rather than carry
// kernel instances no one can use; hip/gemm/quantize_fp8.hip has it (also through hip/shim on
// NVIDIA GPUs).
// NaN policy: amax ignores NaN (fmaxf returns the other operand); a NaN element quantizes to NaN.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <utility>
#include <cstdint>

#include "../cuda_utils.cuh"
#include "mymetaops/gemm.h"
#include "mymetaops/launch.h"
#include "mymetaops/quantize_launch.h"

namespace mymetaops {
namespace {

using cuda::get_elt;
using cuda::launch_status;
using cuda::load_cached;
using cuda::load_streaming;
using cuda::RawVec;

constexpr int kWarpSize = 32;

struct CudaTypes {
  using Float32 = float;
  using Float16 = __half;
  using BFloat16 = __nv_bfloat16;
};

// ---------------------------------------------------------------------------------------------
// Device helpers.

// kVec values quantized (times inv) into kVec FP8 bytes, as the 32-bit words of a store: 8 bytes
// for 16-bit x, 4 for fp32, 1 (the low byte) for the scalar fallback.
template <int kVec>
struct Fp8Vec {
  static constexpr int kWords = kVec >= 4 ? kVec / 4 : 1;
  uint32_t w[kWords];
};

template <typename T, int kVec, int kVecBytes>
__device__ __forceinline__ Fp8Vec<kVec> quantize_vec(const RawVec<kVecBytes>& v, float inv) {
  Fp8Vec<kVec> q;
  if constexpr (kVec == 1) {
    q.w[0] = __nv_cvt_float_to_fp8(get_elt<T>(v, 0) * inv, __NV_SATFINITE, __NV_E4M3);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; i += 2) {
      const float2 pair = make_float2(get_elt<T>(v, i) * inv, get_elt<T>(v, i + 1) * inv);
      const uint32_t two = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
      if (i % 4 == 0) {
        q.w[i / 4] = two;
      } else {
        q.w[i / 4] |= two << 16;
      }
    }
  }
  return q;
}

template <int kVec>
__device__ __forceinline__ void store_fp8(uint8_t* p, const Fp8Vec<kVec>& q) {
  if constexpr (kVec == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(q.w[0], q.w[1]);
  } else if constexpr (kVec == 4) {
    *reinterpret_cast<uint32_t*>(p) = q.w[0];
  } else {
    static_assert(kVec == 1, "vector width");
    *p = static_cast<uint8_t>(q.w[0]);
  }
}

template <typename T, int kVecBytes>
__device__ __forceinline__ float abs_max(float m, const RawVec<kVecBytes>& v) {
#pragma unroll
  for (int i = 0; i < kVecBytes / static_cast<int>(sizeof(T)); ++i)
    m = fmaxf(m, fabsf(get_elt<T>(v, i)));
  return m;
}

// The formula's inverse scale from amax (true divisions: no fast reciprocal).
__device__ __forceinline__ float inverse_scale(float amax, float fp8_max) {
  return __fdiv_rn(fp8_max, fmaxf(amax, quantize::kMinAmax));
}

// Max of v over the aligned group of kGroup lanes (a power of two up to 32) or, with kGroup ==
// kThreads > 32, over the block, through `partial` (kThreads / 32 floats; the caller alternates two
// buffers between calls, so no second barrier is needed). Every thread of the block must call it.
template <int kGroup, int kThreads>
__device__ __forceinline__ float group_max(float v, float* partial) {
#pragma unroll
  for (int m = 1; m < (kGroup < kWarpSize ? kGroup : kWarpSize); m <<= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  if constexpr (kGroup > kWarpSize) {
    static_assert(kGroup == kThreads, "a group wider than a warp is the block");
    if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    v = partial[0];
#pragma unroll
    for (int w = 1; w < kThreads / kWarpSize; ++w) v = fmaxf(v, partial[w]);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Rowwise.

struct RowwiseParams {
  const char* x;
  int64_t x_row_bytes;  // ldx * element size
  int64_t rows;
  int vecs;             // vectors (of kVec elements) per row
  uint8_t* xq;          // rows of vecs * kVec bytes
  float* scale;
  const float* scale_ub;  // or nullptr
  float fp8_max;
};

// A launch config: kThreads per block, a group of kGroup lanes per row (kGroup == kThreads: the
// block), kN vectors per lane; kHold: the row fits (kGroup * kN >= vecs) and stays in registers,
// else the two-pass loop.
struct RowConfig {
  int threads, group, n;
  bool hold;
};
constexpr RowConfig kRowConfigs[] = {
    {256, 4, 2, true},      // <= 8 vectors (64 bf16 columns)
    {256, 16, 2, true},     // <= 32
    {256, 32, 2, true},     // <= 64
    {256, 32, 4, true},     // <= 128 (1024 bf16): a warp per row, no block barrier
    {128, 128, 2, true},    // <= 256
    {256, 256, 2, true},    // <= 512 (4096 bf16)
    {512, 512, 2, true},    // <= 1024
    {1024, 1024, 2, true},  // <= 2048
    {1024, 1024, 4, true},  // <= 4096 (32768 bf16)
    {256, 256, 4, false},   // longer rows
};
constexpr int kNumRowConfigs = sizeof(kRowConfigs) / sizeof(kRowConfigs[0]);

template <typename T, int kVec, int kConfig>
__global__ void __launch_bounds__(kRowConfigs[kConfig].threads)
    quantize_rowwise_kernel(const RowwiseParams p) {
  constexpr RowConfig kC = kRowConfigs[kConfig];
  constexpr int kVecBytes = kVec * static_cast<int>(sizeof(T));
  constexpr int kGroupsPerBlock = kC.threads / kC.group;
  __shared__ float partial[2][kC.threads / kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) % kC.group;
  const int group = static_cast<int>(threadIdx.x) / kC.group;
  const float ub = p.scale_ub != nullptr ? __ldg(p.scale_ub) : __int_as_float(0x7f800000);
  int parity = 0;
  // Block-uniform trip count: every lane takes part in the shuffles and barriers; lanes past the
  // last row load and store nothing.
#pragma unroll 1
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * kGroupsPerBlock) {
    const int64_t row = base + group;
    const bool active = row < p.rows;
    const char* xrow = p.x + row * p.x_row_bytes;
    uint8_t* qrow = p.xq + row * p.vecs * kVec;
    float amax = 0.0f;
    if constexpr (kC.hold) {
      RawVec<kVecBytes> v[kC.n];
#pragma unroll
      for (int j = 0; j < kC.n; ++j) {
        const int c = j * kC.group + lane;
        v[j] = load_streaming<kVecBytes>(xrow + static_cast<int64_t>(c) * kVecBytes,
                                         active && c < p.vecs);  // zeros when not loaded
      }
#pragma unroll
      for (int j = 0; j < kC.n; ++j) amax = abs_max<T>(amax, v[j]);
      amax = fminf(group_max<kC.group, kC.threads>(amax, partial[parity]), ub);
      parity ^= 1;
      const float inv = inverse_scale(amax, p.fp8_max);
      if (active && lane == 0) p.scale[row] = __fdiv_rn(1.0f, inv);
#pragma unroll
      for (int j = 0; j < kC.n; ++j) {
        const int c = j * kC.group + lane;
        if (active && c < p.vecs) store_fp8(qrow + c * kVec, quantize_vec<T, kVec>(v[j], inv));
      }
    } else {
      static_assert(kC.group == kC.threads, "the loop form is block-wide");
      constexpr int kStep = kC.group * kC.n;
#pragma unroll 1
      for (int c0 = lane; c0 < p.vecs; c0 += kStep) {
        RawVec<kVecBytes> v[kC.n];
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          v[j] = load_streaming<kVecBytes>(xrow + static_cast<int64_t>(c) * kVecBytes,
                                           active && c < p.vecs);
        }
#pragma unroll
        for (int j = 0; j < kC.n; ++j) amax = abs_max<T>(amax, v[j]);
      }
      amax = fminf(group_max<kC.group, kC.threads>(amax, partial[parity]), ub);
      parity ^= 1;
      const float inv = inverse_scale(amax, p.fp8_max);
      if (active && lane == 0) p.scale[row] = __fdiv_rn(1.0f, inv);
      if (!active) continue;  // block-uniform: with a block per row, active is the block's
#pragma unroll 1
      for (int c0 = lane; c0 < p.vecs; c0 += kStep) {
        RawVec<kVecBytes> v[kC.n];
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          v[j] = load_streaming<kVecBytes>(xrow + static_cast<int64_t>(c) * kVecBytes,
                                           c < p.vecs);
        }
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          if (c < p.vecs) store_fp8(qrow + c * kVec, quantize_vec<T, kVec>(v[j], inv));
        }
      }
    }
  }
}

// The first config that holds a row of `vecs` vectors, else the loop.
int row_config_for(int64_t vecs) {
  for (int i = 0; i < kNumRowConfigs; ++i) {
    const RowConfig& c = kRowConfigs[i];
    if (!c.hold || static_cast<int64_t>(c.group) * c.n >= vecs) return i;
  }
  return kNumRowConfigs - 1;
}

template <int... kIs, typename F>
LaunchError dispatch_row_config(int config, std::integer_sequence<int, kIs...>, F&& f) {
  LaunchError result = "quantize_fp8: no such row config";
  (void)((config == kIs ? (result = f(launch::IntTag<kIs>{}), true) : false) || ...);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Tensorwise, one launch: a persistent grid of at most the blocks that fit on the GPU at once
// (occupancy x SMs, cached per device), so every block is resident and the grid-wide barrier
// cannot deadlock (other work on the GPU only delays our blocks: it finishes and frees its SMs).
//  1. Each block reduces |x| over its work units (tiles of kTwThreads * kTwN vectors of one row;
//     a contiguous x is one long row) and atomicMax-es its amax into the workspace, keeping its
//     first unit in registers.
//  2. Barrier: thread 0 fences and counts itself in; the last to arrive reads the final amax,
//     writes scale[0] and sets the release flag, the others spin on it.
//  3. Each block quantizes its units: the first from registers, the others re-read (L2 for
//     tensors that fit it). A tensor of at most one unit per resident block (H200: 132 SMs x 4
//     blocks x 256 lanes x 8 vectors of 16 bytes = 17 MB of x) is read once; larger ones twice.
// The workspace (quantize_launch.h) is zeroed by the launcher on the stream before the launch.

constexpr int kTwThreads = 256;
constexpr int kTwN = 8;
constexpr int kTwMinBlocksPerSm = 4;  // <= 64 registers: 1024 lanes per SM

struct TensorwiseParams {
  const char* x;
  int64_t x_row_bytes;
  int64_t vecs;           // vectors per row (the whole tensor when contiguous)
  int64_t tiles_per_row;  // ceil(vecs / (kTwThreads * kTwN))
  int64_t units;          // rows * tiles_per_row
  uint8_t* xq;
  float* scale;
  uint32_t* ws;
  float fp8_max;
};

template <typename T, int kVec>
struct TwUnit {
  static constexpr int kVecBytes = kVec * static_cast<int>(sizeof(T));
  const char* src;  // the lane's first vector
  uint8_t* dst;
  int64_t left;     // vectors of the row from the lane's first one on (<= 0: none)

  __device__ __forceinline__ TwUnit(const TensorwiseParams& p, int64_t u) {
    const int64_t row = u / p.tiles_per_row;
    const int64_t c = (u - row * p.tiles_per_row) * (kTwThreads * kTwN) + threadIdx.x;
    src = p.x + row * p.x_row_bytes + c * kVecBytes;
    dst = p.xq + (row * p.vecs + c) * kVec;
    left = p.vecs - c;
  }
  // Vectors kFrom .. kFrom + kCount of the lane's kTwN, into v[0 .. kCount).
  template <int kFrom, int kCount>
  __device__ __forceinline__ void load(RawVec<kVecBytes> (&v)[kCount]) const {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      // Cached: the re-read of phase 3 should find it in L2.
      const int64_t at = (kFrom + j) * kTwThreads;
      v[j] = RawVec<kVecBytes>{};
      if (at < left) v[j] = load_cached<kVecBytes>(src + at * kVecBytes);
    }
  }
  template <int kFrom, int kCount>
  __device__ __forceinline__ void store(const RawVec<kVecBytes> (&v)[kCount], float inv) const {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int64_t at = (kFrom + j) * kTwThreads;
      if (at < left) store_fp8(dst + at * kVec, quantize_vec<T, kVec>(v[j], inv));
    }
  }
};

template <typename T, int kVec>
__global__ void __launch_bounds__(kTwThreads, kTwMinBlocksPerSm)
    quantize_tensorwise_kernel(const TensorwiseParams p) {
  constexpr int kVecBytes = kVec * static_cast<int>(sizeof(T));
  __shared__ float partial[kTwThreads / kWarpSize];
  __shared__ float global_amax;
  const int64_t first = blockIdx.x;
  const int64_t stride = gridDim.x;
  RawVec<kVecBytes> held[kTwN];
  float amax = 0.0f;
  if (first < p.units) {
    TwUnit<T, kVec>(p, first).template load<0, kTwN>(held);
#pragma unroll
    for (int j = 0; j < kTwN; ++j) amax = abs_max<T>(amax, held[j]);
  }
#pragma unroll 1
  for (int64_t u = first + stride; u < p.units; u += stride) {
    // Half a unit at a time: the held unit takes half of the 64 registers.
    constexpr int kHalf = kTwN / 2;
    const TwUnit<T, kVec> unit(p, u);
    RawVec<kVecBytes> v[kHalf];
    unit.template load<0, kHalf>(v);
#pragma unroll
    for (int j = 0; j < kHalf; ++j) amax = abs_max<T>(amax, v[j]);
    unit.template load<kHalf, kHalf>(v);
#pragma unroll
    for (int j = 0; j < kHalf; ++j) amax = abs_max<T>(amax, v[j]);
  }
  amax = group_max<kTwThreads, kTwThreads>(amax, partial);
  if (threadIdx.x == 0) {
    uint32_t* ws = p.ws;
    if (amax > 0.0f) atomicMax(ws + quantize::kWsAmax, __float_as_uint(amax));
    __threadfence();  // the amax before the arrival
    const uint32_t arrived = atomicAdd(ws + quantize::kWsArrived, 1u);
    volatile uint32_t* vws = ws;
    if (arrived == gridDim.x - 1) {  // last: every block's amax is in
      __threadfence();
      const float g = __uint_as_float(vws[quantize::kWsAmax]);
      p.scale[0] = __fdiv_rn(1.0f, inverse_scale(g, p.fp8_max));
      __threadfence();
      vws[quantize::kWsRelease] = 1u;
    } else {
      while (vws[quantize::kWsRelease] == 0u) __nanosleep(64);
      __threadfence();
    }
    global_amax = __uint_as_float(vws[quantize::kWsAmax]);
  }
  __syncthreads();
  const float inv = inverse_scale(global_amax, p.fp8_max);
  if (first < p.units) TwUnit<T, kVec>(p, first).template store<0, kTwN>(held, inv);
  // The held unit's registers are free now: a whole unit in flight again.
#pragma unroll 1
  for (int64_t u = first + stride; u < p.units; u += stride) {
    constexpr int kHalf = kTwN / 2;
    const TwUnit<T, kVec> unit(p, u);
    RawVec<kVecBytes> a[kHalf], b[kHalf];
    unit.template load<0, kHalf>(a);
    unit.template load<kHalf, kHalf>(b);
    unit.template store<0, kHalf>(a, inv);
    unit.template store<kHalf, kHalf>(b, inv);
  }
}

// Blocks of the kernel instance that fit on the current device at once, cached per device (one
// cache per instance: the template arguments).
template <typename T, int kVec>
LaunchError resident_blocks(int* blocks) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0: not known yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return launch_status();
  if (device >= 0 && device < kMaxDevices) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known > 0) {
      *blocks = known;
      return nullptr;
    }
  }
  int per_sm = 0, sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, quantize_tensorwise_kernel<T, kVec>,
                                                    kTwThreads, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return launch_status();
  const int n = per_sm * sms > 0 ? per_sm * sms : 1;
  if (device >= 0 && device < kMaxDevices) cache[device].store(n, std::memory_order_relaxed);
  *blocks = n;
  return nullptr;
}

template <int kVec, typename F>
LaunchError dispatch_vec(int vec, F&& f) {
  if (vec == 1) return f(launch::IntTag<1>{});
  return f(launch::IntTag<kVec>{});
}

}  // namespace

int64_t fp8_quantize_workspace_bytes(const QuantizeFp8Args& args) {
  return quantize::workspace_bytes(args);
}

LaunchError launch_quantize_fp8(const QuantizeFp8Args& args, void* stream) {
  if (LaunchError e = quantize::check(args)) return e;
  if (args.format != Fp8Format::kE4M3FN)
    return "quantize_fp8: e4m3fnuz is an AMD (gfx942) format; NVIDIA GPUs use e4m3fn";
  const auto s = static_cast<cudaStream_t>(stream);
  const int vec = quantize::vector_elements(args);
  const int elt = launch::element_bytes(args.x_dtype);
  const float fp8_max = quantize::fp8_max(args.format);

  if (args.mode == ScaleMode::kRowwise) {
    if (args.rows == 0) return nullptr;
    RowwiseParams p;
    p.x = static_cast<const char*>(args.x);
    p.x_row_bytes = args.ldx * elt;
    p.rows = args.rows;
    p.vecs = static_cast<int>(args.cols / vec);
    p.xq = static_cast<uint8_t*>(args.xq);
    p.scale = args.scale;
    p.scale_ub = args.scale_ub;
    p.fp8_max = fp8_max;
    const int config = row_config_for(p.vecs);
    return launch::dispatch_float<CudaTypes>(args.x_dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      return dispatch_vec<16 / sizeof(T)>(vec, [&](auto v) {
        return dispatch_row_config(
            config, std::make_integer_sequence<int, kNumRowConfigs>{}, [&](auto c) {
              constexpr RowConfig kC = kRowConfigs[decltype(c)::value];
              const int64_t groups_per_block = kC.threads / kC.group;
              int64_t blocks = (args.rows + groups_per_block - 1) / groups_per_block;
              if (blocks > 0x7fffffff) blocks = 0x7fffffff;  // the kernel loops over the rest
              quantize_rowwise_kernel<T, decltype(v)::value, decltype(c)::value>
                  <<<static_cast<unsigned>(blocks), kC.threads, 0, s>>>(p);
              return launch_status();
            });
      });
    });
  }

  // Tensorwise. A contiguous x (or one row) is quantized as one long row.
  const bool flat = args.rows <= 1 || args.ldx == args.cols;
  TensorwiseParams p;
  p.x = static_cast<const char*>(args.x);
  p.x_row_bytes = args.ldx * elt;
  p.vecs = (flat ? args.rows * args.cols : args.cols) / vec;
  const int64_t rows = flat ? (p.vecs > 0 ? 1 : 0) : args.rows;
  p.tiles_per_row = (p.vecs + kTwThreads * kTwN - 1) / (kTwThreads * kTwN);
  p.units = rows * p.tiles_per_row;
  p.xq = static_cast<uint8_t*>(args.xq);
  p.scale = args.scale;
  p.ws = static_cast<uint32_t*>(args.workspace);
  p.fp8_max = fp8_max;
  if (cudaMemsetAsync(args.workspace, 0, quantize::kTensorwiseWorkspaceBytes, s) != cudaSuccess)
    return launch_status();
  return launch::dispatch_float<CudaTypes>(args.x_dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    return dispatch_vec<16 / sizeof(T)>(vec, [&](auto v) -> LaunchError {
      constexpr int kVec = decltype(v)::value;
      int resident = 0;
      if (LaunchError e = resident_blocks<T, kVec>(&resident)) return e;
      // At least one block: an empty tensor still gets its scale.
      const int64_t blocks = p.units < 1 ? 1 : (p.units < resident ? p.units : resident);
      quantize_tensorwise_kernel<T, kVec><<<static_cast<unsigned>(blocks), kTwThreads, 0, s>>>(p);
      return launch_status();
    });
  });
}

}  // namespace mymetaops
