// The GEMM family on the GPU: the kernels the dispatcher calls for CUDA (and ROCm) tensors. Per
// call: check the arguments (once), compute the bucket key, look the decision up (the model is
// asked once per bucket), launch. No host synchronization. Native kernels go through the
// torch-free launcher ABI (mymetaops/gemm.h: cuda/gemm or hip/gemm); Triton candidates through
// their Python launchers; the vendor candidates are torch._scaled_mm and torch.mm.
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../dispatch/dispatch.h"
#include "../dispatch/launch_gpu.h"
#include "gemm.h"

namespace mymetaops::gemm {
namespace {

using dispatch::Backend;
using dispatch::check_launch;
using dispatch::current_stream;
using dispatch::Decision;

constexpr const char* kFp8Gemm = "fp8_gemm";
constexpr const char* kGemm = "gemm";
constexpr const char* kQuantizeRowwise = "quantize_fp8_rowwise";
constexpr const char* kQuantizeTensorwise = "quantize_fp8_tensorwise";

// Bucketing of a GEMM size (mymetaops/model/gemm.py: size_bucket, the same rounding): to a
// multiple of 16 up to 256 (small-M tiles are 16-64 rows), of 64 up to 16384 (tile counts, hence
// wave quantization, stay exact for tiles of 64 rows or more), then 1/16 octave (4%: with
// hundreds of tiles wave quantization fades).
constexpr int64_t kSmallLimit = 256;
constexpr int64_t kSmallStep = 16;
constexpr int64_t kFineLimit = 16384;
constexpr int64_t kFineStep = 64;
constexpr int kCoarseSteps = 16;

int64_t size_bucket(int64_t x) {
  if (x <= kSmallLimit) return (x + kSmallStep - 1) / kSmallStep * kSmallStep;
  if (x <= kFineLimit) return (x + kFineStep - 1) / kFineStep * kFineStep;
  return kFineLimit + dispatch::log2_bucket(static_cast<double>(x), kCoarseSteps);
}

GemmConfig native_config(at::IntArrayRef config, const char* op) {
  TORCH_CHECK_VALUE(config.size() == 2, op, ": a native config is [kernel, split_k], got ", config);
  return {static_cast<int32_t>(config[0]), static_cast<int32_t>(config[1])};
}

at::Tensor workspace(int64_t bytes, const at::Device& device) {
  return bytes > 0 ? at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device))
                   : at::Tensor();
}

int64_t aligned16(std::initializer_list<uint64_t> values) {
  return dispatch::alignment_bytes(values) >= 16;
}

// ---- fp8_gemm -------------------------------------------------------------------------------

struct Fp8Call {
  at::Tensor xq, wq, x_scale, w_scale, bias;
  at::ScalarType out_dtype;
  bool rowwise;
};

Fp8Call prepare_fp8(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                    const at::Tensor& w_scale, const OptTensor& bias, OptDType out_dtype) {
  const at::ScalarType out = check_fp8_gemm_args(xq, wq, x_scale, w_scale, bias, out_dtype);
  return {xq, wq, x_scale, w_scale, bias ? bias->contiguous() : at::Tensor(), out,
          scales_rowwise(xq, wq, x_scale, w_scale)};
}

at::Tensor fp8_native(const Fp8Call& c, const GemmConfig& config) {
  const int64_t m = c.xq.size(0), n = c.wq.size(0), k = c.xq.size(1);
  at::Tensor out = at::empty({m, n}, c.xq.options().dtype(c.out_dtype));
  Fp8GemmArgs args{};
  args.xq = c.xq.const_data_ptr();
  args.wq = c.wq.const_data_ptr();
  args.m = m;
  args.n = n;
  args.k = k;
  args.ldx = m > 1 ? c.xq.stride(0) : k;
  args.ldw = n > 1 ? c.wq.stride(0) : k;
  args.format = launcher_format(c.xq.scalar_type());
  args.scale_mode = c.rowwise ? ScaleMode::kRowwise : ScaleMode::kTensorwise;
  args.x_scale = c.x_scale.const_data_ptr<float>();
  args.w_scale = c.w_scale.const_data_ptr<float>();
  args.bias = c.bias.defined() ? c.bias.const_data_ptr() : nullptr;
  args.out = out.mutable_data_ptr();
  args.ldo = n;
  args.out_dtype = launcher_dtype(c.out_dtype);
  const at::Tensor ws = workspace(fp8_gemm_workspace_bytes(args, config), c.xq.device());
  args.workspace = ws.defined() ? ws.mutable_data_ptr() : nullptr;
  check_launch(launch_fp8_gemm(args, config, current_stream(c.xq.device())), kFp8Gemm);
  return out;
}

