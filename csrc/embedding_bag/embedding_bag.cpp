// embedding_bag: argument checks and the CPU kernels (forward, weight gradient, per-sample-weights
// gradient). The CPU kernels check index and offset values and raise; the GPU kernels never read
// out of bounds and record bad values for the host to raise later, without a sync.
#include "embedding_bag.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mymetaops::embedding_bag {

namespace {

// Bags per at::parallel_for task: enough work per task to amortize scheduling.
constexpr int64_t kBagsPerTask = 64;

bool is_table_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

}  // namespace

DType launcher_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default: TORCH_CHECK(false, "mymetaops: unsupported dtype ", type);
  }
}

at::Tensor with_unit_column_stride(const at::Tensor& weight) {
  return (weight.stride(1) == 1 || weight.size(1) == 1) ? weight : weight.contiguous();
}

namespace {

void check_lookup_args(const at::Tensor& indices, const at::Tensor& offsets,
                       const at::Device& device, const c10::SymInt& num_rows, int64_t mode,
                       int64_t padding_idx, bool include_last_offset, const char* op) {
  TORCH_CHECK(indices.dim() == 1, op, ": indices must be 1-D, got ", indices.dim(), "-D");
  TORCH_CHECK(offsets.dim() == 1, op, ": offsets must be 1-D, got ", offsets.dim(), "-D");
  if (include_last_offset) {
    TORCH_SYM_CHECK(offsets.sym_numel().sym_ge(1), op,
                    ": with include_last_offset=True offsets needs num_bags + 1 >= 1 entries, got none");
  }
  TORCH_CHECK(indices.scalar_type() == at::kInt || indices.scalar_type() == at::kLong, op,
              ": indices must be int32 or int64, got ", indices.scalar_type());
  TORCH_CHECK(offsets.scalar_type() == indices.scalar_type(), op,
              ": offsets and indices must have the same dtype, got ", offsets.scalar_type(),
              " and ", indices.scalar_type());
  TORCH_CHECK(indices.device() == device && offsets.device() == device, op,
              ": the table, indices and offsets must be on one device, got ", device, ", ",
              indices.device(), ", ", offsets.device());
  TORCH_CHECK(mode == kModeSum || mode == kModeMean, op,
              ": mode must be 0 (sum) or 1 (mean), got ", mode);
  TORCH_CHECK(padding_idx >= -1, op, ": padding_idx must be -1 (none) or a row, got ",
              padding_idx);
  TORCH_SYM_CHECK(num_rows.sym_gt(padding_idx), op, ": padding_idx must be -1 (none) or in [0, ",
                  num_rows, "), got ", padding_idx);
}

void check_per_sample_weights(const std::optional<at::Tensor>& per_sample_weights,
                              const at::Tensor& indices, at::ScalarType dtype,
                              const at::Device& device, int64_t mode, const char* op) {
  if (!per_sample_weights.has_value()) return;
  const at::Tensor& psw = *per_sample_weights;
  TORCH_CHECK(mode == kModeSum, op, ": per_sample_weights are only supported with mode='sum'");
  TORCH_CHECK(psw.dim() == 1, op, ": per_sample_weights must be 1-D, got ", psw.dim(), "-D");
  TORCH_SYM_CHECK(psw.sym_numel().sym_eq(indices.sym_numel()), op,
                  ": per_sample_weights must have one entry per index (", indices.sym_numel(),
                  "), got ", psw.sym_numel());
  TORCH_CHECK(psw.scalar_type() == dtype, op, ": per_sample_weights must have the table's dtype ",
              dtype, ", got ", psw.scalar_type());
  TORCH_CHECK(psw.device() == device, op, ": per_sample_weights must be on the table's device ",
              device, ", got ", psw.device());
}

void check_table(const at::Tensor& table, const char* what, const char* op) {
  TORCH_CHECK(table.dim() == 2, op, ": ", what, " must be 2-D, got ", table.dim(), "-D");
  TORCH_CHECK(is_table_dtype(table.scalar_type()), op, ": ", what,
              " must be float32, float16 or bfloat16, got ", table.scalar_type());
}

void check_grad_output(const at::Tensor& grad_output, const at::Tensor& offsets,
                       bool include_last_offset, const c10::SymInt& dim, const char* op) {
  check_table(grad_output, "grad_output", op);
  TORCH_SYM_CHECK(grad_output.sym_size(0).sym_eq(sym_num_bags_of(offsets, include_last_offset))
                      .sym_and(grad_output.sym_size(1).sym_eq(dim)),
                  op, ": grad_output must be [num_bags=", sym_num_bags_of(offsets, include_last_offset),
                  ", dim=", dim, "], got ", grad_output.sym_sizes());
}

}  // namespace

