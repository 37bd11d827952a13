// FP8 GEMM for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950: MI350X/MI355X), wave64, MFMA.
// Semantics and launcher ABI: csrc/include/mymetaops/gemm.h. cuda/gemm/ defines the same symbols;
// a build links one of the two.
//
//   out[m, n] = (sum_k xq[m, k] * wq[n, k]) * x_scale[m | 0] * w_scale[n | 0] + bias[n]
//
// One kernel template, its tile per generation (Gfx942Fp8Tile, Gfx950Fp8Tile). A workgroup of 4
// waves computes a BM x BN output tile; the waves form a kWavesM x kWavesN grid, each wave a grid
// of 32x32 MFMA blocks whose fp32 accumulators live in AGPRs. K advances BK bytes (= BK fp8
// elements) per step:
//   * global -> registers: every lane loads 16-byte chunks (global_load_dwordx4) of A and B rows;
//     the next K tile's loads are issued before the current tile's MFMAs (register prefetch).
//   * registers -> LDS: two stages (double buffer), one workgroup barrier per K tile. A row is
//     BK + 16 bytes in LDS: the pad makes the 8 lanes of one ds_read_b128 phase (rows r..r+7 at the
//     same column) hit 8 disjoint groups of 4 banks (row strides 80 and 144 bytes).
//   * LDS -> MFMA: lane l reads row l % 32 of its block, half l / 32 of the K tile (BK / 2
//     contiguous bytes, ds_read_b128), for A and B alike. The MFMA sums over matching (lane half,
//     byte) slots of A and B, so this contiguous assignment of k needs no shuffle (hip_compat.h).
// Rows past M / N are clamped into range for loading (their results are never stored); a 16-byte
// chunk past K (K % 16 == 0, so a chunk is all in or all out) is loaded from a valid address and
// replaced by zeros. Scales and bias are applied in the epilogue, in fp32, one rounding to out.
// Split-K (GemmConfig.split_k > 1): slice s of K writes its unscaled fp32 partial sums to the
// workspace [split][M][N]; fp8_gemm_finish_kernel adds the slices in order (deterministic) and
// applies scales and bias. K == 0 runs only the finish kernel (bias or zeros).
//
// Out: bfloat16, float16 or float32 (bias in the same type). The table (native_gemm_kernels) lists
// both generations' rows, the arch in the name; launch_fp8_gemm checks the current device's arch
// (hipDeviceProp_t.gcnArchName, cached per device in hip_compat) against the row and the FP8
// format, and returns a LaunchError on any mismatch or on another GPU (gfx90a, the shim).

#include <cstdint>

#include "../hip_compat.h"
#include "mymetaops/gemm.h"