// Fast accumulation (the MMA's own, shorter than fp32) past this K measured a relative error over
// 1e-2 (K = 131072, H200); mymetaops/model/gemm.py FAST_ACCUM_MAX_K, which the Triton kernel shares.
constexpr int64_t kFastAccumMaxK = 16384;

at::Tensor fp8_vendor(const Fp8Call& c) {
  // torch._scaled_mm takes the second operand column-major ([K, N] with stride (1, K)): wq.t().
  const int64_t m = c.xq.size(0), n = c.wq.size(0);
  const at::Tensor sa = c.rowwise ? c.x_scale.reshape({m, 1}) : c.x_scale.reshape({});
  const at::Tensor sb = c.rowwise ? c.w_scale.reshape({1, n}) : c.w_scale.reshape({});
  return at::_scaled_mm(c.xq, c.wq.t(), sa, sb, c.bias.defined() ? OptTensor(c.bias) : std::nullopt,
                        std::nullopt, c.out_dtype,
                        /*use_fast_accum=*/c.xq.size(1) <= kFastAccumMaxK);
}

at::Tensor fp8_gemm_cuda(const at::Tensor& xq_in, const at::Tensor& wq_in, const at::Tensor& xs,
                         const at::Tensor& ws, const OptTensor& bias, OptDType out_dtype) {
  const c10::cuda::CUDAGuard guard(xq_in.device());
  const Fp8Call c = prepare_fp8(xq_in, wq_in, xs, ws, bias, out_dtype);
  const int64_t m = c.xq.size(0), n = c.wq.size(0), k = c.xq.size(1);
  const int64_t out_code = static_cast<int64_t>(launcher_dtype(c.out_dtype));
  const int64_t fnuz = c.xq.scalar_type() == at::kFloat8_e4m3fnuz;
  // The vendor op needs 16 | N, the native NVIDIA kernels 8 | N: the bucket keeps which holds.
  const int64_t n_align = n % 16 == 0 ? 2 : n % 8 == 0 ? 1 : 0;
  const dispatch::Key key = dispatch::make_key(
      kFp8Gemm, c.xq.device(),
      {fnuz, c.rowwise, out_code, c.bias.defined(), n_align, size_bucket(m), size_bucket(n),
       size_bucket(k)});
  const Decision d = dispatch::decide(key, {m, n, k, fnuz, c.rowwise, out_code, c.bias.defined()});
  switch (d.backend) {
    case Backend::kNative:
      return fp8_native(c, native_config(d.config_ref(), kFp8Gemm));
    case Backend::kTriton: {
      at::Tensor out = at::empty({m, n}, c.xq.options().dtype(c.out_dtype));
      return dispatch::run_triton(kFp8Gemm, d,
                                  {c.xq, c.wq, c.x_scale, c.w_scale,
                                   c.bias.defined() ? c10::IValue(c.bias) : c10::IValue(), out});
    }
    case Backend::kVendor:
      return fp8_vendor(c);
  }
  TORCH_CHECK(false, kFp8Gemm, ": unknown backend");
}

at::Tensor fp8_gemm_with_config(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& xs,
                                const at::Tensor& ws, const OptTensor& bias, OptDType out_dtype,
                                at::IntArrayRef config) {
  const c10::cuda::CUDAGuard guard(xq.device());
  return fp8_native(prepare_fp8(xq, wq, xs, ws, bias, out_dtype),
                    native_config(config, "_fp8_gemm_native"));
}

// ---- gemm (bf16 / fp16) ---------------------------------------------------------------------

