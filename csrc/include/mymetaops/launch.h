// The host half of the embedding_bag launchers (mymetaops/embedding_bag.h), shared by
// cuda/embedding_bag.cu and hip/embedding_bag.hip so that both vendors enforce one contract:
// argument and config checks, grid sizing, and the dispatch of run-time dtypes and knobs to kernel
// template instances. Torch-free and vendor-free: what differs per vendor comes in as parameters
// (the warp/wavefront size, the grid limits, a traits type naming the element types). Host code
// for nvcc and clang -x hip, C++17 or later.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "mymetaops/embedding_bag.h"

namespace mymetaops::launch {

// The largest block a config may ask for; kernels are compiled to fit it.
constexpr int kMaxBlockThreads = 1024;

// Bytes per element of `dtype`; 0 for a value that is no DType.
constexpr int element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

constexpr bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}
constexpr bool is_index(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

inline bool aligned(const void* ptr, int bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0;
}

// The knobs on their own, for elements of elt_bytes on a vendor with warp_size lanes per
// warp/wavefront.
inline LaunchError check_config(const EmbeddingBagConfig& c, int elt_bytes, int warp_size) {
  if (c.vec_bytes != 2 && c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16)
    return "embedding_bag: config.vec_bytes must be 2, 4, 8 or 16";
  if (c.vec_bytes < elt_bytes)
    return "embedding_bag: config.vec_bytes is smaller than the element size";
  if (c.lanes_per_bag < 1 || c.lanes_per_bag > warp_size ||
      (c.lanes_per_bag & (c.lanes_per_bag - 1)) != 0)
    return "embedding_bag: config.lanes_per_bag must be a power of two up to the warp size";
  if (c.unroll != 1 && c.unroll != 2 && c.unroll != 4 && c.unroll != 8)
    return "embedding_bag: config.unroll must be 1, 2, 4 or 8";
  // A multiple of the warp size is one of every valid lanes_per_bag too: groups never straddle
  // warps.
  if (c.block_threads < warp_size || c.block_threads > kMaxBlockThreads ||
      c.block_threads % warp_size != 0)
    return "embedding_bag: config.block_threads must be a multiple of the warp size, at most 1024";
  return nullptr;
}

// Rows of `dim` elements of elt_bytes, `row_stride` elements apart, read vec_bytes at a time from
// the row-addressed base pointers.
inline LaunchError check_rows(int64_t dim, int64_t row_stride, int elt_bytes, int vec_bytes,
                              std::initializer_list<const void*> bases) {
  if (dim < 0 || row_stride < 0) return "embedding_bag: negative dim or row stride";
  // The kernels number a row's vectors in 32 bits, with room for chunk * lanes + lane.
  if (dim > (int64_t{1} << 30) * vec_bytes / elt_bytes) return "embedding_bag: dim too large";
  if (dim * elt_bytes % vec_bytes != 0)
    return "embedding_bag: dim * element size is not a multiple of config.vec_bytes";
  if (row_stride > INT64_MAX / 8) return "embedding_bag: row stride too large";
  if (row_stride * elt_bytes % vec_bytes != 0)
    return "embedding_bag: the row stride in bytes is not a multiple of config.vec_bytes";
  for (const void* base : bases) {
    if (!aligned(base, vec_bytes))
      return "embedding_bag: a row pointer is not aligned to config.vec_bytes";
  }
  return nullptr;
}

inline LaunchError check_offsets_form(int64_t num_bags, int64_t num_offsets) {
  if (num_offsets != num_bags && num_offsets != num_bags + 1)
    return "embedding_bag: num_offsets must be num_bags or num_bags + 1";
  return nullptr;
}

// Whether a launch has anything to write. The checks below test the pointers a launch reads or
// writes only when it has.
inline bool has_work(const EmbeddingBagForwardArgs& a) { return a.num_bags > 0 && a.dim > 0; }
inline bool has_work(const EmbeddingBagBackwardArgs& a) {
  return a.num_positions > 0 && a.dim > 0;
}
// dim == 0: every dot product is 0, which the caller's zeroed output already holds.
inline bool has_work(const EmbeddingBagPerSampleWeightsBackwardArgs& a) {
  return a.num_indices > 0 && a.num_bags > 0 && a.dim > 0;
}
inline bool has_work(const EmbeddingBagBackwardPlanArgs& a) { return a.num_indices > 0; }

// Whether the plan counts each bag's non-padding entries into bag_scratch first (mean with
// padding); without padding a bag's count is its length.
inline bool counts_bags(const EmbeddingBagBackwardPlanArgs& a) {
  return a.mode == PoolMode::kMean && a.padding_idx >= 0 && a.num_bags > 0;
}

inline LaunchError check(const EmbeddingBagForwardArgs& a, const EmbeddingBagConfig& c,
                         int warp_size) {
  if (!is_float(a.weight_dtype))
    return "embedding_bag: the table must be float32, float16 or bfloat16";
  if (!is_index(a.index_dtype)) return "embedding_bag: indices must be int32 or int64";
  const int elt = element_bytes(a.weight_dtype);
  if (LaunchError e = check_config(c, elt, warp_size)) return e;
  if (LaunchError e = check_rows(a.dim, a.weight_row_stride, elt, c.vec_bytes, {a.weight, a.out}))
    return e;
  if (a.num_rows < 0 || a.num_indices < 0 || a.num_bags < 0) return "embedding_bag: negative size";
  if (LaunchError e = check_offsets_form(a.num_bags, a.num_offsets)) return e;
  if (a.mode != PoolMode::kSum && a.mode != PoolMode::kMean)
    return "embedding_bag: mode must be sum or mean";
  if (a.per_sample_weights != nullptr && a.mode != PoolMode::kSum)
    return "embedding_bag: per_sample_weights requires sum mode";
  if (!has_work(a)) return nullptr;
  if (a.offsets == nullptr || a.out == nullptr) return "embedding_bag: null offsets or out";
  if (a.num_indices > 0 && a.indices == nullptr) return "embedding_bag: null indices";
  if (a.num_indices > 0 && a.num_rows > 0 && a.weight == nullptr)
    return "embedding_bag: null weight";
  return nullptr;
}

inline LaunchError check(const EmbeddingBagBackwardArgs& a, const EmbeddingBagConfig& c,
                         int warp_size) {
  if (!is_float(a.grad_dtype))
    return "embedding_bag_backward: grad must be float32, float16 or bfloat16";
  if (!is_index(a.index_dtype))
    return "embedding_bag_backward: sorted rows must be int32 or int64";
  const int elt = element_bytes(a.grad_dtype);
  if (LaunchError e = check_config(c, elt, warp_size)) return e;
  if (LaunchError e = check_rows(a.dim, a.dim, elt, c.vec_bytes, {a.grad_output, a.grad_weight}))
    return e;
  if (a.num_rows < 0 || a.num_bags < 0 || a.num_positions < 0)
    return "embedding_bag_backward: negative size";
  if (!has_work(a)) return nullptr;
  if (a.sorted_rows == nullptr || a.sorted_bags == nullptr)
    return "embedding_bag_backward: null sorted rows or bags";
  // Only rows of the table are written, and only bags in [0, num_bags) are read.
  if (a.num_rows > 0 && a.grad_weight == nullptr) return "embedding_bag_backward: null grad_weight";
  if (a.num_rows > 0 && a.num_bags > 0 && a.grad_output == nullptr)
    return "embedding_bag_backward: null grad_output";
  return nullptr;
}

inline LaunchError check(const EmbeddingBagPerSampleWeightsBackwardArgs& a,
                         const EmbeddingBagConfig& c, int warp_size) {
  if (!is_float(a.weight_dtype))
    return "embedding_bag_per_sample_weights_backward: the table must be float32, float16 or "
           "bfloat16";
  if (!is_index(a.index_dtype))
    return "embedding_bag_per_sample_weights_backward: indices must be int32 or int64";
  const int elt = element_bytes(a.weight_dtype);
  if (LaunchError e = check_config(c, elt, warp_size)) return e;
  if (LaunchError e =
          check_rows(a.dim, a.weight_row_stride, elt, c.vec_bytes, {a.weight, a.grad_output}))
    return e;
  if (a.num_rows < 0 || a.num_indices < 0 || a.num_bags < 0)
    return "embedding_bag_per_sample_weights_backward: negative size";
  if (LaunchError e = check_offsets_form(a.num_bags, a.num_offsets)) return e;
  if (!has_work(a)) return nullptr;
  if (a.indices == nullptr || a.offsets == nullptr || a.grad_output == nullptr ||
      a.grad_per_sample_weights == nullptr)
    return "embedding_bag_per_sample_weights_backward: null indices, offsets, grad_output or "
           "output";
  if (a.num_rows > 0 && a.weight == nullptr)
    return "embedding_bag_per_sample_weights_backward: null weight";
  return nullptr;
}

inline LaunchError check(const EmbeddingBagBackwardPlanArgs& a) {
  if (!is_index(a.index_dtype)) return "embedding_bag_backward: indices must be int32 or int64";
  if (a.row_split < 1 || (a.row_split & (a.row_split - 1)) != 0)
    return "embedding_bag_backward: row_split must be a power of two";
  if (!is_index(a.key_dtype)) return "embedding_bag_backward: keys must be int32 or int64";
  if (a.num_rows < 0 || a.num_indices < 0 || a.num_bags < 0)
    return "embedding_bag_backward: negative size";
  // The key num_rows * row_split marks a lookup to skip, so it must fit too.
  if (a.num_rows > INT64_MAX / a.row_split)
    return "embedding_bag_backward: num_rows * row_split does not fit in int64";
  if (a.key_dtype == DType::kInt32 && a.num_rows * a.row_split > INT32_MAX)
    return "embedding_bag_backward: int32 keys for num_rows * row_split of 2^31 or more";
  if (LaunchError e = check_offsets_form(a.num_bags, a.num_offsets)) return e;
  if (a.mode != PoolMode::kSum && a.mode != PoolMode::kMean)
    return "embedding_bag_backward: mode must be sum or mean";
  const bool weighted = a.per_sample_weights != nullptr;
  if (weighted && a.mode != PoolMode::kSum)
    return "embedding_bag_backward: per_sample_weights requires sum mode";
  if (weighted && !is_float(a.weight_dtype))
    return "embedding_bag_backward: per_sample_weights must be float32, float16 or bfloat16";
  if (!has_work(a)) return nullptr;
  if (a.indices == nullptr || a.keys == nullptr || a.bags == nullptr)
    return "embedding_bag_backward: null indices, keys or bags";
  if (a.num_bags > 0 && a.offsets == nullptr) return "embedding_bag_backward: null offsets";
  if ((weighted || a.mode == PoolMode::kMean) && a.scales == nullptr)
    return "embedding_bag_backward: null scales (needed with per_sample_weights or mean)";
  if (counts_bags(a) && a.bag_scratch == nullptr)
    return "embedding_bag_backward: null bag_scratch (needed for mean with padding)";
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Grid sizing.

// A vendor's limits on a 1-D grid.
struct GridLimits {
  int64_t max_blocks;   // blocks along x
  int64_t max_threads;  // blocks * threads per block
};

// A launch: `blocks` blocks of groups of 2^lanes_log2 lanes. The groups_per_item adjacent groups
// of one work item are numbered item-major; the group numbered g * groups_per_item + k works on
// items g, g + items_per_pass, g + 2 * items_per_pass, ... (groups with g >= items_per_pass have
// none), so a grid capped at the vendor's limits still covers every item.
struct Grid {
  uint32_t blocks;
  int64_t items_per_pass;
  int lanes_log2;
};

// For items >= 1 and the groups of one item fitting one grid (CUDA splits a row over at most 2^30
// threads: check_rows; hip/ uses one group per item). Grids hold fewer than 2^32 groups, so
// kernels may number the groups of a grid in 32 bits.
inline Grid grid_for(int64_t items, int64_t groups_per_item, int lanes, int block_threads,
                     const GridLimits& limits) {
  const int64_t groups_per_block = block_threads / lanes;
  int64_t max_blocks = limits.max_threads / block_threads;
  if (limits.max_blocks < max_blocks) max_blocks = limits.max_blocks;
  if (UINT32_MAX / groups_per_block < max_blocks) max_blocks = UINT32_MAX / groups_per_block;
  const int64_t max_items = max_blocks * groups_per_block / groups_per_item;
  const int64_t pass = items < max_items ? items : max_items;
  const int64_t blocks = (pass * groups_per_item + groups_per_block - 1) / groups_per_block;
  int lanes_log2 = 0;
  while ((1 << lanes_log2) < lanes) ++lanes_log2;
  return {static_cast<uint32_t>(blocks), blocks * groups_per_block / groups_per_item, lanes_log2};
}

// ---------------------------------------------------------------------------------------------
// Dispatch: the one place where run-time dtypes and knobs become template arguments. `Traits`
// names the vendor's element types: Traits::Float32, Traits::Float16, Traits::BFloat16.

template <typename T>
struct TypeTag {
  using type = T;
};
template <int N>
using IntTag = std::integral_constant<int, N>;

template <typename Traits, typename F>
LaunchError dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(TypeTag<typename Traits::Float32>{});
    case DType::kFloat16:
      return f(TypeTag<typename Traits::Float16>{});
    case DType::kBFloat16:
      return f(TypeTag<typename Traits::BFloat16>{});
    default:
      return "embedding_bag: values must be float32, float16 or bfloat16";
  }
}

