// Launcher of the Hopper attention backward's dK / dV kernel (csrc/include/mymetaops/attention.h,
// dkdv_kernel.cuh), with dQ fused in when dq_accum is given: one CTA per (key block of 128,
// sequence, head) (dkdv_coords: the order); CTAs whose block starts past their sequence exit at
// once. The fused variant is followed by dq_from_accum, one CTA per 64-row query block.
#include <cuda_runtime.h>

#include <cstdint>

#include "../cuda_utils.cuh"
#include "dkdv_kernel.cuh"
#include "launch_common.cuh"
#include "mymetaops/attention.h"

namespace mymetaops {

namespace cuda {
namespace attention {
namespace {

constexpr int kAlignElems = 8;  // 16 bytes: TMA's address and stride granularity

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % (kAlignElems * 2) == 0; }
bool stride_ok(int64_t s) { return s > 0 && s % kAlignElems == 0; }

int64_t key_blocks(const AttentionBackwardArgs& a) {
  const int64_t rows = a.max_seq_len < a.total ? a.max_seq_len : a.total;
  return rows > 0 ? (rows + kDkdvBlockN - 1) / kDkdvBlockN : 0;
}

// dq_from_accum's grid: 64-row query blocks (two a key block) x sequences x heads.
int64_t query_block_ctas(const AttentionBackwardArgs& a) {
  return key_blocks(a) * (kDkdvBlockN / kDkdvBlockM) * a.batch * a.heads;
}

// Rows of a head in fused dQ's buffer: each sequence padded by a block (kDqPadRows).
int64_t accum_rows(const AttentionBackwardArgs& a) { return a.total + a.batch * kDqPadRows; }

template <typename T, int D, typename IndexT, bool kDq>
LaunchError launch_typed(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tr = DkdvTraits<T, D>;
  const int64_t ctas = key_blocks(a) * a.batch * a.heads;
  if (ctas == 0) return nullptr;
  const int total = static_cast<int>(a.total);
  DkdvParams<T, D, IndexT> p{
      Tr::tma_rows(static_cast<const T*>(a.q), total, a.heads, a.q_row_stride, a.q_head_stride),
      Tr::tma_rows(static_cast<const T*>(a.dout), total, a.heads, a.dout_row_stride, a.dout_head_stride),
      Tr::tma_keys(static_cast<const T*>(a.k), total, a.heads, a.k_row_stride, a.k_head_stride),
      Tr::tma_keys(static_cast<const T*>(a.v), total, a.heads, a.v_row_stride, a.v_head_stride),
      static_cast<const IndexT*>(a.offsets),
      a.lse,
      a.delta,
      static_cast<T*>(a.dk),
      static_cast<T*>(a.dv_out),
      a.dq_accum,
      a.total,
      a.max_seq_len,
      a.batch * a.heads,
      key_blocks(a),
      accum_rows(a),
      a.heads,
      a.kind == AttentionKind::kSoftmax,
      a.causal,
      a.alpha,
      a.inv_max_seq_len};
  constexpr int smem = sizeof(typename Tr::Smem);
  static_assert(smem <= 227 * 1024, "sm_90 lets a CTA opt into 227 KB of shared memory");
  if (LaunchError e = launch_with_smem(attention_dkdv<T, D, IndexT, kDq>, ctas, smem, stream, p)) return e;
  if constexpr (kDq) {
    dq_from_accum<T, D, IndexT><<<static_cast<unsigned>(query_block_ctas(a)), kConsumerThreads, 0, stream>>>(
        p.offsets, a.dq_accum, static_cast<T*>(a.dq), a.total, a.max_seq_len, p.pairs, a.heads, p.accum_rows);
    return launch_status();
  }
  return nullptr;
}

}  // namespace
}  // namespace attention
}  // namespace cuda

LaunchError attention_backward_supports(const AttentionBackwardArgs& a) {
  using namespace cuda::attention;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return "native attention backward: cannot query the device's compute capability";
  }
  if (major != 9 || minor != 0) return "native attention backward: the Hopper kernel needs an sm_90 device";
  if (a.kind != AttentionKind::kHstu && a.kind != AttentionKind::kSoftmax) return "native attention backward: unknown kind";
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16) {
    return "native attention backward: dtype must be bf16 or fp16";
  }
  if (a.offsets_dtype != DType::kInt32 && a.offsets_dtype != DType::kInt64) {
    return "native attention backward: offsets must be int32 or int64";
  }
  if (a.dqk != a.dv || (a.dqk != 64 && a.dqk != 128)) return "native attention backward: needs dqk = dv = 64 or 128";
  if (a.kind == AttentionKind::kSoftmax && (a.lse == nullptr || a.delta == nullptr)) {
    return "native attention backward: softmax needs lse and delta";
  }
  if (a.total >= (int64_t{1} << 30) || a.heads <= 0) return "native attention backward: needs total rows < 2^30, heads >= 1";
  if (query_block_ctas(a) >= (int64_t{1} << 31)) {  // the larger grid: dq_from_accum's
    return "native attention backward: needs (64-row blocks x sequences x heads) < 2^31";
  }
  if (!aligned(a.q) || !aligned(a.k) || !aligned(a.v) || !aligned(a.dout) || !aligned(a.dk) || !aligned(a.dv_out)) {
    return "native attention backward: q, k, v, dout, dk and dv must be 16-byte aligned (TMA)";
  }
  for (int64_t s : {a.q_row_stride, a.q_head_stride, a.k_row_stride, a.k_head_stride, a.v_row_stride,
                    a.v_head_stride, a.dout_row_stride, a.dout_head_stride}) {
    if (!stride_ok(s)) return "native attention backward: row and head strides must be positive multiples of 8 elements";
  }
  return nullptr;
}

int64_t attention_dq_accum_elems(const AttentionBackwardArgs& a) {
  return static_cast<int64_t>(a.heads) * cuda::attention::accum_rows(a) * a.dqk;
}

LaunchError launch_attention_dkdv(const AttentionBackwardArgs& a, void* stream) {
  using namespace cuda::attention;
  if (LaunchError e = attention_backward_supports(a)) return e;
  if (a.batch == 0 || a.total == 0 || a.max_seq_len <= 0) return nullptr;
  if (LaunchError e = cuda::bind_device_context()) return e;  // before the TMA descriptors
  if (a.dq_accum != nullptr && (reinterpret_cast<uintptr_t>(a.dq_accum) % 16 != 0 || a.dq == nullptr)) {
    return "native attention backward: fused dQ needs dq and a 16-byte aligned dq_accum (bulk copies)";
  }
  return dispatch_types(a.dtype, a.dqk, a.offsets_dtype, [&](auto t, auto d, auto i) {
    const auto s = static_cast<cudaStream_t>(stream);
    using T = decltype(t);
    using I = decltype(i);
    return a.dq_accum != nullptr ? launch_typed<T, decltype(d)::value, I, true>(a, s)
                                 : launch_typed<T, decltype(d)::value, I, false>(a, s);
  });
}

}  // namespace mymetaops
