// check.cpp — the bench's comparison with the float64 reference (see check.hpp).
#include "bench/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace jomoim::cli::bench {
namespace {

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, double(std::fabs(e)));
  return m;
}

// Tracks the worst |actual - expected| and where it happened. NaN counts as infinitely wrong.
struct WorstError {
  double err = 0;
  std::string where;
  void add(double actual, double expected, const std::string& what) {
    double e = std::fabs(actual - expected);
    if (actual == expected) e = 0;  // both -inf (lse of a fully masked row)
    if (std::isnan(e)) e = INFINITY;
    if (e > err || (e > 0 && where.empty())) {
      err = e;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s: got %.9g, expected %.9g", what.c_str(), actual, expected);
      where = buf;
    }
  }
};

std::string index_string(const char* name, Index a, Index b, Index c, Index d = -1) {
  std::string s = std::string(name) + "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c);
  return s + (d >= 0 ? ", " + std::to_string(d) : "") + "]";
}

// The reference over the whole problem keeps O(B*Hq*Nq*Nk) doubles of probabilities, so it
// runs only for small problems (the threshold keeps that under 8 MiB and well under a second).
constexpr Index kFullCheckMaxScores = Index(1) << 20;

// Rows (b, h, i) checked one at a time through views into the big buffers: query row i of head
// h against the keys it may see, as a [1, 1, 1, D] x [1, 1, visible, D] problem without a mask.
// Only for what the bench command itself builds (paper layout, no bias, no key lengths).
CheckResult check_sampled(Workload& w, const AttentionShape& s, const Tolerance& tol, unsigned seed) {
  std::vector<Index> bs{0, w.B - 1}, hs{0, w.Hq / 2, w.Hq - 1}, is{0, 1, w.Nq / 2, w.Nq - 1};
  std::mt19937 rng(seed + 1);
  for (int extra = 0; extra < 4; ++extra) is.push_back(Index(rng() % std::uint64_t(w.Nq)));
  // Row 1 is in the list for its tile edge; with one query row (decode) it does not exist.
  is.erase(std::remove_if(is.begin(), is.end(), [&](Index i) { return i >= w.Nq; }), is.end());
  for (auto* list : {&bs, &hs, &is}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  const ConstTensor4 q = w.qv(), k = w.kv(), v = w.vv(), o = w.out_paper();
  const Index group = w.Hq / w.Hkv;
  WorstError err;
  Index rows = 0;
  for (Index b : bs)
    for (Index h : hs)
      for (Index i : is) {
        // Causal rule of docs/design.md, aligned bottom-right: key j is visible iff j <= i + Nk - Nq.
        const Index visible = w.causal ? std::clamp<Index>(i + w.Nk - w.Nq + 1, 0, w.Nk) : w.Nk;
        ConstTensor4 qr = q, kr = k, vr = v;
        qr.data = &q(b, h, i, 0);
        qr.shape = {1, 1, 1, w.D};
        kr.data = &k(b, h / group, 0, 0);
        kr.shape = {1, 1, visible, w.D};
        vr.data = &v(b, h / group, 0, 0);
        vr.shape = {1, 1, visible, w.Dv};
        AttentionOptions ro;
        ro.scale = s.scale;
        const ReferenceResult r = attention_reference(qr, kr, vr, ro);
        for (Index e = 0; e < w.Dv; ++e) err.add(o(b, h, i, e), r.out[std::size_t(e)], index_string("out", b, h, i, e));
        ++rows;
      }
  return {std::to_string(rows) + " rows", err.err, tol.out, err.err <= tol.out, err.where};
}

}  // namespace

// Worst-case float32 rounding of the computation, from the inputs' magnitudes (Higham's
// gamma_n = n*eps bounds): a score is a D-term dot product, so it is off by up to
// D*eps*S where S bounds |score|; a softmax weight exp(s - m)/sum is then off by a relative
// 2*D*eps*S, and the Nk-term sums of weights and weighted values add 2*Nk*eps. The constant 16
// covers exp's own few ulps and the final division. Outputs are convex combinations of rows of
// v, so everything scales with max|v|. Loose for long rows (1.3e-3 at Nk = 4096, D = 128;
// actual errors are near 1e-6): it catches a wrong tile, stride, head mapping or mask edge on
// short rows, but not a single key dropped from a row of thousands (about 2e-4 there); that
// precision is the tests' job (tests/), not this timing tool's.
// With --bf16-weights the engine may round the softmax weights to bf16 for P·V (VDPBF16PS,
// targets AVX3_BF16 and AMX_BF16), each by at most 2^-8 of itself, which moves an output by at most
// 2^-8 max|v| more.
Tolerance float32_tolerance(const Workload& w, const AttentionShape& s) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double S = std::fabs(s.scale) * double(w.D) * max_abs(w.q) * max_abs(w.k) + max_abs(w.bias);
  const double terms = 2.0 * double(w.D) * S + 2.0 * double(w.Nk) + 16.0;
  const double weights = w.bf16_weights ? 0x1p-8 : 0.0;
  return {(eps * terms + weights) * std::max(max_abs(w.v), 1e-30), eps * (terms + S)};
}

CheckResult compare_full(const Workload& w, const ReferenceResult& r, const Tolerance& tol) {
  const ConstTensor4 o = w.out_paper();
  WorstError out_err, lse_err;
  for (Index b = 0; b < w.B; ++b)
    for (Index h = 0; h < w.Hq; ++h)
      for (Index i = 0; i < w.Nq; ++i) {
        const Index row = (b * w.Hq + h) * w.Nq + i;
        for (Index e = 0; e < w.Dv; ++e)
          out_err.add(o(b, h, i, e), r.out[std::size_t(row * w.Dv + e)], index_string("out", b, h, i, e));
        if (w.with_lse) lse_err.add(w.lse[std::size_t(row)], r.lse[std::size_t(row)], index_string("lse", b, h, i));
      }
  // Report whichever of the two is closer to (or further past) its tolerance.
  if (w.with_lse && lse_err.err / tol.lse > out_err.err / tol.out)
    return {"full", lse_err.err, tol.lse, lse_err.err <= tol.lse && out_err.err <= tol.out, lse_err.where};
  return {"full", out_err.err, tol.out, out_err.err <= tol.out && lse_err.err <= tol.lse, out_err.where};
}

CheckResult check_output(Workload& w, unsigned seed) {
  const AttentionShape s = w.shape();
  const Tolerance tol = float32_tolerance(w, s);
  if (w.B * w.Hq * w.Nq * w.Nk <= kFullCheckMaxScores)
    return compare_full(w, attention_reference(w.qv(), w.kv(), w.vv(), w.options(1)), tol);
  return check_sampled(w, s, tol, seed);
}

}  // namespace jomoim::cli::bench
