// model_dir.hpp — where a command finds its model and the explorer's page.
//
// Nothing is found through a path compiled in: data sits beside the program. An installed
// jomoim (cmake --install) has <prefix>/bin/jomoim and <prefix>/share/jomoim/{models/default,
// web}; the build tree has <build>/jomoim and <build>/share/jomoim, links to the source tree's
// models/ and web/ that CMake makes at configure time.
//
// The model: --model DIR if given; else the JOMOIM_MODEL environment variable; else the default
// model, share/jomoim/models/default beside the program.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "jomoim/model/model.hpp"

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

// share/jomoim/<name> beside the running program (../share/jomoim/<name> from its folder when
// installed, share/jomoim/<name> in the build tree): the first of the two that exists, else the
// installed location (for messages).
std::filesystem::path shared_data_path(const std::string& name);

// --kv-cache f32|bf16|q8|q4 on a model command (the KvFormat of its caches; default f32), and its
// effect once the model is loaded (Error when the model cannot hold that format).
void add_kv_cache_option(CLI::App* sub, std::string& value);
void apply_kv_cache(GptModel& model, const std::string& value);

// --weights f32|bf16|q8 on a model command (the WeightFormat; default f32), and GptModel::load
// in that format (Error for an unknown name, or a model that format cannot hold).
void add_weights_option(CLI::App* sub, std::string& value);
// --matmul f32|bf16 on a model command: the precision of a prompt's matrix products
// (GptModel::set_matmul; default f32).
void add_matmul_option(CLI::App* sub, std::string& value);
// GptModel::load in `weights`' format with `matmul`'s precision (Error for an unknown name, or a
// model that format cannot hold).
GptModel load_model(const std::filesystem::path& dir, const std::string& weights, const std::string& matmul = "f32");

}  // namespace jomoim::cli
