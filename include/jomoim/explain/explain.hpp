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
// (the "baseline"); with `compare` the same again for the second prompt; one traced pass of the
// head roles' probe (below), shared by both prompts; with `generate`, jomoim::generate's own
// passes, then the same passes replayed with the trace on (one decode step per new token).
//
// Memory and size: the result holds, per selected head, 4 T x head_dim and 4 T x T matrices
// (T = prompt tokens); for GPT-2 small at T = 1024 with every head selected that is ~600
// million numbers. Select a layer/head, or set `matrices = false` (summary only), for long
// prompts on large models.
//
// Thread safety: explain() only reads the model and tokenizer (each call has its own KV
// cache), so concurrent calls on the same model are safe.
#pragma once

#include <cstdint>
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
  // Generation ("generation" and "steps", docs/explain.md): continue the prompt by up to
  // `generate` tokens with jomoim::generate (the loop of `jomoim generate`: the same sampling
  // options and seed give the same tokens), then explain each new token from the pass that
  // predicted it (the prompt's prefill, then one cached decode step per token, replayed with
  // the trace on): its attention, prediction, attribution and logit lens. 0: no generation;
  // at most kMaxExplainSteps; not with compare, silence or swap_qk.
  int generate = 0;
  float temperature = 0.0f;           // 0: greedy (this is explain's default, not generate's)
  int top_k = 40;                     // as `jomoim generate`
  float top_p = 0.95f;                // as `jomoim generate`
  std::optional<std::uint64_t> seed;  // absent: a fresh one (fresh_seed()), reported in "generation"
  bool stop_at_eos = true;            // stop at <|endoftext|> (not emitted), as `jomoim generate`
};

inline constexpr int kMaxExplainSteps = 64;  // ExplainOptions::generate at most

// Throws Error (one line) for an empty prompt when the vocabulary has no <|endoftext|> to start
// from, a prompt (or compare prompt) longer than the context, a tokenizer id outside the
// model's vocabulary, a layer/head index out of range, a silence index outside either prompt,
// top < 1, a target or contrast that is empty or not exactly one token, a contrast equal to the
// target, a contrast without a target, generate < 0 or > kMaxExplainSteps, generate with compare,
// silence or swap_qk, bad sampling options (SamplingOptions::validate). An empty prompt is explained as the single
// token <|endoftext|>. Strings in the result are valid UTF-8 (token texts escape control characters and invalid bytes
// as \n, \xNN; the prompt's invalid bytes become U+FFFD), so nlohmann::json::dump() never throws on it.
nlohmann::json explain(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                       const ExplainOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Head roles (docs/explain.md, "head_roles"): every head measured on its own.
//
// previous_token, first_token, self: the mean over the query positions i >= 1 of the prompt
// (query 0 can only hear itself) of the weight on key i - 1, on key 0, on key i.
// induction: on the role probe, a fixed sequence built from the model alone: R distinct token
// ids (R = min(50, (context - b) / 2, the ids available)), drawn by SplitMix64 from seed 1 as
// id = next() % vocab_size (an id already drawn, or <|endoftext|>, is skipped), repeated twice,
// after one <|endoftext|> (b = 1) when the vocabulary has it (b = 0 otherwise). The score is the
// mean over the R queries of the second copy (positions b + R + r, r = 0..R-1) of the weight
// on the token after the previous occurrence of the query's token (position b + r + 1).
// A head gets a label for each score that reaches its threshold.
struct HeadRoleThresholds {
  static constexpr double induction = 0.4;
  static constexpr double previous_token = 0.6;
  static constexpr double first_token = 0.6;
  static constexpr double self = 0.6;
};
inline constexpr std::uint64_t kRoleProbeSeed = 1;
inline constexpr int kRoleProbeLength = 50;  // R at most

// The names of the scores that reach their thresholds, the most specific role first:
// "induction", "previous_token", "self", "first_token". An absent score passes nothing.
std::vector<std::string> head_role_labels(std::optional<double> previous_token, std::optional<double> first_token,
                                          std::optional<double> self, std::optional<double> induction);

// The role probe's ids (see above) for a model of this config; bos: the <|endoftext|> id, if
// any. *length (if given) receives R; R < 2 (a context under 5 tokens, or fewer than 2 ids to
// draw) gives no probe: empty ids, and induction scores are null.
std::vector<std::int32_t> role_probe_ids(const GptConfig& config, std::optional<std::int32_t> bos,
                                         int* length = nullptr);

// `jomoim heads`: the head roles of the model alone ({"schema": "jomoim.heads/1", "model",
// "prompt", "head_roles"}, docs/explain.md). Without a prompt the previous-token, first-token
// and self scores are measured on the probe itself (head_roles.measured_on = "probe"); with one,
// on the prompt, as explain() does. swap_qk: measure the model with queries and keys swapped.
// Throws Error for a prompt longer than the context, or empty without <|endoftext|>.
nlohmann::json head_roles(const GptModel& model, const Tokenizer& tokenizer, const std::optional<std::string>& prompt,
                          bool swap_qk = false, const std::string& model_name = {});

}  // namespace jomoim
