// The FMA-peak probe of `jomoim bench --fma-peak` (apps/jomoim/fma_peak.cpp): a benchmark
// ceiling that lives with the command, not in the engine's API.
#include <gtest/gtest.h>

#include <string>

#include "attention_test_util.hpp"
#include "fma_peak.hpp"

namespace {

using attn_test::PinTarget;
using attn_test::targets;

// The FMA-peak probe runs on every target (each has its own chains) and reports what it timed.
TEST(Simd, FmaPeakMeasuresEveryTargetAndRejectsBadArguments) {
  for (const std::string& t : targets()) {
    PinTarget pin(t);
    const jomoim::cli::FmaPeak f = jomoim::cli::fma_peak(1, 0.005, 3);
    EXPECT_EQ(f.runs, 3) << t;
    EXPECT_GT(f.median_gflops, 0) << t;
    EXPECT_GE(f.best_gflops, f.median_gflops) << t;
  }
  EXPECT_THROW(jomoim::cli::fma_peak(0), jomoim::Error);
  EXPECT_THROW(jomoim::cli::fma_peak(1, 0.0), jomoim::Error);
  EXPECT_THROW(jomoim::cli::fma_peak(1, 0.01, 0), jomoim::Error);
}

}  // namespace
