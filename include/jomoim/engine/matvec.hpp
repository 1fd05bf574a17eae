// jomoim/engine/matvec.hpp — products of a few float32 rows with 32-, 16- and 8-bit weight matrices.
//
// The model's decode step multiplies one token's activations by every weight matrix: a
// matrix-vector product whose time is the time to read the weights. These kernels read the
// weights in their stored format (bf16 bits, or the q8 format of jomoim/engine/quant.hpp: int8
// values with one float scale per block of consecutive values along a row), widen them in
// registers to float32 and accumulate in float32; nothing wider than the stored format is
// written. The activations stay float32, except in q8_rows (below).
//
// Layout: W is [rows, K], one row per output (row r at w + r * ldw), so every output is one dot
// product along a contiguous row. x is [M, K] (row m at x + m * ldx), y is [M, rows] (row m at
// y + m * ldy):
//   y[m][r] = sum_k x[m][k] * W[r][k]  (+ bias[r] when bias is not null)
// M is any count of rows: a pass takes up to pass_rows() of them (four, or two on 16-register
// targets such as AVX2) and reads each widened weight vector once for them; with more rows than
// one pass, the weights go in blocks of rows that stay in L2 while every pass meets them. Passes
// and blocks only reorder whole dot products: each row's outputs are the bits a call with that
// row alone gives (for q8_rows, see below).
// Past a few dozen rows a widened tile and a GEMM are cheaper. One thread; callers split `rows`
// across threads. Compiled once per SIMD target (Highway), dispatched once per call like the
// attention kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jomoim::matvec {

// Activation rows a pass on the dispatched target (4 with 32 vector registers, 2 on AVX2 and
// other 16-register targets): each weight vector is read once per that many rows.
int pass_rows();

// W in bfloat16 bits (any K; ldw >= K).
void bf16_rows(const float* x, std::size_t ldx, int M, const std::uint16_t* w, std::size_t ldw, int K, int rows,
               const float* bias, float* y, std::size_t ldy);

// W in float32 (any K; ldw >= K): the decode step's tied head (wte is [vocab, C]).
void f32_rows(const float* x, std::size_t ldx, int M, const float* w, std::size_t ldw, int K, int rows,
              const float* bias, float* y, std::size_t ldy);

// The other layout, GPT-2's Conv1D [in, out], for one activation row: W is [K, n] with row stride
// ldw (n may be a slice of a wider matrix's columns), and
//   y[j] = beta * y[j] + alpha * sum_k x[k] * W[k][j]   for j < n.
// Four weight rows stream past at a time while the n outputs stay in y (keep n a few thousand
// at most: y should stay in L1/L2). Sums run over k in order; beta 0 overwrites y (NaN in y
// is not kept).
void f32_cols(const float* x, int K, const float* w, std::size_t ldw, int n, float alpha, float beta, float* y);

// W in q8: values [rows, K] (row stride ldw), scales [rows, K / block] (row stride K / block);
// block is 16 or 32 and divides K. W[r][k] = scales[r][k / block] * values[r][k]. With one or
// two activation rows (decode), where a block is whole int16 vectors and x is finite (not on
// one-lane targets), each row is rounded once per call to int16 per block (scale max |x| /
// 32767; error at most 2^-16 of the block's largest value, against the weights' 2^-8) and each
// block's products are summed exactly in int32 before scaling. Three rows or more (a prompt),
// or otherwise, widen the weights to float32 in registers: each row then gets the bits f32_rows
// gives it on the dequantized weights.
void q8_rows(const float* x, std::size_t ldx, int M, const std::int8_t* values, std::size_t ldw, const float* scales,
             int block, int K, int rows, const float* bias, float* y, std::size_t ldy);

// dst[i] = the float32 value of the bf16 bits src[i] (exact).
void widen_bf16(const std::uint16_t* src, float* dst, std::size_t n);

// One row of K finite floats into the q8 format (block a multiple of 16 that divides K): the
// same bits as quantize_q8's definition (quant.hpp), vectorized.
void quantize_q8_row(const float* x, int block, int K, std::int8_t* values, float* scales);

// Whether x[0..n) are all finite.
bool all_finite(const float* x, std::size_t n);

// dst[k] = scales[k / block] * values[k] for k < K (one q8 row; block divides K).
void dequantize_q8_row(const std::int8_t* values, const float* scales, int block, int K, float* dst);

}  // namespace jomoim::matvec
