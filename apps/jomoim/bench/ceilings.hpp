// ceilings.hpp — this machine's limits that the attention rates are compared with: OpenBLAS
// sgemm (fp32 compute), a memory copy (bandwidth, the decode ceiling) and the FMA peak
// (fma_peak.hpp, measured with Highway).
#pragma once

#include "bench/options.hpp"

namespace jomoim::cli::bench {

struct Sgemm {
  Index n;
  double median_ms, gflops;  // from the median call
  double gflops_best;        // from the fastest call: the ceiling when others share the cores
};
// C = A B, row-major, square n, with `threads` OpenBLAS threads.
Sgemm bench_sgemm(Index n, int threads, double min_time);
Json sgemm_json(const Sgemm& g, int threads);

struct Copy {
  Index mib;
  double best_gbs, median_gbs;
};
// Copy bandwidth over two buffers of `mib` MiB each, counted as read + write.
Copy bench_copy(Index mib, int threads);
Json copy_json(const Copy& c, int threads);

// Measures and prints (a table line, or a JSON record with --json) the ceilings asked for.
void print_ceilings(const BenchOptions& o, bool sgemm, bool copy, bool fma, int threads);

}  // namespace jomoim::cli::bench
