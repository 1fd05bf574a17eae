// The explorer's computation: traced forward passes turned into the typed Explanation, and
// that into the JSON of docs/explain.md (at the edge: to_json).
//
// Everything in the result is read from the ForwardTrace of the real pass (Q, K, V, softmax
// weights, per-head outputs, embeddings, the residual stream), from its KV cache (values) or
// from its logits; the arithmetic done here is presentation: norms, entropies, means, the raw
// score Q_i . K_j of a kept head (float64 dot of the traced q and k), the scaled score, the
// attribution and lens readouts, and transposes for the 3Blue1Brown notation. It is not a
// second implementation of attention (tests compare it with the engine's float64 reference).
// The passes keep what was asked only: summaries are taken layer by layer as the weights are
// computed (TraceSelection::on_weights), matrices only for the selected heads.
#include "jomoim/explain/explain.hpp"
#include "jomoim/text/utf8.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
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

std::string token_text(const Tokenizer& tok, std::int32_t id) {
  // Models may have more ids than the tokenizer (padded vocabularies): name those by number.
  if (id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size()) return printable_text(tok.token_bytes(id));
  return "<" + std::to_string(id) + ">";
}

std::optional<std::string> token_spelling(const Tokenizer& tok, std::int32_t id) {
  if (id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size()) return tok.token_string(id);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The passes. A traced pass summarises every head from each layer's weights while it runs
// (HeadStats, through TraceSelection::on_weights) and keeps only the selected heads' matrices.

struct HeadStats {
  double focus = 0, entropy = 0;  // means over the queries (query 0 left out when T > 1)
  int attends = -1;               // the key the last token weighs most (lowest on ties), -1: none
  double weight = 0;
  double prev = 0, first = 0, self = 0;  // means over the queries i >= 1 (T > 1)
  double induction = 0;                  // on the role probe only
};

struct PassRequest {
  bool trace = true;       // false: a plain pass (logits only)
  bool residuals = false;  // the last row's residual stream, attention and MLP outputs
  bool matrices = false;   // keep the selected heads' matrices
  std::optional<int> layer, head;
  int probe_R = 0, probe_b = 0;  // > 0: this is the role probe; measure induction
};

struct Pass {
  std::vector<std::int32_t> ids;
  std::vector<int> silenced;  // sorted, unique token indices
  bool swap_qk = false;
  std::unique_ptr<KvCache> cache;  // the pass's keys and values (the attribution reads the values)
  ForwardTrace trace;
  std::vector<HeadStats> stats;  // [layer * H + head], traced passes
  std::vector<float> logits;     // [vocab] after the last token
  std::vector<double> probs;     // softmax(logits) in float64
};

// Fills p.stats[l * H + h] from one layer's weights [H, T, Tk].
void summarise_layer(Pass& p, int l, int H, const float* w, const PassRequest& rq) {
  const int T = p.trace.T, Tk = p.trace.Tk, first = T > 1 ? 1 : 0;
  for (int h = 0; h < H; ++h) {
    const float* W = w + static_cast<std::size_t>(h) * T * Tk;
    auto at = [&](int i, int j) { return static_cast<double>(W[static_cast<std::size_t>(i) * Tk + j]); };
    HeadStats& s = p.stats[static_cast<std::size_t>(l) * H + h];
    const int past = Tk - T;
    double focus = 0, ent = 0;
    for (int i = first; i < T; ++i) {
      double mx = 0, e = 0;
      for (int j = 0; j <= past + i; ++j) {
        const double x = at(i, j);
        mx = std::max(mx, x);
        if (x > 0) e -= x * std::log(x);
      }
      focus += mx;
      ent += e;
    }
    s.focus = focus / (T - first);
    s.entropy = ent / (T - first);
    for (int j = 0; j < Tk; ++j)
      if (at(T - 1, j) > s.weight) {
        s.weight = at(T - 1, j);
        s.attends = j;
      }
    if (T >= 2) {
      double prev = 0, f = 0, self = 0;
      for (int i = 1; i < T; ++i) {
        prev += at(i, past + i - 1);
        f += at(i, 0);
        self += at(i, past + i);
      }
      s.prev = prev / (T - 1);
      s.first = f / (T - 1);
      s.self = self / (T - 1);
    }
    if (rq.probe_R > 0) {
      const int R = rq.probe_R, b = rq.probe_b;
      double sum = 0;
      for (int r = 0; r < R; ++r) sum += at(b + R + r, b + r + 1);
      s.induction = sum / R;
    }
  }
}

// Runs ids through the model at positions past.. of `cache` (a fresh cache of ids.size() when
// null), recording what rq asks.
Pass run_pass(const GptModel& model, const std::vector<std::int32_t>& ids, const std::vector<int>& silenced,
              bool swap_qk, const PassRequest& rq, KvCache* shared_cache = nullptr) {
  const GptConfig& c = model.config();
  Pass p;
  p.ids = ids;
  p.silenced = silenced;
  p.swap_qk = swap_qk;
  KvCache* cache = shared_cache;
  if (!cache) {
    p.cache = std::make_unique<KvCache>(model.make_cache(static_cast<int>(ids.size())));
    cache = p.cache.get();
  }
  ForwardOptions fo;
  fo.silenced = p.silenced;
  fo.swap_qk = swap_qk;
  TraceSelection sel;
  const int last_row[1] = {static_cast<int>(ids.size()) - 1};
  if (rq.trace) {
    const int H = c.n_head;
    p.stats.assign(static_cast<std::size_t>(c.n_layer) * H, {});
    sel.matrices = rq.matrices;
    if (rq.matrices && (rq.layer || rq.head)) {
      sel.heads.assign(static_cast<std::size_t>(c.n_layer) * H, 0);
      for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < H; ++h)
          sel.heads[static_cast<std::size_t>(l) * H + h] = (!rq.layer || *rq.layer == l) && (!rq.head || *rq.head == h);
    }
    // The pass fills p.trace.T and Tk before the first layer's weights arrive.
    sel.on_weights = [&p, &rq, H](int l, const float* w) { summarise_layer(p, l, H, w, rq); };
    fo.trace = &p.trace;
    fo.trace_select = &sel;
    if (rq.residuals) fo.residual_rows = last_row;
  }
  p.logits = model.forward(ids, *cache, fo);
  p.probs = softmax(p.logits);
  return p;
}

