// jomoim/model/trainer.hpp — `jomoim train`'s loop as a library: data, tokenizer, schedule,
// validation, checkpoints, resuming.
//
// The data is a list of text files (each one document; a folder stands for its *.txt files in
// name order). Documents are tokenized and joined with <|endoftext|>; every k-th document
// (k = round(1 / val_fraction)) is held out for validation. Training windows of seq + 1
// tokens are drawn at positions that depend only on (seed, step, micro-batch, row), so a run
// is deterministic for a given seed and thread count, and a resumed run continues exactly as
// the uninterrupted one would have.
//
// The output directory is a Hugging Face GPT-2 model directory (config.json,
// model.safetensors, vocab.json, merges.txt) that every other command loads, plus
// optimizer.safetensors (AdamW moments) and trainer.json (options, step, loss history).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "jomoim/model/model.hpp"

namespace jomoim {

struct TrainOptions {
  std::vector<std::filesystem::path> data;  // text files or folders of *.txt
  std::filesystem::path out;                // model directory to write (and resume from)
  std::filesystem::path tokenizer;          // existing vocab.json + merges.txt folder; empty: train one
  int vocab_size = 4096;                    // when training the tokenizer
  GptConfig model;                          // vocab_size filled in from the tokenizer
  int batch = 16, seq = 128, accum = 1;
  std::int64_t steps = 2000;
  double lr = 1e-3, min_lr = 1e-4;
  std::int64_t warmup = 100;
  double weight_decay = 0.1, clip = 1.0;
  double val_fraction = 0.05;
  int eval_every = 100, eval_batches = 8;
  int save_every = 500;
  std::uint64_t seed = 1;
  int threads = 0;
  bool resume = false;
  void validate() const;
};

struct TrainRecord {
  std::int64_t step = 0;  // optimizer steps done
  double loss = 0;        // training loss of this step (mean over micro-batches)
  double val_loss = -1;   // < 0 when not evaluated at this step
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
};

struct TrainResult {
  std::vector<TrainRecord> history;  // the whole run, resumed parts included
  std::int64_t steps_done = 0;
  bool interrupted = false;
  double seconds = 0;  // this invocation's training time
  std::int64_t train_tokens = 0, val_tokens = 0;
  double bigram_val_loss = 0;  // the bigram baseline on the same validation tokens
};

struct TrainCallbacks {
  std::function<void(const std::string&)> log;  // one line of news (tokenizer, data, saves)
  std::function<void(const TrainRecord&, std::int64_t total, double eta_s)> step;  // after each step
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT) to save and return
};

TrainResult train_gpt(const TrainOptions& options, const TrainCallbacks& callbacks = {});

}  // namespace jomoim
