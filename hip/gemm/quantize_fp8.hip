// FP8 quantization for AMD CDNA3/CDNA4 (gfx942: e4m3fnuz, gfx950: e4m3fn), wave64. Semantics:
// csrc/include/mymetaops/gemm.h (QuantizeFp8Args); the shared host checks:
// csrc/include/mymetaops/quantize_launch.h. cuda/gemm/quantize_fp8.cu defines the same launchers.
//
// Memory-bound: rows * cols * (in_bytes + 1) + rows * 4 bytes per rowwise call. MI300X streams
// ~5.3 TB/s at ~1-2 us latency, so several MB must be in flight across its 304 CUs: each lane
// issues all its 16-byte loads (global_load_dwordx4) of a row before using any.
//
// Rowwise: a group of lanes owns a row (8, 32 or 64 lanes of a wave for short rows, the whole
// workgroup for long ones; kRowConfigs) and keeps it in VGPRs: load, reduce |x| (shuffles, then LDS
// across waves), scale, quantize from the registers: one read of x, one write of xq. Rows longer
// than the configs hold (4096 vectors) take a two-pass loop that re-reads the row (from L2/MALL).
// Tensorwise: one launch, a persistent grid with a grid-wide barrier (see the kernel).
//
// Conversion: fp8::e4m3_from_float (mymetaops/fp8_convert.h), bit-exact software: round to
// nearest even, saturation to +-max (= clamping first), NaN -> 0x7f (fn) / 0x80 (fnuz), no -0 in
// fnuz. One fp32 add and ~10 integer ops per value, under the ~20 VALU ops per element an MI300X
// can spend at full bandwidth on bf16. Hardware has v_cvt_pk_fp8_f32 (gfx942: fnuz, gfx950: OCP
// fn), but its saturation and NaN behaviour are not verifiable here (no AMD GPU), and the software
// path is the one hip/shim tests on NVIDIA, so the software path is used on every target.
// NaN policy: amax ignores NaN (a NaN |x| never wins the compare); a NaN element quantizes to NaN.
// No MFMA, no LDS beyond the reduction: the kernels also run on NVIDIA GPUs through hip/shim.
#include <atomic>
#include <cstdint>
#include <utility>

#include "../hip_compat.h"
#include "mymetaops/fp8_convert.h"
#include "mymetaops/gemm.h"
#include "mymetaops/launch.h"
#include "mymetaops/quantize_launch.h"

namespace mymetaops {
namespace {

using hip_compat::kWaveSize;

// 16-bit floats as raw bits (hip_compat converts them).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

struct HipTypes {
  using Float32 = float;
  using Float16 = Half;
  using BFloat16 = BFloat16;
};

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(Half x) { return hip_compat::half_bits_to_float(x.bits); }
__device__ inline float to_float(BFloat16 x) { return hip_compat::bfloat16_bits_to_float(x.bits); }

// kVec elements of x, one load (16 bytes, or one element on the scalar fallback).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) XVec {
  T e[kVec];
};

// kStreaming: rowwise reads x once (nontemporal hint); tensorwise re-reads it (cached).
template <typename T, int kVec, bool kStreaming>
__device__ inline XVec<T, kVec> load_x(const char* p) {
  const auto* q = reinterpret_cast<const XVec<T, kVec>*>(p);
  if constexpr (kStreaming) {
    return hip_compat::load_streaming(q);
  } else {
    return *q;
  }
}

// Read instead of x by lanes with nothing to load (past the row or the last row): zero bits of
// the widest access.
struct alignas(16) ZeroVec {
  uint32_t words[4];
};
__device__ ZeroVec g_zero_vec;

// Vector c of the row at `row`, or zeros when !ok. The load is unconditional either way, from x
// or from the zero stand-in: a load under a branch (or a value select the compiler turns into
// one) waits for itself inside it, and the lane's loads would no longer be in flight together
// (vmcnt counts in issue order).
template <typename T, int kVec, bool kStreaming>
__device__ inline XVec<T, kVec> load_or_zero(const char* row, int64_t c, bool ok) {
  constexpr int64_t kVecBytes = kVec * static_cast<int64_t>(sizeof(T));
  const char* zero = reinterpret_cast<const char*>(&g_zero_vec);
  return load_x<T, kVec, kStreaming>(ok ? row + c * kVecBytes : zero);
}

// |x| max that ignores NaN: a NaN operand never compares greater.
__device__ inline float max_ignore_nan(float m, float v) { return v > m ? v : m; }
__device__ inline float abs_f(float v) {
  return hip_compat::bit_cast<float>(hip_compat::bit_cast<uint32_t>(v) & 0x7fffffffu);
}

template <typename T, int kVec>
__device__ inline float abs_max(float m, const XVec<T, kVec>& v) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) m = max_ignore_nan(m, abs_f(to_float(v.e[i])));
  return m;
}

