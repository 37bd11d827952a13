// The native attention forward for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950: MI350X/MI355X),
// wave64, bf16 / fp16 MFMA: HSTU (silu(alpha q.k) / max_seq_len, no softmax) and softmax (flash
// attention with log-sum-exp) over jagged sequences. Semantics and launcher ABI:
// csrc/include/mymetaops/attention.h. cuda/attention/ defines the same symbols; a build links one.
//
// Grid: one workgroup per item, a loop over items when the grid is capped. Items [0, tiles) are
// (q block of kBlockM rows, sequence, head) tiles, the longest first: the q block index descends
// over the whole grid (block = num_blocks - 1 - item / (B * H)), and under the causal mask the last
// q blocks visit the most keys, so the short ones fill the tail. The heads of one sequence are
// adjacent (they share nothing, but their K / V rows are neighbours in memory). A tile past its
// sequence's length exits at once. Then aux items of kAuxRows rows: item a checks offsets entries
// kAuxRows * a + thread (the header's rules) and writes out 0 / lse -inf for rows a .. that no
// tile writes (outside every sequence, or past max_seq_len in their sequence), found by a binary
// search of offsets per row as in hip/jagged_bmm.hip.
//
// A tile: 4 waves, each owning 32 q rows (one MFMA block). Everything is computed transposed, so
// that no value crosses lanes between the two products:
//  * S^T = K Q^T (v_mfma_f32_32x32x8 bf16 / f16, K = 8): A = 32 key rows of the K tile in LDS,
//    B = the wave's Q rows, which stay in registers for the whole tile. Lane l gives key (A) / q
//    row (B) l % 32 and head-dim half l / 32, so the accumulator of lane l holds q row l % 32
//    against keys 8 (e / 4) + 4 (l / 32) + e % 4 (element e).
//  * P^T = elementwise(S^T) in registers: HSTU silu(alpha s) (1 / max_seq_len applied once at the
//    end); softmax the online update in base 2, with a running max and sum per q row. A q row
//    lives in lanes l and l + 32: the row max crosses lane halves once per key block (ds_bpermute),
//    the row sum only at the end.
//  * O^T += V^T P^T: B = P^T straight from the S^T accumulators (rounded to 16 bits, 4 keys per
//    lane half per MFMA step: exactly the keys those accumulator elements hold), A = V^T, read
//    from LDS where V is stored transposed (a row per head-dim column) with its keys permuted so
//    that the 16 keys a lane half needs from a 32-key block are contiguous (two ds_read_b128).
//    Lane l's O^T accumulators then all belong to q row l % 32: the softmax rescale is one
//    scalar per lane.
// K and V tiles of kBlockN keys: global -> registers (16-byte loads, the next tile's issued
// before this tile's MFMAs) -> LDS, two stages (double buffer), one barrier per key block.
//  * K: row-major rows of D + 8 elements: the 8 lanes of one ds_read_b128 phase (8 rows, same
//    column) fall on 8 disjoint groups of 4 banks (row stride = 4 mod 32 words).
//  * V^T: a lane loads 8 head-dim columns at keys k and k + 1 (two 16-byte loads) and stores
//    them as 8 words (k, k + 1) into 8 rows of kBlockN + 8 keys (80 or 144 bytes: conflict-free
//    ds_read_b128 as above).
// Keys past the sequence are loaded clamped (K: finite garbage, masked after S) or stored as
// zeros (V: no 0 * garbage in the second product); q rows past it are loaded clamped and never
// stored. Causal: a q block visits key blocks up to its last row; only blocks that hold a key past
// the block's first row (the diagonal) or past the sequence apply a mask (template kMasked).
//
// Through hip/shim (NVIDIA, no MFMA, warps of 32) the same kernel runs with each MFMA step
// replaced by fp32 FMAs over the same LDS tiles and registers (scores_*, pv_*): the lane halves
// of a wave are two warps there, so what crosses halves (the row max and sum, the other half's
// P values) goes through a little LDS (ShimScratch) and the other half of Q comes from global.
// On AMD the launcher refuses any device but gfx942 / gfx950.

#include <cstdint>
#include <initializer_list>

#include "../hip_compat.h"
#include "mymetaops/attention.h"

