// Autograd of the jagged family, in C++ so that a training step pays no Python per call, and
// FBGEMM's ops that also return their offsets, as composites. The backward passes are made of the
// family's ops (every backend and a forced backend apply to them too):
//   jagged_to_padded_dense           grad_values = dense_to_jagged(grad)
//   dense_to_jagged                  grad_dense = jagged_to_padded_dense(grad, the dense's lengths)
//   jagged_dense_elementwise_add     grad_x = dense_to_jagged(grad), grad_y = grad
//   ..._add_jagged_output            grad_x = grad, grad_y = jagged_to_padded_dense(grad)
//   ..._mul                          grad_x = mul(grad, y), grad_y = jagged_to_padded_dense(grad * x)
//   jagged_softmax                   jagged_softmax_backward(grad, output)
//   jagged_dense_bmm                 grad_x = jagged_dense_bmm(grad, y^T), grad_y = jagged_jagged_bmm(x, grad)
//   jagged_jagged_bmm                grad_x = jagged_dense_bmm(y, grad^T), grad_y = jagged_dense_bmm(x, grad)
//   jagged_index_select              jagged_index_select_backward(grad)
// Offsets, lengths and indices get no gradient. Forward-mode AD is refused clearly.
#include <ATen/ops/mul.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autograd/node.h"
#include "../dispatch/dispatch.h"
#include "jagged.h"

namespace mymetaops::jagged {
namespace {

using autograd::make_node;
using autograd::no_forward_ad;
using autograd::NodePtr;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

std::vector<c10::SymInt> lengths_of(const at::Tensor& dense, size_t levels) {
  const c10::SymIntArrayRef sizes = dense.sym_sizes();
  return {sizes.begin() + 1, sizes.begin() + 1 + static_cast<int64_t>(levels)};
}

// What every node keeps: the offsets (no gradient) and the call's forced backend (the backward
// runs on another thread).
struct JaggedNode : Node {
  std::vector<at::Tensor> offsets;
  int8_t backend = dispatch::kAuto;
  // Runs body(grad) under the saved backend when the output's gradient is defined.
  template <typename F>
  variable_list run(variable_list&& grads, size_t outputs, const F& body) {
    const dispatch::ForcedBackendGuard guard(backend);
    variable_list out(outputs);
    if (!grads.empty() && grads[0].defined()) body(grads[0], out);
    return out;
  }
};

template <typename N>
N* node_for(NodePtr& node, torch::autograd::edge_list edges, at::TensorList offsets) {
  auto* n = make_node<N>(node, std::move(edges));
  n->offsets = offsets.vec();
  n->backend = dispatch::thread_forced_backend();
  return n;
}

// The op's kernel below autograd, its output attached to the node (if any).
template <typename F>
at::Tensor with_history(const NodePtr& node, const F& kernel) {
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    out = kernel();
  }
  if (node) torch::autograd::set_history(out, node);
  return out;
}

// ---- jagged_to_padded_dense / dense_to_jagged ---------------------------------------------------

struct ToPaddedDenseBackward : JaggedNode {
  c10::SymInt total_L;
  std::string name() const override { return "JaggedToPaddedDenseBackward"; }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 1, [&](const at::Tensor& g, variable_list& out) {
      out[0] = call_dense_to_jagged(g, offsets, total_L);
    });
  }
};

at::Tensor to_padded_dense_autograd(const at::Tensor& values, at::TensorList offsets,
                                    c10::SymIntArrayRef max_lengths, double padding_value) {
  no_forward_ad({values}, "jagged_to_padded_dense");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(values)) {
    node_for<ToPaddedDenseBackward>(node, torch::autograd::collect_next_edges(values), offsets)->total_L =
        values.sym_size(0);
  }
  return with_history(node, [&] { return call_to_padded_dense(values, offsets, max_lengths, padding_value); });
}

struct DenseToJaggedBackward : JaggedNode {
  std::vector<c10::SymInt> lengths;
  std::string name() const override { return "DenseToJaggedBackward"; }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 1, [&](const at::Tensor& g, variable_list& out) {
      out[0] = call_to_padded_dense(g, offsets, lengths, 0.0);
    });
  }
};

at::Tensor dense_to_jagged_autograd(const at::Tensor& dense, at::TensorList offsets, OptSymInt total_L) {
  no_forward_ad({dense}, "dense_to_jagged");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(dense)) {
    node_for<DenseToJaggedBackward>(node, torch::autograd::collect_next_edges(dense), offsets)->lengths =
        lengths_of(dense, offsets.size());
  }
  return with_history(node, [&] { return call_dense_to_jagged(dense, offsets, total_L); });
}

// ---- elementwise -------------------------------------------------------------------------------

at::Tensor call_add_dense(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::jagged_dense_elementwise_add", "")
                             .typed<at::Tensor(const at::Tensor&, at::TensorList, const at::Tensor&)>();
  return op.call(x, offsets, y);
}

