// test_attention_backward.cpp — decides whether jomoim::attention_backward is correct.
//
// 1. The oracle: attention_backward_reference (float64) against central finite differences of
//    L = sum(out * R) computed with the float64 forward attention_reference, on small cases.
// 2. The fast path against the oracle on random inputs of many shapes (tiny and odd lengths,
//    Nq != Nk with causal masking, fully masked rows, GQA/MQA, biases of every broadcast shape
//    with -inf entries, key lengths incl. 0, both notations, strided/reversed/transposed views),
//    on every SIMD target this CPU runs, with 1, 2 (and 3) threads. out and lse come from the
//    forward fast path, as a trainer would call it. Gradients land in NaN-poisoned buffers with
//    guards and gaps; every element must be written, nothing outside, inputs untouched, and two
//    runs with the same thread count must agree bit for bit.
//    Tolerance, per gradient row (dq: a query row; dk, dv: a key row; dbias: an element):
//        tol = 8 * |naive float32 error| + 32 u * M
//    where the naive float32 backward (sequential sums, its own float32 forward) measures how
//    ill-conditioned the row is on these inputs, and M is the row's largest sum of absolute
//    terms (e.g. M(dv_je) = sum_i P_ij w_i |dO_ie|), with P weighted by w_i = 1 + max|s_i| + |lse_i|
//    for the error of recomputing P = exp(s - lse) from float32 s and lse (see magnitudes()).
//    Tests below show this tolerance rejects real mistakes.
// 3. Refusals: jomoim::Error naming the argument, nothing written.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "attention_test_util.hpp"

namespace {

using namespace attn_test;
namespace L = attn_test::layouts;
using jomoim::Notation;

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// An output layout like an input's, without broadcast (outputs need distinct elements).
Layout writable(Layout l) {
  l.broadcast = 0;
  return l;
}

// ---------------------------------------------------------------------------------------------
// The inputs of a backward call: the forward's inputs plus dout, and the forward's out and lse
// (from the fast path).

struct BwdInputs {
  Inputs s;
  Stored<4> dout;
  Outputs fwd;            // out and lse of jomoim::attention
  std::vector<float> DO;  // C-order dout
};

BwdInputs build_bwd(const Case& c, std::uint64_t seed) {
  BwdInputs x;
  x.s = build(c, seed);
  Rng rng(seed ^ 0x5eed);
  x.dout = store<4>({c.n.B, c.n.Hq, c.n.Nq, c.n.Dv}, c.out_layout);
  fill_uniform(x.dout, rng, 1.f);
  x.DO = logical(x.dout);
  x.fwd = make_outputs(c.n, c.out_layout, c.lse_layout, std::nullopt);
  run_fast(x.s, x.fwd, 1);
  return x;
}

jomoim::ConstTensor4 as_given(const Inputs& s, jomoim::ConstTensor4 v) {
  return s.notation == Notation::col3b1b ? v.transposed(2, 3) : v;
}
jomoim::Tensor4 as_given(const Inputs& s, jomoim::Tensor4 v) {
  return s.notation == Notation::col3b1b ? v.transposed(2, 3) : v;
}

struct Grads {
  Stored<4> dq, dk, dv;
  std::optional<Stored<4>> dbias;
};

Grads make_grads(const Case& c, bool with_dbias) {
  const Dims& n = c.n;
  Grads g;
  g.dq = store<4>({n.B, n.Hq, n.Nq, n.D}, writable(c.q_layout));
  g.dk = store<4>({n.B, n.Hkv, n.Nk, n.D}, writable(c.k_layout));
  g.dv = store<4>({n.B, n.Hkv, n.Nk, n.Dv}, writable(c.v_layout));
  if (with_dbias) g.dbias = store<4>(bias_shape(c.bias, n), writable(c.bias_layout));
  return g;
}

void run_backward(const BwdInputs& x, Grads& g, int threads) {
  const Inputs& s = x.s;
  jomoim::AttentionOptions opt = s.options();
  opt.notation = s.notation;
  opt.threads = threads;
  jomoim::AttentionGradients grads;
  grads.dq = as_given(s, g.dq.view());
  grads.dk = as_given(s, g.dk.view());
  grads.dv = as_given(s, g.dv.view());
  if (g.dbias) grads.dbias = g.dbias->view();
  jomoim::attention_backward(as_given(s, s.q.cview()), as_given(s, s.k.cview()), as_given(s, s.v.cview()),
                             as_given(s, x.fwd.out.cview()), x.fwd.lse->cview(), as_given(s, x.dout.cview()), grads,
                             opt);
}

// ---------------------------------------------------------------------------------------------
// The naive float32 backward and the magnitudes M.

struct GradVecs {
  std::vector<double> dq, dk, dv, dbias;  // paper layout, C order; dbias in the bias's shape
};

// Index of the dbias element that (b, h, i, j) sums into, C order in the bias's shape.
struct BiasIndex {
  std::array<I64, 4> stride{};
  I64 size = 0;
  BiasIndex(const std::array<I64, 4>& shape) {
    I64 st = 1;
    for (int d = 3; d >= 0; --d) {
      stride[d] = shape[d] == 1 ? 0 : st;
      st *= shape[d];
    }
    size = st;
  }
  std::size_t operator()(I64 b, I64 h, I64 i, I64 j) const {
    return std::size_t(b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3]);
  }
};

