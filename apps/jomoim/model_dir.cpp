// Which model directory a command uses. See model_dir.hpp.
#include "model_dir.hpp"

#include <cstdlib>
#include <system_error>

#include "jomoim/tensor.hpp"

#ifndef JOMOIM_DEFAULT_MODEL_DIR
#define JOMOIM_DEFAULT_MODEL_DIR "models/default"
#endif

namespace jomoim::cli {

std::string default_model_help() {
  return std::string("$JOMOIM_MODEL, else ") + JOMOIM_DEFAULT_MODEL_DIR;
}

ModelDir resolve_model_dir(const std::string& option) {
  namespace fs = std::filesystem;
  ModelDir d;
  if (!option.empty()) {
    d = {option, "--model"};
  } else if (const char* env = std::getenv("JOMOIM_MODEL"); env && *env) {
    d = {env, "JOMOIM_MODEL"};
  } else {
    d = {JOMOIM_DEFAULT_MODEL_DIR, "default"};
    std::error_code ec;
    if (!fs::is_directory(d.path, ec))
      throw Error("no --model given and no default model at " + d.path.string() +
                  " (pass --model DIR with a GPT-2 model directory, or set JOMOIM_MODEL)");
  }
  std::error_code ec;
  if (!fs::exists(d.path, ec)) throw Error(d.source + " " + d.path.string() + ": no such directory");
  if (!fs::is_directory(d.path, ec)) throw Error(d.source + " " + d.path.string() + ": not a directory");
  return d;
}

}  // namespace jomoim::cli
