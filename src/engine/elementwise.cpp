// Element-wise model kernels with Highway. See jomoim/engine/elementwise.hpp.
// This file is compiled once per SIMD target (Highway's foreach_target re-includes it).
#include "jomoim/engine/elementwise.hpp"

#include <cmath>
#include <cstdint>

#include "jomoim/core/half.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace jomoim::elementwise {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kC = 0.044715f;

// Scalar forms for the tails, the same formulas.
inline float GeluScalar(float v) { return 0.5f * v * (1.0f + std::tanh(kK * (v + kC * v * v * v))); }
inline float GeluGradScalar(float v) {
  const float t = std::tanh(kK * (v + kC * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kK * (1.0f + 3.0f * kC * v * v);
}

void GeluTanh(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f), k = hn::Set(d, kK), c = hn::Set(d, kC);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto u = hn::Mul(k, hn::MulAdd(hn::Mul(c, hn::Mul(v, v)), v, v));
    hn::StoreU(hn::Mul(hn::Mul(half, v), hn::Add(one, hn::Tanh(d, u))), d, y + i);
  }
  for (; i < n; ++i) y[i] = GeluScalar(x[i]);
}

void GeluTanhBackward(const float* x, const float* dy, float* dx, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f), k = hn::Set(d, kK), c = hn::Set(d, kC),
             c3 = hn::Set(d, 3.0f * kC);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto v2 = hn::Mul(v, v);
    const auto t = hn::Tanh(d, hn::Mul(k, hn::MulAdd(hn::Mul(c, v2), v, v)));
    // 0.5 (1 + t) + 0.5 v (1 - t^2) k (1 + 3 c v^2)
    const auto sech2 = hn::NegMulAdd(t, t, one);
    const auto inner = hn::Mul(k, hn::MulAdd(c3, v2, one));
    const auto g = hn::Mul(half, hn::MulAdd(hn::Mul(v, sech2), inner, hn::Add(one, t)));
    hn::StoreU(hn::Mul(g, hn::LoadU(d, dy + i)), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = dy[i] * GeluGradScalar(x[i]);
}

// bf16_from_float on whole vectors: nearest, ties to even (add 0x7FFF plus the kept part's
// lowest bit, keep the high half); a NaN keeps its high half with the quiet bit set.
void RoundToBf16(const float* x, std::uint16_t* out, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint16_t, decltype(di)> d16;
  const size_t N = hn::Lanes(df);
  const auto one = hn::Set(du, 1u), bias = hn::Set(du, 0x7FFFu), quiet = hn::Set(du, 0x40u);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    const auto u = hn::BitCast(du, v);
    const auto high = hn::ShiftRight<16>(u);
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(bias, hn::And(high, one))));
    const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(high, quiet), rounded);
    // Every lane is below 2^16, so the saturating narrowing keeps it as it is.
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, bits)), d16, out + i);
  }
  for (; i < n; ++i) out[i] = bf16_from_float(x[i]);
}

// One row of LayerNorm: mean and variance summed in float64 (lanes of doubles, the tail in
// scalars), y = (x - mean) * rstd * g + b in float32.
void LayerNormRow(const float* x, size_t n, const float* g, const float* b, float eps, float* y, float* mean_out,
                  float* rstd_out) {
  double m = 0, var = 0;
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::Half<decltype(df)> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd);
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    s0 = hn::Add(s0, hn::PromoteTo(dd, hn::LowerHalf(dh, v)));
    s1 = hn::Add(s1, hn::PromoteTo(dd, hn::UpperHalf(dh, v)));
  }
  m = hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
#endif
  for (; i < n; ++i) m += x[i];
  m /= static_cast<double>(n);
  i = 0;
#if HWY_TARGET != HWY_SCALAR
  const auto md = hn::Set(dd, m);
  s0 = hn::Zero(dd);
  s1 = hn::Zero(dd);
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    const auto d0 = hn::Sub(hn::PromoteTo(dd, hn::LowerHalf(dh, v)), md);
    const auto d1 = hn::Sub(hn::PromoteTo(dd, hn::UpperHalf(dh, v)), md);
    s0 = hn::MulAdd(d0, d0, s0);
    s1 = hn::MulAdd(d1, d1, s1);
  }
  var = hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
#endif
  for (; i < n; ++i) var += (x[i] - m) * (x[i] - m);
  var /= static_cast<double>(n);
  const float r = static_cast<float>(1.0 / std::sqrt(var + eps));
  const float mf = static_cast<float>(m);
  i = 0;
#if HWY_TARGET != HWY_SCALAR
  const auto mv = hn::Set(df, mf), rv = hn::Set(df, r);
  for (; i + N <= n; i += N) {
    const auto v = hn::Mul(hn::Sub(hn::LoadU(df, x + i), mv), rv);
    hn::StoreU(hn::MulAdd(v, hn::LoadU(df, g + i), hn::LoadU(df, b + i)), df, y + i);
  }
#endif
  for (; i < n; ++i) y[i] = (x[i] - mf) * r * g[i] + b[i];
  if (mean_out) *mean_out = mf;
  if (rstd_out) *rstd_out = r;
}

float RowMax(const float* x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  float m = x[0];
  if (n >= N) {
    auto vm = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) vm = hn::Max(vm, hn::LoadU(d, x + i));
    m = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

double SumExp(const float* x, size_t n, float shift) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto s = hn::Set(d, shift);
  auto acc = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) acc = hn::Add(acc, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), s)));
  double total = 0;
  HWY_ALIGN float lanes[hn::MaxLanes(d)];
  hn::Store(acc, d, lanes);
  for (size_t j = 0; j < N; ++j) total += lanes[j];
  for (; i < n; ++i) total += std::exp(static_cast<double>(x[i]) - shift);
  return total;
}

void ExpScale(float* x, size_t n, float shift, float scale) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto s = hn::Set(d, shift), sc = hn::Set(d, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), s)), sc), d, x + i);
  for (; i < n; ++i) x[i] = std::exp(x[i] - shift) * scale;
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::elementwise
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim::elementwise {
HWY_EXPORT(GeluTanh);
HWY_EXPORT(GeluTanhBackward);
HWY_EXPORT(RoundToBf16);
HWY_EXPORT(LayerNormRow);
HWY_EXPORT(RowMax);
HWY_EXPORT(SumExp);
HWY_EXPORT(ExpScale);

void gelu_tanh(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(GeluTanh)(x, y, n); }
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhBackward)(x, dy, dx, n);
}
void round_to_bf16(const float* x, std::uint16_t* out, std::size_t n) { HWY_DYNAMIC_DISPATCH(RoundToBf16)(x, out, n); }
void layer_norm_row(const float* x, std::size_t n, const float* g, const float* b, float eps, float* y, float* mean,
                    float* rstd) {
  HWY_DYNAMIC_DISPATCH(LayerNormRow)(x, n, g, b, eps, y, mean, rstd);
}
float row_max(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
double sum_exp(const float* x, std::size_t n, float shift) { return HWY_DYNAMIC_DISPATCH(SumExp)(x, n, shift); }
void exp_scale(float* x, std::size_t n, float shift, float scale) {
  HWY_DYNAMIC_DISPATCH(ExpScale)(x, n, shift, scale);
}
}  // namespace jomoim::elementwise
#endif  // HWY_ONCE
