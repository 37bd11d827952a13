// The Hopper attention forward kernel (attention.h): persistent and warp-specialized. A CTA is one
// producer warpgroup (a warp of it per pipe issues that pipe's TMA loads; its registers are handed
// to the consumers) and two or three consumer warpgroups of 64 query rows each. A tile is 128 query
// rows of one (sequence, head), two consumer warpgroups on it (Tiling<128, 128>), or 64 rows, each
// consumer warpgroup with a pipe of its own: its producer warp, Q and K/V buffers and barriers
// (Tiling<64, 64, warpgroups>). A producer warp takes tiles from a counter in global memory (the prologue
// zeroes it and, for long enough sequences, sorts them longest first), a few at a time, and hands
// each one with rows to its consumers in shared memory: tile costs vary with the sequences'
// lengths, and a fixed share per CTA left the last CTAs running alone. Q and the K/V stages arrive
// by TMA on mbarriers ("full"); the consumers hand each K and V buffer back on its "empty" barrier,
// so the producer runs ahead across key tiles and into the next query tile. In a consumer, S = Q K^T
// (wgmma from shared memory) of key tile n+1 is issued before O += P V (wgmma, P from registers) of
// tile n, and P = f(S) of tile n+1 runs while that product is on the tensor cores. Rows past the
// sequence are loaded (the next sequence's rows, or TMA's zero fill past the tensor) but masked as
// keys and never stored. Included by attention.cu only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

