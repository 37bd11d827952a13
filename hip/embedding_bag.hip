// embedding_bag for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950: MI350X/MI355X), written for
// wave64. Semantics: csrc/include/mymetaops/embedding_bag.h; the host-side checks, grid sizing and
// dispatch: csrc/include/mymetaops/launch.h. cuda/embedding_bag.cu defines the same launchers; a
// build links one of the two.
//
// Work split, shared by the three kernels: an aligned group of lanes_per_bag lanes of a wave owns
// one work item (a bag, or one position of the sorted backward plan). Lane l owns V = vec_bytes /
// element-size consecutive columns at c + l*V of every column chunk c (a chunk is lanes_per_bag*V
// columns), so the group reads a row slice as lanes_per_bag adjacent vec_bytes accesses
// (global_load_dwordx4 at 16 bytes). Each lane issues `unroll` independent row loads before it
// accumulates any: MI300X streams ~5.3 TB/s at ~1 us latency, so ~5 MB must be in flight across its
// 304 CUs, i.e. many waves per CU and several rows per lane. Accumulation is fp32 in registers.
//
// A batch first loads all its indices (plan entries, weights), then issues all its row loads:
// vmcnt counts loads in issue order, so waiting for an index loaded after a row load would also
// wait for that row. Every load is unconditional (positions past the end are clamped into range,
// lookups that must not touch a row read a zero stand-in) and results are selected with pick();
// bools combine with '&', not '&&'. A load under a branch would wait for itself inside the branch
// and the batch's loads would no longer overlap.
// Bad values (mymetaops/errors.h) cost a compare per bag and a flag per lookup on the hot path;
// finding and recording the bad entry happens only on the rare path, by lane 0 of the group.
// No LDS and no MFMA, so the kernels also run on NVIDIA GPUs through hip/shim for logic testing.

#include <cstdint>

#include "hip_compat.h"
#include "mymetaops/embedding_bag.h"
#include "mymetaops/launch.h"

