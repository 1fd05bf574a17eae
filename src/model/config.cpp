// GptConfig: Hugging Face GPT-2 config.json in and out. See include/jomoim/model/model.hpp.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "jomoim/model/model.hpp"

namespace jomoim {
namespace {

using nlohmann::json;

// Parameters of a GPT-2 with these sizes (the tied output head counted once): wte, wpe, per
// block ln_1, c_attn, c_proj, ln_2, c_fc, mlp.c_proj, then ln_f. In T: double to bound it
// before the int64 count can overflow.
template <class T>
T count_parameters(T vocab, T positions, T layers, T C, T F) {
  const T per_block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * F + F) + (F * C + C);
  return vocab * C + positions * C + layers * per_block + 2 * C;
}

// A string from the file as JSON writes it (quotes and escapes): messages stay one line.
std::string quoted(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_tanh_gelu(const std::string& a) { return a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast"; }

int read_int(const json& j, const char* key, const std::string& name, bool required, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw Error(name + ": missing \"" + key + "\"");
    return fallback;
  }
  if (!it->is_number_integer()) throw Error(name + ": \"" + key + "\" must be an integer, got " + it->dump());
  const auto v = it->get<long long>();
  if (v <= 0 || v > (1 << 30)) throw Error(name + ": \"" + key + "\" must be in [1, 2^30], got " + std::to_string(v));
  return static_cast<int>(v);
}

}  // namespace

void GptConfig::validate() const {
  auto positive = [](const char* what, long long v) {
    if (v <= 0) throw Error(std::string("config: ") + what + " must be positive, got " + std::to_string(v));
  };
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_embd", n_embd);
  positive("n_positions", n_positions);
  positive("vocab_size", vocab_size);
  if (n_inner < 0) throw Error("config: n_inner must be positive or null, got " + std::to_string(n_inner));
  if (n_embd % n_head != 0)
    throw Error("config: n_embd (" + std::to_string(n_embd) + ") is not a multiple of n_head (" +
                std::to_string(n_head) + ")");
  if (!(layer_norm_epsilon > 0.0f) || !std::isfinite(layer_norm_epsilon))
    throw Error("config: layer_norm_epsilon must be a positive finite number");
  if (!is_tanh_gelu(activation_function) && activation_function != "gelu")
    throw Error("config: activation_function " + quoted(activation_function) +
                " is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)");
  // The count in double first: every size may be up to 2^30, whose products would overflow
  // int64 (and no machine loads 2^40 parameters).
  const double F = n_inner > 0 ? double(n_inner) : 4.0 * n_embd;  // inner(), without its int overflow
  const double count = count_parameters<double>(vocab_size, n_positions, n_layer, n_embd, F);
  if (count > double(kMaxParameters)) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", count);
    throw Error(std::string("config: the sizes make ") + n + " parameters, more than 2^40");
  }
}

GptConfig GptConfig::from_json(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(name + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception&) {  // e.g. out_of_range: a number beyond double ("1e999")
    throw Error(name + ": not valid JSON (a number out of range)");
  }
  if (!j.is_object()) throw Error(name + ": expected a JSON object");
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string() && *mt != "gpt2")
    throw Error(name + ": model_type is " + quoted(mt->get<std::string>()) + ", expected \"gpt2\"");
  GptConfig c;
  c.n_layer = read_int(j, "n_layer", name, true, 0);
  c.n_head = read_int(j, "n_head", name, true, 0);
  c.n_embd = read_int(j, "n_embd", name, true, 0);
  c.n_positions = read_int(j, "n_positions", name, false, 0);
  if (c.n_positions == 0) c.n_positions = read_int(j, "n_ctx", name, true, 0);
  c.vocab_size = read_int(j, "vocab_size", name, true, 0);
  c.n_inner = read_int(j, "n_inner", name, false, 0);
  if (auto it = j.find("layer_norm_epsilon"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) throw Error(name + ": \"layer_norm_epsilon\" must be a number");
    // Checked as a double: converting one outside float's range is undefined.
    const double e = it->get<double>();
    if (!(e > 0) || !(e <= double(std::numeric_limits<float>::max())))
      throw Error(name + ": \"layer_norm_epsilon\" must be a positive float32 number, got " + it->dump());
    c.layer_norm_epsilon = static_cast<float>(e);
  }
  if (auto it = j.find("activation_function"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw Error(name + ": \"activation_function\" must be a string");
    c.activation_function = it->get<std::string>();
  }
  try {
    c.validate();
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("config: ", 0) == 0) msg = msg.substr(8);
    throw Error(name + ": " + msg);
  }
  return c;
}

GptConfig GptConfig::load(const std::filesystem::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) throw Error(config_json.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), config_json.string());
}

std::string GptConfig::to_json() const {
  json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_layer", n_layer},
      {"n_head", n_head},
      {"n_embd", n_embd},
      {"n_positions", n_positions},
      {"n_ctx", n_positions},
      {"vocab_size", vocab_size},
      {"n_inner", n_inner > 0 ? json(n_inner) : json(nullptr)},
      {"layer_norm_epsilon", layer_norm_epsilon},
      {"activation_function", activation_function},
      {"bos_token_id", vocab_size - 1},
      {"eos_token_id", vocab_size - 1},
      {"tie_word_embeddings", true},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"initializer_range", 0.02},
  };
  return j.dump(2) + "\n";
}

std::int64_t GptConfig::parameter_count() const {
  return count_parameters<std::int64_t>(vocab_size, n_positions, n_layer, n_embd, inner());
}

}  // namespace jomoim
