// test_attention_invariants.cpp — properties of jomoim::attention that need no oracle
// (permutation, bias shift, decode = last causal row, probabilities, bitwise determinism), the
// edge semantics of attention.hpp, and SIMD target pinning. Helpers: attention_test_util.hpp.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "attention_test_util.hpp"

namespace {

using namespace attn_test;
namespace L = attn_test::layouts;
using jomoim::Notation;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// =============================================================================================
// Invariants (no oracle needed): each runs on every target with 1 and 2 threads.

struct FastRun {
  Outputs o;
  F32Result r;
};
FastRun fast(const Inputs& s, const Dims& n, int threads, bool probs = true) {
  FastRun f{make_outputs(n, L::contig(), L::contig(), probs ? std::optional(L::contig()) : std::nullopt), {}};
  run_fast(s, f.o, threads);
  f.r = read(f.o);
  return f;
}

// |a - b| <= ta + tb elementwise, per row tolerances; reports the worst element.
::testing::AssertionResult close_rows(const char* what, const std::vector<float>& a, const std::vector<float>& b,
                                      const std::vector<double>& ta, const std::vector<double>& tb, I64 per_row) {
  Worst w{what};
  for (std::size_t x = 0; x < a.size(); ++x) {
    const std::size_t row = x / std::size_t(per_row);
    w.see(a[x], b[x], ta[row] + tb[row], [&] { return std::string(what) + " element " + std::to_string(x); });
  }
  if (w.bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  w.report(os);
  return ::testing::AssertionFailure() << os.str();
}

template <class F>
void on_every_target(F&& f) {
  for (const std::string& target : targets()) {
    PinTarget pin(target);
    for (int threads : {1, 2}) f(target + " threads " + std::to_string(threads), threads);
  }
}

TEST(Invariants, PermutingKeysAndValuesTogether) {
  Case c = make({2, 4, 2, 33, 150, 40, 24});
  c.name = "perm";
  c.bias = BiasKind::full;
  c.bias_mask = BiasMask::random;
  const std::uint64_t seed = seed_of(c.name);
  const Inputs s = build(c, seed);
  Inputs p = s;
  std::vector<I64> perm(std::size_t(c.n.Nk));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed + 1);
  for (std::size_t j = perm.size(); j-- > 1;) std::swap(perm[j], perm[std::size_t(rng.below(I64(j) + 1))]);
  std::vector<float> K = s.K, V = s.V, BIAS = s.BIAS;
  const Dims& n = c.n;
  for (I64 bh = 0; bh < n.B * n.Hkv; ++bh)
    for (I64 j = 0; j < n.Nk; ++j) {
      for (I64 d = 0; d < n.D; ++d)
        K[std::size_t((bh * n.Nk + j) * n.D + d)] = s.K[std::size_t((bh * n.Nk + perm[j]) * n.D + d)];
      for (I64 d = 0; d < n.Dv; ++d)
        V[std::size_t((bh * n.Nk + j) * n.Dv + d)] = s.V[std::size_t((bh * n.Nk + perm[j]) * n.Dv + d)];
    }
  for (I64 r = 0; r < s.rows(); ++r)
    for (I64 j = 0; j < n.Nk; ++j) BIAS[std::size_t(r * n.Nk + j)] = s.BIAS[std::size_t(r * n.Nk + perm[j])];
  set_logical(p.k, K);
  set_logical(p.v, V);
  set_logical(*p.bias, BIAS);
  p.refresh();
  const Expected es = expect(s), ep = expect(p);
  on_every_target([&](const std::string& ctx, int threads) {
    const FastRun a = fast(s, n, threads), b = fast(p, n, threads);
    std::vector<float> bp(b.r.probs.size());  // permuted probs mapped back to the original order
    for (I64 r = 0; r < s.rows(); ++r)
      for (I64 j = 0; j < n.Nk; ++j) bp[std::size_t(r * n.Nk + perm[j])] = b.r.probs[std::size_t(r * n.Nk + j)];
    const std::string where = ctx + " seed " + std::to_string(seed);
    EXPECT_TRUE(close_rows("out", a.r.out, b.r.out, es.tol_out, ep.tol_out, n.Dv)) << where;
    EXPECT_TRUE(close_rows("lse", a.r.lse, b.r.lse, es.tol_lse, ep.tol_lse, 1)) << where;
    EXPECT_TRUE(close_rows("probs", a.r.probs, bp, es.tol_probs, ep.tol_probs, n.Nk)) << where;
  });
}

TEST(Invariants, AddingAConstantToABiasRowChangesNothingButLse) {
  Case c = make({2, 2, 1, 40, 90, 32, 16});
  c.name = "biasshift";
  c.bias = BiasKind::full;
  c.bias_mask = BiasMask::random;
  c.causal = true;
  const std::uint64_t seed = seed_of(c.name);
  const Inputs s = build(c, seed);
  Inputs p = s;
  std::vector<float> BIAS = s.BIAS, shift(std::size_t(s.rows()));
  const Dims& n = c.n;
  for (I64 r = 0; r < s.rows(); ++r) {
    shift[std::size_t(r)] = 16.f * float(r % 7) - 48.f;  // bias values are k/256 in [-2, 2]: exact
    for (I64 j = 0; j < n.Nk; ++j) BIAS[std::size_t(r * n.Nk + j)] += shift[std::size_t(r)];
  }
  set_logical(*p.bias, BIAS);
  p.refresh();
  const Expected es = expect(s), ep = expect(p);
  on_every_target([&](const std::string& ctx, int threads) {
    const FastRun a = fast(s, n, threads), b = fast(p, n, threads);
    std::vector<float> lse = b.r.lse;
    for (std::size_t r = 0; r < lse.size(); ++r) lse[r] -= shift[r];  // -inf stays -inf
    const std::string where = ctx + " seed " + std::to_string(seed);
    EXPECT_TRUE(close_rows("out", a.r.out, b.r.out, es.tol_out, ep.tol_out, n.Dv)) << where;
    EXPECT_TRUE(close_rows("probs", a.r.probs, b.r.probs, es.tol_probs, ep.tol_probs, n.Nk)) << where;
    // lse - c rounds once more: allow an ulp of the shifted value on top.
    std::vector<double> tl(ep.tol_lse);
    for (std::size_t r = 0; r < tl.size(); ++r) tl[r] += 2 * kU * (std::fabs(double(b.r.lse[r])) + 64);
    EXPECT_TRUE(close_rows("lse", a.r.lse, lse, es.tol_lse, tl, 1)) << where;
  });
}

TEST(Invariants, DecodeEqualsLastRowOfCausalAttention) {
  for (bool with_lengths : {false, true}) {
    Case c = make({1, 2, 1, 600, 600, 64, 48});  // B = 1, Hkv = 1: decode splits 600 keys
    c.name = with_lengths ? "decode_last_kl" : "decode_last";
    c.causal = true;
    c.key_lengths = with_lengths ? KeyLens::mixed : KeyLens::none;
    const std::uint64_t seed = seed_of(c.name);
    const Inputs full = build(c, seed);
    Case dc = c;
    dc.n.Nq = 1;
    Inputs dec = build(dc, seed);
    dec.key_lengths = full.key_lengths;
    std::vector<float> Q;  // the last query row of every head
    for (I64 bh = 0; bh < c.n.B * c.n.Hq; ++bh)
      for (I64 d = 0; d < c.n.D; ++d) Q.push_back(full.Q[std::size_t(((bh + 1) * c.n.Nq - 1) * c.n.D + d)]);
    set_logical(dec.q, Q);
    dec.k = full.k;
    dec.v = full.v;
    dec.refresh();
    const Expected ef = expect(full), ed = expect(dec);
    // Tolerances of the last rows of the full problem, one per decode row.
    std::vector<double> tfo, tfl, tfp;
    for (I64 bh = 0; bh < c.n.B * c.n.Hq; ++bh) {
      const std::size_t last = std::size_t((bh + 1) * c.n.Nq - 1);
      tfo.push_back(ef.tol_out[last]);
      tfl.push_back(ef.tol_lse[last]);
      tfp.push_back(ef.tol_probs[last]);
    }
    on_every_target([&](const std::string& ctx, int threads) {
      const FastRun a = fast(full, c.n, threads), b = fast(dec, dc.n, threads),
                    bs = fast(dec, dc.n, threads, false);  // no probs: keys may be split
      std::vector<float> out, lse, probs;
      for (I64 bh = 0; bh < c.n.B * c.n.Hq; ++bh) {
        const I64 last = (bh + 1) * c.n.Nq - 1;
        out.insert(out.end(), a.r.out.begin() + last * c.n.Dv, a.r.out.begin() + (last + 1) * c.n.Dv);
        lse.push_back(a.r.lse[std::size_t(last)]);
        probs.insert(probs.end(), a.r.probs.begin() + last * c.n.Nk, a.r.probs.begin() + (last + 1) * c.n.Nk);
      }
      const std::string where = ctx + " " + c.name + " seed " + std::to_string(seed);
      EXPECT_TRUE(close_rows("out", out, b.r.out, tfo, ed.tol_out, c.n.Dv)) << where;
      EXPECT_TRUE(close_rows("lse", lse, b.r.lse, tfl, ed.tol_lse, 1)) << where;
      EXPECT_TRUE(close_rows("out", out, bs.r.out, tfo, ed.tol_out, c.n.Dv)) << where << " (no probs)";
      EXPECT_TRUE(close_rows("lse", lse, bs.r.lse, tfl, ed.tol_lse, 1)) << where << " (no probs)";
      EXPECT_TRUE(close_rows("probs", probs, b.r.probs, tfp, ed.tol_probs, c.n.Nk)) << where;
    });
  }
}

TEST(Invariants, ProbsSumToOneAndLseIsLogSumExp) {
  Case c = make({3, 4, 2, 45, 130, 32, 8});
  c.name = "probsum";
  c.causal = true;
  c.bias = BiasKind::full;
  c.bias_mask = BiasMask::random;
  c.key_lengths = KeyLens::mixed;
  const std::uint64_t seed = seed_of(c.name);
  const Inputs s = build(c, seed);
  const Expected e = expect(s);
  const Dims& n = c.n;
  // log sum_j exp(s_ij), straight from the definition in double (independently of the reference).
  std::vector<double> lse(std::size_t(s.rows()), -kInf);
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        std::vector<double> sc;
        for (I64 j = 0; j < n.Nk; ++j) {
          if (s.masked(b, h, i, j)) continue;
          double dot = 0;
          for (I64 d = 0; d < n.D; ++d) dot += double(s.qv(b, h, i, d)) * s.kv(b, h / s.group(), j, d);
          sc.push_back(double(s.scale_value()) * dot + s.biasv(b, h, i, j));
        }
        if (sc.empty()) continue;
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - m);
        lse[std::size_t((b * n.Hq + h) * n.Nq + i)] = m + std::log(sum);
      }
  on_every_target([&](const std::string& ctx, int threads) {
    const FastRun f = fast(s, n, threads);
    Worst ws{"sum of probs"}, wl{"lse"};
    for (I64 r = 0; r < s.rows(); ++r) {
      double sum = 0;
      for (I64 j = 0; j < n.Nk; ++j) sum += f.r.probs[std::size_t(r * n.Nk + j)];
      const bool dead = e.all_masked[std::size_t(r)];
      ws.see(dead ? 0.0 : 1.0, sum, e.tol_psum[std::size_t(r)], [&] { return "row " + std::to_string(r); });
      wl.see(lse[std::size_t(r)], f.r.lse[std::size_t(r)], e.tol_lse[std::size_t(r)],
             [&] { return "row " + std::to_string(r); });
    }
    std::ostringstream os;
    ws.report(os);
    wl.report(os);
    EXPECT_EQ(ws.bad + wl.bad, 0) << ctx << " seed " << seed << os.str();
  });
}

