// The weight-format products (jomoim/engine/matvec.hpp) against a float64 sum over the same
// stored weights, on every SIMD target: float32, bf16 and q8 rows, float32 columns (GPT-2's
// layout), 1-17 activation rows (passes of several over blocks of weight rows), odd widths and
// row counts (tails of the 4-row groups and of the vectors), bias or none, strided inputs and
// outputs whose gaps must stay untouched.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/matvec.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/simd.hpp"

namespace {

using namespace jomoim;

struct PinTarget {
  explicit PinTarget(const std::string& t) { set_simd_target(t); }
  ~PinTarget() { set_simd_target(""); }
};

constexpr float kPoison = -7.25e30f;

struct Case {
  int M, K, rows;
  bool bias;
};

// |got - want| <= tol * sum_k |x_k w_k| (+ |bias|): float32 accumulation of K products.
void expect_close(const std::vector<float>& y, std::size_t ldy, const std::vector<double>& want,
                  const std::vector<double>& mag, int M, int rows, int K, const std::string& what) {
  const double tol = 4.0 * (K + 4) * std::numeric_limits<float>::epsilon();
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < static_cast<int>(ldy); ++r) {
      const float g = y[m * ldy + r];
      if (r >= rows) {
        ASSERT_EQ(g, kPoison) << what << ": wrote past the outputs at m=" << m << " r=" << r;
        continue;
      }
      const double w = want[m * rows + r];
      ASSERT_LE(std::abs(g - w), tol * mag[m * rows + r] + 1e-30) << what << " m=" << m << " r=" << r;
    }
}

// The last three: more activation rows than a pass and more weight rows than a block (64 KiB in
// multiples of 16 rows: 32 bf16 or 64 q8 rows of 1,024; 80 float32 rows of 192).
const Case kCases[] = {{1, 16, 1, false},   {1, 32, 4, true},    {2, 48, 7, true},     {3, 64, 5, false},
                       {4, 96, 9, true},    {1, 768, 37, true},  {4, 256, 64, false},  {2, 1024, 13, true},
                       {1, 32, 3, true},    {3, 160, 130, true}, {5, 1024, 130, true}, {7, 192, 203, false},
                       {17, 512, 161, true}};

// Row-layout weights of storage T (bf16 bits or float32), widened for the float64 sum by value().
template <typename T, typename Value, typename Call>
void check_rows(const char* name, Value value, Call call) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const std::string& target : simd_targets()) {
    PinTarget pin(target);
    for (const Case& c : kCases)
      for (int extra_k : {0, 1, 7}) {  // any K: vector tails
        const int K = c.K + extra_k, ldx = K + 3, ldw = K + 5;
        const std::size_t ldy = c.rows + 2;
        std::vector<float> x(static_cast<std::size_t>(c.M) * ldx), b(c.rows);
        std::vector<T> w(static_cast<std::size_t>(c.rows) * ldw);
        for (auto& v : x) v = nd(rng);
        for (auto& v : w) {
          if constexpr (std::is_same_v<T, float>)
            v = nd(rng) * 0.1f;
          else
            v = bf16_from_float(nd(rng) * 0.1f);
        }
        for (auto& v : b) v = nd(rng);
        std::vector<double> want(static_cast<std::size_t>(c.M) * c.rows), mag(want.size());
        for (int m = 0; m < c.M; ++m)
          for (int r = 0; r < c.rows; ++r) {
            double s = c.bias ? b[r] : 0.0, a = c.bias ? std::abs(b[r]) : 0.0;
            for (int k = 0; k < K; ++k) {
              const double p = static_cast<double>(x[m * ldx + k]) * value(w[r * ldw + k]);
              s += p;
              a += std::abs(p);
            }
            want[m * c.rows + r] = s;
            mag[m * c.rows + r] = a;
          }
        std::vector<float> y(c.M * ldy, kPoison);
        call(x.data(), ldx, c.M, w.data(), ldw, K, c.rows, c.bias ? b.data() : nullptr, y.data(), ldy);
        expect_close(y, ldy, want, mag, c.M, c.rows, K,
                     target + " " + name + " M=" + std::to_string(c.M) + " K=" + std::to_string(K) +
                         " rows=" + std::to_string(c.rows));
        ++checked;
      }
  }
  EXPECT_GE(checked, 30);
}

TEST(Matvec, Bf16RowsMatchFloat64OnEveryTarget) {
  check_rows<std::uint16_t>(
      "bf16", [](std::uint16_t w) { return static_cast<double>(bf16_to_float(w)); }, matvec::bf16_rows);
}