// The native kernels read a with K contiguous and b either way, 16-byte aligned rows.
bool native_layout(const at::Tensor& a, const at::Tensor& b, Layout layout) {
  if (layout == Layout::kStrided || (a.stride(1) != 1 && a.size(1) > 1)) return false;
  const uint64_t elt = a.element_size();
  const int64_t ldb = layout == Layout::kNContiguous ? b.stride(0) : b.stride(1);
  return aligned16({reinterpret_cast<uint64_t>(a.const_data_ptr()),
                    reinterpret_cast<uint64_t>(b.const_data_ptr()),
                    static_cast<uint64_t>(a.stride(0)) * elt, static_cast<uint64_t>(ldb) * elt,
                    static_cast<uint64_t>(b.size(1)) * elt});
}

at::Tensor gemm_native(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                       const GemmConfig& config) {
  const Layout layout = layout_of_b(b);
  TORCH_CHECK(native_layout(a, b, layout), kGemm,
              ": the native kernels need a with K contiguous, b with N or K contiguous and "
              "16-byte aligned rows");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  at::Tensor out = at::empty({m, n}, a.options());
  GemmArgs args{};
  args.a = a.const_data_ptr();
  args.w = b.const_data_ptr();
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = m > 1 ? a.stride(0) : k;
  args.w_kn = layout == Layout::kNContiguous;
  args.ldw = args.w_kn ? (k > 1 ? b.stride(0) : n) : (n > 1 ? b.stride(1) : k);
  args.dtype = launcher_dtype(a.scalar_type());
  args.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  args.out = out.mutable_data_ptr();
  args.ldo = n;
  const at::Tensor ws = workspace(gemm_workspace_bytes(args, config), a.device());
  args.workspace = ws.defined() ? ws.mutable_data_ptr() : nullptr;
  check_launch(launch_gemm(args, config, current_stream(a.device())), kGemm);
  return out;
}

at::Tensor gemm_cuda(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias_in) {
  check_gemm_args(a, b, bias_in);
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor bias = bias_in ? bias_in->contiguous() : at::Tensor();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const Layout layout = layout_of_b(b);
  const int64_t native_ok = native_layout(a, b, layout);
  const int64_t dtype = static_cast<int64_t>(launcher_dtype(a.scalar_type()));
  const int64_t lay = static_cast<int64_t>(layout);
  // torch.mm takes a slow path when N's or K's rows are not 16-byte multiples (the model's
  // VENDOR_UNALIGNED_FACTOR); the bucket keeps that class, which the size rounding would lose.
  const int64_t elt = a.element_size();
  const int64_t vendor_aligned = (n * elt) % 16 == 0 && (k * elt) % 16 == 0;
  const dispatch::Key key = dispatch::make_key(
      kGemm, a.device(),
      {dtype, lay, native_ok, vendor_aligned, bias.defined(), size_bucket(m), size_bucket(n),
       size_bucket(k)});
  const Decision d = dispatch::decide(key, {m, n, k, dtype, lay, native_ok, bias.defined()});
  switch (d.backend) {
    case Backend::kNative:
      return gemm_native(a, b, bias, native_config(d.config_ref(), kGemm));
    case Backend::kTriton: {
      at::Tensor out = at::empty({m, n}, a.options());
      return dispatch::run_triton(kGemm, d,
                                  {a, b, bias.defined() ? c10::IValue(bias) : c10::IValue(), out});
    }
    case Backend::kVendor:
      return bias.defined() ? at::addmm(bias, a, b) : at::mm(a, b);
  }
  TORCH_CHECK(false, kGemm, ": unknown backend");
}

at::Tensor gemm_with_config(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias,
                            at::IntArrayRef config) {
  check_gemm_args(a, b, bias);
  const c10::cuda::CUDAGuard guard(a.device());
  return gemm_native(a, b, bias ? bias->contiguous() : at::Tensor(),
                     native_config(config, "_gemm_native"));
}

