// test_attention.cpp — decides whether jomoim::attention (the fast path) is correct.
//
// Every case compares attention() with the float64 oracle attention_reference() on fresh random
// inputs (a fixed seed per case, printed on failure), on every SIMD target this CPU runs, with 1
// and 2 threads. Outputs live in NaN-poisoned buffers with guard elements around them and gaps
// inside strided layouts; both must come back as expected. Tolerances are derived per row from a
// naive float32 computation's own error (see attention_test_util.hpp). Then: invariants that need
// no oracle, edge semantics, and every refusal. Helpers live in attention_test_util.hpp.
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
// The table of cases.

// A readable, unique-enough name from the fields (the group prefix makes it unique).
std::string auto_name(const std::string& group, const Case& c) {
  const Dims& n = c.n;
  std::string s = group + "_b" + std::to_string(n.B) + "h" + std::to_string(n.Hq) + "x" +
                  std::to_string(n.Hkv) + "_q" + std::to_string(n.Nq) + "k" + std::to_string(n.Nk) +
                  "_d" + std::to_string(n.D) + "v" + std::to_string(n.Dv);
  if (c.causal) s += "_causal";
  if (c.bias != BiasKind::none) s += std::string("_bias") + name(c.bias);
  if (c.bias_mask != BiasMask::none) s += std::string("_mask") + name(c.bias_mask);
  if (c.key_lengths != KeyLens::none) s += std::string("_kl") + name(c.key_lengths);
  if (c.amp != 1) s += "_amp" + std::to_string(int(c.amp));
  if (c.scale) {
    std::ostringstream os;
    os << *c.scale;  // "0", "-0.7", "3", "1e+20"
    s += "_scale";
    for (char ch : os.str()) s += ch == '-' ? "m" : ch == '.' ? "p" : ch == '+' ? "" : std::string(1, ch);
  }
  if (c.notation == Notation::col3b1b) s += "_3b1b";
  if (!c.want_probs) s += "_noprobs";
  if (!c.want_lse) s += "_nolse";
  for (const auto& [tag, l] : {std::pair{"q", &c.q_layout}, {"k", &c.k_layout}, {"v", &c.v_layout},
                               {"o", &c.out_layout}, {"b", &c.bias_layout}, {"p", &c.probs_layout},
                               {"l", &c.lse_layout}})
    if (l->name != "contig") s += std::string("_") + tag + l->name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

Case make(Dims n) {
  Case c;
  c.n = n;
  return c;
}

std::vector<Case> table() {
  std::vector<Case> t;
  auto add = [&](const std::string& group, Case c) {
    c.name = auto_name(group, c);
    t.push_back(std::move(c));
  };
  const I64 kDs[] = {1, 3, 8, 40, 59, 64, 80, 111, 128, 256};

  // Every length from 1 to 2 x 16 lanes (and one past), square, causal and not; D cycles
  // through the awkward sizes; Dv differs from D every third length.
  for (I64 N = 1; N <= 33; ++N)
    for (bool causal : {false, true}) {
      const I64 D = kDs[N % 10];
      Case c = make({1, 2, 1, N, N, D, N % 3 == 0 ? kDs[(N + 3) % 10] : D});
      c.causal = causal;
      add("len", c);
    }
  // Nq != Nk at every length: fewer queries than keys (non-causal), and more queries than keys
  // (causal: the first Nq - Nk rows see nothing).
  for (I64 N = 1; N <= 32; ++N) {
    Case c = N % 2 ? make({1, 2, 2, N, 2 * N + 3, 16 + N, 24}) : make({1, 2, 2, N + 9, N, 16 + N, 24});
    c.causal = N % 2 == 0;
    add("lenqk", c);
  }
  // Decode against every short cache length, heads stacked (Hq / Hkv = 4).
  for (I64 Nk = 1; Nk <= 33; ++Nk) {
    Case c = make({1, 8, 2, 1, Nk, 64, 64});
    c.causal = Nk % 2 == 0;
    add("declen", c);
  }
  // Head dimensions; Dv = D and Dv != D.
  for (int t_ = 0; t_ < 10; ++t_)
    for (bool same : {true, false}) {
      const I64 D = kDs[t_];
      Case c = make({2, 2, 2, same ? 17 : 97, same ? 17 : 97, D, same ? D : kDs[(t_ + 4) % 10]});
      c.causal = t_ % 2 == 1;
      c.want_probs = D <= 128;
      add("dim", c);
    }
  // Sequence lengths, the biggest few kept to one head.
  for (I64 N : {1, 2, 17, 97, 113}) {
    Case c = make({2, 4, 2, N, N, 64, 64});
    c.causal = N != 113;
    add("seq", c);
  }
  {
    Case c = make({1, 1, 1, 1025, 1025, 64, 64});
    c.causal = true;
    c.want_probs = false;
    add("seq", c);
    Case d = make({1, 1, 1, 1025, 97, 40, 24});  // long query, short keys, causal: 928 dead rows
    d.causal = true;
    add("seq", d);
    Case e = make({1, 2, 1, 113, 1025, 59, 80});
    add("seq", e);
  }
  // Tile boundaries (Bq = Bk = 64).
  for (auto [nq, nk] : {std::pair<I64, I64>{63, 63}, {64, 64}, {65, 65}, {127, 129}, {129, 127},
                        {64, 65}, {65, 64}, {63, 129}, {129, 63}, {128, 128}})
    for (bool causal : {false, true}) {
      if (!causal && nq != nk) continue;
      Case c = make({1, 2, 1, nq, nk, 40, 48});
      c.causal = causal;
      add("tile", c);
    }
  // Grouped-query ratios 1, 2, 4, 8, with few queries (stacked heads) and many.
  for (I64 r : {1, 2, 4, 8})
    for (I64 nq : {1, 3, 9, 70}) {
      Case c = make({2, 2 * r, 2, nq, 77, 32, 40});
      c.causal = nq != 3;
      if (nq == 9) {
        c.bias = BiasKind::heads;
        c.key_lengths = KeyLens::mixed;
      }
      add("gqa", c);
    }
  // Bias broadcast shapes x -inf entries x causal; Nk = 70 crosses a key tile.
  for (BiasKind k : {BiasKind::full, BiasKind::rows, BiasKind::keys, BiasKind::heads})
    for (BiasMask m : {BiasMask::none, BiasMask::random})
      for (bool causal : {false, true}) {
        Case c = make({3, 4, 2, 19, 70, 24, 16});
        c.bias = k;
        c.bias_mask = m;
        c.causal = causal;
        add("bias", c);
      }
  // Key lengths (0, Nk and between) with and without causal, Nq <, =, > Nk.
  for (KeyLens kl : {KeyLens::mixed, KeyLens::full, KeyLens::zero})
    for (bool causal : {false, true})
      for (auto [nq, nk] : {std::pair<I64, I64>{5, 70}, {66, 66}, {80, 13}}) {
        Case c = make({6, 2, 1, nq, nk, 16, 8});
        c.key_lengths = kl;
        c.causal = causal;
        add("keylen", c);
      }
  // Rows whose keys are all masked, and nothing at all.
  {
    Case c = make({2, 2, 1, 70, 3, 8, 8});  // causal Nq > Nk: 67 dead rows, crossing Bq
    c.causal = true;
    add("dead", c);
    Case d = make({2, 4, 2, 21, 33, 16, 16});  // bias -inf rows + key lengths 0
    d.bias = BiasKind::full;
    d.bias_mask = BiasMask::random;
    d.key_lengths = KeyLens::mixed;
    d.causal = true;
    add("dead", d);
    Case e = make({2, 2, 1, 5, 0, 8, 4});  // Nk = 0
    add("dead", e);
    e.causal = true;
    add("dead", e);
    Case f = make({2, 2, 1, 0, 9, 8, 4});  // Nq = 0
    add("dead", f);
    Case g = make({0, 2, 1, 5, 9, 8, 4});  // B = 0
    add("dead", g);
  }
  // Huge scores: q, k in [-55, 55) put scaled scores in the +-1000s (std ~1000).
  {
    Case c = make({1, 2, 1, 40, 90, 64, 32});
    c.amp = 55;
    add("huge", c);
    c.causal = true;
    c.bias = BiasKind::full;
    c.bias_mask = BiasMask::random;
    add("huge", c);
    Case d = make({1, 4, 1, 1, 1025, 64, 64});
    d.amp = 55;
    d.threads = {1, 2, 3};
    add("huge", d);
    Case e = make({2, 2, 2, 17, 17, 3, 5});
    e.amp = 55;
    e.causal = true;
    e.key_lengths = KeyLens::mixed;
    e.notation = Notation::col3b1b;
    e.q_layout = e.k_layout = e.v_layout = e.out_layout = L::cols();
    add("huge", e);
    Case f = make({1, 2, 1, 33, 65, 128, 16});
    f.amp = 30;
    f.scale = 1.0f;  // unscaled: scores up to ~1e4
    add("huge", f);
  }
  // Scales: zero (uniform weights), negative, large, and enormous (one-hot).
  for (float sc : {0.0f, -0.7f, 3.0f, 1e20f}) {
    Case c = make({1, 2, 1, 20, 45, 16, 8});
    c.scale = sc;
    c.causal = sc < 0;
    add("scale", c);
  }
  // Decode: one query (or a few) against a long cache; keys split across threads and merged
  // by log-sum-exp. Requesting probs needs each row's final softmax in one piece, so most of
  // these ask for out and lse only (otherwise a kernel may not split at all).
  {
    const std::vector<int> th{1, 2, 3, 0};
    Case c = make({1, 1, 1, 1, 1025, 128, 128});
    c.threads = th;
    add("decode", c);
    Case d = make({1, 8, 1, 1, 1025, 64, 64});  // stacked heads (MQA)
    d.threads = th;
    d.causal = true;
    add("decode", d);
    Case e = make({3, 4, 2, 1, 1025, 64, 32});  // key lengths 0 .. Nk: some splits empty
    e.threads = th;
    e.key_lengths = KeyLens::mixed;
    add("decode", e);
    Case f = make({1, 2, 1, 1, 1025, 64, 64});  // the first 60% of keys masked by bias
    f.threads = th;
    f.bias = BiasKind::keys;
    f.bias_mask = BiasMask::prefix;
    add("decode", f);
    Case g = make({2, 4, 4, 1, 1025, 40, 40});  // random -inf keys, last batch all masked
    g.threads = th;
    g.bias = BiasKind::keys;
    g.bias_mask = BiasMask::random;
    add("decode", g);
    Case h = make({1, 4, 1, 4, 1025, 80, 80});  // a few queries, causal
    h.threads = th;
    h.causal = true;
    h.key_lengths = KeyLens::mixed;
    add("decode", h);
    Case i = make({1, 2, 1, 1, 600, 256, 256});
    i.threads = th;
    i.bias = BiasKind::full;
    i.bias_mask = BiasMask::random;
    add("decode", i);
    for (Case* x : {&c, &d, &e, &f, &g, &h, &i}) {  // the same without probs
      x->want_probs = false;
      add("decode", *x);
    }
    Case j = make({1, 4, 1, 1, 1025, 64, 64});  // huge scores merged across splits
    j.threads = th;
    j.amp = 55;
    j.bias = BiasKind::keys;
    j.bias_mask = BiasMask::random;
    j.want_probs = false;
    add("decode", j);
    Case k = make({1, 2, 1, 1, 1025, 64, 20});  // K rows backwards (negative row stride), V packed
    k.threads = th;
    k.k_layout = L::flipped();
    k.v_layout = L::padded();
    k.out_layout = L::reversed();
    k.lse_layout = L::lse_reversed();
    k.want_probs = false;
    add("decode", k);
    Case m = make({2, 2, 1, 1, 777, 48, 32});  // 3b1b column memory: K's D-stride is Nk
    m.threads = th;
    m.notation = Notation::col3b1b;
    m.q_layout = m.k_layout = m.v_layout = m.out_layout = L::cols();
    m.key_lengths = KeyLens::mixed;
    m.want_probs = false;
    add("decode", m);
    Case w = make({1, 1, 1, 1, 1025, 32, 32});  // no lse either
    w.threads = th;
    w.want_probs = w.want_lse = false;
    w.v_layout = L::flipped();
    add("decode", w);
  }
  // Key splits outside decode: few work items (one head, one batch) and many keys.
  {
    Case c = make({1, 1, 1, 513, 513, 40, 40});  // causal: the first blocks see few keys
    c.causal = true;
    c.threads = {1, 2, 3};
    c.want_probs = false;
    add("split", c);
    Case d = make({1, 1, 1, 100, 1025, 64, 48});
    d.want_probs = false;
    add("split", d);
    Case e = make({1, 2, 1, 5, 700, 24, 16});  // stacked heads, causal, key length, bias
    e.causal = true;
    e.key_lengths = KeyLens::mixed;
    e.bias = BiasKind::full;
    e.bias_mask = BiasMask::random;
    e.threads = {1, 2, 3};
    e.want_probs = false;
    add("split", e);
    Case f = make({1, 2, 2, 70, 1025, 16, 16});  // causal, Nq > Bq
    f.causal = true;
    f.bias = BiasKind::rows;
    f.bias_mask = BiasMask::prefix;
    f.threads = {1, 2, 3};
    f.want_probs = false;
    add("split", f);
  }
  // Layouts: transposed, padded, reversed (negative strides), strided, broadcast inputs, and
  // the 3b1b notation on column memory and on other memory.
  {
    auto lay = [&](Notation no, Layout q, Layout k, Layout v, Layout o, Layout p, Layout l,
                   bool causal, BiasKind bias = BiasKind::none, Layout bl = L::contig()) {
      Case c = make({2, 4, 2, 37, 70, 24, 20});
      c.notation = no;
      c.q_layout = q; c.k_layout = k; c.v_layout = v; c.out_layout = o;
      c.probs_layout = p; c.lse_layout = l; c.causal = causal;
      c.bias = bias; c.bias_layout = bl;
      if (bias != BiasKind::none) c.bias_mask = BiasMask::random;
      add("layout", c);
    };
    const Notation P = Notation::paper, C = Notation::col3b1b;
    lay(P, L::bnhd(), L::bnhd(), L::bnhd(), L::bnhd(), L::contig(), L::contig(), false);
    lay(P, L::padded(), L::padded(), L::padded(), L::padded(), L::padded(), L::lse_strided(), true);
    lay(P, L::reversed(), L::reversed(), L::reversed(), L::reversed(), L::reversed(), L::lse_reversed(), true);
    lay(P, L::flipped(), L::flipped(), L::flipped(), L::flipped(), L::flipped(), L::lse_reversed(), true,
        BiasKind::keys, L::flipped());  // sequence runs backwards, rows contiguous: K read in place
    lay(P, L::strided(), L::strided(), L::strided(), L::strided(), L::strided(), L::lse_strided(), false);
    lay(P, L::contig(), L::bcast_heads(), L::bcast_heads(), L::contig(), L::contig(), L::contig(), true);
    lay(P, L::bcast_batch(), L::bcast_batch(), L::bcast_batch(), L::padded(), L::contig(), L::contig(), false);
    lay(P, L::scrambled(), L::scrambled(), L::scrambled(), L::scrambled(), L::scrambled(), L::lse_transposed(), true,
        BiasKind::full, L::scrambled());
    lay(P, L::cols(), L::cols(), L::cols(), L::cols(), L::cols(), L::lse_transposed(), false,
        BiasKind::rows, L::cols());
    lay(P, L::contig(), L::contig(), L::contig(), L::contig(), L::contig(), L::contig(), true,
        BiasKind::full, L::reversed());
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), L::contig(), false);
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), L::contig(), true, BiasKind::keys);
    lay(C, L::contig(), L::contig(), L::contig(), L::contig(), L::padded(), L::lse_strided(), false);
    lay(C, L::padded(), L::reversed(), L::bnhd(), L::strided(), L::contig(), L::contig(), true,
        BiasKind::full);
    lay(C, L::cols(), L::bcast_heads(), L::bcast_heads(), L::reversed(), L::cols(), L::lse_reversed(), true);
    // 3b1b, grouped-query, key lengths, one query.
    Case c = make({3, 8, 2, 1, 130, 64, 48});
    c.notation = C;
    c.q_layout = c.k_layout = c.v_layout = c.out_layout = L::cols();
    c.key_lengths = KeyLens::mixed;
    c.causal = true;
    c.threads = {1, 2, 3};
    add("layout", c);
    Case d = make({2, 4, 1, 66, 66, 59, 40});
    d.notation = C;
    d.q_layout = d.k_layout = d.v_layout = d.out_layout = L::cols();
    d.key_lengths = KeyLens::mixed;
    d.bias = BiasKind::rows;
    d.bias_mask = BiasMask::random;
    d.causal = true;
    add("layout", d);
  }
  return t;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> t = table();
  return t;
}

