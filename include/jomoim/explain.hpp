// jomoim/explain.hpp — the "meeting minutes" of a forward pass, for `jomoim explain`,
// `jomoim serve` and the Python module.
//
// explain() runs one prompt through a GptModel with ForwardOptions::trace set and returns every
// number the explorer shows, as JSON in the versioned schema "jomoim.explain/1" documented in
// docs/explain.md (the single source of truth for the terminal view, the web page, the HTTP
// API and Python's Model.explain). The numbers are the ones the model computed (trace of the
// real pass), not a re-computation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/model.hpp"
#include "jomoim/tokenizer.hpp"

namespace jomoim {

enum class ExplainNotation { paper, col3b1b };

struct ExplainOptions {
  ExplainNotation notation = ExplainNotation::paper;
  std::optional<int> layer;       // only this layer's heads carry full matrices (default: all)
  std::optional<int> head;        // only this head (in every selected layer)
  std::vector<int> silence;       // token indices whose keys nobody hears (every layer and head)
  bool swap_qk = false;           // each layer's W_K makes queries and W_Q makes keys
  int top = 10;                   // next-token candidates listed
  std::optional<std::string> compare;  // a second prompt, explained with the same options
  std::string model_name;         // shown in the output (e.g. the model directory)
};

// Throws Error (one line) for an empty prompt (and no <|endoftext|>), a prompt longer than the
// context, a layer/head/silence index out of range.
nlohmann::json explain(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                       const ExplainOptions& options = {});

}  // namespace jomoim