namespace mymetaops {
namespace {

using hip_compat::kWaveSize;

// The contract's block size cap, also declared to the compiler: a block may be this big, so
// register allocation must fit it (on CDNA: 16 waves per CU, <= 128 VGPRs per lane).
constexpr int kMaxBlockThreads = launch::kMaxBlockThreads;
// HIP counts a grid in work-items with 32 bits; bigger problems loop over the items.
constexpr launch::GridLimits kGridLimits{UINT32_MAX, UINT32_MAX};
// The backward plan's kernels: one lane per position (one wave per bag for the counts).
constexpr int kPlanBlockThreads = 256;
constexpr uint32_t kQuietNaNBits = 0x7fc00000u;

// ---------------------------------------------------------------------------------------------
// Element types. 16-bit floats are carried as raw bits and converted by hip_compat.

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

// What one lane moves per row access: kVecBytes bytes, naturally aligned.
template <typename T, int kVecBytes>
struct alignas(kVecBytes) Vec {
  static constexpr int kElems = kVecBytes / int(sizeof(T));
  T v[kElems];
};

// Read instead of a row by lookups that must not touch memory (padding, out-of-range rows, slots
// of an unroll batch past the end of a bag or run): zero bits of the widest access. Every slot of a
// batch then loads unconditionally, with no branch between the loads in flight, and contributes 0.
struct alignas(16) ZeroVec {
  uint32_t words[4];
};
__device__ ZeroVec g_zero_vec;

// c ? a : b with both evaluated. A ?: whose arms are computations is emitted as a branch, the
// compiler may sink the arms' work (a 64-bit multiply, a load's address) into it, and then it stays
// a branch: the data path of a batch uses pick() so that it never branches.
template <typename T>
__device__ inline T pick(bool c, T a, T b) {
  return c ? a : b;
}

template <typename V>
__device__ inline const V* zero_vec() {
  static_assert(sizeof(V) <= sizeof(ZeroVec), "zero stand-in too small");
  return reinterpret_cast<const V*>(&g_zero_vec);
}

// acc += scale * row, on column pairs (one v_pk_fma_f32 each on CDNA3/4): see hip_compat::fma2.
template <typename V>
__device__ inline void add_scaled(float (&acc)[V::kElems], float scale, const V& row) {
  if constexpr (V::kElems == 1) {
    acc[0] += scale * to_float(row.v[0]);
  } else {
#pragma unroll
    for (int k = 0; k < V::kElems; k += 2) {
      const hip_compat::Float2 sum = hip_compat::fma2(
          hip_compat::Float2{scale, scale},
          hip_compat::Float2{to_float(row.v[k]), to_float(row.v[k + 1])},
          hip_compat::Float2{acc[k], acc[k + 1]});
      acc[k] = sum.x;
      acc[k + 1] = sum.y;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Group bookkeeping. lanes_per_bag is a power of two passed as its log2, so the group and lane
// come from shifts and masks rather than 64-bit divisions. The shape comes from the host rather
// than from blockDim/gridDim (see hip_compat::thread_in_block). One group per work item
// (launch::grid_for with one group per item), so every group of the grid has one.

struct GroupGrid {
  int lanes_shift;         // log2(lanes_per_bag)
  int block_threads;       // a multiple of the wave size, so groups are aligned within waves
  int64_t items_per_pass;  // work items the whole grid covers per pass
};

GroupGrid group_grid(const launch::Grid& grid, int block_threads) {
  return {grid.lanes_log2, block_threads, grid.items_per_pass};
}

struct GroupLoop {
  int64_t first;  // the calling lane's first work item; then every items_per_pass-th
  int lane;       // lane within the group
  int lanes;      // lanes_per_bag
};

__device__ inline GroupLoop group_loop(const GroupGrid& grid) {
  const unsigned thread = hip_compat::thread_in_block();
  const int64_t global = int64_t(hip_compat::block_in_grid()) * grid.block_threads + thread;
  const int lanes = 1 << grid.lanes_shift;
  return {global >> grid.lanes_shift, int(thread) & (lanes - 1), lanes};
}

// padding_idx is a row (>= 0) or -1 for none, and then an index of -1 is out of range, not padding.
__device__ inline bool is_padding(int64_t row, int64_t padding_idx) {
  return (row == padding_idx) & (row >= 0);
}

struct BagRange {
  int64_t start, end;
};

// A bag's two offsets entries as given: lo = offsets[bag] and hi = its end, offsets[bag + 1] or
// num_indices past torch-form offsets (num_offsets == num_bags).
struct BagEntries {
  int64_t lo, hi;
};

template <typename I>
__device__ inline BagEntries bag_entries(const I* offsets, int64_t bag, int64_t num_offsets,
                                         int64_t num_indices) {
  const bool has_end = bag + 1 < num_offsets;
  return {offsets[bag], pick(has_end, int64_t(offsets[has_end ? bag + 1 : bag]), num_indices)};
}

// 0 <= lo <= hi <= num_indices, as two unsigned compares (a negative value is above any valid one).
__device__ inline bool entries_ok(BagEntries e, int64_t num_indices) {
  return (uint64_t(e.lo) <= uint64_t(e.hi)) & (uint64_t(e.hi) <= uint64_t(num_indices));
}

// Both entries clamped to [0, num_indices]; an end below its start is an empty bag.
__device__ inline BagRange clamped(BagEntries e, int64_t num_indices) {
  const int64_t start = e.lo < 0 ? 0 : (e.lo > num_indices ? num_indices : e.lo);
  const int64_t end = e.hi < start ? start : (e.hi > num_indices ? num_indices : e.hi);
  return {start, end};
}

// The bag's range; `bad` is set if one of its entries is bad.
template <typename I>
__device__ inline BagRange bag_range(const I* offsets, int64_t bag, int64_t num_offsets,
                                     int64_t num_indices, bool& bad) {
  const BagEntries e = bag_entries(offsets, bag, num_offsets, num_indices);
  bad |= !entries_ok(e, num_indices);
  return clamped(e, num_indices);
}

// A bad value found, as recorded (mymetaops/errors.h).
struct BadValue {
  ErrorCode code;
  int64_t position, value, bound;
};

// What is wrong with a bag's bad entries, offsets[bag] first. Each bag checks its own entries
// (offsets[bag + 1] against offsets[bag] for the order), so all of them get checked.
__device__ inline BadValue offsets_error(int64_t bag, BagEntries e, int64_t num_indices) {
  if (e.lo < 0) return {ErrorCode::kNegativeOffset, bag, e.lo, 0};
  if (e.lo > num_indices) return {ErrorCode::kOffsetPastEnd, bag, e.lo, num_indices};
  // hi is offsets[bag + 1]: the implicit end num_indices is never bad.
  if (e.hi < 0) return {ErrorCode::kNegativeOffset, bag + 1, e.hi, 0};
  if (e.hi < e.lo) return {ErrorCode::kDecreasingOffset, bag + 1, e.hi, 0};
  return {ErrorCode::kOffsetPastEnd, bag + 1, e.hi, num_indices};
}

__device__ inline void record(int64_t* errors, ErrorOp op, const BadValue& bad) {
  hip_compat::record_error(errors, op, bad.code, bad.position, bad.value, bad.bound);
}

// Rare path of a group that met a bad entry or index in one of its bags (bag = first, first +
// items_per_pass, ...): walks them again and records the first problem. Kept out of the bag loops
// so that nothing it needs is live, or hoisted, across them. P: the forward's or the
// per-sample-weights backward's params.
template <typename P>
__device__ inline void record_bag_errors(const P& p, int64_t first, ErrorOp op) {
  BadValue bad = {ErrorCode::kNone, 0, 0, 0};
  for (int64_t bag = first; (bag < p.num_bags) & (bad.code == ErrorCode::kNone);
       bag += p.grid.items_per_pass) {
    const BagEntries e = bag_entries(p.offsets, bag, p.num_offsets, p.num_indices);
    if (!entries_ok(e, p.num_indices)) bad = offsets_error(bag, e, p.num_indices);
    const BagRange r = clamped(e, p.num_indices);
    for (int64_t i = r.start; (i < r.end) & (bad.code == ErrorCode::kNone); ++i) {
      const int64_t row = p.indices[i];
      if (!is_padding(row, p.padding_idx) & (uint64_t(row) >= uint64_t(p.num_rows)))
        bad = {ErrorCode::kIndexOutOfRange, i, row, p.num_rows};
    }
  }
  if (bad.code != ErrorCode::kNone) record(p.errors, op, bad);
}

// ---------------------------------------------------------------------------------------------
// Forward: out[bag] = pool over the bag of weight[indices[i]] (* per_sample_weights[i]).

template <typename T, typename I>
struct ForwardParams {
  const T* weight;
  int64_t num_rows, dim, row_stride;
  const I* indices;
  const I* offsets;
  int64_t num_indices, num_bags, num_offsets;
  const T* per_sample_weights;  // nullptr: all ones
  int64_t padding_idx;
  bool mean;
  T* out;
  int64_t* errors;
  GroupGrid grid;
};

template <bool kWeighted, int kVecBytes, int kUnroll, typename T, typename I>
__device__ inline void forward_bags(const ForwardParams<T, I>& p) {
  using V = Vec<T, kVecBytes>;
  const float nan = hip_compat::bit_cast<float>(kQuietNaNBits);
  const GroupLoop g = group_loop(p.grid);
  const int64_t chunk = int64_t(g.lanes) * V::kElems;
  bool bad = false;  // a bad offsets entry or index met: recorded once the bags are done
  for (int64_t bag = g.first; bag < p.num_bags; bag += p.grid.items_per_pass) {
    const BagRange r = bag_range(p.offsets, bag, p.num_offsets, p.num_indices, bad);
    // Large dims: one pass over the bag per column chunk, so the accumulator stays V::kElems
    // registers with compile-time indices; the bag's indices are re-read from cache.
    for (int64_t col = int64_t(g.lane) * V::kElems; col < p.dim; col += chunk) {
      float acc[V::kElems] = {};
      float pooled = 0.f;  // lookups other than padding (exact to 2^24): the mean's divisor
      for (int64_t i = r.start; i < r.end; i += kUnroll) {
        int64_t row_ids[kUnroll];
        float scales[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t pos = i + u < r.end ? i + u : r.end - 1;
          row_ids[u] = p.indices[pos];
          scales[u] = kWeighted ? to_float(p.per_sample_weights[pos]) : 1.f;
        }
        V rows[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t row = row_ids[u];
          const bool counted = (i + u < r.end) & !is_padding(row, p.padding_idx);
          const bool valid = counted & (uint64_t(row) < uint64_t(p.num_rows));
          bad |= counted & !valid;
          const int64_t offset = row * p.row_stride + col;  // used only when valid
          // An out-of-range row contributes NaN * 0 (0 from the stand-in), which turns every
          // column of the bag into NaN; padding and slots past the bag contribute 0 * 0.
          scales[u] = pick(valid, scales[u], pick(counted, nan, 0.f));
          pooled += pick(counted, 1.f, 0.f);
          rows[u] = hip_compat::load_streaming(
              pick(valid, reinterpret_cast<const V*>(p.weight + offset), zero_vec<V>()));
        }
        hip_compat::rows_issued();
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) add_scaled(acc, scales[u], rows[u]);
      }
      const bool divide = p.mean && pooled > 0.f;  // the mean of an empty bag is 0
      V out;
#pragma unroll
      for (int k = 0; k < V::kElems; ++k) {
        out.v[k] = from_float<T>(divide ? acc[k] / pooled : acc[k]);
      }
      *reinterpret_cast<V*>(p.out + bag * p.dim + col) = out;
    }
  }
  // Lane 0 of the group records: every lane doing an atomic on host memory would be slow.
  if (__builtin_expect(bad & (g.lane == 0) & (p.errors != nullptr), 0))
    record_bag_errors(p, g.first, ErrorOp::kEmbeddingBag);
}

template <typename T, typename I, int kVecBytes, int kUnroll>
__global__ void __launch_bounds__(kMaxBlockThreads)
    embedding_bag_forward_kernel(const ForwardParams<T, I> p) {
  // Uniform over the launch, so tested once: unweighted lookups then issue no weight loads, and a
  // weight load is never under a branch inside a batch.
  if (p.per_sample_weights)
    forward_bags<true, kVecBytes, kUnroll>(p);
  else
    forward_bags<false, kVecBytes, kUnroll>(p);
}

// ---------------------------------------------------------------------------------------------
// Backward: grad_weight[row] = sum over the row's run in the sorted plan of
// sorted_scales[q] * grad_output[sorted_bags[q]]. One group per plan position; only the group at
// the start of a run works, so each row is summed in plan order and written once, without atomics.

template <typename T, typename I>
struct BackwardParams {
  const T* grad_output;
  int64_t dim, num_rows, num_bags;
  const I* sorted_rows;
  const int64_t* sorted_bags;
  const float* sorted_scales;  // nullptr: all ones
  int64_t num_positions;
  T* grad_weight;
  GroupGrid grid;
};

template <bool kScaled, int kVecBytes, int kUnroll, typename T, typename I>
__device__ inline void backward_rows(const BackwardParams<T, I>& p) {
  using V = Vec<T, kVecBytes>;
  const GroupLoop g = group_loop(p.grid);
  const int64_t chunk = int64_t(g.lanes) * V::kElems;
  const int64_t last = p.num_positions - 1;
  for (int64_t q = g.first; q < p.num_positions; q += p.grid.items_per_pass) {
    const int64_t row = p.sorted_rows[q];
    const bool run_start = q == 0 || int64_t(p.sorted_rows[q - 1]) != row;
    // Another group owns the row, or the row is a marker (or corrupt): never dereferenced.
    if (!run_start || row < 0 || row >= p.num_rows) continue;
    for (int64_t col = int64_t(g.lane) * V::kElems; col < p.dim; col += chunk) {
      float acc[V::kElems] = {};
      // Rows are sorted, so the run is contiguous: a batch whose last slot is still in the run
      // means the run may go on.
      bool run_goes_on = true;
      for (int64_t i = q; run_goes_on; i += kUnroll) {
        bool in_run[kUnroll];
        int64_t bags[kUnroll];
        float scales[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t pos = i + u < last ? i + u : last;
          in_run[u] = (i + u <= last) & (int64_t(p.sorted_rows[pos]) == row);
          bags[u] = p.sorted_bags[pos];
          scales[u] = kScaled ? p.sorted_scales[pos] : 1.f;
        }
        V grads[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          // A bag outside grad_output (only from a corrupt plan) is skipped like a marker.
          const bool take = in_run[u] & (uint64_t(bags[u]) < uint64_t(p.num_bags));
          const int64_t offset = bags[u] * p.dim + col;  // used only when taken
          scales[u] = pick(take, scales[u], 0.f);
          grads[u] = *pick(take, reinterpret_cast<const V*>(p.grad_output + offset), zero_vec<V>());
        }
        run_goes_on = in_run[kUnroll - 1];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) add_scaled(acc, scales[u], grads[u]);  // in plan order
      }
      V out;
#pragma unroll
      for (int k = 0; k < V::kElems; ++k) out.v[k] = from_float<T>(acc[k]);
      *reinterpret_cast<V*>(p.grad_weight + row * p.dim + col) = out;
    }
  }
}

template <typename T, typename I, int kVecBytes, int kUnroll>
__global__ void __launch_bounds__(kMaxBlockThreads)
    embedding_bag_backward_kernel(const BackwardParams<T, I> p) {
  if (p.sorted_scales)  // uniform: see embedding_bag_forward_kernel
    backward_rows<true, kVecBytes, kUnroll>(p);
  else
    backward_rows<false, kVecBytes, kUnroll>(p);
}

// ---------------------------------------------------------------------------------------------
// Per-sample-weights backward: grad_psw[i] = dot(grad_output[bag], weight[indices[i]]) for every
// position i of the bag. One group per bag: each lane forms partial dots over its columns, and the
// group sums them with cross-lane reductions. Loop bounds are uniform over the group, as the
// reduction needs all of its lanes.

template <typename T, typename I>
struct PerSampleWeightsBackwardParams {
  const T* grad_output;
  const T* weight;
  int64_t num_rows, dim, row_stride;
  const I* indices;
  const I* offsets;
  int64_t num_indices, num_bags, num_offsets;
  int64_t padding_idx;
  T* grad_per_sample_weights;
  int64_t* errors;
  GroupGrid grid;
};

// The lane's V columns of a grad_output row, as floats (zeros past dim).
template <typename V>
__device__ inline void load_grad_slice(const V* src, bool has_col, float (&out)[V::kElems]) {
  const V v = *pick(has_col, src, zero_vec<V>());
#pragma unroll
  for (int k = 0; k < V::kElems; ++k) out[k] = to_float(v.v[k]);
}

// dots[u] += the lane's partial dot of grad (its columns from col on) with the weight row that
// starts row_offsets[u] elements into the table (-1: a zero row). Offsets rather than pointers
// keep every address derived from the kernel argument, so the compiler knows they are global
// (global_load, not flat_load).
template <typename V, int kUnroll, typename T>
__device__ inline void add_partial_dots(float (&dots)[kUnroll], const float (&grad)[V::kElems],
                                        const T* weight, const int64_t (&row_offsets)[kUnroll],
                                        int64_t col, bool has_col) {
  V w[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const bool valid = (row_offsets[u] >= 0) & has_col;
    w[u] = hip_compat::load_streaming(
        pick(valid, reinterpret_cast<const V*>(weight + row_offsets[u] + col), zero_vec<V>()));
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    hip_compat::Float2 pair_sums = {0.f, 0.f};  // even and odd columns
#pragma unroll
    for (int k = 0; k + 1 < V::kElems; k += 2) {
      pair_sums = hip_compat::fma2(hip_compat::Float2{grad[k], grad[k + 1]},
                                   hip_compat::Float2{to_float(w[u].v[k]), to_float(w[u].v[k + 1])},
                                   pair_sums);
    }
    if constexpr (V::kElems % 2 == 1) {
      pair_sums.x += grad[V::kElems - 1] * to_float(w[u].v[V::kElems - 1]);
    }
    dots[u] += pair_sums.x + pair_sums.y;
  }
}

template <typename T, typename I, int kVecBytes, int kUnroll>
__global__ void __launch_bounds__(kMaxBlockThreads)
    embedding_bag_per_sample_weights_backward_kernel(const PerSampleWeightsBackwardParams<T, I> p) {
  using V = Vec<T, kVecBytes>;
  const GroupLoop g = group_loop(p.grid);
  const int64_t chunk = int64_t(g.lanes) * V::kElems;
  const int64_t lane_col = int64_t(g.lane) * V::kElems;
  bool bad = false;  // as in the forward
  for (int64_t bag = g.first; bag < p.num_bags; bag += p.grid.items_per_pass) {
    const BagRange r = bag_range(p.offsets, bag, p.num_offsets, p.num_indices, bad);
    const T* grad_row = p.grad_output + bag * p.dim;
    // The first chunk of grad_output[bag] (all of it when dim <= chunk, the usual shape) stays in
    // registers for the whole bag; later chunks are re-read per batch, from cache.
    float grad0[V::kElems];
    load_grad_slice(reinterpret_cast<const V*>(grad_row + lane_col), lane_col < p.dim, grad0);
    for (int64_t i = r.start; i < r.end; i += kUnroll) {
      int64_t row_offsets[kUnroll];  // -1: padding, out-of-range row or slot past the bag
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool in_bag = i + u < r.end;
        const int64_t row = p.indices[in_bag ? i + u : r.end - 1];
        const bool counted = in_bag & !is_padding(row, p.padding_idx);
        const bool valid = counted & (uint64_t(row) < uint64_t(p.num_rows));
        bad |= counted & !valid;
        row_offsets[u] = pick(valid, row * p.row_stride, int64_t(-1));
      }
      float dots[kUnroll] = {};
      add_partial_dots<V>(dots, grad0, p.weight, row_offsets, lane_col, lane_col < p.dim);
      for (int64_t col = chunk + lane_col; col - lane_col < p.dim; col += chunk) {
        float grad[V::kElems];
        load_grad_slice(reinterpret_cast<const V*>(grad_row + col), col < p.dim, grad);
        add_partial_dots<V>(dots, grad, p.weight, row_offsets, col, col < p.dim);
      }
      hip_compat::group_sum(dots, g.lanes);
      if (g.lane == 0) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (i + u < r.end) p.grad_per_sample_weights[i + u] = from_float<T>(dots[u]);
        }
      }
    }
  }
  if (__builtin_expect(bad & (g.lane == 0) & (p.errors != nullptr), 0))
    record_bag_errors(p, g.first, ErrorOp::kEmbeddingBagPerSampleWeightsBackward);
}

