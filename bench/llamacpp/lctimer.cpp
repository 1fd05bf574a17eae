// lctimer: llama.cpp's C API (the prebuilt CPU libllama/libggml that npm node-llama-cpp 3.21.1 ships),
// measured the way `jomoim bench-model` measures jomoim. Built by build.sh.
//
//   lctimer bench  MODEL.gguf --prompt P --tokens N [--reps R] [--prefill-reps K] [--threads T]
//                             [--flash on|off|auto] [--kv f16|f32|q8_0]
//   lctimer logits MODEL.gguf --ids 1,2,3 --out FILE.f32 [--threads T] [--flash ..] [--kv ..]
//   lctimer tokenize MODEL.gguf TEXT
//   lctimer info
//
// bench: the prompt is jomoim bench-model's pseudo-random ids (x = x * 6364136223846793005 +
// 1442695040888963407 from 12345, id = (x >> 33) % vocab). Prefill = one llama_decode of the whole
// prompt (one micro-batch, logits of the last position). Decode = N x (argmax of the last logits,
// llama_decode of that one token). Rep r > 0 prefills again only while r < K (default K = R); the
// other reps cut the KV cache back to the prompt (llama_memory_seq_rm) and decode from the saved
// prompt logits, so a decode figure does not pay for prefills it does not time. The context holds
// P + N positions. The threads run in one persistent ggml threadpool (as llama-cli and llama-bench
// set up), so decode does not start threads per token. Prints one JSON line.
// logits: the last position's logits for the given ids as raw little-endian float32 (vocab values).
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode, model, out, ids, text, flash = "on", kv = "f16";
  int prompt = 512, tokens = 32, reps = 3, prefill_reps = -1, threads = 2;
};

Args parse(int argc, char** argv) {
  if (argc < 2) throw std::runtime_error("usage: lctimer bench|logits|tokenize|info [MODEL.gguf] [options]");
  Args a;
  a.mode = argv[1];
  int i = 2;
  if (a.mode != "info") {
    if (argc < 3) throw std::runtime_error("missing MODEL.gguf");
    a.model = argv[i++];
  }
  if (a.mode == "tokenize") {
    if (argc < 4) throw std::runtime_error("missing TEXT");
    a.text = argv[i++];
  }
  for (; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("option " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--prompt")
      a.prompt = std::stoi(v);
    else if (k == "--tokens")
      a.tokens = std::stoi(v);
    else if (k == "--reps")
      a.reps = std::stoi(v);
    else if (k == "--prefill-reps")
      a.prefill_reps = std::stoi(v);
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--flash")
      a.flash = v;
    else if (k == "--kv")
      a.kv = v;
    else if (k == "--ids")
      a.ids = v;
    else if (k == "--out")
      a.out = v;
    else
      throw std::runtime_error("unknown option " + k);
  }
  if (a.prefill_reps < 0) a.prefill_reps = a.reps;
  if (a.prompt < 1 || a.tokens < 1 || a.reps < 1 || a.threads < 1 || a.prefill_reps < 1)
    throw std::runtime_error("--prompt, --tokens, --reps, --prefill-reps and --threads must be at least 1");
  if (a.flash != "on" && a.flash != "off" && a.flash != "auto") throw std::runtime_error("--flash on|off|auto");
  if (a.kv != "f16" && a.kv != "f32" && a.kv != "q8_0") throw std::runtime_error("--kv f16|f32|q8_0");
  return a;
}

void log_cb(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN || std::getenv("LCTIMER_LOG")) std::fputs(text, stderr);
}

double peak_rss_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  double kb = -1;
  while (f && std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atof(line + 6);
  if (f) std::fclose(f);
  return kb / 1024;
}

// Where the CPU backends are loaded from: node-llama-cpp's folder (ggml picks the best
// libggml-cpu-<variant>.so for this CPU), or $LCTIMER_BACKEND_DIR, a folder holding one variant
// (compare.py --avx2 links libggml-cpu-haswell.so there: llama.cpp as on an AVX2-only CPU).
const char* backend_dir() {
  const char* d = std::getenv("LCTIMER_BACKEND_DIR");
  return d && *d ? d : BINS_DIR;
}

