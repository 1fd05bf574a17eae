// Learning byte-level BPE merges. See include/jomoim/text/bpe_train.hpp.
#include "jomoim/text/bpe_train.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace jomoim {
namespace {

using Pair = std::uint64_t;  // (left id << 32) | right id
Pair make_pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

Tokenizer train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& options,
                    const std::function<void(int, int)>& progress) {
  if (options.vocab_size < 257)
    throw Error("BPE training: vocab_size must be at least 257 (256 bytes + <|endoftext|>), got " +
                std::to_string(options.vocab_size));
  if (options.min_frequency < 1) throw Error("BPE training: min_frequency must be at least 1");

  // The byte alphabet: token id b is byte b.
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = bytes_to_unicode(std::string(1, static_cast<char>(b)));
  const Tokenizer bytes_only(tokens, {});

  // Word frequencies over the pre-tokenized pieces.
  std::unordered_map<std::string_view, std::int64_t> freq;
  for (std::string_view text : texts)
    for (auto [off, len] : bytes_only.pretokenize_spans(text)) ++freq[text.substr(off, len)];
  std::vector<std::pair<std::string_view, std::int64_t>> sorted(freq.begin(), freq.end());
  std::sort(sorted.begin(), sorted.end());  // a fixed order, independent of hashing
  std::vector<std::vector<std::int32_t>> words;
  std::vector<std::int64_t> counts;
  words.reserve(sorted.size());
  for (auto& [w, n] : sorted) {
    std::vector<std::int32_t> sym(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) sym[i] = static_cast<unsigned char>(w[i]);
    if (sym.size() < 2) continue;  // single bytes never form a pair
    words.push_back(std::move(sym));
    counts.push_back(n);
  }

  std::unordered_map<Pair, std::int64_t> pairs;
  for (std::size_t w = 0; w < words.size(); ++w)
    for (std::size_t i = 0; i + 1 < words[w].size(); ++i)
      pairs[make_pair_key(words[w][i], words[w][i + 1])] += counts[w];

  std::vector<std::pair<std::string, std::string>> merges;
  std::unordered_map<std::string, std::int32_t> id_of;
  for (int b = 0; b < 256; ++b) id_of[tokens[b]] = b;
  const int wanted = options.vocab_size - 257;
  int added = 0;
  while (added < wanted) {
    Pair best = 0;
    std::int64_t best_n = 0;
    for (const auto& [p, n] : pairs)
      if (n > best_n || (n == best_n && n > 0 && p < best)) {
        best = p;
        best_n = n;
      }
    if (best_n < options.min_frequency) break;
    const auto a = static_cast<std::int32_t>(best >> 32), b = static_cast<std::int32_t>(best & 0xffffffffu);
    std::string merged = tokens[a] + tokens[b];
    std::int32_t id;
    if (auto it = id_of.find(merged); it != id_of.end()) {
      id = it->second;  // another merge order already made this string
    } else {
      id = static_cast<std::int32_t>(tokens.size());
      tokens.push_back(merged);
      id_of.emplace(merged, id);
      ++added;
    }
    merges.emplace_back(tokens[a], tokens[b]);

    // Rewrite the words that contain the pair, updating pair counts around each change.
    for (std::size_t w = 0; w < words.size(); ++w) {
      auto& s = words[w];
      bool has = false;
      for (std::size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
      if (!has) continue;
      const std::int64_t n = counts[w];
      for (std::size_t i = 0; i + 1 < s.size(); ++i) {
        auto it = pairs.find(make_pair_key(s[i], s[i + 1]));
        if ((it->second -= n) == 0) pairs.erase(it);
      }
      std::vector<std::int32_t> out;
      out.reserve(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = std::move(out);
      for (std::size_t i = 0; i + 1 < s.size(); ++i) pairs[make_pair_key(s[i], s[i + 1])] += n;
    }
    if (progress && (merges.size() % 64 == 0)) progress(added, wanted);
  }
  if (progress) progress(added, wanted);
  tokens.push_back("<|endoftext|>");
  return Tokenizer(std::move(tokens), std::move(merges));
}

}  // namespace jomoim