// Edges: x, y.
struct AddDenseBackward : JaggedNode {
  c10::SymInt total_L;
  std::string name() const override { return "JaggedDenseElementwiseAddBackward"; }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 2, [&](const at::Tensor& g, variable_list& out) {
      if (task_should_compute_output(0)) out[0] = call_dense_to_jagged(g, offsets, total_L);
      if (task_should_compute_output(1)) out[1] = g;
    });
  }
};

at::Tensor add_dense_autograd(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  no_forward_ad({x, y}, "jagged_dense_elementwise_add");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, y)) {
    node_for<AddDenseBackward>(node, torch::autograd::collect_next_edges(x, y), offsets)->total_L =
        x.sym_size(0);
  }
  return with_history(node, [&] { return call_add_dense(x, offsets, y); });
}

struct AddJaggedBackward : JaggedNode {
  std::vector<c10::SymInt> lengths;  // y's
  std::string name() const override { return "JaggedDenseElementwiseAddJaggedOutputBackward"; }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 2, [&](const at::Tensor& g, variable_list& out) {
      if (task_should_compute_output(0)) out[0] = g;
      if (task_should_compute_output(1)) out[1] = call_to_padded_dense(g, offsets, lengths, 0.0);
    });
  }
};

at::Tensor add_jagged_autograd(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  no_forward_ad({x, y}, "jagged_dense_elementwise_add_jagged_output");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, y)) {
    node_for<AddJaggedBackward>(node, torch::autograd::collect_next_edges(x, y), offsets)->lengths =
        lengths_of(y, offsets.size());
  }
  return with_history(node, [&] { return call_add_jagged_output(x, offsets, y); });
}

struct MulBackward : JaggedNode {
  SavedVariable x, y;  // x when y needs a gradient, y when x does
  std::vector<c10::SymInt> lengths;
  std::string name() const override { return "JaggedDenseElementwiseMulBackward"; }
  void release_variables() override {
    x.reset_data();
    y.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 2, [&](const at::Tensor& g, variable_list& out) {
      if (task_should_compute_output(0)) out[0] = call_mul(g, offsets, y.unpack());
      if (task_should_compute_output(1)) out[1] = call_to_padded_dense(at::mul(g, x.unpack()), offsets, lengths, 0.0);
    });
  }
};

at::Tensor mul_autograd(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  no_forward_ad({x, y}, "jagged_dense_elementwise_mul");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, y)) {
    auto* n = node_for<MulBackward>(node, torch::autograd::collect_next_edges(x, y), offsets);
    if (y.requires_grad()) n->x = SavedVariable(x, false);
    if (x.requires_grad()) n->y = SavedVariable(y, false);
    n->lengths = lengths_of(y, offsets.size());
  }
  return with_history(node, [&] { return call_mul(x, offsets, y); });
}

// ---- softmax -----------------------------------------------------------------------------------

struct SoftmaxBackward : JaggedNode {
  SavedVariable output;
  int64_t max_L = 0;
  std::string name() const override { return "JaggedSoftmaxBackward"; }
  void release_variables() override { output.reset_data(); }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 1, [&](const at::Tensor& g, variable_list& out) {
      out[0] = call_softmax_backward(g, output.unpack(), offsets[0], max_L);
    });
  }
};

at::Tensor softmax_autograd(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  no_forward_ad({values}, "jagged_softmax");
  NodePtr node;
  SoftmaxBackward* n = nullptr;
  if (torch::autograd::compute_requires_grad(values)) {
    n = node_for<SoftmaxBackward>(node, torch::autograd::collect_next_edges(values), offsets);
    n->max_L = max_L;
  }
  at::Tensor out = with_history(node, [&] { return call_softmax(values, offsets, max_L); });
  // Saved detached: the output's own grad_fn would make a cycle; the version counter is shared,
  // so an in-place change of the output before backward is still caught.
  if (n) n->output = SavedVariable(out.detach(), false);
  return out;
}

// ---- bmm ---------------------------------------------------------------------------------------

// Edges: x, y.
struct DenseBmmBackward : JaggedNode {
  SavedVariable x, y;
  int64_t max_L = 0;
  std::string name() const override { return "JaggedDenseBmmBackward"; }
  void release_variables() override {
    x.reset_data();
    y.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 2, [&](const at::Tensor& g, variable_list& out) {
      if (task_should_compute_output(0)) out[0] = call_dense_bmm(g, offsets[0], y.unpack().transpose(1, 2), max_L);
      if (task_should_compute_output(1)) out[1] = call_jagged_bmm(x.unpack(), g, offsets[0], max_L);
    });
  }
};

at::Tensor dense_bmm_autograd(const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& y,
                              int64_t max_L) {
  no_forward_ad({x, y}, "jagged_dense_bmm");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, y)) {
    auto* n = node_for<DenseBmmBackward>(node, torch::autograd::collect_next_edges(x, y), offsets);
    if (y.requires_grad()) n->x = SavedVariable(x, false);
    if (x.requires_grad()) n->y = SavedVariable(y, false);
    n->max_L = max_L;
  }
  return with_history(node, [&] { return call_dense_bmm(x, offsets, y, max_L); });
}

