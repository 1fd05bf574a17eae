// Sampling the next token. See include/jomoim/model/sampling.hpp.
#include "jomoim/model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "jomoim/core/tensor.hpp"
#include "splitmix.hpp"

namespace jomoim {

void SamplingOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw Error("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k < 0) throw Error("top-k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("top-p must be in (0, 1], got " + std::to_string(top_p));
}

std::vector<double> softmax(std::span<const float> logits, double temperature) {
  std::vector<double> p(logits.size());
  if (logits.empty()) return p;
  double m = -std::numeric_limits<double>::infinity();
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  if (!std::isfinite(m)) throw Error("softmax: logits contain no finite maximum");
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - m) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

std::vector<std::int32_t> top_ids(std::span<const float> values, int n) {
  n = std::clamp<int>(n, 0, static_cast<int>(values.size()));
  std::vector<std::int32_t> ids(values.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](std::int32_t a, std::int32_t b) {
    // NaN sorts last.
    const float x = values[a], y = values[b];
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    if (x != y) return x > y;
    return a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), better);
  ids.resize(n);
  return ids;
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), state_(options.seed) { options_.validate(); }

double Sampler::uniform() { return splitmix::uniform(state_); }

std::int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw Error("sample: empty logits");
  if (options_.temperature == 0.0f) return top_ids(logits, 1)[0];

  // Candidates sorted by logit, largest first; top-k cuts the list.
  const int k = options_.top_k > 0 ? std::min<int>(options_.top_k, static_cast<int>(logits.size()))
                                   : static_cast<int>(logits.size());
  std::vector<std::int32_t> ids = top_ids(logits, k);
  const double t = options_.temperature;
  const double m = logits[ids[0]];
  if (!std::isfinite(m)) throw Error("sample: logits contain no finite maximum");
  std::vector<double> p(ids.size());
  double sum = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp((logits[ids[i]] - m) / t);
    sum += p[i];
  }
  // Top-p: the smallest prefix whose probability reaches p (at least one token).
  std::size_t keep = ids.size();
  if (options_.top_p < 1.0f) {
    double cum = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      cum += p[i] / sum;
      if (cum >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (std::size_t i = 0; i < keep; ++i) kept += p[i];
  double u = uniform() * kept;
  for (std::size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace jomoim