enum class Bug { none, no_delta, drop_last_key, half_scale_dk };

// Sequential float32 sums over the definition, with its own float32 forward. `bug` plants a
// mistake (for the tests that show the tolerance rejects it).
GradVecs naive_backward_f32(const BwdInputs& x, Bug bug = Bug::none) {
  const Inputs& s = x.s;
  const Dims& n = s.n;
  const float scale = s.scale_value();
  std::vector<float> dq(std::size_t(n.B * n.Hq * n.Nq * n.D)), dk(std::size_t(n.B * n.Hkv * n.Nk * n.D)),
      dv(std::size_t(n.B * n.Hkv * n.Nk * n.Dv)), dbias;
  std::optional<BiasIndex> bi;
  if (s.bias) {
    bi.emplace(s.bias->shape);
    dbias.assign(std::size_t(bi->size), 0.f);
  }
  std::vector<float> p(std::size_t(n.Nk)), o(std::size_t(n.Dv));
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const I64 hk = h / s.group();
        I64 visible = s.visible(b, i);
        if (bug == Bug::drop_last_key && visible == n.Nk) --visible;
        float m = kNegInfF;
        for (I64 j = 0; j < n.Nk; ++j) {
          float dot = 0;
          for (I64 d = 0; d < n.D; ++d) dot += s.qv(b, h, i, d) * s.kv(b, hk, j, d);
          p[j] = j < visible ? scale * dot + s.biasv(b, h, i, j) : kNegInfF;
          m = std::max(m, p[j]);
        }
        if (m == kNegInfF) continue;
        float l = 0;
        for (I64 j = 0; j < n.Nk; ++j) l += (p[j] = std::exp(p[j] - m));
        for (I64 j = 0; j < n.Nk; ++j) p[j] /= l;
        const float* dO = &x.DO[std::size_t(((b * n.Hq + h) * n.Nq + i) * n.Dv)];
        float delta = 0;
        for (I64 e = 0; e < n.Dv; ++e) {
          o[e] = 0;
          for (I64 j = 0; j < n.Nk; ++j) o[e] += p[j] * s.vv(b, hk, j, e);
          delta += dO[e] * o[e];
        }
        if (bug == Bug::no_delta) delta = 0;
        for (I64 j = 0; j < n.Nk; ++j) {
          if (p[j] == 0) continue;
          float dp = 0;
          for (I64 e = 0; e < n.Dv; ++e) dp += dO[e] * s.vv(b, hk, j, e);
          const float ds = p[j] * (dp - delta);
          for (I64 e = 0; e < n.Dv; ++e) dv[std::size_t(((b * n.Hkv + hk) * n.Nk + j) * n.Dv + e)] += p[j] * dO[e];
          const float kscale = bug == Bug::half_scale_dk ? scale / 2 : scale;
          for (I64 d = 0; d < n.D; ++d) {
            dq[std::size_t(((b * n.Hq + h) * n.Nq + i) * n.D + d)] += scale * ds * s.kv(b, hk, j, d);
            dk[std::size_t(((b * n.Hkv + hk) * n.Nk + j) * n.D + d)] += kscale * ds * s.qv(b, h, i, d);
          }
          if (bi) dbias[(*bi)(b, h, i, j)] += ds;
        }
      }
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {wide(dq), wide(dk), wide(dv), wide(dbias)};
}

// Sums of absolute terms, in float64 from the reference probabilities.
GradVecs magnitudes(const BwdInputs& x, const jomoim::ReferenceResult& fwd) {
  const Inputs& s = x.s;
  const Dims& n = s.n;
  const double scale = std::fabs(double(s.scale_value()));
  GradVecs m;
  m.dq.assign(std::size_t(n.B * n.Hq * n.Nq * n.D), 0);
  m.dk.assign(std::size_t(n.B * n.Hkv * n.Nk * n.D), 0);
  m.dv.assign(std::size_t(n.B * n.Hkv * n.Nk * n.Dv), 0);
  std::optional<BiasIndex> bi;
  if (s.bias) {
    bi.emplace(s.bias->shape);
    m.dbias.assign(std::size_t(bi->size), 0);
  }
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const I64 hk = h / s.group(), row = (b * n.Hq + h) * n.Nq + i;
        const float* dO = &x.DO[std::size_t(row * n.Dv)];
        // A kernel recomputes P_ij = exp(s_ij - lse_i) from float32 s_ij and lse_i, each uncertain
        // by ulps of its magnitude (the naive exp(s_ij - m) / l does not see this: s_ij - m is
        // exact near the maximum), so P carries a relative error of a few u (|s| + |lse|); with
        // scores in the 100s that dominates. Weighting P by (1 + max|s| + |lse|) puts it into M.
        double score_mag = 0;
        for (I64 j = 0; j < n.Nk; ++j) {
          if (fwd.probs[std::size_t(row * n.Nk + j)] == 0) continue;
          double a = 0;
          for (I64 d = 0; d < n.D; ++d) a += std::fabs(double(s.qv(b, h, i, d)) * s.kv(b, hk, j, d));
          score_mag = std::max(score_mag, scale * a + std::fabs(double(s.biasv(b, h, i, j))));
        }
        const double weight =
            1 + score_mag + (std::isfinite(fwd.lse[std::size_t(row)]) ? std::fabs(fwd.lse[std::size_t(row)]) : 0);
        std::vector<double> pw(std::size_t(n.Nk));
        for (I64 j = 0; j < n.Nk; ++j) pw[std::size_t(j)] = fwd.probs[std::size_t(row * n.Nk + j)] * weight;
        const double* P = pw.data();
        double delta_abs = 0;
        for (I64 e = 0; e < n.Dv; ++e) {
          double oa = 0;
          for (I64 j = 0; j < n.Nk; ++j) oa += P[j] * std::fabs(double(s.vv(b, hk, j, e)));
          delta_abs += std::fabs(double(dO[e])) * oa;
        }
        for (I64 j = 0; j < n.Nk; ++j) {
          if (P[j] == 0) continue;
          double dp_abs = 0;
          for (I64 e = 0; e < n.Dv; ++e) dp_abs += std::fabs(double(dO[e]) * s.vv(b, hk, j, e));
          const double a = P[j] * (dp_abs + delta_abs);
          for (I64 e = 0; e < n.Dv; ++e)
            m.dv[std::size_t(((b * n.Hkv + hk) * n.Nk + j) * n.Dv + e)] += P[j] * std::fabs(double(dO[e]));
          for (I64 d = 0; d < n.D; ++d) {
            m.dq[std::size_t(row * n.D + d)] += scale * a * std::fabs(double(s.kv(b, hk, j, d)));
            m.dk[std::size_t(((b * n.Hkv + hk) * n.Nk + j) * n.D + d)] +=
                scale * a * std::fabs(double(s.qv(b, h, i, d)));
          }
          if (bi) m.dbias[(*bi)(b, h, i, j)] += a;
        }
      }
  return m;
}

