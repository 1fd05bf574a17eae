// The GPT-2 forward pass: embeddings, pre-LayerNorm blocks, tied output head, KV cache.
// See include/jomoim/model/model.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/model/model.hpp"
#include "layers.hpp"
#include "packed_weights.hpp"

namespace jomoim {

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
    throw Error("model: " + std::to_string(params_.blocks.size()) +
                " blocks of weights for n_layer = " + std::to_string(config_.n_layer));
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
  resolve_threads(threads, "threads");  // refuses negative counts
  threads_ = threads;
}

void GptModel::set_kv_format(KvFormat format) {
  if (format == KvFormat::q8 && config_.head_dim() % 16 != 0)
    throw Error("model: a q8 KV cache needs a head_dim that is a multiple of 16, this model's is " +
                std::to_string(config_.head_dim()));
  if (format == KvFormat::q4 && config_.head_dim() % 32 != 0)
    throw Error("model: a q4 KV cache needs a head_dim that is a multiple of 32, this model's is " +
                std::to_string(config_.head_dim()));
  kv_format_ = format;
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
    throw Error("forward: " + std::to_string(Tk) + " tokens exceed the context of " + std::to_string(c.n_positions) +
                " positions");
  if (Tk > cache.capacity())
    throw Error("forward: " + std::to_string(Tk) + " tokens exceed the KV cache capacity of " +
                std::to_string(cache.capacity()));
  for (int t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw Error("forward: token id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  for (int s : options.silenced)
    if (s < 0 || s >= Tk)
      throw Error("forward: silenced position " + std::to_string(s) + " is outside [0, " + std::to_string(Tk) + ")");
  ForwardTrace* trace = options.trace;
  static const TraceSelection keep_everything;
  const TraceSelection& select = options.trace_select ? *options.trace_select : keep_everything;
  if (trace && !select.heads.empty() && select.heads.size() != static_cast<std::size_t>(c.n_layer) * H)
    throw Error("forward: the trace selection has " + std::to_string(select.heads.size()) + " head flags, the model " +
                std::to_string(c.n_layer) + " x " + std::to_string(H) + " heads");
  const std::span<const int> rrows = trace ? options.residual_rows : std::span<const int>{};
  for (int r : rrows)
    if (r < 0 || r >= T)
      throw Error("forward: residual row " + std::to_string(r) + " is outside [0, " + std::to_string(T) + ")");
  const std::size_t P = rrows.size();
  // Copies rows rrows of src[T, C] into dst (entry `slot` of a [*, P, C] array).
  auto record = [&](std::vector<float>& dst, int slot, const float* src) {
    for (std::size_t p = 0; p < P; ++p)
      std::memcpy(dst.data() + (static_cast<std::size_t>(slot) * P + p) * C,
                  src + static_cast<std::size_t>(rrows[p]) * C, sizeof(float) * C);
  };

  const std::size_t TC = static_cast<std::size_t>(T) * C;
  std::vector<float> x(TC), h(TC), att(TC), qkv(static_cast<std::size_t>(T) * 3 * C),
      ff(static_cast<std::size_t>(T) * F);
  std::vector<float> probs;        // traced passes only: one layer's softmax weights [H, T, Tk]
  std::vector<std::uint16_t> q16;  // bf16 cache: the new tokens' queries rounded [T, C]
  std::vector<float> kv_rows;      // traced: one layer's K and V as attention read them [2, Tk, C]
  int kv_rows_layer = -1;          // the layer kv_rows holds (read once per layer)
  auto widen_kv = [&](int layer) {
    if (kv_rows_layer == layer) return;
    kv_rows.resize(2 * static_cast<std::size_t>(Tk) * C);
    cache.read_rows(layer, false, 0, Tk, kv_rows.data());
    cache.read_rows(layer, true, 0, Tk, kv_rows.data() + static_cast<std::size_t>(Tk) * C);
    kv_rows_layer = layer;
  };
  std::vector<float> silence_q8;  // q8 and q4 caches: the silencing bias over the capacity
  // q8 and q4 caches: forwards of at least this many tokens widen the layer's keys and values to
  // float32 and run attention() (below); fewer (decode) read the quantized rows by
  // attention_q8kv (attention_q4kv).
  constexpr int kQ8WidenRows = 16;

  // Token + position embeddings.
  if (trace) {
    trace->T = T;
    trace->Tk = Tk;
    trace->first_position = past;
    trace->token_embedding.assign(TC, 0.0f);
    trace->position_embedding.assign(TC, 0.0f);
    trace->layers.assign(c.n_layer, {});
    trace->residual_rows.assign(rrows.begin(), rrows.end());
    trace->residual.assign((static_cast<std::size_t>(c.n_layer) + 1) * P * C, 0.0f);
    trace->attn_output.assign(static_cast<std::size_t>(c.n_layer) * P * C, 0.0f);
    trace->mlp_output.assign(static_cast<std::size_t>(c.n_layer) * P * C, 0.0f);
  }
  const PackedWeights* pw = packed_.get();  // bf16 / q8 matrices; null for f32
  if (pw) {
    for (int t = 0; t < T; ++t) {
      float* xr = x.data() + static_cast<std::size_t>(t) * C;
      pw->wte.row(ids[t], xr);
      if (trace) std::memcpy(trace->token_embedding.data() + static_cast<std::size_t>(t) * C, xr, sizeof(float) * C);
      const float* pe = params_.wpe + static_cast<std::size_t>(past + t) * C;
      for (int i = 0; i < C; ++i) xr[i] += pe[i];
    }
  } else {
    layers::embed(params_.wte, params_.wpe, C, ids.data(), T, past, x.data());
  }
  // The products' precision (set_matmul): bf16 only for a prompt's products (more than 16 rows),
  // so that one token, or a few, take the float32 matrix-vector kernels on every format alike.
  const model_blas::Precision precision =
      matmul_ == MatmulPrecision::bf16 && T > 16 ? model_blas::Precision::bf16 : model_blas::Precision::f32;
  // y[N, out] = in[N, in_w] W + b for one of a block's matrices, in the model's weight format.
  auto linear = [&](const PackedMatrix* m, const LinearParams& lp, const float* in, int N, int in_w, int out_w,
                    float* y) {
    if (m)
      packed_linear(in, N, *m, lp.bias, y, static_cast<std::size_t>(out_w), threads_, precision);
    else
      layers::linear(in, N, in_w, out_w, lp.weight, lp.bias, y, threads_, precision);
  };
  if (trace) {
    for (int t = 0; t < T; ++t) {
      if (!pw)
        std::memcpy(trace->token_embedding.data() + static_cast<std::size_t>(t) * C,
                    params_.wte + static_cast<std::size_t>(ids[t]) * C, sizeof(float) * C);
      std::memcpy(trace->position_embedding.data() + static_cast<std::size_t>(t) * C,
                  params_.wpe + static_cast<std::size_t>(past + t) * C, sizeof(float) * C);
    }
    record(trace->residual, 0, x.data());
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
  const float eps = c.layer_norm_epsilon;
  const bool exact_gelu = c.activation_function == "gelu";

  for (int l = 0; l < c.n_layer; ++l) {
    const BlockParams& b = params_.blocks[l];
    const PackedWeights::Block* pb = pw ? &pw->blocks[l] : nullptr;
    layers::layer_norm(x.data(), T, C, b.ln_1.weight, b.ln_1.bias, eps, h.data(), nullptr, nullptr, threads_);
    linear(pb ? &pb->c_attn : nullptr, b.c_attn, h.data(), T, C, 3 * C, qkv.data());

    // This layer's keys and values of the new tokens go into the cache in its format; attention
    // then reads every visible key from there (so the new tokens meet their own rounded keys,
    // as later tokens will).
    cache.write_rows(l, past, T, qkv.data() + k_off, qkv.data() + 2 * C, S3, threads_);
    const float* qbase = qkv.data() + q_off;  // the queries as attention saw them (bf16: rounded)
    const Tensor4 o = layers::heads(att.data(), 1, H, T, D, C);
    AttentionOptions layer_attn = attn;
    if (trace) {
      // Every head's weights of this layer, once (reused by the next layer).
      probs.resize(static_cast<std::size_t>(H) * T * Tk);
      layer_attn.probs = Tensor4::contiguous(probs.data(), {1, H, T, Tk});
    }
    switch (cache.format()) {
      case KvFormat::f32: {
        const ConstTensor4 q = layers::heads<const float>(qbase, 1, H, T, D, S3);
        // The cache's [H, capacity, D] planes, each head's first Tk rows.
        const std::int64_t cap = cache.capacity(), hs = cap * D;
        const ConstTensor4 k{cache.keys(l), {1, H, Tk, D}, {H * hs, hs, D, 1}};
        const ConstTensor4 v{cache.values(l), {1, H, Tk, D}, {H * hs, hs, D, 1}};
        attention(q, k, v, o, layer_attn);
        break;
      }
      case KvFormat::bf16: {
        // Q rounded to bf16 like the cached keys: the engine's 16-bit attention takes one dtype.
        q16.resize(TC);
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < C; ++i) {
            std::uint16_t& bits = q16[static_cast<std::size_t>(t) * C + i];
            bits = bf16_from_float(qbase[t * S3 + i]);
            qkv[static_cast<std::size_t>(t) * S3 + q_off + i] = bf16_to_float(bits);  // what the trace records
          }
        const std::size_t kv0 = cache.layer_offset(l);
        const std::int64_t cap = cache.capacity(), hs = cap * D;
        const ConstTensor4x16 q{layers::heads<const std::uint16_t>(q16.data(), 1, H, T, D, C), Dtype::bf16};
        const ConstTensor4x16 k{{cache.data16_.data() + kv0, {1, H, Tk, D}, {H * hs, hs, D, 1}}, Dtype::bf16};
        const ConstTensor4x16 v{{cache.data16_.data() + kv0 + cache.plane(), {1, H, Tk, D}, {H * hs, hs, D, 1}},
                                Dtype::bf16};
        attention(q, k, v, o, layer_attn);
        break;
      }
      case KvFormat::q8:
      case KvFormat::q4: {
        const ConstTensor4 q = layers::heads<const float>(qbase, 1, H, T, D, S3);
        if (trace || T >= kQ8WidenRows) {
          // attention_q8kv returns no weights: a traced pass runs the float32 kernel on the
          // dequantized keys and values (the same numbers, d * q; the same float32 tolerance).
          // So does a prefill of many tokens: attention_q8kv is decode-shaped (each group of
          // rows widens every key again), while widening the layer's Tk rows once costs about
          // 1 / T of the attention and the tiled float32 kernel runs at its own speed
          // (bench/NOTES.md, "The q8 cache's prefill through the float32 kernel"). Memory: the
          // layer's K and V in float32, 2 Tk C floats (kv_rows), as a traced pass holds.
          widen_kv(l);
          const ConstTensor4 k = layers::heads<const float>(kv_rows.data(), 1, H, Tk, D, C);
          const ConstTensor4 v =
              layers::heads<const float>(kv_rows.data() + static_cast<std::size_t>(Tk) * C, 1, H, Tk, D, C);
          attention(q, k, v, o, layer_attn);
          break;
        }
        const std::size_t kv0 = cache.layer_offset(l), bk = static_cast<std::size_t>(cache.q8_block_);
        const std::int64_t cap = cache.capacity();
        const std::int64_t lengths[1] = {Tk};
        layer_attn.key_lengths = lengths;
        if (!silence_bias.empty()) {
          // The key axis is the cache's capacity here; keys past Tk are cut by key_lengths.
          silence_q8.assign(cap, 0.0f);
          std::copy(silence_bias.begin(), silence_bias.end(), silence_q8.begin());
          ConstTensor4 bq;
          bq.data = silence_q8.data();
          bq.shape = {1, 1, 1, cap};
          bq.strides = {0, 0, 0, 1};
          layer_attn.bias = bq;
        }
        const float* kscales = cache.q8_scales_.data() + kv0 / bk;
        const float* vscales = cache.q8_scales_.data() + (kv0 + cache.plane()) / bk;
        if (cache.format() == KvFormat::q4) {
          const std::uint8_t* kb = cache.q4_values_.data() + kv0 / 2;
          const ConstQ4Tensor4 k{{1, H, cap, D}, cache.q8_block_, kb, kscales};
          const ConstQ4Tensor4 v{{1, H, cap, D}, cache.q8_block_, kb + cache.plane() / 2, vscales};
          attention_q4kv(q, k, v, o, layer_attn);
        } else {
          const std::int8_t* kb = cache.q8_values_.data() + kv0;
          const ConstQ8Tensor4 k{{1, H, cap, D}, cache.q8_block_, kb, kscales};
          const ConstQ8Tensor4 v{{1, H, cap, D}, cache.q8_block_, kb + cache.plane(), vscales};
          attention_q8kv(q, k, v, o, layer_attn);
        }
        break;
      }
    }

    if (trace) {
      AttentionTrace& at = trace->layers[l];
      at.scale = 1.0f / std::sqrt(static_cast<float>(D));
      if (select.on_weights) select.on_weights(l, probs.data());
      at.last_weights.resize(static_cast<std::size_t>(H) * Tk);
      for (int hh = 0; hh < H; ++hh)
        std::memcpy(&at.last_weights[static_cast<std::size_t>(hh) * Tk],
                    &probs[(static_cast<std::size_t>(hh) * T + (T - 1)) * Tk], sizeof(float) * Tk);
      at.heads.clear();
      if (select.matrices)
        for (int hh = 0; hh < H; ++hh)
          if (select.heads.empty() || select.heads[static_cast<std::size_t>(l) * H + hh]) at.heads.push_back(hh);
      const std::size_t nk = at.heads.size();
      at.q.assign(select.q ? nk * T * D : 0, 0.0f);
      at.k.assign(select.k ? nk * Tk * D : 0, 0.0f);
      at.v.assign(select.v ? nk * Tk * D : 0, 0.0f);
      at.out.assign(select.out ? nk * T * D : 0, 0.0f);
      at.weights.assign(select.weights ? nk * T * Tk : 0, 0.0f);
      if (nk && (select.k || select.v)) {
        widen_kv(l);
      }
      const float* kc = kv_rows.data();
      const float* vc = kv_rows.data() + static_cast<std::size_t>(Tk) * C;
      for (std::size_t n = 0; n < nk; ++n) {
        const int hh = at.heads[n];
        for (int t = 0; t < T; ++t) {
          if (select.q) std::memcpy(&at.q[(n * T + t) * D], qbase + t * S3 + hh * D, sizeof(float) * D);
          if (select.out)
            std::memcpy(&at.out[(n * T + t) * D], att.data() + static_cast<std::size_t>(t) * C + hh * D,
                        sizeof(float) * D);
        }
        for (int j = 0; j < Tk; ++j) {
          if (select.k)
            std::memcpy(&at.k[(n * Tk + j) * D], kc + static_cast<std::size_t>(j) * C + hh * D, sizeof(float) * D);
          if (select.v)
            std::memcpy(&at.v[(n * Tk + j) * D], vc + static_cast<std::size_t>(j) * C + hh * D, sizeof(float) * D);
        }
        if (select.weights)
          std::memcpy(&at.weights[n * T * Tk], &probs[static_cast<std::size_t>(hh) * T * Tk], sizeof(float) * T * Tk);
      }
    }

    linear(pb ? &pb->c_proj : nullptr, b.c_proj, att.data(), T, C, C, h.data());
    if (P) record(trace->attn_output, l, h.data());
    layers::add(x.data(), h.data(), TC);

    layers::layer_norm(x.data(), T, C, b.ln_2.weight, b.ln_2.bias, eps, h.data(), nullptr, nullptr, threads_);
    linear(pb ? &pb->c_fc : nullptr, b.c_fc, h.data(), T, C, F, ff.data());
    layers::gelu(ff.data(), ff.data(), ff.size(), exact_gelu, threads_);
    linear(pb ? &pb->mlp_proj : nullptr, b.mlp_proj, ff.data(), T, F, C, h.data());
    if (P) record(trace->mlp_output, l, h.data());
    layers::add(x.data(), h.data(), TC);
    if (P) record(trace->residual, l + 1, x.data());
  }
  cache.size_ = Tk;

  // Final LayerNorm and the tied head: logits = ln_f(x) wte^T, for the last row or every row.
  const int rows = options.all_logits ? T : 1;
  const float* xs = x.data() + static_cast<std::size_t>(T - rows) * C;
  layers::layer_norm(xs, rows, C, params_.ln_f.weight, params_.ln_f.bias, eps, h.data(), nullptr, nullptr, threads_);
  std::vector<float> logits(static_cast<std::size_t>(rows) * V);
  if (pw)
    packed_linear(h.data(), rows, pw->wte, nullptr, logits.data(), static_cast<std::size_t>(V), threads_, precision);
  else
    layers::tied_head(h.data(), rows, C, params_.wte, V, logits.data(), threads_, precision);
  return logits;
}

std::vector<float> GptModel::logits(std::span<const std::int32_t> ids) const {
  KvCache cache = make_cache(std::max<int>(1, static_cast<int>(ids.size())));
  ForwardOptions o;
  o.all_logits = true;
  return forward(ids, cache, o);
}

}  // namespace jomoim
