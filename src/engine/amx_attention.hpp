// amx_attention.hpp — bf16 prefill, and 8-bit keys' scores, on Intel AMX tiles (internal).
//
// On CPUs with AMX-BF16 (Sapphire Rapids and later) one TDPBF16PS multiplies a 16 x 32 bf16 tile
// by a 32 x 16 one into 16 x 16 float32 sums: measured 3.8 TFLOP/s on one core of a Xeon here,
// 18x the core's float32 FMA peak. Both matrix products of attention run on the tiles:
//   S = Q K^T      A = Q's rows (bf16, zero-padded to a multiple of 32), B = K^T in pairs
//                  (a 16 x 16 transpose of 32-bit pairs per 16 keys and 32 dimensions);
//   O += P V       A = P's rows as bf16, B = V's rows interleaved in pairs of keys.
// The softmax between them (online, exp2 of scaled scores against a running row maximum) runs in
// AVX-512 on float32, as on every other path. P is float32: by default it goes to the tiles as
// three bf16 pieces, P = p1 + p2 + p3 exactly (each piece takes the next 8 bits of P's 24-bit
// significand; no weight is below about 2^-100 of its row's maximum, so no piece is a denormal,
// which the tiles would flush), so every product is exact and the sums float32, the contract of
// the float32 path; with
// options.bf16_weights P is rounded to one bf16 piece, as the AVX512_BF16 path does then.
//
// Work items are (batch, head, 64 query rows); a thread packs each block of 64 keys once for its
// item's four row tiles. Extra memory: about 200 KiB per thread at D = Dv = 256, none of it
// depending on N. Used only for calls it fits (amx_fits), others take the AVX-512 kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "problem.hpp"

namespace jomoim::detail {

// Whether the AMX path may run now: the CPU has it and the pinned target allows it (simd.cpp).
bool amx_enabled();

// Whether amx_attention computes p: bf16 storage, rows contiguous along D (strides[3] == 1 for q,
// k and v), no bias and no probabilities output, D and Dv at most 256, at least 32 query rows,
// and q, k and v all finite (a masked key's infinite value would otherwise reach the sums as
// 0 * inf; the scan reads each input once, against the N^2 work of the call).
bool amx_fits(const Problem& p);

// The attention of p on `threads` threads (p.out, and p.lse when asked for).
void amx_attention(const Problem& p, int threads);

// ---- 8-bit keys on AMX-INT8: the scores of four query rows (attention_q8kv) ----
//
// One TDPBSSD multiplies 16 keys' int8 values (the K rows as they lie in the cache: no widening,
// no transpose) by the four rows' queries in int8 pieces, summing exactly in int32. Each float32
// query row r goes as four pieces against one scale s_r = max_d |q_r[d]| / 127:
//   q_r = s_r (a0 + a1 2^-7 + a2 2^-14 + a3 2^-21) + e,  a0 in [-127, 127], a1..a3 in [-64, 64],
//   |e| <= s_r 2^-22 < 2^-28.9 max_d |q_r[d]|,
// the 16 columns of B being (piece p, row r) at p * 4 + r. Per key block, C's int32 sums (at
// most block * 127 * 127, exact in float32 up to block 1024) are converted and times the key's
// block scale added into float32; then times s_r 2^-7p, pieces summed. So the products are exact,
// the sums float32 as on the float path, and the query stands for itself to 2^-28.9 of its
// row's largest value (the float path: to its own float32 rounding, done before the call).

// int32 of scratch amx_q8_scores4 takes: two C tiles of 16 x 16 sums.
inline constexpr std::size_t kAmxQ8ScoreInts = 2 * 16 * 16;

// Bytes of B pieces amx_q8_prepare writes for depth D: 16 * D.
inline std::size_t amx_q8_piece_bytes(std::int64_t D) { return std::size_t(16 * D); }

// Splits rows q, q + ldq, q + 2 ldq, q + 3 ldq (D values each, D a multiple of 16) into pieces
// (amx_q8_piece_bytes(D), B's layout: byte (d / 4) * 64 + (p * 4 + r) * 4 + d % 4) and colscale
// (16 floats, s_r 2^-7p). False, writing nothing useful, when a value is not finite: the caller
// takes its float path, which propagates it. AVX-512 code: only where cpu_has_amx_int8() (cpu.hpp).
bool amx_q8_prepare(const float* q, std::int64_t ldq, std::int64_t D, std::int8_t* pieces, float* colscale);

// The tile configuration for key blocks of `block` values (a multiple of 16) on this thread;
// amx_q8_release gives the tile state back.
void amx_q8_configure(std::int64_t block);
void amx_q8_release();

// s[r * lds + j] = q_r . k_j for the 16 * groups keys from k (row j at k + j D, its block scales
// at scales + j D / block), rows r = 0..3 prepared by amx_q8_prepare; K rows `prefetch` ahead are
// prefetched. cbuf: kAmxQ8ScoreInts int32 of scratch, 64-byte aligned. Runs on the configured thread.
void amx_q8_scores4(const std::int8_t* pieces, const float* colscale, const std::int8_t* k, const float* scales,
                    std::int64_t D, std::int64_t block, std::int64_t groups, std::int64_t prefetch, float* s,
                    std::int64_t lds, std::int32_t* cbuf);

}  // namespace jomoim::detail