namespace mymetaops {
namespace cuda {
namespace attention {

using namespace cute;

// The backward kernels' CTA (dkdv_kernel.cuh, dq_kernel.cuh): a producer warpgroup and two
// consumer warpgroups. setmaxnreg: 24 + 2 x 240 registers x 128 threads fits the 64K register file
// at one CTA per SM. The forward's CTA is its tiling's (Tiling below).
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarpgroups = kConsumerThreads / 128;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;

// A forward tiling: kM query rows a tile (wgmma's M of 64 per consumer warpgroup on it) x kN keys
// a step, kWarpgroups consumer warpgroups a CTA. 128 x 128 (2 warpgroups): both on one tile; S is
// 64 fp32 registers a thread, O (D = 128) 64 more and P 32, with S of the next step overlapping
// P V. 64 x 64: each consumer warpgroup runs its own tiles (a pipe each): causal tiles of short
// sequences compute fewer masked scores (the useful share 0.34 -> 0.54 at N = 256 under uniform
// lengths, bench/attention/NOTES.md) and the warpgroups' chains (S, f(S), P V, epilogue) overlap
// instead of running in lockstep; each pipe loads its own K/V, twice the L2 reads of 128 x 128 a
// query row. At D = 64 a consumer holds S 32, P 16 and O 32 registers, so a third pipe fits the
// register file: more tiles' loads and chains in flight on an SM (1.00-1.08x over two, run 39).
template <int kM, int kN, int kWarpgroups = 2>
struct Tiling {
  static constexpr int kBlockM = kM;
  static constexpr int kBlockN = kN;
  static constexpr int kThreads = 128 * (kWarpgroups + 1);  // + the producer warpgroup
  static constexpr int kTileWarpgroups = kM / 64;
  static constexpr int kPipes = kWarpgroups / kTileWarpgroups;
  // setmaxnreg: a producer warp per pipe, each holding its own tiles and loop, spilled at 24
  // registers with two pipes; the consumers take the rest of the 64K register file, in steps of 8.
  static constexpr int kProducerRegs = kPipes == 1 ? mymetaops::cuda::attention::kProducerRegs : 40;
  static constexpr int kConsumerRegs =
      kPipes == 1 ? mymetaops::cuda::attention::kConsumerRegs : (512 - kProducerRegs) / kWarpgroups / 8 * 8;
  static_assert(kProducerRegs + kWarpgroups * kConsumerRegs <= 512, "the register file at one CTA per SM");
  static_assert(kM % 64 == 0 && kWarpgroups % kTileWarpgroups == 0, "64 query rows per consumer warpgroup");
  // 512 threads launch with 128 registers each, the most setmaxnreg can redistribute; a fourth
  // consumer warpgroup (640 threads, 102 at launch) hung raising its consumers to 120 (run 39).
  static_assert(kWarpgroups <= 3, "the register file a 512-thread launch holds");
};
using Tiles128x128 = Tiling<128, 128>;

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;  // a TMA load's arrival and bytes
// One arrival per consumer warpgroup, by its first thread: a wgmma completes for its whole
// warpgroup at once, so after warpgroup_wait one thread may hand the operands back (as CUTLASS's
// PipelineTmaAsync does) instead of 256 arrivals a buffer.
using EmptyBarrier = cutlass::arch::ClusterBarrier;

template <int D, class Tl>
struct StagesFor {
  // K/V stages in flight. 128 x 128: 3 beside Q take 224 KB at D = 128 (of 227); two stages ran
  // the long shape at 273 TFLOP/s on the H200: a key tile takes about as long to arrive as two
  // take to compute (4 or 6 at D = 64 bought nothing, run 32). 64 x 64: 3 a pipe, at D = 128 two
  // pipes of 112 KB (as many 64-key steps in flight per SM as 128 x 128 has 128-key ones), at
  // D = 64 three of 64 KB.
  static constexpr int value = 3;
  // Q buffers a pipe. At D = 64 a second one lets the producer load the next tile's Q while this
  // tile runs: short sequences make tiles of one or two key steps, too short to hide a Q load
  // issued at their last S (7% at B512 N256, run 31). At D = 128 it would cost a K/V stage.
  static constexpr int q = D <= 64 ? 2 : 1;
};

// Rows [start, start + len) of sequence b: offsets clamped into [0, total], len to max_seq_len.
template <typename IndexT>
__device__ __forceinline__ void sequence_rows(const IndexT* offsets, int64_t b, int64_t total, int64_t max_seq_len,
                                              int64_t& start, int32_t& len) {
  start = min(max(static_cast<int64_t>(offsets[b]), int64_t{0}), total);
  const int64_t end = min(max(static_cast<int64_t>(offsets[b + 1]), int64_t{0}), total);
  len = static_cast<int32_t>(min(max(end - start, int64_t{0}), max_seq_len));
}

// One tile: the query rows of block m_block (Tiling::kBlockM a block) of sequence b, head h; rows
// [start, start + len); len < 0: no tile is left (the producer's last hand-over). 32-bit: the launcher takes fewer than
// 2^30 rows, and the producer warp holds three of these in its 24 registers.
struct WorkTile {
  int32_t start, len, m_block, h;
};

template <typename T, int D, class Tl = Tiles128x128>
struct Traits {
  static constexpr int kStages = StagesFor<D, Tl>::value;
  static constexpr int kQStages = StagesFor<D, Tl>::q;
  static constexpr int kBlockM = Tl::kBlockM;
  static constexpr int kBlockN = Tl::kBlockN;
  using BM = Int<kBlockM>;
  using BN = Int<kBlockN>;
  using TileWarpgroups = Layout<Shape<Int<Tl::kTileWarpgroups>, _1, _1>>;
  using HD = Int<D>;
  // Q, K: D contiguous (K-major for both wgmma operands). V: stored as (D, keys) with D contiguous,
  // i.e. MN-major for the B operand of P V, so it loads straight from [rows, D] by TMA.
  using SmemQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BM, HD>{}));  // one buffer
  using SmemK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BN, HD, Int<kStages>>{}));
  using SmemV = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, Shape<HD, BN, Int<kStages>>{}));
  using MmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, BN, HD>>(), TileWarpgroups{}));
  using MmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, HD, BN>, GMMA::Major::K, GMMA::Major::MN>(), TileWarpgroups{}));

  // One pipe: a producer warp's tiles, buffers and barriers, and the consumer warpgroups on them.
  struct alignas(1024) Pipe {
    alignas(1024) T q[kQStages][cosize_v<SmemQ>];  // 1024: the 128-byte swizzle's period
    alignas(1024) T k[cosize_v<SmemK>];
    alignas(1024) T v[cosize_v<SmemV>];
    uint64_t q_full[kQStages], q_empty[kQStages];
    WorkTile tiles[2];  // the tile of Q load k in tiles[k % 2], written before q_full's arrival
    // K of a stage is free once S of its tile is done, V once P V is: K loads start a step earlier.
    uint64_t k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
  };
  struct Smem {
    Pipe pipes[Tl::kPipes];
  };

  __device__ static auto smem_q(Pipe& s, int stage) { return make_tensor(make_smem_ptr(s.q[stage]), SmemQ{}); }
  __device__ static auto smem_k(Pipe& s) { return make_tensor(make_smem_ptr(s.k), SmemK{}); }
  __device__ static auto smem_v(Pipe& s) { return make_tensor(make_smem_ptr(s.v), SmemV{}); }

  // Global views: q/k as (rows, D, heads), v as (D, rows, heads); element strides.
  static auto qk_tensor(const T* p, int total, int heads, int64_t row_stride, int64_t head_stride) {
    return make_tensor(make_gmem_ptr(p), make_shape(total, HD{}, heads),
                       make_stride(row_stride, _1{}, head_stride));
  }
  static auto v_tensor(const T* p, int total, int heads, int64_t row_stride, int64_t head_stride) {
    return make_tensor(make_gmem_ptr(p), make_shape(HD{}, total, heads),
                       make_stride(_1{}, row_stride, head_stride));
  }
  static auto tma_q(const T* p, int total, int heads, int64_t rs, int64_t hs) {
    return make_tma_copy(SM90_TMA_LOAD{}, qk_tensor(p, total, heads, rs, hs), SmemQ{});
  }
  static auto tma_k(const T* p, int total, int heads, int64_t rs, int64_t hs) {
    return make_tma_copy(SM90_TMA_LOAD{}, qk_tensor(p, total, heads, rs, hs), take<0, 2>(SmemK{}));
  }
  static auto tma_v(const T* p, int total, int heads, int64_t rs, int64_t hs) {
    return make_tma_copy(SM90_TMA_LOAD{}, v_tensor(p, total, heads, rs, hs), take<0, 2>(SmemV{}));
  }
  using TmaQ = decltype(tma_q(nullptr, 0, 0, 0, 0));
  using TmaK = decltype(tma_k(nullptr, 0, 0, 0, 0));
  using TmaV = decltype(tma_v(nullptr, 0, 0, 0, 0));
  static constexpr uint32_t kQBytes = kBlockM * D * sizeof(T);
  static constexpr uint32_t kKVBytes = kBlockN * D * sizeof(T);
};