namespace mymetaops {
namespace fp8_gemm_detail {  // named: nvcc flags unused internal-linkage entities on the shim

using hip_compat::Cdna;
using hip_compat::F32x16;
using hip_compat::U32x4;

constexpr int kThreads = 256;  // 4 waves of 64 lanes
constexpr int kWaves = kThreads / 64;
constexpr int kMaxSplitK = 16;
constexpr int kFinishThreads = 256;
inline constexpr int kGroupM = 8;  // tiles of kGroupM tile rows are walked column-major: W panel reuse

// HIP's min/max may come from the device library on some header versions; these are plain.
__device__ inline int imin(int a, int b) { return a < b ? a : b; }
__device__ inline int imax(int a, int b) { return a > b ? a : b; }

// The work of one workgroup: a BM x BN tile, K in steps of BK (64 on gfx942: 4 MFMAs of K 16;
// 128 on gfx950: 2 MFMAs of K 64). Two LDS stages of (BM + BN) padded rows.
template <Cdna kArch_, int kBM_, int kBN_, int kBK_, int kWavesM_, int kWavesN_>
struct Fp8TileBase {
  using Mfma = hip_compat::Fp8Mfma<kArch_>;
  static constexpr Cdna kArch = kArch_;
  static constexpr int kBM = kBM_, kBN = kBN_, kBK = kBK_;
  static constexpr int kWavesM = kWavesM_, kWavesN = kWavesN_;
  static constexpr int kWaveM = kBM / kWavesM, kWaveN = kBN / kWavesN;
  static constexpr int kFragsM = kWaveM / 32, kFragsN = kWaveN / 32;
  static constexpr int kRowBytes = kBK + 16;
  static constexpr int kStageBytes = (kBM + kBN) * kRowBytes;
  static constexpr int kLdsBytes = 2 * kStageBytes;
  static constexpr int kChunksPerRow = kBK / 16;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kLoadsA = kBM / kRowsPerPass, kLoadsB = kBN / kRowsPerPass;
  // Per lane and K tile: BK / 2 bytes of its row, read kReadBytes at a time (>= 16: ds_read_b128).
  static constexpr int kReadBytes = Mfma::kLaneBytes > 16 ? Mfma::kLaneBytes : 16;
  static constexpr int kReads = kBK / 2 / kReadBytes;
  static constexpr int kStepsPerRead = kReadBytes / Mfma::kLaneBytes;
  static_assert(kWavesM * kWavesN == kWaves, "4 waves per workgroup");
  static_assert(kWaveM % 32 == 0 && kWaveN % 32 == 0, "waves own whole 32x32 MFMA blocks");
  static_assert(kBK % Mfma::kK == 0 && kReadBytes % Mfma::kLaneBytes == 0 &&
                    (kBK / 2) % kReadBytes == 0,
                "a K tile is whole MFMA steps");
  static_assert(kBM % kRowsPerPass == 0 && kBN % kRowsPerPass == 0, "whole load passes");
  static_assert(kLdsBytes <= hip_compat::lds_budget_bytes(kArch), "over the arch's LDS");
};

// gfx942 (MI300X: 304 CUs, 64 KB LDS): BK = 64 keeps two stages of a 256x128 tile in 61,440 B.
template <int kBM, int kBN, int kWavesM, int kWavesN>
struct Gfx942Fp8Tile : Fp8TileBase<Cdna::kGfx942, kBM, kBN, 64, kWavesM, kWavesN> {};
// gfx950 (MI355X: 256 CUs, 160 KB LDS): BK = 128, two MFMAs of K 64 per tile; 256x128 takes
// 110,592 B (a 256x256 tile would need 256 accumulators per lane with 4 waves).
template <int kBM, int kBN, int kWavesM, int kWavesN>
struct Gfx950Fp8Tile : Fp8TileBase<Cdna::kGfx950, kBM, kBN, 128, kWavesM, kWavesN> {};

// Output element types, carried as raw bits; all arithmetic is fp32.
struct BFloat16 {
  uint16_t bits;
};
struct Half {
  uint16_t bits;
};
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(BFloat16 x) { return hip_compat::bfloat16_bits_to_float(x.bits); }
__device__ inline float to_float(Half x) { return hip_compat::half_bits_to_float(x.bits); }
template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline BFloat16 from_float<BFloat16>(float x) {
  return {hip_compat::float_to_bfloat16_bits(x)};
}
template <>
__device__ inline Half from_float<Half>(float x) {
  return {hip_compat::float_to_half_bits(x)};
}

struct Fp8GemmParams {
  const uint8_t* x;  // [m, k], row stride ldx bytes
  const uint8_t* w;  // [n, k], row stride ldw bytes
  int64_t ldx, ldw, ldo;
  int32_t m, n, k;
  int32_t tiles_m, tiles_n;
  int32_t k_tiles_per_split;  // K tiles of one split-K slice
  const float* x_scale;
  const float* w_scale;
  int32_t x_scale_step, w_scale_step;  // 1 rowwise, 0 tensorwise
  const void* bias;                     // [n] out type, or nullptr
  void* out;                            // [m, n], row stride ldo elements
  float* partial;                       // split-K: [split][m][n] fp32 (row stride n)
};

// out = acc * x_scale * w_scale + bias, rounded once to Out (the split-K finish).
template <typename Out>
__device__ inline void store_result(const Fp8GemmParams& p, int row, int col, float acc) {
  const float scaled = acc * p.x_scale[int64_t(row) * p.x_scale_step] *
                       p.w_scale[int64_t(col) * p.w_scale_step];
  const float bias = p.bias ? to_float(static_cast<const Out*>(p.bias)[col]) : 0.0f;
  static_cast<Out*>(p.out)[row * p.ldo + col] = from_float<Out>(scaled + bias);
}

template <typename Tile, typename Out, bool kPartial>
__device__ inline void fp8_gemm_body(const Fp8GemmParams& p) {
  using Mfma = typename Tile::Mfma;
  constexpr int kBM = Tile::kBM, kBN = Tile::kBN, kBK = Tile::kBK, kRow = Tile::kRowBytes;
  __shared__ __attribute__((aligned(16))) uint8_t lds[Tile::kLdsBytes];

  const int tid = static_cast<int>(hip_compat::thread_in_block());
  const int lane = tid % 64, wave = tid / 64;
  const int wave_m = wave / Tile::kWavesN, wave_n = wave % Tile::kWavesN;

  // Which tile and K slice: slices outermost, then groups of kGroupM tile rows, column-major.
  const int64_t bid = hip_compat::block_in_grid();
  const int64_t tiles = int64_t(p.tiles_m) * p.tiles_n;
  const int split = static_cast<int>(bid / tiles);
  const int t = static_cast<int>(bid - split * tiles);
  const int group = t / (kGroupM * p.tiles_n);
  const int first_m = group * kGroupM;
  const int group_rows = imin(p.tiles_m - first_m, kGroupM);
  const int in_group = t - group * (kGroupM * p.tiles_n);
  const int m0 = (first_m + in_group % group_rows) * kBM;
  const int n0 = (in_group / group_rows) * kBN;

  const int k_tiles = (p.k + kBK - 1) / kBK;
  const int kt_begin = split * p.k_tiles_per_split;
  const int kt_end = imin(kt_begin + p.k_tiles_per_split, k_tiles);
  const int num_kt = imax(kt_end - kt_begin, 0);

  // This lane's load slots: 16-byte chunk `chunk` of rows row0 + i * kRowsPerPass.
  const int chunk = tid % Tile::kChunksPerRow;
  const int row0 = tid / Tile::kChunksPerRow;
  const uint8_t* a_rows[Tile::kLoadsA];
  const uint8_t* b_rows[Tile::kLoadsB];
#pragma unroll
  for (int i = 0; i < Tile::kLoadsA; ++i)
    a_rows[i] = p.x + imin(m0 + row0 + i * Tile::kRowsPerPass, p.m - 1) * p.ldx;
#pragma unroll
  for (int i = 0; i < Tile::kLoadsB; ++i)
    b_rows[i] = p.w + imin(n0 + row0 + i * Tile::kRowsPerPass, p.n - 1) * p.ldw;

  U32x4 a_regs[Tile::kLoadsA], b_regs[Tile::kLoadsB];
  bool in_k = true;  // whether this lane's chunk of the loaded K tile is inside K
  // Issues every load of K tile kt before using any (all in flight together). A chunk past K
  // reads its row's first chunk instead (always in bounds, K > 0) and is stored as zeros: a
  // select where the registers are used, so no load has to complete early.
  const auto load_tile = [&](int kt) {
    const int kbyte = kt * kBK + chunk * 16;
    in_k = kbyte < p.k;
    const int offset = in_k ? kbyte : 0;
#pragma unroll
    for (int i = 0; i < Tile::kLoadsA; ++i) a_regs[i] = hip_compat::load16(a_rows[i] + offset);
#pragma unroll
    for (int i = 0; i < Tile::kLoadsB; ++i) b_regs[i] = hip_compat::load16(b_rows[i] + offset);
  };
  const auto store_tile = [&](int stage) {
    uint8_t* a_lds = lds + stage * Tile::kStageBytes + row0 * kRow + chunk * 16;
    uint8_t* b_lds = a_lds + kBM * kRow;
    const U32x4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < Tile::kLoadsA; ++i)
      hip_compat::store16(a_lds + i * Tile::kRowsPerPass * kRow, in_k ? a_regs[i] : zero);
#pragma unroll
    for (int i = 0; i < Tile::kLoadsB; ++i)
      hip_compat::store16(b_lds + i * Tile::kRowsPerPass * kRow, in_k ? b_regs[i] : zero);
  };

