// Shared by the CPU kernels (embedding_bag.cpp) and the GPU glue (embedding_bag_gpu.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>

#include "mymetaops/types.h"

namespace mymetaops::embedding_bag {

// The schema's `mode` argument.
constexpr int64_t kModeSum = 0;
constexpr int64_t kModeMean = 1;

// Shape, dtype, device and argument checks that need no tensor values (so they are cheap on GPU).
void check_forward_args(const at::Tensor& weight, const at::Tensor& indices,
                        const at::Tensor& offsets, int64_t mode,
                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx);
void check_lookup_args(const at::Tensor& indices, const at::Tensor& offsets,
                       const at::Device& device, const c10::SymInt& num_rows, int64_t mode,
                       int64_t padding_idx, const char* op);
void check_per_sample_weights(const std::optional<at::Tensor>& per_sample_weights,
                              const at::Tensor& indices, at::ScalarType dtype,
                              const at::Device& device, int64_t mode, const char* op);
void check_grad_output(const at::Tensor& grad_output, const at::Tensor& offsets,
                       const c10::SymInt& dim, const char* op);

// The torch dtype as the launcher ABI spells it; raises for dtypes the kernels do not take.
DType launcher_dtype(at::ScalarType type);

// The table with unit column stride (the kernels take any row stride): a copy only when needed.
at::Tensor with_unit_column_stride(const at::Tensor& weight);

}  // namespace mymetaops::embedding_bag
