// Hugging Face GPT-2 model directories: config.json + model.safetensors, read and written.
// See GptModel::load and save_gpt2_checkpoint in include/jomoim/model/model.hpp.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "jomoim/formats/atomic_file.hpp"
#include "jomoim/formats/safetensors.hpp"
#include "jomoim/model/model.hpp"
#include "packed_weights.hpp"

namespace jomoim {
namespace {

namespace fs = std::filesystem;

// Looks tensors up under their Hugging Face names, with or without the "transformer." prefix,
// checks shapes, and collects what keeps the data alive.
class Loader {
 public:
  Loader(const SafetensorsFile& file, std::string label) : file_(file), label_(std::move(label)) {
    int with = 0, without = 0;
    for (const auto& t : file.tensors()) (t.name.rfind("transformer.", 0) == 0 ? with : without)++;
    prefix_ = with > without ? "transformer." : "";
  }

  const float* get(const std::string& name, std::vector<std::int64_t> shape) {
    FloatArray a = load(name, std::move(shape));
    if (!a.zero_copy) copied_ += static_cast<std::size_t>(a.numel()) * sizeof(float);
    owners_.push_back(a.keepalive);
    return a.data;
  }

  // The tensor as float32 (mapped or widened), its shape checked; kept alive by the result only.
  FloatArray load(const std::string& name, std::vector<std::int64_t> shape) {
    std::string full = prefix_ + name;
    if (!file_.find(full)) {
      // Mixed files: try the other spelling before giving up.
      std::string other = prefix_.empty() ? "transformer." + name : name;
      if (!file_.find(other)) throw Error(label_ + ": missing tensor '" + full + "'");
      full = other;
    }
    FloatArray a = file_.load_f32(full);
    if (a.shape != shape)
      throw Error(label_ + ": tensor '" + full + "' has shape " + shape_string(a.shape) + ", expected " +
                  shape_string(shape) + " from config.json");
    return a;
  }

  // A bf16 / q8 matrix: read, packed, and let go (a mapped tensor's pages are handed back to the
  // kernel, a widened copy freed), so that loading never holds the whole model in float32.
  PackedMatrix pack(WeightFormat format, const std::string& name, std::vector<std::int64_t> shape, bool conv1d) {
    FloatArray a = load(name, shape);
    const int rows = static_cast<int>(conv1d ? shape[1] : shape[0]),
              cols = static_cast<int>(conv1d ? shape[0] : shape[1]);
    PackedMatrix m = PackedMatrix::pack(format, a.data, rows, cols, conv1d, name);
    if (a.zero_copy) {
      // The whole pages inside the tensor: read-only and private, refaulted from the file if
      // anyone touched them again (nobody does).
      const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      const std::uintptr_t b = (reinterpret_cast<std::uintptr_t>(a.data) + page - 1) / page * page;
      const std::uintptr_t e = (reinterpret_cast<std::uintptr_t>(a.data + a.numel())) / page * page;
      if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
    }
    return m;
  }

  std::vector<std::shared_ptr<const void>> owners_;
  std::size_t copied_ = 0;

 private:
  const SafetensorsFile& file_;
  std::string label_;
  std::string prefix_;
};

}  // namespace

GptModel GptModel::load(const fs::path& dir, WeightFormat weights) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(dir.string() + ": not a model directory (expected config.json and model.safetensors)");
  const fs::path config_path = dir / "config.json";
  const fs::path weights_path = dir / "model.safetensors";
  if (!fs::exists(config_path, ec)) throw Error(dir.string() + ": missing config.json");
  if (!fs::exists(weights_path, ec)) throw Error(dir.string() + ": missing model.safetensors");
  const GptConfig c = GptConfig::load(config_path);
  const SafetensorsFile file = SafetensorsFile::open(weights_path);

