// The Hopper attention forward kernel (attention.h): one CTA = 128 query rows of one (sequence,
// head), two consumer warpgroups of 64 rows each. Q and the K/V tiles arrive by TMA (one elected
// thread issues them, double-buffered K/V stages on mbarriers); S = Q K^T by wgmma from shared
// memory, P = f(S) in registers, O += P V by wgmma with P from registers. Rows past the sequence
// are loaded (the next sequence's rows, or TMA's zero fill past the tensor) but masked as keys
// and never stored. Included by attention.cu only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

namespace mymetaops {
namespace cuda {
namespace attention {

using namespace cute;

// 128 query rows = 2 warpgroups x wgmma's M of 64; 128 keys per step: S is 64 fp32 registers per
// thread and O (D = 128) 64 more, which fits 255 registers without spilling.
constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int kStages = 2;  // K/V tiles in flight: the next one loads while this one computes
constexpr int kThreads = 256;

template <typename T, int D>
struct Traits {
  using BM = Int<kBlockM>;
  using BN = Int<kBlockN>;
  using HD = Int<D>;
  // Q, K: D contiguous (K-major for both wgmma operands). V: stored as (D, keys) with D contiguous,
  // i.e. MN-major for the B operand of P V, so it loads straight from [rows, D] by TMA.
  using SmemQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BM, HD>{}));
  using SmemK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<BN, HD, Int<kStages>>{}));
  using SmemV = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, Shape<HD, BN, Int<kStages>>{}));
  using MmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, BN, HD>>(),
                                       Layout<Shape<_2, _1, _1>>{}));
  using MmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, HD, BN>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));

  struct alignas(1024) Smem {
    alignas(1024) T q[cosize_v<SmemQ>];  // 1024: the 128-byte swizzle's period
    alignas(1024) T k[cosize_v<SmemK>];
    alignas(1024) T v[cosize_v<SmemV>];
    uint64_t bar_q;
    uint64_t bar_k[kStages];
    uint64_t bar_v[kStages];
  };

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

template <typename T, int D, typename IndexT>
struct Params {
  typename Traits<T, D>::TmaQ tma_q;
  typename Traits<T, D>::TmaK tma_k;
  typename Traits<T, D>::TmaV tma_v;
  const IndexT* offsets;
  T* out;
  float* lse;
  int64_t batch, total, max_seq_len;
  int32_t heads, num_m_blocks;
  bool softmax, causal;
  float alpha, inv_max_seq_len;
};

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

