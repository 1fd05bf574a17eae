// Parsing the API's request bodies. See request.hpp.
#include "request.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

namespace jomoim::serve {
namespace {

using nlohmann::json;

// A field name from the request, quoted and cut short, safe to put in a one-line message.
std::string quoted(const std::string& name) {
  std::string q = json(name).dump(-1, ' ', true, json::error_handler_t::replace);
  if (q.size() > 40) q = q.substr(0, 36) + "...\"";
  return q;
}

[[noreturn]] void refuse(const std::string& message) { throw RequestError(400, message); }

json parse_object(std::string_view body, const RequestLimits& limits) {
  if (body.size() > limits.max_body_bytes)
    throw RequestError(413, "the request body has " + std::to_string(body.size()) + " bytes; the limit is " +
                                std::to_string(limits.max_body_bytes));
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) refuse("the request body is not valid JSON (UTF-8)");
  if (!j.is_object()) refuse("the request body must be a JSON object, got " + std::string(j.type_name()));
  return j;
}

std::string get_prompt(const json& j, const char* name, const RequestLimits& limits) {
  const json& v = j.at(name);
  if (!v.is_string()) refuse(std::string("\"") + name + "\" must be a string, got " + v.type_name());
  std::string s = v.get<std::string>();
  if (s.size() > limits.max_prompt_bytes)
    refuse(std::string("\"") + name + "\" has " + std::to_string(s.size()) + " bytes; the limit is " +
           std::to_string(limits.max_prompt_bytes));
  return s;
}

// An integer field in [lo, hi]; floats (even 1.0), booleans and strings are refused.
int get_int(const json& v, const std::string& name, std::int64_t lo, std::int64_t hi, const std::string& why) {
  if (!v.is_number_integer()) refuse(name + " must be an integer, got " + v.type_name());
  bool in_range;
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (in_range) x = static_cast<std::int64_t>(u);
  } else {
    x = v.get<std::int64_t>();
    in_range = true;
  }
  if (!in_range || x < lo || x > hi)
    refuse(name + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + " (" + why + "), got " + v.dump());
  return static_cast<int>(x);
}

}  // namespace