  F32x16 acc[Tile::kFragsM][Tile::kFragsN];
#pragma unroll
  for (int i = 0; i < Tile::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < Tile::kFragsN; ++j)
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[i][j][e] = 0.0f;

  // This lane's fragment rows in a stage: row lane % 32 of each block, bytes of its K half.
  const int frag_offset = (lane % 32) * kRow + (lane / 32) * (kBK / 2);
  const int a_frag = (wave_m * Tile::kWaveM) * kRow + frag_offset;
  const int b_frag = kBM * kRow + (wave_n * Tile::kWaveN) * kRow + frag_offset;

  if (num_kt > 0) {
    load_tile(kt_begin);
    store_tile(0);
  }
  hip_compat::block_sync();
  for (int i = 0; i < num_kt; ++i) {
    const int stage = i & 1;
    const bool more = i + 1 < num_kt;
    if (more) load_tile(kt_begin + i + 1);  // in flight during this tile's MFMAs
    const uint8_t* base = lds + stage * Tile::kStageBytes;
#pragma unroll
    for (int r = 0; r < Tile::kReads; ++r) {
      constexpr int kWords = Tile::kReadBytes / 4;
      uint32_t a_words[Tile::kFragsM][kWords], b_words[Tile::kFragsN][kWords];
#pragma unroll
      for (int fm = 0; fm < Tile::kFragsM; ++fm)
#pragma unroll
        for (int q = 0; q < Tile::kReadBytes / 16; ++q) {
          const U32x4 v = hip_compat::load16(base + a_frag + fm * 32 * kRow +
                                             r * Tile::kReadBytes + q * 16);
#pragma unroll
          for (int e = 0; e < 4; ++e) a_words[fm][q * 4 + e] = v[e];
        }
#pragma unroll
      for (int fn = 0; fn < Tile::kFragsN; ++fn)
#pragma unroll
        for (int q = 0; q < Tile::kReadBytes / 16; ++q) {
          const U32x4 v = hip_compat::load16(base + b_frag + fn * 32 * kRow +
                                             r * Tile::kReadBytes + q * 16);
#pragma unroll
          for (int e = 0; e < 4; ++e) b_words[fn][q * 4 + e] = v[e];
        }
#pragma unroll
      for (int s = 0; s < Tile::kStepsPerRead; ++s)
#pragma unroll
        for (int fm = 0; fm < Tile::kFragsM; ++fm)
#pragma unroll
          for (int fn = 0; fn < Tile::kFragsN; ++fn)
            acc[fm][fn] = Mfma::run(&a_words[fm][s * Mfma::kLaneBytes / 4],
                                    &b_words[fn][s * Mfma::kLaneBytes / 4], acc[fm][fn]);
    }
    if (more) store_tile(stage ^ 1);  // the other stage: its readers passed the last barrier
    hip_compat::block_sync();
  }

