// The explorer's computation (jomoim::explain): the numbers it reports are the numbers the model
// computed. Q, K, V are compared bit for bit with a traced pass; weights and per-head outputs
// with the engine's float64 reference run on those Q, K, V (causal, plus the silenced keys as
// -inf bias); raw scores with a float64 dot product; the 3b1b notation with the transpose of
// the paper's; silencing, swap_qk and --compare with passes and logits computed here. The
// schema test checks every field's presence, type and shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/engine/attention.hpp"
#include "jomoim/explain/explain.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/model/sampling.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "model_test_util.hpp"

using namespace jomoim;
using jomoim::test::random_gpt;
using jomoim::test::small_config;
using nlohmann::json;

namespace {

// GPT-2's byte tokens, a few merges (" a", " l", "ot", " lot", "av", " have"...), <|endoftext|>
// last when `eos`.
Tokenizer tiny_tokenizer(bool eos = true) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(bytes_to_unicode(std::string(1, static_cast<char>(b))));
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"\xC4\xA0", "a"}, {"\xC4\xA0", "l"},   {"o", "t"},        {"\xC4\xA0l", "ot"},
      {"a", "v"},        {"\xC4\xA0h", "av"}, {"\xC4\xA0", "h"}, {"\xC4\xA0hav", "e"}};
  for (const auto& [a, b] : merges)
    if (std::find(tokens.begin(), tokens.end(), a + b) == tokens.end()) tokens.push_back(a + b);
  if (eos) tokens.push_back("<|endoftext|>");
  return Tokenizer(tokens, merges);
}

struct Fixture {
  GptConfig cfg;
  test::OwnedGpt g;
  GptModel model;
  Tokenizer tok;
  explicit Fixture(int layers = 2, int heads = 4, int embd = 32, int positions = 40, std::uint64_t seed = 7)
      : cfg(small_config(layers, heads, embd, positions, static_cast<int>(tiny_tokenizer().vocab_size()))),
        g(random_gpt(cfg, seed)),
        model(g.model()),
        tok(tiny_tokenizer()) {}
};

// A JSON matrix of float32 values (null -> NaN), each read back as the float it prints.
std::vector<std::vector<double>> mat(const json& m) {
  std::vector<std::vector<double>> r;
  for (const auto& row : m) {
    r.emplace_back();
    for (const auto& v : row) r.back().push_back(v.is_null() ? NAN : static_cast<double>(v.get<float>()));
  }
  return r;
}

// [T][D] JSON rows flattened to float32 in C order ([T, D]).
std::vector<float> flat_f32(const json& m) {
  std::vector<float> r;
  for (const auto& row : m)
    for (const auto& v : row) r.push_back(v.get<float>());
  return r;
}

std::vector<double> softmax_of_logits(const GptModel& m, const std::vector<std::int32_t>& ids,
                                      const std::vector<int>& silence = {}, bool swap = false) {
  KvCache c(m.config(), static_cast<int>(ids.size()));
  ForwardOptions o;
  o.silenced = silence;
  o.swap_qk = swap;
  return softmax(m.forward(ids, c, o));
}

const char* const kSeed = "I have a lot";
const char* const kSeedCompare = "Cash or credit card? I have a lot";

// ---------------------------------------------------------------------------------------------

TEST(Explain, EveryHeadMatchesTheTraceAndTheFloat64Reference) {
  for (const std::vector<int>& silence : {std::vector<int>{}, std::vector<int>{0, 2}}) {
    Fixture f;
    ExplainOptions o;
    o.silence = silence;
    const json j = explain(f.model, f.tok, kSeed, o);
    const std::vector<std::int32_t> ids = f.tok.encode(kSeed);
    const int T = static_cast<int>(ids.size()), D = f.cfg.head_dim(), H = f.cfg.n_head;
    ASSERT_EQ(static_cast<int>(j["tokens"].size()), T);

    // The pass explain() reports, recomputed here with the trace on.
    ForwardTrace trace;
    ForwardOptions fo;
    fo.trace = &trace;
    fo.silenced = silence;
    KvCache cache(f.cfg, T);
    f.model.forward(ids, cache, fo);

    ASSERT_EQ(static_cast<int>(j["layers"].size()), f.cfg.n_layer);
    std::vector<float> bias(T, 0.0f);
    for (int s : silence) bias[s] = -std::numeric_limits<float>::infinity();
    for (int l = 0; l < f.cfg.n_layer; ++l) {
      const json& L = j["layers"][l];
      ASSERT_EQ(L["layer"], l);
      ASSERT_EQ(static_cast<int>(L["heads"].size()), H);
      for (int h = 0; h < H; ++h) {
        const json& hj = L["heads"][h];
        ASSERT_EQ(hj["head"], h);
        const auto q = flat_f32(hj["q"]), k = flat_f32(hj["k"]), v = flat_f32(hj["v"]);
        // Bit for bit the traced Q, K, V (printing keeps every float32 exactly).
        const auto& at = trace.layers[l];
        for (int i = 0; i < T * D; ++i) {
          ASSERT_EQ(q[i], at.q[h * T * D + i]) << l << " " << h << " " << i;
          ASSERT_EQ(k[i], at.k[h * T * D + i]);
          ASSERT_EQ(v[i], at.v[h * T * D + i]);
        }
        AttentionOptions ao;
        ao.causal = true;
        if (!silence.empty()) ao.bias = ConstTensor4{bias.data(), {1, 1, 1, T}, {0, 0, 0, 1}};
        const auto ref = attention_reference(ConstTensor4::contiguous(q.data(), {1, 1, T, D}),
                                             ConstTensor4::contiguous(k.data(), {1, 1, T, D}),
                                             ConstTensor4::contiguous(v.data(), {1, 1, T, D}), ao);
        const auto w = mat(hj["weights"]), s = mat(hj["scores"]), sc = mat(hj["scaled"]), out = mat(hj["out"]);
        const double scale = hj["scale"].get<double>();
        EXPECT_FLOAT_EQ(static_cast<float>(scale), 1.0f / std::sqrt(static_cast<float>(D)));
        for (int i = 0; i < T; ++i) {
          for (int jj = 0; jj < T; ++jj) {
            ASSERT_NEAR(w[i][jj], ref.probs[i * T + jj], 1e-5) << "weights " << l << " " << h << " " << i << " " << jj;
            const bool heard = jj <= i && std::find(silence.begin(), silence.end(), jj) == silence.end();
            ASSERT_EQ(hj["mask"][i][jj].get<bool>(), heard);
            if (!heard) {
              ASSERT_TRUE(hj["scores"][i][jj].is_null());
              ASSERT_TRUE(hj["scaled"][i][jj].is_null());
              ASSERT_EQ(w[i][jj], 0.0);
              continue;
            }
            double dot = 0, mag = 0;
            for (int d = 0; d < D; ++d) {
              dot += double(q[i * D + d]) * k[jj * D + d];
              mag += std::abs(double(q[i * D + d]) * k[jj * D + d]);
            }
            // The trace rounds a float64 sum to float32: half an ulp of the result.
            const double tol = 1e-6 * (mag + 1e-30);
            ASSERT_NEAR(s[i][jj], dot, tol) << "raw score " << i << " " << jj;
            ASSERT_NEAR(sc[i][jj], dot * scale, tol * scale + 1e-7 * std::abs(dot * scale));
          }
          for (int d = 0; d < D; ++d) ASSERT_NEAR(out[i][d], ref.out[i * D + d], 1e-4) << "out";
        }
        // The last token: its weights row, |V_j| and |w_j V_j|.
        const json& lt = hj["last_token"];
        ASSERT_EQ(lt["index"], T - 1);
        for (int jj = 0; jj < T; ++jj) {
          double vn = 0;
          for (int d = 0; d < D; ++d) vn += double(v[jj * D + d]) * v[jj * D + d];
          vn = std::sqrt(vn);
          EXPECT_EQ(lt["weights"][jj].get<float>(), w[T - 1][jj]);
          EXPECT_NEAR(lt["value_norms"][jj].get<double>(), vn, 1e-12 * (1 + vn));
          EXPECT_NEAR(lt["contribution_norms"][jj].get<double>(), ref.probs[(T - 1) * T + jj] * vn, 1e-5 * (1 + vn));
        }
      }
    }
  }
}

