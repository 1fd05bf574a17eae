// See model/blas.hpp.
#include "blas.hpp"
#include "jomoim/engine/threads.hpp"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <mutex>

namespace jomoim::model_blas {

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc, int threads) {
  static std::once_flag single;
  std::call_once(single, [] { openblas_set_num_threads(1); });
  if (M <= 0 || N <= 0) return;
  int nt = resolve_threads(threads);
  // Small products are not worth a parallel region; slices are multiples of 16 columns.
  const double work = static_cast<double>(M) * N * K;
  if (work < 2e5) nt = 1;
  nt = std::max(1, std::min(nt, (N + 15) / 16));
  auto run = [&](int j0, int j1) {
    const int n = j1 - j0;
    if (n <= 0) return;
    const float* Bs = transB ? B + static_cast<long>(j0) * ldb : B + j0;
    float* Cs = C + j0;
    if (M == 1 && !transA) {
      // y[n] = x[K] op(B): one matrix-vector product per slice.
      if (transB)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, K, alpha, Bs, ldb, A, 1, beta, Cs, 1);
      else
        cblas_sgemv(CblasRowMajor, CblasTrans, K, n, alpha, Bs, ldb, A, 1, beta, Cs, 1);
      return;
    }
    // oneDNN's sgemm (AVX-512 where the CPU has it: OpenBLAS 0.3.21 picks its Haswell kernels on
    // CPUs it does not know, e.g. AMD Zen 5) for products of some size; OpenBLAS for small ones,
    // where oneDNN's per-call overhead dominates. Inside the parallel region below oneDNN runs
    // on the calling thread only (it does not nest); see the nt == 1 case for calls outside it.
    if (M >= 16 && n >= 16 && K >= 16 &&
        dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, n, K, alpha, A, lda, Bs, ldb, beta, Cs, ldc) ==
            dnnl_success)
      return;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, n, K, alpha,
                A, lda, Bs, ldb, beta, Cs, ldc);
  };
  if (nt == 1) {
    // Outside a parallel region oneDNN would start omp_get_max_threads() threads: one here.
    const int saved = omp_get_max_threads();
    if (!omp_in_parallel()) omp_set_num_threads(1);
    run(0, N);
    if (!omp_in_parallel()) omp_set_num_threads(saved);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int blocks = (N + 15) / 16;
    const int b0 = static_cast<int>(static_cast<long>(blocks) * t / T);
    const int b1 = static_cast<int>(static_cast<long>(blocks) * (t + 1) / T);
    run(std::min(N, b0 * 16), std::min(N, b1 * 16));
  }
}

}  // namespace jomoim::model_blas
