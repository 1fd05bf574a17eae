// jomoim/engine/attention.hpp — exact scaled dot-product attention on CPU.
//
//   out = softmax(Q K^T * scale + bias, masked) V        (the paper's row notation)
//
// Shapes (letters as in docs/design.md):
//   q     [B, Hq,  Nq, D ]      k [B, Hkv, Nk, D]      v [B, Hkv, Nk, Dv]
//   out   [B, Hq,  Nq, Dv]
//   bias  broadcastable to [B, Hq, Nq, Nk]  (each dimension 1 or full; -inf masks a key)
//   lse   [B, Hq,  Nq]          natural-log log-sum-exp of each row's (scaled, biased) scores
//   probs [B, Hq,  Nq, Nk]      the softmax weights
// With notation == Notation::col3b1b ("3Blue1Brown"), q, k, v and out are column matrices
// [B, H, D, N] instead; bias, lse and probs keep the shapes above. The engine reads the
// columns in place through strides: no copy is made.
//
// Rules:
//   * Hq % Hkv == 0; query head h reads key/value head h / (Hq / Hkv) (GQA; Hkv = 1 is MQA).
//   * scale defaults to 1 / sqrt(D).
//   * causal masking is aligned bottom-right: query i sees key j iff j <= i + (L - Nq), where L
//     is Nk, or key_lengths[b] when key lengths are given.
//   * key_lengths[b] (0 <= key_lengths[b] <= Nk) hides keys j >= key_lengths[b] of batch b, so
//     sequences of different lengths share one padded tensor.
//   * a query row whose keys are all masked gives zeros in out and probs, and lse = -inf.
//     Nk = 0 is allowed and is that case for every row.
//   * scores of any finite magnitude are exact: softmax subtracts the running maximum.
//   * every view may have any strides (0 broadcasts an input dimension); outputs need
//     non-zero strides on every dimension longer than 1 and must not overlap the inputs.
//
// Memory: attention() never allocates anything that grows with Nq or Nk. Per thread it keeps
// scratch of 2*Bq*D + Bk*D + Bk*Dv + Bq*Bk + Bq*Dv + 3*Bq floats (packed queries, a packed key
// tile when K is not contiguous along D, a packed value tile when V is not, the score tile,
// the output accumulator), where the tile shape Bq x Bk is 64 x 256, 32 x 32 (short causal)
// or 256 x 64 (long non-causal, D >= 128; these also keep the accumulator transposed, Bq*Dv
// floats more): 417 KiB at D = Dv = 128 with 64 x 256, 643 KiB with 256 x 64. It is
// allocated on the thread's first call, grown only when a later call needs more, and reused. The decode path (few query
// rows, many keys, several threads) also keeps, per calling thread and likewise reused, a buffer of partial results of
// units * Bq * (Dv + 2) floats, where units is below 8 * threads. The probs output is the
// only N x N memory, and it is the caller's.
// 16-bit inputs (bf16, f16; see the overload below) use the same scratch: the queries are widened
// into the packed-query buffers and every K and V tile into the packed tile buffers above.
// attention_reference() allocates Nk doubles and its B*Hq*Nq*(Dv + Nk + 1) result.
//
// Threads: OpenMP, over batch x kv-head x query-block work items (keys too when there are too
// few items to keep every thread busy). Results are bitwise identical between runs with the
// same thread count and SIMD target.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jomoim/core/half.hpp"
#include "jomoim/core/notation.hpp"
#include "jomoim/core/tensor.hpp"

namespace jomoim {

struct AttentionOptions {
  bool causal = false;
  std::optional<float> scale;  // default 1 / sqrt(D); must be finite
  Notation notation = Notation::paper;
  std::optional<ConstTensor4> bias;           // broadcastable to [B, Hq, Nq, Nk]
  std::span<const std::int64_t> key_lengths;  // empty, or B entries in [0, Nk]
  std::optional<Tensor3> lse;                 // output [B, Hq, Nq]
  std::optional<Tensor4> probs;               // output [B, Hq, Nq, Nk]
  int threads = 0;                            // 0: OpenMP's default (omp_get_max_threads)
  // bf16 inputs only: the softmax weights may be rounded to bf16 for P·V (each moves by at most
  // 2^-8 of itself, so an output by at most 2^-8 sum_j p_j |v_j| more than float32's bound), as
  // PyTorch's and FlashAttention's bf16 kernels do; then P·V runs on VDPBF16PS too where Q·K^T
  // does (see below). Off by default: P·V in float32. f16 inputs and float32 ignore it.
  bool bf16_weights = false;
};

// The fast path. Throws jomoim::Error (one-line message) on invalid arguments, before writing
// anything.
void attention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out, const AttentionOptions& options = {});

