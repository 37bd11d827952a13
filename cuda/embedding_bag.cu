// CUDA kernels and launchers for embedding_bag (semantics: csrc/include/mymetaops/embedding_bag.h;
// the host-side checks, grid sizing and dispatch: csrc/include/mymetaops/launch.h).
//
// A group of `lanes_per_bag` lanes owns one work item (a bag, or a sorted position) and one column
// chunk of it: lane l of chunk c owns the row vector c * lanes + l, a vector being VEC bytes, so a
// row access is one coalesced VEC-wide load per lane. The work is a random row gather, so speed
// comes from memory-level parallelism: each lane issues the loads of UNROLL rows before it uses
// any of them (the rows of a bag are independent).
//
// Bad values (mymetaops/errors.h) cost one compare per bag on the hot path; finding and recording
// the bad entry happens only on the rare path, by one lane per bag.
//
// Template parameters: T = table/grad dtype, IndexT = index dtype, VEC = bytes per lane access,
// UNROLL = rows in flight per lane. lanes_per_bag and block_threads are run-time arguments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda_utils.cuh"
#include "mymetaops/embedding_bag.h"
#include "mymetaops/launch.h"

namespace mymetaops {
namespace {

using cuda::get_elt;
using cuda::launch_status;
using cuda::load_cached;
using cuda::load_bits;
using cuda::load_streaming;
using cuda::RawVec;
using cuda::record_error;
using cuda::set_bits;
using cuda::set_elt;
using cuda::store_vec;

// block_threads may be anything up to 1024 at run time, so every kernel is compiled to launch
// with 1024 threads: at most 64 registers, and scripts/check_cuda.sh rejects any spill.
constexpr int kMaxBlockThreads = launch::kMaxBlockThreads;
constexpr int kWarpSize = 32;
// gridDim.x holds up to 2^31 - 1 blocks; the kernels loop over items beyond one grid.
constexpr launch::GridLimits kGridLimits{0x7fffffff, INT64_MAX};
// The backward plan's kernels: one thread per position (one warp per bag for the counts).
constexpr int kPlanBlockThreads = 256;

struct CudaTypes {
  using Float32 = float;
  using Float16 = __half;
  using BFloat16 = __nv_bfloat16;
};

// Rows in flight of the per-sample-weights backward when dim needs several passes of the group
// and vectors are 16 bytes (see psw_bag).
constexpr int kPswMaxUnrollVec16 = 4;

__device__ __forceinline__ bool unlikely(bool c) { return __builtin_expect(c, 0); }

// The group of lanes holding the calling lane, numbered over the grid (fewer than 2^32 groups:
// launch::grid_for).
__device__ __forceinline__ uint32_t group_in_grid(int lanes_log2) {
  return static_cast<uint32_t>(
      (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2);
}

// Finds the calling lane's first work item (then every items_per_pass-th, launch::Grid) and the row
// vector v it owns. Groups are numbered item-major, chunk-minor, so the chunks of one item sit in
// adjacent groups (usually one block) and share the item's indices through L1. False if the lane
// has nothing to do.
__device__ __forceinline__ bool locate(int lanes_log2, int num_chunks, int64_t items_per_pass,
                                       int dim_vecs, int64_t& item, int& v) {
  const uint32_t group = group_in_grid(lanes_log2);
  int chunk = 0;
  item = group;
  if (num_chunks > 1) {
    // 32-bit division: a 64-bit one is a call that spills.
    const uint32_t it = group / static_cast<uint32_t>(num_chunks);
    item = it;
    chunk = static_cast<int>(group - it * static_cast<uint32_t>(num_chunks));
  }
  v = (chunk << lanes_log2) + static_cast<int>(threadIdx.x & ((1u << lanes_log2) - 1));
  return item < items_per_pass && v < dim_vecs;
}

// Offsets entries lo = offsets[bag] and hi = the bag's end (offsets[bag + 1], or num_indices past
// torch-form offsets) are valid iff 0 <= lo <= hi <= num_indices: as unsigned, a negative value is
// above every valid one.
__device__ __forceinline__ bool offsets_ok(int64_t lo, int64_t hi, int64_t num_indices) {
  return static_cast<uint64_t>(lo) <= static_cast<uint64_t>(hi) &&
         static_cast<uint64_t>(hi) <= static_cast<uint64_t>(num_indices);
}

// Rare path: records what is wrong with the bag's entries, offsets[bag] first. Each bag checks its
// own entries (offsets[bag + 1] against offsets[bag] for the order), so all of them get checked.
__device__ void record_offset_error(int64_t* errors, ErrorOp op, int64_t bag, int64_t lo,
                                    int64_t hi, int64_t num_indices) {
  if (lo < 0) {
    record_error(errors, op, ErrorCode::kNegativeOffset, bag, lo, 0);
  } else if (lo > num_indices) {
    record_error(errors, op, ErrorCode::kOffsetPastEnd, bag, lo, num_indices);
  } else {  // hi is offsets[bag + 1]: the implicit end num_indices is never bad
    const ErrorCode code = hi < 0     ? ErrorCode::kNegativeOffset
                           : hi < lo  ? ErrorCode::kDecreasingOffset
                                      : ErrorCode::kOffsetPastEnd;
    record_error(errors, op, code, bag + 1, hi,
                 code == ErrorCode::kOffsetPastEnd ? num_indices : 0);
  }
}

// Bag `bag` is [start, end): its offsets clamped to [0, num_indices]; an end below its start is an
// empty bag. With `report`, bad entries are recorded in `errors`.
template <typename IndexT>
__device__ __forceinline__ void bag_bounds(const void* offsets, int64_t bag, int64_t num_offsets,
                                           int64_t num_indices, bool report, int64_t* errors,
                                           ErrorOp op, int64_t& start, int64_t& end) {
  const auto* o = static_cast<const IndexT*>(offsets);
  const int64_t lo = static_cast<int64_t>(__ldg(o + bag));
  const int64_t hi = bag + 1 < num_offsets ? static_cast<int64_t>(__ldg(o + bag + 1)) : num_indices;
  start = min(max(lo, int64_t{0}), num_indices);
  end = max(min(hi, num_indices), start);
  if (unlikely(report && !offsets_ok(lo, hi, num_indices)))
    record_offset_error(errors, op, bag, lo, hi, num_indices);
}

// Row checks done in the index's own width (32-bit compares and registers for int32 indices).
template <typename IndexT>
struct RowCheck {
  using U = std::make_unsigned_t<IndexT>;
  static constexpr int64_t kMax = sizeof(IndexT) == 4 ? 0x7fffffffLL : 0x7fffffffffffffffLL;
  U num_rows;    // valid rows are those with U(row) < num_rows (a negative row wraps above it)
  IndexT pad;
  bool has_pad;  // padding_idx < 0 means none, as does one no IndexT can hold

  __device__ __forceinline__ RowCheck(int64_t rows, int64_t padding_idx)
      : num_rows(rows > kMax ? static_cast<U>(kMax) + 1 : static_cast<U>(rows)),
        pad(static_cast<IndexT>(padding_idx)),
        has_pad(padding_idx >= 0 && padding_idx <= kMax) {}
  __device__ __forceinline__ bool in_range(IndexT row) const {
    return static_cast<U>(row) < num_rows;
  }
  __device__ __forceinline__ bool is_pad(IndexT row) const { return has_pad && row == pad; }
};

// Rare path of a bag that met an index outside the table: records the first such entry of
// indices[start, end).
template <typename IndexT>
__device__ void record_index_error(const IndexT* indices, int64_t start, int64_t end,
                                   const RowCheck<IndexT>& check, int64_t num_rows,
                                   int64_t* errors, ErrorOp op) {
  for (int64_t i = start; i < end; ++i) {
    const IndexT row = __ldg(indices + i);
    if (!check.is_pad(row) && !check.in_range(row)) {
      record_error(errors, op, ErrorCode::kIndexOutOfRange, i, row, num_rows);
      return;
    }
  }
}

struct ForwardParams {
  const char* weight;
  int64_t weight_row_bytes;  // row stride in bytes
  int64_t num_rows;
  int dim_vecs;              // vectors per row
  int num_chunks;            // ceil(dim_vecs / lanes_per_bag): groups per bag
  const void* indices;
  const void* offsets;
  int64_t num_indices;
  int64_t num_bags;
  int64_t num_offsets;
  const void* per_sample_weights;
  int64_t padding_idx;
  bool mean;
  char* out;
  int64_t out_row_bytes;
  int64_t items_per_pass;
  int64_t* errors;
};

// Sums column vector `column` of the rows of indices[start, end) into acc (kWeighted: times the
// per-sample weights). Per step each lane loads UNROLL indices (every lane of the group the same
// ones: one broadcast transaction, L1 hits after the first), then issues the UNROLL row loads
// before using any of them. Measured on an H200: loading `lanes` indices once per group and
// broadcasting them with shuffles was 5-10% slower (more live registers, shuffles in the chain).
template <typename T, typename IndexT, int VEC, int UNROLL, bool kWeighted>
__device__ __forceinline__ void pool_column(const ForwardParams& p, const RowCheck<IndexT>& check,
                                            int64_t start, int64_t end, const char* column,
                                            float (&acc)[VEC / sizeof(T)], int& count, bool& oob) {
  constexpr int kPswStep = kWeighted ? UNROLL : 0;  // psw is null when not weighted
  const IndexT* idx = static_cast<const IndexT*>(p.indices) + start;
  const T* psw = static_cast<const T*>(p.per_sample_weights) + (kWeighted ? start : 0);
#pragma unroll 1
  for (int64_t left = end - start; left > 0; left -= UNROLL, idx += UNROLL, psw += kPswStep) {
    const int n = left < UNROLL ? static_cast<int>(left) : UNROLL;  // 32-bit compares below
    const char* src[UNROLL];
    bool take[UNROLL];
    // The step's per-sample weights as raw T bits, two per register for 16-bit T (registers
    // are what bounds the rows in flight), converted at use.
    RawVec<kWeighted ? UNROLL * sizeof(T) : 4> scales{};
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool in_bag = u < n;
      const IndexT row = in_bag ? __ldg(idx + u) : IndexT{0};
      const bool counted = in_bag && !check.is_pad(row);
      const bool in_range = check.in_range(row);
      take[u] = counted && in_range;
      oob |= counted && !in_range;
      count += counted;
      // A skipped entry adds a zero vector (predicated-off load) with scale +0 (bits 0), so a
      // non-finite per-sample weight of a padding entry cannot leak into the sum.
      if constexpr (kWeighted) set_bits<T>(scales, u, take[u] ? load_bits(psw + u) : 0u);
      src[u] = column + static_cast<int64_t>(row) * p.weight_row_bytes;
    }
    RawVec<VEC> rows[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) rows[u] = load_streaming<VEC>(src[u], take[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int e = 0; e < static_cast<int>(VEC / sizeof(T)); ++e) {
        const float x = get_elt<T>(rows[u], e);
        acc[e] = kWeighted ? fmaf(get_elt<T>(scales, u), x, acc[e]) : acc[e] + x;
      }
    }
  }
}

template <typename T, typename IndexT, int VEC, int UNROLL>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    embedding_bag_forward_kernel(const ForwardParams p, int lanes_log2) {
  constexpr int kElems = VEC / sizeof(T);
  constexpr ErrorOp kOp = ErrorOp::kEmbeddingBag;
  int64_t bag;
  int v;
  if (!locate(lanes_log2, p.num_chunks, p.items_per_pass, p.dim_vecs, bag, v)) return;
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);
  const char* column = p.weight + static_cast<int64_t>(v) * VEC;
#pragma unroll 1
  for (; bag < p.num_bags; bag += p.items_per_pass) {
    int64_t start, end;
    // One lane per bag records (every lane doing an atomic on host memory would be slow), tested
    // where used: a predicate live across the bag loop costs a spill in the widest instances.
    bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices, v == 0 && p.errors != nullptr,
                       p.errors, kOp, start, end);
    float acc[kElems] = {};
    int count = 0;     // non-padding entries (the mean's divisor)
    bool oob = false;  // an index outside [0, num_rows): the bag becomes NaN
    // Two copies of the loop: without weights the scales would cost UNROLL live registers.
    if (p.per_sample_weights != nullptr) {
      pool_column<T, IndexT, VEC, UNROLL, true>(p, check, start, end, column, acc, count, oob);
    } else {
      pool_column<T, IndexT, VEC, UNROLL, false>(p, check, start, end, column, acc, count, oob);
    }