// Edges: x, y.
struct JaggedBmmBackward : JaggedNode {
  SavedVariable x, y;
  int64_t max_L = 0;
  std::string name() const override { return "JaggedJaggedBmmBackward"; }
  void release_variables() override {
    x.reset_data();
    y.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 2, [&](const at::Tensor& g, variable_list& out) {
      if (task_should_compute_output(0)) out[0] = call_dense_bmm(y.unpack(), offsets[0], g.transpose(1, 2), max_L);
      if (task_should_compute_output(1)) out[1] = call_dense_bmm(x.unpack(), offsets[0], g, max_L);
    });
  }
};

at::Tensor jagged_bmm_autograd(const at::Tensor& x, const at::Tensor& y, const at::Tensor& offsets,
                               int64_t max_L) {
  no_forward_ad({x, y}, "jagged_jagged_bmm");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(x, y)) {
    auto* n = node_for<JaggedBmmBackward>(node, torch::autograd::collect_next_edges(x, y), offsets);
    if (x.requires_grad()) n->y = SavedVariable(y, false);
    if (y.requires_grad()) n->x = SavedVariable(x, false);
    n->max_L = max_L;
  }
  return with_history(node, [&] { return call_jagged_bmm(x, y, offsets, max_L); });
}

// ---- index select --------------------------------------------------------------------------------

std::vector<at::Tensor> call_index_select(const at::Tensor& values, const at::Tensor& lengths,
                                          const at::Tensor& indices, std::optional<int64_t> rows) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mymetaops::jagged_index_select", "")
          .typed<std::vector<at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         std::optional<int64_t>)>();
  return op.call(values, lengths, indices, rows);
}

struct IndexSelectBackward : JaggedNode {  // offsets holds lengths, indices
  c10::SymInt num_input_rows;
  std::string name() const override { return "JaggedIndexSelectBackward"; }
  variable_list apply(variable_list&& grads) override {
    return run(std::move(grads), 1, [&](const at::Tensor& g, variable_list& out) {
      out[0] = call_index_select_backward(g, offsets[0], offsets[1], num_input_rows);
    });
  }
};

std::vector<at::Tensor> index_select_autograd(const at::Tensor& values, const at::Tensor& lengths,
                                              const at::Tensor& indices, std::optional<int64_t> rows) {
  no_forward_ad({values}, "jagged_index_select");
  NodePtr node;
  if (torch::autograd::compute_requires_grad(values)) {
    node_for<IndexSelectBackward>(node, torch::autograd::collect_next_edges(values), {lengths, indices})
        ->num_input_rows = values.sym_size(0);
  }
  std::vector<at::Tensor> out;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    out = call_index_select(values, lengths, indices, rows);
  }
  if (node) torch::autograd::set_history(out[0], node);
  return out;
}

// ---- FBGEMM's ops that return their offsets too ------------------------------------------------

std::tuple<at::Tensor, std::vector<at::Tensor>> dense_to_jagged(const at::Tensor& dense, at::TensorList offsets,
                                                                OptSymInt total_L) {
  return {call_dense_to_jagged(dense, offsets, total_L), offsets.vec()};
}

std::tuple<at::Tensor, std::vector<at::Tensor>> add_jagged_output(const at::Tensor& x, at::TensorList offsets,
                                                                  const at::Tensor& y) {
  return {call_add_jagged_output(x, offsets, y), offsets.vec()};
}

std::tuple<at::Tensor, std::vector<at::Tensor>> mul(const at::Tensor& x, at::TensorList offsets,
                                                    const at::Tensor& y) {
  return {call_mul(x, offsets, y), offsets.vec()};
}

std::tuple<at::Tensor, at::Tensor> softmax(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  return {call_softmax(values, offsets, max_L), offsets};
}

std::tuple<at::Tensor, at::Tensor> dense_bmm(const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& y,
                                             int64_t max_L) {
  return {call_dense_bmm(x, offsets, y, max_L), offsets};
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, Autograd, m) {
  m.impl("jagged_to_padded_dense", &to_padded_dense_autograd);
  m.impl("dense_to_jagged_forward", &dense_to_jagged_autograd);
  m.impl("jagged_dense_elementwise_add", &add_dense_autograd);
  m.impl("jagged_dense_elementwise_add_jagged_output_forward", &add_jagged_autograd);
  m.impl("jagged_dense_elementwise_mul_forward", &mul_autograd);
  m.impl("jagged_softmax_forward", &softmax_autograd);
  m.impl("jagged_dense_bmm_forward", &dense_bmm_autograd);
  m.impl("jagged_jagged_bmm", &jagged_bmm_autograd);
  m.impl("jagged_index_select", &index_select_autograd);
}

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("dense_to_jagged", &dense_to_jagged);
  m.impl("jagged_dense_elementwise_add_jagged_output", &add_jagged_output);
  m.impl("jagged_dense_elementwise_mul", &mul);
  m.impl("jagged_softmax", &softmax);
  m.impl("jagged_dense_bmm", &dense_bmm);
}

}  // namespace mymetaops::jagged
