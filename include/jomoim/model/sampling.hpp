// jomoim/model/sampling.hpp — choosing the next token from logits: greedy, temperature, top-k, top-p.
//
// Deterministic for a given seed on every platform: the random numbers come from a fixed
// generator (SplitMix64) converted to doubles by jomoim itself, not from the standard library's
// implementation-defined distributions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace jomoim {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p; 1: all
  std::uint64_t seed = 0;
  void validate() const;  // temperature >= 0 and finite, top_k >= 0, 0 < top_p <= 1
};

// Softmax of logits / temperature in float64, for reporting distributions.
std::vector<double> softmax(std::span<const float> logits, double temperature = 1.0);

// The ids of the `n` largest values, largest first (ties: lower id first).
std::vector<std::int32_t> top_ids(std::span<const float> values, int n);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // Picks a token id. Order of filters as in Hugging Face: temperature, top-k, then top-p.
  std::int32_t sample(std::span<const float> logits);
  // The next uniform double in [0, 1) of this sampler's stream.
  double uniform();

 private:
  SamplingOptions options_;
  std::uint64_t state_;
};

}  // namespace jomoim
