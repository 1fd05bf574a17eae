// Matrix products of the model layers, threaded by OpenMP: float32 products on oneDNN's sgemm
// (AVX-512 where the CPU has it; OpenBLAS 0.3.21 runs its AVX2 Haswell kernels on CPUs it does
// not know, such as AMD Zen 5), matrix-vector products on jomoim's own kernels
// (jomoim/engine/matvec.hpp), bf16 products (training, prompts with --matmul bf16) on oneDNN's
// matmul. The runtime does not link OpenBLAS: Debian's pthread OpenBLAS starts a worker thread
// per core when it is loaded, and that thread spins in sched_yield for about 2^28 cycles (~80 ms)
// before it sleeps; on 2 cores a 10-token prompt with 2 OpenMP threads took 100 ms instead of 4
// (bench/NOTES.md, "OpenBLAS's spinning threads"). oneDNN's sgemm is also faster than OpenBLAS's
// at the runtime's small-M shapes (10 x 768 x 256: 33 against 72 us on one thread).
//
// A second thread pool next to OpenMP's (attention, element-wise kernels) makes both spin while
// the other works, so a float32 product is split by output columns over one OpenMP team; each
// thread calls oneDNN's sgemm on its slice (oneDNN does not nest inside it). Each output
// element is computed by one call, so results are reproducible for a given thread count. A bf16
// product runs as one oneDNN matmul on OpenMP's team (oneDNN's own split, also the same for a
// given thread count).
#pragma once

#include <cstddef>
#include <cstdint>

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

// C[M, N] = A B^T (+ C when accumulate) for A [M, K] and B [N, K] already in bf16, row-major
// with leading dimensions lda and ldb, C float32: oneDNN's bf16 matmul on `threads` threads, no
// conversion of the inputs. False, with C untouched, where oneDNN has no bf16 matmul.
bool gemm_bf16_nt(int M, int N, int K, const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb,
                  bool accumulate, float* C, int ldc, int threads);

}  // namespace jomoim::model_blas
