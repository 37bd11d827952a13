// The jagged family on the GPU: the kernels the dispatcher calls for CUDA (and ROCm) tensors. Per
// call: check the arguments, raise a bad value an earlier kernel recorded, compute the bucket key,
// look the decision up (the model is asked once per bucket), launch. No host synchronization, except
// where a size is left to be read back (dense_to_jagged without total_L, jagged_index_select without
// num_dense_output_rows). Native kernels (the bmm ops: a grouped GEMM) go through the torch-free launcher ABI
// (mymetaops/jagged.h: cuda/ or hip/); Triton candidates through their Python launchers; the vendor
// candidates are aten's jagged_to_padded_dense and, for the bmm ops, pad + torch.bmm (+ back to
// jagged) with this family's conversions. aten's dense_to_jagged is none: it leaves the rows no
// sequence covers unwritten.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/_jagged_to_padded_dense_forward.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../dispatch/device_errors.h"
#include "../dispatch/dispatch.h"
#include "../dispatch/launch_gpu.h"
#include "jagged.h"
#include "mymetaops/jagged.h"

namespace mymetaops::jagged {
namespace {

using dispatch::Backend;
using dispatch::check_launch;
using dispatch::current_stream;
using dispatch::Decision;

// The model's op names (mymetaops/model/jagged.py).
constexpr const char* kToPadded = "jagged_to_padded_dense";
constexpr const char* kToJagged = "dense_to_jagged_forward";
constexpr const char* kAddDense = "jagged_dense_elementwise_add";
constexpr const char* kAddJagged = "jagged_dense_elementwise_add_jagged_output_forward";
constexpr const char* kMul = "jagged_dense_elementwise_mul_forward";
constexpr const char* kSoftmax = "jagged_softmax_forward";
constexpr const char* kSoftmaxBackward = "jagged_softmax_backward";
constexpr const char* kIndexSelect = "jagged_index_select";
constexpr const char* kIndexSelectBackward = "jagged_index_select_backward";
constexpr const char* kDenseBmm = "jagged_dense_bmm_forward";
constexpr const char* kJaggedBmm = "jagged_jagged_bmm";

DType launcher_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default: TORCH_CHECK(false, "jagged ops on the GPU take float32, float16 or bfloat16 values, got ", t);
  }
}

JaggedConfig native_config(const Decision& d, const char* op) {
  TORCH_CHECK(d.size == 3, op, ": a native config is [vec_bytes, lanes_per_row, block_threads]");
  return {static_cast<int32_t>(d.config[0]), static_cast<int32_t>(d.config[1]), static_cast<int32_t>(d.config[2])};
}

void one_level(at::TensorList offsets, const char* op) {
  TORCH_CHECK_VALUE(offsets.size() == 1, op, ": on the GPU one jagged dimension is supported, got ", offsets.size(),
                    " offsets tensors (more jagged dimensions run on the CPU)");
}

// A jagged or dense floating tensor as rows of unit column stride ([.., D]; 1-D values as [total, 1]).
at::Tensor as_rows(const at::Tensor& t, bool has_inner) {
  const at::Tensor r = has_inner ? t : t.unsqueeze(-1);
  return r.stride(-1) == 1 || r.size(-1) == 1 ? r : r.contiguous();
}

// mymetaops/model/jagged.py's alignment() and size_bucket() (its bucket_key keeps dim and n exact).
int64_t alignment(std::initializer_list<const at::Tensor*> tensors) {
  std::vector<uint64_t> values;
  for (const at::Tensor* t : tensors) {
    const uint64_t elt = t->element_size();
    values.push_back(reinterpret_cast<uint64_t>(t->const_data_ptr()));
    values.push_back(t->dim() > 1 ? t->size(-1) * elt : elt);
    for (int64_t d = 0; d + 1 < t->dim(); ++d) values.push_back(static_cast<uint64_t>(t->stride(d)) * elt);
  }
  uint64_t all = 16;
  for (uint64_t v : values) all |= v;
  return static_cast<int64_t>(all & (~all + 1));
}

int64_t size_bucket(int64_t x) { return x <= 64 ? x : 64 + dispatch::log2_bucket(static_cast<double>(x) / 64.0, 4); }

