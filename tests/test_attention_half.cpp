// test_attention_half.cpp — jomoim::attention on 16-bit inputs (bf16 and f16 storage).
//
// Each case of the shared table runs with q, k and v rounded to the format and stored as 16-bit
// bit patterns in the case's own layouts (strided, transposed, reversed, broadcast, 3b1b). The
// float64 oracle on the same rounded values (widened exactly) decides; since the kernels widen
// each element exactly and then compute in float32, the float32 tolerance of
// attention_test_util.hpp applies (derivation there: it depends on D, Nk and the scores'
// magnitude, not on how the inputs were stored), with one change: its yardstick, the naive
// float32 evaluation's own error, is taken as the larger of that and the tiled float32 model's
// error. Inputs with 8 or 11 significant bits make the naive sequential dot products often exact
// (bf16 x bf16 products are exact in float32, and so are many of their sums), which no
// evaluation that pre-scales q, as the kernels do, can match; the model pre-scales too. Every SIMD target, the case's
// thread counts (1 and 2, some 3). Also: the 16-bit reference equals the float32 reference on the widened copies bit
// for bit, the fast path equals the float32 fast path on those copies bit for bit (same threads and target) where both
// take the same kernels, the conversions are exact and round to nearest even, and the refusals.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "attention_test_util.hpp"
#include "jomoim/core/half.hpp"

