// The Hopper attention backward's dK / dV kernel (attention.h, launch_attention_dkdv): one CTA per
// block of 128 keys of one (sequence, head), warp-specialized like the forward (fwd_kernel.cuh).
// The producer warp loads the CTA's K and V once, then Q and dO of each 64-row query step by TMA
// into a ring of stages; two consumer warpgroups own 64 keys each and keep dK and dV of them in
// registers across the steps:
//   S^T = K Q^T, dP^T = V dO^T          (wgmma, both operands from shared memory)
//   P^T, dS^T from S^T, dP^T            (registers: HSTU's silu and its derivative, or softmax's
//                                        exp against the forward's lse and delta = rowsum(dO O))
//   dV += P^T dO, dK += dS^T Q          (wgmma, A from registers, B = the transposed view of the
//                                        same shared Q / dO tiles)
// Computing the transposes (keys as wgmma's M) is what lets P and dS feed the second pair of
// products from registers (FlashAttention-3's swapped S/dP). dQ, in one of two ways:
//   - apart: a dQ kernel (dq.cu, or Triton's) recomputes S and dP per query block (7 products);
//   - fused (kDq, DkdvParams::dq_accum set): the warpgroups write dS^T to shared memory, and
//       dQ_partial = dS K     (wgmma, A = dS (query rows, keys) and B = K's transposed view, from
//                              shared memory; each warpgroup a half of D over the CTA's 128 keys)
//     goes from registers to shared memory and is added into an fp32 buffer by one bulk TMA
//     reduce-add per warpgroup and step (5 products; the order of the key blocks' additions
//     varies, so dQ's last bits do); dq_from_accum then writes dQ from the buffer.
// Included by dkdv.cu only.
#pragma once
#include "fwd_kernel.cuh"

