// jomoim/explain/explain.hpp — the "meeting minutes" of a forward pass, for `jomoim explain`,
// `jomoim serve` and the Python module.
//
// explain_result() runs one prompt through a GptModel with ForwardOptions::trace set and returns
// every number the explorer shows as a typed Explanation; to_json() turns it into the versioned
// schema "jomoim.explain/1" documented in docs/explain.md (the single source of truth for the
// terminal view, the web page, the HTTP API and Python's Model.explain, which gets NumPy
// arrays straight from the typed result). The numbers are the ones the model computed (copies
// from the trace of the real pass); only norms, entropies, means, raw scores of the selected
// heads (Q_i . K_j from the traced q and k), scaled scores and transposes are derived here.
//
// Passes: one traced pass of the prompt; with `silence` or `swap_qk` a second, plain pass
// (the "baseline", untraced); with `compare` the same again for the second prompt; one traced
// pass of the head roles' probe (below), shared by both prompts; with `generate`,
// jomoim::generate's own passes, then the same passes replayed with the trace on.
//
// Memory is bounded by what was asked: the selected heads' matrices (4 T x head_dim and 3 T x T
// per head) plus, while a pass runs, one layer's softmax weights [n_head, T, T] from which every
// head's summary is taken. With matrices = false (summary only) nothing T x T outlives its layer:
// GPT-2 small at T = 1024 needs ~50 MB of trace instead of ~1.2 GB.
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

// ---------------------------------------------------------------------------------------------
// The typed result of explain(): every number docs/explain.md lists, in the paper's layout.
// JSON (and the 3Blue1Brown transposes) is made from it at the edges: to_json() for the CLI's
// --json and the server, NumPy arrays for Python. Token texts are valid UTF-8 (printable_text).

struct ExplainCandidate {  // one next-token candidate of a prediction
  std::int32_t id = 0;
  std::string text;
  double probability = 0;
  float logit = 0;  // the model's float32 logit
};
struct ExplainPrediction {
  std::vector<ExplainCandidate> top;  // most likely first (ties: lower id first)
  double entropy = 0;                 // nats, over the whole vocabulary
};
struct ExplainShift {  // one id of either pass's top list: p in the first pass (a), in the second (b)
  std::int32_t id = 0;
  std::string text;
  double a = 0, b = 0, delta = 0;  // delta = b - a
};
struct ExplainToken {
  int index = 0;
  std::int32_t id = 0;
  std::string text;
  std::optional<std::string> token;  // the vocabulary's spelling; none for ids past the tokenizer
  bool silenced = false;
  double token_embedding_norm = 0, position_embedding_norm = 0, embedding_norm = 0;
};
struct ExplainHeadSummary {
  int layer = 0, head = 0;
  double focus = 0, entropy = 0;
  std::optional<int> last_token_attends_to;
  double last_token_weight = 0;
};
// One selected head's matrices ("layers[l].heads[h]"), paper layout, T tokens, D = head_dim.
struct ExplainHeadMatrices {
  int layer = 0, head = 0, T = 0, D = 0;
  float scale = 0;
  std::vector<float> q, k, v, out;  // [T, D], as the model computed them
  std::vector<float> weights;       // [T, T], the engine's softmax weights (0 where masked)
  std::vector<float> scores;        // [T, T], raw Q_i . K_j (float64 dot of the float32 q, k), every pair
  std::vector<std::uint8_t> mask;   // [T, T], 1 where query i hears key j (j <= i, j not silenced)
  std::vector<double> value_norms;  // [T], ||V_j||
};
struct ExplainLogit {
  std::int32_t id = 0;
  std::string text;
  float logit = 0;
};
struct ExplainHeadAttribution {
  int layer = 0, head = 0;
  double total = 0;
  std::vector<double> by_source;  // [keys]
};
struct ExplainAttribution {
  ExplainLogit target;
  std::optional<ExplainLogit> contrast;
  double token_embedding = 0, position_embedding = 0;
  std::vector<ExplainHeadAttribution> heads;  // (layer, head) order
  std::vector<double> mlps;                   // [n_layer]
  double biases = 0, sum = 0;
};
struct ExplainLensCandidate {
  std::int32_t id = 0;
  std::string text;
  double probability = 0, logit = 0;  // float64 readout of the residual stream
};
struct ExplainLensEntry {
  int layer = -1;  // -1: after the embeddings
  std::vector<ExplainLensCandidate> top;
};
struct ExplainRoleScores {
  int layer = 0, head = 0;
  std::optional<double> previous_token, first_token, self, induction;
  std::vector<std::string> labels;  // head_role_labels()
};
struct ExplainHeadRoles {
  std::string measured_on;  // "prompt" or "probe"
  bool has_probe = false;
  int probe_length = 0;  // R
  bool probe_bos = false;
  std::vector<std::int32_t> probe_ids;
  std::vector<ExplainRoleScores> heads;  // (layer, head) order
};
struct ExplainLastTokenAttention {
  int index = 0;                        // the last token's position
  int keys = 0;                         // Tk
  std::vector<double> mean_over_heads;  // [n_layer, keys]
};
struct ExplainStep {
  int step = 0, position = 0;
  std::int32_t id = 0;
  std::string text;
  std::optional<std::string> token;
  double probability = 0;
  float logit = 0;
  ExplainPrediction prediction;
  int keys = 0;                  // T + step
  std::vector<float> attention;  // [n_layer, n_head, keys], the new token's weights
  ExplainLastTokenAttention last_token_attention;
  ExplainAttribution attribution;
  std::vector<ExplainLensEntry> logit_lens;
};
struct ExplainGeneration {
  std::vector<std::int32_t> ids;
  std::string text, stop;
  std::uint64_t seed = 0;
  float temperature = 0, top_p = 0;
  int top_k = 0;
  bool stop_at_eos = true;
};
// Everything about one prompt.
struct ExplainPrompt {
  std::string prompt;
  std::vector<int> silenced;  // sorted, unique
  std::vector<ExplainToken> tokens;
  ExplainPrediction prediction;
  std::optional<ExplainPrediction> baseline;  // with silence or swap_qk: the plain pass
  std::vector<ExplainShift> baseline_shift;   // a: baseline, b: this pass
  std::vector<ExplainHeadSummary> heads;      // most focused first
  ExplainHeadRoles head_roles;
  ExplainLastTokenAttention last_token_attention;
  std::vector<ExplainHeadMatrices> layers;  // the selected heads, (layer, head) order
  ExplainAttribution attribution;
  std::vector<ExplainLensEntry> logit_lens;  // n_layer + 1
  std::optional<ExplainGeneration> generation;
  std::vector<ExplainStep> steps;
  std::vector<ExplainShift> shift;  // the compare prompt only: a: the first prompt, b: this one
};
struct Explanation {
  GptConfig config;
  KvFormat kv_cache = KvFormat::f32;              // the format of the passes' KV caches (GptModel::kv_format)
  WeightFormat weights = WeightFormat::f32;       // the model's weight format (GptModel::weight_format)
  MatmulPrecision matmul = MatmulPrecision::f32;  // its prompt products' precision (GptModel::matmul)
  std::string model_name;
  ExplainOptions options;  // as asked, silence sorted and unique
  ExplainPrompt main;
  std::optional<ExplainPrompt> compare;
};