namespace {

using namespace attn_test;
using jomoim::Dtype;

// A 16-bit copy of a Stored<4>'s buffer (same base, shape, strides), and the float buffer's
// logical elements replaced by their rounded values, so both hold the same numbers.
struct Stored16 {
  std::vector<std::uint16_t> buf;
  I64 base = 0;
  std::array<I64, 4> shape{}, strides{};
  Dtype dtype = Dtype::bf16;
  jomoim::ConstTensor4x16 view() const { return {{buf.data() + base, shape, strides}, dtype}; }
};

Stored16 round_into(Stored<4>& s, Dtype t) {
  Stored16 h;
  h.base = s.base;
  h.shape = s.shape;
  h.strides = s.strides;
  h.dtype = t;
  h.buf.resize(s.buf.size());
  for (std::size_t i = 0; i < s.buf.size(); ++i) h.buf[i] = jomoim::half_from_float(s.buf[i], t);
  for_each_index(s.shape, [&](const auto& i) {
    const I64 o = s.offset(i);
    s.buf[std::size_t(o)] = jomoim::half_to_float(h.buf[std::size_t(o)], t);
  });
  return h;
}

struct HalfInputs {
  Inputs s;  // the float32 copies (rounded values), the tolerance's and the oracle's inputs
  Stored16 q, k, v;
};

HalfInputs build_half(const Case& c, std::uint64_t seed, Dtype t) {
  HalfInputs h{build(c, seed), {}, {}, {}};
  h.q = round_into(h.s.q, t);
  h.k = round_into(h.s.k, t);
  h.v = round_into(h.s.v, t);
  h.s.refresh();
  return h;
}

void run_half(const HalfInputs& h, Outputs& o, int threads, bool bf16_weights = false) {
  jomoim::AttentionOptions opt = h.s.options();
  opt.notation = h.s.notation;
  opt.threads = threads;
  opt.bf16_weights = bf16_weights;
  if (o.lse) opt.lse = o.lse->view();
  if (o.probs) opt.probs = o.probs->view();
  const bool col = h.s.notation == Notation::col3b1b;
  auto as_given = [&](auto view) { return col ? view.transposed(2, 3) : view; };
  jomoim::attention(as_given(h.q.view()), as_given(h.k.view()), as_given(h.v.view()), as_given(o.out.view()), opt);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

struct HalfCase {
  Case c;
  Dtype dtype;
};

std::vector<HalfCase> half_cases() {
  std::vector<HalfCase> v;
  for (Dtype t : {Dtype::bf16, Dtype::f16})
    for (const Case& c : jomoim::cases::used_by(jomoim::cases::kTest)) v.push_back({c, t});
  return v;
}

// The tolerance of expect(), its yardstick widened to the tiled model's error where larger.
void widen_tolerance(const Inputs& s, Expected& e) {
  const F32Result m = tiled_f32_model(s);
  const Dims& n = s.n;
  for (I64 row = 0; row < s.rows(); ++row) {
    const std::size_t r = std::size_t(row);
    if (e.all_masked[r]) continue;
    double out_err = 0, p_err = 0;
    for (I64 c = 0; c < n.Dv; ++c) {
      const std::size_t o = r * std::size_t(n.Dv) + std::size_t(c);
      out_err = std::max(out_err, std::fabs(double(m.out[o]) - e.ref.out[o]));
    }
    for (I64 j = 0; j < n.Nk; ++j) {
      const std::size_t o = r * std::size_t(n.Nk) + std::size_t(j);
      p_err = std::max(p_err, std::fabs(double(m.probs[o]) - e.ref.probs[o]));
    }
    e.tol_out[r] = std::max(e.tol_out[r], 8 * out_err);
    e.tol_lse[r] = std::max(e.tol_lse[r], 8 * std::fabs(double(m.lse[r]) - e.ref.lse[r]));
    e.tol_probs[r] = std::max(e.tol_probs[r], 8 * p_err);
  }
}

class Half : public ::testing::TestWithParam<HalfCase> {};

TEST_P(Half, MatchesReferenceOnRoundedInputs) {
  const Case& c = GetParam().c;
  const Dtype t = GetParam().dtype;
  const std::uint64_t seed = seed_of(c.name);
  const HalfInputs h = build_half(c, seed, t);
  const Inputs& s = h.s;
  Expected e = expect(s);
  ASSERT_TRUE(e.oracle_issue.empty()) << describe(c, seed) << ": " << e.oracle_issue;
  widen_tolerance(s, e);
  // The tolerance must admit the naive float32 order too (a failure here is a test bug).
  EXPECT_TRUE(compare(s, e, naive_f32(s), true, true)) << "tolerance self-check (naive float32) " << describe(c, seed);
  // The 16-bit oracle widens exactly: the same numbers as the float32 oracle on the copies.
  {
    jomoim::AttentionOptions opt = s.options();
    const jomoim::ReferenceResult r = jomoim::attention_reference(h.q.view(), h.k.view(), h.v.view(), opt);
    EXPECT_TRUE(same_values(r.out, e.ref.out) && same_values(r.lse, e.ref.lse) && same_values(r.probs, e.ref.probs))
        << "16-bit reference differs from the float32 reference on the widened inputs, " << describe(c, seed);
  }
  const std::vector<std::uint16_t> q0 = h.q.buf, k0 = h.k.buf, v0 = h.v.buf;
  // The same kernels run on both when K is contiguous along D (a strided float32 K is not read
  // by the few-row direct path, a widened 16-bit tile always is).
  const bool contiguous_k = s.k.strides[3] == 1;
  for (const std::string& target : targets()) {
    PinTarget pin(target);
    // AVX3_BF16 computes the Q·K^T of bf16 inputs with VDPBF16PS, AMX_BF16 both products on
    // AMX tiles (other roundings).
    const bool same_kernels = contiguous_k && !((target == "AVX3_BF16" || target == "AMX_BF16") && t == Dtype::bf16);
    for (int threads : c.threads) {
      const std::string ctx = describe(c, seed) + " dtype " + jomoim::dtype_name(t) + " target " + target +
                              " threads " + std::to_string(threads);
      Outputs o = make_outputs(c);
      try {
        run_half(h, o, threads);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << ctx << ": attention threw '" << ex.what() << "'";
        continue;
      }
      const F32Result got = read(o);
      EXPECT_TRUE(compare(s, e, got, c.want_lse, c.want_probs)) << ctx;
      EXPECT_TRUE(untouched_outside(o)) << ctx;
      EXPECT_TRUE(h.q.buf == q0 && h.k.buf == k0 && h.v.buf == v0) << ctx << ": an input was modified";
      if (same_kernels) {
        Outputs o32 = make_outputs(c);
        run_fast(s, o32, threads);
        const F32Result want = read(o32);
        EXPECT_TRUE(same_bits(got.out, want.out) && same_bits(got.lse, want.lse) && same_bits(got.probs, want.probs))
            << ctx << ": not bitwise the float32 path's result on the widened inputs";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, Half, ::testing::ValuesIn(half_cases()),
                         [](const ::testing::TestParamInfo<HalfCase>& info) {
                           return std::string(jomoim::dtype_name(info.param.dtype)) + "_" + info.param.c.name;
                         });

// The VDPBF16PS score kernels (target AVX3_BF16, on CPUs with AVX512_BF16) run: their sums round
// differently from AVX3's widened float32 ones, so the bits differ; both are within tolerance
// (the table above runs every target). Odd D: the last pair's high half is zero; D 3: decode's
// query rows (padded to 32) outgrow D * kBlockQ floats. Prefill (70 query rows,
// score_tile_bf16) and decode (one row of 4 heads per K/V head, score_rows_bf16).
TEST(HalfBf16Dot, Avx3Bf16UsesItsOwnKernel) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3_BF16") == all.end()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  for (const I64 Nq : {70, 1})
    for (const I64 D : {64, 37, 3}) {
      Case c = Nq == 1 ? make({1, 8, 2, 1, 300, D, 64}) : make({1, 2, 1, 70, 300, D, 24});
      c.name = "bf16dot_q" + std::to_string(Nq) + "_d" + std::to_string(D);
      const HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
      Expected e = expect(h.s);
      widen_tolerance(h.s, e);
      std::vector<float> outs[2];
      int i = 0;
      for (const char* target : {"AVX3", "AVX3_BF16"}) {
        PinTarget pin(target);
        Outputs o = make_outputs(c);
        run_half(h, o, 1);
        const F32Result got = read(o);
        EXPECT_TRUE(compare(h.s, e, got, false, false)) << target << " Nq " << Nq << " D " << D;
        outs[i++] = got.out;
      }
      EXPECT_FALSE(same_bits(outs[0], outs[1]))
          << "AVX3_BF16 gave AVX3's bits: the VDPBF16PS kernels did not run, Nq " << Nq << " D " << D;
    }
}

// ---------------------------------------------------------------------------------------------
// options.bf16_weights: the softmax weights rounded to bf16 for P·V (VDPBF16PS on AVX3_BF16).
//
// Tolerance: rounding p_j to bf16 (nearest even; a denormal p_j to zero, below 2^-126) moves it
// by at most 2^-8 p_j, and the output divides by the float32 sum of the unrounded weights, so an
// output element moves by at most 2^-8 sum_j p_j |v_je| (p normalised) beyond what float32
// arithmetic gives: tol_out grows by that, from the reference's weights; lse and probs come from
// the float32 maximum and sum, and keep their tolerance.
void add_weight_rounding(const Inputs& s, Expected& e) {
  const Dims& n = s.n;
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const std::size_t row = std::size_t((b * n.Hq + h) * n.Nq + i);
        if (e.all_masked[row]) continue;
        double w = 0;
        for (I64 c = 0; c < n.Dv; ++c) {
          double sum = 0;
          for (I64 j = 0; j < n.Nk; ++j)
            sum +=
                e.ref.probs[row * std::size_t(n.Nk) + std::size_t(j)] * std::fabs(double(s.vv(b, h / s.group(), j, c)));
          w = std::max(w, sum);
        }
        e.tol_out[row] += 0x1p-8 * w;
      }
}

// expect() for the bf16-weights path: the widened tolerance plus the weights' rounding. The
// caller checks oracle_issue.
Expected expect_bf16_weights(const Inputs& s) {
  Expected e = expect(s);
  if (!e.oracle_issue.empty()) return e;
  widen_tolerance(s, e);
  add_weight_rounding(s, e);
  return e;
}

// AMX_BF16 (CPUs with AMX-BF16: amx_attention.hpp): bf16 prefill on AMX tiles, Q·K^T and P·V,
// the weights in three bf16 pieces (exact) or, with bf16_weights, one. Within the float32 bound
// (plus the weights' rounding with the option) on shapes that cut every tile and block: D and Dv
// off the 32 / 16 grid (3, 37, 48), one key, more query rows than keys under the causal rule (rows
// that see nothing: zeros and -inf), grouped heads, mixed key lengths, a column-layout output and
// query rows read backwards; and not AVX3_BF16's bits (the tiles ran). Non-finite values under
// masked keys send the call to the AVX-512 kernels (amx_fits): AVX3's bits exactly.
TEST(HalfAmx, TilesWithinTheFloat32Bound) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AMX_BF16") == all.end()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  namespace L = jomoim::cases::layouts;
  struct Shape {
    I64 B, Hq, Hkv, Nq, Nk, D, Dv;
    bool causal;
    KeyLens lens;
    int layout;  // 0 contiguous, 1 output in columns, 2 query rows backwards
  };
  const Shape shapes[] = {
      {1, 2, 1, 32, 32, 64, 64, false, KeyLens::none, 0},   {2, 3, 1, 70, 90, 37, 24, true, KeyLens::none, 0},
      {1, 4, 2, 200, 333, 128, 80, true, KeyLens::none, 1}, {1, 1, 1, 129, 700, 256, 256, false, KeyLens::none, 0},
      {3, 2, 2, 40, 100, 3, 7, false, KeyLens::mixed, 2},   {1, 2, 1, 100, 60, 64, 64, true, KeyLens::none, 0},
      {1, 2, 1, 33, 1, 16, 16, false, KeyLens::none, 0},    {4, 2, 1, 65, 65, 48, 112, true, KeyLens::mixed, 0}};
  for (const Shape& sh : shapes) {
    Case c = make({sh.B, sh.Hq, sh.Hkv, sh.Nq, sh.Nk, sh.D, sh.Dv});
    c.causal = sh.causal;
    c.key_lengths = sh.lens;
    c.want_probs = false;  // probabilities take the AVX-512 kernels
    if (sh.layout == 1) c.out_layout = L::cols();
    if (sh.layout == 2) c.q_layout = L::flipped();
    c.name = "amx_b" + std::to_string(sh.B) + "h" + std::to_string(sh.Hq) + "x" + std::to_string(sh.Hkv) + "_q" +
             std::to_string(sh.Nq) + "k" + std::to_string(sh.Nk) + "_d" + std::to_string(sh.D) + "v" +
             std::to_string(sh.Dv);
    const HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
    Expected e = expect(h.s);
    ASSERT_TRUE(e.oracle_issue.empty()) << c.name << ": " << e.oracle_issue;
    widen_tolerance(h.s, e);
    Expected ew = e;
    add_weight_rounding(h.s, ew);
    for (const bool weights : {false, true})
      for (const int threads : {1, 2}) {
        const std::string ctx = c.name + (weights ? " bf16_weights" : "") + " threads " + std::to_string(threads);
        Outputs o = make_outputs(c), avx = make_outputs(c);
        {
          PinTarget pin("AMX_BF16");
          run_half(h, o, threads, weights);
        }
        {
          PinTarget pin("AVX3_BF16");
          run_half(h, avx, threads, weights);
        }
        const F32Result got = read(o);
        EXPECT_TRUE(compare(h.s, weights ? ew : e, got, true, false)) << ctx;
        EXPECT_TRUE(untouched_outside(o)) << ctx;
        if (sh.Nk > 1) {  // one key: out = v exactly on every path
          EXPECT_FALSE(same_bits(got.out, read(avx).out)) << ctx << ": AVX3_BF16's bits, the tiles did not run";
        }
      }
  }
  // A NaN value under keys cut by a key length: the AVX-512 kernels, whose output stays finite;
  // on a CPU with AMX their blocks of many rows widen K (fast_attention.cpp), as AVX3 does.
  Case c = make({1, 2, 1, 64, 200, 64, 64});
  c.name = "amx_nan_values";
  c.want_probs = false;
  HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
  h.s.key_lengths = {150};
  h.s.refresh();
  for (I64 j = 150; j < 200; ++j)
    for (I64 d = 0; d < 64; ++d)
      h.v.buf[std::size_t(h.s.v.offset({0, 0, j, d}))] =
          jomoim::half_from_float(std::numeric_limits<float>::quiet_NaN(), Dtype::bf16);
  Outputs o = make_outputs(c), avx = make_outputs(c);
  {
    PinTarget pin("AMX_BF16");
    run_half(h, o, 2);
  }
  {
    PinTarget pin("AVX3");
    run_half(h, avx, 2);
  }
  const F32Result got = read(o);
  EXPECT_TRUE(same_bits(got.out, read(avx).out)) << "non-finite values did not fall back to the widening kernels";
  EXPECT_TRUE(std::all_of(got.out.begin(), got.out.end(), [](float x) { return std::isfinite(x); }));
}

// One case of the table with and without the option on each pinned target (below).
void check_bf16_weights(const Case& c, const std::vector<std::string>& pinned) {
  const std::uint64_t seed = seed_of(c.name);
  const HalfInputs h = build_half(c, seed, Dtype::bf16);
  const Expected e = expect_bf16_weights(h.s);
  ASSERT_TRUE(e.oracle_issue.empty()) << describe(c, seed) << ": " << e.oracle_issue;
  for (const std::string& target : pinned) {
    PinTarget pin(target);
    for (int threads : c.threads) {
      const std::string ctx = describe(c, seed) + " target " + target + " threads " + std::to_string(threads);
      Outputs o = make_outputs(c), plain = make_outputs(c);
      try {
        run_half(h, o, threads, true);
        run_half(h, plain, threads, false);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << ctx << ": attention threw '" << ex.what() << "'";
        continue;
      }
      const F32Result got = read(o), want = read(plain);
      EXPECT_TRUE(compare(h.s, e, got, c.want_lse, c.want_probs)) << ctx;
      EXPECT_TRUE(untouched_outside(o)) << ctx;
      if (target != "AVX3_BF16" && target != "AMX_BF16") {  // AMX_BF16 is AVX3_BF16 with the tiles
        EXPECT_TRUE(same_bits(got.out, want.out) && same_bits(got.lse, want.lse) && same_bits(got.probs, want.probs))
            << ctx << ": bf16_weights changed the result on a target without VDPBF16PS";
      }
    }
  }
}

// Every case of the table with the option, on AVX3_BF16 (where it applies) and on the best
// target without VDPBF16PS: within the widened tolerance on both, and on the second the same
// bits as without the option (it changes nothing there). One test over the whole table: one
// process, not 319 (the Half table above runs every case on every target without the option).
TEST(HalfBf16Weights, EveryCaseWithinTheWeightsRounding) {
  std::vector<std::string> pinned;
  const auto& all = targets();
  for (const char* t : {"AMX_BF16", "AVX3_BF16"})
    if (std::find(all.begin(), all.end(), t) != all.end()) pinned.push_back(t);
  for (const std::string& t : all)
    if (t != "AVX3_BF16" && t != "AMX_BF16") {
      pinned.push_back(t);
      break;
    }
  for (const Case& c : jomoim::cases::used_by(jomoim::cases::kTest)) {
    SCOPED_TRACE(c.name);
    check_bf16_weights(c, pinned);
  }
}

// The VDPBF16PS P·V runs (other bits than without the option) in row-layout blocks (64 rows,
// D 64) and in wide blocks (256 rows, O^T, D 128), odd key counts (a lone last pair) and Dv not a
// multiple of 32; a key length cuts a tile, and the values under the masked keys are
// non-finite in one run (that tile takes the float32 path: the output stays finite) and large
// finite junk in the other (the bf16 path: p = 0 exactly, so they add nothing).
TEST(HalfBf16Weights, RunsAndKeepsMaskedValuesOut) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3_BF16") == all.end()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  PinTarget pin("AVX3_BF16");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& [Nq, Nk, D, Dv] : {std::array<I64, 4>{100, 301, 64, 48}, std::array<I64, 4>{512, 777, 128, 128}})
    for (const float junk : {nan, inf, 1e30f}) {
      Case c = make({1, 2, 1, Nq, Nk, D, Dv});
      c.name = "bf16w_q" + std::to_string(Nq) + "_k" + std::to_string(Nk);
      HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
      h.s.key_lengths = {Nk - 40};
      h.s.refresh();
      // The oracle and its tolerance on zeros under the masked keys (what the keys hold there
      // cannot matter; NaN would poison the tolerance's own sums), the kernel on the junk.
      Expected e = expect(h.s);
      for (I64 j = Nk - 40; j < Nk; ++j)
        for (I64 d = 0; d < Dv; ++d)
          h.v.buf[std::size_t(h.s.v.offset({0, 0, j, d}))] = jomoim::half_from_float(junk, Dtype::bf16);
      ASSERT_TRUE(e.oracle_issue.empty()) << e.oracle_issue;
      widen_tolerance(h.s, e);
      add_weight_rounding(h.s, e);
      Outputs o = make_outputs(c), plain = make_outputs(c);
      run_half(h, o, 2, true);
      run_half(h, plain, 2, false);
      const F32Result got = read(o), want = read(plain);
      const std::string ctx = c.name + " junk " + std::to_string(junk);
      EXPECT_TRUE(compare(h.s, e, got, false, false)) << ctx;
      EXPECT_FALSE(same_bits(got.out, want.out)) << ctx << ": the VDPBF16PS P·V did not run";
    }
}

// Decode's blocks of 2-8 rows (the direct path: a grouped-query head's rows) run P·V by
// VDPBF16PS on V's rows in place with the weights paired in registers: every row count 2-8
// (8, 4, 2 and 1 at a time), Dv from 16 (half a 32-column chunk) to 256, odd key counts (a lone
// last key) and a tile of 256 keys plus one; within the weights' rounding and not the float32
// bits. One row keeps float32 P·V: the same bits as without the option. The last shape cuts the
// keys by a key length with non-finite values past it: that tile takes the float32 path, the
// output stays finite.
TEST(HalfBf16Weights, DecodeRowsPairInRegisters) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3_BF16") == all.end()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  PinTarget pin("AVX3_BF16");
  struct Shape {
    I64 Hq, Hkv, Nq, Nk, D, Dv;
    bool cut;
  };
  const Shape shapes[] = {{1, 1, 1, 3, 16, 16, false},    {2, 1, 1, 7, 64, 48, false},
                          {3, 1, 1, 33, 32, 80, false},   {8, 2, 1, 300, 128, 128, false},
                          {5, 1, 1, 257, 64, 64, false},  {6, 1, 1, 129, 48, 112, false},
                          {7, 1, 1, 64, 128, 256, false}, {8, 1, 1, 513, 128, 128, false},
                          {4, 2, 2, 401, 64, 96, false},  {32, 8, 1, 1000, 128, 128, true}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Shape& sh : shapes) {
    Case c = make({1, sh.Hq, sh.Hkv, sh.Nq, sh.Nk, sh.D, sh.Dv});
    c.name = "bf16w_decode_h" + std::to_string(sh.Hq) + "_" + std::to_string(sh.Hkv) + "_q" + std::to_string(sh.Nq) +
             "_k" + std::to_string(sh.Nk) + "_dv" + std::to_string(sh.Dv);
    HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
    const I64 cut = sh.Nk - 37;
    if (sh.cut) {
      h.s.key_lengths = {cut};
      h.s.refresh();
    }
    Expected e = expect(h.s);
    ASSERT_TRUE(e.oracle_issue.empty()) << c.name << ": " << e.oracle_issue;
    if (sh.cut)  // junk under the masked keys, after the oracle (as above)
      for (I64 g = 0; g < sh.Hkv; ++g)
        for (I64 j = cut; j < sh.Nk; ++j)
          for (I64 d = 0; d < sh.Dv; ++d)
            h.v.buf[std::size_t(h.s.v.offset({0, g, j, d}))] = jomoim::half_from_float(nan, Dtype::bf16);
    widen_tolerance(h.s, e);
    add_weight_rounding(h.s, e);
    for (int threads : {1, 2}) {
      Outputs o = make_outputs(c), plain = make_outputs(c);
      run_half(h, o, threads, true);
      run_half(h, plain, threads, false);
      const F32Result got = read(o), want = read(plain);
      const std::string ctx = c.name + " threads " + std::to_string(threads);
      EXPECT_TRUE(compare(h.s, e, got, false, false)) << ctx;
      EXPECT_TRUE(untouched_outside(o)) << ctx;
      if (sh.Hq / sh.Hkv * sh.Nq == 1) {
        EXPECT_TRUE(same_bits(got.out, want.out)) << ctx << ": one row changed with the option";
      } else {
        EXPECT_FALSE(same_bits(got.out, want.out)) << ctx << ": the VDPBF16PS P·V did not run";
      }
    }
  }
}