struct Tolerances {
  std::vector<double> dq, dk, dv, dbias;  // per row (per element for dbias)
  std::size_t wq = 1, wk = 1, wv = 1;     // row widths: D, D, Dv
};

std::vector<double> row_tol(const std::vector<double>& ref, const std::vector<double>& naive,
                            const std::vector<double>& mag, std::size_t width) {
  std::vector<double> tol(width ? ref.size() / width : 0);
  for (std::size_t r = 0; r < tol.size(); ++r) {
    double err = 0, m = 0;
    for (std::size_t c = 0; c < width; ++c) {
      err = std::max(err, std::fabs(naive[r * width + c] - ref[r * width + c]));
      m = std::max(m, mag[r * width + c]);
    }
    tol[r] = 8 * err + 32 * kU * m;
  }
  return tol;
}

struct Expect {
  jomoim::ReferenceGradients ref;
  Tolerances tol;
};

Expect expect_bwd(const BwdInputs& x) {
  const Inputs& s = x.s;
  Expect e;
  e.ref = jomoim::attention_backward_reference(s.q.cview(), s.k.cview(), s.v.cview(), x.dout.cview(), s.options());
  const jomoim::ReferenceResult fwd = jomoim::attention_reference(s.q.cview(), s.k.cview(), s.v.cview(), s.options());
  const GradVecs naive = naive_backward_f32(x), mag = magnitudes(x, fwd);
  e.tol.wq = e.tol.wk = std::size_t(s.n.D);
  e.tol.wv = std::size_t(s.n.Dv);
  e.tol.dq = row_tol(e.ref.dq, naive.dq, mag.dq, e.tol.wq);
  e.tol.dk = row_tol(e.ref.dk, naive.dk, mag.dk, e.tol.wk);
  e.tol.dv = row_tol(e.ref.dv, naive.dv, mag.dv, e.tol.wv);
  e.tol.dbias = row_tol(e.ref.dbias, naive.dbias, mag.dbias, 1);
  return e;
}

