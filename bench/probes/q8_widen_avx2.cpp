// q8_widen_avx2.cpp — a measurement, not part of the library: is there a cheaper exact way to
// widen q8's int8 values to float32 on AVX2 than VPMOVSXBD + VCVTDQ2PS? One-row q8 decode pinned
// to AVX2 (issue 19's H32 target, 3x float32) computes rather than waits for memory, and each
// value costs a widening load (a shuffle), a conversion and an FMA. Every way here gives the
// same floats (exactly), so none would change the kernel's results beyond summation order.
//
// The loops are shaped like the kernel's one-row P·V (src/engine/q8_attention.cpp,
// ValueColumns: C = 8 accumulators of 8 columns, a weight broadcast a key, D = 128 in two
// column slices) and one-row scores (each key's four blocks of 32, one scale a block). Keys
// sit in L1/L2 (512 keys, 64 KiB), one thread. Ways to widen 8 int8 values:
//   pmovsx+cvt  — today's: vpmovsxbd (from memory) then vcvtdq2ps;
//   xor-sub     — vpmovzxbd, XOR with 0x4B000080 (the float 2^23 + 128 + x), minus 2^23 + 128:
//                 the conversion traded for an integer XOR and a float subtraction;
//   shifts+cvt  — one 32-byte load, each byte of every dword sign-extended by shifts (x << 24
//                 >> 24 etc.: values in a stride-4 order, which a query permuted once, or
//                 P·V's accumulators permuted back once, would absorb), then vcvtdq2ps;
//   mixed       — half of a row's vectors one way (pmovsx+cvt), half the other (shifts+cvt), in
//                 case the shuffles and shifts use different pipes;
// and two ceilings that give wrong values: pmovsx without the conversion, and the bytes loaded
// as floats (the FMAs and loads alone).
//
// Build and run:
//   g++ -O3 -std=c++20 -mavx2 -mfma bench/probes/q8_widen_avx2.cpp -o /tmp/q8_widen && /tmp/q8_widen
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kD = 128, kC = 8;
enum Way { kPmovsxCvt, kXorSub, kShiftsCvt, kMixed, kPmovsxOnly, kFloatLoad, kWays };
const char* const kNames[kWays] = {"pmovsx+cvt", "xor-sub", "shifts+cvt", "mixed", "pmovsx only*", "float load*"};

__m256 widen8(const std::int8_t* r, bool xor_sub) {
  if (!xor_sub) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r))));
  const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r)));
  return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_xor_si256(u, _mm256_set1_epi32(0x4B000080))),
                       _mm256_set1_ps(8388736.0f));
}

// Four vectors of the 32 bytes at r, in stride-4 order: x[b] holds bytes b, b + 4, ..., b + 28.
void widen32_shifts(const std::int8_t* r, __m256 (&x)[4]) {
  const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
  x[0] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 24), 24));
  x[1] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 16), 24));
  x[2] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 8), 24));
  x[3] = _mm256_cvtepi32_ps(_mm256_srai_epi32(d, 24));
}

// out[e] = sum_j p[j] v[j][e] (the order of out's columns depends on the way; the timing does not).
template <Way W>
__attribute__((noinline)) void value_rows(const std::int8_t* v, const float* p, int n, float* out) {
  for (int e0 = 0; e0 < kD; e0 += kC * 8) {
    __m256 a[kC];
    for (auto& x : a) x = _mm256_setzero_ps();
    for (int j = 0; j < n; ++j) {
      const __m256 w = _mm256_set1_ps(p[j]);
      const std::int8_t* r = v + j * kD + e0;
      if constexpr (W == kShiftsCvt || W == kMixed) {
#pragma GCC unroll 2
        for (int h = 0; h < kC / 4; ++h) {
          __m256 x[4];
          if (W == kMixed && h == 0) {
            for (int c = 0; c < 4; ++c) x[c] = widen8(r + c * 8, false);
          } else {
            widen32_shifts(r + h * 32, x);
          }
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) a[4 * h + c] = _mm256_fmadd_ps(w, x[c], a[4 * h + c]);
        }
      } else {
#pragma GCC unroll 8
        for (int c = 0; c < kC; ++c) {
          __m256 x;
          if constexpr (W == kPmovsxOnly)
            x = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + c * 8))));
          else if constexpr (W == kFloatLoad)
            x = _mm256_loadu_ps(reinterpret_cast<const float*>(v + j * kD) + (c % 2) * 8);
          else
            x = widen8(r + c * 8, W == kXorSub);
          a[c] = _mm256_fmadd_ps(w, x, a[c]);
        }
      }
    }
    for (int c = 0; c < kC; ++c) _mm256_storeu_ps(out + e0 + c * 8, a[c]);
  }
}

