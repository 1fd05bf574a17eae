// serve/request.hpp — the JSON request bodies of `jomoim serve`'s API, parsed into options.
//
// This is the part of the server that reads untrusted input: a request body (bytes) becomes an
// ExplainOptions + prompt, or a prompt to tokenize, or a one-line refusal. It knows nothing of
// HTTP or sockets (fuzz/serve_request_fuzz.cpp drives it directly).
//
// POST /api/explain body, every field but "prompt" optional, unknown fields refused:
//   {"prompt": "I have a lot", "compare": "Cash or credit card? I have a lot" | null,
//    "layer": 0 | null, "head": 0 | null, "notation": "paper" | "3b1b",
//    "silence": [0, 2], "swap_qk": false, "top": 10, "matrices": true,
//    "target": " of" | null, "contrast": "." | null,
//    "generate": 0, "temperature": 0.0, "top_k": 40, "top_p": 0.95, "seed": 3 | null, "ignore_eos": false}
// ("matrices": false leaves out the per-head matrices: tokens, prediction and head summary only;
// "target"/"contrast": the one-token texts of the answer's "attribution"; "generate": new tokens
// explained step by step ("steps"), sampled as `jomoim generate` with the other five, greedy by
// default, a fresh seed when none is given; docs/explain.md.)
// POST /api/tokenize body: {"prompt": "..."}.
// POST /api/embedding body: {"prompt": "...", "index": 3}: the embedding E_i of token i.
//
// Errors: RequestError (a jomoim::Error) with a one-line message naming the field and the
// limit; its status() is the HTTP status to answer with (400, or 413 for a body over the limit).
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "jomoim/core/tensor.hpp"
#include "jomoim/explain/explain.hpp"

namespace jomoim::serve {

// What one request may ask for. The token limit is the model's context (n_positions), checked
// by the server after tokenizing; these are the limits on the raw text and numbers.
struct RequestLimits {
  std::size_t max_body_bytes = 64 * 1024;  // the whole JSON body
  std::size_t max_prompt_bytes = 4096;     // each of "prompt" and "compare", in UTF-8 bytes
  int max_top = 100;                       // "top" is 1..max_top (and at most the vocabulary)
  // Numbers in the per-head matrices of one answer (q, k, v, out: T x head_dim; scores,
  // scaled, weights, mask: T x T; per selected head, both prompts). 8M numbers is ~100 MB of
  // JSON; beyond it the request must select a layer/head or ask for "matrices": false.
  std::size_t max_matrix_numbers = 8'000'000;
  int max_generate = 32;  // "generate" is 0..max_generate (and at most kMaxExplainSteps)
};

// The model sizes the numbers are checked against (layer < n_layer, head < n_head,
// silence indices < n_positions, top <= vocab_size).
struct ModelShape {
  int n_layer = 0, n_head = 0, n_positions = 0, vocab_size = 0;
};

class RequestError : public Error {
 public:
  RequestError(int status, const std::string& message) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

struct ExplainRequest {
  std::string prompt;
  ExplainOptions options;  // model_name is left empty; the server fills it in
};

// Throws RequestError: body over the limit (413), not valid JSON or not an object, an unknown
// field, a field of the wrong type, a prompt over the byte limit, layer/head/top/silence out of
// range, a silence index repeated, notation other than "paper" / "3b1b", generate outside
// 0..max_generate, temperature / top_p not a number, top_k or seed not a non-negative integer.
ExplainRequest parse_explain_request(std::string_view body, const ModelShape& shape, const RequestLimits& limits = {});

// {"prompt": "..."} -> the prompt. The same refusals for the body and the prompt.
std::string parse_tokenize_request(std::string_view body, const RequestLimits& limits = {});

// {"prompt": "...", "index": i} -> both. The same refusals for the body and the prompt; "index"
// is required, an integer in 0..n_positions - 1 (the server checks it against the prompt's
// tokens).
struct EmbeddingRequest {
  std::string prompt;
  int index = 0;
};
EmbeddingRequest parse_embedding_request(std::string_view body, const ModelShape& shape,
                                         const RequestLimits& limits = {});

}  // namespace jomoim::serve
