// The explorer's computation: one traced forward pass turned into the JSON of docs/explain.md.
//
// Everything in the output is read from the ForwardTrace of the real pass (Q, K, V, raw
// scores, softmax weights, per-head outputs, embeddings) or from its logits; the only
// arithmetic done here is presentation: norms, entropies, means, the scaled score
// (raw score * scale, the product the engine forms before its softmax), and transposes for the
// 3Blue1Brown notation. It is not a second implementation of attention (tests compare it with
// the engine's float64 reference instead).
#include "jomoim/explain/explain.hpp"
#include "jomoim/text/utf8.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "jomoim/core/tensor.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/sampling.hpp"

namespace jomoim {
namespace {

using nlohmann::json;

// A float32 as the JSON number with the fewest digits that reads back as the same float
// (0.1f prints as 0.1, not 0.10000000149011612). Non-finite values become null.
json f32(float x) {
  if (!std::isfinite(x)) return nullptr;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  std::from_chars(buf, r.ptr, d);  // locale-independent, unlike strtod
  return d;
}

json f64(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

double norm(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

// One forward pass over the whole prompt, traced.
struct Pass {
  std::vector<std::int32_t> ids;
  std::vector<int> silenced;  // sorted, unique token indices
  bool swap_qk = false;
  ForwardTrace trace;
  std::vector<float> logits;  // [vocab] after the last token
  std::vector<double> probs;  // softmax(logits) in float64
};

Pass run_pass(const GptModel& model, const std::vector<std::int32_t>& ids, const std::vector<int>& silenced,
              bool swap_qk, bool residuals = false) {
  Pass p;
  p.ids = ids;
  p.silenced = silenced;
  p.swap_qk = swap_qk;
  KvCache cache(model.config(), static_cast<int>(ids.size()));
  ForwardOptions fo;
  fo.silenced = p.silenced;
  fo.swap_qk = swap_qk;
  fo.trace = &p.trace;
  const int last_row[1] = {static_cast<int>(ids.size()) - 1};
  if (residuals) fo.residual_rows = last_row;
  p.logits = model.forward(ids, cache, fo);
  p.probs = softmax(p.logits);
  return p;
}

json token_text(const Tokenizer& tok, std::int32_t id) {
  // Models may have more ids than the tokenizer (padded vocabularies): name those by number.
  if (id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size()) return printable_text(tok.token_bytes(id));
  std::string name = "<";
  name += std::to_string(id);
  name += '>';
  return name;
}

json prediction_json(const Pass& p, const Tokenizer& tok, int top) {
  json j = {{"top", json::array()}};
  const int n = std::min<int>(top, static_cast<int>(p.logits.size()));
  for (auto id : top_ids(p.logits, n))
    j["top"].push_back(
        {{"id", id}, {"text", token_text(tok, id)}, {"probability", f64(p.probs[id])}, {"logit", f32(p.logits[id])}});
  double h = 0;
  for (double q : p.probs)
    if (q > 0) h -= q * std::log(q);
  j["entropy"] = f64(h);
  return j;
}

// The ids in either top list, with their probabilities in both passes, largest |delta| first.
json shift_json(const Pass& a, const Pass& b, const Tokenizer& tok, int top, const char* pa, const char* pb) {
  const int n = std::min<int>(top, static_cast<int>(a.logits.size()));
  std::set<std::int32_t> ids;
  for (auto id : top_ids(a.logits, n)) ids.insert(id);
  for (auto id : top_ids(b.logits, n)) ids.insert(id);
  std::vector<std::int32_t> order(ids.begin(), ids.end());
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    return std::abs(b.probs[x] - a.probs[x]) > std::abs(b.probs[y] - a.probs[y]);
  });
  json s = json::array();
  for (auto id : order)
    s.push_back({{"id", id},
                 {"text", token_text(tok, id)},
                 {pa, f64(a.probs[id])},
                 {pb, f64(b.probs[id])},
                 {"delta", f64(b.probs[id] - a.probs[id])}});
  return s;
}

json tokens_json(const Pass& p, const Tokenizer& tok, int C) {
  json t = json::array();
  const ForwardTrace& tr = p.trace;
  std::vector<float> e(C);
  for (int i = 0; i < tr.T; ++i) {
    const float* te = tr.token_embedding.data() + static_cast<std::size_t>(i) * C;
    const float* pe = tr.position_embedding.data() + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) e[c] = te[c] + pe[c];  // the sum the model feeds its first layer
    const std::int32_t id = p.ids[i];
    const bool known = static_cast<std::size_t>(id) < tok.vocab_size();
    t.push_back({{"index", i},
                 {"id", id},
                 {"text", token_text(tok, id)},
                 {"token", known ? json(tok.token_string(id)) : json(nullptr)},
                 {"silenced", std::binary_search(p.silenced.begin(), p.silenced.end(), i)},
                 {"token_embedding_norm", f64(norm(te, C))},
                 {"position_embedding_norm", f64(norm(pe, C))},
                 {"embedding_norm", f64(norm(e.data(), C))}});
  }
  return t;
}

// Views into the trace of one head: weights(i, j) etc. for query i (of the T new tokens), key j
// (of the Tk visible ones; Tk = 0 means T: a pass without a cache).
struct HeadView {
  const AttentionTrace& at;
  int h, T, D;
  int Tk = 0;
  std::size_t keys() const { return static_cast<std::size_t>(Tk > 0 ? Tk : T); }
  float w(int i, int j) const { return at.weights[(static_cast<std::size_t>(h) * T + i) * keys() + j]; }
  float s(int i, int j) const { return at.scores[(static_cast<std::size_t>(h) * T + i) * keys() + j]; }
  const float* q(int i) const { return at.q.data() + (static_cast<std::size_t>(h) * T + i) * D; }
  const float* k(int j) const { return at.k.data() + (h * keys() + j) * D; }
  const float* v(int j) const { return at.v.data() + (h * keys() + j) * D; }
  const float* o(int i) const { return at.out.data() + (static_cast<std::size_t>(h) * T + i) * D; }
};

// The heads summary: focus = mean over queries of the largest weight, entropy = mean over the
// same queries of the weights' entropy (nats). Query 0 is left out when there are others: it
// can hear only itself, so it would add 1 to every head's focus.
json heads_json(const Pass& p, int H) {
  const int T = p.trace.T;
  struct Row {
    int layer, head;
    double focus, entropy;
    int attends;
    double weight;
  };
  std::vector<Row> rows;
  const int first = T > 1 ? 1 : 0;
  for (int l = 0; l < static_cast<int>(p.trace.layers.size()); ++l)
    for (int h = 0; h < H; ++h) {
      HeadView hv{p.trace.layers[l], h, T, 0};
      double focus = 0, ent = 0;
      for (int i = first; i < T; ++i) {
        double mx = 0, e = 0;
        for (int j = 0; j <= i; ++j) {
          const double w = hv.w(i, j);
          mx = std::max(mx, w);
          if (w > 0) e -= w * std::log(w);
        }
        focus += mx;
        ent += e;
      }
      int best = -1;
      double bw = 0;
      for (int j = 0; j < T; ++j)
        if (hv.w(T - 1, j) > bw) {
          bw = hv.w(T - 1, j);
          best = j;
        }
      rows.push_back({l, h, focus / (T - first), ent / (T - first), best, bw});
    }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.focus > b.focus; });
  json j = json::array();
  for (const Row& r : rows)
    j.push_back({{"layer", r.layer},
                 {"head", r.head},
                 {"focus", f64(r.focus)},
                 {"entropy", f64(r.entropy)},
                 {"last_token_attends_to", r.attends >= 0 ? json(r.attends) : json(nullptr)},
                 {"last_token_weight", f64(r.weight)}});
  return j;
}

