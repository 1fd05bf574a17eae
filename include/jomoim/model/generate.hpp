// jomoim/model/generate.hpp — continuing a prompt token by token with a KV cache: the one
// generation loop of `jomoim generate` and of Python's Model.generate / Model.stream.
//
// The rules: the prompt runs through the model once (the prefill), then each step samples one
// token from the last logits (jomoim::Sampler: temperature, top-k, top-p, the seed) and feeds
// it back through the cache. It stops after max_tokens tokens ("length"), at the end-of-text
// id if one is given ("eos", that id not emitted), when prompt + generated fill the model's
// context ("context"), or when the caller's callback says so ("stopped"). A token is fed to
// the model only when another token will be sampled from its logits, so no forward pass is
// wasted after the last one. The same model, prompt and options give the same tokens on every
// platform (for a given thread count, as the forward pass).
//
// Not here: tokenization and text (the caller decodes token ids), threads (the model's
// set_threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "jomoim/model/model.hpp"
#include "jomoim/model/sampling.hpp"

namespace jomoim {

// A fresh seed for a generation that was given none: 32 bits of std::random_device (what
// `jomoim generate` has always drawn). The caller reports it, so the run can be repeated.
std::uint64_t fresh_seed();

struct GenerateOptions {
  int max_tokens = 50;              // at most this many new tokens (>= 0)
  SamplingOptions sampling;         // temperature, top_k, top_p, seed
  std::optional<std::int32_t> eos;  // stop at this id (not emitted); nullopt: never
  void validate() const;            // max_tokens >= 0 and sampling.validate()
};

enum class StopReason { none, length, eos, context, stopped, error };
// "length", "eos", "context", "stopped", "error" ("" for none): the names the CLI's JSON and
// Python's Stream.stop use.
const char* stop_name(StopReason reason);

// One generation in progress, pulled one token at a time (Python's iterator drives it; the
// CLI drives it through jomoim::generate). Holds its own KV cache, sized prompt + max_tokens
// (at most the context). The model must outlive it. Not for two threads at once.
class Generation {
 public:
  // Checks the options (throws Error) and sizes the cache; no forward pass yet.
  Generation(const GptModel& model, std::vector<std::int32_t> prompt, const GenerateOptions& options);

  // Runs the prompt through the model if that has not happened yet (next() does it on its
  // first call; call it first to time the prefill on its own).
  void prefill();
  // The next token id, or nullopt once the generation has stopped (stop() says why; later
  // calls return nullopt again). After an exception stop() is StopReason::error.
  std::optional<std::int32_t> next();
  // Ends the generation early with StopReason::stopped (if it has not stopped already).
  void cancel();

  StopReason stop() const { return stop_; }
  const std::vector<std::int32_t>& prompt() const { return prompt_; }
  const std::vector<std::int32_t>& ids() const { return out_; }
  std::uint64_t seed() const { return seed_; }

 private:
  std::optional<std::int32_t> step();
  std::size_t sequence_length() const { return prompt_.size() + out_.size(); }

  const GptModel* model_;
  std::vector<std::int32_t> prompt_;
  int max_tokens_;
  std::optional<std::int32_t> eos_;
  Sampler sampler_;
  std::uint64_t seed_;
  KvCache cache_;
  std::vector<float> logits_;
  std::vector<std::int32_t> out_;
  std::optional<std::int32_t> pending_;  // sampled, not yet fed to the model
  StopReason stop_ = StopReason::none;
  bool prefilled_ = false;
};

struct GenerateResult {
  std::vector<std::int32_t> ids;  // the generated tokens (not the prompt)
  StopReason stop = StopReason::none;
  double prefill_ms = 0;  // the prompt's forward pass
  double decode_ms = 0;   // everything after it: sampling, forward passes, callbacks
};

// The whole loop: calls on_token(id) for each new token as soon as it is sampled (streaming);
// a callback that returns false ends the generation there (StopReason::stopped, that token
// kept). Without a callback it simply runs to the end.
GenerateResult generate(const GptModel& model, std::span<const std::int32_t> prompt, const GenerateOptions& options,
                        const std::function<bool(std::int32_t)>& on_token = {});

}  // namespace jomoim