    // Empty bag: 0 for sum and mean.
    const float mul = p.mean && count > 0 ? 1.f / static_cast<float>(count) : 1.f;
    RawVec<VEC> result;
#pragma unroll
    for (int e = 0; e < kElems; ++e)
      set_elt<T>(result, e, oob ? __int_as_float(0x7fc00000) : acc[e] * mul);
    store_vec<VEC>(p.out + bag * p.out_row_bytes + static_cast<int64_t>(v) * VEC, result);
    if (unlikely(oob && v == 0 && p.errors != nullptr)) {
      // The bounds again rather than live across the loop.
      bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices, false, p.errors, kOp, start,
                         end);
      record_index_error(static_cast<const IndexT*>(p.indices), start, end, check, p.num_rows,
                         p.errors, kOp);
    }
  }
}

struct BackwardParams {
  const char* grad_output;
  int64_t row_bytes;  // dim * element size, the row stride of grad_output and grad_weight
  int dim_vecs;
  int num_chunks;
  int64_t num_rows;
  int64_t num_bags;
  const void* sorted_rows;
  const int64_t* sorted_bags;
  const float* sorted_scales;
  int64_t num_positions;
  char* grad_weight;
  int64_t items_per_pass;
};

// The run of sorted position `first` (vector v of its row), if `first` starts one.
template <typename T, typename RowT, int VEC, int UNROLL>
__device__ __forceinline__ void backward_run(const BackwardParams& p, int64_t first, int v) {
  constexpr int kElems = VEC / sizeof(T);
  const auto* rows = static_cast<const RowT*>(p.sorted_rows);
  const RowT row = __ldg(rows + first);
  // Only the group at the start of a run of equal rows works; markers (row >= num_rows) and any
  // negative row are skipped.
  if (!RowCheck<RowT>(p.num_rows, -1).in_range(row)) return;
  if (first > 0 && __ldg(rows + first - 1) == row) return;

  const char* column = p.grad_output + static_cast<int64_t>(v) * VEC;
  float acc[kElems] = {};
  // Walk the run in sorted order (deterministic), UNROLL positions per step: their rows, bags and
  // scales are loaded together (a bag need not wait for its row compare), then the grad rows of
  // the positions still in the run whose bag is one of grad_output's.
#pragma unroll 1
  for (int64_t q = first;; q += UNROLL) {
    const int64_t left = p.num_positions - q;
    const int n = left < UNROLL ? static_cast<int>(left) : UNROLL;
    const char* src[UNROLL];
    bool in_run[UNROLL];
    bool take[UNROLL];
    float scale[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool valid = u < n;
      in_run[u] = valid && __ldg(rows + q + u) == row;
      const int64_t bag = valid ? __ldg(p.sorted_bags + q + u) : 0;
      const float s = valid && p.sorted_scales != nullptr ? __ldg(p.sorted_scales + q + u) : 1.f;
      take[u] = in_run[u] && static_cast<uint64_t>(bag) < static_cast<uint64_t>(p.num_bags);
      scale[u] = take[u] ? s : 0.f;
      src[u] = column + bag * p.row_bytes;
    }
    RawVec<VEC> grads[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) grads[u] = load_streaming<VEC>(src[u], take[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[e] = fmaf(scale[u], get_elt<T>(grads[u], e), acc[e]);
    }
    if (!in_run[UNROLL - 1]) break;  // sorted: the run ended inside this step
  }
  RawVec<VEC> result;
#pragma unroll
  for (int e = 0; e < kElems; ++e) set_elt<T>(result, e, acc[e]);
  const int64_t col = static_cast<int64_t>(v) * VEC;
  store_vec<VEC>(p.grad_weight + static_cast<int64_t>(row) * p.row_bytes + col, result);
}

template <typename T, typename RowT, int VEC, int UNROLL>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    embedding_bag_backward_kernel(const BackwardParams p, int lanes_log2) {
  int64_t first;
  int v;
  if (!locate(lanes_log2, p.num_chunks, p.items_per_pass, p.dim_vecs, first, v)) return;
#pragma unroll 1
  for (; first < p.num_positions; first += p.items_per_pass)
    backward_run<T, RowT, VEC, UNROLL>(p, first, v);
}

struct PerSampleWeightsBackwardParams {
  const char* grad_output;
  int64_t grad_row_bytes;  // dim * element size
  const char* weight;
  int64_t weight_row_bytes;
  int64_t num_rows;
  int dim_vecs;
  const void* indices;
  const void* offsets;
  int64_t num_indices;
  int64_t num_bags;
  int64_t num_offsets;
  int64_t padding_idx;
  void* out;
  int64_t items_per_pass;
  int64_t* errors;
};
// dot[u] += <g, vector at byte offset col of row u> for the rows still taken.
template <typename T, int VEC, int UNROLL>
__device__ __forceinline__ void add_dots(const RawVec<VEC>& g, const char* const (&src)[UNROLL],
                                         const bool (&take)[UNROLL], int64_t col,
                                         float (&dot)[UNROLL]) {
  RawVec<VEC> w[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) w[u] = load_streaming<VEC>(src[u] + col, take[u]);
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
    for (int e = 0; e < static_cast<int>(VEC / sizeof(T)); ++e)
      dot[u] = fmaf(get_elt<T>(g, e), get_elt<T>(w[u], e), dot[u]);
  }
}

