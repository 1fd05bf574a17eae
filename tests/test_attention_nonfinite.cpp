// test_attention_nonfinite.cpp — the non-finite rule of docs/design.md, "Non-finite inputs" on every path.
//
// What is here: a table of named shapes, one per path of the kernel (direct/decode with and
// without key splits, 64 x 256 and 32 x 32 tiles, wide O^T blocks, stacked GQA heads, causal
// Nq != Nk, key lengths, -inf bias, probs, both notations), and per case four experiments:
//   - a NaN in query rows (one that sees keys, and one fully masked where the case has one);
//   - a NaN in one key that only some rows see;
//   - a NaN in one component of one value that only some rows see;
//   - NaN, +inf, or both in the K and V rows of a key some rows do not see ("junk"): the rows
//     that do not see it must give exactly the bits of the run with finite junk there.
// The float64 reference must obey the rule exactly (NaN where predicted, every other number
// bitwise that of the clean run); the fast path, on every SIMD target with 1 and 2 threads,
// must put NaN in exactly the same places and match the clean reference elsewhere. What is not
// here: accuracy (test_attention's tables); the bound below only separates a right row from a
// wrong one.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attention_test_util.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/simd.hpp"

namespace {

using attn_test::I64;
using attn_test::PinTarget;
using attn_test::Rng;
using attn_test::seed_of;
using attn_test::targets;
using jomoim::Notation;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

struct NfCase {
  std::string name;
  I64 B, Hq, Hkv, Nq, Nk, D, Dv;
  bool causal = false;
  std::vector<I64> key_lengths;  // empty: every batch has Nk keys
  bool bias = false;             // a full [B, Hq, Nq, Nk] bias, -inf on a pattern and one whole row
  bool probs = false;
  Notation notation = Notation::paper;
};
void PrintTo(const NfCase& c, std::ostream* os) { *os << c.name; }

// Inputs in the paper's logical layout (C order), whatever the notation of the call.
struct Data {
  std::vector<float> q, k, v, bias;  // [B,Hq,Nq,D], [B,Hkv,Nk,D], [B,Hkv,Nk,Dv], [B,Hq,Nq,Nk]
};

struct Idx {
  const NfCase& c;
  I64 q(I64 b, I64 h, I64 i, I64 d) const { return ((b * c.Hq + h) * c.Nq + i) * c.D + d; }
  I64 k(I64 b, I64 g, I64 j, I64 d) const { return ((b * c.Hkv + g) * c.Nk + j) * c.D + d; }
  I64 v(I64 b, I64 g, I64 j, I64 e) const { return ((b * c.Hkv + g) * c.Nk + j) * c.Dv + e; }
  I64 bias(I64 b, I64 h, I64 i, I64 j) const { return ((b * c.Hq + h) * c.Nq + i) * c.Nk + j; }
  I64 row(I64 b, I64 h, I64 i) const { return (b * c.Hq + h) * c.Nq + i; }
};

Data make_data(const NfCase& c) {
  Rng rng(seed_of(c.name));
  Data x;
  x.q.resize(std::size_t(c.B * c.Hq * c.Nq * c.D));
  x.k.resize(std::size_t(c.B * c.Hkv * c.Nk * c.D));
  x.v.resize(std::size_t(c.B * c.Hkv * c.Nk * c.Dv));
  for (auto* t : {&x.q, &x.k, &x.v})
    for (float& f : *t) f = rng.uniform(1.0f);
  if (c.bias) {
    const Idx ix{c};
    x.bias.resize(std::size_t(c.B * c.Hq * c.Nq * c.Nk));
    for (I64 b = 0; b < c.B; ++b)
      for (I64 h = 0; h < c.Hq; ++h)
        for (I64 i = 0; i < c.Nq; ++i)
          for (I64 j = 0; j < c.Nk; ++j) {
            const bool masked = (i * 7 + j * 3 + h) % 5 == 0 || (b == 0 && h == 0 && i == 1 % c.Nq);
            x.bias[std::size_t(ix.bias(b, h, i, j))] = masked ? -kInfF : rng.uniform(1.0f);
          }
  }
  return x;
}

// Whether row (b, h, i) sees key j: attention.hpp's masks restated (key lengths, causality
// aligned bottom-right to the batch's own length, -inf bias).
bool sees(const NfCase& c, const Data& x, I64 b, I64 h, I64 i, I64 j) {
  const I64 L = c.key_lengths.empty() ? c.Nk : c.key_lengths[std::size_t(b)];
  if (j >= L) return false;
  if (c.causal && j > i + (L - c.Nq)) return false;
  return !(c.bias && x.bias[std::size_t(Idx{c}.bias(b, h, i, j))] == -kInfF);
}

struct Result {  // paper layout, C order; floats for the fast path, doubles for the reference
  std::vector<double> out, lse, probs;
};

// A view of `logical` ([d0, d1, n, d] C order) in the call's notation: for col3b1b the data is
// copied into [d0, d1, d, n] memory and viewed as such (the engine reads it through strides).
struct Buffer {
  std::vector<float> mem;
  jomoim::TensorView<float, 4> view;
};
Buffer as_notation(const NfCase& c, const std::vector<float>& logical, std::array<I64, 4> shape) {
  Buffer buf;
  buf.mem = logical;
  if (c.notation == Notation::paper) {
    buf.view = jomoim::TensorView<float, 4>::contiguous(buf.mem.data(), shape);
    return buf;
  }
  const auto [d0, d1, n, d] = shape;
  for (I64 a = 0; a < d0 * d1; ++a)
    for (I64 r = 0; r < n; ++r)
      for (I64 e = 0; e < d; ++e) buf.mem[std::size_t((a * d + e) * n + r)] = logical[std::size_t((a * n + r) * d + e)];
  buf.view = jomoim::TensorView<float, 4>::contiguous(buf.mem.data(), {d0, d1, d, n});
  return buf;
}

struct Call {
  Buffer q, k, v, out;
  std::vector<float> lse, probs, bias;
  jomoim::AttentionOptions opt;
};

Call prepare(const NfCase& c, const Data& x) {
  Call call;
  call.q = as_notation(c, x.q, {c.B, c.Hq, c.Nq, c.D});
  call.k = as_notation(c, x.k, {c.B, c.Hkv, c.Nk, c.D});
  call.v = as_notation(c, x.v, {c.B, c.Hkv, c.Nk, c.Dv});
  call.out = as_notation(c, std::vector<float>(std::size_t(c.B * c.Hq * c.Nq * c.Dv), attn_test::poison()),
                         {c.B, c.Hq, c.Nq, c.Dv});
  call.opt.causal = c.causal;
  call.opt.notation = c.notation;
  call.opt.key_lengths = c.key_lengths;
  if (c.bias) {
    call.bias = x.bias;
    call.opt.bias = jomoim::ConstTensor4::contiguous(call.bias.data(), {c.B, c.Hq, c.Nq, c.Nk});
  }
  return call;
}

Result run_reference(const NfCase& c, const Data& x) {
  Call call = prepare(c, x);
  const auto r = jomoim::attention_reference(call.q.view, call.k.view, call.v.view, call.opt);
  return {r.out, r.lse, r.probs};
}

Result run_fast(const NfCase& c, const Data& x, int threads) {
  Call call = prepare(c, x);
  call.lse.assign(std::size_t(c.B * c.Hq * c.Nq), attn_test::poison());
  call.opt.lse = jomoim::Tensor3::contiguous(call.lse.data(), {c.B, c.Hq, c.Nq});
  if (c.probs) {
    call.probs.assign(std::size_t(c.B * c.Hq * c.Nq * c.Nk), attn_test::poison());
    call.opt.probs = jomoim::Tensor4::contiguous(call.probs.data(), {c.B, c.Hq, c.Nq, c.Nk});
  }
  call.opt.threads = threads;
  jomoim::attention(call.q.view, call.k.view, call.v.view, call.out.view, call.opt);
  Result r;
  const Idx ix{c};
  r.out.resize(std::size_t(c.B * c.Hq * c.Nq * c.Dv));
  for (I64 b = 0; b < c.B; ++b)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i)
        for (I64 e = 0; e < c.Dv; ++e) {
          const auto& o = call.out.view;
          const I64 at = c.notation == Notation::paper ? b * o.strides[0] + h * o.strides[1] + i * o.strides[2] + e
                                                       : b * o.strides[0] + h * o.strides[1] + e * o.strides[2] + i;
          r.out[std::size_t(ix.row(b, h, i) * c.Dv + e)] = o.data[at];
        }
  r.lse.assign(call.lse.begin(), call.lse.end());
  r.probs.assign(call.probs.begin(), call.probs.end());
  return r;
}