// Whether query i hears key j: causal (j <= i) and j not silenced.
bool audible(const Pass& p, int i, int j) {
  return j <= i && !std::binary_search(p.silenced.begin(), p.silenced.end(), j);
}

// rows x cols matrix from f(r, c); in 3b1b the element at [r][c] is f(c, r) (transposed).
template <class F>
json matrix(int rows, int cols, bool transpose, F f) {
  json m = json::array();
  const int R = transpose ? cols : rows, Cn = transpose ? rows : cols;
  for (int r = 0; r < R; ++r) {
    json row = json::array();
    for (int c = 0; c < Cn; ++c) row.push_back(transpose ? f(c, r) : f(r, c));
    m.push_back(std::move(row));
  }
  return m;
}

json head_json(const Pass& p, int layer, int h, int D, bool col) {
  const AttentionTrace& at = p.trace.layers[layer];
  const int T = p.trace.T;
  HeadView hv{at, h, T, D};
  json j;
  j["head"] = h;
  j["scale"] = f32(at.scale);
  j["layout"] = col ? json{{"q", "[dim, token]"},       {"k", "[dim, token]"},      {"v", "[dim, token]"},
                           {"scores", "[key, query]"},  {"scaled", "[key, query]"}, {"mask", "[key, query]"},
                           {"weights", "[key, query]"}, {"out", "[dim, token]"}}
                    : json{{"q", "[token, dim]"},       {"k", "[token, dim]"},      {"v", "[token, dim]"},
                           {"scores", "[query, key]"},  {"scaled", "[query, key]"}, {"mask", "[query, key]"},
                           {"weights", "[query, key]"}, {"out", "[token, dim]"}};
  j["q"] = matrix(T, D, col, [&](int t, int d) { return f32(hv.q(t)[d]); });
  j["k"] = matrix(T, D, col, [&](int t, int d) { return f32(hv.k(t)[d]); });
  j["v"] = matrix(T, D, col, [&](int t, int d) { return f32(hv.v(t)[d]); });
  j["scores"] = matrix(T, T, col, [&](int i, int k) { return audible(p, i, k) ? f32(hv.s(i, k)) : json(nullptr); });
  j["scaled"] =
      matrix(T, T, col, [&](int i, int k) { return audible(p, i, k) ? f32(hv.s(i, k) * at.scale) : json(nullptr); });
  j["mask"] = matrix(T, T, col, [&](int i, int k) { return json(audible(p, i, k)); });
  j["weights"] = matrix(T, T, col, [&](int i, int k) { return f32(hv.w(i, k)); });
  j["out"] = matrix(T, D, col, [&](int t, int d) { return f32(hv.o(t)[d]); });
  json lw = json::array(), vn = json::array(), cn = json::array();
  for (int k = 0; k < T; ++k) {
    const double w = hv.w(T - 1, k), n = norm(hv.v(k), D);
    lw.push_back(f32(hv.w(T - 1, k)));
    vn.push_back(f64(n));
    cn.push_back(f64(std::abs(w) * n));  // ||w V|| = |w| ||V||
  }
  j["last_token"] = {{"index", T - 1}, {"weights", lw}, {"value_norms", vn}, {"contribution_norms", cn}};
  return j;
}