  // Epilogue. Block (fm, fn), element e: row 8 * (e / 4) + 4 * (lane / 32) + e % 4, column
  // lane % 32: 32 lanes store 32 adjacent columns of one row.
  const int col_base = n0 + wave_n * Tile::kWaveN + lane % 32;
  const int row_base = m0 + wave_m * Tile::kWaveM + 4 * (lane / 32);
  // The scales and bias of this lane's columns, loaded once (clamped: columns past N not stored).
  float w_scale[Tile::kFragsN], bias[Tile::kFragsN];
#pragma unroll
  for (int fn = 0; fn < Tile::kFragsN; ++fn) {
    const int col = imin(col_base + fn * 32, p.n - 1);
    w_scale[fn] = kPartial ? 1.0f : p.w_scale[int64_t(col) * p.w_scale_step];
    bias[fn] = !kPartial && p.bias ? to_float(static_cast<const Out*>(p.bias)[col]) : 0.0f;
  }
#pragma unroll
  for (int fm = 0; fm < Tile::kFragsM; ++fm)
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int row = row_base + fm * 32 + 8 * (e / 4) + e % 4;
      if (row >= p.m) continue;
      const float x_scale = kPartial ? 1.0f : p.x_scale[int64_t(row) * p.x_scale_step];
#pragma unroll
      for (int fn = 0; fn < Tile::kFragsN; ++fn) {
        const int col = col_base + fn * 32;
        if (col >= p.n) continue;
        if constexpr (kPartial) {
          p.partial[(int64_t(split) * p.m + row) * p.n + col] = acc[fm][fn][e];
        } else {
          static_cast<Out*>(p.out)[row * p.ldo + col] =
              from_float<Out>(acc[fm][fn][e] * x_scale * w_scale[fn] + bias[fn]);
        }
      }
    }
}

