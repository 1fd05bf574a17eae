// jomoim/engine/threads.hpp — what a thread count means, once for every part and front end.
//
// threads = 0 means OpenMP's default, everywhere (AttentionOptions::threads, the model's
// set_threads, training, every --threads option of the CLI): omp_get_max_threads(), which is
// OMP_NUM_THREADS when that is set and one thread per core otherwise. A positive count is used
// as given. Negative counts are refused. (Python spells the default None and refuses 0.)
#pragma once

namespace jomoim {

// The count `threads` stands for: threads itself when positive, OpenMP's default for 0. Throws
// Error ("<what>: expected 0 (OpenMP's default) or a positive count, got -1") when negative.
int resolve_threads(int threads, const char* what = "threads");

// The one help text of every --threads option.
inline constexpr const char* threads_help =
    "threads (0: OpenMP's default, i.e. OMP_NUM_THREADS if set, else one per core)";

}  // namespace jomoim
