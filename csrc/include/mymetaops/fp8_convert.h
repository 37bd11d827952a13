// Bit-exact float -> FP8 e4m3 conversion in software, for e4m3fn (OCP: bias 7, max 448, NaN 0x7f,
// has -0) and e4m3fnuz (bias 8, max 240, NaN 0x80 only, no -0). Round to nearest even, saturating:
// a finite value or infinity beyond the format's max becomes +-max (CUDA's __NV_SATFINITE; the same
// as converting clamp(v, -max, max)). NaN becomes the format's canonical NaN, whatever its sign:
// 0x7f (fn; what NVIDIA's cvt.rn.satfinite.e4m3x2.f32 writes; torch's .to(float8_e4m3fn) keeps the
// sign, 0xff for -NaN) or 0x80 (fnuz). -0 and negatives that round to zero are 0x80 in fn, 0x00 in
// fnuz.
//
// Used by hip/ (both CDNA archs and the HIP-on-CUDA shim); cuda/ converts with cuda_fp8.h, which
// this matches bit for bit on every fp32 input for e4m3fn. Vendor-free, so tests compile this very
// function with a host C++ compiler (tests/gemm/test_fp8_convert.py).
//
// How: with a = |v| saturated and E its biased fp32 exponent, raised to that of the format's
// smallest normal (so the subnormal range shares the spacing of the first binade), c =
// 2^(E - 127 + 20) has an ulp of 2^(E - 127 - 3), the format's spacing at a. a < 2^(E - 126) <= c,
// so the fp32 sum a + c stays in c's binade and its rounding (nearest even, the hardware default)
// rounds a to the FP8 grid; bits(a + c) - bits(c) counts a in FP8 ulps (8..16 above the subnormal
// range, 0..16 in it), and the code is ((E - E_min) << 3) plus that count: a carry to 16 is the
// next binade's mantissa 0. One fp32 add and a few integer ops per value; a flushed fp32 denormal
// input gives 0, as it must.
#pragma once
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIP__)
#define MYMETAOPS_HOST_DEVICE __host__ __device__
#else
#define MYMETAOPS_HOST_DEVICE
#endif

namespace mymetaops::fp8 {

template <bool kFnuz>
struct E4M3 {
  static constexpr float kMax = kFnuz ? 240.0f : 448.0f;
  // Biased fp32 exponent of the format's smallest normal: 2^-7 (fnuz), 2^-6 (fn).
  static constexpr uint32_t kMinNormalExp = kFnuz ? 120u : 121u;
  static constexpr uint32_t kNaN = kFnuz ? 0x80u : 0x7fu;
};

// The FP8 byte (in the low 8 bits) of v.
template <bool kFnuz>
MYMETAOPS_HOST_DEVICE inline uint32_t e4m3_from_float(float v) {
  using F = E4M3<kFnuz>;
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  const uint32_t mag = u & 0x7fffffffu;
  float a = __builtin_bit_cast(float, mag);
  a = a < F::kMax ? a : F::kMax;  // saturate (NaN too: its code is chosen at the end)
  uint32_t e = __builtin_bit_cast(uint32_t, a) >> 23;
  e = e > F::kMinNormalExp ? e : F::kMinNormalExp;
  const float c = __builtin_bit_cast(float, (e + 20u) << 23);
  const float sum = a + c;  // the one rounding
  uint32_t code = ((e - F::kMinNormalExp) << 3) +
                  (__builtin_bit_cast(uint32_t, sum) - __builtin_bit_cast(uint32_t, c));
  const uint32_t sign = (u >> 24) & 0x80u;
  if constexpr (kFnuz) {
    code = code == 0u ? 0u : code | sign;  // no negative zero
  } else {
    code |= sign;
  }
  return mag > 0x7f800000u ? F::kNaN : code;
}

}  // namespace mymetaops::fp8