// The bag's positions, UNROLL per step: each lane forms partial dots over its columns, the group
// sums them with shuffles, lane 0 writes. kOneChunk (dim fits one pass of the group, the common
// case): the lane's slice of grad_output[bag] stays in registers for the whole bag. Otherwise the
// lanes loop over the column chunks, re-reading the grad slices from L1, and the row pointers
// stay live across that loop: with 16-byte vectors 8 rows in flight would not fit in 64
// registers, so that path caps them at kPswMaxUnrollVec16.
template <typename T, typename IndexT, int VEC, int UNROLL, bool kOneChunk>
__device__ __forceinline__ void psw_bag(const PerSampleWeightsBackwardParams& p,
                                        const RowCheck<IndexT>& check, int64_t start, int64_t end,
                                        const char* grad_row, int lanes, int lane,
                                        unsigned group_mask, bool& oob) {
  constexpr int kRows = !kOneChunk && VEC == 16 && UNROLL > kPswMaxUnrollVec16
                            ? kPswMaxUnrollVec16
                            : UNROLL;
  const auto* indices = static_cast<const IndexT*>(p.indices);
  auto* out = static_cast<T*>(p.out);
  RawVec<VEC> grad_held{};
  if (kOneChunk && lane < p.dim_vecs) grad_held = load_cached<VEC>(grad_row + lane * VEC);

#pragma unroll 1
  for (int64_t i = start; i < end; i += kRows) {
    const int64_t left = end - i;
    const int n = left < kRows ? static_cast<int>(left) : kRows;
    const char* src[kRows];
    bool take[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const bool in_bag = u < n;
      const IndexT row = in_bag ? __ldg(indices + i + u) : IndexT{0};
      const bool counted = in_bag && !check.is_pad(row);
      take[u] = counted && check.in_range(row);
      oob |= counted && !take[u];
      src[u] = p.weight + static_cast<int64_t>(row) * p.weight_row_bytes;
    }
    float dot[kRows] = {};
    if constexpr (kOneChunk) {
      if (lane < p.dim_vecs) add_dots<T>(grad_held, src, take, lane * VEC, dot);
    } else {
#pragma unroll 1
      for (int v = lane; v < p.dim_vecs; v += lanes)
        add_dots<T>(load_cached<VEC>(grad_row + static_cast<int64_t>(v) * VEC), src, take,
                    static_cast<int64_t>(v) * VEC, dot);
    }
    // Butterfly sum over the group: a fixed order, so the result is deterministic.
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      for (int offset = lanes / 2; offset > 0; offset /= 2)
        dot[u] += __shfl_xor_sync(group_mask, dot[u], offset);
    }
    if (lane == 0) {
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        // Explicit 0 for a skipped row: 0 * a non-finite grad would otherwise give NaN.
        RawVec<sizeof(T)> x;
        set_elt<T>(x, 0, take[u] ? dot[u] : 0.f);
        if (u < n) store_vec<sizeof(T)>(out + i + u, x);
      }
    }
  }
}

