// jomoim/core/half.hpp — 16-bit floating-point storage: bfloat16 and IEEE binary16 (f16).
//
// The library computes in float32; 16-bit numbers are a storage format only. A 16-bit tensor is
// a view of std::uint16_t bit patterns plus its Dtype (C++20 has no standard 16-bit float type).
// Widening to float32 is exact for both formats (every bf16 and f16 number, subnormals,
// infinities and NaN included, is a float32 number). Narrowing rounds to nearest, ties to even;
// a NaN stays a NaN (quiet), a finite float beyond the format's range becomes an infinity.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

enum class Dtype : std::uint8_t { f32, bf16, f16 };

inline const char* dtype_name(Dtype t) {
  switch (t) {
    case Dtype::f32:
      return "f32";
    case Dtype::bf16:
      return "bf16";
    case Dtype::f16:
      return "f16";
  }
  return "?";
}

// "f32", "bf16", "f16" (also "float32", "bfloat16", "float16"); nullopt for anything else.
inline std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32") return Dtype::f32;
  if (s == "bf16" || s == "bfloat16") return Dtype::bf16;
  if (s == "f16" || s == "float16") return Dtype::f16;
  return std::nullopt;
}

// bfloat16: the upper half of a float32.
inline float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

inline std::uint16_t bf16_from_float(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);  // NaN, kept quiet
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // nearest, ties to even; overflow gives inf
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits; largest finite 65504.
inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (frac << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (frac << 13));
  // zero or subnormal: frac * 2^-24, exact in float32
  const float mag = float(frac) * 0x1p-24f;
  return sign ? -mag : mag;
}

inline std::uint16_t f16_from_float(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, kept quiet
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);                        // >= 65520 (or inf): rounds to inf
  if (a < 0x38800000u) {
    // below 2^-14: a subnormal (or zero) of f16, frac = round(|f| * 2^24), exact arithmetic in
    // float32 since |f| * 2^24 < 2^10 keeps 24 significant bits and nearbyint rounds ties to even
    const float scaled = std::bit_cast<float>(a) * 0x1p24f;  // exact: a power-of-two scaling
    // round to nearest even by the 2^23 trick (scaled < 1024, so adding 2^23 leaves integer steps)
    const float r = (scaled + 0x1p23f) - 0x1p23f;
    return std::uint16_t(sign | std::uint16_t(r));
  }
  // normal: rebias the exponent (127 -> 15) and round the 13 dropped fraction bits to even
  const std::uint32_t rebased = a - (112u << 23);
  return std::uint16_t(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

// The float32 value of one 16-bit number of the given format (bf16 or f16).
inline float half_to_float(std::uint16_t h, Dtype t) { return t == Dtype::bf16 ? bf16_to_float(h) : f16_to_float(h); }
inline std::uint16_t half_from_float(float f, Dtype t) {
  return t == Dtype::bf16 ? bf16_from_float(f) : f16_from_float(f);
}

// A read-only 4-d view of 16-bit storage: bit patterns, shape and strides (in elements) as for
// TensorView, and the format they are in (Dtype::bf16 or Dtype::f16).
struct ConstTensor4x16 {
  TensorView<const std::uint16_t, 4> bits;
  Dtype dtype = Dtype::bf16;

  ConstTensor4x16 transposed(std::size_t a, std::size_t b) const { return {bits.transposed(a, b), dtype}; }
  float operator()(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) const {
    return half_to_float(bits(i0, i1, i2, i3), dtype);
  }
};

}  // namespace jomoim
