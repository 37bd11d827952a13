// Launchers of the GEMM family (FP8 GEMM, bf16/fp16 GEMM, FP8 quantization), implemented once per
// vendor: cuda/gemm/*.cu and hip/gemm/*.hip define the same symbols; a build links one of them.
//
// Conventions (the torch glue in csrc/gemm/ guarantees them before calling):
//  * Row-major everywhere, "nn.Linear" form: out[M, N] = x[M, K] . w[N, K]^T. Every operand has
//    its last dimension contiguous and a row stride (ld*, in elements) that is >= that dimension.
//  * FP8 operands are one byte per element in `format`: e4m3fn (NVIDIA, gfx950; max 448) or
//    e4m3fnuz (gfx942; max 240). FP8 GEMMs need K % 16 == 0 and 16-byte aligned rows.
//  * Scales dequantize: x ~= float(xq) * x_scale[m], w ~= float(wq) * w_scale[n] (rowwise), or one
//    fp32 scalar each (tensorwise). out = (sum_k float(xq[m,k]) * float(wq[n,k])) * x_scale[m] *
//    w_scale[n] + bias[n], accumulated in fp32, rounded once to out_dtype.
//  * bias is [N] in out_dtype (nullptr = none).
//  * A native kernel is named by its index in the vendor's table (native_gemm_kernels); the model
//    (mymetaops/model/gemm.py) mirrors the table and picks one per problem.
#pragma once
#include <cstdint>

#include "mymetaops/types.h"

namespace mymetaops {

enum class Fp8Format : int32_t { kE4M3FN = 0, kE4M3FNUZ = 1 };
enum class ScaleMode : int32_t { kTensorwise = 0, kRowwise = 1 };
enum class GemmInput : int32_t { kFp8 = 0, kBFloat16 = 1, kFloat16 = 2 };

// How a native kernel walks its tiles (what the model's wave-quantization term needs).
enum class GemmSchedule : int32_t {
  kDataParallel = 0,  // one CTA/workgroup per output tile, a grid of tiles
  kPersistent = 1,    // one CTA per SM/CU loops over tiles (cooperative or ping-pong)
  kStreamK = 2,       // persistent, the last wave's K iterations shared out across CTAs
};

// One row of a vendor's kernel table: what the kernel computes and its tile shape.
struct GemmKernelInfo {
  const char* name;        // e.g. "fp8_128x128x128_c2x1_pingpong"; unique within the table
  GemmInput input;         // operand type
  int32_t tile_m, tile_n, tile_k;
  int32_t cluster_m, cluster_n;  // thread-block cluster (1, 1 where none, e.g. on AMD)
  GemmSchedule schedule;
  int32_t stages;          // K tiles in flight (smem/LDS pipeline depth)
  int32_t max_split_k;     // largest GemmConfig.split_k it accepts (1: no split-K)
  int32_t warps;           // warps/wavefronts per CTA/workgroup (consumers + producers)
  int32_t b_k_major_only;  // 1: w must be [N, K] (K contiguous); 0: also [K, N] (GemmArgs.w_kn)
  int32_t swap_ab = 0;     // 1: computes out^T = wq . xq^T, its tile_m along N and tile_n along M
};

// The kernels this build has; *count receives how many. Same table on every call.
const GemmKernelInfo* native_gemm_kernels(int32_t* count);

// Chosen by mymetaops.model (Python) and passed through unchanged.
struct GemmConfig {
  int32_t kernel;   // index into native_gemm_kernels()
  int32_t split_k;  // 1, or K cut into split_k slices reduced in fp32 (<= the kernel's max_split_k;
                    // ignored by stream-K kernels, which balance K on their own)
};

struct Fp8GemmArgs {
  const void* xq;  // [m, k] fp8, row stride ldx
  const void* wq;  // [n, k] fp8, row stride ldw
  int64_t m, n, k;
  int64_t ldx, ldw;
  Fp8Format format;
  ScaleMode scale_mode;
  const float* x_scale;  // [m] (rowwise) or [1] (tensorwise)
  const float* w_scale;  // [n] (rowwise) or [1] (tensorwise)
  const void* bias;      // [n] in out_dtype, or nullptr
  void* out;             // [m, n], row stride ldo
  int64_t ldo;
  DType out_dtype;       // kBFloat16 (every kernel); kFloat16 / kFloat32 where a kernel has them
  void* workspace;       // fp8_gemm_workspace_bytes() bytes, 256-byte aligned (nullptr when 0)
};

// Scratch the launch needs (split-K partials, stream-K fixup, CUTLASS's own); 0 when none.
int64_t fp8_gemm_workspace_bytes(const Fp8GemmArgs& args, const GemmConfig& config);
LaunchError launch_fp8_gemm(const Fp8GemmArgs& args, const GemmConfig& config, void* stream);

// bf16 / fp16 GEMM: out[m, n] = a[m, k] . B + bias, B = w[n, k]^T (w_kn = false) or w[k, n]
// (w_kn = true, torch.mm's b as it is). a, w, bias and out share `dtype`.
struct GemmArgs {
  const void* a;  // [m, k], row stride lda
  const void* w;  // [n, k] (row stride ldw) or, with w_kn, [k, n] (row stride ldw)
  int64_t m, n, k;
  int64_t lda, ldw;
  bool w_kn;
  DType dtype;       // kBFloat16 or kFloat16
  const void* bias;  // [n] or nullptr
  void* out;         // [m, n], row stride ldo
  int64_t ldo;
  void* workspace;
};

int64_t gemm_workspace_bytes(const GemmArgs& args, const GemmConfig& config);
LaunchError launch_gemm(const GemmArgs& args, const GemmConfig& config, void* stream);

// FP8 quantization, one pass over x:
//   amax = max |x| over the row (rowwise) or the whole tensor (tensorwise); rowwise with scale_ub:
//          amax = min(amax, *scale_ub)
//   inv  = fp8_max / max(amax, 1e-12f)          (fp32 division; fp8_max 448 fn / 240 fnuz)
//   xq   = fp8(saturate(x * inv, +-fp8_max))     (round to nearest even)
//   scale = 1.0f / inv                           (so x ~= float(xq) * scale)
// Tensorwise finds the global amax inside the same launch (a grid-wide reduction), then
// quantizes; its workspace is fp8_quantize_workspace_bytes() bytes, zeroed by the launcher
// itself on `stream` (nothing for the caller to reset).
struct QuantizeFp8Args {
  const void* x;  // [rows, cols], row stride ldx
  DType x_dtype;  // kFloat32, kFloat16 or kBFloat16
  int64_t rows, cols, ldx;
  Fp8Format format;
  ScaleMode mode;
  const float* scale_ub;  // rowwise only: device scalar, or nullptr
  void* xq;               // [rows, cols] contiguous fp8
  float* scale;           // [rows] (rowwise) or [1] (tensorwise)
  void* workspace;
};

int64_t fp8_quantize_workspace_bytes(const QuantizeFp8Args& args);
LaunchError launch_quantize_fp8(const QuantizeFp8Args& args, void* stream);

}  // namespace mymetaops