::testing::AssertionResult compare_grads(const Expect& e, const GradVecs& got, bool with_dbias) {
  std::ostringstream os;
  I64 bad_total = 0;
  auto check = [&](const char* what, const std::vector<double>& ref, const std::vector<double>& g,
                   const std::vector<double>& tol, std::size_t width) {
    Worst w{what};
    if (g.size() != ref.size()) {
      os << "\n  " << what << ": " << g.size() << " values, expected " << ref.size();
      ++bad_total;
      return;
    }
    for (std::size_t o = 0; o < ref.size(); ++o)
      w.see(ref[o], g[o], tol[o / width], [&] { return std::string(what) + " element " + std::to_string(o); });
    if (w.bad) w.report(os);
    bad_total += w.bad;
  };
  check("dq", e.ref.dq, got.dq, e.tol.dq, e.tol.wq);
  check("dk", e.ref.dk, got.dk, e.tol.dk, e.tol.wk);
  check("dv", e.ref.dv, got.dv, e.tol.dv, e.tol.wv);
  if (with_dbias) check("dbias", e.ref.dbias, got.dbias, e.tol.dbias, 1);
  if (bad_total == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << os.str();
}

GradVecs read(const Grads& g) {
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  GradVecs r{wide(logical(g.dq)), wide(logical(g.dk)), wide(logical(g.dv)), {}};
  if (g.dbias) r.dbias = wide(logical(*g.dbias));
  return r;
}

// ---------------------------------------------------------------------------------------------
// The table of cases.

std::string auto_name(const std::string& group, const Case& c) {
  const Dims& n = c.n;
  std::string s = group + "_b" + std::to_string(n.B) + "h" + std::to_string(n.Hq) + "x" + std::to_string(n.Hkv) + "_q" +
                  std::to_string(n.Nq) + "k" + std::to_string(n.Nk) + "_d" + std::to_string(n.D) + "v" +
                  std::to_string(n.Dv);
  if (c.causal) s += "_causal";
  if (c.bias != BiasKind::none) s += std::string("_bias") + name(c.bias);
  if (c.bias_mask != BiasMask::none) s += std::string("_mask") + name(c.bias_mask);
  if (c.key_lengths != KeyLens::none) s += std::string("_kl") + name(c.key_lengths);
  if (c.amp != 1) s += "_amp" + std::to_string(int(c.amp));
  if (c.scale) s += "_scale" + std::to_string(int(*c.scale * 10));
  if (c.notation == Notation::col3b1b) s += "_3b1b";
  for (const auto& [tag, l] : {std::pair{"q", &c.q_layout},
                               {"k", &c.k_layout},
                               {"v", &c.v_layout},
                               {"o", &c.out_layout},
                               {"b", &c.bias_layout},
                               {"l", &c.lse_layout}})
    if (l->name != "contig") s += std::string("_") + tag + l->name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::vector<Case> table() {
  std::vector<Case> t;
  auto add = [&](const std::string& group, Case c) {
    c.want_probs = false;
    c.name = auto_name(group, c);
    t.push_back(std::move(c));
  };
  // Tiny and odd: N = 1, D = 1, lengths around the SIMD widths and the 64-wide tiles.
  add("tiny", make({1, 1, 1, 1, 1, 1, 1}));
  {
    Case c = make({1, 2, 1, 5, 7, 1, 3});
    c.causal = true;
    add("tiny", c);
  }
  const I64 kDs[] = {1, 3, 8, 17, 40, 64};
  int t_ = 0;
  for (I64 N : {1, 2, 3, 7, 16, 17, 31, 33, 63, 64, 65})
    for (bool causal : {false, true}) {
      const I64 D = kDs[t_ % 6], Dv = kDs[(t_ + 2) % 6];
      ++t_;
      Case c = make({1, 2, 1, N, N, D, Dv});
      c.causal = causal;
      add("len", c);
    }
  // Nq != Nk; causal aligned bottom-right, and Nk < Nq causal (the first Nq - Nk rows see nothing).
  for (auto [nq, nk] : {std::pair<I64, I64>{5, 9}, {9, 5}, {70, 3}, {3, 70}, {65, 130}, {130, 65}})
    for (bool causal : {false, true}) {
      Case c = make({1, 2, 2, nq, nk, 24, 16});
      c.causal = causal;
      add("lenqk", c);
    }
  // Several tiles in both directions.
  {
    Case c = make({1, 2, 1, 130, 140, 40, 24});
    add("tiles", c);
    c.causal = true;
    c.threads = {1, 2, 3};
    add("tiles", c);
    Case d = make({1, 1, 1, 200, 200, 64, 64});
    d.causal = true;
    add("tiles", d);
  }
  // Grouped-query and multi-query heads.
  for (I64 r : {2, 4})
    for (I64 nq : {1, 9, 70}) {
      Case c = make({2, 2 * r, 2, nq, 77, 32, 40});
      c.causal = nq != 9;
      add("gqa", c);
    }
  {
    Case c = make({1, 4, 1, 70, 70, 16, 16});
    c.causal = true;
    add("mqa", c);
  }
  // Bias shapes x -inf entries x causal (dbias requested: every broadcast reduction).
  for (BiasKind k : {BiasKind::full, BiasKind::rows, BiasKind::keys, BiasKind::heads})
    for (BiasMask m : {BiasMask::none, BiasMask::random})
      for (bool causal : {false, true}) {
        Case c = make({2, 4, 2, 19, 70, 24, 16});
        c.bias = k;
        c.bias_mask = m;
        c.causal = causal;
        add("bias", c);
      }
  {
    Case c = make({2, 2, 1, 70, 130, 16, 8});  // keys broadcast over several key blocks
    c.bias = BiasKind::keys;
    c.bias_mask = BiasMask::random;
    c.causal = true;
    c.threads = {1, 2, 3};
    add("bias", c);
    Case d = make({1, 2, 2, 130, 70, 16, 8});  // rows broadcast over several query blocks
    d.bias = BiasKind::rows;
    d.bias_mask = BiasMask::prefix;
    add("bias", d);
  }
  // Key lengths (0, Nk and between).
  for (KeyLens kl : {KeyLens::mixed, KeyLens::full, KeyLens::zero})
    for (bool causal : {false, true})
      for (auto [nq, nk] : {std::pair<I64, I64>{5, 70}, {80, 13}}) {
        Case c = make({6, 2, 1, nq, nk, 16, 8});
        c.key_lengths = kl;
        c.causal = causal;
        add("keylen", c);
      }
  // Nothing at all, and all-masked rows with a bias.
  {
    Case e = make({2, 2, 1, 5, 0, 8, 4});  // Nk = 0: dq = 0
    add("dead", e);
    Case f = make({2, 2, 1, 0, 9, 8, 4});  // Nq = 0: dk = dv = 0
    add("dead", f);
    Case g = make({0, 2, 1, 5, 9, 8, 4});  // B = 0
    add("dead", g);
    Case d = make({2, 4, 2, 21, 33, 16, 16});
    d.bias = BiasKind::full;
    d.bias_mask = BiasMask::random;
    d.key_lengths = KeyLens::mixed;
    d.causal = true;
    add("dead", d);
  }
  // Large scores, and scales.
  {
    Case c = make({1, 2, 1, 40, 90, 64, 32});
    c.amp = 20;
    add("huge", c);
    c.causal = true;
    c.bias = BiasKind::full;
    c.bias_mask = BiasMask::random;
    add("huge", c);
  }
  for (float sc : {0.0f, -0.7f, 3.0f}) {
    Case c = make({1, 2, 1, 20, 45, 16, 8});
    c.scale = sc;
    c.causal = sc < 0;
    add("scale", c);
  }
  // Layouts and the 3b1b notation.
  {
    auto lay = [&](Notation no, Layout q, Layout k, Layout v, Layout o, Layout l, bool causal,
                   BiasKind bias = BiasKind::none, Layout bl = L::contig()) {
      Case c = make({2, 4, 2, 37, 70, 24, 20});
      c.notation = no;
      c.q_layout = q;
      c.k_layout = k;
      c.v_layout = v;
      c.out_layout = o;
      c.lse_layout = l;
      c.causal = causal;
      c.bias = bias;
      c.bias_layout = bl;
      if (bias != BiasKind::none) c.bias_mask = BiasMask::random;
      add("layout", c);
    };
    const Notation P = Notation::paper, C = Notation::col3b1b;
    lay(P, L::bnhd(), L::bnhd(), L::bnhd(), L::bnhd(), L::contig(), false);
    lay(P, L::padded(), L::padded(), L::padded(), L::padded(), L::lse_strided(), true, BiasKind::rows, L::padded());
    lay(P, L::reversed(), L::reversed(), L::reversed(), L::reversed(), L::lse_reversed(), true);
    lay(P, L::flipped(), L::flipped(), L::flipped(), L::flipped(), L::lse_reversed(), true, BiasKind::keys,
        L::flipped());
    lay(P, L::strided(), L::strided(), L::strided(), L::strided(), L::lse_strided(), false);
    lay(P, L::contig(), L::bcast_heads(), L::bcast_heads(), L::contig(), L::contig(), true);
    lay(P, L::scrambled(), L::scrambled(), L::scrambled(), L::scrambled(), L::lse_transposed(), true, BiasKind::full,
        L::scrambled());
    lay(P, L::contig(), L::contig(), L::contig(), L::contig(), L::contig(), false, BiasKind::full, L::bcast_heads());
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), false);
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), true, BiasKind::keys);
    lay(C, L::padded(), L::reversed(), L::bnhd(), L::strided(), L::contig(), true, BiasKind::full);
    Case c = make({3, 8, 2, 1, 130, 64, 48});
    c.notation = C;
    c.q_layout = c.k_layout = c.v_layout = c.out_layout = L::cols();
    c.key_lengths = KeyLens::mixed;
    c.causal = true;
    add("layout", c);
  }
  return t;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> t = table();
  return t;
}

