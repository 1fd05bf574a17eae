// amx_attention.hpp — bf16 prefill on Intel AMX tiles (internal).
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

#include "problem.hpp"

namespace jomoim::detail {

// Whether the CPU has AMX-TILE, AMX-BF16 and AVX512_BF16 and the kernel lets this process use the
// tile state (Linux asks for it once: arch_prctl ARCH_REQ_XCOMP_PERM).
bool cpu_has_amx_bf16();
// Whether the AMX path may run now: the CPU has it and the pinned target allows it (simd.cpp).
bool amx_enabled();

// Whether amx_attention computes p: bf16 storage, rows contiguous along D (strides[3] == 1 for q,
// k and v), no bias and no probabilities output, D and Dv at most 256, at least 32 query rows,
// and q, k and v all finite (a masked key's infinite value would otherwise reach the sums as
// 0 * inf; the scan reads each input once, against the N^2 work of the call).
bool amx_fits(const Problem& p);

// The attention of p on `threads` threads (p.out, and p.lse when asked for).
void amx_attention(const Problem& p, int threads);

}  // namespace jomoim::detail
