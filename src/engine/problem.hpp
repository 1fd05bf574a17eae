// problem.hpp — an attention call after validation, as the kernels see it (internal).
//
// Every view is in the paper's layout ([B, H, N, D]); 3b1b column views have been transposed
// through their strides, and a broadcast bias has stride 0 on its broadcast dimensions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "jomoim/engine/attention.hpp"

namespace jomoim::detail {

struct Problem {
  AttentionShape s;
  ConstTensor4 q, k, v;  // [B,Hq,Nq,D], [B,Hkv,Nk,D], [B,Hkv,Nk,Dv]
  Tensor4 out;           // [B,Hq,Nq,Dv] (may be empty when only the reference runs)
  bool causal = false;
  bool has_bias = false;
  ConstTensor4 bias;                          // [B,Hq,Nq,Nk], stride 0 on broadcast dimensions
  const std::int64_t* key_lengths = nullptr;  // B entries, or null
  bool has_lse = false, has_probs = false;
  Tensor3 lse;    // [B,Hq,Nq]
  Tensor4 probs;  // [B,Hq,Nq,Nk]

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
