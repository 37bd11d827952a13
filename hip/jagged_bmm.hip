// jagged_dense_bmm and jagged_jagged_bmm for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950:
// MI350X/MI355X), wave64, bf16 / fp16 MFMA. Semantics and launcher ABI: the end of
// csrc/include/mymetaops/jagged.h. cuda/jagged_bmm/ defines the same symbols; a build links one.
//
// One kernel template, jagged_bmm_kernel<T, I, form, B's major>, in three shapes: kJaggedDense with
// y or with y^T per sequence, and kJaggedJagged. Its grid walks work items, block k taking items
// k, k + grid, ... (a grid of any size covers any count):
//  * GEMM tiles, numbered (b, m tile, n tile), n tile fastest (the tiles of one sequence run side by
//    side and share its operands in L2). A tile is a 128x128 block of one sequence's product:
//      kJaggedDense:  rows j of out rows offsets[b] + j, j < n_b (over ceil(min(max_length,
//                     total) / 128) m tiles: a tile past the sequence's n_b returns at once),
//                     reduction over k;
//      kJaggedJagged: a 128x128 block of out[b], reduction over the sequence's n_b rows (n_b = 0:
//                     no K tile, the tile stores zeros).
//  * then aux items of 256 entries: item a checks offsets entries 256 a .. (errors != nullptr) and,
//    for kJaggedDense, zeroes those of out rows 256 a .. that no tile writes: a row at no position
//    (past max_length in its sequence, before offsets[0], from offsets[batch] on), found by a
//    binary search of offsets per row, as jagged_dense_kernel finds positions (hip/jagged.hip).
// The launch needs no size from the device: items follow from batch, max_length, total, m, n, k.
//
// A tile: 4 waves in a 2x2 grid, each a 64x64 quarter of 2x2 MFMA blocks of 32x32 (fp32
// accumulators, 64 per lane). K advances 32 elements per step:
//  * global -> registers, 16-byte loads (global_load_dwordx4), the next K tile's issued before the
//    current tile's MFMAs (register prefetch). An operand is K-major (x in kJaggedDense, y^T: a
//    row's k are contiguous) or MN-major (y in kJaggedDense, x and y in kJaggedJagged: a row of
//    memory holds one k for consecutive m or n). K-major: a lane loads 8 consecutive k of one row.
//    MN-major: a lane loads 8 consecutive m (n) at k and at k + 1 and transposes them on the way
//    into LDS, pairing (k, k + 1) per row in 32-bit stores.
//  * registers -> LDS: two stages (double buffer), one barrier per K tile. LDS rows are K-major for
//    both operands, 32 elements + 8 of padding: 80-byte rows put the 8 lanes of one ds_read_b128
//    phase (8 rows, same column) on 8 disjoint groups of 4 banks.
//  * LDS -> MFMA (v_mfma_f32_32x32x8_bf16 / _f16): lane l reads row l % 32 of its block, k half
//    l / 32 (16 values, two ds_read_b128), for A and B alike; the MFMA pairs values by (lane half,
//    slot), so this assignment of k needs no shuffle (hip_compat::mfma_32x32x8_16bit).
// Tails: rows past M / N are loaded clamped into range (their results are never stored); K past
// the end reads as zeros: a whole 16-byte chunk for K-major operands (k % 8 == 0), a row of k for
// MN-major ones (kJaggedJagged reduces over any n_b, 0 and 1 included). Results are rounded once to
// the dtype and stored 2 bytes a lane (32 lanes store 64 contiguous bytes of a row).
//
// Through hip/shim (NVIDIA, no MFMA, warps of 32) the same kernel runs with each K tile's MFMAs
// replaced by fp32 FMAs that compute the same accumulators from the same LDS stage (mma_k_tile):
// tiling, loads, LDS staging, tails and zeroing are the ones AMD runs. On AMD the launcher refuses
// any device but gfx942 / gfx950 (hipDeviceProp_t.gcnArchName, cached in hip_compat).

#include <cstdint>
#include <initializer_list>

#include "hip_compat.h"
#include "mymetaops/jagged.h"