// One group per bag (no column split: a dot product needs every column).
template <typename T, typename IndexT, int VEC, int UNROLL>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    embedding_bag_per_sample_weights_backward_kernel(const PerSampleWeightsBackwardParams p,
                                                     int lanes_log2) {
  constexpr ErrorOp kOp = ErrorOp::kEmbeddingBagPerSampleWeightsBackward;
  int64_t bag = group_in_grid(lanes_log2);
  if (bag >= p.items_per_pass) return;  // whole groups exit together
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  // The group's lanes within its warp (groups are aligned to their size).
  const int warp_lane = threadIdx.x & (kWarpSize - 1);
  const unsigned group_mask =
      lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1u) << (warp_lane & ~(lanes - 1));
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);
#pragma unroll 1
  for (; bag < p.num_bags; bag += p.items_per_pass) {
    int64_t start, end;
    // One lane per bag records, as in the forward.
    bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices,
                       lane == 0 && p.errors != nullptr, p.errors, kOp, start, end);
    const char* grad_row = p.grad_output + bag * p.grad_row_bytes;
    bool oob = false;
    if (p.dim_vecs <= lanes) {
      psw_bag<T, IndexT, VEC, UNROLL, true>(p, check, start, end, grad_row, lanes, lane, group_mask,
                                            oob);
    } else {
      psw_bag<T, IndexT, VEC, UNROLL, false>(p, check, start, end, grad_row, lanes, lane,
                                             group_mask, oob);
    }
    if (unlikely(oob && lane == 0 && p.errors != nullptr)) {
      // The bounds again rather than live across the loop.
      bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices, false, p.errors, kOp, start,
                         end);
      record_index_error(static_cast<const IndexT*>(p.indices), start, end, check, p.num_rows,
                         p.errors, kOp);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward plan: keys, bags and scales of every position (launch_embedding_bag_backward_plan).