namespace mymetaops {
namespace attention_detail {  // named: nvcc flags unused internal-linkage entities on the shim

using hip_compat::F32x16;
using hip_compat::U32x4;

constexpr int kThreads = 256;  // 4 waves of 64 lanes (8 warps of 32 through the shim)
constexpr int kWaves = 4;
// 128 q rows: 32 per wave, the MFMA block's width, so each wave runs whole 32x32 blocks and the
// K / V tiles in LDS are shared by 128 rows (the reuse that bounds LDS traffic per MFMA).
constexpr int kBlockM = kWaves * 32;
constexpr int kAuxRows = kThreads;  // offsets entries / out rows per aux item: one per thread
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -__builtin_huge_valf();
static_assert(kThreads == kWaves * 64, "4 waves of 64 lanes");
// HIP counts a grid in work-items with 32 bits; the item loop covers any count.
constexpr int64_t kMaxGridBlocks = UINT32_MAX / kThreads;

// One kernel's tile: its kind, head dim (dqk == dv == kD) and keys per step.
template <AttentionKind kKindArg, int kDArg, int kBlockNArg>
struct Tile {
  static constexpr AttentionKind kKind = kKindArg;
  static constexpr bool kSoftmax = kKindArg == AttentionKind::kSoftmax;
  static constexpr int kD = kDArg;
  static constexpr int kBlockN = kBlockNArg;
  static constexpr int kKeyBlocks = kBlockN / 32;  // 32-key MFMA blocks per step
  static constexpr int kOutBlocks = kD / 32;       // 32-column MFMA blocks of O^T
  static constexpr int kQWords = kD / 4;           // a lane's half of a Q row, 2 values a word
  static constexpr int kKRowElems = kD + 8;        // K rows (head dim contiguous) + padding
  static constexpr int kVRowElems = kBlockN + 8;   // V^T rows (keys contiguous) + padding
  static constexpr int kKStageElems = kBlockN * kKRowElems;
  static constexpr int kStageElems = kKStageElems + kD * kVRowElems;
  static constexpr int kLdsBytes = 2 * kStageElems * 2;
  static_assert(kD % 32 == 0 && kBlockN % 32 == 0, "whole MFMA blocks");
  // Static LDS within 48 KB: what a CUDA block may declare statically (the shim runs these
  // kernels), and so within gfx942's 64 KB too (1 workgroup per CU there, 4 on gfx950).
  static_assert(kLdsBytes + 9 * 1024 <= 48 * 1024, "over the static LDS of the shim's CUDA block");
  static_assert(kLdsBytes <= hip_compat::lds_budget_bytes(hip_compat::Cdna::kGfx942),
                "over gfx942's LDS");
};

// The tiles (AttentionKernelConfig.kernel indexes kKernelNames in this order). 128 q rows each;
// keys per step: 64 at D = 64 (two K / V stages take 36 KB), 32 at D = 128 (37 KB; 64 keys would
// take 70 KB, over gfx942's 64 KB, and the shim's 48 KB).
using HstuD64 = Tile<AttentionKind::kHstu, 64, 64>;
using HstuD128 = Tile<AttentionKind::kHstu, 128, 32>;
using SoftmaxD64 = Tile<AttentionKind::kSoftmax, 64, 64>;
using SoftmaxD128 = Tile<AttentionKind::kSoftmax, 128, 32>;

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
// Two values rounded to T in one word, lo in the low half (the MFMA operands' order).
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi) {
  return uint32_t(from_float<T>(lo)) | (uint32_t(from_float<T>(hi)) << 16);
}

// 1 / x to 1 ulp (v_rcp_f32): silu's sigmoid needs no correctly rounded division.
__device__ inline float reciprocal(float x) {
#if defined(__HIP_PLATFORM_AMD__)
  return __builtin_amdgcn_rcpf(x);
#else
  return __frcp_rn(x);
#endif
}

struct alignas(8) Words2 {
  uint32_t lo, hi;
};

template <typename I>
struct Params {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  int64_t q_row_stride, q_head_stride, k_row_stride, k_head_stride, v_row_stride, v_head_stride;
  const I* offsets;
  int64_t batch, total, max_seq_len;
  int32_t heads;
  float score_scale;      // HSTU: alpha; softmax: alpha * log2(e) (base-2 scores)
  float inv_max_seq_len;  // HSTU
  uint16_t* out;
  float* lse;  // softmax
  int64_t* errors;
  ErrorOp error_op;
  int64_t num_blocks_m;  // q blocks per sequence
  int64_t tiles;         // num_blocks_m * batch * heads: items [0, tiles); aux items follow
  int64_t items;
  int64_t grid;  // blocks of the launch
};

// ---------------------------------------------------------------------------------------------
// Offsets (the conventions of hip/jagged_bmm.hip).

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

// Whether out row r (0 <= r < total) is written by a tile: the last sequence b with offsets[b] <=
// r (a binary search; clamping does not change how an entry compares with r) holds r among its
// first max_seq_len rows.
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
  return r < s.end && r - s.start < p.max_seq_len;
}

// Records the first rule offsets entry i breaks (attention.h): offsets[0] == 0, non-decreasing,
// offsets[batch] == total, lengths (of the clamped sequence) at most max_seq_len.
template <typename I>
__device__ inline void check_offsets_entry(const Params<I>& p, int64_t i) {
  const int64_t value = p.offsets[i];
  const int64_t prev = i > 0 ? int64_t(p.offsets[i - 1]) : 0;
  const int64_t length = i < p.batch ? [&] {
    const Seq s = sequence(p.offsets, i, p.total);
    return s.end - s.start;
  }() : 0;
  ErrorCode code = ErrorCode::kNone;
  int64_t bad = value, bound = 0;
  if (i == 0 && value != 0) {
    code = ErrorCode::kOffsetNotAtEnd;
  } else if (value < prev) {
    code = ErrorCode::kDecreasingOffset;
  } else if (i == p.batch && value != p.total) {
    code = ErrorCode::kOffsetNotAtEnd, bound = p.total;
  } else if (length > p.max_seq_len) {
    code = ErrorCode::kLengthAboveMax, bad = length, bound = p.max_seq_len;
  }
  if (__builtin_expect(code != ErrorCode::kNone, 0))
    hip_compat::record_error(p.errors, p.error_op, code, i, bad, bound);
}

