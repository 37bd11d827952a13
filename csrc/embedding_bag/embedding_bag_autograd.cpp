// Autograd of the three embedding_bag ops, in C++ so that a training step pays no Python per call.
// The backward of each op is made of the ops themselves (all three are linear in each tensor input),
// so gradients of any order work. With s_i the scale of lookup i (its per-sample weight, 1/count
// for mean, or 1):
//   grad_weight[r] = sum_{i: idx_i = r} s_i grad_out[bag_i]  -> d/d grad_out = embedding_bag(G),
//                                                               d/d s_i = <G[idx_i], grad_out[bag_i]>
//   grad_psw[i]    = <grad_out[bag_i], weight[idx_i]>        -> d/d grad_out = embedding_bag with
//                                                               psw = u, d/d weight = backward(psw = u)
// for upstream gradients G (a table) and u (one value per index).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <type_traits>

#include "../autograd/node.h"
#include "../dispatch/dispatch.h"
#include "embedding_bag.h"

namespace mymetaops::embedding_bag {
namespace {

using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

at::Tensor call_forward(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                        int64_t mode, const OptTensor& psw, int64_t padding_idx, bool last) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::embedding_bag", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               int64_t, const OptTensor&, int64_t, bool)>();
  return op.call(weight, indices, offsets, mode, psw, padding_idx, last);
}

at::Tensor call_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                         const c10::SymInt& num_rows, int64_t mode, const OptTensor& psw,
                         int64_t padding_idx, bool last) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::embedding_bag_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               c10::SymInt, int64_t, const OptTensor&, int64_t, bool)>();
  return op.call(grad, indices, offsets, num_rows, mode, psw, padding_idx, last);
}

at::Tensor call_psw_backward(const at::Tensor& grad, const at::Tensor& weight, const at::Tensor& indices,
                             const at::Tensor& offsets, int64_t mode, int64_t padding_idx, bool last) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mymetaops::embedding_bag_per_sample_weights_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t, int64_t, bool)>();
  return op.call(grad, weight, indices, offsets, mode, padding_idx, last);
}

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using autograd::make_node;
using autograd::no_forward_ad;
using autograd::NodePtr;

// The lookup arguments every gradient op needs again, and the forced backend of the call: the
// backward runs on an autograd thread, which has no use_backend of its own.
struct Lookup {
  SavedVariable indices, offsets;
  int64_t mode = 0, padding_idx = -1;
  bool last = true;
  int8_t backend = dispatch::kAuto;

  void save(const at::Tensor& idx, const at::Tensor& off, int64_t m, int64_t pad, bool l) {
    indices = SavedVariable(idx, false);
    offsets = SavedVariable(off, false);
    mode = m, padding_idx = pad, last = l;
    backend = dispatch::thread_forced_backend();
  }
  void release() {
    indices.reset_data();
    offsets.reset_data();
  }
};

at::Tensor unpack(const SavedVariable& saved) { return saved.unpack(); }
OptTensor unpack_optional(const SavedVariable& saved) {
  at::Tensor t = saved.unpack();
  return t.defined() ? OptTensor(t) : std::nullopt;
}

// Edges: weight, per_sample_weights.
struct EmbeddingBagBackwardNode : Node {
  Lookup lookup;
  SavedVariable psw, weight;  // weight only when the per-sample weights need a gradient
  c10::SymInt num_rows;
  std::string name() const override { return "EmbeddingBagBackward"; }
  void release_variables() override {
    lookup.release();
    psw.reset_data();
    weight.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const dispatch::ForcedBackendGuard backend(lookup.backend);
    const at::Tensor indices = unpack(lookup.indices), offsets = unpack(lookup.offsets);
    const at::Tensor grad = grads[0].contiguous();
    variable_list out(2);
    if (task_should_compute_output(0)) {
      out[0] = call_backward(grad, indices, offsets, num_rows, lookup.mode, unpack_optional(psw),
                             lookup.padding_idx, lookup.last);
    }
    const at::Tensor w = unpack(weight);
    if (w.defined() && task_should_compute_output(1)) {
      out[1] = call_psw_backward(grad, w, indices, offsets, lookup.mode, lookup.padding_idx, lookup.last);
    }
    return out;
  }
};

// Edges: grad_output, per_sample_weights.
struct EmbeddingBagBackwardBackwardNode : Node {
  Lookup lookup;
  SavedVariable psw, grad_output;  // grad_output only when the per-sample weights need a gradient
  std::string name() const override { return "EmbeddingBagBackwardBackward"; }
  void release_variables() override {
    lookup.release();
    psw.reset_data();
    grad_output.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const dispatch::ForcedBackendGuard backend(lookup.backend);
    const at::Tensor indices = unpack(lookup.indices), offsets = unpack(lookup.offsets);
    const at::Tensor grad = grads[0].contiguous(), p = unpack(psw);
    variable_list out(2);
    if (task_should_compute_output(0)) {
      out[0] = call_forward(grad, indices, offsets, lookup.mode,
                            p.defined() ? OptTensor(p.to(grad.scalar_type())) : std::nullopt,
                            lookup.padding_idx, lookup.last);
    }
    const at::Tensor g = unpack(grad_output);
    if (g.defined() && task_should_compute_output(1)) {
      out[1] = call_psw_backward(g, grad, indices, offsets, lookup.mode, lookup.padding_idx, lookup.last)
                   .to(p.scalar_type());
    }
    return out;
  }
};

