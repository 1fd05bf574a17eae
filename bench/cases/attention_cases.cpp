// attention_cases.cpp — the table of attention cases (attention_cases.hpp says who runs them).
//
// Groups, in order: the tests' sweeps (lengths, Nq != Nk, decode lengths, head dimensions,
// sequences, query/key tiles, wide tiles, GQA ratios, bias shapes, key lengths, dead rows, huge
// scores, scales, decode splits, key splits, layouts); then the cases of `jomoim bench --quick`'s
// self-check (also tested); then the shapes of the benchmark table (BENCHMARKS.md), which only
// the benchmarks run: the tests' float64 oracle keeps B*Hq*Nq*Nk doubles of probabilities.
#include "attention_cases.hpp"

#include <cctype>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace jomoim::cases {

const char* name(BiasKind k) {
  switch (k) {
    case BiasKind::none:
      return "none";
    case BiasKind::full:
      return "full";
    case BiasKind::rows:
      return "rows";
    case BiasKind::keys:
      return "keys";
    case BiasKind::heads:
      return "heads";
  }
  return "?";
}
const char* name(BiasMask m) { return m == BiasMask::none ? "none" : m == BiasMask::random ? "random" : "prefix"; }
const char* name(KeyLens k) {
  switch (k) {
    case KeyLens::none:
      return "none";
    case KeyLens::mixed:
      return "mixed";
    case KeyLens::full:
      return "full";
    case KeyLens::zero:
      return "zero";
  }
  return "?";
}

bool Case::natural_memory() const {
  const std::string tensors = notation == Notation::col3b1b ? "cols" : "contig";
  for (const Layout* l : {&q_layout, &k_layout, &v_layout, &out_layout})
    if (l->name != tensors) return false;
  return bias_layout.name == "contig" && lse_layout.name == "contig" && probs_layout.name == "contig";
}