template <typename F>
LaunchError dispatch_index(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kInt32:
      return f(TypeTag<int32_t>{});
    case DType::kInt64:
      return f(TypeTag<int64_t>{});
    default:
      return "embedding_bag: indices must be int32 or int64";
  }
}

// f(IntTag<value>) for the run-time value among kChoices.
template <int... kChoices, typename F>
LaunchError dispatch_int(int value, F&& f) {
  LaunchError result = "embedding_bag: unsupported config value";
  (void)((value == kChoices ? (result = f(IntTag<kChoices>{}), true) : false) || ...);
  return result;
}

// f(TypeTag<T>, TypeTag<IndexT>, IntTag<vec_bytes>, IntTag<unroll>) for a launch's dtypes and
// config. vec_bytes below the element size is rejected by check_config, so those instances are
// never made.
template <typename Traits, typename F>
LaunchError dispatch_kernel(DType value_dtype, DType index_dtype, const EmbeddingBagConfig& c,
                            F&& f) {
  return dispatch_float<Traits>(value_dtype, [&](auto t) {
    return dispatch_index(index_dtype, [&](auto i) {
      return dispatch_int<2, 4, 8, 16>(c.vec_bytes, [&](auto vec) {
        return dispatch_int<1, 2, 4, 8>(c.unroll, [&](auto unroll) -> LaunchError {
          constexpr int kVecBytes = decltype(vec)::value;
          constexpr int kEltBytes = sizeof(typename decltype(t)::type);
          if constexpr (kVecBytes < kEltBytes)
            return "embedding_bag: config.vec_bytes is smaller than the element size";
          else
            return f(t, i, vec, unroll);
        });
      });
    });
  });
}

}  // namespace mymetaops::launch
