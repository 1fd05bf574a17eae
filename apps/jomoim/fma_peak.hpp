// fma_peak.hpp — the fp32 FMA peak of this machine, measured for `jomoim bench --fma-peak`.
// A benchmark ceiling, not part of the engine: it lives with the command that reports it.
#pragma once

namespace jomoim::cli {

// The fp32 FMA rate of `threads` cores on the active target: twelve independent chains of
// vector FMAs per thread that never leave the registers, so nothing limits them but the FMA
// units (`jomoim bench --fma-peak`). `runs` runs of about `seconds` each; a run can only be
// slowed by other work, so the best is the peak. Throws Error for threads or runs below 1, or
// seconds not positive.
struct FmaPeak {
  double best_gflops = 0, median_gflops = 0;
  int runs = 0;
};
FmaPeak fma_peak(int threads, double seconds = 0.2, int runs = 3);

}  // namespace jomoim::cli
