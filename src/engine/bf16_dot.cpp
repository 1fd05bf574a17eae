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
#pragma GCC unroll 8
  for (int x = 0; x < NV; ++x) qv[x] = (__m512bh)_mm512_load_si512(qd + 16 * x);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    std::uint32_t u;
    if (kLone) {
      u = k[r * ldk];
    } else {
      std::memcpy(&u, k + r * ldk, 4);
    }
    const __m512bh kb = (__m512bh)_mm512_set1_epi32(int(u));
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], kb, qv[x]);
  }
}

// MR x NV accumulators over the whole depth, then times scale into st.
template <int MR, int NV>
JOMOIM_BF16_TARGET inline void micro(const std::uint16_t* k, std::ptrdiff_t ldk, const std::uint32_t* qp,
                                     std::size_t ldq, float* st, std::size_t ldst, std::size_t depth, float scale) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_setzero_ps();
  std::size_t d = 0;
  for (; d + 2 <= depth; d += 2) step<MR, NV, false>(acc, k + d, ldk, qp + (d / 2) * ldq);
  if (d < depth) step<MR, NV, true>(acc, k + d, ldk, qp + (d / 2) * ldq);
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
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

// ---------------------------------------------------------------------------------------------
// P·V: weights and values paired along the keys.

JOMOIM_BF16_TARGET void pack_weight_pairs(const float* pt, std::size_t ldpt, std::size_t keys, std::size_t cols,
                                          std::uint32_t* pp, std::size_t ldp) {
  // cvtne2ps puts the second operand's 16 bf16 in the low half, the first's in the high half;
  // the permute interleaves them so lane x holds (row 2t, row 2t + 1) of column x.
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                                21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                                11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  const __m512 zero = _mm512_setzero_ps();
  for (std::size_t t = 0; 2 * t < keys; ++t) {
    const float* r0 = pt + 2 * t * ldpt;
    const float* r1 = 2 * t + 1 < keys ? r0 + ldpt : nullptr;
    std::uint32_t* dst = pp + t * ldp;
    for (std::size_t x = 0; x < cols; x += 16) {
      const __m512 a = _mm512_load_ps(r0 + x), b = r1 != nullptr ? _mm512_load_ps(r1 + x) : zero;
      const __m512i c = (__m512i)_mm512_cvtne2ps_pbh(b, a);
      _mm512_store_si512(dst + x, _mm512_permutexvar_epi16(idx, c));
    }
  }
}

