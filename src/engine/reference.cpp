// reference.cpp — the float64 oracle. Written to be read, not to be fast: plain loops over
// the definition, one query row at a time. Every fast path is tested against this.
#include <cmath>
#include <limits>
#include <vector>

#include "problem.hpp"

namespace jomoim {

ReferenceResult attention_reference(ConstTensor4 q_in, ConstTensor4 k_in, ConstTensor4 v_in,
                                    const AttentionOptions& options) {
  const detail::Problem p = detail::make_problem(q_in, k_in, v_in, nullptr, options);
  const auto [B, Hq, Hkv, Nq, Nk, D, Dv, scale] = p.s;
  const std::int64_t group = Hq / Hkv;  // query heads per key/value head
  const double inf = std::numeric_limits<double>::infinity();

  ReferenceResult r;
  r.out.assign(B * Hq * Nq * Dv, 0.0);  // [B, Hq, Nq, Dv]
  r.lse.assign(B * Hq * Nq, -inf);      // [B, Hq, Nq]
  r.probs.assign(B * Hq * Nq * Nk, 0.0);  // [B, Hq, Nq, Nk]
  std::vector<double> score(Nk);        // one row of scores: [Nk]

  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / group;  // the key/value head this query head reads
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::int64_t row = (b * Hq + h) * Nq + i;
        const std::int64_t visible = p.visible_keys(b, i);  // keys [0, visible) are not masked
        // score_j = scale * (q_i . k_j) + bias_ij, or -inf where masked.
        double max_score = -inf;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (j >= visible) {
            score[j] = -inf;
            continue;
          }
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += double(p.q(b, h, i, d)) * double(p.k(b, hk, j, d));
          score[j] = double(scale) * dot + (p.has_bias ? double(p.bias(b, h, i, j)) : 0.0);
          if (score[j] > max_score) max_score = score[j];
        }
        if (max_score == -inf) continue;  // every key masked: zeros, lse = -inf
        // softmax over j, shifted by the row maximum so that huge scores cannot overflow.
        double sum = 0;
        for (std::int64_t j = 0; j < Nk; ++j) {
          score[j] = score[j] == -inf ? 0.0 : std::exp(score[j] - max_score);
          sum += score[j];
        }
        r.lse[row] = max_score + std::log(sum);
        for (std::int64_t j = 0; j < Nk; ++j) {
          const double w = score[j] / sum;
          r.probs[row * Nk + j] = w;
          if (w == 0) continue;
          for (std::int64_t e = 0; e < Dv; ++e) r.out[row * Dv + e] += w * double(p.v(b, hk, j, e));
        }
      }
    }
  return r;
}

}  // namespace jomoim