// The formula's inverse scale (HIP's fp32 division is correctly rounded by default).
__device__ inline float inverse_scale(float amax, float fp8_max) {
  return fp8_max / max_ignore_nan(quantize::kMinAmax, amax);
}

// kVec FP8 bytes of v * inv, stored at p (8, 4 or 1 bytes, naturally aligned).
template <bool kFnuz, typename T, int kVec>
__device__ inline void quantize_store(uint8_t* p, const XVec<T, kVec>& v, float inv) {
  uint32_t w[kVec >= 4 ? kVec / 4 : 1] = {};
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    w[i / 4] |= fp8::e4m3_from_float<kFnuz>(to_float(v.e[i]) * inv) << (8 * (i % 4));
  if constexpr (kVec == 8) {
    using Raw = typename hip_compat::RawBits<8>::type;
    *reinterpret_cast<Raw*>(p) = Raw{w[0], w[1]};
  } else if constexpr (kVec == 4) {
    *reinterpret_cast<uint32_t*>(p) = w[0];
  } else {
    static_assert(kVec == 1, "vector width");
    *p = static_cast<uint8_t>(w[0]);
  }
}

// Max over the aligned group of kGroup lanes (a power of two up to the wave) or, with kGroup ==
// kThreads > kWaveSize, over the workgroup through `partial` (kThreads / kWaveSize floats; callers
// alternate two buffers, so one barrier per call is enough). Every lane of the block calls it.
template <int kGroup, int kThreads>
__device__ inline float group_max(float v, float* partial) {
#pragma unroll
  for (int m = 1; m < (kGroup < kWaveSize ? kGroup : kWaveSize); m <<= 1)
    v = max_ignore_nan(v, __shfl_xor(v, m, kWaveSize));
  if constexpr (kGroup > kWaveSize) {
    static_assert(kGroup == kThreads, "a group wider than a wave is the workgroup");
    const unsigned t = hip_compat::thread_in_block();
    if (t % kWaveSize == 0) partial[t / kWaveSize] = v;
    hip_compat::block_sync();
    v = partial[0];
#pragma unroll
    for (int w = 1; w < kThreads / kWaveSize; ++w) v = max_ignore_nan(v, partial[w]);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Rowwise.

struct RowwiseParams {
  const char* x;
  int64_t x_row_bytes;
  int64_t rows;
  int vecs;  // vectors of kVec elements per row
  uint8_t* xq;
  float* scale;
  const float* scale_ub;
  float fp8_max;
  uint32_t blocks;  // the grid (gridDim is a device-library call in ROCm 5.2's headers)
};

struct RowConfig {
  int threads, group, n;
  bool hold;  // the row stays in registers (group * n >= vecs), else the two-pass loop
};
// Capacities in vectors (16 bytes: 8 bf16/fp16, 4 fp32) for wave64; through the shim (wave 32) the
// wave-sized groups hold half as much, and the launcher picks by the actual capacity.
constexpr RowConfig kRowConfigs[] = {
    {256, 8, 2, true},               // <= 16 vectors
    {256, kWaveSize / 2, 2, true},   // <= 64
    {256, kWaveSize, 2, true},       // <= 128
    {256, kWaveSize, 4, true},       // <= 256 (2048 bf16): a wave per row, no barrier
    {256, 256, 2, true},             // <= 512 (4096 bf16)
    {512, 512, 2, true},             // <= 1024
    {1024, 1024, 2, true},           // <= 2048
    {1024, 1024, 4, true},           // <= 4096
    {256, 256, 4, false},            // longer rows
};
constexpr int kNumRowConfigs = sizeof(kRowConfigs) / sizeof(kRowConfigs[0]);

template <typename T, int kVec, bool kFnuz, int kConfig>
__global__ void __launch_bounds__(kRowConfigs[kConfig].threads)
    quantize_rowwise_kernel(const RowwiseParams p) {
  constexpr RowConfig kC = kRowConfigs[kConfig];
  constexpr int kGroupsPerBlock = kC.threads / kC.group;
  __shared__ float partial[2][kC.threads / kWaveSize];
  const int t = static_cast<int>(hip_compat::thread_in_block());
  const int lane = t % kC.group;
  const int group = t / kC.group;
  const float ub = p.scale_ub != nullptr ? *p.scale_ub : hip_compat::bit_cast<float>(0x7f800000u);
  int parity = 0;
  // Block-uniform trip count: every lane takes part in the shuffles and barriers.
#pragma unroll 1
  for (int64_t base = static_cast<int64_t>(hip_compat::block_in_grid()) * kGroupsPerBlock;
       base < p.rows; base += static_cast<int64_t>(p.blocks) * kGroupsPerBlock) {
    const int64_t row = base + group;
    const bool active = row < p.rows;
    const char* xrow = p.x + row * p.x_row_bytes;
    uint8_t* qrow = p.xq + row * p.vecs * kVec;
    float amax = 0.0f;
    if constexpr (kC.hold) {
      XVec<T, kVec> v[kC.n];
#pragma unroll
      for (int j = 0; j < kC.n; ++j) {
        const int c = j * kC.group + lane;
        v[j] = load_or_zero<T, kVec, true>(xrow, c, active && c < p.vecs);
      }
#pragma unroll
      for (int j = 0; j < kC.n; ++j) amax = abs_max(amax, v[j]);
      amax = group_max<kC.group, kC.threads>(amax, partial[parity]);
      amax = ub < amax ? ub : amax;
      parity ^= 1;
      const float inv = inverse_scale(amax, p.fp8_max);
      if (active && lane == 0) p.scale[row] = 1.0f / inv;
#pragma unroll
      for (int j = 0; j < kC.n; ++j) {
        const int c = j * kC.group + lane;
        if (active && c < p.vecs) quantize_store<kFnuz>(qrow + c * kVec, v[j], inv);
      }
    } else {
      static_assert(kC.group == kC.threads, "the loop form is workgroup-wide");
      constexpr int kStep = kC.group * kC.n;
#pragma unroll 1
      for (int c0 = lane; c0 < p.vecs; c0 += kStep) {
        XVec<T, kVec> v[kC.n];
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          v[j] = load_or_zero<T, kVec, false>(xrow, c, active && c < p.vecs);
        }
#pragma unroll
        for (int j = 0; j < kC.n; ++j) amax = abs_max(amax, v[j]);
      }
      amax = group_max<kC.group, kC.threads>(amax, partial[parity]);
      amax = ub < amax ? ub : amax;
      parity ^= 1;
      const float inv = inverse_scale(amax, p.fp8_max);
      if (active && lane == 0) p.scale[row] = 1.0f / inv;
      if (!active) continue;  // workgroup-uniform: the group is the workgroup
#pragma unroll 1
      for (int c0 = lane; c0 < p.vecs; c0 += kStep) {
        XVec<T, kVec> v[kC.n];
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          v[j] = load_or_zero<T, kVec, false>(xrow, c, c < p.vecs);
        }
#pragma unroll
        for (int j = 0; j < kC.n; ++j) {
          const int c = c0 + j * kC.group;
          if (c < p.vecs) quantize_store<kFnuz>(qrow + c * kVec, v[j], inv);
        }
      }
    }
  }
}