// 16-bit inputs (jomoim/core/half.hpp): q, k and v all bf16 or all f16 (a mix of the two is
// refused), any strides, every option above; scores, softmax and accumulation in float32, out
// (and lse, probs) float32. The kernels widen each element exactly to float32 as they pack it
// (Q^T once per block of query rows, K and V once per tile into the packed-tile buffers that
// strided float32 inputs use), so the result is the float32 path's on the widened values, to
// the same tolerance: bitwise the same as attention() on float32 copies of the inputs with the
// same threads and target, when K is contiguous along D. Memory: the same per-thread scratch
// as float32 (K and V tiles are then always packed); nothing grows with Nq or Nk.
// On CPUs with AVX512_BF16 the default target is "AVX3_BF16" (jomoim/engine/simd.hpp): there
// the Q·K^T of bf16 inputs (blocks of more than 8 query rows, K contiguous along D) use
// VDPBF16PS on the bf16 bits in place: each bf16 x bf16 product is exact in float32 and each
// instruction adds two of them with one rounding each, so a D-term score takes at most D
// roundings plus one for the scale, the float32 bound again; the results are not bitwise those
// of AVX3 (denormal bf16 inputs count as zero there). Q is kept as bf16 pairs in the packed-query
// buffer: no extra memory. P·V stays float32 unless options.bf16_weights: then, in the same
// blocks, V contiguous along Dv, the weights are rounded to bf16 (nearest even) and paired along
// the keys with V's rows (32 KiB more scratch per thread at D = 64), each tile's products by
// VDPBF16PS; a tile whose masked keys hold a non-finite value takes the float32 path. Decode's
// blocks of 2-8 rows (a grouped-query head's rows) do the same with the weights paired in
// registers and V's rows read in place (4 KiB of stack, no scratch), in the tiles without masked
// keys; one query row keeps float32 P·V (there pairing V costs more than it saves).
void attention(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v, Tensor4 out,
               const AttentionOptions& options = {});

// The float64 oracle: plain loops, no tiling, no SIMD, no threads. Same arguments and rules as
// attention(); options.lse and options.probs are ignored — all three results are returned,
// always in the paper's layout, C order.
struct ReferenceResult {
  std::vector<double> out;    // [B, Hq, Nq, Dv]
  std::vector<double> lse;    // [B, Hq, Nq]
  std::vector<double> probs;  // [B, Hq, Nq, Nk]
};
ReferenceResult attention_reference(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v,
                                    const AttentionOptions& options = {});
// The oracle on 16-bit inputs: each element widened exactly to double.
ReferenceResult attention_reference(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v,
                                    const AttentionOptions& options = {});

// The attention problem after validation, in the paper's layout (3b1b views transposed).
struct AttentionShape {
  std::int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  float scale;
};
// Validates every argument as attention() does and returns the shape; throws Error.
AttentionShape check_attention_args(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const Tensor4* out,
                                    const AttentionOptions& options);
AttentionShape check_attention_args(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v,
                                    const Tensor4* out, const AttentionOptions& options);

// ---------------------------------------------------------------------------------------------
// Backward (gradients), FlashAttention-2 style: the scores are recomputed tile by tile from q, k
// and the forward's log-sum-exp, so no N x N buffer exists. With s = scale, per query row i:
//   P_ij = exp(s q_i.k_j + bias_ij - lse_i)  (0 where masked, and 0 on rows with lse = -inf)
//   dV_j += sum_i P_ij dO_i,   dP_ij = dO_i.v_j,   Delta_i = dO_i.O_i,   dS_ij = P_ij (dP_ij - Delta_i)
//   dQ_i = s sum_j dS_ij k_j,  dK_j += s sum_i dS_ij q_i,  dbias_ij = dS_ij (summed where broadcast)
// GQA: dk and dv of a key/value head sum the contributions of every query head of its group.