// ---------------------------------------------------------------------------------------------
// K / V tiles: one thread's share, global -> registers (load) -> LDS (store).

// K rows key0 .. key0 + kBlockN of one head: 16-byte chunk `chunk` of rows row0 + i * kRowsPerPass.
// Keys past n are loaded clamped to row n - 1 (finite; their scores are masked).
template <typename Tl>
struct KLoader {
  static constexpr int kChunks = Tl::kD / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kLoads = Tl::kBlockN / kRowsPerPass;
  static_assert(Tl::kBlockN % kRowsPerPass == 0, "whole load passes");

  int chunk, row0;
  U32x4 regs[kLoads];

  __device__ explicit KLoader(int tid) : chunk(tid % kChunks), row0(tid / kChunks) {}
  __device__ void load(const uint16_t* base, int64_t stride, int key0, int n) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int r = key0 + row0 + i * kRowsPerPass;
      regs[i] = hip_compat::load16(base + int64_t(r < n ? r : n - 1) * stride + chunk * 8);
    }
  }
  __device__ void store(uint16_t* k_lds) const {
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      hip_compat::store16(k_lds + (row0 + i * kRowsPerPass) * Tl::kKRowElems + chunk * 8, regs[i]);
  }
};

// Where key kk (0 <= kk < kBlockN) of a V^T row sits: within its 32-key block, key 8 g + 4 h + j
// (the key that lane half h gives in slot j of MFMA step g) goes to 16 h + 4 g + j, so that a
// lane half's 16 keys are contiguous. Keys 2 m and 2 m + 1 stay adjacent (one word).
__device__ inline int v_position(int kk) {
  const int r = kk % 32;
  return kk - r + 16 * ((r / 4) % 2) + 4 * (r / 8) + r % 4;
}

// V rows key0 .. of one head into V^T: blocks of 8 head-dim columns x 2 keys. Thread t takes key
// pair t % kPairs (the fastest: the lanes of one ds_write_b32 write different words of a row) of
// column groups t / kPairs + j * kGroupsPerPass. Keys past n are stored as zeros.
template <typename Tl>
struct VLoader {
  static constexpr int kPairs = Tl::kBlockN / 2;
  static constexpr int kGroupsPerPass = kThreads / kPairs;
  static constexpr int kBlocks = Tl::kD / 8 / kGroupsPerPass;
  static_assert(kThreads % kPairs == 0 && (Tl::kD / 8) % kGroupsPerPass == 0, "whole blocks");

  int pair, group0;
  bool in_seq[2] = {false, false};
  U32x4 regs[kBlocks][2];