template <typename Tile, typename Out, bool kPartial>
__global__ void __launch_bounds__(kThreads) fp8_gemm_kernel(Fp8GemmParams p) {
  if constexpr (Tile::kArch == hip_compat::kDeviceCdna) {
    fp8_gemm_body<Tile, Out, kPartial>(p);
  } else {
    hip_compat::trap();  // another generation's kernel: the launcher never starts it here
  }
}

// Split-K reduction and the K == 0 case: out = (sum over slices, in order) * scales + bias.
template <typename Out>
__global__ void __launch_bounds__(kFinishThreads) fp8_gemm_finish_kernel(Fp8GemmParams p,
                                                                         int32_t splits,
                                                                         int64_t stride) {
  const int64_t total = int64_t(p.m) * p.n;
  for (int64_t idx = int64_t(hip_compat::block_in_grid()) * kFinishThreads +
                     hip_compat::thread_in_block();
       idx < total; idx += stride) {
    const int row = static_cast<int>(idx / p.n), col = static_cast<int>(idx - int64_t(row) * p.n);
    if (splits == 0) {
      const float bias = p.bias ? to_float(static_cast<const Out*>(p.bias)[col]) : 0.0f;
      static_cast<Out*>(p.out)[row * p.ldo + col] = from_float<Out>(bias);
      continue;
    }
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += p.partial[s * total + idx];
    store_result<Out>(p, row, col, sum);
  }
}

// ---------------------------------------------------------------------------------------------
// The table. Rows of both generations; a launch checks that its row is the device's.

using LaunchFn = LaunchError (*)(const Fp8GemmParams&, DType, bool partial, hipStream_t);

struct Row {
  GemmKernelInfo info;
  Cdna arch;
  int32_t bk;
  LaunchFn launch;
};

template <typename Tile>
LaunchError launch_kernel(const Fp8GemmParams& p, DType out_dtype, bool partial,
                          hipStream_t stream);

template <typename Tile>
constexpr Row row(const char* name) {
  return {{name, GemmInput::kFp8, Tile::kBM, Tile::kBN, Tile::kBK, 1, 1,
           GemmSchedule::kDataParallel, 2, kMaxSplitK, kWaves, 1, 0},
          Tile::kArch, Tile::kBK, &launch_kernel<Tile>};
}

// gfx942: 256x128 for big problems (4x2 blocks of 32x32 per wave, 128 accumulators per lane),
// 128x128 (2x2 per wave) when 256-row tiles leave CUs idle, 64x128 (1x2 per wave) for M <= 64.
using Gfx942Big = Gfx942Fp8Tile<256, 128, 2, 2>;
using Gfx942Mid = Gfx942Fp8Tile<128, 128, 2, 2>;
using Gfx942Small = Gfx942Fp8Tile<64, 128, 2, 2>;
// gfx950: the same shapes with BK = 128.
using Gfx950Big = Gfx950Fp8Tile<256, 128, 2, 2>;
using Gfx950Mid = Gfx950Fp8Tile<128, 128, 2, 2>;
using Gfx950Small = Gfx950Fp8Tile<64, 128, 2, 2>;

const Row kRows[] = {
    row<Gfx942Big>("gfx942_fp8_256x128x64"),   row<Gfx942Mid>("gfx942_fp8_128x128x64"),
    row<Gfx942Small>("gfx942_fp8_64x128x64"),  row<Gfx950Big>("gfx950_fp8_256x128x128"),
    row<Gfx950Mid>("gfx950_fp8_128x128x128"),  row<Gfx950Small>("gfx950_fp8_64x128x128"),
};
constexpr int32_t kNumRows = sizeof(kRows) / sizeof(kRows[0]);

