// Uses the installed engine: causal GQA attention on random inputs, against the float64
// reference. Prints the version and the largest difference; exits 1 if it is too large.
#include <jomoim/engine/attention.hpp>
#include <jomoim/version.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 37, Nk = 53, D = 24, Dv = 17;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto fill = [&](std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> q = fill(B * Hq * Nq * D), k = fill(B * Hkv * Nk * D), v = fill(B * Hkv * Nk * Dv);
  std::vector<float> out(static_cast<std::size_t>(B * Hq * Nq * Dv), NAN);
  const auto qv = jomoim::ConstTensor4::contiguous(q.data(), {B, Hq, Nq, D});
  const auto kv = jomoim::ConstTensor4::contiguous(k.data(), {B, Hkv, Nk, D});
  const auto vv = jomoim::ConstTensor4::contiguous(v.data(), {B, Hkv, Nk, Dv});
  jomoim::AttentionOptions opt;
  opt.causal = true;
  jomoim::attention(qv, kv, vv, jomoim::Tensor4::contiguous(out.data(), {B, Hq, Nq, Dv}), opt);
  const jomoim::ReferenceResult ref = jomoim::attention_reference(qv, kv, vv, opt);
  double worst = 0;
  for (std::size_t i = 0; i < out.size(); ++i) worst = std::fmax(worst, std::fabs(out[i] - ref.out[i]));
  std::printf("jomoim %s: max |fast - reference| = %.3g\n", jomoim::version, worst);
  return worst < 1e-5 ? 0 : 1;
}
