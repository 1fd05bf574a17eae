// bf16_dot.cpp — the VDPBF16PS kernels (see bf16_dot.hpp). The only file with AVX512_BF16 code;
// its functions carry their own target attribute, so the file compiles for the baseline.
#include "bf16_dot.hpp"

#include <immintrin.h>

// GCC 12's AVX-512 headers start the unmasked shuffles from a self-initialised "undefined"
// vector, which -Wuninitialized reports at every use; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

// ---------------------------------------------------------------------------------------------
// Decode: a few query rows against K rows read once, in place.

namespace {

// Lane i of the result = the sum of v[i]'s 16 lanes: four rounds of pairwise shuffles and adds
// (15 adds and 30 shuffles for 16 sums, against 16 x 4 rounds one vector at a time).
JOMOIM_BF16_TARGET inline __m512 sum16(const __m512 (&v)[16]) {
  __m512 w[8], x[4], y[2];
  for (int i = 0; i < 8; ++i)  // per 128-bit block: v2i(0+2), v2i+1(0+2), v2i(1+3), v2i+1(1+3)
    w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per block: the block's partial sums of v4i .. v4i+3
    const __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
    x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i)  // blocks 0+2 and 1+3 of x2i, then of x2i+1
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
}

// R rows x NK keys (R * NK = 16 accumulators), the depth 32 bf16 at a time.
template <int R, int NK>
JOMOIM_BF16_TARGET inline void score_keys(const std::uint16_t* q, std::size_t ldq, const std::uint16_t* k,
                                          std::ptrdiff_t ldk, float* s, std::size_t lds, std::size_t depth, float scale,
                                          std::ptrdiff_t ahead) {
  static_assert(R * NK == 16);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const std::size_t whole = depth / 32 * 32;
  auto chunk = [&](std::size_t d, __mmask32 m) JOMOIM_BF16_TARGET {
    __m512bh kv[NK];
#pragma GCC unroll 16
    for (int kk = 0; kk < NK; ++kk) {
      // The same line of the row `ahead` keys on, beside each load (all lines of the group's
      // rows at once, 64 prefetches for 16 rows at D = 128, made one-row decode 20 % slower).
      _mm_prefetch(reinterpret_cast<const char*>(k + (kk + ahead) * ldk + d), _MM_HINT_T0);
      kv[kk] = (__m512bh)_mm512_maskz_loadu_epi16(m, k + kk * ldk + d);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = (__m512bh)_mm512_load_si512(q + r * ldq + d);  // zero past depth
#pragma GCC unroll 16
      for (int kk = 0; kk < NK; ++kk) acc[r * NK + kk] = _mm512_dpbf16_ps(acc[r * NK + kk], qv, kv[kk]);
    }
  };
  for (std::size_t d = 0; d < whole; d += 32) chunk(d, ~__mmask32(0));
  if (whole < depth) chunk(whole, (__mmask32(1) << (depth - whole)) - 1);
  const __m512 sums = _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale));  // lane r * NK + kk
  if constexpr (NK == 16) {
    _mm512_storeu_ps(s, sums);
  } else if constexpr (NK == 8) {
    _mm256_storeu_ps(s, _mm512_castps512_ps256(sums));
    _mm256_storeu_ps(s + lds, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)));
  } else if constexpr (NK == 4) {
    _mm_storeu_ps(s, _mm512_extractf32x4_ps(sums, 0));
    _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(sums, 3));
  } else {
    alignas(64) float t[16];
    _mm512_store_ps(t, sums);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) s[(i / NK) * lds + i % NK] = t[i];
  }
}

// R rows against one key (the last keys of a tile).
template <int R>
JOMOIM_BF16_TARGET inline void score_key(const std::uint16_t* q, std::size_t ldq, const std::uint16_t* k, float* s,
                                         std::size_t lds, std::size_t depth, float scale) {
  __m512 acc[R];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (std::size_t d = 0; d < depth; d += 32) {
    const __mmask32 m = depth - d >= 32 ? ~__mmask32(0) : (__mmask32(1) << (depth - d)) - 1;
    const __m512bh kv = (__m512bh)_mm512_maskz_loadu_epi16(m, k + d);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_load_si512(q + r * ldq + d), kv);
  }
  for (int r = 0; r < R; ++r) s[r * lds] = _mm512_reduce_add_ps(acc[r]) * scale;
}

template <int R>
JOMOIM_BF16_TARGET inline void score_rows(const std::uint16_t* q, std::size_t ldq, const std::uint16_t* k,
                                          std::ptrdiff_t ldk, std::size_t keys, float* s, std::size_t lds,
                                          std::size_t depth, float scale, std::ptrdiff_t ahead) {
  constexpr int NK = 16 / R;
  std::size_t j = 0;
  for (; j + NK <= keys; j += NK) score_keys<R, NK>(q, ldq, k + j * ldk, ldk, s + j, lds, depth, scale, ahead);
  for (; j < keys; ++j) score_key<R>(q, ldq, k + j * ldk, s + j, lds, depth, scale);
}

}  // namespace

JOMOIM_BF16_TARGET void score_rows_bf16(const std::uint16_t* q, std::size_t ldq, std::size_t rows,
                                        const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys, float* s,
                                        std::size_t lds, std::size_t depth, float scale, std::ptrdiff_t ahead) {
  std::size_t r = 0;
  for (; r + 8 <= rows; r += 8) score_rows<8>(q + r * ldq, ldq, k, ldk, keys, s + r * lds, lds, depth, scale, ahead);
  for (; r + 4 <= rows; r += 4) score_rows<4>(q + r * ldq, ldq, k, ldk, keys, s + r * lds, lds, depth, scale, ahead);
  for (; r + 2 <= rows; r += 2) score_rows<2>(q + r * ldq, ldq, k, ldk, keys, s + r * lds, lds, depth, scale, ahead);
  for (; r < rows; ++r) score_rows<1>(q + r * ldq, ldq, k, ldk, keys, s + r * lds, lds, depth, scale, ahead);
}

}  // namespace jomoim::detail
