// workload.hpp — one attention problem of `jomoim bench` with its own buffers, from the flags
// or from a case of the shared table (bench/cases/attention_cases.hpp).
//
// Inputs are uniform in [-1, 1) (q and k times amp, to reach large scores); out and lse are
// filled with NaN before each call so that an element the engine forgets to write cannot pass
// the check. Every tensor is contiguous in its notation's own order (the cases' natural_memory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "jomoim/core/half.hpp"
#include "jomoim/core/tensor.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"

#include "bench/options.hpp"

namespace jomoim::cli::bench {

struct Workload {
  std::string name;  // the case's, for --quick
  Index B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 1, Dv = 1;
  bool causal = false;
  std::optional<float> scale;
  Notation notation = Notation::paper;
  // Bias of the case's broadcast shape (cases::bias_shape), uniform in [-2, 2); random: 20% of
  // entries -inf and, where it has rows, row Nq / 2 of the first batch and head all -inf (it
  // must come out as zeros and lse = -inf); prefix: keys j < 0.6 Nk -inf.
  cases::BiasKind bias_kind = cases::BiasKind::none;
  cases::BiasMask bias_mask = cases::BiasMask::none;
  cases::KeyLens key_kind = cases::KeyLens::none;  // drawn by allocate() (cases::key_lengths_of)
  std::vector<std::int64_t> key_lengths;
  bool with_lse = false;
  float amp = 1;

  std::vector<float> q, k, v, out, bias, lse;
  // Storage of q, k, v (bench --dtype): f32, or bf16 / f16 bits in q16, k16, v16, with q, k, v
  // then holding the same rounded numbers as float32 (the check's reference inputs).
  Dtype dtype = Dtype::f32;
  bool bf16_weights = false;  // bench --bf16-weights (AttentionOptions::bf16_weights)
  std::vector<std::uint16_t> q16, k16, v16;
  // bench --dtype q8: k and v stored as q8 (jomoim/engine/quant.hpp) in blocks of q8_block values
  // (0: not q8), read by attention_q8kv; q stays float32 (dtype f32) and k, v then hold the
  // dequantized numbers, the reference's inputs (attention_q8kv's result is the formula's on them).
  Index q8_block = 0;
  Q8Buffer k8, v8;
  // bench --dtype q4: the same with k and v in q4 (attention_q4kv), blocks of q4_block (0: not q4).
  Index q4_block = 0;
  Q4Buffer k4, v4;

  // A case of the table; throws Error when its memory is not what the bench lays out.
  static Workload from_case(const cases::Case& c, bool with_lse);

  void allocate(unsigned seed);

  // Views as the engine takes them: [B, H, N, D], or [B, H, D, N] in 3b1b notation.
  ConstTensor4 view(const std::vector<float>& x, Index H, Index N, Index E) const;
  ConstTensor4 qv() const { return view(q, Hq, Nq, D); }
  ConstTensor4 kv() const { return view(k, Hkv, Nk, D); }
  ConstTensor4 vv() const { return view(v, Hkv, Nk, Dv); }
  Tensor4 outv();
  // The output in the paper's layout, whatever the notation (a transposed view, no copy).
  ConstTensor4 out_paper() const;

  AttentionOptions options(int threads);
  AttentionShape shape() { return check_attention_args(qv(), kv(), vv(), nullptr, options(1)); }
  void run(int threads);
  // One attention call on the inputs in their storage (no NaN fill): what is timed.
  void call(int threads);
  ConstTensor4x16 view16(const std::vector<std::uint16_t>& x, Index H, Index N, Index E) const;

  // Bytes a call must move at least: read q, k, v once (q8: each value's byte and its block's
  // float scale; q4: half a byte and the scale), write out.
  double bytes() const {
    const double in = dtype == Dtype::f32 ? 4.0 : 2.0;
    const double kv_in = q8_block > 0 ? 1.0 + 4.0 / double(q8_block) : q4_block > 0 ? 0.5 + 4.0 / double(q4_block) : in;
    return in * double(q.size()) + kv_in * double(k.size() + v.size()) + 4.0 * double(out.size());
  }
  // The storage's name, as --dtype spells it: f32, bf16, f16, q8 or q4.
  std::string storage_name() const { return q8_block > 0 ? "q8" : q4_block > 0 ? "q4" : dtype_name(dtype); }
  std::string shape_label() const;
};

}  // namespace jomoim::cli::bench
