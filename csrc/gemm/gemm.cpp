// The GEMM family: argument checks, the FP8 format of a device, and the CPU kernels (the reference
// every GPU backend is tested against: fp32 accumulation, one rounding to the output dtype).
#include "gemm.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <torch/library.h>

#include <array>
#include <mutex>
#include <string>

#if defined(USE_ROCM)
#include <ATen/cuda/CUDAContext.h>
#endif

namespace mymetaops::gemm {

namespace {

// Quantization's guard against an all-zero row (gemm.h: inv = fp8_max / max(amax, kAmaxFloor)).
constexpr float kAmaxFloor = 1e-12f;
// FP8 tensor cores consume K in steps of 16 bytes (wgmma k=32 for 8-bit, MFMA k=16/64); TMA and
// 16-byte vector loads need 16-byte aligned rows.
constexpr int64_t kFp8KMultiple = 16;

bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }
bool is_float(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

void check_device_format(at::ScalarType fp8, const at::Device& device, const char* op,
                         const char* what) {
  if (!device.is_cuda()) return;  // the CPU reference takes both formats
  const at::ScalarType native = fp8_dtype_of(device);
  TORCH_CHECK(fp8 == native, op, ": ", what, " is ", fp8, ", but the FP8 format of ", device,
              " is ", native, " (e4m3fnuz on gfx942, e4m3fn on NVIDIA and gfx950); quantize "
              "with mymetaops.quantize_fp8_rowwise, which uses mymetaops.fp8_dtype(device)");
}

}  // namespace

at::ScalarType fp8_dtype_of(const at::Device& device) {
#if defined(USE_ROCM)
  if (device.is_cuda()) {
    // gcnArchName is fixed per device: read once.
    static std::mutex mutex;
    static std::array<int8_t, 64> fnuz{};  // 0 unknown, 1 fnuz, 2 fn
    const auto index = device.index() >= 0 ? device.index() : at::cuda::current_device();
    std::lock_guard<std::mutex> lock(mutex);
    int8_t& known = fnuz[static_cast<size_t>(index) % fnuz.size()];
    if (known == 0) {
      const std::string arch = at::cuda::getDeviceProperties(index)->gcnArchName;
      known = arch.rfind("gfx942", 0) == 0 ? 1 : 2;
    }
    return known == 1 ? at::kFloat8_e4m3fnuz : at::kFloat8_e4m3fn;
  }
#endif
  (void)device;
  return at::kFloat8_e4m3fn;
}

float fp8_max(at::ScalarType fp8_dtype) {
  return fp8_dtype == at::kFloat8_e4m3fnuz ? 240.0f : 448.0f;
}

Fp8Format launcher_format(at::ScalarType fp8_dtype) {
  return fp8_dtype == at::kFloat8_e4m3fnuz ? Fp8Format::kE4M3FNUZ : Fp8Format::kE4M3FN;
}

DType launcher_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, "mymetaops: unsupported dtype ", type);
  }
}

at::ScalarType check_quantize_args(const at::Tensor& x, const OptTensor& scale_ub,
                                   OptDType fp8_dtype) {
  constexpr const char* op = "quantize_fp8";
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension (rows of K), got a scalar");
  TORCH_CHECK(is_float(x.scalar_type()), op, ": x must be float32, float16 or bfloat16, got ",
              x.scalar_type());
  const at::ScalarType fp8 = fp8_dtype.value_or(fp8_dtype_of(x.device()));
  TORCH_CHECK(is_fp8(fp8), op, ": fp8_dtype must be torch.float8_e4m3fn or float8_e4m3fnuz, got ",
              fp8);
  check_device_format(fp8, x.device(), op, "fp8_dtype");
  if (scale_ub.has_value()) {
    TORCH_CHECK(scale_ub->numel() == 1 && scale_ub->scalar_type() == at::kFloat, op,
                ": scale_ub must be a float32 tensor of one element, got ", scale_ub->scalar_type(),
                " of ", scale_ub->sym_numel(), " elements");
    TORCH_CHECK(scale_ub->device() == x.device(), op, ": scale_ub must be on x's device (",
                x.device(), "), got ", scale_ub->device());
  }
  return fp8;
}

bool scales_rowwise(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                    const at::Tensor& w_scale) {
  constexpr const char* op = "fp8_gemm";
  const bool scalar_x = x_scale.sym_numel() == 1, scalar_w = w_scale.sym_numel() == 1;
  if (scalar_x && scalar_w) return false;  // tensorwise (the same product when M = N = 1)
  TORCH_SYM_CHECK(x_scale.sym_numel().sym_eq(xq.sym_size(0)), op,
                  ": scales must both be rowwise (x_scale [M], w_scale [N]) or both tensorwise "
                  "(one element each); got x_scale of ", x_scale.sym_numel(), " elements for M = ",
                  xq.sym_size(0), " and w_scale of ", w_scale.sym_numel(), " for N = ",
                  wq.sym_size(0));
  TORCH_SYM_CHECK(w_scale.sym_numel().sym_eq(wq.sym_size(0)), op,
                  ": scales must both be rowwise (x_scale [M], w_scale [N]) or both tensorwise "
                  "(one element each); got x_scale of ", x_scale.sym_numel(), " elements for M = ",
                  xq.sym_size(0), " and w_scale of ", w_scale.sym_numel(), " for N = ",
                  wq.sym_size(0));
  return true;
}

