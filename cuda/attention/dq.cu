// Launcher of the Hopper attention backward's dQ kernel (csrc/include/mymetaops/attention.h,
// dq_kernel.cuh): one CTA per (query block of 128, sequence, head), the last query block of every
// pair first; CTAs whose block starts past their sequence exit at once. Its arguments are checked
// by attention_backward_supports (dkdv.cu), as the dK / dV kernel's are.
#include <cuda_runtime.h>

#include <cstdint>

#include "../cuda_utils.cuh"
#include "dq_kernel.cuh"
#include "launch_common.cuh"
#include "mymetaops/attention.h"

namespace mymetaops {

namespace cuda {
namespace attention {
namespace {

int64_t query_blocks(const AttentionBackwardArgs& a) {
  const int64_t rows = a.max_seq_len < a.total ? a.max_seq_len : a.total;
  return rows > 0 ? (rows + kDqBlockM - 1) / kDqBlockM : 0;
}

template <typename T, int D, typename IndexT>
LaunchError launch_typed(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tr = DqTraits<T, D>;
  const int64_t ctas = query_blocks(a) * a.batch * a.heads;  // < 2^31: attention_backward_supports
  if (ctas == 0) return nullptr;
  const int total = static_cast<int>(a.total);
  DqParams<T, D, IndexT> p{
      Tr::tma_rows(static_cast<const T*>(a.q), total, a.heads, a.q_row_stride, a.q_head_stride),
      Tr::tma_rows(static_cast<const T*>(a.dout), total, a.heads, a.dout_row_stride, a.dout_head_stride),
      Tr::tma_keys(static_cast<const T*>(a.k), total, a.heads, a.k_row_stride, a.k_head_stride),
      Tr::tma_keys(static_cast<const T*>(a.v), total, a.heads, a.v_row_stride, a.v_head_stride),
      static_cast<const IndexT*>(a.offsets),
      a.lse,
      a.delta,
      static_cast<T*>(a.dq),
      a.total,
      a.max_seq_len,
      a.batch * a.heads,
      a.heads,
      static_cast<int32_t>(query_blocks(a)),
      a.kind == AttentionKind::kSoftmax,
      a.causal,
      a.alpha,
      a.inv_max_seq_len};
  constexpr int smem = sizeof(typename Tr::Smem);
  static_assert(smem <= 227 * 1024, "sm_90 lets a CTA opt into 227 KB of shared memory");
  return launch_with_smem(attention_dq<T, D, IndexT>, ctas, smem, stream, p);
}

}  // namespace
}  // namespace attention
}  // namespace cuda

LaunchError launch_attention_dq(const AttentionBackwardArgs& a, void* stream) {
  using namespace cuda::attention;
  if (LaunchError e = attention_backward_supports(a)) return e;
  if (a.dq == nullptr || reinterpret_cast<uintptr_t>(a.dq) % 16 != 0) return "native attention dq: dq must be 16-byte aligned";
  if (a.batch == 0 || a.total == 0 || a.max_seq_len <= 0) return nullptr;
  if (LaunchError e = cuda::bind_device_context()) return e;  // before the TMA descriptors
  return dispatch_types(a.dtype, a.dqk, a.offsets_dtype, [&](auto t, auto d, auto i) {
    return launch_typed<decltype(t), decltype(d)::value, decltype(i)>(a, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace mymetaops