namespace {

namespace L = layouts;

// A readable, unique-enough name from the fields (the group prefix makes it unique).
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
  if (c.scale) {
    std::ostringstream os;
    os << *c.scale;  // "0", "-0.7", "3", "1e+20"
    s += "_scale";
    for (char ch : os.str()) s += ch == '-' ? "m" : ch == '.' ? "p" : ch == '+' ? "" : std::string(1, ch);
  }
  if (c.notation == Notation::col3b1b) s += "_3b1b";
  if (!c.want_probs) s += "_noprobs";
  if (!c.want_lse) s += "_nolse";
  for (const auto& [tag, l] : {std::pair{"q", &c.q_layout},
                               {"k", &c.k_layout},
                               {"v", &c.v_layout},
                               {"o", &c.out_layout},
                               {"b", &c.bias_layout},
                               {"p", &c.probs_layout},
                               {"l", &c.lse_layout}})
    if (l->name != "contig") s += std::string("_") + tag + l->name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// Appends cases, each named from its group and fields (auto_name).
struct Table {
  std::vector<Case> cases;
  void add(const std::string& group, Case c) {
    c.name = auto_name(group, c);
    cases.push_back(std::move(c));
  }
  void add_for(unsigned uses, const std::string& group, Case c) {
    c.uses = uses;
    add(group, std::move(c));
  }
};

// Head dimensions that break kernels: 1, odd, not a whole number of vectors, and the usual ones.
constexpr I64 kDs[] = {1, 3, 8, 40, 59, 64, 80, 111, 128, 256};

// Lengths and head dimensions.
void lengths(Table& t) {
  // Every length from 1 to 2 x 16 lanes (and one past), square, causal and not; D cycles
  // through the awkward sizes; Dv differs from D every third length.
  for (I64 N = 1; N <= 33; ++N)
    for (bool causal : {false, true}) {
      const I64 D = kDs[N % 10];
      Case c = make({1, 2, 1, N, N, D, N % 3 == 0 ? kDs[(N + 3) % 10] : D});
      c.causal = causal;
      t.add("len", c);
    }
  // Nq != Nk at every length: fewer queries than keys (non-causal), and more queries than keys
  // (causal: the first Nq - Nk rows see nothing).
  for (I64 N = 1; N <= 32; ++N) {
    Case c = N % 2 ? make({1, 2, 2, N, 2 * N + 3, 16 + N, 24}) : make({1, 2, 2, N + 9, N, 16 + N, 24});
    c.causal = N % 2 == 0;
    t.add("lenqk", c);
  }
  // Decode against every short cache length, heads stacked (Hq / Hkv = 4).
  for (I64 Nk = 1; Nk <= 33; ++Nk) {
    Case c = make({1, 8, 2, 1, Nk, 64, 64});
    c.causal = Nk % 2 == 0;
    t.add("declen", c);
  }
  // Head dimensions; Dv = D and Dv != D.
  for (int t_ = 0; t_ < 10; ++t_)
    for (bool same : {true, false}) {
      const I64 D = kDs[t_];
      Case c = make({2, 2, 2, same ? 17 : 97, same ? 17 : 97, D, same ? D : kDs[(t_ + 4) % 10]});
      c.causal = t_ % 2 == 1;
      c.want_probs = D <= 128;
      t.add("dim", c);
    }
  // Sequence lengths, the biggest few kept to one head.
  for (I64 N : {1, 2, 17, 97, 113}) {
    Case c = make({2, 4, 2, N, N, 64, 64});
    c.causal = N != 113;
    t.add("seq", c);
  }
  {
    Case c = make({1, 1, 1, 1025, 1025, 64, 64});
    c.causal = true;
    c.want_probs = false;
    t.add("seq", c);
    Case d = make({1, 1, 1, 1025, 97, 40, 24});  // long query, short keys, causal: 928 dead rows
    d.causal = true;
    t.add("seq", d);
    Case e = make({1, 2, 1, 113, 1025, 59, 80});
    t.add("seq", e);
  }
}

// The engine's query and key tiles, narrow and wide.
void tiles(Table& t) {
  // Tile boundaries (the default tiles: Bq = 64 query rows, Bk = 256 keys).
  for (auto [nq, nk] : {std::pair<I64, I64>{63, 63},
                        {64, 64},
                        {65, 65},
                        {127, 129},
                        {129, 127},
                        {64, 65},
                        {65, 64},
                        {63, 129},
                        {129, 63},
                        {128, 128}})
    for (bool causal : {false, true}) {
      if (!causal && nq != nk) continue;
      Case c = make({1, 2, 1, nq, nk, 40, 48});
      c.causal = causal;
      t.add("tile", c);
    }
  for (auto [nq, nk] : {std::pair<I64, I64>{255, 255},
                        {256, 256},
                        {257, 257},
                        {64, 257},
                        {65, 511},
                        {100, 513},
                        {300, 255},
                        {1, 257},
                        {7, 512}})
    for (bool causal : {false, true}) {
      Case c = make({1, 2, 1, nq, nk, 24, 40});
      c.causal = causal;
      c.want_probs = nq <= 100;
      t.add("ktile", c);
    }
  // Wide tiles (256 query rows x 64 keys: non-causal, D >= 128, Nq >= 256, Nk >= 512; see
  // plan.hpp; they accumulate O^T): block and tile edges, GQA, bias with -inf, key lengths,
  // probs, columns (K and V packed because they are not contiguous along D), Dv not a whole
  // number of vectors nor of the value kernel's 4 columns, V read backwards or packed.
  {
    Case a = make({1, 2, 1, 257, 513, 128, 128});
    a.bias = BiasKind::rows;
    a.bias_mask = BiasMask::random;
    t.add("wide", a);
    Case b = make({2, 4, 2, 300, 600, 128, 72});
    b.key_lengths = KeyLens::mixed;
    b.want_probs = false;
    t.add("wide", b);
    Case c = make({1, 2, 2, 256, 520, 130, 128});
    c.notation = Notation::col3b1b;
    c.q_layout = c.k_layout = c.v_layout = c.out_layout = L::cols();
    t.add("wide", c);
    Case d = make({1, 2, 1, 511, 517, 128, 131});  // last block 255 rows, last tile 5 keys
    d.v_layout = L::flipped();
    t.add("wide", d);
    Case e = make({1, 1, 1, 260, 700, 129, 5});
    e.v_layout = L::strided();
    e.key_lengths = KeyLens::mixed;
    t.add("wide", e);
    // Queries packed and outputs written as whole lanes x lanes squares when their rows are
    // contiguous along D: rows running backwards, rows of another head in between, row gaps; D,
    // Dv and the last block's rows each a few squares and a remainder (or exactly one square).
    Case f = make({1, 4, 2, 290, 515, 144, 40});
    f.q_layout = f.out_layout = L::flipped();
    f.lse_layout = L::lse_strided();
    t.add("wide", f);
    Case g = make({1, 2, 1, 272, 512, 128, 128});
    g.q_layout = L::bnhd();
    g.out_layout = L::padded();
    g.want_probs = false;
    t.add("wide", g);
  }
}

// Grouped-query heads, bias, key lengths and rows with nothing to see.
void heads_and_masks(Table& t) {
  // Grouped-query ratios 1, 2, 4, 8, with few queries (stacked heads) and many.
  for (I64 r : {1, 2, 4, 8})
    for (I64 nq : {1, 3, 9, 70}) {
      Case c = make({2, 2 * r, 2, nq, 77, 32, 40});
      c.causal = nq != 3;
      if (nq == 9) {
        c.bias = BiasKind::heads;
        c.key_lengths = KeyLens::mixed;
      }
      t.add("gqa", c);
    }
  // Bias broadcast shapes x -inf entries x causal; Nk = 270 crosses a key tile of every shape.
  for (BiasKind k : {BiasKind::full, BiasKind::rows, BiasKind::keys, BiasKind::heads})
    for (BiasMask m : {BiasMask::none, BiasMask::random})
      for (bool causal : {false, true}) {
        Case c = make({3, 4, 2, 19, 270, 24, 16});
        c.bias = k;
        c.bias_mask = m;
        c.causal = causal;
        t.add("bias", c);
      }
  // Key lengths (0, Nk and between) with and without causal, Nq <, =, > Nk.
  for (KeyLens kl : {KeyLens::mixed, KeyLens::full, KeyLens::zero})
    for (bool causal : {false, true})
      for (auto [nq, nk] : {std::pair<I64, I64>{5, 270}, {66, 66}, {80, 13}}) {
        Case c = make({6, 2, 1, nq, nk, 16, 8});
        c.key_lengths = kl;
        c.causal = causal;
        t.add("keylen", c);
      }
  // Rows whose keys are all masked, and nothing at all.
  {
    Case c = make({2, 2, 1, 70, 3, 8, 8});  // causal Nq > Nk: 67 dead rows, crossing Bq
    c.causal = true;
    t.add("dead", c);
    Case d = make({2, 4, 2, 21, 33, 16, 16});  // bias -inf rows + key lengths 0
    d.bias = BiasKind::full;
    d.bias_mask = BiasMask::random;
    d.key_lengths = KeyLens::mixed;
    d.causal = true;
    t.add("dead", d);
    Case e = make({2, 2, 1, 5, 0, 8, 4});  // Nk = 0
    t.add("dead", e);
    e.causal = true;
    t.add("dead", e);
    Case f = make({2, 2, 1, 0, 9, 8, 4});  // Nq = 0
    t.add("dead", f);
    Case g = make({0, 2, 1, 5, 9, 8, 4});  // B = 0
    t.add("dead", g);
  }
}

// Huge scores and unusual scales.
void scores(Table& t) {
  // Huge scores: q, k in [-55, 55) put scaled scores in the +-1000s (std ~1000).
  {
    Case c = make({1, 2, 1, 40, 90, 64, 32});
    c.amp = 55;
    t.add_for(kTest | kQuickCheck, "huge", c);  // also bench --quick's "scores ~1000"
    c.causal = true;
    c.bias = BiasKind::full;
    c.bias_mask = BiasMask::random;
    t.add("huge", c);
    Case d = make({1, 4, 1, 1, 1025, 64, 64});
    d.amp = 55;
    d.threads = {1, 2, 3};
    t.add("huge", d);
    Case e = make({2, 2, 2, 17, 17, 3, 5});
    e.amp = 55;
    e.causal = true;
    e.key_lengths = KeyLens::mixed;
    e.notation = Notation::col3b1b;
    e.q_layout = e.k_layout = e.v_layout = e.out_layout = L::cols();
    t.add("huge", e);
    Case f = make({1, 2, 1, 33, 65, 128, 16});
    f.amp = 30;
    f.scale = 1.0f;  // unscaled: scores up to ~1e4
    t.add("huge", f);
  }
  // Scales: zero (uniform weights), negative, large, and enormous (one-hot).
  for (float sc : {0.0f, -0.7f, 3.0f, 1e20f}) {
    Case c = make({1, 2, 1, 20, 45, 16, 8});
    c.scale = sc;
    c.causal = sc < 0;
    t.add("scale", c);
  }
}

// Decode and other problems whose keys are split across threads.
void splits(Table& t) {
  // Decode: one query (or a few) against a long cache; keys split across threads and merged
  // by log-sum-exp. Requesting probs needs each row's final softmax in one piece, so most of
  // these ask for out and lse only (otherwise a kernel may not split at all).
  {
    const std::vector<int> th{1, 2, 3, 0};
    Case c = make({1, 1, 1, 1, 1025, 128, 128});
    c.threads = th;
    t.add("decode", c);
    Case d = make({1, 8, 1, 1, 1025, 64, 64});  // stacked heads (MQA)
    d.threads = th;
    d.causal = true;
    t.add("decode", d);
    Case e = make({3, 4, 2, 1, 1025, 64, 32});  // key lengths 0 .. Nk: some splits empty
    e.threads = th;
    e.key_lengths = KeyLens::mixed;
    t.add("decode", e);
    Case f = make({1, 2, 1, 1, 1025, 64, 64});  // the first 60% of keys masked by bias
    f.threads = th;
    f.bias = BiasKind::keys;
    f.bias_mask = BiasMask::prefix;
    t.add("decode", f);
    Case g = make({2, 4, 4, 1, 1025, 40, 40});  // random -inf keys, last batch all masked
    g.threads = th;
    g.bias = BiasKind::keys;
    g.bias_mask = BiasMask::random;
    t.add("decode", g);
    Case h = make({1, 4, 1, 4, 1025, 80, 80});  // a few queries, causal
    h.threads = th;
    h.causal = true;
    h.key_lengths = KeyLens::mixed;
    t.add("decode", h);
    Case i = make({1, 2, 1, 1, 600, 256, 256});
    i.threads = th;
    i.bias = BiasKind::full;
    i.bias_mask = BiasMask::random;
    t.add("decode", i);
    for (Case* x : {&c, &d, &e, &f, &g, &h, &i}) {  // the same without probs
      x->want_probs = false;
      t.add("decode", *x);
    }
    Case j = make({1, 4, 1, 1, 1025, 64, 64});  // huge scores merged across splits
    j.threads = th;
    j.amp = 55;
    j.bias = BiasKind::keys;
    j.bias_mask = BiasMask::random;
    j.want_probs = false;
    t.add("decode", j);
    Case k = make({1, 2, 1, 1, 1025, 64, 20});  // K rows backwards (negative row stride), V packed
    k.threads = th;
    k.k_layout = L::flipped();
    k.v_layout = L::padded();
    k.out_layout = L::reversed();
    k.lse_layout = L::lse_reversed();
    k.want_probs = false;
    t.add("decode", k);
    Case m = make({2, 2, 1, 1, 777, 48, 32});  // 3b1b column memory: K's D-stride is Nk
    m.threads = th;
    m.notation = Notation::col3b1b;
    m.q_layout = m.k_layout = m.v_layout = m.out_layout = L::cols();
    m.key_lengths = KeyLens::mixed;
    m.want_probs = false;
    t.add("decode", m);
    // The direct kernel's row groups (4, 2, 1: rows 3, 5 and 7 use every remainder), D with a
    // scalar tail, and Dv wider than one pass of the single-row value kernel (2 x kNV vectors)
    // with a remainder after it.
    Case r3 = make({1, 3, 1, 1, 1025, 72, 144});
    r3.threads = th;
    r3.want_probs = false;
    t.add("decode", r3);
    Case r5 = make({1, 10, 2, 1, 1025, 36, 256});
    r5.threads = th;
    r5.key_lengths = KeyLens::mixed;
    t.add("decode", r5);
    Case r7 = make({2, 14, 2, 1, 1025, 128, 200});
    r7.threads = th;
    r7.want_probs = false;
    t.add("decode", r7);
    Case w = make({1, 1, 1, 1, 1025, 32, 32});  // no lse either
    w.threads = th;
    w.want_probs = w.want_lse = false;
    w.v_layout = L::flipped();
    t.add("decode", w);
  }
  // Key splits outside decode: few work items (one head, one batch) and many keys.
  {
    Case c = make({1, 1, 1, 513, 513, 40, 40});  // causal: the first blocks see few keys
    c.causal = true;
    c.threads = {1, 2, 3};
    c.want_probs = false;
    t.add("split", c);
    Case d = make({1, 1, 1, 100, 1025, 64, 48});
    d.want_probs = false;
    t.add("split", d);
    Case e = make({1, 2, 1, 5, 700, 24, 16});  // stacked heads, causal, key length, bias
    e.causal = true;
    e.key_lengths = KeyLens::mixed;
    e.bias = BiasKind::full;
    e.bias_mask = BiasMask::random;
    e.threads = {1, 2, 3};
    e.want_probs = false;
    t.add("split", e);
    Case f = make({1, 2, 2, 70, 1025, 16, 16});  // causal, Nq > Bq
    f.causal = true;
    f.bias = BiasKind::rows;
    f.bias_mask = BiasMask::prefix;
    f.threads = {1, 2, 3};
    f.want_probs = false;
    t.add("split", f);
  }
}

// Memory layouts and notations.
void memory_layouts(Table& t) {
  // Layouts: transposed, padded, reversed (negative strides), strided, broadcast inputs, and
  // the 3b1b notation on column memory and on other memory.
  {
    auto lay = [&](Notation no, Layout q, Layout k, Layout v, Layout o, Layout p, Layout l, bool causal,
                   BiasKind bias = BiasKind::none, Layout bl = L::contig()) {
      Case c = make({2, 4, 2, 37, 70, 24, 20});
      c.notation = no;
      c.q_layout = q;
      c.k_layout = k;
      c.v_layout = v;
      c.out_layout = o;
      c.probs_layout = p;
      c.lse_layout = l;
      c.causal = causal;
      c.bias = bias;
      c.bias_layout = bl;
      if (bias != BiasKind::none) c.bias_mask = BiasMask::random;
      t.add("layout", c);
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
    lay(P, L::cols(), L::cols(), L::cols(), L::cols(), L::cols(), L::lse_transposed(), false, BiasKind::rows,
        L::cols());
    lay(P, L::contig(), L::contig(), L::contig(), L::contig(), L::contig(), L::contig(), true, BiasKind::full,
        L::reversed());
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), L::contig(), false);
    lay(C, L::cols(), L::cols(), L::cols(), L::cols(), L::contig(), L::contig(), true, BiasKind::keys);
    lay(C, L::contig(), L::contig(), L::contig(), L::contig(), L::padded(), L::lse_strided(), false);
    lay(C, L::padded(), L::reversed(), L::bnhd(), L::strided(), L::contig(), L::contig(), true, BiasKind::full);
    lay(C, L::cols(), L::bcast_heads(), L::bcast_heads(), L::reversed(), L::cols(), L::lse_reversed(), true);
    // 3b1b, grouped-query, key lengths, one query.
    Case c = make({3, 8, 2, 1, 130, 64, 48});
    c.notation = C;
    c.q_layout = c.k_layout = c.v_layout = c.out_layout = L::cols();
    c.key_lengths = KeyLens::mixed;
    c.causal = true;
    c.threads = {1, 2, 3};
    t.add("layout", c);
    Case d = make({2, 4, 1, 66, 66, 59, 40});
    d.notation = C;
    d.q_layout = d.k_layout = d.v_layout = d.out_layout = L::cols();
    d.key_lengths = KeyLens::mixed;
    d.bias = BiasKind::rows;
    d.bias_mask = BiasMask::random;
    d.causal = true;
    t.add("layout", d);
  }
}