struct Sizes {
  int64_t batch, max_length, total, dim, n = 0;
  at::ScalarType dtype, offsets_dtype;
  int64_t align;
};

Decision decide(const char* op, const at::Device& device, const Sizes& s) {
  const auto dt = static_cast<int64_t>(launcher_dtype(s.dtype)), ot = static_cast<int64_t>(launcher_dtype(s.offsets_dtype));
  const dispatch::Key key = dispatch::make_key(
      op, device, {dt, ot, s.align, 1, size_bucket(s.batch), size_bucket(s.max_length), size_bucket(s.total), s.dim,
                   s.n});
  return dispatch::decide(key, {s.batch, s.max_length, s.total, s.dim, s.n, dt, ot, s.align, 1});
}

at::Tensor errors_tensor(const at::Device& device) { return dispatch::device_error_record_tensor(device); }

c10::IValue opt(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }

// ---- jagged <-> dense ----------------------------------------------------------------------------

struct DenseCall {
  JaggedDenseOp op;
  ErrorOp error_op;
  at::Tensor offsets, x, dense, out;  // x and dense as rows ([total, D], [B, L, D]); out contiguous
  int64_t max_length, total;
  double padding_value = 0.0;
};

Decision decide_dense(const char* op, const DenseCall& c) {
  const at::Tensor& rows = c.x.defined() ? c.x : c.dense;
  const int64_t align = c.x.defined() && c.dense.defined() ? alignment({&c.x, &c.dense}) : alignment({&rows});
  return decide(op, c.out.device(), {c.offsets.numel() - 1, c.max_length, c.total, c.out.size(-1), 0, rows.scalar_type(),
                                     c.offsets.scalar_type(), align});
}

// The native or Triton kernel of a decision (the callers handle the vendor's).
at::Tensor run_dense(const char* op, const DenseCall& c, const Decision& d) {
  const at::Device device = c.out.device();
  const int64_t batch = c.offsets.numel() - 1, dim = c.out.size(-1);
  const at::Tensor& rows = c.x.defined() ? c.x : c.dense;
  switch (d.backend) {
    case Backend::kNative: {
      JaggedDenseArgs a{};
      a.op = c.op;
      a.dtype = launcher_dtype(rows.scalar_type());
      a.offsets = c.offsets.const_data_ptr();
      a.offsets_dtype = launcher_dtype(c.offsets.scalar_type());
      a.batch = batch;
      a.max_length = c.max_length;
      a.total = c.total;
      a.dim = dim;
      a.x = c.x.defined() ? c.x.const_data_ptr() : nullptr;
      a.x_row_stride = c.x.defined() && c.x.size(0) > 1 ? c.x.stride(0) : dim;
      a.dense = c.dense.defined() ? c.dense.const_data_ptr() : nullptr;
      a.dense_batch_stride = c.dense.defined() ? c.dense.stride(0) : 0;
      a.dense_row_stride = c.dense.defined() ? c.dense.stride(1) : 0;
      a.padding_value = static_cast<float>(c.padding_value);
      a.out = c.out.mutable_data_ptr();
      a.errors = dispatch::device_error_record(device);
      a.error_op = c.error_op;
      check_launch(launch_jagged_dense(a, native_config(d, op), current_stream(device)), op);
      return c.out;
    }
    case Backend::kTriton:
      return dispatch::run_triton(op, d, {static_cast<int64_t>(c.op), opt(c.x), c.offsets, opt(c.dense), c.out,
                                          c.max_length, c.padding_value, errors_tensor(device)});
    case Backend::kVendor:
      break;
  }
  TORCH_CHECK(false, op, ": the model chose a backend this op has no kernel for");
}

at::Tensor to_padded_dense_cuda(const at::Tensor& values, at::TensorList offsets_in, c10::SymIntArrayRef max_lengths_sym,
                                double padding_value) {
  const c10::cuda::CUDAGuard guard(values.device());
  check_to_padded_dense(values, offsets_in, max_lengths_sym);
  one_level(offsets_in, kToPadded);
  dispatch::raise_recorded_error(values.device());
  const int64_t max_length = max_lengths_sym[0].expect_int();
  const at::Tensor offsets = offsets_in[0].contiguous();
  const int64_t batch = offsets.numel() - 1, dim = inner_dim(values);
  DenseCall c{JaggedDenseOp::kToPaddedDense, ErrorOp::kJaggedToPaddedDense, offsets, as_rows(values, values.dim() == 2),
              at::Tensor(), at::empty({batch, max_length, dim}, values.options()), max_length, values.size(0),
              padding_value};
  const Decision d = decide_dense(kToPadded, c);
  if (d.backend == Backend::kVendor) {
    return at::_jagged_to_padded_dense_forward(values, {offsets}, {max_length}, padding_value);
  }
  const at::Tensor out = run_dense(kToPadded, c, d);
  return values.dim() == 2 ? out : out.squeeze(-1);
}