namespace mymetaops {
namespace cuda {
namespace attention {

// 128 keys = 2 consumer warpgroups x wgmma's M of 64; 64 query rows a step: S^T and dP^T are 32
// fp32 registers a thread each, dK and dV (D = 128) 64 each, so a step's registers fit in 240.
constexpr int kDkdvBlockN = 128;
constexpr int kDkdvBlockM = 64;
// Q / dO stages in flight: 2 take 64 KB beside K and V (64 KB) at D = 128.
constexpr int kDkdvStages = 2;
// Fused dQ: the named barrier at which both consumer warpgroups have staged a step's dS (CUTLASS's
// first id past those it reserves).
constexpr int kDsStagedBarrier = 0;
// ... and the one per warpgroup at which its threads have stored a step's dQ_partial (ids 1, 2).
constexpr int kDqStoredBarrier = 1;
// Fused dQ's buffer: per (head, sequence b) the rows of its 64-row query steps, starting at row
// start_b + 64 b, so a step's block never overlaps the next sequence's (attention_dq_accum_elems).
// A block holds its 64 x D sums in the consumers' register order (dq_slot), so that the threads'
// stores to shared memory are contiguous 16-byte vectors and a warpgroup's half is one bulk copy.
constexpr int kDqPadRows = kDkdvBlockM;
template <typename T, int D>
struct DkdvTraits {
  using BM = Int<kDkdvBlockM>;
  using BN = Int<kDkdvBlockN>;
  using HD = Int<D>;
  static constexpr int kStages = kDkdvStages;
  // Q and dO: (rows, D, stage), D contiguous (K-major B operand of S^T and dP^T). The transposed
  // views (D, rows, stage) of the same bytes are the MN-major B operands of dK and dV.
  using SmemQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BM, HD, Int<kStages>>{}));
  using SmemQt = decltype(composition(
      SmemQ{}, make_layout(make_shape(HD{}, BM{}, Int<kStages>{}),
                           make_stride(BM{}, _1{}, Int<kDkdvBlockM * D>{}))));
  // K and V: (keys, D), D contiguous: the K-major A operands of S^T and dP^T.
  using SmemKV = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BN, HD>{}));
  using MmaSdp = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, BM, HD>>(),
                                         Layout<Shape<_2, _1, _1>>{}));
  using MmaDkv = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, HD, BM>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  // Fused dQ: dS of a step as (query rows, keys, buffer), rows contiguous: the MN-major A operand
  // of dQ = dS K. Two buffers: a warpgroup writes step i + 1's while the other may still read step
  // i's. The consumers write it through the transposed view (keys, rows, buffer) of their dS^T.
  using SmemDs = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, Shape<BM, BN, _2>{}));
  using SmemDst = decltype(composition(
      SmemDs{}, make_layout(make_shape(BN{}, BM{}, _2{}), make_stride(BM{}, _1{}, Int<kDkdvBlockM * kDkdvBlockN>{}))));
  // K's transposed view (D, keys): the MN-major B operand of dQ.
  using SmemKt = decltype(composition(SmemKV{}, make_layout(make_shape(HD{}, BN{}), make_stride(BN{}, _1{}))));
  // The warpgroups split dQ's D: each 64 rows x D / 2 over all 128 keys (16 fp32 registers a
  // thread at D = 64, 32 at D = 128, live while S^T and dP^T are not).
  using MmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D / 2>, BN>, GMMA::Major::MN, GMMA::Major::MN>(),
      Layout<Shape<_1, _2, _1>>{}));

  struct alignas(1024) Smem {
    alignas(1024) T k[cosize_v<SmemKV>];
    alignas(1024) T v[cosize_v<SmemKV>];
    alignas(1024) T q[cosize_v<SmemQ>];
    alignas(1024) T dout[cosize_v<SmemQ>];
    alignas(1024) T ds[cosize_v<SmemDs>];  // fused dQ only (32 KB at most: one CTA an SM either way)
    // Fused dQ: two steps' sums, half of D per warpgroup (dq_slot): a step's bulk copy may still read
    // one while the next step's sums go to the other (its L2 reductions were not hidden with one, run 27).
    alignas(128) float dq[2][kDkdvBlockM * D];
    // Softmax: lse (log2 units) and delta of a stage's rows, written by the producer warp's lanes;
    // read in the consumers' inner loop, where loads from global memory left their latency exposed.
    float lse[kStages][kDkdvBlockM], delta[kStages][kDkdvBlockM];
    uint64_t kv_full;
    // Q, dO (and for softmax lse, delta: a second arrival) of a stage arrive and are handed back together.
    uint64_t full[kStages], empty[kStages];
  };

  static auto tma_rows(const T* p, int total, int heads, int64_t rs, int64_t hs) {  // Q, dO: 64-row boxes
    return make_tma_copy(SM90_TMA_LOAD{}, Traits<T, D>::qk_tensor(p, total, heads, rs, hs),
                         take<0, 2>(SmemQ{}));
  }
  static auto tma_keys(const T* p, int total, int heads, int64_t rs, int64_t hs) {  // K, V: 128-row boxes
    return make_tma_copy(SM90_TMA_LOAD{}, Traits<T, D>::qk_tensor(p, total, heads, rs, hs), SmemKV{});
  }
  using TmaRows = decltype(tma_rows(nullptr, 0, 0, 0, 0));
  using TmaKeys = decltype(tma_keys(nullptr, 0, 0, 0, 0));
  static constexpr uint32_t kRowsBytes = kDkdvBlockM * D * sizeof(T);
  static constexpr uint32_t kKeysBytes = kDkdvBlockN * D * sizeof(T);
};