class BackwardTable : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardTable, MatchesReference) {
  const Case& c = GetParam();
  const std::uint64_t seed = seed_of(c.name);
  const BwdInputs x = build_bwd(c, seed);
  const Expect e = expect_bwd(x);
  const bool with_dbias = c.bias != BiasKind::none;
  // The tolerance admits the naive float32 version itself (a failure here is a test bug).
  ASSERT_TRUE(compare_grads(e, naive_backward_f32(x), with_dbias)) << "tolerance self-check " << describe(c, seed);

  auto inputs = snapshot(x.s);
  inputs.push_back(x.dout.buf);
  inputs.push_back(x.fwd.out.buf);
  inputs.push_back(x.fwd.lse->buf);
  bool checked_repeat = false;
  for (const std::string& target : targets()) {
    PinTarget pin(target);
    for (int threads : c.threads) {
      const std::string ctx = describe(c, seed) + " target " + target + " threads " + std::to_string(threads);
      Grads g = make_grads(c, with_dbias);
      try {
        run_backward(x, g, threads);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << ctx << ": attention_backward threw '" << ex.what() << "'";
        continue;
      }
      EXPECT_TRUE(compare_grads(e, read(g), with_dbias)) << ctx;
      EXPECT_TRUE(untouched_outside("dq", g.dq)) << ctx;
      EXPECT_TRUE(untouched_outside("dk", g.dk)) << ctx;
      EXPECT_TRUE(untouched_outside("dv", g.dv)) << ctx;
      if (g.dbias) EXPECT_TRUE(untouched_outside("dbias", *g.dbias)) << ctx;
      auto now = snapshot(x.s);
      now.push_back(x.dout.buf);
      now.push_back(x.fwd.out.buf);
      now.push_back(x.fwd.lse->buf);
      for (std::size_t t = 0; t < now.size(); ++t)
        EXPECT_EQ(0, std::memcmp(now[t].data(), inputs[t].data(), now[t].size() * sizeof(float)))
            << ctx << ": input " << t << " was modified";
      // Determinism: the same call again gives the same bits.
      if (!checked_repeat && threads > 1) {
        checked_repeat = true;
        Grads h = make_grads(c, with_dbias);
        run_backward(x, h, threads);
        EXPECT_EQ(0, std::memcmp(g.dq.buf.data(), h.dq.buf.data(), g.dq.buf.size() * sizeof(float))) << ctx;
        EXPECT_EQ(0, std::memcmp(g.dk.buf.data(), h.dk.buf.data(), g.dk.buf.size() * sizeof(float))) << ctx;
        EXPECT_EQ(0, std::memcmp(g.dv.buf.data(), h.dv.buf.data(), g.dv.buf.size() * sizeof(float))) << ctx;
        if (g.dbias)
          EXPECT_EQ(0, std::memcmp(g.dbias->buf.data(), h.dbias->buf.data(), g.dbias->buf.size() * sizeof(float)))
              << ctx;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionBackward, BackwardTable, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(BackwardTableSelf, NamesAreDistinct) {
  std::set<std::string> names;
  for (const Case& c : all_cases()) EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
}

// The tolerance sees real mistakes: each planted bug must fail the comparison.
TEST(BackwardTolerance, RejectsPlantedBugs) {
  for (Bug bug : {Bug::no_delta, Bug::drop_last_key, Bug::half_scale_dk}) {
    Case c = make({1, 2, 1, 30, 70, 32, 32});
    c.bias = BiasKind::full;
    c.name = "tolerance_bug" + std::to_string(int(bug));
    const BwdInputs x = build_bwd(c, seed_of(c.name));
    const Expect e = expect_bwd(x);
    EXPECT_FALSE(compare_grads(e, naive_backward_f32(x, bug), true)) << "bug " << int(bug) << " not detected";
  }
}

// A gradient off by a relative 2^-10 everywhere is rejected.
TEST(BackwardTolerance, RejectsARelativeErrorOfTwoToTheMinus10) {
  Case c = make({1, 2, 1, 20, 50, 32, 32});
  c.name = "tolerance_rel";
  const BwdInputs x = build_bwd(c, seed_of(c.name));
  const Expect e = expect_bwd(x);
  GradVecs r = naive_backward_f32(x);
  for (double& v : r.dk) v *= 1 + 0x1p-10;
  EXPECT_FALSE(compare_grads(e, r, false));
}

// =============================================================================================
// The oracle against finite differences of the float64 forward: L = sum(out * R), dL/dout = R.

struct FdCase {
  std::string name;
  Case c;
};

std::vector<FdCase> fd_cases() {
  std::vector<FdCase> v;
  auto add = [&](std::string n, Case c) {
    c.name = "fd_" + n;
    v.push_back({c.name, c});
  };
  add("plain", make({1, 2, 1, 3, 4, 3, 2}));
  {
    Case c = make({1, 2, 1, 4, 3, 3, 2});  // causal, Nk < Nq: the first row sees nothing
    c.causal = true;
    c.bias = BiasKind::full;
    c.bias_mask = BiasMask::random;
    add("causal_bias", c);
  }
  {
    Case c = make({2, 2, 1, 3, 5, 2, 3});
    c.key_lengths = KeyLens::mixed;
    c.bias = BiasKind::rows;
    add("keylen_biasrows", c);
  }
  {
    Case c = make({2, 4, 2, 2, 4, 3, 2});
    c.bias = BiasKind::keys;
    c.scale = 0.8f;
    add("gqa_biaskeys", c);
  }
  {
    Case c = make({1, 4, 1, 3, 3, 2, 2});
    c.bias = BiasKind::heads;
    c.causal = true;
    add("mqa_biasheads", c);
  }
  {
    Case c = make({1, 1, 1, 1, 1, 1, 1});
    add("one", c);
  }
  return v;
}

class FiniteDifferences : public ::testing::TestWithParam<FdCase> {};

TEST_P(FiniteDifferences, ReferenceGradientMatches) {
  const Case& c = GetParam().c;
  Inputs s = build(c, seed_of(c.name));
  Rng rng(seed_of(c.name) ^ 0xfd);
  Stored<4> R = store<4>({c.n.B, c.n.Hq, c.n.Nq, c.n.Dv}, L::contig());
  fill_uniform(R, rng, 1.f);
  const std::vector<float> RV = logical(R);
  const jomoim::ReferenceGradients g =
      jomoim::attention_backward_reference(s.q.cview(), s.k.cview(), s.v.cview(), R.cview(), s.options());
  auto loss = [&] {
    const jomoim::ReferenceResult r = jomoim::attention_reference(s.q.cview(), s.k.cview(), s.v.cview(), s.options());
    double l = 0;
    for (std::size_t o = 0; o < r.out.size(); ++o) l += r.out[o] * double(RV[o]);
    return l;
  };
  // Inputs are multiples of 2^-23 in [-1, 1) (bias: of 2^-8 in [-2, 2]), so x +- h is exact.
  const double h = 0x1p-13;
  I64 checked = 0;
  auto check = [&](const char* what, Stored<4>& t, const std::vector<double>& grad) {
    std::size_t n = 0;
    double gmax = 0;
    for (double x : grad) gmax = std::max(gmax, std::fabs(x));
    ASSERT_EQ(grad.size(), std::size_t(t.numel())) << what;
    for_each_index(t.shape, [&](const auto& idx) {
      const std::size_t at = n++;
      float& x = t.buf[std::size_t(t.offset(idx))];
      if (std::isinf(x)) {
        EXPECT_EQ(grad[at], 0.0) << what << " element " << at << " (-inf bias)";
        return;
      }
      const float x0 = x;
      x = float(double(x0) + h);
      s.refresh();
      const double lp = loss();
      x = float(double(x0) - h);
      s.refresh();
      const double lm = loss();
      x = x0;
      s.refresh();
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(grad[at], fd, 1e-6 * (1 + gmax)) << c.name << ": " << what << " element " << at;
      ++checked;
    });
  };
  check("q", s.q, g.dq);
  check("k", s.k, g.dk);
  check("v", s.v, g.dv);
  if (s.bias) check("bias", *s.bias, g.dbias);
  EXPECT_GT(checked, 0);
  // A gradient that is zero everywhere would pass trivially; this one must not be.
  double any = 0;
  for (double x : g.dq) any = std::max(any, std::fabs(x));
  for (double x : g.dv) any = std::max(any, std::fabs(x));
  EXPECT_GT(any, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(AttentionBackward, FiniteDifferences, ::testing::ValuesIn(fd_cases()),
                         [](const ::testing::TestParamInfo<FdCase>& info) { return info.param.name; });

// =============================================================================================
// Refusals: jomoim::Error naming the argument, one line, nothing written.

bool contains_word(const std::string& msg, const std::string& w) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t p = msg.find(w); p != std::string::npos; p = msg.find(w, p + 1)) {
    const bool left = p == 0 || !ident(msg[p - 1]);
    const bool right = p + w.size() >= msg.size() || !ident(msg[p + w.size()]);
    if (left && right) return true;
  }
  return false;
}

struct BwdArgs {
  Dims n{2, 4, 2, 5, 7, 8, 6};
  Stored<4> q, k, v, out, dout, bias, dq, dk, dv, dbias;
  Stored<3> lse;
  std::vector<float> arena;
  jomoim::ConstTensor4 qv, kv, vv, ov, dov;
  jomoim::ConstTensor3 lv;
  jomoim::AttentionGradients g;
  jomoim::AttentionOptions o;

  BwdArgs() {
    Rng rng(seed_of("bwd_refusal"));
    q = store<4>({n.B, n.Hq, n.Nq, n.D}, L::contig());
    k = store<4>({n.B, n.Hkv, n.Nk, n.D}, L::contig());
    v = store<4>({n.B, n.Hkv, n.Nk, n.Dv}, L::contig());
    out = store<4>({n.B, n.Hq, n.Nq, n.Dv}, L::contig());
    dout = store<4>({n.B, n.Hq, n.Nq, n.Dv}, L::contig());
    bias = store<4>({1, n.Hq, n.Nq, n.Nk}, L::contig());
    lse = store<3>({n.B, n.Hq, n.Nq}, L::contig());
    dq = store<4>(q.shape, L::contig());
    dk = store<4>(k.shape, L::contig());
    dv = store<4>(v.shape, L::contig());
    dbias = store<4>(bias.shape, L::contig());
    for (Stored<4>* s : {&q, &k, &v, &out, &dout, &bias}) fill_uniform(*s, rng, 1.f);
    fill_uniform(lse, rng, 1.f);
    arena.assign(8192, poison());
    qv = q.cview();
    kv = k.cview();
    vv = v.cview();
    ov = out.cview();
    dov = dout.cview();
    lv = lse.cview();
    g.dq = dq.view();
    g.dk = dk.view();
    g.dv = dv.view();
    g.dbias = dbias.view();
    o.bias = bias.cview();
    o.causal = true;
  }
  void call() { jomoim::attention_backward(qv, kv, vv, ov, lv, dov, g, o); }
  jomoim::ConstTensor4 input_in_arena(const Stored<4>& s, I64 at) {
    const std::vector<float> x = logical(s);
    std::copy(x.begin(), x.end(), arena.begin() + at);
    return jomoim::ConstTensor4::contiguous(arena.data() + at, s.shape);
  }
  jomoim::Tensor4 output_in_arena(const std::array<I64, 4>& shape, I64 at) {
    return jomoim::Tensor4::contiguous(arena.data() + at, shape);
  }
  bool outputs_untouched() const {
    for (const Stored<4>* s : {&dq, &dk, &dv, &dbias})
      for (float x : s->buf)
        if (!is_poison(x)) return false;
    return true;
  }
};

struct BwdRefusal {
  std::string name, word;
  std::function<void(BwdArgs&)> mutate;
};
void PrintTo(const BwdRefusal& r, std::ostream* os) { *os << r.name; }

std::vector<BwdRefusal> bwd_refusals() {
  std::vector<BwdRefusal> r;
  auto add = [&](std::string name, std::string word, std::function<void(BwdArgs&)> f) {
    r.push_back({std::move(name), std::move(word), std::move(f)});
  };
  add("dout_wrong_shape", "dout", [](BwdArgs& a) { a.dov.shape[3] = 5; });
  add("dout_wrong_rows", "dout", [](BwdArgs& a) { a.dov.shape[2] = 4; });
  add("out_wrong_shape", "out", [](BwdArgs& a) { a.ov.shape[1] = 2; });
  add("lse_wrong_shape", "lse", [](BwdArgs& a) { a.lv.shape[2] = 4; });
  add("lse_null", "lse", [](BwdArgs& a) { a.lv.data = nullptr; });
  add("dq_wrong_shape", "dq", [](BwdArgs& a) { a.g.dq.shape[3] = 7; });
  add("dk_wrong_shape", "dk", [](BwdArgs& a) { a.g.dk.shape[2] = 6; });
  add("dv_wrong_shape", "dv", [](BwdArgs& a) { a.g.dv.shape[1] = 1; });
  add("dq_zero_stride", "dq", [](BwdArgs& a) { a.g.dq.strides[2] = 0; });
  add("dv_interleaved", "dv", [](BwdArgs& a) { a.g.dv.strides[2] = 2; });
  add("dbias_without_bias", "dbias", [](BwdArgs& a) { a.o.bias.reset(); });
  add("dbias_wrong_shape", "dbias", [](BwdArgs& a) {
    a.g.dbias->shape[0] = 2;
    a.g.dbias->strides[0] = 0;
  });
  add("dbias_broadcast_shape_of_full_bias", "dbias", [](BwdArgs& a) {
    a.o.bias->shape[0] = 2;  // bias [2, Hq, Nq, Nk] (batch broadcast through stride 0), dbias [1, ...]
    a.o.bias->strides[0] = 0;
  });
  add("dbias_zero_stride", "dbias", [](BwdArgs& a) { a.g.dbias->strides[3] = 0; });
  add("dq_overlaps_q", "dq", [](BwdArgs& a) {
    a.qv = a.input_in_arena(a.q, 100);
    a.g.dq = a.output_in_arena(a.q.shape, 200);
  });
  add("dk_overlaps_dout", "dk", [](BwdArgs& a) {
    a.dov = a.input_in_arena(a.dout, 1000);
    a.g.dk = a.output_in_arena(a.k.shape, 1100);
  });
  add("dv_overlaps_out", "dv", [](BwdArgs& a) {
    a.ov = a.input_in_arena(a.out, 1000);
    a.g.dv = a.output_in_arena(a.v.shape, 900);
  });
  add("dq_overlaps_lse", "dq", [](BwdArgs& a) {
    a.g.dq = a.output_in_arena(a.q.shape, 3000);
    a.lv = jomoim::ConstTensor3::contiguous(a.arena.data() + 3010, a.lse.shape);
  });
  add("dbias_overlaps_bias", "dbias", [](BwdArgs& a) {
    a.o.bias = a.input_in_arena(a.bias, 5000);
    a.g.dbias = a.output_in_arena(a.bias.shape, 5100);
  });
  add("dv_overlaps_dk", "dv", [](BwdArgs& a) {
    a.g.dk = a.output_in_arena(a.k.shape, 100);
    a.g.dv = a.output_in_arena(a.v.shape, 150);
  });
  add("dbias_overlaps_dq", "dbias", [](BwdArgs& a) {
    a.g.dq = a.output_in_arena(a.q.shape, 100);
    a.g.dbias = a.output_in_arena(a.bias.shape, 150);
  });
  // The forward's own checks apply too.
  add("k_wrong_D", "k", [](BwdArgs& a) { a.kv.shape[3] = 7; });
  add("scale_nan", "scale", [](BwdArgs& a) { a.o.scale = std::numeric_limits<float>::quiet_NaN(); });
  add("key_lengths_above_Nk", "key_lengths", [](BwdArgs& a) {
    static const std::vector<I64> kl{7, 8};
    a.o.key_lengths = kl;
  });
  add("notation_3b1b_shapes_disagree", "k", [](BwdArgs& a) { a.o.notation = Notation::col3b1b; });
  return r;
}

class BackwardRefused : public ::testing::TestWithParam<BwdRefusal> {};

TEST_P(BackwardRefused, ThrowsErrorNamingTheArgumentAndWritesNothing) {
  BwdArgs a;
  {
    BwdArgs ok;  // the unmutated call is valid
    EXPECT_NO_THROW(ok.call());
  }
  GetParam().mutate(a);
  const std::vector<float> arena_before = a.arena;
  try {
    a.call();
    ADD_FAILURE() << "did not throw";
  } catch (const jomoim::Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains_word(msg, GetParam().word)) << "message does not name '" << GetParam().word << "': " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << typeid(e).name() << " instead of jomoim::Error: " << e.what();
  }
  EXPECT_TRUE(a.outputs_untouched());
  EXPECT_EQ(0, std::memcmp(arena_before.data(), a.arena.data(), a.arena.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(AttentionBackward, BackwardRefused, ::testing::ValuesIn(bwd_refusals()),
                         [](const ::testing::TestParamInfo<BwdRefusal>& info) { return info.param.name; });

TEST(BackwardRefusedReference, DoutShapeAndDbiasAreChecked) {
  BwdArgs a;
  jomoim::ConstTensor4 bad = a.dov;
  bad.shape[3] = 5;
  EXPECT_THROW(jomoim::attention_backward_reference(a.qv, a.kv, a.vv, bad, a.o), jomoim::Error);
  // The reference's dbias has the bias's shape (here broadcast over the batch).
  const auto r = jomoim::attention_backward_reference(a.qv, a.kv, a.vv, a.dov, a.o);
  EXPECT_EQ(r.dbias.size(), std::size_t(a.n.Hq * a.n.Nq * a.n.Nk));
  EXPECT_EQ(r.dq.size(), std::size_t(a.q.numel()));
  EXPECT_EQ(r.dk.size(), std::size_t(a.k.numel()));
  EXPECT_EQ(r.dv.size(), std::size_t(a.v.numel()));
}

}  // namespace