at::Tensor dense_to_jagged_cuda(const at::Tensor& dense_in, at::TensorList offsets_in, OptSymInt total_L) {
  const c10::cuda::CUDAGuard guard(dense_in.device());
  check_dense_to_jagged(dense_in, offsets_in, total_L);
  one_level(offsets_in, kToJagged);
  dispatch::raise_recorded_error(dense_in.device());
  const at::Tensor offsets = offsets_in[0].contiguous();
  // Without total_L the size of the output is on the device: one read back (documented).
  const int64_t total = total_L ? total_L->expect_int() : offsets.select(0, offsets.numel() - 1).item<int64_t>();
  const bool has_inner = dense_in.dim() == 3;
  const at::Tensor dense = as_rows(dense_in, has_inner);
  const int64_t dim = dense.size(-1);
  DenseCall c{JaggedDenseOp::kToJagged, ErrorOp::kDenseToJagged, offsets, at::Tensor(), dense,
              at::empty({total, dim}, dense.options()), dense.size(1), total};
  const at::Tensor out = run_dense(kToJagged, c, decide_dense(kToJagged, c));
  return has_inner ? out : out.squeeze(-1);
}

at::Tensor elementwise_cuda(const char* op, JaggedDenseOp kind, const at::Tensor& x_in, at::TensorList offsets_in,
                            const at::Tensor& y_in) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  check_elementwise(x_in, offsets_in, y_in);
  one_level(offsets_in, op);
  dispatch::raise_recorded_error(x_in.device());
  const bool has_inner = x_in.dim() == 2;
  const at::Tensor x = as_rows(x_in, has_inner), y = as_rows(y_in, has_inner), offsets = offsets_in[0].contiguous();
  const int64_t batch = offsets.numel() - 1, dim = x.size(-1);
  const bool dense_out = kind == JaggedDenseOp::kAddDense;
  at::Tensor out = dense_out ? at::empty({batch, y.size(1), dim}, x.options()) : at::empty({x.size(0), dim}, x.options());
  DenseCall c{kind, ErrorOp::kJaggedDenseElementwise, offsets, x, y, out, y.size(1), x.size(0)};
  out = run_dense(op, c, decide_dense(op, c));
  return has_inner ? out : out.squeeze(-1);
}

at::Tensor add_dense_cuda(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cuda(kAddDense, JaggedDenseOp::kAddDense, x, offsets, y);
}

at::Tensor add_jagged_cuda(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cuda(kAddJagged, JaggedDenseOp::kAddJagged, x, offsets, y);
}

at::Tensor mul_cuda(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cuda(kMul, JaggedDenseOp::kMul, x, offsets, y);
}

// ---- softmax ---------------------------------------------------------------------------------

