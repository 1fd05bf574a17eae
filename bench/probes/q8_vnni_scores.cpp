// q8_vnni_scores.cpp — a measurement, not part of the library: how fast could grouped q8 decode
// compute its scores Q·K with integer products (issue 19's grouped q8 target; bench/NOTES.md,
// "Where grouped q8 decode's time goes")?
//
// Shape: 8 K/V heads × 4096 keys × D 128, q8 blocks of 32 (int8 values, one float scale a block,
// jomoim's Q8 layout), four query rows per K/V head (H32/Hkv8 decode). Two ways to score:
//   float  — today's method (ScoreRows<4> in src/engine/q8_attention.cpp): each key vector
//            widened to float32 and scaled, four FMAs into 4 x 4 accumulators, lane sums at the end.
//   vnni   — the query rounded to int8 once (per block of 32, llama.cpp's q8_0 × q8_0); 16 keys at
//            a time transposed so that each lane is one key; per 4 values one VPDPBUSD per row
//            (K + 128 as the unsigned operand, the query's 128·Σq taken off per block), per block
//            one conversion and FMA by the 16 keys' scales. No lane sums.
// Both run over the 8 heads with OpenMP; the program prints the median time of each and both
// methods' largest error against the float64 scores on the unrounded query.
//
// Build and run (one command; -O3: at -O2 GCC keeps the transposes in memory):
//   g++ -O3 -std=c++20 -fopenmp -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512dq -mfma
//       bench/probes/q8_vnni_scores.cpp -o /tmp/q8_vnni_scores && OMP_NUM_THREADS=2 /tmp/q8_vnni_scores
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kHeads = 8, kKeys = 4096, kD = 128, kBlock = 32, kBlocks = kD / kBlock, kRows = 4;

struct Data {
  std::vector<std::int8_t> k;  // [head][key][D]
  std::vector<float> ks;       // [head][key][block]
  std::vector<float> q;        // [head][row][D]
};

// One block of kBlock values to int8 with its scale max|x| / 127 (quantize_q8's rule,
// jomoim/engine/quant.hpp); returns the scale.
float quantize_block(const float* x, std::int8_t* out) {
  float m = 0;
  for (int i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(x[i]));
  const float s = m / 127, inv = s > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < kBlock; ++i) out[i] = std::int8_t(std::lrint(x[i] * inv));
  return s;
}

Data make_data() {
  Data d;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  d.k.resize(std::size_t(kHeads) * kKeys * kD);
  d.ks.resize(std::size_t(kHeads) * kKeys * kBlocks);
  d.q.resize(std::size_t(kHeads) * kRows * kD);
  std::vector<float> row(kD);
  for (std::size_t key = 0; key < std::size_t(kHeads) * kKeys; ++key) {
    for (float& x : row) x = nd(rng);
    for (int b = 0; b < kBlocks; ++b)
      d.ks[key * kBlocks + b] = quantize_block(row.data() + b * kBlock, d.k.data() + key * kD + b * kBlock);
  }
  for (float& x : d.q) x = nd(rng) / std::sqrt(float(kD));
  return d;
}

// Today's method: 4 rows x 4 keys of float accumulators.
void scores_float(const Data& d, int h, float* out /* [row][key] */) {
  const float* q = d.q.data() + std::size_t(h) * kRows * kD;
  for (int j = 0; j < kKeys; j += 4) {
    __m512 acc[kRows][4];
    for (auto& r : acc)
      for (auto& a : r) a = _mm512_setzero_ps();
    const std::int8_t* k0 = d.k.data() + (std::size_t(h) * kKeys + j) * kD;
    const float* s0 = d.ks.data() + (std::size_t(h) * kKeys + j) * kBlocks;
    for (int e = 0; e < kD; e += 16) {
      __m512 qv[kRows];
      for (int r = 0; r < kRows; ++r) qv[r] = _mm512_loadu_ps(q + r * kD + e);
      for (int kk = 0; kk < 4; ++kk) {
        const __m512 kv =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(k0 + kk * kD + e)))),
                          _mm512_set1_ps(s0[kk * kBlocks + e / kBlock]));
        for (int r = 0; r < kRows; ++r) acc[r][kk] = _mm512_fmadd_ps(qv[r], kv, acc[r][kk]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int kk = 0; kk < 4; ++kk) out[r * kKeys + j + kk] = _mm512_reduce_add_ps(acc[r][kk]);
  }
}