TEST(Explain, TokensAndPredictionComeFromTheModel) {
  Fixture f;
  ExplainOptions o;
  o.top = 7;
  const json j = explain(f.model, f.tok, kSeed, o);
  const auto ids = f.tok.encode(kSeed);
  const int C = f.cfg.n_embd;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const json& tj = j["tokens"][t];
    EXPECT_EQ(tj["index"], t);
    EXPECT_EQ(tj["id"], ids[t]);
    EXPECT_EQ(tj["token"], f.tok.token_string(ids[t]));
    EXPECT_EQ(tj["text"], f.tok.token_bytes(ids[t]));  // plain ASCII: nothing to escape
    double te = 0, pe = 0, e = 0;
    for (int c = 0; c < C; ++c) {
      const float a = f.g.params.wte[ids[t] * C + c], b = f.g.params.wpe[t * C + c];
      te += double(a) * a;
      pe += double(b) * b;
      e += double(a + b) * (a + b);
    }
    EXPECT_NEAR(tj["token_embedding_norm"].get<double>(), std::sqrt(te), 1e-9);
    EXPECT_NEAR(tj["position_embedding_norm"].get<double>(), std::sqrt(pe), 1e-9);
    EXPECT_NEAR(tj["embedding_norm"].get<double>(), std::sqrt(e), 1e-9);
  }
  KvCache c(f.cfg, static_cast<int>(ids.size()));
  const auto logits = f.model.forward(ids, c);
  const auto p = softmax(logits);
  const auto best = top_ids(logits, 7);
  ASSERT_EQ(j["prediction"]["top"].size(), 7u);
  double ent = 0;
  for (double x : p)
    if (x > 0) ent -= x * std::log(x);
  EXPECT_NEAR(j["prediction"]["entropy"].get<double>(), ent, 1e-12);
  for (std::size_t r = 0; r < best.size(); ++r) {
    const json& e = j["prediction"]["top"][r];
    EXPECT_EQ(e["id"], best[r]);
    EXPECT_EQ(e["logit"].get<float>(), logits[best[r]]);
    EXPECT_DOUBLE_EQ(e["probability"].get<double>(), p[best[r]]);
    if (r) {
      EXPECT_GE(j["prediction"]["top"][r - 1]["probability"].get<double>(), e["probability"].get<double>());
    }
  }
  EXPECT_TRUE(j["baseline"].is_null());
  EXPECT_TRUE(j["compare"].is_null());
  // top is clamped to the vocabulary.
  o.top = 100000;
  EXPECT_EQ(explain(f.model, f.tok, kSeed, o)["prediction"]["top"].size(), static_cast<std::size_t>(f.cfg.vocab_size));
}

TEST(Explain, HeadsSummaryIsSortedAndRecomputable) {
  Fixture f(3, 4, 32, 40, 11);
  const json j = explain(f.model, f.tok, kSeedCompare);
  const json& heads = j["heads"];
  ASSERT_EQ(static_cast<int>(heads.size()), 3 * 4);
  std::set<std::pair<int, int>> seen;
  const int T = static_cast<int>(j["tokens"].size());
  for (std::size_t r = 0; r < heads.size(); ++r) {
    const json& h = heads[r];
    const int l = h["layer"], hh = h["head"];
    seen.insert({l, hh});
    if (r) {
      EXPECT_GE(heads[r - 1]["focus"].get<double>(), h["focus"].get<double>()) << "most focused first";
    }
    const auto w = mat(j["layers"][l]["heads"][hh]["weights"]);
    double focus = 0, ent = 0;
    for (int i = 1; i < T; ++i) {
      focus += *std::max_element(w[i].begin(), w[i].end());
      for (double x : w[i])
        if (x > 0) ent -= x * std::log(x);
    }
    EXPECT_NEAR(h["focus"].get<double>(), focus / (T - 1), 1e-9);
    EXPECT_NEAR(h["entropy"].get<double>(), ent / (T - 1), 1e-9);
    const auto& last = w[T - 1];
    const int arg = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
    EXPECT_EQ(h["last_token_attends_to"], arg);
    EXPECT_EQ(h["last_token_weight"].get<double>(), last[arg]);
  }
  EXPECT_EQ(seen.size(), heads.size()) << "every (layer, head) once";
  // last_token_attention: the mean over heads of the last row, per layer.
  const json& lta = j["last_token_attention"];
  EXPECT_EQ(lta["index"], T - 1);
  for (int l = 0; l < 3; ++l)
    for (int k = 0; k < T; ++k) {
      double s = 0;
      for (int h = 0; h < 4; ++h) s += j["layers"][l]["heads"][h]["weights"][T - 1][k].get<float>();
      EXPECT_NEAR(lta["mean_over_heads"][l][k].get<double>(), s / 4, 1e-12);
    }
}

TEST(Explain, Notation3b1bIsThePaperTransposed) {
  Fixture f;
  ExplainOptions paper, col;
  col.notation = ExplainNotation::col3b1b;
  const json a = explain(f.model, f.tok, kSeedCompare, paper);
  const json b = explain(f.model, f.tok, kSeedCompare, col);
  EXPECT_EQ(a["notation"], "paper");
  EXPECT_EQ(b["notation"], "3b1b");
  EXPECT_EQ(b["formula"], "V softmax(K^T Q / sqrt(d))");
  EXPECT_EQ(a["formula"], "softmax(Q K^T / sqrt(d)) V");
  EXPECT_EQ(a["softmax_over"], "rows");
  EXPECT_EQ(b["softmax_over"], "columns");
  EXPECT_EQ(a["prediction"], b["prediction"]);
  EXPECT_EQ(a["heads"], b["heads"]);
  const int T = static_cast<int>(a["tokens"].size());
  for (std::size_t l = 0; l < a["layers"].size(); ++l)
    for (std::size_t h = 0; h < a["layers"][l]["heads"].size(); ++h) {
      const json& p = a["layers"][l]["heads"][h];
      const json& c = b["layers"][l]["heads"][h];
      EXPECT_EQ(p["layout"]["scores"], "[query, key]");
      EXPECT_EQ(c["layout"]["scores"], "[key, query]");
      EXPECT_EQ(c["layout"]["q"], "[dim, token]");
      for (const char* name : {"q", "k", "v", "scores", "scaled", "mask", "weights", "out"}) {
        const json& m = p[name];
        const json& t = c[name];
        ASSERT_EQ(t.size(), m[0].size()) << name;
        ASSERT_EQ(t[0].size(), m.size()) << name;
        for (std::size_t r = 0; r < m.size(); ++r)
          for (std::size_t cc = 0; cc < m[r].size(); ++cc) ASSERT_EQ(t[cc][r], m[r][cc]) << name;
      }
      EXPECT_EQ(p["last_token"], c["last_token"]);
      // Softmax per column in 3b1b: every column of weights sums to 1.
      for (int col_i = 0; col_i < T; ++col_i) {
        double s = 0;
        for (int r = 0; r < T; ++r) s += c["weights"][r][col_i].get<double>();
        EXPECT_NEAR(s, 1.0, 1e-5);
      }
    }
}