  __device__ explicit VLoader(int tid) : pair(tid % kPairs), group0(tid / kPairs) {}
  __device__ void load(const uint16_t* base, int64_t stride, int key0, int n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key0 + 2 * pair + h;
      in_seq[h] = key < n;
      const uint16_t* row = base + int64_t(in_seq[h] ? key : n - 1) * stride;
#pragma unroll
      for (int j = 0; j < kBlocks; ++j)
        regs[j][h] = hip_compat::load16(row + (group0 + j * kGroupsPerPass) * 8);
    }
  }
  // Column i of a block gets value i of both loads: (k, k + 1) in one word, low half first.
  __device__ void store(uint16_t* v_lds) const {
    const U32x4 zero = {0u, 0u, 0u, 0u};
    const int position = v_position(2 * pair);
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const U32x4 lo = in_seq[0] ? regs[j][0] : zero, hi = in_seq[1] ? regs[j][1] : zero;
      uint16_t* first = v_lds + (group0 + j * kGroupsPerPass) * 8 * Tl::kVRowElems + position;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t word = i % 2 == 0 ? (lo[i / 2] & 0xffffu) | (hi[i / 2] << 16)
                                         : (lo[i / 2] >> 16) | (hi[i / 2] & 0xffff0000u);
        *reinterpret_cast<uint32_t*>(first + i * Tl::kVRowElems) = word;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The two products and the elementwise step of one key block.

// The row of a 32x32 accumulator block (the A operand's row) that element e of lane `lane` holds;
// its column (B's row) is lane % 32.
__device__ inline int block_row(int lane, int e) { return 8 * (e / 4) + 4 * (lane / 32) + e % 4; }

// What through the shim crosses the lane halves of a wave (two warps there) goes through LDS;
// on AMD nothing (one element, never touched).
template <typename Tl>
struct ShimScratch {
  static constexpr int kP = hip_compat::kHasMfma ? 1 : kBlockM * 32;  // one 32-key block of P
  static constexpr int kExchange = hip_compat::kHasMfma ? 1 : kThreads;
  uint16_t p[kP];
  float exchange[kExchange];
};

// This thread's place: its wave's q rows, its lane, the lane's half and column of MFMA blocks.
struct Lane {
  int tid, wave, lane, half, col;
  __device__ explicit Lane(int t)
      : tid(t), wave(t / 64), lane(t % 64), half((t % 64) / 32), col(t % 32) {}
};

// The value of v in the lane of the other half of the wave (lane ^ 32). All threads call it.
template <typename Tl>
__device__ inline float other_half(float v, const Lane& ln, ShimScratch<Tl>& shim) {
  if constexpr (hip_compat::kHasMfma) {
    return __shfl_xor(v, 32, hip_compat::kWaveSize);
  } else {
    shim.exchange[ln.tid] = v;
    hip_compat::block_sync();
    const float other = shim.exchange[ln.tid ^ 32];
    hip_compat::block_sync();
    return other;
  }
}

// The per-tile state of one lane: its q row (MFMA B operand words), the O^T accumulators of that
// row, and (softmax) its running max and partial sum.
template <typename Tl>
struct RowState {
  uint32_t q[Tl::kQWords];  // head-dim values half * D / 2 + 2 w, + 1 in word w
  F32x16 o[Tl::kOutBlocks];
  float max = kNegInf;  // base-2 scores
  float sum = 0.0f;     // over this lane half's keys
};

// S^T of 32-key block c: acc[e] = K row (32 c + block_row) . Q row (col).
template <typename Tl, typename T>
__device__ inline F32x16 scores(const RowState<Tl>& st, const uint16_t* k_lds, int c,
                                const Lane& ln, const uint16_t* q_row) {
  F32x16 acc;
#pragma unroll
  for (int e = 0; e < 16; ++e) acc[e] = 0.0f;
  if constexpr (hip_compat::kHasMfma) {
    const uint16_t* row = k_lds + (32 * c + ln.col) * Tl::kKRowElems + ln.half * (Tl::kD / 2);
    uint32_t kw[Tl::kQWords];
#pragma unroll
    for (int i = 0; i < Tl::kD / 16; ++i) {
      const U32x4 v = hip_compat::load16(row + 8 * i);
#pragma unroll
      for (int e = 0; e < 4; ++e) kw[4 * i + e] = v[e];
    }
#pragma unroll
    for (int s = 0; s < Tl::kD / 8; ++s)
      acc = hip_compat::mfma_32x32x8_16bit<T::kBf16>(kw[2 * s], kw[2 * s + 1], st.q[2 * s],
                                                     st.q[2 * s + 1], acc);
  } else {
    // No MFMA (the shim): the lane's half of the Q row from its words, the other half (in the
    // other warp's registers there) from global memory.
    for (int d = 0; d < Tl::kD; ++d) {
      const int local = d - ln.half * (Tl::kD / 2);
      const bool own = local >= 0 && local < Tl::kD / 2;
      const float qv = own ? to_float<T>(uint16_t(st.q[local / 2] >> (16 * (local % 2))))
                           : to_float<T>(q_row[d]);
#pragma unroll
      for (int e = 0; e < 16; ++e)
        acc[e] = fmaf(to_float<T>(k_lds[(32 * c + block_row(ln.lane, e)) * Tl::kKRowElems + d]),
                      qv, acc[e]);
    }
  }
  return acc;
}

// O^T += V^T P^T over 32-key block c; p holds the lane's P values of that block as MFMA step g's
// B words 2 g, 2 g + 1 (keys 8 g + 4 half + 0..3).
template <typename Tl, typename T>
__device__ inline void accumulate_pv(RowState<Tl>& st, const uint32_t (&p)[8], const uint16_t* v_lds,
                                     int c, const Lane& ln, ShimScratch<Tl>& shim) {
  if constexpr (hip_compat::kHasMfma) {
#pragma unroll
    for (int t = 0; t < Tl::kOutBlocks; ++t) {
      const uint16_t* row = v_lds + (32 * t + ln.col) * Tl::kVRowElems + 32 * c + 16 * ln.half;
      const U32x4 lo = hip_compat::load16(row), hi = hip_compat::load16(row + 8);
      const uint32_t vw[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
#pragma unroll
      for (int g = 0; g < 4; ++g)
        st.o[t] = hip_compat::mfma_32x32x8_16bit<T::kBf16>(vw[2 * g], vw[2 * g + 1], p[2 * g],
                                                           p[2 * g + 1], st.o[t]);
    }
  } else {
    // No MFMA: the wave's P block through LDS (row = q row, natural key order), then FMAs.
    uint16_t* p_row = shim.p + (ln.wave * 32 + ln.col) * 32;
    for (int w = 0; w < 8; ++w)
      for (int j = 0; j < 2; ++j)
        p_row[8 * (w / 2) + 4 * ln.half + 2 * (w % 2) + j] = uint16_t(p[w] >> (16 * j));
    hip_compat::block_sync();
    for (int kk = 0; kk < 32; ++kk) {
      const float pv = to_float<T>(p_row[kk]);
      const int position = v_position(32 * c + kk);
#pragma unroll
      for (int t = 0; t < Tl::kOutBlocks; ++t)
#pragma unroll
        for (int e = 0; e < 16; ++e)
          st.o[t][e] = fmaf(
              to_float<T>(v_lds[(32 * t + block_row(ln.lane, e)) * Tl::kVRowElems + position]), pv,
              st.o[t][e]);
    }
    hip_compat::block_sync();  // the next block's P overwrites p_row
  }
}

// One key block (keys key0 .. key0 + kBlockN, staged at k_lds / v_lds) for the lane's q row qi.
// kMasked: some key is past n or (causal) past some row of the q block.
template <typename Tl, typename T, bool kCausal, bool kMasked>
__device__ inline void attend_block(RowState<Tl>& st, const uint16_t* k_lds, const uint16_t* v_lds,
                                    int key0, int qi, int n, float score_scale, const Lane& ln,
                                    ShimScratch<Tl>& shim, const uint16_t* q_row) {
  float x[Tl::kKeyBlocks][16];  // scaled scores (softmax: base 2), then P
#pragma unroll
  for (int c = 0; c < Tl::kKeyBlocks; ++c) {
    const F32x16 s = scores<Tl, T>(st, k_lds, c, ln, q_row);
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      x[c][e] = s[e] * score_scale;
      if constexpr (kMasked) {
        const int key = key0 + 32 * c + block_row(ln.lane, e);
        const bool valid = key < n && (!kCausal || key <= qi);
        x[c][e] = valid ? x[c][e] : kNegInf;
      }
    }
  }
  if constexpr (Tl::kSoftmax) {
    float top = kNegInf;
#pragma unroll
    for (int c = 0; c < Tl::kKeyBlocks; ++c)
#pragma unroll
      for (int e = 0; e < 16; ++e) top = fmaxf(top, x[c][e]);
    top = fmaxf(top, other_half(top, ln, shim));
    const float new_max = fmaxf(st.max, top);
    // A row with no valid key yet keeps max -inf: exponentiate against 0, not inf - inf.
    const float base = new_max == kNegInf ? 0.0f : new_max;
    const float correction = __builtin_exp2f(st.max - base);
    st.max = new_max;
    st.sum *= correction;
#pragma unroll
    for (int t = 0; t < Tl::kOutBlocks; ++t)
#pragma unroll
      for (int e = 0; e < 16; ++e) st.o[t][e] *= correction;
#pragma unroll
    for (int c = 0; c < Tl::kKeyBlocks; ++c)
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        x[c][e] = __builtin_exp2f(x[c][e] - base);
        st.sum += x[c][e];
      }
  } else {
    // silu(z) = z / (1 + 2^(-z log2 e)); a masked -inf gives -inf * 0: select 0 instead.
#pragma unroll
    for (int c = 0; c < Tl::kKeyBlocks; ++c)
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const float z = x[c][e];
        const float silu = z * reciprocal(1.0f + __builtin_exp2f(-kLog2e * z));
        x[c][e] = kMasked && z == kNegInf ? 0.0f : silu;
      }
  }
