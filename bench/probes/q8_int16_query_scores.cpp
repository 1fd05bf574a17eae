// q8_int16_query_scores.cpp — a measurement, not part of the library: how much faster would one
// query row's q8 scores (decode with one query row a K/V head, issue 19's H32 target) be if the
// query were rounded to int16, as q8_rows rounds a decode step's activations (docs/design.md,
// "q8 on integers")? That rounding is not in attention_q8kv's contract (its oracle is the
// float64 formula on the float32 query and the dequantized K), so this is data for that
// decision, not a kernel.
//
// Shape: keys of D 128 in q8 blocks of 32 (int8 values, one float scale a block: jomoim's Q8
// layout), one query row, eight keys at a time, one thread. Three ways to score, each for AVX2
// and AVX-512:
//   float        — today's one-row method (ScoreRows<1> in src/engine/q8_attention.cpp): each
//                  key vector widened to float32 (vpmovsxbd, vcvtdq2ps), an FMA with the query
//                  into a block sum, the block sum times the key's block scale into the key's
//                  accumulator.
//   int16 block  — the query rounded once per block to int16 (s = max|q_block| / 32767,
//                  nearest), each key vector widened to int16 (vpmovsxbw, 16 or 32 values),
//                  VPMADDWD with the query, the block's int32 sums converted once and FMA'd by
//                  the key's scale times s.
//   int16 row    — the same with one scale for the whole row (s = max|q| / 32767), applied to
//                  each score at the end: the epilogue one multiplication shorter.
// The program prints each method's time a key (median of 9 passes over the keys, each the best
// of 20 calls) and its largest error against the float64 scores on the unrounded query, relative
// to the largest score. Run it on an AVX2-only CPU to see the AVX2 figures alone.
//
// Build and run:
//   g++ -O3 -std=c++20 bench/probes/q8_int16_query_scores.cpp -o /tmp/q8_int16 && /tmp/q8_int16
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kD = 128, kBlock = 32, kBlocks = kD / kBlock, kG = 8;

struct Data {
  int keys = 0;
  std::vector<std::int8_t> k;  // [key][D]
  std::vector<float> ks;       // [key][block]
  alignas(64) float q[kD];
  alignas(64) std::int16_t q16[kD];
  alignas(64) float q16s[kBlocks];    // each block's query scale
  alignas(64) std::int16_t q16r[kD];  // the query rounded with one scale for the row: q16rs
  float q16rs = 1;
};

Data make_data(int keys) {
  Data d;
  d.keys = keys;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  d.k.resize(std::size_t(keys) * kD);
  d.ks.resize(std::size_t(keys) * kBlocks);
  for (std::size_t key = 0; key < std::size_t(keys); ++key)
    for (int b = 0; b < kBlocks; ++b) {  // quantize_q8's rule: d = max|x| / 127, q = round(x / d)
      float x[kBlock], m = 0;
      for (float& v : x) v = nd(rng), m = std::max(m, std::fabs(v));
      const float s = m / 127;
      d.ks[key * kBlocks + b] = s;
      for (int i = 0; i < kBlock; ++i) d.k[key * kD + b * kBlock + i] = std::int8_t(std::lrint(x[i] / s));
    }
  for (float& x : d.q) x = nd(rng) * 1.44269504f / std::sqrt(float(kD));  // packed as the kernel's
  for (int b = 0; b < kBlocks; ++b) {
    float m = 0;
    for (int i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(d.q[b * kBlock + i]));
    const float s = m > 0 ? m / 32767 : 1.0f;
    d.q16s[b] = s;
    for (int i = 0; i < kBlock; ++i) d.q16[b * kBlock + i] = std::int16_t(std::lrint(d.q[b * kBlock + i] / s));
  }
  float m = 0;
  for (float x : d.q) m = std::max(m, std::fabs(x));
  d.q16rs = m > 0 ? m / 32767 : 1.0f;
  for (int e = 0; e < kD; ++e) d.q16r[e] = std::int16_t(std::lrint(d.q[e] / d.q16rs));
  return d;
}

__attribute__((target("avx2,fma"))) float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

__attribute__((target("avx2,fma"), noinline)) void float_avx2(const Data& d, float* s) {
  for (int j = 0; j < d.keys; j += kG) {
    __m256 acc[kG];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int b = 0; b < kBlocks; ++b) {
      __m256 t[kG] = {};
#pragma GCC unroll 4
      for (int e = b * kBlock; e < (b + 1) * kBlock; e += 8) {
        const __m256 qv = _mm256_load_ps(d.q + e);
#pragma GCC unroll 8
        for (int g = 0; g < kG; ++g) {
          const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&d.k[std::size_t(j + g) * kD + e]))));
          t[g] = e == b * kBlock ? _mm256_mul_ps(qv, x) : _mm256_fmadd_ps(qv, x, t[g]);
        }
      }
#pragma GCC unroll 8
      for (int g = 0; g < kG; ++g)
        acc[g] = _mm256_fmadd_ps(t[g], _mm256_set1_ps(d.ks[std::size_t(j + g) * kBlocks + b]), acc[g]);
    }
    for (int g = 0; g < kG; ++g) s[j + g] = hsum8(acc[g]);
  }
}