namespace mymetaops {
namespace jagged_bmm_detail {  // named: nvcc flags unused internal-linkage entities on the shim

using hip_compat::F32x16;
using hip_compat::U32x4;

constexpr int kThreads = 256;  // 4 waves of 64 lanes (8 warps of 32 through the shim)
// 128x128 tiles: 4 waves of 64x64 (2x2 MFMA blocks), 64 accumulators per lane, and 16 MFMAs per
// wave per K tile between barriers (kJaggedDense sequences shorter than 128 rows leave part of
// their M tile idle).
constexpr int kBM = 128, kBN = 128;
constexpr int kWavesN = 2, kWaveM = 64, kWaveN = 64;
constexpr int kFragsM = kWaveM / 32, kFragsN = kWaveN / 32;
// K tile of 32: two stages of 256 padded rows take 40 KB, within gfx942's 64 KB (one workgroup
// per CU there, two on gfx950's 160 KB); 4 MFMA steps of K 8 per block.
constexpr int kBK = 32;
constexpr int kRowElems = kBK + 8;  // 80-byte LDS rows: conflict-free ds_read_b128 (see above)
constexpr int kStageElems = (kBM + kBN) * kRowElems;
constexpr int kAuxRows = kThreads;  // offsets entries / out rows per aux item: one per thread
constexpr int kLdsBytes = 2 * kStageElems * 2 + kAuxRows;
static_assert(kThreads == 4 * 64 && (kBM / kWaveM) * kWavesN == 4, "4 waves of 64 lanes");
static_assert(kWaveM % 32 == 0 && kWaveN % 32 == 0 && kBK % 8 == 0, "whole MFMA blocks and steps");
static_assert(kLdsBytes <= hip_compat::lds_budget_bytes(hip_compat::Cdna::kGfx942),
              "over gfx942's LDS");
// HIP counts a grid in work-items with 32 bits; the item loop covers any count.
constexpr int64_t kMaxGridBlocks = UINT32_MAX / kThreads;

// Element types (template tags): bits travel as uint16_t, arithmetic is fp32.
struct BFloat16 {
  static constexpr bool kBf16 = true;
};
struct Half {
  static constexpr bool kBf16 = false;
};

template <typename T>
__device__ inline float to_float(uint16_t bits) {
  if constexpr (T::kBf16)
    return hip_compat::bfloat16_bits_to_float(bits);
  else
    return hip_compat::half_bits_to_float(bits);
}
template <typename T>
__device__ inline uint16_t from_float(float x) {
  if constexpr (T::kBf16)
    return hip_compat::float_to_bfloat16_bits(x);
  else
    return hip_compat::float_to_half_bits(x);
}

// Which index of an operand is contiguous in memory.
enum class Major : int32_t {
  kK = 0,   // element (r, kk) at base[r * stride + kk]: x (kJaggedDense), y^T
  kMn = 1,  // element (r, kk) at base[kk * stride + r]: y (kJaggedDense), x and y (kJaggedJagged)
};

template <typename I>
struct Params {
  const I* offsets;
  int64_t batch, max_length, total;
  int32_t m, n, k;  // kJaggedDense: n, k (tile M = the sequence's n_b); kJaggedJagged: m, n
  const uint16_t* x;
  int64_t x_row_stride;
  const uint16_t* y;
  int64_t y_batch_stride;  // kJaggedDense
  int64_t y_stride;        // y's stride that is not 1 (kJaggedDense), its row stride (kJaggedJagged)
  uint16_t* out;
  int64_t* errors;
  int64_t tiles_m, tiles_n;  // GEMM tiles per sequence
  int64_t tiles;             // batch * tiles_m * tiles_n: items [0, tiles); aux items follow
  int64_t items;
  int64_t grid;  // blocks of the launch
};

// ---------------------------------------------------------------------------------------------
// Offsets (the conventions of hip/jagged.hip).

struct Seq {
  int64_t start, end;
};

// Sequence b's rows: offsets[b] and offsets[b + 1] clamped to [0, total], an end below its start
// an empty sequence.
template <typename I>
__device__ inline Seq sequence(const I* offsets, int64_t b, int64_t total) {
  const int64_t lo = offsets[b], hi = offsets[b + 1];
  const int64_t start = lo < 0 ? 0 : (lo > total ? total : lo);
  return {start, hi < start ? start : (hi > total ? total : hi)};
}

// Whether out row r (0 <= r < total) has a position, i.e. a tile writes it: the last sequence b
// with offsets[b] <= r (a binary search; clamping does not change how an entry compares with r)
// holds r among its first max_length rows.
template <typename I>
__device__ inline bool has_position(const Params<I>& p, int64_t r) {
  int64_t lo = 0, hi = p.batch;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (int64_t(p.offsets[mid]) <= r)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return false;
  const Seq s = sequence(p.offsets, lo - 1, p.total);
  return r < s.end && r - s.start < p.max_length;
}

// Records offsets[i] if it is bad: negative, below offsets[i - 1], or past total.
template <typename I>
__device__ inline void check_offsets_entry(const Params<I>& p, int64_t i) {
  const int64_t value = p.offsets[i];
  const int64_t prev = i > 0 ? int64_t(p.offsets[i - 1]) : 0;
  if (__builtin_expect((value < 0) | (value < prev) | (value > p.total), 0)) {
    const ErrorCode code = value < 0      ? ErrorCode::kNegativeOffset
                           : value < prev ? ErrorCode::kDecreasingOffset
                                          : ErrorCode::kOffsetPastEnd;
    hip_compat::record_error(p.errors, ErrorOp::kJaggedBmm, code, i, value,
                             code == ErrorCode::kOffsetPastEnd ? p.total : 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Operand loads: one thread's share of a kRows x kBK tile of one operand, global -> registers
// (load) -> K-major LDS rows (store).

// A tile's view of an operand: rows r < rows (along M for A, N for B), reduction index kk < depth.
struct Operand {
  const uint16_t* base;
  int64_t stride;
  int64_t rows;   // >= 1 (>= 8 for Major::kMn); rows past it are loaded clamped, never stored
  int64_t depth;  // K; past it reads as 0
};

template <Major kMajor, int kRows>
struct Loader;

// K-major: 16-byte chunk `chunk` (8 k) of rows row0 + i * kRowsPerPass.
template <int kRows>
struct Loader<Major::kK, kRows> {
  static constexpr int kChunks = kBK / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kLoads = kRows / kRowsPerPass;
  static_assert(kRows % kRowsPerPass == 0, "whole load passes");

  const uint16_t* row[kLoads];
  int64_t depth;
  int chunk, row0;
  bool in_k = false;
  U32x4 regs[kLoads];

  __device__ Loader(const Operand& op, int64_t r0, int tid)
      : depth(op.depth), chunk(tid % kChunks), row0(tid / kChunks) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int64_t r = r0 + row0 + i * kRowsPerPass;
      row[i] = op.base + (r < op.rows ? r : op.rows - 1) * op.stride;
    }
  }
  // Issues every load of the K tile at k0 before any is used. A chunk past K (depth % 8 == 0: all
  // in or all out) reads its row's first chunk instead and is stored as zeros.
  __device__ void load(int64_t k0) {
    const int64_t kk = k0 + chunk * 8;
    in_k = kk < depth;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) regs[i] = hip_compat::load16(row[i] + (in_k ? kk : 0));
  }
  __device__ void store(uint16_t* lds_rows) const {
    const U32x4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      hip_compat::store16(lds_rows + (row0 + i * kRowsPerPass) * kRowElems + chunk * 8,
                          in_k ? regs[i] : zero);
  }
};

// MN-major: blocks of 8 rows x 2 k. Thread t takes k pair `pair` = t % kPairs (the fastest, so
// that the 32 lanes of one ds_write_b32 cycle meet at most 2 to a bank) of 8-row groups
// t / kPairs + j * kGroupsPerPass; a wave's loads read 64 contiguous bytes of each of 32 k rows.
template <int kRows>
struct Loader<Major::kMn, kRows> {
  static constexpr int kPairs = kBK / 2;
  static constexpr int kGroupsPerPass = kThreads / kPairs;
  static constexpr int kBlocks = kRows / 8 / kGroupsPerPass;
  static_assert(kThreads % kPairs == 0 && (kRows / 8) % kGroupsPerPass == 0, "whole blocks");

