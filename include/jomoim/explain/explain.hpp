// jomoim/explain/explain.hpp — the "meeting minutes" of a forward pass, for `jomoim explain`,
// `jomoim serve` and the Python module.
//
// explain() runs one prompt through a GptModel with ForwardOptions::trace set and returns every
// number the explorer shows, as JSON in the versioned schema "jomoim.explain/1" documented in
// docs/explain.md (the single source of truth for the terminal view, the web page, the HTTP
// API and Python's Model.explain). The numbers are the ones the model computed (trace of the
// real pass), not a re-computation: Q, K, V, raw scores Q_i . K_j, softmax weights, per-head
// outputs and embeddings are copied from the trace (float32, printed with the fewest digits
// that read back as the same float); only norms, entropies, means, scaled scores (score *
// scale) and the 3Blue1Brown transposes are derived here.
//
// Passes: one traced pass of the prompt; with `silence` or `swap_qk` a second, plain pass
// (the "baseline"); with `compare` the same again for the second prompt.
//
// Memory and size: the result holds, per selected head, 4 T x head_dim and 4 T x T matrices
// (T = prompt tokens); for GPT-2 small at T = 1024 with every head selected that is ~600
// million numbers. Select a layer/head, or set `matrices = false` (summary only), for long
// prompts on large models.
//
// Thread safety: explain() only reads the model and tokenizer (each call has its own KV
// cache), so concurrent calls on the same model are safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/core/notation.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/text/tokenizer.hpp"

namespace jomoim {

// The explorer writes its matrices in either notation (jomoim/core/notation.hpp).
using ExplainNotation = Notation;

struct ExplainOptions {
  ExplainNotation notation = ExplainNotation::paper;
  std::optional<int> layer;            // only this layer's heads carry full matrices (default: all)
  std::optional<int> head;             // only this head (in every selected layer)
  std::vector<int> silence;            // token indices whose keys nobody hears (every layer and head);
                                       // duplicates are ignored, the list is reported sorted
  bool swap_qk = false;                // each layer's W_K makes queries and W_Q makes keys
  int top = 10;                        // next-token candidates listed (clamped to the vocabulary)
  std::optional<std::string> compare;  // a second prompt, explained with the same options
  std::string model_name;              // shown in the output (e.g. the model directory)
  bool matrices = true;                // false: "layers" is empty (tokens, prediction, heads summary only)
  // The token whose logit "attribution" decomposes (default: the predicted next token of each
  // prompt) and an optional second token: then the decomposed quantity is logit(target) -
  // logit(contrast). Each must encode to exactly one token.
  std::optional<std::string> target;
  std::optional<std::string> contrast;
};

// Throws Error (one line) for an empty prompt when the vocabulary has no <|endoftext|> to start
// from, a prompt (or compare prompt) longer than the context, a tokenizer id outside the
// model's vocabulary, a layer/head index out of range, a silence index outside either prompt,
// top < 1, a target or contrast that is empty or not exactly one token, a contrast equal to the
// target, a contrast without a target. An empty prompt is explained as the single token <|endoftext|>. Strings in the
// result are valid UTF-8 (token texts escape control characters and invalid bytes as \n, \xNN;
// the prompt's invalid bytes become U+FFFD), so nlohmann::json::dump() never throws on it.
nlohmann::json explain(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                       const ExplainOptions& options = {});

}  // namespace jomoim
