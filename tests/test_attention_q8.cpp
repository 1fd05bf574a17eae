// test_attention_q8.cpp — the q8 and q4 formats, attention_q8kv and attention_q4kv
// (jomoim/engine/quant.hpp).
//
// Oracle: the float64 reference (attention_reference) on the dequantized keys and values, so
// only the fast path's float32 arithmetic is measured, with the same worst-case rounding bound
// as the other attention tests; every SIMD target, 1 and 2 threads; outputs poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention_test_util.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/simd.hpp"

namespace {

using jomoim::ConstTensor4;
using jomoim::Tensor4;
using I64 = std::int64_t;

using attn_test::Rng;

constexpr std::uint32_t kPoisonBits = 0x7fdeadbeu;
float poison() { return std::bit_cast<float>(kPoisonBits); }

std::vector<float> random_values(I64 n, Rng& rng, float amp) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = rng.uniform(amp);
  return x;
}

// fn()'s jomoim::Error message, or "no error".
template <class F>
std::string message(F&& fn) {
  try {
    fn();
  } catch (const jomoim::Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

struct PinTarget {
  explicit PinTarget(const std::string& t) { jomoim::set_simd_target(t); }
  ~PinTarget() { jomoim::set_simd_target(""); }
};

TEST(Q8, RoundTripIsWithinHalfAScaleAndScalesAreMaxOver127) {
  Rng rng{7};
  for (I64 block : {16, 32, 64}) {
    const std::array<I64, 4> shape = {2, 3, 5, 64};
    std::vector<float> x = random_values(2 * 3 * 5 * 64, rng, 3.0f);
    std::fill(x.begin(), x.begin() + block, 0.0f);  // an all-zero block
    x[std::size_t(block) + 3] = 1e-30f;             // a tiny value next to normal ones
    const ConstTensor4 xv = ConstTensor4::contiguous(x.data(), shape);
    const jomoim::Q8Buffer q = jomoim::quantize_q8(xv, block);
    ASSERT_EQ(q.scales.size(), x.size() / std::size_t(block));
    std::vector<float> back(x.size(), poison());
    jomoim::dequantize_q8(q.view(), Tensor4::contiguous(back.data(), shape));
    for (std::size_t b = 0; b < q.scales.size(); ++b) {
      float amax = 0;
      for (I64 i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b * std::size_t(block) + std::size_t(i)]));
      EXPECT_EQ(q.scales[b], amax / 127.0f) << "block " << b;
      for (I64 i = 0; i < block; ++i) {
        const std::size_t at = b * std::size_t(block) + std::size_t(i);
        EXPECT_GE(q.values[at], -127);
        EXPECT_LE(q.values[at], 127);
        EXPECT_LE(std::fabs(back[at] - x[at]), 0.5001f * q.scales[b] + 1e-37f) << "element " << at;
      }
    }
    for (I64 i = 0; i < block; ++i) EXPECT_EQ(back[std::size_t(i)], 0.0f);
  }
}

TEST(Q8, StridedInputQuantizesLikeContiguous) {
  Rng rng{11};
  const std::array<I64, 4> shape = {1, 2, 3, 32};
  std::vector<float> x = random_values(1 * 2 * 3 * 32, rng, 1.0f);
  // The same logical tensor stored [B, N, H, D] (heads interleaved).
  std::vector<float> y(x.size());
  for (I64 h = 0; h < 2; ++h)
    for (I64 n = 0; n < 3; ++n)
      for (I64 d = 0; d < 32; ++d) y[std::size_t((n * 2 + h) * 32 + d)] = x[std::size_t((h * 3 + n) * 32 + d)];
  ConstTensor4 yv{y.data(), shape, {2 * 3 * 32, 32, 2 * 32, 1}};
  const auto a = jomoim::quantize_q8(ConstTensor4::contiguous(x.data(), shape));
  const auto b = jomoim::quantize_q8(yv);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.scales, b.scales);
}

