// The one TORCH_LIBRARY of mymetaops: every schema is defined here, once.
// Kernels are registered per backend next to their op (csrc/<family>/*.cpp, TORCH_LIBRARY_IMPL):
// CPU, CUDA (also ROCm's HIP, which torch dispatches as CUDA) and Autograd, in C++; the fake
// kernels for torch.compile are in Python (mymetaops/ops/<family>.py). The attention family has
// no native kernel yet: its CPU, CUDA and autograd kernels are Python (mymetaops/ops/attention.py).
#include <torch/library.h>

TORCH_LIBRARY(mymetaops, m) {
  // ---- embedding bag -------------------------------------------------------------------------
  // mode: 0 = sum, 1 = mean; padding_idx -1 = none. offsets has num_bags + 1 entries (FBGEMM
  // form, include_last_offset=True) or num_bags entries (torch's default form, the last bag ending
  // at the end of indices).
  m.def(
      "embedding_bag(Tensor weight, Tensor indices, Tensor offsets, int mode=0, "
      "Tensor? per_sample_weights=None, int padding_idx=-1, bool include_last_offset=True) -> Tensor");
  // Dense gradient of the table (in grad_output's dtype).
  m.def(
      "embedding_bag_backward(Tensor grad_output, Tensor indices, Tensor offsets, SymInt num_rows, "
      "int mode=0, Tensor? per_sample_weights=None, int padding_idx=-1, "
      "bool include_last_offset=True) -> Tensor");
  m.def(
      "embedding_bag_per_sample_weights_backward(Tensor grad_output, Tensor weight, Tensor indices, "
      "Tensor offsets, int mode=0, int padding_idx=-1, bool include_last_offset=True) -> Tensor");
  // The argument checks of each op (shapes, dtypes, devices; no values): the one place they live,
  // called by every backend's kernel and by the fake kernels, so errors read the same everywhere.
  m.def(
      "_embedding_bag_check(Tensor weight, Tensor indices, Tensor offsets, int mode, "
      "Tensor? per_sample_weights, int padding_idx, bool include_last_offset) -> ()");
  m.def(
      "_embedding_bag_backward_check(Tensor grad_output, Tensor indices, Tensor offsets, "
      "SymInt num_rows, int mode, Tensor? per_sample_weights, int padding_idx, "
      "bool include_last_offset) -> ()");
  m.def(
      "_embedding_bag_per_sample_weights_backward_check(Tensor grad_output, Tensor weight, "
      "Tensor indices, Tensor offsets, int mode, int padding_idx, bool include_last_offset) -> ()");
  // The native forward kernel with an explicit config [vec_bytes, lanes_per_bag, unroll,
  // block_threads] (benchmarks time every candidate of the model through it).
  m.def(
      "_embedding_bag_native(Tensor weight, Tensor indices, Tensor offsets, int mode, "
      "Tensor? per_sample_weights, int padding_idx, bool include_last_offset, int[] config) -> Tensor");

  // ---- GEMM family: FP8 quantization, FP8 GEMM, bf16/fp16 GEMM, the FP8 training layer ---------
  // fp8_dtype None = the device's format (mymetaops.fp8_dtype: e4m3fnuz on gfx942, else e4m3fn).
  // x is [..., K]: one scale per row of K (rowwise, shape x.shape[:-1]) or one scalar (tensorwise).
  m.def(
      "quantize_fp8_rowwise(Tensor x, Tensor? scale_ub=None, ScalarType? fp8_dtype=None) "
      "-> (Tensor, Tensor)");
  m.def("quantize_fp8_tensorwise(Tensor x, ScalarType? fp8_dtype=None) -> (Tensor, Tensor)");
  // out[M, N] = (xq[M, K] . wq[N, K]^T) * x_scale[:, None] * w_scale[None, :] + bias; scales are
  // rowwise ([M], [N]) or tensorwise (one element each); out_dtype None = bfloat16.
  m.def(
      "fp8_gemm(Tensor xq, Tensor wq, Tensor x_scale, Tensor w_scale, Tensor? bias=None, "
      "ScalarType? out_dtype=None) -> Tensor");
  // bf16 / fp16: a[M, K] @ b[K, N] + bias[N] (torch.mm's layout).
  m.def("gemm(Tensor a, Tensor b, Tensor? bias=None) -> Tensor");
  // nn.Linear in FP8: x[..., K], weight[N, K] (bf16/fp16), quantized rowwise on the fly.
  m.def("fp8_linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def("_quantize_fp8_check(Tensor x, Tensor? scale_ub, ScalarType? fp8_dtype) -> ()");
  m.def(
      "_fp8_gemm_check(Tensor xq, Tensor wq, Tensor x_scale, Tensor w_scale, Tensor? bias, "
      "ScalarType? out_dtype) -> ()");
  m.def("_gemm_check(Tensor a, Tensor b, Tensor? bias) -> ()");
  m.def("_fp8_linear_check(Tensor x, Tensor weight, Tensor? bias) -> ()");
  // The native kernels with an explicit config [kernel, split_k] (benchmarks time every candidate).
  m.def(
      "_fp8_gemm_native(Tensor xq, Tensor wq, Tensor x_scale, Tensor w_scale, Tensor? bias, "
      "ScalarType? out_dtype, int[] config) -> Tensor");
  m.def("_gemm_native(Tensor a, Tensor b, Tensor? bias, int[] config) -> Tensor");

  // ---- jagged tensors: FBGEMM's names, schemas and semantics (torch.ops.fbgemm.*) ----------------
  // values [total, D] (or [total]) with n = len(offsets) jagged dims: offsets[0] has B + 1 entries
  // indexing offsets[1] (or the rows of values when n = 1), and so on. Dense tensors are
  // [B, max_lengths..., D]; a sequence longer than its dense dimension is truncated.
  m.def(
      "jagged_to_padded_dense(Tensor values, Tensor[] offsets, SymInt[] max_lengths, "
      "float padding_value=0.) -> Tensor");
  // total_L None = the last level's last offset (read back from the device: a sync on the GPU).
  m.def("dense_to_jagged_forward(Tensor dense, Tensor[] x_offsets, SymInt? total_L=None) -> Tensor");
  m.def("jagged_dense_elementwise_add(Tensor x_values, Tensor[] x_offsets, Tensor y) -> Tensor");
  m.def(
      "jagged_dense_elementwise_add_jagged_output_forward(Tensor x_values, Tensor[] x_offsets, "
      "Tensor y) -> Tensor");
  m.def("jagged_dense_elementwise_mul_forward(Tensor x_values, Tensor[] x_offsets, Tensor y) -> Tensor");
  m.def("jagged_softmax_forward(Tensor values, Tensor x_offsets, int max_L) -> Tensor");
  m.def(
      "jagged_softmax_backward(Tensor grad_output, Tensor output, Tensor x_offsets, int max_L) "
      "-> Tensor");
  m.def("jagged_dense_bmm_forward(Tensor x_values, Tensor x_offsets, Tensor y, int max_L) -> Tensor");
  m.def(
      "jagged_jagged_bmm(Tensor x_values, Tensor y_values, Tensor x_offsets, int max_L) -> Tensor");
  m.def(
      "jagged_index_select(Tensor values, Tensor lengths, Tensor indices, "
      "int? num_dense_output_rows=None) -> Tensor[]");
  // The gradient of jagged_index_select's values: each selected sequence's rows added back to
  // its source rows.
  m.def(
      "jagged_index_select_backward(Tensor grad_output, Tensor lengths, Tensor indices, "
      "SymInt num_input_rows) -> Tensor");
  // FBGEMM's ops that also return their offsets, unchanged: composites of the ops above.
  m.def("dense_to_jagged(Tensor dense, Tensor[] x_offsets, SymInt? total_L=None) -> (Tensor, Tensor[])");
  m.def(
      "jagged_dense_elementwise_add_jagged_output(Tensor x_values, Tensor[] x_offsets, Tensor y) "
      "-> (Tensor, Tensor[])");
  m.def(
      "jagged_dense_elementwise_mul(Tensor x_values, Tensor[] x_offsets, Tensor y) "
      "-> (Tensor, Tensor[])");
  m.def("jagged_softmax(Tensor values, Tensor x_offsets, int max_L) -> (Tensor, Tensor)");
  m.def("jagged_dense_bmm(Tensor x_values, Tensor x_offsets, Tensor y, int max_L) -> (Tensor, Tensor)");
  // The argument checks of each kernel op above (shapes, dtypes, devices; no values): the one place
  // they live, called by every backend's kernel and by the fake kernels.
  m.def(
      "_jagged_to_padded_dense_check(Tensor values, Tensor[] offsets, SymInt[] max_lengths) -> ()");
  m.def("_dense_to_jagged_check(Tensor dense, Tensor[] x_offsets, SymInt? total_L) -> ()");
  m.def("_jagged_dense_elementwise_check(Tensor x_values, Tensor[] x_offsets, Tensor y) -> ()");
  m.def("_jagged_softmax_check(Tensor values, Tensor x_offsets, int max_L) -> ()");
  m.def(
      "_jagged_softmax_backward_check(Tensor grad_output, Tensor output, Tensor x_offsets, "
      "int max_L) -> ()");
  m.def("_jagged_dense_bmm_check(Tensor x_values, Tensor x_offsets, Tensor y, int max_L) -> ()");
  m.def(
      "_jagged_jagged_bmm_check(Tensor x_values, Tensor y_values, Tensor x_offsets, int max_L) -> ()");
  m.def("_jagged_index_select_check(Tensor values, Tensor lengths, Tensor indices) -> ()");
  // The two bmm through one native kernel (config = [index into _C._native_jagged_bmm_kernels()]),
  // past the model: kernel tests and sweeps (GPU builds only).
  m.def("_jagged_dense_bmm_native(Tensor x_values, Tensor x_offsets, Tensor y, int max_L, int[] config) -> Tensor");
  m.def(
      "_jagged_jagged_bmm_native(Tensor x_values, Tensor y_values, Tensor x_offsets, int max_L, int[] config) "
      "-> Tensor");
  m.def(
      "_jagged_index_select_backward_check(Tensor grad_output, Tensor lengths, Tensor indices, "
      "SymInt num_input_rows) -> ()");

  // ---- attention over jagged sequences --------------------------------------------------------
  // q, k [total_L, H, Dqk], v [total_L, H, Dv], seq_offsets [B + 1] (int32 / int64, starting at 0,
  // ending at total_L, every length <= max_seq_len); out [total_L, H, Dv].
  // HSTU (generative-recommenders' hstu_mha): silu(alpha q.k) / max_seq_len under its masks, times v.
  m.def(
      "hstu_attention(Tensor q, Tensor k, Tensor v, Tensor seq_offsets, int max_seq_len, float alpha, "
      "bool causal=True, Tensor? num_targets=None, int max_attn_len=0, int contextual_seq_len=0) -> Tensor");
  m.def(
      "hstu_attention_backward(Tensor grad_output, Tensor q, Tensor k, Tensor v, Tensor seq_offsets, "
      "int max_seq_len, float alpha, bool causal, Tensor? num_targets, int max_attn_len, "
      "int contextual_seq_len) -> (Tensor, Tensor, Tensor)");
  // Softmax attention: (out, lse), lse [H, total_L] fp32, the natural log-sum-exp of the scaled
  // scores of each row (kept for the backward). scale None = 1 / sqrt(Dqk).
  m.def(
      "jagged_attention(Tensor q, Tensor k, Tensor v, Tensor seq_offsets, int max_seq_len, "
      "bool causal=True, float? scale=None) -> (Tensor, Tensor)");
  m.def(
      "jagged_attention_backward(Tensor grad_output, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor lse, Tensor seq_offsets, int max_seq_len, bool causal, float? scale) "
      "-> (Tensor, Tensor, Tensor)");
}