ExplainRequest parse_explain_request(std::string_view body, const ModelShape& shape, const RequestLimits& limits) {
  const json j = parse_object(body, limits);
  static const std::set<std::string> known = {"prompt",      "compare", "layer",    "head",   "notation",  "silence",
                                              "swap_qk",     "top",     "matrices", "target", "contrast",  "generate",
                                              "temperature", "top_k",   "top_p",    "seed",   "ignore_eos"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key))
      refuse("unknown field " + quoted(key) +
             " (known: prompt, compare, layer, head, notation, silence, swap_qk, top, matrices, target, contrast, "
             "generate, temperature, top_k, top_p, seed, ignore_eos)");
  if (!j.contains("prompt")) refuse("the field \"prompt\" is required");

  ExplainRequest r;
  r.prompt = get_prompt(j, "prompt", limits);
  if (j.contains("compare") && !j["compare"].is_null()) r.options.compare = get_prompt(j, "compare", limits);
  // One token each; explain() refuses anything else (400 with its message).
  if (j.contains("target") && !j["target"].is_null()) r.options.target = get_prompt(j, "target", limits);
  if (j.contains("contrast") && !j["contrast"].is_null()) r.options.contrast = get_prompt(j, "contrast", limits);
  if (j.contains("layer") && !j["layer"].is_null())
    r.options.layer = get_int(j["layer"], "\"layer\"", 0, shape.n_layer - 1,
                              "the model has " + std::to_string(shape.n_layer) + " layers");
  if (j.contains("head") && !j["head"].is_null())
    r.options.head = get_int(j["head"], "\"head\"", 0, shape.n_head - 1,
                             "the model has " + std::to_string(shape.n_head) + " heads per layer");
  if (j.contains("notation") && !j["notation"].is_null()) {
    const json& n = j["notation"];
    if (!n.is_string()) refuse(std::string("\"notation\" must be \"paper\" or \"3b1b\", got ") + n.type_name());
    const std::string s = n.get<std::string>();
    if (s != notation_name(Notation::paper) && s != notation_name(Notation::col3b1b))
      refuse("\"notation\" must be \"paper\" or \"3b1b\", got " + quoted(s));
    r.options.notation = parse_notation(s);
  }
  if (j.contains("silence") && !j["silence"].is_null()) {
    const json& s = j["silence"];
    if (!s.is_array()) refuse(std::string("\"silence\" must be an array of token indices, got ") + s.type_name());
    std::set<int> seen;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::string name = "\"silence\"[" + std::to_string(i) + "]";
      const int t = get_int(s[i], name, 0, shape.n_positions - 1,
                            "a token index; the context is " + std::to_string(shape.n_positions) + " tokens");
      if (!seen.insert(t).second) refuse(name + " repeats token index " + std::to_string(t));
      r.options.silence.push_back(t);
    }
  }
  if (j.contains("swap_qk") && !j["swap_qk"].is_null()) {
    if (!j["swap_qk"].is_boolean())
      refuse(std::string("\"swap_qk\" must be true or false, got ") + j["swap_qk"].type_name());
    r.options.swap_qk = j["swap_qk"].get<bool>();
  }
  if (j.contains("matrices") && !j["matrices"].is_null()) {
    if (!j["matrices"].is_boolean())
      refuse(std::string("\"matrices\" must be true or false, got ") + j["matrices"].type_name());
    r.options.matrices = j["matrices"].get<bool>();
  }
  if (j.contains("generate") && !j["generate"].is_null()) {
    const int hi = std::min(limits.max_generate, kMaxExplainSteps);
    r.options.generate = get_int(j["generate"], "\"generate\"", 0, hi, "new tokens explained step by step");
  }
  for (const char* name : {"temperature", "top_p"}) {
    if (!j.contains(name) || j[name].is_null()) continue;
    const json& v = j[name];
    if (!v.is_number()) refuse(std::string("\"") + name + "\" must be a number, got " + v.type_name());
    const double x = v.get<double>();
    if (!(std::abs(x) <= std::numeric_limits<float>::max()))
      refuse(std::string("\"") + name + "\" must be a float32 number, got " + v.dump());
    (std::string(name) == "temperature" ? r.options.temperature : r.options.top_p) = static_cast<float>(x);
  }
  if (j.contains("top_k") && !j["top_k"].is_null())
    r.options.top_k = get_int(j["top_k"], "\"top_k\"", 0, std::numeric_limits<int>::max(), "0: every token");
  if (j.contains("seed") && !j["seed"].is_null()) {
    const json& v = j["seed"];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
      refuse(std::string("\"seed\" must be an integer in 0..2^64-1, got ") + v.dump());
    r.options.seed = v.get<std::uint64_t>();
  }
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean())
      refuse(std::string("\"ignore_eos\" must be true or false, got ") + j["ignore_eos"].type_name());
    r.options.stop_at_eos = !j["ignore_eos"].get<bool>();
  }
  if (j.contains("top") && !j["top"].is_null()) {
    const int hi = std::max(1, std::min(limits.max_top, shape.vocab_size));
    r.options.top = get_int(j["top"], "\"top\"", 1, hi, "next-token candidates listed");
  }
  return r;
}

std::string parse_tokenize_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_object(body, limits);
  for (const auto& [key, value] : j.items())
    if (key != "prompt") refuse("unknown field " + quoted(key) + " (known: prompt)");
  if (!j.contains("prompt")) refuse("the field \"prompt\" is required");
  return get_prompt(j, "prompt", limits);
}

EmbeddingRequest parse_embedding_request(std::string_view body, const ModelShape& shape, const RequestLimits& limits) {
  const json j = parse_object(body, limits);
  for (const auto& [key, value] : j.items())
    if (key != "prompt" && key != "index") refuse("unknown field " + quoted(key) + " (known: prompt, index)");
  if (!j.contains("prompt")) refuse("the field \"prompt\" is required");
  if (!j.contains("index") || j["index"].is_null()) refuse("the field \"index\" is required");
  EmbeddingRequest r;
  r.prompt = get_prompt(j, "prompt", limits);
  r.index = get_int(j["index"], "\"index\"", 0, std::max(0, shape.n_positions - 1), "a token of the prompt");
  return r;
}

}  // namespace jomoim::serve