// Mean over heads of the last token's weights, per layer: [n_layer][Tk] (Tk = T without a cache;
// index is the last token's position).
json last_token_attention_json(const Pass& p, int H) {
  const int T = p.trace.T, Tk = p.trace.Tk;
  json m = json::array();
  for (const AttentionTrace& at : p.trace.layers) {
    json row = json::array();
    for (int k = 0; k < Tk; ++k) {
      double s = 0;
      for (int h = 0; h < H; ++h) s += HeadView{at, h, T, 0, Tk}.w(T - 1, k);
      row.push_back(f64(s / H));
    }
    m.push_back(std::move(row));
  }
  return {{"index", Tk - 1}, {"mean_over_heads", m}};
}

// ---------------------------------------------------------------------------------------------
// Direct-logit attribution and the logit lens, in float64 from the trace and the weights.

// The final LayerNorm of one residual row in float64: (x - mean) / sigma * gamma + beta.
std::vector<double> final_norm(const GptModel& model, const float* x, double* sigma_out = nullptr) {
  const GptConfig& c = model.config();
  const int C = c.n_embd;
  double mean = 0, var = 0;
  for (int i = 0; i < C; ++i) mean += x[i];
  mean /= C;
  for (int i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= C;
  const double sigma = std::sqrt(var + static_cast<double>(c.layer_norm_epsilon));
  if (sigma_out) *sigma_out = sigma;
  const LayerNormParams& ln = model.params().ln_f;
  std::vector<double> h(C);
  for (int i = 0; i < C; ++i) h[i] = (x[i] - mean) / sigma * ln.weight[i] + ln.bias[i];
  return h;
}

json logit_lens_json(const Pass& p, const GptModel& model, const Tokenizer& tok, int top) {
  const GptConfig& c = model.config();
  const int C = c.n_embd, V = c.vocab_size;
  const float* wte = model.params().wte;
  json lens = json::array();
  std::vector<double> logits(V);
  for (int l = 0; l <= c.n_layer; ++l) {
    const std::vector<double> h = final_norm(model, p.trace.residual.data() + static_cast<std::size_t>(l) * C);
    for (int v = 0; v < V; ++v) {
      const float* row = wte + static_cast<std::size_t>(v) * C;
      double s = 0;
      for (int i = 0; i < C; ++i) s += h[i] * row[i];
      logits[v] = s;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double x : logits) z += std::exp(x - mx);
    const int n = std::min(top, V);
    std::vector<std::int32_t> ids(V);
    for (int v = 0; v < V; ++v) ids[v] = v;
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    json t = json::array();
    for (int r = 0; r < n; ++r) {
      const std::int32_t id = ids[r];
      t.push_back({{"id", id},
                   {"text", token_text(tok, id)},
                   {"probability", f64(std::exp(logits[id] - mx) / z)},
                   {"logit", f64(logits[id])}});
    }
    lens.push_back({{"after", l == 0 ? std::string("embeddings") : "layer " + std::to_string(l - 1)},
                    {"layer", l - 1},
                    {"top", std::move(t)}});
  }
  return lens;
}

// logit(target) [- logit(contrast)] as a sum over the parts that wrote the last position's
// residual stream, the final LayerNorm's scale frozen at this pass's value (see docs/explain.md).
json attribution_json(const Pass& p, const GptModel& model, const Tokenizer& tok, std::int32_t target,
                      std::optional<std::int32_t> contrast) {
  const GptConfig& c = model.config();
  const GptParams& w = model.params();
  // T new tokens (the last is attributed) over Tk keys (T without a cache, a decode step: T = 1).
  const int C = c.n_embd, H = c.n_head, D = c.head_dim(), L = c.n_layer, T = p.trace.T, Tk = p.trace.Tk;
  const float* x = p.trace.residual.data() + static_cast<std::size_t>(L) * C;  // final residual, last row
  double sigma = 0;
  final_norm(model, x, &sigma);
  // The readout direction u = gamma * (W_U[target] - W_U[contrast]) / sigma, then centred
  // (u - mean(u)), so that part . uc = ((part - mean(part)) / sigma * gamma) . (W_U[t] - W_U[c]).
  std::vector<double> u(C), uc(C);
  double beta_term = 0, usum = 0;
  for (int i = 0; i < C; ++i) {
    double d = w.wte[static_cast<std::size_t>(target) * C + i];
    if (contrast) d -= w.wte[static_cast<std::size_t>(*contrast) * C + i];
    u[i] = w.ln_f.weight[i] * d / sigma;
    usum += u[i];
    beta_term += static_cast<double>(w.ln_f.bias[i]) * d;
  }
  for (int i = 0; i < C; ++i) uc[i] = u[i] - usum / C;
  auto dot = [&](const float* v) {
    double s = 0;
    for (int i = 0; i < C; ++i) s += v[i] * uc[i];
    return s;
  };
  const std::size_t last = static_cast<std::size_t>(T - 1);
  const double tok_e = dot(p.trace.token_embedding.data() + last * C);
  const double pos_e = dot(p.trace.position_embedding.data() + last * C);
  double sum = tok_e + pos_e, biases = beta_term;
  json heads = json::array(), mlps = json::array();
  std::vector<double> g(D);
  for (int l = 0; l < L; ++l) {
    const BlockParams& b = w.blocks[l];
    const AttentionTrace& at = p.trace.layers[l];
    for (int h = 0; h < H; ++h) {
      // g = W_O[head h's rows] uc: what one unit of the head's output adds to the quantity.
      for (int d = 0; d < D; ++d) {
        const float* row = b.c_proj.weight + static_cast<std::size_t>(h * D + d) * C;
        double s = 0;
        for (int i = 0; i < C; ++i) s += row[i] * uc[i];
        g[d] = s;
      }
      HeadView hv{at, h, T, D, Tk};
      json by = json::array();
      double total = 0;
      for (int j = 0; j < Tk; ++j) {
        const float* v = hv.v(j);
        double s = 0;
        for (int d = 0; d < D; ++d) s += v[d] * g[d];
        s *= hv.w(T - 1, j);
        total += s;
        by.push_back(f64(s));
      }
      sum += total;
      heads.push_back({{"layer", l}, {"head", h}, {"total", f64(total)}, {"by_source", std::move(by)}});
    }
    const float* mo = p.trace.mlp_output.data() + static_cast<std::size_t>(l) * C;
    double m = 0, mb = 0, ab = 0;
    for (int i = 0; i < C; ++i) {
      m += (static_cast<double>(mo[i]) - b.mlp_proj.bias[i]) * uc[i];
      mb += static_cast<double>(b.mlp_proj.bias[i]) * uc[i];
      ab += static_cast<double>(b.c_proj.bias[i]) * uc[i];
    }
    sum += m;
    biases += mb + ab;
    mlps.push_back(f64(m));
  }
  sum += biases;
  auto tok_json = [&](std::int32_t id) {
    return json{{"id", id}, {"text", token_text(tok, id)}, {"logit", f32(p.logits[id])}};
  };
  json a;
  a["target"] = tok_json(target);
  a["contrast"] = contrast ? tok_json(*contrast) : json(nullptr);
  a["embeddings"] = {{"token", f64(tok_e)}, {"position", f64(pos_e)}};
  a["heads"] = std::move(heads);
  a["mlps"] = std::move(mlps);
  a["biases"] = f64(biases);
  a["sum"] = f64(sum);
  a["note"] =
      "Direct-logit attribution: the final LayerNorm's scale is frozen at this pass's value, which makes the "
      "logit a sum of the parts.";
  return a;
}

// ---------------------------------------------------------------------------------------------
// Head roles (explain.hpp, docs/explain.md "head_roles").

struct RoleScores {
  std::optional<double> previous_token, first_token, self, induction;
};

// previous_token, first_token, self of every head ([layer * H + head]): the mean over queries
// i >= 1 of the weight on keys i - 1, 0 and i. Absent for a one-token pass.
std::vector<RoleScores> prompt_role_scores(const Pass& p, int H) {
  const int T = p.trace.T, L = static_cast<int>(p.trace.layers.size());
  std::vector<RoleScores> r(static_cast<std::size_t>(L) * H);
  if (T < 2) return r;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      HeadView hv{p.trace.layers[l], h, T, 0};
      double prev = 0, first = 0, self = 0;
      for (int i = 1; i < T; ++i) {
        prev += hv.w(i, i - 1);
        first += hv.w(i, 0);
        self += hv.w(i, i);
      }
      RoleScores& s = r[static_cast<std::size_t>(l) * H + h];
      s.previous_token = prev / (T - 1);
      s.first_token = first / (T - 1);
      s.self = self / (T - 1);
    }
  return r;
}