// 16 x 16 transpose of 32-bit lanes: lane c of in[i] goes to lane i of one output, column c's
// (which one: col_of in main()).
inline void transpose16(__m512i (&m)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(m[i], m[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(m[i], m[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    m[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    m[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    m[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    m[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // m[4a + c] now holds, in each 128-bit lane l, four consecutive rows of one column; combine
  // 128-bit lanes of rows 0-7 first, then rows 0-7 with rows 8-15 (main() finds which output
  // ended up holding which column).
  for (int i = 0; i < 8; ++i) {
    const int a = (i / 4) * 8 + (i % 4);  // pairs (0, 4), (1, 5), (2, 6), (3, 7), (8, 12), ...
    t[a] = _mm512_shuffle_i32x4(m[a], m[a + 4], 0x88);
    t[a + 4] = _mm512_shuffle_i32x4(m[a], m[a + 4], 0xdd);
  }
  // Second 128-bit stage: combine t[i] (rows 0-7) with t[i + 8] (rows 8-15).
  for (int i = 0; i < 8; ++i) {
    m[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    m[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// The integer method. qi: the query rounded, [row][D] int8; qd: its scales [row][block];
// qc: 128 * the sum of each rounded block, [row][block].
void scores_vnni(const Data& d, int h, const std::int8_t* qi, const float* qd, const std::int32_t* qc,
                 const int (&col_of)[16], float* out) {
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  for (int j = 0; j < kKeys; j += 16) {
    const std::int8_t* k0 = d.k.data() + (std::size_t(h) * kKeys + j) * kD;
    const float* s0 = d.ks.data() + (std::size_t(h) * kKeys + j) * kBlocks;
    __m512 acc[kRows];
    for (auto& a : acc) a = _mm512_setzero_ps();
    // The 16 keys' scales, one vector per block: lane i = key i's scale of block b (the 64
    // floats are contiguous: four loads, then two permutes and an insert a block).
    __m512 sb[kBlocks];
    {
      const __m512 v0 = _mm512_loadu_ps(s0), v1 = _mm512_loadu_ps(s0 + 16), v2 = _mm512_loadu_ps(s0 + 32),
                   v3 = _mm512_loadu_ps(s0 + 48);
      for (int b = 0; b < kBlocks; ++b) {
        const __m512i idx =
            _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28 + b, 24 + b, 20 + b, 16 + b, 12 + b, 8 + b, 4 + b, b);
        const __m512 lo = _mm512_permutex2var_ps(v0, idx, v1), hi = _mm512_permutex2var_ps(v2, idx, v3);
        sb[b] = _mm512_insertf32x8(lo, _mm512_castps512_ps256(hi), 1);
      }
    }
    for (int half = 0; half < 2; ++half) {  // values [64 half, 64 half + 64): 16 dwords of each key
      __m512i m[16];
      for (int i = 0; i < 16; ++i)
        m[i] = _mm512_xor_si512(_mm512_loadu_si512(k0 + i * kD + 64 * half), flip);  // k + 128
      transpose16(m);  // m[col_of[c]]: dword c (values 4c..4c+3 of this half) of the 16 keys
      for (int bh = 0; bh < 2; ++bh) {
        const int b = 2 * half + bh;
        for (int r = 0; r < kRows; ++r) {
          __m512i ai = _mm512_set1_epi32(-qc[r * kBlocks + b]);
          const std::int32_t* qw = reinterpret_cast<const std::int32_t*>(qi + r * kD + b * kBlock);
          for (int c = 0; c < 8; ++c) ai = _mm512_dpbusd_epi32(ai, m[col_of[8 * bh + c]], _mm512_set1_epi32(qw[c]));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_mul_ps(sb[b], _mm512_set1_ps(qd[r * kBlocks + b])),
                                   acc[r]);
        }
      }
    }
    for (int r = 0; r < kRows; ++r) _mm512_storeu_ps(out + r * kKeys + j, acc[r]);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  const Data d = make_data();
  // Which output of transpose16 holds column c: found by transposing a known matrix.
  int col_of[16];
  {
    __m512i m[16];
    for (int i = 0; i < 16; ++i) {
      alignas(64) std::int32_t v[16];
      for (int c = 0; c < 16; ++c) v[c] = c * 100 + i;
      m[i] = _mm512_load_si512(v);
    }
    transpose16(m);
    for (int o = 0; o < 16; ++o) {
      alignas(64) std::int32_t v[16];
      _mm512_store_si512(v, m[o]);
      for (int i = 0; i < 16; ++i)
        if (v[i] != (v[0] / 100) * 100 + i) {
          std::printf("transpose16 is wrong\n");
          return 1;
        }
      col_of[v[0] / 100] = o;
    }
  }
  // The rounded query.
  std::vector<std::int8_t> qi(std::size_t(kHeads) * kRows * kD);
  std::vector<float> qd(std::size_t(kHeads) * kRows * kBlocks);
  std::vector<std::int32_t> qc(qd.size());
  for (std::size_t rb = 0; rb < qd.size(); ++rb) {
    qd[rb] = quantize_block(d.q.data() + rb * kBlock, qi.data() + rb * kBlock);
    std::int32_t sum = 0;
    for (int i = 0; i < kBlock; ++i) sum += qi[rb * kBlock + i];
    qc[rb] = 128 * sum;
  }
  std::vector<float> sf(std::size_t(kHeads) * kRows * kKeys), sv(sf.size());
  auto run_float = [&] {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < kHeads; ++h) scores_float(d, h, sf.data() + std::size_t(h) * kRows * kKeys);
  };
  auto run_vnni = [&] {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < kHeads; ++h)
      scores_vnni(d, h, qi.data() + std::size_t(h) * kRows * kD, qd.data() + std::size_t(h) * kRows * kBlocks,
                  qc.data() + std::size_t(h) * kRows * kBlocks, col_of, sv.data() + std::size_t(h) * kRows * kKeys);
  };
  std::vector<double> tf, tv;
  for (int pass = 0; pass < 41; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    run_float();
    tf.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    run_vnni();
    tv.push_back(seconds_since(t0));
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tv.begin(), tv.end());
  // Errors against float64 scores on the unrounded query and the dequantized keys.
  double ef = 0, ev = 0, mag = 0;
  for (int h = 0; h < kHeads; ++h)
    for (int r = 0; r < kRows; ++r)
      for (int j = 0; j < kKeys; ++j) {
        double ref = 0;
        for (int e = 0; e < kD; ++e)
          ref += double(d.q[(std::size_t(h) * kRows + r) * kD + e]) * d.k[(std::size_t(h) * kKeys + j) * kD + e] *
                 d.ks[(std::size_t(h) * kKeys + j) * kBlocks + e / kBlock];
        const std::size_t o = (std::size_t(h) * kRows + r) * kKeys + j;
        ef = std::max(ef, std::fabs(sf[o] - ref));
        ev = std::max(ev, std::fabs(sv[o] - ref));
        mag = std::max(mag, std::fabs(ref));
      }
  std::printf("threads %d, %d heads x %d keys x D %d, %d rows a head: float %.1f us, vnni %.1f us (%.2fx)\n",
              omp_get_max_threads(), kHeads, kKeys, kD, kRows, 1e6 * tf[tf.size() / 2], 1e6 * tv[tv.size() / 2],
              tf[tf.size() / 2] / tv[tv.size() / 2]);
  std::printf("largest |score - float64|: float %.2e, vnni %.2e (largest |score| %.2f)\n", ef, ev, mag);
  return 0;
}
