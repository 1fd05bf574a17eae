// byte_alphabet.hpp — GPT-2's byte <-> printable-unicode mapping, internal helpers
// (the public functions are jomoim::bytes_to_unicode / unicode_to_bytes).
#pragma once

#include <string>
#include <string_view>

namespace jomoim::text {

// The one-character token string (UTF-8) that stands for byte b, e.g. ' ' -> "Ġ".
const std::string& byte_token(unsigned char b);

// Appends the bytes `text` stands for to `out`; false (out partly written) when `text` is not
// valid UTF-8 or has a character outside the alphabet.
bool unicode_to_bytes_into(std::string_view text, std::string& out);

}  // namespace jomoim::text
