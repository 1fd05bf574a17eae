// config_fuzz.cpp — libFuzzer target for the GPT-2 config.json reader (src/model/config.cpp).
//
// Any input must either give a configuration or throw jomoim::Error with a one-line message. A
// configuration it gives must be valid, have a parameter count that the sizes it holds imply
// (no overflow: validate() bounds it), and survive to_json() and back unchanged. A crash, a
// sanitizer report (e.g. a double out of float's range converted), an uncaught exception of
// another type or a broken check is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "jomoim/model/model.hpp"

namespace {

void check_message(const jomoim::Error& e) {
  if (std::strchr(e.what(), '\n') != nullptr || e.what()[0] == '\0') __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  jomoim::GptConfig c;
  try {
    c = jomoim::GptConfig::from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const jomoim::Error& e) {
    check_message(e);
    return 0;
  }
  try {
    c.validate();
  } catch (const jomoim::Error&) {
    __builtin_trap();  // from_json returned a configuration validate() refuses
  }
  const std::int64_t n = c.parameter_count();
  if (n <= 0 || n > jomoim::GptConfig::kMaxParameters) __builtin_trap();
  jomoim::GptConfig back;
  try {
    back = jomoim::GptConfig::from_json(c.to_json(), "round trip");
  } catch (const jomoim::Error&) {
    __builtin_trap();
  }
  if (back.n_layer != c.n_layer || back.n_head != c.n_head || back.n_embd != c.n_embd ||
      back.n_positions != c.n_positions || back.vocab_size != c.vocab_size || back.n_inner != c.n_inner ||
      back.layer_norm_epsilon != c.layer_norm_epsilon || back.activation_function != c.activation_function)
    __builtin_trap();
  return 0;
}
