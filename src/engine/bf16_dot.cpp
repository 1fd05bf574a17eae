// bf16_dot.cpp — the VDPBF16PS kernels (see bf16_dot.hpp). The only file with AVX512_BF16 code;
// its functions carry their own target attribute, so the file compiles for the baseline.
#include "bf16_dot.hpp"

#include <immintrin.h>

// GCC 12's AVX-512 headers start the unmasked shuffles from a self-initialised "undefined"
// vector, which -Wuninitialized reports at every use; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>

namespace jomoim::detail {

#define JOMOIM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// Masks of the first n lanes (all of them for n >= the width): a last partial chunk.
inline __mmask32 first32(std::size_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }
inline __mmask16 first16(std::size_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }
// The lanes of 32 bf16 values that are an infinity or a NaN (all exponent bits set).
JOMOIM_BF16_TARGET inline __mmask32 nonfinite32(__m512i x) {
  const __m512i exp = _mm512_set1_epi16(0x7F80);
  return _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exp), exp);
}

// A prefetch of rows streamed once, into L2: the policy of PrefetchStream (simd_blocks-inl.h),
// which this file, outside Highway's per-target compilation, cannot include.
inline void prefetch_stream(const std::uint16_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1); }
// Into L1, for rows read within the next few hundred cycles (pack_value_pairs).
inline void prefetch_near(const std::uint16_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
// pack_value_pairs reads V's rows this many ahead: a causal block's first tiles are packed
// straight from L3 or memory, and the loads waited there (65 % of the function's samples on the
// instruction after the load, Zen 5).
constexpr std::ptrdiff_t kPackAhead = 16;

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

// MR x NV accumulators over the whole depth, then times scale into st; with kMax, each of the
// NV vectors of columns' maximum in colmax taken over the MR new rows too.
template <int MR, int NV, bool kMax>
JOMOIM_BF16_TARGET inline void micro(const std::uint16_t* k, std::ptrdiff_t ldk, const std::uint32_t* qp,
                                     std::size_t ldq, float* st, std::size_t ldst, std::size_t depth, float scale,
                                     float* colmax) {
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
    for (int x = 0; x < NV; ++x) {
      acc[r][x] = _mm512_mul_ps(acc[r][x], s);
      _mm512_store_ps(st + r * ldst + 16 * x, acc[r][x]);
    }
  if constexpr (kMax) {
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      __m512 m = _mm512_load_ps(colmax + 16 * x);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) m = _mm512_max_ps(m, acc[r][x]);  // a NaN score may or may not stay
      _mm512_store_ps(colmax + 16 * x, m);
    }
  }
}

template <int MR, bool kMax>
JOMOIM_BF16_TARGET inline void row_block(const std::uint16_t* k, std::ptrdiff_t ldk, const std::uint32_t* qp,
                                         std::size_t ldq, std::size_t cols, float* st, std::size_t ldst,
                                         std::size_t depth, float scale, float* colmax) {
  std::size_t x = 0;
  for (; x + 64 <= cols; x += 64)
    micro<MR, 4, kMax>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale, colmax + (kMax ? x : 0));
  if (x + 32 <= cols) {
    micro<MR, 2, kMax>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale, colmax + (kMax ? x : 0));
    x += 32;
  }
  if (x < cols) micro<MR, 1, kMax>(k, ldk, qp + x, ldq, st + x, ldst, depth, scale, colmax + (kMax ? x : 0));
}

template <bool kMax>
JOMOIM_BF16_TARGET inline void score_tile(const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys,
                                          const std::uint32_t* qp, std::size_t ldq, std::size_t cols, float* st,
                                          std::size_t ldst, std::size_t depth, float scale, float* colmax) {
  if constexpr (kMax)
    for (std::size_t x = 0; x < cols; x += 16) _mm512_store_ps(colmax + x, _mm512_set1_ps(-__builtin_inff()));
  std::size_t j = 0;
  for (; j + 4 <= keys; j += 4)
    row_block<4, kMax>(k + j * ldk, ldk, qp, ldq, cols, st + j * ldst, ldst, depth, scale, colmax);
  for (; j < keys; ++j) row_block<1, kMax>(k + j * ldk, ldk, qp, ldq, cols, st + j * ldst, ldst, depth, scale, colmax);
}

}  // namespace

