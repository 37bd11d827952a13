// embedding_bag GPU glue: torch tensors in, raw pointers out to the vendor launcher
// (cuda/embedding_bag.cu or hip/embedding_bag.hip; the header is the ABI). Compiled only when torch
// has CUDA or ROCm; on ROCm torch's build hipifies this file (at::cuda -> at::hip masquerading).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "embedding_bag.h"
#include "mymetaops/embedding_bag.h"

namespace mymetaops::embedding_bag {
namespace {

EmbeddingBagConfig to_config(at::IntArrayRef config) {
  TORCH_CHECK(config.size() == 4,
              "embedding_bag (native): config must be [vec_bytes, lanes_per_bag, unroll, "
              "block_threads], got ", config);
  return {static_cast<int32_t>(config[0]), static_cast<int32_t>(config[1]),
          static_cast<int32_t>(config[2]), static_cast<int32_t>(config[3])};
}

void* current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

void check_launch(LaunchError error, const char* op) {
  TORCH_CHECK(error == nullptr, op, " (native kernel): ", error);
}

// The fields the forward and the per-sample-weights backward args share (same names in both).
template <typename Args>
void set_lookup_fields(Args& args, const at::Tensor& weight, const at::Tensor& indices,
                       const at::Tensor& offsets, int64_t padding_idx) {
  args.weight = weight.const_data_ptr();
  args.weight_dtype = launcher_dtype(weight.scalar_type());
  args.num_rows = weight.size(0);
  args.dim = weight.size(1);
  args.weight_row_stride = weight.stride(0);
  args.indices = indices.const_data_ptr();
  args.offsets = offsets.const_data_ptr();
  args.index_dtype = launcher_dtype(indices.scalar_type());
  args.num_indices = indices.numel();
  args.num_bags = offsets.numel() - 1;
  args.padding_idx = padding_idx;
}

at::Tensor forward_native(const at::Tensor& weight_in, const at::Tensor& indices_in,
                          const at::Tensor& offsets_in, int64_t mode,
                          const std::optional<at::Tensor>& per_sample_weights,
                          int64_t padding_idx, at::IntArrayRef config) {
  check_forward_args(weight_in, indices_in, offsets_in, mode, per_sample_weights, padding_idx);
  const c10::cuda::CUDAGuard guard(weight_in.device());
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const at::Tensor psw = per_sample_weights ? per_sample_weights->contiguous() : at::Tensor();
  at::Tensor out = at::empty({offsets.numel() - 1, weight.size(1)}, weight.options());
  EmbeddingBagForwardArgs args{};
  set_lookup_fields(args, weight, indices, offsets, padding_idx);
  args.per_sample_weights = psw.defined() ? psw.const_data_ptr() : nullptr;
  args.mode = mode == kModeMean ? PoolMode::kMean : PoolMode::kSum;
  args.out = out.mutable_data_ptr();
  check_launch(launch_embedding_bag_forward(args, to_config(config), current_stream()),
               "embedding_bag");
  return out;
}

at::Tensor backward_native(const at::Tensor& grad_output_in, const at::Tensor& sorted_rows_in,
                           const at::Tensor& sorted_bags_in,
                           const std::optional<at::Tensor>& sorted_scales_in,
                           c10::SymInt num_rows_sym, at::IntArrayRef config) {
  constexpr const char* op = "embedding_bag_backward";
  const int64_t num_rows = num_rows_sym.expect_int();
  TORCH_CHECK(grad_output_in.dim() == 2, op, ": grad_output must be 2-D, got ",
              grad_output_in.dim(), "-D");
  const int64_t positions = sorted_rows_in.numel();
  TORCH_CHECK(sorted_rows_in.dim() == 1 && (sorted_rows_in.scalar_type() == at::kInt ||
                                            sorted_rows_in.scalar_type() == at::kLong),
              op, ": sorted_rows must be 1-D int32 or int64");
  TORCH_CHECK(sorted_bags_in.dim() == 1 && sorted_bags_in.numel() == positions &&
                  sorted_bags_in.scalar_type() == at::kLong,
              op, ": sorted_bags must be 1-D int64 with one entry per sorted row");
  TORCH_CHECK(!sorted_scales_in || (sorted_scales_in->numel() == positions &&
                                    sorted_scales_in->scalar_type() == at::kFloat),
              op, ": sorted_scales must be float32 with one entry per sorted row");
  const c10::cuda::CUDAGuard guard(grad_output_in.device());
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor sorted_rows = sorted_rows_in.contiguous();
  const at::Tensor sorted_bags = sorted_bags_in.contiguous();
  const at::Tensor scales = sorted_scales_in ? sorted_scales_in->contiguous() : at::Tensor();
  at::Tensor grad_weight = at::zeros({num_rows, grad_output.size(1)}, grad_output.options());
  EmbeddingBagBackwardArgs args{};
  args.grad_output = grad_output.const_data_ptr();
  args.grad_dtype = launcher_dtype(grad_output.scalar_type());
  args.dim = grad_output.size(1);
  args.num_rows = num_rows;
  args.sorted_rows = sorted_rows.const_data_ptr();
  args.index_dtype = launcher_dtype(sorted_rows.scalar_type());
  args.sorted_bags = sorted_bags.const_data_ptr<int64_t>();
  args.sorted_scales = scales.defined() ? scales.const_data_ptr<float>() : nullptr;
  args.num_positions = positions;
  args.grad_weight = grad_weight.mutable_data_ptr();
  check_launch(launch_embedding_bag_backward(args, to_config(config), current_stream()), op);
  return grad_weight;
}

at::Tensor per_sample_weights_backward_native(const at::Tensor& grad_output_in,
                                              const at::Tensor& weight_in,
                                              const at::Tensor& indices_in,
                                              const at::Tensor& offsets_in, int64_t padding_idx,
                                              at::IntArrayRef config) {
  constexpr const char* op = "embedding_bag_per_sample_weights_backward";
  check_forward_args(weight_in, indices_in, offsets_in, kModeSum, std::nullopt, padding_idx);
  check_grad_output(grad_output_in, offsets_in, weight_in.sym_size(1), op);
  TORCH_CHECK(grad_output_in.scalar_type() == weight_in.scalar_type(), op,
              ": grad_output must have the weight's dtype ", weight_in.scalar_type(), ", got ",
              grad_output_in.scalar_type());
  const c10::cuda::CUDAGuard guard(weight_in.device());
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  at::Tensor grad = at::zeros({indices.numel()}, weight.options());
  EmbeddingBagPerSampleWeightsBackwardArgs args{};
  set_lookup_fields(args, weight, indices, offsets, padding_idx);
  args.grad_output = grad_output.const_data_ptr();
  args.grad_per_sample_weights = grad.mutable_data_ptr();
  check_launch(
      launch_embedding_bag_per_sample_weights_backward(args, to_config(config), current_stream()),
      op);
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CUDA, m) {
  m.impl("_embedding_bag_native", &forward_native);
  m.impl("_embedding_bag_backward_native", &backward_native);
  m.impl("_embedding_bag_per_sample_weights_backward_native", &per_sample_weights_backward_native);
}

}  // namespace mymetaops::embedding_bag