// Throws Error (one line) for an empty prompt when the vocabulary has no <|endoftext|> to start
// from, a prompt (or compare prompt) longer than the context, a tokenizer id outside the
// model's vocabulary, a layer/head index out of range, a silence index outside either prompt,
// top < 1, a target or contrast that is empty or not exactly one token, a contrast equal to the
// target, a contrast without a target, generate < 0 or > kMaxExplainSteps, generate with compare,
// silence or swap_qk, bad sampling options (SamplingOptions::validate). An empty prompt is
// explained as the single token <|endoftext|>.
//
// Memory: the passes keep only what was asked. Matrices of the selected heads (all of them by
// default); with matrices = false none: the summaries are taken from each layer's weights as
// the pass goes (one layer's [n_head, T, T] at a time). Baseline passes trace nothing.
Explanation explain_result(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                           const ExplainOptions& options = {});

struct ExplainJsonOptions {
  // The notation of every matrix; default: the one the explanation was asked in.
  std::optional<ExplainNotation> notation;
  // false: leave out the big arrays (layers' matrices and last_token arrays, every
  // mean_over_heads, steps' attention); the Python module adds them as NumPy arrays.
  bool arrays = true;
};
// The JSON of docs/explain.md, schema "jomoim.explain/1". Strings are valid UTF-8, so dump()
// never throws on it.
nlohmann::json to_json(const Explanation& e, const ExplainJsonOptions& options = {});

// E_i of token `index` of the prompt (encoded as explain() does): {"index", "id", "text",
// "token_embedding", "position_embedding" (the rows of wte and wpe the pass adds), "embedding"
// (their float32 sum)}, float32 printed as in to_json(). Throws Error for an index outside the
// prompt's tokens or a prompt longer than the context.
nlohmann::json embedding_json(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt, int index);

// to_json(explain_result(...)).
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
