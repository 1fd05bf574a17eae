// jomoim/engine/quant.hpp — 8- and 4-bit keys and values: the q8 and q4 formats, and attention
// that reads them.
//
// Format (q8, the layout of ggml's Q8_0 with a float scale): a [B, H, N, D] tensor is cut along
// its last dimension into blocks of `block` consecutive values (block divides D; 32 by default,
// a multiple of 16). Each block b of a row stores
//   d = max_i |x_i| / 127   (d = 0 for a block of zeros)
//   q_i = round_half_even(x_i / d)   in [-127, 127]
// and represents x_i ~ d * q_i, with |x_i - d q_i| <= d / 2. The int8 values are one C-order
// [B, H, N, D] array, the scales one C-order [B, H, N, D / block] float array: 1 + 4 / block
// bytes per value (1.125 at block 32, against 4 for float32).
//
// Why blocks along D, per key/value row: a KV cache appends one token's rows at a time, and
// per-row blocks quantize each new row on its own (no scale of an older row changes). Blocks of
// 32 match llama.cpp's Q8_0 (the peer of issue 19) error for error; one block per row (block =
// D) is the per-token-per-head choice, fewer bytes and a coarser scale.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "jomoim/core/tensor.hpp"
#include "jomoim/engine/attention.hpp"

