// timing.cpp — the timing loop of `jomoim bench` (see timing.hpp).
#include "bench/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace jomoim::cli::bench {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Timing time_calls(const std::function<void()>& call, int warmup, int reps, double min_time) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> ms;
  const double start = now_s();
  while (ms.size() < 10000 && (int(ms.size()) < reps || now_s() - start < min_time)) {
    const double t0 = now_s();
    call();
    ms.push_back((now_s() - t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double t : ms) sum += t;
  return {ms[ms.size() / 2], ms.front(), sum / double(ms.size()), int(ms.size()), warmup};
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : ms >= 1 ? "%.2f" : "%.3f", ms);
  return buf;
}

}  // namespace jomoim::cli::bench