// ---------------------------------------------------------------------------------------------
// Backward plan: keys, bags and scales of every position (launch_embedding_bag_backward_plan).

// Mean with padding: bag_scales[b] = 1 / max(count, 1), count = the bag's non-padding entries. One
// wave per bag, 64 entries per step, so a long bag is no serial walk.
template <typename I>
struct MeanScalesParams {
  const I* indices;
  const I* offsets;
  int64_t num_indices, num_bags, num_offsets;
  int64_t padding_idx;
  float* bag_scales;
  GroupGrid grid;  // groups of kWaveSize lanes
};

template <typename I>
__global__ void __launch_bounds__(kPlanBlockThreads)
    embedding_bag_mean_scales_kernel(const MeanScalesParams<I> p) {
  const GroupLoop g = group_loop(p.grid);
  // The whole wave works on one bag, so the loops and the shuffles are wave-uniform.
  for (int64_t bag = g.first; bag < p.num_bags; bag += p.grid.items_per_pass) {
    const BagRange r =
        clamped(bag_entries(p.offsets, bag, p.num_offsets, p.num_indices), p.num_indices);
    int64_t count = 0;
    for (int64_t i = r.start + g.lane; i < r.end; i += kWaveSize)
      count += !is_padding(p.indices[i], p.padding_idx);
    for (int mask = 1; mask < kWaveSize; mask <<= 1) count += __shfl_xor(count, mask, kWaveSize);
    if (g.lane == 0) p.bag_scales[bag] = 1.f / float(count > 0 ? count : 1);
  }
}