// =============================================================================================
// The comparison with the oracle.

class Table : public ::testing::TestWithParam<Case> {};

// Runs the fast path with one thread count on the current target; returns the outputs.
Outputs run_checked(const Case& c, const Inputs& s, int threads, const std::string& ctx) {
  Outputs o = make_outputs(c);
  try {
    run_fast(s, o, threads);
  } catch (const std::exception& ex) {
    ADD_FAILURE() << ctx << ": attention threw '" << ex.what() << "'";
  }
  return o;
}

TEST_P(Table, MatchesReference) {
  const Case& c = GetParam();
  const std::uint64_t seed = seed_of(c.name);
  const Inputs s = build(c, seed);
  const Expected e = expect(s);
  ASSERT_TRUE(e.oracle_issue.empty()) << describe(c, seed) << ": " << e.oracle_issue;
  // The tolerance must admit a legitimate reordering: a failure here is a test bug.
  EXPECT_TRUE(compare(s, e, tiled_f32_model(s), true, true))
      << "tolerance self-check (tiled float32 model, not the library) " << describe(c, seed);

  const auto inputs = snapshot(s);
  for (const std::string& target : targets()) {
    PinTarget pin(target);
    for (int threads : c.threads) {
      const std::string ctx = describe(c, seed) + " target " + target + " threads " + std::to_string(threads);
      const Outputs o = run_checked(c, s, threads, ctx);
      EXPECT_TRUE(compare(s, e, read(o), c.want_lse, c.want_probs)) << ctx;
      EXPECT_TRUE(untouched_outside(o)) << ctx;
      EXPECT_TRUE(unchanged(s, inputs)) << ctx;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, Table, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(TableSelf, NamesAndSeedsAreDistinct) {
  std::set<std::string> names;
  std::set<std::uint64_t> seeds;
  for (const Case& c : all_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    EXPECT_TRUE(seeds.insert(seed_of(c.name)).second) << "duplicate seed " << c.name;
  }
}

// =============================================================================================
// The tolerance is tight enough to see real mistakes.

TEST(Tolerance, RejectsOneDroppedKey) {
  Case c = make({1, 2, 1, 1, 1025, 64, 64});
  c.name = "tolerance_drop";
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  Inputs dropped = s;  // the last key forgotten (p ~ 1/1025)
  dropped.key_lengths.assign(1, 1024);
  EXPECT_FALSE(compare(s, e, naive_f32(dropped), true, true));
}

TEST(Tolerance, RejectsBfloat16Scores) {
  Case c = make({1, 2, 1, 30, 70, 64, 64});
  c.name = "tolerance_bf16";
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  Inputs rounded = s;  // q rounded to 8 significant bits, as a bf16 kernel would
  for (float& x : rounded.Q) x = std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) + 0x8000u) & 0xffff0000u);
  EXPECT_FALSE(compare(s, e, naive_f32(rounded), true, true));
}