TEST(Explain, SilenceZeroesTheKeysAndChangesThePrediction) {
  Fixture f;
  const auto ids = f.tok.encode(kSeedCompare);
  ExplainOptions o;
  o.silence = {3, 1, 3};  // unsorted, repeated: reported sorted and once
  const json j = explain(f.model, f.tok, kSeedCompare, o);
  EXPECT_EQ(j["options"]["silence"], json::array({1, 3}));
  for (const auto& L : j["layers"])
    for (const auto& h : L["heads"])
      for (const auto& row : h["weights"]) {
        EXPECT_EQ(row[1].get<double>(), 0.0);
        EXPECT_EQ(row[3].get<double>(), 0.0);
      }
  EXPECT_TRUE(j["tokens"][1]["silenced"].get<bool>());
  EXPECT_FALSE(j["tokens"][2]["silenced"].get<bool>());
  // The baseline is the plain pass; the prediction is the silenced pass; they differ.
  const auto plain = softmax_of_logits(f.model, ids);
  const auto silenced = softmax_of_logits(f.model, ids, {1, 3});
  ASSERT_FALSE(j["baseline"].is_null());
  const json plain_j = explain(f.model, f.tok, kSeedCompare);
  EXPECT_EQ(j["baseline"]["top"], plain_j["prediction"]["top"]);
  double moved = 0;
  for (const auto& e : j["prediction"]["top"]) {
    const int id = e["id"];
    EXPECT_DOUBLE_EQ(e["probability"].get<double>(), silenced[id]);
    moved = std::max(moved, std::abs(silenced[id] - plain[id]));
  }
  EXPECT_GT(moved, 1e-4) << "silencing two tokens must change the prediction";
  for (const auto& s : j["baseline"]["shift"]) {
    const int id = s["id"];
    EXPECT_DOUBLE_EQ(s["p_baseline"].get<double>(), plain[id]);
    EXPECT_DOUBLE_EQ(s["p"].get<double>(), silenced[id]);
    EXPECT_DOUBLE_EQ(s["delta"].get<double>(), silenced[id] - plain[id]);
  }
  // Silencing every token: the last token hears nobody; nothing breaks.
  ExplainOptions all;
  for (int i = 0; i < static_cast<int>(ids.size()); ++i) all.silence.push_back(i);
  const json z = explain(f.model, f.tok, kSeedCompare, all);
  for (const auto& h : z["heads"]) {
    EXPECT_TRUE(h["last_token_attends_to"].is_null());
    EXPECT_EQ(h["last_token_weight"].get<double>(), 0.0);
  }
  EXPECT_NO_THROW(z.dump());
}

TEST(Explain, SwapQkSwapsLayerZerosQueriesAndKeys) {
  Fixture f;
  ExplainOptions o;
  o.swap_qk = true;
  const json s = explain(f.model, f.tok, kSeed, o);
  const json p = explain(f.model, f.tok, kSeed);
  EXPECT_EQ(s["options"]["swap_qk"], true);
  for (int h = 0; h < f.cfg.n_head; ++h) {
    const json& a = p["layers"][0]["heads"][h];
    const json& b = s["layers"][0]["heads"][h];
    EXPECT_EQ(b["q"], a["k"]);
    EXPECT_EQ(b["k"], a["q"]);
    EXPECT_EQ(b["v"], a["v"]);
  }
  EXPECT_EQ(s["baseline"]["top"], p["prediction"]["top"]);
  const auto ids = f.tok.encode(kSeed);
  const auto swapped = softmax_of_logits(f.model, ids, {}, true);
  for (const auto& e : s["prediction"]["top"])
    EXPECT_DOUBLE_EQ(e["probability"].get<double>(), swapped[e["id"].get<int>()]);
  EXPECT_NE(s["prediction"]["top"], p["prediction"]["top"]);
}

TEST(Explain, CompareShiftIsTheDifferenceOfTheTwoDistributions) {
  Fixture f;
  ExplainOptions o;
  o.compare = kSeedCompare;
  o.top = 5;
  const json j = explain(f.model, f.tok, kSeed, o);
  ASSERT_FALSE(j["compare"].is_null());
  const json& c = j["compare"];
  EXPECT_EQ(c["prompt"], kSeedCompare);
  EXPECT_EQ(c["tokens"].size(), f.tok.encode(kSeedCompare).size());
  // The compare object is the second prompt explained alone.
  const json alone = [&] {
    ExplainOptions a;
    a.top = 5;
    return explain(f.model, f.tok, kSeedCompare, a);
  }();
  for (const char* k : {"tokens", "prediction", "heads", "layers", "last_token_attention"})
    EXPECT_EQ(c[k], alone[k]) << k;
  const auto pa = softmax_of_logits(f.model, f.tok.encode(kSeed));
  const auto pb = softmax_of_logits(f.model, f.tok.encode(kSeedCompare));
  std::set<int> expected;
  for (auto id : top_ids(std::vector<float>(pa.begin(), pa.end()), 5)) expected.insert(id);
  for (auto id : top_ids(std::vector<float>(pb.begin(), pb.end()), 5)) expected.insert(id);
  std::set<int> got;
  double prev = INFINITY;
  for (const auto& s : c["shift"]) {
    const int id = s["id"];
    got.insert(id);
    EXPECT_DOUBLE_EQ(s["p"].get<double>(), pa[id]);
    EXPECT_DOUBLE_EQ(s["p_compare"].get<double>(), pb[id]);
    EXPECT_DOUBLE_EQ(s["delta"].get<double>(), pb[id] - pa[id]);
    EXPECT_LE(std::abs(s["delta"].get<double>()), prev) << "largest change first";
    prev = std::abs(s["delta"].get<double>());
  }
  EXPECT_EQ(got, expected) << "the union of both top lists";
}

TEST(Explain, SelectsLayersAndHeads) {
  Fixture f(3, 4);
  ExplainOptions o;
  o.layer = 1;
  json j = explain(f.model, f.tok, kSeed, o);
  ASSERT_EQ(j["layers"].size(), 1u);
  EXPECT_EQ(j["layers"][0]["layer"], 1);
  EXPECT_EQ(j["layers"][0]["heads"].size(), 4u);
  EXPECT_EQ(j["heads"].size(), 12u) << "the summary always covers every head";
  o.layer.reset();
  o.head = 2;
  j = explain(f.model, f.tok, kSeed, o);
  ASSERT_EQ(j["layers"].size(), 3u);
  for (const auto& L : j["layers"]) {
    ASSERT_EQ(L["heads"].size(), 1u);
    EXPECT_EQ(L["heads"][0]["head"], 2);
  }
  o.layer = 2;
  j = explain(f.model, f.tok, kSeed, o);
  ASSERT_EQ(j["layers"].size(), 1u);
  EXPECT_EQ(j["layers"][0]["layer"], 2);
  EXPECT_EQ(j["layers"][0]["heads"][0]["head"], 2);
  EXPECT_EQ(j["options"]["layer"], 2);
  EXPECT_EQ(j["options"]["head"], 2);
  ExplainOptions none;
  none.matrices = false;
  j = explain(f.model, f.tok, kSeed, none);
  EXPECT_TRUE(j["layers"].empty());
  EXPECT_EQ(j["heads"].size(), 12u);
}

