// See model/blas.hpp.
#include "blas.hpp"
#include "jomoim/engine/threads.hpp"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

namespace jomoim::model_blas {

bool bf16_native() {
  static const bool yes = __builtin_cpu_supports("avx512bf16");
  return yes;
}

namespace {

// float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN).
inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// rows x cols of src (row stride ld) into dst, compact.
void convert(const float* src, int rows, int cols, int ld, std::uint16_t* dst, int nt) {
  const bool par = nt > 1 && static_cast<long>(rows) * cols > 65536;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
  for (int r = 0; r < rows; ++r) {
    const float* s = src + static_cast<long>(r) * ld;
    std::uint16_t* d = dst + static_cast<long>(r) * cols;
    for (int c = 0; c < cols; ++c) d[c] = to_bf16(s[c]);
  }
}

struct Bf16Product {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// C = op(A) op(B) (+ C when accumulate), A and B in bf16, on nt threads (oneDNN's own split
// of the product; the primitive is made once per shape, thread count and layout).
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               bool accumulate, float* C, int ldc, int nt) {
  using dnnl::memory;
  using Key = std::tuple<bool, bool, int, int, int, int, bool, int>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Bf16Product>> cache;
  std::shared_ptr<Bf16Product> p;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = cache[Key{transA, transB, M, N, K, ldc, accumulate, nt}];
    if (!slot) {
      auto q = std::make_shared<Bf16Product>();
      // A and B as compact copies of their stored layouts: A [M, K] or (transA) [K, M], etc.
      q->a = memory::desc({M, K}, memory::data_type::bf16, transA ? memory::dims{1, M} : memory::dims{K, 1});
      q->b = memory::desc({K, N}, memory::data_type::bf16, transB ? memory::dims{1, K} : memory::dims{N, 1});
      q->c = memory::desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      const int saved = omp_get_max_threads();
      omp_set_num_threads(nt);
      q->prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q->a, q->b, q->c), attr, cpu_engine()));
      omp_set_num_threads(saved);
      slot = q;
    }
    p = slot;
  }
  thread_local std::vector<std::uint16_t> abuf, bbuf;
  abuf.resize(static_cast<std::size_t>(M) * K);
  bbuf.resize(static_cast<std::size_t>(K) * N);
  if (transA)
    convert(A, K, M, lda, abuf.data(), nt);
  else
    convert(A, M, K, lda, abuf.data(), nt);
  if (transB)
    convert(B, N, K, ldb, bbuf.data(), nt);
  else
    convert(B, K, N, ldb, bbuf.data(), nt);
  memory am(p->a, cpu_engine(), abuf.data()), bm(p->b, cpu_engine(), bbuf.data()), cm(p->c, cpu_engine(), C);
  dnnl::stream stream(cpu_engine());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(nt);
  p->prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
  omp_set_num_threads(saved);
}

}  // namespace

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc, int threads, Precision precision) {
  if (precision == Precision::bf16 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && M >= 16 && N >= 16 &&
      K >= 16 && !omp_in_parallel()) {
    try {
      gemm_bf16(transA, transB, M, N, K, A, lda, B, ldb, beta == 1.0f, C, ldc, resolve_threads(threads));
      return;
    } catch (const dnnl::error&) {
      // No bf16 matmul for this CPU (oneDNN needs AVX-512 at least): float32 below.
    }
  }
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
