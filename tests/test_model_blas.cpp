// model_blas::gemm's matrix-vector case for GPT-2's [in, out] weights (M = 1, neither operand
// transposed: fixed ranges of the weight rows, one buffer each, summed in a fixed order):
// against a float64 sum, with 1, 2 and 3 threads giving the same bits, beta 0 never reading y.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/elementwise.hpp"
#include "jomoim/engine/simd.hpp"
#include "model/blas.hpp"
#include "model/packed_weights.hpp"

namespace {

using jomoim::model_blas::gemm;

TEST(ModelBlas, MatvecColsMatchFloat64AndDoNotDependOnThreads) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (int K : {15, 16, 17, 63, 768, 3072})
    for (int N : {1, 7, 33, 768, 2304})
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const float alpha = beta == 0.5f ? -1.5f : 1.0f;
        std::vector<float> x(K), w(static_cast<std::size_t>(K) * N), y0(N);
        for (auto& v : x) v = nd(rng);
        for (auto& v : w) v = nd(rng) * 0.1f;
        for (auto& v : y0) v = nd(rng);
        std::vector<std::vector<float>> got;
        for (int threads : {1, 2, 3}) {
          std::vector<float> y = y0;
          if (beta == 0.0f) std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
          gemm(false, false, 1, N, K, alpha, x.data(), K, w.data(), N, beta, y.data(), N, threads);
          got.push_back(std::move(y));
        }
        const std::string what = "K=" + std::to_string(K) + " N=" + std::to_string(N) + " beta=" + std::to_string(beta);
        const double tol = 4.0 * (K + 4) * std::numeric_limits<float>::epsilon();
        for (int j = 0; j < N; ++j) {
          double s = 0.0, a = 0.0;
          for (int k = 0; k < K; ++k) {
            const double p = static_cast<double>(x[k]) * w[static_cast<std::size_t>(k) * N + j];
            s += p;
            a += std::abs(p);
          }
          const double base = beta == 0.0f ? 0.0 : static_cast<double>(beta) * y0[j];
          const double want = base + alpha * s;
          ASSERT_LE(std::abs(got[0][j] - want), tol * (std::abs(alpha) * a + std::abs(base)) + 1e-30)
              << what << " j=" << j;
        }
        for (std::size_t t = 1; t < got.size(); ++t)
          ASSERT_EQ(0, std::memcmp(got[0].data(), got[t].data(), N * sizeof(float)))
              << what << ": " << t + 1 << " threads differ from one";
        ++checked;
      }
  EXPECT_EQ(checked, 90);
}

}  // namespace

// gemm in general (float32): every transposition, strided operands, shapes from one row or one
// column to products oneDNN splits over threads, an empty sum (K = 0), alpha and beta; against
// a float64 sum with 1, 2 and 3 threads, the same bits again for the same thread count (the
// column slices, and so oneDNN's blocking, depend on it), beta 0 never reading C (NaN there),
// C's padding untouched. All of it runs on oneDNN's sgemm or jomoim's matrix-vector kernels: the
// runtime links no OpenBLAS (model/blas.hpp).
TEST(ModelBlas, GemmMatchesFloat64ForEveryLayout) {
  std::mt19937_64 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const auto& [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{1, 33, 17}, std::tuple{2, 3, 5},
                                std::tuple{10, 768, 256}, std::tuple{15, 17, 16}, std::tuple{16, 16, 16},
                                std::tuple{37, 129, 65}, std::tuple{5, 40, 0}, std::tuple{64, 300, 40}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          const float alpha = beta == 0.5f ? -1.5f : 1.0f;
          const int lda = (transA ? M : K) + 3, ldb = (transB ? K : N) + 2, ldc = N + 5;
          std::vector<float> a(static_cast<std::size_t>(transA ? K : M) * lda),
              b(static_cast<std::size_t>(transB ? N : K) * ldb), c0(static_cast<std::size_t>(M) * ldc);
          for (auto& v : a) v = nd(rng);
          for (auto& v : b) v = nd(rng);
          for (auto& v : c0) v = nd(rng);
          auto A = [&](int i, int k) {
            return double(transA ? a[std::size_t(k) * lda + i] : a[std::size_t(i) * lda + k]);
          };
          auto B = [&](int k, int j) {
            return double(transB ? b[std::size_t(j) * ldb + k] : b[std::size_t(k) * ldb + j]);
          };
          const std::string what = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                   (transA ? " A^T" : "") + (transB ? " B^T" : "") + " beta=" + std::to_string(beta);
          std::vector<std::vector<float>> got;
          for (int threads : {1, 2, 3, 2}) {
            std::vector<float> c = c0;
            if (beta == 0.0f)
              for (int i = 0; i < M; ++i)
                for (int j = 0; j < N; ++j) c[std::size_t(i) * ldc + j] = std::numeric_limits<float>::quiet_NaN();
            gemm(transA, transB, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, threads);
            got.push_back(std::move(c));
          }
          const double eps = std::numeric_limits<float>::epsilon();
          for (int t = 0; t < 3; ++t)
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < ldc; ++j) {
                const std::size_t at = std::size_t(i) * ldc + j;
                if (j >= N) {
                  ASSERT_EQ(got[t][at], c0[at]) << what << ": padding written at " << i << "," << j;
                  continue;
                }
                double s = 0.0, mag = 0.0;
                for (int k = 0; k < K; ++k) {
                  s += A(i, k) * B(k, j);
                  mag += std::abs(A(i, k) * B(k, j));
                }
                const double base = beta == 0.0f ? 0.0 : double(beta) * c0[at];
                ASSERT_LE(std::abs(got[t][at] - (base + alpha * s)),
                          4.0 * (K + 4) * eps * (std::abs(alpha) * mag + std::abs(base)) + 1e-30)
                    << what << ", " << t + 1 << " threads, at " << i << "," << j;
              }
          ASSERT_EQ(0, std::memcmp(got[1].data(), got[3].data(), got[1].size() * sizeof(float)))
              << what << ": two runs on 2 threads differ";
          ++checked;
        }
  EXPECT_EQ(checked, 9 * 4 * 3);
}