at::Tensor softmax_any(const char* op, const at::Tensor& grad_in, const at::Tensor& values_in, const at::Tensor& offsets_in,
                       int64_t max_L) {
  const at::Device device = values_in.device();
  dispatch::raise_recorded_error(device);
  const at::Tensor values = as_rows(values_in, true), offsets = offsets_in.contiguous();
  const at::Tensor grad = grad_in.defined() ? as_rows(grad_in, true) : at::Tensor();
  at::Tensor out = at::empty({values.size(0), values.size(1)}, values.options());
  const Sizes s{offsets.numel() - 1, max_L, values.size(0), values.size(1), 0, values.scalar_type(), offsets.scalar_type(),
                grad.defined() ? alignment({&values, &grad}) : alignment({&values})};
  const Decision d = decide(op, device, s);
  switch (d.backend) {
    case Backend::kNative: {
      JaggedSoftmaxArgs a{};
      a.dtype = launcher_dtype(values.scalar_type());
      a.offsets = offsets.const_data_ptr();
      a.offsets_dtype = launcher_dtype(offsets.scalar_type());
      a.batch = offsets.numel() - 1;
      a.max_length = max_L;
      a.total = values.size(0);
      a.dim = values.size(1);
      a.values = values.const_data_ptr();
      a.values_row_stride = values.size(0) > 1 ? values.stride(0) : values.size(1);
      a.grad_output = grad.defined() ? grad.const_data_ptr() : nullptr;
      a.grad_row_stride = grad.defined() && grad.size(0) > 1 ? grad.stride(0) : values.size(1);
      a.out = out.mutable_data_ptr();
      a.errors = dispatch::device_error_record(device);
      check_launch(launch_jagged_softmax(a, native_config(d, op), current_stream(device)), op);
      return out;
    }
    case Backend::kTriton:
      return dispatch::run_triton(op, d, {values, offsets, max_L, out, opt(grad), errors_tensor(device)});
    case Backend::kVendor:
      break;
  }
  TORCH_CHECK(false, op, ": the model chose a backend this op has no kernel for");
}

at::Tensor softmax_cuda(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  const c10::cuda::CUDAGuard guard(values.device());
  check_softmax(values, offsets, max_L);
  return softmax_any(kSoftmax, at::Tensor(), values, offsets, max_L);
}

at::Tensor softmax_backward_cuda(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& offsets, int64_t max_L) {
  const c10::cuda::CUDAGuard guard(output.device());
  check_softmax_backward(grad, output, offsets, max_L);
  return softmax_any(kSoftmaxBackward, grad, output, offsets, max_L);
}

// ---- index select ----------------------------------------------------------------------------

// The selection on the device: input offsets (exclusive cumsum of lengths), the selected lengths
// (0 for an index out of range: the kernel records it) and their offsets. No sync.
struct Selection {
  at::Tensor input_offsets, selected_lengths, output_offsets;
};

Selection selection(const at::Tensor& lengths, const at::Tensor& indices) {
  const int64_t batch = lengths.numel();
  const at::Tensor zero = at::zeros({1}, lengths.options().dtype(at::kLong));
  const at::Tensor input_offsets = at::cat({zero, lengths.to(at::kLong).cumsum(0)});
  const at::Tensor idx = indices.to(at::kLong);
  const at::Tensor valid = idx.ge(0).logical_and(idx.lt(batch));
  const at::Tensor picked = batch > 0 ? lengths.index_select(0, idx.clamp(0, batch - 1))
                                      : at::zeros(indices.sizes(), lengths.options());
  const at::Tensor selected = at::where(valid, picked, at::zeros({}, lengths.options()));
  return {input_offsets, selected, at::cat({zero, selected.to(at::kLong).cumsum(0)})};
}

at::Tensor index_select_any(const char* op, const at::Tensor& values_in, const Selection& sel, const at::Tensor& indices_in,
                            int64_t batch, int64_t num_input_rows, int64_t num_output_rows, bool backward) {
  const at::Device device = values_in.device();
  const at::Tensor values = as_rows(values_in, true), indices = indices_in.contiguous();
  const int64_t dim = values.size(1);
  at::Tensor out = backward ? at::zeros({num_input_rows, dim}, values.options().dtype(at::kFloat))
                            : at::empty({num_output_rows, dim}, values.options());
  const Sizes s{indices.numel(), num_output_rows, num_input_rows, dim, 0, values.scalar_type(), indices.scalar_type(),
                alignment({&values})};
  const Decision d = decide(op, device, s);
  switch (d.backend) {
    case Backend::kNative: {
      JaggedIndexSelectArgs a{};
      a.dtype = launcher_dtype(values.scalar_type());
      a.dim = dim;
      a.values = values.const_data_ptr();
      a.values_row_stride = values.size(0) > 1 ? values.stride(0) : dim;
      a.input_offsets = sel.input_offsets.const_data_ptr<int64_t>();
      a.output_offsets = sel.output_offsets.const_data_ptr<int64_t>();
      a.indices = indices.const_data_ptr();
      a.indices_dtype = launcher_dtype(indices.scalar_type());
      a.num_indices = indices.numel();
      a.batch = batch;
      a.num_input_rows = num_input_rows;
      a.num_output_rows = num_output_rows;
      a.backward = backward;
      a.out = out.mutable_data_ptr();
      a.errors = dispatch::device_error_record(device);
      check_launch(launch_jagged_index_select(a, native_config(d, op), current_stream(device)), op);
      break;
    }
    case Backend::kTriton:
      dispatch::run_triton(op, d, {values, sel.input_offsets, sel.output_offsets, indices, out, backward,
                                   errors_tensor(device)});
      break;
    case Backend::kVendor:
      TORCH_CHECK(false, op, ": the model chose a backend this op has no kernel for");
  }
  return backward ? out.to(values.scalar_type()) : out;
}