template <typename T, int D, typename IndexT, class Tl>
struct Params {
  typename Traits<T, D, Tl>::TmaQ tma_q;
  typename Traits<T, D, Tl>::TmaK tma_k;
  typename Traits<T, D, Tl>::TmaV tma_v;
  const IndexT* offsets;
  const int32_t* order;   // [batch]: sequences by q blocks, descending (order_sequences); null: index order
  int32_t* tile_counter;  // the next tile index to hand out, 0 at launch (the prologue zeroes it)
  T* out;
  float* lse;
  int64_t batch, total, max_seq_len;
  int32_t num_tiles;      // num_m_blocks x batch x heads (< 2^31), empty ones included
  int32_t heads, num_m_blocks;
  int32_t group_pairs;    // (sequence, head) pairs per group of the tile order, <= batch x heads
  int32_t tile_grab;      // tile indices a producer takes at once: 1 or kTileGrab (TileSource)
  bool softmax, causal;
  float alpha, inv_max_seq_len;
};


// Tile t of the launch's order: (sequence, head) pairs, the sequences longest first (p.order; in
// index order when it is null), in groups of group_pairs; a group's tiles run before the next
// group's, so the CTAs in flight share the K/V of a few pairs in L2. Within a group the q block
// is the outer index, descending: under the causal mask the last blocks see the most keys, so the
// cheap ones fill the tail, and (sorted) the launch's last groups hold the shortest sequences.
template <typename T, int D, typename IndexT, class Tl>
__device__ __forceinline__ WorkTile tile_at(const Params<T, D, IndexT, Tl>& p, int32_t t) {
  // Unsigned 32-bit: the launcher bounds the tile count below 2^31, and the producer warp decodes
  // in 24 registers (64-bit divides are subroutine calls whose saved registers spill; signed ones
  // hold their signs through the fix-ups).
  const uint32_t pairs = static_cast<uint32_t>(p.num_tiles) / p.num_m_blocks;
  const uint32_t group_size = p.group_pairs;
  const uint32_t group_tiles = group_size * p.num_m_blocks;
  const uint32_t group = static_cast<uint32_t>(t) / group_tiles;
  const uint32_t local = static_cast<uint32_t>(t) - group * group_tiles;
  const uint32_t size = min(group_size, pairs - group * group_size);
  const uint32_t rank = local / size;
  const uint32_t pair = group * group_size + (local - rank * size);
  const int32_t seq_rank = static_cast<int32_t>(pair / static_cast<uint32_t>(p.heads));  // its place in p.order
  const int32_t b = p.order != nullptr ? p.order[seq_rank] : seq_rank;
  WorkTile tile;
  int64_t start;
  sequence_rows(p.offsets, b, p.total, p.max_seq_len, start, tile.len);
  tile.start = static_cast<int32_t>(start);
  tile.m_block = p.num_m_blocks - 1 - static_cast<int32_t>(rank);
  tile.h = static_cast<int32_t>(pair) - seq_rank * p.heads;
  return tile;
}

