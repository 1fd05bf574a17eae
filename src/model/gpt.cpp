// The GPT-2 forward pass: embeddings, pre-LayerNorm blocks, tied output head, KV cache.
// See include/jomoim/model/model.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "jomoim/engine/attention.hpp"
#include "jomoim/model/model.hpp"
#include "blas.hpp"
#include "jomoim/engine/elementwise.hpp"

namespace jomoim {
namespace {

// y[T, out] = x[T, in] W[in, out] + b  (row-major, W as GPT-2's Conv1D stores it).
void linear(const float* x, int T, int in, int out, const LinearParams& p, float* y, int threads) {
  for (int t = 0; t < T; ++t) std::memcpy(y + static_cast<std::size_t>(t) * out, p.bias, sizeof(float) * out);
  model_blas::gemm(false, false, T, out, in, 1.0f, x, in, p.weight, out, 1.0f, y, out, threads);
}

// LayerNorm over each row of x[T, C] into y (may alias x). Statistics in double: cheap at
// these sizes and keeps the result independent of summation order.
void layer_norm(const float* x, int T, int C, const LayerNormParams& p, float eps, float* y) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<std::size_t>(t) * C;
    float* yr = y + static_cast<std::size_t>(t) * C;
    double mean = 0;
    for (int i = 0; i < C; ++i) mean += xr[i];
    mean /= C;
    double var = 0;
    for (int i = 0; i < C; ++i) {
      const double d = xr[i] - mean;
      var += d * d;
    }
    var /= C;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (int i = 0; i < C; ++i) yr[i] = (xr[i] - m) * inv * p.weight[i] + p.bias[i];
  }
}

void gelu_tanh(float* x, std::size_t n) { elementwise::gelu_tanh(x, x, n); }

void gelu_erf(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
}