struct PlanParams {
  const void* indices;
  const void* offsets;
  int64_t num_indices;
  int64_t num_bags;
  int64_t num_offsets;
  int64_t num_rows;
  int64_t row_split;
  int64_t padding_idx;
  bool mean;
  const void* per_sample_weights;  // nullptr: none
  void* keys;
  int64_t* bags;
  float* scales;      // nullptr: sum without weights
  float* bag_scales;  // mean with padding: 1 / count of each bag (first kernel); else nullptr
  int64_t* errors;
};

// Mean with padding: bag_scales[b] = 1 / max(count, 1), count = the bag's non-padding entries. One
// warp per bag, 32 entries per step, so a long bag is no serial walk.
template <typename IndexT>
__global__ void __launch_bounds__(kPlanBlockThreads)
    embedding_bag_mean_scales_kernel(const PlanParams p, int64_t items_per_pass) {
  constexpr int kWarpLog2 = 5;
  static_assert(1 << kWarpLog2 == kWarpSize, "warp size");
  const int lane = threadIdx.x & (kWarpSize - 1);
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);
  const auto* indices = static_cast<const IndexT*>(p.indices);
  // The whole warp works on one bag, so the loops and the shuffles are warp-uniform.
#pragma unroll 1
  for (int64_t bag = group_in_grid(kWarpLog2); bag < p.num_bags; bag += items_per_pass) {
    int64_t start, end;
    bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices, false, p.errors,
                       ErrorOp::kEmbeddingBagBackward, start, end);
    int64_t count = 0;
    for (int64_t i = start + lane; i < end; i += kWarpSize)
      count += !check.is_pad(__ldg(indices + i));
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
      count += __shfl_xor_sync(0xffffffffu, count, offset);
    if (lane == 0) p.bag_scales[bag] = 1.f / static_cast<float>(count > 0 ? count : 1);
  }
}