#pragma unroll
  for (int c = 0; c < Tl::kKeyBlocks; ++c) {
    uint32_t p[8];
#pragma unroll
    for (int w = 0; w < 8; ++w) p[w] = pack2<T>(x[c][2 * w], x[c][2 * w + 1]);
    accumulate_pv<Tl, T>(st, p, v_lds, c, ln, shim);
  }
}

// ---------------------------------------------------------------------------------------------
// Work items.

// Tile `item`. All threads of the block take the same branches (the barriers are reached by all).
template <typename Tl, typename T, typename I, bool kCausal>
__device__ inline void attention_tile(const Params<I>& p, int64_t item, uint16_t* lds,
                                      ShimScratch<Tl>& shim) {
  const int64_t seq_heads = p.batch * p.heads;
  const int64_t order = item / seq_heads;
  const int64_t block = p.num_blocks_m - 1 - order;
  const int64_t bh = item - order * seq_heads;
  const int64_t b = bh / p.heads;
  const int64_t h = bh - b * p.heads;
  const Seq s = sequence(p.offsets, b, p.total);
  const int n = static_cast<int>(s.end - s.start < p.max_seq_len ? s.end - s.start : p.max_seq_len);
  const int m0 = static_cast<int>(block) * kBlockM;
  if (m0 >= n) return;  // no rows of the sequence here

  const Lane ln(static_cast<int>(hip_compat::thread_in_block()));
  const int qi = m0 + ln.wave * 32 + ln.col;  // the lane's q row (position in the sequence)
  const uint16_t* q_row =
      p.q + (s.start + (qi < n ? qi : n - 1)) * p.q_row_stride + h * p.q_head_stride;
  const uint16_t* k_base = p.k + s.start * p.k_row_stride + h * p.k_head_stride;
  const uint16_t* v_base = p.v + s.start * p.v_row_stride + h * p.v_head_stride;

  RowState<Tl> st;
#pragma unroll
  for (int i = 0; i < Tl::kD / 16; ++i) {
    const U32x4 v = hip_compat::load16(q_row + ln.half * (Tl::kD / 2) + 8 * i);
#pragma unroll
    for (int e = 0; e < 4; ++e) st.q[4 * i + e] = v[e];
  }
#pragma unroll
  for (int t = 0; t < Tl::kOutBlocks; ++t)
#pragma unroll
    for (int e = 0; e < 16; ++e) st.o[t][e] = 0.0f;

  // Key blocks: causal, up to the q block's last row; mask-free, the whole blocks inside the
  // sequence that (causal) end at or before the q block's first row.
  constexpr int kBN = Tl::kBlockN;
  const int key_end = kCausal ? (m0 + kBlockM < n ? m0 + kBlockM : n) : n;
  const int blocks = (key_end + kBN - 1) / kBN;
  const int unmasked = kCausal && (m0 + 1) / kBN < n / kBN ? (m0 + 1) / kBN : n / kBN;

  KLoader<Tl> k_load(ln.tid);
  VLoader<Tl> v_load(ln.tid);
  k_load.load(k_base, p.k_row_stride, 0, n);
  v_load.load(v_base, p.v_row_stride, 0, n);
  k_load.store(lds);
  v_load.store(lds + Tl::kKStageElems);
  hip_compat::block_sync();
  for (int kb = 0; kb < blocks; ++kb) {
    const uint16_t* stage = lds + (kb & 1) * Tl::kStageElems;
    const bool more = kb + 1 < blocks;
    if (more) {  // in flight during this block's MFMAs
      k_load.load(k_base, p.k_row_stride, (kb + 1) * kBN, n);
      v_load.load(v_base, p.v_row_stride, (kb + 1) * kBN, n);
    }
    if (kb < unmasked)
      attend_block<Tl, T, kCausal, false>(st, stage, stage + Tl::kKStageElems, kb * kBN, qi, n,
                                          p.score_scale, ln, shim, q_row);
    else
      attend_block<Tl, T, kCausal, true>(st, stage, stage + Tl::kKStageElems, kb * kBN, qi, n,
                                         p.score_scale, ln, shim, q_row);
    if (more) {  // the other stage: its readers passed the last barrier
      uint16_t* next = lds + ((kb + 1) & 1) * Tl::kStageElems;
      k_load.store(next);
      v_load.store(next + Tl::kKStageElems);
    }
    hip_compat::block_sync();  // also orders this tile's last reads before the next item's stores
  }

  // Epilogue: lane l stores q row qi, columns 32 t + 8 g + 4 half + 0..3 from o[t][4 g ..].
  float factor = p.inv_max_seq_len;
  float row_sum = 0.0f;
  if constexpr (Tl::kSoftmax) {
    row_sum = st.sum + other_half(st.sum, ln, shim);
    factor = 1.0f / row_sum;  // >= 1: the row's max contributes 2^0
  }
  if (qi >= n) return;
  const int64_t out_row = s.start + qi;
  uint16_t* out = p.out + (out_row * p.heads + h) * Tl::kD + 4 * ln.half;
#pragma unroll
  for (int t = 0; t < Tl::kOutBlocks; ++t)
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const F32x16& o = st.o[t];
      *reinterpret_cast<Words2*>(out + 32 * t + 8 * g) =
          Words2{pack2<T>(o[4 * g] * factor, o[4 * g + 1] * factor),
                 pack2<T>(o[4 * g + 2] * factor, o[4 * g + 3] * factor)};
    }
  if constexpr (Tl::kSoftmax) {
    if (ln.half == 0) p.lse[h * p.total + out_row] = (st.max + __builtin_log2f(row_sum)) * kLn2;
  }
}