TEST(Tolerance, RejectsARelativeErrorOfTwoToTheMinus12) {
  // A systematic relative error of 2^-12 on every weight (what a cheap exp would give).
  Case c = make({1, 1, 1, 10, 200, 32, 32});
  c.name = "tolerance_exp";
  const Inputs s = build(c, seed_of(c.name));
  const Expected e = expect(s);
  F32Result r = naive_f32(s);
  for (std::size_t i = 0; i < r.out.size(); ++i) r.out[i] *= 1.f + 0x1p-12f;
  EXPECT_FALSE(compare(s, e, r, false, false));
}

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
::testing::AssertionResult close_rows(const char* what, const std::vector<float>& a,
                                      const std::vector<float>& b, const std::vector<double>& ta,
                                      const std::vector<double>& tb, I64 per_row) {
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
      for (I64 d = 0; d < n.D; ++d) K[std::size_t((bh * n.Nk + j) * n.D + d)] = s.K[std::size_t((bh * n.Nk + perm[j]) * n.D + d)];
      for (I64 d = 0; d < n.Dv; ++d) V[std::size_t((bh * n.Nk + j) * n.Dv + d)] = s.V[std::size_t((bh * n.Nk + perm[j]) * n.Dv + d)];
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
  cases.push_back(make({1, 1, 1, 1, 1025, 64, 64}));                     // decode, keys split
  cases.push_back(make({1, 8, 1, 3, 700, 64, 64}));                      // stacked heads
  cases.push_back(make({1, 1, 1, 513, 513, 40, 40}));                    // few blocks, split
  cases.push_back(make({2, 4, 2, 130, 130, 40, 24}));                    // tiles
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
              << c.name << " target " << target << " threads " << threads << " probs " << probs
              << ": two runs differ";
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

// =============================================================================================
// Refusals: jomoim::Error (no other type, no crash), a one-line message naming the argument, and
// nothing written: out, lse and probs keep their poison.

struct Args {
  Dims n{2, 4, 2, 5, 7, 8, 6};
  Stored<4> q, k, v, out, bias, probs;
  Stored<3> lse;
  std::vector<I64> kl{7, 3};
  std::vector<float> arena;  // for cases that place views inside one shared buffer
  jomoim::ConstTensor4 qv, kv, vv;
  jomoim::Tensor4 ov;
  jomoim::AttentionOptions o;

  Args() {
    Rng rng(seed_of("refusal"));
    q = store<4>({n.B, n.Hq, n.Nq, n.D}, L::contig());
    k = store<4>({n.B, n.Hkv, n.Nk, n.D}, L::contig());
    v = store<4>({n.B, n.Hkv, n.Nk, n.Dv}, L::contig());
    bias = store<4>({n.B, n.Hq, n.Nq, n.Nk}, L::contig());
    out = store<4>({n.B, n.Hq, n.Nq, n.Dv}, L::contig());
    lse = store<3>({n.B, n.Hq, n.Nq}, L::contig());
    probs = store<4>({n.B, n.Hq, n.Nq, n.Nk}, L::contig());
    for (Stored<4>* s : {&q, &k, &v, &bias}) fill_uniform(*s, rng, 1.f);
    arena.assign(8192, poison());
    qv = q.cview();
    kv = k.cview();
    vv = v.cview();
    ov = out.view();
    o.bias = bias.cview();
    o.key_lengths = kl;
    o.lse = lse.view();
    o.probs = probs.view();
    o.causal = true;
  }
  // Copies an input into the arena at `at` (C order) and returns a view of it there.
  jomoim::ConstTensor4 input_in_arena(const Stored<4>& s, I64 at) {
    const std::vector<float> x = logical(s);
    std::copy(x.begin(), x.end(), arena.begin() + at);
    return jomoim::ConstTensor4::contiguous(arena.data() + at, s.shape);
  }
  template <std::size_t R>
  jomoim::TensorView<float, R> output_in_arena(const std::array<I64, R>& shape, I64 at) {
    return jomoim::TensorView<float, R>::contiguous(arena.data() + at, shape);
  }
};

struct Refusal {
  std::string name;
  std::string word;  // the argument the message must name (as a whole word)
  std::function<void(Args&)> mutate;
  bool also_reference = true;  // the reference validates inputs too (it ignores out)
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

bool contains_word(const std::string& msg, const std::string& w) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t p = msg.find(w); p != std::string::npos; p = msg.find(w, p + 1)) {
    const bool left = p == 0 || !ident(msg[p - 1]);
    const bool right = p + w.size() >= msg.size() || !ident(msg[p + w.size()]);
    if (left && right) return true;
  }
  return false;
}

