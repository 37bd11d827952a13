// The host half of the FP8 quantize launchers (mymetaops/gemm.h: QuantizeFp8Args), shared by
// cuda/gemm/quantize_fp8.cu and hip/gemm/quantize_fp8.hip so both vendors enforce one contract:
// the argument checks, the workspace size, the constants of the formula and the choice between the
// 16-byte vector path and the scalar fallback. Torch-free and vendor-free (host code for nvcc,
// clang -x hip and plain C++).
#pragma once

#include <cstdint>

#include "mymetaops/gemm.h"
#include "mymetaops/launch.h"

namespace mymetaops::quantize {

// inv = fp8_max / max(amax, kMinAmax)
constexpr float kMinAmax = 1e-12f;

constexpr float fp8_max(Fp8Format format) {
  return format == Fp8Format::kE4M3FNUZ ? 240.0f : 448.0f;
}

// Tensorwise workspace, 32-bit words: the global amax (the bits of a float >= 0, which order as
// unsigned integers: atomicMax), the blocks arrived at the grid barrier, and the release flag the
// last one sets once it has written the scale. Zeroed by the launcher on its stream before each
// launch.
constexpr int kWsAmax = 0, kWsArrived = 1, kWsRelease = 2;
constexpr int64_t kTensorwiseWorkspaceBytes = 16;

inline int64_t workspace_bytes(const QuantizeFp8Args& a) {
  return a.mode == ScaleMode::kTensorwise ? kTensorwiseWorkspaceBytes : 0;
}

inline bool has_elements(const QuantizeFp8Args& a) { return a.rows > 0 && a.cols > 0; }

inline LaunchError check(const QuantizeFp8Args& a) {
  if (!launch::is_float(a.x_dtype))
    return "quantize_fp8: x must be float32, float16 or bfloat16";
  if (a.format != Fp8Format::kE4M3FN && a.format != Fp8Format::kE4M3FNUZ)
    return "quantize_fp8: format must be e4m3fn or e4m3fnuz";
  if (a.mode != ScaleMode::kRowwise && a.mode != ScaleMode::kTensorwise)
    return "quantize_fp8: mode must be rowwise or tensorwise";
  if (a.rows < 0 || a.cols < 0 || a.ldx < 0) return "quantize_fp8: negative size or row stride";
  if (a.ldx < a.cols) return "quantize_fp8: row stride ldx is smaller than cols";
  // Kernels number the columns of a row in 32 bits; byte offsets are 64-bit.
  if (a.cols > INT32_MAX) return "quantize_fp8: cols must be below 2^31";
  if (a.ldx > INT64_MAX / 8 || (a.rows > 0 && a.cols > INT64_MAX / a.rows))
    return "quantize_fp8: sizes too large";
  if (a.mode == ScaleMode::kTensorwise && a.scale_ub != nullptr)
    return "quantize_fp8: scale_ub is for rowwise scales only";
  if (a.scale == nullptr && (a.mode == ScaleMode::kTensorwise || a.rows > 0))
    return "quantize_fp8: null scale";
  if (has_elements(a) && (a.x == nullptr || a.xq == nullptr))
    return "quantize_fp8: null x or xq";
  if (a.mode == ScaleMode::kTensorwise && a.workspace == nullptr)
    return "quantize_fp8: null workspace (fp8_quantize_workspace_bytes() bytes)";
  return nullptr;
}

// Elements per vector access: 16 bytes of x (8 elements of 16 bits, 4 of fp32; xq gets 8 or 4
// bytes) when x, its row stride, xq and cols allow it, else 1 (the scalar fallback, same kernels).
inline int vector_elements(const QuantizeFp8Args& a) {
  const int elt = launch::element_bytes(a.x_dtype);
  const int vec = 16 / elt;
  const bool ok = launch::aligned(a.x, 16) && (a.rows <= 1 || (a.ldx * elt) % 16 == 0) &&
                  a.cols % vec == 0 && launch::aligned(a.xq, vec);
  return ok ? vec : 1;
}

}  // namespace mymetaops::quantize
