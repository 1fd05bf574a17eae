// self_test.cpp — `jomoim bench --quick` (see self_test.hpp).
#include "bench/self_test.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "attention_cases.hpp"
#include "jomoim/core/half.hpp"
#include "jomoim/engine/simd.hpp"
#include "jomoim/engine/threads.hpp"

#include "bench/attention_run.hpp"
#include "bench/ceilings.hpp"
#include "bench/check.hpp"
#include "bench/timing.hpp"
#include "bench/workload.hpp"

namespace jomoim::cli::bench {
namespace {

// Runs every self-check case on every SIMD target, with 1 thread and with all of them.
bool quick_self_check(const BenchOptions& o, int threads) {
  const std::vector<std::string> targets = simd_targets();
  std::vector<int> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);
  std::string target_list;
  for (const auto& t : targets) target_list += (target_list.empty() ? "" : ",") + t;
  if (!o.json)
    std::printf("self-check against the float64 reference (targets %s; 1 and %d threads)\n", target_list.c_str(),
                threads);
  const std::vector<cases::Case> checks = cases::used_by(cases::kQuickCheck);
  int name_width = 0;
  for (const cases::Case& c : checks) name_width = std::max(name_width, int(c.name.size()) + 5);
  int failed = 0;
  // Each case twice: float32 inputs, then the same numbers rounded to bf16 (the 16-bit kernels:
  // AVX3_BF16's VDPBF16PS products and AMX_BF16's tiles run only on those), against the float64
  // reference on the rounded inputs.
  for (const cases::Case& c : checks)
    for (const Dtype dtype : {Dtype::f32, Dtype::bf16}) {
      Workload w = Workload::from_case(c, c.want_lse);
      w.dtype = dtype;
      w.allocate(o.seed);
      const std::string label = w.name + (dtype == Dtype::f32 ? "" : " bf16");
      const AttentionShape s = w.shape();
      const Tolerance tol = float32_tolerance(w, s);
      const ReferenceResult ref = attention_reference(w.qv(), w.kv(), w.vv(), w.options(1));
      CheckResult worst{"full", 0, tol.out, true, ""};
      std::string worst_run;
      for (const auto& target : targets)
        for (int t : thread_counts) {
          set_simd_target(target);
          w.run(t);
          const CheckResult r = compare_full(w, ref, tol);
          if ((!r.ok && worst.ok) || (r.ok == worst.ok && r.max_err / r.tol > worst.max_err / worst.tol)) {
            worst = r;
            worst_run = target + ", " + std::to_string(t) + " thread" + (t > 1 ? "s" : "");
          }
        }
      set_simd_target(o.target);
      failed += !worst.ok;
      if (o.json) {
        std::printf("%s\n", Json{{"kind", "check"},
                                 {"case", w.name},
                                 {"dtype", dtype_name(dtype)},
                                 {"status", worst.ok ? "pass" : "fail"},
                                 {"max_err", worst.max_err},
                                 {"tol", worst.tol},
                                 {"worst_run", worst_run},
                                 {"worst", worst.worst}}
                                .dump()
                                .c_str());
      } else {
        std::printf("  %s  %-*s %-30s max err %.1e (tol %.1e, worst on %s)\n", worst.ok ? "PASS" : "FAIL", name_width,
                    label.c_str(), w.shape_label().c_str(), worst.max_err, worst.tol, worst_run.c_str());
        if (!worst.ok) std::printf("        %s, seed %u\n", worst.worst.c_str(), o.seed);
      }
    }
  return failed == 0;
}

}  // namespace

void run_quick(const BenchOptions& base) {
  const int threads = resolve_threads(base.threads);
  const bool checks_pass = quick_self_check(base, threads);

  // A short timing table; each row is still checked against the reference before it is timed.
  BenchOptions o = base;
  o.min_time = std::min(base.min_time, 0.25);  // "well under a minute" for the whole command
  std::vector<std::pair<Workload, AttentionRun>> results;
  bool timing_checks_pass = true;
  for (const cases::Case& c : cases::used_by(cases::kQuickTiming)) {
    Workload w = Workload::from_case(c, false);
    w.allocate(o.seed);
    std::fprintf(stderr, "bench: timing %s%s ...\n", w.shape_label().c_str(), w.causal ? " causal" : "");
    AttentionRun r = bench_attention(w, o, threads);
    timing_checks_pass = timing_checks_pass && r.check.ok;
    if (o.json) std::printf("%s\n", attention_json(w, r, threads).dump().c_str());
    results.emplace_back(std::move(w), std::move(r));
  }
  std::fprintf(stderr, "bench: timing the OpenBLAS sgemm ceiling ...\n");
  const Sgemm g = bench_sgemm(std::min<Index>(o.sgemm_n, 1536), threads, o.min_time);
  if (o.json) {
    std::printf("%s\n", sgemm_json(g, threads).dump().c_str());
  } else {
    // The ceiling is the fastest sgemm call: on a shared machine the median sgemm call may be
    // slowed by other work that the shorter attention calls' medians escaped.
    std::printf(
        "\ntiming, %d threads, target %s (median of >= %d calls and %.2f s; sgemm ceiling "
        "%.1f GFLOP/s at n=%lld, fastest call)\n",
        threads, active_simd_target().c_str(), o.reps, o.min_time, g.gflops_best, (long long)g.n);
    std::printf("  %-36s %-6s %10s %8s %8s %7s %10s\n", "shape", "causal", "median ms", "GFLOP/s", "% sgemm", "GB/s",
                "extra MiB");
    bool above_ceiling = false;
    for (const auto& [w, r] : results) {
      if (!r.check.ok) {
        std::printf("  %-36s %-6s FAIL: %s\n", w.shape_label().c_str(), w.causal ? "yes" : "no", r.check.worst.c_str());
        continue;
      }
      above_ceiling = above_ceiling || r.gflops > g.gflops_best;
      std::printf("  %-36s %-6s %10s %8.1f %7.1f%% %7.1f %10.1f\n", w.shape_label().c_str(), w.causal ? "yes" : "no",
                  format_ms(r.timing.median_ms).c_str(), r.gflops, 100.0 * r.gflops / g.gflops_best, r.gbs,
                  r.extra_mib);
    }
    if (above_ceiling)
      std::printf(
          "  (above 100%%: the sgemm ceiling was measured while other work used the cores; "
          "run again on a quiet machine)\n");
  }
  if (!checks_pass || !timing_checks_pass)
    throw Error("bench --quick: the fast path disagrees with the float64 reference (see FAIL above)");
}

}  // namespace jomoim::cli::bench