template <typename T, int D, typename IndexT>
struct DkdvParams {
  typename DkdvTraits<T, D>::TmaRows tma_q, tma_dout;
  typename DkdvTraits<T, D>::TmaKeys tma_k, tma_v;
  const IndexT* offsets;
  const float* lse;    // softmax: [heads, total], natural log (the forward's)
  const float* delta;  // softmax: [heads, total], rowsum(dO * O)
  T* dk;               // [total, heads, D] contiguous, like dv
  T* dv;
  float* dq_accum;     // fused dQ: [heads, total + 64 batch, D] fp32 zeroed by the caller, dS K added in
  int64_t total, max_seq_len, pairs;  // pairs = batch x heads
  int64_t key_blocks;                 // per pair: ceil(min(max_seq_len, total) / 128)
  int64_t accum_rows;                 // fused dQ: total + 64 batch
  int32_t heads;
  bool softmax, causal;
  float alpha, inv_max_seq_len;
};

// The CTA's block: keys [n0, n0 + 128) of sequence rows [start, start + len), head h; query steps
// [m_first, m_end) of 64 rows (causal: from the step holding key n0, whose rows see it first).
struct DkdvBlock {
  int64_t start;
  int32_t len, n0, h, m_first, m_end;
};

// Where thread tid (of the 256 consumers) keeps register e of its dQ_partial inside a step's
// 64 x D block: its warpgroup's half, then 16-byte vectors of 4 registers, the 128 threads' vectors
// side by side. The kernel's stores and dq_from_accum's loads both go through it.
template <int D>
__device__ __forceinline__ int dq_slot(int tid, int e) {
  return (tid / 128) * (kDkdvBlockM * D / 2) + ((e / 4) * 128 + tid % 128) * 4 + e % 4;
}

// The CTA's (sequence, head) pair and key block. Key block outermost (dK / dV alone): under the
// causal mask block 0 of each pair sees every query row, so the costliest CTAs start first. Pair
// outermost (fused dQ), key block 0 first within it: the key blocks adding into one pair's dQ rows
// run at the same time, so the rows stay in L2 between their reductions (key block outermost,
// each pair's rows left L2 before its next key block came: at B32 N4096 the rows of a wave are
// ~130 MB). 32-bit: the launcher bounds the grid below 2^31 (64-bit divides spill the fused kernel).
// Fused dQ's buffer: the 64 x D block of query rows [m0, m0 + 64) of sequence b (rows from start),
// head h, at row start + 64 b + m0 of head h's accum_rows (kDqPadRows).
template <int D>
__device__ __forceinline__ int64_t dq_accum_block(int64_t h, int64_t accum_rows, int64_t start, int64_t b, int m0) {
  return (h * accum_rows + start + b * kDqPadRows + m0) * D;
}

template <bool kDq, typename T, int D, typename IndexT>
__device__ __forceinline__ void dkdv_coords(const DkdvParams<T, D, IndexT>& p, uint32_t& pair, uint32_t& n_block) {
  const uint32_t outer = kDq ? static_cast<uint32_t>(p.key_blocks) : static_cast<uint32_t>(p.pairs);
  const uint32_t major = blockIdx.x / outer, minor = blockIdx.x - major * outer;
  pair = kDq ? major : minor;
  n_block = kDq ? minor : major;
}

template <bool kDq, typename T, int D, typename IndexT>
__device__ __forceinline__ DkdvBlock dkdv_block(const DkdvParams<T, D, IndexT>& p) {
  uint32_t pair, n_block;
  dkdv_coords<kDq>(p, pair, n_block);
  const uint32_t b = pair / static_cast<uint32_t>(p.heads);
  DkdvBlock blk;
  sequence_rows(p.offsets, b, p.total, p.max_seq_len, blk.start, blk.len);
  blk.n0 = static_cast<int32_t>(n_block) * kDkdvBlockN;
  blk.h = static_cast<int32_t>(pair - b * static_cast<uint32_t>(p.heads));
  blk.m_first = p.causal ? blk.n0 / kDkdvBlockM : 0;
  blk.m_end = (blk.len + kDkdvBlockM - 1) / kDkdvBlockM;
  return blk;
}