template <typename I, typename K, typename T>
struct PlanParams {
  const I* indices;
  const I* offsets;
  int64_t num_indices, num_bags, num_offsets, num_rows;
  int64_t row_split;  // a power of two: each row's lookups go to row_split interleaved sub-rows
  int64_t padding_idx;
  bool mean;
  const T* per_sample_weights;  // nullptr: none
  K* keys;
  int64_t* bags;
  float* scales;      // nullptr: sum without weights
  float* bag_scales;  // mean with padding: 1 / count of each bag (first kernel); else nullptr
  int64_t* errors;
  GroupGrid grid;     // groups of one lane
};

// The bag holding position i, if any: the last bag whose start is <= i, or -1 (binary search;
// unclamped starts compare with i in [0, num_indices) as clamped ones do). With valid offsets the
// starts are sorted; with any offsets the bag found starts at or before i, so the search always
// ends, after at most 64 steps.
template <typename I>
__device__ inline int64_t bag_of(const I* offsets, int64_t num_bags, int64_t i) {
  int64_t lo = 0, hi = num_bags;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (int64_t(offsets[mid]) <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo - 1;
}

// One lane per item: the offsets checks of bag i (i < num_bags) and the plan of position i
// (i < num_indices). T: the per-sample weights' dtype.
template <typename I, typename K, typename T>
__global__ void __launch_bounds__(kPlanBlockThreads)
    embedding_bag_backward_plan_kernel(const PlanParams<I, K, T> p) {
  constexpr ErrorOp kOp = ErrorOp::kEmbeddingBagBackward;
  const GroupLoop g = group_loop(p.grid);
  const int64_t items = p.num_indices > p.num_bags ? p.num_indices : p.num_bags;
  for (int64_t i = g.first; i < items; i += p.grid.items_per_pass) {
    if (i < p.num_bags) {
      const BagEntries e = bag_entries(p.offsets, i, p.num_offsets, p.num_indices);
      if (__builtin_expect(!entries_ok(e, p.num_indices), 0))
        record(p.errors, kOp, offsets_error(i, e, p.num_indices));
    }
    if (i >= p.num_indices) continue;
    const int64_t bag = bag_of(p.offsets, p.num_bags, i);
    BagRange r = {0, 0};
    if (bag >= 0)
      r = clamped(bag_entries(p.offsets, bag, p.num_offsets, p.num_indices), p.num_indices);
    const bool in_bag = i < r.end;  // and r.start <= i (bag_of)
    const int64_t row = p.indices[i];
    const bool counted = in_bag & !is_padding(row, p.padding_idx);
    const bool take = counted & (uint64_t(row) < uint64_t(p.num_rows));
    if (__builtin_expect(counted & !take, 0))
      hip_compat::record_error(p.errors, kOp, ErrorCode::kIndexOutOfRange, i, row, p.num_rows);
    p.keys[i] = K(take ? row * p.row_split + (i & (p.row_split - 1)) : p.num_rows * p.row_split);
    p.bags[i] = bag < 0 ? 0 : bag;
    if (p.scales != nullptr) {
      float scale = 0.f;
      if (in_bag) {
        if (p.per_sample_weights != nullptr)
          scale = to_float(p.per_sample_weights[i]);
        else if (!p.mean)
          scale = 1.f;
        else if (p.bag_scales != nullptr)
          scale = p.bag_scales[bag];
        else  // no padding: the count is the bag's length, >= 1 as i is in the bag
          scale = 1.f / float(r.end - r.start);
      }
      p.scales[i] = scale;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers: the checks, grid sizing and dispatch are launch.h's.

LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& a,
                                         const EmbeddingBagConfig& config, void* stream) {
  if (LaunchError error = launch::check(a, config, kWaveSize)) return error;
  if (!launch::has_work(a)) return nullptr;
  const launch::Grid grid =
      launch::grid_for(a.num_bags, 1, config.lanes_per_bag, config.block_threads, kGridLimits);
  return launch::dispatch_kernel<HipTypes>(a.weight_dtype, a.index_dtype, config,
                  [&](auto value_tag, auto index_tag, auto vec_tag, auto unroll_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    constexpr int kUnroll = decltype(unroll_tag)::value;
    const ForwardParams<T, I> p{static_cast<const T*>(a.weight),
                                a.num_rows,
                                a.dim,
                                a.weight_row_stride,
                                static_cast<const I*>(a.indices),
                                static_cast<const I*>(a.offsets),
                                a.num_indices,
                                a.num_bags,
                                a.num_offsets,
                                static_cast<const T*>(a.per_sample_weights),
                                a.padding_idx,
                                a.mode == PoolMode::kMean,
                                static_cast<T*>(a.out),
                                a.errors,
                                group_grid(grid, config.block_threads)};
    embedding_bag_forward_kernel<T, I, kVecBytes, kUnroll>
        <<<grid.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_embedding_bag_backward_plan(const EmbeddingBagBackwardPlanArgs& a,
                                               void* stream) {
  if (LaunchError error = launch::check(a)) return error;
  if (!launch::has_work(a)) return nullptr;
  const auto s = static_cast<hipStream_t>(stream);
  const bool mean = a.mode == PoolMode::kMean;
  const bool count_bags = launch::counts_bags(a);
  return launch::dispatch_index(a.index_dtype, [&](auto index_tag) -> LaunchError {
    using I = typename decltype(index_tag)::type;
    if (count_bags) {
      const launch::Grid grid =
          launch::grid_for(a.num_bags, 1, kWaveSize, kPlanBlockThreads, kGridLimits);
      const MeanScalesParams<I> p{static_cast<const I*>(a.indices),
                                  static_cast<const I*>(a.offsets),
                                  a.num_indices,
                                  a.num_bags,
                                  a.num_offsets,
                                  a.padding_idx,
                                  a.bag_scratch,
                                  group_grid(grid, kPlanBlockThreads)};
      embedding_bag_mean_scales_kernel<I><<<grid.blocks, kPlanBlockThreads, 0, s>>>(p);
      if (LaunchError error = hip_compat::launch_error()) return error;
    }
    const int64_t items = a.num_indices > a.num_bags ? a.num_indices : a.num_bags;
    const launch::Grid grid = launch::grid_for(items, 1, 1, kPlanBlockThreads, kGridLimits);
    return launch::dispatch_index(a.key_dtype, [&](auto key_tag) {
      using K = typename decltype(key_tag)::type;
      const auto launch_plan = [&](auto value_tag) {
        using T = typename decltype(value_tag)::type;
        const PlanParams<I, K, T> p{static_cast<const I*>(a.indices),
                                    static_cast<const I*>(a.offsets),
                                    a.num_indices,
                                    a.num_bags,
                                    a.num_offsets,
                                    a.num_rows,
                                    a.row_split,
                                    a.padding_idx,
                                    mean,
                                    static_cast<const T*>(a.per_sample_weights),
                                    static_cast<K*>(a.keys),
                                    a.bags,
                                    a.scales,
                                    count_bags ? a.bag_scratch : nullptr,
                                    a.errors,
                                    group_grid(grid, kPlanBlockThreads)};
        embedding_bag_backward_plan_kernel<I, K, T><<<grid.blocks, kPlanBlockThreads, 0, s>>>(p);
        return hip_compat::launch_error();
      };
      // Without weights their dtype is irrelevant: one instance.
      if (a.per_sample_weights == nullptr) return launch_plan(launch::TypeTag<float>{});
      return launch::dispatch_float<HipTypes>(a.weight_dtype, launch_plan);
    });
  });
}

LaunchError launch_embedding_bag_backward(const EmbeddingBagBackwardArgs& a,
                                          const EmbeddingBagConfig& config, void* stream) {
  if (LaunchError error = launch::check(a, config, kWaveSize)) return error;
  if (!launch::has_work(a)) return nullptr;
  const launch::Grid grid = launch::grid_for(a.num_positions, 1, config.lanes_per_bag,
                                             config.block_threads, kGridLimits);
  return launch::dispatch_kernel<HipTypes>(a.grad_dtype, a.index_dtype, config,
                  [&](auto value_tag, auto index_tag, auto vec_tag, auto unroll_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    constexpr int kUnroll = decltype(unroll_tag)::value;
    const BackwardParams<T, I> p{static_cast<const T*>(a.grad_output),
                                 a.dim,
                                 a.num_rows,
                                 a.num_bags,
                                 static_cast<const I*>(a.sorted_rows),
                                 a.sorted_bags,
                                 a.sorted_scales,
                                 a.num_positions,
                                 static_cast<T*>(a.grad_weight),
                                 group_grid(grid, config.block_threads)};
    embedding_bag_backward_kernel<T, I, kVecBytes, kUnroll>
        <<<grid.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& a, const EmbeddingBagConfig& config,
    void* stream) {
  if (LaunchError error = launch::check(a, config, kWaveSize)) return error;
  if (!launch::has_work(a)) return nullptr;
  const launch::Grid grid =
      launch::grid_for(a.num_bags, 1, config.lanes_per_bag, config.block_threads, kGridLimits);
  return launch::dispatch_kernel<HipTypes>(a.weight_dtype, a.index_dtype, config,
                  [&](auto value_tag, auto index_tag, auto vec_tag, auto unroll_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    constexpr int kUnroll = decltype(unroll_tag)::value;
    const PerSampleWeightsBackwardParams<T, I> p{static_cast<const T*>(a.grad_output),
                                                 static_cast<const T*>(a.weight),
                                                 a.num_rows,
                                                 a.dim,
                                                 a.weight_row_stride,
                                                 static_cast<const I*>(a.indices),
                                                 static_cast<const I*>(a.offsets),
                                                 a.num_indices,
                                                 a.num_bags,
                                                 a.num_offsets,
                                                 a.padding_idx,
                                                 static_cast<T*>(a.grad_per_sample_weights),
                                                 a.errors,
                                                 group_grid(grid, config.block_threads)};
    embedding_bag_per_sample_weights_backward_kernel<T, I, kVecBytes, kUnroll>
        <<<grid.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

}  // namespace mymetaops