template <bool kZeroInit, bool kRegA, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(Mma& mma, const TA& a, const TB& b, TC& c) {
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <typename T, int D, typename IndexT>
__global__ void __launch_bounds__(kThreads, 1) attention_fwd(const __grid_constant__ Params<T, D, IndexT> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = Traits<T, D>;
  using BM = typename Tr::BM;
  using BN = typename Tr::BN;
  using HD = typename Tr::HD;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Tr::Smem*>(smem_raw);

  // Longest work first: the q block index descends over the grid (causal rows late in a sequence
  // see the most keys).
  const int64_t bh = p.batch * p.heads;
  const int64_t pid = blockIdx.x;
  const int m_block = p.num_m_blocks - 1 - static_cast<int>(pid / bh);
  const int64_t b = (pid % bh) / p.heads;
  const int h = static_cast<int>(pid % p.heads);
  const int64_t start = min(max(static_cast<int64_t>(p.offsets[b]), int64_t{0}), p.total);
  const int64_t end = min(max(static_cast<int64_t>(p.offsets[b + 1]), int64_t{0}), p.total);
  const int len = static_cast<int>(min(max(end - start, int64_t{0}), p.max_seq_len));
  const int m0 = m_block * kBlockM;
  if (m0 >= len) return;
  const int key_end = p.causal ? min(m0 + kBlockM, len) : len;
  const int n_tiles = (key_end + kBlockN - 1) / kBlockN;

  Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Tr::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k), typename Tr::SmemK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v), typename Tr::SmemV{});

  const int total = static_cast<int>(p.total);
  const int s0 = static_cast<int>(start);
  Tensor mQ = p.tma_q.get_tma_tensor(make_shape(total, HD{}, p.heads));
  Tensor mK = p.tma_k.get_tma_tensor(make_shape(total, HD{}, p.heads));
  Tensor mV = p.tma_v.get_tma_tensor(make_shape(HD{}, total, p.heads));
  Tensor gQ = local_tile(domain_offset(make_coord(s0, _0{}), mQ(_, _, h)), Shape<BM, HD>{}, make_coord(m_block, _0{}));
  Tensor gK = local_tile(domain_offset(make_coord(s0, _0{}), mK(_, _, h)), Shape<BN, HD>{}, make_coord(_, _0{}));
  Tensor gV = local_tile(domain_offset(make_coord(_0{}, s0), mV(_, _, h)), Shape<HD, BN>{}, make_coord(_0{}, _));
  auto tQ = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto tK = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto tV = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  Tensor tQg = get<0>(tQ);
  Tensor tQs = get<1>(tQ);
  Tensor tKg = get<0>(tK);
  Tensor tKs = get<1>(tK);
  Tensor tVg = get<0>(tV);
  Tensor tVs = get<1>(tV);

  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  const bool leader = threadIdx.x == 0;
  auto load_kv = [&](int n) {
    const int s = n % kStages;
    Barrier::arrive_and_expect_tx(&smem.bar_k[s], Tr::kKVBytes);
    copy(p.tma_k.with(smem.bar_k[s]), tKg(_, n), tKs(_, s));
    Barrier::arrive_and_expect_tx(&smem.bar_v[s], Tr::kKVBytes);
    copy(p.tma_v.with(smem.bar_v[s]), tVg(_, n), tVs(_, s));
  };
  if (leader) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    Barrier::init(&smem.bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      Barrier::init(&smem.bar_k[s], 1);
      Barrier::init(&smem.bar_v[s], 1);
    }
    cutlass::arch::fence_barrier_init();
    Barrier::arrive_and_expect_tx(&smem.bar_q, Tr::kQBytes);
    copy(p.tma_q.with(smem.bar_q), tQg, tQs);
    for (int n = 0; n < min(kStages, n_tiles); ++n) load_kv(n);
  }
  __syncthreads();  // barriers initialized before anyone waits on them

  typename Tr::MmaS mma_s;
  typename Tr::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(threadIdx.x);
  auto thr_o = mma_o.get_thread_slice(threadIdx.x);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);
  Tensor tSrK = thr_s.partition_fragment_B(sK);
  Tensor tOrV = thr_o.partition_fragment_B(sV);
  Tensor tSrS = partition_fragment_C(mma_s, Shape<BM, BN>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<BM, HD>{});
  clear(tOrO);
  // (row, col) of every accumulator element within the tile, in the (rows, cols) view.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<BM, BN>{}));
  Tensor cS = make_tensor(tScS.data(), rowcol(tScS.layout()));
  Tensor S = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
  Tensor O = make_tensor(tOrO.data(), rowcol(tOrO.layout()));
  constexpr int kRows = size<0>(decltype(S.layout()){});

  // Softmax state per row: running max of alpha s in log2 units, running sum of exp2.
  const float scale_log2 = p.alpha * static_cast<float>(M_LOG2E);
  float row_max[kRows], row_sum[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.f;

  Barrier::wait(&smem.bar_q, 0);
  for (int n = 0; n < n_tiles; ++n) {
    const int s = n % kStages;
    const uint32_t phase = (n / kStages) & 1;
    const int n0 = n * kBlockN;
    Barrier::wait(&smem.bar_k[s], phase);
    wgmma<true, false>(mma_s, tSrQ, tSrK(_, _, _, s), tSrS);

    // Keys past the sequence, and past the query row when causal, do not exist.
    const bool mask = n0 + kBlockN > len || (p.causal && n0 + kBlockN > m0);
    if (p.softmax) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int i = m0 + get<0>(cS(r, 0));
        float mx = row_max[r];
        CUTE_UNROLL
        for (int c = 0; c < size<1>(S); ++c) {
          const int j = n0 + get<1>(cS(r, c));
          float x = S(r, c) * scale_log2;
          if (mask && (j >= len || (p.causal && j > i))) x = -INFINITY;
          S(r, c) = x;
          mx = fmaxf(mx, x);
        }
        mx = quad_max(mx);
        // Tile 0 holds key 0 for every row, so the max is finite from there on; guard anyway.
        const float base = mx == -INFINITY ? 0.f : mx;
        const float rescale = exp2f(row_max[r] - base);
        row_max[r] = mx;
        float sum = 0.f;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(S); ++c) {
          S(r, c) = exp2f(S(r, c) - base);
          sum += S(r, c);
        }
        row_sum[r] = row_sum[r] * rescale + sum;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(O); ++c) O(r, c) *= rescale;
      }
    } else {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int i = m0 + get<0>(cS(r, 0));
        CUTE_UNROLL
        for (int c = 0; c < size<1>(S); ++c) {
          const int j = n0 + get<1>(cS(r, c));
          const float x = S(r, c) * p.alpha;
          const float silu = x / (1.f + __expf(-x));  // exact divide: exp overflow gives -0, not NaN
          S(r, c) = mask && (j >= len || (p.causal && j > i)) ? 0.f : silu;
        }
      }
    }
    Tensor tOrP = make_tensor_like<T>(tSrS);
    CUTE_UNROLL
    for (int e = 0; e < size(tSrS); ++e) tOrP(e) = static_cast<T>(tSrS(e));
    Tensor tOrPa = make_tensor(tOrP.data(), acc_as_a(tOrP.layout()));
    static_assert(decltype(size<0>(tOrPa))::value == 8 &&
                      decltype(size<2>(tOrPa))::value == decltype(size<2>(tOrV))::value,
                  "P's registers must cover wgmma's A fragment of every k step of P V");
    Barrier::wait(&smem.bar_v[s], phase);
    wgmma<false, true>(mma_o, tOrPa, tOrV(_, _, _, s), tOrO);
    // Every warpgroup is done reading stage s before the next TMA overwrites it.
    __syncthreads();
    if (leader && n + kStages < n_tiles) load_kv(n + kStages);
  }

  // Epilogue: normalize, round once, store the rows inside the sequence (4-byte pairs of columns).
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<BM, HD>{}));
  Tensor cO = make_tensor(tOcO.data(), rowcol(tOcO.layout()));
  const int64_t out_row = static_cast<int64_t>(p.heads) * D;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int i = m0 + get<0>(cO(r, 0));
    if (i >= len) continue;
    const float scale = p.softmax ? 1.f / row_sum[r] : p.inv_max_seq_len;
    T* row = p.out + (start + i) * out_row + static_cast<int64_t>(h) * D;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(O); c += 2) {
      const T lo = static_cast<T>(O(r, c) * scale), hi = static_cast<T>(O(r, c + 1) * scale);
      const uint32_t bits = static_cast<uint32_t>(lo.raw()) | (static_cast<uint32_t>(hi.raw()) << 16);
      *reinterpret_cast<uint32_t*>(row + get<1>(cO(r, c))) = bits;
    }
    if (p.softmax && get<1>(cO(r, 0)) == 0) {
      p.lse[static_cast<int64_t>(h) * p.total + start + i] =
          (row_max[r] + log2f(row_sum[r])) * static_cast<float>(M_LN2);
    }
  }
#else
  (void)p;
#endif
}

}  // namespace attention
}  // namespace cuda
}  // namespace mymetaops
