// Matrix products of the model layers on oneDNN (sgemm; OpenBLAS for matrix-vector products),
// threaded by OpenMP.
//
// OpenBLAS's own thread pool and OpenMP's (attention, element-wise kernels) fight over the cores
// when both are used: each spins while the other works, and on a busy machine a decode step
// with 2 threads ran 5x slower than with 1. So OpenBLAS is kept single-threaded and every product
// is split by output columns over one OpenMP team instead; each thread calls OpenBLAS on its slice.
// Each output element is computed by one OpenBLAS call, so results are reproducible for a given
// thread count.
#pragma once

namespace jomoim::model_blas {

// The precision of a product's inputs. bf16: A and B are rounded to bfloat16 (nearest even)
// for the product, which accumulates and writes float32 (oneDNN's matmul; AVX512_BF16
// instructions where the CPU has them). Only for alpha = 1 and beta 0 or 1; otherwise f32.
enum class Precision { f32, bf16 };

// Whether the CPU multiplies bf16 natively (AVX512_BF16); elsewhere bf16 is emulated, slower.
bool bf16_native();

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, row-major, on `threads` threads
// (<= 0: OpenMP's default). transA / transB: A is stored [K, M] / B is stored [N, K].
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc, int threads, Precision precision = Precision::f32);

}  // namespace jomoim::model_blas