TEST(Matvec, F32RowsMatchFloat64OnEveryTarget) {
  check_rows<float>(
      "f32", [](float w) { return static_cast<double>(w); }, matvec::f32_rows);
}

// Any number of activation rows gives every row the bits it gets alone: passes and blocks of
// weight rows only reorder whole dot products. q8 rounds one or two activation rows to int16
// (each row by itself) and widens the weights for three or more: then each row gets the bits
// f32_rows gives it on the dequantized weights.
TEST(Matvec, ManyRowsGiveEachRowItsOneRowBits) {
  std::mt19937_64 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const std::string& target : simd_targets()) {
    PinTarget pin(target);
    for (int M : {2, 3, 5, 9, 24})
      for (int K : {64, 768}) {
        const int rows = 211, ldx = K + 2;
        const std::size_t ldy = rows + 1;
        std::vector<float> x(static_cast<std::size_t>(M) * ldx), b(rows), wf(static_cast<std::size_t>(rows) * K);
        for (auto& v : x) v = nd(rng);
        for (auto& v : wf) v = nd(rng) * 0.05f;
        for (auto& v : b) v = nd(rng);
        std::vector<std::uint16_t> w16(wf.size());
        for (std::size_t i = 0; i < wf.size(); ++i) w16[i] = bf16_from_float(wf[i]);
        const Q8Buffer q = quantize_q8(ConstTensor4::contiguous(wf.data(), {1, 1, rows, K}), 32);
        std::vector<float> wq(wf.size(), kPoison);  // the q8 weights widened
        dequantize_q8(q.view(), Tensor4::contiguous(wq.data(), {1, 1, rows, K}));
        auto run = [&](const char* name, auto call, auto alone) {
          std::vector<float> all(M * ldy, kPoison), one(ldy, kPoison);
          call(x.data(), M, all.data());
          for (int m = 0; m < M; ++m) {
            alone(x.data() + static_cast<std::size_t>(m) * ldx, one.data());
            for (std::size_t r = 0; r < ldy; ++r)
              ASSERT_EQ(std::bit_cast<std::uint32_t>(all[m * ldy + r]), std::bit_cast<std::uint32_t>(one[r]))
                  << target << " " << name << " M=" << M << " K=" << K << " m=" << m << " r=" << r;
          }
        };
        auto f32 = [&](const float* xs, int m, float* y) {
          matvec::f32_rows(xs, ldx, m, wf.data(), K, K, rows, b.data(), y, ldy);
        };
        auto bf16 = [&](const float* xs, int m, float* y) {
          matvec::bf16_rows(xs, ldx, m, w16.data(), K, K, rows, b.data(), y, ldy);
        };
        auto q8 = [&](const float* xs, int m, float* y) {
          matvec::q8_rows(xs, ldx, m, q.values.data(), K, q.scales.data(), 32, K, rows, b.data(), y, ldy);
        };
        run("f32", f32, [&](const float* xs, float* y) { f32(xs, 1, y); });
        run("bf16", bf16, [&](const float* xs, float* y) { bf16(xs, 1, y); });
        run("q8", q8, [&](const float* xs, float* y) {
          if (M <= 2)
            q8(xs, 1, y);
          else
            matvec::f32_rows(xs, ldx, 1, wq.data(), K, K, rows, b.data(), y, ldy);
        });
        ++checked;
      }
  }
  EXPECT_GE(checked, 10);
}

// GPT-2's [in, out] layout: a slice of n columns out of a wider matrix (row stride ldw), K rows;
// y = beta y + alpha x W, with the columns past n (the rest of the row) poisoned and untouched.
TEST(Matvec, F32ColsMatchFloat64OnEveryTarget) {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const std::string& target : simd_targets()) {
    PinTarget pin(target);
    for (int K : {1, 3, 4, 5, 17, 64, 769, 3072})
      for (int n : {1, 7, 16, 33, 130, 768})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          const float alpha = beta == 0.5f ? -1.5f : 1.0f;
          const std::size_t ldw = static_cast<std::size_t>(n) + 9;
          std::vector<float> x(K), w(K * ldw), y0(n + 8);
          for (auto& v : x) v = nd(rng);
          for (auto& v : w) v = nd(rng) * 0.1f;
          for (auto& v : y0) v = nd(rng);
          std::vector<float> y = y0;
          // beta 0 must not read y: NaN there must not come back.
          if (beta == 0.0f)
            for (int j = 0; j < n; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
          for (int j = n; j < n + 8; ++j) y[j] = kPoison;
          matvec::f32_cols(x.data(), K, w.data(), ldw, n, alpha, beta, y.data());
          const std::string what =
              target + " f32 cols K=" + std::to_string(K) + " n=" + std::to_string(n) + " beta=" + std::to_string(beta);
          const double tol = 4.0 * (K + 4) * std::numeric_limits<float>::epsilon();
          for (int j = 0; j < n; ++j) {
            double s = 0.0, a = 0.0;
            for (int k = 0; k < K; ++k) {
              const double p = static_cast<double>(x[k]) * w[k * ldw + j];
              s += p;
              a += std::abs(p);
            }
            const double base = beta == 0.0f ? 0.0 : static_cast<double>(beta) * y0[j];
            const double want = base + alpha * s;
            ASSERT_LE(std::abs(y[j] - want), tol * (std::abs(alpha) * a + std::abs(base)) + 1e-30)
                << what << " j=" << j;
          }
          for (int j = n; j < n + 8; ++j) ASSERT_EQ(y[j], kPoison) << what << ": wrote past column " << n;
          ++checked;
        }
  }
  EXPECT_GE(checked, 144);
}