int row_config_for(int64_t vecs) {
  for (int i = 0; i < kNumRowConfigs; ++i) {
    const RowConfig& c = kRowConfigs[i];
    if (!c.hold || int64_t{c.group} * c.n >= vecs) return i;
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
// Tensorwise, one launch: a persistent grid of at most the workgroups the GPU holds at once
// (occupancy x CUs, cached per device), so all are resident and the grid-wide barrier cannot
// deadlock (other work only delays ours: it finishes and frees its CUs).
//  1. Each workgroup reduces |x| over its units (tiles of kTwThreads * kTwN vectors of one row; a
//     contiguous x is one long row), keeping its first unit in VGPRs, and atomicMax-es its amax
//     into the workspace.
//  2. Barrier: lane 0 counts its workgroup in (release); the last one reads the final amax, writes
//     scale[0] and sets the release flag; the others spin on it (acquire).
//  3. Each workgroup quantizes its units: the first from VGPRs, the others re-read (from L2/MALL
//     for tensors that fit). MI300X: 304 CUs x 8 workgroups x 256 lanes x 128 bytes = 80 MB of x
//     is read once; larger tensors twice.
// The workspace (quantize_launch.h) is zeroed by the launcher on the stream before the launch.

constexpr int kTwThreads = 256;
constexpr int kTwN = 8;

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
  uint32_t blocks;
};

template <typename T, int kVec>
struct TwUnit {
  static constexpr int kVecBytes = kVec * static_cast<int>(sizeof(T));
  const char* src;  // the tile's first vector (always in the row)
  uint8_t* dst;
  int64_t left;     // vectors of the row from the tile's first one on (>= 1)
  int t;            // the lane

  __device__ inline TwUnit(const TensorwiseParams& p, int64_t u, int lane) : t(lane) {
    const int64_t row = u / p.tiles_per_row;
    const int64_t c = (u - row * p.tiles_per_row) * (kTwThreads * kTwN);
    src = p.x + row * p.x_row_bytes + c * kVecBytes;
    dst = p.xq + (row * p.vecs + c) * kVec;
    left = p.vecs - c;
  }
  // The lane's vectors kFrom .. kFrom + kCount, into v[0 .. kCount) (zeros past the row).
  template <int kFrom, int kCount>
  __device__ inline void load(XVec<T, kVec> (&v)[kCount]) const {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int64_t at = int64_t{kFrom + j} * kTwThreads + t;
      v[j] = load_or_zero<T, kVec, false>(src, at, at < left);  // cached: re-read
    }
  }
  template <bool kFnuz, int kFrom, int kCount>
  __device__ inline void store(const XVec<T, kVec> (&v)[kCount], float inv) const {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int64_t at = int64_t{kFrom + j} * kTwThreads + t;
      if (at < left) quantize_store<kFnuz>(dst + at * kVec, v[j], inv);
    }
  }
};

