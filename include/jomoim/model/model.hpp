// jomoim/model/model.hpp — a GPT-2-architecture decoder on the attention engine.
//
// The model of docs/design.md's second layer: token embedding + learned position embedding, n_layer
// pre-LayerNorm blocks (causal multi-head self-attention through jomoim::attention, then a GELU
// MLP), a final LayerNorm, and an output head tied to the token embedding. Linear layers run on
// oneDNN's sgemm and jomoim's matrix-vector kernels; attention runs on the engine, reading Q, K and V straight out of
// the fused QKV projection and the KV cache through strided views (no per-head copies).
//
// Weights are borrowed: GptParams holds pointers, and the GptModel keeps whatever owns them
// alive (the memory-mapped safetensors file when loaded from disk: F32 checkpoints are used in
// place, not copied). A GptModel is immutable and its const methods may run concurrently on
// different KvCache objects.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

// The fields of a Hugging Face GPT-2 config.json that the architecture needs.
struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int n_positions = 0;  // context length
  int vocab_size = 0;
  int n_inner = 0;  // MLP width; 0 means 4 * n_embd (config.json's null)
  float layer_norm_epsilon = 1e-5f;
  // "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" are the tanh approximation GPT-2 uses;
  // "gelu" is the exact (erf) form. Anything else is refused.
  std::string activation_function = "gelu_new";

  int head_dim() const { return n_embd / n_head; }
  int inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // The most parameters a configuration may describe (validate() refuses more).
  static constexpr std::int64_t kMaxParameters = std::int64_t(1) << 40;
  // Positive sizes, n_embd divisible by n_head, a known activation, a positive finite epsilon,
  // at most kMaxParameters parameters.
  void validate() const;
  // Parses config.json text; `name` is used in messages. Throws Error naming the field.
  static GptConfig from_json(const std::string& text, const std::string& name = "config.json");
  static GptConfig load(const std::filesystem::path& config_json);
  // config.json as Hugging Face writes it for GPT-2 (model_type "gpt2"), loadable by both.
  std::string to_json() const;
  // Number of parameters (the tied output head counted once).
  std::int64_t parameter_count() const;
};

// Borrowed weights, in Hugging Face GPT-2's layout. Linear weights are [in, out] (GPT-2's
// Conv1D), so y = x W + b with x as rows.
struct LayerNormParams {
  const float* weight = nullptr;  // [n_embd]
  const float* bias = nullptr;    // [n_embd]
};
struct LinearParams {
  const float* weight = nullptr;  // [in, out]
  const float* bias = nullptr;    // [out]
};
struct BlockParams {
  LayerNormParams ln_1;
  LinearParams c_attn;  // [n_embd, 3 n_embd]: Q, K, V side by side, heads contiguous inside each
  LinearParams c_proj;  // [n_embd, n_embd]
  LayerNormParams ln_2;
  LinearParams c_fc;      // [n_embd, inner]
  LinearParams mlp_proj;  // [inner, n_embd]
};
struct GptParams {
  const float* wte = nullptr;  // [vocab_size, n_embd], also the output head
  const float* wpe = nullptr;  // [n_positions, n_embd]
  std::vector<BlockParams> blocks;
  LayerNormParams ln_f;
};

// How a model holds its weight matrices (the `--weights` option of the model commands).
//   f32   float32, as loaded (an F32 checkpoint stays in the mapped file, zero copy).
//   bf16  every matrix (the four of each block and wte, also the output head) rounded to
//         bfloat16 (nearest, ties to even): 2 bytes per weight. A BF16 checkpoint's values are
//         kept exactly; an F16 one's are rounded.
//   q8    the same matrices in the q8 format of jomoim/engine/quant.hpp, quantized at load:
//         blocks of 32 consecutive inputs of one output (16 when 32 does not divide the input
//         width) with one float scale, 1.125 bytes per weight.
// The position embedding, LayerNorms and biases stay float32 in every format, and so do the
// activations: a product widens the stored weights to float32 in registers and accumulates in
// float32 (jomoim/engine/matvec.hpp for a few rows; a widened tile and a float32 GEMM for
// prompts).
enum class WeightFormat : std::uint8_t { f32, bf16, q8 };
const char* weight_format_name(WeightFormat f);
// "f32", "bf16", "q8" (also "float32", "bfloat16"); nullopt for anything else.
std::optional<WeightFormat> parse_weight_format(std::string_view s);

struct PackedWeights;  // the bf16 / q8 matrices (internal to the model part)

