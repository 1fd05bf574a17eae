// jomoim/text/utf8.hpp — UTF-8 for every part: sequences, validation, repair, code points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace jomoim::text {

// Length (1..4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when the byte
// there does not start one (a continuation byte, 0xC0/0xC1/0xF5.., a truncated sequence, an
// overlong form, a surrogate or a code point above U+10FFFF). `*cp` receives the code point.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t* cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const std::size_t left = s.size() - i;
  const unsigned c0 = b(0);
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  }
  const auto cont = [&](std::size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (!cont(1)) return 0;
    *cp = char32_t((c0 & 0x1F) << 6 | (b(1) & 0x3F));
    return 2;
  }
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const char32_t v = char32_t((c0 & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F));
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;  // overlong, surrogate
    *cp = v;
    return 3;
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const char32_t v = char32_t((c0 & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F));
    if (v < 0x10000 || v > 0x10FFFF) return 0;  // overlong, beyond Unicode
    *cp = v;
    return 4;
  }
  return 0;
}

// Whether all of `s` is well-formed UTF-8.
inline bool is_valid_utf8(std::string_view s) {
  char32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    // ASCII fast path: 8 bytes at a time.
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const std::size_t n = utf8_sequence(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// `s` made valid UTF-8 (for JSON): every byte that does not start a well-formed sequence
// becomes U+FFFD; well-formed sequences are kept.
inline std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, &cp);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// "U+00E9" for messages.
inline std::string code_point_name(char32_t cp) {
  static const char* hex = "0123456789ABCDEF";
  std::string s;
  for (int shift = cp > 0xFFFF ? 20 : 12; shift >= 0; shift -= 4) s += hex[(cp >> shift) & 0xF];
  return "U+" + s;
}

}  // namespace jomoim::text