  const uint16_t* col[kBlocks];  // column (r) of the block's first row at k = 0
  int64_t stride, depth;
  int pair, group0;
  bool in_k[2] = {false, false};
  U32x4 regs[kBlocks][2];

  __device__ Loader(const Operand& op, int64_t r0, int tid)
      : stride(op.stride), depth(op.depth), pair(tid % kPairs), group0(tid / kPairs) {
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const int64_t r = r0 + (group0 + j * kGroupsPerPass) * 8;
      col[j] = op.base + (r < op.rows ? r : op.rows - 8);  // rows % 8 == 0: a group is all in or out
    }
  }
  // A k past K reads k = 0 (a row of the operand: depth >= 1 when a tile loads) and is stored as
  // zeros.
  __device__ void load(int64_t k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t kk = k0 + 2 * pair + h;
      in_k[h] = kk < depth;
      const int64_t offset = (in_k[h] ? kk : 0) * stride;
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) regs[j][h] = hip_compat::load16(col[j] + offset);
    }
  }
  // Row i of a block gets value i of both loads: (k, k + 1) in one word, low half first.
  __device__ void store(uint16_t* lds_rows) const {
    const U32x4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const U32x4 lo = in_k[0] ? regs[j][0] : zero, hi = in_k[1] ? regs[j][1] : zero;
      uint16_t* first = lds_rows + (group0 + j * kGroupsPerPass) * 8 * kRowElems + 2 * pair;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t word = i % 2 == 0 ? (lo[i / 2] & 0xffffu) | (hi[i / 2] << 16)
                                         : (lo[i / 2] >> 16) | (hi[i / 2] & 0xffff0000u);
        *reinterpret_cast<uint32_t*>(first + i * kRowElems) = word;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The MFMA step.

using Acc = F32x16[kFragsM][kFragsN];

// This thread's place in the tile: its wave's first A and B rows, and its lane (the numbering is
// the thread index, so it is the same through the shim's warps of 32).
struct WaveLane {
  int a_row0, b_row0, lane;
};

// The A row (tile-local, from the block's first) of element e of a 32x32 accumulator block in lane
// `lane`; its B row is lane % 32.
__device__ inline int block_row(int lane, int e) { return 8 * (e / 4) + 4 * (lane / 32) + e % 4; }

// acc += A . B^T over one K tile of one LDS stage (A and B: K-major rows of kRowElems).
template <typename T>
__device__ inline void mma_k_tile(Acc& acc, const uint16_t* a_lds, const uint16_t* b_lds,
                                  const WaveLane& w) {
  if constexpr (hip_compat::kHasMfma) {
    const int offset = (w.lane % 32) * kRowElems + (w.lane / 32) * (kBK / 2);
    uint32_t a[kFragsM][kBK / 4], b[kFragsN][kBK / 4];  // kBK / 2 values, two per word
#pragma unroll
    for (int q = 0; q < kBK / 16; ++q) {
#pragma unroll
      for (int fm = 0; fm < kFragsM; ++fm) {
        const U32x4 v = hip_compat::load16(a_lds + (w.a_row0 + fm * 32) * kRowElems + offset + q * 8);
#pragma unroll
        for (int e = 0; e < 4; ++e) a[fm][q * 4 + e] = v[e];
      }
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn) {
        const U32x4 v = hip_compat::load16(b_lds + (w.b_row0 + fn * 32) * kRowElems + offset + q * 8);
#pragma unroll
        for (int e = 0; e < 4; ++e) b[fn][q * 4 + e] = v[e];
      }
    }
#pragma unroll
    for (int s = 0; s < kBK / 8; ++s)
#pragma unroll
      for (int fm = 0; fm < kFragsM; ++fm)
#pragma unroll
        for (int fn = 0; fn < kFragsN; ++fn)
          acc[fm][fn] = hip_compat::mfma_32x32x8_16bit<T::kBf16>(
              a[fm][2 * s], a[fm][2 * s + 1], b[fn][2 * s], b[fn][2 * s + 1], acc[fm][fn]);
  } else {
    // No MFMA (the shim): the same accumulator elements, one fp32 FMA per k.
    for (int kk = 0; kk < kBK; ++kk) {
      float b[kFragsN];
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn)
        b[fn] = to_float<T>(b_lds[(w.b_row0 + fn * 32 + w.lane % 32) * kRowElems + kk]);
#pragma unroll
      for (int fm = 0; fm < kFragsM; ++fm)
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          const float a = to_float<T>(
              a_lds[(w.a_row0 + fm * 32 + block_row(w.lane, e)) * kRowElems + kk]);
#pragma unroll
          for (int fn = 0; fn < kFragsN; ++fn) acc[fm][fn][e] = fmaf(a, b[fn], acc[fm][fn][e]);
        }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Work items.

// GEMM tile `item`: (b, m tile, n tile) = item / (tiles_m * tiles_n), ... All threads of the block
// take the same branches (the barriers are reached by all).
template <typename T, typename I, JaggedBmmForm kForm, Major kBMajor>
__device__ inline void gemm_tile(const Params<I>& p, int64_t item, uint16_t* lds) {
  constexpr bool kDense = kForm == JaggedBmmForm::kJaggedDense;
  constexpr Major kAMajor = kDense ? Major::kK : Major::kMn;
  const int64_t per_seq = p.tiles_m * p.tiles_n;
  const int64_t b = item / per_seq;
  const int64_t mt = (item - b * per_seq) / p.tiles_n;
  const int64_t m0 = mt * kBM, n0 = (item - b * per_seq - mt * p.tiles_n) * kBN;
  const Seq s = sequence(p.offsets, b, p.total);
  const int64_t n_b = s.end - s.start < p.max_length ? s.end - s.start : p.max_length;
  if (kDense && m0 >= n_b) return;  // no rows of the sequence here; the aux items zero the rest

  const uint16_t* x_rows = p.x + s.start * p.x_row_stride;
  const Operand a = kDense ? Operand{x_rows, p.x_row_stride, n_b, p.k}
                           : Operand{x_rows, p.x_row_stride, p.m, n_b};
  const Operand bo = kDense ? Operand{p.y + b * p.y_batch_stride, p.y_stride, p.n, p.k}
                            : Operand{p.y + s.start * p.y_stride, p.y_stride, p.n, n_b};
  const int tid = static_cast<int>(hip_compat::thread_in_block());
  Loader<kAMajor, kBM> a_load(a, m0, tid);
  Loader<kBMajor, kBN> b_load(bo, n0, tid);
  const int wave = tid / 64;
  const WaveLane w{(wave / kWavesN) * kWaveM, (wave % kWavesN) * kWaveN, tid % 64};

  Acc acc;
#pragma unroll
  for (int fm = 0; fm < kFragsM; ++fm)
#pragma unroll
    for (int fn = 0; fn < kFragsN; ++fn)
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[fm][fn][e] = 0.0f;

  const int64_t k_tiles = (a.depth + kBK - 1) / kBK;
  if (k_tiles > 0) {
    a_load.load(0);
    b_load.load(0);
    a_load.store(lds);
    b_load.store(lds + kBM * kRowElems);
  }
  hip_compat::block_sync();
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    uint16_t* stage = lds + (kt & 1) * kStageElems;
    const bool more = kt + 1 < k_tiles;
    if (more) {  // in flight during this tile's MFMAs
      a_load.load((kt + 1) * kBK);
      b_load.load((kt + 1) * kBK);
    }
    mma_k_tile<T>(acc, stage, stage + kBM * kRowElems, w);
    if (more) {  // the other stage: its readers passed the last barrier
      uint16_t* next = lds + ((kt + 1) & 1) * kStageElems;
      a_load.store(next);
      b_load.store(next + kBM * kRowElems);
    }
    hip_compat::block_sync();  // also orders this item's last reads before the next item's stores
  }

  // Epilogue: element e of block (fm, fn) is out row m0 + a_row0 + fm * 32 + block_row(lane, e)
  // of the tile, column n0 + b_row0 + fn * 32 + lane % 32.
  const int64_t m_valid = kDense ? n_b : p.m;
  const int64_t out_row0 = kDense ? s.start : b * p.m;
#pragma unroll
  for (int fm = 0; fm < kFragsM; ++fm)
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int64_t r = m0 + w.a_row0 + fm * 32 + block_row(w.lane, e);
      if (r >= m_valid) continue;
      uint16_t* out = p.out + (out_row0 + r) * p.n;
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn) {
        const int64_t c = n0 + w.b_row0 + fn * 32 + w.lane % 32;
        if (c < p.n) out[c] = from_float<T>(acc[fm][fn][e]);
      }
    }
}

