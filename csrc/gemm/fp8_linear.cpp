// fp8_linear: nn.functional.linear with FP8 GEMMs, a composite of the family's ops (its autograd is
// in gemm_autograd.cpp), and the dispatcher calls the composite and the autograd share.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "gemm.h"

namespace mymetaops::gemm {

// FP8 tensor cores take K in steps of 16, and the input gradient's K is out_features.
constexpr int64_t kLinearMultiple = 16;

void check_linear_args(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias) {
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK_TYPE((t == at::kBFloat16 || t == at::kHalf) && weight.scalar_type() == t,
                   "fp8_linear: x and weight must both be bfloat16 or float16, got ", t, " and ",
                   weight.scalar_type());
  TORCH_CHECK_VALUE(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
                    "fp8_linear: x [..., K] and weight [N, K] must share K, got ", x.sizes(), " and ",
                    weight.sizes());
  TORCH_CHECK_VALUE(weight.size(0) % kLinearMultiple == 0 && weight.size(1) % kLinearMultiple == 0,
                    "fp8_linear: in_features and out_features must be multiples of 16 (FP8 tensor "
                    "cores take K in steps of 16; the input gradient's K is out_features), got weight ",
                    weight.sizes());
  TORCH_CHECK_VALUE(!bias || (bias->dim() == 1 && bias->size(0) == weight.size(0) &&
                              bias->scalar_type() == t),
                    "fp8_linear: bias must be [", weight.size(0), "] in ", t, ", got ",
                    bias ? bias->sizes() : at::IntArrayRef{}, " ",
                    bias ? bias->scalar_type() : at::ScalarType::Undefined);
}

at::Tensor call_gemm(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::gemm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&)>();
  return op.call(a, b, bias);
}

std::tuple<at::Tensor, at::Tensor> call_quantize_rowwise(const at::Tensor& x) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mymetaops::quantize_fp8_rowwise", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const OptTensor&, OptDType)>();
  return op.call(x, std::nullopt, std::nullopt);
}

at::Tensor call_fp8_gemm(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                         const at::Tensor& w_scale, const OptTensor& bias, OptDType out_dtype) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mymetaops::fp8_gemm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const OptTensor&, OptDType)>();
  return op.call(xq, wq, x_scale, w_scale, bias, out_dtype);
}

namespace {

// Forward: x and weight quantized rowwise on every call (the weight's master copy stays bf16/fp16).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias) {
  check_linear_args(x, weight, bias);
  const auto [xq, xs] = call_quantize_rowwise(x.reshape({-1, x.size(-1)}));
  const auto [wq, ws] = call_quantize_rowwise(weight);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = weight.size(0);
  return call_fp8_gemm(xq, wq, xs, ws, bias, x.scalar_type()).view(shape);
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CompositeExplicitAutograd, m) { m.impl("fp8_linear", &fp8_linear); }

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("_fp8_linear_check", &check_linear_args);
}

}  // namespace mymetaops::gemm
