// The training loop behind `jomoim train`. See include/jomoim/model/trainer.hpp.
#include "jomoim/model/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include <nlohmann/json.hpp>

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

std::vector<fs::path> data_files(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const auto& p : inputs) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".txt") in_dir.push_back(e.path());
      if (in_dir.empty()) throw Error("--data " + p.string() + ": folder has no .txt files");
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw Error("--data " + p.string() + ": no such file or folder");
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
  json files = json::array();
  for (const auto& p : o.data) files.push_back(p.string());
  return {{"data", files},
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
          {"threads", o.threads}};
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

}  // namespace

void TrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(what);
  };
  need(!out.empty(), "no output directory given (--out DIR)");
  need(vocab_size >= 257, "--vocab-size must be at least 257, got " + std::to_string(vocab_size));
  need(batch >= 1 && seq >= 1 && accum >= 1, "--batch, --seq and --accum must be at least 1");
  need(steps >= 1, "--steps must be at least 1");
  need(lr > 0 && min_lr >= 0 && min_lr <= lr, "need 0 <= --min-lr <= --lr and --lr > 0");
  need(warmup >= 0, "--warmup must be >= 0");
  need(weight_decay >= 0 && clip >= 0, "--weight-decay and --clip must be >= 0");
  need(val_fraction > 0 && val_fraction < 0.5, "--val-fraction must be in (0, 0.5)");
  need(eval_every >= 1 && eval_batches >= 1 && save_every >= 1,
       "--eval-every, --eval-batches and --save-every must be at least 1");
  need(seq <= model.n_positions,
       "--seq (" + std::to_string(seq) + ") exceeds the context --context (" + std::to_string(model.n_positions) + ")");
  need(threads >= 0, "--threads must be >= 0");
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

  // Documents; every k-th is held out.
  const auto files = data_files(opt.data);
  std::vector<std::string> docs;
  for (const auto& f : files) docs.push_back(read_file(f));
  const int k = std::max(2, static_cast<int>(std::lround(1.0 / opt.val_fraction)));
  std::vector<std::string_view> train_docs, val_docs;
  for (std::size_t i = 0; i < docs.size(); ++i)
    ((i % k == static_cast<std::size_t>(k - 1)) ? val_docs : train_docs).push_back(docs[i]);
  // A single document (or too few for the split): hold out its tail instead.
  std::string_view tail_view;
  if (val_docs.empty()) {
    std::string_view all = train_docs.back();
    const std::size_t cut = static_cast<std::size_t>(all.size() * (1.0 - opt.val_fraction));
    train_docs.back() = all.substr(0, cut);
    val_docs.push_back(all.substr(cut));
  }

  // Tokenizer.
  const auto t_tok = Clock::now();
  double bigram_val_loss = 0;
  Tokenizer tok = [&] {
    if (resuming) return Tokenizer::load_dir(opt.out);
    if (!opt.tokenizer.empty()) return Tokenizer::load_dir(opt.tokenizer);
    say("training a byte-level BPE tokenizer (" + std::to_string(opt.vocab_size) + " tokens) on " +
        std::to_string(train_docs.size()) + " documents");
    return train_bpe(train_docs, BpeTrainOptions{opt.vocab_size, 2});
  }();
  const auto eos = tok.eos_id();
  if (!eos) throw Error("the tokenizer has no <|endoftext|> token to separate documents");
  auto tokenize_all = [&](const std::vector<std::string_view>& ds) {
    std::vector<std::int32_t> ids;
    for (auto d : ds) {
      auto t = tok.encode(d);
      ids.insert(ids.end(), t.begin(), t.end());
      ids.push_back(*eos);
    }
    return ids;
  };
  const std::vector<std::int32_t> train_ids = tokenize_all(train_docs);
  const std::vector<std::int32_t> val_ids = tokenize_all(val_docs);
  say("data: " + std::to_string(files.size()) + " files, " + std::to_string(train_ids.size()) + " training tokens, " +
      std::to_string(val_ids.size()) + " validation tokens (tokenized in " +
      std::to_string(std::chrono::duration<double>(Clock::now() - t_tok).count()).substr(0, 5) + " s)");
  if (train_ids.size() < static_cast<std::size_t>(opt.seq) + 2)
    throw Error("the training split has " + std::to_string(train_ids.size()) + " tokens, fewer than --seq + 2");
  if (val_ids.size() < static_cast<std::size_t>(opt.seq) + 2)
    throw Error("the validation split has " + std::to_string(val_ids.size()) +
                " tokens, fewer than --seq + 2 (give more data or a larger --val-fraction)");

  // A bigram baseline for comparison: p(next | current) from training counts, interpolated
  // with add-one unigram frequencies (weight 0.9 / 0.1), scored on the validation tokens.
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
    for (std::size_t i = 0; i + 1 < val_ids.size(); ++i) {
      const auto a = val_ids[i], b = val_ids[i + 1];
      const auto it = bi.find((static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b));
      const double pb = from[a] > 0 && it != bi.end() ? it->second / from[a] : 0.0;
      const double pu = uni[b] / uni_total;
      nll -= std::log((from[a] > 0 ? 0.9 : 0.0) * pb + (from[a] > 0 ? 0.1 : 1.0) * pu);
    }
    bigram_val_loss = nll / static_cast<double>(val_ids.size() - 1);
    say("bigram baseline: validation loss " + std::to_string(bigram_val_loss).substr(0, 6));
  }

  GptConfig cfg = opt.model;
  cfg.vocab_size = static_cast<int>(tok.vocab_size());
  cfg.validate();

  // Model and optimizer, fresh or resumed.
  TrainResult result;
  result.train_tokens = static_cast<std::int64_t>(train_ids.size());
  result.val_tokens = static_cast<std::int64_t>(val_ids.size());
  result.bigram_val_loss = bigram_val_loss;
  std::unique_ptr<GptTrainable> model;
  std::unique_ptr<AdamW> adam;
  std::int64_t step = 0;
  if (resuming) {
    const json st = json::parse(read_file(state_path));
    step = st.at("step");
    for (const auto& r : st.at("history")) result.history.push_back(record_from(r));
    {
      const GptModel loaded = GptModel::load(opt.out);
      const GptConfig& c = loaded.config();
      if (c.n_layer != cfg.n_layer || c.n_head != cfg.n_head || c.n_embd != cfg.n_embd ||
          c.n_positions != cfg.n_positions || c.vocab_size != cfg.vocab_size)
        throw Error(opt.out.string() +
                    ": the saved model's shape differs from the options given; resume with the "
                    "same --layers/--heads/--embd/--context");
      model = std::make_unique<GptTrainable>(loaded);
    }
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
  } else {
    model = std::make_unique<GptTrainable>(cfg, opt.seed);
    adam = std::make_unique<AdamW>(model->values().size());
  }
  model->set_threads(opt.threads);
  say("model: " + std::to_string(cfg.n_layer) + " layers, " + std::to_string(cfg.n_head) + " heads, " +
      std::to_string(cfg.n_embd) + " wide, context " + std::to_string(cfg.n_positions) + ", vocabulary " +
      std::to_string(cfg.vocab_size) + ": " + std::to_string(cfg.parameter_count()) + " parameters");

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
                     {"history", hist},
                     {"train_tokens", result.train_tokens},
                     {"val_tokens", result.val_tokens},
                     {"bigram_val_loss", result.bigram_val_loss},
                     {"seconds", seconds_before + elapsed_now()}};
    detail::write_text_atomic(state_path, st.dump(1) + "\n");
  };

  const int B = opt.batch, T = opt.seq;
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
    const int count = opt.eval_batches * B;
    const std::size_t span = val_ids.size() - T - 1;
    double sum = 0;
    for (int e = 0; e < opt.eval_batches; ++e) {
      for (int b = 0; b < B; ++b) {
        const std::size_t i = static_cast<std::size_t>(e) * B + b;
        const std::size_t at = count > 1 ? span * i / (count - 1) : 0;
        std::copy_n(val_ids.begin() + at, T + 1, window.begin() + static_cast<std::size_t>(b) * (T + 1));
      }
      sum += model->loss(window, B, T);
    }
    return sum / opt.eval_batches;
  };

  std::int64_t steps_this_run = 0;
  while (step < opt.steps) {
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
    r.grad_norm = clip_grad_norm(model->grads(), opt.clip);
    adam->step(*model, lr, AdamWOptions{lr, 0.9, 0.95, 1e-8, opt.weight_decay});
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
    if (step % opt.save_every == 0 && step < opt.steps) {
      save();
      say("checkpoint saved at step " + std::to_string(step));
    }
  }
  save();
  result.steps_done = step;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  say(std::string(result.interrupted ? "interrupted: " : "done: ") + "checkpoint at step " + std::to_string(step) +
      " saved in " + opt.out.string());
  return result;
}

}  // namespace jomoim