// Rows of contiguous values take the vectorized kernel, any other innermost stride the scalar
// definition: the same bits on every SIMD target, ties (x / d exactly k + 1/2, rounded to even)
// and all-zero blocks included.
TEST(Q8, VectorizedRowsQuantizeLikeTheScalarDefinitionOnEveryTarget) {
  Rng rng{13};
  int checked = 0;
  for (const std::string& target : jomoim::simd_targets()) {
    PinTarget pin(target);
    for (I64 block : {16, 32, 48, 64})
      for (I64 D : {block, 3 * block}) {
        const std::array<I64, 4> shape = {2, 3, 5, D};
        const I64 n = 2 * 3 * 5 * D;
        std::vector<float> x = random_values(n, rng, 4.0f);
        std::fill(x.begin(), x.begin() + block, 0.0f);  // an all-zero block
        // A block whose scale is 1: 127 and halves in between, each a tie.
        x[std::size_t(block)] = 127.0f;
        for (I64 i = 1; i < block; ++i) x[std::size_t(block + i)] = float(i % 9) - 4.5f;
        // The same values at every other element: innermost stride 2, the scalar path.
        std::vector<float> wide(2 * std::size_t(n), poison());
        for (I64 i = 0; i < n; ++i) wide[2 * std::size_t(i)] = x[std::size_t(i)];
        const ConstTensor4 strided{wide.data(), shape, {3 * 5 * D * 2, 5 * D * 2, D * 2, 2}};
        const auto fast = jomoim::quantize_q8(ConstTensor4::contiguous(x.data(), shape), block);
        const auto slow = jomoim::quantize_q8(strided, block);
        ASSERT_EQ(fast.values, slow.values) << target << " block " << block << " D " << D;
        ASSERT_EQ(fast.scales, slow.scales) << target << " block " << block << " D " << D;
        // The ties went to even: 127 / 127 = 1, so q = x rounded half to even.
        for (I64 i = 1; i < block; ++i) {
          const float v = x[std::size_t(block + i)];
          ASSERT_EQ(fast.values[std::size_t(block + i)], std::int8_t(std::nearbyint(v))) << target << " " << v;
        }
        ++checked;
      }
  }
  EXPECT_GE(checked, 8);
}

TEST(Q8, Refusals) {
  std::vector<float> x(2 * 32, 0.5f);
  const ConstTensor4 xv = ConstTensor4::contiguous(x.data(), {1, 1, 2, 32});
  EXPECT_NE(message([&] { jomoim::quantize_q8(xv, 24); }).find("multiple of 16"), std::string::npos);
  EXPECT_NE(message([&] { jomoim::quantize_q8(xv, 0); }).find("multiple of 16"), std::string::npos);
  EXPECT_NE(message([&] { jomoim::quantize_q8(xv, 64); }).find("does not divide D = 32"), std::string::npos);
  x[37] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message([&] { jomoim::quantize_q8(xv); }).find("non-finite value nan at index [0, 0, 1, 5]"),
            std::string::npos);
  x[37] = std::numeric_limits<float>::infinity();
  EXPECT_NE(message([&] { jomoim::quantize_q8(xv); }).find("non-finite"), std::string::npos);
  x[37] = 0.5f;
  // Nothing written on refusal.
  jomoim::Q8Buffer q = jomoim::quantize_q8(xv);
  const auto before = q.values;
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = 100.0f;
  EXPECT_THROW(jomoim::quantize_q8(xv, q.view()), jomoim::Error);
  EXPECT_EQ(q.values, before);
  x[0] = 0.5f;
  // Shapes.
  std::vector<float> other(3 * 32);
  EXPECT_NE(message([&] {
              jomoim::quantize_q8(ConstTensor4::contiguous(other.data(), {1, 1, 3, 32}), q.view());
            }).find("differs"),
            std::string::npos);
  // attention_q8kv: probs refused, shapes checked, out must not overlap the q8 arrays.
  std::vector<float> qv(32, 0.1f), out(32), probs(2);
  const ConstTensor4 qq = ConstTensor4::contiguous(qv.data(), {1, 1, 1, 32});
  jomoim::AttentionOptions o;
  o.probs = jomoim::Tensor4::contiguous(probs.data(), {1, 1, 1, 2});
  EXPECT_NE(message([&] {
              jomoim::attention_q8kv(qq, q.view(), q.view(), Tensor4::contiguous(out.data(), {1, 1, 1, 32}), o);
            }).find("probs"),
            std::string::npos);
  EXPECT_NE(message([&] {
              jomoim::attention_q8kv(qq, q.view(), q.view(), Tensor4::contiguous(out.data(), {1, 1, 2, 32}));
            }).find("out: expected shape"),
            std::string::npos);
  Tensor4 over = Tensor4::contiguous(q.scales.data(), {1, 1, 1, 2});
  jomoim::Q8Buffer v2 = jomoim::quantize_q8(ConstTensor4::contiguous(x.data(), {1, 1, 2, 32}), 16);
  EXPECT_NE(message([&] {
              jomoim::attention_q8kv(
                  qq, q.view(), v2.view(),
                  Tensor4{reinterpret_cast<float*>(v2.values.data()), {1, 1, 1, 32}, {32, 32, 32, 1}});
            }).find("overlaps the q8 input v"),
            std::string::npos);
  (void)over;
}

struct Q8Case {
  std::string name;
  I64 B, Hq, Hkv, Nq, Nk, D, Dv, block;
  bool causal = false, bias = false, key_lengths = false, col = false;
};