// The probe and its scores ([layer * H + head]; empty without a probe). Its pass's trace is not
// kept: `own` holds the probe's previous-token, first-token and self scores (for head_roles()
// without a prompt).
struct Probe {
  std::vector<std::int32_t> ids;
  int R = 0;
  bool bos = false;
  std::vector<double> induction;
  std::vector<RoleScores> own;
};

Probe run_probe(const GptModel& model, const Tokenizer& tok, bool swap_qk) {
  const GptConfig& c = model.config();
  Probe pr;
  std::optional<std::int32_t> eos = tok.eos_id();
  if (eos && (*eos < 0 || *eos >= c.vocab_size)) eos.reset();
  pr.ids = role_probe_ids(c, eos, &pr.R);
  if (pr.ids.empty()) return pr;
  pr.bos = static_cast<int>(pr.ids.size()) == 2 * pr.R + 1;
  const Pass pass = run_pass(model, pr.ids, {}, swap_qk);
  pr.own = prompt_role_scores(pass, c.n_head);
  const int H = c.n_head, T = pass.trace.T, b = pr.bos ? 1 : 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (int h = 0; h < H; ++h) {
      HeadView hv{pass.trace.layers[l], h, T, 0};
      double s = 0;
      for (int r = 0; r < pr.R; ++r) s += hv.w(b + pr.R + r, b + r + 1);
      pr.induction.push_back(s / pr.R);
    }
  return pr;
}

