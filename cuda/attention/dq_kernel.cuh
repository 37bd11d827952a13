// The Hopper attention backward's dQ kernel (attention.h, launch_attention_dq): one CTA per block of
// 128 query rows of one (sequence, head), the forward's structure (fwd_kernel.cuh) with dO beside Q.
// The producer warp loads Q and dO once, then K and V of each 64-key step by TMA into a ring of
// stages; two consumer warpgroups own 64 query rows each and keep dQ of them in registers:
//   S = Q K^T, dP = dO V^T        (wgmma, both operands from shared memory)
//   dS from S, dP                 (registers: silu' for HSTU, P (dP - delta) for softmax, with the
//                                  rows' lse and delta loaded once)
//   dQ += dS K                    (wgmma, A from registers, B = the transposed view of the K tile)
// Included by dq.cu only.
#pragma once
#include "fwd_kernel.cuh"

namespace mymetaops {
namespace cuda {
namespace attention {

// 128 query rows = 2 consumer warpgroups x wgmma's M of 64; 64 keys a step: S and dP are 32 fp32
// registers a thread each, dQ (D = 128) 64, dS 16, well inside 240.
constexpr int kDqBlockM = 128;
constexpr int kDqBlockN = 64;
// K / V stages in flight: 3 take 96 KB beside Q and dO (64 KB) at D = 128.
constexpr int kDqStages = 3;

template <typename T, int D>
struct DqTraits {
  using BM = Int<kDqBlockM>;
  using BN = Int<kDqBlockN>;
  using HD = Int<D>;
  static constexpr int kStages = kDqStages;
  // Q and dO: (rows, D), D contiguous: the K-major A operands of S and dP.
  using SmemQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BM, HD>{}));
  // K and V: (keys, D, stage), D contiguous: K-major B operands of S and dP; K's transposed view
  // (D, keys, stage) of the same bytes is the MN-major B operand of dQ.
  using SmemKV = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BN, HD, Int<kStages>>{}));
  using SmemKt = decltype(composition(
      SmemKV{}, make_layout(make_shape(HD{}, BN{}, Int<kStages>{}), make_stride(BN{}, _1{}, Int<kDqBlockN * D>{}))));
  using MmaSdp = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, BN, HD>>(),
                                         Layout<Shape<_2, _1, _1>>{}));
  using MmaDq = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, HD, BN>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));

  struct alignas(1024) Smem {
    alignas(1024) T q[cosize_v<SmemQ>];
    alignas(1024) T dout[cosize_v<SmemQ>];
    alignas(1024) T k[cosize_v<SmemKV>];
    alignas(1024) T v[cosize_v<SmemKV>];
    uint64_t q_full;
    uint64_t full[kStages], empty[kStages];  // K and V of a stage arrive and are handed back together
  };

  static auto tma_rows(const T* p, int total, int heads, int64_t rs, int64_t hs) {  // Q, dO: 128-row boxes
    return make_tma_copy(SM90_TMA_LOAD{}, Traits<T, D>::qk_tensor(p, total, heads, rs, hs), SmemQ{});
  }
  static auto tma_keys(const T* p, int total, int heads, int64_t rs, int64_t hs) {  // K, V: 64-row boxes
    return make_tma_copy(SM90_TMA_LOAD{}, Traits<T, D>::qk_tensor(p, total, heads, rs, hs), take<0, 2>(SmemKV{}));
  }
  using TmaRows = decltype(tma_rows(nullptr, 0, 0, 0, 0));
  using TmaKeys = decltype(tma_keys(nullptr, 0, 0, 0, 0));
  static constexpr uint32_t kRowsBytes = kDqBlockM * D * sizeof(T);
  static constexpr uint32_t kKeysBytes = kDqBlockN * D * sizeof(T);
};

template <typename T, int D, typename IndexT>
struct DqParams {
  typename DqTraits<T, D>::TmaRows tma_q, tma_dout;
  typename DqTraits<T, D>::TmaKeys tma_k, tma_v;
  const IndexT* offsets;
  const float* lse;    // softmax: [heads, total], natural log (the forward's)
  const float* delta;  // softmax: [heads, total], rowsum(dO * O)
  T* dq;               // [total, heads, D] contiguous
  int64_t total, max_seq_len, pairs;  // pairs = batch x heads
  int32_t heads, num_m_blocks;
  bool softmax, causal;
  float alpha, inv_max_seq_len;
};

// The CTA's block: query rows [m0, m0 + 128) of sequence rows [start, start + len), head h; key
// steps [0, steps) of 64 (causal: up to the block's last row).
struct DqBlock {
  int64_t start;
  int32_t len, m0, h, steps;
};

