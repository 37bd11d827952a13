// Shared by the checks and CPU kernels (embedding_bag.cpp), the autograd (embedding_bag_autograd.cpp)
// and the GPU glue (embedding_bag_gpu.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>

#include "mymetaops/types.h"

namespace mymetaops::embedding_bag {

// The schema's `mode` argument.
constexpr int64_t kModeSum = 0;
constexpr int64_t kModeMean = 1;

// Argument checks of the three ops (shapes, dtypes, devices; never values, so they cost no sync).
// Every backend's kernel and the fake kernels call these: the one place arguments are checked.
void check_forward_args(const at::Tensor& weight, const at::Tensor& indices,
                        const at::Tensor& offsets, int64_t mode,
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                        bool include_last_offset);
void check_backward_args(const at::Tensor& grad_output, const at::Tensor& indices,
                         const at::Tensor& offsets, const c10::SymInt& num_rows, int64_t mode,
                         const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx,
                         bool include_last_offset);
void check_per_sample_weights_backward_args(const at::Tensor& grad_output, const at::Tensor& weight,
                                            const at::Tensor& indices, const at::Tensor& offsets,
                                            int64_t mode, int64_t padding_idx,
                                            bool include_last_offset);

// Bags described by `offsets` in either form.
inline int64_t num_bags_of(const at::Tensor& offsets, bool include_last_offset) {
  return offsets.numel() - (include_last_offset ? 1 : 0);
}
inline c10::SymInt sym_num_bags_of(const at::Tensor& offsets, bool include_last_offset) {
  return offsets.sym_numel() - (include_last_offset ? 1 : 0);
}

// The torch dtype as the launcher ABI spells it; raises for dtypes the kernels do not take.
DType launcher_dtype(at::ScalarType type);

// The table with unit column stride (the kernels take any row stride): a copy only when needed.
at::Tensor with_unit_column_stride(const at::Tensor& weight);

}  // namespace mymetaops::embedding_bag
