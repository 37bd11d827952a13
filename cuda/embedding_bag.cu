// CUDA kernels and launchers for embedding_bag (semantics: csrc/include/mymetaops/embedding_bag.h).
//
// A group of `lanes_per_bag` lanes owns one work item (a bag, or a sorted position) and one column
// chunk of it: lane l of chunk c owns the row vector c * lanes + l, a vector being VEC bytes, so a
// row access is one coalesced VEC-wide load per lane. The work is a random row gather, so speed
// comes from memory-level parallelism: each lane issues the loads of UNROLL rows before it uses
// any of them (the rows of a bag are independent).
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

namespace mymetaops {
namespace {

using cuda::get_elt;
using cuda::launch_status;
using cuda::load_cached;
using cuda::load_bits;
using cuda::load_streaming;
using cuda::RawVec;
using cuda::set_bits;
using cuda::set_elt;
using cuda::store_vec;

// block_threads may be anything up to 1024 at run time, so every kernel is compiled to launch
// with 1024 threads: at most 64 registers, and scripts/check_cuda.sh rejects any spill.
constexpr int kMaxBlockThreads = 1024;
constexpr int kWarpSize = 32;

// Rows in flight of the per-sample-weights backward when dim needs several passes of the group
// and vectors are 16 bytes (see psw_bag).
constexpr int kPswMaxUnrollVec16 = 4;

// Finds the calling lane's work: item (bag or position) and the row vector v it owns. Groups are
// numbered item-major, chunk-minor, so the chunks of one item sit in adjacent groups (usually one
// block) and share the item's indices through L1. False if the lane has nothing to do.
__device__ __forceinline__ bool locate(int lanes_log2, int num_chunks, int64_t num_items,
                                       int dim_vecs, int64_t& item, int& v) {
  // 64-bit: blocks * threads can exceed 2^31.
  const int64_t group = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2;
  int chunk = 0;
  item = group;
  if (num_chunks > 1) {
    // 32-bit division (inline; a 64-bit one is a call that spills): grid_for keeps split grids
    // below 2^32 groups.
    const uint32_t g = static_cast<uint32_t>(group);
    const uint32_t it = g / static_cast<uint32_t>(num_chunks);
    item = it;
    chunk = static_cast<int>(g - it * static_cast<uint32_t>(num_chunks));
  }
  v = (chunk << lanes_log2) + static_cast<int>(threadIdx.x & ((1u << lanes_log2) - 1));
  return item < num_items && v < dim_vecs;
}

// Bag b spans [offsets[b], offsets[b+1]) clamped to [0, num_indices]; end < start is empty.
template <typename IndexT>
__device__ __forceinline__ void bag_bounds(const void* offsets, int64_t bag, int64_t num_indices,
                                           int64_t& start, int64_t& end) {
  const auto* o = static_cast<const IndexT*>(offsets);
  const int64_t lo = static_cast<int64_t>(__ldg(o + bag));
  const int64_t hi = static_cast<int64_t>(__ldg(o + bag + 1));
  start = min(max(lo, int64_t{0}), num_indices);
  end = max(min(hi, num_indices), start);
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
  const void* per_sample_weights;
  int64_t padding_idx;
  bool mean;
  char* out;
  int64_t out_row_bytes;
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
  int64_t bag;
  int v;
  if (!locate(lanes_log2, p.num_chunks, p.num_bags, p.dim_vecs, bag, v)) return;
  int64_t start, end;
  bag_bounds<IndexT>(p.offsets, bag, p.num_indices, start, end);
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);

