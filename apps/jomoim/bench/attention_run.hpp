// attention_run.hpp — one shape measured: the first call checked against the reference, then
// timed; memory growth in two windows around the check; the JSON record of the result.
#pragma once

#include "bench/check.hpp"
#include "bench/options.hpp"
#include "bench/timing.hpp"
#include "bench/workload.hpp"

namespace jomoim::cli::bench {

struct AttentionRun {
  CheckResult check;
  Timing timing;
  double gflops = 0, gbs = 0;
  double rss_inputs_mib = 0;  // RSS once inputs and outputs exist, before the first call
  double peak_rss_mib = 0;    // the peak (VmHWM) over the engine's calls
  double extra_mib = 0;       // the engine's own growth: peak RSS over the RSS it started from
  bool peak_reset = false;
  bool repeat_bitwise = false;  // the last timed call's output equals the first call's, bit for bit
};

// GFLOP/s is jomoim::attention_flops over the median time. Returns early (untimed) when the
// check fails.
AttentionRun bench_attention(Workload& w, const BenchOptions& o, int threads);

// The record `bench --json` prints for one shape (kind "attention").
Json attention_json(const Workload& w, const AttentionRun& r, int threads);

}  // namespace jomoim::cli::bench
