// pretokenize.hpp — GPT-2's pre-tokenization split (internal to src/text/; the public entry is
// Tokenizer::pretokenize).
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace jomoim::text {

// Appends to `pieces` the (offset, length) of each piece of `text` under GPT-2's pattern, in
// order; the pieces tile the input exactly. Any bytes are accepted: a byte that is not part of
// well-formed UTF-8 counts as one character that is neither letter, number nor space.
// Thread-safe (the compiled pattern is shared and read-only). Throws Error only if PCRE2
// itself fails (e.g. out of memory).
void pretokenize(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& pieces);

}  // namespace jomoim::text
