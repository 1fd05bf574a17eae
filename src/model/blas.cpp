// See model/blas.hpp.
#include "blas.hpp"
#include "jomoim/engine/matvec.hpp"
#include "jomoim/engine/threads.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

namespace jomoim::model_blas {

bool bf16_native() {
  static const bool yes = __builtin_cpu_supports("avx512bf16");
  return yes;
}

namespace {

// One product's primitives: A and B from float32 to bf16 (oneDNN's reorder, JIT-compiled
// for the CPU's vector width; round to nearest even), then the matmul.
struct Bf16Product {
  dnnl::memory::desc a32, b32, a, b, c;
  dnnl::reorder to_a, to_b;
  dnnl::matmul prim;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The matmul C = A B (+ C when accumulate) for these layouts, made for nt threads.
dnnl::matmul make_matmul(const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                         bool accumulate, int nt) {
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(nt);
  try {
    dnnl::matmul m(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, cpu_engine()));
    omp_set_num_threads(saved);
    return m;
  } catch (...) {  // no bf16 matmul for this CPU: the caller's thread count as it was
    omp_set_num_threads(saved);
    throw;
  }
}

// C = op(A) op(B) (+ C when accumulate), A and B in bf16, on nt threads (oneDNN's own split
// of the product; the primitive is made once per shape, thread count and layout).
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               bool accumulate, float* C, int ldc, int nt) {
  using dnnl::memory;
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool, int>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Bf16Product>> cache;
  std::shared_ptr<Bf16Product> p;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = cache[Key{transA, transB, M, N, K, lda, ldb, ldc, accumulate, nt}];
    if (!slot) {
      auto q = std::make_shared<Bf16Product>();
      // A and B as compact copies of their stored layouts: A [M, K] or (transA) [K, M], etc.
      q->a = memory::desc({M, K}, memory::data_type::bf16, transA ? memory::dims{1, M} : memory::dims{K, 1});
      q->b = memory::desc({K, N}, memory::data_type::bf16, transB ? memory::dims{1, K} : memory::dims{N, 1});
      q->c = memory::desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
      q->a32 = memory::desc({M, K}, memory::data_type::f32, transA ? memory::dims{1, lda} : memory::dims{lda, 1});
      q->b32 = memory::desc({K, N}, memory::data_type::f32, transB ? memory::dims{1, ldb} : memory::dims{ldb, 1});
      q->prim = make_matmul(q->a, q->b, q->c, accumulate, nt);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(nt);
      q->to_a = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), q->a32, cpu_engine(), q->a));
      q->to_b = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), q->b32, cpu_engine(), q->b));
      omp_set_num_threads(saved);
      slot = q;
    }
    p = slot;
  }
  thread_local std::vector<std::uint16_t> abuf, bbuf;
  abuf.resize(static_cast<std::size_t>(M) * K);
  bbuf.resize(static_cast<std::size_t>(K) * N);
  memory am(p->a, cpu_engine(), abuf.data()), bm(p->b, cpu_engine(), bbuf.data()), cm(p->c, cpu_engine(), C);
  memory a32(p->a32, cpu_engine(), const_cast<float*>(A)), b32(p->b32, cpu_engine(), const_cast<float*>(B));
  dnnl::stream stream(cpu_engine());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(nt);
  p->to_a.execute(stream, a32, am);
  p->to_b.execute(stream, b32, bm);
  p->prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
  omp_set_num_threads(saved);
}

// C = A B^T (+ C) with A and B in bf16 already: the matmul alone (primitives made once per shape).
struct Bf16NtProduct {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
};

}  // namespace

bool gemm_bf16_nt(int M, int N, int K, const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb,
                  bool accumulate, float* C, int ldc, int threads) {
  using dnnl::memory;
  if (M <= 0 || N <= 0) return true;
  const int nt = resolve_threads(threads);
  using Key = std::tuple<int, int, int, int, int, int, bool, int>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Bf16NtProduct>> cache;
  std::shared_ptr<Bf16NtProduct> p;
  try {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = cache[Key{M, N, K, lda, ldb, ldc, accumulate, nt}];
    if (!slot) {
      auto q = std::make_shared<Bf16NtProduct>();
      q->a = memory::desc({M, K}, memory::data_type::bf16, memory::dims{lda, 1});
      q->b = memory::desc({K, N}, memory::data_type::bf16, memory::dims{1, ldb});  // B stored [N, K]
      q->c = memory::desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
      q->prim = make_matmul(q->a, q->b, q->c, accumulate, nt);
      slot = q;
    }
    p = slot;
  } catch (const dnnl::error&) {
    return false;  // no bf16 matmul for this CPU
  }
  memory am(p->a, cpu_engine(), const_cast<std::uint16_t*>(A)), bm(p->b, cpu_engine(), const_cast<std::uint16_t*>(B)),
      cm(p->c, cpu_engine(), C);
  dnnl::stream stream(cpu_engine());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(nt);
  p->prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
  omp_set_num_threads(saved);
  return true;
}

