// memory.hpp — this process's resident memory, from /proc (Linux), for the bench's "extra MiB":
// what the engine itself allocates beyond its inputs and outputs.
#pragma once

namespace jomoim::cli::bench {

double current_rss_mib();
// Peak RSS of this process (the kernel's high-water mark VmHWM).
double peak_rss_mib();
// Lowers the peak-RSS high-water mark to the current RSS; false where /proc refuses (the peak
// read afterwards is then an upper bound).
bool reset_peak_rss();

}  // namespace jomoim::cli::bench