TEST(Invariants, BitwiseIdenticalAcrossRunsWithTheSameThreads) {
  std::vector<Case> cases;
  cases.push_back(make({1, 1, 1, 1, 1025, 64, 64}));   // decode, keys split
  cases.push_back(make({1, 8, 1, 3, 700, 64, 64}));    // stacked heads
  cases.push_back(make({1, 1, 1, 513, 513, 40, 40}));  // few blocks, split
  cases.push_back(make({2, 4, 2, 130, 130, 40, 24}));  // tiles
  cases[2].causal = true;
  cases[2].bias = BiasKind::keys;
  cases[2].bias_mask = BiasMask::random;
  cases[3].causal = true;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    Case& c = cases[k];
    c.name = "bitwise" + std::to_string(k);
    const Inputs s = build(c, seed_of(c.name));
    for (const std::string& target : targets()) {
      PinTarget pin(target);
      for (int threads : {1, 2, 3})
        for (bool probs : {false, true}) {  // without probs the keys may be split across threads
          const FastRun a = fast(s, c.n, threads, probs), b = fast(s, c.n, threads, probs);
          const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
            return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
          };
          EXPECT_TRUE(same(a.o.out.buf, b.o.out.buf) && same(a.o.lse->buf, b.o.lse->buf) &&
                      (!probs || same(a.o.probs->buf, b.o.probs->buf)))
              << c.name << " target " << target << " threads " << threads << " probs " << probs << ": two runs differ";
        }
    }
  }
}

