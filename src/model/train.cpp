// Training: the GPT-2 forward pass with saved activations, the backward pass of every layer,
// AdamW, clipping and the learning-rate schedule. See include/jomoim/model/train.hpp.
#include "jomoim/model/train.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>

#include "blas.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/elementwise.hpp"
#include "jomoim/engine/threads.hpp"
#include "layers.hpp"
#include "splitmix.hpp"

namespace jomoim {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Platform-independent normal numbers: SplitMix64 bits, Box-Muller.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : s_(seed) {}
  double next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u1 = splitmix::uniform(s_), u2 = splitmix::uniform(s_);
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * kPi * u2);
    have_ = true;
    return r * std::cos(2 * kPi * u2);
  }

 private:
  std::uint64_t s_;
  bool have_ = false;
  double spare_ = 0;
};

// --- layers, backward (the forward ones are layers.hpp's) ---------------------------------

// dx = dy W^T (overwrites dx), dW += x^T dy, db += colsum(dy).
void linear_bwd(const float* x, const float* dy, int N, int in, int out, const float* W, float* dx, float* dW,
                float* db, int nt, model_blas::Precision prec) {
  if (dx) model_blas::gemm(false, true, N, in, out, 1.0f, dy, out, W, out, 0.0f, dx, in, nt, prec);
  model_blas::gemm(true, false, in, out, N, 1.0f, x, in, dy, out, 1.0f, dW, out, nt, prec);
  // Column sums, split by columns (each column summed in row order by one thread).
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && static_cast <long>(N) * out > 65536)
  for (int j0 = 0; j0 < out; j0 += 64) {
    const int j1 = std::min(out, j0 + 64);
    for (int n = 0; n < N; ++n) {
      const float* r = dy + static_cast<std::size_t>(n) * out;
      for (int j = j0; j < j1; ++j) db[j] += r[j];
    }
  }
}

// Adds the input gradient of LayerNorm to dx; accumulates dg, db.
void layer_norm_bwd(const float* x, const float* dy, int N, int C, const float* g, const float* mean, const float* rstd,
                    float* dx, float* dg, float* db, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && N * C > 65536)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<std::size_t>(n) * C;
    const float* dyr = dy + static_cast<std::size_t>(n) * C;
    float* dxr = dx + static_cast<std::size_t>(n) * C;
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int i = 0; i < C; ++i) {
      const double xhat = (xr[i] - mean[n]) * rstd[n];
      const double dxhat = static_cast<double>(dyr[i]) * g[i];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    const double a = sum_dxhat / C, bq = sum_dxhat_xhat / C;
    for (int i = 0; i < C; ++i) {
      const double xhat = (xr[i] - mean[n]) * rstd[n];
      const double dxhat = static_cast<double>(dyr[i]) * g[i];
      dxr[i] += static_cast<float>(rstd[n] * (dxhat - a - xhat * bq));
    }
  }
  // Gain and bias sums, split by columns (each column summed in row order by one thread).
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && N * C > 65536)
  for (int i0 = 0; i0 < C; i0 += 32) {
    const int i1 = std::min(C, i0 + 32);
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<std::size_t>(n) * C;
      const float* dyr = dy + static_cast<std::size_t>(n) * C;
      for (int i = i0; i < i1; ++i) {
        dg[i] += dyr[i] * ((xr[i] - mean[n]) * rstd[n]);
        db[i] += dyr[i];
      }
    }
  }
}

// dx = dy * gelu'(x)
// dx may alias dy; split over threads like layers::gelu.
void gelu_bwd(const float* x, const float* dy, float* dx, std::size_t n, bool exact, int nt) {
  layers::for_chunks(n, nt, [&](std::size_t b, std::size_t e) {
    if (!exact) {
      elementwise::gelu_tanh_backward(x + b, dy + b, dx + b, e - b);
      return;
    }
    for (std::size_t i = b; i < e; ++i) {
      const double v = x[i];
      const double d = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * kPi);
      dx[i] = static_cast<float>(dy[i] * d);
    }
  });
}

