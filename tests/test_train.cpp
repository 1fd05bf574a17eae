// Training: every layer's backward by finite differences (through the whole model, one
// parameter tensor of each kind at a time), AdamW, clipping and the schedule, the BPE trainer,
// and the training loop (loss falls, deterministic, resume = uninterrupted run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/model/model.hpp"
#include "jomoim/model/train.hpp"
#include "jomoim/model/trainer.hpp"
#include "jomoim/text/bpe_train.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "model_test_util.hpp"

namespace fs = std::filesystem;
using namespace jomoim;

namespace {

GptConfig tiny(const std::string& act = "gelu_new") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.n_positions = 8;
  c.vocab_size = 11;
  c.activation_function = act;
  return c;
}

std::vector<std::int32_t> random_tokens(int B, int T, int V, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(B) * (T + 1));
  for (auto& x : t) x = static_cast<std::int32_t>(rng() % V);
  return t;
}

// Randomises every parameter a little so that LayerNorm gains, biases and all paths matter.
void perturb(GptTrainable& m, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.2f);
  for (auto& v : m.values()) v += n(rng);
}

// Products of a few rows or columns and products with every dimension >= 16 take different kernels
// of oneDNN's sgemm (and of the matrix-vector path, model/blas.cpp): `tiny` checks the one,
// `small16` (16 wide, vocabulary 40, 2 x 8 tokens) the other.
GptConfig small16(const std::string& act = "gelu_new") {
  GptConfig c = tiny(act);
  c.n_embd = 16;
  c.n_positions = 16;
  c.vocab_size = 40;
  return c;
}

struct BackwardCase {
  std::string act;
  bool wide;  // small16 rather than tiny
};

class Backward : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(Backward, EveryParameterKindMatchesFiniteDifferences) {
  const std::string act = GetParam().act;
  const GptConfig cfg = GetParam().wide ? small16(act) : tiny(act);
  GptTrainable m(cfg, 3);
  perturb(m, 4);
  const int B = 2, T = GetParam().wide ? 8 : 6;
  const auto tokens = random_tokens(B, T, cfg.vocab_size, 5);
  m.zero_grads();
  m.loss_and_grad(tokens, B, T);
  const std::vector<float> g = m.grads();
  std::mt19937 rng(6);
  int checked = 0;
  for (const auto& t : m.layout()) {
    // Four entries of each tensor (for embeddings: rows that the batch uses, plus one it does not).
    for (int k = 0; k < 4; ++k) {
      std::size_t i = t.offset + rng() % t.size;
      if (t.name == "wte.weight" && k == 0) i = t.offset + static_cast<std::size_t>(tokens[0]) * cfg.n_embd + 3;
      const float keep = m.values()[i];
      const float h = 1e-2f;
      m.values()[i] = keep + h;
      const double up = m.loss(tokens, B, T);
      m.values()[i] = keep - h;
      const double down = m.loss(tokens, B, T);
      m.values()[i] = keep;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 1e-3 + 3e-2 * std::abs(fd)) << t.name << " [" << i - t.offset << "] (" << act << ")";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * static_cast<int>(m.layout().size()));
}