// The bag holding position i, if any: the last bag whose start is <= i, or -1 (binary search;
// unclamped starts compare with i in [0, num_indices) as clamped ones do). With valid offsets the
// starts are sorted; with any offsets the bag found starts at or before i, so the search always
// ends, after at most 64 steps.
template <typename IndexT>
__device__ __forceinline__ int64_t bag_of(const IndexT* offsets, int64_t num_bags, int64_t i) {
  int64_t lo = 0, hi = num_bags;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (static_cast<int64_t>(__ldg(offsets + mid)) <= i) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// One thread per item: the offsets checks of bag i (i < num_bags) and the plan of position i
// (i < num_indices). T: the per-sample weights' dtype.
template <typename IndexT, typename KeyT, typename T>
__global__ void __launch_bounds__(kPlanBlockThreads)
    embedding_bag_backward_plan_kernel(const PlanParams p, int64_t items_per_pass) {
  constexpr ErrorOp kOp = ErrorOp::kEmbeddingBagBackward;
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);
  const auto* indices = static_cast<const IndexT*>(p.indices);
  const auto* offsets = static_cast<const IndexT*>(p.offsets);
  const int64_t items = max(p.num_indices, p.num_bags);
#pragma unroll 1
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += items_per_pass) {
    int64_t start, end;
    if (i < p.num_bags) {
      bag_bounds<IndexT>(p.offsets, i, p.num_offsets, p.num_indices, p.errors != nullptr,
                         p.errors, kOp, start, end);
    }
    if (i >= p.num_indices) continue;
    const int64_t bag = bag_of(offsets, p.num_bags, i);
    start = end = 0;
    if (bag >= 0) {
      bag_bounds<IndexT>(p.offsets, bag, p.num_offsets, p.num_indices, false, p.errors, kOp,
                         start, end);
    }
    const bool in_bag = i < end;  // and start <= i (bag_of)
    const IndexT row = __ldg(indices + i);
    const bool counted = in_bag && !check.is_pad(row);
    const bool take = counted && check.in_range(row);
    if (unlikely(counted && !take))
      record_error(p.errors, kOp, ErrorCode::kIndexOutOfRange, i, row, p.num_rows);
    // The row's sub-run: interleaved positions, so each sub-run keeps position order.
    static_cast<KeyT*>(p.keys)[i] =
        static_cast<KeyT>(take ? static_cast<int64_t>(row) * p.row_split + (i & (p.row_split - 1))
                               : p.num_rows * p.row_split);
    p.bags[i] = bag < 0 ? 0 : bag;
    if (p.scales != nullptr) {
      float scale = 0.f;
      if (in_bag) {
        if (p.per_sample_weights != nullptr) {
          const auto* psw = static_cast<const T*>(p.per_sample_weights);
          scale = cuda::Elt<T>::to_float(load_bits(psw + i));
        } else if (!p.mean) {
          scale = 1.f;
        } else if (p.bag_scales != nullptr) {
          scale = p.bag_scales[bag];
        } else {  // no padding: the count is the bag's length, >= 1 as i is in the bag
          scale = 1.f / static_cast<float>(end - start);
        }
      }
      p.scales[i] = scale;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers: the checks, grid sizing and dispatch are launch.h's.

}  // namespace

LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& args,
                                         const EmbeddingBagConfig& config, void* stream) {
  if (LaunchError e = launch::check(args, config, kWarpSize)) return e;
  if (!launch::has_work(args)) return nullptr;
  const int elt = launch::element_bytes(args.weight_dtype);
  const int vec = config.vec_bytes;
  ForwardParams p;
  p.weight = static_cast<const char*>(args.weight);
  p.weight_row_bytes = args.weight_row_stride * elt;
  p.num_rows = args.num_rows;
  p.dim_vecs = static_cast<int>(args.dim * elt / vec);
  p.num_chunks = (p.dim_vecs + config.lanes_per_bag - 1) / config.lanes_per_bag;
  p.indices = args.indices;
  p.offsets = args.offsets;
  p.num_indices = args.num_indices;
  p.num_bags = args.num_bags;
  p.num_offsets = args.num_offsets;
  p.per_sample_weights = args.per_sample_weights;
  p.padding_idx = args.padding_idx;
  p.mean = args.mode == PoolMode::kMean;
  p.out = static_cast<char*>(args.out);
  p.out_row_bytes = args.dim * elt;
  p.errors = args.errors;
  const launch::Grid grid = launch::grid_for(args.num_bags, p.num_chunks, config.lanes_per_bag,
                                             config.block_threads, kGridLimits);
  p.items_per_pass = grid.items_per_pass;
  auto s = static_cast<cudaStream_t>(stream);
  return launch::dispatch_kernel<CudaTypes>(args.weight_dtype, args.index_dtype, config,
                                            [&](auto t, auto i, auto v, auto u) {
    embedding_bag_forward_kernel<typename decltype(t)::type, typename decltype(i)::type,
                                 decltype(v)::value, decltype(u)::value>
        <<<grid.blocks, config.block_threads, 0, s>>>(p, grid.lanes_log2);
    return launch_status();
  });
}

