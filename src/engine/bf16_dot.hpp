// bf16_dot.hpp — the AVX512_BF16 kernels (internal): Q·K^T of bf16 inputs by VDPBF16PS, for
// blocks of many query rows (prefill) and for the few rows of decode.
//
// Highway 1.0.3 cannot emit VDPBF16PS (its ReorderWidenMulAccumulate for bf16 widens and uses
// FMAs, and it has no AVX3_ZEN4 / SPR target), so these kernels are written with intrinsics in a
// function compiled for avx512bf16 (bf16_dot.cpp) and called from the AVX3 instantiation of the
// attention kernels, only when the CPU has the instructions and bf16_dot_enabled() says so
// (simd.cpp: the pseudo-target "AVX3_BF16", the default on such CPUs; pinning "AVX3" turns it off).
//
// Accuracy: a bf16 x bf16 product has at most 16 significant bits, so it is exact in float32;
// each VDPBF16PS adds two such products to the accumulator with round-to-nearest-even, so a
// D-term dot product takes at most D roundings, as a float32 FMA chain does, and the one multiply
// by scale * log2(e) afterwards takes one more: the float32 bound (D + 5) u sum |q k| of
// tests/attention_test_util.hpp holds unchanged. The instruction treats denormal inputs and results
// as zero (DAZ / FTZ): an absolute error below D * 2^-126 per score, far below that bound's floor.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jomoim::detail {

// Whether the CPU executes AVX512_BF16 (and AVX512F/BW/VL).
bool cpu_has_avx512_bf16();
// Whether the kernels may use it now: the CPU has it and the pinned target allows it.
bool bf16_dot_enabled();

// st[j * ldst + x] = scale * sum_d k[j * ldk + d] * q(x, d) for j < keys, x < cols (cols a
// multiple of 16), k in bf16 bits contiguous along d; q packed as bf16 pairs:
// qp[(d / 2) * ldq + x] holds q(x, d) in its low half and q(x, d + 1) in its high half (zero past
// depth), 64-byte aligned, ldq a multiple of 16. st rows 64-byte aligned.
void score_tile_bf16(const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys, const std::uint32_t* qp,
                     std::size_t ldq, std::size_t cols, float* st, std::size_t ldst, std::size_t depth, float scale);

// The few query rows of decode (the direct path): s[r * lds + j] = scale * sum_d q[r * ldq + d] *
// k[j * ldk + d] for r < rows, j < keys. q: rows of bf16 bits zero-padded to a multiple of 32
// (ldq too), 64-byte aligned; k: bf16 rows contiguous along d (any row stride), each read once
// for all the rows, prefetched `ahead` keys ahead. Products exact, sums in float32 (as above).
void score_rows_bf16(const std::uint16_t* q, std::size_t ldq, std::size_t rows, const std::uint16_t* k,
                     std::ptrdiff_t ldk, std::size_t keys, float* s, std::size_t lds, std::size_t depth, float scale,
                     std::ptrdiff_t ahead);

}  // namespace jomoim::detail
