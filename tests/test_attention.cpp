// test_attention.cpp — decides whether jomoim::attention (the fast path) is correct.
//
// Every case compares attention() with the float64 oracle attention_reference() on fresh random
// inputs (a fixed seed per case, printed on failure), on every SIMD target this CPU runs, with 1
// and 2 threads. Outputs live in NaN-poisoned buffers with guard elements around them and gaps
// inside strided layouts; both must come back as expected. Tolerances are derived per row from a
// naive float32 computation's own error (see attention_test_util.hpp), and the tolerance is shown
// to reject real mistakes. Invariants and edges: test_attention_invariants.cpp; refusals:
// test_attention_refusals.cpp. Helpers live in attention_test_util.hpp.
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
  // Tile boundaries (the default tiles: Bq = 64 query rows, Bk = 256 keys).
  for (auto [nq, nk] : {std::pair<I64, I64>{63, 63}, {64, 64}, {65, 65}, {127, 129}, {129, 127},
                        {64, 65}, {65, 64}, {63, 129}, {129, 63}, {128, 128}})
    for (bool causal : {false, true}) {
      if (!causal && nq != nk) continue;
      Case c = make({1, 2, 1, nq, nk, 40, 48});
      c.causal = causal;
      add("tile", c);
    }
  for (auto [nq, nk] : {std::pair<I64, I64>{255, 255}, {256, 256}, {257, 257}, {64, 257}, {65, 511},
                        {100, 513}, {300, 255}, {1, 257}, {7, 512}})
    for (bool causal : {false, true}) {
      Case c = make({1, 2, 1, nq, nk, 24, 40});
      c.causal = causal;
      c.want_probs = nq <= 100;
      add("ktile", c);
    }
  // Wide tiles (256 query rows x 64 keys: non-causal, D >= 128, Nq >= 256, Nk >= 512; see
  // plan.hpp; they accumulate O^T): block and tile edges, GQA, bias with -inf, key lengths,
  // probs, columns (K and V packed because they are not contiguous along D), Dv not a whole
  // number of vectors nor of the value kernel's 4 columns, V read backwards or packed.
  {
    Case a = make({1, 2, 1, 257, 513, 128, 128});
    a.bias = BiasKind::rows;
    a.bias_mask = BiasMask::random;
    add("wide", a);
    Case b = make({2, 4, 2, 300, 600, 128, 72});
    b.key_lengths = KeyLens::mixed;
    b.want_probs = false;
    add("wide", b);
    Case c = make({1, 2, 2, 256, 520, 130, 128});
    c.notation = Notation::col3b1b;
    c.q_layout = c.k_layout = c.v_layout = c.out_layout = L::cols();
    add("wide", c);
    Case d = make({1, 2, 1, 511, 517, 128, 131});  // last block 255 rows, last tile 5 keys
    d.v_layout = L::flipped();
    add("wide", d);
    Case e = make({1, 1, 1, 260, 700, 129, 5});
    e.v_layout = L::strided();
    e.key_lengths = KeyLens::mixed;
    add("wide", e);
    // Queries packed and outputs written as whole lanes x lanes squares when their rows are
    // contiguous along D: rows running backwards, rows of another head in between, row gaps; D,
    // Dv and the last block's rows each a few squares and a remainder (or exactly one square).
    Case f = make({1, 4, 2, 290, 515, 144, 40});
    f.q_layout = f.out_layout = L::flipped();
    f.lse_layout = L::lse_strided();
    add("wide", f);
    Case g = make({1, 2, 1, 272, 512, 128, 128});
    g.q_layout = L::bnhd();
    g.out_layout = L::padded();
    g.want_probs = false;
    add("wide", g);
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
  // Bias broadcast shapes x -inf entries x causal; Nk = 270 crosses a key tile of every shape.
  for (BiasKind k : {BiasKind::full, BiasKind::rows, BiasKind::keys, BiasKind::heads})
    for (BiasMask m : {BiasMask::none, BiasMask::random})
      for (bool causal : {false, true}) {
        Case c = make({3, 4, 2, 19, 270, 24, 16});
        c.bias = k;
        c.bias_mask = m;
        c.causal = causal;
        add("bias", c);
      }
  // Key lengths (0, Nk and between) with and without causal, Nq <, =, > Nk.
  for (KeyLens kl : {KeyLens::mixed, KeyLens::full, KeyLens::zero})
    for (bool causal : {false, true})
      for (auto [nq, nk] : {std::pair<I64, I64>{5, 270}, {66, 66}, {80, 13}}) {
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
    // The direct kernel's row groups (4, 2, 1: rows 3, 5 and 7 use every remainder), D with a
    // scalar tail, and Dv wider than one pass of the single-row value kernel (2 x kNV vectors)
    // with a remainder after it.
    Case r3 = make({1, 3, 1, 1, 1025, 72, 144});
    r3.threads = th;
    r3.want_probs = false;
    add("decode", r3);
    Case r5 = make({1, 10, 2, 1, 1025, 36, 256});
    r5.threads = th;
    r5.key_lengths = KeyLens::mixed;
    add("decode", r5);
    Case r7 = make({2, 14, 2, 1, 1025, 128, 200});
    r7.threads = th;
    r7.want_probs = false;
    add("decode", r7);
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

}  // namespace
