// The jagged family's argument checks (one place per op), the value checks of offsets on the CPU,
// and the dispatcher calls the composites and the autograd share.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {

bool is_value_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

bool is_index_dtype(at::ScalarType t) { return t == at::kInt || t == at::kLong; }

void check_values(const at::Tensor& values, const char* name, const char* op, bool allow_1d) {
  TORCH_CHECK_VALUE(values.dim() == 2 || (allow_1d && values.dim() == 1), op, ": ", name, " must be ",
                    allow_1d ? "[total, D] or [total]" : "[total, D]", ", got ", values.dim(), "-D");
  TORCH_CHECK_TYPE(is_value_dtype(values.scalar_type()), op, ": ", name,
                   " must be float32, float16 or bfloat16 (float64 on the CPU), got ",
                   values.scalar_type());
}

void check_index_tensor(const at::Tensor& t, const char* name, const char* op, const at::Device& device) {
  TORCH_CHECK_VALUE(t.dim() == 1, op, ": ", name, " must be 1-D, got ", t.dim(), "-D");
  TORCH_CHECK_TYPE(is_index_dtype(t.scalar_type()), op, ": ", name, " must be int32 or int64, got ",
                   t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == device, op, ": ", name, " must be on ", device, " with the values, got ",
                    t.device());
}

void check_offsets(at::TensorList offsets, const char* name, const char* op, const at::Device& device) {
  TORCH_CHECK_VALUE(!offsets.empty(), op, ": ", name, " needs one offsets tensor per jagged dimension, got none");
  for (const at::Tensor& o : offsets) {
    check_index_tensor(o, name, op, device);
    TORCH_SYM_CHECK(o.sym_numel().sym_ge(1), op, ": ", name,
                    " needs B + 1 >= 1 entries per level (the start of every sequence and the end of the "
                    "last), got an empty tensor");
  }
}

void check_offsets(const at::Tensor& offsets, const char* op, const at::Device& device) {
  check_offsets(at::TensorList(offsets), "x_offsets", op, device);
}

void check_same(const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name,
                const char* op) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), op, ": ", a_name, " and ", b_name,
                   " must have the same dtype, got ", a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK_VALUE(a.device() == b.device(), op, ": ", a_name, " and ", b_name,
                    " must be on one device, got ", a.device(), " and ", b.device());
}

void check_max_L(int64_t max_L, const char* op) {
  TORCH_CHECK_VALUE(max_L >= 0, op, ": max_L must be >= 0, got ", max_L);
}

c10::SymInt batch_of(at::TensorList offsets) { return offsets[0].sym_numel() - 1; }

}  // namespace

int64_t inner_dim(const at::Tensor& values) { return values.dim() == 1 ? 1 : values.size(1); }

void check_to_padded_dense(const at::Tensor& values, at::TensorList offsets,
                           c10::SymIntArrayRef max_lengths) {
  constexpr const char* op = "jagged_to_padded_dense";
  check_values(values, "values", op, true);
  check_offsets(offsets, "offsets", op, values.device());
  TORCH_CHECK_VALUE(max_lengths.size() == offsets.size(), op,
                    ": max_lengths needs one length per jagged dimension (", offsets.size(), "), got ",
                    max_lengths.size());
  for (const c10::SymInt& l : max_lengths) {
    TORCH_SYM_CHECK(l.sym_ge(0), op, ": max_lengths must be >= 0, got ", max_lengths);
  }
}

void check_dense_to_jagged(const at::Tensor& dense, at::TensorList offsets, const OptSymInt& total_L) {
  constexpr const char* op = "dense_to_jagged";
  TORCH_CHECK_TYPE(is_value_dtype(dense.scalar_type()), op,
                   ": dense must be float32, float16 or bfloat16 (float64 on the CPU), got ",
                   dense.scalar_type());
  check_offsets(offsets, "x_offsets", op, dense.device());
  const int64_t n = static_cast<int64_t>(offsets.size());
  TORCH_CHECK_VALUE(dense.dim() == n + 1 || dense.dim() == n + 2, op, ": dense must be [B, max_lengths..., D] ",
                    "(or without D) for ", n, " jagged dimension(s), got ", dense.dim(), "-D");
  TORCH_SYM_CHECK(dense.sym_size(0).sym_eq(batch_of(offsets)), op, ": dense has ", dense.sym_size(0),
                  " sequences but x_offsets[0] describes ", batch_of(offsets));
  if (total_L.has_value()) {
    TORCH_SYM_CHECK(total_L->sym_ge(0), op, ": total_L must be >= 0, got ", *total_L);
  }
}