struct Table {
  GemmKernelInfo infos[kNumRows];
  Table() {
    for (int32_t i = 0; i < kNumRows; ++i) infos[i] = kRows[i].info;
  }
};

template <typename Tile>
LaunchError launch_kernel(const Fp8GemmParams& p, DType out_dtype, bool partial,
                          hipStream_t stream) {
  const int64_t k_tiles = (p.k + Tile::kBK - 1) / Tile::kBK;
  const int64_t splits = (k_tiles + p.k_tiles_per_split - 1) / p.k_tiles_per_split;
  const int64_t blocks = int64_t(p.tiles_m) * p.tiles_n * (partial ? splits : 1);
  if (blocks > INT32_MAX) return "fp8_gemm: too many tiles for one launch";
  const unsigned grid = static_cast<unsigned>(blocks);
  if (partial) {
    fp8_gemm_kernel<Tile, float, true><<<grid, kThreads, 0, stream>>>(p);
  } else if (out_dtype == DType::kBFloat16) {
    fp8_gemm_kernel<Tile, BFloat16, false><<<grid, kThreads, 0, stream>>>(p);
  } else if (out_dtype == DType::kFloat16) {
    fp8_gemm_kernel<Tile, Half, false><<<grid, kThreads, 0, stream>>>(p);
  } else {
    fp8_gemm_kernel<Tile, float, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return hip_compat::launch_error();
}

LaunchError launch_finish(const Fp8GemmParams& p, DType out_dtype, int32_t splits,
                          hipStream_t stream) {
  const int64_t total = int64_t(p.m) * p.n;
  const int64_t want = (total + kFinishThreads - 1) / kFinishThreads;
  const unsigned grid = static_cast<unsigned>(want < 65536 ? want : 65536);  // grid-stride
  const int64_t stride = int64_t(grid) * kFinishThreads;
  if (out_dtype == DType::kBFloat16) {
    fp8_gemm_finish_kernel<BFloat16><<<grid, kFinishThreads, 0, stream>>>(p, splits, stride);
  } else if (out_dtype == DType::kFloat16) {
    fp8_gemm_finish_kernel<Half><<<grid, kFinishThreads, 0, stream>>>(p, splits, stride);
  } else {
    fp8_gemm_finish_kernel<float><<<grid, kFinishThreads, 0, stream>>>(p, splits, stride);
  }
  return hip_compat::launch_error();
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Effective split count of a launch: K tiles per slice rounded up, so trailing slices never
// come out empty; 1 means no workspace.
struct SplitPlan {
  int32_t splits;
  int32_t k_tiles_per_split;
};
SplitPlan split_plan(int64_t k, int32_t bk, int32_t split_k) {
  const int64_t k_tiles = (k + bk - 1) / bk;
  if (split_k <= 1 || k_tiles <= 1) return {1, static_cast<int32_t>(k_tiles > 0 ? k_tiles : 1)};
  const int64_t per = (k_tiles + split_k - 1) / split_k;
  return {static_cast<int32_t>((k_tiles + per - 1) / per), static_cast<int32_t>(per)};
}

}  // namespace fp8_gemm_detail
using namespace fp8_gemm_detail;

const GemmKernelInfo* native_gemm_kernels(int32_t* count) {
  static const Table table;
  if (count) *count = kNumRows;
  return table.infos;
}

int64_t fp8_gemm_workspace_bytes(const Fp8GemmArgs& args, const GemmConfig& config) {
  if (config.kernel < 0 || config.kernel >= kNumRows || args.m <= 0 || args.n <= 0) return 0;
  const SplitPlan plan = split_plan(args.k, kRows[config.kernel].bk, config.split_k);
  if (plan.splits <= 1 || args.k == 0) return 0;
  return round_up(int64_t(plan.splits) * args.m * args.n * int64_t(sizeof(float)), 256);
}

LaunchError launch_fp8_gemm(const Fp8GemmArgs& a, const GemmConfig& config, void* stream) {
  if (config.kernel < 0 || config.kernel >= kNumRows)
    return "fp8_gemm: kernel index out of range of native_gemm_kernels()";
  const Row& r = kRows[config.kernel];
  if (config.split_k < 1 || config.split_k > r.info.max_split_k)
    return "fp8_gemm: split_k must be in [1, the kernel's max_split_k]";
  if (a.out_dtype != DType::kBFloat16 && a.out_dtype != DType::kFloat16 &&
      a.out_dtype != DType::kFloat32)
    return "fp8_gemm: out_dtype must be bfloat16, float16 or float32";
  if (a.m < 0 || a.n < 0 || a.k < 0 || a.m > INT32_MAX || a.n > INT32_MAX || a.k > INT32_MAX)
    return "fp8_gemm: m, n, k must be in [0, 2^31)";
  if (a.k % 16 != 0) return "fp8_gemm: K must be a multiple of 16";
  if (a.m == 0 || a.n == 0) return nullptr;
  if (a.ldo < a.n || (a.k > 0 && (a.ldx < a.k || a.ldw < a.k)))
    return "fp8_gemm: a row stride is smaller than its row";
  if (a.k > 0 && ((reinterpret_cast<uintptr_t>(a.xq) | reinterpret_cast<uintptr_t>(a.wq)) % 16 != 0 ||
                  a.ldx % 16 != 0 || a.ldw % 16 != 0))
    return "fp8_gemm: xq and wq rows must be 16-byte aligned (pointers and row strides)";

  const Cdna device = hip_compat::current_device_cdna();
  if (device == Cdna::kNone) return "fp8_gemm: the FP8 GEMM needs gfx942 or gfx950";
  if ((a.format == Fp8Format::kE4M3FNUZ) != hip_compat::fp8_is_fnuz(device)) {
    return device == Cdna::kGfx942 ? "fp8 format e4m3fn does not match gfx942 (e4m3fnuz)"
                                   : "fp8 format e4m3fnuz does not match gfx950 (e4m3fn)";
  }
  if (r.arch != device) {
    return device == Cdna::kGfx942 ? "fp8_gemm: a gfx950 kernel row cannot run on gfx942"
                                   : "fp8_gemm: a gfx942 kernel row cannot run on gfx950";
  }

  const SplitPlan plan = split_plan(a.k, r.bk, config.split_k);
  const bool partial = a.k > 0 && plan.splits > 1;
  if (partial && a.workspace == nullptr)
    return "fp8_gemm: split-K needs fp8_gemm_workspace_bytes() of workspace";

  Fp8GemmParams p;
  p.x = static_cast<const uint8_t*>(a.xq);
  p.w = static_cast<const uint8_t*>(a.wq);
  p.ldx = a.ldx;
  p.ldw = a.ldw;
  p.ldo = a.ldo;
  p.m = static_cast<int32_t>(a.m);
  p.n = static_cast<int32_t>(a.n);
  p.k = static_cast<int32_t>(a.k);
  p.tiles_m = static_cast<int32_t>((a.m + r.info.tile_m - 1) / r.info.tile_m);
  p.tiles_n = static_cast<int32_t>((a.n + r.info.tile_n - 1) / r.info.tile_n);
  p.k_tiles_per_split = plan.k_tiles_per_split;
  p.x_scale = a.x_scale;
  p.w_scale = a.w_scale;
  p.x_scale_step = a.scale_mode == ScaleMode::kRowwise ? 1 : 0;
  p.w_scale_step = p.x_scale_step;
  p.bias = a.bias;
  p.out = a.out;
  p.partial = partial ? static_cast<float*>(a.workspace) : nullptr;

  const hipStream_t s = static_cast<hipStream_t>(stream);
  if (a.k == 0) return launch_finish(p, a.out_dtype, 0, s);
  if (LaunchError error = r.launch(p, a.out_dtype, partial, s)) return error;
  return partial ? launch_finish(p, a.out_dtype, plan.splits, s) : nullptr;
}

int64_t gemm_workspace_bytes(const GemmArgs&, const GemmConfig&) { return 0; }

LaunchError launch_gemm(const GemmArgs&, const GemmConfig&, void*) {
  return "no native bf16/fp16 GEMM kernel for HIP yet";
}

}  // namespace mymetaops
