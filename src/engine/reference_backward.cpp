// reference_backward.cpp — the float64 oracle of the attention gradients. Plain loops over the
// definition (attention.hpp), one query row at a time, with its own float64 forward; written to
// be read, not to be fast. The fast backward is tested against this, and this against finite
// differences of attention_reference().
#include <cmath>
#include <limits>
#include <vector>

#include "problem.hpp"

namespace jomoim {

ReferenceGradients attention_backward_reference(ConstTensor4 q_in, ConstTensor4 k_in, ConstTensor4 v_in,
                                                ConstTensor4 dout_in, const AttentionOptions& options) {
  const detail::BackwardProblem bp =
      detail::make_backward_problem(q_in, k_in, v_in, nullptr, nullptr, dout_in, nullptr, options);
  const detail::Problem& p = bp.p;
  const auto [B, Hq, Hkv, Nq, Nk, D, Dv, scale] = p.s;
  const std::int64_t group = Hq / Hkv;
  const double inf = std::numeric_limits<double>::infinity();
  const double s = double(scale);

  ReferenceGradients r;
  r.dq.assign(B * Hq * Nq * D, 0.0);
  r.dk.assign(B * Hkv * Nk * D, 0.0);
  r.dv.assign(B * Hkv * Nk * Dv, 0.0);
  // dbias in the bias's own shape: index of the element (b, h, i, j) sums into.
  std::array<std::int64_t, 4> bshape{}, bstride{};
  if (p.has_bias) {
    bshape = options.bias->shape;
    std::int64_t st = 1;
    for (int d = 3; d >= 0; --d) {
      bstride[d] = bshape[d] == 1 ? 0 : st;
      st *= bshape[d];
    }
    r.dbias.assign(st, 0.0);
  }
  std::vector<double> score(Nk), prob(Nk), dprob(Nk), o(Dv);

  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::int64_t visible = p.visible_keys(b, i);
        // Forward: scores, softmax, output.
        double max_score = -inf;
        for (std::int64_t j = 0; j < Nk; ++j) {
          score[j] = -inf;
          if (j >= visible) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += double(p.q(b, h, i, d)) * double(p.k(b, hk, j, d));
          score[j] = s * dot + (p.has_bias ? double(p.bias(b, h, i, j)) : 0.0);
          if (score[j] > max_score) max_score = score[j];
        }
        if (max_score == -inf) continue;  // every key masked: out is constant 0, gradients 0
        double sum = 0;
        for (std::int64_t j = 0; j < Nk; ++j)
          sum += (prob[j] = score[j] == -inf ? 0.0 : std::exp(score[j] - max_score));
        for (std::int64_t j = 0; j < Nk; ++j) prob[j] /= sum;
        for (std::int64_t e = 0; e < Dv; ++e) {
          o[e] = 0;
          for (std::int64_t j = 0; j < Nk; ++j) o[e] += prob[j] * double(p.v(b, hk, j, e));
        }
        // Backward: dP_j = dO . v_j, Delta = dO . O, dS_j = P_j (dP_j - Delta).
        double delta = 0;
        for (std::int64_t e = 0; e < Dv; ++e) delta += double(bp.dout(b, h, i, e)) * o[e];
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (prob[j] == 0) {
            dprob[j] = 0;
            continue;
          }
          double dp = 0;
          for (std::int64_t e = 0; e < Dv; ++e) dp += double(bp.dout(b, h, i, e)) * double(p.v(b, hk, j, e));
          const double ds = prob[j] * (dp - delta);
          dprob[j] = ds;
          for (std::int64_t e = 0; e < Dv; ++e)
            r.dv[((b * Hkv + hk) * Nk + j) * Dv + e] += prob[j] * double(bp.dout(b, h, i, e));
          for (std::int64_t d = 0; d < D; ++d) {
            r.dq[((b * Hq + h) * Nq + i) * D + d] += s * ds * double(p.k(b, hk, j, d));
            r.dk[((b * Hkv + hk) * Nk + j) * D + d] += s * ds * double(p.q(b, h, i, d));
          }
          if (p.has_bias) r.dbias[b * bstride[0] + h * bstride[1] + i * bstride[2] + j * bstride[3]] += ds;
        }
      }
    }
  return r;
}

}  // namespace jomoim