template <typename T, int D, typename IndexT>
__device__ __forceinline__ void dkdv_produce(const DkdvParams<T, D, IndexT>& p, typename DkdvTraits<T, D>::Smem& smem,
                                             const DkdvBlock& blk) {
  using Tr = DkdvTraits<T, D>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  const int total = static_cast<int>(p.total);
  const int s0 = static_cast<int>(blk.start);
  auto rows = [&](const auto& tma, T* dst, int m) {  // (source, destination) of query step m, all stages
    Tensor g = local_tile(domain_offset(make_coord(s0, _0{}), tma.get_tma_tensor(make_shape(total, HD{}, p.heads))(_, _, blk.h)),
                          Shape<BM, HD>{}, make_coord(m, _0{}));
    Tensor s = make_tensor(make_smem_ptr(dst), typename Tr::SmemQ{});
    return tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(s), group_modes<0, 2>(g));
  };
  auto keys = [&](const auto& tma, T* dst) {
    Tensor g = local_tile(domain_offset(make_coord(s0, _0{}), tma.get_tma_tensor(make_shape(total, HD{}, p.heads))(_, _, blk.h)),
                          Shape<BN, HD>{}, make_coord(blk.n0 / kDkdvBlockN, _0{}));
    Tensor s = make_tensor(make_smem_ptr(dst), typename Tr::SmemKV{});
    return tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(s), group_modes<0, 2>(g));
  };
  const int lane = threadIdx.x % 32;
  const bool leader = lane == 0;
  if (leader) {
    FullBarrier::arrive_and_expect_tx(&smem.kv_full, 2 * Tr::kKeysBytes);
    auto tK = keys(p.tma_k, smem.k);
    auto tV = keys(p.tma_v, smem.v);
    copy(p.tma_k.with(smem.kv_full), get<0>(tK), get<1>(tK));
    copy(p.tma_v.with(smem.kv_full), get<0>(tV), get<1>(tV));
  }
  const int64_t row0 = static_cast<int64_t>(blk.h) * p.total + blk.start;  // lse / delta of the sequence's row 0
  for (int m = blk.m_first, i = 0; m < blk.m_end; ++m, ++i) {
    const int s = i % Tr::kStages;
    EmptyBarrier::wait(&smem.empty[s], ((i / Tr::kStages) & 1) ^ 1);
    if (leader) {
      FullBarrier::arrive_and_expect_tx(&smem.full[s], 2 * Tr::kRowsBytes);
      auto tQ = rows(p.tma_q, smem.q, m);
      auto tO = rows(p.tma_dout, smem.dout, m);
      copy(p.tma_q.with(smem.full[s]), get<0>(tQ), get<1>(tQ)(_, s));
      copy(p.tma_dout.with(smem.full[s]), get<0>(tO), get<1>(tO)(_, s));
    }
    if (p.softmax) {
      for (int r = lane; r < kDkdvBlockM; r += 32) {
        const int row = m * kDkdvBlockM + r;
        const bool in = row < blk.len;
        smem.lse[s][r] = in ? p.lse[row0 + row] * static_cast<float>(M_LOG2E) : 0.f;
        smem.delta[s][r] = in ? p.delta[row0 + row] : 0.f;
      }
      __syncwarp();  // the lanes' stores before the leader's arrival (release) publishes them
      if (leader) FullBarrier::arrive(&smem.full[s]);
    }
  }
}