ExplainPrediction prediction_of(const Pass& p, const Tokenizer& tok, int top) {
  ExplainPrediction r;
  const int n = std::min<int>(top, static_cast<int>(p.logits.size()));
  for (auto id : top_ids(p.logits, n)) r.top.push_back({id, token_text(tok, id), p.probs[id], p.logits[id]});
  for (double q : p.probs)
    if (q > 0) r.entropy -= q * std::log(q);
  return r;
}

// The ids in either top list, with their probabilities in both passes, largest |delta| first.
std::vector<ExplainShift> shift_of(const Pass& a, const Pass& b, const Tokenizer& tok, int top) {
  const int n = std::min<int>(top, static_cast<int>(a.logits.size()));
  std::set<std::int32_t> ids;
  for (auto id : top_ids(a.logits, n)) ids.insert(id);
  for (auto id : top_ids(b.logits, n)) ids.insert(id);
  std::vector<std::int32_t> order(ids.begin(), ids.end());
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    return std::abs(b.probs[x] - a.probs[x]) > std::abs(b.probs[y] - a.probs[y]);
  });
  std::vector<ExplainShift> s;
  for (auto id : order) s.push_back({id, token_text(tok, id), a.probs[id], b.probs[id], b.probs[id] - a.probs[id]});
  return s;
}

std::vector<ExplainToken> tokens_of(const Pass& p, const Tokenizer& tok, int C) {
  std::vector<ExplainToken> t;
  const ForwardTrace& tr = p.trace;
  std::vector<float> e(C);
  for (int i = 0; i < tr.T; ++i) {
    const float* te = tr.token_embedding.data() + static_cast<std::size_t>(i) * C;
    const float* pe = tr.position_embedding.data() + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) e[c] = te[c] + pe[c];  // the sum the model feeds its first layer
    const std::int32_t id = p.ids[i];
    t.push_back({i, id, token_text(tok, id), token_spelling(tok, id),
                 std::binary_search(p.silenced.begin(), p.silenced.end(), i), norm(te, C), norm(pe, C),
                 norm(e.data(), C)});
  }
  return t;
}

// The heads summary, most focused first (ties keep (layer, head) order).
std::vector<ExplainHeadSummary> heads_of(const Pass& p, int H) {
  std::vector<ExplainHeadSummary> rows;
  for (std::size_t n = 0; n < p.stats.size(); ++n) {
    const HeadStats& s = p.stats[n];
    rows.push_back({static_cast<int>(n) / H, static_cast<int>(n) % H, s.focus, s.entropy,
                    s.attends >= 0 ? std::optional<int>(s.attends) : std::nullopt, s.weight});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ExplainHeadSummary& a, const ExplainHeadSummary& b) { return a.focus > b.focus; });
  return rows;
}

// Whether query i hears key j: causal (j <= i) and j not silenced.
bool audible(const std::vector<int>& silenced, int i, int j) {
  return j <= i && !std::binary_search(silenced.begin(), silenced.end(), j);
}

