// jomoim/simd.hpp — which SIMD instruction set the kernels run on.
//
// The library is compiled for several x86 targets (SSE4, AVX2, AVX-512 ...) through Highway and
// picks the best one the CPU supports at run time. Tests and benchmarks can pin one target to
// check every code path on one machine.
#pragma once

#include <string>
#include <vector>

namespace jomoim {

// Targets compiled into the library that this CPU can run, best first (e.g. "AVX3", "AVX2",
// "SSE4", "EMU128").
std::vector<std::string> simd_targets();

// The target the kernels dispatch to now.
std::string active_simd_target();

// Restricts dispatch to the named target (one of simd_targets()); "" restores the default.
// Throws Error for an unknown name. Not thread-safe: call it between attention calls.
void set_simd_target(const std::string& name);

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

}  // namespace jomoim
