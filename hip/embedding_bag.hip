// embedding_bag for AMD CDNA3/CDNA4 (gfx942: MI300X/MI325X, gfx950: MI350X/MI355X), written for
// wave64. Semantics: csrc/include/mymetaops/embedding_bag.h. cuda/embedding_bag.cu defines the same
// launchers; a build links one of the two.
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
// No LDS and no MFMA, so the kernels also run on NVIDIA GPUs through hip/shim for logic testing.

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "hip_compat.h"
#include "mymetaops/embedding_bag.h"

namespace mymetaops {
namespace {

using hip_compat::kWaveSize;

// The contract's block size cap, also declared to the compiler: a block may be this big, so
// register allocation must fit it (on CDNA: 16 waves per CU, <= 128 VGPRs per lane).
constexpr int kMaxBlockThreads = 1024;
// HIP counts a grid in work-items with 32 bits; bigger problems loop over the groups of the grid.
constexpr int64_t kMaxGridThreads = UINT32_MAX;
constexpr uint32_t kQuietNaNBits = 0x7fc00000u;

// ---------------------------------------------------------------------------------------------
// Element types. 16-bit floats are carried as raw bits and converted by hip_compat.

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
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
// than from blockDim/gridDim (see hip_compat::thread_in_block).

struct GroupGrid {
  int lanes_shift;         // log2(lanes_per_bag)
  int block_threads;       // a multiple of the wave size, so groups are aligned within waves
  int64_t groups_in_grid;  // work items the whole grid covers per pass
};

struct GroupLoop {
  int64_t first;  // the calling lane's first work item; then every groups_in_grid-th
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

// Offsets clamped to [0, num_indices]; an end below its start is an empty bag.
template <typename I>
__device__ inline BagRange bag_range(const I* offsets, int64_t bag, int64_t num_indices) {
  const int64_t lo = offsets[bag], hi = offsets[bag + 1];
  const int64_t start = lo < 0 ? 0 : (lo > num_indices ? num_indices : lo);
  const int64_t end = hi < start ? start : (hi > num_indices ? num_indices : hi);
  return {start, end};
}

// ---------------------------------------------------------------------------------------------
// Forward: out[bag] = pool over the bag of weight[indices[i]] (* per_sample_weights[i]).

template <typename T, typename I>
struct ForwardParams {
  const T* weight;
  int64_t num_rows, dim, row_stride;
  const I* indices;
  const I* offsets;
  int64_t num_indices, num_bags;
  const T* per_sample_weights;  // nullptr: all ones
  int64_t padding_idx;
  bool mean;
  T* out;
  GroupGrid grid;
};

template <bool kWeighted, int kVecBytes, int kUnroll, typename T, typename I>
__device__ inline void forward_bags(const ForwardParams<T, I>& p) {
  using V = Vec<T, kVecBytes>;
  const float nan = hip_compat::bit_cast<float>(kQuietNaNBits);
  const GroupLoop g = group_loop(p.grid);
  const int64_t chunk = int64_t(g.lanes) * V::kElems;
  for (int64_t bag = g.first; bag < p.num_bags; bag += p.grid.groups_in_grid) {
    const BagRange r = bag_range(p.offsets, bag, p.num_indices);
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
          const int64_t offset = row * p.row_stride + col;  // used only when valid
          // An out-of-range row contributes NaN * 0 (0 from the stand-in), which turns every
          // column of the bag into NaN; padding and slots past the bag contribute 0 * 0.
          scales[u] = pick(valid, scales[u], pick(counted, nan, 0.f));
          pooled += pick(counted, 1.f, 0.f);
          rows[u] = hip_compat::load_streaming(
              pick(valid, reinterpret_cast<const V*>(p.weight + offset), zero_vec<V>()));
        }
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
  int64_t dim, num_rows;
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
  for (int64_t q = g.first; q < p.num_positions; q += p.grid.groups_in_grid) {
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
          const int64_t offset = bags[u] * p.dim + col;  // used only when in the run
          scales[u] = pick(in_run[u], scales[u], 0.f);
          grads[u] =
              *pick(in_run[u], reinterpret_cast<const V*>(p.grad_output + offset), zero_vec<V>());
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
  int64_t num_indices, num_bags;
  int64_t padding_idx;
  T* grad_per_sample_weights;
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
  for (int64_t bag = g.first; bag < p.num_bags; bag += p.grid.groups_in_grid) {
    const BagRange r = bag_range(p.offsets, bag, p.num_indices);
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
        const bool valid = in_bag & !is_padding(row, p.padding_idx) &
                           (uint64_t(row) < uint64_t(p.num_rows));
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
}

// ---------------------------------------------------------------------------------------------
// Host side: config validation, launch shape, and dispatch of the run-time dtypes and knobs to
// template instances.

int element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    default:
      return 0;
  }
}

// nullptr when the config fits the problem: row slices of `dim` elements, row strides of
// `row_stride` elements, and the row-addressed base pointers in `row_bases`.
const char* check_config(const EmbeddingBagConfig& c, DType dtype, int64_t dim, int64_t row_stride,
                         std::initializer_list<const void*> row_bases) {
  const int elem = element_bytes(dtype);
  if (elem == 0) return "embedding_bag (hip): values must be float32, float16 or bfloat16";
  if (c.vec_bytes != 2 && c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16)
    return "embedding_bag (hip): config.vec_bytes must be 2, 4, 8 or 16";
  if (c.vec_bytes < elem) return "embedding_bag (hip): config.vec_bytes is below the element size";
  if (dim < 0 || row_stride < 0) return "embedding_bag (hip): negative dim or row stride";
  if (dim * elem % c.vec_bytes != 0)
    return "embedding_bag (hip): dim * element size is not a multiple of config.vec_bytes";
  if (row_stride * elem % c.vec_bytes != 0)
    return "embedding_bag (hip): the row stride in bytes is not a multiple of config.vec_bytes";
  for (const void* base : row_bases) {
    if (reinterpret_cast<uintptr_t>(base) % c.vec_bytes != 0)
      return "embedding_bag (hip): a row pointer is not aligned to config.vec_bytes";
  }
  const int lanes = c.lanes_per_bag;
  if (lanes < 1 || lanes > kWaveSize || (lanes & (lanes - 1)) != 0)
    return "embedding_bag (hip): config.lanes_per_bag must be a power of two in [1, wave size]";
  if (c.unroll != 1 && c.unroll != 2 && c.unroll != 4 && c.unroll != 8)
    return "embedding_bag (hip): config.unroll must be 1, 2, 4 or 8";
  // A multiple of the wave size is also one of lanes_per_bag (a power of two <= the wave size).
  const int block = c.block_threads;
  if (block <= 0 || block > kMaxBlockThreads || block % kWaveSize != 0)
    return "embedding_bag (hip): config.block_threads must be a multiple of the wave size in "
           "[wave size, 1024]";
  return nullptr;
}

struct LaunchShape {
  unsigned blocks;
  GroupGrid grid;
};

// One group per work item, capped so the grid stays within HIP's 32-bit work-item count (the
// kernels loop over the rest).
LaunchShape launch_shape(int64_t work_items, const EmbeddingBagConfig& c) {
  const int64_t groups_per_block = c.block_threads / c.lanes_per_bag;
  const int64_t max_blocks = kMaxGridThreads / c.block_threads;
  const int64_t needed = (work_items + groups_per_block - 1) / groups_per_block;
  const int64_t blocks = needed < max_blocks ? needed : max_blocks;
  const int lanes_shift = __builtin_ctz(unsigned(c.lanes_per_bag));
  return {unsigned(blocks), {lanes_shift, c.block_threads, blocks * groups_per_block}};
}

template <typename T>
struct TypeTag {
  using type = T;
};
template <int N>
using IntTag = std::integral_constant<int, N>;

// f(IntTag<v>) for the run-time value v among kChoices.
template <int... kChoices, typename F>
LaunchError with_choice(int value, F&& f) {
  LaunchError result = "embedding_bag (hip): unsupported config value";
  (void)((value == kChoices ? (result = f(IntTag<kChoices>{}), true) : false) || ...);
  return result;
}

// launch(TypeTag<T>, TypeTag<I>, IntTag<vec_bytes>, IntTag<unroll>) for the run-time choices.
template <typename F>
LaunchError dispatch(DType value_dtype, DType index_dtype, const EmbeddingBagConfig& c,
                     F&& launch) {
  const auto with_index = [&](auto value_tag) -> LaunchError {
    const auto with_knobs = [&](auto index_tag) {
      return with_choice<2, 4, 8, 16>(c.vec_bytes, [&](auto vec_tag) {
        return with_choice<1, 2, 4, 8>(c.unroll, [&](auto unroll_tag) -> LaunchError {
          using T = typename decltype(value_tag)::type;
          constexpr int kVecBytes = decltype(vec_tag)::value;
          if constexpr (kVecBytes < int(sizeof(T)))
            return "embedding_bag (hip): config.vec_bytes is below the element size";
          else
            return launch(value_tag, index_tag, vec_tag, unroll_tag);
        });
      });
    };
    switch (index_dtype) {
      case DType::kInt32:
        return with_knobs(TypeTag<int32_t>{});
      case DType::kInt64:
        return with_knobs(TypeTag<int64_t>{});
      default:
        return "embedding_bag (hip): indices must be int32 or int64";
    }
  };
  switch (value_dtype) {
    case DType::kFloat32:
      return with_index(TypeTag<float>{});
    case DType::kFloat16:
      return with_index(TypeTag<Half>{});
    case DType::kBFloat16:
      return with_index(TypeTag<BFloat16>{});
    default:
      return "embedding_bag (hip): values must be float32, float16 or bfloat16";
  }
}

}  // namespace

LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& a,
                                         const EmbeddingBagConfig& config, void* stream) {
  if (const char* error =
          check_config(config, a.weight_dtype, a.dim, a.weight_row_stride, {a.weight, a.out}))
    return error;
  if (a.num_rows < 0 || a.num_indices < 0 || a.num_bags < 0)
    return "embedding_bag (hip): negative size";
  if (a.per_sample_weights != nullptr && a.mode != PoolMode::kSum)
    return "embedding_bag (hip): per_sample_weights needs mode sum";
  if (a.num_bags == 0 || a.dim == 0) return nullptr;
  const LaunchShape shape = launch_shape(a.num_bags, config);
  return dispatch(a.weight_dtype, a.index_dtype, config,
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
                                static_cast<const T*>(a.per_sample_weights),
                                a.padding_idx,
                                a.mode == PoolMode::kMean,
                                static_cast<T*>(a.out),
                                shape.grid};
    embedding_bag_forward_kernel<T, I, kVecBytes, kUnroll>
        <<<shape.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_embedding_bag_backward(const EmbeddingBagBackwardArgs& a,
                                          const EmbeddingBagConfig& config, void* stream) {
  if (const char* error =
          check_config(config, a.grad_dtype, a.dim, a.dim, {a.grad_output, a.grad_weight}))
    return error;
  if (a.num_rows < 0 || a.num_positions < 0) return "embedding_bag (hip): negative size";
  if (a.num_positions == 0 || a.dim == 0) return nullptr;
  const LaunchShape shape = launch_shape(a.num_positions, config);
  return dispatch(a.grad_dtype, a.index_dtype, config,
                  [&](auto value_tag, auto index_tag, auto vec_tag, auto unroll_tag) {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    constexpr int kVecBytes = decltype(vec_tag)::value;
    constexpr int kUnroll = decltype(unroll_tag)::value;
    const BackwardParams<T, I> p{static_cast<const T*>(a.grad_output),
                                 a.dim,
                                 a.num_rows,
                                 static_cast<const I*>(a.sorted_rows),
                                 a.sorted_bags,
                                 a.sorted_scales,
                                 a.num_positions,
                                 static_cast<T*>(a.grad_weight),
                                 shape.grid};
    embedding_bag_backward_kernel<T, I, kVecBytes, kUnroll>
        <<<shape.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& a, const EmbeddingBagConfig& config,
    void* stream) {
  if (const char* error = check_config(config, a.weight_dtype, a.dim, a.weight_row_stride,
                                       {a.grad_output, a.weight}))
    return error;
  if (a.num_rows < 0 || a.num_indices < 0 || a.num_bags < 0)
    return "embedding_bag (hip): negative size";
  // No indices: nothing to write (the output is empty). dim == 0: every dot is 0, which the
  // caller's zeroing already holds.
  if (a.num_indices == 0 || a.num_bags == 0 || a.dim == 0) return nullptr;
  const LaunchShape shape = launch_shape(a.num_bags, config);
  return dispatch(a.weight_dtype, a.index_dtype, config,
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
                                                 a.padding_idx,
                                                 static_cast<T*>(a.grad_per_sample_weights),
                                                 shape.grid};
    embedding_bag_per_sample_weights_backward_kernel<T, I, kVecBytes, kUnroll>
        <<<shape.blocks, config.block_threads, 0, static_cast<hipStream_t>(stream)>>>(p);
    return hip_compat::launch_error();
  });
}

}  // namespace mymetaops
