// bf16_dot.cpp — the VDPBF16PS score kernel (see bf16_dot.hpp). The only file with AVX512_BF16
// code; its functions carry their own target attribute, so the file compiles for the baseline.
#include "bf16_dot.hpp"

#include <immintrin.h>

#include <cstring>

namespace jomoim::detail {

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
}

#define JOMOIM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// One step over a pair of d for MR keys x NV vectors of 16 query columns: the pair of every key
// (k[d] in the low half of a 32-bit lane; with kLone, for an odd depth, the last element alone,
// so nothing past the row is read) against NV vectors of packed query pairs, one VDPBF16PS per
// (key, vector).
template <int MR, int NV, bool kLone>
JOMOIM_BF16_TARGET inline void step(__m512 (&acc)[MR][NV], const std::uint16_t* k, std::ptrdiff_t ldk,
                                    const std::uint32_t* qd) {
  __m512bh qv[NV];
  for (int x = 0; x < NV; ++x) qv[x] = (__m512bh)_mm512_load_si512(qd + 16 * x);
  for (int r = 0; r < MR; ++r) {
    std::uint32_t u;
    if (kLone) {
      u = k[r * ldk];
    } else {
      std::memcpy(&u, k + r * ldk, 4);
    }
    const __m512bh kb = (__m512bh)_mm512_set1_epi32(int(u));
    for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], kb, qv[x]);
  }
}

// MR x NV accumulators over the whole depth, then times scale into st.
template <int MR, int NV>
JOMOIM_BF16_TARGET inline void micro(const std::uint16_t* k, std::ptrdiff_t ldk, const std::uint32_t* qp,
                                     std::size_t ldq, float* st, std::size_t ldst, std::size_t depth, float scale) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_setzero_ps();
  std::size_t d = 0;
  for (; d + 2 <= depth; d += 2) step<MR, NV, false>(acc, k + d, ldk, qp + (d / 2) * ldq);
  if (d < depth) step<MR, NV, true>(acc, k + d, ldk, qp + (d / 2) * ldq);
  const __m512 s = _mm512_set1_ps(scale);
  for (int r = 0; r < MR; ++r)
    for (int x = 0; x < NV; ++x) _mm512_store_ps(st + r * ldst + 16 * x, _mm512_mul_ps(acc[r][x], s));
}

template <int MR>
JOMOIM_BF16_TARGET inline void row_block(const std::uint16_t* k, std::ptrdiff_t ldk, const std::uint32_t* qp,
                                         std::size_t ldq, std::size_t cols, float* st, std::size_t ldst,
                                         std::size_t depth, float scale) {
  std::size_t x = 0;
  for (; x + 64 <= cols; x += 64) micro<MR, 4>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale);
  if (x + 32 <= cols) {
    micro<MR, 2>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale);
    x += 32;
  }
  if (x < cols) micro<MR, 1>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale);
}

}  // namespace

JOMOIM_BF16_TARGET void score_tile_bf16(const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys,
                                        const std::uint32_t* qp, std::size_t ldq, std::size_t cols, float* st,
                                        std::size_t ldst, std::size_t depth, float scale) {
  std::size_t j = 0;
  for (; j + 4 <= keys; j += 4) row_block<4>(k + j * ldk, ldk, qp, ldq, cols, st + j * ldst, ldst, depth, scale);
  for (; j < keys; ++j) row_block<1>(k + j * ldk, ldk, qp, ldq, cols, st + j * ldst, ldst, depth, scale);
}

}  // namespace jomoim::detail
