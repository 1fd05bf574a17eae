// The forward computations of GPT-2's layers, written once for both forwards: the inference
// forward with its KV cache (gpt.cpp) and the training forward that saves activations for the
// backward pass (train.cpp). Internal to the model part.
//
// Not here: attention itself (the engine's jomoim::attention), the KV cache, tracing, saved
// activations, cross-entropy and the backward functions (train.cpp), which read what these
// layers write. Every function is deterministic for a given thread count, and the row-wise and
// element-wise ones give the same bits for any thread count (a row or an element is computed
// the same way whichever thread runs it).
//
// Shapes: N rows (tokens; B x T flattened in training), C = n_embd, F = MLP width, V = vocab.
// `threads` <= 0 means OpenMP's default.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "blas.hpp"
#include "jomoim/core/tensor.hpp"
#include "jomoim/engine/threads.hpp"

namespace jomoim::layers {

// Chunk boundaries of the element-wise split are multiples of this many floats: a multiple of
// every x86 SIMD target's lane count (16 on AVX-512), so each chunk but the last is whole
// vectors and a split computes every element exactly as one call over the whole range would
// (the Highway kernels finish a range's tail with scalar code, which rounds differently).
inline constexpr std::size_t kChunkAlign = 64;

// Runs fn(begin, end) over [0, n) in one chunk per thread when n is large enough to be worth a
// parallel region (more than 64 Ki values), else in one chunk.
template <class Fn>
void for_chunks(std::size_t n, int threads, Fn&& fn) {
  const int nt = resolve_threads(threads);
  if (nt <= 1 || n <= 65536) {
    if (n > 0) fn(std::size_t{0}, n);
    return;
  }
  const std::ptrdiff_t chunks = nt;
  auto bound = [&](std::ptrdiff_t c) {
    if (c == chunks) return n;
    return std::min(n, n * static_cast<std::size_t>(c) / static_cast<std::size_t>(chunks) / kChunkAlign * kChunkAlign);
  };
#pragma omp parallel for schedule(static) num_threads(nt)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t b = bound(c), e = bound(c + 1);
    if (b < e) fn(b, e);
  }
}

// x[T, C] = wte[ids[t]] + wpe[first_position + t]: the token and position embeddings of T
// consecutive positions of one sequence.
void embed(const float* wte, const float* wpe, int C, const std::int32_t* ids, int T, int first_position, float* x);

// y[N, out] = x[N, in] W[in, out] + b  (row-major, W as GPT-2's Conv1D stores it; model_blas::gemm).
// precision: of the product's inputs (model_blas::Precision; training may take bf16).
void linear(const float* x, int N, int in, int out, const float* W, const float* b, float* y, int threads,
            model_blas::Precision precision = model_blas::Precision::f32);

// y = (x - mean) * rstd * g + b over each row of x[N, C]; y may alias x. Statistics in double:
// cheap at these sizes and independent of summation order. Stores each row's mean and rstd =
// 1 / sqrt(var + eps) when `mean` / `rstd` are not null (the backward pass needs them).
void layer_norm(const float* x, int N, int C, const float* g, const float* b, float eps, float* y, float* mean,
                float* rstd, int threads);

// y = GELU(x) over n values; y may alias x. exact: the erf form ("gelu"); else the tanh
// approximation GPT-2 uses ("gelu_new"), the engine's Highway kernel.
void gelu(const float* x, float* y, std::size_t n, bool exact, int threads);

// The erf form for one value: 0.5 x (1 + erf(x / sqrt 2)).
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }

// y[i] += x[i]: the residual connection.
void add(float* y, const float* x, std::size_t n);

// logits[N, V] = h[N, C] wte^T: the output head tied to the token embedding.
void tied_head(const float* h, int N, int C, const float* wte, int V, float* logits, int threads,
               model_blas::Precision precision = model_blas::Precision::f32);

// The heads of N = B x T rows of `row_stride` floats as a [B, H, T, D] view: head h is columns
// h*D .. h*D + D - 1 of each row. Q, K and V read straight out of the fused qkv rows (row_stride
// 3C, base offset 0, C or 2C), the KV cache and the attention output (row_stride C).
template <class T>
TensorView<T, 4> heads(T* base, std::int64_t B, std::int64_t H, std::int64_t Tn, std::int64_t D,
                       std::int64_t row_stride) {
  return {base, {B, H, Tn, D}, {Tn * row_stride, D, row_stride, 1}};
}

}  // namespace jomoim::layers
