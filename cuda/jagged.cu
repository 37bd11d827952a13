// CUDA kernels and launchers of the jagged family's memory-bound ops (semantics and conventions:
// csrc/include/mymetaops/jagged.h).
//
// Row kernels (jagged <-> dense, index_select): a group of `lanes_per_row` lanes owns output rows
// and moves them VEC bytes per lane per access (a row wider than the group loops over its vectors).
// The grid has one group per row (jagged <-> dense: per run of kRowsPerRun consecutive rows), up to
// the grid limits; groups then stride over the rest. Dense outputs are walked by position (b, j),
// jagged outputs by row; a run finds its first row's sequence once (jagged outputs: a binary search
// of the offsets) and steps through the sequences from there.
//
// Softmax: one block per (sequence, column chunk of lanes * VEC bytes). Its threads stride over
// the sequence's rows, several loads in flight each, and reduce across the block through shared
// memory; the write pass re-reads the rows a thread has just read (from L1/L2, not DRAM, when few
// rows fall to each thread: a config with many row slots per block).
//
// Bad values: each kernel checks every offsets entry (or index) once, in a grid-stride prologue, so
// that every entry is checked whatever the main loop covers; the main loop only clamps.
//
// Template parameters: T = value dtype, IndexT = offsets / indices dtype, VEC = bytes per lane
// access.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "cuda_utils.cuh"
#include "jagged_offsets.cuh"
#include "mymetaops/jagged.h"
#include "mymetaops/launch.h"