namespace {

// y[N] = beta y + alpha x[K] B for B [K, N] (GPT-2's [in, out] weights), in kColsParts fixed
// ranges of B's rows: each range's product into its own buffer (matvec::f32_cols), then the
// buffers summed in a fixed order, so the result does not depend on the threads. Each thread
// takes whole ranges, i.e. one contiguous part of B: splitting the columns instead (every row
// shared by the threads, their reads interleaved a few KiB apart) streamed GPT-2 small's
// weights at 18.5-20 GB/s on a 2-vCPU Zen 4 where a contiguous half per thread reads at 32
// (bench/NOTES.md, "A Zen 4 at last").
constexpr int kColsParts = 4;
void matvec_cols_parts(int N, int K, float alpha, const float* x, const float* B, int ldb, float beta, float* y,
                       int nt) {
  thread_local std::vector<float> parts;
  parts.resize(static_cast<std::size_t>(kColsParts) * N);
  float* P = parts.data();
  auto range = [&](int p) { return static_cast<int>(static_cast<long>(K) * p / kColsParts); };
  auto part = [&](int p) {
    const int k0 = range(p), k1 = range(p + 1);
    matvec::f32_cols(x + k0, k1 - k0, B + static_cast<long>(k0) * ldb, static_cast<std::size_t>(ldb), N, alpha, 0.0f,
                     P + static_cast<std::size_t>(p) * N);
  };
  static_assert(kColsParts == 4);
  auto sum = [&](int j0, int j1) {
    const float *p0 = P, *p1 = P + N, *p2 = P + 2 * N, *p3 = P + 3 * N;
    for (int j = j0; j < j1; ++j) {
      const float s = (p0[j] + p1[j]) + (p2[j] + p3[j]);
      y[j] = beta == 0.0f ? s : beta * y[j] + s;
    }
  };
  if (nt <= 1) {
    for (int p = 0; p < kColsParts; ++p) part(p);
    sum(0, N);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    for (int p = kColsParts * t / T; p < kColsParts * (t + 1) / T; ++p) part(p);
#pragma omp barrier
    sum(static_cast<int>(static_cast<long>(N) * t / T), static_cast<int>(static_cast<long>(N) * (t + 1) / T));
  }
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
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: C = beta C (oneDNN's sgemm refuses K = 0)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        C[static_cast<long>(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * C[static_cast<long>(i) * ldc + j];
    return;
  }
  int nt = resolve_threads(threads);
  // Small products are not worth a parallel region; slices are multiples of 16 columns.
  const double work = static_cast<double>(M) * N * K;
  if (work < 2e5) nt = 1;
  if (M == 1 && !transA && !transB && K >= 4 * kColsParts) {
    matvec_cols_parts(N, K, alpha, A, B, ldb, beta, C, omp_in_parallel() ? 1 : std::min(nt, kColsParts));
    return;
  }
  nt = std::max(1, std::min(nt, (N + 15) / 16));
  // Each slice's product; false if oneDNN refused it (the error is thrown outside the parallel
  // region, where an exception may leave it).
  auto run = [&](int j0, int j1) -> bool {
    const int n = j1 - j0;
    if (n <= 0) return true;
    const float* Bs = transB ? B + static_cast<long>(j0) * ldb : B + j0;
    float* Cs = C + j0;
    if (M == 1 && !transA && (!transB || (alpha == 1.0f && beta == 0.0f))) {
      // y[n] = x[K] op(B): one matrix-vector product per slice, through jomoim's own kernels
      // (jomoim/engine/matvec.hpp), which read the weights at 1.2-1.4x the bandwidth of
      // OpenBLAS 0.3.21's sgemv (decode is the time to read them).
      if (!transB)
        matvec::f32_cols(A, K, Bs, static_cast<std::size_t>(ldb), n, alpha, beta, Cs);
      else
        matvec::f32_rows(A, static_cast<std::size_t>(K), 1, Bs, static_cast<std::size_t>(ldb), K, n, nullptr, Cs, 1);
      return true;
    }
    // oneDNN's sgemm (AVX-512 where the CPU has it). Inside the parallel region below it runs on
    // the calling thread only (it does not nest); see the nt == 1 case for calls outside it.
    // Its arguments are checked above (sizes >= 1, leading dimensions from the callers' shapes),
    // so a refusal is a bug.
    return dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, n, K, alpha, A, lda, Bs, ldb, beta, Cs, ldc) ==
           dnnl_success;
  };
  bool ok = true;
  if (nt == 1) {
    // Outside a parallel region oneDNN would start omp_get_max_threads() threads: one here.
    const int saved = omp_get_max_threads();
    if (!omp_in_parallel()) omp_set_num_threads(1);
    ok = run(0, N);
    if (!omp_in_parallel()) omp_set_num_threads(saved);
  } else {
#pragma omp parallel num_threads(nt) reduction(&& : ok)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int blocks = (N + 15) / 16;
      const int b0 = static_cast<int>(static_cast<long>(blocks) * t / T);
      const int b1 = static_cast<int>(static_cast<long>(blocks) * (t + 1) / T);
      ok = run(std::min(N, b0 * 16), std::min(N, b1 * 16)) && ok;
    }
  }
  if (!ok)
    throw std::logic_error("model_blas::gemm: oneDNN's sgemm refused a " + std::to_string(M) + "x" + std::to_string(N) +
                           "x" + std::to_string(K) + " product");
}

}  // namespace jomoim::model_blas
