// self_test.hpp — `jomoim bench --quick`: the self-check of every SIMD target against the
// float64 reference on the cases of the shared table marked kQuickCheck, then a small timing
// table of those marked kQuickTiming (bench/cases/attention_cases.hpp).
#pragma once

#include "bench/options.hpp"

namespace jomoim::cli::bench {

// Throws Error when any check fails (after printing every row).
void run_quick(const BenchOptions& base);

}  // namespace jomoim::cli::bench