void check_forward_args(const at::Tensor& weight, const at::Tensor& indices,
                        const at::Tensor& offsets, int64_t mode,
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                        bool include_last_offset) {
  constexpr const char* op = "embedding_bag";
  check_table(weight, "weight [num_rows, dim]", op);
  check_lookup_args(indices, offsets, weight.device(), weight.sym_size(0), mode, padding_idx,
                    include_last_offset, op);
  check_per_sample_weights(per_sample_weights, indices, weight.scalar_type(), weight.device(),
                           mode, op);
}

void check_backward_args(const at::Tensor& grad_output, const at::Tensor& indices,
                         const at::Tensor& offsets, const c10::SymInt& num_rows, int64_t mode,
                         const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                         bool include_last_offset) {
  constexpr const char* op = "embedding_bag_backward";
  TORCH_SYM_CHECK(num_rows.sym_ge(0), op, ": num_rows must be >= 0, got ", num_rows);
  check_table(grad_output, "grad_output", op);
  check_lookup_args(indices, offsets, grad_output.device(), num_rows, mode, padding_idx,
                    include_last_offset, op);
  check_grad_output(grad_output, offsets, include_last_offset, grad_output.sym_size(1), op);
  check_per_sample_weights(per_sample_weights, indices, grad_output.scalar_type(),
                           grad_output.device(), mode, op);
}

void check_per_sample_weights_backward_args(const at::Tensor& grad_output, const at::Tensor& weight,
                                            const at::Tensor& indices, const at::Tensor& offsets,
                                            int64_t mode, int64_t padding_idx,
                                            bool include_last_offset) {
  constexpr const char* op = "embedding_bag_per_sample_weights_backward";
  check_table(weight, "weight [num_rows, dim]", op);
  check_lookup_args(indices, offsets, weight.device(), weight.sym_size(0), mode, padding_idx,
                    include_last_offset, op);
  TORCH_CHECK(mode == kModeSum, op, ": per_sample_weights are only supported with mode='sum'");
  check_grad_output(grad_output, offsets, include_last_offset, weight.sym_size(1), op);
  TORCH_CHECK(grad_output.scalar_type() == weight.scalar_type(), op,
              ": grad_output must have the weight's dtype ", weight.scalar_type(), ", got ",
              grad_output.scalar_type());
  TORCH_CHECK(grad_output.device() == weight.device(), op,
              ": grad_output must be on the weight's device ", weight.device(), ", got ",
              grad_output.device());
}

namespace {

// Bag b of either offsets form: [off[b], end(b)), where the torch form's last bag ends at the end
// of indices.
template <typename index_t>
struct BagView {
  const index_t* idx;
  const index_t* off;
  int64_t num_indices, num_bags, num_offsets;