// Aux item `item`: offsets entries and out rows item * kAuxRows + thread.
template <typename I>
__device__ inline void aux_item(const Params<I>& p, int64_t item, bool zero_rows, uint8_t* flags) {
  const int tid = static_cast<int>(hip_compat::thread_in_block());
  const int64_t first = item * kAuxRows;
  if (p.errors != nullptr && first + tid <= p.batch) check_offsets_entry(p, first + tid);
  if (!zero_rows || p.n == 0) return;
  flags[tid] = first + tid < p.total && !has_position(p, first + tid);
  hip_compat::block_sync();
  // The whole block zeroes each flagged row: 16-byte stores across its columns.
  const U32x4 zero = {0u, 0u, 0u, 0u};
  const int64_t vecs = p.n / 8;
  for (int r = 0; r < kAuxRows; ++r) {
    if (!flags[r]) continue;
    uint16_t* out = p.out + (first + r) * p.n;
    for (int64_t v = tid; v < vecs; v += kThreads) hip_compat::store16(out + v * 8, zero);
  }
  hip_compat::block_sync();  // the next aux item rewrites flags
}

template <typename T, typename I, JaggedBmmForm kForm, Major kBMajor>
__global__ void __launch_bounds__(kThreads) jagged_bmm_kernel(const Params<I> p) {
  __shared__ __attribute__((aligned(16))) uint16_t lds[2 * kStageElems];
  __shared__ uint8_t zero_flags[kAuxRows];
  for (int64_t item = hip_compat::block_in_grid(); item < p.items; item += p.grid) {
    if (item < p.tiles)
      gemm_tile<T, I, kForm, kBMajor>(p, item, lds);
    else
      aux_item(p, item - p.tiles, kForm == JaggedBmmForm::kJaggedDense, zero_flags);
  }
}

