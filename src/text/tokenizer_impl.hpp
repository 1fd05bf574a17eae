// tokenizer_impl.hpp — the tables behind jomoim::Tokenizer (internal to src/text/).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jomoim/text/tokenizer.hpp"

namespace jomoim {

struct Tokenizer::Impl {
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    std::uint32_t rank;
    std::int32_t result;
  };

  std::vector<std::string> tokens;                                           // id -> token string
  std::vector<std::string> bytes;                                            // id -> raw bytes
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ids;  // token string -> id
  std::vector<std::pair<std::string, std::string>> merges;                   // by rank
  std::unordered_map<std::uint64_t, Merge> merge_of;                         // (left id, right id)
  std::array<std::int32_t, 256> byte_id{};                                   // byte -> its token
  std::optional<std::int32_t> eos;

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return std::uint64_t(std::uint32_t(left)) << 32 | std::uint32_t(right);
  }
  const std::string& checked_token(std::int32_t id, const char* what) const;
};

namespace text {

// Where the tables came from, for error messages: `vocab` names the vocabulary ("Tokenizer"
// or the vocab.json path); merge problems name `merges_file` and the line (merge i is on line
// i + merge_line_offset) when a file is given, else "Tokenizer: merge i".
struct Origin {
  std::string vocab = "Tokenizer";
  std::string merges_file;
  std::size_t merge_line_offset = 0;
};

// Validates and indexes the tables (see the Tokenizer constructor for the rules); throws Error.
std::shared_ptr<const Tokenizer::Impl> build_tokenizer(std::vector<std::string> tokens,
                                                       std::vector<std::pair<std::string, std::string>> merges,
                                                       const Origin& origin);

// A string for messages: JSON-quoted (control characters escaped, invalid UTF-8 replaced) and
// clipped to about 40 characters.
std::string quote(std::string_view s);

}  // namespace text
}  // namespace jomoim