// Each thread keeps V's packed pairs of recent tiles for the blocks of the same head; a second
// call on the same buffers with new values (and one with another length) must not reuse them.
TEST(HalfBf16Weights, NewValuesInTheSameBuffersArePackedAgain) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3_BF16") == all.end()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  PinTarget pin("AVX3_BF16");
  Case c = make({1, 2, 1, 200, 600, 64, 64});
  c.name = "bf16w_repack";
  HalfInputs h = build_half(c, seed_of(c.name), Dtype::bf16);
  for (int round = 0; round < 3; ++round) {
    if (round > 0) {  // new values in the same buffers: scaled by -2 (exact in bf16)
      for (std::size_t i = 0; i < h.v.buf.size(); ++i) {
        const float x = -2.0f * jomoim::half_to_float(h.v.buf[i], Dtype::bf16);
        h.v.buf[i] = jomoim::half_from_float(x, Dtype::bf16);
        h.s.v.buf[i] = x;
      }
      h.s.refresh();
    }
    if (round == 2) h.s.key_lengths = {333};  // the last tile shorter: another tag
    const Expected e = expect_bf16_weights(h.s);
    ASSERT_TRUE(e.oracle_issue.empty()) << e.oracle_issue;
    for (int threads : {1, 2}) {
      Outputs o = make_outputs(c);
      run_half(h, o, threads, true);
      EXPECT_TRUE(compare(h.s, e, read(o), false, false)) << "round " << round << " threads " << threads;
    }
  }
}