// What the rule predicts for data x: per row, whether it is all NaN (a NaN in its query, in a
// key it sees, or in its bias where it sees the key), and per output element whether it is NaN.
struct Prediction {
  std::vector<char> row_nan;   // [B, Hq, Nq]
  std::vector<char> elem_nan;  // [B, Hq, Nq, Dv]
};
Prediction predict(const NfCase& c, const Data& x) {
  const Idx ix{c};
  Prediction pr;
  pr.row_nan.assign(std::size_t(c.B * c.Hq * c.Nq), 0);
  pr.elem_nan.assign(std::size_t(c.B * c.Hq * c.Nq * c.Dv), 0);
  const I64 group = c.Hq / c.Hkv;
  for (I64 b = 0; b < c.B; ++b)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i) {
        const I64 g = h / group, row = ix.row(b, h, i);
        bool q_nan = false;
        for (I64 d = 0; d < c.D; ++d) q_nan |= std::isnan(x.q[std::size_t(ix.q(b, h, i, d))]);
        for (I64 j = 0; j < c.Nk; ++j) {
          if (!sees(c, x, b, h, i, j)) continue;
          bool nan = q_nan || (c.bias && std::isnan(x.bias[std::size_t(ix.bias(b, h, i, j))]));
          for (I64 d = 0; d < c.D; ++d) nan |= std::isnan(x.k[std::size_t(ix.k(b, g, j, d))]);
          if (nan) pr.row_nan[std::size_t(row)] = 1;
          for (I64 e = 0; e < c.Dv; ++e)
            if (std::isnan(x.v[std::size_t(ix.v(b, g, j, e))])) pr.elem_nan[std::size_t(row * c.Dv + e)] = 1;
        }
        if (pr.row_nan[std::size_t(row)])
          for (I64 e = 0; e < c.Dv; ++e) pr.elem_nan[std::size_t(row * c.Dv + e)] = 1;
      }
  return pr;
}