// Saved activations, per layer: block input, LN1 out + stats, qkv, attention out + lse,
// mid residual, LN2 out + stats, MLP pre-activation and activation.
struct Saved {
  std::vector<float> x, h1, mean1, rstd1, qkv, att, lse, xmid, h2, mean2, rstd2, fpre, fact;
};

}  // namespace

// Kept between calls: resizing a vector within its capacity does not reallocate, so after the
// first step no buffer is allocated (nor page-faulted in) again.
struct GptTrainable::Buffers {
  std::vector<Saved> S;
  std::vector<float> x, tmp, hf, meanf, rstdf, logits, dh, dx, dF, dqkv, datt, dq, dk, dv;
  std::vector<double> row_loss;
};

bool bf16_matmul_native() { return model_blas::bf16_native(); }

// --- layout ------------------------------------------------------------------------------

std::vector<ParamTensor> param_layout(const GptConfig& c) {
  c.validate();
  std::vector<ParamTensor> t;
  std::size_t at = 0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    std::size_t n = 1;
    for (auto s : shape) n *= static_cast<std::size_t>(s);
    const bool decay = shape.size() == 2;
    t.push_back({std::move(name), std::move(shape), at, n, decay});
    at += n;
  };
  const std::int64_t C = c.n_embd, F = c.inner();
  add("wte.weight", {c.vocab_size, C});
  add("wpe.weight", {c.n_positions, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {C, 3 * C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {C, F});
    add(h + "mlp.c_fc.bias", {F});
    add(h + "mlp.c_proj.weight", {F, C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return t;
}

GptTrainable::GptTrainable(const GptConfig& config, std::uint64_t seed, WpeInit wpe_init, double wpe_scale)
    : config_(config), layout_(param_layout(config)) {
  if (!(wpe_scale > 0) || !std::isfinite(wpe_scale))
    throw Error("train: the position embedding's scale must be a positive number, got " + std::to_string(wpe_scale));
  values_.assign(layout_.back().offset + layout_.back().size, 0.0f);
  grads_.assign(values_.size(), 0.0f);
  Normal normal(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (const auto& t : layout_) {
    float* p = values_.data() + t.offset;
    const bool is_weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    if (t.shape.size() == 2) {
      const bool residual = t.name.find("c_proj.weight") != std::string::npos;
      const double sd = (residual ? proj_std : 0.02) * (t.name == "wpe.weight" ? wpe_scale : 1.0);
      for (std::size_t i = 0; i < t.size; ++i) p[i] = static_cast<float>(sd * normal.next());
    } else if (is_weight) {  // LayerNorm gains
      std::fill(p, p + t.size, 1.0f);
    }                                                             // biases stay 0
    if (wpe_init != WpeInit::normal && t.name == "wpe.weight") {  // drawn above too: later tensors unchanged
      const int C = config.n_embd;
      const double s = 0.02 * std::sqrt(2.0) * wpe_scale;
      for (int pos = 0; pos < config.n_positions; ++pos)
        for (int i = 0; 2 * i < C; ++i) {
          const double w =
              wpe_init == WpeInit::fourier ? std::numbers::pi * (2 * i + 1) / C : std::pow(10000.0, -2.0 * i / C);
          p[static_cast<std::size_t>(pos) * C + 2 * i] = static_cast<float>(s * std::sin(pos * w));
          if (2 * i + 1 < C)
            p[static_cast<std::size_t>(pos) * C + 2 * i + 1] = static_cast<float>(s * std::cos(pos * w));
        }
    }
  }
}

GptTrainable::GptTrainable(const GptModel& model) : config_(model.config()), layout_(param_layout(model.config())) {
  values_.assign(layout_.back().offset + layout_.back().size, 0.0f);
  grads_.assign(values_.size(), 0.0f);
  const GptParams& p = model.float_params();
  auto put = [&](std::size_t idx, const float* src) {
    std::memcpy(values_.data() + layout_[idx].offset, src, sizeof(float) * layout_[idx].size);
  };
  std::size_t i = 0;
  put(i++, p.wte);
  put(i++, p.wpe);
  for (const auto& b : p.blocks) {
    for (const float* s : {b.ln_1.weight, b.ln_1.bias, b.c_attn.weight, b.c_attn.bias, b.c_proj.weight, b.c_proj.bias,
                           b.ln_2.weight, b.ln_2.bias, b.c_fc.weight, b.c_fc.bias, b.mlp_proj.weight, b.mlp_proj.bias})
      put(i++, s);
  }
  put(i++, p.ln_f.weight);
  put(i++, p.ln_f.bias);
}

GptParams GptTrainable::params() const {
  GptParams p;
  const float* v = values_.data();
  std::size_t i = 0;
  auto next = [&] { return v + layout_[i++].offset; };
  p.wte = next();
  p.wpe = next();
  p.blocks.resize(config_.n_layer);
  for (auto& b : p.blocks) {
    b.ln_1.weight = next();
    b.ln_1.bias = next();
    b.c_attn.weight = next();
    b.c_attn.bias = next();
    b.c_proj.weight = next();
    b.c_proj.bias = next();
    b.ln_2.weight = next();
    b.ln_2.bias = next();
    b.c_fc.weight = next();
    b.c_fc.bias = next();
    b.mlp_proj.weight = next();
    b.mlp_proj.bias = next();
  }
  p.ln_f.weight = next();
  p.ln_f.bias = next();
  return p;
}

GptModel GptTrainable::model() const {
  GptModel m(config_, params(), {});
  m.set_threads(threads_);
  return m;
}

void GptTrainable::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

double GptTrainable::loss_and_grad(std::span<const std::int32_t> tokens, int batch, int seq, double grad_scale) {
  return run(tokens, batch, seq, true, grad_scale);
}

double GptTrainable::loss(std::span<const std::int32_t> tokens, int batch, int seq) const {
  return const_cast<GptTrainable*>(this)->run(tokens, batch, seq, false, 0.0);
}

double GptTrainable::run(std::span<const std::int32_t> tokens, int B, int T, bool backward, double grad_scale) {
  const GptConfig& c = config_;
  const int C = c.n_embd, H = c.n_head, D = c.head_dim(), F = c.inner(), V = c.vocab_size, L = c.n_layer;
  if (B < 1 || T < 1) throw Error("train: batch and sequence length must be at least 1");
  if (T > c.n_positions)
    throw Error("train: sequence length " + std::to_string(T) + " exceeds the context of " +
                std::to_string(c.n_positions));
  if (tokens.size() != static_cast<std::size_t>(B) * (T + 1))
    throw Error("train: expected " + std::to_string(B) + " x " + std::to_string(T + 1) + " tokens, got " +
                std::to_string(tokens.size()));
  for (auto id : tokens)
    if (id < 0 || id >= V) throw Error("train: token id " + std::to_string(id) + " is outside the vocabulary");
  const int nt = resolve_threads(threads_);
  const bool exact = c.activation_function == "gelu";
  const GptParams P = params();
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const std::size_t NC = N * C;
  auto in_id = [&](std::size_t n) { return tokens[(n / T) * (T + 1) + n % T]; };
  auto target = [&](std::size_t n) { return tokens[(n / T) * (T + 1) + n % T + 1]; };

  if (!buffers_) buffers_ = std::make_shared<Buffers>();
  Buffers& W = *buffers_;
  const model_blas::Precision prec =
      backward && precision_ == MatmulPrecision::bf16 ? model_blas::Precision::bf16 : model_blas::Precision::f32;
  W.S.resize(L);
  std::vector<Saved>& S = W.S;
  std::vector<float>& x = W.x;
  x.resize(NC);
  for (int b = 0; b < B; ++b)
    layers::embed(P.wte, P.wpe, C, tokens.data() + static_cast<std::size_t>(b) * (T + 1), T, 0,
                  x.data() + static_cast<std::size_t>(b) * T * C);
  AttentionOptions ao;
  ao.causal = true;
  ao.threads = threads_;
  const std::int64_t S3 = 3 * static_cast<std::int64_t>(C);
  auto qkv_view = [&](float* base, int which) { return layers::heads(base + which * C, B, H, T, D, S3); };
  auto rows_view = [&](float* base) { return layers::heads(base, B, H, T, D, C); };
  auto cview = [](const Tensor4& t) { return ConstTensor4{t.data, t.shape, t.strides}; };

  for (int l = 0; l < L; ++l) {
    const BlockParams& bp = P.blocks[l];
    Saved& s = S[backward ? l : 0];  // validation keeps one layer's activations at a time
    s.x = x;
    s.h1.resize(NC);
    s.mean1.resize(N);
    s.rstd1.resize(N);
    layers::layer_norm(x.data(), N, C, bp.ln_1.weight, bp.ln_1.bias, c.layer_norm_epsilon, s.h1.data(), s.mean1.data(),
                       s.rstd1.data(), nt);
    s.qkv.resize(N * 3 * C);
    layers::linear(s.h1.data(), N, C, 3 * C, bp.c_attn.weight, bp.c_attn.bias, s.qkv.data(), nt, prec);
    s.att.resize(NC);
    s.lse.resize(static_cast<std::size_t>(B) * H * T);
    AttentionOptions o = ao;
    o.lse = Tensor3::contiguous(s.lse.data(), {B, H, T});
    attention(cview(qkv_view(s.qkv.data(), 0)), cview(qkv_view(s.qkv.data(), 1)), cview(qkv_view(s.qkv.data(), 2)),
              rows_view(s.att.data()), o);
    std::vector<float>& tmp = W.tmp;
    tmp.resize(NC);
    layers::linear(s.att.data(), N, C, C, bp.c_proj.weight, bp.c_proj.bias, tmp.data(), nt, prec);
    layers::add(x.data(), tmp.data(), NC);
    s.xmid = x;
    s.h2.resize(NC);
    s.mean2.resize(N);
    s.rstd2.resize(N);
    layers::layer_norm(x.data(), N, C, bp.ln_2.weight, bp.ln_2.bias, c.layer_norm_epsilon, s.h2.data(), s.mean2.data(),
                       s.rstd2.data(), nt);
    s.fpre.resize(N * F);
    s.fact.resize(N * F);
    layers::linear(s.h2.data(), N, C, F, bp.c_fc.weight, bp.c_fc.bias, s.fpre.data(), nt, prec);
    layers::gelu(s.fpre.data(), s.fact.data(), s.fpre.size(), exact, nt);
    layers::linear(s.fact.data(), N, F, C, bp.mlp_proj.weight, bp.mlp_proj.bias, tmp.data(), nt, prec);
    layers::add(x.data(), tmp.data(), NC);
  }
  std::vector<float>&hf = W.hf, &meanf = W.meanf, &rstdf = W.rstdf;
  hf.resize(NC);
  meanf.resize(N);
  rstdf.resize(N);
  layers::layer_norm(x.data(), N, C, P.ln_f.weight, P.ln_f.bias, c.layer_norm_epsilon, hf.data(), meanf.data(),
                     rstdf.data(), nt);
  std::vector<float>& logits = W.logits;
  logits.resize(N * V);
  layers::tied_head(hf.data(), N, C, P.wte, V, logits.data(), nt, prec);

  // Softmax cross-entropy; logits become dlogits = (softmax - onehot) * grad_scale / N.
  std::vector<double>& row_loss = W.row_loss;
  row_loss.resize(N);
  const float gscale = static_cast<float>(grad_scale / static_cast<double>(N));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (std::size_t n = 0; n < N; ++n) {
    float* r = logits.data() + n * V;
    const float m = elementwise::row_max(r, V);
    const double lse = m + std::log(elementwise::sum_exp(r, V, m));
    row_loss[n] = lse - r[target(n)];
    if (backward) {
      elementwise::exp_scale(r, V, static_cast<float>(lse), gscale);
      r[target(n)] -= gscale;
    }
  }
  double loss = 0;
  for (double v : row_loss) loss += v;
  loss /= static_cast<double>(N);
  if (!backward) return loss;

  // --- backward ---
  float* G = grads_.data();
  auto grad_of = [&](const float* param) { return G + (param - values_.data()); };
  // Tied head: dhf = dlogits wte, dwte += dlogits^T hf.
  std::vector<float>&dh = W.dh, &dx = W.dx;
  dh.resize(NC);
  dx.assign(NC, 0.0f);
  model_blas::gemm(false, false, N, C, V, 1.0f, logits.data(), V, P.wte, C, 0.0f, dh.data(), C, nt, prec);
  model_blas::gemm(true, false, V, C, N, 1.0f, logits.data(), V, hf.data(), C, 1.0f, grad_of(P.wte), C, nt, prec);
  layer_norm_bwd(x.data(), dh.data(), N, C, P.ln_f.weight, meanf.data(), rstdf.data(), dx.data(),
                 grad_of(P.ln_f.weight), grad_of(P.ln_f.bias), nt);

  std::vector<float>&dF = W.dF, &dqkv = W.dqkv, &datt = W.datt, &dq = W.dq, &dk = W.dk, &dv = W.dv;
  dF.resize(N * F);
  dqkv.resize(N * 3 * C);
  for (auto* v : {&datt, &dq, &dk, &dv}) v->resize(NC);
  for (int l = L - 1; l >= 0; --l) {
    const BlockParams& bp = P.blocks[l];
    Saved& s = S[l];
    // MLP: x_out = xmid + proj(gelu(fc(ln2(xmid)))).
    linear_bwd(s.fact.data(), dx.data(), N, F, C, bp.mlp_proj.weight, dF.data(), grad_of(bp.mlp_proj.weight),
               grad_of(bp.mlp_proj.bias), nt, prec);
    gelu_bwd(s.fpre.data(), dF.data(), dF.data(), dF.size(), exact, nt);
    linear_bwd(s.h2.data(), dF.data(), N, C, F, bp.c_fc.weight, dh.data(), grad_of(bp.c_fc.weight),
               grad_of(bp.c_fc.bias), nt, prec);
    layer_norm_bwd(s.xmid.data(), dh.data(), N, C, bp.ln_2.weight, s.mean2.data(), s.rstd2.data(), dx.data(),
                   grad_of(bp.ln_2.weight), grad_of(bp.ln_2.bias), nt);
    // Attention: xmid = x + proj(attn(ln1(x))).
    linear_bwd(s.att.data(), dx.data(), N, C, C, bp.c_proj.weight, datt.data(), grad_of(bp.c_proj.weight),
               grad_of(bp.c_proj.bias), nt, prec);
    // The engine refuses interleaved output views (it checks memory ranges), so dQ, dK and dV
    // land in three row buffers and are then laid side by side like qkv.
    AttentionGradients g{rows_view(dq.data()), rows_view(dk.data()), rows_view(dv.data()), std::nullopt};
    attention_backward(cview(qkv_view(s.qkv.data(), 0)), cview(qkv_view(s.qkv.data(), 1)),
                       cview(qkv_view(s.qkv.data(), 2)), cview(rows_view(s.att.data())),
                       ConstTensor3::contiguous(s.lse.data(), {B, H, T}), cview(rows_view(datt.data())), g, ao);
    for (std::size_t n = 0; n < N; ++n) {
      float* r = dqkv.data() + n * 3 * C;
      std::memcpy(r, dq.data() + n * C, sizeof(float) * C);
      std::memcpy(r + C, dk.data() + n * C, sizeof(float) * C);
      std::memcpy(r + 2 * C, dv.data() + n * C, sizeof(float) * C);
    }
    linear_bwd(s.h1.data(), dqkv.data(), N, C, 3 * C, bp.c_attn.weight, dh.data(), grad_of(bp.c_attn.weight),
               grad_of(bp.c_attn.bias), nt, prec);
    layer_norm_bwd(s.x.data(), dh.data(), N, C, bp.ln_1.weight, s.mean1.data(), s.rstd1.data(), dx.data(),
                   grad_of(bp.ln_1.weight), grad_of(bp.ln_1.bias), nt);
  }
  // Embeddings.
  float* dwte = grad_of(P.wte);
  float* dwpe = grad_of(P.wpe);
  for (std::size_t n = 0; n < N; ++n) {
    float* te = dwte + static_cast<std::size_t>(in_id(n)) * C;
    float* pe = dwpe + (n % T) * C;
    const float* d = dx.data() + n * C;
    for (int i = 0; i < C; ++i) {
      te[i] += d[i];
      pe[i] += d[i];
    }
  }
  return loss;
}

// --- optimizer ---------------------------------------------------------------------------

void AdamW::step(GptTrainable& model, double lr, const AdamWOptions& o) {
  ++t_;
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t_));
  float* w = model.values().data();
  const float* g = model.grads().data();
  float* m = m_.data();
  float* v = v_.data();
  const int nt = resolve_threads(model.threads());
  // In float32, element by element (the same bits for any split): m and v, then
  // w -= lr wd w and w -= lr mhat / (sqrt(vhat) + eps) with mhat = m / bc1, vhat = v / bc2.
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float a1 = static_cast<float>(1 - o.beta1), a2 = static_cast<float>(1 - o.beta2);
  const float step = static_cast<float>(lr / bc1), inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps);
  const auto& layout = model.layout();
#pragma omp parallel num_threads(nt) if (nt > 1)
  for (const auto& t : layout) {
    if (o.freeze_wpe && t.name == "wpe.weight") continue;  // every thread skips it alike
    const float decay = t.decay ? static_cast<float>(lr * o.weight_decay) : 0.0f;
    const std::ptrdiff_t begin = static_cast<std::ptrdiff_t>(t.offset);
    const std::ptrdiff_t end = begin + static_cast<std::ptrdiff_t>(t.size);
#pragma omp for schedule(static) nowait
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = b1 * m[i] + a1 * gi;
      const float vi = b2 * v[i] + a2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      float wi = w[i];
      wi -= decay * wi;
      wi -= step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
      w[i] = wi;
    }
  }
}

double clip_grad_norm(std::vector<float>& grads, double max_norm, int threads) {
  // Fixed chunks, each summed in order, then the chunk sums in order: bits independent of the
  // thread count.
  constexpr std::size_t kChunk = 16384;
  const std::size_t n = grads.size(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks, 0.0);
  const int nt = resolve_threads(threads);
  float* gp = grads.data();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && chunks > 1)
  for (std::size_t c = 0; c < chunks; ++c) {
    double sq = 0;
    for (std::size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) sq += static_cast<double>(gp[i]) * gp[i];
    part[c] = sq;
  }
  double sq = 0;
  for (double p : part) sq += p;
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const float s = static_cast<float>(max_norm / (norm + 1e-12));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && n > 65536)
    for (std::size_t i = 0; i < n; ++i) gp[i] *= s;
  }
  return norm;
}

double learning_rate(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr, double min_lr) {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - warmup));
  const double progress = static_cast<double>(step - warmup) / span;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(kPi * progress));
}

}  // namespace jomoim
