// The training loop behind `jomoim train`. See include/jomoim/model/trainer.hpp.
#include "jomoim/model/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "jomoim/engine/threads.hpp"
#include "jomoim/formats/atomic_file.hpp"
#include "jomoim/formats/safetensors.hpp"
#include "jomoim/model/train.hpp"
#include "jomoim/text/bpe_train.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "splitmix.hpp"

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

using splitmix::mix;

std::string seconds_since(Clock::time_point t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::chrono::duration<double>(Clock::now() - t).count());
  return buf;
}

std::vector<fs::path> data_files(const std::vector<fs::path>& inputs, const std::string& option) {
  std::vector<fs::path> files;
  for (const auto& p : inputs) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".txt") in_dir.push_back(e.path());
      if (in_dir.empty()) throw Error(option + " " + p.string() + ": folder has no .txt files");
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw Error(option + " " + p.string() + ": no such file or folder");
    }
  }
  if (files.empty()) throw Error("no training data given (--data FILE_OR_FOLDER)");
  return files;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json options_json(const TrainOptions& o) {
  json files = json::array(), val_files = json::array();
  for (const auto& p : o.data) files.push_back(p.string());
  for (const auto& p : o.val_data) val_files.push_back(p.string());
  return {{"data", files},
          {"val_data", val_files},
          {"documents", o.documents == Documents::eot ? "eot" : "file"},
          {"vocab_size", o.vocab_size},
          {"n_layer", o.model.n_layer},
          {"n_head", o.model.n_head},
          {"n_embd", o.model.n_embd},
          {"n_positions", o.model.n_positions},
          {"batch", o.batch},
          {"seq", o.seq},
          {"accum", o.accum},
          {"steps", o.steps},
          {"lr", o.lr},
          {"min_lr", o.min_lr},
          {"warmup", o.warmup},
          {"weight_decay", o.weight_decay},
          {"clip", o.clip},
          {"val_fraction", o.val_fraction},
          {"eval_every", o.eval_every},
          {"eval_batches", o.eval_batches},
          {"seed", o.seed},
          {"wpe_init", o.wpe_init == WpeInit::fourier      ? "fourier"
                       : o.wpe_init == WpeInit::sinusoidal ? "sinusoidal"
                                                           : "normal"},
          {"wpe_scale", o.wpe_scale},
          {"freeze_wpe", o.freeze_wpe},
          {"threads", o.threads},
          {"matmul", o.matmul == MatmulPrecision::bf16 ? "bf16" : "f32"}};
}

json record_json(const TrainRecord& r) {
  json j = {
      {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s}};
  if (r.val_loss >= 0) j["val_loss"] = r.val_loss;
  return j;
}

TrainRecord record_from(const json& j) {
  TrainRecord r;
  r.step = j.at("step");
  r.loss = j.at("loss");
  r.lr = j.at("lr");
  r.grad_norm = j.at("grad_norm");
  r.tokens_per_s = j.at("tokens_per_s");
  if (j.contains("val_loss")) r.val_loss = j["val_loss"];
  return r;
}

// The files' texts and their documents (views into texts).
struct Corpus {
  std::vector<std::string> texts;
  std::vector<std::string_view> docs;
  std::size_t bytes = 0;
};

Corpus read_corpus(const std::vector<fs::path>& files, Documents documents) {
  Corpus c;
  c.texts.reserve(files.size());
  for (const auto& f : files) c.texts.push_back(read_file(f));
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string& t = c.texts[i];
    c.bytes += t.size();
    if (documents == Documents::eot) {
      for (auto d : split_documents(t, files[i].string())) c.docs.push_back(d);
    } else {
      if (t.find(kDocumentSeparator) != std::string::npos)
        throw Error(files[i].string() +
                    ": holds documents separated by \"\\n<|endoftext|>\\n\"; pass --documents eot to split them");
      c.docs.push_back(t);
    }
  }
  return c;
}

}  // namespace

