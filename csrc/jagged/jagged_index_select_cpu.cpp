// The CPU kernels of jagged_index_select (the sequences indices[i] of a jagged tensor given by its
// lengths, concatenated) and its backward (each selected sequence's gradient rows added back to
// its source rows, in fp32 (fp64 for fp64): a sequence selected twice gets both).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {

// Source and destination rows of every selected sequence, with values checked.
struct Selection {
  std::vector<int64_t> source_begin, length;
  int64_t total = 0;  // rows selected
};

Selection select_rows(const char* op, const at::Tensor& lengths_in, const at::Tensor& indices_in,
                      int64_t num_rows) {
  const at::Tensor lengths = lengths_in.to(at::kLong).contiguous();
  const at::Tensor indices = indices_in.to(at::kLong).contiguous();
  const int64_t* l = lengths.const_data_ptr<int64_t>();
  const int64_t* idx = indices.const_data_ptr<int64_t>();
  const int64_t batch = lengths.numel();
  std::vector<int64_t> begin(batch);
  int64_t rows = 0;
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(l[b] >= 0, op, ": lengths[", b, "] = ", l[b], " is negative");
    begin[b] = rows;
    rows += l[b];
  }
  TORCH_CHECK(rows <= num_rows, op, ": lengths add up to ", rows, " rows but values has ", num_rows);
  Selection s;
  for (int64_t i = 0; i < indices.numel(); ++i) {
    TORCH_CHECK_INDEX(idx[i] >= 0 && idx[i] < batch, op, ": indices[", i, "] = ", idx[i],
                      " is not a sequence (lengths has ", batch, ")");
    s.source_begin.push_back(begin[idx[i]]);
    s.length.push_back(l[idx[i]]);
    s.total += l[idx[i]];
  }
  return s;
}

std::vector<at::Tensor> index_select_cpu(const at::Tensor& values_in, const at::Tensor& lengths,
                                         const at::Tensor& indices, std::optional<int64_t> num_output_rows) {
  constexpr const char* op = "jagged_index_select";
  check_index_select(values_in, lengths, indices);
  const Selection s = select_rows(op, lengths, indices, values_in.size(0));
  TORCH_CHECK_VALUE(!num_output_rows || *num_output_rows == s.total, op, ": num_dense_output_rows = ",
                    num_output_rows.value_or(0), " but the selected sequences have ", s.total, " rows");
  const at::Tensor values = values_in.contiguous();
  const int64_t d = values.size(1);
  at::Tensor out = at::empty({s.total, d}, values.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), op, [&] {
    const scalar_t* src = values.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    int64_t row = 0;
    for (size_t i = 0; i < s.length.size(); ++i) {
      std::copy(src + s.source_begin[i] * d, src + (s.source_begin[i] + s.length[i]) * d, dst + row * d);
      row += s.length[i];
    }
  });
  return {out, lengths.index_select(0, indices)};
}

at::Tensor index_select_backward_cpu(const at::Tensor& grad_in, const at::Tensor& lengths,
                                     const at::Tensor& indices, c10::SymInt num_input_rows_sym) {
  constexpr const char* op = "jagged_index_select_backward";
  check_index_select_backward(grad_in, lengths, indices, num_input_rows_sym);
  const int64_t num_input_rows = num_input_rows_sym.expect_int();
  const Selection s = select_rows(op, lengths, indices, num_input_rows);
  TORCH_CHECK_VALUE(grad_in.size(0) == s.total, op, ": grad_output has ", grad_in.size(0),
                    " rows but the selected sequences have ", s.total);
  const at::Tensor grad = grad_in.contiguous();
  const int64_t d = grad.size(1);
  const at::ScalarType acc = grad.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor sum = at::zeros({num_input_rows, d}, grad.options().dtype(acc));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), op, [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = grad.const_data_ptr<scalar_t>();
    acc_t* dst = sum.mutable_data_ptr<acc_t>();
    int64_t row = 0;
    for (size_t i = 0; i < s.length.size(); ++i) {
      for (int64_t j = 0; j < s.length[i] * d; ++j) {
        dst[s.source_begin[i] * d + j] += static_cast<acc_t>(g[row * d + j]);
      }
      row += s.length[i];
    }
  });
  return sum.to(grad.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("jagged_index_select", &index_select_cpu);
  m.impl("jagged_index_select_backward", &index_select_backward_cpu);
}

}  // namespace mymetaops::jagged
