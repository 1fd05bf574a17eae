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

// Whether the kernels may use it now: the CPU has it and the pinned target allows it.
bool bf16_dot_enabled();

// st[j * ldst + x] = scale * sum_d k[j * ldk + d] * q(x, d) for j < keys, x < cols (cols a
// multiple of 16), k in bf16 bits contiguous along d; q packed as bf16 pairs:
// qp[(d / 2) * ldq + x] holds q(x, d) in its low half and q(x, d + 1) in its high half (zero past
// depth), 64-byte aligned, ldq a multiple of 16. st rows 64-byte aligned. With colmax (64-byte
// aligned, cols floats), also colmax[x] = max_j st[j * ldst + x] (-inf for no keys; where a column
// holds a NaN, NaN or the largest number), so the softmax needs no pass of its own for it.
void score_tile_bf16(const std::uint16_t* k, std::ptrdiff_t ldk, std::size_t keys, const std::uint32_t* qp,
                     std::size_t ldq, std::size_t cols, float* st, std::size_t ldst, std::size_t depth, float scale,
                     float* colmax = nullptr);

// The few query rows of decode (the direct path): s[r * lds + j] = scale * sum_d q[r * ldq + d] *
// k[j * ldk + d] for r < rows, j < keys. q: rows of bf16 bits zero-padded to a multiple of 32
// (ldq too), 64-byte aligned; k: bf16 rows contiguous along d (any row stride), each read once
// for all the rows, prefetched `ahead` keys ahead. Products exact, sums in float32 (as above).
void score_rows_bf16(const std::uint16_t* q, std::size_t ldq, std::size_t rows, const std::uint16_t* k,
                     std::ptrdiff_t ldk, std::size_t keys, float* s, std::size_t lds, std::size_t depth, float scale,
                     std::ptrdiff_t ahead);

// ---------------------------------------------------------------------------------------------
// P·V of bf16 values by VDPBF16PS (blocks of many query rows): the weights p (float32, from the
// softmax) are rounded to bf16 (nearest even; denormals read as zero) and paired along the keys
// with the values, each product exact in float32 and the sums float32. Rounding a weight moves it
// by at most 2^-8 of itself, so an output moves by at most 2^-8 sum_j p_j |v_j| / l beyond the
// float32 bound (docs/design.md, "bf16 inputs"; tests/test_attention_half.cpp derives its
// tolerance from it). The weights' pairs, pp[t * ldp + x] = bf16(p[2t][x]) | bf16(p[2t + 1][x])
// << 16 (a zero high half past an odd key count), are written by the softmax itself (PairBf16 in
// simd_blocks-inl.h).

// vw[t * ldw + e] = v[2t][e] | v[2t + 1][e] << 16 for t < (keys + 1) / 2, e < ldw: v's rows bf16
// bits contiguous along e, row stride ldv (any sign); zero for e >= dv and in the high half of
// the pair past an odd `keys`. ldw a multiple of 32 (at least dv), vw 64-byte aligned. Returns
// whether the packed values are all finite (values_finite_bf16 of the same rows).
bool pack_value_pairs(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys, std::size_t dv, std::uint32_t* vw,
                      std::size_t ldw);

// Whether v's rows [0, keys) hold no infinity or NaN in their first dv elements (row stride ldv).
bool values_finite_bf16(const std::uint16_t* v, std::ptrdiff_t ldv, std::size_t keys, std::size_t dv);

// Output rows along the lanes' other side (row layout): for r < rows, e < dvp (a multiple of 16),
//   o[r * ldo + e] = o[r * ldo + e] * alpha[r] + sum_t pp[t * ldp + r] . vw[t * ldw + e]
// (the dot of two bf16 pairs), t < pairs. o rows 64-byte aligned.
void value_rows_bf16(const std::uint32_t* pp, std::size_t ldp, std::size_t rows, const std::uint32_t* vw,
                     std::size_t ldw, std::size_t dvp, std::size_t pairs, float* o, std::size_t ldo,
                     const float* alpha);

// The same into O^T (rows along the lanes): for e < dv, x < cols (a multiple of 16),
//   ot[e * ldo + x] = ot[e * ldo + x] * alpha[x] + sum_t vw[t * ldw + e] . pp[t * ldp + x].
void value_cols_bf16(const std::uint32_t* vw, std::size_t ldw, std::size_t dv, const std::uint32_t* pp, std::size_t ldp,
                     std::size_t cols, std::size_t pairs, float* ot, std::size_t ldo, const float* alpha);

// Decode's P·V (the direct path's few rows, row layout) on V's bf16 rows in place: for r < rows
// (at most 8), e < dv,
//   o[r * ldo + e] = o[r * ldo + e] * alpha[r] + sum_j bf16(p[r * ldp + j]) v[j * ldv + e], j < keys,
// the weights rounded to bf16 (nearest even, as above) and paired along the keys in registers
// (VCVTNE2PS2BF16 on a row of 32 weights gives the 16 pairs), each pair of V rows interleaved
// by VPUNPCKLWD / VPUNPCKHWD (the outputs' lanes then run in that order, put back when they are
// stored). V rows contiguous along e (any row stride), read once, prefetched `ahead` keys ahead;
// nothing past row keys - 1 or element dv - 1 is read. p's rows hold at least keys weights; o's
// rows dv floats.
void value_rows_direct_bf16(const float* p, std::size_t ldp, std::size_t rows, const std::uint16_t* v,
                            std::ptrdiff_t ldv, std::size_t keys, std::size_t dv, float* o, std::size_t ldo,
                            const float* alpha, std::ptrdiff_t ahead);

}  // namespace jomoim::detail
