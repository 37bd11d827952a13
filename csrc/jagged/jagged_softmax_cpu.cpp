// The CPU kernels of jagged_softmax and its backward: per sequence and column, a softmax over the
// sequence's first min(length, max_L) rows (fp32 arithmetic, fp64 for fp64); every other row is 0.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {

constexpr int64_t kSequencesPerTask = 16;

at::Tensor softmax_cpu(const at::Tensor& values_in, const at::Tensor& offsets_in, int64_t max_L) {
  constexpr const char* op = "jagged_softmax";
  check_softmax(values_in, offsets_in, max_L);
  const auto offsets = offsets_as_int64(offsets_in);
  check_offsets_values(op, offsets, values_in.size(0));
  const at::Tensor values = values_in.contiguous();
  at::Tensor out = at::zeros_like(values);
  const int64_t d = values.size(1), batch = offsets[0].numel() - 1;
  const int64_t* o = offsets[0].const_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), op, [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* v = values.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, batch, kSequencesPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const Rows rows = rows_of(o, b, max_L);
        for (int64_t c = 0; c < d; ++c) {
          acc_t top = -std::numeric_limits<acc_t>::infinity();
          for (int64_t j = 0; j < rows.length; ++j) {
            top = std::max(top, static_cast<acc_t>(v[(rows.begin + j) * d + c]));
          }
          acc_t sum = 0;
          for (int64_t j = 0; j < rows.length; ++j) {
            sum += std::exp(static_cast<acc_t>(v[(rows.begin + j) * d + c]) - top);
          }
          for (int64_t j = 0; j < rows.length; ++j) {
            const int64_t i = (rows.begin + j) * d + c;
            dst[i] = static_cast<scalar_t>(std::exp(static_cast<acc_t>(v[i]) - top) / sum);
          }
        }
      }
    });
  });
  return out;
}

// grad_in = output * (grad_output - sum over the sequence's rows of grad_output * output).
at::Tensor softmax_backward_cpu(const at::Tensor& grad_in, const at::Tensor& output_in,
                                const at::Tensor& offsets_in, int64_t max_L) {
  constexpr const char* op = "jagged_softmax_backward";
  check_softmax_backward(grad_in, output_in, offsets_in, max_L);
  const auto offsets = offsets_as_int64(offsets_in);
  check_offsets_values(op, offsets, output_in.size(0));
  const at::Tensor grad = grad_in.contiguous(), output = output_in.contiguous();
  at::Tensor out = at::zeros_like(output);
  const int64_t d = output.size(1), batch = offsets[0].numel() - 1;
  const int64_t* o = offsets[0].const_data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, output.scalar_type(), op, [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = grad.const_data_ptr<scalar_t>();
    const scalar_t* y = output.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, batch, kSequencesPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const Rows rows = rows_of(o, b, max_L);
        for (int64_t c = 0; c < d; ++c) {
          acc_t dot = 0;
          for (int64_t j = 0; j < rows.length; ++j) {
            const int64_t i = (rows.begin + j) * d + c;
            dot += static_cast<acc_t>(g[i]) * static_cast<acc_t>(y[i]);
          }
          for (int64_t j = 0; j < rows.length; ++j) {
            const int64_t i = (rows.begin + j) * d + c;
            dst[i] = static_cast<scalar_t>(static_cast<acc_t>(y[i]) * (static_cast<acc_t>(g[i]) - dot));
          }
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("jagged_softmax_forward", &softmax_cpu);
  m.impl("jagged_softmax_backward", &softmax_backward_cpu);
}

}  // namespace mymetaops::jagged