// =============================================================================================
// Edge semantics.

TEST(Edge, AllMaskedRowsAreExactlyZeroWithLseMinusInfinity) {
  Case c = make({3, 2, 1, 12, 5, 8, 6});
  c.name = "allmasked";
  c.causal = true;                 // rows 0..6 see no key (Nq - Nk = 7)
  c.key_lengths = KeyLens::mixed;  // batch 1 has length 0: every row dead
  c.bias = BiasKind::full;
  c.bias_mask = BiasMask::random;  // every 5th row is -inf
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  I64 dead = 0;
  on_every_target([&](const std::string& ctx, int threads) {
    const FastRun f = fast(s, c.n, threads);
    dead = 0;
    for (I64 r = 0; r < s.rows(); ++r) {
      if (!e.all_masked[std::size_t(r)]) continue;
      ++dead;
      const float l = f.r.lse[std::size_t(r)];
      EXPECT_TRUE(std::isinf(l) && l < 0) << ctx << " row " << r << " lse " << l;
      for (I64 x = 0; x < c.n.Dv; ++x) EXPECT_EQ(f.r.out[std::size_t(r * c.n.Dv + x)], 0.f) << ctx << " row " << r;
      for (I64 x = 0; x < c.n.Nk; ++x) EXPECT_EQ(f.r.probs[std::size_t(r * c.n.Nk + x)], 0.f) << ctx << " row " << r;
    }
  });
  EXPECT_GT(dead, 2 * 12);  // the case really has dead rows
}

