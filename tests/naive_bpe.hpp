// naive_bpe.hpp — the oracle that test_tokenizer and fuzz/bpe_fuzz hold the tokenizer's merges
// to: GPT-2's bpe() from encoder.py, transcribed naively (find the lowest-ranked adjacent pair,
// merge every occurrence left to right, repeat), on raw-byte strings. Deliberately slow and
// obvious; nothing in the library uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jomoim::test {

// Merge ranks: a pair of pieces -> its line in merges.txt (lower merges first).
using MergeRanks = std::map<std::pair<std::string, std::string>, std::size_t>;

inline std::vector<std::string> naive_bpe(std::string_view piece, const MergeRanks& ranks) {
  std::vector<std::string> word;
  for (const char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    std::size_t best = SIZE_MAX;
    std::pair<std::string, std::string> bigram;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) {
        best = it->second;
        bigram = it->first;
      }
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> next;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  return word;
}

}  // namespace jomoim::test
