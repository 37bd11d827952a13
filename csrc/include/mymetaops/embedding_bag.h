// Launchers for embedding_bag, implemented once per vendor: cuda/embedding_bag.cu and
// hip/embedding_bag.hip define the same symbols; a build links exactly one of them.
//
// Conventions (the torch glue in csrc/embedding_bag/ guarantees them before calling):
//  * offsets has num_bags + 1 entries (FBGEMM / include_last_offset form); bag b is
//    indices[offsets[b] .. offsets[b+1]). indices and offsets share index_dtype (int32 or int64).
//  * Kernels never dereference a row outside [0, num_rows): an out-of-range index makes its bag NaN
//    (forward) or is skipped (backward), so bad input can never crash the process. Offsets are
//    clamped to [0, num_indices] and an end below its start is an empty bag.
//  * Entries equal to padding_idx (>= 0; -1 = none) are skipped and do not count for the mean.
//  * Accumulation is fp32; outputs are written in the table's dtype.
//  * Vector width: every row access is vec_bytes wide; the glue guarantees that dim * elt_size,
//    the row strides (in bytes) and the base pointers are multiples of vec_bytes.
#pragma once
#include <cstdint>

#include "mymetaops/types.h"

namespace mymetaops {

enum class PoolMode : int32_t { kSum = 0, kMean = 1 };

// Kernel shape, chosen by mymetaops.model (Python) and passed through unchanged.
struct EmbeddingBagConfig {
  int32_t vec_bytes;      // bytes per row access per lane: 16, 8, 4 or 2 (>= element size)
  int32_t lanes_per_bag;  // lanes cooperating on one bag: power of two, <= the warp/wavefront size
  int32_t unroll;         // rows of one bag whose loads each lane keeps in flight: 1, 2, 4 or 8
  int32_t block_threads;  // threads per block: multiple of the warp/wavefront size, <= 1024
};

struct EmbeddingBagForwardArgs {
  const void* weight;           // [num_rows, dim], row stride weight_row_stride elements
  DType weight_dtype;           // kFloat32, kFloat16 or kBFloat16
  int64_t num_rows;
  int64_t dim;
  int64_t weight_row_stride;
  const void* indices;          // [num_indices]
  const void* offsets;          // [num_bags + 1]
  DType index_dtype;            // kInt32 or kInt64
  int64_t num_indices;
  int64_t num_bags;
  const void* per_sample_weights;  // [num_indices] in weight_dtype, or nullptr (sum mode only)
  int64_t padding_idx;          // -1 for none
  PoolMode mode;
  void* out;                    // [num_bags, dim] contiguous, weight_dtype
};

// out[b] = pool over the bag of weight[indices[i]] (* per_sample_weights[i]).
LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& args,
                                         const EmbeddingBagConfig& config, void* stream);

struct EmbeddingBagBackwardArgs {
  const void* grad_output;      // [num_bags, dim] contiguous, grad_dtype
  DType grad_dtype;             // kFloat32, kFloat16 or kBFloat16
  int64_t dim;
  int64_t num_rows;
  // The backward plan (built with torch ops in mymetaops/ops/embedding_bag.py), sorted by row:
  const void* sorted_rows;      // [num_positions] row of each lookup, ascending; rows >= num_rows
                                //   (padding / positions outside every bag) are sorted last, skipped
  DType index_dtype;            // dtype of sorted_rows: kInt32 or kInt64
  const int64_t* sorted_bags;   // [num_positions] bag of each lookup, in the same order
  const float* sorted_scales;   // [num_positions] factor of each lookup (psw, 1/len for mean), or
                                //   nullptr for all ones
  int64_t num_positions;
  void* grad_weight;            // [num_rows, dim] contiguous, grad_dtype, ZEROED by the caller;
                                //   the kernel writes every row that occurs in sorted_rows
};

// grad_weight[r] = sum over lookups p with row r of sorted_scales[p] * grad_output[sorted_bags[p]].
// Deterministic: one group of lanes owns each distinct row and sums its run in sorted order.
LaunchError launch_embedding_bag_backward(const EmbeddingBagBackwardArgs& args,
                                          const EmbeddingBagConfig& config, void* stream);

struct EmbeddingBagPerSampleWeightsBackwardArgs {
  const void* grad_output;      // [num_bags, dim] contiguous, weight_dtype
  const void* weight;           // [num_rows, dim], row stride weight_row_stride elements
  DType weight_dtype;
  int64_t num_rows;
  int64_t dim;
  int64_t weight_row_stride;
  const void* indices;
  const void* offsets;          // [num_bags + 1]
  DType index_dtype;
  int64_t num_indices;
  int64_t num_bags;
  int64_t padding_idx;
  void* grad_per_sample_weights;  // [num_indices], weight_dtype, ZEROED by the caller; the kernel
                                  //   writes dot(grad_output[bag], weight[row]) for every position
                                  //   inside a bag (0 for padding and out-of-range rows)
};

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& args, const EmbeddingBagConfig& config,
    void* stream);

}  // namespace mymetaops
