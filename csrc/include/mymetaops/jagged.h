// Launchers for the jagged family's memory-bound ops, implemented once per vendor: cuda/jagged.cu
// and hip/jagged.hip define the same symbols; a build links exactly one of them.
//
// One jagged dimension (more run on the CPU): offsets [batch + 1] (int32 or int64) delimit sequence
// b's rows offsets[b] .. offsets[b + 1] of a jagged tensor of `total` rows; its dense form is
// [batch, max_length, dim]. Position (b, j) holds row offsets[b] + j when j < min(length_b,
// max_length); a jagged row at no such position (past max_length, or before offsets[0] / after
// offsets[batch]) has no position.
//
// Conventions (the torch glue in csrc/jagged/jagged_gpu.cpp guarantees them before calling):
//  * A row is `dim` elements (D; 1 for 1-D values) with unit stride. Jagged inputs have a row
//    stride (elements); dense inputs a batch and a row stride (elements). Outputs are contiguous.
//  * Kernels never read or write outside their tensors: offsets are clamped to [0, total] and an
//    end below its start is an empty sequence. Every bad offsets value met is recorded in `errors`
//    (a DeviceErrorRecord, mymetaops/errors.h; first one wins; nullptr = do not record):
//    offsets[b] < 0 (kNegativeOffset), offsets[b] < offsets[b - 1] (kDecreasingOffset),
//    offsets[b] > total (kOffsetPastEnd, bound = total).
//  * Arithmetic is fp32; outputs are written in `dtype`.
//  * vec_bytes: dim * element size, every row stride in bytes and every base pointer are multiples
//    of it.
#pragma once
#include <cstdint>

#include "mymetaops/errors.h"
#include "mymetaops/types.h"