std::vector<at::Tensor> index_select_cuda(const at::Tensor& values, const at::Tensor& lengths, const at::Tensor& indices,
                                          std::optional<int64_t> num_output_rows) {
  const c10::cuda::CUDAGuard guard(values.device());
  check_index_select(values, lengths, indices);
  dispatch::raise_recorded_error(values.device());
  const Selection sel = selection(lengths, indices);
  // Without num_dense_output_rows the size of the output is on the device: one read back (documented).
  const int64_t rows = num_output_rows ? *num_output_rows
                                       : sel.output_offsets.select(0, indices.numel()).item<int64_t>();
  const at::Tensor out = index_select_any(kIndexSelect, values, sel, indices, lengths.numel(), values.size(0), rows, false);
  return {out, sel.selected_lengths};
}

at::Tensor index_select_backward_cuda(const at::Tensor& grad, const at::Tensor& lengths, const at::Tensor& indices,
                                      c10::SymInt num_input_rows) {
  const c10::cuda::CUDAGuard guard(grad.device());
  check_index_select_backward(grad, lengths, indices, num_input_rows);
  dispatch::raise_recorded_error(grad.device());
  return index_select_any(kIndexSelectBackward, grad, selection(lengths, indices), indices, lengths.numel(),
                          num_input_rows.expect_int(), grad.size(0), true);
}

// ---- bmm -------------------------------------------------------------------------------------

// The bmm ops' alignment (mymetaops/model/jagged.py's bmm_alignment): as alignment(), over x's and
// y's base pointers, row widths and the strides that are not 1; y's unit stride may be either of
// its last two dims (jagged_dense_bmm's backward passes y^T). 1 when x or y has no unit stride
// there: only the Triton and torch.bmm candidates take any strides.
int64_t bmm_alignment(const at::Tensor& x, const at::Tensor& y) {
  const uint64_t elt = x.element_size();
  auto unit = [](const at::Tensor& t, int64_t d) { return t.stride(d) == 1 || t.size(d) == 1; };
  if (!unit(x, 1)) return 1;
  std::vector<uint64_t> values{reinterpret_cast<uint64_t>(x.const_data_ptr()),
                               reinterpret_cast<uint64_t>(y.const_data_ptr()), x.size(1) * elt,
                               static_cast<uint64_t>(x.stride(0)) * elt, y.size(-1) * elt};
  if (y.dim() == 2) {
    if (!unit(y, 1)) return 1;
    values.push_back(static_cast<uint64_t>(y.stride(0)) * elt);
  } else {
    const int64_t inner = unit(y, 2) ? 2 : unit(y, 1) ? 1 : -1;
    if (inner < 0) return 1;
    values.push_back(y.size(1) * elt);
    for (int64_t d = 0; d < 3; ++d)
      if (d != inner) values.push_back(static_cast<uint64_t>(y.stride(d)) * elt);
  }
  uint64_t all = 16;
  for (uint64_t v : values) all |= v;
  return static_cast<int64_t>(all & (~all + 1));
}

JaggedBmmConfig native_bmm_config(at::IntArrayRef config, const char* op) {
  TORCH_CHECK_VALUE(config.size() == 1, op, ": a native bmm config is [kernel], got ", config);
  int32_t count = 0;
  jagged_bmm_kernel_names(&count);
  TORCH_CHECK_VALUE(config[0] >= 0 && config[0] < count, op, ": kernel ", config[0],
                    " is not an index of the build's native bmm kernels (", count, ")");
  return {static_cast<int32_t>(config[0])};
}