// Checks got against the prediction: NaN exactly where predicted (probs: NaN at the keys a NaN
// row sees, 0 where it does not), elsewhere equal to the clean run's numbers, bitwise when
// `exact`, else within a bound that only a wrong row misses.
::testing::AssertionResult check(const NfCase& c, const Data& x, const Prediction& pr, const Result& clean,
                                 const Result& got, bool exact) {
  const Idx ix{c};
  auto fail = [&](const char* what, I64 b, I64 h, I64 i, I64 e, double want, double have, bool want_nan) {
    std::ostringstream s;
    s << what << " at (b=" << b << ", h=" << h << ", i=" << i << ", " << e << "): expected "
      << (want_nan ? std::string("NaN") : std::to_string(want)) << ", got " << have;
    return ::testing::AssertionFailure() << s.str();
  };
  auto same = [&](double want, double have) {
    if (exact) return std::bit_cast<std::uint64_t>(want) == std::bit_cast<std::uint64_t>(have);
    if (std::isinf(want)) return want == have;
    return std::abs(want - have) <= 1e-4 * (1.0 + std::abs(want));
  };
  for (I64 b = 0; b < c.B; ++b)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i) {
        const I64 row = ix.row(b, h, i);
        const bool row_nan = pr.row_nan[std::size_t(row)];
        for (I64 e = 0; e < c.Dv; ++e) {
          const std::size_t at = std::size_t(row * c.Dv + e);
          const bool want_nan = pr.elem_nan[at];
          if (want_nan ? !std::isnan(got.out[at]) : !same(clean.out[at], got.out[at]))
            return fail("out", b, h, i, e, clean.out[at], got.out[at], want_nan);
        }
        if (row_nan ? !std::isnan(got.lse[std::size_t(row)])
                    : !same(clean.lse[std::size_t(row)], got.lse[std::size_t(row)]))
          return fail("lse", b, h, i, 0, clean.lse[std::size_t(row)], got.lse[std::size_t(row)], row_nan);
        if (got.probs.empty()) continue;
        for (I64 j = 0; j < c.Nk; ++j) {
          const std::size_t at = std::size_t(row * c.Nk + j);
          const bool want_nan = row_nan && sees(c, x, b, h, i, j);
          const double want = row_nan ? 0.0 : clean.probs[at];
          if (want_nan ? !std::isnan(got.probs[at]) : !(row_nan ? got.probs[at] == 0.0 : same(want, got.probs[at])))
            return fail("probs", b, h, i, j, want, got.probs[at], want_nan);
        }
      }
  return ::testing::AssertionSuccess();
}