json opt_f64(const std::optional<double>& x) { return x ? f64(*x) : json(nullptr); }

json head_roles_json(const std::vector<RoleScores>& scores, const Probe& probe, int L, int H, const char* measured_on) {
  json heads = json::array();
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      RoleScores s = scores[static_cast<std::size_t>(l) * H + h];
      if (!probe.induction.empty()) s.induction = probe.induction[static_cast<std::size_t>(l) * H + h];
      const std::vector<std::string> labels = head_role_labels(s.previous_token, s.first_token, s.self, s.induction);
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"previous_token", opt_f64(s.previous_token)},
                       {"first_token", opt_f64(s.first_token)},
                       {"self", opt_f64(s.self)},
                       {"induction", opt_f64(s.induction)},
                       {"label", labels.empty() ? json(nullptr) : json(labels[0])},
                       {"labels", labels}});
    }
  json pj = nullptr;
  if (!probe.ids.empty()) pj = {{"seed", kRoleProbeSeed}, {"length", probe.R}, {"bos", probe.bos}, {"ids", probe.ids}};
  return {{"measured_on", measured_on},
          {"probe", std::move(pj)},
          {"thresholds",
           {{"induction", HeadRoleThresholds::induction},
            {"previous_token", HeadRoleThresholds::previous_token},
            {"first_token", HeadRoleThresholds::first_token},
            {"self", HeadRoleThresholds::self}}},
          {"heads", std::move(heads)}};
}

// ---------------------------------------------------------------------------------------------
// Generation: the tokens of jomoim::generate, each explained from the pass that predicted it.

// The last new token's weights over every key, [n_layer][n_head][Tk], float32 as computed.
json step_attention_json(const Pass& p, int H) {
  const int T = p.trace.T, Tk = p.trace.Tk;
  json layers = json::array();
  for (const AttentionTrace& at : p.trace.layers) {
    json heads = json::array();
    for (int h = 0; h < H; ++h) {
      const HeadView hv{at, h, T, 0, Tk};
      json row = json::array();
      for (int j = 0; j < Tk; ++j) row.push_back(f32(hv.w(T - 1, j)));
      heads.push_back(std::move(row));
    }
    layers.push_back(std::move(heads));
  }
  return layers;
}