JaggedBmmArgs bmm_args(JaggedBmmForm form, const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& y,
                       int64_t max_L) {
  JaggedBmmArgs a{};
  a.form = form;
  a.dtype = launcher_dtype(x.scalar_type());
  a.offsets = offsets.const_data_ptr();
  a.offsets_dtype = launcher_dtype(offsets.scalar_type());
  a.batch = offsets.numel() - 1;
  a.max_length = max_L;
  a.total = x.size(0);
  a.x = x.const_data_ptr();
  a.x_row_stride = x.stride(0);
  a.y = y.const_data_ptr();
  if (form == JaggedBmmForm::kJaggedDense) {
    a.k = x.size(1);
    a.n = y.size(2);
    a.y_batch_stride = y.stride(0);
    a.y_k_stride = y.stride(1);
    a.y_n_stride = y.stride(2);
  } else {
    a.m = x.size(1);
    a.n = y.size(1);
    a.y_k_stride = y.stride(0);
    a.y_n_stride = 1;
  }
  return a;
}

// The output of a bmm: [total, N] (jagged_dense_bmm) or [B, M, N] (jagged_jagged_bmm).
at::Tensor bmm_out(JaggedBmmForm form, const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& y) {
  return form == JaggedBmmForm::kJaggedDense ? at::empty({x.size(0), y.size(2)}, x.options())
                                             : at::empty({offsets.numel() - 1, x.size(1), y.size(1)}, x.options());
}

// The native grouped GEMM (cuda/jagged_bmm/, hip/jagged_bmm.hip) of `config` for one form: the
// output allocated, the launch made.
at::Tensor native_bmm(const char* op, JaggedBmmForm form, const at::Tensor& x, const at::Tensor& offsets,
                      const at::Tensor& y, int64_t max_L, const JaggedBmmConfig& config) {
  at::Tensor out = bmm_out(form, x, offsets, y);
  const at::Device device = out.device();
  JaggedBmmArgs a = bmm_args(form, x, offsets, y, max_L);
  a.out = out.data_ptr();
  a.errors = dispatch::device_error_record(device);
  a.sm_count = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t bytes = jagged_bmm_workspace_bytes(a, config);
  const at::Tensor workspace = at::empty({std::max<int64_t>(bytes, 1)}, out.options().dtype(at::kByte));
  a.workspace = workspace.data_ptr();
  check_launch(launch_jagged_bmm(a, config, current_stream(device)), op);
  return out;
}

// The conversions of the pad + torch.bmm path: this family's (aten's dense_to_jagged leaves rows
// unwritten; its jagged_to_padded_dense fails past 2^31 elements), chosen by the model even when the
// bmm's backend is forced (dense_to_jagged has no vendor candidate: forcing vendor raised, H200).
at::Tensor padded(const at::Tensor& values, const at::Tensor& offsets, int64_t max_L) {
  const c10::SymInt length(max_L);
  return to_padded_dense_cuda(values, {offsets}, {length}, 0.0);
}

at::Tensor dense_bmm_cuda(const at::Tensor& x, const at::Tensor& offsets_in, const at::Tensor& y, int64_t max_L) {
  const c10::cuda::CUDAGuard guard(x.device());
  check_dense_bmm(x, offsets_in, y, max_L);
  dispatch::raise_recorded_error(x.device());
  const at::Tensor offsets = offsets_in.contiguous();
  const Sizes s{offsets.numel() - 1, max_L, x.size(0), x.size(1), y.size(2), x.scalar_type(), offsets.scalar_type(),
                bmm_alignment(x, y)};
  const Decision d = decide(kDenseBmm, x.device(), s);
  if (d.backend == Backend::kNative) {
    return native_bmm(kDenseBmm, JaggedBmmForm::kJaggedDense, x, offsets, y, max_L,
                      native_bmm_config(d.config_ref(), kDenseBmm));
  }
  if (d.backend == Backend::kVendor) {
    const dispatch::AutoBackendScope conversions_by_the_model;  // parts of this candidate
    return dense_to_jagged_cuda(at::bmm(padded(x, offsets, max_L), y), {offsets}, c10::SymInt(x.size(0)));
  }
  TORCH_CHECK(d.backend == Backend::kTriton, kDenseBmm, ": unknown backend");
  const at::Tensor out = bmm_out(JaggedBmmForm::kJaggedDense, x, offsets, y);
  return dispatch::run_triton(kDenseBmm, d, {x, offsets, y, out, max_L, errors_tensor(x.device())});
}