template <typename T, int kVec, bool kFnuz>
__global__ void __launch_bounds__(kTwThreads) quantize_tensorwise_kernel(const TensorwiseParams p) {
  using Unit = TwUnit<T, kVec>;
  __shared__ float partial[kTwThreads / kWaveSize];
  __shared__ float global_amax;
  const int t = static_cast<int>(hip_compat::thread_in_block());
  const int64_t first = hip_compat::block_in_grid();
  const int64_t stride = p.blocks;
  XVec<T, kVec> held[kTwN];
  float amax = 0.0f;
  if (first < p.units) {
    Unit(p, first, t).template load<0, kTwN>(held);
#pragma unroll
    for (int j = 0; j < kTwN; ++j) amax = abs_max(amax, held[j]);
  }
#pragma unroll 1
  for (int64_t u = first + stride; u < p.units; u += stride) {
    // Half a unit at a time: the held unit's VGPRs stay live here.
    constexpr int kHalf = kTwN / 2;
    const Unit unit(p, u, t);
    XVec<T, kVec> v[kHalf];
    unit.template load<0, kHalf>(v);
#pragma unroll
    for (int j = 0; j < kHalf; ++j) amax = abs_max(amax, v[j]);
    unit.template load<kHalf, kHalf>(v);
#pragma unroll
    for (int j = 0; j < kHalf; ++j) amax = abs_max(amax, v[j]);
  }
  amax = group_max<kTwThreads, kTwThreads>(amax, partial);
  if (t == 0) {
    uint32_t* ws = p.ws;
    if (amax > 0.0f) atomicMax(ws + quantize::kWsAmax, hip_compat::bit_cast<uint32_t>(amax));
    hip_compat::fence_device();  // the amax before the arrival
    const uint32_t arrived = atomicAdd(ws + quantize::kWsArrived, 1u);
    if (arrived == p.blocks - 1) {  // last: every workgroup's amax is in
      hip_compat::fence_device();
      const float g = hip_compat::bit_cast<float>(
          hip_compat::load_acquire_device(ws + quantize::kWsAmax));
      p.scale[0] = 1.0f / inverse_scale(g, p.fp8_max);
      hip_compat::store_release_device(ws + quantize::kWsRelease, 1u);
    } else {
      while (hip_compat::load_acquire_device(ws + quantize::kWsRelease) == 0u)
        hip_compat::spin_pause();
    }
    global_amax =
        hip_compat::bit_cast<float>(hip_compat::load_acquire_device(ws + quantize::kWsAmax));
  }
  hip_compat::block_sync();
  const float inv = inverse_scale(global_amax, p.fp8_max);
  if (first < p.units) Unit(p, first, t).template store<kFnuz, 0, kTwN>(held, inv);
#pragma unroll 1
  for (int64_t u = first + stride; u < p.units; u += stride) {
    const Unit unit(p, u, t);
    XVec<T, kVec> v[kTwN];
    unit.template load<0, kTwN>(v);
    unit.template store<kFnuz, 0, kTwN>(v, inv);
  }
}

