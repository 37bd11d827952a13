// The jagged family's memory-bound ops for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950:
// MI350X/MI355X), written for wave64. Semantics: csrc/include/mymetaops/jagged.h. cuda/jagged.cu
// defines the same launchers; a build links one of the two.
//
//  * jagged_dense_kernel (launch_jagged_dense): an aligned group of lanes_per_row lanes of a wave
//    owns one output row. Lane l moves V = vec_bytes / element-size consecutive columns at l*V of
//    every column chunk (lanes_per_row*V columns), so a group reads a row slice as adjacent
//    vec_bytes accesses (global_load_dwordx4 at 16 bytes). Dense outputs are walked by position
//    (b, j), jagged outputs by row, each finding its sequence by a binary search of offsets.
//  * jagged_softmax_kernel (launch_jagged_softmax): one block per (sequence, column chunk). Its
//    threads are row slots of lanes_per_row lanes; slot s takes rows s, s + slots, ... Two passes
//    over the rows: per-thread partials (an online max and sum of exponentials, or the dot of the
//    backward), reduced over the block with cross-lane shuffles inside a wave and LDS across waves,
//    then the output pass.
//  * jagged_index_select_kernel (launch_jagged_index_select): one group per output (grad) row,
//    copied from (forward) or atomically added to (backward) its source row.
// Bad values (mymetaops/errors.h) are checked where they are read: the items a grid walks are its
// output rows and also every offsets entry (or index), so each entry is checked once even when
// there is no row to write. Arithmetic is fp32; pure copies move the bits unchanged.
// No MFMA, so the kernels also run on NVIDIA GPUs through hip/shim (warp size 32) for testing.

#include <cstdint>
#include <initializer_list>

#include "hip_compat.h"
#include "mymetaops/jagged.h"
#include "mymetaops/launch.h"