// The self-check of `jomoim bench --quick`: one case of each kind of shape and option that breaks
// kernels (docs/design.md), in the memory the bench lays out (natural_memory()); the tests run them
// too. Its huge scores are the first "huge" case of scores().
void quick_self_check(Table& t) {
  const unsigned quick = kTest | kQuickCheck;
  auto q = [&](Dims n, bool causal) {
    Case c = make(n);
    c.causal = causal;
    return c;
  };
  t.add_for(quick, "quick", q({1, 2, 2, 33, 33, 16, 16}, false));     // small
  t.add_for(quick, "quick", q({2, 3, 3, 97, 97, 64, 64}, true));      // causal
  t.add_for(quick, "quick", q({1, 2, 2, 17, 113, 40, 40}, true));     // causal Nq < Nk (bottom-right)
  t.add_for(quick, "quick", q({1, 2, 1, 20, 8, 32, 32}, true));       // causal Nq > Nk (empty rows)
  t.add_for(quick, "quick", q({1, 8, 2, 64, 64, 64, 64}, true));      // GQA 8:2
  t.add_for(quick, "quick", q({2, 4, 1, 1, 1025, 128, 128}, false));  // MQA decode
  t.add_for(quick, "quick", q({1, 2, 2, 31, 45, 3, 7}, false));       // odd D = 3, Dv = 7
  t.add_for(quick, "quick", q({1, 3, 3, 50, 70, 111, 59}, true));     // D = 111, Dv = 59
  t.add_for(quick, "quick", q({1, 2, 2, 40, 40, 256, 256}, false));   // D = 256
  Case bias = q({2, 2, 2, 24, 40, 32, 32}, false);                    // bias [1, 1, Nq, Nk] with -inf, whole rows
  bias.bias = BiasKind::rows;
  bias.bias_mask = BiasMask::random;
  t.add_for(quick, "quick", bias);
  Case col = q({1, 2, 2, 45, 45, 32, 32}, true);  // 3b1b on column memory
  col.notation = Notation::col3b1b;
  col.q_layout = col.k_layout = col.v_layout = col.out_layout = L::cols();
  t.add_for(quick, "quick", col);
  Case kl = q({3, 2, 2, 30, 30, 16, 16}, true);  // key lengths: some, 0, all
  kl.key_lengths = KeyLens::mixed;
  t.add_for(quick, "quick", kl);
  t.add_for(quick, "quick", q({1, 32, 8, 1, 4096, 128, 128}, false));  // decode, GQA 32:8
}