std::vector<Refusal> refusals() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Refusal> r;
  auto add = [&](std::string name, std::string word, std::function<void(Args&)> f, bool ref = true) {
    r.push_back({std::move(name), std::move(word), std::move(f), ref});
  };
  // Shapes.
  add("k_wrong_D", "k", [](Args& a) { a.kv.shape[3] = 7; });
  add("k_wrong_batch", "k", [](Args& a) { a.kv.shape[0] = 1; });
  add("k_no_heads", "k", [](Args& a) { a.kv.shape[1] = 0; a.vv.shape[1] = 0; });
  add("v_wrong_Nk", "v", [](Args& a) { a.vv.shape[2] = 6; });
  add("v_wrong_heads", "v", [](Args& a) { a.vv.shape[1] = 1; });
  add("q_negative_dim", "q", [](Args& a) { a.qv.shape[2] = -1; });
  add("Hq_not_multiple_of_Hkv", "Hq", [](Args& a) {
    a.qv.shape[1] = 3; a.ov.shape[1] = 3; a.o.bias->shape[1] = 3; a.o.lse->shape[1] = 3; a.o.probs->shape[1] = 3;
  });
  add("D_zero", "D", [](Args& a) { a.qv.shape[3] = 0; a.kv.shape[3] = 0; });
  add("notation_3b1b_shapes_disagree", "k", [](Args& a) { a.o.notation = Notation::col3b1b; });
  add("out_wrong_shape", "out", [](Args& a) { a.ov.shape[3] = 5; }, false);
  add("out_wrong_heads", "out", [](Args& a) { a.ov.shape[1] = 2; }, false);
  // Bias.
  add("bias_not_broadcastable_rows", "bias", [](Args& a) { a.o.bias->shape[2] = 2; });
  add("bias_not_broadcastable_keys", "bias", [](Args& a) { a.o.bias->shape[3] = 3; });
  add("bias_not_broadcastable_batch", "bias", [](Args& a) { a.o.bias->shape[0] = 3; a.o.bias->strides[0] = 0; });
  add("bias_null", "bias", [](Args& a) { a.o.bias->data = nullptr; });
  // Key lengths.
  add("key_lengths_too_few", "key_lengths", [](Args& a) { a.kl = {7}; a.o.key_lengths = a.kl; });
  add("key_lengths_too_many", "key_lengths", [](Args& a) { a.kl = {7, 3, 1}; a.o.key_lengths = a.kl; });
  add("key_lengths_negative", "key_lengths", [](Args& a) { a.kl = {-1, 3}; a.o.key_lengths = a.kl; });
  add("key_lengths_above_Nk", "key_lengths", [](Args& a) { a.kl = {7, 8}; a.o.key_lengths = a.kl; });
  // Scale.
  add("scale_nan", "scale", [nan](Args& a) { a.o.scale = nan; });
  add("scale_inf", "scale", [inf](Args& a) { a.o.scale = inf; });
  add("scale_minus_inf", "scale", [inf](Args& a) { a.o.scale = -inf; });
  // Null data.
  add("q_null", "q", [](Args& a) { a.qv.data = nullptr; });
  add("k_null", "k", [](Args& a) { a.kv.data = nullptr; });
  add("v_null", "v", [](Args& a) { a.vv.data = nullptr; });
  add("out_null", "out", [](Args& a) { a.ov.data = nullptr; }, false);
  add("lse_null", "lse", [](Args& a) { a.o.lse->data = nullptr; });
  add("probs_null", "probs", [](Args& a) { a.o.probs->data = nullptr; });
  // Output strides.
  add("out_zero_stride", "out", [](Args& a) { a.ov.strides[2] = 0; }, false);
  add("out_zero_stride_heads", "out", [](Args& a) { a.ov.strides[1] = 0; }, false);
  add("out_interleaved_rows", "out", [](Args& a) { a.ov.strides[2] = 2; }, false);
  add("lse_zero_stride", "lse", [](Args& a) { a.o.lse->strides[2] = 0; });
  add("probs_zero_stride", "probs", [](Args& a) { a.o.probs->strides[3] = 0; });
  add("lse_wrong_shape", "lse", [](Args& a) { a.o.lse->shape[2] = 4; });
  add("probs_wrong_shape", "probs", [](Args& a) { a.o.probs->shape[3] = 6; });
  // Overlaps (inside one arena so that no view leaves its memory).
  add("out_overlaps_q", "out", [](Args& a) {
    a.qv = a.input_in_arena(a.q, 100);
    a.ov = a.output_in_arena<4>(a.out.shape, 300);
  }, false);
  add("out_overlaps_k", "out", [](Args& a) {
    a.kv = a.input_in_arena(a.k, 1000);
    a.ov = a.output_in_arena<4>(a.out.shape, 800);
  }, false);
  add("out_overlaps_v", "out", [](Args& a) {
    a.vv = a.input_in_arena(a.v, 100);
    a.ov = a.output_in_arena<4>(a.out.shape, 150);
  }, false);
  add("out_overlaps_bias", "out", [](Args& a) {
    a.o.bias = a.input_in_arena(a.bias, 2000);
    a.ov = a.output_in_arena<4>(a.out.shape, 2100);
  }, false);
  add("lse_overlaps_q", "lse", [](Args& a) {
    a.qv = a.input_in_arena(a.q, 100);
    a.o.lse = a.output_in_arena<3>(a.lse.shape, 200);
  });
  add("probs_overlaps_k", "probs", [](Args& a) {
    a.kv = a.input_in_arena(a.k, 100);
    a.o.probs = a.output_in_arena<4>(a.probs.shape, 300);
  });
  add("lse_overlaps_out", "lse", [](Args& a) {
    a.ov = a.output_in_arena<4>(a.out.shape, 100);
    a.o.lse = a.output_in_arena<3>(a.lse.shape, 200);
  }, false);
  add("probs_overlaps_out", "probs", [](Args& a) {
    a.ov = a.output_in_arena<4>(a.out.shape, 100);
    a.o.probs = a.output_in_arena<4>(a.probs.shape, 120);
  }, false);
  add("probs_overlaps_lse", "probs", [](Args& a) {
    a.o.lse = a.output_in_arena<3>(a.lse.shape, 100);
    a.o.probs = a.output_in_arena<4>(a.probs.shape, 130);
  });
  return r;
}

