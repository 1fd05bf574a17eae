// attention_run.cpp — checks, times and measures the memory of one shape (see attention_run.hpp).
#include "bench/attention_run.hpp"

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "jomoim/engine/simd.hpp"

#include "bench/memory.hpp"

namespace jomoim::cli::bench {
namespace {

// A 64-bit hash of a float buffer's bytes (FNV-1a over 64-bit words): equal outputs give equal
// hashes; a differing bit almost surely changes it.
std::uint64_t hash_bits(const std::vector<float>& x) {
  std::uint64_t h = 1469598103934665603ull;
  const std::size_t bytes = x.size() * sizeof(float);
  const auto* p = reinterpret_cast<const unsigned char*>(x.data());
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

AttentionRun bench_attention(Workload& w, const BenchOptions& o, int threads) {
  AttentionRun r;
  const AttentionShape s = w.shape();
  // Memory is measured in two windows around the reference check, whose allocations are not the
  // engine's: the first call (which allocates the per-thread scratch), and the timed calls. Each
  // window starts by lowering the peak-RSS mark to the current RSS.
  malloc_trim(0);  // free heap left by earlier work in this process would hide growth
  r.peak_reset = reset_peak_rss();
  r.rss_inputs_mib = current_rss_mib();
  w.run(threads);
  r.peak_rss_mib = peak_rss_mib();
  r.extra_mib = r.peak_rss_mib - r.rss_inputs_mib;
  const std::uint64_t first_hash = hash_bits(w.out);
  if (o.no_check) {
    r.check.mode = "skipped";
  } else {
    r.check = check_output(w, o.seed);
    if (!r.check.ok) return r;
    malloc_trim(0);  // hand the reference's freed heap back, so it is not counted as ours
  }
  r.peak_reset = reset_peak_rss() && r.peak_reset;
  const double rss_timing = current_rss_mib();
  r.timing = time_calls([&] { w.call(threads); }, o.warmup, o.reps, o.min_time);
  const double peak_timing = peak_rss_mib();
  r.repeat_bitwise = hash_bits(w.out) == first_hash;  // same inputs, same threads: same bits
  r.peak_rss_mib = std::max(r.peak_rss_mib, peak_timing);
  r.extra_mib = std::max({0.0, r.extra_mib, peak_timing - rss_timing});
  r.gflops = attention_flops(s, w.causal) / (r.timing.median_ms * 1e-3) * 1e-9;
  r.gbs = w.bytes() / (r.timing.median_ms * 1e-3) * 1e-9;
  return r;
}

Json attention_json(const Workload& w, const AttentionRun& r, int threads) {
  Json j;
  j["kind"] = "attention";
  j["status"] = r.check.ok ? "ok" : "wrong";
  for (auto [key, value] :
       {std::pair{"b", w.B}, {"hq", w.Hq}, {"hkv", w.Hkv}, {"nq", w.Nq}, {"nk", w.Nk}, {"d", w.D}, {"dv", w.Dv}})
    j[key] = value;
  // The same shape under the names of the command-line flags, and as docs/design.md's letters.
  j["shape"] = {{"batch", w.B},   {"heads", w.Hq},   {"kv_heads", w.Hkv}, {"q_len", w.Nq},
                {"kv_len", w.Nk}, {"head_dim", w.D}, {"value_dim", w.Dv}};
  j["causal"] = w.causal;
  j["threads"] = threads;
  j["simd_target"] = active_simd_target();
  j["dtype"] = w.storage_name();
  if (w.q8_block > 0) j["q8_block"] = w.q8_block;
  if (w.q4_block > 0) j["q4_block"] = w.q4_block;
  j["bf16_weights"] = w.bf16_weights;
  j["check"] = r.check.mode;
  j["check_max_err"] = r.check.max_err;
  j["check_tol"] = r.check.tol;
  if (!r.check.ok) {
    j["error"] = r.check.worst;
    return j;
  }
  j["median_ms"] = r.timing.median_ms;
  j["min_ms"] = r.timing.min_ms;
  j["mean_ms"] = r.timing.mean_ms;
  j["reps"] = r.timing.reps;
  j["warmup"] = r.timing.warmup;
  j["gflops"] = r.gflops;
  j["gbs"] = r.gbs;
  j["peak_rss_mib"] = r.peak_rss_mib;
  j["rss_inputs_mib"] = r.rss_inputs_mib;
  j["extra_mib"] = r.extra_mib;
  j["peak_reset"] = r.peak_reset;
  j["repeat_bitwise"] = r.repeat_bitwise;
  return j;
}

}  // namespace jomoim::cli::bench