// Tile indices a producer takes from the counter at once (Params::tile_grab, the launcher's
// choice): consecutive indices are q blocks of the same rank in neighbouring (sequence, head)
// pairs (tile_at's order), so a grab holds similar costs. About half the tiles are empty under
// uniform lengths; 2 a grab spares atomics on them, and more would hand one CTA several of the
// costliest tiles at once (a simulation of the schedule at the issue's shapes: 4 left 3-9% more
// tail than 2). Below kSingleGrabTiles tiles a CTA that is what sets the end: grabs of 1 ran
// 1.21-1.30x faster at B32 N2048 H1 (3.9 tiles a CTA) and HSTU 2-6% slower from 15 up (run 15).
constexpr int kTileGrab = 2;
constexpr int kSingleGrabTiles = 8;

// The producer warp's source of tiles with rows, in grab order. Each grab is one atomic of lane 0;
// lane i < tile_grab decodes candidate base + i, and `pending` holds the lanes whose candidate has
// rows and is not handed out yet.
template <typename T, int D, typename IndexT, class Tl>
struct TileSource {
  const Params<T, D, IndexT, Tl>& p;
  WorkTile candidate{};
  uint32_t pending = 0;

  // The next tile with rows (every lane gets it); false when none is left.
  __device__ __forceinline__ bool next(WorkTile& tile) {
    const int lane = threadIdx.x % 32;
    while (pending == 0) {
      int32_t base = 0;
      if (lane == 0) base = atomicAdd(p.tile_counter, p.tile_grab);
      base = __shfl_sync(0xffffffffu, base, 0);
      if (base >= p.num_tiles) return false;
      const int32_t mine = base + lane;  // num_tiles <= 2^30: no overflow
      bool has_rows = false;
      if (lane < p.tile_grab && mine < p.num_tiles) {
        candidate = tile_at(p, mine);
        has_rows = candidate.m_block * Tl::kBlockM < candidate.len;
      }
      pending = __ballot_sync(0xffffffffu, has_rows);
    }
    const int first = __ffs(pending) - 1;
    pending &= pending - 1;
    tile.start = __shfl_sync(0xffffffffu, candidate.start, first);
    tile.len = __shfl_sync(0xffffffffu, candidate.len, first);
    tile.m_block = __shfl_sync(0xffffffffu, candidate.m_block, first);
    tile.h = __shfl_sync(0xffffffffu, candidate.h, first);
    return true;
  }
};

// Key tiles a q block visits: those up to its last row when causal, else the whole sequence.
template <class Tl>
__device__ __forceinline__ int key_tiles(const WorkTile& tile, bool causal) {
  const int m0 = tile.m_block * Tl::kBlockM;
  const int key_end = causal ? min(m0 + Tl::kBlockM, tile.len) : tile.len;
  return (key_end + Tl::kBlockN - 1) / Tl::kBlockN;
}

// The accumulator's ((2, 2, N/8), M, N) per-thread layout as (rows, cols): mode 0.1 and M index
// rows, modes 0.0, 0.2 and N columns (SM90 wgmma's C fragment).
template <class Layout>
__device__ __forceinline__ auto rowcol(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// The same registers as wgmma's 16-bit A fragment ((2, 2, 2), M, K/16): pairs of 8-column groups
// of the accumulator make one 16-wide k step.
template <class Layout>
__device__ __forceinline__ auto acc_as_a(Layout l) {
  auto cols = logical_divide(get<0, 2>(l), Tile<_2>{});
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(cols)), get<1>(l),
                     coalesce(make_layout(get<0, 1>(cols), get<2>(l))));
}

// Issue c (+)= a b as one wgmma batch; the caller waits (warpgroup_wait) and fences c after.
template <bool kZeroInit, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_issue(Mma& mma, const TA& a, const TB& b, TC& c) {
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

// lo, hi rounded to T and packed into 4 bytes, lo first in memory.
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  return static_cast<uint32_t>(static_cast<T>(lo).raw()) | (static_cast<uint32_t>(static_cast<T>(hi).raw()) << 16);
}

// dst[0], dst[1] = lo, hi rounded to T, as one 4-byte store (the epilogues' column pairs).
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(dst) = pack_pair<T>(lo, hi);
}

