// The GPT-2 runtime: logits against PyTorch (tiny_gpt2.py), KV-cache decoding against a full
// recompute, the explorer's trace against the engine's float64 reference, silencing and Q/K
// swapping, checkpoint round trips and refusals, and sampling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/formats/npy.hpp"
#include "jomoim/formats/safetensors.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/model/sampling.hpp"
#include "jomoim/model/train.hpp"
#include "model_test_util.hpp"

namespace fs = std::filesystem;
using namespace jomoim;
using jomoim::test::random_gpt;
using jomoim::test::relative_error;
using jomoim::test::small_config;

namespace {

// ---------------------------------------------------------------------------------------------
// Against PyTorch: the fixture directory is written by tests/model/tiny_gpt2.py (CTest fixture).

struct TorchCase {
  std::string variant;
  fs::path dir;
  std::vector<std::int32_t> ids;
  std::vector<float> logits;  // [T, V]
  int vocab = 0;
};

std::vector<TorchCase> torch_cases() {
  const char* root = std::getenv("JOMOIM_TINY_GPT2");
  std::vector<TorchCase> out;
  if (!root) return out;
  std::ifstream in(fs::path(root) / "manifest.json");
  if (!in) return out;
  const auto m = nlohmann::json::parse(in);
  for (const auto& v : m["variants"]) {
    for (const auto& c : v["cases"]) {
      TorchCase t;
      t.variant = v["name"];
      t.dir = fs::path(root) / v["dir"].get<std::string>();
      t.ids = c["ids"].get<std::vector<std::int32_t>>();
      t.logits = read_npy(fs::path(root) / c["logits"].get<std::string>()).data;
      t.vocab = v["vocab_size"];
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<float> row(const std::vector<float>& m, int r, int n) {
  return {m.begin() + static_cast<std::ptrdiff_t>(r) * n, m.begin() + static_cast<std::ptrdiff_t>(r + 1) * n};
}

TEST(GptTorch, LogitsMatchPyTorchForEveryPosition) {
  const auto cases = torch_cases();
  if (cases.empty()) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  std::map<std::string, int> seen;
  for (const auto& c : cases) {
    const GptModel m = GptModel::load(c.dir);
    for (int threads : {1, 2}) {
      GptModel mt = GptModel::load(c.dir);
      mt.set_threads(threads);
      const auto got = mt.logits(c.ids);
      EXPECT_LE(relative_error(got, c.logits), 1e-4) << c.variant << " T=" << c.ids.size() << " threads=" << threads;
    }
    seen[c.variant]++;
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(GptTorch, KvCacheDecodingMatchesPyTorch) {
  const auto cases = torch_cases();
  if (cases.empty()) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  for (const auto& c : cases) {
    const GptModel m = GptModel::load(c.dir);
    const int T = static_cast<int>(c.ids.size()), V = c.vocab;
    // Prefill half, then one token at a time; every step's logits equal PyTorch's row.
    KvCache cache(m.config(), T);
    const int half = T / 2;
    std::span<const std::int32_t> ids(c.ids);
    if (half > 0) {
      const auto l = m.forward(ids.first(half), cache);
      EXPECT_LE(relative_error(l, row(c.logits, half - 1, V)), 1e-4) << c.variant;
    }
    for (int t = half; t < T; ++t) {
      const auto l = m.forward(ids.subspan(t, 1), cache);
      ASSERT_LE(relative_error(l, row(c.logits, t, V)), 1e-4) << c.variant << " step " << t;
    }
    EXPECT_EQ(cache.size(), T);
    // Chunks of 3 with all logits.
    KvCache chunked(m.config(), T);
    ForwardOptions all;
    all.all_logits = true;
    for (int t = 0; t < T; t += 3) {
      const int n = std::min(3, T - t);
      const auto l = m.forward(ids.subspan(t, n), chunked, all);
      for (int r = 0; r < n; ++r)
        ASSERT_LE(relative_error(row(l, r, V), row(c.logits, t + r, V)), 1e-4) << c.variant << " chunk at " << t;
    }
  }
}

// Each KV cache format against the reference with that format's rounding applied to what
// attention reads (tiny_gpt2.py's torch_logits(kv=...)): prefill and token-by-token decoding.
// The rounding is emulated, not toleranced, but it is a step function: jomoim rounds its float32
// q, k, v, the reference its float64 ones, and the two differ by ~1e-6 relative, so a value within
// that of a rounding boundary lands one format step (bf16: 2^-8 relative; q8: d) the other way.
// A few such elements of the 10^4 rounded ones move logits by a few 1e-4 (measured: at most
// 4.3e-4 for bf16, below 1e-4 for q8), hence 1e-3 for the rounded formats (1e-4 for f32); and
// each format's result must be at least 10x nearer its own reference than the unrounded one
// (the format moves logits by 3e-3..3e-2 here), so the test sees the format itself.
TEST(GptTorch, KvFormatsMatchTheirRoundedReference) {
  const char* root = std::getenv("JOMOIM_TINY_GPT2");
  if (!root) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  std::ifstream in(fs::path(root) / "manifest.json");
  ASSERT_TRUE(in);
  const auto m = nlohmann::json::parse(in);
  ASSERT_TRUE(m.contains("kv_formats"));
  const auto& kf = m["kv_formats"];
  const fs::path dir = fs::path(root) / kf["dir"].get<std::string>();
  const int V = kf["vocab_size"];
  int checked = 0;
  for (const auto& c : kf["cases"]) {
    const auto ids = c["ids"].get<std::vector<std::int32_t>>();
    const int T = static_cast<int>(ids.size());
    const auto f32_ref = read_npy(fs::path(root) / c["logits"]["f32"].get<std::string>()).data;
    for (const auto& [fmt, name] :
         {std::pair{KvFormat::f32, "f32"}, {KvFormat::bf16, "bf16"}, {KvFormat::q8, "q8"}, {KvFormat::q4, "q4"}}) {
      const auto ref = read_npy(fs::path(root) / c["logits"][name].get<std::string>()).data;
      for (int threads : {1, 2}) {
        GptModel model = GptModel::load(dir);
        model.set_threads(threads);
        model.set_kv_format(fmt);
        const double tol = fmt == KvFormat::f32 ? 1e-4 : 1e-3;
        const auto got = model.logits(ids);
        const double err = relative_error(got, ref);
        EXPECT_LE(err, tol) << name << " T=" << T << " threads=" << threads;
        if (fmt != KvFormat::f32 && T > 1) {
          EXPECT_LT(err * 10, relative_error(got, f32_ref)) << name << " T=" << T;
        }
        // One token at a time through a cache of the format.
        KvCache cache = model.make_cache(T);
        EXPECT_EQ(cache.format(), fmt);
        std::span<const std::int32_t> all(ids);
        for (int t = 0; t < T; ++t) {
          const auto l = model.forward(all.subspan(t, 1), cache);
          ASSERT_LE(relative_error(l, row(ref, t, V)), tol) << name << " step " << t << " threads=" << threads;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 4 * 2);
}

TEST(GptTorch, WeightFormatsMatchTheirRoundedReference) {
  // float64 PyTorch on the weights rounded as each format stores them (tiny_gpt2.py's
  // rounded_weights): prompts and token-by-token decode, 1 and 2 threads.
  const char* root = std::getenv("JOMOIM_TINY_GPT2");
  if (!root) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  std::ifstream in(fs::path(root) / "manifest.json");
  ASSERT_TRUE(in);
  const auto m = nlohmann::json::parse(in);
  const auto& kf = m["kv_formats"];
  const fs::path dir = fs::path(root) / kf["dir"].get<std::string>();
  const int V = kf["vocab_size"];
  int checked = 0;
  for (const auto& c : kf["cases"]) {
    const auto ids = c["ids"].get<std::vector<std::int32_t>>();
    const int T = static_cast<int>(ids.size());
    const auto f32_ref = read_npy(fs::path(root) / c["logits"]["f32"].get<std::string>()).data;
    for (const auto& [fmt, name] : {std::pair{WeightFormat::bf16, "bf16"}, {WeightFormat::q8, "q8"}}) {
      ASSERT_TRUE(c["logits"].contains(std::string("weights_") + name));
      const auto ref = read_npy(fs::path(root) / c["logits"][std::string("weights_") + name].get<std::string>()).data;
      for (int threads : {1, 2}) {
        GptModel model = GptModel::load(dir, fmt);
        model.set_threads(threads);
        ASSERT_EQ(model.weight_format(), fmt);
        const auto got = model.logits(ids);
        const double err = relative_error(got, ref);
        // bf16: float32 sums of float32 products of the same rounded numbers, the f32 model's
        // 1e-4. q8: its products also round the activations to int16 per block (matvec.cpp: at
        // most 2^-16 of the block's largest value), which a random model's layers amplify: 5e-4.
        const double tol = fmt == WeightFormat::q8 ? 5e-4 : 1e-4;
        EXPECT_LE(err, tol) << name << " T=" << T << " threads=" << threads;
        if (T > 1) {
          EXPECT_LT(err * 10, relative_error(got, f32_ref)) << name << " T=" << T;
        }
        KvCache cache = model.make_cache(T);
        std::span<const std::int32_t> all(ids);
        for (int t = 0; t < T; ++t) {
          const auto l = model.forward(all.subspan(t, 1), cache);
          ASSERT_LE(relative_error(l, row(ref, t, V)), tol) << name << " step " << t << " threads=" << threads;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * 2);
}

TEST(GptTorch, F32CheckpointIsMappedNotCopied) {
  const auto cases = torch_cases();
  if (cases.empty()) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  for (const auto& c : cases) {
    const GptModel m = GptModel::load(c.dir);
    if (c.variant == "f32")
      EXPECT_EQ(m.copied_bytes(), 0u);
    else
      EXPECT_EQ(m.copied_bytes(), static_cast<std::size_t>(m.config().parameter_count()) * 4) << c.variant;
  }
}

// ---------------------------------------------------------------------------------------------
// KV cache formats (KvFormat): what is stored, what it costs, what is refused.

// Prompts of 11 tokens (written on the calling thread) and 30 (from 16 rows on, a task per K or V
// head on the model's threads), 1 and 2 threads.
TEST(KvCacheFormat, StoresTheFormatsRoundingOfTheFloatRows) {
  const GptConfig cfg = small_config(2, 2, 64, 40, 97);  // head_dim 32: q8 blocks of 32
  const auto g = random_gpt(cfg, 21);
  for (const int threads : {1, 2})
    for (const int length : {11, 30}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", " + std::to_string(length) + " tokens");
      std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
      for (int i = 0; i < length; ++i) ids[static_cast<std::size_t>(i)] = (7 * i * i + 3) % cfg.vocab_size;
      const int T = length, C = cfg.n_embd, H = cfg.n_head, D = cfg.head_dim();
      GptModel model = g.model();
      model.set_threads(threads);
      KvCache f32 = model.make_cache(T + 3);
      model.forward(ids, f32);
      std::vector<float> want(static_cast<std::size_t>(T) * C), got(want.size());
      for (const KvFormat fmt : {KvFormat::bf16, KvFormat::q8, KvFormat::q4}) {
        model.set_kv_format(fmt);
        KvCache cache = model.make_cache(T + 3);
        ASSERT_EQ(cache.format(), fmt);
        model.forward(ids, cache);
        EXPECT_EQ(cache.size(), T);
        // Layer 0's keys and values come from the embeddings alone, so they are the float32 cache's
        // rows before rounding, bit for bit; later layers differ (they read rounded attention).
        for (const bool values : {false, true}) {
          f32.read_rows(0, values, 0, T, want.data());
          std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());  // poisoned
          cache.read_rows(0, values, 0, T, got.data());
          if (fmt == KvFormat::bf16) {
            for (std::size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(got[i], bf16_to_float(bf16_from_float(want[i]))) << "element " << i;
          } else {
            // Each head's [T, D] rows through quantize / dequantize (q8 or q4) with blocks of 32.
            std::vector<float> expect(want.size());
            for (int h = 0; h < H; ++h) {
              const ConstTensor4 x{want.data() + h * D, {1, 1, T, D}, {0, 0, C, 1}};
              const Tensor4 y{expect.data() + h * D, {1, 1, T, D}, {0, 0, C, 1}};
              if (fmt == KvFormat::q4)
                dequantize_q4(quantize_q4(x, 32).view(), y);
              else
                dequantize_q8(quantize_q8(x, 32).view(), y);
            }
            for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], expect[i]) << "element " << i;
            EXPECT_EQ(cache.q8_block(), 32);
          }
        }
      }
    }
  // Bytes: 2 (K, V) x layers x capacity x n_embd values of the format (+ a float per 32 for q8).
  const int cap = 14;
  const std::size_t n = 2ull * cfg.n_layer * cap * cfg.n_embd;
  EXPECT_EQ(KvCache(cfg, cap, KvFormat::f32).bytes(), n * 4);
  EXPECT_EQ(KvCache(cfg, cap, KvFormat::bf16).bytes(), n * 2);
  EXPECT_EQ(KvCache(cfg, cap, KvFormat::q8).bytes(), n + n / 32 * 4);
  EXPECT_EQ(KvCache(cfg, cap, KvFormat::q4).bytes(), n / 2 + n / 32 * 4);
  EXPECT_EQ(KvCache(cfg, cap, KvFormat::q4).q8_block(), 32);
  EXPECT_EQ(KvCache(small_config(1, 2, 32, 8, 5), 4, KvFormat::q8).q8_block(), 16);  // head_dim 16
}

// The statement throws jomoim::Error and its message contains `part`.
#define EXPECT_THROW_MSG(stmt, part)                                                \
  do {                                                                              \
    std::string what_ = "no error";                                                 \
    try {                                                                           \
      (void)(stmt);                                                                 \
    } catch (const Error& e) {                                                      \
      what_ = e.what();                                                             \
    }                                                                               \
    EXPECT_NE(what_.find(part), std::string::npos) << #stmt << " threw: " << what_; \
  } while (0)

// A key the q8 cache cannot hold (an infinite bias on one key component): the pass is refused,
// naming the value, whether the rows are written on one thread or by tasks on two; the cache
// keeps its size.
TEST(KvCacheFormat, Q8RefusesANonFiniteKey) {
  const GptConfig cfg = small_config(2, 2, 64, 40, 97);
  auto g = random_gpt(cfg, 22);
  const float* bias = g.params.blocks[1].c_attn.bias;  // layer 1: layer 0 writes finite rows first
  (*g.storage)[static_cast<std::size_t>(bias - g.storage->data()) + cfg.n_embd + 40] =
      std::numeric_limits<float>::infinity();  // key component 40: head 1
  for (const int threads : {1, 2})
    for (const int length : {3, 20}) {
      GptModel model = g.model();
      model.set_threads(threads);
      for (const KvFormat fmt : {KvFormat::q8, KvFormat::q4}) {
        model.set_kv_format(fmt);
        KvCache cache = model.make_cache(length);
        std::vector<std::int32_t> ids(static_cast<std::size_t>(length), 5);
        EXPECT_THROW_MSG(model.forward(ids, cache), "non-finite value inf");
        EXPECT_EQ(cache.size(), 0) << kv_format_name(fmt) << " threads " << threads << ", " << length << " tokens";
      }
    }
}

TEST(KvCacheFormat, RefusalsAndNames) {
  const GptConfig d8 = small_config();  // head_dim 8: no q8 block divides it
  EXPECT_THROW_MSG(KvCache(d8, 4, KvFormat::q8), "q8 needs a head_dim that is a multiple of 16");
  GptModel m = random_gpt(d8, 1).model();
  EXPECT_THROW_MSG(m.set_kv_format(KvFormat::q8), "multiple of 16");
  EXPECT_EQ(m.kv_format(), KvFormat::f32);
  const GptConfig d16 = small_config(1, 2, 32, 8, 5);  // head_dim 16: q8, not q4
  EXPECT_THROW_MSG(KvCache(d16, 4, KvFormat::q4), "q4 needs a head_dim that is a multiple of 32");
  GptModel m16 = random_gpt(d16, 1).model();
  EXPECT_THROW_MSG(m16.set_kv_format(KvFormat::q4), "q4 KV cache needs a head_dim that is a multiple of 32");
  m16.set_kv_format(KvFormat::q8);
  KvCache b(d8, 4, KvFormat::bf16);
  EXPECT_THROW_MSG(b.keys(0), "only in an f32 cache");
  float out[32];
  EXPECT_THROW_MSG(b.read_rows(0, false, 2, 3, out), "outside the capacity");
  for (const KvFormat f : {KvFormat::f32, KvFormat::bf16, KvFormat::q8, KvFormat::q4})
    EXPECT_EQ(parse_kv_format(kv_format_name(f)), f);
  EXPECT_FALSE(parse_kv_format("q2"));
  EXPECT_FALSE(parse_kv_format(""));
}

// A traced q8 pass runs the float32 kernel on the dequantized keys (attention_q8kv gives no
// weights); with silenced keys and a cache larger than the tokens (the q8 path's key_lengths and
// capacity-wide bias), its logits still equal the untraced pass's, and every format's prefill
// equals its own token-by-token decoding.
TEST(KvCacheFormat, TracedUntracedAndDecodingAgree) {
  const GptConfig cfg = small_config(2, 2, 64, 40, 97);
  const auto g = random_gpt(cfg, 5);
  const std::vector<std::int32_t> ids = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 44, 33};
  const int T = static_cast<int>(ids.size()), V = cfg.vocab_size;
  const int silenced[2] = {2, 7};
  for (const KvFormat fmt : {KvFormat::f32, KvFormat::bf16, KvFormat::q8, KvFormat::q4}) {
    GptModel model = g.model();
    model.set_kv_format(fmt);
    ForwardOptions plain;
    plain.silenced = silenced;
    plain.all_logits = true;
    KvCache c1 = model.make_cache(T + 9);
    const auto untraced = model.forward(ids, c1, plain);
    ForwardTrace tr;
    ForwardOptions traced = plain;
    traced.trace = &tr;
    KvCache c2 = model.make_cache(T + 9);
    const auto with_trace = model.forward(ids, c2, traced);
    EXPECT_LE(relative_error(with_trace, untraced), 1e-5) << kv_format_name(fmt);
    // The silenced keys got no weight in the traced pass.
    for (const auto& layer : tr.layers)
      for (int h = 0; h < cfg.n_head; ++h)
        for (int s : silenced) EXPECT_EQ(layer.last_weights[static_cast<std::size_t>(h) * T + s], 0.0f);
    KvCache c3 = model.make_cache(T + 9);
    std::span<const std::int32_t> all(ids);
    for (int t = 0; t < T; ++t) {
      const auto l = model.forward(all.subspan(t, 1), c3);
      ASSERT_LE(relative_error(l, row(model.logits(std::vector<std::int32_t>(ids.begin(), ids.begin() + t + 1)), t, V)),
                1e-5)
          << kv_format_name(fmt) << " step " << t;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The runtime against itself and the engine's reference.

// ---------------------------------------------------------------------------------------------
// Weight formats (WeightFormat): a bf16 / q8 model computes what a float32 model computes on
// the rounded weights (the same float32 arithmetic in another order), whatever path a pass
// takes: a prompt (widened tiles and a GEMM), one token and a few tokens (the matvec kernels).

// The float32 weights a format stores: each matrix row of one output (W^T's rows: GPT-2's Conv1D
// [in, out] read by column) rounded as the format rounds it. The q8 reference goes through the
// engine's public quantize_q8 / dequantize_q8 on a strided view (no packing code involved).
void round_matrix(WeightFormat fmt, float* w, int in, int out, bool conv1d) {
  const int rows = conv1d ? out : in, cols = conv1d ? in : out;  // outputs, inputs
  if (fmt == WeightFormat::bf16) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(in) * out; ++i) w[i] = bf16_to_float(bf16_from_float(w[i]));
    return;
  }
  Tensor4 v;
  v.data = w;
  v.shape = {1, 1, rows, cols};
  v.strides = conv1d ? std::array<std::int64_t, 4>{0, 0, 1, rows} : std::array<std::int64_t, 4>{0, 0, cols, 1};
  const Q8Buffer q = quantize_q8(ConstTensor4(v), cols % 32 == 0 ? 32 : 16);
  dequantize_q8(q.view(), v);
}

jomoim::test::OwnedGpt rounded_copy(const jomoim::test::OwnedGpt& g, WeightFormat fmt) {
  jomoim::test::OwnedGpt r = g;
  r.storage = std::make_shared<std::vector<float>>(*g.storage);
  auto at = [&](const float* p) { return r.storage->data() + (p - g.storage->data()); };
  auto retarget = [&](GptParams& p) {
    p.wte = at(p.wte);
    p.wpe = at(p.wpe);
    p.ln_f = {at(p.ln_f.weight), at(p.ln_f.bias)};
    for (auto& b : p.blocks) {
      b.ln_1 = {at(b.ln_1.weight), at(b.ln_1.bias)};
      b.ln_2 = {at(b.ln_2.weight), at(b.ln_2.bias)};
      b.c_attn = {at(b.c_attn.weight), at(b.c_attn.bias)};
      b.c_proj = {at(b.c_proj.weight), at(b.c_proj.bias)};
      b.c_fc = {at(b.c_fc.weight), at(b.c_fc.bias)};
      b.mlp_proj = {at(b.mlp_proj.weight), at(b.mlp_proj.bias)};
    }
  };
  retarget(r.params);
  const int C = g.config.n_embd, F = g.config.inner(), V = g.config.vocab_size;
  round_matrix(fmt, const_cast<float*>(r.params.wte), V, C, false);
  for (auto& b : r.params.blocks) {
    round_matrix(fmt, const_cast<float*>(b.c_attn.weight), C, 3 * C, true);
    round_matrix(fmt, const_cast<float*>(b.c_proj.weight), C, C, true);
    round_matrix(fmt, const_cast<float*>(b.c_fc.weight), C, F, true);
    round_matrix(fmt, const_cast<float*>(b.mlp_proj.weight), F, C, true);
  }
  return r;
}

TEST(WeightFormats, EqualTheFloatModelOnTheRoundedWeights) {
  // n_embd 32 (q8 blocks of 32), 48 (blocks of 16; odd vocabulary), 128 (products large enough
  // to split across threads).
  const GptConfig cfgs[] = {small_config(2, 4, 32, 40, 97), small_config(2, 3, 48, 40, 61),
                            small_config(1, 4, 128, 40, 301)};
  const std::vector<std::int32_t> ids = {3, 14, 15, 9, 26, 5, 35, 8, 59, 7, 9, 32, 38};
  const int T = static_cast<int>(ids.size());
  int checked = 0;
  for (const GptConfig& cfg : cfgs) {
    const auto g = random_gpt(cfg, 31 + cfg.n_embd);
    const int V = cfg.vocab_size;
    const auto unrounded = g.model().logits(ids);
    for (const WeightFormat fmt : {WeightFormat::bf16, WeightFormat::q8}) {
      const auto r = rounded_copy(g, fmt);
      const auto want = r.model().logits(ids);
      for (int threads : {1, 2}) {
        GptModel m = g.model();
        m.set_threads(threads);
        m.set_weight_format(fmt);
        ASSERT_EQ(m.weight_format(), fmt);
        const std::string what = std::string(weight_format_name(fmt)) + " C=" + std::to_string(cfg.n_embd) +
                                 " threads=" + std::to_string(threads);
        const auto got = m.logits(ids);  // a prompt of 13 tokens
        const double err = relative_error(got, want);
        // q8's products of up to 2 rows round the activations to int16 per block (matvec.cpp).
        const double tol = fmt == WeightFormat::q8 ? 5e-4 : 2e-5;
        EXPECT_LE(err, tol) << what;
        EXPECT_LT(err * 20, relative_error(got, unrounded)) << what << ": the weights were not rounded";
        // One token at a time, then 1 + 3 + 4 + 5 tokens: every matvec row count and the GEMM path.
        for (const std::vector<int>& steps : {std::vector<int>(T, 1), std::vector<int>{1, 3, 4, 5}}) {
          KvCache cache = m.make_cache(T);
          std::span<const std::int32_t> all(ids);
          int t = 0;
          for (int n : steps) {
            ForwardOptions o;
            o.all_logits = true;
            const auto l = m.forward(all.subspan(t, n), cache, o);
            for (int i = 0; i < n; ++i)
              ASSERT_LE(relative_error(row(l, i, V), row(want, t + i, V)), tol) << what << " token " << t + i;
            t += n;
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 2 * 2);
}

// GptModel::set_matmul(bf16) (--matmul bf16): a prompt's products round their inputs to bf16
// (oneDNN's matmul), so its logits move by a few bf16 steps of the largest logit and no more;
// passes of up to 16 tokens take the float32 matrix-vector kernels, bit for bit the same.
TEST(WeightFormats, Bf16MatmulRoundsOnlyThePromptProducts) {
  const GptConfig cfg = small_config(2, 4, 128, 64, 301);
  const auto g = random_gpt(cfg, 77);
  std::vector<std::int32_t> ids(40);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 11) % 301);
  const std::vector<std::int32_t> few(ids.begin(), ids.begin() + 16);
  GptModel rounded = g.model();
  rounded.set_weight_format(WeightFormat::bf16);
  const double weights_only = relative_error(rounded.logits(ids), g.model().logits(ids));
  for (const WeightFormat fmt : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8})
    for (int threads : {1, 2}) {
      GptModel f = g.model(), b = g.model();
      for (GptModel* m : {&f, &b}) {
        m->set_threads(threads);
        if (fmt != WeightFormat::f32) m->set_weight_format(fmt);
      }
      b.set_matmul(MatmulPrecision::bf16);
      ASSERT_EQ(b.matmul(), MatmulPrecision::bf16);
      ASSERT_EQ(f.matmul(), MatmulPrecision::f32);
      const std::string what = std::string(weight_format_name(fmt)) + " threads=" + std::to_string(threads);
      const double err = relative_error(b.logits(ids), f.logits(ids));  // 40 tokens: the GEMMs
      // Rounding every product's inputs moves the logits about as much as rounding the weights
      // alone does (the bf16 format, float32 products): a few times that at most.
      EXPECT_LE(err, 4 * weights_only) << what;
      if (bf16_matmul_native()) EXPECT_GT(err, 1e-5) << what << ": the prompt's products were not rounded";
      EXPECT_EQ(b.logits(few), f.logits(few)) << what << ": 16 tokens must stay float32";
    }
}

TEST(WeightFormats, HoldTheirBytesAndWidenToTheRoundedWeights) {
  const GptConfig cfg = small_config(2, 4, 64, 40, 97);
  const auto g = random_gpt(cfg, 41);
  const std::size_t C = cfg.n_embd, F = cfg.inner(), V = cfg.vocab_size, P = cfg.n_positions, L = cfg.n_layer;
  const std::size_t matrices = V * C + L * (3 * C * C + C * C + 2 * C * F);
  const std::size_t rest = static_cast<std::size_t>(cfg.parameter_count()) - matrices;
  EXPECT_EQ(rest, P * C + 2 * C + L * (4 * C + 3 * C + C + F + C));
  for (const WeightFormat fmt : {WeightFormat::bf16, WeightFormat::q8}) {
    GptModel m = g.model();
    EXPECT_EQ(m.weight_bytes(), static_cast<std::size_t>(cfg.parameter_count()) * 4);
    m.set_weight_format(fmt);
    const std::size_t per = fmt == WeightFormat::bf16 ? 2 * matrices : matrices + matrices / 32 * 4;
    EXPECT_EQ(m.weight_bytes(), per + rest * 4) << weight_format_name(fmt);
    EXPECT_EQ(m.copied_bytes(), m.weight_bytes());
    EXPECT_EQ(m.params().wte, nullptr);
    EXPECT_EQ(m.params().blocks[0].c_fc.weight, nullptr);
    ASSERT_NE(m.params().wpe, nullptr);
    EXPECT_EQ(std::memcmp(m.params().wpe, g.params.wpe, sizeof(float) * P * C), 0);
    // float_params: exactly the rounded numbers, in GPT-2's layout.
    const auto r = rounded_copy(g, fmt);
    const GptParams& fp = m.float_params();
    EXPECT_EQ(&fp, &m.float_params());  // made once
    EXPECT_EQ(std::memcmp(fp.wte, r.params.wte, sizeof(float) * V * C), 0) << weight_format_name(fmt);
    for (std::size_t l = 0; l < L; ++l) {
      EXPECT_EQ(std::memcmp(fp.blocks[l].c_attn.weight, r.params.blocks[l].c_attn.weight, sizeof(float) * 3 * C * C),
                0);
      EXPECT_EQ(std::memcmp(fp.blocks[l].mlp_proj.weight, r.params.blocks[l].mlp_proj.weight, sizeof(float) * F * C),
                0);
      EXPECT_EQ(std::memcmp(fp.blocks[l].c_fc.bias, g.params.blocks[l].c_fc.bias, sizeof(float) * F), 0);
    }
    // A traced pass records the embedding rows the pass used.
    const std::vector<std::int32_t> ids = {5, 6, 7};
    KvCache cache = m.make_cache(3);
    ForwardTrace tr;
    ForwardOptions o;
    o.trace = &tr;
    m.forward(ids, cache, o);
    for (int t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < C; ++i) ASSERT_EQ(tr.token_embedding[t * C + i], fp.wte[ids[t] * C + i]);
  }
}

TEST(WeightFormats, RefusalsAndNames) {
  for (const auto& [s, f] : {std::pair{"f32", WeightFormat::f32},
                             {"bf16", WeightFormat::bf16},
                             {"q8", WeightFormat::q8},
                             {"float32", WeightFormat::f32},
                             {"bfloat16", WeightFormat::bf16}}) {
    ASSERT_TRUE(parse_weight_format(s)) << s;
    EXPECT_EQ(*parse_weight_format(s), f);
  }
  for (const char* s : {"", "q4", "Q8", "f16", "int8"}) EXPECT_FALSE(parse_weight_format(s)) << s;
  EXPECT_STREQ(weight_format_name(WeightFormat::q8), "q8");

  // q8 needs input widths that are multiples of 16: n_embd 40 is refused, the model unchanged.
  const auto g40 = random_gpt(small_config(1, 4, 40, 20, 50), 3);
  GptModel m40 = g40.model();
  const std::vector<std::int32_t> ids = {1, 2, 3};
  const auto before = m40.logits(ids);
  try {
    m40.set_weight_format(WeightFormat::q8);
    ADD_FAILURE() << "q8 with n_embd 40 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("wte.weight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m40.weight_format(), WeightFormat::f32);
  EXPECT_EQ(m40.logits(ids), before);
  m40.set_weight_format(WeightFormat::bf16);  // bf16 takes any width
  EXPECT_EQ(m40.weight_format(), WeightFormat::bf16);
  m40.set_weight_format(WeightFormat::bf16);  // the format held: nothing to do
  EXPECT_THROW(m40.set_weight_format(WeightFormat::q8), Error);
  EXPECT_THROW(m40.set_weight_format(WeightFormat::f32), Error);

  // A non-finite weight cannot be quantized: refused, naming the tensor.
  auto g = random_gpt(small_config(), 4);
  const_cast<float*>(g.params.blocks[1].c_fc.weight)[5] = std::numeric_limits<float>::infinity();
  GptModel m = g.model();
  try {
    m.set_weight_format(WeightFormat::q8);
    ADD_FAILURE() << "an infinite weight was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.1.mlp.c_fc.weight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.weight_format(), WeightFormat::f32);
}

TEST(WeightFormats, LoadKeepsABf16CheckpointExactly) {
  const auto cases = torch_cases();
  if (cases.empty()) GTEST_SKIP() << "JOMOIM_TINY_GPT2 not set (needs python3-torch)";
  int checked = 0;
  for (const auto& c : cases) {
    if (c.variant.rfind("bf16", 0) != 0) continue;  // the bf16 checkpoint(s)
    const GptModel wide = GptModel::load(c.dir);
    const GptModel kept = GptModel::load(c.dir, WeightFormat::bf16);
    EXPECT_EQ(kept.weight_format(), WeightFormat::bf16);
    const GptConfig& cfg = wide.config();
    const std::size_t C = cfg.n_embd;
    EXPECT_EQ(std::memcmp(kept.float_params().wte, wide.params().wte, sizeof(float) * cfg.vocab_size * C), 0);
    EXPECT_EQ(std::memcmp(kept.float_params().blocks[0].c_attn.weight, wide.params().blocks[0].c_attn.weight,
                          sizeof(float) * 3 * C * C),
              0);
    EXPECT_LE(relative_error(kept.logits(c.ids), wide.logits(c.ids)), 2e-5);
    EXPECT_LT(kept.weight_bytes(), wide.weight_bytes() * 6 / 10);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(Gpt, IncrementalDecodingEqualsFullRecompute) {
  for (auto cfg : {small_config(), small_config(3, 2, 16, 33, 50), small_config(1, 1, 8, 12, 5)}) {
    const auto g = random_gpt(cfg, 7);
    const GptModel m = g.model();
    std::mt19937 rng(3);
    std::vector<std::int32_t> ids(cfg.n_positions);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng() % cfg.vocab_size);
    const auto full = m.logits(ids);
    KvCache cache(cfg, cfg.n_positions);
    for (int t = 0; t < cfg.n_positions; ++t) {
      const auto l = m.forward(std::span<const std::int32_t>(ids).subspan(t, 1), cache);
      ASSERT_LE(relative_error(l, row(full, t, cfg.vocab_size)), 2e-5) << "t=" << t;
    }
  }
}

TEST(Gpt, SameInputsGiveBitwiseSameLogits) {
  const auto g = random_gpt(small_config(), 11);
  const GptModel m = g.model();
  const std::vector<std::int32_t> ids = {1, 5, 9, 2, 6, 5, 3, 5};
  EXPECT_EQ(m.logits(ids), m.logits(ids));
}

TEST(Gpt, TraceHoldsWhatTheEngineComputed) {
  const auto cfg = small_config(2, 4, 32, 40, 97);
  const auto g = random_gpt(cfg, 5);
  const GptModel m = g.model();
  const std::vector<std::int32_t> ids = {3, 14, 15, 92, 65, 35, 89};
  const int T = static_cast<int>(ids.size()), H = cfg.n_head, D = cfg.head_dim();

  KvCache c1(cfg, T), c2(cfg, T);
  ForwardTrace trace;
  ForwardOptions with;
  with.trace = &trace;
  const auto traced = m.forward(ids, c1, with);
  const auto plain = m.forward(ids, c2);
  EXPECT_EQ(traced, plain) << "tracing must not change the result";

  ASSERT_EQ(trace.layers.size(), 2u);
  EXPECT_EQ(trace.T, T);
  EXPECT_EQ(trace.Tk, T);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < cfg.n_embd; ++i) {
      ASSERT_EQ(trace.token_embedding[t * cfg.n_embd + i], g.params.wte[ids[t] * cfg.n_embd + i]);
      ASSERT_EQ(trace.position_embedding[t * cfg.n_embd + i], g.params.wpe[t * cfg.n_embd + i]);
    }
  for (const auto& L : trace.layers) {
    auto q = ConstTensor4::contiguous(L.q.data(), {1, H, T, D});
    auto k = ConstTensor4::contiguous(L.k.data(), {1, H, T, D});
    auto v = ConstTensor4::contiguous(L.v.data(), {1, H, T, D});
    AttentionOptions o;
    o.causal = true;
    const auto ref = attention_reference(q, k, v, o);
    for (std::size_t i = 0; i < ref.probs.size(); ++i) ASSERT_NEAR(L.weights[i], ref.probs[i], 1e-5) << i;
    for (std::size_t i = 0; i < ref.out.size(); ++i) ASSERT_NEAR(L.out[i], ref.out[i], 1e-4) << i;
    EXPECT_FLOAT_EQ(L.scale, 1.0f / std::sqrt(static_cast<float>(D)));
    ASSERT_EQ(L.heads.size(), static_cast<std::size_t>(H)) << "every head is kept by default";
    for (int h = 0; h < H; ++h) {
      EXPECT_EQ(L.heads[h], h);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          if (j > i) {
            ASSERT_EQ(L.weights[(h * T + i) * T + j], 0.0f) << "causal mask";
          }
          // The last row of every head, whatever is kept.
          if (i == T - 1) ASSERT_EQ(L.last_weights[h * T + j], L.weights[(h * T + i) * T + j]);
        }
    }
  }
}

// A selection keeps only what it names; the summary callback sees every layer's weights once,
// the same numbers a full trace keeps; the logits never change.
TEST(Gpt, TraceSelectionKeepsOnlyWhatWasAsked) {
  const auto cfg = small_config(3, 4, 32, 40, 97);
  const auto g = random_gpt(cfg, 21);
  const GptModel m = g.model();
  const std::vector<std::int32_t> ids = {3, 14, 15, 92, 65, 35, 89, 7, 9};
  const int T = static_cast<int>(ids.size()), H = cfg.n_head, D = cfg.head_dim(), L = cfg.n_layer;

  KvCache c0(cfg, T);
  ForwardTrace full;
  ForwardOptions fo;
  fo.trace = &full;
  const auto plain = m.forward(ids, c0, fo);

  for (int mode = 0; mode < 3; ++mode) {
    TraceSelection sel;
    if (mode == 0) sel.matrices = false;
    if (mode == 1) {
      sel.heads.assign(static_cast<std::size_t>(L) * H, 0);
      sel.heads[1 * H + 2] = 1;  // layer 1, head 2
      sel.heads[2 * H + 0] = 1;
    }
    std::vector<int> seen;
    sel.on_weights = [&](int l, const float* w) {
      seen.push_back(l);
      const auto& ref = full.layers[l].weights;
      for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(w[i], ref[i]) << "layer " << l << " at " << i;
    };
    ForwardTrace tr;
    ForwardOptions o;
    o.trace = &tr;
    o.trace_select = &sel;
    KvCache c(cfg, T);
    EXPECT_EQ(m.forward(ids, c, o), plain) << "mode " << mode;
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
    for (int l = 0; l < L; ++l) {
      const AttentionTrace& at = tr.layers[l];
      EXPECT_EQ(at.last_weights, full.layers[l].last_weights);
      std::vector<int> want;
      if (mode == 1 && l == 1) want = {2};
      if (mode == 1 && l == 2) want = {0};
      if (mode == 2) want = {0, 1, 2, 3};
      ASSERT_EQ(at.heads, want) << "mode " << mode << " layer " << l;
      ASSERT_EQ(at.weights.size(), want.size() * T * T);
      ASSERT_EQ(at.q.size(), want.size() * T * D);
      for (std::size_t n = 0; n < want.size(); ++n)
        for (int i = 0; i < T * T; ++i)
          ASSERT_EQ(at.weights[n * T * T + i], full.layers[l].weights[static_cast<std::size_t>(want[n]) * T * T + i]);
    }
  }
  // Only the tensors asked for: here weights and v of every head.
  {
    TraceSelection sel;
    sel.q = sel.k = sel.out = false;
    ForwardTrace tr;
    ForwardOptions o;
    o.trace = &tr;
    o.trace_select = &sel;
    KvCache c(cfg, T);
    EXPECT_EQ(m.forward(ids, c, o), plain);
    for (int l = 0; l < L; ++l) {
      EXPECT_TRUE(tr.layers[l].q.empty() && tr.layers[l].k.empty() && tr.layers[l].out.empty());
      EXPECT_EQ(tr.layers[l].weights, full.layers[l].weights);
      EXPECT_EQ(tr.layers[l].v, full.layers[l].v);
    }
  }
  TraceSelection bad;
  bad.heads.assign(5, 1);
  ForwardTrace tr;
  ForwardOptions o;
  o.trace = &tr;
  o.trace_select = &bad;
  KvCache c(cfg, T);
  EXPECT_THROW(m.forward(ids, c, o), Error);
}

TEST(Gpt, SilencedKeysGetNoWeightAnywhere) {
  const auto cfg = small_config(2, 4, 32, 40, 97);
  const auto g = random_gpt(cfg, 9);
  const GptModel m = g.model();
  const std::vector<std::int32_t> ids = {10, 20, 30, 40, 50, 60};
  const int T = 6;
  const std::vector<int> silence = {1, 4};
  ForwardTrace trace;
  ForwardOptions o;
  o.trace = &trace;
  o.silenced = silence;
  KvCache c1(cfg, T), c2(cfg, T);
  const auto silenced = m.forward(ids, c1, o);
  const auto plain = m.forward(ids, c2);
  EXPECT_GT(relative_error(silenced, plain), 1e-3) << "silencing must change the prediction";
  for (const auto& L : trace.layers)
    for (int h = 0; h < cfg.n_head; ++h)
      for (int i = 0; i < T; ++i) {
        double sum = 0;
        for (int j = 0; j < T; ++j) {
          const float w = L.weights[(h * T + i) * T + j];
          if (j == 1 || j == 4) {
            ASSERT_EQ(w, 0.0f);
          }
          sum += w;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);  // key 0 is never silenced, so every row still sums to 1
      }
  // Silencing nobody is the plain pass, bit for bit.
  ForwardOptions none;
  KvCache c3(cfg, T);
  EXPECT_EQ(m.forward(ids, c3, none), plain);
  // Out-of-range positions are refused.
  const std::vector<int> bad = {6};
  ForwardOptions ob;
  ob.silenced = bad;
  KvCache c4(cfg, T);
  EXPECT_THROW(m.forward(ids, c4, ob), Error);
}

TEST(Gpt, SwapQkExchangesTheProjections) {
  const auto cfg = small_config(2, 2, 16, 20, 31);
  const auto g = random_gpt(cfg, 13);
  const GptModel m = g.model();
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5};
  ForwardTrace a, b;
  ForwardOptions oa, ob;
  oa.trace = &a;
  ob.trace = &b;
  ob.swap_qk = true;
  KvCache c1(cfg, 5), c2(cfg, 5);
  const auto la = m.forward(ids, c1, oa);
  const auto lb = m.forward(ids, c2, ob);
  // Layer 0 sees the same input either way: the swapped queries are the plain keys and back.
  EXPECT_EQ(b.layers[0].q, a.layers[0].k);
  EXPECT_EQ(b.layers[0].k, a.layers[0].q);
  EXPECT_EQ(b.layers[0].v, a.layers[0].v);
  EXPECT_GT(relative_error(lb, la), 1e-4);
}

TEST(Gpt, RefusesBadInputAndLeavesTheCacheAlone) {
  const auto cfg = small_config(1, 2, 8, 6, 10);
  const auto g = random_gpt(cfg, 1);
  const GptModel m = g.model();
  KvCache cache(cfg, 6);
  const std::vector<std::int32_t> three = {1, 2, 3};
  m.forward(three, cache);
  ASSERT_EQ(cache.size(), 3);
  auto msg = [&](std::vector<std::int32_t> ids) {
    try {
      m.forward(ids, cache);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({}).find("no tokens"), std::string::npos);
  EXPECT_NE(msg({1, 10}).find("token id 10"), std::string::npos);
  EXPECT_NE(msg({-1}).find("token id -1"), std::string::npos);
  EXPECT_NE(msg({1, 2, 3, 4}).find("exceed the context"), std::string::npos);
  EXPECT_EQ(cache.size(), 3);
  KvCache small(cfg, 2);
  EXPECT_THROW(m.forward(three, small), Error);
  KvCache other(small_config(2, 2, 8, 6, 10), 6);
  EXPECT_THROW(m.forward(three, other), Error);
  EXPECT_THROW(KvCache(cfg, 0), Error);
  cache.truncate(1);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_THROW(cache.truncate(2), Error);
}

TEST(GptConfig, ParsesHuggingFaceConfigAndRefusesBadOnes) {
  const auto c = GptConfig::from_json(
      R"({"model_type":"gpt2","n_layer":12,"n_head":12,"n_embd":768,"n_positions":1024,"n_ctx":1024,
          "vocab_size":50257,"layer_norm_epsilon":1e-05,"activation_function":"gelu_new","n_inner":null})");
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.inner(), 3072);
  EXPECT_EQ(c.parameter_count(), 124439808);  // GPT-2 small's published size
  const auto again = GptConfig::from_json(c.to_json());
  EXPECT_EQ(again.n_embd, 768);
  EXPECT_EQ(again.vocab_size, 50257);
  auto refused = [](const std::string& text) {
    try {
      GptConfig::from_json(text, "c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string ok_rest = R"("n_positions":8,"vocab_size":5)";
  EXPECT_NE(refused("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refused("[]").find("JSON object"), std::string::npos);
  EXPECT_NE(refused(R"({"n_head":2,"n_embd":8,)" + ok_rest + "}").find("n_layer"), std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":3,"n_embd":8,)" + ok_rest + "}").find("multiple of n_head"),
            std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":2,"n_embd":8.5,)" + ok_rest + "}").find("n_embd"), std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":-1,"n_head":2,"n_embd":8,)" + ok_rest + "}").find("n_layer"), std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":2,"n_embd":8,"activation_function":"relu",)" + ok_rest + "}").find("relu"),
            std::string::npos);
  EXPECT_NE(refused(R"({"model_type":"llama","n_layer":1,"n_head":2,"n_embd":8,)" + ok_rest + "}").find("llama"),
            std::string::npos);
  // What config_fuzz found: sizes whose 4 * n_embd or parameter count overflow, a number beyond
  // double, an epsilon beyond float, a value with a newline (the message stays one line).
  const std::string big = std::to_string(1 << 30);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":1,"n_embd":)" + big + R"(,"n_positions":8,"vocab_size":)" + big + "}")
                .find("more than 2^40"),
            std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":2,"n_embd":1e999,)" + ok_rest + "}").find("out of range"),
            std::string::npos);
  EXPECT_NE(refused(R"({"n_layer":1,"n_head":2,"n_embd":8,"layer_norm_epsilon":1e300,)" + ok_rest + "}")
                .find("layer_norm_epsilon"),
            std::string::npos);
  const std::string newline =
      refused(R"({"n_layer":1,"n_head":2,"n_embd":8,"activation_function":"a\nb",)" + ok_rest + "}");
  EXPECT_NE(newline.find(R"("a\nb")"), std::string::npos) << newline;
  EXPECT_EQ(newline.find('\n'), std::string::npos) << newline;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints on disk.

class GptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("jomoim_gpt_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string load_error(const fs::path& d) {
    try {
      GptModel::load(d);
    } catch (const Error& e) {
      return e.what();
    }
    return "loaded";
  }
  fs::path dir_;
};

TEST_F(GptCheckpoint, SaveThenLoadGivesTheSameModel) {
  const auto cfg = small_config(2, 4, 32, 16, 41);
  const auto g = random_gpt(cfg, 21);
  save_gpt2_checkpoint(dir_, cfg, g.params);
  const GptModel loaded = GptModel::load(dir_);
  EXPECT_EQ(loaded.copied_bytes(), 0u);
  const std::vector<std::int32_t> ids = {4, 8, 15, 16, 23, 40};
  EXPECT_EQ(loaded.logits(ids), g.model().logits(ids));
  const auto st = SafetensorsFile::open(dir_ / "model.safetensors");
  EXPECT_NE(st.find("h.1.mlp.c_proj.weight"), nullptr);
  EXPECT_EQ(st.find("transformer.wte.weight"), nullptr);
}

TEST_F(GptCheckpoint, RefusesBrokenDirectories) {
  const auto cfg = small_config(1, 2, 8, 8, 12);
  const auto g = random_gpt(cfg, 2);
  EXPECT_NE(load_error(dir_).find("not a model directory"), std::string::npos);
  save_gpt2_checkpoint(dir_, cfg, g.params);
  ASSERT_EQ(load_error(dir_), "loaded");

  // Missing files.
  fs::rename(dir_ / "config.json", dir_ / "c.bak");
  EXPECT_NE(load_error(dir_).find("missing config.json"), std::string::npos);
  fs::rename(dir_ / "c.bak", dir_ / "config.json");
  fs::rename(dir_ / "model.safetensors", dir_ / "m.bak");
  EXPECT_NE(load_error(dir_).find("missing model.safetensors"), std::string::npos);
  fs::rename(dir_ / "m.bak", dir_ / "model.safetensors");

  // A config that disagrees with the weights: the shape check names the tensor.
  {
    auto c2 = cfg;
    c2.vocab_size = 13;
    std::ofstream(dir_ / "config.json") << c2.to_json();
    const auto e = load_error(dir_);
    EXPECT_NE(e.find("wte.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("[12, 8]"), std::string::npos) << e;
    std::ofstream(dir_ / "config.json") << cfg.to_json();
  }
  // A missing tensor.
  {
    const auto st = SafetensorsFile::open(dir_ / "model.safetensors");
    std::vector<std::vector<float>> keep;
    std::vector<TensorToWrite> t;
    for (const auto& info : st.tensors()) {
      if (info.name == "h.0.ln_2.bias") continue;
      auto a = st.load_f32(info.name);
      keep.emplace_back(a.data, a.data + a.numel());
      t.push_back({info.name, info.shape, keep.back().data()});
    }
    write_safetensors(dir_ / "m2.safetensors", t);
  }
  fs::rename(dir_ / "model.safetensors", dir_ / "good.safetensors");
  fs::rename(dir_ / "m2.safetensors", dir_ / "model.safetensors");
  EXPECT_NE(load_error(dir_).find("missing tensor 'h.0.ln_2.bias'"), std::string::npos);

  // Truncated weights.
  fs::copy_file(dir_ / "good.safetensors", dir_ / "model.safetensors", fs::copy_options::overwrite_existing);
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 5);
  EXPECT_NE(load_error(dir_), "loaded");

  // Lying offsets: the header claims one tensor ends beyond its size.
  {
    std::ifstream in(dir_ / "good.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const auto pos = bytes.find("\"ln_f.bias\"");
    ASSERT_NE(pos, std::string::npos);
    const auto off = bytes.find("data_offsets", pos);
    const auto close = bytes.find(']', off);
    const auto comma = bytes.rfind(',', close);
    // Replace the end offset by a larger number of the same width, padded with the same digits.
    std::string end = bytes.substr(comma + 1, close - comma - 1);
    std::string bigger = end;
    bigger[bigger.size() - 1] = bigger.back() == '9' ? '8' : '9';
    bytes.replace(comma + 1, end.size(), bigger);
    std::ofstream(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_NE(load_error(dir_), "loaded");
  }
  // Bad JSON in config.json.
  fs::copy_file(dir_ / "good.safetensors", dir_ / "model.safetensors", fs::copy_options::overwrite_existing);
  std::ofstream(dir_ / "config.json") << "{\"n_layer\": 1,";
  EXPECT_NE(load_error(dir_).find("not valid JSON"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Sampling.

TEST(Sampling, GreedyTopKAndTopPAgree) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  SamplingOptions g;
  g.temperature = 0;
  EXPECT_EQ(Sampler(g).sample(logits), 1);
  SamplingOptions k1;
  k1.top_k = 1;
  k1.seed = 3;
  Sampler s1(k1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s1.sample(logits), 1);
  SamplingOptions p;
  p.top_p = 0.01f;
  Sampler s2(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s2.sample(logits), 1);
  SamplingOptions k2;
  k2.top_k = 2;
  Sampler s3(k2);
  for (int i = 0; i < 200; ++i) {
    const int id = s3.sample(logits);
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
  EXPECT_EQ(top_ids(logits, 3), (std::vector<std::int32_t>{1, 3, 0}));
}

TEST(Sampling, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -0.5f};
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    SamplingOptions o;
    o.temperature = temperature;
    o.seed = 42;
    Sampler s(o);
    const int n = 40000;
    std::vector<int> count(4, 0);
    for (int i = 0; i < n; ++i) count[s.sample(logits)]++;
    const auto p = softmax(logits, temperature);
    for (int i = 0; i < 4; ++i) {
      const double sd = std::sqrt(p[i] * (1 - p[i]) / n);
      EXPECT_NEAR(double(count[i]) / n, p[i], 5 * sd + 1e-4) << "t=" << temperature << " id " << i;
    }
  }
}

TEST(Sampling, SameSeedSameStreamAndValidation) {
  const std::vector<float> logits = {0.3f, 0.2f, 0.1f, 0.0f, -0.1f};
  SamplingOptions o;
  o.seed = 77;
  Sampler a(o), b(o);
  o.seed = 78;
  Sampler c(o);
  std::vector<int> ra, rb, rc;
  for (int i = 0; i < 100; ++i) {
    ra.push_back(a.sample(logits));
    rb.push_back(b.sample(logits));
    rc.push_back(c.sample(logits));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
  SamplingOptions bad;
  bad.temperature = -1;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.top_p = 0;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.top_p = 1.5f;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.top_k = -2;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.temperature = std::numeric_limits<float>::infinity();
  EXPECT_THROW(Sampler{bad}, Error);
}

// ---------------------------------------------------------------------------------------------
// The generation loop (jomoim::generate, jomoim::Generation) against the loop written out.

// The rules spelled out with forward() and a Sampler: prefill, then sample, stop or feed back.
struct ExpectedGeneration {
  std::vector<std::int32_t> ids;
  StopReason stop = StopReason::none;
};
ExpectedGeneration expected_generation(const GptModel& m, const std::vector<std::int32_t>& prompt,
                                       const GenerateOptions& o) {
  const int P = m.config().n_positions;
  KvCache cache(m.config(), P);
  std::vector<float> logits = m.forward(prompt, cache);
  Sampler sampler(o.sampling);
  ExpectedGeneration e;
  for (;;) {
    if (static_cast<int>(e.ids.size()) == o.max_tokens) return {e.ids, StopReason::length};
    if (static_cast<int>(prompt.size() + e.ids.size()) >= P) return {e.ids, StopReason::context};
    const std::int32_t id = sampler.sample(logits);
    if (o.eos && id == *o.eos) return {e.ids, StopReason::eos};
    e.ids.push_back(id);
    const std::int32_t one[1] = {id};
    if (static_cast<int>(prompt.size() + e.ids.size()) < P) logits = m.forward(one, cache);
  }
}

TEST(Generate, FollowsTheLoopWrittenOut) {
  const auto cfg = small_config(2, 4, 32, 24, 97);
  const auto g = random_gpt(cfg, 21);
  const GptModel m = g.model();
  const std::vector<std::int32_t> prompt = {3, 14, 15, 92, 65};
  struct Case {
    const char* name;
    float temperature;
    int top_k;
    float top_p;
    std::uint64_t seed;
    int n;
  };
  const Case cases[] = {{"greedy", 0.0f, 0, 1.0f, 0, 10},
                        {"sampled", 1.0f, 0, 1.0f, 5, 12},
                        {"top-k", 0.8f, 40, 0.95f, 1, 12},
                        {"hot top-p", 2.0f, 0, 0.5f, std::uint64_t{2} << 40, 12},
                        {"into the context", 1.5f, 0, 1.0f, 9, 100},
                        {"none", 1.0f, 0, 1.0f, 3, 0}};
  for (const Case& c : cases) {
    GenerateOptions o;
    o.max_tokens = c.n;
    o.sampling = {c.temperature, c.top_k, c.top_p, c.seed};
    const ExpectedGeneration want = expected_generation(m, prompt, o);
    std::vector<std::int32_t> streamed;
    const GenerateResult r = generate(m, prompt, o, [&](std::int32_t id) {
      streamed.push_back(id);
      return true;
    });
    EXPECT_EQ(r.ids, want.ids) << c.name;
    EXPECT_EQ(streamed, want.ids) << c.name;
    EXPECT_EQ(r.stop, want.stop) << c.name;
    // Pulled one token at a time: the same tokens and reason, then nothing more.
    Generation pulled(m, prompt, o);
    EXPECT_EQ(pulled.stop(), StopReason::none);
    EXPECT_EQ(pulled.seed(), c.seed);
    std::vector<std::int32_t> ids;
    while (auto id = pulled.next()) ids.push_back(*id);
    EXPECT_EQ(ids, want.ids) << c.name;
    EXPECT_EQ(pulled.ids(), want.ids) << c.name;
    EXPECT_EQ(pulled.stop(), want.stop) << c.name;
    EXPECT_FALSE(pulled.next().has_value());
    EXPECT_EQ(pulled.stop(), want.stop);
  }
  // The context case filled it; the others stopped at their length.
  GenerateOptions full;
  full.max_tokens = 100;
  full.sampling.seed = 9;
  const GenerateResult r = generate(m, prompt, full);
  EXPECT_EQ(r.stop, StopReason::context);
  EXPECT_EQ(prompt.size() + r.ids.size(), static_cast<std::size_t>(cfg.n_positions));
  // A prompt that fills the context leaves no room.
  const std::vector<std::int32_t> long_prompt(cfg.n_positions, 7);
  const GenerateResult none = generate(m, long_prompt, full);
  EXPECT_TRUE(none.ids.empty());
  EXPECT_EQ(none.stop, StopReason::context);
}

TEST(Generate, StopsAtEosAndWhenTheCallbackSaysSo) {
  const auto cfg = small_config(1, 2, 16, 40, 50);
  const auto g = random_gpt(cfg, 4);
  const GptModel m = g.model();
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  GenerateOptions o;
  o.max_tokens = 30;
  o.sampling.temperature = 1.5f;
  o.sampling.seed = 11;
  const GenerateResult free_run = generate(m, prompt, o);
  ASSERT_EQ(free_run.ids.size(), 30u);
  ASSERT_EQ(free_run.stop, StopReason::length);
  // The id sampled at step 6 as the end of text: generation stops before it, at its first use.
  const std::int32_t eos = free_run.ids[6];
  const auto first = std::find(free_run.ids.begin(), free_run.ids.end(), eos) - free_run.ids.begin();
  o.eos = eos;
  const GenerateResult at_eos = generate(m, prompt, o);
  EXPECT_EQ(at_eos.stop, StopReason::eos);
  EXPECT_EQ(at_eos.ids, std::vector<std::int32_t>(free_run.ids.begin(), free_run.ids.begin() + first));
  EXPECT_EQ(std::count(at_eos.ids.begin(), at_eos.ids.end(), eos), 0);
  EXPECT_EQ(expected_generation(m, prompt, o).ids, at_eos.ids);
  // A callback that says stop after the 4th token: 4 tokens, "stopped".
  o.eos.reset();
  int calls = 0;
  const GenerateResult stopped = generate(m, prompt, o, [&](std::int32_t) { return ++calls < 4; });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(stopped.stop, StopReason::stopped);
  EXPECT_EQ(stopped.ids, std::vector<std::int32_t>(free_run.ids.begin(), free_run.ids.begin() + 4));
  EXPECT_STREQ(stop_name(StopReason::length), "length");
  EXPECT_STREQ(stop_name(StopReason::eos), "eos");
  EXPECT_STREQ(stop_name(StopReason::context), "context");
  EXPECT_STREQ(stop_name(StopReason::stopped), "stopped");
  EXPECT_STREQ(stop_name(StopReason::error), "error");
}

TEST(Generate, RefusesBadOptionsAndReportsErrors) {
  const auto cfg = small_config(1, 2, 16, 10, 50);
  const auto g = random_gpt(cfg, 4);
  const GptModel m = g.model();
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  GenerateOptions bad;
  bad.max_tokens = -1;
  EXPECT_THROW(generate(m, prompt, bad), Error);
  bad = {};
  bad.sampling.temperature = -1;
  EXPECT_THROW(Generation(m, prompt, bad), Error);
  bad = {};
  bad.sampling.top_p = 0;
  EXPECT_THROW(generate(m, prompt, bad), Error);
  EXPECT_THROW(generate(m, {}, GenerateOptions{}), Error);
  // An id outside the vocabulary fails in the prefill; the generation then says "error".
  Generation broken(m, {1, 99}, GenerateOptions{});
  EXPECT_THROW(broken.next(), Error);
  EXPECT_EQ(broken.stop(), StopReason::error);
  EXPECT_FALSE(broken.next().has_value());
  // A prompt longer than the context is the forward pass's to refuse.
  EXPECT_THROW(generate(m, std::vector<std::int32_t>(11, 1), GenerateOptions{}), Error);
  // A fresh seed is drawn for callers that have none, in [0, 2^32) as the CLI always drew.
  EXPECT_LT(fresh_seed(), std::uint64_t{1} << 32);
}

}  // namespace