std::vector<ExplainHeadMatrices> matrices_of(const Pass& p, int D) {
  std::vector<ExplainHeadMatrices> out;
  const int T = p.trace.T;
  const std::size_t TD = static_cast<std::size_t>(T) * D, TT = static_cast<std::size_t>(T) * T;
  for (int l = 0; l < static_cast<int>(p.trace.layers.size()); ++l) {
    const AttentionTrace& at = p.trace.layers[l];
    for (std::size_t n = 0; n < at.heads.size(); ++n) {
      ExplainHeadMatrices m;
      m.layer = l;
      m.head = at.heads[n];
      m.T = T;
      m.D = D;
      m.scale = at.scale;
      m.q.assign(at.q.begin() + n * TD, at.q.begin() + (n + 1) * TD);
      m.k.assign(at.k.begin() + n * TD, at.k.begin() + (n + 1) * TD);
      m.v.assign(at.v.begin() + n * TD, at.v.begin() + (n + 1) * TD);
      m.out.assign(at.out.begin() + n * TD, at.out.begin() + (n + 1) * TD);
      m.weights.assign(at.weights.begin() + n * TT, at.weights.begin() + (n + 1) * TT);
      m.scores.resize(TT);
      m.mask.resize(TT);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          const float* qi = m.q.data() + static_cast<std::size_t>(i) * D;
          const float* kj = m.k.data() + static_cast<std::size_t>(j) * D;
          double s = 0;
          for (int d = 0; d < D; ++d) s += static_cast<double>(qi[d]) * kj[d];
          m.scores[static_cast<std::size_t>(i) * T + j] = static_cast<float>(s);
          m.mask[static_cast<std::size_t>(i) * T + j] = audible(p.silenced, i, j);
        }
      m.value_norms.resize(T);
      for (int j = 0; j < T; ++j) m.value_norms[j] = norm(m.v.data() + static_cast<std::size_t>(j) * D, D);
      out.push_back(std::move(m));
    }
  }
  return out;
}

// Mean over heads of the last token's weights, per layer.
ExplainLastTokenAttention last_token_attention_of(const Pass& p, int H) {
  const int Tk = p.trace.Tk;
  ExplainLastTokenAttention r;
  r.index = Tk - 1;
  r.keys = Tk;
  for (const AttentionTrace& at : p.trace.layers)
    for (int k = 0; k < Tk; ++k) {
      double s = 0;
      for (int h = 0; h < H; ++h) s += at.last_weights[static_cast<std::size_t>(h) * Tk + k];
      r.mean_over_heads.push_back(s / H);
    }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Direct-logit attribution and the logit lens, in float64 from the trace, the pass's KV cache
// (the values) and the weights.

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
  const LayerNormParams& ln = model.float_params().ln_f;
  std::vector<double> h(C);
  for (int i = 0; i < C; ++i) h[i] = (x[i] - mean) / sigma * ln.weight[i] + ln.bias[i];
  return h;
}

std::vector<ExplainLensEntry> logit_lens_of(const Pass& p, const GptModel& model, const Tokenizer& tok, int top) {
  const GptConfig& c = model.config();
  const int C = c.n_embd, V = c.vocab_size;
  const float* wte = model.float_params().wte;
  std::vector<ExplainLensEntry> lens;
  std::vector<double> logits(V);
  std::vector<std::int32_t> ids(V);
  for (int l = 0; l <= c.n_layer; ++l) {
    const std::vector<double> h = final_norm(model, p.trace.residual.data() + static_cast<std::size_t>(l) * C);
    // Four vocabulary rows at a time: four independent float64 chains instead of one (3-4x
    // faster: the chain's add latency was the limit), each row's sum still in order of i, so
    // the logits are the same bits as one row at a time.
    int v = 0;
    for (; v + 4 <= V; v += 4) {
      const float* r0 = wte + static_cast<std::size_t>(v) * C;
      const float *r1 = r0 + C, *r2 = r1 + C, *r3 = r2 + C;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int i = 0; i < C; ++i) {
        s0 += h[i] * r0[i];
        s1 += h[i] * r1[i];
        s2 += h[i] * r2[i];
        s3 += h[i] * r3[i];
      }
      logits[v] = s0, logits[v + 1] = s1, logits[v + 2] = s2, logits[v + 3] = s3;
    }
    for (; v < V; ++v) {
      const float* row = wte + static_cast<std::size_t>(v) * C;
      double s = 0;
      for (int i = 0; i < C; ++i) s += h[i] * row[i];
      logits[v] = s;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double x : logits) z += std::exp(x - mx);
    const int n = std::min(top, V);
    for (int v = 0; v < V; ++v) ids[v] = v;
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ExplainLensEntry e;
    e.layer = l - 1;
    for (int r = 0; r < n; ++r)
      e.top.push_back({ids[r], token_text(tok, ids[r]), std::exp(logits[ids[r]] - mx) / z, logits[ids[r]]});
    lens.push_back(std::move(e));
  }
  return lens;
}