// The shapes of the benchmark table (BENCHMARKS.md), each without and with the causal mask, then
// decode: one new query row against a 4096-entry KV cache (and a 256-entry one). Too large for
// the tests' oracle.
// attention_gbench names its runs by (B, Hq, Hkv, Nq, Nk, D, causal): Dv = D here.
void benchmarks(Table& t) {
  struct Square {
    I64 B, H, N, D;
    unsigned also;
  };
  const Square square[] = {{1, 12, 128, 64, kQuickTiming}, {1, 12, 512, 64, kQuickTiming | kGbenchBackward},
                           {1, 12, 1024, 64, 0},           {1, 12, 2048, 64, 0},
                           {1, 32, 4096, 128, 0},          {4, 8, 256, 64, 0}};
  for (const Square& s : square)
    for (bool causal : {false, true}) {
      Case c = make({s.B, s.H, s.H, s.N, s.N, s.D, s.D});
      c.causal = causal;
      t.add_for(kGbench | s.also, "bench", c);
    }
  t.add_for(kGbench | kQuickTiming, "bench", make({1, 32, 32, 1, 4096, 128, 128}));
  t.add_for(kGbench | kQuickTiming, "bench", make({1, 32, 8, 1, 4096, 128, 128}));
  // The same decode against 256 keys, whose K and V (1-4 MiB in float32) stay in the caches from
  // one call to the next: what the kernels compute with the memory out of the way, the ceiling
  // of any ratio a narrower format can win at 4096 keys (bench/decode_ab.py --kv-len 256).
  t.add_for(kGbench, "bench", make({1, 32, 32, 1, 256, 128, 128}));
  t.add_for(kGbench, "bench", make({1, 32, 8, 1, 256, 128, 128}));
  // What attention_gbench checks against the reference before it times: GQA, causal, Nq != Nk.
  Case check = make({2, 4, 2, 70, 90, 64, 64});
  check.causal = true;
  t.add_for(kTest | kGbenchCheck, "bench", check);
}

std::vector<Case> table() {
  Table t;
  for (void (*group)(Table&) :
       {lengths, tiles, heads_and_masks, scores, splits, memory_layouts, quick_self_check, benchmarks})
    group(t);
  return std::move(t.cases);
}

}  // namespace

const std::vector<Case>& all() {
  static const std::vector<Case> t = table();
  return t;
}

std::vector<Case> used_by(unsigned use) {
  std::vector<Case> v;
  for (const Case& c : all())
    if (c.used_by(use)) v.push_back(c);
  return v;
}

const Case& named(std::string_view name) {
  for (const Case& c : all())
    if (c.name == name) return c;
  throw std::out_of_range("attention cases: no case named '" + std::string(name) + "'");
}

}  // namespace jomoim::cases
