// Launchers of the attention family's native forward kernels, implemented once per vendor:
// cuda/attention/ (Hopper: TMA + wgmma) and hip/attention/attention_fwd.hip (CDNA:
// MFMA, wave64, K/V tiles in LDS) define the same symbols; a build links exactly one of them.
// HSTU's target / window / contextual masks run on Triton (mymetaops/triton/); the backward has
// Hopper kernels (cuda/attention/dkdv.cu, dq.cu), none on CDNA yet.
//
// Layout (mymetaops/ops/attention.py): q, k [total, heads, dqk] and v [total, heads, dv], unit stride
// in the last dimension, row and head strides given (elements); sequence b is rows offsets[b] ..
// offsets[b + 1] of every head. out [total, heads, dv] contiguous; lse [heads, total] fp32
// contiguous (kSoftmax only).
//
//   kHstu:    out_i = sum_{j <= i (every j when !causal)} silu(alpha q_i . k_j) * inv_max_seq_len * v_j
//   kSoftmax: out_i = sum_j softmax_j(alpha q_i . k_j) v_j over the same j; lse_i = log sum_j
//             exp(alpha q_i . k_j) (natural log). Every row of a sequence has j = i: none is empty.
// Products accumulate in fp32; one rounding to dtype at the end.
//
// Offsets values (int32 or int64) are clamped to [0, total]; an end below its start is an empty
// sequence; a sequence longer than max_seq_len is computed over its first max_seq_len rows (the
// rows past them get out 0 and lse -inf). Every rule broken is recorded in `errors` (a
// DeviceErrorRecord, errors.h, op error_op, first one wins) by the launch itself, without a host
// sync: offsets[0] != 0 (kOffsetNotAtEnd, bound 0), offsets[b] < offsets[b - 1] (kDecreasingOffset),
// offsets[batch] != total (kOffsetNotAtEnd, bound total), a length above max_seq_len
// (kLengthAboveMax, position b, value the length, bound max_seq_len). Rows of out outside every
// sequence (before offsets[0] or from offsets[batch] on) are written 0 (lse -inf). Nothing is read
// or written outside the tensors.
#pragma once
#include <cstdint>

#include "mymetaops/errors.h"
#include "mymetaops/types.h"

namespace mymetaops {

enum class AttentionKind : int32_t { kHstu = 0, kSoftmax = 1 };

struct AttentionForwardArgs {
  AttentionKind kind;
  DType dtype;                  // kBFloat16 or kFloat16: q, k, v and out
  const void* q;
  const void* k;
  const void* v;
  int64_t q_row_stride, q_head_stride;  // elements
  int64_t k_row_stride, k_head_stride;
  int64_t v_row_stride, v_head_stride;
  const void* offsets;          // [batch + 1]
  DType offsets_dtype;          // kInt32 or kInt64
  int64_t batch;
  int64_t total;                // rows of q, k, v and out
  int64_t max_seq_len;
  int32_t heads, dqk, dv;
  bool causal;
  float alpha;                  // kHstu: silu's scale; kSoftmax: the softmax scale
  float inv_max_seq_len;        // kHstu: 1 / max_seq_len (0 when max_seq_len is 0)
  void* out;                    // [total, heads, dv] contiguous
  float* lse;                   // kSoftmax: [heads, total] contiguous; nullptr for kHstu
  int64_t* errors;              // nullptr: do not record
  ErrorOp error_op;             // kHstuAttention or kJaggedAttention
  int32_t sm_count;             // SMs / CUs of the current device (persistent grids)
  void* workspace;              // attention_workspace_bytes() bytes, 256-byte aligned (nullptr when 0)
};

// Chosen by mymetaops.model (Python) and passed through unchanged: the index of the kernel in the
// vendor's list (attention_kernel_names), each a fixed tile shape.
struct AttentionKernelConfig {
  int32_t kernel;
};

// The native forward kernels of this build, in AttentionKernelConfig.kernel order; *count receives
// how many. A name says the tiles and what it supports, e.g. "hopper_hstu_128x128_d128".
const char* const* attention_kernel_names(int32_t* count);
// nullptr when the kernel runs these arguments, else why not (dtype, head dims, strides,
// alignment, arch): the glue falls back to Triton only where the model said so, so this is an error.
LaunchError attention_supports(const AttentionForwardArgs& args, const AttentionKernelConfig& config);
int64_t attention_workspace_bytes(const AttentionForwardArgs& args, const AttentionKernelConfig& config);
LaunchError launch_attention_forward(const AttentionForwardArgs& args, const AttentionKernelConfig& config,
                                     void* stream);

// The backward's dK and dV, and its dQ, for the unmasked kinds above:
//   kHstu:    dS_ij = dP_ij silu'(alpha s_ij) alpha inv_max_seq_len, P_ij = silu(alpha s_ij) inv_max_seq_len
//   kSoftmax: dS_ij = P_ij (dP_ij - delta_i) alpha, P_ij = exp(alpha s_ij - lse_i)
// with dP = dO V^T over the mask of the forward; dV = P^T dO, dK = dS^T Q. Rows of dk / dv
// inside a sequence are written (its first max_seq_len rows); the others are left as they are
// (offsets were checked into the error record by the forward).
struct AttentionBackwardArgs {
  AttentionKind kind;
  DType dtype;                  // kBFloat16 or kFloat16: q, k, v, dout, dk, dv
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  int64_t q_row_stride, q_head_stride;  // elements
  int64_t k_row_stride, k_head_stride;
  int64_t v_row_stride, v_head_stride;
  int64_t dout_row_stride, dout_head_stride;
  const void* offsets;          // [batch + 1]
  DType offsets_dtype;          // kInt32 or kInt64
  int64_t batch;
  int64_t total;
  int64_t max_seq_len;
  int32_t heads, dqk, dv;
  bool causal;
  float alpha;
  float inv_max_seq_len;
  const float* lse;             // kSoftmax: the forward's [heads, total]
  const float* delta;           // kSoftmax: [heads, total], rowsum(dout * out)
  void* dk;                     // [total, heads, dqk] contiguous (launch_attention_dkdv)
  void* dv_out;                 // [total, heads, dv] contiguous (launch_attention_dkdv)
  void* dq;                     // [total, heads, dqk] contiguous (launch_attention_dq; fused dQ)
  float* dq_accum;              // launch_attention_dkdv: nullptr, or attention_dq_accum_elems fp32,
                                // zeroed and 16-byte aligned: the kernel's sums, then written to dq
};

// nullptr when this build has the backward kernels (dK / dV, dQ) for these arguments, else why not.
LaunchError attention_backward_supports(const AttentionBackwardArgs& args);
// dK, dV (and dQ fused when dq_accum is set: its bits vary from call to call with the order of
// the key blocks' additions).
LaunchError launch_attention_dkdv(const AttentionBackwardArgs& args, void* stream);
// fp32 elements of the fused dQ's buffer: heads x (total + 64 batch) x dqk (each sequence's rows
// padded to whole 64-row blocks).
int64_t attention_dq_accum_elems(const AttentionBackwardArgs& args);
// dQ = dS K over the same mask (dS as above), rows inside a sequence written.
LaunchError launch_attention_dq(const AttentionBackwardArgs& args, void* stream);

}  // namespace mymetaops