// A row of the accumulator stored as 16-byte pieces. wgmma's C fragment gives lane t = lane % 4 of
// a quad (the 4 lanes holding one row) columns 8p + 2t and 8p + 2t + 1 of each 8-column block p,
// packed in words[p]. A 4 x 4 transpose of words within the quad (lanes t and t ^ 1 swap the words
// whose index differs from t in bit 0, then t and t ^ 2 those differing in bit 1) leaves lane t
// block 4g + t whole, so a warp's store writes 64 contiguous bytes of each of its 8 rows instead
// of 16: a quarter of the store instructions and memory transactions. The 4-byte stores took
// 6-21% of a consumer warpgroup's cycles in run 39 (bench/attention/NOTES.md). Every lane of the
// warp must call it (shuffles); `store` (the row is inside the sequence) is the same in a quad.
template <typename T, int kBlocks>
__device__ __forceinline__ void store_row_16b(T* row, const uint32_t (&words)[kBlocks], bool store) {
  static_assert(kBlocks % 4 == 0, "whole 64-byte pieces of a row");
  const int t = threadIdx.x % 4;
  const bool odd = t & 1, high = t & 2;
  CUTE_UNROLL
  for (int g = 0; g < kBlocks / 4; ++g) {
    uint32_t x[4] = {words[4 * g], words[4 * g + 1], words[4 * g + 2], words[4 * g + 3]};
    CUTE_UNROLL
    for (int k = 0; k < 2; ++k) {
      const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? x[2 * k] : x[2 * k + 1], 1);
      if (odd) {
        x[2 * k] = got;
      } else {
        x[2 * k + 1] = got;
      }
    }
    CUTE_UNROLL
    for (int k = 0; k < 2; ++k) {
      const uint32_t got = __shfl_xor_sync(0xffffffffu, high ? x[k] : x[2 + k], 2);
      if (high) {
        x[k] = got;
      } else {
        x[2 + k] = got;
      }
    }
    if (store) *reinterpret_cast<uint4*>(row + 8 * (4 * g + t)) = make_uint4(x[0], x[1], x[2], x[3]);
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// One MUFU op each: silu(x) = h + h tanh(h) with h = x / 2, and 2^x.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The consumers' per-row softmax state (rows of this thread in the S fragment): running max of
// alpha s in log2 units and this thread's share of the running sum of exp2 (summed over the
// quad of threads sharing the row once, in the epilogue).
template <int kRows>
struct SoftmaxState {
  float row_max[kRows], row_sum[kRows], rescale[kRows];
};

// S of key tile n0 -> P values (fp32, in place): masked keys (past the sequence; past the row
// when causal) become 0 after f. HSTU: f = silu(alpha s). Softmax: exp2(alpha log2e s - max), the
// state's max and sum updated and the factor O needs before this tile's P V kept in rescale.
template <bool kMask, bool kSoftmax, class TS, class TC, int kRows>
__device__ __forceinline__ void scores_to_p_masked(TS& S, const TC& cS, int m0, int n0, int len, bool causal,
                                            float scale, SoftmaxState<kRows>& st) {
  // Row r's keys from its limit on are masked: past the sequence, or past the row when causal.
  auto key_limit = [&](int r) { return (causal ? min(len, m0 + get<0>(cS(r, 0)) + 1) : len) - n0; };
  auto masked = [&](int r, int c) { return get<1>(cS(r, c)) >= key_limit(r); };
  if constexpr (!kSoftmax) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        const float h = S(r, c) * scale;  // scale = alpha / 2
        const float silu = fmaf(h, tanh_approx(h), h);
        S(r, c) = (kMask && masked(r, c)) ? 0.f : silu;
      }
    }
  } else {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float mx = st.row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        float x = S(r, c) * scale;  // scale = alpha log2(e)
        if (kMask && masked(r, c)) x = -INFINITY;
        S(r, c) = x;
        mx = fmaxf(mx, x);
      }
      mx = quad_max(mx);
      // Key 0 is in the first tile and valid for every row, so mx is finite; guard anyway.
      const float base = mx == -INFINITY ? 0.f : mx;
      st.rescale[r] = exp2_approx(st.row_max[r] - base);
      st.row_max[r] = mx;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        S(r, c) = exp2_approx(S(r, c) - base);
        sum += S(r, c);
      }
      st.row_sum[r] = st.row_sum[r] * st.rescale[r] + sum;
    }
  }
}

template <int kBlockN, bool kSoftmax, class TS, class TC, int kRows>
__device__ __forceinline__ void scores_to_p(TS& S, const TC& cS, int m0, int n0, int len, bool causal,
                                            float scale, SoftmaxState<kRows>& st) {
  // Keys past the sequence, and past the q block's first row when causal, need the mask.
  if (n0 + kBlockN > len || (causal && n0 + kBlockN > m0)) {
    scores_to_p_masked<true, kSoftmax>(S, cS, m0, n0, len, causal, scale, st);
  } else {
    scores_to_p_masked<false, kSoftmax>(S, cS, m0, n0, len, causal, scale, st);
  }
}