// Fills "generation" and "steps" (docs/explain.md) for the prompt's ids.
void generation_json(const GptModel& model, const Tokenizer& tok, const std::vector<std::int32_t>& prompt,
                     const ExplainOptions& o, json& generation, json& steps) {
  const GptConfig& c = model.config();
  GenerateOptions go;
  go.max_tokens = o.generate;
  go.sampling.temperature = o.temperature;
  go.sampling.top_k = o.top_k;
  go.sampling.top_p = o.top_p;
  go.sampling.seed = o.seed ? *o.seed : fresh_seed();
  if (o.stop_at_eos) go.eos = tok.eos_id();
  const GenerateResult r = generate(model, prompt, go);
  // The replay: the same forward calls as the generation's (prefill, then one token at a time
  // through a cache of the same size), traced; tracing leaves the logits bitwise unchanged.
  const int T = static_cast<int>(prompt.size());
  KvCache cache(c, std::min(T + o.generate, c.n_positions));
  steps = json::array();
  for (std::size_t k = 0; k < r.ids.size(); ++k) {
    Pass p;
    const std::vector<std::int32_t> in = k == 0 ? prompt : std::vector<std::int32_t>{r.ids[k - 1]};
    const int row[1] = {static_cast<int>(in.size()) - 1};
    ForwardOptions fo;
    fo.trace = &p.trace;
    fo.residual_rows = row;
    p.logits = model.forward(in, cache, fo);
    p.probs = softmax(p.logits);
    const std::int32_t id = r.ids[k];
    const bool known = static_cast<std::size_t>(id) < tok.vocab_size();
    json st;
    st["step"] = k;
    st["position"] = T + static_cast<int>(k) - 1;
    st["id"] = id;
    st["text"] = token_text(tok, id);
    st["token"] = known ? json(tok.token_string(id)) : json(nullptr);
    st["probability"] = f64(p.probs[id]);
    st["logit"] = f32(p.logits[id]);
    st["prediction"] = prediction_json(p, tok, o.top);
    st["attention"] = step_attention_json(p, c.n_head);
    st["last_token_attention"] = last_token_attention_json(p, c.n_head);
    st["attribution"] = attribution_json(p, model, tok, id, std::nullopt);
    st["logit_lens"] = logit_lens_json(p, model, tok, o.top);
    steps.push_back(std::move(st));
  }
  generation = {{"ids", r.ids},
                {"text", text::to_valid_utf8(tok.decode(r.ids))},
                {"stop", stop_name(r.stop)},
                {"seed", go.sampling.seed},
                {"temperature", f32(o.temperature)},
                {"top_k", o.top_k},
                {"top_p", f32(o.top_p)},
                {"stop_at_eos", o.stop_at_eos}};
}

// A target or contrast text as its one token id.
std::int32_t one_token(const Tokenizer& tok, const std::string& str, int vocab, const char* what) {
  if (str.empty()) throw Error(std::string(what) + " is empty: it must be exactly one token");
  const std::vector<std::int32_t> ids = tok.encode(str);
  if (ids.size() != 1)
    throw Error(std::string(what) + " \"" + printable_text(str) + "\" encodes to " + std::to_string(ids.size()) +
                " tokens: it must be exactly one token");
  if (ids[0] < 0 || ids[0] >= vocab)
    throw Error(std::string(what) + " token id " + std::to_string(ids[0]) + " is outside the model's vocabulary");
  return ids[0];
}

void check_silence(const std::vector<int>& silenced, int T, const char* what) {
  for (int s : silenced)
    if (s < 0 || s >= T)
      throw Error("silence index " + std::to_string(s) + " is out of range: " + what + " has " + std::to_string(T) +
                  (T == 1 ? " token" : " tokens") + " (0.." + std::to_string(T - 1) + ")");
}