// Edges: grad_output, weight.
struct PerSampleWeightsBackwardNode : Node {
  Lookup lookup;
  SavedVariable weight, grad_output;  // grad_output only when weight needs a gradient
  c10::SymInt num_rows;
  at::ScalarType grad_output_dtype;
  std::string name() const override { return "EmbeddingBagPerSampleWeightsBackwardBackward"; }
  void release_variables() override {
    lookup.release();
    weight.reset_data();
    grad_output.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const dispatch::ForcedBackendGuard backend(lookup.backend);
    const at::Tensor indices = unpack(lookup.indices), offsets = unpack(lookup.offsets);
    const at::Tensor w = unpack(weight);
    const at::Tensor scales = grads[0].to(w.scalar_type()).contiguous();
    variable_list out(2);
    if (task_should_compute_output(0)) {
      out[0] = call_forward(w, indices, offsets, kModeSum, scales, lookup.padding_idx, lookup.last)
                   .to(grad_output_dtype);
    }
    const at::Tensor g = unpack(grad_output);
    if (g.defined() && task_should_compute_output(1)) {
      out[1] = call_backward(g.to(w.scalar_type()).contiguous(), indices, offsets, num_rows, kModeSum,
                             scales, lookup.padding_idx, lookup.last);
    }
    return out;
  }
};

bool requires_grad(const OptTensor& t) { return t.has_value() && t->requires_grad(); }

at::Tensor forward_autograd(const at::Tensor& weight, const at::Tensor& indices,
                            const at::Tensor& offsets, int64_t mode, const OptTensor& psw,
                            int64_t padding_idx, bool last) {
  NodePtr node;
  if (torch::autograd::compute_requires_grad(weight, psw)) {
    auto* n = make_node<EmbeddingBagBackwardNode>(node, torch::autograd::collect_next_edges(weight, psw));
    n->lookup.save(indices, offsets, mode, padding_idx, last);
    n->psw = SavedVariable(psw, false);
    n->num_rows = weight.sym_size(0);
    if (requires_grad(psw)) n->weight = SavedVariable(weight, false);
  }
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = call_forward(weight, indices, offsets, mode, psw, padding_idx, last);
  }
  if (node) torch::autograd::set_history(out, node);
  const bool weight_tangent = torch::autograd::isFwGradDefined(weight);
  const bool psw_tangent = torch::autograd::isFwGradDefined(psw);
  if (weight_tangent || psw_tangent) {  // linear in each: the tangent is the op on the tangents
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // first-order tangents only
    at::Tensor tangent;
    if (weight_tangent) {
      tangent = call_forward(weight._fw_grad(0), indices, offsets, mode, psw, padding_idx, last);
    }
    if (psw_tangent) {
      const at::Tensor t = call_forward(weight, indices, offsets, mode, psw->_fw_grad(0), padding_idx, last);
      tangent = tangent.defined() ? tangent.add(t) : t;
    }
    out._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/false);
  }
  return out;
}

at::Tensor backward_autograd(const at::Tensor& grad_output, const at::Tensor& indices,
                             const at::Tensor& offsets, c10::SymInt num_rows, int64_t mode,
                             const OptTensor& psw, int64_t padding_idx, bool last) {
  no_forward_ad({grad_output, psw}, "embedding_bag_backward");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(grad_output, psw)) {
    auto* n = make_node<EmbeddingBagBackwardBackwardNode>(
        node, torch::autograd::collect_next_edges(grad_output, psw));
    n->lookup.save(indices, offsets, mode, padding_idx, last);
    n->psw = SavedVariable(psw, false);
    if (requires_grad(psw)) n->grad_output = SavedVariable(grad_output, false);
  }
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = call_backward(grad_output, indices, offsets, num_rows, mode, psw, padding_idx, last);
  }
  if (node) torch::autograd::set_history(out, node);
  return out;
}

at::Tensor psw_backward_autograd(const at::Tensor& grad_output, const at::Tensor& weight,
                                 const at::Tensor& indices, const at::Tensor& offsets, int64_t mode,
                                 int64_t padding_idx, bool last) {
  no_forward_ad({grad_output, weight}, "embedding_bag_per_sample_weights_backward");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(grad_output, weight)) {
    auto* n = make_node<PerSampleWeightsBackwardNode>(
        node, torch::autograd::collect_next_edges(grad_output, weight));
    n->lookup.save(indices, offsets, mode, padding_idx, last);
    n->weight = SavedVariable(weight, false);
    n->num_rows = weight.sym_size(0);
    n->grad_output_dtype = grad_output.scalar_type();
    if (weight.requires_grad()) n->grad_output = SavedVariable(grad_output, false);
  }
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = call_psw_backward(grad_output, weight, indices, offsets, mode, padding_idx, last);
  }
  if (node) torch::autograd::set_history(out, node);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, Autograd, m) {
  m.impl("embedding_bag", &forward_autograd);
  m.impl("embedding_bag_backward", &backward_autograd);
  m.impl("embedding_bag_per_sample_weights_backward", &psw_backward_autograd);
}

}  // namespace mymetaops::embedding_bag
