// reference.cpp — the float64 oracle. Written to be read, not to be fast: plain loops over
// the definition, one query row at a time. Every fast path is tested against this.
#include <cmath>
#include <limits>
#include <vector>

#include "problem.hpp"

namespace jomoim {

namespace {

// The oracle on a validated problem. 16-bit inputs are widened exactly (to float32, then double).
ReferenceResult reference_of(const detail::Problem& p) {
  const auto [B, Hq, Hkv, Nq, Nk, D, Dv, scale] = p.s;
  const std::int64_t group = Hq / Hkv;  // query heads per key/value head
  const double inf = std::numeric_limits<double>::infinity();

  ReferenceResult r;
  r.out.assign(B * Hq * Nq * Dv, 0.0);    // [B, Hq, Nq, Dv]
  r.lse.assign(B * Hq * Nq, -inf);        // [B, Hq, Nq]
  r.probs.assign(B * Hq * Nq * Nk, 0.0);  // [B, Hq, Nq, Nk]
  std::vector<double> score(Nk);          // one row of scores: [Nk]
  std::vector<char> seen(Nk);             // whether the row sees key j: [Nk]

  // Non-finite inputs follow docs/design.md, "Non-finite inputs": keys a row does not see are never read; a NaN
  // (or +inf) score makes the row's output and lse NaN, as IEEE arithmetic gives it; a NaN in a
  // seen value makes the output components it feeds NaN (0 x NaN included).
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / group;  // the key/value head this query head reads
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::int64_t row = (b * Hq + h) * Nq + i;
        const std::int64_t visible = p.visible_keys(b, i);  // keys [0, visible) are not cut
        // score_j = scale * (q_i . k_j) + bias_ij for the keys the row sees (j < visible, bias
        // not -inf); the others are masked and not read.
        double max_score = -inf;  // NaN once any seen score is NaN
        bool any_seen = false;
        for (std::int64_t j = 0; j < Nk; ++j) {
          seen[j] = j < visible && !(p.has_bias && p.bias(b, h, i, j) == -std::numeric_limits<float>::infinity());
          if (!seen[j]) continue;
          any_seen = true;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += double(p.q_at(b, h, i, d)) * double(p.k_at(b, hk, j, d));
          score[j] = double(scale) * dot + (p.has_bias ? double(p.bias(b, h, i, j)) : 0.0);
          if (std::isnan(score[j]) || score[j] > max_score) max_score = score[j];
        }
        if (!any_seen) continue;  // every key masked: zeros, lse = -inf
        // softmax over the seen keys, shifted by the row maximum so that huge scores cannot
        // overflow (by 0 when every seen score is -inf: all weights are then 0).
        const double shift = max_score == -inf ? 0.0 : max_score;
        double sum = 0;
        for (std::int64_t j = 0; j < Nk; ++j)
          if (seen[j]) sum += score[j] = std::exp(score[j] - shift);
        r.lse[row] = shift + std::log(sum);  // -inf when sum = 0, NaN when sum is NaN
        const double inv = sum == 0 ? 0.0 : 1.0 / sum;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (!seen[j]) continue;
          r.probs[row * Nk + j] = score[j] * inv;
          for (std::int64_t e = 0; e < Dv; ++e) r.out[row * Dv + e] += score[j] * double(p.v_at(b, hk, j, e));
        }
        for (std::int64_t e = 0; e < Dv; ++e) r.out[row * Dv + e] *= inv;
      }
    }
  return r;
}

}  // namespace

ReferenceResult attention_reference(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const AttentionOptions& options) {
  return reference_of(detail::make_problem(q, k, v, nullptr, options));
}

ReferenceResult attention_reference(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v,
                                    const AttentionOptions& options) {
  return reference_of(detail::make_problem(q, k, v, nullptr, options));
}

}  // namespace jomoim