namespace mymetaops {
namespace {

using cuda::check_offsets;
using cuda::clamped_offset;
using cuda::get_elt;
using cuda::launch_status;
using cuda::load_cached;
using cuda::load_streaming;
using cuda::RawVec;
using cuda::record_error;
using cuda::Seq;
using cuda::sequence;
using cuda::set_elt;
using cuda::store_vec;
using cuda::thread_in_grid;
using cuda::threads_in_grid;
using cuda::unlikely;

// block_threads may be anything up to 1024 at run time, so every kernel is compiled to launch
// with 1024 threads (at most 64 registers; scripts/check_cuda.sh rejects any spill).
constexpr int kMaxBlockThreads = launch::kMaxBlockThreads;
constexpr int kWarpSize = 32;
constexpr int kMaxWarps = kMaxBlockThreads / kWarpSize;
// gridDim.x holds up to 2^31 - 1 blocks (65535 along y); kernels loop over work beyond one grid.
constexpr launch::GridLimits kGridLimits{0x7fffffff, INT64_MAX};
constexpr int64_t kMaxGridY = 65535;
// Softmax rows whose loads a thread keeps in flight: up to 4, and at most 16 elements in all (8
// per tensor backward), so that its per-column statistics and the rows fit in 64 registers.
template <int E, int kTensors>
constexpr int kSoftmaxRows = 16 / kTensors / E < 4 ? 16 / kTensors / E : 4;

struct CudaTypes {
  using Float32 = float;
  using Float16 = __half;
  using BFloat16 = __nv_bfloat16;
};

// The calling lane's group of 2^lanes_log2 lanes, numbered over the grid (fewer than 2^32 groups:
// launch::grid_for).
__device__ __forceinline__ uint32_t group_in_grid(int lanes_log2) {
  return static_cast<uint32_t>(
      (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2);
}

// The last i in [0, n) with starts[i] <= r, or -1 (an upper-bound binary search). For r in
// [0, total) unclamped starts compare as clamped ones would; with any starts, sorted or not, the i
// found has starts[i] <= r, after at most 64 steps.
// The same over [from, n): the last i in [from, n) with starts[i] <= r, or from - 1.
template <typename IndexT>
__device__ __forceinline__ int64_t last_start_at_or_before(const IndexT* starts, int64_t from,
                                                           int64_t n, int64_t r) {
  int64_t lo = from, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (static_cast<int64_t>(__ldg(starts + mid)) <= r) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

template <typename IndexT>
__device__ __forceinline__ int64_t last_start_at_or_before(const IndexT* starts, int64_t n,
                                                           int64_t r) {
  return last_start_at_or_before(starts, 0, n, r);
}

// ---------------------------------------------------------------------------------------------
// jagged <-> dense (launch_jagged_dense).

struct DenseParams {
  const void* offsets;
  int64_t batch;
  int64_t max_length;
  int64_t total;
  int dim_vecs;  // vectors per row
  const char* x;
  int64_t x_row_bytes;
  const char* dense;
  int64_t dense_batch_bytes;
  int64_t dense_row_bytes;
  float padding_value;
  char* out;
  int64_t out_row_bytes;
  int64_t rows;           // output rows (batch * max_length or total); 0: only check the offsets
  int64_t rows_per_pass;  // groups in the grid: runs of kRowsPerRun rows per pass
  int64_t pass_b, pass_j;  // a pass's rows as whole sequences and positions (dense walks)
  int64_t* errors;
  ErrorOp error_op;
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

// op(a, b) elementwise, in fp32, rounded once to T.
template <typename T, int VEC, typename Op>
__device__ __forceinline__ RawVec<VEC> combine(const RawVec<VEC>& a, const RawVec<VEC>& b, Op op) {
  RawVec<VEC> r;
#pragma unroll
  for (int e = 0; e < static_cast<int>(VEC / sizeof(T)); ++e)
    set_elt<T>(r, e, op(get_elt<T>(a, e), get_elt<T>(b, e)));
  return r;
}

// pred ? a : b, word by word (a select of whole structs goes through local memory).
template <int VEC>
__device__ __forceinline__ RawVec<VEC> pick(bool pred, const RawVec<VEC>& a, const RawVec<VEC>& b) {
  RawVec<VEC> r;
#pragma unroll
  for (int w = 0; w < RawVec<VEC>::kWords; ++w) r.w[w] = pred ? a.w[w] : b.w[w];
  return r;
}

// A group moves kRowsInFlight of its rows per step, every load issued before any store: with one
// row a thread had a single 16-byte load outstanding and the conversions stopped at 79-83% of the
// copy bandwidth on the H200 (2026-12-01); DRAM wants more bytes in flight than 2048 threads x 16 B.
constexpr int kRowsInFlight = 2;
// Consecutive output rows a group owns (a run), a multiple of kRowsInFlight: a run looks its
// sequence up once and steps from row to row. With one lookup per row (a binary search of the
// offsets for jagged outputs) and two rows per group, the jagged-output kernels ran at 48-71% of
// the copy bandwidth and the dense ones at 79-84% on the H200 (2026-12-01); with runs of 8 rows at
// 82-92%. Runs of 16 rows for the jagged outputs ran slower at 4096 sequences of 256-byte rows
// (79-81% against 82-85%: fewer groups with work in flight), so 8 it is for both walks.
constexpr int kRowsPerRun = 8;
// dense_to_jagged's walk moves four rows per step: at 256-byte rows (16 lanes of a group, one
// vector each) two rows left it at 82% of the copy bandwidth on the H200 (2026-12-01), the only
// conversion under 85%. add_jagged_output and mul, which load two rows per output row, keep two:
// with four they spill under the 64 registers of a 1024-thread block (sm_100a, sm_90a).
template <JaggedDenseOp kOp>
constexpr int kJaggedRowsInFlight = kOp == JaggedDenseOp::kToJagged ? 4 : kRowsInFlight;
static_assert(kRowsPerRun % kRowsInFlight == 0 && kRowsPerRun % 4 == 0, "a run is whole steps");

// One step of a dense walk: position (b, j) advanced by `rows` rows given as (whole sequences,
// positions), so the loop needs no 64-bit division.
__device__ __forceinline__ void advance(int64_t& b, int64_t& j, const DenseParams& p) {
  b += p.pass_b;
  j += p.pass_j;
  if (j >= p.max_length) {
    j -= p.max_length;
    ++b;
  }
}

// kToPaddedDense and kAddDense: output row b * max_length + j is position (b, j). Group g owns
// the runs g, g + rows_per_pass, ... (run i: rows i * kRowsPerRun onwards) and moves kRowsInFlight
// rows per step. Positions without a row copy the padding or the dense row bit for bit, as the CPU
// kernels do.
template <typename T, typename IndexT, int VEC, bool kAdd>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    jagged_to_dense_kernel(const DenseParams p, int lanes_log2) {
  const auto* offsets = static_cast<const IndexT*>(p.offsets);
  check_offsets(offsets, p.batch, p.total, p.errors, p.error_op, thread_in_grid(),
                threads_in_grid());
  const uint32_t group = group_in_grid(lanes_log2);
  if (static_cast<int64_t>(group) * kRowsPerRun >= p.rows) return;  // also max_length == 0
  const int lanes = 1 << lanes_log2;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  // Position (b, j) of row group * kRowsPerRun, in 32-bit divisions (a 64-bit one is a call that
  // spills): group = q * max_length + r, and r * kRowsPerRun = q2 * max_length + j.
  int64_t b = 0, j = 0;
  if (p.max_length <= UINT32_MAX / kRowsPerRun) {
    const auto length = static_cast<uint32_t>(p.max_length);
    const uint32_t q = group / length;
    const uint32_t r = (group - q * length) * kRowsPerRun;
    const uint32_t q2 = r / length;
    b = static_cast<int64_t>(q) * kRowsPerRun + q2;
    j = r - q2 * length;
  } else {  // max_length > 2^29 and the row below 2^35: fewer than 64 sequences precede it
    j = static_cast<int64_t>(group) * kRowsPerRun;
    while (j >= p.max_length) {
      j -= p.max_length;
      ++b;
    }
  }
  RawVec<VEC> pad;
#pragma unroll
  for (int e = 0; e < static_cast<int>(VEC / sizeof(T)); ++e) set_elt<T>(pad, e, p.padding_value);
#pragma unroll 1
  while (b < p.batch) {  // i.e. row < rows
    int64_t rb = b, rj = j;  // the run's current position
    Seq s = sequence(offsets, rb, p.total);
#pragma unroll 1
    for (int step = 0; step < kRowsPerRun; step += kRowsInFlight) {
      bool live[kRowsInFlight], has_row[kRowsInFlight];
      const char* x_row[kRowsInFlight];
      const char* dense_row[kRowsInFlight];
      char* out_row[kRowsInFlight];
#pragma unroll
      for (int k = 0; k < kRowsInFlight; ++k) {
        live[k] = rb < p.batch;
        has_row[k] = live[k] && rj < s.length;  // and rj < max_length: rj is a position
        x_row[k] = p.x + (has_row[k] ? s.start + rj : 0) * p.x_row_bytes;
        out_row[k] = p.out + (rb * p.max_length + rj) * p.out_row_bytes;
        dense_row[k] = kAdd ? p.dense + rb * p.dense_batch_bytes + rj * p.dense_row_bytes : nullptr;
        if (++rj == p.max_length) {
          rj = 0;
          if (++rb < p.batch) s = sequence(offsets, rb, p.total);
        }
      }
#pragma unroll 1
      for (int v = lane; v < p.dim_vecs; v += lanes) {
        const int64_t col = static_cast<int64_t>(v) * VEC;
        RawVec<VEC> x[kRowsInFlight], d[kRowsInFlight];
#pragma unroll
        for (int k = 0; k < kRowsInFlight; ++k) {
          x[k] = load_streaming<VEC>(x_row[k] + col, has_row[k]);
          if constexpr (kAdd) d[k] = load_streaming<VEC>(dense_row[k] + col, live[k]);
        }
#pragma unroll
        for (int k = 0; k < kRowsInFlight; ++k) {
          if (!live[k]) continue;
          if constexpr (kAdd) {
            store_vec<VEC>(out_row[k] + col, pick(has_row[k], combine<T>(x[k], d[k], Add{}), d[k]));
          } else {
            store_vec<VEC>(out_row[k] + col, pick(has_row[k], x[k], pad));
          }
        }
      }
    }
    advance(b, j, p);
  }
}

// kToJagged, kAddJagged and kMul: output row r, at position (b, r - start) if it has one. Group g
// owns the runs g, g + rows_per_pass, ... (run i: rows i * kRowsPerRun onwards) and moves
// kJaggedRowsInFlight<kOp> rows per step. A run searches the offsets for its first row; a later
// row past its sequence's end searches the sequences after it (so empty sequences and rows
// outside every sequence take no special case).
template <typename T, typename IndexT, int VEC, JaggedDenseOp kOp>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    dense_to_jagged_kernel(const DenseParams p, int lanes_log2) {
  const auto* offsets = static_cast<const IndexT*>(p.offsets);
  check_offsets(offsets, p.batch, p.total, p.errors, p.error_op, thread_in_grid(),
                threads_in_grid());
  constexpr int kInFlight = kJaggedRowsInFlight<kOp>;
  const int lanes = 1 << lanes_log2;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
#pragma unroll 1
  for (int64_t run = group_in_grid(lanes_log2); run * kRowsPerRun < p.rows; run += p.rows_per_pass) {
    const int64_t first = run * kRowsPerRun, end = min(first + kRowsPerRun, p.rows);
    // b: the last sequence with offsets[b] <= row (-1: none), s its clamped rows.
    int64_t b = last_start_at_or_before(offsets, p.batch, first);
    Seq s = b >= 0 ? sequence(offsets, b, p.total) : Seq{0, 0};
#pragma unroll 1
    for (int64_t r = first; r < end; r += kInFlight) {
      bool live[kInFlight], has_pos[kInFlight];
      const char* dense_row[kInFlight];
      const char* x_row[kInFlight];
      char* out_row[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        const int64_t row = r + k;
        live[k] = row < end;
        if (live[k] && row >= s.start + s.length) {  // past sequence b: one of the later ones
          b = last_start_at_or_before(offsets, b + 1, p.batch, row);
          s = b >= 0 ? sequence(offsets, b, p.total) : Seq{0, 0};
        }
        const int64_t j = row - s.start;  // >= 0: offsets[b] <= row (clamped alike, row < total)
        has_pos[k] = live[k] && b >= 0 && j < min(s.length, p.max_length);
        dense_row[k] = p.dense + (has_pos[k] ? b * p.dense_batch_bytes + j * p.dense_row_bytes : 0);
        x_row[k] = p.x + row * p.x_row_bytes;
        out_row[k] = p.out + row * p.out_row_bytes;
      }
#pragma unroll 1
      for (int v = lane; v < p.dim_vecs; v += lanes) {
        const int64_t col = static_cast<int64_t>(v) * VEC;
        RawVec<VEC> d[kInFlight], x[kInFlight];
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) {
          d[k] = load_streaming<VEC>(dense_row[k] + col, has_pos[k]);  // 0 without position
          if constexpr (kOp == JaggedDenseOp::kAddJagged) {
            x[k] = load_streaming<VEC>(x_row[k] + col, live[k]);
          } else if constexpr (kOp == JaggedDenseOp::kMul) {
            x[k] = load_streaming<VEC>(x_row[k] + col, has_pos[k]);
          }
        }
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) {
          if (!live[k]) continue;
          if constexpr (kOp == JaggedDenseOp::kToJagged) {
            store_vec<VEC>(out_row[k] + col, d[k]);
          } else if constexpr (kOp == JaggedDenseOp::kAddJagged) {
            store_vec<VEC>(out_row[k] + col, pick(has_pos[k], combine<T>(x[k], d[k], Add{}), x[k]));
          } else {
            store_vec<VEC>(out_row[k] + col,
                           pick(has_pos[k], combine<T>(x[k], d[k], Mul{}), RawVec<VEC>{}));
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// jagged_softmax and its backward (launch_jagged_softmax).

struct SoftmaxParams {
  const void* offsets;
  int64_t batch;
  int64_t sequences;  // sequences to work on: batch, or 0 when out has nothing to write
  int64_t max_length;
  int64_t total;
  int dim_vecs;
  const char* values;
  int64_t values_row_bytes;
  const char* grad;  // backward only
  int64_t grad_row_bytes;
  char* out;
  int64_t out_row_bytes;
  int64_t* errors;
};

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces val (one value per column element of the thread's vector) over the block's row slots:
// within each warp by shuffles (lanes lanes apart hold the same columns), then across warps by a
// tree through red [kMaxWarps][E][kWarpSize]. Every thread gets its columns' result; a fixed order,
// so the result is deterministic. Called by the whole block.
template <int E, typename Op>
__device__ __forceinline__ void block_reduce(float (&val)[E], float* red, int lanes, Op op) {
  for (int offset = lanes; offset < kWarpSize; offset *= 2) {
#pragma unroll
    for (int e = 0; e < E; ++e) val[e] = op(val[e], __shfl_xor_sync(0xffffffffu, val[e], offset));
  }
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
#pragma unroll
  for (int e = 0; e < E; ++e) red[(warp * E + e) * kWarpSize + lane] = val[e];
  int half = 1;
  while (half < warps) half *= 2;
  for (half /= 2; half > 0; half /= 2) {
    __syncthreads();
    if (warp < half && warp + half < warps) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        val[e] = op(val[e], red[((warp + half) * E + e) * kWarpSize + lane]);
        red[(warp * E + e) * kWarpSize + lane] = val[e];
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int e = 0; e < E; ++e) val[e] = red[e * kWarpSize + lane];
  __syncthreads();  // red is reused by the next reduction
}

// exp(x - m) with -inf contributing 0 even when m is -inf (a slot that met only -inf must not turn
// the sum NaN); +inf or NaN still give NaN, as in the CPU kernel.
__device__ __forceinline__ float exp_term(float x, float m) {
  return x == -INFINITY ? 0.f : expf(x - m);
}
// exp(m - top), 1 when equal (both -inf, or both +inf).
__device__ __forceinline__ float rescale(float m, float top) {
  return m == top ? 1.f : expf(m - top);
}

template <int VEC>
__device__ __forceinline__ RawVec<VEC> load_if(const char* ptr, bool pred) {
  RawVec<VEC> v{};
  if (pred) v = load_cached<VEC>(ptr);  // allocating: the write pass reads the row again
  return v;
}

// Rows [lo, hi) of the thread's column vector set to 0 (out points at that column).
template <int VEC>
__device__ __forceinline__ void zero_rows(char* out, int64_t row_bytes, int64_t lo, int64_t hi,
                                          int slot, int slots) {
#pragma unroll 1
  for (int64_t j = lo + slot; j < hi; j += slots)
    store_vec<VEC>(out + j * row_bytes, RawVec<VEC>{});
}

// Forward of one sequence's column chunk: an online max and sum of exp over the rows (kRows rows
// per step: their loads in flight together, one rescale per step), the block's max, then its sum,
// then the write pass.
template <typename T, int VEC>
__device__ __forceinline__ void softmax_forward(const SoftmaxParams& p, int64_t start, int64_t n,
                                                int v, int slot, int slots, bool active,
                                                int lanes, float* red) {
  constexpr int E = VEC / sizeof(T);
  const int64_t col = static_cast<int64_t>(v) * VEC;
  const char* values = p.values + start * p.values_row_bytes + col;
  char* out = p.out + start * p.out_row_bytes + col;
  constexpr int kRows = kSoftmaxRows<E, 1>;
  float m[E], sum[E];
#pragma unroll
  for (int e = 0; e < E; ++e) m[e] = -INFINITY, sum[e] = 0.f;
#pragma unroll 1
  for (int64_t j0 = slot; j0 < n; j0 += kRows * slots) {
    RawVec<VEC> x[kRows];
    bool in[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      in[u] = active && j < n;
      x[u] = load_if<VEC>(values + j * p.values_row_bytes, in[u]);
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float top = m[e];
#pragma unroll
      for (int u = 0; u < kRows; ++u) top = in[u] ? fmaxf(top, get_elt<T>(x[u], e)) : top;
      float s = sum[e] * rescale(m[e], top);
#pragma unroll
      for (int u = 0; u < kRows; ++u) s += in[u] ? exp_term(get_elt<T>(x[u], e), top) : 0.f;
      m[e] = top;
      sum[e] = s;
    }
  }
  float top[E];
#pragma unroll
  for (int e = 0; e < E; ++e) top[e] = m[e];
  block_reduce(top, red, lanes, Max{});
#pragma unroll
  for (int e = 0; e < E; ++e) sum[e] *= rescale(m[e], top[e]);
  block_reduce(sum, red, lanes, Add{});
#pragma unroll
  for (int e = 0; e < E; ++e) sum[e] = 1.f / sum[e];  // from here on, the sum's reciprocal
#pragma unroll 1
  for (int64_t j0 = slot; j0 < n; j0 += kRows * slots) {
    RawVec<VEC> x[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      x[u] = load_if<VEC>(values + j * p.values_row_bytes, active && j < n);
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      RawVec<VEC> y;
#pragma unroll
      for (int e = 0; e < E; ++e) set_elt<T>(y, e, expf(get_elt<T>(x[u], e) - top[e]) * sum[e]);
      if (active && j < n) store_vec<VEC>(out + j * p.out_row_bytes, y);
    }
  }
}

// Backward of one sequence's column chunk: dot = sum over the rows of grad * values, reduced over
// the block, then out = values * (grad - dot).
template <typename T, int VEC>
__device__ __forceinline__ void softmax_backward(const SoftmaxParams& p, int64_t start, int64_t n,
                                                 int v, int slot, int slots, bool active,
                                                 int lanes, float* red) {
  constexpr int E = VEC / sizeof(T);
  const int64_t col = static_cast<int64_t>(v) * VEC;
  const char* values = p.values + start * p.values_row_bytes + col;
  const char* grad = p.grad + start * p.grad_row_bytes + col;
  char* out = p.out + start * p.out_row_bytes + col;
  constexpr int kRows = kSoftmaxRows<E, 2>;
  float dot[E] = {};
#pragma unroll 1
  for (int64_t j0 = slot; j0 < n; j0 += kRows * slots) {
    RawVec<VEC> y[kRows], g[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      y[u] = load_if<VEC>(values + j * p.values_row_bytes, active && j < n);  // 0 past the end
      g[u] = load_if<VEC>(grad + j * p.grad_row_bytes, active && j < n);
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
#pragma unroll
      for (int e = 0; e < E; ++e) dot[e] = fmaf(get_elt<T>(g[u], e), get_elt<T>(y[u], e), dot[e]);
    }
  }
  block_reduce(dot, red, lanes, Add{});
#pragma unroll 1
  for (int64_t j0 = slot; j0 < n; j0 += kRows * slots) {
    RawVec<VEC> y[kRows], g[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      y[u] = load_if<VEC>(values + j * p.values_row_bytes, active && j < n);
      g[u] = load_if<VEC>(grad + j * p.grad_row_bytes, active && j < n);
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * slots;
      RawVec<VEC> o;
#pragma unroll
      for (int e = 0; e < E; ++e)
        set_elt<T>(o, e, get_elt<T>(y[u], e) * (get_elt<T>(g[u], e) - dot[e]));
      if (active && j < n) store_vec<VEC>(out + j * p.out_row_bytes, o);
    }
  }
}

// Block (blockIdx.x + k * gridDim.x, blockIdx.y): sequence b's column chunk blockIdx.y, a chunk
// being lanes vectors. Thread slot s (threads / lanes slots) takes rows s, s + slots, ... It also
// writes 0 to the rows of its sequence past max_length, and sequences 0 and batch - 1 to the rows
// before and after every sequence: with any offsets, every row of out is written.
template <typename T, typename IndexT, int VEC, bool kBackward>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    jagged_softmax_kernel(const SoftmaxParams p, int lanes_log2) {
  constexpr int E = VEC / sizeof(T);
  __shared__ float red[kMaxWarps * E * kWarpSize];
  const auto* offsets = static_cast<const IndexT*>(p.offsets);
  if (blockIdx.y == 0) {
    check_offsets(offsets, p.batch, p.total, p.errors, ErrorOp::kJaggedSoftmax, thread_in_grid(),
                  threads_in_grid());
  }
  const int lanes = 1 << lanes_log2;
  const int slot = static_cast<int>(threadIdx.x) >> lanes_log2;
  const int slots = static_cast<int>(blockDim.x) >> lanes_log2;
  const int v =
      static_cast<int>(blockIdx.y) * lanes + (static_cast<int>(threadIdx.x) & (lanes - 1));
  const bool active = v < p.dim_vecs;
#pragma unroll 1
  for (int64_t b = blockIdx.x; b < p.sequences; b += gridDim.x) {  // block-uniform
    const Seq s = sequence(offsets, b, p.total);
    const int64_t n = min(s.length, p.max_length);
    // The zeros first: then only s.start and n stay live through the passes.
    if (active) {
      char* out = p.out + static_cast<int64_t>(v) * VEC;
      zero_rows<VEC>(out, p.out_row_bytes, s.start + n, s.start + s.length, slot, slots);
      if (b == 0) zero_rows<VEC>(out, p.out_row_bytes, 0, s.start, slot, slots);
      if (b == p.batch - 1) {
        zero_rows<VEC>(out, p.out_row_bytes, clamped_offset(offsets, p.batch, p.total), p.total,
                       slot, slots);
      }
    }
    if constexpr (kBackward) {
      softmax_backward<T, VEC>(p, s.start, n, v, slot, slots, active, lanes, red);
    } else {
      softmax_forward<T, VEC>(p, s.start, n, v, slot, slots, active, lanes, red);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// jagged_index_select and its backward (launch_jagged_index_select).

struct IndexSelectParams {
  int dim_vecs;
  const char* values;  // forward: values; backward: grad_output
  int64_t values_row_bytes;
  const int64_t* input_offsets;
  const int64_t* output_offsets;
  const void* indices;
  int64_t num_indices;
  int64_t batch;
  int64_t num_input_rows;
  char* out;
  int64_t out_row_bytes;
  int64_t rows;  // output rows (grad rows backward); 0: only check the indices
  int64_t rows_per_pass;
  int64_t* errors;
};

// The input row of output row o, or -1: o in no selected sequence, its index out of range, or the
// source past its sequence or the input.
template <typename IndexT>
__device__ __forceinline__ int64_t source_row(const IndexSelectParams& p, int64_t o) {
  const int64_t i = last_start_at_or_before(p.output_offsets, p.num_indices, o);
  if (i < 0 || o >= __ldg(p.output_offsets + i + 1)) return -1;
  const int64_t index = __ldg(static_cast<const IndexT*>(p.indices) + i);
  if (static_cast<uint64_t>(index) >= static_cast<uint64_t>(p.batch)) return -1;
  const int64_t row = __ldg(p.input_offsets + index) + (o - __ldg(p.output_offsets + i));
  const int64_t end = min(__ldg(p.input_offsets + index + 1), p.num_input_rows);
  return row >= 0 && row < end ? row : -1;
}

// out[0 .. E) += x in as few L2 atomics as the width allows: float4 / float2 ones from sm_90 on.
template <int E>
__device__ __forceinline__ void atomic_add(float* out, const float (&x)[E]) {
#if __CUDA_ARCH__ >= 900
  constexpr int kWidth = E % 4 == 0 ? 4 : E % 2 == 0 ? 2 : 1;
#else
  constexpr int kWidth = 1;
#endif
#pragma unroll
  for (int e = 0; e < E; e += kWidth) {
    if constexpr (kWidth == 4) {
      atomicAdd(reinterpret_cast<float4*>(out + e),
                make_float4(x[e], x[e + 1], x[e + 2], x[e + 3]));
    } else if constexpr (kWidth == 2) {
      atomicAdd(reinterpret_cast<float2*>(out + e), make_float2(x[e], x[e + 1]));
    } else {
      atomicAdd(out + e, x[e]);
    }
  }
}

// Forward: output row o = its source row, or 0. Backward: grad row o added (fp32) into out at its
// source row, if any.
template <typename T, typename IndexT, int VEC, bool kBackward>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    jagged_index_select_kernel(const IndexSelectParams p, int lanes_log2) {
  constexpr int E = VEC / sizeof(T);
  if (p.errors != nullptr) {
    const auto* indices = static_cast<const IndexT*>(p.indices);
    for (int64_t i = thread_in_grid(); i < p.num_indices; i += threads_in_grid()) {
      const int64_t index = __ldg(indices + i);
      if (unlikely(static_cast<uint64_t>(index) >= static_cast<uint64_t>(p.batch)))
        record_error(p.errors, ErrorOp::kJaggedIndexSelect, ErrorCode::kIndexOutOfRange, i, index,
                     p.batch);
    }
  }
  const int lanes = 1 << lanes_log2;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
#pragma unroll 1
  for (int64_t o = group_in_grid(lanes_log2); o < p.rows; o += p.rows_per_pass) {
    const int64_t src = source_row<IndexT>(p, o);
    if constexpr (kBackward) {
      if (src < 0) continue;
      const char* grad_row = p.values + o * p.values_row_bytes;
      float* out_row = reinterpret_cast<float*>(p.out + src * p.out_row_bytes);
#pragma unroll 1
      for (int v = lane; v < p.dim_vecs; v += lanes) {
        const RawVec<VEC> g = load_streaming<VEC>(grad_row + static_cast<int64_t>(v) * VEC, true);
        float x[E];
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = get_elt<T>(g, e);
        atomic_add(out_row + static_cast<int64_t>(v) * E, x);
      }
    } else {
      const char* in_row = p.values + (src < 0 ? 0 : src) * p.values_row_bytes;
      char* out_row = p.out + o * p.out_row_bytes;
#pragma unroll 1
      for (int v = lane; v < p.dim_vecs; v += lanes) {
        const int64_t col = static_cast<int64_t>(v) * VEC;
        store_vec<VEC>(out_row + col, load_streaming<VEC>(in_row + col, src >= 0));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: checks, grid sizing, dispatch.

LaunchError check_config(const JaggedConfig& c, int elt_bytes) {
  if (c.vec_bytes != 2 && c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16)
    return "jagged: config.vec_bytes must be 2, 4, 8 or 16";
  if (c.vec_bytes < elt_bytes) return "jagged: config.vec_bytes is smaller than the element size";
  if (c.lanes_per_row < 1 || c.lanes_per_row > kWarpSize ||
      (c.lanes_per_row & (c.lanes_per_row - 1)) != 0)
    return "jagged: config.lanes_per_row must be a power of two up to 32";
  // A multiple of 32 is one of every valid lanes_per_row too: groups never straddle warps.
  if (c.block_threads < kWarpSize || c.block_threads > kMaxBlockThreads ||
      c.block_threads % kWarpSize != 0)
    return "jagged: config.block_threads must be a multiple of 32, at most 1024";
  return nullptr;
}

// A tensor of rows `stride` elements apart (0: the contiguous output), unused when base is null.
struct Rows {
  const void* base;
  int64_t stride;
};

// Rows of dim elements, accessed vec_bytes at a time: dim * elt_bytes, every stride in bytes and
// every base pointer must be multiples of vec_bytes.
LaunchError check_rows(int64_t dim, int elt_bytes, int vec_bytes,
                       std::initializer_list<Rows> tensors) {
  if (dim < 0) return "jagged: negative dim";
  // Vectors of a row are numbered in 32 bits, with room for a group's stride.
  if (dim > (int64_t{1} << 30) * vec_bytes / elt_bytes) return "jagged: dim too large";
  if (dim * elt_bytes % vec_bytes != 0)
    return "jagged: dim * element size is not a multiple of config.vec_bytes";
  for (const Rows& t : tensors) {
    if (t.base == nullptr) continue;
    if (!launch::aligned(t.base, vec_bytes))
      return "jagged: a base pointer is not aligned to config.vec_bytes";
    if (t.stride < 0 || t.stride > INT64_MAX / 16)
      return "jagged: negative or too large row stride";
    if (t.stride * elt_bytes % vec_bytes != 0)
      return "jagged: a row stride in bytes is not a multiple of config.vec_bytes";
  }
  return nullptr;
}

// One group of lanes per row; no rows: one block, for the value checks.
launch::Grid row_grid(int64_t rows, const JaggedConfig& c) {
  return launch::grid_for(std::max<int64_t>(rows, 1), 1, c.lanes_per_row, c.block_threads,
                          kGridLimits);
}

// f(TypeTag<T>, TypeTag<IndexT>, IntTag<vec_bytes>) for checked dtypes and config (no instance
// with vec_bytes below the element size is made).
template <typename F>
LaunchError dispatch(DType dtype, DType index_dtype, int vec_bytes, F&& f) {
  return launch::dispatch_float<CudaTypes>(dtype, [&](auto t) {
    return launch::dispatch_index(index_dtype, [&](auto i) {
      return launch::dispatch_int<2, 4, 8, 16>(vec_bytes, [&](auto vec) -> LaunchError {
        constexpr int kVecBytes = decltype(vec)::value;
        constexpr int kEltBytes = sizeof(typename decltype(t)::type);
        if constexpr (kVecBytes < kEltBytes)
          return "jagged: config.vec_bytes is smaller than the element size";
        else
          return f(t, i, vec);
      });
    });
  });
}

}  // namespace

LaunchError launch_jagged_dense(const JaggedDenseArgs& a, const JaggedConfig& c, void* stream) {
  if (!launch::is_float(a.dtype)) return "jagged_dense: dtype must be float32, float16 or bfloat16";
  if (!launch::is_index(a.offsets_dtype)) return "jagged_dense: offsets must be int32 or int64";
  const int32_t op = static_cast<int32_t>(a.op);
  if (op < 0 || op > static_cast<int32_t>(JaggedDenseOp::kMul)) return "jagged_dense: unknown op";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.batch < 0 || a.max_length < 0 || a.total < 0) return "jagged_dense: negative size";
  if (LaunchError e = check_rows(a.dim, elt, c.vec_bytes,
                                 {{a.x, a.x_row_stride}, {a.dense, a.dense_batch_stride},
                                  {a.dense, a.dense_row_stride}, {a.out, 0}}))
    return e;
  const bool dense_out = a.op == JaggedDenseOp::kToPaddedDense || a.op == JaggedDenseOp::kAddDense;
  DenseParams p;
  p.offsets = a.offsets;
  p.batch = a.batch;
  p.max_length = a.max_length;
  p.total = a.total;
  p.dim_vecs = static_cast<int>(a.dim * elt / c.vec_bytes);
  p.x = static_cast<const char*>(a.x);
  p.x_row_bytes = a.x_row_stride * elt;
  p.dense = static_cast<const char*>(a.dense);
  p.dense_batch_bytes = a.dense_batch_stride * elt;
  p.dense_row_bytes = a.dense_row_stride * elt;
  p.padding_value = a.padding_value;
  p.out = static_cast<char*>(a.out);
  p.out_row_bytes = a.dim * elt;
  p.rows = a.dim == 0 ? 0 : dense_out ? a.batch * a.max_length : a.total;
  p.errors = a.errors;
  p.error_op = a.error_op;
  if (p.rows == 0 && a.errors == nullptr) return nullptr;
  // One group per run of kRowsPerRun rows.
  const launch::Grid grid = row_grid((p.rows + kRowsPerRun - 1) / kRowsPerRun, c);
  p.rows_per_pass = grid.items_per_pass;  // runs
  const int64_t pass_rows = p.rows_per_pass * kRowsPerRun;
  p.pass_b = a.max_length > 0 ? pass_rows / a.max_length : 0;
  p.pass_j = a.max_length > 0 ? pass_rows % a.max_length : 0;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(a.dtype, a.offsets_dtype, c.vec_bytes, [&](auto t, auto i, auto vec) {
    using T = typename decltype(t)::type;
    using IndexT = typename decltype(i)::type;
    constexpr int kVec = decltype(vec)::value;
    const dim3 blocks(grid.blocks), threads(c.block_threads);
    switch (a.op) {
      case JaggedDenseOp::kToPaddedDense:
        jagged_to_dense_kernel<T, IndexT, kVec, false>
            <<<blocks, threads, 0, s>>>(p, grid.lanes_log2);
        break;
      case JaggedDenseOp::kAddDense:
        jagged_to_dense_kernel<T, IndexT, kVec, true>
            <<<blocks, threads, 0, s>>>(p, grid.lanes_log2);
        break;
      case JaggedDenseOp::kToJagged:
        dense_to_jagged_kernel<T, IndexT, kVec, JaggedDenseOp::kToJagged>
            <<<blocks, threads, 0, s>>>(p, grid.lanes_log2);
        break;
      case JaggedDenseOp::kAddJagged:
        dense_to_jagged_kernel<T, IndexT, kVec, JaggedDenseOp::kAddJagged>
            <<<blocks, threads, 0, s>>>(p, grid.lanes_log2);
        break;
      case JaggedDenseOp::kMul:
        dense_to_jagged_kernel<T, IndexT, kVec, JaggedDenseOp::kMul>
            <<<blocks, threads, 0, s>>>(p, grid.lanes_log2);
        break;
    }
    return launch_status();
  });
}

LaunchError launch_jagged_softmax(const JaggedSoftmaxArgs& a, const JaggedConfig& c, void* stream) {
  if (!launch::is_float(a.dtype))
    return "jagged_softmax: dtype must be float32, float16 or bfloat16";
  if (!launch::is_index(a.offsets_dtype)) return "jagged_softmax: offsets must be int32 or int64";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.batch < 0 || a.max_length < 0 || a.total < 0) return "jagged_softmax: negative size";
  const bool backward = a.grad_output != nullptr;
  if (LaunchError e = check_rows(a.dim, elt, c.vec_bytes,
                                 {{a.values, a.values_row_stride},
                                  {a.grad_output, a.grad_row_stride},
                                  {a.out, 0}}))
    return e;
  const int dim_vecs = static_cast<int>(a.dim * elt / c.vec_bytes);
  const int64_t chunks = (dim_vecs + c.lanes_per_row - 1) / c.lanes_per_row;
  if (chunks > kMaxGridY) return "jagged_softmax: dim needs more than 65535 column chunks";
  auto s = static_cast<cudaStream_t>(stream);
  const bool has_rows = a.total > 0 && a.dim > 0;
  // No sequence: every row is in none, so all of out is 0.
  if (a.batch == 0 && has_rows) {
    const cudaError_t err =
        cudaMemsetAsync(a.out, 0, static_cast<size_t>(a.total * a.dim * elt), s);
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  const bool work = has_rows && a.batch > 0;
  if (!work && a.errors == nullptr) return nullptr;
  SoftmaxParams p;
  p.offsets = a.offsets;
  p.batch = a.batch;
  p.sequences = work ? a.batch : 0;
  p.max_length = a.max_length;
  p.total = a.total;
  p.dim_vecs = dim_vecs;
  p.values = static_cast<const char*>(a.values);
  p.values_row_bytes = a.values_row_stride * elt;
  p.grad = static_cast<const char*>(a.grad_output);
  p.grad_row_bytes = a.grad_row_stride * elt;
  p.out = static_cast<char*>(a.out);
  p.out_row_bytes = a.dim * elt;
  p.errors = a.errors;
  // Without work, one block checks the offsets.
  const int64_t sequence_blocks = std::min<int64_t>(a.batch, kGridLimits.max_blocks);
  const dim3 blocks(work ? static_cast<unsigned>(sequence_blocks) : 1,
                    work ? static_cast<unsigned>(chunks) : 1);
  int lanes_log2 = 0;
  while ((1 << lanes_log2) < c.lanes_per_row) ++lanes_log2;
  return dispatch(a.dtype, a.offsets_dtype, c.vec_bytes, [&](auto t, auto i, auto vec) {
    using T = typename decltype(t)::type;
    using IndexT = typename decltype(i)::type;
    constexpr int kVec = decltype(vec)::value;
    const dim3 threads(c.block_threads);
    if (backward) {
      jagged_softmax_kernel<T, IndexT, kVec, true><<<blocks, threads, 0, s>>>(p, lanes_log2);
    } else {
      jagged_softmax_kernel<T, IndexT, kVec, false><<<blocks, threads, 0, s>>>(p, lanes_log2);
    }
    return launch_status();
  });
}

LaunchError launch_jagged_index_select(const JaggedIndexSelectArgs& a, const JaggedConfig& c,
                                       void* stream) {
  if (!launch::is_float(a.dtype))
    return "jagged_index_select: dtype must be float32, float16 or bfloat16";
  if (!launch::is_index(a.indices_dtype))
    return "jagged_index_select: indices must be int32 or int64";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.num_indices < 0 || a.batch < 0 || a.num_input_rows < 0 || a.num_output_rows < 0)
    return "jagged_index_select: negative size";
  if (LaunchError e =
          check_rows(a.dim, elt, c.vec_bytes, {{a.values, a.values_row_stride}, {a.out, 0}}))
    return e;
  // Backward: each lane adds its vector's elements as fp32 vectors of vec_bytes * 4 / elt bytes.
  if (a.backward && !launch::aligned(a.out, c.vec_bytes * 4 / elt))
    return "jagged_index_select: the float32 accumulator is not aligned to its vector width";
  IndexSelectParams p;
  p.dim_vecs = static_cast<int>(a.dim * elt / c.vec_bytes);
  p.values = static_cast<const char*>(a.values);
  p.values_row_bytes = a.values_row_stride * elt;
  p.input_offsets = a.input_offsets;
  p.output_offsets = a.output_offsets;
  p.indices = a.indices;
  p.num_indices = a.num_indices;
  p.batch = a.batch;
  p.num_input_rows = a.num_input_rows;
  p.out = static_cast<char*>(a.out);
  p.out_row_bytes = a.dim * (a.backward ? static_cast<int64_t>(sizeof(float)) : elt);
  p.rows = a.dim == 0 ? 0 : a.num_output_rows;
  p.errors = a.errors;
  if (p.rows == 0 && (a.errors == nullptr || a.num_indices == 0)) return nullptr;
  const launch::Grid grid = row_grid(p.rows, c);
  p.rows_per_pass = grid.items_per_pass;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(a.dtype, a.indices_dtype, c.vec_bytes, [&](auto t, auto i, auto vec) {
    using T = typename decltype(t)::type;
    using IndexT = typename decltype(i)::type;
    constexpr int kVec = decltype(vec)::value;
    if (a.backward) {
      jagged_index_select_kernel<T, IndexT, kVec, true>
          <<<grid.blocks, c.block_threads, 0, s>>>(p, grid.lanes_log2);
    } else {
      jagged_index_select_kernel<T, IndexT, kVec, false>
          <<<grid.blocks, c.block_threads, 0, s>>>(p, grid.lanes_log2);
    }
    return launch_status();
  });
}

}  // namespace mymetaops