// By one warp: the loads of one pipe.
template <typename T, int D, typename IndexT, class Tl>
__device__ __forceinline__ void produce(const Params<T, D, IndexT, Tl>& p, typename Traits<T, D, Tl>::Pipe& smem) {
  using Tr = Traits<T, D, Tl>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  constexpr int kStages = Tr::kStages;
  constexpr int kQStages = Tr::kQStages;
  Tensor sK = Tr::smem_k(smem);
  Tensor sV = Tr::smem_v(smem);
  const int total = static_cast<int>(p.total);
  Tensor mQ = p.tma_q.get_tma_tensor(make_shape(total, HD{}, p.heads));
  Tensor mK = p.tma_k.get_tma_tensor(make_shape(total, HD{}, p.heads));
  Tensor mV = p.tma_v.get_tma_tensor(make_shape(HD{}, total, p.heads));
  const bool leader = threadIdx.x % 32 == 0;
  // Q of a tile into buffer stage, as the TMA partition's (global source, shared destination).
  auto q_copy = [&](const WorkTile& t, int stage) {
    Tensor sQ = Tr::smem_q(smem, stage);
    Tensor gQ = local_tile(domain_offset(make_coord(t.start, _0{}), mQ(_, _, t.h)),
                           Shape<BM, HD>{}, make_coord(t.m_block, _0{}));
    return tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  };
  int kv_count = 0, tile_count = 0;
  WorkTile tile, next;
  TileSource<T, D, IndexT, Tl> source{p};
  // The next tile is taken one ahead, while this tile's loads are in flight, and its Q rows (read
  // once, from DRAM) are pulled into L2 then: with one Q buffer the consumers hand it back only at
  // their last S of a tile, a step or two before they need the next Q, less than a DRAM round trip.
  // Waits until the consumers are done with the Q buffer of hand-over tile_count; returns it.
  auto free_q_buffer = [&]() {
    const int qs = tile_count % kQStages;
    EmptyBarrier::wait(&smem.q_empty[qs], ((tile_count / kQStages) & 1) ^ 1);
    return qs;
  };
  bool has_tile = source.next(tile);
  if (has_tile && leader) prefetch(p.tma_q, get<0>(q_copy(tile, 0)));
  for (; has_tile; ++tile_count) {
    const int s0 = tile.start;
    Tensor gK = local_tile(domain_offset(make_coord(s0, _0{}), mK(_, _, tile.h)), Shape<BN, HD>{},
                           make_coord(_, _0{}));
    Tensor gV = local_tile(domain_offset(make_coord(_0{}, s0), mV(_, _, tile.h)), Shape<HD, BN>{},
                           make_coord(_0{}, _));
    auto tK = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto tV = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    auto load_k = [&](int n, int count) {
      const int s = count % kStages;
      EmptyBarrier::wait(&smem.k_empty[s], ((count / kStages) & 1) ^ 1);
      if (leader) {
        FullBarrier::arrive_and_expect_tx(&smem.k_full[s], Tr::kKVBytes);
        copy(p.tma_k.with(smem.k_full[s]), get<0>(tK)(_, n), get<1>(tK)(_, s));
      }
    };
    auto load_v = [&](int n, int count) {
      const int s = count % kStages;
      EmptyBarrier::wait(&smem.v_empty[s], ((count / kStages) & 1) ^ 1);
      if (leader) {
        FullBarrier::arrive_and_expect_tx(&smem.v_full[s], Tr::kKVBytes);
        copy(p.tma_v.with(smem.v_full[s]), get<0>(tV)(_, n), get<1>(tV)(_, s));
      }
    };
    // In the consumers' order: K(0), Q, then K(n), V(n - 1) (S of key tile n is issued before
    // P V of n - 1), V of the last. V is handed back a step after K, so issuing V(n) before
    // K(n + 1) would hold K(n + 1) behind that later release. K(0) goes before waiting for Q's
    // buffer (FA3's order): its stage is usually free by then.
    load_k(0, kv_count);
    const int qs = free_q_buffer();
    if (leader) {
      smem.tiles[tile_count & 1] = tile;  // visible to the consumers through q_full's arrival
      FullBarrier::arrive_and_expect_tx(&smem.q_full[qs], Tr::kQBytes);
      auto tQ = q_copy(tile, qs);
      copy(p.tma_q.with(smem.q_full[qs]), get<0>(tQ), get<1>(tQ));
    }
    const int n_tiles = key_tiles<Tl>(tile, p.causal);  // >= 1: the tile has rows
    if (n_tiles > 1) load_k(1, kv_count + 1);
    load_v(0, kv_count);
    // The next tile only after V(0): taking one is a chain of global round trips (the counter's
    // atomic, the order, the offsets), and a tile of one key step has its P V waiting on V(0).
    has_tile = source.next(next);
    if (has_tile && leader) prefetch(p.tma_q, get<0>(q_copy(next, 0)));
    #pragma unroll 1  // the producer warp has 24 registers: an unrolled copy of this loop spills
    for (int n = 2; n < n_tiles; ++n) {
      load_k(n, kv_count + n);
      load_v(n - 1, kv_count + n - 1);
    }
    if (n_tiles > 1) load_v(n_tiles - 1, kv_count + n_tiles - 1);
    kv_count += n_tiles;
    tile = next;
  }
  // No tile is left: hand the consumers a tile with len < 0 once they are done with that buffer.
  const int qs = free_q_buffer();
  if (leader) {
    smem.tiles[tile_count & 1] = WorkTile{0, -1, 0, 0};
    FullBarrier::arrive(&smem.q_full[qs]);
  }
}

