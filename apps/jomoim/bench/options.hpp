// options.hpp — the options of `jomoim bench`, shared by its parts (cmd_bench.cpp gives each
// flag its name, default and help).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace jomoim::cli::bench {

using Index = std::int64_t;
using Json = nlohmann::ordered_json;

struct BenchOptions {
  Index batch = 1, heads = 12, kv_heads = 0, q_len = 512, kv_len = 0, head_dim = 64,
        value_dim = 0;  // 0: same as heads / q_len / head_dim
  bool causal = false;
  int threads = 0;  // 0: OpenMP's default (jomoim::resolve_threads)
  int reps = 5, warmup = 2;
  double min_time = 1.0;  // seconds of timed calls, at least
  std::string target;
  std::string dtype = "f32";  // storage of q, k, v: f32, bf16, f16; or q8 (k and v only)
  Index q8_block = 32;        // with --dtype q8: values per scale (quant.hpp)
  Index q4_block = 32;        // with --dtype q4: values per scale (quant.hpp)
  bool bf16_weights = false;  // AttentionOptions::bf16_weights
  unsigned seed = 42;
  bool json = false, sgemm = false, copy = false, fma = false, ceilings_only = false, quick = false, no_check = false;
  Index sgemm_n = 2048;  // large enough that OpenBLAS runs at its plateau on 1-2 cores
  Index copy_mib = 256;  // per buffer: far beyond any cache, as a KV cache would be
};

}  // namespace jomoim::cli::bench