// How a KV cache stores keys and values (the `--kv-cache` option of the model commands).
//   f32   float32 rows, as the projection computed them: 4 bytes per value.
//   bf16  each value rounded to bfloat16 (nearest, ties to even): 2 bytes per value. The new
//         tokens' queries are rounded to bf16 too, and attention runs on the 16-bit inputs
//         (jomoim::attention's bf16 overload: float32 scores, softmax and accumulation).
//   q8    the engine's q8 format (jomoim/engine/quant.hpp): per key/value row of each head,
//         blocks of 32 values (16 when head_dim is not a multiple of 32) with one float scale;
//         1.125 bytes per value at block 32. Queries stay float32 (attention_q8kv).
//   q4    the engine's q4 format (quant.hpp): blocks of 32 values with one float scale, two
//         values a byte; 0.625 bytes per value, about 18 times q8's error (attention_q4kv).
//         Needs a head_dim that is a multiple of 32.
enum class KvFormat : std::uint8_t { f32, bf16, q8, q4 };
const char* kv_format_name(KvFormat f);
// "f32", "bf16", "q8", "q4" (also "float32", "bfloat16"); nullopt for anything else.
std::optional<KvFormat> parse_kv_format(std::string_view s);

// Keys and values of every layer for the tokens seen so far, so that a new token costs one
// pass over the weights instead of a recompute, in one of the KvFormats. Layout per layer, in
// every format: each head's rows together, K then V, each a C-order [H, capacity, D] plane
// (q8: values so, and scales [H, capacity, D / block]; q4: bytes [H, capacity, D / 2] and the
// scales so), so that attention streams each head's
// keys and values contiguously. (Rows of one token's heads side by side, n_embd apart, put each
// key of a head on another page at GPT-2's widths: GPT-2 small's F32 decode at 1,024 tokens
// went from 62 to 68 tokens/s with this layout on Zen 5.) The engine reads a plane's first
// size() rows per head as a [1, H, n, D] view (q8, q4: a quantized tensor [1, H, capacity, D]
// with key_lengths).
// Memory, allocated once in the constructor: 2 * n_layer * capacity * n_embd values of the
// format (plus the q8 scales).
class KvCache {
 public:
  KvCache() = default;
  // Throws Error for a non-positive capacity, or q8 (q4) with a head_dim that is not a multiple
  // of 16 (32).
  KvCache(const GptConfig& config, int capacity, KvFormat format = KvFormat::f32);
  KvFormat format() const { return format_; }
  int size() const { return size_; }
  int capacity() const { return capacity_; }
  void clear() { size_ = 0; }
  void truncate(int n);  // forget tokens from position n on (0 <= n <= size)
  // The float32 [H, capacity, D] key (value) plane of an f32 cache (throw Error for the other
  // formats; see read_rows).
  float* keys(int layer);
  float* values(int layer);
  const float* keys(int layer) const;
  const float* values(int layer) const;
  // Rows [first, first + n) of a layer's keys (or values) as float32 [n, n_embd], in any format:
  // exactly what attention reads (bf16 widened, q8 and q4 dequantized as d * q).
  void read_rows(int layer, bool values, int first, int n, float* out) const;
  // The q8 or q4 block size (values per scale); 0 for the other formats.
  int q8_block() const { return q8_block_; }
  // Bytes of keys and values (and q8 scales) held.
  std::size_t bytes() const;

 private:
  friend class GptModel;
  std::size_t layer_offset(int layer) const {
    return static_cast<std::size_t>(layer) * 2 * static_cast<std::size_t>(capacity_) * n_embd_;
  }
  std::size_t plane() const { return static_cast<std::size_t>(capacity_) * n_embd_; }  // values of one K or V
  // Stores rows [pos, pos + n) of layer `layer` from k and v ([n, *] rows of `stride` floats,
  // n_embd values each), converting to the format (a task per K or V head, on up to `threads`
  // threads when n >= 16). q8 and q4 throw Error on a non-finite value; the head that holds
  // it is not written.
  void write_rows(int layer, int pos, int n, const float* k, const float* v, std::int64_t stride, int threads = 1);
  std::vector<float> data_;              // f32
  std::vector<std::uint16_t> data16_;    // bf16
  std::vector<std::int8_t> q8_values_;   // q8: per layer K then V, each [H, capacity, D]
  std::vector<std::uint8_t> q4_values_;  // q4: per layer K then V, each [H, capacity, D / 2]
  std::vector<float> q8_scales_;         // q8, q4: per layer K then V, each [H, capacity, D / block]
  KvFormat format_ = KvFormat::f32;
  int n_layer_ = 0, n_embd_ = 0, n_head_ = 0, capacity_ = 0, size_ = 0, q8_block_ = 0;
};