TEST(Matvec, Q8RowsMatchFloat64OnEveryTarget) {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const std::string& target : simd_targets()) {
    PinTarget pin(target);
    for (const Case& c : kCases)
      for (int block : {16, 32}) {
        if (c.K % block) continue;
        const int K = c.K, ldx = K + 1;
        const std::size_t ldy = c.rows + 3;
        std::vector<float> x(static_cast<std::size_t>(c.M) * ldx), b(c.rows), wf(static_cast<std::size_t>(c.rows) * K);
        for (auto& v : x) v = nd(rng);
        for (auto& v : wf) v = nd(rng) * 0.05f;
        for (int k = 0; k < K; ++k) wf[k] = 0.0f;  // an all-zero row: scale 0
        for (auto& v : b) v = nd(rng);
        const Q8Buffer q = quantize_q8(ConstTensor4::contiguous(wf.data(), {1, 1, c.rows, K}), block);
        std::vector<double> want(static_cast<std::size_t>(c.M) * c.rows), mag(want.size());
        for (int m = 0; m < c.M; ++m)
          for (int r = 0; r < c.rows; ++r) {
            double s = c.bias ? b[r] : 0.0, a = c.bias ? std::abs(b[r]) : 0.0;
            for (int k = 0; k < K; ++k) {
              const double wv = static_cast<double>(q.scales[(r * K + k) / block]) * q.values[r * K + k];
              const double p = static_cast<double>(x[m * ldx + k]) * wv;
              s += p;
              a += std::abs(p);
            }
            want[m * c.rows + r] = s;
            mag[m * c.rows + r] = a;
          }
        std::vector<float> y(c.M * ldy, kPoison);
        matvec::q8_rows(x.data(), ldx, c.M, q.values.data(), K, q.scales.data(), block, K, c.rows,
                        c.bias ? b.data() : nullptr, y.data(), ldy);
        expect_close(y, ldy, want, mag, c.M, c.rows, K,
                     target + " q8 M=" + std::to_string(c.M) + " K=" + std::to_string(K) +
                         " block=" + std::to_string(block) + " rows=" + std::to_string(c.rows));
        // Widening a row gives the stored numbers exactly.
        std::vector<float> row(K, kPoison);
        const int r = c.rows - 1;
        matvec::dequantize_q8_row(q.values.data() + static_cast<std::size_t>(r) * K,
                                  q.scales.data() + static_cast<std::size_t>(r) * (K / block), block, K, row.data());
        for (int k = 0; k < K; ++k)
          ASSERT_EQ(row[k], q.scales[(r * K + k) / block] * static_cast<float>(q.values[r * K + k])) << target;
        ++checked;
      }
  }
  EXPECT_GE(checked, 30);
}

TEST(Matvec, WidenBf16IsExactOnEveryTarget) {
  std::vector<std::uint16_t> src;
  for (std::uint32_t u = 0; u < 65536; u += 7) src.push_back(static_cast<std::uint16_t>(u));  // NaN, inf, subnormals
  for (const std::string& target : simd_targets()) {
    PinTarget pin(target);
    std::vector<float> dst(src.size() + 1, kPoison);
    matvec::widen_bf16(src.data(), dst.data(), src.size());
    for (std::size_t i = 0; i < src.size(); ++i) {
      const float want = bf16_to_float(src[i]);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(dst[i])) << target << " " << i;
      else
        ASSERT_EQ(std::bit_cast<std::uint32_t>(dst[i]), std::bit_cast<std::uint32_t>(want)) << target << " " << i;
    }
    EXPECT_EQ(dst.back(), kPoison) << target;
  }
}

}  // namespace