at::ScalarType check_fp8_gemm_args(const at::Tensor& xq, const at::Tensor& wq,
                                   const at::Tensor& x_scale, const at::Tensor& w_scale,
                                   const OptTensor& bias, OptDType out_dtype) {
  constexpr const char* op = "fp8_gemm";
  TORCH_CHECK(xq.dim() == 2 && wq.dim() == 2, op, ": xq must be [M, K] and wq [N, K], got ",
              xq.dim(), "-D and ", wq.dim(), "-D");
  TORCH_CHECK(is_fp8(xq.scalar_type()) && is_fp8(wq.scalar_type()), op,
              ": xq and wq must be FP8 (float8_e4m3fn or float8_e4m3fnuz), got ", xq.scalar_type(),
              " and ", wq.scalar_type());
  TORCH_CHECK(xq.scalar_type() == wq.scalar_type(), op, ": xq and wq must share an FP8 format, got ",
              xq.scalar_type(), " and ", wq.scalar_type());
  const at::Device device = xq.device();
  TORCH_CHECK(wq.device() == device && x_scale.device() == device && w_scale.device() == device &&
                  (!bias || bias->device() == device),
              op, ": all tensors must be on one device, got xq on ", device, ", wq on ",
              wq.device(), ", x_scale on ", x_scale.device(), ", w_scale on ", w_scale.device());
  check_device_format(xq.scalar_type(), device, op, "xq");
  TORCH_SYM_CHECK(xq.sym_size(1).sym_eq(wq.sym_size(1)), op,
                  ": xq [M, K] and wq [N, K] must share K, got ", xq.sym_sizes(), " and ",
                  wq.sym_sizes(), " (wq is nn.Linear's weight layout, [out, in])");
  TORCH_SYM_CHECK((xq.sym_size(1) % kFp8KMultiple).sym_eq(0), op,
                  ": K must be a multiple of 16 for FP8 tensor cores, got K = ", xq.sym_size(1));
  for (const at::Tensor* t : {&xq, &wq}) {
    TORCH_SYM_CHECK(t->sym_stride(1).sym_eq(1) || t->sym_size(1).sym_eq(1), op,
                    ": xq and wq must have their K dimension contiguous (stride 1), got strides ",
                    t->sym_strides(), "; call .contiguous()");
    TORCH_SYM_CHECK((t->sym_stride(0) % kFp8KMultiple).sym_eq(0) || t->sym_size(0).sym_le(1), op,
                    ": the row stride of xq and wq must be a multiple of 16 bytes, got strides ",
                    t->sym_strides());
  }
  for (const at::Tensor* s : {&x_scale, &w_scale}) {
    TORCH_CHECK(s->scalar_type() == at::kFloat, op, ": x_scale and w_scale must be float32, got ",
                s->scalar_type());
    TORCH_CHECK(s->dim() <= 2, op, ": scales must be [M] / [N] (or [M, 1] / [1, N]) or one "
                "element, got ", s->dim(), "-D");
    TORCH_CHECK(s->is_contiguous(), op, ": scales must be contiguous");
  }
  scales_rowwise(xq, wq, x_scale, w_scale);
  const at::ScalarType out = out_dtype.value_or(at::kBFloat16);
  TORCH_CHECK(is_float(out), op, ": out_dtype must be bfloat16, float16 or float32, got ", out);
  if (bias) {
    TORCH_CHECK(bias->dim() == 1, op, ": bias must be [N], got ", bias->dim(), "-D");
    TORCH_SYM_CHECK(bias->sym_size(0).sym_eq(wq.sym_size(0)), op, ": bias must have N = ",
                    wq.sym_size(0), " entries, got ", bias->sym_size(0));
    TORCH_CHECK(bias->scalar_type() == out, op, ": bias must be in out_dtype (", out, "), got ",
                bias->scalar_type());
  }
  return out;
}

void check_gemm_args(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias) {
  constexpr const char* op = "gemm";
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, op, ": a must be [M, K] and b [K, N], got ", a.dim(),
              "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf, op,
              ": a and b must be bfloat16 or float16 (FP8: fp8_gemm), got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), op, ": a and b must share a dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device() && (!bias || bias->device() == a.device()), op,
              ": all tensors must be on one device, got ", a.device(), " and ", b.device());
  TORCH_SYM_CHECK(a.sym_size(1).sym_eq(b.sym_size(0)), op, ": a [M, K] and b [K, N] must share K, got ",
                  a.sym_sizes(), " and ", b.sym_sizes());
  if (bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->scalar_type() == a.scalar_type(), op,
                ": bias must be [N] in the inputs' dtype, got ", bias->scalar_type(), " ",
                bias->dim(), "-D");
    TORCH_SYM_CHECK(bias->sym_size(0).sym_eq(b.sym_size(1)), op, ": bias must have N = ",
                    b.sym_size(1), " entries, got ", bias->sym_size(0));
  }
}

