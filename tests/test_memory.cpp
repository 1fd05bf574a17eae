// test_memory.cpp — the lean paths stay lean: attention at N = 16384 must not grow the
// process's peak memory by anything near an N x N buffer (1 GiB of floats here).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <random>
#include <vector>

#include "jomoim/engine/attention.hpp"

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// Peak-RSS growth of one attention call, with inputs and outputs already touched.
double extra_mib_of_call(std::int64_t B, std::int64_t H, std::int64_t Hkv, std::int64_t Nq, std::int64_t Nk,
                         std::int64_t D, bool causal, int threads) {
  std::vector<float> q(B * H * Nq * D), k(B * Hkv * Nk * D), v(B * Hkv * Nk * D), out(B * H * Nq * D), lse(B * H * Nq);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = u(rng);
  jomoim::AttentionOptions opt;
  opt.causal = causal;
  opt.threads = threads;
  opt.lse = jomoim::Tensor3::contiguous(lse.data(), {B, H, Nq});
  const double before = peak_rss_mib();
  jomoim::attention(jomoim::ConstTensor4::contiguous(q.data(), {B, H, Nq, D}),
                    jomoim::ConstTensor4::contiguous(k.data(), {B, Hkv, Nk, D}),
                    jomoim::ConstTensor4::contiguous(v.data(), {B, Hkv, Nk, D}),
                    jomoim::Tensor4::contiguous(out.data(), {B, H, Nq, D}), opt);
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
  return peak_rss_mib() - before;
}

// An N x N float32 score matrix at N = 16384 would be 1024 MiB; the kernel's scratch is a few
// hundred KiB per thread (attention.hpp). 16 MiB leaves room for thread stacks and the
// allocator, and is still 64x below one materialised score matrix.
constexpr double kLimitMib = 16;

TEST(Memory, PrefillAtN16384AllocatesNoScoreMatrix) {
  EXPECT_LT(extra_mib_of_call(1, 1, 1, 16384, 16384, 16, /*causal=*/true, 2), kLimitMib);
}

TEST(Memory, DecodeAgainst16384KeysAllocatesLittle) {
  EXPECT_LT(extra_mib_of_call(1, 8, 2, 1, 16384, 64, /*causal=*/false, 2), kLimitMib);
}

}  // namespace