template <bool kRow>
__attribute__((target("avx2,fma"), noinline)) void int16_avx2(const Data& d, float* s) {
  const std::int16_t* q16 = kRow ? d.q16r : d.q16;
  for (int j = 0; j < d.keys; j += kG) {
    __m256 acc[kG];
    for (auto& a : acc) a = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int b = 0; b < kBlocks; ++b) {
      const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(q16 + b * kBlock));
      const __m256i qb = _mm256_load_si256(reinterpret_cast<const __m256i*>(q16 + b * kBlock + 16));
      const __m256 qs = _mm256_set1_ps(d.q16s[b]);
#pragma GCC unroll 8
      for (int g = 0; g < kG; ++g) {
        const std::int8_t* kr = &d.k[std::size_t(j + g) * kD + b * kBlock];
        const __m256i lo =
            _mm256_madd_epi16(qa, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kr))));
        const __m256i hi =
            _mm256_madd_epi16(qb, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kr + 16))));
        const __m256 ks = _mm256_set1_ps(d.ks[std::size_t(j + g) * kBlocks + b]);
        const __m256 scale = kRow ? ks : _mm256_mul_ps(ks, qs);  // the row's scale: once, at the end
        acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi)), scale, acc[g]);
      }
    }
    for (int g = 0; g < kG; ++g) s[j + g] = kRow ? hsum8(acc[g]) * d.q16rs : hsum8(acc[g]);
  }
}

__attribute__((target("avx512f,avx512bw"), noinline)) void float_avx512(const Data& d, float* s) {
  for (int j = 0; j < d.keys; j += kG) {
    __m512 acc[kG];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int b = 0; b < kBlocks; ++b) {
      __m512 t[kG] = {};
#pragma GCC unroll 2
      for (int e = b * kBlock; e < (b + 1) * kBlock; e += 16) {
        const __m512 qv = _mm512_load_ps(d.q + e);
#pragma GCC unroll 8
        for (int g = 0; g < kG; ++g) {
          const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(&d.k[std::size_t(j + g) * kD + e]))));
          t[g] = e == b * kBlock ? _mm512_mul_ps(qv, x) : _mm512_fmadd_ps(qv, x, t[g]);
        }
      }
#pragma GCC unroll 8
      for (int g = 0; g < kG; ++g)
        acc[g] = _mm512_fmadd_ps(t[g], _mm512_set1_ps(d.ks[std::size_t(j + g) * kBlocks + b]), acc[g]);
    }
    for (int g = 0; g < kG; ++g) s[j + g] = _mm512_reduce_add_ps(acc[g]);
  }
}

template <bool kRow>
__attribute__((target("avx512f,avx512bw"), noinline)) void int16_avx512(const Data& d, float* s) {
  const std::int16_t* q16 = kRow ? d.q16r : d.q16;
  for (int j = 0; j < d.keys; j += kG) {
    __m512 acc[kG];
    for (auto& a : acc) a = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int b = 0; b < kBlocks; ++b) {
      const __m512i qv = _mm512_load_si512(q16 + b * kBlock);
      const __m512 qs = _mm512_set1_ps(d.q16s[b]);
#pragma GCC unroll 8
      for (int g = 0; g < kG; ++g) {
        const std::int8_t* kr = &d.k[std::size_t(j + g) * kD + b * kBlock];
        const __m512i p =
            _mm512_madd_epi16(qv, _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr))));
        const __m512 ks = _mm512_set1_ps(d.ks[std::size_t(j + g) * kBlocks + b]);
        const __m512 scale = kRow ? ks : _mm512_mul_ps(ks, qs);
        acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[g]);
      }
    }
    for (int g = 0; g < kG; ++g)
      s[j + g] = kRow ? _mm512_reduce_add_ps(acc[g]) * d.q16rs : _mm512_reduce_add_ps(acc[g]);
  }
}

using Fn = void (*)(const Data&, float*);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void compare(const char* target, const Fn (&fn)[3], int keys) {
  const Data d = make_data(keys);
  std::vector<float> out[3];
  std::vector<double> t[3];
  for (auto& o : out) o.assign(keys, NAN);
  for (int pass = 0; pass < 9; ++pass)
    for (int m = 0; m < 3; ++m) {  // the methods interleaved
      double best = 1e30;
      for (int call = 0; call < 20; ++call) {
        const auto t0 = std::chrono::steady_clock::now();
        fn[m](d, out[m].data());
        best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
      }
      t[m].push_back(best / keys);
    }
  double err[3] = {0, 0, 0}, top = 0;
  for (int j = 0; j < keys; ++j) {
    double ref = 0;
    for (int e = 0; e < kD; ++e)
      ref +=
          double(d.q[e]) * double(d.k[std::size_t(j) * kD + e]) * double(d.ks[std::size_t(j) * kBlocks + e / kBlock]);
    top = std::max(top, std::fabs(ref));
    for (int m = 0; m < 3; ++m) err[m] = std::max(err[m], std::fabs(out[m][j] - ref));
  }
  const double tf = median(t[0]), tb = median(t[1]), tr = median(t[2]);
  std::printf(
      "%-7s %6d keys (%4zu KiB): ns a key: float %.2f, int16 block scales %.2f (%.2fx), int16 row scale %.2f "
      "(%.2fx); largest error / largest score: %.1e, %.1e, %.1e\n",
      target, keys, d.k.size() / 1024, tf, tb, tf / tb, tr, tf / tr, err[0] / top, err[1] / top, err[2] / top);
}

}  // namespace

int main() {
  __builtin_cpu_init();
  for (int keys : {2048, 65536}) {  // 256 KiB of K (L2), 8 MiB (L3)
    compare("AVX2", {float_avx2, int16_avx2<false>, int16_avx2<true>}, keys);
    if (__builtin_cpu_supports("avx512bw"))
      compare("AVX-512", {float_avx512, int16_avx512<false>, int16_avx512<true>}, keys);
  }
}