// What one forward pass computed inside attention, recorded only when asked for (the
// explorer's "meeting minutes"). T = new tokens, Tk = keys visible to them (cache + new).
// All arrays are C order float32, plain copies of what the pass computed: nothing is
// recomputed for the trace (raw scores Q_i . K_j, for instance, are the explorer's to derive).
struct AttentionTrace {
  std::vector<int> heads;           // the heads whose matrices are kept below, ascending (TraceSelection)
  std::vector<float> q;             // [heads, T, D]   queries of the new tokens
  std::vector<float> k;             // [heads, Tk, D]  keys of every visible token
  std::vector<float> v;             // [heads, Tk, D]  values
  std::vector<float> weights;       // [heads, T, Tk]  softmax weights as the engine computed them (0 where masked)
  std::vector<float> out;           // [heads, T, D]   weighted sums of values, per head, before c_proj
  std::vector<float> last_weights;  // [n_head, Tk] every head's weights of the last new token
  float scale = 0;                  // the 1/sqrt(D) applied to the scores before the softmax
};

// What a traced pass keeps. The default keeps every head's matrices; a summary needs none of
// them (matrices = false, with on_weights to see each layer's weights once): the trace's memory
// is then O(n_layer * n_head * Tk) plus one layer's weights [n_head, T, Tk] at a time.
struct TraceSelection {
  bool matrices = true;             // false: no head keeps q, k, v, out or weights
  std::vector<std::uint8_t> heads;  // [n_layer * n_head] flags in (layer, head) order; empty: every head
  // Which of a kept head's tensors are recorded (an unrecorded one stays empty).
  bool q = true, k = true, v = true, out = true, weights = true;
  // Called once per layer, in order, with that layer's softmax weights of every head
  // ([n_head, T, Tk], C order, valid only during the call), whatever is kept.
  std::function<void(int layer, const float* weights)> on_weights;
};

struct ForwardTrace {
  int T = 0, Tk = 0, first_position = 0;
  std::vector<float> token_embedding;     // [T, n_embd] rows of wte
  std::vector<float> position_embedding;  // [T, n_embd] rows of wpe
  std::vector<AttentionTrace> layers;     // n_layer entries
  // Only when ForwardOptions::residual_rows is non-empty (else these stay empty): for each
  // asked row r (an index into the new tokens, in the order asked), P = rows.size():
  std::vector<int> residual_rows;  // the rows asked
  std::vector<float> residual;     // [n_layer + 1, P, n_embd] the residual stream after the
                                   // embeddings (entry 0) and after each layer (entry l + 1)
  std::vector<float> attn_output;  // [n_layer, P, n_embd] each block's attention output
                                   // (after c_proj, bias included), as added to the stream
  std::vector<float> mlp_output;   // [n_layer, P, n_embd] each block's MLP output (bias included)
};

// The precision of the inputs of the model's matrix products: float32, or bfloat16 (inputs
// rounded to bf16, nearest even, per product; float32 sums and outputs, through oneDNN's matmul:
// AMX tiles or AVX512_BF16 instructions where the CPU has them, float32 products where oneDNN
// has no bf16 matmul, i.e. without AVX-512). Training: TrainingModel::set_matmul_precision;
// inference: GptModel::set_matmul (the prompt's products only).
enum class MatmulPrecision { f32, bf16 };
// "f32" / "float32", "bf16" / "bfloat16" (nullopt otherwise), and the short name.
std::optional<MatmulPrecision> parse_matmul_precision(std::string_view name);
const char* matmul_precision_name(MatmulPrecision p);

struct ForwardOptions {
  // Absolute positions whose keys nobody hears, in every layer and head (their queries still
  // run). A query whose every visible key is silenced receives zeros (the engine's rule).
  std::span<const int> silenced;
  // Use each layer's W_K (and bias) to make queries and W_Q to make keys.
  bool swap_qk = false;
  // Return logits for every new token ([T, vocab]) instead of only the last ([vocab]).
  bool all_logits = false;
  // When set, filled with the attention internals of this pass (copies of what it computed:
  // `trace_select` says which; null keeps everything). The normal path pays nothing when null.
  ForwardTrace* trace = nullptr;
  const TraceSelection* trace_select = nullptr;
  // With `trace` set: also record the residual stream, attention outputs and MLP outputs at
  // these rows (indices into the new tokens; see ForwardTrace). Plain copies of what the pass
  // computed; nothing is recorded when empty. Ignored without a trace.
  std::span<const int> residual_rows;
};

class GptModel {
 public:
  // Takes borrowed params; `owners` keep the memory they point into alive. Validates the
  // config and that no required pointer is null.
  GptModel(GptConfig config, GptParams params, std::vector<std::shared_ptr<const void>> owners = {});

  // A Hugging Face GPT-2 model directory: config.json + model.safetensors (F32, F16 or BF16;
  // names with or without the "transformer." prefix; h.N.attn.bias / masked_bias buffers and
  // lm_head.weight ignored, the head is tied to wte). Every tensor's shape is checked against
  // the config. Throws Error naming the directory, file and tensor. F32 weights stay in the
  // mapped file (zero copy).
  // With `weights` other than f32 the matrices are then converted (set_weight_format).
  static GptModel load(const std::filesystem::path& dir, WeightFormat weights = WeightFormat::f32);

