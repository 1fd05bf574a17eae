// test_dist.cpp — jomoim::dist::ring_attention under mpirun (CTest: test_dist_np1/np2/np3/np4).
//
// Every rank builds the same whole problem from the case's seed (attention_test_util.hpp),
// keeps its zig-zag share of Q, K and V, and runs the ring; then it checks its rows of out and
// lse against the float64 reference with the engine's own per-row tolerances (the ones
// test_attention.cpp holds attention() to), and against attention() run on the whole problem
// in this process. Fully masked rows must be exact (zeros, lse -inf). Refusals: bad arguments
// on one rank, ranks that disagree on the problem, an injected failure before the ring — each
// must make every rank throw, never hang. The injected failure in the middle of the ring ends
// the job through MPI_Abort, so it runs as its own CTest (JOMOIM_DIST_ABORT_TEST=1, expected
// to fail within a timeout; tests/expect_failure.sh).
//
// Every rank runs every test in the same order (the calls are collective); a failed check on
// one rank is printed with its rank, and the exit code is agreed across ranks at the end.
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "attention_test_util.hpp"
#include "jomoim/engine/dist.hpp"

namespace {

using namespace attn_test;
using jomoim::dist::FailPhase;
using jomoim::dist::RingOptions;
using jomoim::dist::Rows;
using jomoim::dist::zigzag_length;
using jomoim::dist::zigzag_rows;

int g_rank = 0, g_ranks = 1;

// The zig-zag rows of a C-order [B, H, N, X] tensor, as a C-order [B, H, n_local, X] copy.
std::vector<float> local_slice(const std::vector<float>& full, I64 B, I64 H, I64 N, I64 X) {
  const auto rows = zigzag_rows(N, g_rank, g_ranks);
  std::vector<float> out;
  for (I64 b = 0; b < B; ++b)
    for (I64 h = 0; h < H; ++h)
      for (const Rows& r : rows)
        for (I64 i = r.begin; i < r.begin + r.size; ++i)
          for (I64 x = 0; x < X; ++x) out.push_back(full[std::size_t(((b * H + h) * N + i) * X + x)]);
  return out;
}

// Global position of each of this rank's local rows.
std::vector<I64> global_rows(I64 N) {
  std::vector<I64> g;
  for (const Rows& r : zigzag_rows(N, g_rank, g_ranks))
    for (I64 i = r.begin; i < r.begin + r.size; ++i) g.push_back(i);
  return g;
}

struct RingRun {
  std::vector<float> out, lse;
  jomoim::dist::RingStats stats;
};

RingRun run_ring(const Inputs& s, bool want_lse, int threads) {
  const Dims& n = s.n;
  const std::vector<float> q = local_slice(s.Q, n.B, n.Hq, n.Nq, n.D);
  const std::vector<float> k = local_slice(s.K, n.B, n.Hkv, n.Nk, n.D);
  const std::vector<float> v = local_slice(s.V, n.B, n.Hkv, n.Nk, n.Dv);
  const I64 nq = zigzag_length(n.Nq, g_rank, g_ranks), nk = zigzag_length(n.Nk, g_rank, g_ranks);
  RingRun r;
  r.out.assign(std::size_t(n.B * n.Hq * nq * n.Dv), poison());
  r.lse.assign(std::size_t(n.B * n.Hq * nq), poison());
  RingOptions o;
  o.causal = s.causal;
  o.scale = s.scale;
  o.key_lengths = s.key_lengths;
  o.threads = threads;
  if (want_lse) o.lse = jomoim::Tensor3::contiguous(r.lse.data(), {n.B, n.Hq, nq});
  r.stats =
      jomoim::dist::ring_attention(MPI_COMM_WORLD, jomoim::ConstTensor4::contiguous(q.data(), {n.B, n.Hq, nq, n.D}),
                                   jomoim::ConstTensor4::contiguous(k.data(), {n.B, n.Hkv, nk, n.D}),
                                   jomoim::ConstTensor4::contiguous(v.data(), {n.B, n.Hkv, nk, n.Dv}),
                                   jomoim::Tensor4::contiguous(r.out.data(), {n.B, n.Hq, nq, n.Dv}), n.Nq, n.Nk, o);
  return r;
}

// This rank's rows of the ring's result against the reference (tolerance tol) and against
// attention() on the whole problem (2 tol: both are within tol of the reference).
::testing::AssertionResult check_rows(const Inputs& s, const Expected& e, const F32Result& engine, const RingRun& r,
                                      bool want_lse) {
  const Dims& n = s.n;
  const std::vector<I64> g = global_rows(n.Nq);
  const I64 nq = I64(g.size());
  Worst wo("out vs reference"), wl("lse vs reference"), eo("out vs attention()"), el("lse vs attention()");
  I64 exact_bad = 0;
  std::string exact_where;
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 li = 0; li < nq; ++li) {
        const std::size_t row = std::size_t((b * n.Hq + h) * n.Nq + g[std::size_t(li)]);
        const std::size_t lrow = std::size_t((b * n.Hq + h) * nq + li);
        const std::string tag =
            " (global row " + std::to_string(g[std::size_t(li)]) + ", rank " + std::to_string(g_rank) + ")";
        if (e.all_masked[row]) {
          bool ok = !want_lse || r.lse[lrow] == -std::numeric_limits<float>::infinity();
          for (I64 c = 0; c < n.Dv; ++c) ok = ok && r.out[lrow * std::size_t(n.Dv) + std::size_t(c)] == 0.f;
          if (!ok && exact_bad++ == 0) exact_where = idx_string({b, h, g[std::size_t(li)]}) + tag;
          continue;
        }
        for (I64 c = 0; c < n.Dv; ++c) {
          const double got = r.out[lrow * std::size_t(n.Dv) + std::size_t(c)];
          const std::size_t o = row * std::size_t(n.Dv) + std::size_t(c);
          wo.see(e.ref.out[o], got, e.tol_out[row], [&] { return "out" + idx_string({b, h, I64(row), c}) + tag; });
          eo.see(engine.out[o], got, 2 * e.tol_out[row], [&] { return "out" + idx_string({b, h, I64(row), c}) + tag; });
        }
        if (want_lse) {
          wl.see(e.ref.lse[row], r.lse[lrow], e.tol_lse[row], [&] { return "lse" + tag; });
          el.see(engine.lse[row], r.lse[lrow], 2 * e.tol_lse[row], [&] { return "lse" + tag; });
        }
      }
  if (wo.bad + wl.bad + eo.bad + el.bad + exact_bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  for (const Worst* w : {&wo, &wl, &eo, &el})
    if (w->bad) w->report(os);
  if (exact_bad) os << "\n  " << exact_bad << " fully masked row(s) not exactly 0 / -inf, first at " << exact_where;
  return ::testing::AssertionFailure() << os.str();
}

struct DistCase {
  Dims n;
  bool causal = false;
  KeyLens key_lengths = KeyLens::none;
  std::optional<float> scale;
  float amp = 1;
  bool want_lse = true;
  int threads = 1;
};

std::string describe(const DistCase& d) {
  std::ostringstream os;
  const Dims& n = d.n;
  os << "[B=" << n.B << " Hq=" << n.Hq << " Hkv=" << n.Hkv << " Nq=" << n.Nq << " Nk=" << n.Nk << " D=" << n.D
     << " Dv=" << n.Dv << (d.causal ? " causal" : "") << " key_lengths=" << name(d.key_lengths) << " amp=" << d.amp
     << (d.want_lse ? "" : " no-lse") << " threads=" << d.threads << " ranks=" << g_ranks << "]";
  return os.str();
}

// Runs one case on every rank (collective) and checks this rank's rows.
void run_case(Dims dims, bool causal = false, KeyLens key_lengths = KeyLens::none, std::optional<float> scale = {},
              float amp = 1, bool want_lse = true, int threads = 1) {
  const DistCase d{dims, causal, key_lengths, scale, amp, want_lse, threads};
  Case c = make(d.n);
  c.causal = d.causal;
  c.key_lengths = d.key_lengths;
  c.scale = d.scale;
  c.amp = d.amp;
  c.want_probs = false;
  const std::string label = describe(d);
  SCOPED_TRACE(label);
  const Inputs s = build(c, seed_of(label.substr(0, label.find(" ranks="))));
  const Expected e = expect(s);
  ASSERT_EQ(e.oracle_issue, "");
  // The single-process engine on the whole problem.
  Outputs whole = make_outputs(d.n, c.out_layout, c.lse_layout, std::nullopt);
  run_fast(s, whole, 1);
  const F32Result engine = read(whole);
  const RingRun r = run_ring(s, d.want_lse, d.threads);
  EXPECT_TRUE(check_rows(s, e, engine, r, d.want_lse));
  EXPECT_EQ(r.stats.steps, g_ranks);
  if (!d.want_lse) {  // the lse buffer was not handed over: untouched
    for (float x : r.lse) ASSERT_TRUE(is_poison(x));
  }
}

// ---------------------------------------------------------------------------------------------

TEST(Zigzag, ChunksTileTheSequenceAndBalance) {
  for (int P = 1; P <= 6; ++P)
    for (I64 n = 0; n <= 3 * 2 * P + 1; ++n) {
      std::vector<int> owner(std::size_t(n), -1);
      I64 min_len = n, max_len = 0;
      for (int r = 0; r < P; ++r) {
        const auto rows = zigzag_rows(n, r, P);
        EXPECT_LE(rows[0].begin + rows[0].size, rows[1].begin) << "chunk r lies before chunk 2P-1-r";
        for (const Rows& c : rows) {
          EXPECT_LE(std::abs(double(c.size) - double(n) / (2.0 * P)), 1.0) << "n=" << n << " P=" << P;
          for (I64 i = c.begin; i < c.begin + c.size; ++i) {
            ASSERT_TRUE(i >= 0 && i < n) << "n=" << n << " P=" << P << " r=" << r;
            EXPECT_EQ(owner[std::size_t(i)], -1) << "position " << i << " held twice";
            owner[std::size_t(i)] = r;
          }
        }
        EXPECT_EQ(zigzag_length(n, r, P), rows[0].size + rows[1].size);
        min_len = std::min(min_len, zigzag_length(n, r, P));
        max_len = std::max(max_len, zigzag_length(n, r, P));
      }
      for (I64 i = 0; i < n; ++i) EXPECT_NE(owner[std::size_t(i)], -1) << "position " << i << " held by nobody";
      EXPECT_LE(max_len - min_len, 2) << "n=" << n << " P=" << P;
    }
  // The zig-zag order: rank 0 of 2 holds chunks 0 and 3 of [0, 8).
  const auto r0 = zigzag_rows(8, 0, 2);
  EXPECT_EQ(r0[0].begin, 0);
  EXPECT_EQ(r0[0].size, 2);
  EXPECT_EQ(r0[1].begin, 6);
  EXPECT_EQ(r0[1].size, 2);
}

TEST(Zigzag, Refusals) {
  EXPECT_THROW(zigzag_rows(-1, 0, 2), jomoim::Error);
  EXPECT_THROW(zigzag_rows(8, 0, 0), jomoim::Error);
  EXPECT_THROW(zigzag_rows(8, 2, 2), jomoim::Error);
  EXPECT_THROW(zigzag_rows(8, -1, 2), jomoim::Error);
}

TEST(Ring, NonCausal) {
  run_case({2, 4, 4, 64, 64, 16, 16});
  run_case({1, 2, 2, 37, 37, 8, 8});  // N not divisible by 2P
  run_case({1, 3, 3, 300, 300, 64, 64}, false, KeyLens::none, std::nullopt, 1, true, 2);
}

TEST(Ring, Causal) {
  run_case({2, 4, 4, 64, 64, 16, 16}, true);
  run_case({1, 2, 2, 37, 37, 8, 8}, true);
  run_case({1, 2, 1, 301, 301, 64, 64}, true, KeyLens::none, std::nullopt, 1, true, 2);
  run_case({1, 1, 1, 129, 129, 32, 40}, true);  // Dv != D, odd length crossing tiles
}

// The non-finite rule (docs/design.md, "Non-finite inputs") through the merge by lse: a NaN query row and a NaN
// key make the rows that see them NaN (out and lse), a NaN value component only that component
// of the rows that see it, and infinities in a key only the last row sees change no other row.
// Compared NaN for NaN with the float64 reference, which obeys the rule (test_attention_nonfinite).
TEST(Ring, NonFiniteInputsFollowTheRule) {
  const I64 N = 64, D = 16, H = 2;
  Case c = make({1, H, H, N, N, D, D});
  c.causal = true;
  c.want_probs = false;
  Inputs s = build(c, seed_of("ring_nonfinite"));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto at = [&](I64 h, I64 i, I64 d) { return std::size_t((h * N + i) * D + d); };
  s.Q[at(0, 40, 3)] = nan;  // query row 40 of head 0
  s.K[at(1, 50, 0)] = nan;  // key 50 of head 1: rows 50.. of head 1
  s.V[at(0, 30, 5)] = nan;  // value 30 of head 0, component 5: rows 30.. of head 0
  for (I64 d = 0; d < D; ++d) s.K[at(0, N - 1, d)] = s.V[at(0, N - 1, d)] = inf;  // only row N-1 sees it
  const auto ref = jomoim::attention_reference(jomoim::ConstTensor4::contiguous(s.Q.data(), {1, H, N, D}),
                                               jomoim::ConstTensor4::contiguous(s.K.data(), {1, H, N, D}),
                                               jomoim::ConstTensor4::contiguous(s.V.data(), {1, H, N, D}), s.options());
  const RingRun r = run_ring(s, true, 1);
  const std::vector<I64> g = global_rows(N);
  auto same = [](double want, double got) {
    return std::isnan(want) ? std::isnan(got) : std::abs(want - got) <= 1e-4 * (1 + std::abs(want));
  };
  for (I64 h = 0; h < H; ++h)
    for (std::size_t li = 0; li < g.size(); ++li) {
      const std::size_t row = std::size_t(h * N + g[li]), lrow = std::size_t(h) * g.size() + li;
      EXPECT_TRUE(same(ref.lse[row], r.lse[lrow]))
          << "lse, head " << h << ", row " << g[li] << ": " << ref.lse[row] << " vs " << r.lse[lrow];
      for (I64 e = 0; e < D; ++e)
        EXPECT_TRUE(same(ref.out[row * D + std::size_t(e)], r.out[lrow * D + std::size_t(e)]))
            << "out, head " << h << ", row " << g[li] << ", component " << e;
    }
}

TEST(Ring, ShortSequences) {  // N < 2P: empty chunks on some ranks
  for (I64 N : {0, 1, 2, 3, 5, 7})
    for (bool causal : {false, true}) run_case({2, 2, 1, N, N, 8, 4}, causal);
}

TEST(Ring, GroupedQueryHeads) {
  run_case({2, 8, 2, 45, 45, 16, 16}, true);
  run_case({1, 6, 1, 45, 45, 16, 24}, false);  // multi-query
  run_case({1, 4, 2, 66, 66, 64, 64}, true, KeyLens::none, std::nullopt, 1, true, 2);
}

TEST(Ring, KeyLengths) {
  // Mixed lengths per batch: 0, Nk, 1, Nk - 1, random; with causal masking aligned to each
  // batch's own length (rows before Nq - L see nothing).
  run_case({6, 2, 1, 41, 41, 8, 8}, false, KeyLens::mixed);
  run_case({6, 2, 1, 41, 41, 8, 8}, true, KeyLens::mixed);
  run_case({3, 2, 2, 19, 19, 16, 8}, true, KeyLens::zero);
  run_case({2, 2, 2, 19, 19, 16, 8}, true, KeyLens::full);
}

TEST(Ring, DifferentQueryAndKeyLengths) {
  run_case({1, 2, 1, 23, 50, 16, 16}, false);
  run_case({1, 2, 1, 23, 50, 16, 16}, true);  // bottom-right: every row sees >= 28 keys
  run_case({2, 2, 1, 50, 23, 16, 16}, true);  // 27 rows see nothing
  run_case({1, 2, 1, 9, 1, 8, 8}, true);
  run_case({1, 2, 1, 4, 0, 8, 8}, false);  // no keys at all: zeros and -inf
}

TEST(Ring, ScaleAmplitudeAndOptions) {
  run_case({1, 2, 2, 40, 40, 16, 16}, true, KeyLens::none, 0.3f);
  run_case({1, 2, 2, 40, 40, 16, 16}, true, KeyLens::none, std::nullopt, 30);          // scores in the hundreds
  run_case({1, 2, 2, 40, 40, 16, 16}, false, KeyLens::none, std::nullopt, 1, false);   // no lse
  run_case({1, 2, 2, 40, 40, 16, 16}, true, KeyLens::none, std::nullopt, 1, true, 0);  // OpenMP default
}

// ---------------------------------------------------------------------------------------------
// Refusals: each must make every rank throw (the call returns on every rank).

struct Refusal {
  std::string message;
  bool threw = false;
};

template <class F>
Refusal catch_error(F&& f) {
  Refusal r;
  try {
    f();
  } catch (const jomoim::Error& e) {
    r.threw = true;
    r.message = e.what();
  }
  return r;
}

TEST(RingRefusal, BadRowsOnOneRankStopEveryRank) {
  const I64 N = 20, B = 1, H = 2, D = 8;
  const I64 nq = zigzag_length(N, g_rank, g_ranks);
  std::vector<float> q(std::size_t(B * H * (nq + 1) * D), 0.5f), out(q.size(), 0.5f);
  // Rank g_ranks - 1 claims one row too many.
  const I64 mine = g_rank == g_ranks - 1 ? nq + 1 : nq;
  const auto qv = jomoim::ConstTensor4::contiguous(q.data(), {B, H, mine, D});
  const auto kv = jomoim::ConstTensor4::contiguous(q.data(), {B, H, nq, D});
  const Refusal r = catch_error([&] {
    jomoim::dist::ring_attention(MPI_COMM_WORLD, qv, kv, kv, jomoim::Tensor4::contiguous(out.data(), {B, H, mine, D}),
                                 N, N);
  });
  ASSERT_TRUE(r.threw);
  if (g_rank == g_ranks - 1) {
    EXPECT_NE(r.message.find("q: rank " + std::to_string(g_rank)), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("expected " + std::to_string(nq)), std::string::npos) << r.message;
  } else {
    EXPECT_NE(r.message.find("stopped because rank(s) " + std::to_string(g_ranks - 1) + " failed"), std::string::npos)
        << r.message;
  }
  for (float x : out) EXPECT_EQ(x, 0.5f);  // nothing written (out was filled like q)
}

TEST(RingRefusal, RanksThatDisagreeStopEveryRank) {
  if (g_ranks < 2) GTEST_SKIP() << "needs two ranks";
  const I64 N = 16, B = 1, H = 2, D = 8;
  const I64 n = zigzag_length(N, g_rank, g_ranks);
  std::vector<float> x(std::size_t(B * H * n * D), 0.25f), out(x.size(), 0.f);
  const auto view = jomoim::ConstTensor4::contiguous(x.data(), {B, H, n, D});
  RingOptions o;
  o.causal = g_rank == 1;
  const Refusal r = catch_error([&] {
    jomoim::dist::ring_attention(MPI_COMM_WORLD, view, view, view,
                                 jomoim::Tensor4::contiguous(out.data(), {B, H, n, D}), N, N, o);
  });
  ASSERT_TRUE(r.threw);
  EXPECT_NE(r.message.find("disagree on causal"), std::string::npos) << r.message;
}

TEST(RingRefusal, InjectedFailureBeforeTheRing) {
  const int victim = g_ranks > 1 ? 1 : 0;
  const I64 N = 16, B = 1, H = 1, D = 4;
  const I64 n = zigzag_length(N, g_rank, g_ranks);
  std::vector<float> x(std::size_t(B * H * n * D), 0.25f), out(x.size(), 0.f);
  const auto view = jomoim::ConstTensor4::contiguous(x.data(), {B, H, n, D});
  RingOptions o;
  o.fail_rank = victim;
  o.fail_phase = FailPhase::check;
  const Refusal r = catch_error([&] {
    jomoim::dist::ring_attention(MPI_COMM_WORLD, view, view, view,
                                 jomoim::Tensor4::contiguous(out.data(), {B, H, n, D}), N, N, o);
  });
  ASSERT_TRUE(r.threw);
  EXPECT_NE(r.message.find(g_rank == victim ? "injected failure" : "stopped because rank(s) 1 failed"),
            std::string::npos)
      << r.message;
}

TEST(RingRefusal, BadKeyLengthsOnEveryRank) {
  const I64 N = 10, B = 2, H = 1, D = 4;
  const I64 n = zigzag_length(N, g_rank, g_ranks);
  std::vector<float> x(std::size_t(B * H * n * D), 0.25f), out(x.size(), 0.f);
  const auto view = jomoim::ConstTensor4::contiguous(x.data(), {B, H, n, D});
  const std::vector<I64> lens = {3, N + 1};
  RingOptions o;
  o.key_lengths = lens;
  const Refusal r = catch_error([&] {
    jomoim::dist::ring_attention(MPI_COMM_WORLD, view, view, view,
                                 jomoim::Tensor4::contiguous(out.data(), {B, H, n, D}), N, N, o);
  });
  ASSERT_TRUE(r.threw);
  EXPECT_NE(r.message.find("key_lengths[1] = 11 is not in [0, Nk = 10]"), std::string::npos) << r.message;
}

// Run only as its own CTest: the job must end with an error (MPI_Abort), not hang.
TEST(RingAbort, FailureMidRingEndsEveryRank) {
  const char* env = std::getenv("JOMOIM_DIST_ABORT_TEST");
  if (!env || std::strcmp(env, "1") != 0) GTEST_SKIP() << "set JOMOIM_DIST_ABORT_TEST=1 (test_dist_abort)";
  const I64 N = 64, B = 1, H = 2, D = 16;
  const I64 n = zigzag_length(N, g_rank, g_ranks);
  std::vector<float> x(std::size_t(B * H * n * D), 0.25f), out(x.size(), 0.f);
  const auto view = jomoim::ConstTensor4::contiguous(x.data(), {B, H, n, D});
  RingOptions o;
  o.fail_rank = g_ranks > 1 ? 1 : 0;
  o.fail_phase = FailPhase::ring;
  jomoim::dist::ring_attention(MPI_COMM_WORLD, view, view, view, jomoim::Tensor4::contiguous(out.data(), {B, H, n, D}),
                               N, N, o);
  ADD_FAILURE() << "rank " << g_rank << " returned from a ring that was meant to abort";
}

// Prints failed checks of ranks other than 0, whose normal output is silenced.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::cerr << "[rank " << g_rank << "] " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number() << ": "
                << r.summary() << std::endl;
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  ::testing::InitGoogleTest(&argc, argv);
  if (g_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0 && any && !failed) std::cerr << "another rank failed (see its [rank N] lines)" << std::endl;
  MPI_Finalize();
  return any;
}
