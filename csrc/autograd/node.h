// What the C++ autograd of every op family shares: making a Node across torch versions and refusing
// forward-mode AD clearly where an op does not implement it.
#pragma once
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace mymetaops::autograd {

// Nodes are written as torch's own derivative code is (not as torch::autograd::Function), so that
// torch.func's grad / vjp / jacrev transforms work through them. Edges: the differentiable inputs.
// The node handle: std::shared_ptr<Node> up to torch 2.13, c10::intrusive_ptr<Node> from 2.14.
using NodePtr = std::decay_t<decltype(std::declval<const at::TensorBase&>().grad_fn())>;

template <typename Derived>
Derived* make_node(NodePtr& node, torch::autograd::edge_list edges) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    node = std::shared_ptr<Derived>(new Derived());
  } else {
    node = c10::make_intrusive<Derived>();
  }
  node->set_next_edges(std::move(edges));
  return static_cast<Derived*>(node.get());
}

// An op without forward-mode AD refuses a tangent rather than return a zero one.
inline void no_forward_ad(std::initializer_list<std::optional<at::Tensor>> inputs, const char* op) {
  for (const std::optional<at::Tensor>& t : inputs) {
    TORCH_CHECK(!torch::autograd::isFwGradDefined(t), "mymetaops.", op,
                ": forward-mode AD (torch.func.jvp / jacfwd / forward_ad) is not implemented for "
                "this op; use reverse mode (torch.func.vjp / jacrev / backward)");
  }
}

}  // namespace mymetaops::autograd
