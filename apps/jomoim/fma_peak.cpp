// fma_peak.cpp — the fp32 FMA rate of this machine, measured (fma_peak.hpp).
//
// Twelve independent chains of vector fused multiply-adds that stay in registers: no loads, no
// stores, nothing for the chains to wait on but the FMA units, so the rate is the cores' fp32
// FMA peak for the active SIMD target. Twelve chains cover an FMA latency of 4-6 cycles at two
// issues per cycle; AVX2's 16 registers hold them with the two operands.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fma_peak.hpp"
#include "jomoim/core/tensor.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `iterations` steps of kChains FMAs on full vectors; returns a lane of the result (so nothing is
// optimised away) and the flops of one step in *flops_per_step. `seed` is a run-time value: the
// chains cannot be folded at compile time, and each starts elsewhere, so none can be merged with
// another. The array is indexed by constants only, so every chain lives in a register.
float FmaChains(std::int64_t iterations, float seed, std::int64_t* flops_per_step) {
  constexpr int kChains = 12;
  const hn::ScalableTag<float> d;
  *flops_per_step = 2 * kChains * std::int64_t(hn::Lanes(d));
  const auto x = hn::Set(d, 0.9999999f), y = hn::Set(d, 1e-7f);
  hn::Vec<decltype(d)> a[kChains];
  for (int c = 0; c < kChains; ++c) a[c] = hn::Set(d, seed + float(c));
  for (std::int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) a[c] = hn::MulAdd(a[c], x, y);
  for (int c = 1; c < kChains; ++c) a[0] = hn::Add(a[0], a[c]);
  return hn::GetLane(a[0]);
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim {
namespace detail {
HWY_EXPORT(FmaChains);
}  // namespace detail
namespace cli {

FmaPeak fma_peak(int threads, double seconds, int runs) {
  if (threads < 1) throw Error("fma peak: threads must be at least 1, got " + std::to_string(threads));
  if (!(seconds > 0)) throw Error("fma peak: seconds per run must be positive");
  if (runs < 1) throw Error("fma peak: runs must be at least 1, got " + std::to_string(runs));
  using Clock = std::chrono::steady_clock;
  // One parallel run of `iterations` steps per thread; returns its seconds.
  std::int64_t flops_per_step = 1;
  auto run = [&](std::int64_t iterations) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      std::int64_t f = 1;
      sink += HWY_DYNAMIC_DISPATCH(detail::FmaChains)(iterations, 1.0f + float(omp_get_thread_num()), &f);
#pragma omp master
      flops_per_step = f;
    }
    volatile float keep = sink;  // the chains' result is used
    (void)keep;
    return std::max(std::chrono::duration<double>(Clock::now() - t0).count(), 1e-9);
  };
  // A short probe sizes the runs to about `seconds` each. It runs twice and the second one
  // counts: the first also starts OpenMP's threads, which is no part of the FMA rate.
  const std::int64_t probe = 1 << 18;
  run(probe);
  const std::int64_t iterations = std::max<std::int64_t>(probe, std::int64_t(double(probe) * seconds / run(probe)));
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) {
    const double took = run(iterations);
    rates.push_back(double(flops_per_step) * double(iterations) * double(threads) / took / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  FmaPeak r;
  r.runs = runs;
  r.best_gflops = rates.back();
  r.median_gflops =
      rates.size() % 2 ? rates[rates.size() / 2] : 0.5 * (rates[rates.size() / 2 - 1] + rates[rates.size() / 2]);
  return r;
}

}  // namespace cli
}  // namespace jomoim
#endif  // HWY_ONCE