void add_into(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

KvCache::KvCache(const GptConfig& config, int capacity)
    : n_layer_(config.n_layer), n_embd_(config.n_embd), capacity_(capacity) {
  if (capacity <= 0) throw Error("KV cache: capacity must be positive, got " + std::to_string(capacity));
  data_.assign(static_cast<std::size_t>(n_layer_) * 2 * capacity_ * n_embd_, 0.0f);
}

void KvCache::truncate(int n) {
  if (n < 0 || n > size_)
    throw Error("KV cache: cannot truncate to " + std::to_string(n) + " tokens (holds " +
                std::to_string(size_) + ")");
  size_ = n;
}

GptModel::GptModel(GptConfig config, GptParams params, std::vector<std::shared_ptr<const void>> owners)
    : config_(std::move(config)), params_(std::move(params)), owners_(std::move(owners)) {
  config_.validate();
  auto need = [](const void* p, const std::string& what) {
    if (!p) throw Error("model: missing weights for " + what);
  };
  need(params_.wte, "wte");
  need(params_.wpe, "wpe");
  need(params_.ln_f.weight, "ln_f.weight");
  need(params_.ln_f.bias, "ln_f.bias");
  if (static_cast<int>(params_.blocks.size()) != config_.n_layer)
    throw Error("model: " + std::to_string(params_.blocks.size()) + " blocks of weights for n_layer = " +
                std::to_string(config_.n_layer));
  for (int l = 0; l < config_.n_layer; ++l) {
    const auto& b = params_.blocks[l];
    const std::string h = "h." + std::to_string(l) + ".";
    need(b.ln_1.weight, h + "ln_1.weight");
    need(b.ln_1.bias, h + "ln_1.bias");
    need(b.c_attn.weight, h + "attn.c_attn.weight");
    need(b.c_attn.bias, h + "attn.c_attn.bias");
    need(b.c_proj.weight, h + "attn.c_proj.weight");
    need(b.c_proj.bias, h + "attn.c_proj.bias");
    need(b.ln_2.weight, h + "ln_2.weight");
    need(b.ln_2.bias, h + "ln_2.bias");
    need(b.c_fc.weight, h + "mlp.c_fc.weight");
    need(b.c_fc.bias, h + "mlp.c_fc.bias");
    need(b.mlp_proj.weight, h + "mlp.c_proj.weight");
    need(b.mlp_proj.bias, h + "mlp.c_proj.bias");
  }
}

void GptModel::set_threads(int threads) {
  if (threads < 0) throw Error("threads must be >= 0, got " + std::to_string(threads));
  threads_ = threads;
}

std::vector<float> GptModel::forward(std::span<const std::int32_t> ids, KvCache& cache,
                                     const ForwardOptions& options) const {
  const GptConfig& c = config_;
  const int T = static_cast<int>(ids.size());
  const int C = c.n_embd, H = c.n_head, D = c.head_dim(), F = c.inner(), V = c.vocab_size;
  if (T == 0) throw Error("forward: no tokens");
  if (cache.n_embd_ != C || cache.n_layer_ != c.n_layer)
    throw Error("forward: the KV cache was made for a different model shape");
  const int past = cache.size();
  const int Tk = past + T;
  if (Tk > c.n_positions)
    throw Error("forward: " + std::to_string(Tk) + " tokens exceed the context of " +
                std::to_string(c.n_positions) + " positions");
  if (Tk > cache.capacity())
    throw Error("forward: " + std::to_string(Tk) + " tokens exceed the KV cache capacity of " +
                std::to_string(cache.capacity()));
  for (int t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw Error("forward: token id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  for (int s : options.silenced)
    if (s < 0 || s >= Tk)
      throw Error("forward: silenced position " + std::to_string(s) + " is outside [0, " +
                  std::to_string(Tk) + ")");

  const std::size_t TC = static_cast<std::size_t>(T) * C;
  std::vector<float> x(TC), h(TC), att(TC), qkv(static_cast<std::size_t>(T) * 3 * C),
      ff(static_cast<std::size_t>(T) * F);

  // Token + position embeddings.
  ForwardTrace* trace = options.trace;
  if (trace) {
    trace->T = T;
    trace->Tk = Tk;
    trace->first_position = past;
    trace->token_embedding.assign(TC, 0.0f);
    trace->position_embedding.assign(TC, 0.0f);
    trace->layers.assign(c.n_layer, {});
  }
  for (int t = 0; t < T; ++t) {
    const float* te = params_.wte + static_cast<std::size_t>(ids[t]) * C;
    const float* pe = params_.wpe + static_cast<std::size_t>(past + t) * C;
    float* xr = x.data() + static_cast<std::size_t>(t) * C;
    for (int i = 0; i < C; ++i) xr[i] = te[i] + pe[i];
    if (trace) {
      std::memcpy(trace->token_embedding.data() + static_cast<std::size_t>(t) * C, te, sizeof(float) * C);
      std::memcpy(trace->position_embedding.data() + static_cast<std::size_t>(t) * C, pe, sizeof(float) * C);
    }
  }

  // Silencing is an additive bias on the key axis, broadcast over batch, heads and queries.
  std::vector<float> silence_bias;
  AttentionOptions attn;
  attn.causal = true;
  attn.threads = threads_;
  if (!options.silenced.empty()) {
    silence_bias.assign(Tk, 0.0f);
    for (int s : options.silenced) silence_bias[s] = -std::numeric_limits<float>::infinity();
    ConstTensor4 b;
    b.data = silence_bias.data();
    b.shape = {1, 1, 1, Tk};
    b.strides = {0, 0, 0, 1};
    attn.bias = b;
  }

  // Q, K and V of the new tokens sit side by side in each qkv row; swap_qk exchanges the roles
  // of the first two thirds.
  const int q_off = options.swap_qk ? C : 0;
  const int k_off = options.swap_qk ? 0 : C;
  const std::int64_t S3 = 3 * static_cast<std::int64_t>(C);

  for (int l = 0; l < c.n_layer; ++l) {
    const BlockParams& b = params_.blocks[l];
    layer_norm(x.data(), T, C, b.ln_1, c.layer_norm_epsilon, h.data());
    linear(h.data(), T, C, 3 * C, b.c_attn, qkv.data(), threads_);

    float* kc = cache.keys(l);
    float* vc = cache.values(l);
    for (int t = 0; t < T; ++t) {
      const float* row = qkv.data() + t * S3;
      std::memcpy(kc + static_cast<std::size_t>(past + t) * C, row + k_off, sizeof(float) * C);
      std::memcpy(vc + static_cast<std::size_t>(past + t) * C, row + 2 * C, sizeof(float) * C);
    }
    ConstTensor4 q{qkv.data() + q_off, {1, H, T, D}, {T * S3, D, S3, 1}};
    ConstTensor4 k{kc, {1, H, Tk, D}, {static_cast<std::int64_t>(Tk) * C, D, C, 1}};
    ConstTensor4 v{vc, {1, H, Tk, D}, {static_cast<std::int64_t>(Tk) * C, D, C, 1}};
    Tensor4 o{att.data(), {1, H, T, D}, {static_cast<std::int64_t>(T) * C, D, C, 1}};

    AttentionOptions layer_attn = attn;
    if (trace) {
      AttentionTrace& at = trace->layers[l];
      at.scale = 1.0f / std::sqrt(static_cast<float>(D));
      at.weights.assign(static_cast<std::size_t>(H) * T * Tk, 0.0f);
      layer_attn.probs = Tensor4::contiguous(at.weights.data(), {1, H, T, Tk});
    }
    attention(q, k, v, o, layer_attn);

    if (trace) {
      AttentionTrace& at = trace->layers[l];
      at.q.resize(static_cast<std::size_t>(H) * T * D);
      at.k.resize(static_cast<std::size_t>(H) * Tk * D);
      at.v.resize(static_cast<std::size_t>(H) * Tk * D);
      at.out.resize(static_cast<std::size_t>(H) * T * D);
      at.scores.resize(static_cast<std::size_t>(H) * T * Tk);
      for (int hh = 0; hh < H; ++hh) {
        for (int t = 0; t < T; ++t) {
          std::memcpy(&at.q[(static_cast<std::size_t>(hh) * T + t) * D], q.data + t * S3 + hh * D, sizeof(float) * D);
          std::memcpy(&at.out[(static_cast<std::size_t>(hh) * T + t) * D],
                      att.data() + static_cast<std::size_t>(t) * C + hh * D, sizeof(float) * D);
        }
        for (int j = 0; j < Tk; ++j) {
          std::memcpy(&at.k[(static_cast<std::size_t>(hh) * Tk + j) * D], kc + static_cast<std::size_t>(j) * C + hh * D, sizeof(float) * D);
          std::memcpy(&at.v[(static_cast<std::size_t>(hh) * Tk + j) * D], vc + static_cast<std::size_t>(j) * C + hh * D, sizeof(float) * D);
        }
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < Tk; ++j) {
            const float* qi = &at.q[(static_cast<std::size_t>(hh) * T + t) * D];
            const float* kj = &at.k[(static_cast<std::size_t>(hh) * Tk + j) * D];
            double s = 0;
            for (int d = 0; d < D; ++d) s += static_cast<double>(qi[d]) * kj[d];
            at.scores[(static_cast<std::size_t>(hh) * T + t) * Tk + j] = static_cast<float>(s);
          }
      }
    }

    linear(att.data(), T, C, C, b.c_proj, h.data(), threads_);
    add_into(x.data(), h.data(), TC);

    layer_norm(x.data(), T, C, b.ln_2, c.layer_norm_epsilon, h.data());
    linear(h.data(), T, C, F, b.c_fc, ff.data(), threads_);
    if (c.activation_function == "gelu")
      gelu_erf(ff.data(), ff.size());
    else
      gelu_tanh(ff.data(), ff.size());
    linear(ff.data(), T, F, C, b.mlp_proj, h.data(), threads_);
    add_into(x.data(), h.data(), TC);
  }
  cache.size_ = Tk;

  // Final LayerNorm and the tied head: logits = ln_f(x) wte^T, for the last row or every row.
  const int rows = options.all_logits ? T : 1;
  const float* xs = x.data() + static_cast<std::size_t>(T - rows) * C;
  layer_norm(xs, rows, C, params_.ln_f, c.layer_norm_epsilon, h.data());
  std::vector<float> logits(static_cast<std::size_t>(rows) * V);
  model_blas::gemm(false, true, rows, V, C, 1.0f, h.data(), C, params_.wte, C, 0.0f, logits.data(), V, threads_);
  return logits;
}

std::vector<float> GptModel::logits(std::span<const std::int32_t> ids) const {
  KvCache cache(config_, std::max<int>(1, static_cast<int>(ids.size())));
  ForwardOptions o;
  o.all_logits = true;
  return forward(ids, cache, o);
}

}  // namespace jomoim
