// The CPU kernels of the jagged <-> dense ops: jagged_to_padded_dense, dense_to_jagged, and
// jagged_dense_elementwise_add / _add_jagged_output / _mul. Each walks, per sequence, the positions
// of the dense form that hold a row (jagged.h) and moves or combines that row. Offsets are checked
// here by value and raise; sums and products are computed in fp32 (fp64 for fp64) and rounded once.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {

constexpr int64_t kSequencesPerTask = 16;

struct Levels {
  std::vector<at::Tensor> owned;  // contiguous int64 copies where needed
  std::vector<const int64_t*> data;
  std::vector<int64_t> lengths;  // the dense form's max length per level
};

Levels levels_of(const char* op, at::TensorList offsets, at::IntArrayRef dense_lengths, int64_t num_rows) {
  Levels lv;
  lv.owned = offsets_as_int64(offsets);
  check_offsets_values(op, lv.owned, num_rows);
  for (const at::Tensor& o : lv.owned) lv.data.push_back(o.const_data_ptr<int64_t>());
  lv.lengths.assign(dense_lengths.begin(), dense_lengths.end());
  return lv;
}

// f(position, row) for every position of sequence `s` at level k that holds a row; position is the
// flat index into the dense form's [B, lengths...] (pos: the index of the prefix so far).
template <typename F>
void walk(const Levels& lv, size_t k, int64_t s, int64_t pos, const F& f) {
  const int64_t lo = lv.data[k][s];
  const int64_t n = std::min(lv.data[k][s + 1] - lo, lv.lengths[k]);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = pos * lv.lengths[k] + j;
    if (k + 1 == lv.data.size()) {
      f(p, lo + j);
    } else {
      walk(lv, k + 1, lo + j, p, f);
    }
  }
}

template <typename F>
void for_each_sequence(const Levels& lv, int64_t batch, const F& f) {
  at::parallel_for(0, batch, kSequencesPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) walk(lv, 0, b, b, f);
  });
}

int64_t batch_of(at::TensorList offsets) { return offsets[0].numel() - 1; }

std::vector<int64_t> int_sizes(c10::SymIntArrayRef sizes) {
  std::vector<int64_t> out;
  for (const c10::SymInt& s : sizes) out.push_back(s.expect_int());
  return out;
}

// ---- jagged_to_padded_dense ------------------------------------------------------------------

at::Tensor to_padded_dense_cpu(const at::Tensor& values_in, at::TensorList offsets,
                               c10::SymIntArrayRef max_lengths_sym, double padding_value) {
  constexpr const char* op = "jagged_to_padded_dense";
  check_to_padded_dense(values_in, offsets, max_lengths_sym);
  const std::vector<int64_t> max_lengths = int_sizes(max_lengths_sym);
  const Levels lv = levels_of(op, offsets, max_lengths, values_in.size(0));
  const int64_t d = inner_dim(values_in), batch = batch_of(offsets);
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), max_lengths.begin(), max_lengths.end());
  if (values_in.dim() == 2) shape.push_back(d);
  at::Tensor out = at::full(shape, padding_value, values_in.options());
  if (out.numel() == 0) return out;
  const at::Tensor values = values_in.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), op, [&] {
    const scalar_t* src = values.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    for_each_sequence(lv, batch, [&](int64_t p, int64_t r) {
      std::copy(src + r * d, src + (r + 1) * d, dst + p * d);
    });
  });
  return out;
}

// ---- dense_to_jagged -------------------------------------------------------------------------

at::Tensor dense_to_jagged_cpu(const at::Tensor& dense_in, at::TensorList offsets, OptSymInt total_L_sym) {
  constexpr const char* op = "dense_to_jagged";
  check_dense_to_jagged(dense_in, offsets, total_L_sym);
  const auto n = static_cast<int64_t>(offsets.size());
  const at::Tensor& last_level = offsets.back();
  const int64_t last_offset = last_level.select(0, last_level.numel() - 1).item<int64_t>();
  const int64_t total = total_L_sym ? total_L_sym->expect_int() : last_offset;
  TORCH_CHECK(last_offset <= total, op, ": total_L = ", total, " is below the last offset, ", last_offset,
              ": the jagged tensor needs at least that many rows");
  const at::IntArrayRef lengths = dense_in.sizes().slice(1, n);
  const Levels lv = levels_of(op, offsets, lengths, total);
  const bool has_d = dense_in.dim() == n + 2;
  const int64_t d = has_d ? dense_in.size(-1) : 1;
  at::Tensor out = has_d ? at::zeros({total, d}, dense_in.options()) : at::zeros({total}, dense_in.options());
  if (out.numel() == 0) return out;
  const at::Tensor dense = dense_in.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dense.scalar_type(), op, [&] {
    const scalar_t* src = dense.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    for_each_sequence(lv, batch_of(offsets), [&](int64_t p, int64_t r) {
      std::copy(src + p * d, src + (p + 1) * d, dst + r * d);
    });
  });
  return out;
}

// ---- elementwise -----------------------------------------------------------------------------

enum class Combine { kAddDense, kAddJagged, kMul };

at::Tensor elementwise_cpu(const char* op, const at::Tensor& x_in, at::TensorList offsets,
                           const at::Tensor& y_in, Combine how) {
  check_elementwise(x_in, offsets, y_in);
  const auto n = static_cast<int64_t>(offsets.size());
  const Levels lv = levels_of(op, offsets, y_in.sizes().slice(1, n), x_in.size(0));
  const int64_t d = inner_dim(x_in);
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  // The rows or positions no sequence reaches: y + 0, x + 0, or x * 0.
  at::Tensor out = how == Combine::kAddDense   ? y.clone()
                   : how == Combine::kAddJagged ? x.clone()
                                                : at::zeros_like(x);
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "jagged_dense_elementwise", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xs = x.const_data_ptr<scalar_t>();
    const scalar_t* ys = y.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    for_each_sequence(lv, batch_of(offsets), [&](int64_t p, int64_t r) {
      scalar_t* dst = o + (how == Combine::kAddDense ? p : r) * d;
      for (int64_t i = 0; i < d; ++i) {
        const acc_t a = static_cast<acc_t>(xs[r * d + i]), b = static_cast<acc_t>(ys[p * d + i]);
        dst[i] = static_cast<scalar_t>(how == Combine::kMul ? a * b : a + b);
      }
    });
  });
  return out;
}

at::Tensor add_dense_cpu(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cpu("jagged_dense_elementwise_add", x, offsets, y, Combine::kAddDense);
}

at::Tensor add_jagged_cpu(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cpu("jagged_dense_elementwise_add_jagged_output", x, offsets, y, Combine::kAddJagged);
}

at::Tensor mul_cpu(const at::Tensor& x, at::TensorList offsets, const at::Tensor& y) {
  return elementwise_cpu("jagged_dense_elementwise_mul", x, offsets, y, Combine::kMul);
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("jagged_to_padded_dense", &to_padded_dense_cpu);
  m.impl("dense_to_jagged_forward", &dense_to_jagged_cpu);
  m.impl("jagged_dense_elementwise_add", &add_dense_cpu);
  m.impl("jagged_dense_elementwise_add_jagged_output_forward", &add_jagged_cpu);
  m.impl("jagged_dense_elementwise_mul_forward", &mul_cpu);
}

}  // namespace mymetaops::jagged