LaunchError launch_embedding_bag_backward_plan(const EmbeddingBagBackwardPlanArgs& args,
                                               void* stream) {
  if (LaunchError e = launch::check(args)) return e;
  if (!launch::has_work(args)) return nullptr;
  const bool count_bags = launch::counts_bags(args);
  PlanParams p;
  p.indices = args.indices;
  p.offsets = args.offsets;
  p.num_indices = args.num_indices;
  p.num_bags = args.num_bags;
  p.num_offsets = args.num_offsets;
  p.num_rows = args.num_rows;
  p.row_split = args.row_split;
  p.padding_idx = args.padding_idx;
  p.mean = args.mode == PoolMode::kMean;
  p.per_sample_weights = args.per_sample_weights;
  p.keys = args.keys;
  p.bags = args.bags;
  p.scales = args.scales;
  p.bag_scales = count_bags ? args.bag_scratch : nullptr;
  p.errors = args.errors;
  auto s = static_cast<cudaStream_t>(stream);
  return launch::dispatch_index(args.index_dtype, [&](auto i) -> LaunchError {
    using IndexT = typename decltype(i)::type;
    if (count_bags) {
      const launch::Grid grid =
          launch::grid_for(args.num_bags, 1, kWarpSize, kPlanBlockThreads, kGridLimits);
      embedding_bag_mean_scales_kernel<IndexT>
          <<<grid.blocks, kPlanBlockThreads, 0, s>>>(p, grid.items_per_pass);
      if (LaunchError e = launch_status()) return e;
    }
    const int64_t items = args.num_indices > args.num_bags ? args.num_indices : args.num_bags;
    const launch::Grid grid = launch::grid_for(items, 1, 1, kPlanBlockThreads, kGridLimits);
    return launch::dispatch_index(args.key_dtype, [&](auto k) {
      const auto launch_plan = [&](auto t) {
        embedding_bag_backward_plan_kernel<IndexT, typename decltype(k)::type,
                                           typename decltype(t)::type>
            <<<grid.blocks, kPlanBlockThreads, 0, s>>>(p, grid.items_per_pass);
        return launch_status();
      };
      // Without weights their dtype is irrelevant: one instance.
      if (args.per_sample_weights == nullptr) return launch_plan(launch::TypeTag<float>{});
      return launch::dispatch_float<CudaTypes>(args.weight_dtype, launch_plan);
    });
  });
}