// q4 = true: the same case in q4 (attention_q4kv against the reference on q4's dequantized k, v).
void check_case(const Q8Case& c, int threads, const std::string& target, bool q4 = false) {
  Rng rng{std::hash<std::string>()(c.name) ^ std::uint64_t(threads)};
  std::vector<float> q = random_values(c.B * c.Hq * c.Nq * c.D, rng, 1.0f);
  std::vector<float> k = random_values(c.B * c.Hkv * c.Nk * c.D, rng, 2.0f);
  std::vector<float> v = random_values(c.B * c.Hkv * c.Nk * c.Dv, rng, 1.5f);
  const ConstTensor4 kf = ConstTensor4::contiguous(k.data(), {c.B, c.Hkv, c.Nk, c.D});
  const ConstTensor4 vf = ConstTensor4::contiguous(v.data(), {c.B, c.Hkv, c.Nk, c.Dv});
  std::vector<float> kd(k.size(), poison()), vd(v.size(), poison());
  const Tensor4 kdv = Tensor4::contiguous(kd.data(), {c.B, c.Hkv, c.Nk, c.D});
  const Tensor4 vdv = Tensor4::contiguous(vd.data(), {c.B, c.Hkv, c.Nk, c.Dv});
  jomoim::Q8Buffer kq, vq;
  jomoim::Q4Buffer kq4, vq4;
  if (q4) {
    kq4 = jomoim::quantize_q4(kf, c.block);
    vq4 = jomoim::quantize_q4(vf, c.block);
    jomoim::dequantize_q4(kq4.view(), kdv);
    jomoim::dequantize_q4(vq4.view(), vdv);
  } else {
    kq = jomoim::quantize_q8(kf, c.block);
    vq = jomoim::quantize_q8(vf, c.block);
    jomoim::dequantize_q8(kq.view(), kdv);
    jomoim::dequantize_q8(vq.view(), vdv);
  }

  jomoim::AttentionOptions o;
  o.causal = c.causal;
  o.threads = threads;
  std::vector<float> bias;
  if (c.bias) {
    bias = random_values(c.Nq * c.Nk, rng, 2.0f);
    for (std::size_t i = 0; i < bias.size(); i += 3) bias[i] = -std::numeric_limits<float>::infinity();
    o.bias = ConstTensor4{bias.data(), {1, 1, c.Nq, c.Nk}, {0, 0, c.Nk, 1}};
  }
  std::vector<I64> lengths;
  if (c.key_lengths) {
    for (I64 b = 0; b < c.B; ++b) lengths.push_back((b * 7 + 3) % (c.Nk + 1));
    o.key_lengths = lengths;
  }
  // q and out in the caller's notation; 3b1b: [B, H, D, N] read through strides.
  ConstTensor4 qv = ConstTensor4::contiguous(q.data(), {c.B, c.Hq, c.Nq, c.D});
  std::vector<float> out(std::size_t(c.B * c.Hq * c.Nq * c.Dv), poison());
  std::vector<float> lse(std::size_t(c.B * c.Hq * c.Nq), poison());
  Tensor4 ov = Tensor4::contiguous(out.data(), {c.B, c.Hq, c.Nq, c.Dv});
  if (c.col) {
    o.notation = jomoim::Notation::col3b1b;
    qv = qv.transposed(2, 3);
    ov = ov.transposed(2, 3);
  }
  o.lse = jomoim::Tensor3::contiguous(lse.data(), {c.B, c.Hq, c.Nq});
  {
    PinTarget pin(target);
    if (q4)
      jomoim::attention_q4kv(qv, kq4.view(), vq4.view(), ov, o);
    else
      jomoim::attention_q8kv(qv, kq.view(), vq.view(), ov, o);
  }
  // The reference on the dequantized k and v, in the same notation.
  ConstTensor4 kv = ConstTensor4::contiguous(kd.data(), {c.B, c.Hkv, c.Nk, c.D});
  ConstTensor4 vv = ConstTensor4::contiguous(vd.data(), {c.B, c.Hkv, c.Nk, c.Dv});
  if (c.col) {
    kv = kv.transposed(2, 3);
    vv = vv.transposed(2, 3);
  }
  const jomoim::ReferenceResult ref = jomoim::attention_reference(qv, kv, vv, o);
  // Float32's worst-case rounding bound, as in the other attention tests: with S the largest
  // scale * sum_d |q_d k_d| (+ |bias|) of any row and key, |out - ref| <= u (2 D S + 2 Nk + 16) max|v|.
  double S = 0;
  const double scale = 1.0 / std::sqrt(double(c.D));
  for (I64 b = 0; b < c.B; ++b)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i)
        for (I64 j = 0; j < c.Nk; ++j) {
          double a = 0;
          for (I64 d = 0; d < c.D; ++d)
            a += std::fabs(double(q[std::size_t(((b * c.Hq + h) * c.Nq + i) * c.D + d)]) *
                           double(kd[std::size_t(((b * c.Hkv + h / (c.Hq / c.Hkv)) * c.Nk + j) * c.D + d)]));
          S = std::max(S, scale * a + (c.bias ? 2.0 : 0.0));
        }
  float vmax = 0;
  for (float x : vd) vmax = std::max(vmax, std::fabs(x));
  const double u = 0x1p-24;
  const double tol = u * (2.0 * double(c.D) * S + 2.0 * double(c.Nk) + 16.0) * vmax;
  const double tol_lse = u * (2.0 * double(c.D) * S + 2.0 * double(c.Nk) + 16.0);
  double worst = 0, worst_lse = 0, sum_err = 0;
  I64 count = 0;
  for (I64 b = 0; b < c.B; ++b)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i) {
        const std::size_t row = std::size_t((b * c.Hq + h) * c.Nq + i);
        for (I64 e = 0; e < c.Dv; ++e) {
          const double got = out[row * std::size_t(c.Dv) + std::size_t(e)];
          const double want = ref.out[row * std::size_t(c.Dv) + std::size_t(e)];
          ASSERT_FALSE(std::isnan(got)) << c.name << " out" << row << "," << e << " (poison left?)";
          worst = std::max(worst, std::fabs(got - want));
          sum_err += std::fabs(got - want);
          ++count;
        }
        const double gl = lse[row], wl = ref.lse[row];
        if (std::isinf(wl)) {
          EXPECT_EQ(gl, wl) << c.name << " lse row " << row;
        } else {
          worst_lse = std::max(worst_lse, std::fabs(gl - wl));
        }
      }
  const char* format = q4 ? "q4" : "q8";
  EXPECT_LE(worst, tol) << format << " " << c.name << " target " << target << " threads " << threads;
  // The worst case is loose (linear in Nk); typical errors are random walks. The mean error must
  // stay near the rounding of the output itself: 4 u max|v| (measured: at most 0.25 u).
  if (count > 0) {
    EXPECT_LE(sum_err / double(count), 4.0 * u * vmax)
        << format << " " << c.name << " target " << target << " threads " << threads;
  }
  if (std::getenv("JOMOIM_Q8_PRINT"))
    std::printf("%s %-22s %-6s t%d worst %.3g (tol %.3g) mean %.3g (%.2f u max|v|)\n", format, c.name.c_str(),
                target.c_str(), threads, worst, tol, count ? sum_err / double(count) : 0.0,
                count ? sum_err / double(count) / (u * vmax) : 0.0);
  EXPECT_LE(worst_lse, tol_lse) << format << " " << c.name << " target " << target << " threads " << threads;
}