// Everything about one prompt (no "schema", "model", "options", "compare").
json explain_prompt(const GptModel& model, const Tokenizer& tok, const std::string& prompt, const ExplainOptions& o,
                    const std::vector<int>& silenced, const char* what, Pass* out_pass,
                    std::optional<std::int32_t> target, std::optional<std::int32_t> contrast, const Probe& probe) {
  const GptConfig& c = model.config();
  const std::vector<std::int32_t> ids = encode_prompt(tok, prompt, c.n_positions, c.vocab_size, what);
  const int T = static_cast<int>(ids.size());
  check_silence(silenced, T, what);
  const bool intervened = !silenced.empty() || o.swap_qk;
  Pass p = run_pass(model, ids, silenced, o.swap_qk, true);
  json j;
  j["prompt"] = text::to_valid_utf8(prompt);
  j["tokens"] = tokens_json(p, tok, c.n_embd);
  j["prediction"] = prediction_json(p, tok, o.top);
  if (intervened) {
    const Pass base = run_pass(model, ids, {}, false);
    j["baseline"] = prediction_json(base, tok, o.top);
    j["baseline"]["shift"] = shift_json(base, p, tok, o.top, "p_baseline", "p");
  } else {
    j["baseline"] = nullptr;
  }
  j["heads"] = heads_json(p, c.n_head);
  j["head_roles"] = head_roles_json(prompt_role_scores(p, c.n_head), probe, c.n_layer, c.n_head, "prompt");
  j["last_token_attention"] = last_token_attention_json(p, c.n_head);
  json layers = json::array();
  if (o.matrices) {
    const bool col = o.notation == ExplainNotation::col3b1b;
    for (int l = 0; l < c.n_layer; ++l) {
      if (o.layer && *o.layer != l) continue;
      json heads = json::array();
      for (int h = 0; h < c.n_head; ++h) {
        if (o.head && *o.head != h) continue;
        heads.push_back(head_json(p, l, h, c.head_dim(), col));
      }
      layers.push_back({{"layer", l}, {"heads", std::move(heads)}});
    }
  }
  j["layers"] = std::move(layers);
  const std::int32_t t = target ? *target : top_ids(p.logits, 1)[0];
  j["attribution"] = attribution_json(p, model, tok, t, contrast);
  j["logit_lens"] = logit_lens_json(p, model, tok, o.top);
  json generation = nullptr, steps = json::array();
  if (o.generate > 0) generation_json(model, tok, ids, o, generation, steps);
  j["generation"] = std::move(generation);
  j["steps"] = std::move(steps);
  if (out_pass) *out_pass = std::move(p);
  return j;
}

json model_json(const GptConfig& c, const std::string& name) {
  return {{"name", text::to_valid_utf8(name)},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_embd", c.n_embd},
          {"head_dim", c.head_dim()},
          {"n_positions", c.n_positions},
          {"vocab_size", c.vocab_size}};
}

}  // namespace

std::vector<std::string> head_role_labels(std::optional<double> previous_token, std::optional<double> first_token,
                                          std::optional<double> self, std::optional<double> induction) {
  std::vector<std::string> r;
  if (induction && *induction >= HeadRoleThresholds::induction) r.push_back("induction");
  if (previous_token && *previous_token >= HeadRoleThresholds::previous_token) r.push_back("previous_token");
  if (self && *self >= HeadRoleThresholds::self) r.push_back("self");
  if (first_token && *first_token >= HeadRoleThresholds::first_token) r.push_back("first_token");
  return r;
}