  const GptConfig& config() const { return config_; }
  // The weights as float32 pointers. In the f32 format, what forward() reads. In bf16 and q8,
  // the position embedding, LayerNorms and biases (float32 copies) while wte and the blocks'
  // matrix weights are null: see float_params().
  const GptParams& params() const { return params_; }
  // Every weight as float32, in any format: params() for f32; for bf16 and q8 the stored
  // matrices widened (bf16) or dequantized (d * q), i.e. exactly the numbers forward() multiplies
  // by, made on the first call and kept (4 bytes per parameter; the explorer's attribution and
  // logit lens read them). Thread-safe.
  const GptParams& float_params() const;
  // Bytes of weights this process copied (F16/BF16 conversion, or the bf16/q8 matrices and
  // the float32 tensors kept beside them); 0 for an F32 checkpoint in the f32 format.
  std::size_t copied_bytes() const { return copied_bytes_; }
  void set_copied_bytes(std::size_t n) { copied_bytes_ = n; }

  // Converts the matrices to `format` (see WeightFormat) and releases the float32 ones (an F32
  // checkpoint's mapping, a widened copy): only from f32, or to the format already held.
  // Throws Error for q8 when a matrix's input width is not a multiple of 16, or a weight is not
  // finite, naming the tensor; the model is unchanged when it throws.
  void set_weight_format(WeightFormat format);
  WeightFormat weight_format() const { return weight_format_; }
  // Bytes of every weight as held now (the matrices in their format, the rest float32).
  std::size_t weight_bytes() const;

  // The precision of the products of a prompt's linear layers and tied head (forward calls of
  // more than 16 tokens; fewer go through the matrix-vector kernels, float32 always): f32 (the
  // default) computes what the float model computes on the format's weights; bf16 also rounds the
  // activations to bf16 for oneDNN's matmul, for speed (about 1.8x GPT-2 small's prefill on an
  // Intel Xeon with AMX, bench/NOTES.md), at a relative logit error of about 1e-2.
  void set_matmul(MatmulPrecision precision) { matmul_ = precision; }
  MatmulPrecision matmul() const { return matmul_; }

  // Threads for attention and the linear layers (0: OpenMP's default).
  void set_threads(int threads);
  int threads() const { return threads_; }
  // The format of the KV caches that make_cache() creates (f32 unless set; see KvFormat).
  // Throws Error for q8 when head_dim is not a multiple of 16.
  void set_kv_format(KvFormat format);
  KvFormat kv_format() const { return kv_format_; }
  // A cache for this model in its kv_format(), for `capacity` tokens.
  KvCache make_cache(int capacity) const { return KvCache(config_, capacity, kv_format_); }

  // Runs `ids` at positions cache.size()... through the model, appends their keys and values to
  // the cache and returns logits ([vocab], or [T, vocab] with options.all_logits). Throws
  // Error for an id outside the vocabulary, an empty input, or more tokens than the context
  // (n_positions) or the cache holds; the cache is unchanged when it throws.
  std::vector<float> forward(std::span<const std::int32_t> ids, KvCache& cache,
                             const ForwardOptions& options = {}) const;
  // Logits for every position of `ids` from scratch ([T, vocab]); a convenience for tests.
  std::vector<float> logits(std::span<const std::int32_t> ids) const;

 private:
  GptConfig config_;
  GptParams params_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::size_t copied_bytes_ = 0;
  int threads_ = 0;
  KvFormat kv_format_ = KvFormat::f32;
  WeightFormat weight_format_ = WeightFormat::f32;
  MatmulPrecision matmul_ = MatmulPrecision::f32;
  // A model whose matrices are already packed (load() in bf16 / q8): `small` holds the float32
  // tensors (matrix pointers null), copied into the packed weights.
  GptModel(GptConfig config, const GptParams& small, std::shared_ptr<PackedWeights> packed, WeightFormat format);
  void adopt(std::shared_ptr<PackedWeights> packed, const GptParams& small, WeightFormat format);
  std::shared_ptr<const PackedWeights> packed_;  // bf16 and q8
  struct FloatCopy;                              // float_params() of bf16 and q8, made once
  std::shared_ptr<FloatCopy> float_copy_;
};

// Writes a model directory the way Hugging Face does for GPT-2 (config.json and
// model.safetensors with the un-prefixed names, F32), so `GptModel::load` and Hugging Face
// both read it. Each file is written atomically. The tokenizer files are not touched.
void save_gpt2_checkpoint(const std::filesystem::path& dir, const GptConfig& config, const GptParams& params,
                          const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace jomoim