TEST(Q8, AttentionMatchesTheReferenceOnTheDequantizedInputs) {
  const std::vector<Q8Case> cases = {
      {"decode mha", 1, 4, 4, 1, 700, 64, 64, 32},
      {"decode gqa d128", 1, 8, 2, 1, 1100, 128, 128, 32},
      {"decode one key", 2, 2, 1, 1, 1, 32, 16, 16},
      {"no keys", 1, 2, 2, 3, 0, 32, 32, 32},
      {"few rows causal", 2, 3, 1, 5, 300, 48, 32, 16, true},
      {"prefill-sized causal", 1, 2, 2, 37, 37, 32, 64, 32, true},
      {"bias with -inf", 1, 2, 1, 3, 260, 64, 32, 32, false, true},
      {"key lengths", 3, 2, 2, 2, 513, 32, 32, 32, false, false, true},
      {"3b1b", 1, 2, 1, 4, 90, 32, 48, 16, true, false, false, true},
      {"block = D", 1, 4, 4, 1, 500, 64, 64, 64},
      // One row per K/V head with blocks of 16 and Dv = 48: one, two or four vectors a block
      // across the targets, and Dv not a whole number of the widest column groups.
      {"decode mha block 16", 1, 3, 3, 1, 77, 32, 48, 16},
      // One row per K/V head, one block per row (the per-token-per-head scale), and key counts
      // that leave a tail after the groups of 8.
      {"decode mha block = D 128", 2, 2, 2, 1, 1029, 128, 128, 128},
      // Four query rows a K/V head (on CPUs with AMX-INT8 their scores go to the tiles in groups
      // of 16 keys, the rest on the float path): every chunk width of the tiles (blocks of 16,
      // 48 = 3 x 16, 64, 128 = 2 x 64), blocks per row from 1 to 8, key counts with and without a
      // tail after the groups of 16, and a split over two threads.
      {"grouped block 16 d16", 1, 8, 2, 1, 35, 16, 16, 16},
      {"grouped block 48 d96", 1, 4, 1, 1, 273, 96, 48, 48},
      {"grouped block 64 d256", 1, 8, 2, 1, 512, 256, 64, 64},
      {"grouped block 128 d128", 2, 4, 1, 2, 300, 128, 128, 128},
      {"grouped block 32 d256 causal", 1, 4, 1, 9, 333, 256, 32, 32, true},
      // Their P·V with Dv 128 in blocks of 32 (the decode benchmarks' shape: two column slices of
      // four vectors on AVX-512), and Dv 80 in blocks of 16 (on AVX-512 a one-vector slice after
      // a four-vector one).
      {"grouped block 32 dv 128", 1, 8, 2, 1, 700, 128, 128, 32},
      {"grouped block 16 dv 80", 2, 4, 1, 1, 201, 32, 80, 16},
      // P·V on weight planes (each weight times its key's scale of each V block, where a V row
      // has 2 or 4 blocks and a slice of columns lies in one): blocks of 64 (AVX-512 too), of
      // 32 and 16 (the 16-register targets), items of 8 rows and of 1.
      {"planes 2 blocks of 64", 1, 8, 2, 1, 419, 64, 128, 64},
      {"planes 4 blocks of 32, 9 rows", 1, 6, 2, 3, 259, 64, 128, 32},
      {"planes 2 blocks of 16 causal", 2, 4, 2, 2, 301, 32, 32, 16, true},
  };
  for (const std::string& t : jomoim::simd_targets())
    for (int threads : {1, 2})
      for (const Q8Case& c : cases) check_case(c, threads, t);
}

