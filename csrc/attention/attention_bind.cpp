// The attention family's Python helpers in mymetaops._C: the native forward kernels of this build
// and their launch (attention.h).
#include <torch/extension.h>

#include "attention.h"

namespace mymetaops::attention {
namespace {
NativeProvider native{};
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
}

}  // namespace mymetaops::attention