  const char* column = p.weight + static_cast<int64_t>(v) * VEC;
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
}

struct BackwardParams {
  const char* grad_output;
  int64_t row_bytes;  // dim * element size, the row stride of grad_output and grad_weight
  int dim_vecs;
  int num_chunks;
  int64_t num_rows;
  const void* sorted_rows;
  const int64_t* sorted_bags;
  const float* sorted_scales;
  int64_t num_positions;
  char* grad_weight;
};

template <typename T, typename RowT, int VEC, int UNROLL>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    embedding_bag_backward_kernel(const BackwardParams p, int lanes_log2) {
  constexpr int kElems = VEC / sizeof(T);
  int64_t first;
  int v;
  if (!locate(lanes_log2, p.num_chunks, p.num_positions, p.dim_vecs, first, v)) return;
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
  // the positions still in the run.
#pragma unroll 1
  for (int64_t q = first;; q += UNROLL) {
    const int64_t left = p.num_positions - q;
    const int n = left < UNROLL ? static_cast<int>(left) : UNROLL;
    const char* src[UNROLL];
    bool take[UNROLL];
    float scale[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool valid = u < n;
      take[u] = valid && __ldg(rows + q + u) == row;
      const int64_t bag = valid ? __ldg(p.sorted_bags + q + u) : 0;
      const float s = valid && p.sorted_scales != nullptr ? __ldg(p.sorted_scales + q + u) : 1.f;
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
    if (!take[UNROLL - 1]) break;  // sorted: the run ended inside this step
  }
  RawVec<VEC> result;
#pragma unroll
  for (int e = 0; e < kElems; ++e) set_elt<T>(result, e, acc[e]);
  const int64_t col = static_cast<int64_t>(v) * VEC;
  store_vec<VEC>(p.grad_weight + static_cast<int64_t>(row) * p.row_bytes + col, result);
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
  int64_t padding_idx;
  void* out;
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
__device__ __forceinline__ void psw_bag(const PerSampleWeightsBackwardParams& p, int64_t start,
                                        int64_t end, const char* grad_row, int lanes, int lane,
                                        unsigned group_mask) {
  constexpr int kRows = !kOneChunk && VEC == 16 && UNROLL > kPswMaxUnrollVec16
                            ? kPswMaxUnrollVec16
                            : UNROLL;
  const auto* indices = static_cast<const IndexT*>(p.indices);
  auto* out = static_cast<T*>(p.out);
  const RowCheck<IndexT> check(p.num_rows, p.padding_idx);
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
      take[u] = in_bag && !check.is_pad(row) && check.in_range(row);
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
  const int64_t bag =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2;
  if (bag >= p.num_bags) return;  // whole groups exit together
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  // The group's lanes within its warp (groups are aligned to their size).
  const int warp_lane = threadIdx.x & (kWarpSize - 1);
  const unsigned group_mask =
      lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1u) << (warp_lane & ~(lanes - 1));
  int64_t start, end;
  bag_bounds<IndexT>(p.offsets, bag, p.num_indices, start, end);
  const char* grad_row = p.grad_output + bag * p.grad_row_bytes;
  if (p.dim_vecs <= lanes) {
    psw_bag<T, IndexT, VEC, UNROLL, true>(p, start, end, grad_row, lanes, lane, group_mask);
  } else {
    psw_bag<T, IndexT, VEC, UNROLL, false>(p, start, end, grad_row, lanes, lane, group_mask);
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

int elt_size(DType d) {
  switch (d) {
    case DType::kFloat32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    default: return 0;
  }
}

bool aligned(const void* ptr, int bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

int log2_int(int x) {
  int r = 0;
  while ((1 << r) < x) ++r;
  return r;
}

// The knobs that do not depend on the tensors.
LaunchError check_config(const EmbeddingBagConfig& c, int elt_bytes) {
  if (c.vec_bytes != 2 && c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16)
    return "embedding_bag: vec_bytes must be 2, 4, 8 or 16";
  if (c.vec_bytes < elt_bytes) return "embedding_bag: vec_bytes is smaller than the element size";
  if (c.lanes_per_bag <= 0 || c.lanes_per_bag > kWarpSize ||
      (c.lanes_per_bag & (c.lanes_per_bag - 1)) != 0)
    return "embedding_bag: lanes_per_bag must be a power of two in [1, 32]";
  if (c.unroll != 1 && c.unroll != 2 && c.unroll != 4 && c.unroll != 8)
    return "embedding_bag: unroll must be 1, 2, 4 or 8";
  // A multiple of 32 is also a multiple of every valid lanes_per_bag.
  if (c.block_threads <= 0 || c.block_threads > kMaxBlockThreads ||
      c.block_threads % kWarpSize != 0)
    return "embedding_bag: block_threads must be a multiple of 32 in [32, 1024]";
  return nullptr;
}

// Whole vectors per row, and a vector count that fits the kernels' 32-bit column index (with
// room for chunk * lanes + lane).
LaunchError check_dim(int64_t dim, int elt_bytes, int vec_bytes) {
  if (dim < 0) return "embedding_bag: negative dim";
  if (dim * elt_bytes % vec_bytes != 0)
    return "embedding_bag: dim * element size is not a multiple of vec_bytes";
  if (dim * elt_bytes / vec_bytes > (1 << 30)) return "embedding_bag: dim too large";
  return nullptr;
}

// 1-D grid of items * num_chunks groups (x holds up to 2^31 - 1 blocks).
LaunchError grid_for(int64_t items, int num_chunks, const EmbeddingBagConfig& c, dim3& grid) {
  const int64_t groups = items * num_chunks;
  if (num_chunks > 1 && groups > 0xffffffffLL)
    return "embedding_bag: more than 2^32 (item, column chunk) groups; use more lanes_per_bag";
  const int64_t groups_per_block = c.block_threads / c.lanes_per_bag;
  const int64_t blocks = (groups + groups_per_block - 1) / groups_per_block;
  if (blocks > 0x7fffffff) return "embedding_bag: too many groups for one launch";
  grid = dim3(static_cast<unsigned>(blocks));
  return nullptr;
}

template <typename T>
struct Tag {
  using type = T;
};

template <typename F>
LaunchError dispatch_float(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32: return f(Tag<float>{});
    case DType::kFloat16: return f(Tag<__half>{});
    case DType::kBFloat16: return f(Tag<__nv_bfloat16>{});
    default: return "embedding_bag: table dtype must be float32, float16 or bfloat16";
  }
}

template <typename F>
LaunchError dispatch_index(DType d, F&& f) {
  switch (d) {
    case DType::kInt32: return f(Tag<int32_t>{});
    case DType::kInt64: return f(Tag<int64_t>{});
    default: return "embedding_bag: index dtype must be int32 or int64";
  }
}

// Calls f(vec, unroll) with both as compile-time constants. vec_bytes below the element size is
// rejected by check_config, so those kernels are never instantiated.
template <typename T, typename F>
LaunchError dispatch_vec_unroll(const EmbeddingBagConfig& c, F&& f) {
  auto with_unroll = [&](auto vec) -> LaunchError {
    constexpr int kVec = decltype(vec)::value;
    if constexpr (kVec < static_cast<int>(sizeof(T))) {
      return "embedding_bag: vec_bytes is smaller than the element size";
    } else {
      switch (c.unroll) {
        case 1: return f(vec, std::integral_constant<int, 1>{});
        case 2: return f(vec, std::integral_constant<int, 2>{});
        case 4: return f(vec, std::integral_constant<int, 4>{});
        case 8: return f(vec, std::integral_constant<int, 8>{});
        default: return "embedding_bag: unroll must be 1, 2, 4 or 8";
      }
    }
  };
  switch (c.vec_bytes) {
    case 2: return with_unroll(std::integral_constant<int, 2>{});
    case 4: return with_unroll(std::integral_constant<int, 4>{});
    case 8: return with_unroll(std::integral_constant<int, 8>{});
    case 16: return with_unroll(std::integral_constant<int, 16>{});
    default: return "embedding_bag: vec_bytes must be 2, 4, 8 or 16";
  }
}

// Calls f(T, IndexT, vec, unroll) (type tags and compile-time constants) for a launch's dtypes and
// config: the one place where run-time choices become template arguments.
template <typename F>
LaunchError dispatch_kernel(DType float_dtype, DType index_dtype, const EmbeddingBagConfig& c,
                            F&& f) {
  return dispatch_float(float_dtype, [&](auto t) {
    return dispatch_index(index_dtype, [&](auto i) {
      return dispatch_vec_unroll<typename decltype(t)::type>(
          c, [&](auto v, auto u) { return f(t, i, v, u); });
    });
  });
}

// Checks shared by the launches that read the table through indices and offsets (the forward and
// the per-sample-weights backward args name these fields alike).
template <typename Args>
LaunchError check_table_lookup(const Args& args, const EmbeddingBagConfig& config, int elt) {
  if (elt == 0) return "embedding_bag: table dtype must be float32, float16 or bfloat16";
  if (LaunchError e = check_config(config, elt)) return e;
  const int vec = config.vec_bytes;
  if (LaunchError e = check_dim(args.dim, elt, vec)) return e;
  if (args.num_rows < 0 || args.num_indices < 0 || args.num_bags < 0 || args.weight_row_stride < 0)
    return "embedding_bag: negative size";
  if (args.weight_row_stride * elt % vec != 0)
    return "embedding_bag: weight row stride is not a multiple of vec_bytes";
  if (!aligned(args.weight, vec)) return "embedding_bag: weight is not aligned to vec_bytes";
  return nullptr;
}

}  // namespace

LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& args,
                                         const EmbeddingBagConfig& config, void* stream) {
  const int elt = elt_size(args.weight_dtype);
  if (LaunchError e = check_table_lookup(args, config, elt)) return e;
  const int vec = config.vec_bytes;
  if (!aligned(args.out, vec)) return "embedding_bag: out is not aligned to vec_bytes";
  if (args.per_sample_weights != nullptr && args.mode != PoolMode::kSum)
    return "embedding_bag: per_sample_weights requires sum mode";
  if (args.num_bags == 0 || args.dim == 0) return nullptr;
  if (args.offsets == nullptr || args.out == nullptr) return "embedding_bag: null offsets/out";

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
  p.per_sample_weights = args.per_sample_weights;
  p.padding_idx = args.padding_idx;
  p.mean = args.mode == PoolMode::kMean;
  p.out = static_cast<char*>(args.out);
  p.out_row_bytes = args.dim * elt;

  dim3 grid;
  if (LaunchError e = grid_for(args.num_bags, p.num_chunks, config, grid)) return e;
  const int lanes_log2 = log2_int(config.lanes_per_bag);
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch_kernel(args.weight_dtype, args.index_dtype, config,
                         [&](auto t, auto i, auto v, auto u) {
    embedding_bag_forward_kernel<typename decltype(t)::type, typename decltype(i)::type,
                                 decltype(v)::value, decltype(u)::value>
        <<<grid, config.block_threads, 0, s>>>(p, lanes_log2);
    return launch_status();
  });
}

LaunchError launch_embedding_bag_backward(const EmbeddingBagBackwardArgs& args,
                                          const EmbeddingBagConfig& config, void* stream) {
  const int elt = elt_size(args.grad_dtype);
  if (elt == 0) return "embedding_bag: grad dtype must be float32, float16 or bfloat16";
  if (LaunchError e = check_config(config, elt)) return e;
  const int vec = config.vec_bytes;
  if (LaunchError e = check_dim(args.dim, elt, vec)) return e;
  if (args.num_rows < 0 || args.num_positions < 0) return "embedding_bag: negative size";
  if (!aligned(args.grad_output, vec) || !aligned(args.grad_weight, vec))
    return "embedding_bag: grad_output/grad_weight are not aligned to vec_bytes";
  if (args.num_positions == 0 || args.dim == 0) return nullptr;
  if (args.sorted_rows == nullptr || args.sorted_bags == nullptr || args.grad_weight == nullptr)
    return "embedding_bag: null sorted_rows/sorted_bags/grad_weight";

  BackwardParams p;
  p.grad_output = static_cast<const char*>(args.grad_output);
  p.row_bytes = args.dim * elt;
  p.dim_vecs = static_cast<int>(args.dim * elt / vec);
  p.num_chunks = (p.dim_vecs + config.lanes_per_bag - 1) / config.lanes_per_bag;
  p.num_rows = args.num_rows;
  p.sorted_rows = args.sorted_rows;
  p.sorted_bags = args.sorted_bags;
  p.sorted_scales = args.sorted_scales;
  p.num_positions = args.num_positions;
  p.grad_weight = static_cast<char*>(args.grad_weight);

  dim3 grid;
  if (LaunchError e = grid_for(args.num_positions, p.num_chunks, config, grid)) return e;
  const int lanes_log2 = log2_int(config.lanes_per_bag);
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch_kernel(args.grad_dtype, args.index_dtype, config,
                         [&](auto t, auto i, auto v, auto u) {
    embedding_bag_backward_kernel<typename decltype(t)::type, typename decltype(i)::type,
                                  decltype(v)::value, decltype(u)::value>
        <<<grid, config.block_threads, 0, s>>>(p, lanes_log2);
    return launch_status();
  });
}

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& args, const EmbeddingBagConfig& config,
    void* stream) {
  const int elt = elt_size(args.weight_dtype);
  if (LaunchError e = check_table_lookup(args, config, elt)) return e;
  const int vec = config.vec_bytes;
  if (!aligned(args.grad_output, vec))
    return "embedding_bag: grad_output is not aligned to vec_bytes";
  // No indices: nothing to write (the output is empty, its pointer may be null). dim == 0: every
  // dot product is 0, which the caller's zeroed output already holds.
  if (args.num_indices == 0 || args.num_bags == 0 || args.dim == 0) return nullptr;
  if (args.offsets == nullptr || args.grad_per_sample_weights == nullptr)
    return "embedding_bag: null offsets/grad_per_sample_weights";

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
  p.padding_idx = args.padding_idx;
  p.out = args.grad_per_sample_weights;

  dim3 grid;
  if (LaunchError e = grid_for(args.num_bags, 1, config, grid)) return e;
  const int lanes_log2 = log2_int(config.lanes_per_bag);
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch_kernel(args.weight_dtype, args.index_dtype, config,
                         [&](auto t, auto i, auto v, auto u) {
    embedding_bag_per_sample_weights_backward_kernel<typename decltype(t)::type,
                                                     typename decltype(i)::type,
                                                     decltype(v)::value, decltype(u)::value>
        <<<grid, config.block_threads, 0, s>>>(p, lanes_log2);
    return launch_status();
  });
}

}  // namespace mymetaops
