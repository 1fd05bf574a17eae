// bpe_fuzz.cpp — libFuzzer target for the BPE tokenizer (src/text/).
//
// The first byte picks what the rest of the input is (byte % 3):
//   0  text, encoded with a small built-in vocabulary: decode(encode(x)) must give x back, the
//      pre-tokenization pieces must tile x, every id must be in range;
//   1  "merge spec" 0x00 text: the spec builds a vocabulary and merge list (each 3 bytes: two
//      indexes into the tokens made so far, and where in the rank order to put the merge), so
//      merge orders of every kind occur; encode must agree with a naive transcription of
//      GPT-2's bpe() loop, and round-trip;
//   2  vocab.json text 0x00 merges.txt text, given to the loader: it must build a tokenizer or
//      throw jomoim::Error with a one-line message; a tokenizer it builds must round-trip.
// A crash, a sanitizer report, an uncaught exception of another type or a broken check is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jomoim/text/tokenizer.hpp"
#include "naive_bpe.hpp"

namespace {

using jomoim::Tokenizer;
using jomoim::test::naive_bpe;

std::vector<std::string> byte_tokens() {
  std::vector<std::string> v;
  for (unsigned b = 0; b < 256; ++b) v.push_back(jomoim::bytes_to_unicode(std::string(1, char(b))));
  return v;
}

const Tokenizer& builtin() {
  static const Tokenizer t = [] {
    const std::vector<std::pair<std::string, std::string>> raw = {
        {" ", "t"}, {"h", "e"},   {"i", "n"},   {" t", "he"},     {"\xFF", "\xFF"},     {"\xFF\xFF", "\xFF\xFF"},
        {"e", "r"}, {" ", "a"},   {"o", "n"},   {"\xC3", "\xA9"}, {" ", "\xFF"},        {"'", "s"},
        {" ", " "}, {"  ", "  "}, {"\n", "\n"}, {"\xED", "\x95"}, {"\xED\x95", "\x9C"}, {"1", "2"},
        {"12", "3"}};
    std::vector<std::string> tokens = byte_tokens();
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& [a, b] : raw) {
      merges.emplace_back(jomoim::bytes_to_unicode(a), jomoim::bytes_to_unicode(b));
      tokens.push_back(jomoim::bytes_to_unicode(a + b));
    }
    tokens.push_back("<|endoftext|>");
    return Tokenizer(tokens, merges);
  }();
  return t;
}

void check_round_trip(const Tokenizer& t, std::string_view text) {
  const std::vector<std::int32_t> ids = t.encode(text);
  for (const std::int32_t id : ids)
    if (id < 0 || std::size_t(id) >= t.vocab_size()) __builtin_trap();
  if (t.decode(ids) != text) __builtin_trap();
}

void check_pieces(const Tokenizer& t, std::string_view text) {
  std::size_t at = 0;
  for (const auto& [offset, length] : t.pretokenize_spans(text)) {
    if (offset != at || length == 0) __builtin_trap();
    at = offset + length;
  }
  if (at != text.size()) __builtin_trap();
}

void fuzz_merge_spec(std::string_view spec, std::string_view text) {
  if (text.size() > 256) text = text.substr(0, 256);  // the naive loop is quadratic
  // Tokens start as the bytes of the spec's alphabet; indexes count from there.
  std::vector<std::string> pool;
  for (const char c : std::string_view("ab \xFF")) pool.emplace_back(1, c);
  std::set<std::string> have(pool.begin(), pool.end());
  std::vector<std::pair<std::string, std::string>> raw;
  std::set<std::pair<std::string, std::string>> used;
  for (std::size_t i = 0; i + 3 <= spec.size() && raw.size() < 64; i += 3) {
    const std::string a = pool[static_cast<unsigned char>(spec[i]) % pool.size()];
    const std::string b = pool[static_cast<unsigned char>(spec[i + 1]) % pool.size()];
    if (a.size() + b.size() > 12 || !used.insert({a, b}).second) continue;
    const std::size_t where = static_cast<unsigned char>(spec[i + 2]) % (raw.size() + 1);
    raw.insert(raw.begin() + std::ptrdiff_t(where), {a, b});
    if (have.insert(a + b).second) pool.push_back(a + b);
  }
  std::vector<std::string> tokens = byte_tokens();
  for (const auto& s : pool)
    if (s.size() > 1) tokens.push_back(jomoim::bytes_to_unicode(s));
  std::vector<std::pair<std::string, std::string>> merges;
  jomoim::test::MergeRanks ranks;
  for (const auto& [a, b] : raw) {
    ranks[{a, b}] = merges.size();
    merges.emplace_back(jomoim::bytes_to_unicode(a), jomoim::bytes_to_unicode(b));
  }
  const Tokenizer t(tokens, merges);  // valid by construction: must not throw
  std::vector<std::string> expected;
  for (const auto& piece : t.pretokenize(text))
    for (auto& s : naive_bpe(piece, ranks)) expected.push_back(std::move(s));
  const std::vector<std::int32_t> ids = t.encode(text);
  if (ids.size() != expected.size()) __builtin_trap();
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (t.token_bytes(ids[i]) != expected[i]) __builtin_trap();
  check_round_trip(t, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t nul = in.find('\0');
  const std::string_view first = in.substr(0, nul);
  const std::string_view second = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  switch (data[0] % 3) {
    case 0:
      check_round_trip(builtin(), in);
      check_pieces(builtin(), in);
      break;
    case 1:
      fuzz_merge_spec(first, second);
      break;
    default:
      try {
        const Tokenizer t = Tokenizer::parse(first, second, "fuzz/vocab.json", "fuzz/merges.txt");
        check_round_trip(t, first);
        check_round_trip(t, second);
        if (t.vocab_size() < 256) __builtin_trap();
      } catch (const jomoim::Error& e) {
        if (std::strchr(e.what(), '\n') != nullptr || e.what()[0] == '\0') __builtin_trap();
      }
      break;
  }
  return 0;
}