namespace mymetaops {

// Kernel shape, chosen by mymetaops.model (Python) and passed through unchanged.
struct JaggedConfig {
  int32_t vec_bytes;      // bytes per access per lane: 16, 8, 4 or 2 (>= the element size)
  int32_t lanes_per_row;  // lanes cooperating on one row: a power of two <= the warp/wavefront size
  int32_t block_threads;  // threads per block: a multiple of the warp/wavefront size, <= 1024
};

enum class JaggedDenseOp : int32_t {
  kToPaddedDense = 0,  // dense out  = x at each position, padding_value elsewhere
  kToJagged = 1,       // jagged out = the dense input at each row's position, 0 for a row without one
  kAddDense = 2,       // dense out  = x at each position (0 elsewhere) + dense
  kAddJagged = 3,      // jagged out = x + dense at the row's position, x for a row without one
  kMul = 4,            // jagged out = x * dense at the row's position, 0 for a row without one
};

// jagged_to_padded_dense, dense_to_jagged and the jagged/dense elementwise ops. Dense outputs are
// walked by position (batch * max_length rows), jagged outputs by row (each finds its sequence by
// a binary search of offsets).
struct JaggedDenseArgs {
  JaggedDenseOp op;
  DType dtype;                 // kFloat32, kFloat16 or kBFloat16: x, dense and out
  const void* offsets;         // [batch + 1]
  DType offsets_dtype;         // kInt32 or kInt64
  int64_t batch;
  int64_t max_length;          // the dense form's dimension 1
  int64_t total;               // rows of the jagged tensor (x, or out for kToJagged)
  int64_t dim;
  const void* x;               // jagged [total, dim], row stride x_row_stride; nullptr for kToJagged
  int64_t x_row_stride;
  const void* dense;           // [batch, max_length, dim]; nullptr for kToPaddedDense
  int64_t dense_batch_stride;
  int64_t dense_row_stride;
  float padding_value;         // kToPaddedDense
  void* out;                   // [batch, max_length, dim] or [total, dim], contiguous
  int64_t* errors;             // ErrorOp of the calling op, see error_op
  ErrorOp error_op;
};

LaunchError launch_jagged_dense(const JaggedDenseArgs& args, const JaggedConfig& config, void* stream);

// jagged_softmax (grad_output == nullptr) and its backward: per sequence and column, over the
// sequence's first min(length, max_length) rows. out is [total, dim] contiguous: every row outside
// those is written 0.
//   forward:  out = softmax(values)
//   backward: out = values * (grad_output - sum over the rows of grad_output * values), values being
//             the forward's output
struct JaggedSoftmaxArgs {
  DType dtype;
  const void* offsets;         // [batch + 1]
  DType offsets_dtype;
  int64_t batch;
  int64_t max_length;
  int64_t total;
  int64_t dim;
  const void* values;          // [total, dim], row stride values_row_stride
  int64_t values_row_stride;
  const void* grad_output;     // backward: [total, dim], row stride grad_row_stride; else nullptr
  int64_t grad_row_stride;
  void* out;
  int64_t* errors;             // ErrorOp::kJaggedSoftmax
};

LaunchError launch_jagged_softmax(const JaggedSoftmaxArgs& args, const JaggedConfig& config, void* stream);

// jagged_index_select (forward) and its backward. The glue turns lengths into offsets on the device:
// input_offsets [batch + 1] (sequence s = input rows input_offsets[s] .. input_offsets[s + 1]) and
// output_offsets [num_indices + 1] (selected sequence i = output rows output_offsets[i] ..), both
// int64.
//   forward:  out[output_offsets[i] + j] = values[input_offsets[indices[i]] + j]
//   backward: out[input_offsets[indices[i]] + j] += grad[output_offsets[i] + j], into a float32
//             [num_input_rows, dim] accumulator the caller zeroed (atomic adds: a sequence selected
//             twice gets both).
// An index outside [0, batch) is recorded (kIndexOutOfRange, bound = batch) and its rows are left
// untouched (forward: written 0); rows past either end are never touched.
struct JaggedIndexSelectArgs {
  DType dtype;                 // values / grad_output, and out in the forward
  int64_t dim;
  const void* values;          // forward: values [num_input_rows, dim]; backward: grad_output
                               //   [num_output_rows, dim]; row stride values_row_stride
  int64_t values_row_stride;
  const int64_t* input_offsets;
  const int64_t* output_offsets;
  const void* indices;         // [num_indices]
  DType indices_dtype;
  int64_t num_indices;
  int64_t batch;
  int64_t num_input_rows;
  int64_t num_output_rows;
  bool backward;
  void* out;                   // forward: [num_output_rows, dim] in dtype; backward: float32 [num_input_rows, dim]
  int64_t* errors;             // ErrorOp::kJaggedIndexSelect
};

LaunchError launch_jagged_index_select(const JaggedIndexSelectArgs& args, const JaggedConfig& config,
                                       void* stream);

// jagged_dense_bmm and jagged_jagged_bmm: per sequence b, over its first n_b = min(length_b,
// max_length) rows (x_b, y_b: those rows of x and y). fp32 accumulation, one rounding to dtype.
//   kJaggedDense:  out [total, n] contiguous: out rows of b = x_b [n_b, k] . y[b] [k, n]; every
//                  other row of out (past max_length, before offsets[0], from offsets[batch] on) 0.
//   kJaggedJagged: out [batch, m, n] contiguous: out[b] = x_b^T [m, n_b] . y_b [n_b, n]; a
//                  sequence without rows gets 0.
// Native kernels are for bf16 / fp16 with 16-byte aligned operands: base pointers, every non-unit
// stride (bytes) and the contiguous extents (k, m, n) multiples of 16 bytes.
enum class JaggedBmmForm : int32_t { kJaggedDense = 0, kJaggedJagged = 1 };

struct JaggedBmmArgs {
  JaggedBmmForm form;
  DType dtype;                 // kFloat16 or kBFloat16: x, y and out
  const void* offsets;         // [batch + 1]
  DType offsets_dtype;         // kInt32 or kInt64
  int64_t batch;
  int64_t max_length;
  int64_t total;               // rows of x (and of y, kJaggedJagged; of out, kJaggedDense)
  int64_t m, n, k;             // kJaggedDense: k = K, n = N (m unused); kJaggedJagged: m = M, n = N (k unused)
  const void* x;               // [total, k | m], unit column stride, row stride x_row_stride
  int64_t x_row_stride;
  const void* y;               // kJaggedDense: [batch, k, n], strides y_batch_stride, y_k_stride, y_n_stride
  int64_t y_batch_stride;      //   (one of y_k_stride / y_n_stride is 1: y or y^T per sequence);
  int64_t y_k_stride;          // kJaggedJagged: [total, n], row stride y_k_stride, unit column
  int64_t y_n_stride;          //   stride (y_batch_stride unused)
  void* out;
  int64_t* errors;             // ErrorOp::kJaggedBmm: every offsets entry is checked
  int32_t sm_count;            // of the current device
  void* workspace;             // jagged_bmm_workspace_bytes() bytes, 256-byte aligned (nullptr when 0)
};

// Chosen by mymetaops.model (Python) and passed through unchanged: the index of the kernel in the
// vendor's list (jagged_bmm_kernel_names).
struct JaggedBmmConfig {
  int32_t kernel;
};

// The native bmm kernels of this build, in JaggedBmmConfig.kernel order; *count receives how many.
const char* const* jagged_bmm_kernel_names(int32_t* count);
int64_t jagged_bmm_workspace_bytes(const JaggedBmmArgs& args, const JaggedBmmConfig& config);
LaunchError launch_jagged_bmm(const JaggedBmmArgs& args, const JaggedBmmConfig& config, void* stream);

}  // namespace mymetaops
