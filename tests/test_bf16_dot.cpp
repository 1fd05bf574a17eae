// The AVX512_BF16 decode score kernel (score_rows_bf16, src/engine/bf16_dot.hpp) against
// float64 sums on the same bf16 inputs: q . k of 1-8 rows, exact products, float32 sums, so the
// float32 bound (depth + 4) u sum |q k| holds. Shapes: every row count, key counts around the
// 16-key groups and odd ones, depths below, at and past the 32-element chunks (odd too); K's row
// gaps hold values that must not be read. The output is poisoned past the keys and after the
// last row, which must stay untouched. Skipped on CPUs without AVX512_BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/bf16_dot.hpp"
#include "engine/cpu.hpp"
#include "jomoim/core/half.hpp"

namespace {

using jomoim::bf16_from_float;
using jomoim::bf16_to_float;
constexpr float kPoison = -7.25e30f;

struct Rng {
  std::mt19937_64 g;
  explicit Rng(std::uint64_t seed) : g(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  std::uint16_t bf16(float lo, float hi) { return bf16_from_float(uniform(lo, hi)); }
};

// A 64-byte aligned buffer of T.
template <class T>
struct Aligned {
  std::vector<T> store;
  T* p;
  explicit Aligned(std::size_t n, T fill = T()) : store(n + 64 / sizeof(T), fill) {
    auto a = reinterpret_cast<std::uintptr_t>(store.data());
    p = store.data() + ((64 - a % 64) % 64) / sizeof(T);
  }
};

TEST(Bf16Dot, DecodeScoresMatchFloat64) {
  if (!jomoim::detail::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  Rng rng(0x5c0e5);
  int cases = 0;
  for (std::size_t depth : {1, 2, 7, 31, 32, 33, 64, 72, 128, 130, 256})
    for (std::size_t rows = 1; rows <= 8; ++rows)
      for (std::size_t keys : {1, 2, 3, 15, 16, 17, 33, 70, 256}) {
        const std::size_t ldq = (depth + 31) / 32 * 32, ldk = depth + 3, lds = keys + 5;
        Aligned<std::uint16_t> q(rows * ldq);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t d = 0; d < depth; ++d) q.p[r * ldq + d] = rng.bf16(-2, 2);
        std::vector<std::uint16_t> k(keys * ldk + 64);
        for (auto& x : k) x = rng.bf16(-2, 2);  // the row gaps too: they must not be read as values
        std::vector<float> s(rows * lds + 8, kPoison);
        const float scale = 0.125f * 1.4426950408889634f;
        jomoim::detail::score_rows_bf16(q.p, ldq, rows, k.data(), std::ptrdiff_t(ldk), keys, s.data(), lds, depth,
                                        scale, 32);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < lds; ++j) {
            const float got = s[r * lds + j];
            if (j >= keys) {
              ASSERT_EQ(got, kPoison) << "wrote past the keys: row " << r << " j " << j;
              continue;
            }
            double want = 0, mag = 0;
            for (std::size_t d = 0; d < depth; ++d) {
              const double t = double(bf16_to_float(q.p[r * ldq + d])) * bf16_to_float(k[j * ldk + d]);
              want += t;
              mag += std::fabs(t);
            }
            want *= scale;
            const double tol = (double(depth) + 4) * 0x1p-24 * mag * scale + 1e-30;
            ASSERT_NEAR(got, want, tol) << "depth " << depth << " rows " << rows << " keys " << keys << " r " << r
                                        << " j " << j;
          }
        for (std::size_t x = rows * lds; x < s.size(); ++x) ASSERT_EQ(s[x], kPoison);
        ++cases;
      }
  EXPECT_EQ(cases, 11 * 8 * 9);
}

}  // namespace