namespace jomoim {

// A q8 tensor [B, H, N, D] in C order (see above). Views do not own their memory.
template <class I8, class F>
struct Q8View {
  std::array<std::int64_t, 4> shape{};  // [B, H, N, D]
  std::int64_t block = 32;              // values per scale; divides D
  I8* values = nullptr;                 // [B, H, N, D]
  F* scales = nullptr;                  // [B, H, N, D / block]
  std::int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  std::int64_t blocks_per_row() const { return block > 0 ? shape[3] / block : 0; }
  // A read-only view of the same memory.
  template <class CI8 = const I8, class CF = const F>
  requires(!std::is_same_v<CI8, I8>) operator Q8View<CI8, CF>() const { return {shape, block, values, scales}; }
};
using Q8Tensor4 = Q8View<std::int8_t, float>;
using ConstQ8Tensor4 = Q8View<const std::int8_t, const float>;

// Owning storage of one q8 tensor.
struct Q8Buffer {
  std::array<std::int64_t, 4> shape{};
  std::int64_t block = 32;
  std::vector<std::int8_t> values;
  std::vector<float> scales;
  Q8Tensor4 view() { return {shape, block, values.data(), scales.data()}; }
  ConstQ8Tensor4 view() const { return {shape, block, values.data(), scales.data()}; }
};

// Quantizes x (any strides) into out, whose shape must equal x's. Throws Error (one line) before
// writing anything when a value is NaN or infinite (naming its index), when the block size is
// not a positive multiple of 16 dividing D, or when shapes differ.
void quantize_q8(ConstTensor4 x, Q8Tensor4 out);
// The same into new storage.
Q8Buffer quantize_q8(ConstTensor4 x, std::int64_t block = 32);
// out = d * q, element by element (out any strides, x's shape).
void dequantize_q8(ConstQ8Tensor4 x, Tensor4 out);

// attention(q, k, v, out, options) with k [B, Hkv, Nk, D] and v [B, Hkv, Nk, Dv] in q8: the
// result is that of the float64 formula on the dequantized k and v (scores, softmax and
// accumulation in float32; k and v are widened block by block in registers, never stored
// wider). Options as attention(): causal, scale, bias, key_lengths, lse, notation (of q and out),
// threads; probs is refused. Made for decode (few query rows, many keys: each K and V byte is
// read once per group of query heads) but correct for any Nq. Memory: per thread, scratch of
// kRows * (D + 256 + Dv + 3) floats (packed queries, one tile of scores, the accumulator; where
// a V row has 2 or 4 blocks, on targets with 16 vector registers, and several query rows share a
// K/V head, also that many tiles of weights times V's scales: kRows * 256 * (Dv / block)), and
// for the key splits of the decode path units * kRows * (Dv + 2) floats, kept and reused as for
// attention(); nothing grows with Nk. kRows = 8 query rows per work item.
void attention_q8kv(ConstTensor4 q, ConstQ8Tensor4 k, ConstQ8Tensor4 v, Tensor4 out,
                    const AttentionOptions& options = {});

// Format q4: blocks of `block` consecutive values along D as for q8 (block a multiple of 32
// dividing D; 32 by default, ggml's Q4_0 block), each block b of a row storing
//   d = max_i |x_i| / 7   (d = 0 for a block of zeros)
//   q_i = round_half_even(x_i / d)   in [-7, 7]
// and representing x_i ~ d * q_i, with |x_i - d q_i| <= d / 2. A row's D / 2 bytes hold q_i + 8
// (in [1, 15]): byte i has value i in its low nibble and value i + D / 2 in its high nibble. The
// bytes are one C-order [B, H, N, D / 2] array, the scales one C-order [B, H, N, D / block] float
// array: 0.5 + 4 / block bytes per value (0.625 at block 32, against 1.125 for q8 and 4 for
// float32).
// Why the row's halves: a mask and a shift of one load give two runs of consecutive values at
// any vector width (ggml's Q4_0 pairs the halves of each block of 32, which on 256- and 512-bit
// vectors needs a lane shuffle to put the runs back in order). Why [-7, 7] and not Q4_0's
// [-8, 7] (d = the signed extreme / -8): symmetric levels keep zero exact and every value's
// error within d / 2, where the extra level rounds the opposite extreme by up to d. 4 bits carry
// about 1/18 the resolution of q8: a K/V format for long contexts where memory matters more
// than a model's last digits.
template <class U8, class F>
struct Q4View {
  std::array<std::int64_t, 4> shape{};  // [B, H, N, D] of the values represented
  std::int64_t block = 32;              // values per scale; a multiple of 32 dividing D
  U8* values = nullptr;                 // [B, H, N, D / 2] bytes, two values each
  F* scales = nullptr;                  // [B, H, N, D / block]
  std::int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  std::int64_t blocks_per_row() const { return block > 0 ? shape[3] / block : 0; }
  template <class CU8 = const U8, class CF = const F>
  requires(!std::is_same_v<CU8, U8>) operator Q4View<CU8, CF>() const { return {shape, block, values, scales}; }
};
using Q4Tensor4 = Q4View<std::uint8_t, float>;
using ConstQ4Tensor4 = Q4View<const std::uint8_t, const float>;

// Owning storage of one q4 tensor.
struct Q4Buffer {
  std::array<std::int64_t, 4> shape{};
  std::int64_t block = 32;
  std::vector<std::uint8_t> values;  // numel / 2 bytes
  std::vector<float> scales;
  Q4Tensor4 view() { return {shape, block, values.data(), scales.data()}; }
  ConstQ4Tensor4 view() const { return {shape, block, values.data(), scales.data()}; }
};

// As quantize_q8 / dequantize_q8, in q4: refusals name a non-finite value's index, a block size
// that is not a positive multiple of 32 dividing D, or differing shapes, before writing anything.
void quantize_q4(ConstTensor4 x, Q4Tensor4 out);
Q4Buffer quantize_q4(ConstTensor4 x, std::int64_t block = 32);
void dequantize_q4(ConstQ4Tensor4 x, Tensor4 out);

// attention_q8kv with k and v in q4: the result is that of the float64 formula on the
// dequantized k and v, with the same options and refusals. attention_q8kv's kernels compiled
// for q4 rows: each vector of values is widened from its bytes in registers (masked for a row's
// first half, shifted for its second, minus 8), nothing stored wider; memory as attention_q8kv
// (no AMX-INT8 scores). About q8's speed: 4 bits save memory, not time.
void attention_q4kv(ConstTensor4 q, ConstQ4Tensor4 k, ConstQ4Tensor4 v, Tensor4 out,
                    const AttentionOptions& options = {});

}  // namespace jomoim
