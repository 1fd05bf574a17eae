// jomoim/model/train.hpp — training a GPT-2-architecture model: the backward pass of every layer,
// AdamW, and the parameter buffer both share.
//
// GptTrainable owns all parameters in one contiguous float buffer (and the gradients in a
// second buffer of the same layout), so the optimizer, gradient clipping and checkpointing
// are loops over one array. Its GptParams point into the buffer, so the inference runtime
// (GptModel) runs on the very weights being trained.
//
// loss_and_grad() runs the forward pass on a batch of token windows keeping the activations
// it needs, then the backward pass of every layer: the tied output head with softmax
// cross-entropy, LayerNorm, linear layers (oneDNN), GELU (tanh), causal multi-head attention
// (jomoim::attention_backward, from the forward's log-sum-exp: no T x T buffer), and the
// token and position embeddings.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jomoim/model/model.hpp"

namespace jomoim {

// Offsets of every tensor inside the flat parameter buffer, in the order of the Hugging Face
// names (wte, wpe, then each block, then ln_f).
struct ParamTensor {
  std::string name;  // Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight"
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;  // in floats
  std::size_t size = 0;    // in floats
  bool decay = false;      // AdamW weight decay applies (matrices and embeddings)
};
std::vector<ParamTensor> param_layout(const GptConfig& config);

// MatmulPrecision (model.hpp) in training: bf16 rounds every product's inputs, the backward
// pass's too; accumulation, outputs, weights, gradients and AdamW stay float32.
// Whether this CPU multiplies bf16 natively (AVX512_BF16); elsewhere bf16 is emulated and slow.
bool bf16_matmul_native();

// How a new run starts the learned position embedding (`train --wpe-init`).
enum class WpeInit {
  normal,      // N(0, 0.02), as GPT-2
  sinusoidal,  // the Transformer paper's sines and cosines: frequencies 10000^(-2i / n_embd), 1 down to 1e-4
  fourier,     // sines and cosines at n_embd / 2 frequencies spread evenly over (0, pi): pi (2i + 1) / n_embd
};

class GptTrainable {
 public:
  // GPT-2's initialisation: N(0, 0.02) for matrices and embeddings, projections into the
  // residual stream scaled by 1/sqrt(2 n_layer), zero biases, unit LayerNorm gains.
  // wpe_init sinusoidal or fourier: the position embedding starts instead as sinusoids
  // (wpe[p, 2i] = s sin(p w_i), wpe[p, 2i + 1] = s cos(p w_i)), scaled (s = 0.02 sqrt 2) to
  // N(0, 0.02)'s expected row norm; still learned like any weight. sinusoidal: the Transformer
  // paper's w_i = 10000^(-2i / n_embd), mostly slow waves (smooth in position); fourier:
  // w_i = pi (2i + 1) / n_embd, spread evenly over (0, pi) (for n_positions <= n_embd every two
  // rows are orthogonal, like one-hot positions, and "one position back" is a rotation
  // of each pair, so a head's W_Q W_K^T can peak sharply at one offset). Every other tensor gets
  // the same numbers either way. wpe_scale multiplies the position embedding's start (any kind)
  // by that factor (> 0; 1 is the scale above).
  GptTrainable(const GptConfig& config, std::uint64_t seed, WpeInit wpe_init = WpeInit::normal, double wpe_scale = 1.0);
  // Copies the weights of a loaded model (to continue training it).
  explicit GptTrainable(const GptModel& model);

  const GptConfig& config() const { return config_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }
  std::vector<float>& grads() { return grads_; }
  const std::vector<float>& grads() const { return grads_; }
  // Pointers into values(); valid as long as this object lives and values() is not resized.
  GptParams params() const;
  // An inference model over the same memory (no copy).
  GptModel model() const;

  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }
  // The products of loss_and_grad (forward and backward); loss() always multiplies in float32.
  void set_matmul_precision(MatmulPrecision p) { precision_ = p; }
  MatmulPrecision matmul_precision() const { return precision_; }

  // Mean cross-entropy of predicting tokens[b][t + 1] from tokens[b][0..t], over a batch of
  // `batch` windows of `seq + 1` tokens each (C order, [batch, seq + 1]). Adds the gradient of
  // (loss * grad_scale) to grads() (call zero_grads() first; accumulate over micro-batches by
  // calling again). Throws Error for a bad shape or id, or seq > n_positions.
  double loss_and_grad(std::span<const std::int32_t> tokens, int batch, int seq, double grad_scale = 1.0);
  // The same loss without gradients (validation).
  double loss(std::span<const std::int32_t> tokens, int batch, int seq) const;
  void zero_grads();

 private:
  double run(std::span<const std::int32_t> tokens, int batch, int seq, bool backward, double grad_scale);
  GptConfig config_;
  std::vector<ParamTensor> layout_;
  std::vector<float> values_, grads_;
  int threads_ = 0;
  MatmulPrecision precision_ = MatmulPrecision::f32;
  struct Buffers;  // activations and scratch, kept from one call to the next (no reallocation)
  std::shared_ptr<Buffers> buffers_;
};

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  // The position embedding (wpe.weight) stays as it is: no update, no decay (a fixed position
  // code, as the Transformer paper's sinusoids; trainer's --freeze-wpe).
  bool freeze_wpe = false;
};

// AdamW (decoupled weight decay) over the flat buffer; moments in float32.
class AdamW {
 public:
  explicit AdamW(std::size_t n) : m_(n, 0.0f), v_(n, 0.0f) {}
  // One update with learning rate `lr` (the schedule's value for this step).
  void step(GptTrainable& model, double lr, const AdamWOptions& options);
  std::int64_t steps() const { return t_; }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  void set_steps(std::int64_t t) { t_ = t; }

 private:
  std::vector<float> m_, v_;
  std::int64_t t_ = 0;
};

// Scales the gradients so that their global L2 norm is at most max_norm (if > 0); returns the
// norm before clipping. Summed in fixed chunks on `threads` threads (<= 0: OpenMP's default):
// the same bits for a given thread count.
double clip_grad_norm(std::vector<float>& grads, double max_norm, int threads = 0);

// Linear warm-up from 0 over `warmup` steps, then cosine decay from lr to min_lr at `total`.
double learning_rate(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr, double min_lr);

}  // namespace jomoim