// One decode step (batch 1, one position) of Hq heads of width D with `target` pinned, into a
// poisoned output.
std::vector<float> decode_on(const std::string& target, const std::vector<float>& q, I64 Hq, I64 D,
                             const jomoim::Q8Buffer& kq, const jomoim::Q8Buffer& vq) {
  std::vector<float> out(std::size_t(Hq * D), poison());
  PinTarget pin(target);
  jomoim::attention_q8kv(ConstTensor4::contiguous(q.data(), {1, Hq, 1, D}), kq.view(), vq.view(),
                         Tensor4::contiguous(out.data(), {1, Hq, 1, D}), jomoim::AttentionOptions{});
  return out;
}

std::vector<float> decode_on(const std::string& target, const std::vector<float>& q, I64 Hq, I64 D,
                             const jomoim::Q4Buffer& kq, const jomoim::Q4Buffer& vq) {
  std::vector<float> out(std::size_t(Hq * D), poison());
  PinTarget pin(target);
  jomoim::attention_q4kv(ConstTensor4::contiguous(q.data(), {1, Hq, 1, D}), kq.view(), vq.view(),
                         Tensor4::contiguous(out.data(), {1, Hq, 1, D}));
  return out;
}

// A non-finite query value reaches its own row's output as NaN and no other row's, whether the
// row's scores go through the AMX tiles or not (a four-row group with a NaN keeps the float path).
TEST(Q8, ANonFiniteQueryValueStaysInItsRow) {
  const I64 Hq = 8, Hkv = 2, Nk = 100, D = 64;
  Rng rng{7};
  std::vector<float> q = random_values(Hq * D, rng, 1.0f), k = random_values(Hkv * Nk * D, rng, 1.0f),
                     v = random_values(Hkv * Nk * D, rng, 1.0f);
  const auto kq = jomoim::quantize_q8(ConstTensor4::contiguous(k.data(), {1, Hkv, Nk, D}), 32);
  const auto vq = jomoim::quantize_q8(ConstTensor4::contiguous(v.data(), {1, Hkv, Nk, D}), 32);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> qb = q;
    qb[std::size_t(5 * D + 3)] = bad;  // head 5: the second group's second row
    for (const std::string& target : jomoim::simd_targets()) {
      const std::vector<float> out = decode_on(target, qb, Hq, D, kq, vq);
      for (I64 h = 0; h < Hq; ++h)
        for (I64 e = 0; e < D; ++e) {
          const float got = out[std::size_t(h * D + e)];
          if (h == 5)
            EXPECT_TRUE(std::isnan(got)) << target << " head " << h << " " << e;
          else
            EXPECT_TRUE(std::isfinite(got)) << target << " head " << h << " " << e;
        }
    }
  }
}