// By the consumer warpgroups of one pipe; tid: the thread's index among them.
template <bool kSoftmax, typename T, int D, typename IndexT, class Tl>
__device__ __forceinline__ void consume(const Params<T, D, IndexT, Tl>& p, typename Traits<T, D, Tl>::Pipe& smem,
                                        int tid) {
  using Tr = Traits<T, D, Tl>;
  constexpr int kBlockM = Tr::kBlockM;
  constexpr int kBlockN = Tr::kBlockN;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  constexpr int kStages = Tr::kStages;
  constexpr int kQStages = Tr::kQStages;
  auto release = [&](uint64_t* barrier) {
    if (tid % 128 == 0) EmptyBarrier::arrive(barrier);
  };
  Tensor sK = Tr::smem_k(smem);
  Tensor sV = Tr::smem_v(smem);
  typename Tr::MmaS mma_s;
  typename Tr::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrK = thr_s.partition_fragment_B(sK);
  Tensor tOrV = thr_o.partition_fragment_B(sV);
  Tensor tSrS = partition_fragment_C(mma_s, Shape<BM, BN>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<BM, HD>{});
  Tensor tOrP = make_tensor_like<T>(tSrS);
  Tensor tOrPa = make_tensor(tOrP.data(), acc_as_a(tOrP.layout()));
  static_assert(decltype(size<0>(tOrPa))::value == 8 &&
                    decltype(size<2>(tOrPa))::value == decltype(size<2>(tOrV))::value,
                "P's registers must cover wgmma's A fragment of every k step of P V");
  // (row, col) of every accumulator element within the tile, in the (rows, cols) view.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BM, BN>{}));
  Tensor cS = make_tensor(tScS.data(), rowcol(tScS.layout()));
  Tensor S = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
  Tensor O = make_tensor(tOrO.data(), rowcol(tOrO.layout()));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<BM, HD>{}));
  Tensor cO = make_tensor(tOcO.data(), rowcol(tOcO.layout()));
  constexpr int kRows = size<0>(decltype(S.layout()){});
  const float scale = kSoftmax ? p.alpha * static_cast<float>(M_LOG2E) : 0.5f * p.alpha;
  const int64_t out_row = static_cast<int64_t>(p.heads) * D;

  auto to_p = [&]() {
    CUTE_UNROLL
    for (int e = 0; e < size(tSrS); ++e) tOrP(e) = static_cast<T>(tSrS(e));
  };
  auto rescale_o = [&](const SoftmaxState<kRows>& st) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); ++c) O(r, c) *= st.rescale[r];
    }
  };

  int kv_count = 0;
  for (int tile_count = 0;; ++tile_count) {
    const int qs = tile_count % kQStages;
    FullBarrier::wait(&smem.q_full[qs], (tile_count / kQStages) & 1);
    const WorkTile tile = smem.tiles[tile_count & 1];
    if (tile.len < 0) break;
    Tensor tSrQ = thr_s.partition_fragment_A(Tr::smem_q(smem, qs));
    const int m0 = tile.m_block * kBlockM;
    const int n_tiles = key_tiles<Tl>(tile, p.causal);
    SoftmaxState<kRows> st;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) st.row_max[r] = -INFINITY, st.row_sum[r] = 0.f, st.rescale[r] = 1.f;

    int s = kv_count % kStages;
    FullBarrier::wait(&smem.k_full[s], (kv_count / kStages) & 1);
    wgmma_issue<true>(mma_s, tSrQ, tSrK(_, _, _, s), tSrS);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    release(&smem.k_empty[s]);
    if (n_tiles == 1) release(&smem.q_empty[qs]);
    scores_to_p<kBlockN, kSoftmax>(S, cS, m0, 0, tile.len, p.causal, scale, st);
    to_p();
    clear(tOrO);
    for (int n = 1; n < n_tiles; ++n) {
      const int prev = s;
      const uint32_t prev_phase = (kv_count / kStages) & 1;
      ++kv_count;
      s = kv_count % kStages;
      FullBarrier::wait(&smem.k_full[s], (kv_count / kStages) & 1);
      wgmma_issue<true>(mma_s, tSrQ, tSrK(_, _, _, s), tSrS);
      FullBarrier::wait(&smem.v_full[prev], prev_phase);
      warpgroup_fence_operand(tOrP);
      wgmma_issue<false>(mma_o, tOrPa, tOrV(_, _, _, prev), tOrO);
      warpgroup_wait<1>();  // S of tile n is done; P V of tile n - 1 still runs
      warpgroup_fence_operand(tSrS);
      release(&smem.k_empty[s]);
      if (n == n_tiles - 1) release(&smem.q_empty[qs]);
      scores_to_p<kBlockN, kSoftmax>(S, cS, m0, n * kBlockN, tile.len, p.causal, scale, st);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);
      release(&smem.v_empty[prev]);
      if constexpr (kSoftmax) rescale_o(st);
      to_p();
    }
    FullBarrier::wait(&smem.v_full[s], (kv_count / kStages) & 1);
    warpgroup_fence_operand(tOrP);
    wgmma_issue<false>(mma_o, tOrPa, tOrV(_, _, _, s), tOrO);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    warpgroup_fence_operand(tOrP);
    release(&smem.v_empty[s]);
    ++kv_count;

    // Epilogue: normalize, round once, store the rows inside the sequence (16-byte pieces).
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int i = m0 + get<0>(cO(r, 0));
      const float row_sum = kSoftmax ? quad_sum(st.row_sum[r]) : 1.f;  // every lane of the quad joins
      const float out_scale = kSoftmax ? 1.f / row_sum : p.inv_max_seq_len;
      T* row = p.out + static_cast<int64_t>(tile.start + i) * out_row + static_cast<int64_t>(tile.h) * D;
      static_assert(decltype(size<1>(O))::value == D / 4, "2 columns of every 8-column block a thread");
      uint32_t words[D / 8];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); c += 2) words[c / 2] = pack_pair<T>(O(r, c) * out_scale, O(r, c + 1) * out_scale);
      store_row_16b(row, words, i < tile.len);
      if (i >= tile.len) continue;
      if (kSoftmax && get<1>(cO(r, 0)) == 0) {
        p.lse[static_cast<int64_t>(tile.h) * p.total + tile.start + i] =
            (st.row_max[r] + log2f(row_sum)) * static_cast<float>(M_LN2);
      }
    }
  }
}

