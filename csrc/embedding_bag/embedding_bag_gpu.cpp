// embedding_bag on the GPU: the kernels the dispatcher calls for CUDA (and ROCm) tensors. Per call:
// check the arguments (once), raise a bad value an earlier kernel recorded, compute the bucket key,
// look the decision up (the model is asked once per bucket), launch. No host synchronization.
// Native kernels are called through the torch-free launcher ABI (mymetaops/embedding_bag.h:
// cuda/ or hip/); Triton candidates through their Python launchers; the vendor candidate is
// torch's own kernel. Compiled only when torch has CUDA or ROCm (torch's build hipifies it).
#include <ATen/ops/_embedding_bag_forward_only.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>

#include "../dispatch/device_errors.h"
#include "../dispatch/dispatch.h"
#include "../dispatch/launch_gpu.h"
#include "embedding_bag.h"
#include "mymetaops/embedding_bag.h"

namespace mymetaops::embedding_bag {
namespace {

using dispatch::Backend;
using dispatch::check_launch;
using dispatch::current_stream;
using dispatch::Decision;
using OptTensor = std::optional<at::Tensor>;

constexpr const char* kForward = "embedding_bag";
constexpr const char* kBackward = "embedding_bag_backward";
constexpr const char* kPswBackward = "embedding_bag_per_sample_weights_backward";

EmbeddingBagConfig native_config(const Decision& d, const char* op) {
  TORCH_CHECK(d.size == 4, op, ": a native config is [vec_bytes, lanes_per_bag, unroll, block_threads]");
  return {static_cast<int32_t>(d.config[0]), static_cast<int32_t>(d.config[1]),
          static_cast<int32_t>(d.config[2]), static_cast<int32_t>(d.config[3])};
}

// The model's view of a call (mymetaops/model: the embedding_bag family's bucket_key), computed
// from `table`: the weight, or grad_output in the weight backward (which writes num_rows rows).
Decision decide(const char* op, const at::Tensor& table, int64_t num_rows, const at::Tensor& indices,
                int64_t num_bags, int64_t mode, bool has_psw) {
  const int64_t dim = table.size(1), elt = table.element_size();
  const int64_t row_bytes = dim * elt, num_indices = indices.numel();
  const int64_t align = dispatch::alignment_bytes(
      {reinterpret_cast<uint64_t>(table.const_data_ptr()), static_cast<uint64_t>(row_bytes),
       static_cast<uint64_t>(table.stride(0) * elt)});
  const auto wd = static_cast<int64_t>(launcher_dtype(table.scalar_type()));
  const auto id = static_cast<int64_t>(launcher_dtype(indices.scalar_type()));
  const int64_t bags_b = num_bags == 0 ? -1 : dispatch::log2_bucket(static_cast<double>(num_bags), 2);
  const int64_t length_b =
      num_bags == 0 || num_indices == 0
          ? -1000
          : dispatch::log2_bucket(static_cast<double>(num_indices) / static_cast<double>(num_bags), 4);
  const int64_t table_bytes = num_rows * row_bytes;
  const int64_t table_b = table_bytes == 0 ? -1 : dispatch::log2_bucket(static_cast<double>(table_bytes), 2);
  const dispatch::Key key = dispatch::make_key(
      op, table.device(), {wd, id, dim, align, mode, has_psw, bags_b, length_b, table_b});
  return dispatch::decide(key, {num_rows, dim, num_bags, num_indices, wd, id, mode, has_psw, align});
}

at::Tensor errors_tensor(const at::Device& device) {
  return dispatch::device_error_record_tensor(device);
}

// The fields the forward and the per-sample-weights backward args share (same names in both).
template <typename Args>
void set_lookup_fields(Args& args, const at::Tensor& weight, const at::Tensor& indices,
                       const at::Tensor& offsets, int64_t num_bags, int64_t padding_idx) {
  args.weight = weight.const_data_ptr();
  args.weight_dtype = launcher_dtype(weight.scalar_type());
  args.num_rows = weight.size(0);
  args.dim = weight.size(1);
  args.weight_row_stride = weight.stride(0);
  args.indices = indices.const_data_ptr();
  args.offsets = offsets.const_data_ptr();
  args.index_dtype = launcher_dtype(indices.scalar_type());
  args.num_indices = indices.numel();
  args.num_bags = num_bags;
  args.num_offsets = offsets.numel();
  args.padding_idx = padding_idx;
  args.errors = dispatch::device_error_record(weight.device());
}

// ---- forward --------------------------------------------------------------------------------

at::Tensor forward_native(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                          int64_t mode, const at::Tensor& psw, int64_t padding_idx, bool last,
                          const EmbeddingBagConfig& config) {
  const int64_t num_bags = num_bags_of(offsets, last);
  at::Tensor out = at::empty({num_bags, weight.size(1)}, weight.options());
  EmbeddingBagForwardArgs args{};
  set_lookup_fields(args, weight, indices, offsets, num_bags, padding_idx);
  args.per_sample_weights = psw.defined() ? psw.const_data_ptr() : nullptr;
  args.mode = mode == kModeMean ? PoolMode::kMean : PoolMode::kSum;
  args.out = out.mutable_data_ptr();
  check_launch(launch_embedding_bag_forward(args, config, current_stream(weight.device())), kForward);
  return out;
}

struct ForwardInputs {
  at::Tensor weight, indices, offsets, psw;
};

ForwardInputs prepare_forward(const at::Tensor& weight, const at::Tensor& indices,
                              const at::Tensor& offsets, int64_t mode, const OptTensor& psw,
                              int64_t padding_idx, bool last) {
  check_forward_args(weight, indices, offsets, mode, psw, padding_idx, last);
  dispatch::raise_recorded_error(weight.device());
  return {with_unit_column_stride(weight), indices.contiguous(), offsets.contiguous(),
          psw ? psw->contiguous() : at::Tensor()};
}

at::Tensor forward_cuda(const at::Tensor& weight_in, const at::Tensor& indices_in,
                        const at::Tensor& offsets_in, int64_t mode, const OptTensor& psw_in,
                        int64_t padding_idx, bool last) {
  const c10::cuda::CUDAGuard guard(weight_in.device());
  const auto [weight, indices, offsets, psw] =
      prepare_forward(weight_in, indices_in, offsets_in, mode, psw_in, padding_idx, last);
  const Decision d = decide(kForward, weight, weight.size(0), indices, num_bags_of(offsets, last),
                            mode, psw.defined());
  switch (d.backend) {
    case Backend::kNative:
      return forward_native(weight, indices, offsets, mode, psw, padding_idx, last,
                            native_config(d, kForward));
    case Backend::kTriton:
      return dispatch::run_triton(kForward, d,
                                  {weight, indices, offsets, mode, psw.defined() ? c10::IValue(psw) : c10::IValue(),
                                   padding_idx, last, errors_tensor(weight.device())});
    case Backend::kVendor:
      return std::get<0>(at::_embedding_bag_forward_only(
          weight, indices, offsets, false, mode, false, psw.defined() ? OptTensor(psw) : std::nullopt,
          last, padding_idx));
  }
  TORCH_CHECK(false, kForward, ": unknown backend");
}

at::Tensor forward_with_config(const at::Tensor& weight_in, const at::Tensor& indices_in,
                               const at::Tensor& offsets_in, int64_t mode, const OptTensor& psw_in,
                               int64_t padding_idx, bool last, at::IntArrayRef config) {
  TORCH_CHECK_VALUE(config.size() == 4, "_embedding_bag_native: config must be [vec_bytes, "
                    "lanes_per_bag, unroll, block_threads], got ", config);
  const c10::cuda::CUDAGuard guard(weight_in.device());
  const auto [weight, indices, offsets, psw] =
      prepare_forward(weight_in, indices_in, offsets_in, mode, psw_in, padding_idx, last);
  const EmbeddingBagConfig c{static_cast<int32_t>(config[0]), static_cast<int32_t>(config[1]),
                             static_cast<int32_t>(config[2]), static_cast<int32_t>(config[3])};
  return forward_native(weight, indices, offsets, mode, psw, padding_idx, last, c);
}

// ---- weight backward ------------------------------------------------------------------------

// The weight backward walks each row's run of lookups with one group; a row looked up far more
// often than this (a small table: a Criteo feature of 3 rows gets 230K lookups in a batch of 65536
// bags, a 36 ms walk on the H200 where torch took 2.6 ms) has its run split into interleaved
// sub-runs, summed in parallel into [num_rows * split, dim] partial sums and reduced after.
constexpr int64_t kRunTarget = 32;
// The partial sums are zeroed and reduced: at most this many bytes of them.
constexpr int64_t kSplitScratchBytes = int64_t{1} << 26;

// A power of two (mymetaops/model/embedding_bag.py's row_split computes the same).
int64_t row_split(int64_t num_indices, int64_t num_rows, int64_t row_bytes) {
  if (num_rows == 0 || row_bytes == 0 || num_indices <= num_rows * kRunTarget) return 1;
  const int64_t want = (num_indices + num_rows * kRunTarget - 1) / (num_rows * kRunTarget);
  const int64_t cap = kSplitScratchBytes / (num_rows * row_bytes);
  int64_t split = 1;
  while (split < want && split * 2 <= cap) split *= 2;
  return split;
}

// Every lookup's row (the sort key), bag and scale, in position order (embedding_bag.h).
struct Plan {
  at::Tensor keys, bags, scales;
};

Plan build_plan(const at::Tensor& indices, const at::Tensor& offsets, int64_t num_rows, int64_t split,
                int64_t mode, const at::Tensor& psw, at::ScalarType value_dtype, int64_t padding_idx,
                bool last) {
  const int64_t n = indices.numel(), num_bags = num_bags_of(offsets, last);
  const bool narrow_keys = num_rows * split < std::numeric_limits<int32_t>::max() - 1;
  const auto options = indices.options();
  Plan plan{at::empty({n}, options.dtype(narrow_keys ? at::kInt : at::kLong)),
            at::empty({n}, options.dtype(at::kLong)), at::Tensor()};
  const bool scaled = psw.defined() || mode == kModeMean;
  if (scaled) plan.scales = at::empty({n}, options.dtype(at::kFloat));
  const at::Tensor scratch = mode == kModeMean ? at::empty({num_bags}, options.dtype(at::kFloat))
                                               : at::Tensor();
  EmbeddingBagBackwardPlanArgs args{};
  args.indices = indices.const_data_ptr();
  args.offsets = offsets.const_data_ptr();
  args.index_dtype = launcher_dtype(indices.scalar_type());
  args.num_indices = n;
  args.num_bags = num_bags;
  args.num_offsets = offsets.numel();
  args.num_rows = num_rows;
  args.row_split = split;
  args.padding_idx = padding_idx;
  args.mode = mode == kModeMean ? PoolMode::kMean : PoolMode::kSum;
  args.per_sample_weights = psw.defined() ? psw.const_data_ptr() : nullptr;
  args.weight_dtype = launcher_dtype(value_dtype);
  args.keys = plan.keys.mutable_data_ptr();
  args.key_dtype = narrow_keys ? DType::kInt32 : DType::kInt64;
  args.bags = plan.bags.mutable_data_ptr<int64_t>();
  args.scales = scaled ? plan.scales.mutable_data_ptr<float>() : nullptr;
  args.bag_scratch = scratch.defined() ? scratch.mutable_data_ptr<float>() : nullptr;
  args.errors = dispatch::device_error_record(indices.device());
  check_launch(launch_embedding_bag_backward_plan(args, current_stream(indices.device())), kBackward);
  return plan;
}

at::Tensor backward_cuda(const at::Tensor& grad_output_in, const at::Tensor& indices_in,
                         const at::Tensor& offsets_in, c10::SymInt num_rows_sym, int64_t mode,
                         const OptTensor& psw_in, int64_t padding_idx, bool last) {
  check_backward_args(grad_output_in, indices_in, offsets_in, num_rows_sym, mode, psw_in,
                      padding_idx, last);
  const c10::cuda::CUDAGuard guard(grad_output_in.device());
  const at::Device device = grad_output_in.device();
  dispatch::raise_recorded_error(device);
  const int64_t num_rows = num_rows_sym.expect_int();
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor indices = indices_in.contiguous(), offsets = offsets_in.contiguous();
  const at::Tensor psw = psw_in ? psw_in->contiguous() : at::Tensor();
  const int64_t num_bags = num_bags_of(offsets, last);
  const Decision d = decide(kBackward, grad_output, num_rows, indices, num_bags, mode, psw.defined());
  const int64_t dim = grad_output.size(1);
  if (indices.numel() == 0 || num_rows == 0 || dim == 0) {
    return at::zeros({num_rows, dim}, grad_output.options());
  }
  const int64_t split = row_split(indices.numel(), num_rows, dim * grad_output.element_size());
  const int64_t sub_rows = num_rows * split;  // rows of the (partial-sum) table the kernel writes
  const Plan plan = build_plan(indices, offsets, num_rows, split, mode, psw, grad_output.scalar_type(),
                               padding_idx, last);
  // Stable: each row's lookups stay in position order, so the sums (and the bits) are deterministic.
  const auto [sorted_rows, order] = at::sort(plan.keys, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const at::Tensor sorted_bags = plan.bags.index_select(0, order);
  const at::Tensor sorted_scales = plan.scales.defined() ? plan.scales.index_select(0, order) : at::Tensor();
  at::Tensor grad_weight;
  if (d.backend == Backend::kTriton) {
    grad_weight = dispatch::run_triton(kBackward, d,
                                       {grad_output, sorted_rows, sorted_bags,
                                        sorted_scales.defined() ? c10::IValue(sorted_scales) : c10::IValue(),
                                        sub_rows});
  } else {
    TORCH_CHECK(d.backend == Backend::kNative, kBackward,
                ": the model chose a backend it has no kernel for");
    grad_weight = at::zeros({sub_rows, dim}, grad_output.options());  // rows no lookup touches stay 0
    EmbeddingBagBackwardArgs args{};
    args.grad_output = grad_output.const_data_ptr();
    args.grad_dtype = launcher_dtype(grad_output.scalar_type());
    args.dim = dim;
    args.num_rows = sub_rows;
    args.num_bags = num_bags;
    args.sorted_rows = sorted_rows.const_data_ptr();
    args.index_dtype = launcher_dtype(sorted_rows.scalar_type());
    args.sorted_bags = sorted_bags.const_data_ptr<int64_t>();
    args.sorted_scales = sorted_scales.defined() ? sorted_scales.const_data_ptr<float>() : nullptr;
    args.num_positions = sorted_rows.numel();
    args.grad_weight = grad_weight.mutable_data_ptr();
    check_launch(launch_embedding_bag_backward(args, native_config(d, kBackward), current_stream(device)),
                 kBackward);
  }
  if (split == 1) return grad_weight;
  // Sub-row s of row r is row r * split + s: sum them in a fixed order (deterministic), in fp32.
  return grad_weight.view({num_rows, split, dim}).sum(1, /*keepdim=*/false, at::kFloat)
      .to(grad_output.scalar_type());
}

// ---- per-sample-weights backward ------------------------------------------------------------

at::Tensor psw_backward_cuda(const at::Tensor& grad_output_in, const at::Tensor& weight_in,
                             const at::Tensor& indices_in, const at::Tensor& offsets_in, int64_t mode,
                             int64_t padding_idx, bool last) {
  check_per_sample_weights_backward_args(grad_output_in, weight_in, indices_in, offsets_in, mode,
                                         padding_idx, last);
  const c10::cuda::CUDAGuard guard(weight_in.device());
  const at::Device device = weight_in.device();
  dispatch::raise_recorded_error(device);
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous(), offsets = offsets_in.contiguous();
  const int64_t num_bags = num_bags_of(offsets, last);
  const Decision d = decide(kPswBackward, weight, weight.size(0), indices, num_bags, mode, true);
  if (d.backend == Backend::kTriton) {
    return dispatch::run_triton(kPswBackward, d,
                                {grad_output, weight, indices, offsets, padding_idx, last,
                                 errors_tensor(device)});
  }
  TORCH_CHECK(d.backend == Backend::kNative, kPswBackward,
              ": the model chose a backend it has no kernel for");
  at::Tensor grad = at::zeros({indices.numel()}, weight.options());
  EmbeddingBagPerSampleWeightsBackwardArgs args{};
  set_lookup_fields(args, weight, indices, offsets, num_bags, padding_idx);
  args.grad_output = grad_output.const_data_ptr();
  args.grad_per_sample_weights = grad.mutable_data_ptr();
  check_launch(launch_embedding_bag_per_sample_weights_backward(args, native_config(d, kPswBackward),
                                                                current_stream(device)),
               kPswBackward);
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CUDA, m) {
  m.impl("embedding_bag", &forward_cuda);
  m.impl("embedding_bag_backward", &backward_cuda);
  m.impl("embedding_bag_per_sample_weights_backward", &psw_backward_cuda);
  m.impl("_embedding_bag_native", &forward_with_config);
}

}  // namespace mymetaops::embedding_bag