std::vector<std::string_view> split_documents(std::string_view text, const std::string& name) {
  std::vector<std::string_view> docs;
  if (text.find(kDocumentSeparator) == std::string_view::npos)
    throw Error(name + ": no document separator \"\\n<|endoftext|>\\n\" (expected with --documents eot)");
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find(kDocumentSeparator, at);
    const std::string_view d = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (const auto bad = d.find("<|endoftext|>"); bad != std::string_view::npos)
      throw Error(name + ": \"<|endoftext|>\" at byte " + std::to_string(at + bad) +
                  " is not a separator (a line of its own after a newline)");
    if (!d.empty()) docs.push_back(d);
    if (end == std::string_view::npos) break;
    at = end + kDocumentSeparator.size();
  }
  if (docs.empty()) throw Error(name + ": no documents (only separators)");
  return docs;
}

void TrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(what);
  };
  need(!out.empty(), "no output directory given (--out DIR)");
  need(vocab_size >= 257, "--vocab-size must be at least 257, got " + std::to_string(vocab_size));
  need(batch >= 1 && seq >= 1 && accum >= 1, "--batch, --seq and --accum must be at least 1");
  need(steps >= 1, "--steps must be at least 1");
  need(stop_at >= 0 && stop_at <= steps, "--stop-at must be in 0..--steps (0: off)");
  need(lr > 0 && min_lr >= 0 && min_lr <= lr, "need 0 <= --min-lr <= --lr and --lr > 0");
  need(warmup >= 0, "--warmup must be >= 0");
  need(weight_decay >= 0 && clip >= 0, "--weight-decay and --clip must be >= 0");
  need(val_fraction > 0 && val_fraction < 0.5, "--val-fraction must be in (0, 0.5)");
  need(eval_every >= 1 && eval_batches >= 0 && save_every >= 1,
       "--eval-every and --save-every must be at least 1, --eval-batches at least 0");
  need(seq <= model.n_positions,
       "--seq (" + std::to_string(seq) + ") exceeds the context --context (" + std::to_string(model.n_positions) + ")");
  need(threads >= 0, "--threads must be >= 0");
  need(init_from.empty() || tokenizer.empty(), "--init-from brings its own tokenizer: drop --tokenizer");
}

// Throws unless the model saved in `dir` has the shape of `want` (its vocabulary too when
// `with_vocab`); `verb` says what to redo with the same options ("resume", "start from it").
static void require_shape(const fs::path& dir, const GptConfig& c, const GptConfig& want, bool with_vocab,
                          const char* verb) {
  if (c.n_layer != want.n_layer || c.n_head != want.n_head || c.n_embd != want.n_embd ||
      c.n_positions != want.n_positions || (with_vocab && c.vocab_size != want.vocab_size))
    throw Error(dir.string() + ": the saved model's shape (" + std::to_string(c.n_layer) + " layers, " +
                std::to_string(c.n_head) + " heads, " + std::to_string(c.n_embd) + " wide, context " +
                std::to_string(c.n_positions) + ") differs from the options given; " + verb +
                " with the same --layers/--heads/--embd/--context");
}

