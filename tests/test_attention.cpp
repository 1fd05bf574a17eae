// test_attention.cpp — decides whether jomoim::attention (the fast path) is correct.
//
// Every case compares attention() with the float64 oracle attention_reference() on fresh random
// inputs (a fixed seed per case, printed on failure), on every SIMD target this CPU runs, with 1
// and 2 threads. Outputs live in NaN-poisoned buffers with guard elements around them and gaps
// inside strided layouts; both must come back as expected. Tolerances are derived per row from a
// naive float32 computation's own error (see attention_test_util.hpp), and the tolerance is shown
// to reject real mistakes. Invariants and edges: test_attention_invariants.cpp; refusals:
// test_attention_refusals.cpp. Helpers live in attention_test_util.hpp; the cases are data in
// bench/cases/attention_cases.cpp, shared with `jomoim bench --quick` and attention_gbench.
#include <bit>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "attention_test_util.hpp"

namespace {

using namespace attn_test;

// =============================================================================================
// The table of cases: every case of the shared table (bench/cases/attention_cases.cpp) marked
// kTest, in its order.

const std::vector<Case>& all_cases() {
  static const std::vector<Case> t = jomoim::cases::used_by(jomoim::cases::kTest);
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
  for (const Case& c : jomoim::cases::all()) {  // also the cases only the benchmarks run
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