// Aux item `item`: offsets entries and out rows item * kAuxRows + thread.
template <typename I>
__device__ inline void aux_item(const Params<I>& p, int64_t item, int row_elems, uint8_t* flags) {
  const int tid = static_cast<int>(hip_compat::thread_in_block());
  const int64_t first = item * kAuxRows;
  if (p.errors != nullptr && first + tid <= p.batch) check_offsets_entry(p, first + tid);
  flags[tid] = first + tid < p.total && !has_position(p, first + tid);
  hip_compat::block_sync();
  // The whole block writes each flagged row: 16-byte stores across its heads and columns.
  const U32x4 zero = {0u, 0u, 0u, 0u};
  for (int r = 0; r < kAuxRows; ++r) {
    if (!flags[r]) continue;
    uint16_t* out = p.out + (first + r) * row_elems;
    for (int v = tid; v < row_elems / 8; v += kThreads) hip_compat::store16(out + v * 8, zero);
    if (p.lse != nullptr)
      for (int h = tid; h < p.heads; h += kThreads) p.lse[h * p.total + first + r] = kNegInf;
  }
  hip_compat::block_sync();  // the next item rewrites flags
}

template <typename Tl, typename T, typename I, bool kCausal>
__global__ void __launch_bounds__(kThreads) attention_fwd_kernel(const Params<I> p) {
  __shared__ __attribute__((aligned(16))) uint16_t lds[2 * Tl::kStageElems];
  __shared__ ShimScratch<Tl> shim;
  static_assert(2 * Tl::kStageElems * 2 >= kAuxRows, "the aux flags live in the tile's LDS");
  for (int64_t item = hip_compat::block_in_grid(); item < p.items; item += p.grid) {
    if (item < p.tiles)
      attention_tile<Tl, T, I, kCausal>(p, item, lds, shim);
    else
      aux_item(p, item - p.tiles, p.heads * Tl::kD, reinterpret_cast<uint8_t*>(lds));
  }
}