JOMOIM_BF16_TARGET void score_tile_bf16(const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys,
                                        const std::uint32_t* qp, std::size_t ldq, std::size_t cols, float* st,
                                        std::size_t ldst, std::size_t depth, float scale, float* colmax) {
  if (colmax != nullptr) {
    score_tile<true>(k, ldk, keys, qp, ldq, cols, st, ldst, depth, scale, colmax);
  } else {
    score_tile<false>(k, ldk, keys, qp, ldq, cols, st, ldst, depth, scale, nullptr);
  }
}

// ---------------------------------------------------------------------------------------------
// Decode: a few query rows against K rows read once, in place.

namespace {

// Lane i of the result = the sum of v[i]'s 16 lanes: four rounds of pairwise shuffles and adds
// (15 adds and 30 shuffles for 16 sums, against 16 x 4 rounds one vector at a time).
// Every loop fully unrolled: an index that is not a constant keeps v in memory, and the caller's
// accumulators with it (a store after every VDPBF16PS in score_keys' loop; bench/NOTES.md,
// "Decode's score accumulators in registers").
JOMOIM_BF16_TARGET inline __m512 sum16(const __m512 (&v)[16]) {
  __m512 w[8], x[4], y[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // per 128-bit block: v2i(0+2), v2i+1(0+2), v2i(1+3), v2i+1(1+3)
    w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // per block: the block's partial sums of v4i .. v4i+3
    const __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
    x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
#pragma GCC unroll 2
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
  // One loop with a mask (all ones but on a last partial chunk).
  for (std::size_t d = 0; d < depth; d += 32) {
    const __mmask32 m = first32(depth - d);
    __m512bh kv[NK];
#pragma GCC unroll 16
    for (int kk = 0; kk < NK; ++kk) {
      // The same line of the row `ahead` keys on, beside each load (all lines of the group's
      // rows at once, 64 prefetches for 16 rows at D = 128, made one-row decode 20 % slower).
      prefetch_stream(k + (kk + ahead) * ldk + d);
      kv[kk] = (__m512bh)_mm512_maskz_loadu_epi16(m, k + kk * ldk + d);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = (__m512bh)_mm512_load_si512(q + r * ldq + d);  // zero past depth
#pragma GCC unroll 16
      for (int kk = 0; kk < NK; ++kk) acc[r * NK + kk] = _mm512_dpbf16_ps(acc[r * NK + kk], qv, kv[kk]);
    }
  }
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
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::size_t d = 0; d < depth; d += 32) {
    const __mmask32 m = first32(depth - d);
    const __m512bh kv = (__m512bh)_mm512_maskz_loadu_epi16(m, k + d);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_load_si512(q + r * ldq + d), kv);
  }
#pragma GCC unroll 8
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

JOMOIM_BF16_TARGET bool pack_value_pairs(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys, std::size_t dv,
                                         std::uint32_t* vw, std::size_t ldw) {
  alignas(64) static constexpr std::uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                         8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                          53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                          27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLow), hi = _mm512_load_si512(kHigh);
  __mmask32 bad = 0;
  for (std::size_t t = 0; 2 * t < keys; ++t) {
    const std::uint16_t* r0 = v + std::ptrdiff_t(2 * t) * ldv;
    const bool pair = 2 * t + 1 < keys;
    std::uint32_t* dst = vw + t * ldw;
    for (std::size_t e = 0; e < ldw; e += 32) {
      const __mmask32 m = e >= dv ? 0 : first32(dv - e);
      if (e < dv) {  // the rows kPackAhead ahead (a prefetch does not fault past the end)
        prefetch_near(r0 + kPackAhead * ldv + e);
        prefetch_near(r0 + (kPackAhead + 1) * ldv + e);
      }
      const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + e);
      const __m512i b = pair ? _mm512_maskz_loadu_epi16(m, r0 + ldv + e) : _mm512_setzero_si512();
      // (masked-off lanes and the missing row are zeros: finite)
      bad |= nonfinite32(a) | nonfinite32(b);
      _mm512_store_si512(dst + e, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_store_si512(dst + e + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
  return bad == 0;
}

JOMOIM_BF16_TARGET bool values_finite_bf16(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys,
                                           std::size_t dv) {
  __mmask32 bad = 0;
  for (std::size_t j = 0; j < keys; ++j)
    for (std::size_t e = 0; e < dv; e += 32)  // (masked-off lanes load as zeros: finite)
      bad |= nonfinite32(_mm512_maskz_loadu_epi16(first32(dv - e), v + std::ptrdiff_t(j) * ldv + e));
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

// ---------------------------------------------------------------------------------------------
// Decode's P·V: the few rows' weights paired in registers, V's rows interleaved pair by pair.

namespace {

// Of a chunk of 32 output columns, the lanes of the "lo" accumulator hold columns 0-3, 8-11,
// 16-19 and 24-27 and those of "hi" 4-7, 12-15, 20-23 and 28-31: VPUNPCKLWD / VPUNPCKHWD pair
// the low and the high four elements of each 128-bit block. kToLo / kToHi gather a chunk's two
// vectors of columns (0-15, 16-31) into that order; kFrom0 / kFrom1 put (lo, hi) back.
alignas(64) constexpr std::uint32_t kToLo[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr std::uint32_t kToHi[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
alignas(64) constexpr std::uint32_t kFrom0[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr std::uint32_t kFrom1[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
alignas(64) constexpr float kOnes[8] = {1, 1, 1, 1, 1, 1, 1, 1};

// Keys per segment: the weight pairs of 8 rows x 128 pairs (4 KiB) on the stack.
constexpr std::size_t kDirectKeys = 256;

// R rows x NC chunks of 32 columns from e0 (each chunk starting below dv), over `keys` keys:
// o = o * f[r] + P V, pp[r][t] holding row r's weights of keys 2t and 2t + 1 as bf16.
template <int R, int NC>
JOMOIM_BF16_TARGET inline void pv_direct(const std::uint32_t (*pp)[kDirectKeys / 2], const std::uint16_t* v,
                                         std::ptrdiff_t ldv, std::size_t keys, std::size_t e0, std::size_t dv, float* o,
                                         std::size_t ldo, const float* f, std::ptrdiff_t ahead) {
  const __m512i to_lo = _mm512_load_si512(kToLo), to_hi = _mm512_load_si512(kToHi);
  __m512 lo[R][NC], hi[R][NC];
  __mmask32 m[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) m[c] = first32(dv - (e0 + 32 * c));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const std::size_t e = e0 + 32 * c, left = dv - e;
      const __m512 s = _mm512_set1_ps(f[r]);
      const __m512 a0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(left), o + r * ldo + e), s);
      const __m512 a1 =
          _mm512_mul_ps(_mm512_maskz_loadu_ps(left > 16 ? first16(left - 16) : 0, o + r * ldo + e + 16), s);
      lo[r][c] = _mm512_permutex2var_ps(a0, to_lo, a1);
      hi[r][c] = _mm512_permutex2var_ps(a0, to_hi, a1);
    }
  auto step = [&](std::size_t t, const std::uint16_t* r0, const std::uint16_t* r1) JOMOIM_BF16_TARGET {
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const std::size_t e = e0 + 32 * c;
      prefetch_stream(r0 + ahead * ldv + e);
      const __m512i a = _mm512_maskz_loadu_epi16(m[c], r0 + e);
      __m512i b = _mm512_setzero_si512();
      if (r1 != nullptr) {
        prefetch_stream(r1 + ahead * ldv + e);
        b = _mm512_maskz_loadu_epi16(m[c], r1 + e);
      }
      const __m512bh vl = (__m512bh)_mm512_unpacklo_epi16(a, b), vh = (__m512bh)_mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512bh w = (__m512bh)_mm512_set1_epi32(int(pp[r][t]));
        lo[r][c] = _mm512_dpbf16_ps(lo[r][c], w, vl);
        hi[r][c] = _mm512_dpbf16_ps(hi[r][c], w, vh);
      }
    }
  };
  const std::size_t pairs = keys / 2;
  for (std::size_t t = 0; t < pairs; ++t) {
    const std::uint16_t* r0 = v + std::ptrdiff_t(2 * t) * ldv;
    step(t, r0, r0 + ldv);
  }
  if (keys % 2 != 0) step(pairs, v + std::ptrdiff_t(keys - 1) * ldv, nullptr);  // nothing past the last row
  const __m512i from0 = _mm512_load_si512(kFrom0), from1 = _mm512_load_si512(kFrom1);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const std::size_t e = e0 + 32 * c, left = dv - e;
      _mm512_mask_storeu_ps(o + r * ldo + e, first16(left), _mm512_permutex2var_ps(lo[r][c], from0, hi[r][c]));
      if (left > 16)
        _mm512_mask_storeu_ps(o + r * ldo + e + 16, first16(left - 16),
                              _mm512_permutex2var_ps(lo[r][c], from1, hi[r][c]));
    }
}

// R rows over all columns: NC chunks at a time while they fit, then one.
template <int R, int NC>
JOMOIM_BF16_TARGET inline void pv_direct_rows(const std::uint32_t (*pp)[kDirectKeys / 2], const std::uint16_t* v,
                                              std::ptrdiff_t ldv, std::size_t keys, std::size_t dv, float* o,
                                              std::size_t ldo, const float* f, std::ptrdiff_t ahead) {
  std::size_t e = 0;
  for (; e + 32 * (NC - 1) < dv; e += 32 * NC) pv_direct<R, NC>(pp, v, ldv, keys, e, dv, o, ldo, f, ahead);
  for (; e < dv; e += 32) pv_direct<R, 1>(pp, v, ldv, keys, e, dv, o, ldo, f, ahead);
}

}  // namespace

JOMOIM_BF16_TARGET void value_rows_direct_bf16(const float* p, std::size_t ldp, std::size_t rows,
                                               const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys,
                                               std::size_t dv, float* o, std::size_t ldo, const float* alpha,
                                               std::ptrdiff_t ahead) {
  if (rows > 8) {  // eight rows at a time (the direct path has at most eight)
    value_rows_direct_bf16(p, ldp, 8, v, ldv, keys, dv, o, ldo, alpha, ahead);
    value_rows_direct_bf16(p + 8 * ldp, ldp, rows - 8, v, ldv, keys, dv, o + 8 * ldo, ldo, alpha + 8, ahead);
    return;
  }
  alignas(64) std::uint32_t pp[8][kDirectKeys / 2];
  for (std::size_t k0 = 0; k0 < keys; k0 += kDirectKeys) {
    const std::size_t nk = std::min(kDirectKeys, keys - k0);
    // Row r's weights as bf16 pairs: VCVTNE2PS2BF16 puts its second operand's 16 in the low half,
    // so 32 weights in key order become the 16 pairs (2t, 2t + 1); zero past the segment.
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < nk; j += 32) {
        const float* pr = p + r * ldp + k0 + j;
        const __m512 a = _mm512_maskz_loadu_ps(first16(nk - j), pr);
        const __m512 b = _mm512_maskz_loadu_ps(nk - j > 16 ? first16(nk - j - 16) : 0, pr + 16);
        _mm512_store_si512(pp[r] + j / 2, (__m512i)_mm512_cvtne2ps_pbh(b, a));
      }
    const std::uint16_t* vs = v + std::ptrdiff_t(k0) * ldv;
    const float* f = k0 == 0 ? alpha : kOnes;  // the rescale once, on the first segment
    std::size_t r = 0;
    for (; r + 8 <= rows; r += 8) pv_direct_rows<8, 1>(pp + r, vs, ldv, nk, dv, o + r * ldo, ldo, f + r, ahead);
    for (; r + 4 <= rows; r += 4) pv_direct_rows<4, 2>(pp + r, vs, ldv, nk, dv, o + r * ldo, ldo, f + r, ahead);
    for (; r + 2 <= rows; r += 2) pv_direct_rows<2, 4>(pp + r, vs, ldv, nk, dv, o + r * ldo, ldo, f + r, ahead);
    for (; r < rows; ++r) pv_direct_rows<1, 4>(pp + r, vs, ldv, nk, dv, o + r * ldo, ldo, f + r, ahead);
  }
}

}  // namespace jomoim::detail
