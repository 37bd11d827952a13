// The one TORCH_LIBRARY of mymetaops: every schema is defined here, once.
// Kernels are registered per backend next to their op (csrc/<family>/<op>*.cpp, TORCH_LIBRARY_IMPL),
// and in Python for the GPU entry points that consult mymetaops.model (mymetaops/ops/<family>.py).
#include <torch/library.h>

TORCH_LIBRARY(mymetaops, m) {
  // ---- embedding bag -------------------------------------------------------------------------
  // offsets has num_bags + 1 entries (FBGEMM form); mode: 0 = sum, 1 = mean; padding_idx -1 = none.
  m.def(
      "embedding_bag(Tensor weight, Tensor indices, Tensor offsets, int mode=0, "
      "Tensor? per_sample_weights=None, int padding_idx=-1) -> Tensor");
  // Dense gradient of the table (in grad_output's dtype).
  m.def(
      "embedding_bag_backward(Tensor grad_output, Tensor indices, Tensor offsets, SymInt num_rows, "
      "int mode=0, Tensor? per_sample_weights=None, int padding_idx=-1) -> Tensor");
  m.def(
      "embedding_bag_per_sample_weights_backward(Tensor grad_output, Tensor weight, Tensor indices, "
      "Tensor offsets, int mode=0, int padding_idx=-1) -> Tensor");
  // The argument checks of embedding_bag (shapes, dtypes, devices; no values), shared by every
  // backend's entry point and by the fake kernel, so errors read the same everywhere.
  m.def(
      "_embedding_bag_check(Tensor weight, Tensor indices, Tensor offsets, int mode, "
      "Tensor? per_sample_weights, int padding_idx) -> ()");
  // Native GPU kernels with an explicit kernel config [vec_bytes, lanes_per_bag, unroll,
  // block_threads], chosen by mymetaops.model; the public ops above dispatch to them.
  m.def(
      "_embedding_bag_native(Tensor weight, Tensor indices, Tensor offsets, int mode, "
      "Tensor? per_sample_weights, int padding_idx, int[] config) -> Tensor");
  m.def(
      "_embedding_bag_backward_native(Tensor grad_output, Tensor sorted_rows, Tensor sorted_bags, "
      "Tensor? sorted_scales, SymInt num_rows, int[] config) -> Tensor");
  m.def(
      "_embedding_bag_per_sample_weights_backward_native(Tensor grad_output, Tensor weight, "
      "Tensor indices, Tensor offsets, int padding_idx, int[] config) -> Tensor");
}