  int64_t start(int64_t b) const { return off[b]; }
  int64_t end(int64_t b) const { return b + 1 < num_offsets ? off[b + 1] : num_indices; }
};

// Raises unless offsets are non-negative, non-decreasing and end within indices, and every index
// inside a bag is a row of the table. Values are read here, so this runs on the CPU only
// (the GPU kernels record bad values instead: csrc/dispatch/device_errors.h).
template <typename index_t>
void check_values_cpu(const BagView<index_t>& bags, int64_t num_rows) {
  if (bags.num_offsets == 0) return;
  const index_t* off = bags.off;
  TORCH_CHECK_VALUE(off[0] >= 0, "embedding_bag: offsets must be non-negative, got offsets[0] = ",
                    off[0]);
  for (int64_t b = 1; b < bags.num_offsets; ++b) {
    TORCH_CHECK_VALUE(off[b] >= off[b - 1], "embedding_bag: offsets must be non-decreasing, but offsets[",
                      b, "] = ", off[b], " is below offsets[", b - 1, "] = ", off[b - 1]);
  }
  const int64_t last = bags.num_offsets - 1;
  TORCH_CHECK_VALUE(off[last] <= bags.num_indices, "embedding_bag: offsets[", last, "] = ", off[last],
                    " is past the end of the ", bags.num_indices, " indices");
  const int64_t end = bags.num_bags ? bags.end(bags.num_bags - 1) : off[0];
  for (int64_t i = off[0]; i < end; ++i) {
    TORCH_CHECK_INDEX(bags.idx[i] >= 0 && bags.idx[i] < num_rows, "embedding_bag: index ",
                      bags.idx[i], " at position ", i, " is out of range for a table of ", num_rows,
                      " rows");
  }
}

std::optional<at::Tensor> contiguous_if_present(const std::optional<at::Tensor>& t) {
  return t ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

template <typename scalar_t, typename index_t>
void forward_cpu_kernel(const at::Tensor& weight, const BagView<index_t>& bags, int64_t mode,
                        const scalar_t* psw, int64_t padding_idx, at::Tensor& out) {
  const int64_t dim = weight.size(1);
  const int64_t row_stride = weight.stride(0);
  const scalar_t* w = weight.const_data_ptr<scalar_t>();
  const index_t* idx = bags.idx;
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  at::parallel_for(0, bags.num_bags, kBagsPerTask, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(dim);
    for (int64_t b = begin; b < end; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      int64_t count = 0;
      for (int64_t i = bags.start(b); i < bags.end(b); ++i) {
        if (idx[i] == padding_idx) continue;
        const scalar_t* row = w + static_cast<int64_t>(idx[i]) * row_stride;
        const float scale = psw ? static_cast<float>(psw[i]) : 1.0f;
        for (int64_t d = 0; d < dim; ++d) acc[d] += scale * static_cast<float>(row[d]);
        ++count;
      }
      const float norm = (mode == kModeMean && count > 0) ? 1.0f / count : 1.0f;
      for (int64_t d = 0; d < dim; ++d) o[b * dim + d] = static_cast<scalar_t>(acc[d] * norm);
    }
  });
}

// Index dtype dispatch shared by the three CPU ops: checks values, then calls fn(bags).
template <typename Fn>
void with_checked_bags(const at::Tensor& indices, const at::Tensor& offsets,
                       bool include_last_offset, int64_t num_rows, Fn&& fn) {
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "embedding_bag_cpu_indices", [&] {
    const BagView<index_t> bags{indices.const_data_ptr<index_t>(), offsets.const_data_ptr<index_t>(),
                                indices.numel(), num_bags_of(offsets, include_last_offset),
                                offsets.numel()};
    check_values_cpu(bags, num_rows);
    fn(bags);
  });
}

at::Tensor forward_cpu(const at::Tensor& weight_in, const at::Tensor& indices_in,
                       const at::Tensor& offsets_in, int64_t mode,
                       const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                       bool include_last_offset) {
  check_forward_args(weight_in, indices_in, offsets_in, mode, per_sample_weights, padding_idx,
                     include_last_offset);
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const std::optional<at::Tensor> psw = contiguous_if_present(per_sample_weights);
  at::Tensor out = at::empty({num_bags_of(offsets, include_last_offset), weight.size(1)},
                             weight.options());
  with_checked_bags(indices, offsets, include_last_offset, weight.size(0), [&](const auto& bags) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(),
                                    "embedding_bag_cpu", [&] {
      forward_cpu_kernel<scalar_t>(weight, bags, mode,
                                   psw ? psw->const_data_ptr<scalar_t>() : nullptr, padding_idx,
                                   out);
    });
  });
  return out;
}