TEST(Edge, NoKeysGivesZerosAndLseMinusInfinity) {
  for (bool causal : {false, true}) {
    Dims n{2, 4, 2, 3, 0, 5, 7};
    Case c = make(n);
    c.name = "nokeys";
    c.causal = causal;
    c.bias = BiasKind::full;  // a [2, 4, 3, 0] bias is fine too
    const Inputs s = build(c, seed_of(c.name));
    on_every_target([&](const std::string& ctx, int threads) {
      FastRun f = fast(s, n, threads);
      for (float x : f.r.out) EXPECT_EQ(x, 0.f) << ctx;
      for (float x : f.r.lse) EXPECT_TRUE(std::isinf(x) && x < 0) << ctx << " lse " << x;
      EXPECT_TRUE(untouched_outside(f.o)) << ctx;
    });
  }
}

TEST(Edge, NoQueriesOrNoBatchWritesNothing) {
  for (Dims n : {Dims{2, 2, 1, 0, 9, 8, 4}, Dims{0, 2, 1, 5, 9, 8, 4}, Dims{2, 2, 1, 0, 0, 8, 4}}) {
    Case c = make(n);
    c.name = "empty";
    const Inputs s = build(c, seed_of(c.name));
    on_every_target([&](const std::string& ctx, int threads) {
      FastRun f = fast(s, n, threads);
      EXPECT_TRUE(untouched_outside(f.o)) << ctx;  // the views are empty: every element is guard
    });
    // Empty tensors may have null data.
    jomoim::ConstTensor4 q{nullptr, {n.B, n.Hq, n.Nq, n.D}, {0, 0, 0, 0}};
    // (Strides as if every dimension were at least 1: whether an empty output may have zero
    // strides is not what this checks.)
    jomoim::Tensor4 out{nullptr, {n.B, n.Hq, n.Nq, n.Dv}, {n.Hq * 8 * n.Dv, 8 * n.Dv, n.Dv, 1}};
    EXPECT_NO_THROW(jomoim::attention(q, s.k.cview(), s.v.cview(), out));
  }
}

