// threads.cpp — resolve_threads (jomoim/engine/threads.hpp).
#include "jomoim/engine/threads.hpp"

#include <omp.h>

#include <string>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

int resolve_threads(int threads, const char* what) {
  if (threads < 0)
    throw Error(std::string(what) + ": expected 0 (OpenMP's default) or a positive count, got " +
                std::to_string(threads));
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace jomoim
