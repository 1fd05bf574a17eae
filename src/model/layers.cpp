// See layers.hpp.
#include "layers.hpp"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "blas.hpp"
#include "jomoim/engine/elementwise.hpp"

namespace jomoim::layers {

void embed(const float* wte, const float* wpe, int C, const std::int32_t* ids, int T, int first_position, float* x) {
  for (int t = 0; t < T; ++t) {
    const float* te = wte + static_cast<std::size_t>(ids[t]) * C;
    const float* pe = wpe + static_cast<std::size_t>(first_position + t) * C;
    float* xr = x + static_cast<std::size_t>(t) * C;
    for (int i = 0; i < C; ++i) xr[i] = te[i] + pe[i];
  }
}

void linear(const float* x, int N, int in, int out, const float* W, const float* b, float* y, int threads,
            model_blas::Precision precision) {
  for (int n = 0; n < N; ++n) std::memcpy(y + static_cast<std::size_t>(n) * out, b, sizeof(float) * out);
  model_blas::gemm(false, false, N, out, in, 1.0f, x, in, W, out, 1.0f, y, out, threads, precision);
}

void layer_norm(const float* x, int N, int C, const float* g, const float* b, float eps, float* y, float* mean,
                float* rstd, int threads) {
  auto row = [&](int n) {
    const std::size_t o = static_cast<std::size_t>(n) * C;
    elementwise::layer_norm_row(x + o, static_cast<std::size_t>(C), g, b, eps, y + o, mean ? mean + n : nullptr,
                                rstd ? rstd + n : nullptr);
  };
  // A decode step's few rows are not worth a parallel region (nor its call into OpenMP); a
  // row of 256 takes about 0.1 us.
  const int nt = resolve_threads(threads);
  if (nt > 1 && static_cast<std::int64_t>(N) * C >= 16384) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int n = 0; n < N; ++n) row(n);
  } else {
    for (int n = 0; n < N; ++n) row(n);
  }
}

void gelu(const float* x, float* y, std::size_t n, bool exact, int threads) {
  for_chunks(n, threads, [&](std::size_t b, std::size_t e) {
    if (!exact) {
      elementwise::gelu_tanh(x + b, y + b, e - b);
      return;
    }
    for (std::size_t i = b; i < e; ++i) y[i] = gelu_erf(x[i]);
  });
}

void add(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void tied_head(const float* h, int N, int C, const float* wte, int V, float* logits, int threads,
               model_blas::Precision precision) {
  model_blas::gemm(false, true, N, V, C, 1.0f, h, C, wte, C, 0.0f, logits, V, threads, precision);
}

}  // namespace jomoim::layers