// S^T, dP^T of one step -> P^T, dS^T (in place, fp32): entry (key j, query row i) counts when both
// are in the sequence and, causal, j <= i; the others become 0.
// lse (log2 units: P = exp2(alpha log2e s - lse log2e)) and delta: the step's rows, in shared memory.
template <bool kSoftmax, class TS, class TC>
__device__ __forceinline__ void grads_of_scores(TS& S, TS& dP, const TC& cS, int n0, int m0, const DkdvBlock& blk,
                                                bool causal, float alpha, float inv_max_seq_len, const float* lse,
                                                const float* delta) {
  CUTE_UNROLL
  for (int c = 0; c < size<1>(S); ++c) {
    const int col = get<1>(cS(0, c));
    const int i = m0 + col;
    float lse_i = 0.f, delta_i = 0.f;
    if constexpr (kSoftmax) {
      lse_i = lse[col];
      delta_i = delta[col];
    }
    CUTE_UNROLL
    for (int r = 0; r < size<0>(S); ++r) {
      const int j = n0 + get<0>(cS(r, c));
      const bool valid = i < blk.len && j < blk.len && (!causal || j <= i);
      float p, ds;
      if constexpr (kSoftmax) {
        p = exp2_approx(S(r, c) * alpha * static_cast<float>(M_LOG2E) - lse_i);
        ds = p * (dP(r, c) - delta_i) * alpha;
      } else {
        // silu(x) = h + h tanh(h) with h = x / 2; silu'(x) = sig (1 + x (1 - sig)), sig = (1 + tanh(h)) / 2.
        const float h = 0.5f * alpha * S(r, c);
        const float t = tanh_approx(h);
        const float sig = 0.5f + 0.5f * t;
        p = fmaf(h, t, h) * inv_max_seq_len;
        ds = dP(r, c) * sig * fmaf(h, 1.f - t, 1.f) * alpha * inv_max_seq_len;  // x (1 - sig) = h (1 - t)
      }
      S(r, c) = valid ? p : 0.f;
      dP(r, c) = valid ? ds : 0.f;
    }
  }
}

// x, hidden from the optimizer: the fused variant builds its wgmma descriptors and coordinates
// from opaque values each step, so they are recomputed (a few integer ops) rather than hoisted out
// of the step loop and held in registers, which spilled it at D = 128 (488 bytes).
template <typename V>
__device__ __forceinline__ V opaque(V x) {
  asm volatile("" : "+l"(x));
  return x;
}
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// dst[0, bytes / 4) += src[...] (shared memory), by the TMA unit: one instruction for a warpgroup's
// step instead of 4096 per-thread reductions (which ran the fused kernel slower than two kernels).
// L2 evict-last: the other key blocks of the pair add into the same lines soon after.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, %3;" ::"l"(dst),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(src))), "r"(bytes),
      "l"(static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST))
      : "memory");
}

