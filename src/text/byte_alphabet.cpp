// byte_alphabet.cpp — GPT-2's byte <-> printable-unicode mapping (see jomoim/text/tokenizer.hpp).
//
// GPT-2 writes tokens as text in which every byte is one printable character, so that a
// vocabulary is a JSON object of readable strings: the 188 bytes that are printable Latin-1
// characters stand for themselves, the other 68 (controls, space, DEL, NBSP, soft hyphen)
// take the code points 256, 257, ... in byte order.
#include <array>
#include <cstdio>
#include <string>
#include <string_view>

#include "byte_alphabet.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "jomoim/text/utf8.hpp"

namespace jomoim {
namespace text {
namespace {

constexpr bool printable(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int, 324> byte_of{};  // code point -> byte, -1 where none (the image is 0..323)
  Alphabet() {
    byte_of.fill(-1);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      code_point[b] = printable(b) ? char32_t(b) : char32_t(next++);
      append_utf8(utf8[b], code_point[b]);
      byte_of[code_point[b]] = int(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_token(unsigned char b) { return alphabet().utf8[b]; }

bool unicode_to_bytes_into(std::string_view text, std::string& out) {
  const Alphabet& a = alphabet();
  char32_t cp = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i, &cp);
    if (n == 0 || cp >= a.byte_of.size() || a.byte_of[cp] < 0) return false;
    out += char(a.byte_of[cp]);
    i += n;
  }
  return true;
}

}  // namespace text

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += text::byte_token(static_cast<unsigned char>(c));
  return out;
}

std::string unicode_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (text::unicode_to_bytes_into(s, out)) return out;
  // Say which character is at fault.
  char32_t cp = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = text::utf8_sequence(s, i, &cp);
    if (n == 0) throw Error("unicode_to_bytes: invalid UTF-8 at byte " + std::to_string(i));
    std::string one;
    if (!text::unicode_to_bytes_into(s.substr(i, n), one))
      throw Error("unicode_to_bytes: character " + text::code_point_name(cp) + " at byte " + std::to_string(i) +
                  " is not in GPT-2's byte alphabet");
    i += n;
  }
  throw Error("unicode_to_bytes: internal error");  // unreachable
}

std::string printable_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  char buf[8];
  char32_t cp = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const std::size_t n = text::utf8_sequence(bytes, i, &cp);
    if (n > 1) {
      out.append(bytes.substr(i, n));
    } else if (n == 1 && c >= 0x20 && c != 0x7f && c != '\\') {
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

}  // namespace jomoim