// ---------------------------------------------------------------------------------------------
// Host.

// JaggedBmmConfig.kernel indexes this list: the one tile, BM x BN x BK.
const char* const kKernelNames[] = {"mfma_128x128x32"};
constexpr int32_t kNumKernels = sizeof(kKernelNames) / sizeof(kKernelNames[0]);

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The launch's shape, from sizes alone.
struct Plan {
  Major b_major;
  int64_t y_stride;
  int64_t tiles_m, tiles_n, tiles, items;
};

LaunchError plan(const JaggedBmmArgs& a, Plan* out) {
  const bool dense = a.form == JaggedBmmForm::kJaggedDense;
  if (!dense && a.form != JaggedBmmForm::kJaggedJagged) return "jagged_bmm: unknown form";
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return "jagged_bmm: the native kernels take bfloat16 or float16 only";
  if (a.offsets_dtype != DType::kInt32 && a.offsets_dtype != DType::kInt64)
    return "jagged_bmm: offsets must be int32 or int64";
  const int64_t inner = dense ? a.k : a.m;  // the extent besides n
  if (a.batch < 0 || a.max_length < 0 || a.total < 0 || a.n < 0 || inner < 0)
    return "jagged_bmm: negative size";
  if (a.n > INT32_MAX || inner > INT32_MAX) return "jagged_bmm: n, k, m must be below 2^31";
  if (a.n % 8 != 0 || inner % 8 != 0)
    return dense ? "jagged_bmm: k and n must be multiples of 8 (16 bytes)"
                 : "jagged_bmm: m and n must be multiples of 8 (16 bytes)";
  // GEMM tiles: a sequence has at most min(max_length, total) rows (kJaggedDense's M).
  const int64_t m_extent = dense ? (a.max_length < a.total ? a.max_length : a.total) : a.m;
  const int64_t tiles_m = ceil_div(m_extent, kBM), tiles_n = ceil_div(a.n, kBN);
  if (tiles_n > 0 && tiles_m > INT64_MAX / 2 / tiles_n) return "jagged_bmm: too many tiles";
  if (a.batch > 0 && tiles_m * tiles_n > INT64_MAX / 2 / a.batch)
    return "jagged_bmm: too many tiles";
  const int64_t tiles = a.batch * tiles_m * tiles_n;
  const int64_t zero_items = dense && a.n > 0 ? ceil_div(a.total, kAuxRows) : 0;
  const int64_t check_items = a.errors != nullptr ? ceil_div(a.batch + 1, kAuxRows) : 0;
  const int64_t items = tiles + (zero_items > check_items ? zero_items : check_items);
  if (items > 0 && a.offsets == nullptr) return "jagged_bmm: null offsets";
  const bool writes = dense ? a.total > 0 && a.n > 0 : tiles > 0;
  if (writes && a.out == nullptr) return "jagged_bmm: null out";
  if (!aligned16(a.out)) return "jagged_bmm: out must be 16-byte aligned";

  // x and y, and so their strides and y's layout, matter only where a tile reads them (an empty
  // operand may come with any strides: torch gives [batch, k, 0] the strides (k, 1, 1)).
  Major b_major = Major::kMn;
  int64_t y_stride = a.y_k_stride;  // y's stride that is not 1: between its MN- or K-major rows
  if (tiles == 0 || (dense ? a.k == 0 : a.total == 0)) {
    *out = {b_major, y_stride, tiles_m, tiles_n, tiles, items};
    return nullptr;
  }
  if (a.x == nullptr || a.y == nullptr) return "jagged_bmm: null x or y";
  if (dense && a.y_n_stride != 1) {
    if (a.y_k_stride != 1) return "jagged_bmm: one of y's k and n strides must be 1";
    b_major = Major::kK;
    y_stride = a.y_n_stride;
  }
  for (int64_t stride : {a.x_row_stride, y_stride, dense ? a.y_batch_stride : int64_t{0}}) {
    if (stride < 0 || stride > INT64_MAX / 16) return "jagged_bmm: negative or too large stride";
    if (stride % 8 != 0) return "jagged_bmm: a non-unit stride is not a multiple of 16 bytes";
  }
  if (!aligned16(a.x) || !aligned16(a.y)) return "jagged_bmm: x and y must be 16-byte aligned";
  *out = {b_major, y_stride, tiles_m, tiles_n, tiles, items};
  return nullptr;
}