void check_elementwise(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y) {
  constexpr const char* op = "jagged_dense_elementwise";
  check_values(x_values, "x_values", op, true);
  check_offsets(offsets, "x_offsets", op, x_values.device());
  check_same(x_values, "x_values", y, "y", op);
  const int64_t n = static_cast<int64_t>(offsets.size());
  const int64_t want = 1 + n + (x_values.dim() - 1);
  TORCH_CHECK_VALUE(y.dim() == want, op, ": y must be [B, max_lengths..., D] (", want, "-D for ", n,
                    " jagged dimension(s) and ", x_values.dim(), "-D x_values), got ", y.dim(), "-D");
  TORCH_SYM_CHECK(y.sym_size(0).sym_eq(batch_of(offsets)), op, ": y has ", y.sym_size(0),
                  " sequences but x_offsets[0] describes ", batch_of(offsets));
  if (x_values.dim() == 2) {
    TORCH_SYM_CHECK(y.sym_size(-1).sym_eq(x_values.sym_size(1)), op, ": y's last dimension (",
                    y.sym_size(-1), ") must be x_values' D (", x_values.sym_size(1), ")");
  }
}

void check_softmax(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  constexpr const char* op = "jagged_softmax";
  check_values(values, "values", op, false);
  check_offsets(offsets, op, values.device());
  check_max_L(max_L, op);
}

void check_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                            const at::Tensor& offsets, int64_t max_L) {
  constexpr const char* op = "jagged_softmax_backward";
  check_values(output, "output", op, false);
  check_same(grad_output, "grad_output", output, "output", op);
  TORCH_CHECK_VALUE(grad_output.sym_sizes().equals(output.sym_sizes()), op,
                  ": grad_output and output must have one shape, got ", grad_output.sym_sizes(), " and ",
                  output.sym_sizes());
  check_offsets(offsets, op, output.device());
  check_max_L(max_L, op);
}

void check_dense_bmm(const at::Tensor& x_values, const at::Tensor& offsets, const at::Tensor& y,
                     int64_t max_L) {
  constexpr const char* op = "jagged_dense_bmm";
  check_values(x_values, "x_values", op, false);
  check_offsets(offsets, op, x_values.device());
  check_same(x_values, "x_values", y, "y", op);
  TORCH_CHECK_VALUE(y.dim() == 3, op, ": y must be [B, K, N], got ", y.dim(), "-D");
  TORCH_SYM_CHECK(y.sym_size(0).sym_eq(batch_of(offsets)), op, ": y has ", y.sym_size(0),
                  " sequences but x_offsets describes ", batch_of(offsets));
  TORCH_SYM_CHECK(y.sym_size(1).sym_eq(x_values.sym_size(1)), op, ": y [B, K, N] must share K with ",
                  "x_values [total_L, K], got ", y.sym_sizes(), " and ", x_values.sym_sizes());
  check_max_L(max_L, op);
}

void check_jagged_bmm(const at::Tensor& x_values, const at::Tensor& y_values,
                      const at::Tensor& offsets, int64_t max_L) {
  constexpr const char* op = "jagged_jagged_bmm";
  check_values(x_values, "x_values", op, false);
  check_values(y_values, "y_values", op, false);
  check_same(x_values, "x_values", y_values, "y_values", op);
  TORCH_SYM_CHECK(x_values.sym_size(0).sym_eq(y_values.sym_size(0)), op,
                  ": x_values and y_values must have the same rows (one jagged layout), got ",
                  x_values.sym_sizes(), " and ", y_values.sym_sizes());
  check_offsets(offsets, op, x_values.device());
  check_max_L(max_L, op);
}

void check_index_select(const at::Tensor& values, const at::Tensor& lengths, const at::Tensor& indices) {
  constexpr const char* op = "jagged_index_select";
  check_values(values, "values", op, false);
  check_index_tensor(lengths, "lengths", op, values.device());
  check_index_tensor(indices, "indices", op, values.device());
}

void check_index_select_backward(const at::Tensor& grad_output, const at::Tensor& lengths,
                                 const at::Tensor& indices, const c10::SymInt& num_input_rows) {
  constexpr const char* op = "jagged_index_select_backward";
  check_values(grad_output, "grad_output", op, false);
  check_index_tensor(lengths, "lengths", op, grad_output.device());
  check_index_tensor(indices, "indices", op, grad_output.device());
  TORCH_SYM_CHECK(num_input_rows.sym_ge(0), op, ": num_input_rows must be >= 0, got ", num_input_rows);
}

std::vector<at::Tensor> offsets_as_int64(at::TensorList offsets) {
  std::vector<at::Tensor> out;
  out.reserve(offsets.size());
  for (const at::Tensor& o : offsets) out.push_back(o.to(at::kLong).contiguous());
  return out;
}