// ---- quantize_fp8 ---------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> quantize_cuda(const char* op, const at::Tensor& x_in,
                                                 const OptTensor& scale_ub, OptDType fp8_dtype,
                                                 bool rowwise) {
  const at::ScalarType fp8 = check_quantize_args(x_in, rowwise ? scale_ub : std::nullopt, fp8_dtype);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = as_rows(x_in);
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor xq = at::empty(x_in.sizes(), x_in.options().dtype(fp8));
  at::Tensor scale = rowwise ? at::empty(x_in.sizes().slice(0, x_in.dim() - 1), x_in.options().dtype(at::kFloat))
                             : at::empty({}, x_in.options().dtype(at::kFloat));
  const int64_t in_code = static_cast<int64_t>(launcher_dtype(x.scalar_type()));
  const int64_t align = dispatch::alignment_bytes(
      {reinterpret_cast<uint64_t>(x.const_data_ptr()),
       static_cast<uint64_t>(x.stride(0)) * x.element_size(), static_cast<uint64_t>(cols) * x.element_size()});
  const dispatch::Key key = dispatch::make_key(
      op, x.device(),
      {in_code, align, dispatch::log2_bucket(static_cast<double>(rows) + 1, 4),
       dispatch::log2_bucket(static_cast<double>(cols) + 1, 4)});
  const Decision d = dispatch::decide(key, {rows, cols, in_code, align});
  if (d.backend == Backend::kTriton) {
    c10::IValue ub = rowwise && scale_ub ? c10::IValue(*scale_ub) : c10::IValue();
    dispatch::run_triton(op, d, {x, ub, xq.view({rows, cols}), scale.view({-1})});
    return {xq, scale};
  }
  TORCH_CHECK(d.backend == Backend::kNative, op, ": the model chose a backend it has no kernel for");
  QuantizeFp8Args args{};
  args.x = x.const_data_ptr();
  args.x_dtype = launcher_dtype(x.scalar_type());
  args.rows = rows;
  args.cols = cols;
  args.ldx = rows > 1 ? x.stride(0) : cols;
  args.format = launcher_format(fp8);
  args.mode = rowwise ? ScaleMode::kRowwise : ScaleMode::kTensorwise;
  args.scale_ub = rowwise && scale_ub ? scale_ub->const_data_ptr<float>() : nullptr;
  args.xq = xq.mutable_data_ptr();
  args.scale = scale.mutable_data_ptr<float>();
  const at::Tensor ws = workspace(fp8_quantize_workspace_bytes(args), x.device());
  args.workspace = ws.defined() ? ws.mutable_data_ptr() : nullptr;
  check_launch(launch_quantize_fp8(args, current_stream(x.device())), op);
  return {xq, scale};
}

std::tuple<at::Tensor, at::Tensor> quantize_rowwise_cuda(const at::Tensor& x, const OptTensor& scale_ub,
                                                         OptDType fp8_dtype) {
  return quantize_cuda(kQuantizeRowwise, x, scale_ub, fp8_dtype, true);
}

std::tuple<at::Tensor, at::Tensor> quantize_tensorwise_cuda(const at::Tensor& x, OptDType fp8_dtype) {
  return quantize_cuda(kQuantizeTensorwise, x, std::nullopt, fp8_dtype, false);
}

}  // namespace

namespace {

std::vector<KernelTableRow> native_kernel_table() {
  int32_t count = 0;
  const GemmKernelInfo* rows = native_gemm_kernels(&count);
  std::vector<KernelTableRow> out;
  for (int32_t i = 0; i < count; ++i) {
    const GemmKernelInfo& r = rows[i];
    out.emplace_back(r.name, static_cast<int64_t>(r.input), r.tile_m, r.tile_n, r.tile_k,
                     r.cluster_m, r.cluster_n, static_cast<int64_t>(r.schedule), r.stages,
                     r.max_split_k, r.warps, r.b_k_major_only, r.swap_ab);
  }
  return out;
}

const bool kTableProvided = (set_native_kernel_table_provider(&native_kernel_table), true);

}  // namespace

TORCH_LIBRARY_IMPL(mymetaops, CUDA, m) {
  m.impl("fp8_gemm", &fp8_gemm_cuda);
  m.impl("_fp8_gemm_native", &fp8_gemm_with_config);
  m.impl("gemm", &gemm_cuda);
  m.impl("_gemm_native", &gemm_with_config);
  m.impl("quantize_fp8_rowwise", &quantize_rowwise_cuda);
  m.impl("quantize_fp8_tensorwise", &quantize_tensorwise_cuda);
}

}  // namespace mymetaops::gemm