template <typename T, typename I>
LaunchError launch_typed(const JaggedBmmArgs& a, const Plan& plan, hipStream_t stream) {
  const int64_t grid = plan.items < kMaxGridBlocks ? plan.items : kMaxGridBlocks;
  const Params<I> p{static_cast<const I*>(a.offsets),
                    a.batch,
                    a.max_length,
                    a.total,
                    static_cast<int32_t>(a.form == JaggedBmmForm::kJaggedJagged ? a.m : 0),
                    static_cast<int32_t>(a.n),
                    static_cast<int32_t>(a.form == JaggedBmmForm::kJaggedDense ? a.k : 0),
                    static_cast<const uint16_t*>(a.x),
                    a.x_row_stride,
                    static_cast<const uint16_t*>(a.y),
                    a.y_batch_stride,
                    plan.y_stride,
                    static_cast<uint16_t*>(a.out),
                    a.errors,
                    plan.tiles_m,
                    plan.tiles_n,
                    plan.tiles,
                    plan.items,
                    grid};
  const unsigned blocks = static_cast<unsigned>(grid);
  if (a.form == JaggedBmmForm::kJaggedJagged)
    jagged_bmm_kernel<T, I, JaggedBmmForm::kJaggedJagged, Major::kMn>
        <<<blocks, kThreads, 0, stream>>>(p);
  else if (plan.b_major == Major::kMn)
    jagged_bmm_kernel<T, I, JaggedBmmForm::kJaggedDense, Major::kMn>
        <<<blocks, kThreads, 0, stream>>>(p);
  else
    jagged_bmm_kernel<T, I, JaggedBmmForm::kJaggedDense, Major::kK>
        <<<blocks, kThreads, 0, stream>>>(p);
  return hip_compat::launch_error();
}

