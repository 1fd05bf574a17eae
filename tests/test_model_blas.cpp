// model_blas::gemm's matrix-vector case for GPT-2's [in, out] weights (M = 1, neither operand
// transposed: fixed ranges of the weight rows, one buffer each, summed in a fixed order):
// against a float64 sum, with 1, 2 and 3 threads giving the same bits, beta 0 never reading y.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/blas.hpp"

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
