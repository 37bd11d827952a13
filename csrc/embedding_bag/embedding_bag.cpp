// embedding_bag: argument checks and the CPU kernels (forward, weight gradient, per-sample-weights
// gradient). The CPU kernels check index and offset values and raise; GPU kernels never read out of
// bounds, and the Python wrapper validates values on GPU before launching (see ops/embedding_bag.py).
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

void check_lookup_args(const at::Tensor& indices, const at::Tensor& offsets,
                       const at::Device& device, const c10::SymInt& num_rows, int64_t mode,
                       int64_t padding_idx, const char* op) {
  TORCH_CHECK(indices.dim() == 1, op, ": indices must be 1-D, got ", indices.dim(), "-D");
  TORCH_CHECK(offsets.dim() == 1, op, ": offsets must be 1-D, got ", offsets.dim(), "-D");
  TORCH_SYM_CHECK(offsets.sym_numel().sym_ge(1),
                  op, ": offsets must have num_bags + 1 >= 1 entries, got none");
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

void check_forward_args(const at::Tensor& weight, const at::Tensor& indices,
                        const at::Tensor& offsets, int64_t mode,
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
  constexpr const char* op = "embedding_bag";
  TORCH_CHECK(weight.dim() == 2, op, ": weight must be 2-D [num_rows, dim], got ", weight.dim(),
              "-D");
  TORCH_CHECK(is_table_dtype(weight.scalar_type()), op,
              ": weight must be float32, float16 or bfloat16, got ", weight.scalar_type());
  check_lookup_args(indices, offsets, weight.device(), weight.sym_size(0), mode, padding_idx, op);
  check_per_sample_weights(per_sample_weights, indices, weight.scalar_type(), weight.device(),
                           mode, op);
}

void check_grad_output(const at::Tensor& grad_output, const at::Tensor& offsets,
                       const c10::SymInt& dim, const char* op) {
  TORCH_CHECK(grad_output.dim() == 2, op, ": grad_output must be 2-D, got ", grad_output.dim(),
              "-D");
  TORCH_SYM_CHECK(grad_output.sym_size(0).sym_eq(offsets.sym_numel() - 1)
                      .sym_and(grad_output.sym_size(1).sym_eq(dim)),
                  op, ": grad_output must be [num_bags=", offsets.sym_numel() - 1, ", dim=", dim,
                  "], got ", grad_output.sym_sizes());
  TORCH_CHECK(is_table_dtype(grad_output.scalar_type()), op,
              ": grad_output must be float32, float16 or bfloat16, got ",
              grad_output.scalar_type());
  TORCH_CHECK(grad_output.device() == offsets.device(), op,
              ": grad_output must be on the device of the indices, got ", grad_output.device(),
              " and ", offsets.device());
}

namespace {

// Raises unless offsets are non-negative, non-decreasing and end within indices, and every index
// is a row of the table. Values are read here, so this runs on the CPU only.
template <typename index_t>
void check_values_cpu(const index_t* idx, int64_t num_indices, const index_t* off,
                      int64_t num_bags, int64_t num_rows) {
  TORCH_CHECK(off[0] >= 0, "embedding_bag: offsets[0] must be >= 0, got ", off[0]);
  for (int64_t b = 0; b < num_bags; ++b) {
    TORCH_CHECK(off[b + 1] >= off[b], "embedding_bag: offsets must be non-decreasing, but offsets[",
                b + 1, "] = ", off[b + 1], " < offsets[", b, "] = ", off[b]);
  }
  TORCH_CHECK(off[num_bags] <= num_indices, "embedding_bag: the last offset (", off[num_bags],
              ") is past the end of indices (", num_indices, " entries)");
  for (int64_t i = off[0]; i < off[num_bags]; ++i) {
    TORCH_CHECK(idx[i] >= 0 && idx[i] < num_rows, "embedding_bag: index ", idx[i], " at position ",
                i, " is out of range for a table of ", num_rows, " rows");
  }
}

std::optional<at::Tensor> contiguous_if_present(const std::optional<at::Tensor>& t) {
  return t ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

template <typename scalar_t, typename index_t>
void forward_cpu_kernel(const at::Tensor& weight, const index_t* idx, const index_t* off,
                        int64_t num_bags, int64_t mode, const scalar_t* psw, int64_t padding_idx,
                        at::Tensor& out) {
  const int64_t dim = weight.size(1);
  const int64_t row_stride = weight.stride(0);
  const scalar_t* w = weight.const_data_ptr<scalar_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  at::parallel_for(0, num_bags, kBagsPerTask, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(dim);
    for (int64_t b = begin; b < end; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      int64_t count = 0;
      for (int64_t i = off[b]; i < off[b + 1]; ++i) {
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

// Index dtype dispatch shared by the three CPU ops: checks values, then calls fn(idx, off).
template <typename Fn>
void with_checked_indices(const at::Tensor& indices, const at::Tensor& offsets, int64_t num_rows,
                          Fn&& fn) {
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "embedding_bag_cpu_indices", [&] {
    const index_t* idx = indices.const_data_ptr<index_t>();
    const index_t* off = offsets.const_data_ptr<index_t>();
    check_values_cpu(idx, indices.numel(), off, offsets.numel() - 1, num_rows);
    fn(idx, off);
  });
}

at::Tensor forward_cpu(const at::Tensor& weight_in, const at::Tensor& indices_in,
                       const at::Tensor& offsets_in, int64_t mode,
                       const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
  check_forward_args(weight_in, indices_in, offsets_in, mode, per_sample_weights, padding_idx);
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const std::optional<at::Tensor> psw = contiguous_if_present(per_sample_weights);
  const int64_t num_bags = offsets.numel() - 1;
  at::Tensor out = at::empty({num_bags, weight.size(1)}, weight.options());
  with_checked_indices(indices, offsets, weight.size(0), [&](auto idx, auto off) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(),
                                    "embedding_bag_cpu", [&] {
      forward_cpu_kernel<scalar_t>(weight, idx, off, num_bags, mode,
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
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
  const int64_t num_rows = num_rows_sym.expect_int();
  TORCH_CHECK(num_rows >= 0, "embedding_bag_backward: num_rows must be >= 0, got ", num_rows);
  const at::Tensor grad_output = grad_output_in.contiguous();
  TORCH_CHECK(grad_output.dim() == 2, "embedding_bag_backward: grad_output must be 2-D, got ",
              grad_output.dim(), "-D");
  const int64_t dim = grad_output.size(1);
  constexpr const char* op = "embedding_bag_backward";
  check_lookup_args(indices_in, offsets_in, grad_output.device(), num_rows, mode, padding_idx, op);
  check_grad_output(grad_output, offsets_in, dim, op);
  check_per_sample_weights(per_sample_weights, indices_in, grad_output.scalar_type(),
                           grad_output.device(), mode, op);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const std::optional<at::Tensor> psw_tensor = contiguous_if_present(per_sample_weights);
  const int64_t num_bags = offsets.numel() - 1;
  at::Tensor acc = at::zeros({num_rows, dim}, grad_output.options().dtype(at::kFloat));
  float* a = acc.mutable_data_ptr<float>();
  with_checked_indices(indices, offsets, num_rows, [&](auto idx, auto off) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_output.scalar_type(),
                                    "embedding_bag_backward_cpu", [&] {
      const scalar_t* g = grad_output.const_data_ptr<scalar_t>();
      const scalar_t* psw =
          psw_tensor ? psw_tensor->const_data_ptr<scalar_t>() : nullptr;
      at::parallel_for(0, dim, 1, [&](int64_t d0, int64_t d1) {
        for (int64_t b = 0; b < num_bags; ++b) {
          int64_t count = 0;
          for (int64_t i = off[b]; i < off[b + 1]; ++i) count += idx[i] != padding_idx;
          const float norm = (mode == kModeMean && count > 0) ? 1.0f / count : 1.0f;
          for (int64_t i = off[b]; i < off[b + 1]; ++i) {
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
                                           int64_t padding_idx) {
  check_forward_args(weight_in, indices_in, offsets_in, mode, std::nullopt, padding_idx);
  TORCH_CHECK(mode == kModeSum, "embedding_bag_per_sample_weights_backward: per_sample_weights "
              "are only supported with mode='sum'");
  check_grad_output(grad_output_in, offsets_in, weight_in.sym_size(1),
                    "embedding_bag_per_sample_weights_backward");
  TORCH_CHECK(grad_output_in.scalar_type() == weight_in.scalar_type(),
              "embedding_bag_per_sample_weights_backward: grad_output must have the weight's "
              "dtype ", weight_in.scalar_type(), ", got ", grad_output_in.scalar_type());
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::Tensor weight = with_unit_column_stride(weight_in);
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor offsets = offsets_in.contiguous();
  const int64_t num_bags = offsets.numel() - 1;
  const int64_t dim = weight.size(1);
  at::Tensor grad = at::zeros({indices.numel()}, weight.options());
  with_checked_indices(indices, offsets, weight.size(0), [&](auto idx, auto off) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(),
                                    "embedding_bag_psw_backward_cpu", [&] {
      const scalar_t* g = grad_output.const_data_ptr<scalar_t>();
      const scalar_t* w = weight.const_data_ptr<scalar_t>();
      scalar_t* out = grad.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, num_bags, kBagsPerTask, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          for (int64_t i = off[b]; i < off[b + 1]; ++i) {
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

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("_embedding_bag_check", &check_forward_args);
}

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("embedding_bag", &forward_cpu);
  m.impl("embedding_bag_backward", &backward_cpu);
  m.impl("embedding_bag_per_sample_weights_backward", &per_sample_weights_backward_cpu);
}

}  // namespace mymetaops::embedding_bag