TEST(Explain, RefusesBadArgumentsWithOneLine) {
  Fixture f;
  auto message = [&](const std::string& prompt, const ExplainOptions& o) -> std::string {
    try {
      explain(f.model, f.tok, prompt, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto expect_refusal = [&](const std::string& prompt, const ExplainOptions& o, const std::string& part) {
    const std::string m = message(prompt, o);
    EXPECT_NE(m.find(part), std::string::npos) << "got: '" << m << "', expected it to mention: " << part;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  };
  ExplainOptions o;
  o.layer = 2;
  expect_refusal(kSeed, o, "layer 2 is out of range");
  o.layer = -1;
  expect_refusal(kSeed, o, "layer -1 is out of range");
  o = {};
  o.head = 4;
  expect_refusal(kSeed, o, "head 4 is out of range");
  o = {};
  o.silence = {4};  // "I have a lot" is 4 tokens here: I, " have", " a", " lot"
  ASSERT_EQ(f.tok.encode(kSeed).size(), 4u);
  expect_refusal(kSeed, o, "silence index 4 is out of range: the prompt has 4 tokens");
  o.silence = {-1};
  expect_refusal(kSeed, o, "silence index -1");
  o.silence = {10};
  o.compare = "a b";
  expect_refusal(kSeedCompare, o, "the compare prompt has 3 tokens");
  o = {};
  o.top = 0;
  expect_refusal(kSeed, o, "top must be at least 1");
  expect_refusal(std::string(41, 'x'), {}, "41 tokens, more than the model's context of 40");
  o = {};
  o.compare = std::string(41, 'y');
  expect_refusal(kSeed, o, "the compare prompt has 41 tokens");
  // An empty prompt is <|endoftext|>; without it in the vocabulary it is refused.
  const json e = explain(f.model, f.tok, "");
  ASSERT_EQ(e["tokens"].size(), 1u);
  EXPECT_EQ(e["tokens"][0]["id"], *f.tok.eos_id());
  const Tokenizer no_eos = tiny_tokenizer(false);
  try {
    explain(f.model, no_eos, "", {});
    ADD_FAILURE() << "an empty prompt without <|endoftext|> must be refused";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("empty"), std::string::npos);
  }
}

TEST(Explain, OddPromptsGiveValidJson) {
  Fixture f(1, 1, 8, 40);
  for (const std::string& prompt :
       {std::string("a"), std::string("\n\t\x01\\"), std::string("\xff\xfe \xc3"), std::string("\xed\xa0\x80 \xc0\xaf"),
        std::string("h\xc3\xa9llo \xec\xa1\xb0 \xf0\x9f\x99\x82"), std::string(40, 'z')}) {
    const json j = explain(f.model, f.tok, prompt);
    std::string s;
    ASSERT_NO_THROW(s = j.dump()) << "strings must be valid UTF-8";
    const json back = json::parse(s);
    EXPECT_EQ(back["tokens"].size(), f.tok.encode(prompt).size());
    EXPECT_EQ(back["heads"].size(), 1u);
    // A one-token prompt: its only query hears itself with weight 1.
    if (back["tokens"].size() == 1) {
      EXPECT_EQ(back["layers"][0]["heads"][0]["weights"][0][0].get<double>(), 1.0);
      EXPECT_EQ(back["heads"][0]["focus"].get<double>(), 1.0);
    }
  }
  // Control characters and invalid bytes are escaped in token texts.
  const json j = explain(f.model, f.tok, std::string("\n\xff"));
  EXPECT_EQ(j["tokens"][0]["text"], "\\n");
  EXPECT_EQ(j["tokens"][1]["text"], "\\xff");
  EXPECT_EQ(j["prompt"], "\n\xEF\xBF\xBD");
}

// The schema, field by field: presence, type, shape. Documented in docs/explain.md.
void check_head_roles(const json& r, const GptConfig& c) {
  ASSERT_TRUE(r.is_object());
  ASSERT_TRUE(r["measured_on"].is_string());
  ASSERT_TRUE(r["probe"].is_object());
  for (const char* k : {"seed", "length"}) ASSERT_TRUE(r["probe"][k].is_number_integer()) << k;
  ASSERT_TRUE(r["probe"]["bos"].is_boolean());
  ASSERT_TRUE(r["probe"]["ids"].is_array());
  for (const char* k : {"induction", "previous_token", "first_token", "self"})
    ASSERT_TRUE(r["thresholds"][k].is_number()) << k;
  ASSERT_EQ(r["heads"].size(), static_cast<std::size_t>(c.n_layer * c.n_head));
  for (std::size_t i = 0; i < r["heads"].size(); ++i) {
    const json& e = r["heads"][i];
    EXPECT_EQ(e["layer"], static_cast<int>(i) / c.n_head);
    EXPECT_EQ(e["head"], static_cast<int>(i) % c.n_head);
    for (const char* k : {"previous_token", "first_token", "self", "induction"})
      ASSERT_TRUE(e[k].is_number() || e[k].is_null()) << k;
    ASSERT_TRUE(e["label"].is_string() || e["label"].is_null());
    ASSERT_TRUE(e["labels"].is_array());
    EXPECT_EQ(e["label"].is_null(), e["labels"].empty());
  }
}

void check_prompt_object(const json& j, const GptConfig& c, bool intervened, bool col, int top) {
  check_head_roles(j["head_roles"], c);
  ASSERT_TRUE(j["prompt"].is_string());
  ASSERT_TRUE(j["tokens"].is_array());
  const std::size_t T = j["tokens"].size();
  ASSERT_GE(T, 1u);
  for (const auto& t : j["tokens"]) {
    for (const char* k : {"index", "id"}) ASSERT_TRUE(t[k].is_number_integer()) << k;
    for (const char* k : {"text", "token"}) ASSERT_TRUE(t[k].is_string()) << k;
    ASSERT_TRUE(t["silenced"].is_boolean());
    for (const char* k : {"token_embedding_norm", "position_embedding_norm", "embedding_norm"})
      ASSERT_TRUE(t[k].is_number_float()) << k;
  }
  auto check_pred = [&](const json& p) {
    ASSERT_TRUE(p.is_object());
    ASSERT_EQ(p["top"].size(), static_cast<std::size_t>(top));
    ASSERT_TRUE(p["entropy"].is_number());
    for (const auto& e : p["top"]) {
      ASSERT_TRUE(e["id"].is_number_integer());
      ASSERT_TRUE(e["text"].is_string());
      ASSERT_TRUE(e["probability"].is_number());
      ASSERT_TRUE(e["logit"].is_number());
    }
  };
  check_pred(j["prediction"]);
  {
    const json& a = j["attribution"];
    ASSERT_TRUE(a.is_object());
    for (const char* k : {"id", "logit"}) ASSERT_TRUE(a["target"][k].is_number()) << k;
    ASSERT_TRUE(a["target"]["text"].is_string());
    ASSERT_TRUE(a["contrast"].is_null() || a["contrast"].is_object());
    for (const char* k : {"token", "position"}) ASSERT_TRUE(a["embeddings"][k].is_number()) << k;
    ASSERT_EQ(a["heads"].size(), static_cast<std::size_t>(c.n_layer * c.n_head));
    for (const auto& h : a["heads"]) {
      ASSERT_TRUE(h["layer"].is_number_integer());
      ASSERT_TRUE(h["head"].is_number_integer());
      ASSERT_TRUE(h["total"].is_number());
      ASSERT_EQ(h["by_source"].size(), T);
      for (const auto& v : h["by_source"]) ASSERT_TRUE(v.is_number());
    }
    ASSERT_EQ(a["mlps"].size(), static_cast<std::size_t>(c.n_layer));
    for (const auto& m : a["mlps"]) ASSERT_TRUE(m.is_number());
    ASSERT_TRUE(a["biases"].is_number());
    ASSERT_TRUE(a["sum"].is_number());
    ASSERT_TRUE(a["note"].is_string());
    ASSERT_EQ(j["logit_lens"].size(), static_cast<std::size_t>(c.n_layer + 1));
    for (const auto& e : j["logit_lens"]) {
      ASSERT_TRUE(e["after"].is_string());
      ASSERT_TRUE(e["layer"].is_number_integer());
      ASSERT_EQ(e["top"].size(), static_cast<std::size_t>(top));
      for (const auto& t : e["top"]) {
        ASSERT_TRUE(t["id"].is_number_integer());
        ASSERT_TRUE(t["text"].is_string());
        ASSERT_TRUE(t["probability"].is_number());
        ASSERT_TRUE(t["logit"].is_number());
      }
    }
  }
  if (intervened) {
    check_pred(j["baseline"]);
    ASSERT_TRUE(j["baseline"]["shift"].is_array());
    for (const auto& s : j["baseline"]["shift"])
      for (const char* k : {"p_baseline", "p", "delta"}) ASSERT_TRUE(s[k].is_number()) << k;
  } else {
    ASSERT_TRUE(j.contains("baseline"));
    ASSERT_TRUE(j["baseline"].is_null());
  }
  ASSERT_EQ(j["heads"].size(), static_cast<std::size_t>(c.n_layer * c.n_head));
  for (const auto& h : j["heads"]) {
    for (const char* k : {"layer", "head"}) ASSERT_TRUE(h[k].is_number_integer()) << k;
    for (const char* k : {"focus", "entropy", "last_token_weight"}) ASSERT_TRUE(h[k].is_number()) << k;
    ASSERT_TRUE(h["last_token_attends_to"].is_number_integer() || h["last_token_attends_to"].is_null());
  }
  ASSERT_EQ(j["last_token_attention"]["index"], T - 1);
  ASSERT_EQ(j["last_token_attention"]["mean_over_heads"].size(), static_cast<std::size_t>(c.n_layer));
  for (const auto& r : j["last_token_attention"]["mean_over_heads"]) ASSERT_EQ(r.size(), T);
  ASSERT_EQ(j["layers"].size(), static_cast<std::size_t>(c.n_layer));
  const std::size_t D = static_cast<std::size_t>(c.head_dim());
  auto shape = [&](const json& m, std::size_t rows, std::size_t cols, const char* name) {
    ASSERT_TRUE(m.is_array()) << name;
    ASSERT_EQ(m.size(), col ? cols : rows) << name;
    for (const auto& r : m) ASSERT_EQ(r.size(), col ? rows : cols) << name;
  };
  for (const auto& L : j["layers"]) {
    ASSERT_TRUE(L["layer"].is_number_integer());
    ASSERT_EQ(L["heads"].size(), static_cast<std::size_t>(c.n_head));
    for (const auto& h : L["heads"]) {
      ASSERT_TRUE(h["head"].is_number_integer());
      ASSERT_TRUE(h["scale"].is_number());
      for (const char* k : {"q", "k", "v", "scores", "scaled", "mask", "weights", "out"})
        ASSERT_TRUE(h["layout"][k].is_string()) << k;
      for (const char* k : {"q", "k", "v", "out"}) shape(h[k], T, D, k);
      for (const char* k : {"scores", "scaled", "mask", "weights"}) shape(h[k], T, T, k);
      for (const auto& r : h["mask"])
        for (const auto& v : r) ASSERT_TRUE(v.is_boolean());
      for (const char* k : {"scores", "scaled"})
        for (const auto& r : h[k])
          for (const auto& v : r) ASSERT_TRUE(v.is_number() || v.is_null()) << k;
      for (const char* k : {"q", "k", "v", "out", "weights"})
        for (const auto& r : h[k])
          for (const auto& v : r) ASSERT_TRUE(v.is_number()) << k;
      ASSERT_EQ(h["last_token"]["index"], T - 1);
      for (const char* k : {"weights", "value_norms", "contribution_norms"}) {
        ASSERT_EQ(h["last_token"][k].size(), T) << k;
        for (const auto& v : h["last_token"][k]) ASSERT_TRUE(v.is_number()) << k;
      }
    }
  }
}

TEST(ExplainSchema, EveryFieldWithItsTypeAndShape) {
  Fixture f;
  for (bool col : {false, true})
    for (bool intervened : {false, true}) {
      ExplainOptions o;
      o.notation = col ? ExplainNotation::col3b1b : ExplainNotation::paper;
      o.top = 4;
      o.compare = kSeedCompare;
      o.model_name = "tiny";
      if (intervened) {
        o.silence = {1};
        o.swap_qk = true;
      }
      // Through text, as every consumer reads it.
      const json j = json::parse(explain(f.model, f.tok, kSeed, o).dump());
      EXPECT_EQ(j["schema"], "jomoim.explain/1");
      EXPECT_EQ(j["model"]["name"], "tiny");
      for (const char* k : {"n_layer", "n_head", "n_embd", "head_dim", "n_positions", "vocab_size"})
        ASSERT_TRUE(j["model"][k].is_number_integer()) << k;
      EXPECT_EQ(j["model"]["n_layer"], f.cfg.n_layer);
      EXPECT_EQ(j["model"]["head_dim"], f.cfg.head_dim());
      EXPECT_EQ(j["notation"], col ? "3b1b" : "paper");
      EXPECT_TRUE(j["formula"].is_string());
      EXPECT_TRUE(j["softmax_over"].is_string());
      const json& opt = j["options"];
      EXPECT_TRUE(opt["layer"].is_null());
      EXPECT_TRUE(opt["head"].is_null());
      EXPECT_TRUE(opt["silence"].is_array());
      EXPECT_TRUE(opt["swap_qk"].is_boolean());
      EXPECT_EQ(opt["top"], 4);
      EXPECT_EQ(opt["matrices"], true);
      EXPECT_TRUE(opt["target"].is_null());
      EXPECT_TRUE(opt["contrast"].is_null());
      check_prompt_object(j, f.cfg, intervened, col, 4);
      check_prompt_object(j["compare"], f.cfg, intervened, col, 4);
      ASSERT_TRUE(j["compare"]["shift"].is_array());
      for (const auto& s : j["compare"]["shift"]) {
        ASSERT_TRUE(s["id"].is_number_integer());
        ASSERT_TRUE(s["text"].is_string());
        for (const char* k : {"p", "p_compare", "delta"}) ASSERT_TRUE(s[k].is_number()) << k;
      }
      EXPECT_TRUE(j["generation"].is_null());
      EXPECT_TRUE(j["steps"].is_array());
      EXPECT_EQ(opt["generate"], 0);
      EXPECT_FALSE(j["compare"].contains("generation"));
      EXPECT_FALSE(j["compare"].contains("steps"));
      EXPECT_FALSE(j["compare"].contains("compare"));
      EXPECT_FALSE(j["compare"].contains("schema"));
    }
}

// ---------------------------------------------------------------------------------------------
// Attribution and the logit lens.

// The pass explain() attributes, traced here with the residual stream of the last row.
struct Residuals {
  ForwardTrace tr;
  std::vector<float> logits;
};
Residuals traced(const GptModel& m, const std::vector<std::int32_t>& ids) {
  Residuals r;
  KvCache c(m.config(), static_cast<int>(ids.size()));
  ForwardOptions o;
  o.trace = &r.tr;
  const int last[1] = {static_cast<int>(ids.size()) - 1};
  o.residual_rows = last;
  r.logits = m.forward(ids, c, o);
  return r;
}

// The tolerance of "the parts sum to the logit". In exact arithmetic they do; what differs is
// float32 rounding in the model's pass (each residual coordinate is a float32 sum of the parts'
// coordinates, each part a float32 product of up to K = max(F, C, T) terms) and in its final
// LayerNorm and head (C terms). Each coordinate c is off by at most about K' * eps * A_c, with
// A_c = sum over parts of |part_c| and K' = F + C + T + 2 n_layer + 4 (depth of the float32
// sums on the path), and enters the logit times |u_c|, u = gamma * (W_U[t] - W_U[k]) / sigma
// centred. So tol = K' * FLT_EPSILON * (sum_c |u_c| A_c + |beta . (W_U[t] - W_U[k])|).
double attribution_tolerance(const GptModel& m, const Residuals& r, std::int32_t t, int contrast) {
  const GptConfig& c = m.config();
  const GptParams& w = m.params();
  const int C = c.n_embd, L = c.n_layer, T = r.tr.T;
  const float* x = r.tr.residual.data() + static_cast<std::size_t>(L) * C;
  double mean = 0, var = 0;
  for (int i = 0; i < C; ++i) mean += x[i];
  mean /= C;
  for (int i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double sigma = std::sqrt(var / C + c.layer_norm_epsilon);
  std::vector<double> u(C);
  double usum = 0, beta = 0;
  for (int i = 0; i < C; ++i) {
    double d = w.wte[static_cast<std::size_t>(t) * C + i];
    if (contrast >= 0) d -= w.wte[static_cast<std::size_t>(contrast) * C + i];
    u[i] = w.ln_f.weight[i] * d / sigma;
    usum += u[i];
    beta += w.ln_f.bias[i] * d;
  }
  double b = std::abs(beta);
  for (int i = 0; i < C; ++i) {
    double a = std::abs(r.tr.token_embedding[static_cast<std::size_t>(T - 1) * C + i]) +
               std::abs(r.tr.position_embedding[static_cast<std::size_t>(T - 1) * C + i]);
    for (int l = 0; l < L; ++l)
      a += std::abs(r.tr.attn_output[static_cast<std::size_t>(l) * C + i]) +
           std::abs(r.tr.mlp_output[static_cast<std::size_t>(l) * C + i]);
    b += std::abs(u[i] - usum / C) * a;
  }
  const double k = c.inner() + C + T + 2 * L + 4;
  return k * FLT_EPSILON * b;
}

TEST(ExplainAttribution, TracingTheResidualStreamLeavesTheLogitsBitwiseUnchanged) {
  Fixture f;
  const std::vector<std::int32_t> ids = f.tok.encode(kSeedCompare);
  KvCache c(f.cfg, static_cast<int>(ids.size()));
  const std::vector<float> plain = f.model.forward(ids, c);
  const Residuals r = traced(f.model, ids);
  EXPECT_EQ(plain, r.logits);
  const std::size_t C = f.cfg.n_embd, L = f.cfg.n_layer;
  ASSERT_EQ(r.tr.residual_rows, std::vector<int>{static_cast<int>(ids.size()) - 1});
  ASSERT_EQ(r.tr.residual.size(), (L + 1) * C);
  ASSERT_EQ(r.tr.attn_output.size(), L * C);
  ASSERT_EQ(r.tr.mlp_output.size(), L * C);
  // The stream is the embeddings plus every block's outputs (float32 adds, in the model's order).
  std::vector<float> x(C);
  for (std::size_t i = 0; i < C; ++i)
    x[i] = r.tr.token_embedding[(ids.size() - 1) * C + i] + r.tr.position_embedding[(ids.size() - 1) * C + i];
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < C; ++i) {
      EXPECT_EQ(x[i], r.tr.residual[l * C + i]);
      x[i] += r.tr.attn_output[l * C + i];
      x[i] += r.tr.mlp_output[l * C + i];
    }
  for (std::size_t i = 0; i < C; ++i) EXPECT_EQ(x[i], r.tr.residual[L * C + i]);
  // Without residual rows nothing is recorded.
  ForwardTrace t;
  KvCache c2(f.cfg, static_cast<int>(ids.size()));
  ForwardOptions o;
  o.trace = &t;
  EXPECT_EQ(f.model.forward(ids, c2, o), plain);
  EXPECT_TRUE(t.residual.empty() && t.attn_output.empty() && t.mlp_output.empty());
}

TEST(ExplainAttribution, PartsSumToTheLogitAndSourcesToTheirHead) {
  for (std::uint64_t seed : {7u, 11u, 23u})
    for (const char* prompt : {kSeed, kSeedCompare, "x"})
      for (int mode = 0; mode < 3; ++mode) {  // predicted token; target " lot"; " lot" vs " a"
        Fixture f(2, 4, 32, 40, seed);
        ExplainOptions o;
        if (mode >= 1) o.target = " lot";
        if (mode == 2) o.contrast = " a";
        const json j = explain(f.model, f.tok, prompt, o);
        const json& a = j["attribution"];
        const std::vector<std::int32_t> ids = f.tok.encode(prompt);
        const Residuals r = traced(f.model, ids);
        const std::int32_t t = mode == 0 ? top_ids(r.logits, 1)[0] : f.tok.encode(" lot")[0];
        const int k = mode == 2 ? f.tok.encode(" a")[0] : -1;
        ASSERT_EQ(a["target"]["id"], t);
        EXPECT_EQ(a["target"]["logit"].get<float>(), r.logits[t]);
        if (mode == 2) {
          ASSERT_EQ(a["contrast"]["id"], k);
          EXPECT_EQ(a["contrast"]["logit"].get<float>(), r.logits[k]);
        } else {
          EXPECT_TRUE(a["contrast"].is_null());
        }
        const double logit = static_cast<double>(r.logits[t]) - (k >= 0 ? r.logits[k] : 0.0);
        // Every part, added up here.
        double sum = a["embeddings"]["token"].get<double>() + a["embeddings"]["position"].get<double>() +
                     a["biases"].get<double>();
        ASSERT_EQ(a["heads"].size(), static_cast<std::size_t>(f.cfg.n_layer * f.cfg.n_head));
        for (const auto& h : a["heads"]) {
          ASSERT_EQ(h["by_source"].size(), ids.size());
          double s = 0, mag = 0;
          for (const auto& v : h["by_source"]) s += v.get<double>(), mag += std::abs(v.get<double>());
          EXPECT_NEAR(s, h["total"].get<double>(), 4 * ids.size() * DBL_EPSILON * std::max(1.0, mag));
          sum += h["total"].get<double>();
        }
        ASSERT_EQ(a["mlps"].size(), static_cast<std::size_t>(f.cfg.n_layer));
        for (const auto& m : a["mlps"]) sum += m.get<double>();
        EXPECT_NEAR(sum, a["sum"].get<double>(), 1e-12 * std::max(1.0, std::abs(sum)));
        const double tol = attribution_tolerance(f.model, r, t, k);
        EXPECT_NEAR(a["sum"].get<double>(), logit, tol) << "seed " << seed << " '" << prompt << "' mode " << mode;
        EXPECT_LT(tol, 1e-3 * std::max(1.0, std::abs(logit)));  // the tolerance is not vacuous
        EXPECT_NE(a["note"].get<std::string>().find("LayerNorm"), std::string::npos);
      }
}

TEST(ExplainAttribution, SilencedSourcesArgueNothingAndTheSumStillHolds) {
  Fixture f;
  ExplainOptions o;
  o.silence = {0, 2};
  o.target = " lot";
  const json j = explain(f.model, f.tok, kSeedCompare, o);
  const json& a = j["attribution"];
  for (const auto& h : a["heads"])
    for (int s : o.silence) EXPECT_EQ(h["by_source"][s].get<double>(), 0.0);
  const std::vector<std::int32_t> ids = f.tok.encode(kSeedCompare);
  Residuals r;
  KvCache c(f.cfg, static_cast<int>(ids.size()));
  ForwardOptions fo;
  fo.trace = &r.tr;
  fo.silenced = o.silence;
  const int last[1] = {static_cast<int>(ids.size()) - 1};
  fo.residual_rows = last;
  r.logits = f.model.forward(ids, c, fo);
  const std::int32_t t = f.tok.encode(" lot")[0];
  EXPECT_EQ(a["target"]["logit"].get<float>(), r.logits[t]);  // the intervened pass is attributed
  EXPECT_NEAR(a["sum"].get<double>(), r.logits[t], attribution_tolerance(f.model, r, t, -1));
}

TEST(ExplainAttribution, LogitLensEndsAtTheModelsPrediction) {
  for (std::uint64_t seed : {7u, 11u}) {
    Fixture f(3, 4, 32, 40, seed);
    ExplainOptions o;
    o.top = 5;
    o.compare = kSeed;
    const json j = explain(f.model, f.tok, kSeedCompare, o);
    for (const json* p : {&j, &j["compare"]}) {
      const json& lens = (*p)["logit_lens"];
      ASSERT_EQ(lens.size(), static_cast<std::size_t>(f.cfg.n_layer + 1));
      EXPECT_EQ(lens[0]["after"], "embeddings");
      EXPECT_EQ(lens[0]["layer"], -1);
      for (int l = 0; l < f.cfg.n_layer; ++l) {
        EXPECT_EQ(lens[l + 1]["after"], "layer " + std::to_string(l));
        EXPECT_EQ(lens[l + 1]["layer"], l);
      }
      const json& last = lens[f.cfg.n_layer]["top"];
      const json& pred = (*p)["prediction"]["top"];
      ASSERT_EQ(last.size(), 5u);
      ASSERT_EQ(pred.size(), 5u);
      for (std::size_t r = 0; r < 5; ++r) {
        EXPECT_EQ(last[r]["id"], pred[r]["id"]) << r;
        EXPECT_EQ(last[r]["text"], pred[r]["text"]);
        EXPECT_NEAR(last[r]["logit"].get<double>(), pred[r]["logit"].get<double>(), 1e-4);
        EXPECT_NEAR(last[r]["probability"].get<double>(), pred[r]["probability"].get<double>(), 1e-5);
      }
      // Each prompt has its own attribution, of its own prediction.
      EXPECT_EQ((*p)["attribution"]["target"]["id"], pred[0]["id"]);
    }
    // The first entry is the embeddings alone read through ln_f and the head.
    const std::vector<std::int32_t> ids = f.tok.encode(kSeedCompare);
    const int C = f.cfg.n_embd, V = f.cfg.vocab_size;
    const std::size_t T = ids.size();
    std::vector<double> x(C), logits(V);
    for (int i = 0; i < C; ++i)
      x[i] = static_cast<double>(f.model.params().wte[static_cast<std::size_t>(ids[T - 1]) * C + i] +
                                 f.model.params().wpe[(T - 1) * C + i]);
    double mean = 0, var = 0;
    for (double v : x) mean += v / C;
    for (double v : x) var += (v - mean) * (v - mean) / C;
    for (int i = 0; i < C; ++i)
      x[i] = (x[i] - mean) / std::sqrt(var + f.cfg.layer_norm_epsilon) * f.model.params().ln_f.weight[i] +
             f.model.params().ln_f.bias[i];
    for (int v = 0; v < V; ++v) {
      logits[v] = 0;
      for (int i = 0; i < C; ++i) logits[v] += x[i] * f.model.params().wte[static_cast<std::size_t>(v) * C + i];
    }
    const int best = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(j["logit_lens"][0]["top"][0]["id"], best);
    EXPECT_NEAR(j["logit_lens"][0]["top"][0]["logit"].get<double>(), logits[best], 1e-9);
  }
}

TEST(ExplainAttribution, RefusesTargetsThatAreNotOneToken) {
  Fixture f;
  auto message = [&](const ExplainOptions& o) -> std::string {
    try {
      explain(f.model, f.tok, kSeed, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  ExplainOptions o;
  o.target = "ab";
  EXPECT_EQ(message(o), "target \"ab\" encodes to 2 tokens: it must be exactly one token");
  o.target = "";
  EXPECT_EQ(message(o), "target is empty: it must be exactly one token");
  o.target = " lot";
  o.contrast = " lot";
  EXPECT_EQ(message(o), "contrast is the same token as the target");
  o.contrast = "a\nb";
  EXPECT_EQ(message(o), "contrast \"a\\nb\" encodes to 3 tokens: it must be exactly one token");
  o.target.reset();
  o.contrast = " a";
  EXPECT_EQ(message(o), "contrast needs a target");
}

// ---------------------------------------------------------------------------------------------
// Head roles.

TEST(ExplainRoles, LabelsAtTheirThresholds) {
  using Th = HeadRoleThresholds;
  auto below = [](double t) { return std::nextafter(t, 0.0); };
  EXPECT_EQ(head_role_labels(std::nullopt, std::nullopt, std::nullopt, std::nullopt), std::vector<std::string>{});
  EXPECT_EQ(head_role_labels(0, 0, 0, Th::induction), std::vector<std::string>{"induction"});
  EXPECT_EQ(head_role_labels(0, 0, 0, below(Th::induction)), std::vector<std::string>{});
  EXPECT_EQ(head_role_labels(Th::previous_token, 0, 0, 0), std::vector<std::string>{"previous_token"});
  EXPECT_EQ(head_role_labels(below(Th::previous_token), 0, 0, 0), std::vector<std::string>{});
  EXPECT_EQ(head_role_labels(0, 0, Th::self, 0), std::vector<std::string>{"self"});
  EXPECT_EQ(head_role_labels(0, 0, below(Th::self), 0), std::vector<std::string>{});
  EXPECT_EQ(head_role_labels(0, Th::first_token, 0, 0), std::vector<std::string>{"first_token"});
  EXPECT_EQ(head_role_labels(0, below(Th::first_token), 0, 0), std::vector<std::string>{});
  // Every role at once, the most specific first; absent scores pass nothing.
  EXPECT_EQ(head_role_labels(1, 1, 1, 1),
            (std::vector<std::string>{"induction", "previous_token", "self", "first_token"}));
  EXPECT_EQ(head_role_labels(std::nullopt, 0.9, std::nullopt, 0.5),
            (std::vector<std::string>{"induction", "first_token"}));
  EXPECT_EQ(Th::induction, 0.4);
  EXPECT_EQ(Th::previous_token, 0.6);
}

TEST(ExplainRoles, ProbeIsTwoCopiesOfDistinctTokensAfterBos) {
  const GptConfig c = small_config(1, 2, 8, 40, 300);
  for (const std::optional<std::int32_t> bos : {std::optional<std::int32_t>(299), std::optional<std::int32_t>()}) {
    int R = -1;
    const std::vector<std::int32_t> ids = role_probe_ids(c, bos, &R);
    const int b = bos ? 1 : 0;
    EXPECT_EQ(R, (40 - b) / 2);
    ASSERT_EQ(ids.size(), static_cast<std::size_t>(2 * R + b));
    if (bos) {
      EXPECT_EQ(ids[0], *bos);
    }
    const std::set<std::int32_t> half(ids.begin() + b, ids.begin() + b + R);
    EXPECT_EQ(half.size(), static_cast<std::size_t>(R)) << "distinct";
    if (bos) {
      EXPECT_FALSE(half.count(*bos));
    }
    for (int r = 0; r < R; ++r) EXPECT_EQ(ids[b + r], ids[b + R + r]);
    for (auto id : ids) EXPECT_TRUE(id >= 0 && id < 300);
    EXPECT_EQ(ids, role_probe_ids(c, bos)) << "fixed seed";
  }
  // R = 50 at most; too short a context or vocabulary: no probe.
  int R = 0;
  EXPECT_EQ(role_probe_ids(small_config(1, 2, 8, 1024, 300), 299, &R).size(), 101u);
  EXPECT_EQ(R, 50);
  EXPECT_TRUE(role_probe_ids(small_config(1, 2, 8, 4, 300), 299, &R).empty());
  EXPECT_EQ(R, 0);
  EXPECT_EQ(role_probe_ids(small_config(1, 2, 8, 40, 3), 2, &R).size(), 5u);
  EXPECT_EQ(R, 2);
}

TEST(ExplainRoles, ScoresAreMeansOfTheTracedWeights) {
  Fixture f;
  const int L = f.cfg.n_layer, H = f.cfg.n_head;
  const json j = explain(f.model, f.tok, kSeedCompare, {});
  const json& roles = j["head_roles"];
  check_head_roles(roles, f.cfg);
  auto weights = [&](const std::vector<std::int32_t>& ids) {
    ForwardTrace tr;
    KvCache kc(f.cfg, static_cast<int>(ids.size()));
    ForwardOptions o;
    o.trace = &tr;
    f.model.forward(ids, kc, o);
    return tr;
  };
  std::vector<std::int32_t> ids;
  for (const auto& t : j["tokens"]) ids.push_back(t["id"].get<std::int32_t>());
  const ForwardTrace tp = weights(ids);
  const std::vector<std::int32_t> probe = role_probe_ids(f.cfg, f.tok.eos_id());
  EXPECT_EQ(roles["probe"]["ids"].get<std::vector<std::int32_t>>(), probe);
  const int R = roles["probe"]["length"].get<int>();
  const ForwardTrace tq = weights(probe);
  const int T = tp.T, P = tq.T;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      auto w = [&](const ForwardTrace& t, int i, int k) {
        return static_cast<double>(t.layers[l].weights[(static_cast<std::size_t>(h) * t.T + i) * t.T + k]);
      };
      double prev = 0, first = 0, self = 0, ind = 0;
      for (int i = 1; i < T; ++i) prev += w(tp, i, i - 1), first += w(tp, i, 0), self += w(tp, i, i);
      for (int r = 0; r < R; ++r) ind += w(tq, 1 + R + r, 2 + r);
      const json& e = roles["heads"][l * H + h];
      EXPECT_NEAR(e["previous_token"].get<double>(), prev / (T - 1), 1e-12);
      EXPECT_NEAR(e["first_token"].get<double>(), first / (T - 1), 1e-12);
      EXPECT_NEAR(e["self"].get<double>(), self / (T - 1), 1e-12);
      EXPECT_NEAR(e["induction"].get<double>(), ind / R, 1e-12);
      EXPECT_EQ(P, 2 * R + 1);
    }
  // head_roles() with the same prompt is the same object; without one it measures the probe.
  const json hr = head_roles(f.model, f.tok, std::string(kSeedCompare));
  EXPECT_EQ(hr["schema"], "jomoim.heads/1");
  EXPECT_EQ(hr["head_roles"], roles);
  const json hp = head_roles(f.model, f.tok, std::nullopt);
  EXPECT_EQ(hp["head_roles"]["measured_on"], "probe");
  EXPECT_TRUE(hp["prompt"].is_null());
  for (int i = 0; i < L * H; ++i) EXPECT_EQ(hp["head_roles"]["heads"][i]["induction"], roles["heads"][i]["induction"]);
  EXPECT_THROW(head_roles(f.model, f.tok, std::string(200, 'x')), Error);
}

// ---------------------------------------------------------------------------------------------
// Generation: steps.

TEST(ExplainGeneration, StepsAreGeneratesTokensEachWithThePassThatPredictedIt) {
  Fixture f;
  const int L = f.cfg.n_layer, H = f.cfg.n_head;
  for (const float temperature : {0.0f, 0.9f}) {
    ExplainOptions o;
    o.generate = 6;
    o.temperature = temperature;
    o.seed = 5;
    o.stop_at_eos = false;
    o.top = 3;
    const json j = explain(f.model, f.tok, kSeed, o);
    std::vector<std::int32_t> ids = f.tok.encode(kSeed);
    const int T = static_cast<int>(ids.size());
    GenerateOptions go;
    go.max_tokens = 6;
    go.sampling.temperature = temperature;
    go.sampling.top_k = 40;
    go.sampling.top_p = 0.95f;
    go.sampling.seed = 5;
    const GenerateResult r = generate(f.model, ids, go);
    ASSERT_EQ(r.ids.size(), 6u);
    EXPECT_EQ(j["generation"]["ids"].get<std::vector<std::int32_t>>(), r.ids);
    EXPECT_EQ(j["generation"]["stop"], "length");
    EXPECT_EQ(j["generation"]["seed"], 5);
    EXPECT_EQ(j["options"]["generate"], 6);
    ASSERT_EQ(j["steps"].size(), 6u);
    // The plain (untraced) passes the generation made: prefill, then one token at a time.
    KvCache cache(f.cfg, T + 6);
    std::vector<float> logits = f.model.forward(ids, cache);
    for (int k = 0; k < 6; ++k) {
      const json& st = j["steps"][k];
      const std::int32_t id = r.ids[k];
      EXPECT_EQ(st["step"], k);
      EXPECT_EQ(st["position"], T + k - 1);
      EXPECT_EQ(st["id"], id);
      EXPECT_EQ(st["logit"].get<float>(), logits[id]) << "the replay's logits are the generation's, bit for bit";
      EXPECT_NEAR(st["probability"].get<double>(), softmax(logits)[id], 1e-15);
      if (temperature == 0) {
        EXPECT_EQ(st["prediction"]["top"][0]["id"], id) << "greedy takes the top token";
      }
      ASSERT_EQ(st["attention"].size(), static_cast<std::size_t>(L));
      for (int l = 0; l < L; ++l) {
        ASSERT_EQ(st["attention"][l].size(), static_cast<std::size_t>(H));
        std::vector<double> mean(T + k, 0.0);
        for (int h = 0; h < H; ++h) {
          const json& row = st["attention"][l][h];
          ASSERT_EQ(row.size(), static_cast<std::size_t>(T + k));
          double sum = 0;
          for (int i = 0; i < T + k; ++i) sum += row[i].get<float>(), mean[i] += row[i].get<float>() / H;
          EXPECT_NEAR(sum, 1.0, 1e-5);
        }
        for (int i = 0; i < T + k; ++i)
          EXPECT_NEAR(st["last_token_attention"]["mean_over_heads"][l][i].get<double>(), mean[i], 1e-12);
      }
      EXPECT_EQ(st["last_token_attention"]["index"], T + k - 1);
      const json& a = st["attribution"];
      EXPECT_EQ(a["target"]["id"], id);
      EXPECT_EQ(a["heads"][0]["by_source"].size(), static_cast<std::size_t>(T + k));
      EXPECT_NEAR(a["sum"].get<double>(), logits[id], 1e-3 * std::max(1.0, std::abs(static_cast<double>(logits[id]))));
      EXPECT_EQ(st["logit_lens"].size(), static_cast<std::size_t>(L + 1));
      EXPECT_EQ(st["logit_lens"][L]["top"][0]["id"], st["prediction"]["top"][0]["id"]);
      const std::int32_t next[1] = {id};
      if (k + 1 < 6) logits = f.model.forward(next, cache);
    }
    // Step 0 is the prompt's own pass (greedy: attributing the same, predicted, token).
    EXPECT_EQ(j["steps"][0]["prediction"], j["prediction"]);
    if (temperature == 0) {
      EXPECT_EQ(j["steps"][0]["attribution"]["heads"], j["attribution"]["heads"]);
    }
  }
  // Without generate: no generation, no steps.
  const json plain = explain(f.model, f.tok, kSeed, {});
  EXPECT_TRUE(plain["generation"].is_null());
  EXPECT_TRUE(plain["steps"].is_array() && plain["steps"].empty());
  EXPECT_EQ(plain["options"]["generate"], 0);
}

TEST(ExplainGeneration, StopsAtEndOfTextAndAtTheContextAsGenerateDoes) {
  Fixture f(2, 4, 32, 8);  // a context of 8 tokens
  ExplainOptions o;
  o.generate = 20;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.seed = 11;
  const std::vector<std::int32_t> ids = f.tok.encode(kSeed);
  GenerateOptions go;
  go.max_tokens = 20;
  go.sampling = {1.0f, 0, 1.0f, 11};
  go.eos = f.tok.eos_id();
  const GenerateResult r = generate(f.model, ids, go);
  const json j = explain(f.model, f.tok, kSeed, o);
  EXPECT_EQ(j["generation"]["ids"].get<std::vector<std::int32_t>>(), r.ids);
  EXPECT_EQ(j["generation"]["stop"], stop_name(r.stop));
  EXPECT_EQ(j["steps"].size(), r.ids.size());
  EXPECT_LE(ids.size() + r.ids.size(), 8u);
}

TEST(ExplainGeneration, RefusesWithOneLine) {
  Fixture f;
  auto refuses = [&](ExplainOptions o, const std::string& part) {
    try {
      explain(f.model, f.tok, kSeed, o);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(part), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  ExplainOptions o;
  o.generate = -1;
  refuses(o, "generate must be in 0..64");
  o.generate = kMaxExplainSteps + 1;
  refuses(o, "generate must be in 0..64");
  o.generate = 2;
  o.compare = kSeedCompare;
  refuses(o, "generate cannot be combined with compare");
  o.compare.reset();
  o.silence = {0};
  refuses(o, "generate cannot be combined with silence or swap_qk");
  o.silence.clear();
  o.swap_qk = true;
  refuses(o, "generate cannot be combined with silence or swap_qk");
  o.swap_qk = false;
  o.temperature = -1;
  refuses(o, "temperature must be");
  o.temperature = 0;
  o.top_p = 0;
  refuses(o, "top-p must be");
}

TEST(Explain, Float32ValuesPrintShortAndReadBackExactly) {
  Fixture f;
  const json j = explain(f.model, f.tok, kSeed);
  const std::string text = j.dump();
  const json back = json::parse(text);
  // Every float32 of q survives the trip through text bit for bit ...
  EXPECT_EQ(flat_f32(back["layers"][0]["heads"][0]["q"]), flat_f32(j["layers"][0]["heads"][0]["q"]));
  // ... and is printed with at most 9 significant digits (a float's), not a double's 17.
  const std::string q = back["layers"][1]["heads"][3]["q"].dump();
  std::size_t longest = 0, run = 0;
  for (char ch : q) {
    run = (ch >= '0' && ch <= '9') ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  EXPECT_LE(longest, 11u) << q;  // 9 digits, plus leading zeros of numbers like 0.000123...
}

}  // namespace
