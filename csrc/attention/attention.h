// The attention family's native forward and backward kernels, reached from Python (mymetaops/ops/attention.py): the op
// layer is Python there (its Triton kernels are), so the native kernel is one pybind call into the
// GPU glue (attention_gpu.cpp), registered here by that glue's static initializer; a CPU-only
// build has no provider, and the bindings say so.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace mymetaops::attention {

struct NativeProvider {
  // attention_kernel_names(), in AttentionKernelConfig.kernel order.
  std::vector<std::string> (*kernel_names)();
  // (out [total, H, Dv], lse [H, total] fp32, or an empty tensor for HSTU) of
  // launch_attention_forward; kind is AttentionKind's value, error_op ErrorOp's.
  std::tuple<at::Tensor, at::Tensor> (*forward)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind,
                                                double alpha, bool causal, int64_t kernel);
  // (dk, dv) of launch_attention_dkdv; lse and delta: softmax only (undefined tensors for HSTU).
  std::tuple<at::Tensor, at::Tensor> (*dkdv)(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& seq_offsets, int64_t max_seq_len,
                                             int64_t kind, double alpha, bool causal,
                                             const std::optional<at::Tensor>& lse,
                                             const std::optional<at::Tensor>& delta);
  // dq of launch_attention_dq; arguments as dkdv's.
  at::Tensor (*dq)(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind, double alpha, bool causal,
                   const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& delta);
  // (dq, dk, dv) of launch_attention_dkdv with dQ fused (an fp32 buffer, converted after); arguments as dkdv's.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> (*backward)(
      const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
      const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind, double alpha, bool causal,
      const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& delta);
};

void set_native_provider(const NativeProvider& provider);

}  // namespace mymetaops::attention
