// model_dir.hpp — which model directory a command uses.
//
// Order: --model DIR if given; else the JOMOIM_MODEL environment variable; else the default
// model shipped in the repository (models/default, found through the source path compiled in).
#pragma once

#include <filesystem>
#include <string>

namespace jomoim::cli {

struct ModelDir {
  std::filesystem::path path;
  std::string source;  // "--model", "JOMOIM_MODEL" or "default"
};

// Throws Error with a one-line message when no directory is given and no default exists, or
// when the chosen path is not a directory.
ModelDir resolve_model_dir(const std::string& option);
// For help texts: where the default is looked for.
std::string default_model_help();

}  // namespace jomoim::cli