// The runtime's products load no OpenBLAS: Debian's pthread build starts a worker per core when
// it is loaded, which spins for ~80 ms and made a 2-thread 10-token prompt take 100 ms instead
// of 4 (model/blas.hpp). After products of every kind, no libopenblas is mapped in this process.
TEST(ModelBlas, LoadsNoOpenBlas) {
  std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f), c(64 * 64);
  gemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(), 64, 2);
  gemm(false, true, 3, 5, 7, 1.0f, a.data(), 7, b.data(), 7, 0.0f, c.data(), 5, 1);
  gemm(false, false, 1, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(), 64, 2);
  EXPECT_EQ(c[0], 8.0f);
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps) << "no /proc/self/maps";
  std::string line;
  while (std::getline(maps, line)) EXPECT_EQ(line.find("libopenblas"), std::string::npos) << line;
}

// elementwise::round_to_bf16 (the prompt products' rounding) on lengths around 4,096: nearest
// even, ties and carries into the exponent included, infinities kept, NaN still NaN.
TEST(ModelBlas, RoundToBf16IsNearestEven) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  for (std::size_t n : {std::size_t(1), std::size_t(37), std::size_t(4095), std::size_t(4096), std::size_t(70001)}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    const float specials[] = {1.0f + std::ldexp(1.0f, -8),      // a tie: stays even (1.0)
                              1.0f + 3 * std::ldexp(1.0f, -8),  // a tie: up to even
                              std::nextafter(2.0f, 0.0f),       // carries into the exponent
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              0.0f,
                              -0.0f};
    for (std::size_t i = 0; i < std::size(specials) && i < n; ++i) x[i] = specials[i];
    std::vector<std::uint16_t> got(n, 0xDEAD);
    jomoim::elementwise::round_to_bf16(x.data(), got.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(jomoim::bf16_to_float(got[i]))) << "n " << n << " at " << i;
      } else {
        ASSERT_EQ(got[i], jomoim::bf16_from_float(x[i])) << "n " << n << " at " << i << ": " << x[i];
      }
    }
  }
}

// gemm_bf16_nt: C = A B^T (+ C) on bf16 inputs against a float64 sum of the same bf16 values,
// within float32 accumulation's error; strided operands; C's padding untouched.
TEST(ModelBlas, Bf16NtProductMatchesFloat64) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& [M, N, K] :
       {std::tuple{16, 16, 16}, std::tuple{17, 33, 40}, std::tuple{224, 768, 256}, std::tuple{40, 300, 1024}})
    for (bool accumulate : {false, true})
      for (int threads : {1, 2}) {
        const int lda = K + 3, ldb = K + 5, ldc = N + 7;
        std::vector<std::uint16_t> a(static_cast<std::size_t>(M) * lda), b(static_cast<std::size_t>(N) * ldb);
        for (auto& v : a) v = jomoim::bf16_from_float(nd(rng));
        for (auto& v : b) v = jomoim::bf16_from_float(nd(rng));
        std::vector<float> c(static_cast<std::size_t>(M) * ldc);
        for (auto& v : c) v = nd(rng);
        const std::vector<float> c0 = c;
        if (!jomoim::model_blas::gemm_bf16_nt(M, N, K, a.data(), lda, b.data(), ldb, accumulate, c.data(), ldc,
                                              threads)) {
          EXPECT_EQ(c, c0) << "refused, but wrote";
          GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
        }
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < ldc; ++j) {
            const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
            if (j >= N) {
              ASSERT_EQ(c[at], c0[at]) << "padding written at " << i << "," << j;
              continue;
            }
            double s = accumulate ? c0[at] : 0.0, mag = accumulate ? std::abs(c0[at]) : 0.0;
            for (int k = 0; k < K; ++k) {
              const double p = double(jomoim::bf16_to_float(a[std::size_t(i) * lda + k])) *
                               jomoim::bf16_to_float(b[std::size_t(j) * ldb + k]);
              s += p;
              mag += std::abs(p);
            }
            ASSERT_NEAR(c[at], s, 2 * (K + 1) * std::ldexp(1.0, -24) * mag + 1e-30)
                << M << "x" << N << "x" << K << " at " << i << "," << j;
          }
      }
}

