// Shared by the checks and CPU kernels (gemm.cpp) and the GPU glue (gemm_gpu.cpp) of the GEMM
// family: FP8 quantization, FP8 GEMM, bf16/fp16 GEMM.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "mymetaops/gemm.h"

namespace mymetaops::gemm {

using OptTensor = std::optional<at::Tensor>;
using OptDType = std::optional<at::ScalarType>;

// The FP8 format of a device: e4m3fnuz on gfx942 (MI300X/MI325X), e4m3fn everywhere else
// (NVIDIA, gfx950, CPU). mymetaops.fp8_dtype(device) is this function.
at::ScalarType fp8_dtype_of(const at::Device& device);
// Largest finite value of an FP8 format: 448 (e4m3fn) or 240 (e4m3fnuz).
float fp8_max(at::ScalarType fp8_dtype);
Fp8Format launcher_format(at::ScalarType fp8_dtype);
DType launcher_dtype(at::ScalarType type);

// Argument checks (shapes, dtypes, layouts, devices; never values: no sync). Every backend's
// kernel and the fake kernels call these: the one place arguments are checked. They return the
// resolved FP8 dtype / output dtype.
at::ScalarType check_quantize_args(const at::Tensor& x, const OptTensor& scale_ub,
                                   OptDType fp8_dtype);
at::ScalarType check_fp8_gemm_args(const at::Tensor& xq, const at::Tensor& wq,
                                   const at::Tensor& x_scale, const at::Tensor& w_scale,
                                   const OptTensor& bias, OptDType out_dtype);
void check_gemm_args(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias);

// fp8_linear's: x [..., K] and weight [N, K] in bf16/fp16, K and N multiples of 16, bias [N].
void check_linear_args(const at::Tensor& x, const at::Tensor& weight, const OptTensor& bias);

// The family's ops called through the dispatcher: the composite fp8_linear and the autograd build
// on them, so every backend, the forced backend and the fake kernels apply.
at::Tensor call_gemm(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias);
std::tuple<at::Tensor, at::Tensor> call_quantize_rowwise(const at::Tensor& x);
at::Tensor call_fp8_gemm(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                         const at::Tensor& w_scale, const OptTensor& bias, OptDType out_dtype);

// Whether checked scales are rowwise (else tensorwise).
inline bool rowwise(const at::Tensor& x_scale) { return x_scale.dim() > 0 && x_scale.numel() > 1; }
bool scales_rowwise(const at::Tensor& xq, const at::Tensor& wq, const at::Tensor& x_scale,
                    const at::Tensor& w_scale);

// x viewed as [rows, K] (a view when the layout allows one, else a contiguous copy).
at::Tensor as_rows(const at::Tensor& x);

// How a bf16/fp16 GEMM operand lies in memory (the model's b_layout): its rows of K contiguous
// (kKContiguous), of N contiguous (kNContiguous, torch.mm's b as is), or neither (kStrided).
enum class Layout : int64_t { kNContiguous = 0, kKContiguous = 1, kStrided = 2 };
Layout layout_of_b(const at::Tensor& b);

// The native kernel table as Python sees it (mymetaops._C._native_gemm_kernels): per row, the
// name, then input, tile_m, tile_n, tile_k, cluster_m, cluster_n, schedule, stages, max_split_k,
// warps, b_k_major_only, swap_ab (gemm.h's GemmKernelInfo). GPU builds set the provider; CPU builds have no
// table.
using KernelTableRow = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
using KernelTableProvider = std::vector<KernelTableRow> (*)();
void set_native_kernel_table_provider(KernelTableProvider provider);

}  // namespace mymetaops::gemm