// A non-finite V block scale reaches the outputs of the heads that read it, in that block's
// columns, and nothing else: four query rows a K/V head (their scores on the AMX tiles where the
// CPU has them), on every target; with blocks of 32 and with one scale a row (block = D, whose
// scales the kernel folds into the weights before P·V: 0 times the bad scale under the other
// keys' weights stays out of the other heads).
TEST(Q8, ANonFiniteValueScaleStaysInItsBlock) {
  const I64 Hq = 8, Hkv = 2, Nk = 100, D = 64;
  Rng rng{11};
  std::vector<float> q = random_values(Hq * D, rng, 1.0f), k = random_values(Hkv * Nk * D, rng, 1.0f),
                     v = random_values(Hkv * Nk * D, rng, 1.0f);
  for (I64 block : {32, 64}) {
    const auto kq = jomoim::quantize_q8(ConstTensor4::contiguous(k.data(), {1, Hkv, Nk, D}), block);
    const I64 bad_block = D / block - 1;  // the last block of the row
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto vq = jomoim::quantize_q8(ConstTensor4::contiguous(v.data(), {1, Hkv, Nk, D}), block);
      vq.scales[std::size_t((1 * Nk + 40) * (D / block) + bad_block)] = bad;  // K/V head 1, key 40
      for (const std::string& target : jomoim::simd_targets()) {
        const std::vector<float> out = decode_on(target, q, Hq, D, kq, vq);
        for (I64 h = 0; h < Hq; ++h)
          for (I64 e = 0; e < D; ++e) {
            const float got = out[std::size_t(h * D + e)];
            const std::string at =
                target + " block " + std::to_string(block) + " head " + std::to_string(h) + " " + std::to_string(e);
            if (h >= 4 && e >= bad_block * block)
              EXPECT_FALSE(std::isfinite(got)) << at;
            else
              EXPECT_TRUE(std::isfinite(got)) << at;
          }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// q4

TEST(Q4, RoundTripIsWithinHalfAScaleAndScalesAreMaxOver7) {
  Rng rng{17};
  for (I64 block : {32, 64, 128}) {
    const std::array<I64, 4> shape = {2, 3, 5, 128};
    std::vector<float> x = random_values(2 * 3 * 5 * 128, rng, 3.0f);
    std::fill(x.begin(), x.begin() + block, 0.0f);  // an all-zero block
    x[std::size_t(block) + 3] = 1e-30f;             // a tiny value next to normal ones
    const jomoim::Q4Buffer q = jomoim::quantize_q4(ConstTensor4::contiguous(x.data(), shape), block);
    ASSERT_EQ(q.values.size(), x.size() / 2);
    ASSERT_EQ(q.scales.size(), x.size() / std::size_t(block));
    std::vector<float> back(x.size(), poison());
    jomoim::dequantize_q4(q.view(), Tensor4::contiguous(back.data(), shape));
    const std::size_t half = 64;  // D / 2: a row's bytes
    for (std::size_t b = 0; b < q.scales.size(); ++b) {
      float amax = 0;
      for (I64 i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b * std::size_t(block) + std::size_t(i)]));
      EXPECT_EQ(q.scales[b], amax / 7.0f) << "block " << b;
      for (std::size_t i = 0; i < std::size_t(block); ++i) {
        const std::size_t at = b * std::size_t(block) + i;
        // The nibble of value e of its row: byte e % half of the row, low for the first half.
        const std::size_t row = at / 128, e = at % 128;
        const std::uint8_t byte = q.values[row * half + e % half];
        const int nibble = e < half ? byte & 0x0F : byte >> 4;
        EXPECT_GE(nibble, 1);
        EXPECT_LE(nibble, 15);
        EXPECT_EQ(back[at], q.scales[b] * float(nibble - 8)) << "element " << at;
        EXPECT_LE(std::fabs(back[at] - x[at]), 0.5001f * q.scales[b] + 1e-37f) << "element " << at;
      }
    }
    for (I64 i = 0; i < block; ++i) EXPECT_EQ(back[std::size_t(i)], 0.0f);
  }
}

// The layout spelled out on rows of one and of two blocks of 32 whose scales are 1: x_i = (i %
// 15) - 7 is stored as i % 15 + 1, value i in byte i's low nibble and value i + D / 2 in its high
// one; halves round to even.
TEST(Q4, LayoutAndTiesOfOneBlock) {
  for (int D : {32, 64}) {
    std::vector<float> x(static_cast<std::size_t>(D));
    for (int i = 0; i < D; ++i) x[std::size_t(i)] = float(i % 15 - 7);
    const jomoim::Q4Buffer q = jomoim::quantize_q4(ConstTensor4::contiguous(x.data(), {1, 1, 1, D}));
    ASSERT_EQ(q.scales, std::vector<float>(std::size_t(D / 32), 1.0f));
    for (int i = 0; i < D / 2; ++i)
      EXPECT_EQ(int(q.values[std::size_t(i)]), (i % 15 + 1) | (((i + D / 2) % 15 + 1) << 4)) << "byte " << i;
  }
  std::vector<float> x(32, 0.0f);
  x[0] = 7.0f;
  x[1] = 2.5f;   // -> 2
  x[2] = 3.5f;   // -> 4
  x[3] = -0.5f;  // -> 0
  const jomoim::Q4Buffer t = jomoim::quantize_q4(ConstTensor4::contiguous(x.data(), {1, 1, 1, 32}));
  EXPECT_EQ(t.values[1] & 0x0F, 2 + 8);
  EXPECT_EQ(t.values[2] & 0x0F, 4 + 8);
  EXPECT_EQ(t.values[3] & 0x0F, 0 + 8);
}

TEST(Q4, StridedInputQuantizesLikeContiguous) {
  Rng rng{19};
  const std::array<I64, 4> shape = {1, 2, 3, 64};
  std::vector<float> x = random_values(1 * 2 * 3 * 64, rng, 1.0f);
  std::vector<float> y(x.size());  // [B, N, H, D]
  for (I64 h = 0; h < 2; ++h)
    for (I64 n = 0; n < 3; ++n)
      for (I64 d = 0; d < 64; ++d) y[std::size_t((n * 2 + h) * 64 + d)] = x[std::size_t((h * 3 + n) * 64 + d)];
  const auto a = jomoim::quantize_q4(ConstTensor4::contiguous(x.data(), shape));
  const auto b = jomoim::quantize_q4(ConstTensor4{y.data(), shape, {2 * 3 * 64, 64, 2 * 64, 1}});
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.scales, b.scales);
  // And dequantizing into a strided output writes the same values.
  std::vector<float> c(x.size(), poison()), d(x.size(), poison());
  jomoim::dequantize_q4(a.view(), Tensor4::contiguous(c.data(), shape));
  jomoim::dequantize_q4(a.view(), Tensor4{d.data(), shape, {2 * 3 * 64, 64, 2 * 64, 1}});
  for (I64 h = 0; h < 2; ++h)
    for (I64 n = 0; n < 3; ++n)
      for (I64 e = 0; e < 64; ++e)
        ASSERT_EQ(c[std::size_t((h * 3 + n) * 64 + e)], d[std::size_t((n * 2 + h) * 64 + e)]);
}