void check_offsets_values(const char* op, at::TensorList offsets, int64_t num_rows) {
  const auto levels = static_cast<int64_t>(offsets.size());
  for (int64_t k = 0; k < levels; ++k) {
    const at::Tensor& level = offsets[k];
    const int64_t* o = level.const_data_ptr<int64_t>();
    const int64_t n = level.numel();
    const int64_t bound = k + 1 < levels ? offsets[k + 1].numel() - 1 : num_rows;
    for (int64_t i = 0; i < n; ++i) {
      TORCH_CHECK(o[i] >= 0, op, ": offsets[", k, "][", i, "] = ", o[i], " is negative");
      TORCH_CHECK(i == 0 || o[i] >= o[i - 1], op, ": offsets[", k, "][", i, "] = ", o[i],
                  " is below offsets[", k, "][", i - 1, "] = ", o[i - 1], " (offsets must not decrease)");
      TORCH_CHECK(o[i] <= bound, op, ": offsets[", k, "][", i, "] = ", o[i], " is past the end: ",
                  k + 1 < levels ? "the next level has " : "values has ", bound,
                  k + 1 < levels ? " sequences" : " rows");
    }
  }
}

// ---- the dispatcher calls -------------------------------------------------------------------

namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace

at::Tensor call_to_padded_dense(const at::Tensor& values, at::TensorList offsets,
                                c10::SymIntArrayRef max_lengths, double padding_value) {
  static const auto op = handle<at::Tensor(const at::Tensor&, at::TensorList, c10::SymIntArrayRef, double)>(
      "mymetaops::jagged_to_padded_dense");
  return op.call(values, offsets, max_lengths, padding_value);
}

at::Tensor call_dense_to_jagged(const at::Tensor& dense, at::TensorList offsets, const OptSymInt& total_L) {
  static const auto op = handle<at::Tensor(const at::Tensor&, at::TensorList, OptSymInt)>(
      "mymetaops::dense_to_jagged_forward");
  return op.call(dense, offsets, total_L);
}

at::Tensor call_add_jagged_output(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y) {
  static const auto op = handle<at::Tensor(const at::Tensor&, at::TensorList, const at::Tensor&)>(
      "mymetaops::jagged_dense_elementwise_add_jagged_output_forward");
  return op.call(x_values, offsets, y);
}

at::Tensor call_mul(const at::Tensor& x_values, at::TensorList offsets, const at::Tensor& y) {
  static const auto op = handle<at::Tensor(const at::Tensor&, at::TensorList, const at::Tensor&)>(
      "mymetaops::jagged_dense_elementwise_mul_forward");
  return op.call(x_values, offsets, y);
}

at::Tensor call_softmax(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  static const auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(
      "mymetaops::jagged_softmax_forward");
  return op.call(values, offsets, max_L);
}

at::Tensor call_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                 const at::Tensor& offsets, int64_t max_L) {
  static const auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
          "mymetaops::jagged_softmax_backward");
  return op.call(grad_output, output, offsets, max_L);
}

at::Tensor call_dense_bmm(const at::Tensor& x_values, const at::Tensor& offsets, const at::Tensor& y,
                          int64_t max_L) {
  static const auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
          "mymetaops::jagged_dense_bmm_forward");
  return op.call(x_values, offsets, y, max_L);
}

at::Tensor call_jagged_bmm(const at::Tensor& x_values, const at::Tensor& y_values,
                           const at::Tensor& offsets, int64_t max_L) {
  static const auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
          "mymetaops::jagged_jagged_bmm");
  return op.call(x_values, y_values, offsets, max_L);
}

at::Tensor call_index_select_backward(const at::Tensor& grad_output, const at::Tensor& lengths,
                                      const at::Tensor& indices, const c10::SymInt& num_input_rows) {
  static const auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::SymInt)>(
          "mymetaops::jagged_index_select_backward");
  return op.call(grad_output, lengths, indices, num_input_rows);
}

// ---- the check ops (the fake kernels call them) ----------------------------------------------

namespace {

void dense_to_jagged_check_op(const at::Tensor& dense, at::TensorList offsets, OptSymInt total_L) {
  check_dense_to_jagged(dense, offsets, total_L);
}

void index_select_backward_check_op(const at::Tensor& grad_output, const at::Tensor& lengths,
                                    const at::Tensor& indices, c10::SymInt num_input_rows) {
  check_index_select_backward(grad_output, lengths, indices, num_input_rows);
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("_jagged_to_padded_dense_check", &check_to_padded_dense);
  m.impl("_dense_to_jagged_check", &dense_to_jagged_check_op);
  m.impl("_jagged_dense_elementwise_check", &check_elementwise);
  m.impl("_jagged_softmax_check", &check_softmax);
  m.impl("_jagged_softmax_backward_check", &check_softmax_backward);
  m.impl("_jagged_dense_bmm_check", &check_dense_bmm);
  m.impl("_jagged_jagged_bmm_check", &check_jagged_bmm);
  m.impl("_jagged_index_select_check", &check_index_select);
  m.impl("_jagged_index_select_backward_check", &index_select_backward_check_op);
}

}  // namespace mymetaops::jagged