// ---------------------------------------------------------------------------------------------
// Host.

// AttentionKernelConfig.kernel indexes this list: kind, head dim (dqk == dv), q rows x keys per
// step. Each runs bf16 and fp16, causal and full, int32 and int64 offsets.
const char* const kKernelNames[] = {"cdna_hstu_d64_128x64", "cdna_hstu_d128_128x32",
                                    "cdna_softmax_d64_128x64", "cdna_softmax_d128_128x32"};
constexpr int32_t kNumKernels = sizeof(kKernelNames) / sizeof(kKernelNames[0]);

struct KernelInfo {
  AttentionKind kind;
  int32_t d;
  LaunchError wrong_kind, wrong_dims;
};
const KernelInfo kKernelInfo[kNumKernels] = {
    {AttentionKind::kHstu, 64, "attention: this kernel computes HSTU attention only",
     "attention: this kernel needs dqk == dv == 64"},
    {AttentionKind::kHstu, 128, "attention: this kernel computes HSTU attention only",
     "attention: this kernel needs dqk == dv == 128"},
    {AttentionKind::kSoftmax, 64, "attention: this kernel computes softmax attention only",
     "attention: this kernel needs dqk == dv == 64"},
    {AttentionKind::kSoftmax, 128, "attention: this kernel computes softmax attention only",
     "attention: this kernel needs dqk == dv == 128"},
};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The launch's items, from sizes alone.
struct Plan {
  int64_t num_blocks_m, tiles, items;
};

LaunchError plan(const AttentionForwardArgs& a, const AttentionKernelConfig& config, Plan* out) {
  if (config.kernel < 0 || config.kernel >= kNumKernels)
    return "attention: kernel index out of range of attention_kernel_names()";
  const KernelInfo& info = kKernelInfo[config.kernel];
  if (a.kind != AttentionKind::kHstu && a.kind != AttentionKind::kSoftmax)
    return "attention: unknown kind";
  if (a.kind != info.kind) return info.wrong_kind;
  if (a.dqk != info.d || a.dv != info.d) return info.wrong_dims;
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return "attention: the native kernels take bfloat16 or float16 only";
  if (a.offsets_dtype != DType::kInt32 && a.offsets_dtype != DType::kInt64)
    return "attention: offsets must be int32 or int64";
  if (a.batch < 0 || a.total < 0 || a.max_seq_len < 0 || a.heads < 0)
    return "attention: negative size";
  if (a.max_seq_len > INT32_MAX - kBlockM) return "attention: max_seq_len must be below 2^31 - 128";
  if (a.total > INT64_MAX / 1024 / (a.heads > 0 ? a.heads : 1))
    return "attention: total * heads is too large";
  const int64_t extent = a.max_seq_len < a.total ? a.max_seq_len : a.total;  // rows a tile may hold
  const int64_t num_blocks_m = ceil_div(extent, kBlockM);
  const int64_t seq_heads = a.batch * int64_t(a.heads);
  if (a.batch > 0 && a.heads > 0 && (a.batch > INT64_MAX / 4 / a.heads ||
                                     num_blocks_m > INT64_MAX / 4 / seq_heads))
    return "attention: too many tiles";
  const int64_t tiles = num_blocks_m * seq_heads;
  const int64_t row_items = a.heads > 0 ? ceil_div(a.total, kAuxRows) : 0;
  const int64_t check_items = a.errors != nullptr ? ceil_div(a.batch + 1, kAuxRows) : 0;
  const int64_t items = tiles + (row_items > check_items ? row_items : check_items);
  *out = {num_blocks_m, tiles, items};
  if (items == 0) return nullptr;
  if (a.offsets == nullptr) return "attention: null offsets";
  if (row_items > 0) {
    if (a.out == nullptr) return "attention: null out";
    if (!aligned16(a.out)) return "attention: out must be 16-byte aligned";
    if (a.kind == AttentionKind::kSoftmax && a.lse == nullptr) return "attention: null lse";
  }
  if (tiles == 0) return nullptr;  // q, k, v are never read
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr) return "attention: null q, k or v";
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v))
    return "attention: q, k and v must be 16-byte aligned";
  for (int64_t stride : {a.q_row_stride, a.q_head_stride, a.k_row_stride, a.k_head_stride,
                         a.v_row_stride, a.v_head_stride}) {
    if (stride < 0 || stride > INT64_MAX / 1024) return "attention: negative or too large stride";
    if (stride % 8 != 0) return "attention: row and head strides must be multiples of 16 bytes";
  }
  return nullptr;
}