template <bool kSoftmax, bool kDq, typename T, int D, typename IndexT>
__device__ __forceinline__ void dkdv_consume(const DkdvParams<T, D, IndexT>& p, typename DkdvTraits<T, D>::Smem& smem,
                                             const DkdvBlock& blk) {
  using Tr = DkdvTraits<T, D>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  const int tid = threadIdx.x - 128;
  Tensor sK = make_tensor(make_smem_ptr(smem.k), typename Tr::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v), typename Tr::SmemKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Tr::SmemQ{});
  Tensor sDo = make_tensor(make_smem_ptr(smem.dout), typename Tr::SmemQ{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q), typename Tr::SmemQt{});
  Tensor sDot = make_tensor(make_smem_ptr(smem.dout), typename Tr::SmemQt{});
  typename Tr::MmaSdp mma_sdp;
  typename Tr::MmaDkv mma_dkv;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  Tensor tSrK = thr_sdp.partition_fragment_A(sK);
  Tensor tSrV = thr_sdp.partition_fragment_A(sV);
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);
  Tensor tSrDo = thr_sdp.partition_fragment_B(sDo);
  Tensor tDrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tDrDot = thr_dkv.partition_fragment_B(sDot);
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BN, BM>{});
  Tensor tSrDp = partition_fragment_C(mma_sdp, Shape<BN, BM>{});
  Tensor tDrDk = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  Tensor tDrDv = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  Tensor tP = make_tensor_like<T>(tSrS);
  Tensor tDs = make_tensor_like<T>(tSrS);
  Tensor tPa = make_tensor(tP.data(), acc_as_a(tP.layout()));
  Tensor tDsa = make_tensor(tDs.data(), acc_as_a(tDs.layout()));
  static_assert(decltype(size<2>(tPa))::value == decltype(size<2>(tDrDot))::value,
                "P^T's registers must cover wgmma's A fragment of every k step of dV");
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BN, BM>{}));
  Tensor cS = make_tensor(tScS.data(), rowcol(tScS.layout()));
  Tensor S = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
  Tensor dP = make_tensor(tSrDp.data(), rowcol(tSrDp.layout()));

  auto issue_scores = [&](int i) {
    const int s = i % Tr::kStages;
    FullBarrier::wait(&smem.full[s], (i / Tr::kStages) & 1);
    if constexpr (kDq) {  // K's and V's descriptors: see opaque
      auto a_of = [&](T* ptr) {
        return thr_sdp.partition_fragment_A(make_tensor(make_smem_ptr(opaque(ptr)), typename Tr::SmemKV{}));
      };
      wgmma_issue<true>(mma_sdp, a_of(smem.k), tSrQ(_, _, _, s), tSrS);
      wgmma_issue<true>(mma_sdp, a_of(smem.v), tSrDo(_, _, _, s), tSrDp);
    } else {
      wgmma_issue<true>(mma_sdp, tSrK, tSrQ(_, _, _, s), tSrS);
      wgmma_issue<true>(mma_sdp, tSrV, tSrDo(_, _, _, s), tSrDp);
    }
  };
  auto scores_to_grads = [&](int i) {
    warpgroup_fence_operand(tSrS);
    warpgroup_fence_operand(tSrDp);
    const int s = i % Tr::kStages;
    grads_of_scores<kSoftmax>(S, dP, cS, blk.n0, (blk.m_first + i) * kDkdvBlockM, blk, p.causal, p.alpha,
                              p.inv_max_seq_len, smem.lse[s], smem.delta[s]);
  };
  auto to_bf16 = [&]() {
    CUTE_UNROLL
    for (int e = 0; e < size(tSrS); ++e) {
      tP(e) = static_cast<T>(tSrS(e));
      tDs(e) = static_cast<T>(tSrDp(e));
    }
  };
  auto issue_dv = [&](int i) {
    warpgroup_fence_operand(tP);
    wgmma_issue<false>(mma_dkv, tPa, tDrDot(_, _, _, i % Tr::kStages), tDrDv);
  };
  auto issue_dk = [&](int i) {
    warpgroup_fence_operand(tDs);
    wgmma_issue<false>(mma_dkv, tDsa, tDrQt(_, _, _, i % Tr::kStages), tDrDk);
  };
  auto finish_grads = [&](int i) {  // after warpgroup_wait<0>: step i's Q and dO go back to the producer
    warpgroup_fence_operand(tDrDv);
    warpgroup_fence_operand(tDrDk);
    warpgroup_fence_operand(tP);
    warpgroup_fence_operand(tDs);
    if (tid % 128 == 0) EmptyBarrier::arrive(&smem.empty[i % Tr::kStages]);
  };

  // Fused dQ (kDq): dS^T to shared memory, then dQ_partial = dS K, added into p.dq_accum.
  typename Tr::MmaDq mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(tid);
  Tensor tSsDst = thr_sdp.partition_C(make_tensor(make_smem_ptr(smem.ds), typename Tr::SmemDst{}));
  Tensor tQrDq = partition_fragment_C(mma_dq, Shape<BM, HD>{});
  auto stage_ds = [&](int i) {  // this warpgroup's dS^T (keys x rows) into buffer i % 2
    copy(tDs, tSsDst(_, _, _, i % 2));
    cutlass::arch::fence_view_async_shared();  // the generic-proxy stores, before wgmma reads them
  };
  auto issue_dq = [&](int i) {  // once both warpgroups staged step i's dS
    // The bulk copy of step i - 2's sums has left shared memory before this warpgroup stores step i's.
    if (tid % 128 == 0) tma_store_wait<1>();
    cutlass::arch::NamedBarrier::arrive_and_wait(kConsumerThreads, kDsStagedBarrier);
    Tensor tQrDs = thr_dq.partition_fragment_A(make_tensor(make_smem_ptr(opaque(smem.ds)), typename Tr::SmemDs{}));
    Tensor tQrKt = thr_dq.partition_fragment_B(make_tensor(make_smem_ptr(opaque(smem.k)), typename Tr::SmemKt{}));
    wgmma_issue<true>(mma_dq, tQrDs(_, _, _, i % 2), tQrKt, tQrDq);
  };
  auto add_dq = [&](int i) {  // after warpgroup_wait<0>: the block (all 64 rows) into the buffer
    warpgroup_fence_operand(tQrDq);
    static_assert(decltype(size(tQrDq))::value % 4 == 0, "dq_slot packs 4 registers a vector");
    const int me = opaque(tid);  // the addresses: see opaque
    float* sdq = opaque(smem.dq[i % 2]);
    CUTE_UNROLL
    for (int e = 0; e < size(tQrDq); e += 4) {
      *reinterpret_cast<float4*>(&sdq[dq_slot<D>(me, e)]) = make_float4(tQrDq(e), tQrDq(e + 1), tQrDq(e + 2), tQrDq(e + 3));
    }
    cutlass::arch::fence_view_async_shared();  // the generic-proxy stores, before the bulk copy reads them
    const int wg = me / 128;
    cutlass::arch::NamedBarrier::arrive_and_wait(128, kDqStoredBarrier + wg);
    if (me % 128 == 0) {
      constexpr int kHalf = kDkdvBlockM * D / 2;
      uint32_t pair, n_block;
      dkdv_coords<kDq>(p, pair, n_block);
      const uint32_t b = pair / static_cast<uint32_t>(p.heads);
      const int64_t block = dq_accum_block<D>(blk.h, p.accum_rows, blk.start, b, (blk.m_first + i) * kDkdvBlockM);
      bulk_reduce_add(p.dq_accum + block + wg * kHalf, &sdq[wg * kHalf], kHalf * sizeof(float));
      tma_store_arrive();
    }
  };

  clear(tDrDk);
  clear(tDrDv);
  FullBarrier::wait(&smem.kv_full, 0);
  // One step at a time: the two warpgroups overlap each other's math and products. Overlapping a
  // warpgroup's own steps (S^T, dP^T of step i + 1 issued before dV, dK of step i) spilled at
  // D = 128 (456 bytes, wgmmas serialized: C7512) and ran 0.91-0.98x at D = 64 (run 21).
  const int steps = blk.m_end - blk.m_first;  // >= 1: key n0 < len is seen by its own row
  for (int i = 0; i < steps; ++i) {
    issue_scores(i);
    warpgroup_wait<0>();
    scores_to_grads(i);
    to_bf16();
    issue_dv(i);
    if constexpr (kDq) stage_ds(i);  // dS's stores and fence under dV's products (run 27: 0.4 us a step before them)
    issue_dk(i);
    if constexpr (kDq) issue_dq(i);  // on the tensor cores behind dV and dK
    warpgroup_wait<0>();
    finish_grads(i);
    if constexpr (kDq) add_dq(i);
  }
  if constexpr (kDq) {
    if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // before the CTA's exit
  }

  // Epilogue: round once, store the keys inside the sequence (4-byte pairs of columns).
  Tensor tDcD = thr_dkv.partition_C(make_identity_tensor(Shape<BN, HD>{}));
  Tensor cD = make_tensor(tDcD.data(), rowcol(tDcD.layout()));
  Tensor dK = make_tensor(tDrDk.data(), rowcol(tDrDk.layout()));
  Tensor dV = make_tensor(tDrDv.data(), rowcol(tDrDv.layout()));
  const int64_t row_elems = static_cast<int64_t>(p.heads) * D;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(dK); ++r) {
    const int j = blk.n0 + get<0>(cD(r, 0));
    if (j >= blk.len) continue;
    const int64_t offset = (blk.start + j) * row_elems + static_cast<int64_t>(blk.h) * D;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(dK); c += 2) {
      const int col = get<1>(cD(r, c));
      store_pair(p.dk + offset + col, dK(r, c), dK(r, c + 1));
      store_pair(p.dv + offset + col, dV(r, c), dV(r, c + 1));
    }
  }
}