TEST(Edge, ZeroValueWidthStillGivesLseAndProbs) {
  // Dv = 0 is not refused by the contract: out is empty, lse and probs are still defined.
  Case c = make({1, 2, 1, 9, 20, 8, 0});
  c.name = "dv0";
  c.causal = true;
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  on_every_target([&](const std::string& ctx, int threads) {
    FastRun f = fast(s, c.n, threads);
    EXPECT_TRUE(compare(s, e, f.r, true, true)) << ctx;
    EXPECT_TRUE(untouched_outside(f.o)) << ctx;
  });
}

TEST(Edge, OutputsMayHaveZeroStrideOnLengthOneDimensions) {
  const Dims n{1, 2, 1, 1, 30, 16, 8};
  Case c = make(n);
  c.name = "stride0";
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  Outputs o = make_outputs(n, L::contig(), L::contig(), L::contig());
  o.out.strides[0] = 0;  // B = 1
  o.out.strides[2] = 0;  // Nq = 1
  o.lse->strides[0] = 0;
  o.probs->strides[2] = 0;
  run_fast(s, o, 2);
  EXPECT_TRUE(compare(s, e, read(o), true, true));
}

TEST(Simd, EveryTargetCanBePinnedAndRestored) {
  ASSERT_FALSE(targets().empty());
  const std::string best = jomoim::active_simd_target();
  EXPECT_EQ(best, targets().front());
  for (const std::string& t : targets()) {
    PinTarget pin(t);
    EXPECT_EQ(jomoim::active_simd_target(), t);
  }
  EXPECT_EQ(jomoim::active_simd_target(), best);
  EXPECT_THROW(jomoim::set_simd_target("NO_SUCH_TARGET"), jomoim::Error);
  EXPECT_EQ(jomoim::active_simd_target(), best);
}

// Names as users type them: any case ("avx2"), and AVX512 / AVX-512 for Highway's AVX3.
TEST(Simd, TargetNamesIgnoreCaseAndAcceptAvx512) {
  const std::string best = jomoim::active_simd_target();
  for (const std::string& t : targets()) {
    std::string lower;
    for (char c : t) lower += char(std::tolower(static_cast<unsigned char>(c)));
    jomoim::set_simd_target(lower);
    EXPECT_EQ(jomoim::active_simd_target(), t) << lower;
  }
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3") != all.end()) {
    for (const char* alias : {"AVX512", "avx512", "avx-512"}) {
      jomoim::set_simd_target(alias);
      EXPECT_EQ(jomoim::active_simd_target(), "AVX3") << alias;
    }
  } else {
    EXPECT_THROW(jomoim::set_simd_target("avx512"), jomoim::Error);
  }
  EXPECT_THROW(jomoim::set_simd_target("avx2x"), jomoim::Error);
  jomoim::set_simd_target("");
  EXPECT_EQ(jomoim::active_simd_target(), best);
}

}  // namespace
