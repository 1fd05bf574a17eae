// jomoim/text/tokenizer.hpp — GPT-2's byte-level BPE tokenizer: text bytes <-> token ids.
//
// How GPT-2 (and every model that reuses its tokenizer) turns text into ids:
//   1. Pre-tokenization splits the bytes into pieces with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (contractions; an optional space and a run of letters, of digits, or of other
//      characters; whitespace runs, leaving the last space to the next word). \p{L} and \p{N}
//      are real Unicode categories (PCRE2 with UTF + UCP); \s is Unicode's White_Space
//      property, as in the Python `regex` module GPT-2 was built with. Bytes that are not valid
//      UTF-8 are each treated as one character of the "other" kind, so any byte string splits.
//   2. Each piece starts as one token per byte (every byte has one), then merges are applied
//      by rank: the lowest-ranked adjacent pair is merged everywhere in the piece (left to
//      right, non-overlapping), repeatedly, until no adjacent pair has a merge.
//   3. Decoding concatenates the tokens' bytes, so decode(encode(x)) == x for every byte
//      string x, valid UTF-8 or not.
// Token strings are written in GPT-2's byte-to-unicode alphabet (bytes_to_unicode below): the
// token for " have" is "Ġhave". Files are Hugging Face's vocab.json + merges.txt.
//
// Thread safety: a Tokenizer is immutable after construction; all const members may be called
// from any number of threads at once. Copies are cheap (they share the tables).
// Memory: the vocabulary, the merge table and the merges list (about 10 MB for GPT-2's 50257
// tokens); encode uses scratch proportional to the input.
// Errors: jomoim::Error with a one-line message; nothing else is thrown for bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

class Tokenizer {
 public:
  // Reads vocab.json ({"token string": id, ...}, ids exactly 0..n-1) and merges.txt (an optional
  // "#version..." first line, then "left right" per line, rank = line order), as Hugging Face
  // writes them. Throws Error naming the file and the problem: unreadable file, malformed
  // JSON, a value that is not a non-negative integer, a duplicate token or id, ids with gaps,
  // a missing byte token, a merge line that is not two tokens separated by one space, a merge
  // of unknown tokens or whose result is not in the vocabulary, a repeated merge.
  static Tokenizer load(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // load(dir / "vocab.json", dir / "merges.txt").
  static Tokenizer load_dir(const std::filesystem::path& dir);
  // The same from the files' contents in memory; the names are used in error messages.
  static Tokenizer parse(std::string_view vocab_json, std::string_view merges_txt,
                         const std::string& vocab_name = "vocab.json", const std::string& merges_name = "merges.txt");

  // From memory: tokens[id] is the token string (byte-to-unicode form; a token outside that
  // alphabet, such as a special token with a space, stands for its own UTF-8 bytes), merges
  // in rank order. Throws Error (naming the token id or merge index) for: an empty or
  // non-UTF-8 token, a duplicate token, fewer than the 256 byte tokens, a merge part that is
  // not in the vocabulary or contains a space or line break, a merge result not in the
  // vocabulary, a repeated merge, more than 2^31 - 1 tokens.
  Tokenizer(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges);

  // Token ids of any byte string (invalid UTF-8 included; empty input gives no ids).
  std::vector<std::int32_t> encode(std::string_view utf8) const;
  // The exact bytes of the tokens, concatenated. Throws Error for an id outside 0..vocab_size-1.
  std::string decode(std::span<const std::int32_t> ids) const;
  // The raw bytes one token stands for. Throws Error for a bad id.
  std::string token_bytes(std::int32_t id) const;
  // The token as the vocabulary writes it, e.g. "Ġhave". Throws Error for a bad id.
  const std::string& token_string(std::int32_t id) const;
  // The id of a token string (vocabulary form), if there is one.
  std::optional<std::int32_t> id_of(std::string_view token_string) const;
  std::size_t vocab_size() const;
  // The id of "<|endoftext|>" if the vocabulary has it (GPT-2: 50256).
  std::optional<std::int32_t> eos_id() const;

  // GPT-2's pre-tokenization: the pieces (raw bytes) that BPE runs on, in order; they
  // concatenate to the input. Exposed for tests and the BPE trainer.
  std::vector<std::string> pretokenize(std::string_view utf8) const;
  // The same pieces as (offset, length) into the input, without copying them.
  std::vector<std::pair<std::size_t, std::size_t>> pretokenize_spans(std::string_view utf8) const;
  // Merges by rank (index = rank), in token-string form.
  const std::vector<std::pair<std::string, std::string>>& merges() const;

  // Writes dir/vocab.json and dir/merges.txt ("#version: 0.2" first) in Hugging Face's format,
  // creating dir if needed. Each file is written to a temporary file and renamed into place
  // only when both are complete, so a failure leaves the previous files as they were (an
  // error between the two renames can leave a new vocab.json with the old merges.txt).
  // Throws Error naming the file on any I/O failure.
  void save(const std::filesystem::path& dir) const;

  struct Impl;  // the shared, immutable tables (src/text/tokenizer_impl.hpp)

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// GPT-2's byte -> printable-unicode mapping, applied to each byte: the printable bytes
// '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves (as code points), the other 68 bytes map
// in order to U+0100..U+0143 (so ' ' -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A). Returns UTF-8.
std::string bytes_to_unicode(std::string_view bytes);
// The inverse. Throws Error for invalid UTF-8 or a character outside the 256-character alphabet.
std::string unicode_to_bytes(std::string_view text);

// A prompt as a model's input ids, as every command makes it: an empty text starts from
// <|endoftext|> where the vocabulary has one. Throws Error naming `what` (e.g. "the prompt")
// when the text is empty and there is no <|endoftext|>, when it has more than `context` tokens,
// and when an id is not below `vocab_size` (a vocab.json that does not match config.json).
std::vector<std::int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, int context, int vocab_size,
                                        std::string_view what = "the prompt");

// A token's bytes as a display string that is always valid UTF-8 on one line: well-formed
// UTF-8 sequences pass through; \n, \t, \r and the backslash become \n, \t, \r and \\;
// other control bytes and every byte that does not start a well-formed sequence (continuation
// bytes, truncated, overlong or surrogate forms, code points above U+10FFFF) become \xNN.
std::string printable_text(std::string_view bytes);

}  // namespace jomoim
