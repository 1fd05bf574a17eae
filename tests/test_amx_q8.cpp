// amx_q8_prepare (src/engine/amx_attention.hpp): a four-row query group split into int8 pieces
// for the AMX-INT8 scores, against its definition written out in scalar float64 — s_r =
// max_d |q_r[d]| / 127 in float32, then per value x = q / s_r, four times a = nearest integer
// (ties to even), x = (x - a) 2^7 — byte for byte, with the colscale s_r 2^-7p exactly. Rows of
// mixed magnitudes, zeros, an all-zero row, ties, subnormals, depths 16 to 1024; a NaN or an
// infinity anywhere gives false. Skipped on CPUs without AMX-INT8 (the function's AVX-512 code
// runs only where the q8 plan takes the tiles).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention_test_util.hpp"
#include "engine/amx_attention.hpp"
#include "engine/cpu.hpp"

namespace {

using I64 = std::int64_t;

void prepare_reference(const float* q, I64 ldq, I64 D, std::int8_t* pieces, float* colscale) {
  for (I64 r = 0; r < 4; ++r) {
    float amax = 0;
    for (I64 d = 0; d < D; ++d) amax = std::max(amax, std::fabs(q[r * ldq + d]));
    const float s = amax / 127.0f;
    const double inv = s > 0 ? 1.0 / double(s) : 0.0;
    for (I64 d = 0; d < D; ++d) {
      double x = double(q[r * ldq + d]) * inv;
      for (I64 p = 0; p < 4; ++p) {
        const double a = std::nearbyint(x);
        pieces[(d / 4) * 64 + (p * 4 + r) * 4 + d % 4] = std::int8_t(a);
        x = (x - a) * 128.0;
      }
    }
    for (int p = 0; p < 4; ++p) colscale[p * 4 + r] = std::ldexp(s, -7 * p);
  }
}

TEST(AmxQ8, PrepareSplitsTheQueryLikeItsScalarDefinition) {
  if (!jomoim::detail::cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 on this CPU";
  attn_test::Rng rng{19};
  for (I64 D : {16, 32, 48, 128, 144, 256, 1024}) {
    for (int kind = 0; kind < 5; ++kind) {
      const I64 ldq = D + 16 * (kind % 2);  // rows with and without a gap
      std::vector<float> q(std::size_t(4 * ldq), std::numeric_limits<float>::quiet_NaN());  // the gaps: not read
      for (I64 r = 0; r < 4; ++r)
        for (I64 d = 0; d < D; ++d) {
          float x = rng.uniform(1.0f);
          if (kind == 1) x *= std::ldexp(1.0f, int(rng.next() % 40) - 20);  // magnitudes 2^-20..2^20 in a row
          if (kind == 2) x = float(int(x * 8)) * 0.5f;                      // halves: ties after the scale
          if (kind == 3) x *= 1e-39f;                                       // subnormal rows
          if (kind == 4 && r == 2) x = 0;                                   // an all-zero row
          if (d % 7 == 3) x = 0;
          q[std::size_t(r * ldq + d)] = x;
        }
      const std::size_t n = jomoim::detail::amx_q8_piece_bytes(D);
      std::vector<std::int8_t> got(n, 0x55), want(n, 0x66);
      float got_cs[16], want_cs[16];
      std::fill(got_cs, got_cs + 16, -1.0f);
      prepare_reference(q.data(), ldq, D, want.data(), want_cs);
      const std::string where = "D " + std::to_string(D) + " kind " + std::to_string(kind);
      ASSERT_TRUE(jomoim::detail::amx_q8_prepare(q.data(), ldq, D, got.data(), got_cs)) << where;
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n)) << where;
      ASSERT_EQ(0, std::memcmp(got_cs, want_cs, sizeof got_cs)) << where;
    }
  }
}

TEST(AmxQ8, PrepareRefusesANonFiniteValue) {
  if (!jomoim::detail::cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 on this CPU";
  const I64 D = 64;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()})
    for (I64 at : {I64(0), I64(37), I64(4 * D - 1)}) {
      std::vector<float> q(std::size_t(4 * D), 0.5f);
      q[std::size_t(at)] = bad;
      std::vector<std::int8_t> pieces(jomoim::detail::amx_q8_piece_bytes(D));
      float cs[16];
      EXPECT_FALSE(jomoim::detail::amx_q8_prepare(q.data(), D, D, pieces.data(), cs)) << bad << " at " << at;
    }
}

}  // namespace