// Dense weight gradient, accumulated in fp32. Tasks own disjoint column ranges, so bags are summed
// in order with no races and the result is deterministic.
at::Tensor backward_cpu(const at::Tensor& grad_output_in, const at::Tensor& indices_in,
                        const at::Tensor& offsets_in, c10::SymInt num_rows_sym, int64_t mode,
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                        bool include_last_offset) {
  check_backward_args(grad_output_in, indices_in, offsets_in, num_rows_sym, mode,
                      per_sample_weights, padding_idx, include_last_offset);
  const int64_t num_rows = num_rows_sym.expect_int();
  const at::Tensor grad_output = grad_output_in.contiguous();
  const int64_t dim = grad_output.size(1);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const std::optional<at::Tensor> psw_tensor = contiguous_if_present(per_sample_weights);
  at::Tensor acc = at::zeros({num_rows, dim}, grad_output.options().dtype(at::kFloat));
  float* a = acc.mutable_data_ptr<float>();
  with_checked_bags(indices, offsets, include_last_offset, num_rows, [&](const auto& bags) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_output.scalar_type(),
                                    "embedding_bag_backward_cpu", [&] {
      const scalar_t* g = grad_output.const_data_ptr<scalar_t>();
      const scalar_t* psw = psw_tensor ? psw_tensor->const_data_ptr<scalar_t>() : nullptr;
      const auto* idx = bags.idx;
      at::parallel_for(0, dim, 1, [&](int64_t d0, int64_t d1) {
        for (int64_t b = 0; b < bags.num_bags; ++b) {
          int64_t count = 0;
          for (int64_t i = bags.start(b); i < bags.end(b); ++i) count += idx[i] != padding_idx;
          const float norm = (mode == kModeMean && count > 0) ? 1.0f / count : 1.0f;
          for (int64_t i = bags.start(b); i < bags.end(b); ++i) {
            if (idx[i] == padding_idx) continue;
            const float scale = norm * (psw ? static_cast<float>(psw[i]) : 1.0f);
            float* row = a + static_cast<int64_t>(idx[i]) * dim;
            for (int64_t d = d0; d < d1; ++d) row[d] += scale * static_cast<float>(g[b * dim + d]);
          }
        }
      });
    });
  });
  return acc.to(grad_output.scalar_type());
}

at::Tensor per_sample_weights_backward_cpu(const at::Tensor& grad_output_in,
                                           const at::Tensor& weight_in,
                                           const at::Tensor& indices_in,
                                           const at::Tensor& offsets_in, int64_t mode,
                                           int64_t padding_idx, bool include_last_offset) {
  check_per_sample_weights_backward_args(grad_output_in, weight_in, indices_in, offsets_in, mode,
                                         padding_idx, include_last_offset);
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const int64_t dim = weight.size(1);
  at::Tensor grad = at::zeros({indices.numel()}, weight.options());
  with_checked_bags(indices, offsets, include_last_offset, weight.size(0), [&](const auto& bags) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(),
                                    "embedding_bag_psw_backward_cpu", [&] {
      const scalar_t* g = grad_output.const_data_ptr<scalar_t>();
      const scalar_t* w = weight.const_data_ptr<scalar_t>();
      scalar_t* out = grad.mutable_data_ptr<scalar_t>();
      const auto* idx = bags.idx;
      at::parallel_for(0, bags.num_bags, kBagsPerTask, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          for (int64_t i = bags.start(b); i < bags.end(b); ++i) {
            if (idx[i] == padding_idx) continue;
            const scalar_t* row = w + static_cast<int64_t>(idx[i]) * weight.stride(0);
            float dot = 0.0f;
            for (int64_t d = 0; d < dim; ++d) {
              dot += static_cast<float>(g[b * dim + d]) * static_cast<float>(row[d]);
            }
            out[i] = static_cast<scalar_t>(dot);
          }
        }
      });
    });
  });
  return grad;
}

// The dispatcher matches SymInt arguments only by value.
void check_backward_args_op(const at::Tensor& grad_output, const at::Tensor& indices,
                            const at::Tensor& offsets, c10::SymInt num_rows, int64_t mode,
                            const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                            bool include_last_offset) {
  check_backward_args(grad_output, indices, offsets, num_rows, mode, per_sample_weights, padding_idx,
                      include_last_offset);
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("_embedding_bag_check", &check_forward_args);
  m.impl("_embedding_bag_backward_check", &check_backward_args_op);
  m.impl("_embedding_bag_per_sample_weights_backward_check",
         &check_per_sample_weights_backward_args);
}

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("embedding_bag", &forward_cpu);
  m.impl("embedding_bag_backward", &backward_cpu);
  m.impl("embedding_bag_per_sample_weights_backward", &per_sample_weights_backward_cpu);
}

}  // namespace mymetaops::embedding_bag