template <typename T, int D, typename IndexT, bool kDq>
__global__ void __launch_bounds__(kThreads, 1) attention_dkdv(const __grid_constant__ DkdvParams<T, D, IndexT> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = DkdvTraits<T, D>;
  const DkdvBlock blk = dkdv_block<kDq>(p);
  if (blk.n0 >= blk.len) return;  // the whole CTA: no key of the block is in the sequence
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Tr::Smem*>(smem_raw);
  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_dout.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    FullBarrier::init(&smem.kv_full, 1);
    for (int s = 0; s < Tr::kStages; ++s) {
      FullBarrier::init(&smem.full[s], p.softmax ? 2 : 1);
      EmptyBarrier::init(&smem.empty[s], kConsumerWarpgroups);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x < 32) dkdv_produce(p, smem, blk);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (p.softmax) {
      dkdv_consume<true, kDq>(p, smem, blk);
    } else {
      dkdv_consume<false, kDq>(p, smem, blk);
    }
  }
#else
  (void)p;
#endif
}

// Fused dQ's last pass: dq[start + row, h, :] = the buffer's sums of (sequence b, head h), for the
// rows inside the sequence. One CTA of 256 threads per (64-row block, sequence, head), block
// outermost: thread tid reads the registers the consumer thread tid stored
// (dq_slot, coalesced 16-byte loads) and finds their (row, column) from the same wgmma partition.
template <typename T, int D, typename IndexT>
__global__ void __launch_bounds__(kConsumerThreads) dq_from_accum(const IndexT* offsets, const float* accum, T* dq,
                                                                  int64_t total, int64_t max_seq_len, int64_t pairs,
                                                                  int32_t heads, int64_t accum_rows) {
  using Tr = DkdvTraits<T, D>;
  const int64_t m_block = blockIdx.x / pairs;
  const int64_t pair = blockIdx.x - m_block * pairs;
  const int64_t b = pair / heads;
  const int64_t h = pair - b * heads;
  int64_t start;
  int32_t len;
  sequence_rows(offsets, b, total, max_seq_len, start, len);
  const int m0 = static_cast<int>(m_block) * kDkdvBlockM;
  if (m0 >= len) return;
  const int tid = threadIdx.x;
  const float* block = accum + dq_accum_block<D>(h, accum_rows, start, b, m0);
  typename Tr::MmaDq mma_dq;
  Tensor tQcQ = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<typename Tr::BM, typename Tr::HD>{}));
  CUTE_UNROLL
  for (int e = 0; e < size(tQcQ); e += 4) {
    const float4 v = *reinterpret_cast<const float4*>(block + dq_slot<D>(tid, e));
    const float x[4] = {v.x, v.y, v.z, v.w};
    CUTE_UNROLL
    for (int u = 0; u < 4; u += 2) {  // registers e + u, e + u + 1: adjacent columns of one row
      const int row = m0 + get<0>(tQcQ(e + u));
      if (row < len) store_pair(dq + ((start + row) * heads + h) * D + get<1>(tQcQ(e + u)), x[u], x[u + 1]);
    }
  }
}

}  // namespace attention
}  // namespace cuda
}  // namespace mymetaops