// s[j] = sum_b scale[j][b] * sum_{d in block b} q[d] k[j][d], blocks of 32.
template <bool kXor>
__attribute__((noinline)) void scores(const std::int8_t* k, const float* ks, const float* q, int n, float* s) {
  for (int j = 0; j < n; ++j) {
    const std::int8_t* r = k + j * kD;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < kD / 32; ++b) {
      __m256 t = _mm256_mul_ps(_mm256_loadu_ps(q + b * 32), widen8(r + b * 32, kXor));
#pragma GCC unroll 3
      for (int c = 1; c < 4; ++c)
        t = _mm256_fmadd_ps(_mm256_loadu_ps(q + b * 32 + c * 8), widen8(r + b * 32 + c * 8, kXor), t);
      acc = _mm256_fmadd_ps(t, _mm256_set1_ps(ks[j * 4 + b]), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_hadd_ps(h, h);
    s[j] = _mm_cvtss_f32(_mm_hadd_ps(h, h));
  }
}

template <class F>
double median_best(F&& f) {  // median of 9 passes, each the best of 30 calls (seconds)
  std::vector<double> m;
  for (int pass = 0; pass < 9; ++pass) {
    double b = 1e30;
    for (int i = 0; i < 30; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      b = std::min(b, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    m.push_back(b);
  }
  std::sort(m.begin(), m.end());
  return m[m.size() / 2];
}

}  // namespace

int main() {
  constexpr int n = 512;
  std::mt19937 g(1);
  std::uniform_int_distribution<int> di(-127, 127);
  std::normal_distribution<float> nd;
  std::vector<std::int8_t> v(n * kD);
  for (auto& x : v) x = static_cast<std::int8_t>(di(g));
  std::vector<float> p(n), q(kD), ks(n * 4), out(kD), s0(n), s1(n);
  for (auto& x : p) x = nd(g);
  for (auto& x : q) x = nd(g);
  for (auto& x : ks) x = nd(g);
  // The exact ways must agree with today's to the bit where the order is the same.
  std::vector<float> ref(kD);
  value_rows<kPmovsxCvt>(v.data(), p.data(), n, ref.data());
  value_rows<kXorSub>(v.data(), p.data(), n, out.data());
  if (out != ref) return std::puts("xor-sub differs from pmovsx+cvt"), 1;
  for (int round = 0; round < 3; ++round) {
    std::printf("P·V ns a key:");
    double t[kWays];
    t[kPmovsxCvt] = median_best([&] { value_rows<kPmovsxCvt>(v.data(), p.data(), n, out.data()); });
    t[kXorSub] = median_best([&] { value_rows<kXorSub>(v.data(), p.data(), n, out.data()); });
    t[kShiftsCvt] = median_best([&] { value_rows<kShiftsCvt>(v.data(), p.data(), n, out.data()); });
    t[kMixed] = median_best([&] { value_rows<kMixed>(v.data(), p.data(), n, out.data()); });
    t[kPmovsxOnly] = median_best([&] { value_rows<kPmovsxOnly>(v.data(), p.data(), n, out.data()); });
    t[kFloatLoad] = median_best([&] { value_rows<kFloatLoad>(v.data(), p.data(), n, out.data()); });
    for (int w = 0; w < kWays; ++w) std::printf("  %s %.2f", kNames[w], t[w] / n * 1e9);
    const double a = median_best([&] { scores<false>(v.data(), ks.data(), q.data(), n, s0.data()); });
    const double b = median_best([&] { scores<true>(v.data(), ks.data(), q.data(), n, s1.data()); });
    if (s0 != s1) return std::puts("xor-sub scores differ"), 1;
    std::printf("\nscores ns a key:  pmovsx+cvt %.2f  xor-sub %.2f   (* wrong values: ceilings)\n", a / n * 1e9,
                b / n * 1e9);
  }
}
