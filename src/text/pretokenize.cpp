// pretokenize.cpp — GPT-2's pre-tokenization pattern on PCRE2 (UTF + UCP, JIT when available).
//
// The pattern is GPT-2's
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s spelled out as Unicode's White_Space property (what GPT-2's Python `regex` module
// means by \s). PCRE2's own \s under UCP would add U+180E; JavaScript's (gpt-3-encoder) adds
// U+FEFF and lacks U+0085: on those three characters implementations disagree.
//
// Invalid UTF-8: PCRE2 requires valid UTF-8 in UTF mode, so input that is not valid is first
// copied with each stray byte replaced by U+FFFD (a character of the "other" kind, like the
// stray byte is meant to be), matched, and the piece boundaries mapped back to the original
// offsets. Valid input (the usual case) is matched in place.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <string>

#include "jomoim/core/tensor.hpp"
#include "jomoim/text/utf8.hpp"
#include "pretokenize.hpp"

namespace jomoim::text {
namespace {

#define JOMOIM_WS \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr char kPattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^" JOMOIM_WS
    "\\p{L}\\p{N}]+"
    "|[" JOMOIM_WS "]+(?![^" JOMOIM_WS
    "])"
    "|[" JOMOIM_WS "]+";
#undef JOMOIM_WS

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

class Pattern {
 public:
  Pattern() {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
    if (!code_) throw Error("pretokenize: PCRE2 cannot compile GPT-2's pattern: " + pcre2_message(err));
    // JIT is an optimisation: where it is unavailable pcre2_match interprets the pattern.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  ~Pattern() { pcre2_code_free(code_); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // Pieces of valid UTF-8 `s`, appended as (offset, length).
  void split(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!md) throw Error("pretokenize: out of memory for PCRE2 match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    std::size_t at = 0;
    while (at < s.size()) {
      // Anchored (compiled so, which JIT supports): every character is matched by some
      // alternative, so the next piece starts exactly where the previous one ended.
      const int rc = pcre2_match(code_, subject, s.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc < 0)
        throw Error("pretokenize: PCRE2 match failed at byte " + std::to_string(at) + ": " + pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      if (ov[0] != at || ov[1] <= at)
        throw Error("pretokenize: PCRE2 returned an empty or misplaced piece at byte " + std::to_string(at));
      out.emplace_back(at, ov[1] - at);
      at = ov[1];
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

const Pattern& pattern() {
  static const Pattern p;
  return p;
}

}  // namespace

void pretokenize(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& pieces) {
  if (is_valid_utf8(text)) {
    pattern().split(text, pieces);
    return;
  }
  // Stray bytes become U+FFFD (3 bytes); origin[k] is the input offset of clean byte k.
  std::string clean;
  std::vector<std::size_t> origin;
  clean.reserve(text.size() + 16);
  origin.reserve(text.size() + 17);
  char32_t cp = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i, &cp);
    if (n == 0) {
      clean += "\xEF\xBF\xBD";
      origin.insert(origin.end(), 3, i);
      i += 1;
    } else {
      clean.append(text.substr(i, n));
      for (std::size_t k = 0; k < n; ++k) origin.push_back(i + k);
      i += n;
    }
  }
  origin.push_back(text.size());
  const std::size_t first = pieces.size();
  pattern().split(clean, pieces);
  for (std::size_t p = first; p < pieces.size(); ++p) {
    const std::size_t begin = origin[pieces[p].first], end = origin[pieces[p].first + pieces[p].second];
    pieces[p] = {begin, end - begin};
  }
}

}  // namespace jomoim::text