ggml_backend_reg_t cpu_reg() {
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) throw std::runtime_error(std::string("no CPU backend loaded from ") + backend_dir());
  return ggml_backend_dev_backend_reg(dev);
}

// The CPU variant ggml picked (libggml-cpu-<name>.so) and the features it was built for.
std::string cpu_features() {
  ggml_backend_reg_t reg = cpu_reg();
  std::string s = ggml_backend_dev_description(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
  auto get = (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
  std::string feats;
  for (ggml_backend_feature* f = get ? get(reg) : nullptr; f && f->name; ++f)
    if (std::strcmp(f->value, "1") == 0)
      feats += (feats.empty() ? "" : " ") + std::string(f->name);
    else if (std::strcmp(f->name, "CPU") != 0 && std::strcmp(f->value, "0") != 0)
      feats += (feats.empty() ? "" : " ") + std::string(f->name) + "=" + f->value;
  return s + " | " + feats;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\')
      o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else
      o += c;
  }
  return o;
}

int argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);  // first maximum: the lowest id on ties
}

struct Runner {
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
  ggml_threadpool_t pool = nullptr;
  int n_vocab = 0;

  Runner(const Args& a, int n_ctx, int n_batch) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = [](float, void*) { return true; };  // no progress dots on stderr
    model = llama_model_load_from_file(a.model.c_str(), mp);
    if (!model) throw std::runtime_error("llama.cpp could not load " + a.model);
    n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n_ctx);
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(n_batch);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = a.threads;
    cp.flash_attn_type = a.flash == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : a.flash == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                            : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = cp.type_v = a.kv == "f32" ? GGML_TYPE_F32 : a.kv == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    ctx = llama_init_from_model(model, cp);
    if (!ctx) throw std::runtime_error("llama_init_from_model failed (a quantized V cache needs --flash on)");
    auto make_pool = (ggml_threadpool_t(*)(ggml_threadpool_params*))ggml_backend_reg_get_proc_address(
        cpu_reg(), "ggml_threadpool_new");
    if (!make_pool) throw std::runtime_error("the CPU backend has no ggml_threadpool_new");
    ggml_threadpool_params tpp = ggml_threadpool_params_default(a.threads);
    pool = make_pool(&tpp);
    if (!pool) throw std::runtime_error("ggml_threadpool_new failed");
    llama_attach_threadpool(ctx, pool, pool);
  }
  ~Runner() {
    if (ctx) llama_free(ctx);
    if (model) llama_model_free(model);
    auto free_pool = (void (*)(ggml_threadpool_t))ggml_backend_reg_get_proc_address(cpu_reg(), "ggml_threadpool_free");
    if (pool && free_pool) free_pool(pool);
  }
  void decode(std::vector<llama_token>& ids) {
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()))) != 0)
      throw std::runtime_error("llama_decode failed");
  }
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void print_list(const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) std::printf("%s%.3f", i ? "," : "", v[i]);
}