TEST(Q4, Refusals) {
  std::vector<float> x(2 * 32, 0.5f);
  const ConstTensor4 xv = ConstTensor4::contiguous(x.data(), {1, 1, 2, 32});
  EXPECT_NE(message([&] { jomoim::quantize_q4(xv, 16); }).find("multiple of 32"), std::string::npos);
  EXPECT_NE(message([&] { jomoim::quantize_q4(xv, 0); }).find("multiple of 32"), std::string::npos);
  EXPECT_NE(message([&] { jomoim::quantize_q4(xv, 64); }).find("does not divide D = 32"), std::string::npos);
  x[37] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message([&] { jomoim::quantize_q4(xv); }).find("non-finite value nan at index [0, 0, 1, 5]"),
            std::string::npos);
  x[37] = 0.5f;
  jomoim::Q4Buffer q = jomoim::quantize_q4(xv);
  const auto before = q.values;
  x[40] = -std::numeric_limits<float>::infinity();
  x[1] = 100.0f;
  EXPECT_THROW(jomoim::quantize_q4(xv, q.view()), jomoim::Error);  // nothing written
  EXPECT_EQ(q.values, before);
  x[40] = 0.5f;
  x[1] = 0.5f;
  std::vector<float> other(3 * 32), back(3 * 32);
  EXPECT_NE(message([&] {
              jomoim::quantize_q4(ConstTensor4::contiguous(other.data(), {1, 1, 3, 32}), q.view());
            }).find("differs"),
            std::string::npos);
  EXPECT_NE(message([&] {
              jomoim::dequantize_q4(q.view(), Tensor4::contiguous(back.data(), {1, 1, 3, 32}));
            }).find("differs"),
            std::string::npos);
  std::vector<float> qv(32, 0.1f), out(32), probs(2);
  const ConstTensor4 qq = ConstTensor4::contiguous(qv.data(), {1, 1, 1, 32});
  jomoim::AttentionOptions o;
  o.probs = jomoim::Tensor4::contiguous(probs.data(), {1, 1, 1, 2});
  EXPECT_NE(message([&] {
              jomoim::attention_q4kv(qq, q.view(), q.view(), Tensor4::contiguous(out.data(), {1, 1, 1, 32}), o);
            }).find("probs: not available with q4"),
            std::string::npos);
  EXPECT_NE(message([&] {
              jomoim::attention_q4kv(qq, q.view(), q.view(), Tensor4::contiguous(out.data(), {1, 1, 2, 32}));
            }).find("out: expected shape"),
            std::string::npos);
  jomoim::Q4Tensor4 odd = q.view();
  odd.block = 16;
  EXPECT_NE(message([&] {
              jomoim::attention_q4kv(qq, q.view(), odd, Tensor4::contiguous(out.data(), {1, 1, 1, 32}));
            }).find("v: q4 block size must be a positive multiple of 32"),
            std::string::npos);
  EXPECT_NE(message([&] {
              jomoim::attention_q4kv(
                  qq, q.view(), q.view(),
                  Tensor4{reinterpret_cast<float*>(q.values.data()), {1, 1, 1, 32}, {32, 32, 32, 1}});
            }).find("overlaps the q4 input k"),
            std::string::npos);
}