// Bitwise equality of two runs on the rows that do not see key j of (b, g).
::testing::AssertionResult same_unseen(const NfCase& c, const Data& x, I64 b, I64 g, I64 j, const Result& want,
                                       const Result& got) {
  const Idx ix{c};
  const I64 group = c.Hq / c.Hkv;
  auto bits = [](double a, double z) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(z); };
  for (I64 bb = 0; bb < c.B; ++bb)
    for (I64 h = 0; h < c.Hq; ++h)
      for (I64 i = 0; i < c.Nq; ++i) {
        if (bb == b && h / group == g && sees(c, x, bb, h, i, j)) continue;
        const I64 row = ix.row(bb, h, i);
        for (I64 e = 0; e < c.Dv; ++e)
          if (!bits(want.out[std::size_t(row * c.Dv + e)], got.out[std::size_t(row * c.Dv + e)]))
            return ::testing::AssertionFailure()
                   << "out differs at (b=" << bb << ", h=" << h << ", i=" << i << ", e=" << e
                   << "): " << want.out[std::size_t(row * c.Dv + e)] << " vs " << got.out[std::size_t(row * c.Dv + e)];
        if (!bits(want.lse[std::size_t(row)], got.lse[std::size_t(row)]))
          return ::testing::AssertionFailure() << "lse differs at (b=" << bb << ", h=" << h << ", i=" << i << ")";
        for (I64 jj = 0; jj < I64(got.probs.empty() ? 0 : c.Nk); ++jj)
          if (!bits(want.probs[std::size_t(row * c.Nk + jj)], got.probs[std::size_t(row * c.Nk + jj)]))
            return ::testing::AssertionFailure()
                   << "probs differ at (b=" << bb << ", h=" << h << ", i=" << i << ", j=" << jj << ")";
      }
  return ::testing::AssertionSuccess();
}

// Rows that see key j of (b, g), and rows of (b, g) that do not.
std::pair<I64, I64> seers(const NfCase& c, const Data& x, I64 b, I64 g, I64 j) {
  const I64 group = c.Hq / c.Hkv;
  I64 in = 0, out = 0;
  for (I64 h = g * group; h < (g + 1) * group; ++h)
    for (I64 i = 0; i < c.Nq; ++i) (sees(c, x, b, h, i, j) ? in : out) += 1;
  return {in, out};
}

// A key of (b, g) that some rows see and some do not, the latest such; else the latest key no
// row sees; else -1. Searched from batch B-1, group Hkv-1.
struct KeyAt {
  I64 b = 0, g = 0, j = -1;
};
KeyAt partly_seen_key(const NfCase& c, const Data& x, bool want_seen) {
  KeyAt unseen;
  for (I64 b = c.B; b-- > 0;)
    for (I64 g = c.Hkv; g-- > 0;)
      for (I64 j = c.Nk; j-- > 0;) {
        const auto [in, out] = seers(c, x, b, g, j);
        if (in > 0 && out > 0) return {b, g, j};
        if (!want_seen && in == 0 && unseen.j < 0) unseen = {b, g, j};
      }
  return unseen;
}

class NonFinite : public ::testing::TestWithParam<NfCase> {
 protected:
  // The reference on x must obey the rule exactly; then the fast path on every target and
  // thread count must match it.
  void expect_rule(const Data& x, const char* what) {
    const NfCase& c = GetParam();
    const Prediction pr = predict(c, x);
    EXPECT_TRUE(check(c, x, pr, clean_, run_reference(c, x), true)) << what << ", float64 reference";
    for (const std::string& t : targets()) {
      PinTarget pin(t);
      for (int threads : {1, 2})
        EXPECT_TRUE(check(c, x, pr, clean_, run_fast(c, x, threads), false))
            << what << ", target " << t << ", threads " << threads;
    }
  }

