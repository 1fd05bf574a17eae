// Helpers for the model tests: a random GPT-2 held in memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "jomoim/model/model.hpp"

namespace jomoim::test {

// One buffer for all weights; GptParams points into it.
struct OwnedGpt {
  GptConfig config;
  std::shared_ptr<std::vector<float>> storage;
  GptParams params;

  GptModel model() const { return GptModel(config, params, {storage}); }
};

inline OwnedGpt random_gpt(const GptConfig& c, std::uint64_t seed) {
  OwnedGpt g;
  g.config = c;
  const std::size_t C = c.n_embd, F = c.inner(), V = c.vocab_size, P = c.n_positions;
  g.storage = std::make_shared<std::vector<float>>(static_cast<std::size_t>(c.parameter_count()));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* at = g.storage->data();
  auto take = [&](std::size_t n, float scale, float offset = 0.0f) {
    float* p = at;
    for (std::size_t i = 0; i < n; ++i) p[i] = offset + scale * normal(rng);
    at += n;
    return p;
  };
  g.params.wte = take(V * C, 0.3f);
  g.params.wpe = take(P * C, 0.1f);
  g.params.blocks.resize(c.n_layer);
  for (auto& b : g.params.blocks) {
    b.ln_1 = {take(C, 0.1f, 1.0f), take(C, 0.1f)};
    b.c_attn = {take(C * 3 * C, 0.3f), take(3 * C, 0.1f)};
    b.c_proj = {take(C * C, 0.2f), take(C, 0.05f)};
    b.ln_2 = {take(C, 0.1f, 1.0f), take(C, 0.1f)};
    b.c_fc = {take(C * F, 0.2f), take(F, 0.1f)};
    b.mlp_proj = {take(F * C, 0.1f), take(C, 0.05f)};
  }
  g.params.ln_f = {take(C, 0.1f, 1.0f), take(C, 0.1f)};
  return g;
}

inline GptConfig small_config(int n_layer = 2, int n_head = 4, int n_embd = 32, int n_positions = 40, int vocab = 97) {
  GptConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.n_positions = n_positions;
  c.vocab_size = vocab;
  return c;
}

// max |a - b| / max |b|
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  if (a.size() != b.size()) return INFINITY;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!std::isfinite(d)) return INFINITY;  // NaN or inf anywhere fails
    num = std::max(num, d);
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace jomoim::test
