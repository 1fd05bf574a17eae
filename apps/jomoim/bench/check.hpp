// check.hpp — the bench's check of the engine's output against jomoim::attention_reference,
// with a tolerance derived from float32's worst-case rounding of the computation. It catches a
// wrong tile, stride, head mapping or mask edge; the tests (tests/) hold the precise checks.
#pragma once

#include <string>

#include "jomoim/engine/attention.hpp"

#include "bench/workload.hpp"

namespace jomoim::cli::bench {

struct Tolerance {
  double out, lse;
};
Tolerance float32_tolerance(const Workload& w, const AttentionShape& s);

struct CheckResult {
  std::string mode;  // "full", "N rows", "skipped"
  double max_err = 0, tol = 0;
  bool ok = true;
  std::string worst;  // where the largest error was, for the FAIL message
};

// Compares the engine's out (and lse, when the workload asks for it) with a reference result of
// the whole problem.
CheckResult compare_full(const Workload& w, const ReferenceResult& r, const Tolerance& tol);

// The whole output for small problems, a sample of rows for large ones (paper layout, no bias,
// no key lengths: what the bench command itself builds).
CheckResult check_output(Workload& w, unsigned seed);

}  // namespace jomoim::cli::bench
