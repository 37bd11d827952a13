// Shared by the checks, the CPU kernels and the autograd of the jagged family (FBGEMM's jagged ops:
// names, schemas and semantics of torch.ops.fbgemm.*).
//
// A jagged tensor is values [total, D] (or [total]) with n >= 1 levels of offsets: offsets[0] has
// B + 1 entries indexing the positions of offsets[1], ..., and the last level indexes the rows of
// values. Sequence b's rows at level k are offsets[k][s] .. offsets[k][s + 1] for its position s
// there. Its dense form is [B, max_lengths..., D]; position (b, j0, .., j_{n-1}) holds the row reached
// by walking the levels with j_k, or padding where j_k runs past a sequence; rows past a dense
// dimension (a sequence longer than max_lengths[k]) are truncated.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>
#include <string>
#include <vector>

namespace mymetaops::jagged {

using OptSymInt = std::optional<c10::SymInt>;

// ---- argument checks: shapes, dtypes, devices, never values (no sync). Every backend's kernel and
// the fake kernels (through the _<op>_check ops) call these: the one place arguments are checked.
void check_to_padded_dense(const at::Tensor& values, at::TensorList offsets,
                           c10::SymIntArrayRef max_lengths);
void check_dense_to_jagged(const at::Tensor& dense, at::TensorList offsets, const OptSymInt& total_L);
// jagged_dense_elementwise_add, its _jagged_output form and _mul: y is [B, max_lengths..., D].
void check_elementwise(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y);
void check_softmax(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L);
void check_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                            const at::Tensor& offsets, int64_t max_L);
void check_dense_bmm(const at::Tensor& x_values, const at::Tensor& offsets, const at::Tensor& y,
                     int64_t max_L);
void check_jagged_bmm(const at::Tensor& x_values, const at::Tensor& y_values,
                      const at::Tensor& offsets, int64_t max_L);
void check_index_select(const at::Tensor& values, const at::Tensor& lengths, const at::Tensor& indices);
void check_index_select_backward(const at::Tensor& grad_output, const at::Tensor& lengths,
                                 const at::Tensor& indices, const c10::SymInt& num_input_rows);

// ---- values, on the CPU (GPU kernels record bad values on the device instead, without a sync) --
// Every level non-decreasing and >= 0, each level's last entry within the next level's positions
// (offsets[k + 1].numel() - 1) or, for the last level, within num_rows. Raises naming the entry.
void check_offsets_values(const char* op, at::TensorList offsets, int64_t num_rows);
// The levels as contiguous int64 CPU tensors (a copy only where needed).
std::vector<at::Tensor> offsets_as_int64(at::TensorList offsets);
// Sequence b's rows of a single-level jagged tensor: [begin, begin + length) with the length
// capped at max_L.
struct Rows {
  int64_t begin, length;
};
inline Rows rows_of(const int64_t* offsets, int64_t b, int64_t max_L) {
  const int64_t begin = offsets[b], length = offsets[b + 1] - begin;
  return {begin, length < max_L ? length : max_L};
}

// values viewed as [total, D] (D = 1 for 1-D values).
int64_t inner_dim(const at::Tensor& values);

// ---- the family's kernel ops through the dispatcher: the composites and the autograd build on
// them, so every backend, a forced backend and the fake kernels apply.
at::Tensor call_to_padded_dense(const at::Tensor& values, at::TensorList offsets,
                                c10::SymIntArrayRef max_lengths, double padding_value);
at::Tensor call_dense_to_jagged(const at::Tensor& dense, at::TensorList offsets, const OptSymInt& total_L);
at::Tensor call_add_jagged_output(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y);
at::Tensor call_mul(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y);
at::Tensor call_softmax(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L);
at::Tensor call_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                 const at::Tensor& offsets, int64_t max_L);
at::Tensor call_dense_bmm(const at::Tensor& x_values, const at::Tensor& offsets, const at::Tensor& y,
                          int64_t max_L);
at::Tensor call_jagged_bmm(const at::Tensor& x_values, const at::Tensor& y_values,
                           const at::Tensor& offsets, int64_t max_L);
at::Tensor call_index_select_backward(const at::Tensor& grad_output, const at::Tensor& lengths,
                                      const at::Tensor& indices, const c10::SymInt& num_input_rows);

// The native bmm kernels of this build (jagged_bmm_kernel_names), set by the GPU glue; mymetaops._C's
// _native_jagged_bmm_kernels() lists them (empty without GPU kernels) for the model to check its mirror.
using BmmKernelNamesProvider = std::vector<std::string> (*)();
void set_native_bmm_kernels_provider(BmmKernelNamesProvider provider);

}  // namespace mymetaops::jagged