// A causal block's last tile is shorter than the same tile in the blocks after it; the tile's V
// pairs are packed once to its full extent and shared, except for an odd tile length (Nk = Nq + 1
// below: every block's last tile), packed alone because its pair past the end reads the next row
// with weight 0 and that row must be zero. Within the weights' rounding on clean values; then
// with NaN in the whole row of V at key j (inside tiles that earlier blocks read in part; 449 is
// the row just past an odd last tile), or in one component of K's row j, rows that do not see j
// keep their values and the rows that do are NaN, on 1 and 2 threads.
TEST(HalfBf16Weights, CausalBlocksShareTheirValuePairs) {
  const auto& all = targets();
  if (std::find(all.begin(), all.end(), "AVX3_BF16") == all.end()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  PinTarget pin("AVX3_BF16");
  for (const I64 Nq : {I64(700), I64(699)}) {
    const I64 Nk = 700;
    Case c = make({1, 2, 1, Nq, Nk, 64, 48});
    c.causal = true;
    c.name = "bf16w_causal_shared_pairs_q" + std::to_string(Nq);
    const HalfInputs clean = build_half(c, seed_of(c.name), Dtype::bf16);
    const Expected e = expect_bf16_weights(clean.s);
    ASSERT_TRUE(e.oracle_issue.empty()) << e.oracle_issue;
    for (int threads : {1, 2}) {
      Outputs o = make_outputs(c);
      run_half(clean, o, threads, true);
      EXPECT_TRUE(compare(clean.s, e, read(o), false, false)) << c.name << ", clean, threads " << threads;
    }
    const std::uint16_t nan16 = jomoim::half_from_float(std::numeric_limits<float>::quiet_NaN(), Dtype::bf16);
    for (const I64 j : {I64(449), I64(300), I64(513)})
      for (const bool in_k : {false, true}) {
        HalfInputs h = clean;
        if (in_k) {  // one component of the key: NaN scores, NaN weights (not rounded to a number)
          h.k.buf[std::size_t(h.s.k.offset({0, 0, j, 5}))] = nan16;
        } else {
          for (I64 d = 0; d < c.n.Dv; ++d) h.v.buf[std::size_t(h.s.v.offset({0, 0, j, d}))] = nan16;
        }
        for (int threads : {1, 2}) {
          Outputs o = make_outputs(c);
          run_half(h, o, threads, true);
          const F32Result got = read(o);
          I64 wrong = 0, first = -1;
          for (I64 row = 0; row < clean.s.rows(); ++row) {
            const bool sees = row % Nq + (Nk - Nq) >= j;
            for (I64 x = 0; x < c.n.Dv; ++x) {
              const std::size_t at = std::size_t(row * c.n.Dv + x);
              const bool ok = sees ? std::isnan(got.out[at])
                                   : std::fabs(double(got.out[at]) - e.ref.out[at]) <= e.tol_out[std::size_t(row)];
              if (!ok && wrong++ == 0) first = row;
            }
          }
          EXPECT_EQ(wrong, 0) << c.name << ", NaN " << (in_k ? "key" : "values") << " at " << j << ", threads "
                              << threads << ": first wrong row " << first;
        }
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Conversions.

TEST(HalfConversion, EveryPatternWidensAndNarrowsBack) {
  for (Dtype t : {Dtype::bf16, Dtype::f16})
    for (std::uint32_t u = 0; u < 0x10000u; ++u) {
      const std::uint16_t h = std::uint16_t(u);
      const float f = jomoim::half_to_float(h, t);
      const std::uint16_t back = jomoim::half_from_float(f, t);
      if (std::isnan(f)) {
        EXPECT_TRUE(std::isnan(jomoim::half_to_float(back, t))) << jomoim::dtype_name(t) << " " << u;
      } else {
        ASSERT_EQ(back, h) << jomoim::dtype_name(t) << " pattern " << u << " value " << f;
      }
    }
}

TEST(HalfConversion, KnownValues) {
  EXPECT_EQ(jomoim::f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(jomoim::f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(jomoim::f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(jomoim::f16_from_float(65519.0f), 0x7bff);  // below the halfway point to 2^16
  EXPECT_EQ(jomoim::f16_from_float(65520.0f), 0x7c00);  // halfway: to even, which is inf
  EXPECT_EQ(jomoim::f16_from_float(0x1p-25f), 0x0000);  // halfway between 0 and 2^-24: to even
  EXPECT_EQ(jomoim::f16_from_float(0x1.8p-24f), 0x0002);
  EXPECT_EQ(jomoim::f16_from_float(-1.0f), 0xbc00);
  EXPECT_EQ(jomoim::bf16_from_float(1.0f + 0x1p-8f), 0x3f80);    // halfway: to even (down)
  EXPECT_EQ(jomoim::bf16_from_float(1.0f + 0x3p-8f), 0x3f82);    // halfway: to even (up)
  EXPECT_EQ(jomoim::bf16_from_float(1.0f + 0x1.8p-8f), 0x3f81);  // above halfway: up
  EXPECT_EQ(jomoim::bf16_from_float(3.4e38f), 0x7f80);           // beyond bf16's largest finite
  EXPECT_EQ(jomoim::bf16_to_float(0x3f80), 1.0f);
}

// Narrowing rounds to nearest even: compared with the compiler's own conversions on random floats.
TEST(HalfConversion, NarrowingMatchesTheCompiler) {
  Rng rng(seed_of("half_conversion"));
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(std::uint32_t(rng.next()));
    if (std::isnan(f)) continue;
#if defined(__FLT16_MAX__)
    const auto want16 = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(jomoim::f16_from_float(f), want16) << f;
#endif
#if defined(__BFLT16_MAX__)
    const auto wantbf = std::bit_cast<std::uint16_t>(static_cast<__bf16>(f));
    ASSERT_EQ(jomoim::bf16_from_float(f), wantbf) << f;
#endif
    // bf16 by definition: the nearest (ties to even) of the two truncations around f.
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const float lo = std::bit_cast<float>(u & 0xffff0000u), hi = std::bit_cast<float>((u & 0xffff0000u) + 0x10000u);
    const float got = jomoim::bf16_to_float(jomoim::bf16_from_float(f));
    if (std::isfinite(hi)) {
      const double dl = std::fabs(double(f) - lo), dh = std::fabs(double(f) - hi);
      ASSERT_TRUE(got == (dl < dh ? lo : dh < dl ? hi : ((u >> 16) & 1 ? hi : lo))) << f;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals: one-line jomoim::Error naming the argument, nothing written.

TEST(HalfRefusals, MixedOrWrongFormats) {
  const Case c = make({1, 2, 2, 5, 7, 8, 8});
  HalfInputs h = build_half(c, 1, Dtype::bf16);
  Outputs o = make_outputs(c);
  auto refused = [&](jomoim::ConstTensor4x16 q, jomoim::ConstTensor4x16 k, jomoim::ConstTensor4x16 v,
                     const char* name) {
    try {
      jomoim::attention(q, k, v, o.out.view());
      ADD_FAILURE() << "not refused: " << name;
    } catch (const jomoim::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    EXPECT_TRUE(untouched_outside(o)) << name;
  };
  auto as = [](jomoim::ConstTensor4x16 v, Dtype t) {
    v.dtype = t;
    return v;
  };
  refused(h.q.view(), as(h.k.view(), Dtype::f16), h.v.view(), "k, v");  // bf16 with f16
  refused(as(h.q.view(), Dtype::f16), h.k.view(), h.v.view(), "k, v");  // f16 q, bf16 k and v
  refused(as(h.q.view(), Dtype::f32), h.k.view(), h.v.view(), "q:");    // f32 is not 16-bit
  refused(h.q.view(), h.k.view(), as(h.v.view(), Dtype::f32), "v:");
  jomoim::ConstTensor4x16 short_k = h.k.view();
  short_k.bits.shape[3] = 7;
  refused(h.q.view(), short_k, h.v.view(), "k:");
  // An output over a 16-bit input's bytes (the overlap check counts 2 bytes per element).
  std::vector<std::uint16_t> mem(1000);
  jomoim::ConstTensor4x16 q = {{mem.data(), {1, 2, 5, 8}, {80, 40, 8, 1}}, Dtype::bf16};
  jomoim::Tensor4 out{reinterpret_cast<float*>(mem.data() + 40), {1, 2, 5, 8}, {80, 40, 8, 1}};
  try {
    jomoim::attention(q, h.k.view(), h.v.view(), out);
    ADD_FAILURE() << "overlap not refused";
  } catch (const jomoim::Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps the input q"), std::string::npos) << e.what();
  }
}

}  // namespace
