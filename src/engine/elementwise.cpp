// Element-wise model kernels with Highway. See jomoim/engine/elementwise.hpp.
// This file is compiled once per SIMD target (Highway's foreach_target re-includes it).
#include "jomoim/engine/elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "jomoim/core/half.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "simd_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace jomoim::elementwise {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kC = 0.044715f;

// Scalar forms for the tails, the same formulas (LogisticOf2U below).
inline float LogisticOf2UScalar(float v, float* e_out = nullptr) {
  const float arg = -2.0f * kK * (v + kC * v * v * v);
  const float e = std::exp(std::min(arg, 88.0f));
  if (e_out) *e_out = e;
  return arg > 88.0f ? 0.0f : 1.0f / (1.0f + e);
}
inline float GeluScalar(float v) { return v * LogisticOf2UScalar(v); }
inline float GeluGradScalar(float v) {
  float e;
  const float s = LogisticOf2UScalar(v, &e), t = v * s * (s * e);           // 1 - s = e s
  return t == 0.0f ? s : s + t * (2.0f * kK) * (1.0f + 3.0f * kC * v * v);  // 0, not 0 * inf, in the tails
}

// GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = k (x + c x^3), is x s for the logistic
// s = 1 / (1 + e^(-2u)): one Exp and a reciprocal (the approximate one and a Newton step, about
// 1 ulp) instead of Tanh's Expm1 and division, which cost about 70 cycles a vector on the Intel
// Xeon here). Past e^88 (Exp is valid up to e^104) s is 0: the true value is below 1e-38.
// Also e = e^(-2u) (clamped), so that 1 - s = e s without cancellation.
template <class D, class V>
HWY_INLINE V LogisticOf2U(D d, V v, V* e_out = nullptr) {
  const auto m2k = hn::Set(d, -2.0f * kK), c = hn::Set(d, kC), one = hn::Set(d, 1.0f), two = hn::Set(d, 2.0f),
             limit = hn::Set(d, 88.0f);
  const auto arg = hn::Mul(m2k, hn::MulAdd(hn::Mul(c, hn::Mul(v, v)), v, v));
  const auto e = hn::Exp(d, hn::Min(arg, limit));
  if (e_out) *e_out = e;
  const auto den = hn::Add(one, e);
  const auto r = hn::ApproximateReciprocal(den);
  return hn::IfThenZeroElse(hn::Gt(arg, limit), hn::Mul(r, hn::NegMulAdd(den, r, two)));  // r (2 - den r)
}

void GeluTanh(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::Mul(v, LogisticOf2U(d, v)), d, y + i);
  }
  for (; i < n; ++i) y[i] = GeluScalar(x[i]);
}

void GeluTanhBackward(const float* x, const float* dy, float* dx, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f), k2 = hn::Set(d, 2.0f * kK), c3 = hn::Set(d, 3.0f * kC);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    auto e = hn::Zero(d);
    const auto s = LogisticOf2U(d, v, &e);
    // d/dx x s(2u) = s + x s (1 - s) 2 k (1 + 3 c x^2), 1 - s = e s; the second term 0 where
    // x s (1 - s) is (the tails, where 1 + 3 c x^2 may be infinite).
    const auto inner = hn::Mul(k2, hn::MulAdd(c3, hn::Mul(v, v), one));
    const auto t = hn::Mul(hn::Mul(v, s), hn::Mul(s, e));
    const auto g = hn::Add(s, hn::IfThenZeroElse(hn::Eq(t, hn::Zero(d)), hn::Mul(t, inner)));
    hn::StoreU(hn::Mul(g, hn::LoadU(d, dy + i)), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = dy[i] * GeluGradScalar(x[i]);
}

// bf16_from_float on whole vectors: nearest, ties to even (RoundedBf16Bits, simd_blocks-inl.h,
// keeping the high half); a NaN keeps its high half with the quiet bit set.
void RoundToBf16(const float* x, std::uint16_t* out, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint16_t, decltype(di)> d16;
  const size_t N = hn::Lanes(df);
  const auto quiet = hn::Set(du, 0x40u);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    const auto high = hn::ShiftRight<16>(hn::BitCast(du, v));
    const auto rounded = hn::ShiftRight<16>(detail::HWY_NAMESPACE::RoundedBf16Bits(v));
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
  const double m = detail::HWY_NAMESPACE::SumF64(x, n) / static_cast<double>(n);
  const double var = detail::HWY_NAMESPACE::SumSquaredDeviationsF64(x, n, m) / static_cast<double>(n);
  const float r = static_cast<float>(1.0 / std::sqrt(var + eps));
  const float mf = static_cast<float>(m);
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  const auto mv = hn::Set(df, mf), rv = hn::Set(df, r);
  for (; i + N <= n; i += N) {
    const auto v = hn::Mul(hn::Sub(hn::LoadU(df, x + i), mv), rv);
    hn::StoreU(hn::MulAdd(v, hn::LoadU(df, g + i), hn::LoadU(df, b + i)), df, y + i);
  }
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
