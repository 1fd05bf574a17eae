// cmd_train.cpp — `jomoim train`: train a small GPT on text files (see jomoim/model/trainer.hpp).
//
// Progress goes to stderr: a bar redrawn in place on a terminal, one line per --log-every
// steps otherwise. Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and
// exits with status 130; `--resume` continues from it.
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/model/trainer.hpp"

namespace jomoim::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

struct TrainArgs {
  TrainOptions o;
  std::vector<std::string> data, val_data;
  std::string documents = "file";
  std::string matmul = "auto";
  std::string wpe_init = "normal";
  std::string out, tokenizer, init_from;
  int log_every = 10;
};

void run_train(TrainArgs& a) {
  for (const auto& d : a.data) a.o.data.emplace_back(d);
  for (const auto& d : a.val_data) a.o.val_data.emplace_back(d);
  a.o.documents = a.documents == "eot" ? Documents::eot : Documents::file;
  a.o.wpe_init = a.wpe_init == "fourier"      ? WpeInit::fourier
                 : a.wpe_init == "sinusoidal" ? WpeInit::sinusoidal
                                              : WpeInit::normal;
  a.o.matmul =
      a.matmul == "bf16" || (a.matmul == "auto" && bf16_matmul_native()) ? MatmulPrecision::bf16 : MatmulPrecision::f32;
  a.o.out = a.out;
  a.o.tokenizer = a.tokenizer;
  a.o.init_from = a.init_from;
  const bool tty = ::isatty(STDERR_FILENO);
  TrainCallbacks cb;
  cb.log = [&](const std::string& s) { std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "", s.c_str()); };
  // Long phases before training: redrawn in place on a terminal; otherwise a line at most every
  // 5 s, and the phase's end when a line was printed for it.
  std::string phase;
  auto phase_start = std::chrono::steady_clock::now(), last_line = phase_start;
  bool phase_printed = false;
  cb.progress = [&](const std::string& what, double done, double total) {
    const double f = total > 0 ? done / total : 1.0;
    const auto now = std::chrono::steady_clock::now();
    if (what != phase) {
      phase = what;
      phase_start = last_line = now;
      phase_printed = false;
    }
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s: %.0f%%%s", what.c_str(), 100 * f, f >= 1.0 ? "\n" : "");
    } else if (f >= 1.0 ? phase_printed : now - last_line >= std::chrono::seconds(5)) {
      std::fprintf(stderr, "%s: %.0f%% (%.0f s)\n", what.c_str(), 100 * f,
                   std::chrono::duration<double>(now - phase_start).count());
      last_line = now;
      phase_printed = true;
    }
    std::fflush(stderr);
  };
  cb.step = [&](const TrainRecord& r, std::int64_t total, double eta) {
    const bool eval = r.val_loss >= 0;
    if (tty) {
      const int width = 24;
      const int filled = static_cast<int>(width * static_cast<double>(r.step) / total);
      std::string bar(filled, '#');
      bar += std::string(width - filled, '.');
      std::fprintf(stderr, "\r\033[K[%s] step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s", bar.c_str(),
                   static_cast<long long>(r.step), static_cast<long long>(total), r.loss, r.lr, r.tokens_per_s,
                   duration(eta).c_str());
      if (eval)
        std::fprintf(stderr, "\n  step %lld: validation loss %.4f\n", static_cast<long long>(r.step), r.val_loss);
    } else if (eval || r.step % a.log_every == 0 || r.step == total) {
      std::fprintf(stderr, "step %lld/%lld  loss %.4f%s  lr %.2e  %.0f tok/s  ETA %s\n", static_cast<long long>(r.step),
                   static_cast<long long>(total), r.loss,
                   eval ? ("  val " + std::to_string(r.val_loss).substr(0, 6)).c_str() : "", r.lr, r.tokens_per_s,
                   duration(eta).c_str());
    }
    std::fflush(stderr);
  };
  cb.stop = &g_stop;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  TrainResult r;
  try {
    r = train_gpt(a.o, cb);
  } catch (...) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    throw;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  double val = -1;
  for (const auto& h : r.history)
    if (h.val_loss >= 0) val = h.val_loss;
  std::printf("trained %lld steps (%.0f s this run); last loss %.4f, validation loss %.4f; model in %s\n",
              static_cast<long long>(r.steps_done), r.seconds, r.history.empty() ? 0.0 : r.history.back().loss, val,
              a.out.c_str());
  if (r.interrupted) {
    std::fflush(stdout);
    std::fprintf(stderr, "interrupted: continue with the same command and --resume\n");
    std::exit(130);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& o = a->o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.n_embd = 256;
  o.model.n_positions = 128;
  o.model.vocab_size = 1;  // from the tokenizer
  CLI::App* sub =
      app.add_subcommand("train", "Train a GPT-2-architecture model on text files (writes a model directory)");
  sub->add_option("--data", a->data, "training text: files, or folders of .txt files")->required();
  auto* val = sub->add_option("--val-data", a->val_data,
                              "held-out text for validation (files or folders), instead of --val-fraction");
  sub->add_option("--documents", a->documents,
                  "what a document is: 'file' (each file), or 'eot' (each piece of a file ended by "
                  "\"\\n<|endoftext|>\\n\", the format of scripts/make-corpus.sh)")
      ->check(CLI::IsMember({"file", "eot"}))
      ->capture_default_str();
  sub->add_option("--out", a->out, "model directory to write (config.json, model.safetensors, vocab.json, merges.txt)")
      ->required();
  sub->add_option("--tokenizer", a->tokenizer,
                  "use this folder's vocab.json + merges.txt instead of training a tokenizer");
  sub->add_option("--init-from", a->init_from,
                  "start a new run from this model directory's weights and tokenizer (a fine-tuning phase: "
                  "fresh optimizer, its own --steps/--lr schedule); the shape options must match it");
  sub->add_option("--vocab-size", o.vocab_size, "vocabulary size of the trained tokenizer")->capture_default_str();
  sub->add_option("--layers", o.model.n_layer, "transformer blocks")->capture_default_str();
  sub->add_option("--heads", o.model.n_head, "attention heads per block")->capture_default_str();
  sub->add_option("--embd", o.model.n_embd, "width of the residual stream")->capture_default_str();
  sub->add_option("--context", o.model.n_positions, "context length (positions)")->capture_default_str();
  sub->add_option("--batch", o.batch, "windows per micro-batch")->capture_default_str();
  sub->add_option("--seq", o.seq, "tokens per window")->capture_default_str();
  sub->add_option("--accum", o.accum, "micro-batches per optimizer step (gradient accumulation)")
      ->capture_default_str();
  sub->add_option("--steps", o.steps, "optimizer steps in total")->capture_default_str();
  sub->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")->capture_default_str();
  sub->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices and embeddings)")
      ->capture_default_str();
  sub->add_option("--clip", o.clip, "clip the global gradient norm to this (0: off)")->capture_default_str();
  sub->add_option("--val-fraction", o.val_fraction, "share of documents held out for validation (without --val-data)")
      ->capture_default_str()
      ->excludes(val);
  sub->add_option("--eval-every", o.eval_every, "steps between validation losses")->capture_default_str();
  sub->add_option("--eval-batches", o.eval_batches,
                  "batches per validation, evenly spread over the held-out tokens (0: every held-out token)")
      ->capture_default_str();
  sub->add_option("--save-every", o.save_every, "steps between checkpoints")->capture_default_str();
  sub->add_option("--seed", o.seed, "seed of initialisation and batch order")->capture_default_str();
  sub->add_option("--threads", o.threads, threads_help)->capture_default_str();
  sub->add_option("--wpe-init", a->wpe_init,
                  "how a new run starts the position embedding: normal (N(0, 0.02), as GPT-2), sinusoidal "
                  "(the Transformer paper's sines and cosines, mostly slow waves), or fourier (sines and "
                  "cosines at frequencies spread evenly up to pi, in which one position back is a rotation a head "
                  "can peak on); the sinusoids at N(0, 0.02)'s row norm, learned from there")
      ->check(CLI::IsMember({"normal", "sinusoidal", "fourier"}))
      ->capture_default_str();
  sub->add_option("--wpe-scale", o.wpe_scale,
                  "multiplies the position embedding's starting values (any --wpe-init) by this factor; a "
                  "larger start makes position a larger part of what the first layer's attention reads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_flag("--freeze-wpe", o.freeze_wpe,
                "keep the position embedding as it starts (no update, no weight decay): a fixed position code, "
                "as the Transformer paper's sinusoids (with --wpe-init sinusoidal or fourier); give it again "
                "with --resume");
  sub->add_option("--matmul", a->matmul,
                  "input precision of the training products: f32, bf16 (rounded inputs; float32 accumulation, "
                  "weights, gradients and optimizer), auto: bf16 where the CPU has AVX512_BF16")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->capture_default_str();
  sub->add_option("--log-every", a->log_every, "steps between progress lines when stderr is not a terminal")
      ->capture_default_str();
  sub->add_flag("--resume", o.resume, "continue the run saved in --out");
  sub->add_option("--stop-at", o.stop_at,
                  "save and stop after this step (the schedule still runs to --steps; continue with --resume, "
                  "e.g. on other --data); 0: off")
      ->capture_default_str();
  sub->callback([a] { run_train(*a); });
}

}  // namespace jomoim::cli
