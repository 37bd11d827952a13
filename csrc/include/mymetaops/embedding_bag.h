// Launchers for embedding_bag, implemented once per vendor: cuda/embedding_bag.cu and
// hip/embedding_bag.hip define the same symbols; a build links exactly one of them.
//
// Conventions (the torch glue in csrc/embedding_bag/ guarantees them before calling):
//  * offsets has num_offsets entries: num_bags + 1 (FBGEMM / include_last_offset form) or num_bags
//    (torch's default form, the last bag ending at num_indices). Bag b is
//    indices[offsets[b] .. end_b) with end_b = offsets[b + 1] if b + 1 < num_offsets, else
//    num_indices. indices and offsets share index_dtype (int32 or int64).
//  * Kernels never dereference a row outside [0, num_rows): an out-of-range index makes its bag NaN
//    (forward) or is skipped (backward), so bad input can never crash the process. Offsets are
//    clamped to [0, num_indices] and an end below its start is an empty bag.
//  * Every bad value met is also recorded in `errors` (a DeviceErrorRecord, mymetaops/errors.h;
//    first one wins; nullptr = do not record): an index outside [0, num_rows) that is not padding,
//    inside a bag; offsets[b] < 0; offsets[b] < offsets[b - 1]; offsets[b] > num_indices.
//  * Entries equal to padding_idx (>= 0; -1 = none) are skipped and do not count for the mean.
//  * Accumulation is fp32; outputs are written in the table's dtype.
//  * Vector width: every row access is vec_bytes wide; the glue guarantees that dim * elt_size,
//    the row strides (in bytes) and the base pointers are multiples of vec_bytes.
#pragma once
#include <cstdint>

#include "mymetaops/errors.h"
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
  int64_t num_offsets;          // num_bags + 1 or num_bags (see above)
  const void* per_sample_weights;  // [num_indices] in weight_dtype, or nullptr (sum mode only)
  int64_t padding_idx;          // -1 for none
  PoolMode mode;
  void* out;                    // [num_bags, dim] contiguous, weight_dtype
  int64_t* errors;              // DeviceErrorRecord (ErrorOp::kEmbeddingBag), or nullptr
};

// out[b] = pool over the bag of weight[indices[i]] (* per_sample_weights[i]).
LaunchError launch_embedding_bag_forward(const EmbeddingBagForwardArgs& args,
                                         const EmbeddingBagConfig& config, void* stream);

// The backward plan: for every position i of indices, the row it adds to (its sort key), its bag
// and its scale. Deterministic and complete: every position is written once, whatever the offsets.
//   keys[i]   = indices[i] * row_split + i % row_split if i lies in a bag, is not padding and is
//               a row of the table; else num_rows * row_split (sorts last; the backward kernel
//               skips it). row_split, a power of two (no division), splits each row's run of lookups into row_split
//               interleaved sub-runs, so that a row looked up very often (a small table) is summed
//               by row_split groups, not walked by one: the backward kernel then writes a
//               [num_rows * row_split, dim] table of partial sums, which the caller reduces.
//               key_dtype: kInt32 when num_rows * row_split < 2^31 - 1 (half the radix-sort
//               passes), else kInt64.
//   bags[i]   = the bag holding position i (the last b with clamped offsets[b] <= i; 0 if none)
//   scales[i] = per_sample_weights[i] (sum with weights), 1 / count(bag) (mean; count = the
//               bag's non-padding entries, as in the forward), or 0 outside every bag; scales is
//               nullptr for sum without weights.
// Index and offset values are checked and recorded in `errors` as in the forward.
struct EmbeddingBagBackwardPlanArgs {
  const void* indices;          // [num_indices]
  const void* offsets;          // [num_offsets]
  DType index_dtype;            // kInt32 or kInt64
  int64_t num_indices;
  int64_t num_bags;
  int64_t num_offsets;
  int64_t num_rows;
  int64_t row_split;            // a power of two >= 1, see keys above
  int64_t padding_idx;          // -1 for none
  PoolMode mode;
  const void* per_sample_weights;  // [num_indices] in weight_dtype, or nullptr
  DType weight_dtype;
  void* keys;                   // [num_indices], key_dtype
  DType key_dtype;
  int64_t* bags;                // [num_indices]
  float* scales;                // [num_indices], or nullptr (sum without weights)
  float* bag_scratch;           // [num_bags], mean mode only (may be used for 1 / count per bag)
  int64_t* errors;              // DeviceErrorRecord (ErrorOp::kEmbeddingBagBackward), or nullptr
};

LaunchError launch_embedding_bag_backward_plan(const EmbeddingBagBackwardPlanArgs& args,
                                               void* stream);

struct EmbeddingBagBackwardArgs {
  const void* grad_output;      // [num_bags, dim] contiguous, grad_dtype
  DType grad_dtype;             // kFloat32, kFloat16 or kBFloat16
  int64_t dim;
  int64_t num_rows;
  int64_t num_bags;             // sorted bags outside [0, num_bags) are skipped, never read
  // The backward plan above, sorted by key (stable):
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
  int64_t num_offsets;
  int64_t padding_idx;
  int64_t* errors;              // DeviceErrorRecord (ErrorOp::kEmbeddingBagPerSampleWeightsBackward)
  void* grad_per_sample_weights;  // [num_indices], weight_dtype, ZEROED by the caller; the kernel
                                  //   writes dot(grad_output[bag], weight[row]) for every position
                                  //   inside a bag (0 for padding and out-of-range rows)
};

LaunchError launch_embedding_bag_per_sample_weights_backward(
    const EmbeddingBagPerSampleWeightsBackwardArgs& args, const EmbeddingBagConfig& config,
    void* stream);

}  // namespace mymetaops
