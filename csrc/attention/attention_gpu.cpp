// The attention family's native forward and backward kernels on the GPU (attention.h): the torch
// glue of launch_attention_forward, launch_attention_dkdv (dQ fused or not) and launch_attention_dq (mymetaops/attention.h, cuda/attention/
// or hip/attention/). The Python op (mymetaops/ops/attention.py) has checked shapes, dtypes and
// devices and chosen the kernel; the forward raises what an earlier kernel recorded, fills the
// launcher's arguments and launches. No host sync: the forward's launch checks the offsets' values
// into the device error record.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

#include "../dispatch/device_errors.h"
#include "../dispatch/launch_gpu.h"
#include "attention.h"
#include "mymetaops/attention.h"

namespace mymetaops::attention {
namespace {

constexpr const char* kOp = "native attention forward";

DType launcher_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;  // refused by the launcher: it says why
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default: TORCH_CHECK(false, kOp, ": unsupported dtype ", t);
  }
}

// The fields the forward's and the backward's launcher arguments share, from the tensors.
template <typename Args>
void fill_problem(Args& a, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& seq_offsets,
                  int64_t max_seq_len, bool softmax, double alpha, bool causal) {
  a.kind = softmax ? AttentionKind::kSoftmax : AttentionKind::kHstu;
  a.dtype = launcher_dtype(q.scalar_type());
  a.q = q.const_data_ptr();
  a.k = k.const_data_ptr();
  a.v = v.const_data_ptr();
  a.q_row_stride = q.stride(0);
  a.q_head_stride = q.stride(1);
  a.k_row_stride = k.stride(0);
  a.k_head_stride = k.stride(1);
  a.v_row_stride = v.stride(0);
  a.v_head_stride = v.stride(1);
  a.offsets = seq_offsets.const_data_ptr();
  a.offsets_dtype = launcher_dtype(seq_offsets.scalar_type());
  a.batch = seq_offsets.numel() - 1;
  a.total = q.size(0);
  a.max_seq_len = max_seq_len;
  a.heads = static_cast<int32_t>(q.size(1));
  a.dqk = static_cast<int32_t>(q.size(2));
  a.dv = static_cast<int32_t>(v.size(2));
  a.causal = causal;
  a.alpha = static_cast<float>(alpha);
  a.inv_max_seq_len = max_seq_len > 0 ? static_cast<float>(1.0 / static_cast<double>(max_seq_len)) : 0.0f;
}

std::vector<std::string> kernel_names() {
  int32_t count = 0;
  const char* const* names = attention_kernel_names(&count);
  return {names, names + count};
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind,
                                           double alpha, bool causal, int64_t kernel) {
  TORCH_CHECK(kind == 0 || kind == 1, kOp, ": kind must be 0 (HSTU) or 1 (softmax), got ", kind);
  const c10::cuda::CUDAGuard guard(q.device());
  dispatch::raise_recorded_error(q.device());
  const bool softmax = kind == 1;
  const int64_t total = q.size(0), heads = q.size(1), dv = v.size(2);
  at::Tensor out = at::empty({total, heads, dv}, q.options());
  at::Tensor lse = at::empty({softmax ? heads : 0, softmax ? total : 0}, q.options().dtype(at::kFloat));
  AttentionForwardArgs a{};
  fill_problem(a, q, k, v, seq_offsets, max_seq_len, softmax, alpha, causal);
  a.out = out.mutable_data_ptr();
  a.lse = softmax ? lse.mutable_data_ptr<float>() : nullptr;
  a.errors = dispatch::device_error_record(q.device());
  a.error_op = softmax ? ErrorOp::kJaggedAttention : ErrorOp::kHstuAttention;
  a.sm_count = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const AttentionKernelConfig config{static_cast<int32_t>(kernel)};
  dispatch::check_launch(attention_supports(a, config), kOp);
  const int64_t bytes = attention_workspace_bytes(a, config);
  const at::Tensor workspace = bytes > 0 ? at::empty({bytes}, q.options().dtype(at::kByte)) : at::Tensor();
  a.workspace = bytes > 0 ? workspace.data_ptr() : nullptr;
  dispatch::check_launch(launch_attention_forward(a, config, dispatch::current_stream(q.device())), kOp);
  return {out, lse};
}

