// attend_dist.hpp — `jomoim attend --distributed`: the attend command as ring attention over MPI
// (cmd_attend_dist.cpp). cmd_attend.cpp parses the options and hands them over unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jomoim::cli {

struct DistAttendArgs {
  std::string q, k, v, bias;    // input files
  std::string out, lse, probs;  // output files (lse, probs optional)
  bool causal = false;
  bool has_scale = false;
  double scale = 0;
  std::string notation = "paper";
  int threads = 0;
  std::vector<std::int64_t> key_lengths;
};

// Runs under mpirun: every rank reads its zig-zag rows of Q, K and V from the files, the ranks
// compute with jomoim::dist::ring_attention, and each rank writes its rows of OUT (and LSE) into
// one temporary file per output, which rank 0 renames into place once every rank has written.
// Throws Error on every rank when any rank fails before or after the ring (the failing rank
// with its own message); refuses --probs, --bias and 3b1b notation. Without MPI in the build:
// throws Error saying so.
void run_attend_distributed(const DistAttendArgs& args);

}  // namespace jomoim::cli