template <typename T, int D, typename IndexT, class Tl>
__global__ void __launch_bounds__(Tl::kThreads, 1) attention_fwd(const __grid_constant__ Params<T, D, IndexT, Tl> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = Traits<T, D, Tl>;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Tr::Smem*>(smem_raw);
  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    for (auto& pipe : smem.pipes) {
      for (int s = 0; s < Tr::kQStages; ++s) {
        FullBarrier::init(&pipe.q_full[s], 1);
        EmptyBarrier::init(&pipe.q_empty[s], Tl::kTileWarpgroups);
      }
      for (int s = 0; s < Tr::kStages; ++s) {
        FullBarrier::init(&pipe.k_full[s], 1);
        FullBarrier::init(&pipe.v_full[s], 1);
        EmptyBarrier::init(&pipe.k_empty[s], Tl::kTileWarpgroups);
        EmptyBarrier::init(&pipe.v_empty[s], Tl::kTileWarpgroups);
      }
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();  // barriers initialized before anyone waits on them; no block barrier after this
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<Tl::kProducerRegs>();
    // A call per pipe: each with its pipe's addresses as constants (a pipe index in one of the
    // producer's 24 registers spilled it).
    const int warp = threadIdx.x / 32;
    for_each(make_int_sequence<Tl::kPipes>{}, [&](auto pipe) {
      if (warp == pipe) produce(p, smem.pipes[pipe]);
    });
  } else {
    cutlass::arch::warpgroup_reg_alloc<Tl::kConsumerRegs>();
    constexpr int kPipeThreads = Tl::kTileWarpgroups * 128;
    const int consumer = threadIdx.x - 128;
    // With one pipe its address is a constant: a pipe index from threadIdx.x made ptxas keep shared
    // memory addresses in registers and spill the D = 128 consumer.
    auto& pipe = smem.pipes[Tl::kPipes == 1 ? 0 : consumer / kPipeThreads];
    if (p.softmax) {
      consume<true>(p, pipe, consumer % kPipeThreads);
    } else {
      consume<false>(p, pipe, consumer % kPipeThreads);
    }
  }
#else
  (void)p;
#endif
}

}  // namespace attention
}  // namespace cuda
}  // namespace mymetaops