namespace mymetaops {
namespace {

using hip_compat::kWaveSize;

// The contract's block size cap, also declared to the compiler (register allocation fits it).
constexpr int kMaxBlockThreads = launch::kMaxBlockThreads;
// HIP counts a grid in work-items with 32 bits; bigger problems loop over the items.
constexpr launch::GridLimits kGridLimits{UINT32_MAX, UINT32_MAX};
// Softmax: rows each thread loads before it uses any, so that several are in flight per lane.
constexpr int kRowBatch = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

// ---------------------------------------------------------------------------------------------
// Element types: 16-bit floats are carried as raw bits and converted by hip_compat.

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

struct HipTypes {
  using Float32 = float;
  using Float16 = Half;
  using BFloat16 = BFloat16;
};

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(Half x) { return hip_compat::half_bits_to_float(x.bits); }
__device__ inline float to_float(BFloat16 x) { return hip_compat::bfloat16_bits_to_float(x.bits); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline Half from_float<Half>(float x) {
  return {hip_compat::float_to_half_bits(x)};
}
template <>
__device__ inline BFloat16 from_float<BFloat16>(float x) {
  return {hip_compat::float_to_bfloat16_bits(x)};
}

// What one lane moves per row access: kVecBytes bytes, naturally aligned. V{} is all zero bits.
template <typename T, int kVecBytes>
struct alignas(kVecBytes) Vec {
  using Elem = T;
  static constexpr int kElems = kVecBytes / int(sizeof(T));
  T v[kElems];
};

template <typename V>
__device__ inline V load(const typename V::Elem* p) {
  return *reinterpret_cast<const V*>(p);
}
template <typename V>
__device__ inline void store(typename V::Elem* p, const V& v) {
  *reinterpret_cast<V*>(p) = v;
}

// f(a, b) elementwise, in fp32, rounded once.
template <typename V, typename F>
__device__ inline V combine(const V& a, const V& b, F f) {
  V r;
#pragma unroll
  for (int k = 0; k < V::kElems; ++k)
    r.v[k] = from_float<typename V::Elem>(f(to_float(a.v[k]), to_float(b.v[k])));
  return r;
}

template <typename V>
__device__ inline V filled(float x) {
  V r;
#pragma unroll
  for (int k = 0; k < V::kElems; ++k) r.v[k] = from_float<typename V::Elem>(x);
  return r;
}

// 2^x: llvm.exp2 (v_exp_f32 with denormal scaling on CDNA, ex2.approx on NVIDIA), no libm call.
__device__ inline float pow2(float x) { return __builtin_exp2f(x); }

// ---------------------------------------------------------------------------------------------
// Offsets.

struct Seq {
  int64_t start, end;
};

// Entries lo, hi of an offsets tensor as rows of a tensor of `total`: both clamped to
// [0, total], an end below its start an empty sequence.
__device__ inline Seq clamped(int64_t lo, int64_t hi, int64_t total) {
  const int64_t start = lo < 0 ? 0 : (lo > total ? total : lo);
  return {start, hi < start ? start : (hi > total ? total : hi)};
}

template <typename I>
__device__ inline Seq sequence(const I* offsets, int64_t b, int64_t total) {
  return clamped(offsets[b], offsets[b + 1], total);
}

// The sequence holding row r (0 <= r < total): the last b < count with offsets[b] <= r, or -1.
// Clamping to [0, total] does not change how an entry compares with such an r, so the search reads
// the entries as they are. Whatever they are, it ends within 64 steps at a b that starts at or
// before r; the caller checks r against that sequence's end.
template <typename I>
__device__ inline int64_t sequence_of(const I* offsets, int64_t count, int64_t r) {
  int64_t lo = 0, hi = count;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (int64_t(offsets[mid]) <= r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo - 1;
}

// Records offsets[i] if it is bad: negative, below offsets[i - 1], or past total (the rows it
// indexes). One lane per entry: the record is host memory.
template <typename I>
__device__ inline void check_offsets_entry(const I* offsets, int64_t i, int64_t total,
                                           int64_t* errors, ErrorOp op) {
  const int64_t value = offsets[i];
  const int64_t prev = i > 0 ? int64_t(offsets[i - 1]) : 0;
  if (__builtin_expect((value < 0) | (value < prev) | (value > total), 0)) {
    const ErrorCode code = value < 0      ? ErrorCode::kNegativeOffset
                           : value < prev ? ErrorCode::kDecreasingOffset
                                          : ErrorCode::kOffsetPastEnd;
    hip_compat::record_error(errors, op, code, i, value,
                             code == ErrorCode::kOffsetPastEnd ? total : 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Groups of lanes_per_row lanes (a power of two, passed as its log2: shifts, not divisions), one
// per work item (launch::grid_for with one group per item); the shape comes from the host rather
// than from blockDim/gridDim (see hip_compat::thread_in_block).

struct Groups {
  int lanes_shift;
  int block_threads;
  int64_t items_per_pass;  // work items the whole grid covers per pass
};

Groups groups_of(const launch::Grid& grid, int block_threads) {
  return {grid.lanes_log2, block_threads, grid.items_per_pass};
}

struct GroupLane {
  int64_t first;  // the calling lane's first item; then every items_per_pass-th
  int lane;       // lane within the group
};

__device__ inline GroupLane group_lane(const Groups& g) {
  const unsigned thread = hip_compat::thread_in_block();
  const int64_t global = int64_t(hip_compat::block_in_grid()) * g.block_threads + thread;
  return {global >> g.lanes_shift, int(thread) & ((1 << g.lanes_shift) - 1)};
}

// ---------------------------------------------------------------------------------------------
// jagged <-> dense: output row `item` is dense position (seq, j) = (item / max_length,
// item % max_length) for the dense outputs, jagged row `item` for the jagged ones.

template <typename T, typename I>
struct DenseParams {
  JaggedDenseOp op;
  const I* offsets;
  int64_t batch, max_length, total, dim;
  const T* x;  // nullptr for kToJagged
  int64_t x_row_stride;
  const T* dense;  // nullptr for kToPaddedDense
  int64_t dense_batch_stride, dense_row_stride;
  float padding_value;
  T* out;
  int64_t rows;   // output rows: batch * max_length or total; 0 when dim == 0
  int64_t items;  // max(rows, batch + 1): item i <= batch also checks offsets[i]
  int64_t* errors;
  ErrorOp error_op;
  Groups grid;
};

// Where an output row reads: dense position (seq, j), the jagged row `row` there, and whether the
// position holds it (else x at `row` and dense at (seq, j) are read only where the op says so).
struct Position {
  int64_t seq, j, row;
  bool has_row;
};

template <typename I>
__device__ inline Position dense_position(const I* offsets, int64_t item, int64_t max_length,
                                          int64_t total) {
  const int64_t seq = item / max_length;
  const int64_t j = item - seq * max_length;
  const Seq s = sequence(offsets, seq, total);
  return {seq, j, s.start + j, j < s.end - s.start};
}

template <typename I>
__device__ inline Position jagged_position(const I* offsets, int64_t batch, int64_t item,
                                           int64_t max_length, int64_t total) {
  const int64_t seq = sequence_of(offsets, batch, item);
  const Seq s = seq >= 0 ? sequence(offsets, seq, total) : Seq{0, 0};
  const int64_t j = item - s.start;
  return {seq >= 0 ? seq : 0, j, item, (item < s.end) && (j < max_length)};
}

template <typename T, typename I, int kVecBytes>
__global__ void __launch_bounds__(kMaxBlockThreads) jagged_dense_kernel(const DenseParams<T, I> p) {
  using V = Vec<T, kVecBytes>;
  const GroupLane g = group_lane(p.grid);
  const int64_t chunk = int64_t(V::kElems) << p.grid.lanes_shift;
  const bool dense_output = (p.op == JaggedDenseOp::kToPaddedDense) |
                            (p.op == JaggedDenseOp::kAddDense);
  const V padding = filled<V>(p.padding_value);
  const auto add = [](float a, float b) { return a + b; };
  const auto mul = [](float a, float b) { return a * b; };
  for (int64_t item = g.first; item < p.items; item += p.grid.items_per_pass) {
    if ((item <= p.batch) & (g.lane == 0))
      check_offsets_entry(p.offsets, item, p.total, p.errors, p.error_op);
    if (item >= p.rows) continue;
    const Position pos = dense_output ? dense_position(p.offsets, item, p.max_length, p.total)
                                      : jagged_position(p.offsets, p.batch, item, p.max_length,
                                                        p.total);
    const int64_t x_row = pos.row * p.x_row_stride;
    const int64_t dense_row = pos.seq * p.dense_batch_stride + pos.j * p.dense_row_stride;
    T* out = p.out + item * p.dim;
    for (int64_t col = int64_t(g.lane) * V::kElems; col < p.dim; col += chunk) {
      const auto x = [&] { return load<V>(p.x + x_row + col); };
      const auto dense = [&] { return load<V>(p.dense + dense_row + col); };
      V v = {};  // kToJagged and kMul without a position: 0
      if (pos.has_row) {
        switch (p.op) {
          case JaggedDenseOp::kToPaddedDense: v = x(); break;
          case JaggedDenseOp::kToJagged: v = dense(); break;
          case JaggedDenseOp::kMul: v = combine(x(), dense(), mul); break;
          default: v = combine(x(), dense(), add); break;  // kAddDense, kAddJagged
        }
      } else {
        // The other operand is taken as it is, not added to 0: -0.0 and NaN payloads survive,
        // as in the CPU kernels (a clone).
        switch (p.op) {
          case JaggedDenseOp::kToPaddedDense: v = padding; break;
          case JaggedDenseOp::kAddDense: v = dense(); break;
          case JaggedDenseOp::kAddJagged: v = x(); break;
          default: break;
        }
      }
      store(out + col, v);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax: block item (b, c) = (item / chunks, item % chunks) covers sequence b's columns
// c * chunk .. + chunk; b == batch stands for the rows outside every sequence, written 0.

template <typename T, typename I>
struct SoftmaxParams {
  const I* offsets;
  int64_t batch, max_length, total, dim;
  const T* values;  // the forward's input, or its output in the backward
  int64_t values_row_stride;
  const T* grad;  // the backward's grad_output; nullptr in the forward
  int64_t grad_row_stride;
  T* out;
  int64_t* errors;
  int64_t chunks;  // column chunks per sequence, >= 1
  int64_t items;   // (batch + 1) * chunks
  int64_t blocks;  // the grid: block k takes items k, k + blocks, ...
  int lanes_shift;
  int block_threads;
};

// A softmax block's threads: adjacent lanes hold adjacent columns of one row (coalesced), and the
// lanes of one column are lanes_per_row apart in a wave.
struct BlockLanes {
  int lane, lanes;  // column lane: thread % lanes_per_row; lanes_per_row
  int slot, slots;  // row slot: thread / lanes_per_row; row slots per block
  int wave, waves;
  bool wave_first_slot;  // writes its wave's partials to LDS
};

__device__ inline BlockLanes block_lanes(int lanes_shift, int block_threads) {
  const int thread = int(hip_compat::thread_in_block());
  const int lanes = 1 << lanes_shift;
  return {thread & (lanes - 1), lanes, thread >> lanes_shift, block_threads >> lanes_shift,
          thread / kWaveSize, block_threads / kWaveSize, thread % kWaveSize < lanes};
}

// Reduces each v[k] (max or sum) over the row slots of the block; every thread gets its columns'
// results, bit-identical across the threads of a column (a butterfly adds the same pairs on both
// sides, and every thread folds the waves' partials in the same order). All threads of the block
// must call it. lds: waves * lanes * N floats, unused with one wave.
template <bool kMax, int N>
__device__ inline void block_reduce(float (&v)[N], const BlockLanes& t, float* lds) {
  const auto op = [](float a, float b) { return kMax ? (a > b ? a : b) : a + b; };
  for (int mask = t.lanes; mask < kWaveSize; mask <<= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = op(v[k], __shfl_xor(v[k], mask, kWaveSize));
  }
  if (t.waves == 1) return;
  if (t.wave_first_slot) {
#pragma unroll
    for (int k = 0; k < N; ++k) lds[(t.wave * t.lanes + t.lane) * N + k] = v[k];
  }
  hip_compat::block_sync();
#pragma unroll
  for (int k = 0; k < N; ++k) {
    float acc = lds[t.lane * N + k];
    for (int w = 1; w < t.waves; ++w) acc = op(acc, lds[(w * t.lanes + t.lane) * N + k]);
    v[k] = acc;
  }
  hip_compat::block_sync();  // the next reduction overwrites lds
}

// Rows j, j + step, ... (kRowBatch of them) of a column slice starting at p, `stride` elements
// apart; those past n - 1 (j < n) read row n - 1, so every load is in bounds and unconditional
// and the batch's loads are in flight together. Callers ignore the stand-ins.
template <typename V>
__device__ inline void load_rows(V (&rows)[kRowBatch], const typename V::Elem* p, int64_t stride,
                                 int64_t j, int64_t step, int64_t n) {
#pragma unroll
  for (int u = 0; u < kRowBatch; ++u) {
    const int64_t r = j + u * step;
    rows[u] = load<V>(p + (r < n ? r : n - 1) * stride);
  }
}

// Softmax in base 2: a column's arguments are its values * log2(e), and its sum of exponentials
// is kept as sum = sum of 2^(arg_i - top), top the largest argument (-inf before any).

// What sums are taken relative to: top, or 0 while top is -inf (every term is 0 then, and
// -inf - -inf would be NaN).
__device__ inline float sum_ref(float top) { return top == kNegInf ? 0.f : top; }

// Adds the batch's arguments to (top, sum), rescaling once per batch. A NaN never becomes top but
// makes the sum NaN; a +inf makes it NaN too (inf - inf), as in the CPU kernel. -inf adds 0.
__device__ inline void add_exp2(float& top, float& sum, const float (&args)[kRowBatch]) {
  float hi = top;
#pragma unroll
  for (int u = 0; u < kRowBatch; ++u) hi = args[u] > hi ? args[u] : hi;
  const float ref = sum_ref(hi);
  float s = sum * pow2(top - ref);
#pragma unroll
  for (int u = 0; u < kRowBatch; ++u) s += pow2(args[u] - ref);
  top = hi;
  sum = s;
}

// The block's rows of one sequence: rows [start, start + n) of values (grad), n >= 1, at column
// col of the calling lane (written only when `store`).
struct SoftmaxRows {
  int64_t start, n, col;
  bool store;
};

// out = softmax over the rows, per column: 2^(arg - top) / sum.
template <typename V, typename T, typename I>
__device__ inline void softmax_forward(const SoftmaxParams<T, I>& p, const BlockLanes& t,
                                       float* lds, const SoftmaxRows& r) {
  constexpr int N = V::kElems;
  const T* values = p.values + r.start * p.values_row_stride + r.col;
  const int64_t step = t.slots;
  float top[N], sum[N];
#pragma unroll
  for (int k = 0; k < N; ++k) top[k] = kNegInf, sum[k] = 0.f;
  for (int64_t j = t.slot; j < r.n; j += kRowBatch * step) {
    V rows[kRowBatch];
    load_rows(rows, values, p.values_row_stride, j, step, r.n);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float args[kRowBatch];
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u)
        args[u] = j + u * step < r.n ? to_float(rows[u].v[k]) * kLog2e : kNegInf;
      add_exp2(top[k], sum[k], args);
    }
  }
  float block_top[N];
#pragma unroll
  for (int k = 0; k < N; ++k) block_top[k] = top[k];
  block_reduce<true>(block_top, t, lds);
#pragma unroll
  for (int k = 0; k < N; ++k) sum[k] *= pow2(top[k] - sum_ref(block_top[k]));
  block_reduce<false>(sum, t, lds);
  float scale[N];
#pragma unroll
  for (int k = 0; k < N; ++k) scale[k] = 1.f / sum[k];
  T* out = p.out + r.start * p.dim + r.col;
  for (int64_t j = t.slot; j < r.n; j += kRowBatch * step) {
    V rows[kRowBatch];
    load_rows(rows, values, p.values_row_stride, j, step, r.n);
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      if ((j + u * step >= r.n) | !r.store) continue;
      V o;
#pragma unroll
      for (int k = 0; k < N; ++k)
        o.v[k] = from_float<T>(pow2(to_float(rows[u].v[k]) * kLog2e - block_top[k]) * scale[k]);
      store(out + (j + u * step) * p.dim, o);
    }
  }
}

// out = values * (grad - sum over the rows of grad * values), per column.
template <typename V, typename T, typename I>
__device__ inline void softmax_backward(const SoftmaxParams<T, I>& p, const BlockLanes& t,
                                        float* lds, const SoftmaxRows& r) {
  constexpr int N = V::kElems;
  const T* values = p.values + r.start * p.values_row_stride + r.col;
  const T* grad = p.grad + r.start * p.grad_row_stride + r.col;
  const int64_t step = t.slots;
  float dot[N] = {};
  for (int64_t j = t.slot; j < r.n; j += kRowBatch * step) {
    V ys[kRowBatch], gs[kRowBatch];
    load_rows(ys, values, p.values_row_stride, j, step, r.n);
    load_rows(gs, grad, p.grad_row_stride, j, step, r.n);
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      if (j + u * step >= r.n) continue;
#pragma unroll
      for (int k = 0; k < N; ++k) dot[k] += to_float(gs[u].v[k]) * to_float(ys[u].v[k]);
    }
  }
  block_reduce<false>(dot, t, lds);
  T* out = p.out + r.start * p.dim + r.col;
  for (int64_t j = t.slot; j < r.n; j += kRowBatch * step) {
    V ys[kRowBatch], gs[kRowBatch];
    load_rows(ys, values, p.values_row_stride, j, step, r.n);
    load_rows(gs, grad, p.grad_row_stride, j, step, r.n);
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      if ((j + u * step >= r.n) | !r.store) continue;
      V o;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float y = to_float(ys[u].v[k]);
        o.v[k] = from_float<T>(y * (to_float(gs[u].v[k]) - dot[k]));
      }
      store(out + (j + u * step) * p.dim, o);
    }
  }
}

// Zeroes rows [from, to) of out at the calling lane's column, row slots striding.
template <typename V>
__device__ inline void zero_rows(typename V::Elem* out, int64_t dim, int64_t from, int64_t to,
                                 const BlockLanes& t, int64_t col, bool store_col) {
  if (!store_col) return;
  for (int64_t row = from + t.slot; row < to; row += t.slots) store(out + row * dim + col, V{});
}

template <typename T, typename I, int kVecBytes>
__global__ void __launch_bounds__(kMaxBlockThreads)
    jagged_softmax_kernel(const SoftmaxParams<T, I> p) {
  using V = Vec<T, kVecBytes>;
  extern __shared__ float lds[];  // block_reduce's cross-wave partials (dynamic: sized per config)
  const BlockLanes t = block_lanes(p.lanes_shift, p.block_threads);
  const int64_t chunk = int64_t(V::kElems) << p.lanes_shift;
  // Everything below is uniform over the block up to the lane's column, so the reductions'
  // barriers are reached by all threads.
  for (int64_t item = hip_compat::block_in_grid(); item < p.items; item += p.blocks) {
    const int64_t b = item / p.chunks;
    const int64_t chunk_col = (item - b * p.chunks) * chunk;
    if ((chunk_col == 0) & (hip_compat::thread_in_block() == 0))
      check_offsets_entry(p.offsets, b, p.total, p.errors, ErrorOp::kJaggedSoftmax);
    if (chunk_col >= p.dim) continue;  // dim == 0: the block only checks
    // A lane past the row's end works on the last column (dim >= V) but stores nothing, so the
    // reductions need no inactive lanes.
    const int64_t lane_col = chunk_col + int64_t(t.lane) * V::kElems;
    const bool store_col = lane_col < p.dim;
    const int64_t col = store_col ? lane_col : p.dim - V::kElems;
    if (b == p.batch) {
      // With any offsets, the sequences cover [clamped offsets[0], clamped offsets[batch]).
      const Seq covered = clamped(p.offsets[0], p.offsets[p.batch], p.total);
      zero_rows<V>(p.out, p.dim, 0, covered.start, t, col, store_col);
      zero_rows<V>(p.out, p.dim, covered.end, p.total, t, col, store_col);
      continue;
    }
    const Seq s = sequence(p.offsets, b, p.total);
    const int64_t n = s.end - s.start < p.max_length ? s.end - s.start : p.max_length;
    zero_rows<V>(p.out, p.dim, s.start + n, s.end, t, col, store_col);
    if (n == 0) continue;
    const SoftmaxRows rows{s.start, n, col, store_col};
    if (p.grad == nullptr)
      softmax_forward<V>(p, t, lds, rows);
    else
      softmax_backward<V>(p, t, lds, rows);
  }
}

// ---------------------------------------------------------------------------------------------
// Index select: output row o of selected sequence i (the last i with output_offsets[i] <= o) comes
// from input row input_offsets[indices[i]] + (o - output_offsets[i]).

template <typename T, typename I>
struct IndexSelectParams {
  const T* values;  // forward: the input rows; backward: grad_output
  int64_t values_row_stride, dim;
  const int64_t* input_offsets;
  const int64_t* output_offsets;
  const I* indices;
  int64_t num_indices, batch, num_input_rows;
  int64_t rows;   // output (grad) rows; 0 when dim == 0
  int64_t items;  // max(rows, num_indices): item i < num_indices also checks indices[i]
  bool backward;
  void* out;  // forward: T [rows, dim]; backward: float [num_input_rows, dim]
  int64_t* errors;
  Groups grid;
};

// The input row of output row o, or -1 where there is none: o outside every selected sequence, a
// bad index (recorded by its own item) or a row outside the input.
template <typename T, typename I>
__device__ inline int64_t source_row(const IndexSelectParams<T, I>& p, int64_t o) {
  const int64_t i = sequence_of(p.output_offsets, p.num_indices, o);
  if ((i < 0) || (o >= p.output_offsets[i + 1])) return -1;
  const int64_t s = p.indices[i];
  if (uint64_t(s) >= uint64_t(p.batch)) return -1;
  const int64_t row = p.input_offsets[s] + (o - p.output_offsets[i]);
  return uint64_t(row) < uint64_t(p.num_input_rows) ? row : -1;
}

template <typename T, typename I, int kVecBytes>
__global__ void __launch_bounds__(kMaxBlockThreads)
    jagged_index_select_kernel(const IndexSelectParams<T, I> p) {
  using V = Vec<T, kVecBytes>;
  const GroupLane g = group_lane(p.grid);
  const int64_t chunk = int64_t(V::kElems) << p.grid.lanes_shift;
  const int64_t lane_col = int64_t(g.lane) * V::kElems;
  for (int64_t item = g.first; item < p.items; item += p.grid.items_per_pass) {
    if ((item < p.num_indices) & (g.lane == 0)) {
      const int64_t index = p.indices[item];
      if (__builtin_expect(uint64_t(index) >= uint64_t(p.batch), 0))
        hip_compat::record_error(p.errors, ErrorOp::kJaggedIndexSelect,
                                 ErrorCode::kIndexOutOfRange, item, index, p.batch);
    }
    if (item >= p.rows) continue;
    const int64_t src = source_row(p, item);
    if (p.backward) {
      if (src < 0) continue;
      const T* grad = p.values + item * p.values_row_stride;
      float* out = static_cast<float*>(p.out) + src * p.dim;
      for (int64_t col = lane_col; col < p.dim; col += chunk) {
        const V v = load<V>(grad + col);
#pragma unroll
        for (int k = 0; k < V::kElems; ++k) atomicAdd(out + col + k, to_float(v.v[k]));
      }
    } else {
      T* out = static_cast<T*>(p.out) + item * p.dim;
      for (int64_t col = lane_col; col < p.dim; col += chunk)
        store(out + col, src < 0 ? V{} : load<V>(p.values + src * p.values_row_stride + col));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host: checks (static reasons), grid sizing and dispatch.

LaunchError check_config(const JaggedConfig& c, int elt_bytes) {
  if (c.vec_bytes != 2 && c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16)
    return "jagged: config.vec_bytes must be 2, 4, 8 or 16";
  if (c.vec_bytes < elt_bytes) return "jagged: config.vec_bytes is smaller than the element size";
  if (c.lanes_per_row < 1 || c.lanes_per_row > kWaveSize ||
      (c.lanes_per_row & (c.lanes_per_row - 1)) != 0)
    return "jagged: config.lanes_per_row must be a power of two up to the wavefront size";
  // A multiple of the wavefront size is one of every valid lanes_per_row too: groups never
  // straddle waves.
  if (c.block_threads < kWaveSize || c.block_threads > kMaxBlockThreads ||
      c.block_threads % kWaveSize != 0)
    return "jagged: config.block_threads must be a multiple of the wavefront size, at most 1024";
  return nullptr;
}

// Rows of dim elements of elt_bytes moved vec_bytes at a time: dim, the row strides (elements)
// and the base pointers in use must be multiples of vec_bytes.
LaunchError check_rows(int64_t dim, int elt_bytes, int vec_bytes,
                       std::initializer_list<int64_t> strides,
                       std::initializer_list<const void*> bases) {
  if (dim < 0) return "jagged: negative dim";
  if (dim > INT64_MAX / 16) return "jagged: dim too large";
  if (dim * elt_bytes % vec_bytes != 0)
    return "jagged: dim * element size is not a multiple of config.vec_bytes";
  for (int64_t stride : strides) {
    if (stride < 0 || stride > INT64_MAX / 16) return "jagged: negative or too large row stride";
    if (stride * elt_bytes % vec_bytes != 0)
      return "jagged: a row stride in bytes is not a multiple of config.vec_bytes";
  }
  for (const void* base : bases) {
    if (!launch::aligned(base, vec_bytes))
      return "jagged: a row pointer is not aligned to config.vec_bytes";
  }
  return nullptr;
}

// f(TypeTag<T>, TypeTag<I>, IntTag<vec_bytes>) for a launch's dtypes and config. vec_bytes below
// the element size is refused by check_config, so those instances are never made.
template <typename F>
LaunchError dispatch(DType dtype, DType index_dtype, int vec_bytes, F&& f) {
  return launch::dispatch_float<HipTypes>(dtype, [&](auto value_tag) {
    return launch::dispatch_index(index_dtype, [&](auto index_tag) {
      return launch::dispatch_int<2, 4, 8, 16>(vec_bytes, [&](auto vec_tag) -> LaunchError {
        constexpr int kVecBytes = decltype(vec_tag)::value;
        constexpr int kEltBytes = sizeof(typename decltype(value_tag)::type);
        if constexpr (kVecBytes < kEltBytes)
          return "jagged: config.vec_bytes is smaller than the element size";
        else
          return f(value_tag, index_tag, vec_tag);
      });
    });
  });
}

// log2 of a power of two.
int log2_of(int pow2) {
  int shift = 0;
  while ((1 << shift) < pow2) ++shift;
  return shift;
}

bool dense_output(JaggedDenseOp op) {
  return op == JaggedDenseOp::kToPaddedDense || op == JaggedDenseOp::kAddDense;
}

LaunchError check(const JaggedDenseArgs& a, const JaggedConfig& c) {
  if (!launch::is_float(a.dtype))
    return "jagged_dense: values must be float32, float16 or bfloat16";
  if (!launch::is_index(a.offsets_dtype)) return "jagged_dense: offsets must be int32 or int64";
  if (int32_t(a.op) < int32_t(JaggedDenseOp::kToPaddedDense) ||
      int32_t(a.op) > int32_t(JaggedDenseOp::kMul))
    return "jagged_dense: unknown op";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.batch < 0 || a.max_length < 0 || a.total < 0) return "jagged_dense: negative size";
  if (a.batch > 0 && a.max_length > INT64_MAX / a.batch)
    return "jagged_dense: batch * max_length does not fit in int64";
  const bool uses_x = a.op != JaggedDenseOp::kToJagged;
  const bool uses_dense = a.op != JaggedDenseOp::kToPaddedDense;
  if (LaunchError e = check_rows(a.dim, elt, c.vec_bytes,
                                 {uses_x ? a.x_row_stride : 0,
                                  uses_dense ? a.dense_batch_stride : 0,
                                  uses_dense ? a.dense_row_stride : 0},
                                 {uses_x ? a.x : nullptr, uses_dense ? a.dense : nullptr, a.out}))
    return e;
  if (a.dim == 0) return nullptr;
  // Only tensors with elements are read or written.
  if ((dense_output(a.op) ? a.batch * a.max_length : a.total) > 0 && a.out == nullptr)
    return "jagged_dense: null out";
  if (uses_x && a.total > 0 && a.x == nullptr) return "jagged_dense: null x";
  if (uses_dense && a.batch * a.max_length > 0 && a.dense == nullptr)
    return "jagged_dense: null dense";
  return nullptr;
}

LaunchError check(const JaggedSoftmaxArgs& a, const JaggedConfig& c) {
  if (!launch::is_float(a.dtype))
    return "jagged_softmax: values must be float32, float16 or bfloat16";
  if (!launch::is_index(a.offsets_dtype)) return "jagged_softmax: offsets must be int32 or int64";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.batch < 0 || a.max_length < 0 || a.total < 0) return "jagged_softmax: negative size";
  const bool backward = a.grad_output != nullptr;
  if (LaunchError e = check_rows(a.dim, elt, c.vec_bytes,
                                 {a.values_row_stride, backward ? a.grad_row_stride : 0},
                                 {a.values, a.grad_output, a.out}))
    return e;
  if (a.total > 0 && a.dim > 0 && (a.values == nullptr || a.out == nullptr))
    return "jagged_softmax: null values or out";
  return nullptr;
}

LaunchError check(const JaggedIndexSelectArgs& a, const JaggedConfig& c) {
  if (!launch::is_float(a.dtype))
    return "jagged_index_select: values must be float32, float16 or bfloat16";
  if (!launch::is_index(a.indices_dtype))
    return "jagged_index_select: indices must be int32 or int64";
  const int elt = launch::element_bytes(a.dtype);
  if (LaunchError e = check_config(c, elt)) return e;
  if (a.num_indices < 0 || a.batch < 0 || a.num_input_rows < 0 || a.num_output_rows < 0)
    return "jagged_index_select: negative size";
  // The backward's float32 accumulator is written one element at a time: no alignment needed.
  if (LaunchError e = check_rows(a.dim, elt, c.vec_bytes, {a.values_row_stride},
                                 {a.values, a.backward ? nullptr : a.out}))
    return e;
  if (a.num_indices > 0 && a.indices == nullptr) return "jagged_index_select: null indices";
  if (a.num_output_rows > 0 && a.dim > 0) {
    if (a.input_offsets == nullptr || a.output_offsets == nullptr)
      return "jagged_index_select: null offsets";
    // Input rows are read (forward) or written (backward) only where there are some.
    const bool has_input = a.num_input_rows > 0;
    if ((a.backward || has_input) && a.values == nullptr) return "jagged_index_select: null values";
    if ((!a.backward || has_input) && a.out == nullptr) return "jagged_index_select: null out";
  }
  return nullptr;
}

}  // namespace

LaunchError launch_jagged_dense(const JaggedDenseArgs& a, const JaggedConfig& config,
                                void* stream) {
  if (LaunchError error = check(a, config)) return error;
  const int64_t rows = a.dim == 0 ? 0 : dense_output(a.op) ? a.batch * a.max_length : a.total;
  if (rows == 0 && a.errors == nullptr) return nullptr;
  if (a.offsets == nullptr) return "jagged_dense: null offsets";
  const int64_t items = rows > a.batch ? rows : a.batch + 1;
  const launch::Grid grid =
      launch::grid_for(items, 1, config.lanes_per_row, config.block_threads, kGridLimits);
  return dispatch(a.dtype, a.offsets_dtype, config.vec_bytes,
                  [&](auto value_tag, auto index_tag, auto vec_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    const DenseParams<T, I> p{a.op,
                              static_cast<const I*>(a.offsets),
                              a.batch,
                              a.max_length,
                              a.total,
                              a.dim,
                              static_cast<const T*>(a.x),
                              a.x_row_stride,
                              static_cast<const T*>(a.dense),
                              a.dense_batch_stride,
                              a.dense_row_stride,
                              a.padding_value,
                              static_cast<T*>(a.out),
                              rows,
                              items,
                              a.errors,
                              a.error_op,
                              groups_of(grid, config.block_threads)};
    jagged_dense_kernel<T, I, kVecBytes>
        <<<grid.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_jagged_softmax(const JaggedSoftmaxArgs& a, const JaggedConfig& config,
                                  void* stream) {
  if (LaunchError error = check(a, config)) return error;
  if ((a.total == 0 || a.dim == 0) && a.errors == nullptr) return nullptr;
  if (a.offsets == nullptr) return "jagged_softmax: null offsets";
  const int64_t chunk = int64_t(config.lanes_per_row) * config.vec_bytes /
                        launch::element_bytes(a.dtype);
  const int64_t chunks = a.dim > chunk ? (a.dim + chunk - 1) / chunk : 1;
  if (a.batch + 1 > INT64_MAX / chunks) return "jagged_softmax: too many sequences and columns";
  const int64_t items = (a.batch + 1) * chunks;
  const launch::Grid grid =
      launch::grid_for(items, 1, config.block_threads, config.block_threads, kGridLimits);
  // block_reduce's partials: one float per wave and column of the chunk (at most 1024 * V floats,
  // 32 KB: within gfx942's 64 KB and the 48 KB an NVIDIA block gets without opting in).
  const int waves = config.block_threads / kWaveSize;
  const size_t lds_bytes = waves > 1 ? size_t(waves) * chunk * sizeof(float) : 0;
  return dispatch(a.dtype, a.offsets_dtype, config.vec_bytes,
                  [&](auto value_tag, auto index_tag, auto vec_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    const SoftmaxParams<T, I> p{static_cast<const I*>(a.offsets),
                                a.batch,
                                a.max_length,
                                a.total,
                                a.dim,
                                static_cast<const T*>(a.values),
                                a.values_row_stride,
                                static_cast<const T*>(a.grad_output),
                                a.grad_row_stride,
                                static_cast<T*>(a.out),
                                a.errors,
                                chunks,
                                items,
                                int64_t(grid.blocks),
                                log2_of(config.lanes_per_row),
                                config.block_threads};
    jagged_softmax_kernel<T, I, kVecBytes>
        <<<grid.blocks, config.block_threads, lds_bytes, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_jagged_index_select(const JaggedIndexSelectArgs& a, const JaggedConfig& config,
                                       void* stream) {
  if (LaunchError error = check(a, config)) return error;
  const int64_t rows = a.dim == 0 ? 0 : a.num_output_rows;
  if (rows == 0 && (a.num_indices == 0 || a.errors == nullptr)) return nullptr;
  const int64_t items = rows > a.num_indices ? rows : a.num_indices;
  const launch::Grid grid =
      launch::grid_for(items, 1, config.lanes_per_row, config.block_threads, kGridLimits);
  return dispatch(a.dtype, a.indices_dtype, config.vec_bytes,
                  [&](auto value_tag, auto index_tag, auto vec_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    const IndexSelectParams<T, I> p{static_cast<const T*>(a.values),
                                    a.values_row_stride,
                                    a.dim,
                                    a.input_offsets,
                                    a.output_offsets,
                                    static_cast<const I*>(a.indices),
                                    a.num_indices,
                                    a.batch,
                                    a.num_input_rows,
                                    rows,
                                    items,
                                    a.backward,
                                    a.out,
                                    a.errors,
                                    groups_of(grid, config.block_threads)};
    jagged_index_select_kernel<T, I, kVecBytes>
        <<<grid.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

}  // namespace mymetaops