// packed_linear (src/model/packed_weights.hpp) over the row counts where it changes path: the
// matvec kernels (with float32 products up to 64 rows on AVX-512, 32 on AVX2; q8 on int16 for
// one or two rows), then widened tiles and a GEMM; 1 and 2 threads, natively and
// pinned to AVX2. Each output against float64 on the widened weights (PackedMatrix::rows_f32)
// and the same x, its columns past the outputs untouched. K 768 makes a bf16 block 32 rows and
// a q8 block 80: R 100 is three whole bf16 blocks and a part.
TEST(PackedLinear, MatchesFloat64AcrossPathsAndBlocks) {
  constexpr float kPoison = -7.25e30f;
  std::mt19937_64 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int K = 768, R = 100, ldy = R + 3;
  std::vector<float> w(static_cast<std::size_t>(R) * K), bias(R);
  for (auto& v : w) v = nd(rng) * 0.05f;
  for (auto& v : bias) v = nd(rng);
  const std::vector<std::string> all = jomoim::simd_targets();
  std::vector<std::pair<std::string, jomoim::WeightFormat>> cases;  // "": the native target
  for (const std::string t : {"", "AVX2"})
    if (t.empty() || std::find(all.begin(), all.end(), t) != all.end())
      for (const auto f : {jomoim::WeightFormat::bf16, jomoim::WeightFormat::q8}) cases.emplace_back(t, f);
  int checked = 0;
  for (const auto& [target, format] : cases) {
    jomoim::set_simd_target(target);
    const auto W = jomoim::PackedMatrix::pack(format, w.data(), R, K, false, "w");
    std::vector<float> wf(static_cast<std::size_t>(R) * K);
    W.rows_f32(0, R, wf.data());
    for (int N : {1, 2, 3, 5, 16, 17, 32, 33, 40, 64, 65}) {
      std::vector<float> x(static_cast<std::size_t>(N) * K);
      for (auto& v : x) v = nd(rng);
      for (int threads : {1, 2}) {
        std::vector<float> y(static_cast<std::size_t>(N) * ldy, kPoison);
        jomoim::packed_linear(x.data(), N, W, bias.data(), y.data(), ldy, threads);
        const std::string what = std::string(format == jomoim::WeightFormat::bf16 ? "bf16" : "q8") +
                                 " N=" + std::to_string(N) + " threads=" + std::to_string(threads) + " target " +
                                 (target.empty() ? "native" : target);
        for (int n = 0; n < N; ++n) {
          const float* xr = x.data() + static_cast<std::size_t>(n) * K;
          float xmax = 0.0f;
          for (int k = 0; k < K; ++k) xmax = std::max(xmax, std::abs(xr[k]));
          for (int r = 0; r < ldy; ++r) {
            const float g = y[static_cast<std::size_t>(n) * ldy + r];
            if (r >= R) {
              ASSERT_EQ(g, kPoison) << what << ": wrote past the outputs at n=" << n << " r=" << r;
              continue;
            }
            double s = bias[r], a = std::abs(bias[r]), wa = 0.0;
            for (int k = 0; k < K; ++k) {
              const double wk = wf[static_cast<std::size_t>(r) * K + k], p = xr[k] * wk;
              s += p;
              a += std::abs(p);
              wa += std::abs(wk);
            }
            // float32 sums; q8's matvec path also rounds x to int16 per block (an error of at
            // most 2^-16 of the block's largest |x| a value).
            double tol = 4.0 * (K + 4) * std::numeric_limits<float>::epsilon() * a;
            if (format == jomoim::WeightFormat::q8) tol += std::ldexp(wa * xmax, -15);
            ASSERT_LE(std::abs(g - s), tol + 1e-30) << what << " n=" << n << " r=" << r;
          }
        }
        ++checked;
      }
    }
  }
  jomoim::set_simd_target("");
  EXPECT_EQ(checked, static_cast<int>(cases.size()) * 11 * 2);
}