// logit(target) [- logit(contrast)] as a sum over the parts that wrote the last position's
// residual stream, the final LayerNorm's scale frozen at this pass's value (see docs/explain.md).
// `cache`: the pass's KV cache (the values of every visible key).
ExplainAttribution attribution_of(const Pass& p, const KvCache& cache, const GptModel& model, const Tokenizer& tok,
                                  std::int32_t target, std::optional<std::int32_t> contrast) {
  const GptConfig& c = model.config();
  const GptParams& w = model.float_params();
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
  ExplainAttribution a;
  const std::size_t last = static_cast<std::size_t>(T - 1);
  a.token_embedding = dot(p.trace.token_embedding.data() + last * C);
  a.position_embedding = dot(p.trace.position_embedding.data() + last * C);
  double sum = a.token_embedding + a.position_embedding, biases = beta_term;
  std::vector<double> g(D);
  std::vector<float> values_buf(static_cast<std::size_t>(Tk) * C);
  for (int l = 0; l < L; ++l) {
    const BlockParams& b = w.blocks[l];
    const AttentionTrace& at = p.trace.layers[l];
    // [Tk, C]: head h's V_j at j * C + h * D, as attention read them (any cache format)
    cache.read_rows(l, true, 0, Tk, values_buf.data());
    const float* values = values_buf.data();
    for (int h = 0; h < H; ++h) {
      // g = W_O[head h's rows] uc: what one unit of the head's output adds to the quantity.
      for (int d = 0; d < D; ++d) {
        const float* row = b.c_proj.weight + static_cast<std::size_t>(h * D + d) * C;
        double s = 0;
        for (int i = 0; i < C; ++i) s += row[i] * uc[i];
        g[d] = s;
      }
      ExplainHeadAttribution ha;
      ha.layer = l;
      ha.head = h;
      for (int j = 0; j < Tk; ++j) {
        const float* v = values + static_cast<std::size_t>(j) * C + h * D;
        double s = 0;
        for (int d = 0; d < D; ++d) s += v[d] * g[d];
        s *= at.last_weights[static_cast<std::size_t>(h) * Tk + j];
        ha.total += s;
        ha.by_source.push_back(s);
      }
      sum += ha.total;
      a.heads.push_back(std::move(ha));
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
    a.mlps.push_back(m);
  }
  a.biases = biases;
  a.sum = sum + biases;
  a.target = {target, token_text(tok, target), p.logits[target]};
  if (contrast) a.contrast = ExplainLogit{*contrast, token_text(tok, *contrast), p.logits[*contrast]};
  return a;
}

// ---------------------------------------------------------------------------------------------
// Head roles (explain.hpp, docs/explain.md "head_roles").

// The probe and its scores ([layer * H + head]; empty without a probe): `own` keeps the
// probe's pass statistics (previous-token, first-token and self on the probe itself).
struct Probe {
  std::vector<std::int32_t> ids;
  int R = 0;
  bool bos = false;
  std::vector<HeadStats> own;
};

Probe run_probe(const GptModel& model, const Tokenizer& tok, bool swap_qk) {
  const GptConfig& c = model.config();
  Probe pr;
  std::optional<std::int32_t> eos = tok.eos_id();
  if (eos && (*eos < 0 || *eos >= c.vocab_size)) eos.reset();
  pr.ids = role_probe_ids(c, eos, &pr.R);
  if (pr.ids.empty()) return pr;
  pr.bos = static_cast<int>(pr.ids.size()) == 2 * pr.R + 1;
  PassRequest rq;
  rq.probe_R = pr.R;
  rq.probe_b = pr.bos ? 1 : 0;
  pr.own = run_pass(model, pr.ids, {}, swap_qk, rq).stats;
  return pr;
}

// stats: the pass whose previous-token, first-token and self scores are reported (empty or a
// one-token pass: null scores); induction from the probe.
ExplainHeadRoles head_roles_of(const std::vector<HeadStats>& stats, bool measurable, const Probe& probe, int L, int H,
                               const char* measured_on) {
  ExplainHeadRoles r;
  r.measured_on = measured_on;
  r.has_probe = !probe.ids.empty();
  r.probe_length = probe.R;
  r.probe_bos = probe.bos;
  r.probe_ids = probe.ids;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      const std::size_t n = static_cast<std::size_t>(l) * H + h;
      ExplainRoleScores s;
      s.layer = l;
      s.head = h;
      if (measurable && n < stats.size()) {
        s.previous_token = stats[n].prev;
        s.first_token = stats[n].first;
        s.self = stats[n].self;
      }
      if (!probe.own.empty()) s.induction = probe.own[n].induction;
      s.labels = head_role_labels(s.previous_token, s.first_token, s.self, s.induction);
      r.heads.push_back(std::move(s));
    }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Generation: the tokens of jomoim::generate, each explained from the pass that predicted it.

void generation_of(const GptModel& model, const Tokenizer& tok, const std::vector<std::int32_t>& prompt,
                   const ExplainOptions& o, ExplainPrompt& out) {
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
  KvCache cache = model.make_cache(std::min(T + o.generate, c.n_positions));
  PassRequest rq;
  rq.residuals = true;
  for (std::size_t k = 0; k < r.ids.size(); ++k) {
    const std::vector<std::int32_t> in = k == 0 ? prompt : std::vector<std::int32_t>{r.ids[k - 1]};
    const Pass p = run_pass(model, in, {}, false, rq, &cache);
    const std::int32_t id = r.ids[k];
    ExplainStep st;
    st.step = static_cast<int>(k);
    st.position = T + static_cast<int>(k) - 1;
    st.id = id;
    st.text = token_text(tok, id);
    st.token = token_spelling(tok, id);
    st.probability = p.probs[id];
    st.logit = p.logits[id];
    st.prediction = prediction_of(p, tok, o.top);
    st.keys = p.trace.Tk;
    for (const AttentionTrace& at : p.trace.layers)
      st.attention.insert(st.attention.end(), at.last_weights.begin(), at.last_weights.end());
    st.last_token_attention = last_token_attention_of(p, c.n_head);
    st.attribution = attribution_of(p, cache, model, tok, id, std::nullopt);
    st.logit_lens = logit_lens_of(p, model, tok, o.top);
    out.steps.push_back(std::move(st));
  }
  ExplainGeneration g;
  g.ids = r.ids;
  g.text = text::to_valid_utf8(tok.decode(r.ids));
  g.stop = stop_name(r.stop);
  g.seed = go.sampling.seed;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.stop_at_eos = o.stop_at_eos;
  out.generation = std::move(g);
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

// Everything about one prompt. out_pass (if given) receives the traced pass.
ExplainPrompt explain_prompt(const GptModel& model, const Tokenizer& tok, const std::string& prompt,
                             const ExplainOptions& o, const std::vector<int>& silenced, const char* what,
                             Pass* out_pass, std::optional<std::int32_t> target, std::optional<std::int32_t> contrast,
                             const Probe& probe) {
  const GptConfig& c = model.config();
  const std::vector<std::int32_t> ids = encode_prompt(tok, prompt, c.n_positions, c.vocab_size, what);
  const int T = static_cast<int>(ids.size());
  check_silence(silenced, T, what);
  const bool intervened = !silenced.empty() || o.swap_qk;
  PassRequest rq;
  rq.residuals = true;
  rq.matrices = o.matrices;
  rq.layer = o.layer;
  rq.head = o.head;
  Pass p = run_pass(model, ids, silenced, o.swap_qk, rq);
  ExplainPrompt e;
  e.prompt = text::to_valid_utf8(prompt);
  e.silenced = silenced;
  e.tokens = tokens_of(p, tok, c.n_embd);
  e.prediction = prediction_of(p, tok, o.top);
  if (intervened) {
    PassRequest plain;
    plain.trace = false;
    const Pass base = run_pass(model, ids, {}, false, plain);
    e.baseline = prediction_of(base, tok, o.top);
    e.baseline_shift = shift_of(base, p, tok, o.top);
  }
  e.heads = heads_of(p, c.n_head);
  e.head_roles = head_roles_of(p.stats, T >= 2, probe, c.n_layer, c.n_head, "prompt");
  e.last_token_attention = last_token_attention_of(p, c.n_head);
  e.layers = matrices_of(p, c.head_dim());
  const std::int32_t t = target ? *target : top_ids(p.logits, 1)[0];
  e.attribution = attribution_of(p, *p.cache, model, tok, t, contrast);
  e.logit_lens = logit_lens_of(p, model, tok, o.top);
  if (o.generate > 0) generation_of(model, tok, ids, o, e);
  if (out_pass) *out_pass = std::move(p);
  return e;
}

// ---------------------------------------------------------------------------------------------
// JSON, at the edge.

json opt_f64(const std::optional<double>& x) { return x ? f64(*x) : json(nullptr); }

json model_json(const GptConfig& c, const std::string& name, KvFormat kv, WeightFormat weights,
                MatmulPrecision matmul) {
  return {{"name", text::to_valid_utf8(name)},
          {"kv_cache", kv_format_name(kv)},
          {"weights", weight_format_name(weights)},
          {"matmul", matmul_precision_name(matmul)},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_embd", c.n_embd},
          {"head_dim", c.head_dim()},
          {"n_positions", c.n_positions},
          {"vocab_size", c.vocab_size}};
}

json to_json(const ExplainPrediction& p) {
  json top = json::array();
  for (const ExplainCandidate& t : p.top)
    top.push_back({{"id", t.id}, {"text", t.text}, {"probability", f64(t.probability)}, {"logit", f32(t.logit)}});
  return {{"top", std::move(top)}, {"entropy", f64(p.entropy)}};
}

json to_json(const std::vector<ExplainShift>& s, const char* pa, const char* pb) {
  json j = json::array();
  for (const ExplainShift& x : s)
    j.push_back({{"id", x.id}, {"text", x.text}, {pa, f64(x.a)}, {pb, f64(x.b)}, {"delta", f64(x.delta)}});
  return j;
}

json to_json(const std::vector<ExplainToken>& tokens) {
  json t = json::array();
  for (const ExplainToken& x : tokens)
    t.push_back({{"index", x.index},
                 {"id", x.id},
                 {"text", x.text},
                 {"token", x.token ? json(*x.token) : json(nullptr)},
                 {"silenced", x.silenced},
                 {"token_embedding_norm", f64(x.token_embedding_norm)},
                 {"position_embedding_norm", f64(x.position_embedding_norm)},
                 {"embedding_norm", f64(x.embedding_norm)}});
  return t;
}

json to_json(const std::vector<ExplainHeadSummary>& heads) {
  json j = json::array();
  for (const ExplainHeadSummary& r : heads)
    j.push_back({{"layer", r.layer},
                 {"head", r.head},
                 {"focus", f64(r.focus)},
                 {"entropy", f64(r.entropy)},
                 {"last_token_attends_to", r.last_token_attends_to ? json(*r.last_token_attends_to) : json(nullptr)},
                 {"last_token_weight", f64(r.last_token_weight)}});
  return j;
}

// rows x cols matrix from f(r, c); transposed, the element at [r][c] is f(c, r).
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

json head_json(const ExplainHeadMatrices& m, bool col, bool arrays) {
  const int T = m.T, D = m.D;
  auto at = [T](const std::vector<float>& a, int i, int j) { return a[static_cast<std::size_t>(i) * T + j]; };
  auto row = [D](const std::vector<float>& a, int t, int d) { return a[static_cast<std::size_t>(t) * D + d]; };
  auto heard = [&](int i, int j) { return m.mask[static_cast<std::size_t>(i) * T + j] != 0; };
  json j;
  j["head"] = m.head;
  j["scale"] = f32(m.scale);
  j["layout"] = col ? json{{"q", "[dim, token]"},       {"k", "[dim, token]"},      {"v", "[dim, token]"},
                           {"scores", "[key, query]"},  {"scaled", "[key, query]"}, {"mask", "[key, query]"},
                           {"weights", "[key, query]"}, {"out", "[dim, token]"}}
                    : json{{"q", "[token, dim]"},       {"k", "[token, dim]"},      {"v", "[token, dim]"},
                           {"scores", "[query, key]"},  {"scaled", "[query, key]"}, {"mask", "[query, key]"},
                           {"weights", "[query, key]"}, {"out", "[token, dim]"}};
  if (!arrays) {
    j["last_token"] = {{"index", T - 1}};
    return j;
  }
  j["q"] = matrix(T, D, col, [&](int t, int d) { return f32(row(m.q, t, d)); });
  j["k"] = matrix(T, D, col, [&](int t, int d) { return f32(row(m.k, t, d)); });
  j["v"] = matrix(T, D, col, [&](int t, int d) { return f32(row(m.v, t, d)); });
  j["scores"] = matrix(T, T, col, [&](int i, int k) { return heard(i, k) ? f32(at(m.scores, i, k)) : json(nullptr); });
  j["scaled"] =
      matrix(T, T, col, [&](int i, int k) { return heard(i, k) ? f32(at(m.scores, i, k) * m.scale) : json(nullptr); });
  j["mask"] = matrix(T, T, col, [&](int i, int k) { return json(heard(i, k)); });
  j["weights"] = matrix(T, T, col, [&](int i, int k) { return f32(at(m.weights, i, k)); });
  j["out"] = matrix(T, D, col, [&](int t, int d) { return f32(row(m.out, t, d)); });
  json lw = json::array(), vn = json::array(), cn = json::array();
  for (int k = 0; k < T; ++k) {
    const float w = at(m.weights, T - 1, k);
    lw.push_back(f32(w));
    vn.push_back(f64(m.value_norms[k]));
    cn.push_back(f64(std::abs(static_cast<double>(w)) * m.value_norms[k]));  // ||w V|| = |w| ||V||
  }
  j["last_token"] = {{"index", T - 1}, {"weights", lw}, {"value_norms", vn}, {"contribution_norms", cn}};
  return j;
}

json to_json(const ExplainLastTokenAttention& a, int n_layer, bool arrays) {
  json j = {{"index", a.index}};
  if (!arrays) return j;
  json m = json::array();
  for (int l = 0; l < n_layer; ++l) {
    json row = json::array();
    for (int k = 0; k < a.keys; ++k) row.push_back(f64(a.mean_over_heads[static_cast<std::size_t>(l) * a.keys + k]));
    m.push_back(std::move(row));
  }
  j["mean_over_heads"] = std::move(m);
  return j;
}

json to_json(const ExplainAttribution& a) {
  auto logit = [](const ExplainLogit& t) { return json{{"id", t.id}, {"text", t.text}, {"logit", f32(t.logit)}}; };
  json heads = json::array(), mlps = json::array();
  for (const ExplainHeadAttribution& h : a.heads) {
    json by = json::array();
    for (double x : h.by_source) by.push_back(f64(x));
    heads.push_back({{"layer", h.layer}, {"head", h.head}, {"total", f64(h.total)}, {"by_source", std::move(by)}});
  }
  for (double m : a.mlps) mlps.push_back(f64(m));
  json j;
  j["target"] = logit(a.target);
  j["contrast"] = a.contrast ? logit(*a.contrast) : json(nullptr);
  j["embeddings"] = {{"token", f64(a.token_embedding)}, {"position", f64(a.position_embedding)}};
  j["heads"] = std::move(heads);
  j["mlps"] = std::move(mlps);
  j["biases"] = f64(a.biases);
  j["sum"] = f64(a.sum);
  j["note"] =
      "Direct-logit attribution: the final LayerNorm's scale is frozen at this pass's value, which makes the "
      "logit a sum of the parts.";
  return j;
}

json to_json(const std::vector<ExplainLensEntry>& lens) {
  json j = json::array();
  for (const ExplainLensEntry& e : lens) {
    json t = json::array();
    for (const ExplainLensCandidate& c : e.top)
      t.push_back({{"id", c.id}, {"text", c.text}, {"probability", f64(c.probability)}, {"logit", f64(c.logit)}});
    j.push_back({{"after", e.layer < 0 ? std::string("embeddings") : "layer " + std::to_string(e.layer)},
                 {"layer", e.layer},
                 {"top", std::move(t)}});
  }
  return j;
}

json to_json(const ExplainHeadRoles& r) {
  json heads = json::array();
  for (const ExplainRoleScores& s : r.heads)
    heads.push_back({{"layer", s.layer},
                     {"head", s.head},
                     {"previous_token", opt_f64(s.previous_token)},
                     {"first_token", opt_f64(s.first_token)},
                     {"self", opt_f64(s.self)},
                     {"induction", opt_f64(s.induction)},
                     {"label", s.labels.empty() ? json(nullptr) : json(s.labels[0])},
                     {"labels", s.labels}});
  json pj = nullptr;
  if (r.has_probe)
    pj = {{"seed", kRoleProbeSeed}, {"length", r.probe_length}, {"bos", r.probe_bos}, {"ids", r.probe_ids}};
  return {{"measured_on", r.measured_on},
          {"probe", std::move(pj)},
          {"thresholds",
           {{"induction", HeadRoleThresholds::induction},
            {"previous_token", HeadRoleThresholds::previous_token},
            {"first_token", HeadRoleThresholds::first_token},
            {"self", HeadRoleThresholds::self}}},
          {"heads", std::move(heads)}};
}

json to_json(const ExplainStep& st, const GptConfig& c, bool arrays) {
  json j;
  j["step"] = st.step;
  j["position"] = st.position;
  j["id"] = st.id;
  j["text"] = st.text;
  j["token"] = st.token ? json(*st.token) : json(nullptr);
  j["probability"] = f64(st.probability);
  j["logit"] = f32(st.logit);
  j["prediction"] = to_json(st.prediction);
  if (arrays) {
    json layers = json::array();
    for (int l = 0; l < c.n_layer; ++l) {
      json heads = json::array();
      for (int h = 0; h < c.n_head; ++h) {
        json row = json::array();
        const float* w = st.attention.data() + (static_cast<std::size_t>(l) * c.n_head + h) * st.keys;
        for (int k = 0; k < st.keys; ++k) row.push_back(f32(w[k]));
        heads.push_back(std::move(row));
      }
      layers.push_back(std::move(heads));
    }
    j["attention"] = std::move(layers);
  }
  j["last_token_attention"] = to_json(st.last_token_attention, c.n_layer, arrays);
  j["attribution"] = to_json(st.attribution);
  j["logit_lens"] = to_json(st.logit_lens);
  return j;
}

json prompt_json(const ExplainPrompt& e, const GptConfig& c, bool col, bool arrays, bool is_compare) {
  json j;
  j["prompt"] = e.prompt;
  j["tokens"] = to_json(e.tokens);
  j["prediction"] = to_json(e.prediction);
  if (e.baseline) {
    j["baseline"] = to_json(*e.baseline);
    j["baseline"]["shift"] = to_json(e.baseline_shift, "p_baseline", "p");
  } else {
    j["baseline"] = nullptr;
  }
  j["heads"] = to_json(e.heads);
  j["head_roles"] = to_json(e.head_roles);
  j["last_token_attention"] = to_json(e.last_token_attention, c.n_layer, arrays);
  json layers = json::array();
  for (std::size_t n = 0; n < e.layers.size();) {
    const int l = e.layers[n].layer;
    json heads = json::array();
    for (; n < e.layers.size() && e.layers[n].layer == l; ++n) heads.push_back(head_json(e.layers[n], col, arrays));
    layers.push_back({{"layer", l}, {"heads", std::move(heads)}});
  }
  j["layers"] = std::move(layers);
  j["attribution"] = to_json(e.attribution);
  j["logit_lens"] = to_json(e.logit_lens);
  if (is_compare) {
    j["shift"] = to_json(e.shift, "p", "p_compare");
    return j;
  }
  if (e.generation) {
    const ExplainGeneration& g = *e.generation;
    j["generation"] = {{"ids", g.ids},
                       {"text", g.text},
                       {"stop", g.stop},
                       {"seed", g.seed},
                       {"temperature", f32(g.temperature)},
                       {"top_k", g.top_k},
                       {"top_p", f32(g.top_p)},
                       {"stop_at_eos", g.stop_at_eos}};
  } else {
    j["generation"] = nullptr;
  }
  json steps = json::array();
  for (const ExplainStep& st : e.steps) steps.push_back(to_json(st, c, arrays));
  j["steps"] = std::move(steps);
  return j;
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
  j["model"] = model_json(c, model_name, model.kv_format(), model.weight_format(), model.matmul());
  j["prompt"] = prompt ? json(text::to_valid_utf8(*prompt)) : json(nullptr);
  j["swap_qk"] = swap_qk;
  if (prompt) {
    const Pass p = run_pass(model, ids, {}, swap_qk, PassRequest{});
    j["head_roles"] = to_json(head_roles_of(p.stats, ids.size() >= 2, probe, c.n_layer, c.n_head, "prompt"));
  } else {
    // The probe is the prompt; without a probe (a tiny context) only null scores remain.
    j["head_roles"] = to_json(head_roles_of(probe.own, !probe.ids.empty(), probe, c.n_layer, c.n_head, "probe"));
  }
  return j;
}

Explanation explain_result(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
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
  Explanation e;
  e.config = c;
  e.kv_cache = model.kv_format();
  e.weights = model.weight_format();
  e.matmul = model.matmul();
  e.model_name = options.model_name;
  e.options = options;
  std::vector<int>& silenced = e.options.silence;
  std::sort(silenced.begin(), silenced.end());
  silenced.erase(std::unique(silenced.begin(), silenced.end()), silenced.end());
  // The role probe is the model's alone: one pass for both prompts (with swap_qk, not silenced).
  const Probe probe = run_probe(model, tokenizer, options.swap_qk);
  Pass main_pass;
  e.main =
      explain_prompt(model, tokenizer, prompt, e.options, silenced, "the prompt", &main_pass, target, contrast, probe);
  if (options.compare) {
    ExplainOptions co = e.options;
    co.generate = 0;  // refused with compare above; the compare prompt has no steps
    Pass other;
    e.compare = explain_prompt(model, tokenizer, *options.compare, co, silenced, "the compare prompt", &other, target,
                               contrast, probe);
    e.compare->shift = shift_of(main_pass, other, tokenizer, options.top);
  }
  return e;
}

nlohmann::json to_json(const Explanation& e, const ExplainJsonOptions& jo) {
  const ExplainOptions& o = e.options;
  const ExplainNotation notation = jo.notation ? *jo.notation : o.notation;
  const bool col = notation == ExplainNotation::col3b1b;
  json j;
  j["schema"] = "jomoim.explain/1";
  j["model"] = model_json(e.config, e.model_name, e.kv_cache, e.weights, e.matmul);
  j["notation"] = notation_name(notation);
  j["formula"] = col ? "V softmax(K^T Q / sqrt(d))" : "softmax(Q K^T / sqrt(d)) V";
  j["softmax_over"] = col ? "columns" : "rows";
  j["options"] = {{"layer", o.layer ? json(*o.layer) : json(nullptr)},
                  {"head", o.head ? json(*o.head) : json(nullptr)},
                  {"silence", o.silence},
                  {"swap_qk", o.swap_qk},
                  {"top", o.top},
                  {"matrices", o.matrices},
                  {"target", o.target ? json(text::to_valid_utf8(*o.target)) : json(nullptr)},
                  {"contrast", o.contrast ? json(text::to_valid_utf8(*o.contrast)) : json(nullptr)},
                  {"generate", o.generate}};
  json body = prompt_json(e.main, e.config, col, jo.arrays, false);
  for (auto& [k, v] : body.items()) j[k] = std::move(v);
  j["compare"] = e.compare ? prompt_json(*e.compare, e.config, col, jo.arrays, true) : json(nullptr);
  return j;
}

nlohmann::json embedding_json(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt, int index) {
  const GptConfig& c = model.config();
  const std::vector<std::int32_t> ids = encode_prompt(tokenizer, prompt, c.n_positions, c.vocab_size, "the prompt");
  if (index < 0 || index >= static_cast<int>(ids.size()))
    throw Error("\"index\" " + std::to_string(index) + " is past the prompt's " + std::to_string(ids.size()) +
                (ids.size() == 1 ? " token" : " tokens"));
  const std::int32_t id = ids[index];
  const float* te = model.float_params().wte + static_cast<std::size_t>(id) * c.n_embd;
  const float* pe = model.float_params().wpe + static_cast<std::size_t>(index) * c.n_embd;
  json tok = json::array(), pos = json::array(), sum = json::array();
  for (int i = 0; i < c.n_embd; ++i) {
    tok.push_back(f32(te[i]));
    pos.push_back(f32(pe[i]));
    sum.push_back(f32(te[i] + pe[i]));  // the float32 sum the first layer reads
  }
  return {{"index", index},
          {"id", id},
          {"text", token_text(tokenizer, id)},
          {"token_embedding", std::move(tok)},
          {"position_embedding", std::move(pos)},
          {"embedding", std::move(sum)}};
}

nlohmann::json explain(const GptModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                       const ExplainOptions& options) {
  return to_json(explain_result(model, tokenizer, prompt, options));
}

}  // namespace jomoim