// The gradients attention_backward() writes. Every element of each given view is overwritten
// (zeros where a gradient is zero: masked keys, keys past key_lengths, rows whose keys are all
// masked). Outputs need non-overlapping strides and must not overlap any input or each other.
struct AttentionGradients {
  Tensor4 dq;                    // like q: [B, Hq, Nq, D] (3b1b: [B, Hq, D, Nq])
  Tensor4 dk;                    // like k: [B, Hkv, Nk, D]; the query heads of a group summed
  Tensor4 dv;                    // like v: [B, Hkv, Nk, Dv]
  std::optional<Tensor4> dbias;  // exactly options.bias's shape; where the bias broadcasts (a
                                 // dimension of 1) the gradient is summed over that dimension.
                                 // Optional; refused when options.bias is not given.
};

// Gradients of attention(q, k, v, out, options) with respect to q, k, v (and the bias) given
// dout = dL/dout. out [B, Hq, Nq, Dv] (notation as q) and lse [B, Hq, Nq] are the forward's
// results (lse from options.lse of the forward call); dout has out's shape. Same options as the
// forward (causal, scale, bias, key_lengths, notation, threads); options.lse and options.probs are
// ignored. Throws jomoim::Error (one-line message naming the argument) before writing anything
// on bad arguments: shape mismatches, dbias without a bias or of another shape, output strides
// that alias, outputs overlapping an input (q, k, v, out, lse, dout, bias) or each other.
//
// Work and memory: two passes over the score tiles. Pass 1, parallel over (batch, kv head, key
// block of 64 keys), accumulates dK and dV (and dbias) for its keys over every query head of
// the group and every query block; pass 2, parallel over (batch, query head, block of 64 query
// rows), accumulates dQ. Each recomputes S, P and dP for its tiles (about 3.5x the forward's
// floating-point work; no atomics, no N x N buffer). Per thread the scratch is
//   64 * (D + Dv + 2*Dp + Dvp + max(Dp, Dvp) + 2*64 + 2) floats
// (Dp, Dvp: D, Dv rounded up to the SIMD width; K^T and V^T of a key tile, packed Q and dO rows,
// the P and dS tiles, and two accumulators), 224.5 KiB at D = Dv = 128, 128.5 KiB at 64, taken
// from the same per-thread buffer as the forward's (grown on demand, reused); nothing grows with
// Nq or Nk. Delta_i is recomputed per tile from dout and out instead of stored.
// Threads: OpenMP (options.threads). Each output element is accumulated by one work item in a
// fixed order, so results are bitwise identical between runs with the same thread count and SIMD
// target. When dbias is requested and the bias broadcasts over batch, heads or keys, pass 1 does
// not split that dimension across threads (it is summed inside one work item instead); a bias
// broadcasting over all of batch, heads and keys makes pass 1 single-threaded.
void attention_backward(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, ConstTensor4 out, ConstTensor3 lse,
                        ConstTensor4 dout, const AttentionGradients& grads, const AttentionOptions& options = {});

// The float64 oracle of the gradients: plain loops over the definition above, with its own
// float64 forward (it needs neither out nor lse). Validates like attention_backward (dout has
// out's shape, in options.notation). Results in the paper's layout, C order: dq [B, Hq, Nq, D],
// dk [B, Hkv, Nk, D], dv [B, Hkv, Nk, Dv], dbias in options.bias's shape (empty without a bias).
// Allocates its results and O(Nk + Dv) doubles of work space.
struct ReferenceGradients {
  std::vector<double> dq, dk, dv, dbias;
};
ReferenceGradients attention_backward_reference(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, ConstTensor4 dout,
                                                const AttentionOptions& options = {});

// Floating-point operations of one call: 2*B*Hq*Nq*Nk*(D+Dv), halved when causal (the
// documented convention of the benchmarks; it ignores softmax and masks).
double attention_flops(const AttentionShape& s, bool causal);

}  // namespace jomoim