// Workgroups of the kernel instance the current device holds at once, cached per device and
// instance.
template <typename T, int kVec, bool kFnuz>
LaunchError resident_blocks(int* blocks) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0: not known yet
  int device = 0;
  if (LaunchError e = hip_compat::current_device(&device)) return e;
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known > 0) {
      *blocks = known;
      return nullptr;
    }
  }
  if (LaunchError e = hip_compat::max_resident_blocks(quantize_tensorwise_kernel<T, kVec, kFnuz>,
                                                      kTwThreads, blocks))
    return e;
  if (cached) cache[device].store(*blocks, std::memory_order_relaxed);
  return nullptr;
}

template <int kVec, typename F>
LaunchError dispatch_vec(int vec, F&& f) {
  if (vec == 1) return f(launch::IntTag<1>{});
  return f(launch::IntTag<kVec>{});
}

template <typename F>
LaunchError dispatch_format(Fp8Format format, F&& f) {
  if (format == Fp8Format::kE4M3FNUZ) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace

int64_t fp8_quantize_workspace_bytes(const QuantizeFp8Args& args) {
  return quantize::workspace_bytes(args);
}

LaunchError launch_quantize_fp8(const QuantizeFp8Args& args, void* stream) {
  if (LaunchError e = quantize::check(args)) return e;
  const auto s = static_cast<hipStream_t>(stream);
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
    return launch::dispatch_float<HipTypes>(args.x_dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      return dispatch_vec<16 / sizeof(T)>(vec, [&](auto v) {
        return dispatch_format(args.format, [&](auto fnuz) {
          return dispatch_row_config(
              config, std::make_integer_sequence<int, kNumRowConfigs>{}, [&](auto c) {
                constexpr RowConfig kC = kRowConfigs[decltype(c)::value];
                const int64_t groups_per_block = kC.threads / kC.group;
                // HIP counts a grid's work-items in 32 bits; the kernel loops over the rest.
                const int64_t max_blocks = UINT32_MAX / kC.threads;
                int64_t blocks = (args.rows + groups_per_block - 1) / groups_per_block;
                if (blocks > max_blocks) blocks = max_blocks;
                p.blocks = static_cast<uint32_t>(blocks);
                quantize_rowwise_kernel<T, decltype(v)::value, decltype(fnuz)::value,
                                        decltype(c)::value>
                    <<<p.blocks, kC.threads, 0, s>>>(p);
                return hip_compat::launch_error();
              });
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
  if (LaunchError e =
          hip_compat::memset_zero_async(args.workspace, quantize::kTensorwiseWorkspaceBytes, s))
    return e;
  return launch::dispatch_float<HipTypes>(args.x_dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    return dispatch_vec<16 / sizeof(T)>(vec, [&](auto v) {
      return dispatch_format(args.format, [&](auto fnuz) -> LaunchError {
        constexpr int kVec = decltype(v)::value;
        constexpr bool kFnuz = decltype(fnuz)::value;
        int resident = 0;
        if (LaunchError e = resident_blocks<T, kVec, kFnuz>(&resident)) return e;
        // At least one workgroup: an empty tensor still gets its scale.
        const int64_t blocks = p.units < 1 ? 1 : (p.units < resident ? p.units : resident);
        p.blocks = static_cast<uint32_t>(blocks);
        quantize_tensorwise_kernel<T, kVec, kFnuz><<<p.blocks, kTwThreads, 0, s>>>(p);
        return hip_compat::launch_error();
      });
    });
  });
}

}  // namespace mymetaops
