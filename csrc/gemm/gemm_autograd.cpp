// Autograd of gemm and fp8_linear, in C++ so that a training step pays no Python per call. The
// backward passes are made of the family's ops:
//   gemm        out = a @ b + bias:   grad_a = grad @ b^T, grad_b = a^T @ grad, grad_bias = sum of rows
//   fp8_linear  out = x @ W^T + bias: grad_x = grad @ W in FP8 (both quantized rowwise, as the
//               forward); grad_W = grad^T @ x as a bf16/fp16 gemm (its K is the batch: README,
//               "fp8_linear training"); grad_bias = sum of rows.
// Forward-mode AD is not implemented (refused clearly); gemm's backward is differentiable again,
// fp8_linear's is not (quantization has no gradient).
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autograd/node.h"
#include "../dispatch/dispatch.h"
#include "gemm.h"

namespace mymetaops::gemm {
namespace {

using autograd::make_node;
using autograd::no_forward_ad;
using autograd::NodePtr;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// Edges: a, b, bias.
struct GemmBackwardNode : Node {
  SavedVariable a, b;  // a when b needs a gradient, b when a does
  bool has_bias = false;
  int8_t backend = dispatch::kAuto;  // the call's forced backend: backward runs on another thread
  std::string name() const override { return "GemmBackward"; }
  void release_variables() override {
    a.reset_data();
    b.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const dispatch::ForcedBackendGuard guard(backend);
    const at::Tensor& grad = grads[0];
    variable_list out(3);
    if (task_should_compute_output(0)) out[0] = call_gemm(grad, b.unpack().t(), std::nullopt);
    if (task_should_compute_output(1)) out[1] = call_gemm(a.unpack().t(), grad, std::nullopt);
    if (has_bias && task_should_compute_output(2)) out[2] = grad.sum(0);
    return out;
  }
};

// Edges: x, weight, bias.
struct Fp8LinearBackwardNode : Node {
  SavedVariable x, weight;
  bool has_bias = false;
  int8_t backend = dispatch::kAuto;
  std::string name() const override { return "Fp8LinearBackward"; }
  void release_variables() override {
    x.reset_data();
    weight.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const dispatch::ForcedBackendGuard guard(backend);
    const at::Tensor x_ = x.unpack(), w = weight.unpack();
    const at::Tensor g = grads[0].reshape({-1, w.size(0)}).to(x_.scalar_type());
    variable_list out(3);
    if (task_should_compute_output(0)) {
      // grad_x[M, K] = g[M, N] . W[N, K]: W^T [K, N] is the FP8 GEMM's [N', K'] operand.
      const auto [gq, gs] = call_quantize_rowwise(g);
      const auto [wtq, wts] = call_quantize_rowwise(w.t().contiguous());
      out[0] = call_fp8_gemm(gq, wtq, gs, wts, std::nullopt, x_.scalar_type()).view(x_.sizes());
    }
    if (task_should_compute_output(1)) {
      out[1] = call_gemm(g.t(), x_.reshape({-1, x_.size(-1)}), std::nullopt);
    }
    if (has_bias && task_should_compute_output(2)) out[2] = g.sum(0);
    return out;
  }
};

at::Tensor gemm_autograd(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias) {
  no_forward_ad({a, b, bias}, "gemm");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(a, b, bias)) {
    auto* n = make_node<GemmBackwardNode>(node, torch::autograd::collect_next_edges(a, b, bias));
    if (b.requires_grad()) n->a = SavedVariable(a, false);
    if (a.requires_grad()) n->b = SavedVariable(b, false);
    n->has_bias = bias.has_value();
    n->backend = dispatch::thread_forced_backend();
  }
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = call_gemm(a, b, bias);
  }
  if (node) torch::autograd::set_history(out, node);
  return out;
}

at::Tensor fp8_linear_autograd(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias) {
  no_forward_ad({x, weight, bias}, "fp8_linear");
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::fp8_linear", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&)>();
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, weight, bias)) {
    auto* n = make_node<Fp8LinearBackwardNode>(node, torch::autograd::collect_next_edges(x, weight, bias));
    n->x = SavedVariable(x, false);
    n->weight = SavedVariable(weight, false);
    n->has_bias = bias.has_value();
    n->backend = dispatch::thread_forced_backend();
  }
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = op.call(x, weight, bias);
  }
  if (node) torch::autograd::set_history(out, node);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, Autograd, m) {
  m.impl("gemm", &gemm_autograd);
  m.impl("fp8_linear", &fp8_linear_autograd);
}

}  // namespace mymetaops::gemm