void bench(const Args& a) {
  const auto t_load = Clock::now();
  Runner r(a, a.prompt + a.tokens, a.prompt);
  const double load_ms = ms_since(t_load);
  const int ctx_train = llama_model_n_ctx_train(r.model);
  if (a.prompt + a.tokens > ctx_train)
    throw std::runtime_error("--prompt + --tokens exceeds the model's context of " + std::to_string(ctx_train));
  std::vector<llama_token> ids(a.prompt);
  std::uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<llama_token>((x >> 33) % static_cast<std::uint64_t>(r.n_vocab));
  }
  llama_memory_t mem = llama_get_memory(r.ctx);
  std::vector<double> prefill, decode;
  std::vector<float> prompt_logits;
  std::vector<llama_token> generated;
  for (int rep = 0; rep < a.reps; ++rep) {
    const float* logits;
    if (rep < a.prefill_reps) {
      llama_memory_clear(mem, true);
      std::vector<llama_token> p = ids;
      const auto t0 = Clock::now();
      r.decode(p);
      logits = llama_get_logits_ith(r.ctx, -1);
      prefill.push_back(ms_since(t0));
      prompt_logits.assign(logits, logits + r.n_vocab);
    } else {
      if (!llama_memory_seq_rm(mem, 0, a.prompt, -1)) throw std::runtime_error("llama_memory_seq_rm failed");
      logits = prompt_logits.data();
    }
    generated.clear();
    const auto t0 = Clock::now();
    for (int i = 0; i < a.tokens; ++i) {
      std::vector<llama_token> next{argmax(logits, r.n_vocab)};
      generated.push_back(next[0]);
      r.decode(next);
      logits = llama_get_logits_ith(r.ctx, -1);
    }
    decode.push_back(ms_since(t0));
  }
  const double pm = median(prefill), dm = median(decode);
  std::printf(
      "{\"model\":\"%s\",\"threads\":%d,\"prompt_tokens\":%d,\"new_tokens\":%d,\"reps\":%d,\"prefill_reps\":%d,"
      "\"n_ctx\":%u,\"flash\":\"%s\",\"kv_cache\":\"%s\",\"load_ms\":%.3f,\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
      "\"prefill_tokens_per_s\":%.3f,\"decode_tokens_per_s\":%.3f,\"prefill_ms_all\":[",
      json_escape(a.model).c_str(), a.threads, a.prompt, a.tokens, a.reps, a.prefill_reps, llama_n_ctx(r.ctx),
      a.flash.c_str(), a.kv.c_str(), load_ms, pm, dm, a.prompt / (pm / 1e3), a.tokens / (dm / 1e3));
  print_list(prefill);
  std::printf("],\"decode_ms_all\":[");
  print_list(decode);
  std::printf("],\"generated\":[");
  for (std::size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? "," : "", generated[i]);
  std::printf("],\"peak_rss_mib\":%.2f,\"cpu\":\"%s\"}\n", peak_rss_mib(), json_escape(cpu_features()).c_str());
}

void logits(const Args& a) {
  std::vector<llama_token> ids;
  for (std::size_t p = 0; p < a.ids.size();) {
    std::size_t q = a.ids.find(',', p);
    if (q == std::string::npos) q = a.ids.size();
    ids.push_back(std::stoi(a.ids.substr(p, q - p)));
    p = q + 1;
  }
  if (ids.empty() || a.out.empty()) throw std::runtime_error("logits needs --ids and --out");
  Runner r(a, static_cast<int>(ids.size()), static_cast<int>(ids.size()));
  r.decode(ids);
  const float* lg = llama_get_logits_ith(r.ctx, -1);
  FILE* f = std::fopen(a.out.c_str(), "wb");
  if (!f || std::fwrite(lg, sizeof(float), r.n_vocab, f) != static_cast<std::size_t>(r.n_vocab))
    throw std::runtime_error("cannot write " + a.out);
  std::fclose(f);
  std::printf("{\"n_vocab\":%d,\"n_ids\":%zu,\"flash\":\"%s\",\"kv_cache\":\"%s\"}\n", r.n_vocab, ids.size(),
              a.flash.c_str(), a.kv.c_str());
}

void tokenize(const Args& a) {
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = true;
  llama_model* m = llama_model_load_from_file(a.model.c_str(), mp);
  if (!m) throw std::runtime_error("llama.cpp could not load " + a.model);
  std::vector<llama_token> ids(a.text.size() + 8);
  const int n = llama_tokenize(llama_model_get_vocab(m), a.text.c_str(), static_cast<int32_t>(a.text.size()),
                               ids.data(), static_cast<int32_t>(ids.size()), false, false);
  if (n < 0) throw std::runtime_error("llama_tokenize failed");
  std::printf("[");
  for (int i = 0; i < n; ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("]\n");
  llama_model_free(m);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    llama_log_set(log_cb, nullptr);
    ggml_backend_load_all_from_path(backend_dir());
    llama_backend_init();
    if (a.mode == "bench")
      bench(a);
    else if (a.mode == "logits")
      logits(a);
    else if (a.mode == "tokenize")
      tokenize(a);
    else if (a.mode == "info")
      std::printf("{\"cpu\":\"%s\"}\n", json_escape(cpu_features()).c_str());
    else
      throw std::runtime_error("unknown mode " + a.mode);
    llama_backend_free();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lctimer: %s\n", e.what());
    return 1;
  }
}
