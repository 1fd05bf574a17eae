// serve_request_fuzz.cpp — libFuzzer target for the request bodies of `jomoim serve`
// (apps/serve/request.cpp: JSON body -> ExplainOptions + prompt, or a prompt to tokenize).
//
// Any body must either give options inside the model's limits or throw RequestError (status
// 400 or 413) with a one-line message. A crash, a sanitizer report, an exception of another
// type (nlohmann's type_error from reading a field as the wrong type, std::bad_alloc) or an
// accepted value outside its range is a bug. The first input byte picks the model shape and
// which parser runs (bit 8: embedding, bit 4: tokenize, else explain), so small models' limits (top capped by a
// 10-token vocabulary) are hit too.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>

#include "serve/request.hpp"

namespace {

void check_message(const jomoim::serve::RequestError& e) {
  if (e.what()[0] == '\0' || std::strchr(e.what(), '\n') != nullptr) __builtin_trap();
  if (e.status() != 400 && e.status() != 413) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  jomoim::serve::RequestLimits limits;
  limits.max_body_bytes = 4096;
  limits.max_prompt_bytes = 64;
  limits.max_top = 50;
  const jomoim::serve::ModelShape shapes[4] = {{2, 4, 48, 270}, {1, 1, 1, 10}, {12, 12, 1024, 50257}, {3, 2, 40, 300}};
  const jomoim::serve::ModelShape& s = shapes[mode & 3];
  try {
    if (mode & 8) {
      const jomoim::serve::EmbeddingRequest r = jomoim::serve::parse_embedding_request(body, s, limits);
      if (r.prompt.size() > limits.max_prompt_bytes) __builtin_trap();
      if (r.index < 0 || r.index >= std::max(1, s.n_positions)) __builtin_trap();
      return 0;
    }
    if (mode & 4) {
      const std::string prompt = jomoim::serve::parse_tokenize_request(body, limits);
      if (prompt.size() > limits.max_prompt_bytes) __builtin_trap();
      return 0;
    }
    const jomoim::serve::ExplainRequest r = jomoim::serve::parse_explain_request(body, s, limits);
    const jomoim::ExplainOptions& o = r.options;
    if (r.prompt.size() > limits.max_prompt_bytes) __builtin_trap();
    if (o.compare && o.compare->size() > limits.max_prompt_bytes) __builtin_trap();
    if (o.layer && (*o.layer < 0 || *o.layer >= s.n_layer)) __builtin_trap();
    if (o.head && (*o.head < 0 || *o.head >= s.n_head)) __builtin_trap();
    if (o.top < 1 || o.top > limits.max_top || o.top > s.vocab_size) __builtin_trap();
    if (o.silence.size() > static_cast<std::size_t>(s.n_positions)) __builtin_trap();
    std::set<int> seen;
    for (const int t : o.silence)
      if (t < 0 || t >= s.n_positions || !seen.insert(t).second) __builtin_trap();
    if (o.generate < 0 || o.generate > limits.max_generate || o.generate > jomoim::kMaxExplainSteps) __builtin_trap();
    if (o.top_k < 0 || !std::isfinite(o.temperature) || !std::isfinite(o.top_p)) __builtin_trap();
    if (!o.model_name.empty()) __builtin_trap();
  } catch (const jomoim::serve::RequestError& e) {
    check_message(e);
  }
  return 0;
}