template <typename Tl, typename T, typename I, bool kCausal>
LaunchError launch_typed(const AttentionForwardArgs& a, const Plan& plan, hipStream_t stream) {
  const int64_t grid = plan.items < kMaxGridBlocks ? plan.items : kMaxGridBlocks;
  const float alpha = a.alpha;
  const Params<I> p{static_cast<const uint16_t*>(a.q),
                    static_cast<const uint16_t*>(a.k),
                    static_cast<const uint16_t*>(a.v),
                    a.q_row_stride,
                    a.q_head_stride,
                    a.k_row_stride,
                    a.k_head_stride,
                    a.v_row_stride,
                    a.v_head_stride,
                    static_cast<const I*>(a.offsets),
                    a.batch,
                    a.total,
                    a.max_seq_len,
                    a.heads,
                    Tl::kSoftmax ? alpha * kLog2e : alpha,
                    a.inv_max_seq_len,
                    static_cast<uint16_t*>(a.out),
                    Tl::kSoftmax ? a.lse : nullptr,
                    a.errors,
                    a.error_op,
                    plan.num_blocks_m,
                    plan.tiles,
                    plan.items,
                    grid};
  attention_fwd_kernel<Tl, T, I, kCausal>
      <<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p);
  return hip_compat::launch_error();
}

template <typename Tl, typename T>
LaunchError launch_tile_dtype(const AttentionForwardArgs& a, const Plan& plan, hipStream_t s) {
  const bool i32 = a.offsets_dtype == DType::kInt32;
  if (a.causal)
    return i32 ? launch_typed<Tl, T, int32_t, true>(a, plan, s)
               : launch_typed<Tl, T, int64_t, true>(a, plan, s);
  return i32 ? launch_typed<Tl, T, int32_t, false>(a, plan, s)
             : launch_typed<Tl, T, int64_t, false>(a, plan, s);
}

template <typename Tl>
LaunchError launch_tile(const AttentionForwardArgs& a, const Plan& plan, hipStream_t s) {
  return a.dtype == DType::kBFloat16 ? launch_tile_dtype<Tl, BFloat16>(a, plan, s)
                                     : launch_tile_dtype<Tl, Half>(a, plan, s);
}

}  // namespace attention_detail
using namespace attention_detail;

const char* const* attention_kernel_names(int32_t* count) {
  if (count) *count = kNumKernels;
  return kKernelNames;
}

LaunchError attention_supports(const AttentionForwardArgs& args,
                               const AttentionKernelConfig& config) {
  Plan shape;
  if (LaunchError error = plan(args, config, &shape)) return error;
  if (hip_compat::kHasMfma && hip_compat::current_device_cdna() == hip_compat::Cdna::kNone)
    return "attention: the native kernels need gfx942 or gfx950 (MFMA)";
  return nullptr;
}

int64_t attention_workspace_bytes(const AttentionForwardArgs&, const AttentionKernelConfig&) {
  return 0;
}

// No backward kernels for CDNA yet: the model keeps the Triton backward there (mymetaops/ops/attention.py).
LaunchError attention_backward_supports(const AttentionBackwardArgs&) {
  return "attention: no native backward kernels for CDNA yet (the Triton backward runs)";
}

LaunchError launch_attention_dkdv(const AttentionBackwardArgs& args, void*) { return attention_backward_supports(args); }

LaunchError launch_attention_dq(const AttentionBackwardArgs& args, void*) { return attention_backward_supports(args); }

int64_t attention_dq_accum_elems(const AttentionBackwardArgs&) { return 0; }

LaunchError launch_attention_forward(const AttentionForwardArgs& args,
                                     const AttentionKernelConfig& config, void* stream) {
  if (LaunchError error = attention_supports(args, config)) return error;
  Plan shape;
  (void)plan(args, config, &shape);  // passed in attention_supports
  if (shape.items == 0) return nullptr;
  const hipStream_t s = static_cast<hipStream_t>(stream);
  switch (config.kernel) {
    case 0: return launch_tile<HstuD64>(args, shape, s);
    case 1: return launch_tile<HstuD128>(args, shape, s);
    case 2: return launch_tile<SoftmaxD64>(args, shape, s);
    default: return launch_tile<SoftmaxD128>(args, shape, s);
  }
}

}  // namespace mymetaops
