// The element-wise model kernels (jomoim/engine/elementwise.hpp) on every SIMD target.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/elementwise.hpp"
#include "jomoim/engine/simd.hpp"

namespace {

// elementwise::round_to_bf16 on every SIMD target: the same bits as bf16_from_float for every
// input, NaN payloads, subnormals and their ties included; nothing written past n.
TEST(Elementwise, RoundToBf16EveryTargetBitExact) {
  std::mt19937_64 rng(12);
  std::vector<float> x;
  for (int e = -149; e <= 127; e += 3) {  // every binade, subnormals to the largest
    std::uniform_real_distribution<float> frac(1.0f, 2.0f);
    for (int k = 0; k < 8; ++k) x.push_back((k % 2 ? -1.0f : 1.0f) * std::ldexp(frac(rng), e));
  }
  auto from_bits = [](std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (std::uint32_t u : {0x00008000u, 0x00018000u, 0x00017fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x3f808000u,
                          0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fff0001u,
                          0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu})
    x.push_back(from_bits(u));  // ties at subnormal, large and unit scale; overflow to inf; NaNs
  std::shuffle(x.begin(), x.end(), rng);
  for (const std::string& target : jomoim::simd_targets()) {
    jomoim::set_simd_target(target);
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(16), std::size_t(17),
                          std::size_t(33), x.size()}) {
      std::vector<std::uint16_t> got(n + 1, 0xDEAD);
      jomoim::elementwise::round_to_bf16(x.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t u;
        std::memcpy(&u, &x[i], 4);
        ASSERT_EQ(got[i], jomoim::bf16_from_float(x[i])) << target << " n " << n << " input bits 0x" << std::hex << u;
      }
      EXPECT_EQ(got[n], 0xDEAD) << target << " wrote past n = " << n;
    }
  }
  jomoim::set_simd_target("");
}

// layer_norm_row against a float64 LayerNorm of the same row: mean and variance summed in
// float64 (so a large common offset costs nothing), y within a few float32 roundings of each
// term; lengths around the vector widths; y in place (aliasing x) gives the same bits.
TEST(Elementwise, LayerNormRowMatchesFloat64EveryTarget) {
  std::mt19937_64 rng(13);
  for (const std::string& target : jomoim::simd_targets()) {
    jomoim::set_simd_target(target);
    for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(15), std::size_t(16), std::size_t(17),
                          std::size_t(33), std::size_t(256), std::size_t(1001)})
      for (double offset : {0.0, 1e4}) {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(n), g(n), b(n);
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = static_cast<float>(offset) + nd(rng) * (i % 7 == 0 ? 4.0f : 1.0f);
          g[i] = 1.0f + 0.3f * nd(rng);
          b[i] = 0.2f * nd(rng);
        }
        const float eps = 1e-5f;
        std::vector<float> y(n + 1, std::nanf("")), in_place = x;
        float mean = std::nanf(""), rstd = std::nanf("");
        jomoim::elementwise::layer_norm_row(x.data(), n, g.data(), b.data(), eps, y.data(), &mean, &rstd);
        double m = 0, v = 0;
        for (float t : x) m += t;
        m /= double(n);
        for (float t : x) v += (t - m) * (t - m);
        v /= double(n);
        const double r = 1.0 / std::sqrt(v + eps);
        EXPECT_NEAR(mean, m, 1e-6 * (std::fabs(m) + 1)) << target << " n " << n;
        EXPECT_NEAR(rstd, r, 1e-6 * r) << target << " n " << n;
        for (std::size_t i = 0; i < n; ++i) {
          const double want = (x[i] - m) * r * g[i] + b[i];
          // float32 (x - mean) loses up to |x| 2^-24; the products and the sum a few roundings.
          const double tol = 4e-7 * (std::fabs(x[i]) * r * std::fabs(g[i]) + std::fabs(want) + std::fabs(b[i])) + 1e-7;
          ASSERT_NEAR(y[i], want, tol) << target << " n " << n << " offset " << offset << " at " << i;
        }
        EXPECT_TRUE(std::isnan(y[n])) << target << " wrote past n = " << n;
        jomoim::elementwise::layer_norm_row(in_place.data(), n, g.data(), b.data(), eps, in_place.data(), nullptr,
                                            nullptr);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(in_place[i], y[i]) << target << " in place, n " << n;
      }
  }
  jomoim::set_simd_target("");
}

// gelu_tanh and its derivative against float64 on every target: within a few float32 roundings
// of the value (of the largest term for the derivative), for arguments across the curve and its
// flat tails, lengths around the vector widths, in place.
TEST(Elementwise, GeluTanhAndItsDerivativeMatchFloat64EveryTarget) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  // 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)): the same function without 1 + tanh's cancellation
  // (in float64 that form gives exactly 0 from x = -9 on, where the value is -1.3e-28).
  auto logistic = [&](double x) { return 1 / (1 + std::exp(-2 * k * (x + c * x * x * x))); };
  auto gelu = [&](double x) { return x * logistic(x); };
  auto grad = [&](double x) {
    const double s = logistic(x);
    return s + x * s * (1 - s) * 2 * k * (1 + 3 * c * x * x);
  };
  std::mt19937_64 rng(14);
  std::vector<float> x;
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, -1e-3f, 3.0f, -3.0f, 9.0f, -9.0f, 20.0f, -20.0f, 1e3f, -1e3f,
                  1e30f, -1e30f})
    x.push_back(v);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  while (x.size() < 1000) x.push_back(nd(rng));
  for (const std::string& target : jomoim::simd_targets()) {
    jomoim::set_simd_target(target);
    for (std::size_t n : {std::size_t(1), std::size_t(15), std::size_t(17), x.size()}) {
      std::vector<float> y(n + 1, std::nanf("")), dy(n), dx(n + 1, std::nanf(""));
      for (std::size_t i = 0; i < n; ++i) dy[i] = 1.0f + 0.25f * float(i % 5);
      jomoim::elementwise::gelu_tanh(x.data(), y.data(), n);
      jomoim::elementwise::gelu_tanh_backward(x.data(), dy.data(), dx.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        const double v = x[i], want = gelu(v), dwant = grad(v) * dy[i];
        // e^(-2u)'s argument is computed in float32: its rounding, about |2u| 2^-23 absolute,
        // becomes that relative error of the value in the tails.
        const double arg = std::min(std::fabs(2 * k * (v + c * v * v * v)), 88.0);
        ASSERT_NEAR(y[i], want, (4e-7 + 3e-7 * arg) * std::fabs(want) + 1e-37) << target << " gelu(" << v << ")";
        // The derivative's terms (s and x s (1 - s) 2k (1 + 3 c x^2)) are each within a few
        // roundings; near x = -1.7 they nearly cancel, so the bound is on their size.
        const double scale = (1 + std::fabs(v) * (1 + 3 * c * v * v)) * dy[i];
        ASSERT_NEAR(dx[i], dwant, (1e-6 + 3e-7 * arg) * scale) << target << " gelu'(" << v << ")";
      }
      EXPECT_TRUE(std::isnan(y[n]) && std::isnan(dx[n])) << target << " wrote past n = " << n;
      std::vector<float> in_place(x.begin(), x.begin() + std::ptrdiff_t(n));
      jomoim::elementwise::gelu_tanh(in_place.data(), in_place.data(), n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(in_place[i], y[i]) << target << " in place";
    }
  }
  jomoim::set_simd_target("");
}

}  // namespace
