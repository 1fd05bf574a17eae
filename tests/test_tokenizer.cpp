// test_tokenizer.cpp — the byte-level BPE tokenizer (include/jomoim/text/tokenizer.hpp) on small,
// hand-built vocabularies: the byte alphabet, GPT-2's pre-tokenization split (pieces derived
// by hand from the pattern), merge order against a naive transcription of GPT-2's own bpe()
// loop, exact round trips of arbitrary bytes (invalid UTF-8 included), every refusal of the
// constructor and of the file loader with its message, and save -> load. Agreement with GPT-2's
// real vocabulary is test_tokenizer_gpt2.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "file_test_util.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "naive_bpe.hpp"

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using jomoim::test::naive_bpe;
using jomoim::test::read_file_bytes;
using jomoim::test::TempDir;
using jomoim::test::write_file_bytes;
using ::testing::HasSubstr;
using Merges = std::vector<std::pair<std::string, std::string>>;

// GPT-2's byte -> code point rule, written out again independently of the library.
char32_t gpt2_code_point(unsigned b) {
  unsigned n = 0;
  for (unsigned x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    if (x == b) return printable ? char32_t(x) : char32_t(256 + n);
    if (!printable) ++n;
  }
  return 0;
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Token string of raw bytes, by the independent rule.
std::string tok(std::string_view bytes) {
  std::string s;
  for (const char c : bytes) s += utf8(gpt2_code_point(static_cast<unsigned char>(c)));
  return s;
}

// The 256 byte tokens (id = byte) followed by `extra` (raw bytes, converted).
std::vector<std::string> vocab_with(const std::vector<std::string>& extra) {
  std::vector<std::string> v;
  for (unsigned b = 0; b < 256; ++b) v.push_back(tok(std::string(1, char(b))));
  for (const auto& e : extra) v.push_back(tok(e));
  return v;
}

Merges merges_of(const std::vector<std::pair<std::string, std::string>>& raw) {
  Merges m;
  for (const auto& [a, b] : raw) m.emplace_back(tok(a), tok(b));
  return m;
}

// Token ids -> their raw bytes, for readable expectations.
std::vector<std::string> pieces_of(const Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (const auto id : ids) out.push_back(t.token_bytes(id));
  return out;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
    return m;
  }
  ADD_FAILURE() << "expected jomoim::Error";
  return "";
}

std::string random_bytes(std::mt19937& rng, std::size_t max_len) {
  std::uniform_int_distribution<std::size_t> len(0, max_len);
  std::uniform_int_distribution<int> kind(0, 9), byte(0, 255), ascii(0x20, 0x7E);
  std::string s;
  const std::size_t n = len(rng);
  while (s.size() < n) {
    switch (kind(rng)) {
      case 0:
        s += char(byte(rng));
        break;  // anything, often invalid
      case 1:
        s += "\xC3";
        break;  // a truncated sequence
      case 2:
        s += "\xED\xA0\x80";
        break;  // a surrogate (invalid)
      case 3:
        s += "\xC3\xA9";
        break;  // é
      case 4:
        s += "\xED\x95\x9C";
        break;  // 한
      case 5:
        s += "\xF0\x9F\x98\x80";
        break;  // 😀
      case 6:
        s += std::string(std::size_t(byte(rng) % 5 + 1), ' ');
        break;
      case 7:
        s += "\n";
        break;
      default:
        s += char(ascii(rng));
        break;
    }
  }
  return s;
}

// --------------------------------------------------------------------------- byte alphabet

TEST(ByteAlphabet, MatchesGpt2sRuleForEveryByte) {
  std::set<std::string> seen;
  for (unsigned b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    const std::string u = bytes_to_unicode(one);
    EXPECT_EQ(u, utf8(gpt2_code_point(b))) << b;
    EXPECT_EQ(unicode_to_bytes(u), one) << b;
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 256u);                   // a bijection onto 256 characters
  EXPECT_EQ(bytes_to_unicode(" "), "\xC4\xA0");   // 'Ġ' U+0120
  EXPECT_EQ(bytes_to_unicode("\n"), "\xC4\x8A");  // 'Ċ' U+010A
  EXPECT_EQ(bytes_to_unicode(" have"), "\xC4\xA0have");
  EXPECT_EQ(bytes_to_unicode(""), "");
}

TEST(ByteAlphabet, RoundTripsRandomBytes) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_bytes(rng, 64);
    EXPECT_EQ(unicode_to_bytes(bytes_to_unicode(s)), s);
  }
}