template <typename T, int D, typename IndexT>
__device__ __forceinline__ DqBlock dq_block(const DqParams<T, D, IndexT>& p) {
  // Query block outermost, the last first: under the causal mask it sees the most keys.
  const int64_t rank = blockIdx.x / p.pairs;
  const int64_t pair = blockIdx.x - rank * p.pairs;
  const int64_t b = pair / p.heads;
  DqBlock blk;
  sequence_rows(p.offsets, b, p.total, p.max_seq_len, blk.start, blk.len);
  blk.m0 = static_cast<int32_t>(p.num_m_blocks - 1 - rank) * kDqBlockM;
  blk.h = static_cast<int32_t>(pair - b * p.heads);
  const int key_end = p.causal ? min(blk.m0 + kDqBlockM, blk.len) : blk.len;
  blk.steps = (key_end + kDqBlockN - 1) / kDqBlockN;
  return blk;
}

template <typename T, int D, typename IndexT>
__device__ __forceinline__ void dq_produce(const DqParams<T, D, IndexT>& p, typename DqTraits<T, D>::Smem& smem,
                                           const DqBlock& blk) {
  using Tr = DqTraits<T, D>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  const int total = static_cast<int>(p.total);
  const int s0 = static_cast<int>(blk.start);
  auto global = [&](const auto& tma) {
    return domain_offset(make_coord(s0, _0{}), tma.get_tma_tensor(make_shape(total, HD{}, p.heads))(_, _, blk.h));
  };
  auto rows = [&](const auto& tma, T* dst) {
    Tensor g = local_tile(global(tma), Shape<BM, HD>{}, make_coord(blk.m0 / kDqBlockM, _0{}));
    Tensor s = make_tensor(make_smem_ptr(dst), typename Tr::SmemQ{});
    return tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(s), group_modes<0, 2>(g));
  };
  auto keys = [&](const auto& tma, T* dst, int n) {  // (source, destination) of key step n, all stages
    Tensor g = local_tile(global(tma), Shape<BN, HD>{}, make_coord(n, _0{}));
    Tensor s = make_tensor(make_smem_ptr(dst), typename Tr::SmemKV{});
    return tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(s), group_modes<0, 2>(g));
  };
  FullBarrier::arrive_and_expect_tx(&smem.q_full, 2 * Tr::kRowsBytes);
  auto tQ = rows(p.tma_q, smem.q);
  auto tO = rows(p.tma_dout, smem.dout);
  copy(p.tma_q.with(smem.q_full), get<0>(tQ), get<1>(tQ));
  copy(p.tma_dout.with(smem.q_full), get<0>(tO), get<1>(tO));
  for (int n = 0; n < blk.steps; ++n) {
    const int s = n % Tr::kStages;
    EmptyBarrier::wait(&smem.empty[s], ((n / Tr::kStages) & 1) ^ 1);
    FullBarrier::arrive_and_expect_tx(&smem.full[s], 2 * Tr::kKeysBytes);
    auto tK = keys(p.tma_k, smem.k, n);
    auto tV = keys(p.tma_v, smem.v, n);
    copy(p.tma_k.with(smem.full[s]), get<0>(tK), get<1>(tK)(_, s));
    copy(p.tma_v.with(smem.full[s]), get<0>(tV), get<1>(tV)(_, s));
  }
}

// S, dP of one step -> dS (in dP, fp32): entry (query row i, key j) counts when both are in the
// sequence and, causal, j <= i; the others become 0.
template <bool kSoftmax, class TS, class TC, int kRows>
__device__ __forceinline__ void dq_grads_of_scores(const TS& S, TS& dP, const TC& cS, int m0, int n0, int len,
                                                   bool causal, float alpha, float inv_max_seq_len,
                                                   const float (&lse)[kRows], const float (&delta)[kRows]) {
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int i = m0 + get<0>(cS(r, 0));
    CUTE_UNROLL
    for (int c = 0; c < size<1>(S); ++c) {
      const int j = n0 + get<1>(cS(r, c));
      const bool valid = i < len && j < len && (!causal || j <= i);
      float ds;
      if constexpr (kSoftmax) {
        const float p = exp2_approx(S(r, c) * alpha * static_cast<float>(M_LOG2E) - lse[r]);
        ds = p * (dP(r, c) - delta[r]) * alpha;
      } else {  // as dkdv_kernel.cuh: silu'(x) = sig (1 + x (1 - sig)), x = 2 h
        const float h = 0.5f * alpha * S(r, c);
        const float t = tanh_approx(h);
        ds = dP(r, c) * (0.5f + 0.5f * t) * fmaf(h, 1.f - t, 1.f) * alpha * inv_max_seq_len;
      }
      dP(r, c) = valid ? ds : 0.f;
    }
  }
}