class Refused : public ::testing::TestWithParam<Refusal> {};

// Calls f; passes iff it throws jomoim::Error whose one-line message names `word`.
::testing::AssertionResult throws_error_naming(const std::function<void()>& f, const std::string& word) {
  try {
    f();
  } catch (const jomoim::Error& e) {
    const std::string msg = e.what();
    if (!contains_word(msg, word))
      return ::testing::AssertionFailure() << "message does not name '" << word << "': " << msg;
    if (msg.find('\n') != std::string::npos)
      return ::testing::AssertionFailure() << "message is not one line: " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw " << typeid(e).name() << " instead of jomoim::Error: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw a non-std exception instead of jomoim::Error";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

TEST_P(Refused, ThrowsErrorNamingTheArgumentAndWritesNothing) {
  const Refusal& r = GetParam();
  Args a;
  r.mutate(a);
  const std::vector<float> arena = a.arena, q = a.q.buf, k = a.k.buf, v = a.v.buf, bias = a.bias.buf;
  a.o.threads = 2;
  EXPECT_TRUE(throws_error_naming([&] { jomoim::attention(a.qv, a.kv, a.vv, a.ov, a.o); }, r.word));
  if (r.also_reference) {
    EXPECT_TRUE(throws_error_naming([&] { (void)jomoim::attention_reference(a.qv, a.kv, a.vv, a.o); }, r.word))
        << "(attention_reference)";
  }
  for (const auto* s : {&a.out.buf, &a.probs.buf, &a.lse.buf})
    EXPECT_TRUE(std::all_of(s->begin(), s->end(), is_poison)) << "an output was written before refusing";
  const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(arena, a.arena) && same(q, a.q.buf) && same(k, a.k.buf) && same(v, a.v.buf) &&
              same(bias, a.bias.buf))
      << "memory was written before refusing";
}

INSTANTIATE_TEST_SUITE_P(Attention, Refused, ::testing::ValuesIn(refusals()),
                         [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

TEST(Refusals, TheValidArgumentsOfTheRefusalTableAreAccepted) {
  Args a;
  EXPECT_NO_THROW(jomoim::attention(a.qv, a.kv, a.vv, a.ov, a.o));
  EXPECT_FALSE(std::all_of(a.out.buf.begin(), a.out.buf.end(), is_poison));
}

TEST(Refusals, UnknownNotationName) {
  EXPECT_TRUE(throws_error_naming([] { (void)jomoim::parse_notation("columns"); }, "notation"));
  EXPECT_EQ(jomoim::parse_notation("3b1b"), Notation::col3b1b);
  EXPECT_EQ(jomoim::parse_notation("paper"), Notation::paper);
}

}  // namespace
