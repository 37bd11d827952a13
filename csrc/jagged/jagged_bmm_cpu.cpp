// The CPU kernels of jagged_dense_bmm (x_values [total_L, K] . y[b] [K, N] per sequence) and
// jagged_jagged_bmm (x_b^T . y_b over a sequence's rows, [B, M, N]): one matrix product per
// sequence over its first min(length, max_L) rows, in fp32 (fp64 for fp64), rounded once. Rows
// past max_L come out 0 (dense) or do not count (jagged).
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {

at::ScalarType accumulate_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor dense_bmm_cpu(const at::Tensor& x, const at::Tensor& offsets_in, const at::Tensor& y,
                         int64_t max_L) {
  constexpr const char* op = "jagged_dense_bmm";
  check_dense_bmm(x, offsets_in, y, max_L);
  const auto offsets = offsets_as_int64(offsets_in);
  check_offsets_values(op, offsets, x.size(0));
  const at::ScalarType acc = accumulate_type(x.scalar_type());
  at::Tensor out = at::zeros({x.size(0), y.size(2)}, x.options());
  const int64_t* o = offsets[0].const_data_ptr<int64_t>();
  for (int64_t b = 0; b + 1 < offsets[0].numel(); ++b) {
    const Rows rows = rows_of(o, b, max_L);
    if (rows.length == 0) continue;
    out.narrow(0, rows.begin, rows.length)
        .copy_(at::mm(x.narrow(0, rows.begin, rows.length).to(acc), y.select(0, b).to(acc)));
  }
  return out;
}

at::Tensor jagged_bmm_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& offsets_in,
                          int64_t max_L) {
  constexpr const char* op = "jagged_jagged_bmm";
  check_jagged_bmm(x, y, offsets_in, max_L);
  const auto offsets = offsets_as_int64(offsets_in);
  check_offsets_values(op, offsets, x.size(0));
  const at::ScalarType acc = accumulate_type(x.scalar_type());
  const int64_t batch = offsets[0].numel() - 1;
  at::Tensor out = at::zeros({batch, x.size(1), y.size(1)}, x.options());
  const int64_t* o = offsets[0].const_data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const Rows rows = rows_of(o, b, max_L);
    if (rows.length == 0) continue;
    out.select(0, b).copy_(at::mm(x.narrow(0, rows.begin, rows.length).to(acc).t(),
                                  y.narrow(0, rows.begin, rows.length).to(acc)));
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("jagged_dense_bmm_forward", &dense_bmm_cpu);
  m.impl("jagged_jagged_bmm", &jagged_bmm_cpu);
}

}  // namespace mymetaops::jagged