JOMOIM_BF16_TARGET void pack_value_pairs(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys, std::size_t dv,
                                         std::uint32_t* vw, std::size_t ldw) {
  alignas(64) static constexpr std::uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                         8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                          53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                          27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLow), hi = _mm512_load_si512(kHigh);
  for (std::size_t t = 0; 2 * t < keys; ++t) {
    const std::uint16_t* r0 = v + std::ptrdiff_t(2 * t) * ldv;
    const bool pair = 2 * t + 1 < keys;
    std::uint32_t* dst = vw + t * ldw;
    for (std::size_t e = 0; e < ldw; e += 32) {
      const __mmask32 m = e >= dv ? 0 : dv - e >= 32 ? ~__mmask32(0) : (__mmask32(1) << (dv - e)) - 1;
      const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + e);
      const __m512i b = pair ? _mm512_maskz_loadu_epi16(m, r0 + ldv + e) : _mm512_setzero_si512();
      _mm512_store_si512(dst + e, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_store_si512(dst + e + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

JOMOIM_BF16_TARGET bool values_finite_bf16(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys,
                                           std::size_t dv) {
  const __m512i exp = _mm512_set1_epi16(0x7F80);  // all exponent bits set: an infinity or a NaN
  __mmask32 bad = 0;
  for (std::size_t j = 0; j < keys; ++j)
    for (std::size_t e = 0; e < dv; e += 32) {
      const __mmask32 m = dv - e >= 32 ? ~__mmask32(0) : (__mmask32(1) << (dv - e)) - 1;
      const __m512i x = _mm512_maskz_loadu_epi16(m, v + std::ptrdiff_t(j) * ldv + e);
      bad |= _mm512_mask_cmpeq_epi16_mask(m, _mm512_and_si512(x, exp), exp);
    }
  return bad == 0;
}

namespace {

// MR broadcast indices i x NV vectors of 16 lanes x, over `pairs` steps:
//   o[i * ldo + 16 x + lane] = o[...] * scale + sum_t b[t * ldb + i] . a[t * lda + 16 x + lane],
// scale = s[16 x + lane] (kScaleByLane: O^T, one factor per row along the lanes) or s[i].
template <int MR, int NV, bool kScaleByLane>
JOMOIM_BF16_TARGET inline void pv_micro(const std::uint32_t* b, std::size_t ldb, const std::uint32_t* a,
                                        std::size_t lda, std::size_t pairs, float* o, std::size_t ldo, const float* s) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      const __m512 f = kScaleByLane ? _mm512_load_ps(s + 16 * x) : _mm512_set1_ps(s[i]);
      acc[i][x] = _mm512_mul_ps(_mm512_load_ps(o + i * ldo + 16 * x), f);
    }
  for (std::size_t t = 0; t < pairs; ++t) {
    __m512bh av[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) av[x] = (__m512bh)_mm512_load_si512(a + t * lda + 16 * x);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh bb = (__m512bh)_mm512_set1_epi32(int(b[t * ldb + i]));
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[i][x] = _mm512_dpbf16_ps(acc[i][x], bb, av[x]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) _mm512_store_ps(o + i * ldo + 16 * x, acc[i][x]);
}

template <int MR, bool kScaleByLane>
JOMOIM_BF16_TARGET inline void pv_strip(const std::uint32_t* b, std::size_t ldb, const std::uint32_t* a,
                                        std::size_t lda, std::size_t lanes, std::size_t pairs, float* o,
                                        std::size_t ldo, const float* s) {
  auto scale = [&](std::size_t x) { return kScaleByLane ? s + x : s; };
  std::size_t x = 0;
  for (; x + 64 <= lanes; x += 64) pv_micro<MR, 4, kScaleByLane>(b, ldb, a + x, lda, pairs, o + x, ldo, scale(x));
  if (x + 32 <= lanes) {
    pv_micro<MR, 2, kScaleByLane>(b, ldb, a + x, lda, pairs, o + x, ldo, scale(x));
    x += 32;
  }
  if (x < lanes) pv_micro<MR, 1, kScaleByLane>(b, ldb, a + x, lda, pairs, o + x, ldo, scale(x));
}

template <bool kScaleByLane>
JOMOIM_BF16_TARGET inline void pv_tile(const std::uint32_t* b, std::size_t ldb, std::size_t nb, const std::uint32_t* a,
                                       std::size_t lda, std::size_t lanes, std::size_t pairs, float* o, std::size_t ldo,
                                       const float* s) {
  auto scale = [&](std::size_t i) { return kScaleByLane ? s : s + i; };
  std::size_t i = 0;
  for (; i + 6 <= nb; i += 6) pv_strip<6, kScaleByLane>(b + i, ldb, a, lda, lanes, pairs, o + i * ldo, ldo, scale(i));
  for (; i + 4 <= nb; i += 4) pv_strip<4, kScaleByLane>(b + i, ldb, a, lda, lanes, pairs, o + i * ldo, ldo, scale(i));
  for (; i < nb; ++i) pv_strip<1, kScaleByLane>(b + i, ldb, a, lda, lanes, pairs, o + i * ldo, ldo, scale(i));
}

}  // namespace

JOMOIM_BF16_TARGET void value_rows_bf16(const std::uint32_t* pp, std::size_t ldp, std::size_t rows,
                                        const std::uint32_t* vw, std::size_t ldw, std::size_t dvp, std::size_t pairs,
                                        float* o, std::size_t ldo, const float* alpha) {
  pv_tile<false>(pp, ldp, rows, vw, ldw, dvp, pairs, o, ldo, alpha);
}

JOMOIM_BF16_TARGET void value_cols_bf16(const std::uint32_t* vw, std::size_t ldw, std::size_t dv,
                                        const std::uint32_t* pp, std::size_t ldp, std::size_t cols, std::size_t pairs,
                                        float* ot, std::size_t ldo, const float* alpha) {
  pv_tile<true>(vw, ldw, dv, pp, ldp, cols, pairs, ot, ldo, alpha);
}

}  // namespace jomoim::detail