  Loader L(file, weights_path.string());
  const std::int64_t C = c.n_embd, F = c.inner();
  if (weights != WeightFormat::f32) {
    // The matrices one at a time into their format; the float32 tensors that stay are copied
    // into the packed weights (GptModel's packed constructor) and the file let go.
    try {
      auto pw = std::make_shared<PackedWeights>();
      GptParams small;
      pw->wte = L.pack(weights, "wte.weight", {c.vocab_size, C}, false);
      small.wpe = L.get("wpe.weight", {c.n_positions, C});
      pw->blocks.resize(c.n_layer);
      small.blocks.resize(c.n_layer);
      for (int l = 0; l < c.n_layer; ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        BlockParams& b = small.blocks[l];
        PackedWeights::Block& pb = pw->blocks[l];
        b.ln_1 = {L.get(h + "ln_1.weight", {C}), L.get(h + "ln_1.bias", {C})};
        pb.c_attn = L.pack(weights, h + "attn.c_attn.weight", {C, 3 * C}, true);
        b.c_attn.bias = L.get(h + "attn.c_attn.bias", {3 * C});
        pb.c_proj = L.pack(weights, h + "attn.c_proj.weight", {C, C}, true);
        b.c_proj.bias = L.get(h + "attn.c_proj.bias", {C});
        b.ln_2 = {L.get(h + "ln_2.weight", {C}), L.get(h + "ln_2.bias", {C})};
        pb.c_fc = L.pack(weights, h + "mlp.c_fc.weight", {C, F}, true);
        b.c_fc.bias = L.get(h + "mlp.c_fc.bias", {F});
        pb.mlp_proj = L.pack(weights, h + "mlp.c_proj.weight", {F, C}, true);
        b.mlp_proj.bias = L.get(h + "mlp.c_proj.bias", {C});
      }
      small.ln_f = {L.get("ln_f.weight", {C}), L.get("ln_f.bias", {C})};
      return GptModel(c, small, std::move(pw), weights);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.rfind(weights_path.string(), 0) == 0) throw;
      throw Error(weights_path.string() + ": " + what);
    }
  }
  GptParams p;
  p.wte = L.get("wte.weight", {c.vocab_size, C});
  p.wpe = L.get("wpe.weight", {c.n_positions, C});
  p.blocks.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    BlockParams& b = p.blocks[l];
    b.ln_1 = {L.get(h + "ln_1.weight", {C}), L.get(h + "ln_1.bias", {C})};
    b.c_attn = {L.get(h + "attn.c_attn.weight", {C, 3 * C}), L.get(h + "attn.c_attn.bias", {3 * C})};
    b.c_proj = {L.get(h + "attn.c_proj.weight", {C, C}), L.get(h + "attn.c_proj.bias", {C})};
    b.ln_2 = {L.get(h + "ln_2.weight", {C}), L.get(h + "ln_2.bias", {C})};
    b.c_fc = {L.get(h + "mlp.c_fc.weight", {C, F}), L.get(h + "mlp.c_fc.bias", {F})};
    b.mlp_proj = {L.get(h + "mlp.c_proj.weight", {F, C}), L.get(h + "mlp.c_proj.bias", {C})};
  }
  p.ln_f = {L.get("ln_f.weight", {C}), L.get("ln_f.bias", {C})};
  GptModel m(c, std::move(p), std::move(L.owners_));
  m.set_copied_bytes(L.copied_);
  return m;
}

void save_gpt2_checkpoint(const fs::path& dir, const GptConfig& c, const GptParams& p,
                          const std::vector<std::pair<std::string, std::string>>& metadata) {
  c.validate();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory: " + ec.message());
  const std::int64_t C = c.n_embd, F = c.inner();
  std::vector<TensorToWrite> t;
  t.push_back({"wte.weight", {c.vocab_size, C}, p.wte});
  t.push_back({"wpe.weight", {c.n_positions, C}, p.wpe});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const BlockParams& b = p.blocks.at(l);
    t.push_back({h + "ln_1.weight", {C}, b.ln_1.weight});
    t.push_back({h + "ln_1.bias", {C}, b.ln_1.bias});
    t.push_back({h + "attn.c_attn.weight", {C, 3 * C}, b.c_attn.weight});
    t.push_back({h + "attn.c_attn.bias", {3 * C}, b.c_attn.bias});
    t.push_back({h + "attn.c_proj.weight", {C, C}, b.c_proj.weight});
    t.push_back({h + "attn.c_proj.bias", {C}, b.c_proj.bias});
    t.push_back({h + "ln_2.weight", {C}, b.ln_2.weight});
    t.push_back({h + "ln_2.bias", {C}, b.ln_2.bias});
    t.push_back({h + "mlp.c_fc.weight", {C, F}, b.c_fc.weight});
    t.push_back({h + "mlp.c_fc.bias", {F}, b.c_fc.bias});
    t.push_back({h + "mlp.c_proj.weight", {F, C}, b.mlp_proj.weight});
    t.push_back({h + "mlp.c_proj.bias", {C}, b.mlp_proj.bias});
  }
  t.push_back({"ln_f.weight", {C}, p.ln_f.weight});
  t.push_back({"ln_f.bias", {C}, p.ln_f.bias});
  for (const auto& x : t)
    if (!x.data) throw Error("save_gpt2_checkpoint: no data for " + x.name);
  std::map<std::string, std::string> meta = {{"format", "pt"}};
  for (const auto& [k, v] : metadata) meta[k] = v;
  write_safetensors(dir / "model.safetensors", t, meta);

  detail::write_text_atomic(dir / "config.json", c.to_json());
}

}  // namespace jomoim