template <typename T>
LaunchError launch_dtype(const JaggedBmmArgs& a, const Plan& plan, hipStream_t stream) {
  return a.offsets_dtype == DType::kInt32 ? launch_typed<T, int32_t>(a, plan, stream)
                                          : launch_typed<T, int64_t>(a, plan, stream);
}

}  // namespace jagged_bmm_detail
using namespace jagged_bmm_detail;

const char* const* jagged_bmm_kernel_names(int32_t* count) {
  if (count) *count = kNumKernels;
  return kKernelNames;
}

int64_t jagged_bmm_workspace_bytes(const JaggedBmmArgs&, const JaggedBmmConfig&) { return 0; }

LaunchError launch_jagged_bmm(const JaggedBmmArgs& a, const JaggedBmmConfig& config,
                              void* stream) {
  if (config.kernel < 0 || config.kernel >= kNumKernels)
    return "jagged_bmm: kernel index out of range of jagged_bmm_kernel_names()";
  Plan shape;
  if (LaunchError error = plan(a, &shape)) return error;
  if (shape.items == 0) return nullptr;
  if (hip_compat::kHasMfma && hip_compat::current_device_cdna() == hip_compat::Cdna::kNone)
    return "jagged_bmm: the native kernels need gfx942 or gfx950 (MFMA)";
  const hipStream_t s = static_cast<hipStream_t>(stream);
  return a.dtype == DType::kBFloat16 ? launch_dtype<BFloat16>(a, shape, s)
                                     : launch_dtype<Half>(a, shape, s);
}

}  // namespace mymetaops