  void SetUp() override {
    data_ = make_data(GetParam());
    clean_ = run_reference(GetParam(), data_);
  }
  Data data_;
  Result clean_;
};

TEST_P(NonFinite, NaNQueryRows) {
  const NfCase& c = GetParam();
  Data x = data_;
  const Idx ix{c};
  // The last row of head 0 (sees the most keys) and the first row of the last head (fully
  // masked in some cases: it must stay zeros and -inf).
  x.q[std::size_t(ix.q(c.B - 1, 0, c.Nq - 1, c.D / 2))] = kNaN;
  x.q[std::size_t(ix.q(0, c.Hq - 1, 0, 0))] = kNaN;
  expect_rule(x, "NaN in two query rows");
}

TEST_P(NonFinite, NaNKeySeenBySomeRows) {
  const NfCase& c = GetParam();
  Data x = data_;
  const KeyAt at = partly_seen_key(c, x, true);
  const KeyAt key = at.j >= 0 ? at : KeyAt{0, 0, c.Nk / 2};  // no mask: a key every row sees
  x.k[std::size_t(Idx{c}.k(key.b, key.g, key.j, c.D - 1))] = kNaN;
  expect_rule(x, "NaN in one key");
}

TEST_P(NonFinite, NaNValueSeenBySomeRows) {
  const NfCase& c = GetParam();
  Data x = data_;
  const KeyAt at = partly_seen_key(c, x, true);
  const KeyAt key = at.j >= 0 ? at : KeyAt{0, 0, c.Nk / 2};
  x.v[std::size_t(Idx{c}.v(key.b, key.g, key.j, c.Dv / 3))] = kNaN;
  expect_rule(x, "NaN in one value component");
}

TEST_P(NonFinite, NaNBiasWhereSeen) {
  const NfCase& c = GetParam();
  if (!c.bias) GTEST_SKIP() << "no bias in this case";
  Data x = data_;
  // The last row of the last head, at a key it sees.
  const I64 b = c.B - 1, h = c.Hq - 1, i = c.Nq - 1;
  for (I64 j = c.Nk; j-- > 0;)
    if (sees(c, x, b, h, i, j)) {
      x.bias[std::size_t(Idx{c}.bias(b, h, i, j))] = kNaN;
      break;
    }
  expect_rule(x, "NaN in the bias");
}

// Non-finite K and V in a key that some rows do not see (or that no row sees): those rows give
// the bits of the run with finite junk there, on the reference and on every target.
TEST_P(NonFinite, MaskedKeysAreNotRead) {
  const NfCase& c = GetParam();
  const KeyAt key = partly_seen_key(c, data_, false);
  if (key.j < 0) GTEST_SKIP() << "every row sees every key";
  const Idx ix{c};
  auto with_junk = [&](float kval, float vval) {
    Data x = data_;
    for (I64 d = 0; d < c.D; ++d) x.k[std::size_t(ix.k(key.b, key.g, key.j, d))] = kval;
    for (I64 e = 0; e < c.Dv; ++e) x.v[std::size_t(ix.v(key.b, key.g, key.j, e))] = vval;
    return x;
  };
  const Data finite = with_junk(7.5f, -3.25f);
  const std::vector<std::pair<std::string, Data>> junk = {
      {"NaN", with_junk(kNaN, kNaN)}, {"+inf", with_junk(kInfF, kInfF)}, {"NaN K, -inf V", with_junk(kNaN, -kInfF)}};
  const Result ref_finite = run_reference(c, finite);
  for (const auto& [name, x] : junk)
    EXPECT_TRUE(same_unseen(c, x, key.b, key.g, key.j, ref_finite, run_reference(c, x)))
        << name << " junk in key " << key.j << ", float64 reference";
  for (const std::string& t : targets()) {
    PinTarget pin(t);
    for (int threads : {1, 2}) {
      const Result want = run_fast(c, finite, threads);
      for (const auto& [name, x] : junk)
        EXPECT_TRUE(same_unseen(c, x, key.b, key.g, key.j, want, run_fast(c, x, threads)))
            << name << " junk in key " << key.j << " (b=" << key.b << ", g=" << key.g << "), target " << t
            << ", threads " << threads;
    }
  }
}

