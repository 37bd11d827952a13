// The attention family's Python helpers in mymetaops._C: the native forward kernels of this build
// and their launch, and the backward's dK / dV and dQ kernels, apart or fused (attention.h).
#include <torch/extension.h>

#include "attention.h"

namespace mymetaops::attention {
namespace {
NativeProvider native{};

// The backward kernels' bindings: one signature (the provider's), softmax's lse / delta optional.
template <auto Member>
void def_backward(pybind11::module_& m, const char* name, const char* doc) {
  m.def(
      name,
      [](const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const at::Tensor& seq_offsets, int64_t max_seq_len, int64_t kind, double alpha, bool causal,
         const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& delta) {
        const auto fn = native.*Member;
        TORCH_CHECK(fn != nullptr, "mymetaops: this build has no native attention kernels");
        return fn(grad_out, q, k, v, seq_offsets, max_seq_len, kind, alpha, causal, lse, delta);
      },
      pybind11::arg("grad_out"), pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"),
      pybind11::arg("seq_offsets"), pybind11::arg("max_seq_len"), pybind11::arg("kind"), pybind11::arg("alpha"),
      pybind11::arg("causal"), pybind11::arg("lse") = pybind11::none(), pybind11::arg("delta") = pybind11::none(),
      doc);
}

}  // namespace

void set_native_provider(const NativeProvider& provider) { native = provider; }

void bind(pybind11::module_& m) {
  m.def(
      "_native_attention_kernels",
      [] { return native.kernel_names != nullptr ? native.kernel_names() : std::vector<std::string>{}; },
      "Names of the native attention forward kernels of this build (empty without GPU kernels).");
  m.def(
      "_attention_forward_native",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& seq_offsets,
         int64_t max_seq_len, int64_t kind, double alpha, bool causal, int64_t kernel) {
        TORCH_CHECK(native.forward != nullptr, "mymetaops: this build has no native attention kernels");
        return native.forward(q, k, v, seq_offsets, max_seq_len, kind, alpha, causal, kernel);
      },
      "(out, lse) of a native attention forward kernel; arguments checked by the caller's op "
      "(mymetaops/ops/attention.py _check), kind 0 HSTU / 1 softmax, kernel an index into "
      "_native_attention_kernels().");
  def_backward<&NativeProvider::dkdv>(
      m, "_attention_dkdv_native",
      "(dk, dv) of the native attention backward's dK / dV kernel (softmax: lse and delta = rowsum(dO * O), "
      "[H, total_L] fp32); arguments checked by the caller (mymetaops/ops/attention.py).");
  def_backward<&NativeProvider::dq>(
      m, "_attention_dq_native", "dq of the native attention backward's dQ kernel; arguments as _attention_dkdv_native's.");
  def_backward<&NativeProvider::backward>(
      m, "_attention_backward_native",
      "(dq, dk, dv) of the dK / dV kernel with dQ fused in (reductions into fp32: dq's last bits vary between "
      "calls); arguments as _attention_dkdv_native's.");
}

}  // namespace mymetaops::attention