std::vector<std::int32_t> role_probe_ids(const GptConfig& config, std::optional<std::int32_t> bos, int* length) {
  const int b = bos ? 1 : 0;
  const int available = config.vocab_size - b;
  const int R = std::min({kRoleProbeLength, (config.n_positions - b) / 2, available});
  if (length) *length = R < 2 ? 0 : R;
  if (R < 2) return {};
  std::uint64_t state = kRoleProbeSeed;
  auto next = [&state] {  // SplitMix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<std::int32_t> half;
  std::set<std::int32_t> seen;
  while (static_cast<int>(half.size()) < R) {
    const auto id = static_cast<std::int32_t>(next() % static_cast<std::uint64_t>(config.vocab_size));
    if ((bos && id == *bos) || !seen.insert(id).second) continue;
    half.push_back(id);
  }
  std::vector<std::int32_t> ids;
  if (bos) ids.push_back(*bos);
  ids.insert(ids.end(), half.begin(), half.end());
  ids.insert(ids.end(), half.begin(), half.end());
  return ids;
}

nlohmann::json head_roles(const GptModel& model, const Tokenizer& tokenizer, const std::optional<std::string>& prompt,
                          bool swap_qk, const std::string& model_name) {
  const GptConfig& c = model.config();
  std::vector<std::int32_t> ids;
  if (prompt) ids = encode_prompt(tokenizer, *prompt, c.n_positions, c.vocab_size, "the prompt");
  const Probe probe = run_probe(model, tokenizer, swap_qk);
  json j;
  j["schema"] = "jomoim.heads/1";
  j["model"] = model_json(c, model_name);
  j["prompt"] = prompt ? json(text::to_valid_utf8(*prompt)) : json(nullptr);
  j["swap_qk"] = swap_qk;
  if (prompt) {
    const Pass p = run_pass(model, ids, {}, swap_qk);
    j["head_roles"] = head_roles_json(prompt_role_scores(p, c.n_head), probe, c.n_layer, c.n_head, "prompt");
  } else {
    // The probe is the prompt; without a probe (a tiny context) only null scores remain.
    const std::vector<RoleScores> scores =
        probe.ids.empty() ? std::vector<RoleScores>(static_cast<std::size_t>(c.n_layer) * c.n_head) : probe.own;
    j["head_roles"] = head_roles_json(scores, probe, c.n_layer, c.n_head, "probe");
  }
  return j;
}

nlohmann::json explain(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                       const ExplainOptions& options) {
  const GptConfig& c = model.config();
  if (options.layer && (*options.layer < 0 || *options.layer >= c.n_layer))
    throw Error("layer " + std::to_string(*options.layer) + " is out of range: the model has " +
                std::to_string(c.n_layer) + (c.n_layer == 1 ? " layer" : " layers") + " (0.." +
                std::to_string(c.n_layer - 1) + ")");
  if (options.head && (*options.head < 0 || *options.head >= c.n_head))
    throw Error("head " + std::to_string(*options.head) + " is out of range: the model has " +
                std::to_string(c.n_head) + (c.n_head == 1 ? " head" : " heads") + " per layer (0.." +
                std::to_string(c.n_head - 1) + ")");
  if (options.top < 1) throw Error("top must be at least 1, got " + std::to_string(options.top));
  if (options.contrast && !options.target) throw Error("contrast needs a target");
  std::optional<std::int32_t> target, contrast;
  if (options.target) target = one_token(tokenizer, *options.target, c.vocab_size, "target");
  if (options.contrast) {
    contrast = one_token(tokenizer, *options.contrast, c.vocab_size, "contrast");
    if (*contrast == *target) throw Error("contrast is the same token as the target");
  }
  if (options.generate < 0 || options.generate > kMaxExplainSteps)
    throw Error("generate must be in 0.." + std::to_string(kMaxExplainSteps) + " (new tokens to explain), got " +
                std::to_string(options.generate));
  if (options.generate > 0) {
    if (options.compare) throw Error("generate cannot be combined with compare");
    if (!options.silence.empty() || options.swap_qk)
      throw Error("generate cannot be combined with silence or swap_qk: the generation is the plain model's");
    SamplingOptions so;
    so.temperature = options.temperature;
    so.top_k = options.top_k;
    so.top_p = options.top_p;
    so.validate();
  }
  std::vector<int> silenced = options.silence;
  std::sort(silenced.begin(), silenced.end());
  silenced.erase(std::unique(silenced.begin(), silenced.end()), silenced.end());

  const bool col = options.notation == ExplainNotation::col3b1b;
  json j;
  j["schema"] = "jomoim.explain/1";
  j["model"] = model_json(c, options.model_name);
  j["notation"] = notation_name(options.notation);
  j["formula"] = col ? "V softmax(K^T Q / sqrt(d))" : "softmax(Q K^T / sqrt(d)) V";
  j["softmax_over"] = col ? "columns" : "rows";
  j["options"] = {{"layer", options.layer ? json(*options.layer) : json(nullptr)},
                  {"head", options.head ? json(*options.head) : json(nullptr)},
                  {"silence", silenced},
                  {"swap_qk", options.swap_qk},
                  {"top", options.top},
                  {"matrices", options.matrices},
                  {"target", options.target ? json(text::to_valid_utf8(*options.target)) : json(nullptr)},
                  {"contrast", options.contrast ? json(text::to_valid_utf8(*options.contrast)) : json(nullptr)},
                  {"generate", options.generate}};
  // The role probe is the model's alone: one pass for both prompts (with swap_qk, not silenced).
  const Probe probe = run_probe(model, tokenizer, options.swap_qk);
  Pass main_pass;
  json body =
      explain_prompt(model, tokenizer, prompt, options, silenced, "the prompt", &main_pass, target, contrast, probe);
  for (auto& [k, v] : body.items()) j[k] = std::move(v);
  if (options.compare) {
    Pass other;
    json cj = explain_prompt(model, tokenizer, *options.compare, options, silenced, "the compare prompt", &other,
                             target, contrast, probe);
    cj["shift"] = shift_json(main_pass, other, tokenizer, options.top, "p", "p_compare");
    cj.erase("generation");  // generate is refused with compare
    cj.erase("steps");
    j["compare"] = std::move(cj);
  } else {
    j["compare"] = nullptr;
  }
  return j;
}

}  // namespace jomoim