// The experiments above run on each of these; the pin must take.
TEST(NonFiniteTargets, EachTargetIsPinned) {
  std::string listed;
  for (const std::string& t : targets()) {
    PinTarget pin(t);
    EXPECT_EQ(jomoim::active_simd_target(), t);
    listed += " " + t;
  }
  std::cout << "SIMD targets:" << listed << "\n";
}

NfCase C(std::string name, I64 B, I64 Hq, I64 Hkv, I64 Nq, I64 Nk, I64 D, I64 Dv) {
  NfCase c;
  c.name = std::move(name);
  c.B = B, c.Hq = Hq, c.Hkv = Hkv, c.Nq = Nq, c.Nk = Nk, c.D = D, c.Dv = Dv;
  return c;
}
NfCase causal(NfCase c) {
  c.causal = true;
  return c;
}
NfCase lens(NfCase c, std::vector<I64> l) {
  c.key_lengths = std::move(l);
  return c;
}
NfCase bias(NfCase c) {
  c.bias = true;
  return c;
}
NfCase probs(NfCase c) {
  c.probs = true;
  return c;
}
NfCase cols(NfCase c) {
  c.notation = Notation::col3b1b;
  return c;
}

// One case per path (plan.hpp): the direct path below 9 rows per block, 64 x 256 tiles, 32 x 32
// tiles (causal Nq <= 512), wide 256 x 64 O^T blocks (non-causal, D >= 128, Nq >= 256,
// Nk >= 512), decode with key splits (2 threads, no probs), stacked GQA heads (Nq < block).
const NfCase kCases[] = {
    C("tiny_1x1x4x8", 1, 1, 1, 4, 4, 8, 8),
    probs(causal(C("tiny_causal_probs", 1, 1, 1, 4, 4, 8, 8))),
    C("tiled_1x2x300x64", 1, 2, 2, 300, 300, 64, 64),
    causal(C("tiled_causal_narrow_1x2x300x64", 1, 2, 2, 300, 300, 64, 64)),
    causal(C("tiled_causal_1x1x700x64", 1, 1, 1, 700, 700, 64, 64)),
    probs(C("tiled_probs_1x2x300x64", 1, 2, 2, 300, 300, 64, 64)),
    C("wide_1x1x512x128", 1, 1, 1, 512, 512, 128, 128),
    bias(C("wide_bias_1x1x512x128", 1, 1, 1, 512, 512, 128, 128)),
    lens(C("wide_keylens_2x1x512x600x128", 2, 1, 1, 512, 600, 128, 128), {600, 333}),
    C("decode_1x4x1x4096x128", 1, 4, 4, 1, 4096, 128, 128),
    lens(C("decode_gqa_keylens_2x4x2x1x4096", 2, 4, 2, 1, 4096, 128, 128), {4096, 1000}),
    causal(C("decode_causal_3x1000", 1, 2, 2, 3, 1000, 64, 64)),
    causal(C("gqa_causal_1x8x2x16x40", 1, 8, 2, 16, 40, 16, 24)),
    causal(C("causal_more_keys_70x100", 1, 2, 2, 70, 100, 32, 32)),
    causal(C("causal_more_queries_100x70", 1, 2, 2, 100, 70, 32, 32)),
    lens(C("keylens_3x2x1x37x50", 3, 2, 1, 37, 50, 16, 16), {50, 20, 0}),
    lens(causal(C("keylens_causal_3x2x1x37x50", 3, 2, 1, 37, 50, 16, 16)), {50, 20, 0}),
    probs(bias(C("bias_probs_2x2x33x45", 2, 2, 2, 33, 45, 16, 16))),
    probs(bias(causal(C("bias_causal_probs_1x2x1x300x64", 1, 2, 1, 300, 300, 64, 64)))),
    probs(cols(causal(C("col3b1b_causal_probs_1x2x300x64", 1, 2, 2, 300, 300, 64, 64)))),
    bias(cols(C("col3b1b_bias_tiny", 1, 1, 1, 4, 4, 8, 8))),
};

INSTANTIATE_TEST_SUITE_P(Paths, NonFinite, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<NfCase>& i) { return i.param.name; });

}  // namespace
