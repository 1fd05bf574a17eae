// cmd_model.cpp — the model commands: `jomoim tokenize`, `jomoim predict`, `jomoim generate`.
//
// Each reads a Hugging Face GPT-2 model directory (config.json, model.safetensors, vocab.json,
// merges.txt); see model_dir.cpp for how the directory is found when --model is not given.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "jomoim/engine/simd.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/model/sampling.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "model_dir.hpp"

namespace jomoim::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct TokenizeArgs {
  std::string model, text;
  bool json = false;
};

struct PredictArgs {
  std::string model, text;
  int top = 10;
  int threads = 0;
  std::string kv_cache = "f32";
  std::string weights = "f32";
  std::string matmul = "f32";
  bool json = false;
};

struct GenerateArgs {
  std::string model, text;
  int n = 50;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  std::optional<std::uint64_t> seed;
  int threads = 0;
  std::string kv_cache = "f32";
  std::string weights = "f32";
  std::string matmul = "f32";
  bool ignore_eos = false;
  bool json = false;
};

void run_tokenize(const TokenizeArgs& a) {
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  const std::vector<std::int32_t> ids = tok.encode(a.text);
  if (a.json) {
    json j = {{"ids", ids}, {"tokens", json::array()}};
    for (auto id : ids) {
      j["tokens"].push_back(
          {{"id", id}, {"text", printable_text(tok.token_bytes(id))}, {"token", tok.token_string(id)}});
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::string line;
  for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

void run_predict(const PredictArgs& a) {
  if (a.top < 1) throw Error("--top must be at least 1, got " + std::to_string(a.top));
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  GptModel model = load_model(dir.path, a.weights, a.matmul);
  model.set_threads(a.threads);
  apply_kv_cache(model, a.kv_cache);
  const GptConfig& c = model.config();
  const std::vector<std::int32_t> ids = encode_prompt(tok, a.text, c.n_positions, c.vocab_size);
  KvCache cache = model.make_cache(static_cast<int>(ids.size()));
  const auto t0 = Clock::now();
  const std::vector<float> logits = model.forward(ids, cache);
  const double ms = ms_since(t0);
  const std::vector<double> p = softmax(logits);
  const std::vector<std::int32_t> best = top_ids(logits, a.top);
  if (a.json) {
    json j = {{"model", dir.path.string()},
              {"prompt", a.text},
              {"kv_cache", kv_format_name(model.kv_format())},
              {"weights", weight_format_name(model.weight_format())},
              {"matmul", matmul_precision_name(model.matmul())},
              {"ids", ids},
              {"top", json::array()}};
    for (auto id : best)
      j["top"].push_back(
          {{"id", id}, {"text", printable_text(tok.token_bytes(id))}, {"probability", p[id]}, {"logit", logits[id]}});
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("prompt: %zu tokens, forward pass %.1f ms (%s, %s weights, %s KV cache)\n", ids.size(), ms,
              dir.path.string().c_str(), weight_format_name(model.weight_format()), kv_format_name(model.kv_format()));
  std::printf("%5s  %7s  %-24s  %s\n", "rank", "id", "token", "probability");
  for (std::size_t r = 0; r < best.size(); ++r) {
    const std::string t = "\"" + printable_text(tok.token_bytes(best[r])) + "\"";
    std::printf("%5zu  %7d  %-24s  %.4f\n", r + 1, best[r], t.c_str(), p[best[r]]);
  }
}

void run_generate(const GenerateArgs& a) {
  if (a.n < 0) throw Error("-n must be >= 0, got " + std::to_string(a.n));
  GenerateOptions go;
  go.max_tokens = a.n;
  go.sampling.temperature = a.temperature;
  go.sampling.top_k = a.top_k;
  go.sampling.top_p = a.top_p;
  go.sampling.seed = a.seed ? *a.seed : fresh_seed();
  go.validate();
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  GptModel model = load_model(dir.path, a.weights, a.matmul);
  model.set_threads(a.threads);
  apply_kv_cache(model, a.kv_cache);
  const GptConfig& c = model.config();
  const std::vector<std::int32_t> ids = encode_prompt(tok, a.text, c.n_positions, c.vocab_size);
  if (!a.ignore_eos) go.eos = tok.eos_id();

  if (!a.json) {
    std::fwrite(a.text.data(), 1, a.text.size(), stdout);
    std::fflush(stdout);
  }
  const GenerateResult r = generate(model, ids, go, [&](std::int32_t id) {
    if (!a.json) {
      const std::string b = tok.token_bytes(id);
      std::fwrite(b.data(), 1, b.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  const std::string stop = stop_name(r.stop);
  const double prefill_tps = ids.size() / (r.prefill_ms / 1e3);
  const double decode_tps = r.ids.empty() ? 0.0 : r.ids.size() / (r.decode_ms / 1e3);
  if (a.json) {
    json j = {{"prompt", a.text},
              {"prompt_ids", ids},
              {"ids", r.ids},
              {"text", tok.decode(r.ids)},
              {"stop", stop},
              {"seed", go.sampling.seed},
              {"kv_cache", kv_format_name(model.kv_format())},
              {"weights", weight_format_name(model.weight_format())},
              {"matmul", matmul_precision_name(model.matmul())},
              {"prefill_ms", r.prefill_ms},
              {"decode_ms", r.decode_ms},
              {"prefill_tokens_per_s", prefill_tps},
              {"decode_tokens_per_s", decode_tps}};
    // Text may hold invalid UTF-8 (a token can end mid-character); dump replaces it.
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("\n");
  std::fprintf(stderr,
               "[prompt %zu tokens in %.1f ms (%.1f tokens/s); generated %zu tokens in %.1f ms (%.1f tokens/s); seed "
               "%llu; stop: %s]\n",
               ids.size(), r.prefill_ms, prefill_tps, r.ids.size(), r.decode_ms, decode_tps,
               static_cast<unsigned long long>(go.sampling.seed), stop.c_str());
}

// Resident memory from /proc/self/status, in MiB: the peak (VmHWM), and now split into anonymous
// memory (what the process allocated) and file-backed pages (the mapped weights).
struct MemoryReport {
  double peak = 0, anon = 0, file = 0;
};
MemoryReport memory_report() {
  MemoryReport r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return r;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    double kb = 0;
    if (std::sscanf(line, "VmHWM: %lf", &kb) == 1) r.peak = kb / 1024;
    if (std::sscanf(line, "RssAnon: %lf", &kb) == 1) r.anon = kb / 1024;
    if (std::sscanf(line, "RssFile: %lf", &kb) == 1) r.file = kb / 1024;
  }
  std::fclose(f);
  return r;
}

struct BenchModelArgs {
  std::string model;
  int prompt = 128;
  int tokens = 64;
  int reps = 3;
  int threads = 0;
  std::string kv_cache = "f32";
  std::string weights = "f32";
  std::string matmul = "f32";
  std::string target;  // pinned SIMD target ("": the CPU's best)
  bool json = false;
};

// Prefill of `prompt` random ids, then `tokens` single-token decode steps through the KV cache;
// medians over reps. No tokenizer needed: the ids are drawn from the vocabulary.
void run_bench_model(const BenchModelArgs& a) {
  if (a.prompt < 1 || a.tokens < 1 || a.reps < 1) throw Error("--prompt, --tokens and --reps must be at least 1");
  if (!a.target.empty()) set_simd_target(a.target);  // throws Error naming the choices
  const ModelDir dir = resolve_model_dir(a.model);
  const auto t_load = Clock::now();
  GptModel model = load_model(dir.path, a.weights, a.matmul);
  const double load_ms = ms_since(t_load);
  model.set_threads(a.threads);
  apply_kv_cache(model, a.kv_cache);
  const GptConfig& c = model.config();
  if (a.prompt + a.tokens > c.n_positions)
    throw Error("--prompt + --tokens = " + std::to_string(a.prompt + a.tokens) + " exceeds the context of " +
                std::to_string(c.n_positions));
  std::vector<std::int32_t> ids(a.prompt);
  std::uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<std::int32_t>((x >> 33) % static_cast<std::uint64_t>(c.vocab_size));
  }
  KvCache cache = model.make_cache(a.prompt + a.tokens);
  std::vector<double> prefill, decode;
  for (int r = 0; r < a.reps; ++r) {
    cache.clear();
    auto t0 = Clock::now();
    std::vector<float> logits = model.forward(ids, cache);
    prefill.push_back(ms_since(t0));
    t0 = Clock::now();
    for (int i = 0; i < a.tokens; ++i) {
      const std::int32_t next[1] = {top_ids(logits, 1)[0]};
      logits = model.forward(next, cache);
    }
    decode.push_back(ms_since(t0));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double pm = median(prefill), dm = median(decode);
  const MemoryReport mem = memory_report();
  const double weights_mib = static_cast<double>(model.weight_bytes()) / (1024.0 * 1024.0);
  if (a.json) {
    json j = {{"model", dir.path.string()},
              {"threads", a.threads},
              {"prompt_tokens", a.prompt},
              {"new_tokens", a.tokens},
              {"reps", a.reps},
              {"load_ms", load_ms},
              {"prefill_ms", pm},
              {"decode_ms", dm},
              {"prefill_tokens_per_s", a.prompt / (pm / 1e3)},
              {"decode_tokens_per_s", a.tokens / (dm / 1e3)},
              {"prefill_ms_all", prefill},
              {"decode_ms_all", decode},
              {"peak_rss_mib", mem.peak},
              {"rss_anon_mib", mem.anon},
              {"rss_file_mib", mem.file},
              {"weights_mib", weights_mib},
              {"copied_weight_mib", model.copied_bytes() / (1024.0 * 1024.0)},
              {"kv_cache", kv_format_name(cache.format())},
              {"weights", weight_format_name(model.weight_format())},
              {"matmul", matmul_precision_name(model.matmul())},
              {"kv_cache_mib", cache.bytes() / (1024.0 * 1024.0)},
              {"target", active_simd_target()},
              {"parameters", c.parameter_count()}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("model %s: %lld parameters (%.0f MiB of %s weights, %.0f MiB copied), loaded in %.0f ms\n",
              dir.path.string().c_str(), static_cast<long long>(c.parameter_count()), weights_mib,
              weight_format_name(model.weight_format()), model.copied_bytes() / (1024.0 * 1024.0), load_ms);
  std::printf("prefill %d tokens: %.1f ms (%.0f tokens/s, %s products; SIMD target %s)\n", a.prompt, pm,
              a.prompt / (pm / 1e3), matmul_precision_name(model.matmul()), active_simd_target().c_str());
  std::printf("decode  %d tokens: %.1f ms (%.1f tokens/s)\n", a.tokens, dm, a.tokens / (dm / 1e3));
  std::printf(
      "memory: peak RSS %.0f MiB = mapped weights (file-backed) %.0f MiB + allocated %.0f MiB "
      "(KV cache %.1f MiB, %s)\n",
      mem.peak, mem.file, mem.anon, cache.bytes() / (1024.0 * 1024.0), kv_format_name(cache.format()));
}

}  // namespace

void add_model_commands(CLI::App& app) {
  const std::string model_help =
      "model directory (config.json, model.safetensors, vocab.json, merges.txt); default: " + default_model_help();
  {
    auto a = std::make_shared<TokenizeArgs>();
    CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text (byte-level BPE)");
    sub->add_option("text", a->text, "text to tokenize")->required();
    sub->add_option("--model", a->model, model_help);
    sub->add_flag("--json", a->json, "print ids and their text pieces as JSON");
    sub->callback([a] { run_tokenize(*a); });
  }
  {
    auto a = std::make_shared<PredictArgs>();
    CLI::App* sub = app.add_subcommand("predict", "Print the model's next-token distribution for a prompt");
    sub->add_option("text", a->text, "prompt")->required();
    sub->add_option("--model", a->model, model_help);
    sub->add_option("--top", a->top, "how many of the most likely tokens to show")->capture_default_str();
    sub->add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
    add_kv_cache_option(sub, a->kv_cache);
    add_weights_option(sub, a->weights);
    add_matmul_option(sub, a->matmul);
    sub->add_flag("--json", a->json, "print the distribution as JSON");
    sub->callback([a] { run_predict(*a); });
  }
  {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* sub = app.add_subcommand("generate", "Continue a prompt, streaming tokens, with a KV cache");
    sub->add_option("text", a->text, "prompt")->required();
    sub->add_option("--model", a->model, model_help);
    sub->add_option("-n,--tokens", a->n, "how many tokens to generate")->capture_default_str();
    sub->add_option("--temperature", a->temperature, "sampling temperature; 0 is greedy")->capture_default_str();
    sub->add_option("--top-k", a->top_k, "sample among the k most likely tokens; 0: all")->capture_default_str();
    sub->add_option("--top-p", a->top_p, "sample among the most likely tokens whose probability reaches p")
        ->capture_default_str();
    sub->add_option("--seed", a->seed, "random seed (default: a fresh one, printed at the end)");
    sub->add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
    add_kv_cache_option(sub, a->kv_cache);
    add_weights_option(sub, a->weights);
    add_matmul_option(sub, a->matmul);
    sub->add_flag("--ignore-eos", a->ignore_eos, "keep going after <|endoftext|>");
    sub->add_flag("--json", a->json, "print the result as one JSON object instead of streaming");
    sub->callback([a] { run_generate(*a); });
  }
  {
    auto a = std::make_shared<BenchModelArgs>();
    CLI::App* sub =
        app.add_subcommand("bench-model", "Time prefill and KV-cache decoding of a model (random prompt ids)");
    sub->add_option("--model", a->model, model_help);
    sub->add_option("--prompt", a->prompt, "prompt length in tokens")->capture_default_str();
    sub->add_option("--tokens", a->tokens, "tokens to decode one by one")->capture_default_str();
    sub->add_option("--reps", a->reps, "repetitions (medians are reported)")->capture_default_str();
    sub->add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
    add_kv_cache_option(sub, a->kv_cache);
    add_weights_option(sub, a->weights);
    add_matmul_option(sub, a->matmul);
    sub->add_option("--target", a->target,
                    "pin jomoim's SIMD target (as `jomoim bench --target`, e.g. AVX2; default: the CPU's best). "
                    "oneDNN's products follow ONEDNN_MAX_CPU_ISA (e.g. AVX2), not this option");
    sub->add_flag("--json", a->json, "print one JSON object");
    sub->callback([a] { run_bench_model(*a); });
  }
}

}  // namespace jomoim::cli