template <bool kSoftmax, typename T, int D, typename IndexT>
__device__ __forceinline__ void dq_consume(const DqParams<T, D, IndexT>& p, typename DqTraits<T, D>::Smem& smem,
                                           const DqBlock& blk) {
  using Tr = DqTraits<T, D>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  const int tid = threadIdx.x - 128;
  Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Tr::SmemQ{});
  Tensor sDo = make_tensor(make_smem_ptr(smem.dout), typename Tr::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k), typename Tr::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v), typename Tr::SmemKV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem.k), typename Tr::SmemKt{});
  typename Tr::MmaSdp mma_sdp;
  typename Tr::MmaDq mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ);
  Tensor tSrDo = thr_sdp.partition_fragment_A(sDo);
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);
  Tensor tSrV = thr_sdp.partition_fragment_B(sV);
  Tensor tQrKt = thr_dq.partition_fragment_B(sKt);
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BM, BN>{});
  Tensor tSrDp = partition_fragment_C(mma_sdp, Shape<BM, BN>{});
  Tensor tQrDq = partition_fragment_C(mma_dq, Shape<BM, HD>{});
  Tensor tDs = make_tensor_like<T>(tSrDp);
  Tensor tDsa = make_tensor(tDs.data(), acc_as_a(tDs.layout()));
  static_assert(decltype(size<2>(tDsa))::value == decltype(size<2>(tQrKt))::value,
                "dS's registers must cover wgmma's A fragment of every k step of dQ");
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BM, BN>{}));
  Tensor cS = make_tensor(tScS.data(), rowcol(tScS.layout()));
  Tensor S = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
  Tensor dP = make_tensor(tSrDp.data(), rowcol(tSrDp.layout()));
  constexpr int kRows = size<0>(decltype(S.layout()){});
  // This thread's rows' lse (log2 units) and delta, once: they do not change along the keys.
  float lse[kRows], delta[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int i = blk.m0 + get<0>(cS(r, 0));
    const int64_t at = static_cast<int64_t>(blk.h) * p.total + blk.start + i;
    lse[r] = kSoftmax && i < blk.len ? p.lse[at] * static_cast<float>(M_LOG2E) : 0.f;
    delta[r] = kSoftmax && i < blk.len ? p.delta[at] : 0.f;
  }

  clear(tQrDq);
  FullBarrier::wait(&smem.q_full, 0);
  for (int n = 0; n < blk.steps; ++n) {
    const int s = n % Tr::kStages;
    FullBarrier::wait(&smem.full[s], (n / Tr::kStages) & 1);
    wgmma_issue<true>(mma_sdp, tSrQ, tSrK(_, _, _, s), tSrS);
    wgmma_issue<true>(mma_sdp, tSrDo, tSrV(_, _, _, s), tSrDp);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    warpgroup_fence_operand(tSrDp);
    dq_grads_of_scores<kSoftmax>(S, dP, cS, blk.m0, n * kDqBlockN, blk.len, p.causal, p.alpha, p.inv_max_seq_len,
                                 lse, delta);
    CUTE_UNROLL
    for (int e = 0; e < size(tSrDp); ++e) tDs(e) = static_cast<T>(tSrDp(e));
    warpgroup_fence_operand(tDs);
    wgmma_issue<false>(mma_dq, tDsa, tQrKt(_, _, _, s), tQrDq);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tQrDq);
    warpgroup_fence_operand(tDs);
    if (tid % 128 == 0) EmptyBarrier::arrive(&smem.empty[s]);
  }

  // Epilogue: round once, store the rows inside the sequence (4-byte pairs of columns).
  Tensor tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<BM, HD>{}));
  Tensor cQ = make_tensor(tQcQ.data(), rowcol(tQcQ.layout()));
  Tensor dQ = make_tensor(tQrDq.data(), rowcol(tQrDq.layout()));
  const int64_t row_elems = static_cast<int64_t>(p.heads) * D;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(dQ); ++r) {
    const int i = blk.m0 + get<0>(cQ(r, 0));
    if (i >= blk.len) continue;
    T* row = p.dq + (blk.start + i) * row_elems + static_cast<int64_t>(blk.h) * D;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(dQ); c += 2) store_pair(row + get<1>(cQ(r, c)), dQ(r, c), dQ(r, c + 1));
  }
}

template <typename T, int D, typename IndexT>
__global__ void __launch_bounds__(kThreads, 1) attention_dq(const __grid_constant__ DqParams<T, D, IndexT> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = DqTraits<T, D>;
  const DqBlock blk = dq_block(p);
  if (blk.m0 >= blk.len) return;  // the whole CTA: no row of the block is in the sequence
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Tr::Smem*>(smem_raw);
  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_dout.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    FullBarrier::init(&smem.q_full, 1);
    for (int s = 0; s < Tr::kStages; ++s) {
      FullBarrier::init(&smem.full[s], 1);
      EmptyBarrier::init(&smem.empty[s], kConsumerWarpgroups);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) dq_produce(p, smem, blk);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (p.softmax) {
      dq_consume<true>(p, smem, blk);
    } else {
      dq_consume<false>(p, smem, blk);
    }
  }
#else
  (void)p;
#endif
}

}  // namespace attention
}  // namespace cuda
}  // namespace mymetaops