// The q8 cases whose blocks q4 allows (multiples of 32), and cases for the unpacked tiles: key
// counts across several tiles of 256 with a tail, splits over two threads, D not a power of two.
TEST(Q4, AttentionMatchesTheReferenceOnTheDequantizedInputs) {
  const std::vector<Q8Case> cases = {
      {"decode mha", 1, 4, 4, 1, 700, 64, 64, 32},
      // One row a K/V head takes the scores' offset of 8 once a block (four and two blocks a row).
      {"decode mha d128", 1, 4, 4, 1, 1000, 128, 128, 32},
      {"decode mha d256 block 64 key lengths", 2, 2, 2, 1, 701, 256, 64, 64, false, false, true},
      {"decode gqa d128", 1, 8, 2, 1, 1100, 128, 128, 32},
      {"decode one key", 2, 2, 1, 1, 1, 32, 32, 32},
      {"no keys", 1, 2, 2, 3, 0, 32, 32, 32},
      {"few rows causal", 2, 3, 1, 5, 300, 64, 32, 32, true},
      {"prefill-sized causal", 1, 2, 2, 37, 37, 32, 64, 32, true},
      {"bias with -inf", 1, 2, 1, 3, 260, 64, 32, 32, false, true},
      {"key lengths", 3, 2, 2, 2, 513, 32, 32, 32, false, false, true},
      {"3b1b", 1, 2, 1, 4, 90, 32, 96, 32, true, false, false, true},
      {"block = D", 1, 4, 4, 1, 500, 64, 64, 64},
      {"decode mha block = D 128", 2, 2, 2, 1, 1029, 128, 128, 128},
      {"grouped block 64 d256", 1, 8, 2, 1, 512, 256, 64, 64},
      {"grouped block 32 d96 causal", 1, 4, 1, 9, 333, 96, 32, 32, true},
      {"grouped block 32 dv 128", 1, 8, 2, 1, 700, 128, 128, 32},
      {"planes 2 blocks of 64", 1, 8, 2, 1, 419, 64, 128, 64},
      {"planes 4 blocks of 32, 9 rows", 1, 6, 2, 3, 259, 64, 128, 32},
      {"long decode gqa", 1, 8, 1, 1, 2100, 64, 64, 32},
  };
  for (const std::string& t : jomoim::simd_targets())
    for (int threads : {1, 2})
      for (const Q8Case& c : cases) check_case(c, threads, t, true);
}

// A NaN or infinite query value makes its own row's output NaN and no other row's: one row a
// K/V head (whose scores sum each block from -8 times the block's query) and four.
TEST(Q4, ANonFiniteQueryValueStaysInItsRow) {
  const I64 Hq = 8, Nk = 100, D = 64;
  for (I64 Hkv : {8, 2}) {
    Rng rng{std::uint64_t(11 + Hkv)};
    std::vector<float> q = random_values(Hq * D, rng, 1.0f), k = random_values(Hkv * Nk * D, rng, 1.0f),
                       v = random_values(Hkv * Nk * D, rng, 1.0f);
    const auto kq = jomoim::quantize_q4(ConstTensor4::contiguous(k.data(), {1, Hkv, Nk, D}));
    const auto vq = jomoim::quantize_q4(ConstTensor4::contiguous(v.data(), {1, Hkv, Nk, D}));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> qb = q;
      qb[std::size_t(5 * D + 40)] = bad;  // head 5, the second block
      for (const std::string& target : jomoim::simd_targets()) {
        const std::vector<float> out = decode_on(target, qb, Hq, D, kq, vq);
        for (I64 h = 0; h < Hq; ++h)
          for (I64 e = 0; e < D; ++e) {
            const float got = out[std::size_t(h * D + e)];
            if (h == 5)
              EXPECT_TRUE(std::isnan(got)) << target << " Hkv " << Hkv << " head " << h << " " << e;
            else
              EXPECT_TRUE(std::isfinite(got)) << target << " Hkv " << Hkv << " head " << h << " " << e;
          }
      }
    }
  }
}

// A non-finite V block scale reaches only the heads that read it, in that block's columns.
TEST(Q4, ANonFiniteValueScaleStaysInItsBlock) {
  const I64 Hq = 8, Hkv = 2, Nk = 300, D = 64;
  Rng rng{23};
  std::vector<float> q = random_values(Hq * D, rng, 1.0f), k = random_values(Hkv * Nk * D, rng, 1.0f),
                     v = random_values(Hkv * Nk * D, rng, 1.0f);
  const auto kq = jomoim::quantize_q4(ConstTensor4::contiguous(k.data(), {1, Hkv, Nk, D}));
  auto vq = jomoim::quantize_q4(ConstTensor4::contiguous(v.data(), {1, Hkv, Nk, D}));
  vq.scales[std::size_t((1 * Nk + 270) * 2 + 1)] = std::numeric_limits<float>::quiet_NaN();  // head 1, key 270
  for (const std::string& target : jomoim::simd_targets()) {
    const std::vector<float> out = decode_on(target, q, Hq, D, kq, vq);
    for (I64 h = 0; h < Hq; ++h)
      for (I64 e = 0; e < D; ++e) {
        const float got = out[std::size_t(h * D + e)];
        if (h >= 4 && e >= 32)
          EXPECT_FALSE(std::isfinite(got)) << target << " head " << h << " " << e;
        else
          EXPECT_TRUE(std::isfinite(got)) << target << " head " << h << " " << e;
      }
  }
}

}  // namespace