at::Tensor as_rows(const at::Tensor& x) {
  const int64_t k = x.size(-1);
  const int64_t rows = k == 0 ? x.numel() == 0 ? 0 : 1 : x.numel() / k;
  at::Tensor r = x.dim() == 2 ? x : x.reshape({rows, k});
  return (r.stride(1) == 1 || k <= 1) ? r : r.contiguous();
}

Layout layout_of_b(const at::Tensor& b) {
  if (b.stride(1) == 1 || b.size(1) == 1) return Layout::kNContiguous;
  if (b.stride(0) == 1 || b.size(0) == 1) return Layout::kKContiguous;
  return Layout::kStrided;
}

namespace {

// ---- CPU kernels: the reference ---------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor& x, const OptTensor& scale_ub,
                                            at::ScalarType fp8, bool rowwise) {
  const float max = fp8_max(fp8);
  const at::Tensor xf = x.to(at::kFloat);
  at::Tensor amax = rowwise ? (x.dim() == 0 || x.size(-1) == 0
                                   ? at::zeros(x.sizes().slice(0, x.dim() - 1), xf.options())
                                   : xf.abs().amax(-1))
                            : (x.numel() == 0 ? at::zeros({}, xf.options()) : xf.abs().max());
  if (rowwise && scale_ub) amax = at::minimum(amax, *scale_ub);
  // True divisions (gemm.h), not a reciprocal times a scalar (which `scalar / tensor` is in ATen).
  const at::Tensor inv = at::div(at::full_like(amax, max), amax.clamp_min(kAmaxFloor));
  const at::Tensor scaled = rowwise ? xf * inv.unsqueeze(-1) : xf * inv;
  const at::Tensor xq = scaled.clamp(-max, max).to(fp8);
  return {xq, at::div(at::ones_like(inv), inv)};
}

std::tuple<at::Tensor, at::Tensor> quantize_rowwise_cpu(const at::Tensor& x,
                                                        const OptTensor& scale_ub,
                                                        OptDType fp8_dtype) {
  return quantize(x, scale_ub, check_quantize_args(x, scale_ub, fp8_dtype), true);
}

std::tuple<at::Tensor, at::Tensor> quantize_tensorwise_cpu(const at::Tensor& x,
                                                           OptDType fp8_dtype) {
  return quantize(x, std::nullopt, check_quantize_args(x, std::nullopt, fp8_dtype), false);
}

at::Tensor fp8_gemm_cpu(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                        const at::Tensor& w_scale, const OptTensor& bias, OptDType out_dtype) {
  const at::ScalarType out = check_fp8_gemm_args(xq, wq, x_scale, w_scale, bias, out_dtype);
  const bool row = scales_rowwise(xq, wq, x_scale, w_scale);
  at::Tensor acc = at::matmul(xq.to(at::kFloat), wq.to(at::kFloat).t());
  acc = row ? acc * x_scale.reshape({-1, 1}) * w_scale.reshape({1, -1})
            : acc * (x_scale.reshape({}) * w_scale.reshape({}));
  if (bias) acc = acc + bias->to(at::kFloat);
  return acc.to(out);
}

at::Tensor gemm_cpu(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias) {
  check_gemm_args(a, b, bias);
  at::Tensor acc = at::matmul(a.to(at::kFloat), b.to(at::kFloat));
  if (bias) acc = acc + bias->to(at::kFloat);
  return acc.to(a.scalar_type());
}

void quantize_check_op(const at::Tensor& x, const OptTensor& scale_ub, OptDType fp8_dtype) {
  check_quantize_args(x, scale_ub, fp8_dtype);
}
void fp8_gemm_check_op(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                       const at::Tensor& w_scale, const OptTensor& bias, OptDType out_dtype) {
  check_fp8_gemm_args(xq, wq, x_scale, w_scale, bias, out_dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CompositeImplicitAutograd, m) {
  m.impl("_quantize_fp8_check", &quantize_check_op);
  m.impl("_fp8_gemm_check", &fp8_gemm_check_op);
  m.impl("_gemm_check", &check_gemm_args);
}

TORCH_LIBRARY_IMPL(mymetaops, CPU, m) {
  m.impl("quantize_fp8_rowwise", &quantize_rowwise_cpu);
  m.impl("quantize_fp8_tensorwise", &quantize_tensorwise_cpu);
  m.impl("fp8_gemm", &fp8_gemm_cpu);
  m.impl("gemm", &gemm_cpu);
}

}  // namespace mymetaops::gemm
