// problem.hpp — an attention call after validation, as the kernels see it (internal).
//
// Every view is in the paper's layout ([B, H, N, D]); 3b1b column views have been transposed
// through their strides, and a broadcast bias has stride 0 on its broadcast dimensions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/attention.hpp"

namespace jomoim::detail {

struct Problem {
  AttentionShape s;
  ConstTensor4 q, k, v;  // [B,Hq,Nq,D], [B,Hkv,Nk,D], [B,Hkv,Nk,Dv]; null data when 16-bit
  // The storage of q, k and v: float32 (in q, k, v), or bf16 / f16, whose bits are in q16, k16,
  // v16 (same shapes and strides as q, k, v, which keep them for indexing).
  Dtype dtype = Dtype::f32;
  TensorView<const std::uint16_t, 4> q16, k16, v16;
  Tensor4 out;  // [B,Hq,Nq,Dv] (may be empty when only the reference runs)
  bool causal = false;
  bool bf16_weights = false;  // options.bf16_weights (bf16 storage only)
  // Different for every problem made (make_problem): per-thread caches of packed tiles know by it
  // that a tile they hold belongs to this call, not to an earlier one with the same pointers.
  std::uint64_t call_id = 0;
  bool has_bias = false;
  ConstTensor4 bias;                          // [B,Hq,Nq,Nk], stride 0 on broadcast dimensions
  const std::int64_t* key_lengths = nullptr;  // B entries, or null
  bool has_lse = false, has_probs = false;
  Tensor3 lse;    // [B,Hq,Nq]
  Tensor4 probs;  // [B,Hq,Nq,Nk]

  bool half() const { return dtype != Dtype::f32; }
  // Elements of q, k, v as float32, whatever the storage (off the hot paths).
  float q_at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d) const {
    return half() ? half_to_float(q16(b, h, i, d), dtype) : q(b, h, i, d);
  }
  float k_at(std::int64_t b, std::int64_t h, std::int64_t j, std::int64_t d) const {
    return half() ? half_to_float(k16(b, h, j, d), dtype) : k(b, h, j, d);
  }
  float v_at(std::int64_t b, std::int64_t h, std::int64_t j, std::int64_t e) const {
    return half() ? half_to_float(v16(b, h, j, e), dtype) : v(b, h, j, e);
  }

  // Number of valid keys of batch b (Nk unless key lengths are given).
  std::int64_t key_length(std::int64_t b) const { return key_lengths ? key_lengths[b] : s.Nk; }

  // Query row i of batch b sees exactly the keys [0, visible_keys(b, i)) (before bias):
  // key lengths cut the tail, and causality (aligned bottom-right) cuts j > i + (L - Nq).
  std::int64_t visible_keys(std::int64_t b, std::int64_t i) const {
    const std::int64_t L = key_length(b);
    if (!causal) return L;
    return std::clamp<std::int64_t>(i + (L - s.Nq) + 1, 0, L);
  }
};

// Validates the arguments (throws Error) and builds the problem. out may be null (reference).
Problem make_problem(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const Tensor4* out,
                     const AttentionOptions& options);
// The same for 16-bit inputs (all three bf16, or all three f16; anything else is refused).
Problem make_problem(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v, const Tensor4* out,
                     const AttentionOptions& options);

// A backward call after validation (paper layout). dbias is a view of the caller's dbias with
// stride 0 on every dimension where the bias broadcasts, so dbias(b, h, i, j) is the element that
// (b, h, i, j) sums into.
struct BackwardProblem {
  Problem p;               // q, k, v, options (p.out, p.lse, p.probs unused)
  ConstTensor4 out, dout;  // [B,Hq,Nq,Dv]
  ConstTensor3 lse;        // [B,Hq,Nq]
  Tensor4 dq, dk, dv;      // like q, k, v
  bool has_dbias = false;
  Tensor4 dbias;        // [B,Hq,Nq,Nk], stride 0 where the bias broadcasts
  Tensor4 dbias_given;  // the caller's view (bias's shape), to zero before accumulating
};

// Validates a backward call (throws Error). out, lse and grads may be null (the reference).
BackwardProblem make_backward_problem(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const ConstTensor4* out,
                                      const ConstTensor3* lse, ConstTensor4 dout, const AttentionGradients* grads,
                                      const AttentionOptions& options);

}  // namespace jomoim::detail
