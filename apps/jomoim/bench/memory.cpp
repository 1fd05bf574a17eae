// memory.cpp — resident memory of this process from /proc/self (see memory.hpp).
#include "bench/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace jomoim::cli::bench {

double current_rss_mib() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return double(pages_resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Peak RSS of this process: the kernel's high-water mark VmHWM. Not getrusage's ru_maxrss: that
// also keeps the peak of the memory image replaced by exec, i.e. of the parent that forked us
// (a Python driver's 13 MiB showed up as 5 MiB of "growth" of a 8 MiB bench), and nothing
// resets it. getrusage remains the fallback where /proc/self/status has no VmHWM.
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "... kB"
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// Lowers the peak-RSS high-water mark to the current RSS (Linux >= 4.0), so that the peak read
// afterwards belongs to what runs next, not to the reference check or an earlier shape.
// Returns false where /proc refuses; the peak is then an upper bound.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

}  // namespace jomoim::cli::bench
