// Which model directory a command uses, and where the program's data is. See model_dir.hpp.
#include "model_dir.hpp"

#include <cstdlib>
#include <optional>
#include <system_error>

#include "jomoim/core/tensor.hpp"

namespace jomoim::cli {
namespace fs = std::filesystem;

namespace {

// The folder of the running program (/proc/self/exe); empty when it cannot be read.
fs::path program_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

fs::path shared_data_path(const std::string& name) {
  const fs::path dir = program_dir();
  const fs::path installed = (dir / ".." / "share" / "jomoim" / name).lexically_normal();
  const fs::path build_tree = dir / "share" / "jomoim" / name;
  std::error_code ec;
  if (fs::exists(installed, ec)) return installed;
  if (fs::exists(build_tree, ec)) return build_tree;
  return installed;
}

std::string default_model_help() { return "$JOMOIM_MODEL, else " + shared_data_path("models/default").string(); }

ModelDir resolve_model_dir(const std::string& option) {
  ModelDir d;
  if (!option.empty()) {
    d = {option, "--model"};
  } else if (const char* env = std::getenv("JOMOIM_MODEL"); env && *env) {
    d = {env, "JOMOIM_MODEL"};
  } else {
    d = {shared_data_path("models/default"), "default"};
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

void add_kv_cache_option(CLI::App* sub, std::string& value) {
  sub->add_option("--kv-cache", value,
                  "how the KV cache stores keys and values: f32; bf16 (rounded, queries too; 2 bytes a value); "
                  "q8 (8-bit blocks of 32 with a float scale, 1.125 bytes a value); q4 (4-bit blocks of 32, 0.625 "
                  "bytes a value, about 18x q8's error)")
      ->check(CLI::IsMember({"f32", "bf16", "q8", "q4"}))
      ->capture_default_str();
}

void apply_kv_cache(GptModel& model, const std::string& value) {
  const std::optional<KvFormat> f = parse_kv_format(value);
  if (!f) throw Error("--kv-cache: unknown format '" + value + "' (f32, bf16, q8 or q4)");
  model.set_kv_format(*f);
}

void add_weights_option(CLI::App* sub, std::string& value) {
  sub->add_option("--weights", value,
                  "how the model holds its weight matrices: f32 (as loaded); bf16 (2 bytes a weight; a bf16 "
                  "checkpoint's values exactly); q8 (8-bit blocks of 32 with a float scale, quantized at load, 1.125 "
                  "bytes a weight). Activations, LayerNorms, biases and wpe stay float32")
      ->check(CLI::IsMember({"f32", "bf16", "q8"}))
      ->capture_default_str();
}

void add_matmul_option(CLI::App* sub, std::string& value) {
  sub->add_option("--matmul", value,
                  "precision of the prompt's matrix products (more than 16 tokens at once): f32 (float32 inputs, what "
                  "the float model computes on the --weights format's values); bf16 (activations and weights rounded "
                  "to bf16 for oneDNN's matmul, float32 sums: AMX or AVX512_BF16 where the CPU has them; faster "
                  "prefill, logits off by about 1e-2 relative). Decoding one token is float32 either way")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
}

GptModel load_model(const std::filesystem::path& dir, const std::string& weights, const std::string& matmul) {
  const std::optional<WeightFormat> f = parse_weight_format(weights);
  if (!f) throw Error("--weights: unknown format '" + weights + "' (f32, bf16 or q8)");
  const std::optional<MatmulPrecision> mp = parse_matmul_precision(matmul);
  if (!mp) throw Error("--matmul: unknown precision '" + matmul + "' (f32 or bf16)");
  GptModel model = GptModel::load(dir, *f);
  model.set_matmul(*mp);
  return model;
}

}  // namespace jomoim::cli
