// TEMPORARY: the fast kernel lands next; until then attention() forwards to the reference.
#include <cmath>
#include "attention/problem.hpp"
namespace jomoim {
void attention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out, const AttentionOptions& o) {
  const detail::Problem p = detail::make_problem(q, k, v, &out, o);
  const ReferenceResult r = attention_reference(q, k, v, o);
  const auto& s = p.s;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h)
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        const std::int64_t row = (b * s.Hq + h) * s.Nq + i;
        for (std::int64_t e = 0; e < s.Dv; ++e) p.out(b, h, i, e) = float(r.out[row * s.Dv + e]);
        if (p.has_lse) p.lse(b, h, i) = float(r.lse[row]);
        if (p.has_probs)
          for (std::int64_t j = 0; j < s.Nk; ++j) p.probs(b, h, i, j) = float(r.probs[row * s.Nk + j]);
      }
}
}  // namespace jomoim
