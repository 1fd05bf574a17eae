// jomoim/text/bpe_train.hpp — learning a byte-level BPE vocabulary from text (GPT-2's scheme).
//
// The text is split with GPT-2's pre-tokenization (Tokenizer::pretokenize), so merges never
// cross word boundaries; the 256 byte tokens come first (id = byte value), then one token per
// learned merge in rank order, then "<|endoftext|>". Each step merges the most frequent
// adjacent pair (ties: the pair of lower ids), counting every word by its frequency. The result
// is deterministic for a given input and options.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "jomoim/text/tokenizer.hpp"

namespace jomoim {

struct BpeTrainOptions {
  int vocab_size = 4096;  // total, including the 256 byte tokens and <|endoftext|>; >= 257
  int min_frequency = 2;  // stop early when the best pair occurs fewer times than this
};

// progress(merges_done, merges_wanted) is called now and then.
Tokenizer train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& options,
                    const std::function<void(int, int)>& progress = {});

}  // namespace jomoim