LaunchError launch_embedding_bag_backward(const EmbeddingBagBackwardArgs& args,
                                          const EmbeddingBagConfig& config, void* stream) {
  if (LaunchError e = launch::check(args, config, kWarpSize)) return e;
  if (!launch::has_work(args)) return nullptr;
  const int elt = launch::element_bytes(args.grad_dtype);
  const int vec = config.vec_bytes;
  BackwardParams p;
  p.grad_output = static_cast<const char*>(args.grad_output);
  p.row_bytes = args.dim * elt;
  p.dim_vecs = static_cast<int>(args.dim * elt / vec);
  p.num_chunks = (p.dim_vecs + config.lanes_per_bag - 1) / config.lanes_per_bag;
  p.num_rows = args.num_rows;
  p.num_bags = args.num_bags;
  p.sorted_rows = args.sorted_rows;
  p.sorted_bags = args.sorted_bags;
  p.sorted_scales = args.sorted_scales;
  p.num_positions = args.num_positions;
  p.grad_weight = static_cast<char*>(args.grad_weight);
  const launch::Grid grid = launch::grid_for(args.num_positions, p.num_chunks,
                                             config.lanes_per_bag, config.block_threads,
                                             kGridLimits);
  p.items_per_pass = grid.items_per_pass;
  auto s = static_cast<cudaStream_t>(stream);
  return launch::dispatch_kernel<CudaTypes>(args.grad_dtype, args.index_dtype, config,
                                            [&](auto t, auto i, auto v, auto u) {
    embedding_bag_backward_kernel<typename decltype(t)::type, typename decltype(i)::type,
                                  decltype(v)::value, decltype(u)::value>
        <<<grid.blocks, config.block_threads, 0, s>>>(p, grid.lanes_log2);
    return launch_status();
  });
}

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& args, const EmbeddingBagConfig& config,
    void* stream) {
  if (LaunchError e = launch::check(args, config, kWarpSize)) return e;
  if (!launch::has_work(args)) return nullptr;
  const int elt = launch::element_bytes(args.weight_dtype);
  const int vec = config.vec_bytes;
  PerSampleWeightsBackwardParams p;
  p.grad_output = static_cast<const char*>(args.grad_output);
  p.grad_row_bytes = args.dim * elt;
  p.weight = static_cast<const char*>(args.weight);
  p.weight_row_bytes = args.weight_row_stride * elt;
  p.num_rows = args.num_rows;
  p.dim_vecs = static_cast<int>(args.dim * elt / vec);
  p.indices = args.indices;
  p.offsets = args.offsets;
  p.num_indices = args.num_indices;
  p.num_bags = args.num_bags;
  p.num_offsets = args.num_offsets;
  p.padding_idx = args.padding_idx;
  p.out = args.grad_per_sample_weights;
  p.errors = args.errors;
  const launch::Grid grid = launch::grid_for(args.num_bags, 1, config.lanes_per_bag,
                                             config.block_threads, kGridLimits);
  p.items_per_pass = grid.items_per_pass;
  auto s = static_cast<cudaStream_t>(stream);
  return launch::dispatch_kernel<CudaTypes>(args.weight_dtype, args.index_dtype, config,
                                            [&](auto t, auto i, auto v, auto u) {
    embedding_bag_per_sample_weights_backward_kernel<typename decltype(t)::type,
                                                     typename decltype(i)::type,
                                                     decltype(v)::value, decltype(u)::value>
        <<<grid.blocks, config.block_threads, 0, s>>>(p, grid.lanes_log2);
    return launch_status();
  });
}

}  // namespace mymetaops