TEST(ByteAlphabet, RefusesCharactersOutsideTheAlphabetAndInvalidUtf8) {
  EXPECT_THAT(error_of([] { unicode_to_bytes("ab\xC5\x84"); }), HasSubstr("U+0144"));    // 'ń', first past the image
  EXPECT_THAT(error_of([] { unicode_to_bytes("\xED\x95\x9C"); }), HasSubstr("U+D55C"));  // 한
  EXPECT_THAT(error_of([] { unicode_to_bytes(" "); }), HasSubstr("U+0020"));             // space is 'Ġ' here
  EXPECT_THAT(error_of([] { unicode_to_bytes("a\xFF"); }), HasSubstr("invalid UTF-8 at byte 1"));
  EXPECT_THAT(error_of([] { unicode_to_bytes("\xC3"); }), HasSubstr("invalid UTF-8 at byte 0"));
}

// --------------------------------------------------------------------------- pre-tokenization

const Tokenizer& bytes_only() {
  static const Tokenizer t(vocab_with({}), {});
  return t;
}

using Pieces = std::vector<std::string>;

// The display form of token bytes used by `predict`, `tokenize` and the explorer.
TEST(PrintableText, EscapesControlsAndInvalidUtf8AndKeepsValidText) {
  EXPECT_EQ(printable_text("plain text"), "plain text");
  EXPECT_EQ(printable_text("a\nb\tc\rd\\e"), "a\\nb\\tc\\rd\\\\e");
  EXPECT_EQ(printable_text(std::string("\x00\x01\x1f\x7f", 4)), "\\x00\\x01\\x1f\\x7f");
  EXPECT_EQ(printable_text("h\xC3\xA9llo \xEC\xA1\xB0 \xF0\x9F\x99\x82"), "h\xC3\xA9llo \xEC\xA1\xB0 \xF0\x9F\x99\x82");
  EXPECT_EQ(printable_text("\xC3"), "\\xc3");                             // truncated
  EXPECT_EQ(printable_text("\xE2\x82z"), "\\xe2\\x82z");                  // truncated, then ASCII
  EXPECT_EQ(printable_text("\x80\xBF"), "\\x80\\xbf");                    // lone continuation bytes
  EXPECT_EQ(printable_text("\xC0\x80"), "\\xc0\\x80");                    // overlong NUL
  EXPECT_EQ(printable_text("\xED\xA0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable_text("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable_text(""), "");
  // Whatever the bytes, the result is valid UTF-8 without control characters.
  std::mt19937 rng(7);
  for (int t = 0; t < 2000; ++t) {
    std::string bytes(std::size_t(rng() % 12), '\0');
    for (char& c : bytes) c = char(rng() & 0xff);
    const std::string shown = printable_text(bytes);
    std::string_view sv(shown);
    for (std::size_t i = 0; i < sv.size();) {
      const unsigned char c = static_cast<unsigned char>(sv[i]);
      ASSERT_FALSE(c < 0x20 || c == 0x7f) << "control byte in the display form";
      std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      ASSERT_GT(n, 0u) << "invalid UTF-8 lead byte in the display form";
      ASSERT_LE(i + n, sv.size());
      i += n;
    }
  }
}

TEST(Pretokenize, SplitsLikeGpt2sPattern) {
  const Tokenizer& t = bytes_only();
  // Expected pieces worked out by hand from the pattern's alternatives, in order.
  EXPECT_EQ(t.pretokenize("I have a lot"), (Pieces{"I", " have", " a", " lot"}));
  EXPECT_EQ(t.pretokenize(""), Pieces{});
  EXPECT_EQ(t.pretokenize(" "), Pieces{" "});
  EXPECT_EQ(t.pretokenize("Hello  world"), (Pieces{"Hello", " ", " world"}));
  EXPECT_EQ(t.pretokenize("a   \n\nb"), (Pieces{"a", "   \n", "\n", "b"}));
  EXPECT_EQ(t.pretokenize("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(t.pretokenize("\t\tx"), (Pieces{"\t", "\t", "x"}));
  EXPECT_EQ(t.pretokenize("it's we'll've I'm"), (Pieces{"it", "'s", " we", "'ll", "'ve", " I", "'m"}));
  EXPECT_EQ(t.pretokenize("IT'S"), (Pieces{"IT", "'", "S"}));  // contractions are lower case only
  EXPECT_EQ(t.pretokenize("'''s"), (Pieces{"'''", "s"}));      // contractions only where a piece starts
  EXPECT_EQ(t.pretokenize("123abc x  12"), (Pieces{"123", "abc", " x", " ", " 12"}));
  EXPECT_EQ(t.pretokenize("hi!!! ?ok"), (Pieces{"hi", "!!!", " ?", "ok"}));
  EXPECT_EQ(t.pretokenize("a_b-c"), (Pieces{"a", "_", "b", "-", "c"}));
  EXPECT_EQ(t.pretokenize("line\r\nnext"), (Pieces{"line", "\r", "\n", "next"}));
}

TEST(Pretokenize, UsesUnicodeCategories) {
  const Tokenizer& t = bytes_only();
  EXPECT_EQ(t.pretokenize("caf\xC3\xA9 na\xC3\xAFve"), (Pieces{"caf\xC3\xA9", " na\xC3\xAFve"}));  // é ï are letters
  EXPECT_EQ(t.pretokenize("cafe\xCC\x81"), (Pieces{"cafe", "\xCC\x81"}));  // a combining mark (Mn) is not \p{L}
  // 안녕 하세요: Hangul syllables are letters.
  EXPECT_EQ(t.pretokenize("\xEC\x95\x88\xEB\x85\x95 \xED\x95\x98\xEC\x84\xB8\xEC\x9A\x94"),
            (Pieces{"\xEC\x95\x88\xEB\x85\x95", " \xED\x95\x98\xEC\x84\xB8\xEC\x9A\x94"}));
  // Arabic-Indic digits (Nd), ½ (No), Ⅻ (Nl) are numbers.
  EXPECT_EQ(t.pretokenize("x\xD9\xA3\xD9\xA4 \xC2\xBD\xE2\x85\xAB"),
            (Pieces{"x", "\xD9\xA3\xD9\xA4", " \xC2\xBD\xE2\x85\xAB"}));
  // Emoji are "other": a run of them is one piece, with the space before it.
  EXPECT_EQ(t.pretokenize("go \xF0\x9F\x9A\x80\xF0\x9F\x98\x80!"),
            (Pieces{"go", " \xF0\x9F\x9A\x80\xF0\x9F\x98\x80!"}));
}

TEST(Pretokenize, WhitespaceIsUnicodesWhiteSpaceProperty) {
  const Tokenizer& t = bytes_only();
  // NBSP, ideographic space, NEL are White_Space: each one alone before a letter.
  EXPECT_EQ(t.pretokenize("a\xC2\xA0"
                          "b"),
            (Pieces{"a", "\xC2\xA0", "b"}));
  EXPECT_EQ(t.pretokenize("a\xE3\x80\x80\xE3\x80\x80"
                          "b"),
            (Pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(t.pretokenize("a\xC2\x85\xC2\x85"
                          "b"),
            (Pieces{"a", "\xC2\x85", "\xC2\x85", "b"}));
  // Only U+0020 may lead a word: "\u00a0b" is not one piece.
  EXPECT_EQ(t.pretokenize("\xC2\xA0\xC2\xA0word"), (Pieces{"\xC2\xA0", "\xC2\xA0", "word"}));
  // U+180E (Mongolian vowel separator) and U+FEFF (BOM) are not White_Space: "other" runs.
  EXPECT_EQ(t.pretokenize("a\xE1\xA0\x8E\xE1\xA0\x8E"
                          "b"),
            (Pieces{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"}));
  EXPECT_EQ(t.pretokenize("a\xEF\xBB\xBF\xEF\xBB\xBF"
                          "b"),
            (Pieces{"a", "\xEF\xBB\xBF\xEF\xBB\xBF", "b"}));
}

TEST(Pretokenize, InvalidUtf8BytesAreOtherCharacters) {
  const Tokenizer& t = bytes_only();
  EXPECT_EQ(t.pretokenize("a\xFF\xFE"
                          "b"),
            (Pieces{"a", "\xFF\xFE", "b"}));
  EXPECT_EQ(t.pretokenize(" \xFF"), (Pieces{" \xFF"}));
  EXPECT_EQ(t.pretokenize("\xFF"
                          "abc"),
            (Pieces{"\xFF", "abc"}));
  EXPECT_EQ(t.pretokenize("\xC3x"), (Pieces{"\xC3", "x"}));                        // truncated é
  EXPECT_EQ(t.pretokenize("ab\xE2\x82"), (Pieces{"ab", "\xE2\x82"}));              // truncated €
  EXPECT_EQ(t.pretokenize("!\xFF?\xEF\xBF\xBD"), (Pieces{"!\xFF?\xEF\xBF\xBD"}));  // joins punctuation and U+FFFD
  EXPECT_EQ(t.pretokenize("\xED\xA0\x80"), (Pieces{"\xED\xA0\x80"}));              // a surrogate: 3 stray bytes
  EXPECT_EQ(t.pretokenize("\xC0\xAF"
                          "1"),
            (Pieces{"\xC0\xAF", "1"}));                                              // overlong '/'
  EXPECT_EQ(t.pretokenize("x\xF4\x90\x80\x80"), (Pieces{"x", "\xF4\x90\x80\x80"}));  // above U+10FFFF
}

TEST(Pretokenize, PiecesTileAnyInput) {
  const Tokenizer& t = bytes_only();
  std::mt19937 rng(2);
  for (int i = 0; i < 500; ++i) {
    const std::string s = random_bytes(rng, 80);
    const auto spans = t.pretokenize_spans(s);
    std::size_t at = 0;
    std::string joined;
    for (const auto& [offset, length] : spans) {
      EXPECT_EQ(offset, at);
      EXPECT_GT(length, 0u);
      at = offset + length;
    }
    EXPECT_EQ(at, s.size());
    for (const auto& p : t.pretokenize(s)) joined += p;
    EXPECT_EQ(joined, s);
  }
}

TEST(Pretokenize, HugeRunsAreLinear) {
  const Tokenizer& t = bytes_only();
  const std::string spaces(4'000'000, ' ');
  EXPECT_EQ(t.pretokenize(spaces + "x"), (Pieces{std::string(3'999'999, ' '), " x"}));
  const std::string letters(4'000'000, 'q');
  EXPECT_EQ(t.pretokenize_spans(letters).size(), 1u);
  std::string invalid(1'000'000, '\xFF');
  EXPECT_EQ(t.pretokenize_spans(invalid + " a").size(), 2u);
}

// --------------------------------------------------------------------------- merges

TEST(Bpe, MergeOrderDecidesTheResult) {
  const auto vocab = vocab_with({"ab", "bc"});
  const Tokenizer ab_first(vocab, merges_of({{"a", "b"}, {"b", "c"}}));
  const Tokenizer bc_first(vocab, merges_of({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(pieces_of(ab_first, ab_first.encode("abc")), (Pieces{"ab", "c"}));
  EXPECT_EQ(pieces_of(bc_first, bc_first.encode("abc")), (Pieces{"a", "bc"}));
  EXPECT_EQ(ab_first.encode("abc"), (std::vector<std::int32_t>{256, 'c'}));
  EXPECT_EQ(bc_first.encode("abc"), (std::vector<std::int32_t>{'a', 257}));
}

TEST(Bpe, MergesRepeatedPairsLeftToRight) {
  const Tokenizer t(vocab_with({"aa", "aaaa"}), merges_of({{"a", "a"}, {"aa", "aa"}}));
  EXPECT_EQ(pieces_of(t, t.encode("aaa")), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces_of(t, t.encode("aaaa")), (Pieces{"aaaa"}));
  EXPECT_EQ(pieces_of(t, t.encode("aaaaa")), (Pieces{"aaaa", "a"}));
  EXPECT_EQ(pieces_of(t, t.encode("aaaaaaa")), (Pieces{"aaaa", "aa", "a"}));
}

TEST(Bpe, OneRankIsMergedEverywhereBeforeTheNextIsConsidered) {
  // (ab, a) has a lower rank than (a, b), so it would win as soon as the first "ab" exists;
  // GPT-2 merges every "a b" first, after which no "ab a" is left.
  const Tokenizer t(vocab_with({"ab", "aba"}), merges_of({{"ab", "a"}, {"a", "b"}}));
  EXPECT_EQ(pieces_of(t, t.encode("abab")), (Pieces{"ab", "ab"}));
  EXPECT_EQ(pieces_of(t, t.encode("aba")), (Pieces{"aba"}));
}

TEST(Bpe, MergesNeverCrossPieces) {
  const Tokenizer t(vocab_with({"x ", " a", "xa"}), merges_of({{"x", " "}, {"x", "a"}, {" ", "a"}}));
  EXPECT_EQ(pieces_of(t, t.encode("x a")), (Pieces{"x", " a"}));
  EXPECT_EQ(pieces_of(t, t.encode("xa")), (Pieces{"xa"}));
  EXPECT_EQ(pieces_of(t, t.encode("x!")), (Pieces{"x", "!"}));
}

TEST(Bpe, AgreesWithGpt2sNaiveLoopOnRandomMergeLists) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 60; ++trial) {
    // Grow a vocabulary by random merges of existing tokens over a small alphabet, then
    // shuffle the merge list so that ranks are not in the order tokens were made.
    const std::string alphabet = trial % 2 ? "ab" : "abc ";
    std::vector<std::string> made;
    std::vector<std::string> pool;
    for (char c : alphabet) pool.emplace_back(1, c);
    std::vector<std::pair<std::string, std::string>> raw;
    std::set<std::pair<std::string, std::string>> used;
    std::set<std::string> have(pool.begin(), pool.end());
    for (int m = 0; m < 40; ++m) {
      const std::string& a = pool[rng() % pool.size()];
      const std::string& b = pool[rng() % pool.size()];
      if (a.size() + b.size() > 8 || !used.insert({a, b}).second) continue;
      raw.emplace_back(a, b);
      if (have.insert(a + b).second) {
        made.push_back(a + b);
        pool.push_back(a + b);
      }
    }
    std::shuffle(raw.begin(), raw.end(), rng);
    jomoim::test::MergeRanks ranks;
    for (std::size_t r = 0; r < raw.size(); ++r) ranks[raw[r]] = r;
    std::vector<std::string> single_bytes_removed;
    for (const auto& s : made)
      if (s.size() > 1) single_bytes_removed.push_back(s);
    const Tokenizer t(vocab_with(single_bytes_removed), merges_of(raw));

    for (int k = 0; k < 40; ++k) {
      std::string text;
      const std::size_t n = rng() % 30;
      for (std::size_t i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
      std::vector<std::string> expected;
      for (const auto& piece : t.pretokenize(text))
        for (auto& s : naive_bpe(piece, ranks)) expected.push_back(std::move(s));
      const auto ids = t.encode(text);
      ASSERT_EQ(pieces_of(t, ids), expected) << "trial " << trial << " text '" << text << "'";
      ASSERT_EQ(t.decode(ids), text);
    }
  }
}

TEST(Bpe, RoundTripsArbitraryBytes) {
  const Tokenizer t(vocab_with({"\xFF\xFF", "\xFF\xFF\xFF\xFF", " \xFF", "ab", "\xC3\xA9", " \xC3\xA9"}),
                    merges_of({{"\xFF", "\xFF"},
                               {"\xFF\xFF", "\xFF\xFF"},
                               {" ", "\xFF"},
                               {"a", "b"},
                               {"\xC3", "\xA9"},
                               {" ", "\xC3\xA9"}}));
  std::mt19937 rng(4);
  for (int i = 0; i < 2000; ++i) {
    const std::string s = random_bytes(rng, 100);
    ASSERT_EQ(t.decode(t.encode(s)), s) << i;
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(t.decode(t.encode(all)), all);
  EXPECT_EQ(t.encode(""), std::vector<std::int32_t>{});
  EXPECT_EQ(t.decode(std::vector<std::int32_t>{}), "");
  // Invalid bytes still meet the merges that name them.
  // (ff ff) has rank 0, so it goes first and leaves no lone ff after the space.
  EXPECT_EQ(pieces_of(t, t.encode(" \xFF\xFF\xFF\xFF\xFF")), (Pieces{" ", "\xFF\xFF\xFF\xFF", "\xFF"}));
  EXPECT_EQ(pieces_of(t, t.encode(" \xFF")), (Pieces{" \xFF"}));
}

TEST(Bpe, LongPiecesAreFine) {
  // One piece of 1 MB: the heap-based merge is O(n log n) (GPT-2's loop would be quadratic).
  const Tokenizer t(vocab_with({"aa", "aaaa", "aaaaaaaa"}), merges_of({{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}}));
  const std::string s(1 << 20, 'a');
  const auto ids = t.encode(s);
  EXPECT_EQ(ids.size(), s.size() / 8);
  EXPECT_EQ(t.decode(ids), s);
}

TEST(Bpe, EncodeIsThreadSafe) {
  const Tokenizer t(vocab_with({"th", "the", " the"}), merges_of({{"t", "h"}, {"th", "e"}, {" ", "the"}}));
  std::mt19937 rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(random_bytes(rng, 200) + " the theme");
  std::vector<std::vector<std::int32_t>> serial;
  for (const auto& s : texts) serial.push_back(t.encode(s));
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      const Tokenizer copy = t;  // copies share the tables
      for (int rep = 0; rep < 5; ++rep)
        for (std::size_t i = 0; i < texts.size(); ++i) ok[w] += (w % 2 ? copy : t).encode(texts[i]) == serial[i];
    });
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(ok[w], 5 * int(texts.size()));
}

// --------------------------------------------------------------------------- accessors

TEST(Tokenizer, Accessors) {
  auto vocab = vocab_with({"ab"});
  vocab.push_back("<|endoftext|>");
  vocab.push_back("<pad> x");  // outside the alphabet: stands for its UTF-8 bytes
  const Tokenizer t(vocab, merges_of({{"a", "b"}}));
  EXPECT_EQ(t.vocab_size(), 259u);
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.id_of("ab"), 256);
  EXPECT_EQ(t.id_of("\xC4\xA0"), ' ');
  EXPECT_EQ(t.id_of(" "), std::nullopt);
  EXPECT_EQ(t.token_string(' '), "\xC4\xA0");
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_EQ(t.token_bytes(257), "<|endoftext|>");
  EXPECT_EQ(t.token_bytes(258), "<pad> x");
  EXPECT_EQ(t.decode(std::vector<std::int32_t>{'h', 'i', 257, 256}), "hi<|endoftext|>ab");
  ASSERT_EQ(t.merges().size(), 1u);
  EXPECT_EQ(t.merges()[0], (std::pair<std::string, std::string>{"a", "b"}));
  // "<|endoftext|>" in text is ordinary text, not the special token.
  const auto special_text = t.encode("<|endoftext|>");
  EXPECT_EQ(std::count(special_text.begin(), special_text.end(), 257), 0);
  EXPECT_EQ(t.decode(special_text), "<|endoftext|>");
  EXPECT_EQ(bytes_only().eos_id(), std::nullopt);
}

TEST(Tokenizer, BadIdsAreRefused) {
  const Tokenizer& t = bytes_only();
  EXPECT_THAT(error_of([&] {
                t.decode(std::vector<std::int32_t>{1, 256});
              }),
              HasSubstr("decode: token id 256 is outside the vocabulary (0..255)"));
  EXPECT_THAT(error_of([&] { t.decode(std::vector<std::int32_t>{-1}); }), HasSubstr("token id -1"));
  EXPECT_THAT(error_of([&] { t.token_string(1000); }), HasSubstr("token_string: token id 1000"));
  EXPECT_THAT(error_of([&] { t.token_bytes(-5); }), HasSubstr("token_bytes: token id -5"));
}

// --------------------------------------------------------------------------- constructor refusals

TEST(Tokenizer, ConstructorRefusesBadTables) {
  auto missing_byte = vocab_with({});
  missing_byte.erase(missing_byte.begin() + '\n');
  EXPECT_THAT(error_of([&] { (void)Tokenizer(missing_byte, {}); }), HasSubstr("no token for byte 0x0A"));
  auto dup = vocab_with({"a"});
  EXPECT_THAT(error_of([&] { (void)Tokenizer(dup, {}); }), HasSubstr("token 256 \"a\" repeats token 97"));
  auto empty = vocab_with({});
  empty.push_back("");
  EXPECT_THAT(error_of([&] { (void)Tokenizer(empty, {}); }), HasSubstr("token 256 is the empty string"));
  auto bad_utf8 = vocab_with({});
  bad_utf8.push_back("\xFF");
  EXPECT_THAT(error_of([&] { (void)Tokenizer(bad_utf8, {}); }),
              HasSubstr("token 256 \"\xEF\xBF\xBD\" is not valid UTF-8"));
  EXPECT_THAT(error_of([] { (void)Tokenizer(std::vector<std::string>{}, {}); }), HasSubstr("no token for byte 0x00"));

  const auto v = vocab_with({"ab"});
  EXPECT_THAT(error_of([&] {
                (void)Tokenizer(v, {{"a", "zz"}});
              }),
              HasSubstr("Tokenizer: merge 0: merge \"a zz\": token \"zz\" is not in the vocabulary"));
  EXPECT_THAT(error_of([&] {
                (void)Tokenizer(v, merges_of({{"a", "b"}, {"b", "a"}}));
              }),
              HasSubstr("merge 1: merge \"b a\": its result \"ba\" is not in the vocabulary"));
  EXPECT_THAT(error_of([&] {
                (void)Tokenizer(v, merges_of({{"a", "b"}, {"a", "b"}}));
              }),
              HasSubstr("merge 1: merge \"a b\": repeats the merge of rank 0"));
  EXPECT_THAT(error_of([&] { (void)Tokenizer(v, {{"", "ab"}}); }), HasSubstr("a part is empty"));
  auto spaced = vocab_with({});
  spaced.push_back("a b");
  spaced.push_back("a ba b");
  EXPECT_THAT(error_of([&] {
                (void)Tokenizer(spaced, {{"a b", "a b"}});
              }),
              HasSubstr("contains a space or line break"));
}

// --------------------------------------------------------------------------- files

// vocab.json text for a token list, written by hand (not by save()).
std::string vocab_json(const std::vector<std::string>& tokens) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) j[tokens[i]] = i;
  return j.dump();
}

TEST(TokenizerFiles, LoadsHuggingFaceFormat) {
  TempDir dir("tok");
  write_file_bytes(dir.path() / "vocab.json", vocab_json(vocab_with({"ab", "abc"})));
  write_file_bytes(dir.path() / "merges.txt", "#version: 0.2\na b\nab c\n");
  const Tokenizer t = Tokenizer::load_dir(dir.path());
  EXPECT_EQ(t.vocab_size(), 258u);
  EXPECT_EQ(t.merges().size(), 2u);
  EXPECT_EQ(pieces_of(t, t.encode("abcab")), (Pieces{"abc", "ab"}));
  // Without the version line, with CRLF line ends and no final newline: the same merges.
  write_file_bytes(dir.path() / "m2.txt", "a b\r\nab c");
  const Tokenizer u = Tokenizer::load(dir.path() / "vocab.json", dir.path() / "m2.txt");
  EXPECT_EQ(u.merges(), t.merges());
  // Keys in any order, pretty-printed, escapes and a UTF-8 BOM-free file with \u escapes.
  const std::string pretty = nlohmann::json::parse(vocab_json(vocab_with({"ab", "abc"}))).dump(2, ' ', true);
  const Tokenizer w = Tokenizer::parse(pretty, "");
  EXPECT_EQ(w.vocab_size(), 258u);
  EXPECT_EQ(w.token_string(' '), "\xC4\xA0");
  EXPECT_TRUE(w.merges().empty());
}

struct BadVocab {
  std::string name;
  std::string json;
  std::string message;
};

TEST(TokenizerFiles, RefusesMalformedVocabJson) {
  const std::string good = vocab_json(vocab_with({}));
  const std::string body = good.substr(1, good.size() - 2);  // "\"!\":0,...", without braces
  const std::vector<BadVocab> cases = {
      {"empty file", "", "malformed JSON"},
      {"truncated", good.substr(0, good.size() / 2), "malformed JSON (parse error"},
      {"not an object", "[1, 2]", "expected a JSON object {\"token\": id, ...}, found an array"},
      {"a number", "5", "expected a JSON object {\"token\": id, ...}, found a number"},
      {"string value", "{" + body + ",\"x y\":\"1\"}", "token \"x y\" maps to the string \"1\""},
      {"negative", "{" + body + ",\"q q\":-3}", "token \"q q\" maps to the negative number -3"},
      {"float", "{" + body + ",\"q q\":256.0}", "maps to the number 256.0"},
      {"nested", "{\"a\":{\"b\":1}}", "token \"a\" maps to an object"},
      {"null", "{\"a\":null}", "token \"a\" maps to null"},
      {"array value", "{\"a\":[1]}", "token \"a\" maps to an array"},
      {"duplicate key", "{" + body + ",\"a\":256}", "token \"a\" appears twice"},
      {"duplicate id", "{" + body + ",\"q q\":5}", "id 5 is given to both"},
      {"gap", "{" + body + ",\"q q\":300}", "no token has id 256 (ids must be 0..256 for 257 tokens; \"q q\" has 300)"},
      {"huge id", "{\"a\":99999999999}", "has the id 99999999999, too large"},
      {"empty object", "{}", "the vocabulary is empty"},
      {"trailing garbage", good + "x", "malformed JSON"},
      {"missing byte token", "{\"a\":0}", "no token for byte 0x00"},
      {"bad UTF-8", "{\"\xFF\":0}", "malformed JSON"},
  };
  for (const auto& c : cases) {
    const std::string m = error_of([&] { Tokenizer::parse(c.json, "", "dir/vocab.json", "dir/merges.txt"); });
    EXPECT_THAT(m, HasSubstr(c.message)) << c.name;
    EXPECT_TRUE(m.starts_with("dir/vocab.json: ")) << c.name << ": " << m;
  }
}

TEST(TokenizerFiles, RefusesBadMerges) {
  const std::string vocab = vocab_json(vocab_with({"ab", "abc"}));
  const std::vector<BadVocab> cases = {
      {"one token", "#version: 0.2\na b\nabc\n",
       "merges.txt line 3: expected two tokens separated by one space, found \"abc\""},
      {"three tokens", "a b c\n", "line 1: expected two tokens separated by one space, found \"a b c\""},
      {"two spaces", "a  b\n", "line 1: expected two tokens"},
      {"leading space", " a\n", "line 1: expected two tokens"},
      {"trailing space", "a \n", "line 1: expected two tokens"},
      {"blank line", "a b\n\nab c\n", "line 2: expected two tokens separated by one space, found \"\""},
      {"version not first", "a b\n#version: 0.2\n", "line 2: merge \"#version: 0.2\": token \"#version:\" is not in"},
      {"unknown token", "#version: 0.2\na b\nab zz\n",
       "merges.txt line 3: merge \"ab zz\": token \"zz\" is not in the vocabulary"},
      {"unknown result", "a b\nb a\n", "merges.txt line 2: merge \"b a\": its result \"ba\" is not in the vocabulary"},
      {"repeated", "a b\nab c\na b\n", "merges.txt line 3: merge \"a b\": repeats the merge of rank 0"},
  };
  for (const auto& c : cases)
    EXPECT_THAT(error_of([&] { Tokenizer::parse(vocab, c.json, "dir/vocab.json", "dir/merges.txt"); }),
                HasSubstr(c.message))
        << c.name;
}

TEST(TokenizerFiles, RefusesMissingFiles) {
  TempDir dir("tok");
  EXPECT_THAT(error_of([&] { Tokenizer::load_dir(dir.path()); }),
              HasSubstr((dir.path() / "vocab.json").string() + ": cannot open: No such file"));
  write_file_bytes(dir.path() / "vocab.json", vocab_json(vocab_with({})));
  EXPECT_THAT(error_of([&] { Tokenizer::load_dir(dir.path()); }),
              HasSubstr((dir.path() / "merges.txt").string() + ": cannot open"));
  fs::create_directory(dir.path() / "merges.txt");
  EXPECT_THAT(error_of([&] { Tokenizer::load_dir(dir.path()); }), HasSubstr("is a directory"));
}

TEST(TokenizerFiles, SaveThenLoadRoundTrips) {
  TempDir dir("tok");
  auto vocab = vocab_with({"ab", "abc", " ab", "\xC3\xA9", "\"q", "\"q\\"});
  vocab.push_back("<|endoftext|>");
  const Tokenizer t(vocab,
                    merges_of({{"a", "b"}, {"ab", "c"}, {" ", "ab"}, {"\xC3", "\xA9"}, {"\"", "q"}, {"\"q", "\\"}}));
  const fs::path out = dir.path() / "new" / "tok";  // created
  t.save(out);
  EXPECT_EQ(dir.listing(out), (std::vector<std::string>{"merges.txt", "vocab.json"}));  // no temporaries
  const std::string merges_text = read_file_bytes(out / "merges.txt");
  EXPECT_TRUE(merges_text.starts_with("#version: 0.2\na b\nab c\n\xC4\xA0 ab\n")) << merges_text;
  // vocab.json is plain JSON: any parser reads the same id for each token.
  const auto j = nlohmann::json::parse(read_file_bytes(out / "vocab.json"));
  ASSERT_EQ(j.size(), vocab.size());
  for (std::size_t i = 0; i < vocab.size(); ++i) EXPECT_EQ(j.at(vocab[i]).get<std::size_t>(), i);

  const Tokenizer u = Tokenizer::load_dir(out);
  EXPECT_EQ(u.vocab_size(), t.vocab_size());
  for (std::size_t i = 0; i < vocab.size(); ++i) EXPECT_EQ(u.token_string(std::int32_t(i)), vocab[i]);
  EXPECT_EQ(u.merges(), t.merges());
  EXPECT_EQ(u.eos_id(), t.eos_id());
  std::mt19937 rng(6);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_bytes(rng, 60) + " abc\xC3\xA9\"q\\";
    EXPECT_EQ(u.encode(s), t.encode(s));
  }
  // Saving again over existing files replaces them.
  const Tokenizer small(vocab_with({}), {});
  small.save(out);
  EXPECT_EQ(Tokenizer::load_dir(out).vocab_size(), 256u);
  EXPECT_EQ(read_file_bytes(out / "merges.txt"), "#version: 0.2\n");
}

TEST(TokenizerFiles, SaveFailsCleanly) {
  TempDir dir("tok");
  write_file_bytes(dir.path() / "file", "x");
  EXPECT_THAT(error_of([&] { bytes_only().save(dir.path() / "file"); }), HasSubstr("cannot create the directory"));
  // merges.txt is a directory: the rename fails, and no temporary file is left behind.
  fs::create_directories(dir.path() / "d" / "merges.txt" / "inside");
  EXPECT_THAT(error_of([&] { bytes_only().save(dir.path() / "d"); }), HasSubstr("merges.txt: cannot write"));
  for (const auto& name : dir.listing("d")) EXPECT_FALSE(name.starts_with(".")) << name;
}

// The prompt rules every command and the Python module share.
TEST(EncodePrompt, StartsFromEndOfTextAndRefusesTooLongOrOutOfVocabulary) {
  const Tokenizer plain = Tokenizer::parse(vocab_json(vocab_with({"ab"})), "a b\n");
  EXPECT_EQ(encode_prompt(plain, "abab", 8, 257), plain.encode("abab"));
  EXPECT_THAT(error_of([&] { encode_prompt(plain, "", 8, 257); }),
              HasSubstr("the prompt is empty and the vocabulary has no <|endoftext|>"));
  EXPECT_THAT(error_of([&] { encode_prompt(plain, "", 8, 257, "the second prompt"); }),
              HasSubstr("the second prompt is empty"));
  EXPECT_THAT(error_of([&] { encode_prompt(plain, "abcab", 2, 257); }),
              HasSubstr("the prompt has 3 tokens, more than the model's context of 2"));
  EXPECT_EQ(encode_prompt(plain, "abcab", 3, 257).size(), 3u);
  // "ab" is id 256: a model with 256 entries cannot take it.
  EXPECT_THAT(error_of([&] { encode_prompt(plain, "ab", 8, 256); }),
              HasSubstr("the tokenizer produced id 256 but the model's vocabulary has 256 entries"));

  const Tokenizer with_eos = Tokenizer::parse(vocab_json(vocab_with({"<|endoftext|>"})), "");
  ASSERT_TRUE(with_eos.eos_id().has_value());
  EXPECT_EQ(encode_prompt(with_eos, "", 8, 257), std::vector<std::int32_t>{*with_eos.eos_id()});
}

}  // namespace
}  // namespace jomoim
