// timing.hpp — the bench's timing loop: warm-up calls, then timed calls until there are enough
// of them and enough seconds have passed; the median is what the bench reports.
#pragma once

#include <functional>
#include <string>

namespace jomoim::cli::bench {

// Seconds on the steady clock.
double now_s();

struct Timing {
  double median_ms = 0, min_ms = 0, mean_ms = 0;  // mean: shows stalls the median hides
  int reps = 0, warmup = 0;
};

// `warmup` untimed calls, then timed calls until there are at least `reps` and `min_time`
// seconds have passed (capped at 10000 calls, for tiny shapes).
Timing time_calls(const std::function<void()>& call, int warmup, int reps, double min_time);

// Milliseconds with three significant digits or so ("812", "81.2", "8.12", "0.812").
std::string format_ms(double ms);

}  // namespace jomoim::cli::bench