at::Tensor jagged_bmm_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& offsets_in, int64_t max_L) {
  const c10::cuda::CUDAGuard guard(x.device());
  check_jagged_bmm(x, y, offsets_in, max_L);
  dispatch::raise_recorded_error(x.device());
  const at::Tensor offsets = offsets_in.contiguous();
  const Sizes s{offsets.numel() - 1, max_L, x.size(0), x.size(1), y.size(1), x.scalar_type(), offsets.scalar_type(),
                bmm_alignment(x, y)};
  const Decision d = decide(kJaggedBmm, x.device(), s);
  if (d.backend == Backend::kNative) {
    return native_bmm(kJaggedBmm, JaggedBmmForm::kJaggedJagged, x, offsets, y, max_L,
                      native_bmm_config(d.config_ref(), kJaggedBmm));
  }
  if (d.backend == Backend::kVendor) {
    const dispatch::AutoBackendScope conversions_by_the_model;  // parts of this candidate
    return at::bmm(padded(x, offsets, max_L).transpose(1, 2), padded(y, offsets, max_L));
  }
  TORCH_CHECK(d.backend == Backend::kTriton, kJaggedBmm, ": unknown backend");
  const at::Tensor out = bmm_out(JaggedBmmForm::kJaggedJagged, x, offsets, y);
  return dispatch::run_triton(kJaggedBmm, d, {x, y, offsets, out, max_L, errors_tensor(x.device())});
}

at::Tensor dense_bmm_native(const at::Tensor& x, const at::Tensor& offsets_in, const at::Tensor& y, int64_t max_L,
                            at::IntArrayRef config) {
  constexpr const char* op = "_jagged_dense_bmm_native";
  const c10::cuda::CUDAGuard guard(x.device());
  check_dense_bmm(x, offsets_in, y, max_L);
  dispatch::raise_recorded_error(x.device());
  const at::Tensor offsets = offsets_in.contiguous();
  return native_bmm(op, JaggedBmmForm::kJaggedDense, x, offsets, y, max_L, native_bmm_config(config, op));
}

at::Tensor jagged_bmm_native(const at::Tensor& x, const at::Tensor& y, const at::Tensor& offsets_in, int64_t max_L,
                             at::IntArrayRef config) {
  constexpr const char* op = "_jagged_jagged_bmm_native";
  const c10::cuda::CUDAGuard guard(x.device());
  check_jagged_bmm(x, y, offsets_in, max_L);
  dispatch::raise_recorded_error(x.device());
  const at::Tensor offsets = offsets_in.contiguous();
  return native_bmm(op, JaggedBmmForm::kJaggedJagged, x, offsets, y, max_L, native_bmm_config(config, op));
}

std::vector<std::string> native_bmm_kernels() {
  int32_t count = 0;
  const char* const* names = jagged_bmm_kernel_names(&count);
  return {names, names + count};
}

const bool kBmmKernelsProvided = (set_native_bmm_kernels_provider(&native_bmm_kernels), true);

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CUDA, m) {
  m.impl("jagged_to_padded_dense", &to_padded_dense_cuda);
  m.impl("dense_to_jagged_forward", &dense_to_jagged_cuda);
  m.impl("jagged_dense_elementwise_add", &add_dense_cuda);
  m.impl("jagged_dense_elementwise_add_jagged_output_forward", &add_jagged_cuda);
  m.impl("jagged_dense_elementwise_mul_forward", &mul_cuda);
  m.impl("jagged_softmax_forward", &softmax_cuda);
  m.impl("jagged_softmax_backward", &softmax_backward_cuda);
  m.impl("jagged_index_select", &index_select_cuda);
  m.impl("jagged_index_select_backward", &index_select_backward_cuda);
  m.impl("jagged_dense_bmm_forward", &dense_bmm_cuda);
  m.impl("jagged_jagged_bmm", &jagged_bmm_cuda);
  m.impl("_jagged_dense_bmm_native", &dense_bmm_native);
  m.impl("_jagged_jagged_bmm_native", &jagged_bmm_native);
}

}  // namespace mymetaops::jagged