TrainResult train_gpt(const TrainOptions& opt, const TrainCallbacks& cb) {
  opt.validate();
  auto say = [&](const std::string& s) {
    if (cb.log) cb.log(s);
  };
  std::error_code ec;
  fs::create_directories(opt.out, ec);
  if (ec) throw Error(opt.out.string() + ": cannot create: " + ec.message());
  const fs::path state_path = opt.out / "trainer.json";
  const bool resuming = opt.resume && fs::exists(state_path);
  if (opt.resume && !resuming) say("nothing to resume in " + opt.out.string() + ": starting a new run");
  if (!opt.resume && fs::exists(state_path))
    throw Error(opt.out.string() +
                " already holds a training run (trainer.json); pass --resume to continue it "
                "or choose another --out");

  // --init-from's shape, checked before the data is read (vocab_size: after the tokenizer).
  if (!resuming && !opt.init_from.empty())
    require_shape(opt.init_from, GptConfig::load(opt.init_from / "config.json"), opt.model, false, "start from it");

  // Documents: the held-out ones from --val-data, or every k-th.
  const auto t_read = Clock::now();
  const auto files = data_files(opt.data, "--data");
  const Corpus corpus = read_corpus(files, opt.documents);
  Corpus val_corpus;
  std::vector<std::string_view> train_docs, val_docs;
  if (!opt.val_data.empty()) {
    val_corpus = read_corpus(data_files(opt.val_data, "--val-data"), opt.documents);
    train_docs = corpus.docs;
    val_docs = val_corpus.docs;
  } else {
    const int k = std::max(2, static_cast<int>(std::lround(1.0 / opt.val_fraction)));
    for (std::size_t i = 0; i < corpus.docs.size(); ++i)
      ((i % k == static_cast<std::size_t>(k - 1)) ? val_docs : train_docs).push_back(corpus.docs[i]);
    // A single document (or too few for the split): hold out its tail instead.
    if (val_docs.empty()) {
      std::string_view all = train_docs.back();
      const std::size_t cut = static_cast<std::size_t>(all.size() * (1.0 - opt.val_fraction));
      train_docs.back() = all.substr(0, cut);
      val_docs.push_back(all.substr(cut));
    }
  }
  auto chars = [](const std::vector<std::string_view>& ds) {
    std::size_t n = 0;
    for (auto d : ds) n += d.size();
    return n;
  };
  const std::size_t train_bytes = chars(train_docs), val_bytes = chars(val_docs);
  if (train_bytes == 0) throw Error("the training data is empty");
  if (val_bytes == 0) throw Error("the held-out data is empty");
  say("data: " + std::to_string(train_docs.size()) + " training documents (" + std::to_string(train_bytes) +
      " bytes), " + std::to_string(val_docs.size()) + " held-out (" + std::to_string(val_bytes) + " bytes)" +
      (opt.val_data.empty() ? "" : " from --val-data") + ", read in " + seconds_since(t_read) + " s");

  // Tokenizer.
  const auto t_tok = Clock::now();
  Tokenizer tok = [&] {
    if (resuming) return Tokenizer::load_dir(opt.out);
    if (!opt.init_from.empty()) return Tokenizer::load_dir(opt.init_from);
    if (!opt.tokenizer.empty()) return Tokenizer::load_dir(opt.tokenizer);
    say("training a byte-level BPE tokenizer (" + std::to_string(opt.vocab_size) + " tokens) on " +
        std::to_string(train_docs.size()) + " documents");
    std::function<void(int, int)> merges_done;
    if (cb.progress) merges_done = [&](int done, int wanted) { cb.progress("tokenizer merges", done, wanted); };
    Tokenizer t = train_bpe(train_docs, BpeTrainOptions{opt.vocab_size, 2}, merges_done);
    say("tokenizer trained in " + seconds_since(t_tok) + " s");
    return t;
  }();
  const auto eos = tok.eos_id();
  if (!eos) throw Error("the tokenizer has no <|endoftext|> token to separate documents");
  // Documents are tokenized in parallel (each on one thread), then joined in order.
  const int nt = resolve_threads(opt.threads);
  auto tokenize_all = [&](const std::vector<std::string_view>& ds, const std::string& what) {
    std::vector<std::vector<std::int32_t>> parts(ds.size());
    const double total = static_cast<double>(chars(ds));
    std::atomic<std::size_t> done_bytes{0};
    std::size_t reported = 0;
    const std::size_t step = std::max<std::size_t>(1, static_cast<std::size_t>(total / 20));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (std::size_t i = 0; i < ds.size(); ++i) {
      parts[i] = tok.encode(ds[i]);
      const std::size_t now = done_bytes += ds[i].size();
      if (cb.progress && omp_get_thread_num() == 0 && now - reported >= step) {
        reported = now;
        cb.progress(what, static_cast<double>(now), total);
      }
    }
    if (cb.progress) cb.progress(what, total, total);
    std::size_t n = 0;
    for (const auto& p : parts) n += p.size() + 1;
    std::vector<std::int32_t> ids;
    ids.reserve(n);
    for (auto& p : parts) {
      ids.insert(ids.end(), p.begin(), p.end());
      ids.push_back(*eos);
      p = {};
    }
    return ids;
  };
  const auto t_enc = Clock::now();
  const std::vector<std::int32_t> train_ids = tokenize_all(train_docs, "tokenizing the training data");
  const std::vector<std::int32_t> val_ids = tokenize_all(val_docs, "tokenizing the held-out data");
  say("data: " + std::to_string(train_ids.size()) + " training tokens, " + std::to_string(val_ids.size()) +
      " held-out tokens (tokenized in " + seconds_since(t_enc) + " s)");
  if (train_ids.size() < static_cast<std::size_t>(opt.seq) + 2)
    throw Error("the training split has " + std::to_string(train_ids.size()) + " tokens, fewer than --seq + 2");
  if (val_ids.size() < static_cast<std::size_t>(opt.seq) + 2)
    throw Error("the validation split has " + std::to_string(val_ids.size()) +
                " tokens, fewer than --seq + 2 (give more data or a larger --val-fraction)");

  // The validation windows (first token of each): evenly spread, or every token once.
  const int B = opt.batch, T = opt.seq;
  std::vector<std::size_t> val_starts;
  {
    const std::size_t span = val_ids.size() - T - 1;
    if (opt.eval_batches == 0) {
      for (std::size_t at = 0; at <= span; at += T) val_starts.push_back(at);
    } else {
      const int count = opt.eval_batches * B;
      for (int i = 0; i < count; ++i)
        val_starts.push_back(count > 1 ? span * static_cast<std::size_t>(i) / (count - 1) : 0);
    }
  }

  // A bigram baseline for comparison: p(next | current) from training counts, interpolated
  // with add-one unigram frequencies (weight 0.9 / 0.1), scored on the pairs the validation
  // loss scores.
  double bigram_val_loss = 0;
  {
    const std::size_t Vt = tok.vocab_size();
    std::vector<double> uni(Vt, 1.0);
    std::unordered_map<std::uint64_t, double> bi;
    std::vector<double> from(Vt, 0.0);
    for (std::size_t i = 0; i + 1 < train_ids.size(); ++i) {
      uni[train_ids[i + 1]] += 1;
      from[train_ids[i]] += 1;
      bi[(static_cast<std::uint64_t>(train_ids[i]) << 32) | static_cast<std::uint32_t>(train_ids[i + 1])] += 1;
    }
    double uni_total = 0;
    for (double u : uni) uni_total += u;
    double nll = 0;
    for (const std::size_t at : val_starts)
      for (std::size_t i = at; i < at + static_cast<std::size_t>(T); ++i) {
        const auto a = val_ids[i], b = val_ids[i + 1];
        const auto it = bi.find((static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b));
        const double pb = from[a] > 0 && it != bi.end() ? it->second / from[a] : 0.0;
        const double pu = uni[b] / uni_total;
        nll -= std::log((from[a] > 0 ? 0.9 : 0.0) * pb + (from[a] > 0 ? 0.1 : 1.0) * pu);
      }
    bigram_val_loss = nll / static_cast<double>(val_starts.size() * T);
    say("bigram baseline: validation loss " + std::to_string(bigram_val_loss).substr(0, 6) + " on " +
        std::to_string(val_starts.size() * T) + " held-out tokens");
  }

  GptConfig cfg = opt.model;
  cfg.vocab_size = static_cast<int>(tok.vocab_size());
  cfg.validate();

  // Model and optimizer, fresh or resumed.
  TrainResult result;
  result.train_tokens = static_cast<std::int64_t>(train_ids.size());
  result.val_tokens = static_cast<std::int64_t>(val_ids.size());
  result.bigram_val_loss = bigram_val_loss;
  result.train_documents = static_cast<std::int64_t>(train_docs.size());
  result.val_documents = static_cast<std::int64_t>(val_docs.size());
  result.val_scored_tokens = static_cast<std::int64_t>(val_starts.size()) * T;
  std::unique_ptr<GptTrainable> model;
  std::unique_ptr<AdamW> adam;
  // A saved model whose shape must be the options' (a resumed run, or --init-from).
  auto load_matching = [&](const fs::path& dir, const char* verb) {
    GptModel loaded = GptModel::load(dir);
    require_shape(dir, loaded.config(), cfg, true, verb);
    return loaded;
  };
  std::int64_t step = 0;
  // Where the run's first weights came from (--init-from), kept across resumes.
  std::string init_from = opt.init_from.string();
  if (resuming) {
    const json st = json::parse(read_file(state_path));
    step = st.at("step");
    init_from = st.value("init_from", std::string());
    for (const auto& r : st.at("history")) result.history.push_back(record_from(r));
    model = std::make_unique<GptTrainable>(load_matching(opt.out, "resume"));
    adam = std::make_unique<AdamW>(model->values().size());
    const auto os = SafetensorsFile::open(opt.out / "optimizer.safetensors");
    for (auto [name, dst] : {std::pair{"m", &adam->m()}, std::pair{"v", &adam->v()}}) {
      const FloatArray a = os.load_f32(name);
      if (static_cast<std::size_t>(a.numel()) != dst->size())
        throw Error(opt.out.string() + "/optimizer.safetensors: '" + name + "' does not match the model size");
      std::copy(a.data, a.data + a.numel(), dst->begin());
    }
    adam->set_steps(step);
    say("resuming at step " + std::to_string(step) + " of " + std::to_string(opt.steps));
  } else if (!opt.init_from.empty()) {
    model = std::make_unique<GptTrainable>(load_matching(opt.init_from, "start from it"));
    adam = std::make_unique<AdamW>(model->values().size());
    say("starting from the weights of " + opt.init_from.string() + " (fresh optimizer, step 0 of " +
        std::to_string(opt.steps) + ")");
  } else {
    model = std::make_unique<GptTrainable>(cfg, opt.seed, opt.wpe_init, opt.wpe_scale);
    adam = std::make_unique<AdamW>(model->values().size());
  }
  model->set_threads(opt.threads);
  model->set_matmul_precision(opt.matmul);
  say("model: " + std::to_string(cfg.n_layer) + " layers, " + std::to_string(cfg.n_head) + " heads, " +
      std::to_string(cfg.n_embd) + " wide, context " + std::to_string(cfg.n_positions) + ", vocabulary " +
      std::to_string(cfg.vocab_size) + ": " + std::to_string(cfg.parameter_count()) + " parameters; products in " +
      (opt.matmul == MatmulPrecision::bf16 ? std::string("bf16") + (bf16_matmul_native() ? "" : " (emulated: slow)")
                                           : std::string("float32")));

  // Wall-clock training time over every invocation of this run (resumed parts included).
  double seconds_before = 0;
  if (resuming) seconds_before = json::parse(read_file(state_path)).value("seconds", 0.0);
  const auto t0 = Clock::now();
  auto elapsed_now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto save = [&] {
    save_gpt2_checkpoint(opt.out, cfg, model->params(), {{"producer", "jomoim train"}, {"step", std::to_string(step)}});
    tok.save(opt.out);
    const std::vector<TensorToWrite> t = {{"m", {static_cast<std::int64_t>(adam->m().size())}, adam->m().data()},
                                          {"v", {static_cast<std::int64_t>(adam->v().size())}, adam->v().data()}};
    write_safetensors(opt.out / "optimizer.safetensors", t);
    json hist = json::array();
    for (const auto& r : result.history) hist.push_back(record_json(r));
    const json st = {{"version", 1},
                     {"step", step},
                     {"options", options_json(opt)},
                     {"init_from", init_from},
                     {"history", hist},
                     {"train_tokens", result.train_tokens},
                     {"val_tokens", result.val_tokens},
                     {"train_documents", result.train_documents},
                     {"val_documents", result.val_documents},
                     {"val_scored_tokens", result.val_scored_tokens},
                     {"bigram_val_loss", result.bigram_val_loss},
                     {"seconds", seconds_before + elapsed_now()}};
    detail::write_text_atomic(state_path, st.dump(1) + "\n");
  };

  std::vector<std::int32_t> window(static_cast<std::size_t>(B) * (T + 1));
  auto fill_train = [&](std::int64_t s, int micro) {
    const std::uint64_t span = train_ids.size() - T - 1;
    for (int b = 0; b < B; ++b) {
      const std::uint64_t h = mix(opt.seed ^ mix(static_cast<std::uint64_t>(s) * 0x100000001b3ull ^
                                                 mix(static_cast<std::uint64_t>(micro) * 1315423911ull + b)));
      const std::size_t at = static_cast<std::size_t>(h % (span + 1));
      std::copy_n(train_ids.begin() + at, T + 1, window.begin() + static_cast<std::size_t>(b) * (T + 1));
    }
  };
  auto validate_loss = [&] {
    double sum = 0;
    for (std::size_t w0 = 0; w0 < val_starts.size(); w0 += B) {
      const std::size_t nb = std::min<std::size_t>(B, val_starts.size() - w0);
      for (std::size_t b = 0; b < nb; ++b)
        std::copy_n(val_ids.begin() + val_starts[w0 + b], T + 1, window.begin() + b * (T + 1));
      sum += model->loss(std::span<const std::int32_t>(window.data(), nb * (T + 1)), static_cast<int>(nb), T) *
             static_cast<double>(nb);
    }
    return sum / static_cast<double>(val_starts.size());
  };

  std::int64_t steps_this_run = 0;
  const std::int64_t last = opt.stop_at > 0 ? opt.stop_at : opt.steps;
  if (opt.stop_at > 0 && step >= opt.stop_at) say("already at step " + std::to_string(step) + " (--stop-at)");
  while (step < last) {
    if (cb.stop && cb.stop->load()) {
      result.interrupted = true;
      break;
    }
    const auto ts = Clock::now();
    const double lr = learning_rate(step, opt.warmup, opt.steps, opt.lr, opt.min_lr);
    model->zero_grads();
    double loss = 0;
    for (int m = 0; m < opt.accum; ++m) {
      fill_train(step, m);
      loss += model->loss_and_grad(window, B, T, 1.0 / opt.accum) / opt.accum;
    }
    if (!std::isfinite(loss))
      throw Error("training diverged at step " + std::to_string(step) + " (loss is " + std::to_string(loss) +
                  "); lower --lr");
    TrainRecord r;
    r.grad_norm = clip_grad_norm(model->grads(), opt.clip, opt.threads);
    adam->step(*model, lr, AdamWOptions{lr, 0.9, 0.95, 1e-8, opt.weight_decay, opt.freeze_wpe});
    ++step;
    ++steps_this_run;
    r.step = step;
    r.loss = loss;
    r.lr = lr;
    const double dt = std::chrono::duration<double>(Clock::now() - ts).count();
    r.tokens_per_s = static_cast<double>(B) * T * opt.accum / dt;
    if (step % opt.eval_every == 0 || step == opt.steps) r.val_loss = validate_loss();
    result.history.push_back(r);
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const double eta = elapsed / steps_this_run * static_cast<double>(opt.steps - step);
    if (cb.step) cb.step(r, opt.steps, eta);
    if (step % opt.save_every == 0 && step < last) {
      save();
      say("checkpoint saved at step " + std::to_string(step));
    }
  }
  save();
  result.steps_done = step;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  say(std::string(result.interrupted ? "interrupted: "
                  : step < opt.steps ? "stopped (--stop-at): "
                                     : "done: ") +
      "checkpoint at step " + std::to_string(step) + " saved in " + opt.out.string());
  return result;
}

}  // namespace jomoim