// bf16 products (inputs rounded to bfloat16, float32 accumulation): the loss and every
// tensor's gradient stay close to the float32 ones (which the finite differences check), and
// validation (loss()) stays float32.
TEST(Backward, Bf16ProductsStayCloseToFloat32) {
  for (const std::string act : {"gelu_new", "gelu"}) {
    GptTrainable m(small16(act), 3);
    perturb(m, 4);
    const int B = 2, T = 8;
    const auto tokens = random_tokens(B, T, 40, 5);
    m.zero_grads();
    const double l32 = m.loss_and_grad(tokens, B, T);
    const std::vector<float> g32 = m.grads();
    m.set_matmul_precision(MatmulPrecision::bf16);
    m.zero_grads();
    const double l16 = m.loss_and_grad(tokens, B, T);
    const std::vector<float> g16 = m.grads();
    if (bf16_matmul_native()) EXPECT_NE(l16, l32) << "the bf16 path was not taken";
    EXPECT_NEAR(l16, l32, 2e-2 * std::abs(l32));
    EXPECT_EQ(m.loss(tokens, B, T), l32) << "validation multiplies in float32";
    for (const auto& t : m.layout()) {
      double diff = 0, norm = 0;
      for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
        diff += (double(g16[i]) - g32[i]) * (double(g16[i]) - g32[i]);
        norm += double(g32[i]) * g32[i];
      }
      EXPECT_LT(std::sqrt(diff), 0.05 * std::sqrt(norm) + 1e-6) << t.name << " (" << act << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, Backward,
                         ::testing::Values(BackwardCase{"gelu_new", false}, BackwardCase{"gelu", false},
                                           BackwardCase{"gelu_new", true}, BackwardCase{"gelu", true}),
                         [](const auto& info) { return info.param.act + (info.param.wide ? "_small16" : "_tiny"); });

TEST(Backward, GradientsAccumulateAndScale) {
  GptTrainable m(tiny(), 8);
  const auto tokens = random_tokens(3, 5, 11, 9);
  m.zero_grads();
  const double l1 = m.loss_and_grad(tokens, 3, 5);
  const std::vector<float> once = m.grads();
  const double l2 = m.loss_and_grad(tokens, 3, 5, 0.5);
  EXPECT_EQ(l1, l2);
  for (std::size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(m.grads()[i], 1.5f * once[i], 1e-6f + 1e-5f * std::abs(once[i]));
  // The loss equals the inference model's cross-entropy.
  const GptModel inf = m.model();
  double ce = 0;
  for (int b = 0; b < 3; ++b) {
    std::vector<std::int32_t> ids(tokens.begin() + b * 6, tokens.begin() + b * 6 + 5);
    const auto logits = inf.logits(ids);
    for (int t = 0; t < 5; ++t) {
      double mx = -1e30, s = 0;
      for (int v = 0; v < 11; ++v) mx = std::max(mx, double(logits[t * 11 + v]));
      for (int v = 0; v < 11; ++v) s += std::exp(logits[t * 11 + v] - mx);
      ce += mx + std::log(s) - logits[t * 11 + tokens[b * 6 + t + 1]];
    }
  }
  EXPECT_NEAR(l1, ce / 15, 1e-5);
  EXPECT_THROW(m.loss_and_grad(tokens, 3, 6), Error);                      // wrong token count
  EXPECT_THROW(m.loss_and_grad(random_tokens(1, 9, 11, 1), 1, 9), Error);  // longer than context
  auto bad = tokens;
  bad[2] = 11;
  EXPECT_THROW(m.loss_and_grad(bad, 3, 5), Error);
}

// --wpe-init sinusoidal / fourier: wpe holds the scaled sines and cosines at that kind's
// frequencies, every other tensor the numbers of the normal initialisation (the same draws), and
// the row norm is N(0, 0.02)'s expectation.
TEST(Init, SinusoidalPositionEmbedding) {
  const GptConfig c = test::small_config(2, 2, 10, 7, 11);
  const GptTrainable normal(c, 3);
  for (const WpeInit kind : {WpeInit::sinusoidal, WpeInit::fourier}) {
    const GptTrainable sines(c, 3, kind);
    ASSERT_EQ(normal.values().size(), sines.values().size());
    const double s = 0.02 * std::sqrt(2.0);
    int wpe_seen = 0;
    for (const auto& t : normal.layout()) {
      const float* a = normal.values().data() + t.offset;
      const float* b = sines.values().data() + t.offset;
      if (t.name != "wpe.weight") {
        for (std::size_t i = 0; i < t.size; ++i) ASSERT_EQ(a[i], b[i]) << t.name << " " << i;
        continue;
      }
      ++wpe_seen;
      for (int p = 0; p < c.n_positions; ++p) {
        double norm2 = 0;
        for (int i = 0; i < c.n_embd / 2; ++i) {
          const double w = kind == WpeInit::fourier ? 3.14159265358979323846 * (2 * i + 1) / c.n_embd
                                                    : std::pow(10000.0, -2.0 * i / c.n_embd);
          EXPECT_NEAR(b[p * c.n_embd + 2 * i], s * std::sin(p * w), 1e-8) << p << " " << i;
          EXPECT_NEAR(b[p * c.n_embd + 2 * i + 1], s * std::cos(p * w), 1e-8) << p << " " << i;
          norm2 += b[p * c.n_embd + 2 * i] * b[p * c.n_embd + 2 * i] +
                   b[p * c.n_embd + 2 * i + 1] * b[p * c.n_embd + 2 * i + 1];
        }
        EXPECT_NEAR(std::sqrt(norm2), 0.02 * std::sqrt(c.n_embd), 1e-6);
      }
    }
    EXPECT_EQ(wpe_seen, 1);
  }
}

// --wpe-init fourier with n_positions <= n_embd: every two position rows are orthogonal (the
// sinusoidal kind's neighbours are nearly parallel), which is what lets one head attend to
// exactly one offset.
TEST(Init, FourierPositionRowsAreOrthogonal) {
  const GptConfig c = test::small_config(1, 2, 16, 16, 9);
  auto cosine = [&](const GptTrainable& m, int p, int q) {
    for (const auto& t : m.layout())
      if (t.name == "wpe.weight") {
        const float* w = m.values().data() + t.offset;
        double d = 0, np = 0, nq = 0;
        for (int i = 0; i < c.n_embd; ++i) {
          d += double(w[p * c.n_embd + i]) * w[q * c.n_embd + i];
          np += double(w[p * c.n_embd + i]) * w[p * c.n_embd + i];
          nq += double(w[q * c.n_embd + i]) * w[q * c.n_embd + i];
        }
        return d / std::sqrt(np * nq);
      }
    return std::nan("");
  };
  const GptTrainable fourier(c, 5, WpeInit::fourier), sines(c, 5, WpeInit::sinusoidal);
  for (int p = 0; p < c.n_positions; ++p)
    for (int q = 0; q < c.n_positions; ++q)
      EXPECT_NEAR(cosine(fourier, p, q), p == q ? 1.0 : 0.0, 1e-5) << p << " " << q;
  EXPECT_GT(cosine(sines, 3, 4), 0.5);
}

// --wpe-scale: the position embedding's start (either kind) times the factor, nothing else moved;
// a scale that is not a positive number is refused.
TEST(Init, PositionEmbeddingScale) {
  const GptConfig c = test::small_config(1, 2, 8, 5, 9);
  for (const WpeInit sines : {WpeInit::normal, WpeInit::sinusoidal, WpeInit::fourier}) {
    const GptTrainable one(c, 4, sines, 1.0), three(c, 4, sines, 3.0);
    int wpe_seen = 0;
    for (const auto& t : one.layout()) {
      const float* a = one.values().data() + t.offset;
      const float* b = three.values().data() + t.offset;
      const double f = t.name == "wpe.weight" ? 3.0 : 1.0;
      wpe_seen += t.name == "wpe.weight";
      for (std::size_t i = 0; i < t.size; ++i)
        ASSERT_NEAR(b[i], f * a[i], 1e-7) << t.name << " " << i << " " << int(sines);
    }
    EXPECT_EQ(wpe_seen, 1);
  }
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(GptTrainable(c, 4, WpeInit::sinusoidal, bad), Error) << bad;
}

TEST(Optimizer, AdamWClipAndSchedule) {
  GptTrainable m(tiny(), 1);
  std::fill(m.grads().begin(), m.grads().end(), 0.0f);
  m.grads()[0] = 3.0f;
  m.grads()[1] = 4.0f;
  EXPECT_NEAR(clip_grad_norm(m.grads(), 1.0), 5.0, 1e-9);
  EXPECT_NEAR(m.grads()[0], 0.6f, 1e-6);
  EXPECT_NEAR(m.grads()[1], 0.8f, 1e-6);
  // First AdamW step moves each parameter by lr * sign(g) (bias-corrected), plus decay on matrices.
  const std::vector<float> before = m.values();
  AdamW adam(m.values().size());
  adam.step(m, 0.01, AdamWOptions{0.01, 0.9, 0.95, 1e-8, 0.1});
  EXPECT_NEAR(m.values()[0], before[0] * (1 - 0.001f) - 0.01f, 1e-6);  // wte: decayed
  const auto& lnb = m.layout()[3];                                     // h.0.ln_1.bias: no decay, zero grad: unchanged
  EXPECT_EQ(lnb.name, "h.0.ln_1.bias");
  EXPECT_FALSE(lnb.decay);
  EXPECT_EQ(m.values()[lnb.offset], before[lnb.offset]);
  // Schedule: warm-up, peak, cosine to min.
  EXPECT_NEAR(learning_rate(0, 10, 100, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(9, 10, 100, 1.0, 0.1), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(10, 10, 100, 1.0, 0.1), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(55, 10, 100, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(100, 10, 100, 1.0, 0.1), 0.1, 1e-12);
}

// freeze_wpe (--freeze-wpe): with a gradient on every parameter, the position embedding keeps its
// bits through several steps (no update, no decay) while the token embedding next to it moves;
// the same steps without the option move both.
TEST(Optimizer, AdamWFreezesThePositionEmbedding) {
  for (const bool freeze : {true, false}) {
    GptTrainable m(tiny(), 3, WpeInit::fourier);
    const std::vector<float> before = m.values();
    AdamW adam(m.values().size());
    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = 0; i < m.grads().size(); ++i) m.grads()[i] = 0.25f + 0.001f * float(i % 7);
      adam.step(m, 0.01, AdamWOptions{0.01, 0.9, 0.95, 1e-8, 0.1, freeze});
    }
    int seen = 0;
    for (const auto& t : m.layout()) {
      if (t.name != "wpe.weight" && t.name != "wte.weight") continue;
      ++seen;
      std::size_t same = 0;
      for (std::size_t i = 0; i < t.size; ++i) same += m.values()[t.offset + i] == before[t.offset + i];
      const bool keeps = freeze && t.name == "wpe.weight";
      EXPECT_EQ(same, keeps ? t.size : std::size_t(0)) << t.name << " freeze " << freeze;
    }
    EXPECT_EQ(seen, 2);
  }
}

TEST(BpeTrainer, LearnsFrequentPairsAndRoundTrips) {
  const std::string text = "the cat sat on the mat. the cat ate the rat. that is that.\n";
  std::vector<std::string_view> texts = {text, text};
  const Tokenizer t = train_bpe(texts, {300, 2});
  EXPECT_LE(t.vocab_size(), 300u);
  EXPECT_GT(t.vocab_size(), 257u);
  ASSERT_TRUE(t.eos_id());
  EXPECT_EQ(*t.eos_id(), static_cast<int>(t.vocab_size()) - 1);
  // " the" is frequent: one token.
  EXPECT_EQ(t.encode(" the").size(), 1u);
  EXPECT_EQ(t.decode(t.encode(text)), text);
  const std::string odd = "zebra \xff\xfe 조모임";
  EXPECT_EQ(t.decode(t.encode(odd)), odd);
  // Deterministic.
  const Tokenizer again = train_bpe(texts, {300, 2});
  EXPECT_EQ(again.merges(), t.merges());
  // min_frequency stops early; too small a vocabulary is refused.
  const Tokenizer few = train_bpe(texts, {300, 100});
  EXPECT_EQ(few.vocab_size(), 257u);
  EXPECT_THROW(train_bpe(texts, {256, 2}), Error);
}

TEST(Documents, SplitOnTheSeparatorOnly) {
  const std::string sep(kDocumentSeparator);
  const std::string text = "one" + sep + "two\nlines" + sep;  // the views point into it
  auto docs = split_documents(text, "t.txt");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], "one");
  EXPECT_EQ(docs[1], "two\nlines");
  // Text after the last separator is a document; empty pieces are skipped.
  const std::string text2 = sep + "a" + sep + sep + "tail";
  docs = split_documents(text2, "t.txt");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], "a");
  EXPECT_EQ(docs[1], "tail");
  // Refused: no separator at all, "<|endoftext|>" that is not a separator, nothing but separators.
  auto message = [](const std::string& text) {
    try {
      split_documents(text, "bad.txt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("just one text").find("bad.txt: no document separator"), std::string::npos);
  EXPECT_NE(message("a <|endoftext|> b" + sep).find("not a separator"), std::string::npos);
  EXPECT_NE(message("a" + sep + "b<|endoftext|>\n" + sep).find("not a separator"), std::string::npos);
  EXPECT_NE(message(sep + sep).find("no documents"), std::string::npos);
}

// --- the training loop ---------------------------------------------------------------------

class Trainer : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("jomoim_train_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    // A small corpus with structure to learn: repeated sentences with variations.
    const char* subjects[] = {"the cat", "a dog", "my friend", "the teacher", "our group"};
    const char* verbs[] = {"has", "wants", "sees", "makes", "keeps"};
    const char* objects[] = {"a lot of work", "the red ball", "a quiet room", "the last word", "many ideas"};
    std::mt19937 rng(1);
    for (int d = 0; d < 24; ++d) {
      std::ofstream f(root_ / "data" / ("doc" + std::to_string(100 + d) + ".txt"));
      for (int s = 0; s < 40; ++s)
        f << subjects[rng() % 5] << " " << verbs[rng() % 5] << " " << objects[rng() % 5] << ". ";
    }
  }
  void TearDown() override { fs::remove_all(root_); }
  TrainOptions options(const std::string& out) {
    TrainOptions o;
    o.data = {root_ / "data"};
    o.out = root_ / out;
    o.vocab_size = 300;
    o.model.n_layer = 2;
    o.model.n_head = 2;
    o.model.n_embd = 32;
    o.model.n_positions = 32;
    o.batch = 4;
    o.seq = 32;
    o.steps = 40;
    o.lr = 3e-3;
    o.warmup = 5;
    o.eval_every = 20;
    o.eval_batches = 2;
    o.save_every = 1000;
    o.val_fraction = 0.1;
    o.threads = 1;
    return o;
  }
  fs::path root_;
};

TEST_F(Trainer, LossFallsRunsAreDeterministicAndResumeLosesNothing) {
  const TrainResult a = train_gpt(options("a"));
  ASSERT_EQ(a.history.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += a.history[i].loss / 5;
  for (int i = 35; i < 40; ++i) last += a.history[i].loss / 5;
  EXPECT_LT(last, first - 1.0) << "the loss must fall";
  EXPECT_GT(a.history[19].val_loss, 0);
  EXPECT_GT(a.history[39].val_loss, 0);
  EXPECT_LT(a.history[39].val_loss, a.history[0].loss);

  // trainer.json records exactly the losses the run returned.
  {
    std::ifstream in(root_ / "a" / "trainer.json");
    const auto st = nlohmann::json::parse(in);
    ASSERT_EQ(st["history"].size(), a.history.size());
    for (std::size_t i = 0; i < a.history.size(); ++i) {
      ASSERT_EQ(st["history"][i]["loss"].get<double>(), a.history[i].loss) << i;
      ASSERT_EQ(st["history"][i]["step"].get<std::int64_t>(), a.history[i].step) << i;
    }
    EXPECT_EQ(st["step"].get<std::int64_t>(), 40);
    EXPECT_GT(st["bigram_val_loss"].get<double>(), 0.0);
  }

  // The same run again: identical losses.
  const TrainResult b = train_gpt(options("b"));
  for (std::size_t i = 0; i < a.history.size(); ++i) ASSERT_EQ(a.history[i].loss, b.history[i].loss) << i;

  // Interrupted after 17 steps, then resumed: the same losses as the uninterrupted run.
  std::atomic<bool> stop{false};
  TrainCallbacks cb;
  cb.stop = &stop;
  cb.step = [&](const TrainRecord& r, std::int64_t, double) {
    if (r.step == 17) stop = true;
  };
  const TrainResult c1 = train_gpt(options("c"), cb);
  EXPECT_TRUE(c1.interrupted);
  EXPECT_EQ(c1.steps_done, 17);
  auto resumed = options("c");
  resumed.resume = true;
  const TrainResult c2 = train_gpt(resumed);
  ASSERT_EQ(c2.history.size(), 40u);
  for (std::size_t i = 0; i < a.history.size(); ++i) ASSERT_EQ(a.history[i].loss, c2.history[i].loss) << i;

  // The result is a model directory the runtime loads, with the same predictions as training's.
  const GptModel loaded = GptModel::load(root_ / "a");
  const Tokenizer tok = Tokenizer::load_dir(root_ / "a");
  const auto ids = tok.encode("the cat has a lot");
  EXPECT_EQ(loaded.logits(ids).size(), ids.size() * tok.vocab_size());

  // A second run into the same folder without --resume is refused.
  EXPECT_THROW(train_gpt(options("a")), Error);
}

// The corpus format of scripts/make-corpus.sh: documents each followed by "\n<|endoftext|>\n",
// held out in a second file.
TEST_F(Trainer, TrainsOnSeparatedDocumentsWithHeldOutFile) {
  const std::string sep(kDocumentSeparator);
  std::vector<std::string> train_docs, val_docs;
  for (int d = 0; d < 24; ++d) {
    std::ifstream in(root_ / "data" / ("doc" + std::to_string(100 + d) + ".txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    (d < 20 ? train_docs : val_docs).push_back(ss.str());
  }
  fs::create_directories(root_ / "corpus");
  auto write = [&](const fs::path& p, const std::vector<std::string>& docs) {
    std::ofstream f(p, std::ios::binary);
    for (const auto& d : docs) f << d << sep;
  };
  write(root_ / "corpus" / "train.txt", train_docs);
  write(root_ / "corpus" / "heldout.txt", val_docs);
  auto o = options("eot");
  o.data = {root_ / "corpus" / "train.txt"};
  o.val_data = {root_ / "corpus" / "heldout.txt"};
  o.documents = Documents::eot;
  o.eval_batches = 0;  // every held-out token
  o.steps = 20;
  const TrainResult r = train_gpt(o);
  EXPECT_EQ(r.train_documents, 20);
  EXPECT_EQ(r.val_documents, 4);
  // Every document tokenized on its own and followed by the <|endoftext|> id.
  const Tokenizer tok = Tokenizer::load_dir(o.out);
  ASSERT_TRUE(tok.eos_id());
  auto count = [&](const std::vector<std::string>& docs) {
    std::int64_t n = 0;
    for (const auto& d : docs) n += static_cast<std::int64_t>(tok.encode(d).size()) + 1;
    return n;
  };
  EXPECT_EQ(r.train_tokens, count(train_docs));
  EXPECT_EQ(r.val_tokens, count(val_docs));
  // eval_batches = 0 scores every held-out token that a whole window covers.
  EXPECT_EQ(r.val_scored_tokens, (r.val_tokens - 1) / o.seq * o.seq);
  EXPECT_GT(r.bigram_val_loss, 0.0);
  ASSERT_GT(r.history.back().val_loss, 0.0);
  // The separator never reached the tokenizer's training: no learned token holds a piece of it.
  for (std::size_t id = 0; id + 1 < tok.vocab_size(); ++id) {
    const std::string b = tok.token_bytes(static_cast<std::int32_t>(id));
    EXPECT_EQ(b.find("<|"), std::string::npos) << b;
    EXPECT_EQ(b.find("|>"), std::string::npos) << b;
    EXPECT_EQ(b.find("endoftext"), std::string::npos) << b;
  }
  EXPECT_EQ(tok.token_string(*tok.eos_id()), "<|endoftext|>");

  // The same files read as whole documents are refused (they hold separators), and a file
  // without separators is refused in the corpus format.
  auto as_files = o;
  as_files.out = root_ / "eot_files";
  as_files.documents = Documents::file;
  EXPECT_THROW(train_gpt(as_files), Error);
  auto plain = o;
  plain.out = root_ / "eot_plain";
  plain.data = {root_ / "data"};
  EXPECT_THROW(train_gpt(plain), Error);
  auto missing = o;
  missing.out = root_ / "eot_missing";
  missing.val_data = {root_ / "corpus" / "nothing.txt"};
  EXPECT_THROW(train_gpt(missing), Error);
  { std::ofstream(root_ / "corpus" / "empty.txt"); }
  auto empty = o;
  empty.out = root_ / "eot_empty";
  empty.val_data = {root_ / "corpus" / "empty.txt"};
  EXPECT_THROW(train_gpt(empty), Error);
}

TEST_F(Trainer, RefusesBadOptionsAndData) {
  auto o = options("x");
  o.data = {root_ / "missing"};
  EXPECT_THROW(train_gpt(o), Error);
  o = options("x");
  o.seq = 64;  // longer than the context of 32
  EXPECT_THROW(train_gpt(o), Error);
  o = options("x");
  o.vocab_size = 10;
  EXPECT_THROW(train_gpt(o), Error);
  o = options("x");
  o.out.clear();
  EXPECT_THROW(train_gpt(o), Error);
}

}  // namespace