// The backward kernels' arguments from the tensors (outputs set by the caller).
AttentionBackwardArgs backward_args(const char* op, const at::Tensor& grad_out, const at::Tensor& q,
                                    const at::Tensor& k, const at::Tensor& v, const at::Tensor& seq_offsets,
                                    int64_t max_seq_len, int64_t kind, double alpha, bool causal,
                                    const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& delta) {
  TORCH_CHECK(kind == 0 || kind == 1, op, ": kind must be 0 (HSTU) or 1 (softmax), got ", kind);
  const bool softmax = kind == 1;
  TORCH_CHECK(!softmax || (lse.has_value() && delta.has_value()), op, ": softmax needs lse and delta");
  for (const auto& t : {lse, delta}) {
    TORCH_CHECK(!softmax || (t->is_contiguous() && t->scalar_type() == at::kFloat && t->dim() == 2 &&
                             t->size(0) == q.size(1) && t->size(1) == q.size(0)),
                op, ": lse and delta must be contiguous fp32 [H, total_L]");
  }
  AttentionBackwardArgs a{};
  fill_problem(a, q, k, v, seq_offsets, max_seq_len, softmax, alpha, causal);
  a.dout = grad_out.const_data_ptr();
  a.dout_row_stride = grad_out.stride(0);
  a.dout_head_stride = grad_out.stride(1);
  a.lse = softmax ? lse->const_data_ptr<float>() : nullptr;
  a.delta = softmax ? delta->const_data_ptr<float>() : nullptr;
  return a;
}

std::tuple<at::Tensor, at::Tensor> dkdv(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& seq_offsets, int64_t max_seq_len,
                                        int64_t kind, double alpha, bool causal, const std::optional<at::Tensor>& lse,
                                        const std::optional<at::Tensor>& delta) {
  constexpr const char* kDkdvOp = "native attention dk/dv";
  AttentionBackwardArgs a =
      backward_args(kDkdvOp, grad_out, q, k, v, seq_offsets, max_seq_len, kind, alpha, causal, lse, delta);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  a.dk = dk.mutable_data_ptr();
  a.dv_out = dv.mutable_data_ptr();
  dispatch::check_launch(launch_attention_dkdv(a, dispatch::current_stream(q.device())), kDkdvOp);
  return {dk, dv};
}

at::Tensor dq(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind, double alpha, bool causal,
              const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& delta) {
  constexpr const char* kDqOp = "native attention dq";
  AttentionBackwardArgs a =
      backward_args(kDqOp, grad_out, q, k, v, seq_offsets, max_seq_len, kind, alpha, causal, lse, delta);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor dq = at::empty(q.sizes(), q.options());
  a.dq = dq.mutable_data_ptr();
  dispatch::check_launch(launch_attention_dq(a, dispatch::current_stream(q.device())), kDqOp);
  return dq;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& q,
                                                    const at::Tensor& k, const at::Tensor& v,
                                                    const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind,
                                                    double alpha, bool causal, const std::optional<at::Tensor>& lse,
                                                    const std::optional<at::Tensor>& delta) {
  constexpr const char* kFusedOp = "native attention backward";
  AttentionBackwardArgs a =
      backward_args(kFusedOp, grad_out, q, k, v, seq_offsets, max_seq_len, kind, alpha, causal, lse, delta);
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor accum = at::zeros({attention_dq_accum_elems(a)}, q.options().dtype(at::kFloat));
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  a.dq = dq.mutable_data_ptr();
  a.dk = dk.mutable_data_ptr();
  a.dv_out = dv.mutable_data_ptr();
  a.dq_accum = accum.mutable_data_ptr<float>();
  dispatch::check_launch(launch_attention_dkdv(a, dispatch::current_stream(q.device())), kFusedOp);
  return {dq, dk, dv};
}

const bool kProvided = (set_native_provider({&kernel_names, &forward, &dkdv, &dq, &backward}), true);

}  // namespace
}  // namespace mymetaops::attention
