// jomoim/model/trainer.hpp — `jomoim train`'s loop as a library: data, tokenizer, schedule,
// validation, checkpoints, resuming.
//
// The data is a list of text files (a folder stands for its *.txt files in name order). A
// document is a whole file (Documents::file), or, in the corpus format of
// scripts/make-corpus.sh (Documents::eot), each piece of a file that ends with the separator
// "\n<|endoftext|>\n" (text after the last separator is one more document; an empty piece is
// skipped; a file without a separator, or with "<|endoftext|>" elsewhere, is refused, so the
// separator never reaches the tokenizer or its training). Documents are tokenized and joined
// with the <|endoftext|> token id (one after each document). The held-out documents are those
// of val_data when given, else every k-th document (k = round(1 / val_fraction)). Training
// windows of seq + 1
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
#include <string_view>
#include <vector>

#include "jomoim/model/model.hpp"
#include "jomoim/model/train.hpp"

namespace jomoim {

// What a document is in the data files (see above).
enum class Documents { file, eot };
// The separator of Documents::eot, and the documents of one file's text in that format (views
// into `text`). Throws Error naming `name` for a text without a separator or with
// "<|endoftext|>" other than as a separator.
inline constexpr std::string_view kDocumentSeparator = "\n<|endoftext|>\n";
std::vector<std::string_view> split_documents(std::string_view text, const std::string& name);

struct TrainOptions {
  std::vector<std::filesystem::path> data;      // text files or folders of *.txt
  std::vector<std::filesystem::path> val_data;  // held-out text; empty: hold out by val_fraction
  Documents documents = Documents::file;
  std::filesystem::path out;        // model directory to write (and resume from)
  std::filesystem::path tokenizer;  // existing vocab.json + merges.txt folder; empty: train one
  // A model directory (config.json, model.safetensors, vocab.json, merges.txt): a new run starts
  // from its weights and tokenizer, with a fresh optimizer and its own schedule (a fine-tuning
  // phase). Its shape must match --layers/--heads/--embd/--context. Ignored when resuming.
  std::filesystem::path init_from;
  int vocab_size = 4096;  // when training the tokenizer
  GptConfig model;        // vocab_size filled in from the tokenizer
  int batch = 16, seq = 128, accum = 1;
  std::int64_t steps = 2000;
  double lr = 1e-3, min_lr = 1e-4;
  std::int64_t warmup = 100;
  double weight_decay = 0.1, clip = 1.0;
  double val_fraction = 0.05;
  int eval_every = 100;
  int eval_batches = 8;  // batches of validation windows, evenly spread; 0: every held-out token
  int save_every = 500;
  std::uint64_t seed = 1;
  WpeInit wpe_init = WpeInit::normal;  // --wpe-init (GptTrainable); only for a new run
  double wpe_scale = 1.0;              // --wpe-scale (GptTrainable); only for a new run
  // --freeze-wpe: the position embedding keeps its start (AdamWOptions::freeze_wpe). Like the
  // other optimizer options it applies to this invocation: give it again when resuming.
  bool freeze_wpe = false;
  int threads = 0;
  // The training products' input precision (GptTrainable::set_matmul_precision); validation
  // always multiplies in float32.
  MatmulPrecision matmul = MatmulPrecision::f32;
  bool resume = false;
  // > 0: save and stop once this many steps are done (the schedule still runs to `steps`);
  // a later run with resume continues. For a run in phases on different data.
  std::int64_t stop_at = 0;
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
  std::int64_t train_documents = 0, val_documents = 0;
  // The bigram baseline (training counts) on exactly the (context, next token) pairs that the
  // validation loss scores; eval_batches = 0 makes that every held-out token.
  double bigram_val_loss = 0;
  std::int64_t val_scored_tokens = 0;  // how many pairs the validation loss (and bigram) scores
};

struct TrainCallbacks {
  std::function<void(const std::string&)> log;  // one line of news (tokenizer, data, saves)
  std::function<void(const TrainRecord&, std::int64_t total, double eta_s)> step;  // after each step
  // Progress of a long phase before training (tokenizer training, tokenizing): `what` is the
  // phase, done / total its progress; called now and then and once with done == total.
  std::function<void(const std::string& what, double done, double total)> progress;
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT) to save and return
};

TrainResult train_gpt(const TrainOptions& options, const TrainCallbacks& callbacks = {});

}  // namespace jomoim
