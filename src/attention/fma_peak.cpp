// fma_peak.cpp — the fp32 FMA rate of this machine, measured (jomoim/simd.hpp).
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

#include "jomoim/simd.hpp"
#include "jomoim/tensor.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/fma_peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `iterations` steps of 12 FMAs on full vectors; returns a lane of the result (so nothing is
// optimised away) and the vector width in *lanes. `seed` is a run-time value: the chains cannot
// be folded at compile time, and each starts elsewhere, so none can be merged with another.
float FmaChains(std::int64_t iterations, float seed, std::int64_t* lanes) {
  const hn::ScalableTag<float> d;
  *lanes = std::int64_t(hn::Lanes(d));
  const auto x = hn::Set(d, 0.9999999f), y = hn::Set(d, 1e-7f);
  auto a0 = hn::Set(d, seed), a1 = hn::Set(d, seed + 1), a2 = hn::Set(d, seed + 2), a3 = hn::Set(d, seed + 3);
  auto a4 = hn::Set(d, seed + 4), a5 = hn::Set(d, seed + 5), a6 = hn::Set(d, seed + 6), a7 = hn::Set(d, seed + 7);
  auto a8 = hn::Set(d, seed + 8), a9 = hn::Set(d, seed + 9), a10 = hn::Set(d, seed + 10), a11 = hn::Set(d, seed + 11);
  for (std::int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, x, y);
    a1 = hn::MulAdd(a1, x, y);
    a2 = hn::MulAdd(a2, x, y);
    a3 = hn::MulAdd(a3, x, y);
    a4 = hn::MulAdd(a4, x, y);
    a5 = hn::MulAdd(a5, x, y);
    a6 = hn::MulAdd(a6, x, y);
    a7 = hn::MulAdd(a7, x, y);
    a8 = hn::MulAdd(a8, x, y);
    a9 = hn::MulAdd(a9, x, y);
    a10 = hn::MulAdd(a10, x, y);
    a11 = hn::MulAdd(a11, x, y);
  }
  const auto s = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                         hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  return hn::GetLane(s);
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim {
namespace detail {
HWY_EXPORT(FmaChains);
}  // namespace detail

FmaPeak fma_peak(int threads, double seconds, int runs) {
  if (threads < 1) throw Error("fma peak: threads must be at least 1, got " + std::to_string(threads));
  if (!(seconds > 0)) throw Error("fma peak: seconds per run must be positive");
  if (runs < 1) throw Error("fma peak: runs must be at least 1, got " + std::to_string(runs));
  using Clock = std::chrono::steady_clock;
  // One parallel run of `iterations` steps per thread; returns its seconds. Every step is 12
  // FMAs on `lanes` lanes, 2 flops each.
  std::int64_t lanes = 1;
  auto run = [&](std::int64_t iterations) {
    float sink = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      std::int64_t l = 1;
      sink += HWY_DYNAMIC_DISPATCH(detail::FmaChains)(iterations, 1.0f + float(omp_get_thread_num()), &l);
#pragma omp master
      lanes = l;
    }
    volatile float keep = sink;  // the chains' result is used
    (void)keep;
    return std::max(std::chrono::duration<double>(Clock::now() - t0).count(), 1e-9);
  };
  // A short probe sizes the runs to about `seconds` each.
  const std::int64_t probe = 1 << 18;
  const std::int64_t iterations = std::max<std::int64_t>(probe, std::int64_t(double(probe) * seconds / run(probe)));
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) {
    const double took = run(iterations);
    rates.push_back(2.0 * 12.0 * double(lanes) * double(iterations) * double(threads) / took / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  FmaPeak r;
  r.runs = runs;
  r.best_gflops = rates.back();
  r.median_gflops = rates.size() % 2 ? rates[rates.size() / 2]
                                     : 0.5 * (rates[rates.size() / 2 - 1] + rates[rates.size() / 2]);
  return r;
}

}  // namespace jomoim
#endif  // HWY_ONCE
