// The bf16 / q8 weight formats: packing at load, the products, GptModel's format switch.
// See packed_weights.hpp and WeightFormat in include/jomoim/model/model.hpp.
#include "packed_weights.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "blas.hpp"
#include "jomoim/core/half.hpp"
#include "jomoim/engine/elementwise.hpp"
#include "jomoim/engine/matvec.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/threads.hpp"

namespace jomoim {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32:
      return "f32";
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::q8:
      return "q8";
  }
  return "?";
}

std::optional<WeightFormat> parse_weight_format(std::string_view s) {
  if (s == "f32" || s == "float32") return WeightFormat::f32;
  if (s == "bf16" || s == "bfloat16") return WeightFormat::bf16;
  if (s == "q8") return WeightFormat::q8;
  return std::nullopt;
}

const char* matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "f32"; }

std::optional<MatmulPrecision> parse_matmul_precision(std::string_view s) {
  if (s == "f32" || s == "float32") return MatmulPrecision::f32;
  if (s == "bf16" || s == "bfloat16") return MatmulPrecision::bf16;
  return std::nullopt;
}

namespace {

// With float32 products, prompts of up to this many rows per pass of the matvec kernels
// (matvec::pass_rows: 64 rows with four a pass on AVX-512, 32 with two on AVX2) read the stored
// weights directly (in passes over blocks of weight rows that stay in L2); longer ones take a
// tile widened to float32 and an sgemm per tile. On a Zen 5 (2 threads, prefill, direct against
// widened, ms; bench/NOTES.md "Short prompts with bf16 weights" and "... with q8 weights"):
// natively, GPT-2 small with bf16 weights 24.8 / 30.3 against 45.0 / 49.2 at 24 / 32 tokens and
// 34.9 / 55.4 against 49.1 / 64.9 at 40 / 64, with q8 18.5 / 24.1 against 31.4 / 36.4 and 35.4 /
// 55.2 against 48.9 / 63.3, at 80 still 0.90-0.96x; pinned to AVX2, 5 rounds at 28 / 32 tokens,
// q8 41.9 / 49.9 against 47.5 / 51.2, bf16 36.8 / 41.3 against 46.6 / 51.5 (a run of 3 rounds had
// q8 behind at 32: 56.6 against 49.3).
constexpr int kMatvecRowsPerPass = 16;
// Asked for bf16 products (--matmul bf16), prompts of more than 16 rows go to oneDNN's bf16
// matmul (bf16_prompt) where the CPU has bf16 instructions, else to the widened tiles.
constexpr int kBf16PromptRows = 16;

// dst[r, c] = src[c, r] for a [cols, rows] source: 32 x 32 tiles, so both sides stay in cache.
void transpose(const float* src, int rows, int cols, float* dst) {
  constexpr int kT = 32;
  for (int c0 = 0; c0 < cols; c0 += kT)
    for (int r0 = 0; r0 < rows; r0 += kT) {
      const int c1 = std::min(cols, c0 + kT), r1 = std::min(rows, r0 + kT);
      for (int c = c0; c < c1; ++c)
        for (int r = r0; r < r1; ++r)
          dst[static_cast<std::size_t>(r) * cols + c] = src[static_cast<std::size_t>(c) * rows + r];
    }
}

}  // namespace

PackedMatrix PackedMatrix::pack(WeightFormat format, const float* src, int rows, int cols, bool conv1d,
                                const std::string& name) {
  if (format == WeightFormat::f32) throw Error("model: " + name + ": f32 matrices are not packed");
  PackedMatrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  // The matrix one row per output, float32 (a transposed copy for Conv1D weights).
  std::vector<float> t;
  const float* w = src;
  if (conv1d) {
    t.resize(n);
    transpose(src, rows, cols, t.data());
    w = t.data();
  }
  if (format == WeightFormat::bf16) {
    m.bf16.resize(n);
    for (std::size_t i = 0; i < n; ++i) m.bf16[i] = bf16_from_float(w[i]);
    return m;
  }
  m.block = cols % 32 == 0 ? 32 : 16;
  if (cols % 16 != 0)
    throw Error("model: q8 weights need input widths that are multiples of 16; " + name + " has " +
                std::to_string(cols));
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i]))
      throw Error("model: " + name + " has a non-finite weight at [" + std::to_string(conv1d ? i % cols : i / cols) +
                  ", " + std::to_string(conv1d ? i / cols : i % cols) + "]; q8 cannot hold it");
  m.q.resize(n);
  m.scales.resize(n / m.block);
  ConstTensor4 x;
  x.data = w;
  x.shape = {1, 1, rows, cols};
  x.strides = {0, 0, cols, 1};
  quantize_q8(x, Q8Tensor4{{1, 1, rows, cols}, m.block, m.q.data(), m.scales.data()});
  return m;
}

std::size_t PackedMatrix::bytes() const {
  return bf16.size() * sizeof(std::uint16_t) + q.size() + scales.size() * sizeof(float);
}

void PackedMatrix::rows_f32(int r0, int n, float* out) const {
  const std::size_t off = static_cast<std::size_t>(r0) * cols;
  if (format == WeightFormat::bf16) {
    matvec::widen_bf16(bf16.data() + off, out, static_cast<std::size_t>(n) * cols);
    return;
  }
  const int nb = cols / block;
  for (int r = 0; r < n; ++r)
    matvec::dequantize_q8_row(q.data() + off + static_cast<std::size_t>(r) * cols,
                              scales.data() + static_cast<std::size_t>(r0 + r) * nb, block, cols,
                              out + static_cast<std::size_t>(r) * cols);
}

void PackedMatrix::row(int r, float* out) const { rows_f32(r, 1, out); }

void PackedMatrix::unpack(float* out, bool conv1d) const {
  if (!conv1d) {
    rows_f32(0, rows, out);
    return;
  }
  // Back to GPT-2's [cols, rows]: the packing's tiled transpose, the other way round.
  std::vector<float> t(static_cast<std::size_t>(rows) * cols);
  rows_f32(0, rows, t.data());
  transpose(t.data(), cols, rows, out);
}

std::size_t PackedWeights::bytes() const {
  std::size_t b = wte.bytes() + small.size() * sizeof(float);
  for (const auto& x : blocks) b += x.c_attn.bytes() + x.c_proj.bytes() + x.c_fc.bytes() + x.mlp_proj.bytes();
  return b;
}

namespace {

// A prompt's widened weight tile (float32), one per thread (the float32 products' path), and 16
// dequantized rows of one (the bf16 path's, each thread its own while it rounds them).
thread_local std::vector<float> prompt_tile, prompt_rows;

// y += x W^T with bf16 inputs (GptModel::set_matmul): x rounded once, then one bf16 matmul for a
// bf16 matrix as stored, or per tile of q8 rows dequantized 16 at a time and rounded to bf16
// (2^20 values, at least 256 rows: 2 MiB of bf16 scratch at most, plus 16 float32 rows per
// thread, and few products for a small model's matrices). False (y as it was) where oneDNN has
// no bf16 matmul.
bool bf16_prompt(const float* x, int N, const PackedMatrix& W, float* y, std::size_t ldy, int threads, int nt) {
  const int R = W.rows, K = W.cols;
  const int kTile = std::max(256, (1 << 20) / K / 16 * 16);
  thread_local std::vector<std::uint16_t> xb, tb;
  xb.resize(static_cast<std::size_t>(N) * K);
  std::uint16_t* x16 = xb.data();  // the parallel region's threads see their own thread_locals
  // x rounded by the threads, 16 rows at a time (on one thread while the other waited, the
  // rounding took 7 % of the default model's q8 prefill on the Intel Xeon here).
  const int xchunks = (N + 15) / 16;
  auto round_x = [&](int c) {
    const int r = 16 * c, m = std::min(16, N - r);
    elementwise::round_to_bf16(x + static_cast<std::size_t>(r) * K, x16 + static_cast<std::size_t>(r) * K,
                               static_cast<std::size_t>(m) * K);
  };
  if (W.format == WeightFormat::bf16) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && xb.size() >= 65536)
    for (int c = 0; c < xchunks; ++c) round_x(c);
    return model_blas::gemm_bf16_nt(N, R, K, x16, K, W.bf16.data(), K, true, y, static_cast<int>(ldy), threads);
  }
  tb.resize(static_cast<std::size_t>(std::min(kTile, R)) * K);
  std::uint16_t* t16 = tb.data();
  for (int r0 = 0; r0 < R; r0 += kTile) {
    const int n = std::min(kTile, R - r0);
    // One region: x's rounding (first tile only), then each thread's 16-row chunks of the tile
    // dequantized and rounded.
#pragma omp parallel num_threads(nt)
    {
      if (r0 == 0) {
#pragma omp for schedule(static) nowait
        for (int c = 0; c < xchunks; ++c) round_x(c);
      }
#pragma omp for schedule(static)
      for (int c = 0; c < (n + 15) / 16; ++c) {
        const std::size_t off = static_cast<std::size_t>(16) * c * K;
        const int m = std::min(16, n - 16 * c);
        prompt_rows.resize(static_cast<std::size_t>(16) * K);  // this thread's
        W.rows_f32(r0 + 16 * c, m, prompt_rows.data());
        elementwise::round_to_bf16(prompt_rows.data(), t16 + off, static_cast<std::size_t>(m) * K);
      }
    }
    if (!model_blas::gemm_bf16_nt(N, n, K, xb.data(), K, t16, K, true, y + r0, static_cast<int>(ldy), threads)) {
      if (r0 == 0) return false;  // the first product tells: nothing added yet
      throw Error("model: oneDNN's bf16 matmul failed part-way through a product");
    }
  }
  return true;
}

}  // namespace

void packed_linear(const float* x, int N, const PackedMatrix& W, const float* bias, float* y, std::size_t ldy,
                   int threads, model_blas::Precision precision) {
  const int R = W.rows, K = W.cols;
  if (N <= 0 || R <= 0) return;
  if (N <= (precision == model_blas::Precision::f32 ? kMatvecRowsPerPass * matvec::pass_rows() : kBf16PromptRows)) {
    // Each thread's slice of weight rows meets every activation row (the kernels take them in
    // passes over blocks of weight rows that stay in L2).
    auto run = [&](int r0, int r1) {
      const float* b = bias ? bias + r0 : nullptr;
      if (W.format == WeightFormat::bf16)
        matvec::bf16_rows(x, K, N, W.bf16.data() + static_cast<std::size_t>(r0) * K, K, K, r1 - r0, b, y + r0, ldy);
      else
        matvec::q8_rows(x, K, N, W.q.data() + static_cast<std::size_t>(r0) * K, K,
                        W.scales.data() + static_cast<std::size_t>(r0) * (K / W.block), W.block, K, r1 - r0, b, y + r0,
                        ldy);
    };
    int nt = resolve_threads(threads);
    // A product under 64 Ki weights is not worth a parallel region; slices are 16 outputs.
    if (static_cast<std::size_t>(R) * K < 65536 || omp_in_parallel()) nt = 1;
    nt = std::max(1, std::min(nt, (R + 15) / 16));
    if (nt == 1) {
      run(0, R);
      return;
    }
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int blocks = (R + 15) / 16;
      const int b0 = static_cast<int>(static_cast<long>(blocks) * t / T);
      const int b1 = static_cast<int>(static_cast<long>(blocks) * (t + 1) / T);
      run(std::min(R, b0 * 16), std::min(R, b1 * 16));
    }
    return;
  }
  // A prompt: tiles of outputs widened into float32, then one GEMM per tile (y = bias, += x W^T).
  constexpr int kTile = 256;
  for (int n = 0; n < N; ++n) {
    float* yr = y + static_cast<std::size_t>(n) * ldy;
    if (bias)
      std::memcpy(yr, bias, sizeof(float) * R);
    else
      std::fill(yr, yr + R, 0.0f);
  }
  const int nt = omp_in_parallel() ? 1 : std::max(1, std::min(resolve_threads(threads), kTile / 16));
  if (precision == model_blas::Precision::bf16 && model_blas::bf16_native() && N >= 16 && !omp_in_parallel() &&
      bf16_prompt(x, N, W, y, ldy, threads, nt))
    return;
  std::vector<float>& tile = prompt_tile;
  tile.resize(static_cast<std::size_t>(std::min(kTile, R)) * K);
  for (int r0 = 0; r0 < R; r0 += kTile) {
    const int n = std::min(kTile, R - r0);
    float* t = tile.data();
    if (nt == 1) {
      W.rows_f32(r0, n, t);
    } else {
#pragma omp parallel for schedule(static) num_threads(nt)
      for (int c = 0; c < (n + 15) / 16; ++c)
        W.rows_f32(r0 + 16 * c, std::min(16, n - 16 * c), t + static_cast<std::size_t>(16) * c * K);
    }
    model_blas::gemm(false, true, N, n, K, 1.0f, x, K, t, K, 1.0f, y + r0, static_cast<int>(ldy), threads, precision);
  }
}

// ---------------------------------------------------------------------------------------------
// GptModel's side.

struct GptModel::FloatCopy {
  std::once_flag once;
  std::vector<float> data;
  GptParams params;
};

GptParams PackedWeights::keep_small(const GptConfig& c, const GptParams& p) {
  const std::size_t C = c.n_embd, F = c.inner(), L = c.n_layer;
  small.resize(static_cast<std::size_t>(c.n_positions) * C + 2 * C + L * (4 * C + 3 * C + C + F + C));
  std::size_t at = 0;
  auto keep = [&](const float* src, std::size_t n) {
    float* dst = small.data() + at;
    std::memcpy(dst, src, sizeof(float) * n);
    at += n;
    return static_cast<const float*>(dst);
  };
  GptParams np;
  np.wpe = keep(p.wpe, static_cast<std::size_t>(c.n_positions) * C);
  np.blocks.resize(L);
  for (std::size_t l = 0; l < L; ++l) {
    const BlockParams& b = p.blocks[l];
    BlockParams& n = np.blocks[l];
    n.ln_1 = {keep(b.ln_1.weight, C), keep(b.ln_1.bias, C)};
    n.ln_2 = {keep(b.ln_2.weight, C), keep(b.ln_2.bias, C)};
    n.c_attn.bias = keep(b.c_attn.bias, 3 * C);
    n.c_proj.bias = keep(b.c_proj.bias, C);
    n.c_fc.bias = keep(b.c_fc.bias, F);
    n.mlp_proj.bias = keep(b.mlp_proj.bias, C);
  }
  np.ln_f = {keep(p.ln_f.weight, C), keep(p.ln_f.bias, C)};
  return np;
}

void GptModel::adopt(std::shared_ptr<PackedWeights> pw, const GptParams& small, WeightFormat format) {
  params_ = pw->keep_small(config_, small);
  packed_ = std::move(pw);
  owners_.clear();  // the checkpoint (or its widened copy) is no longer read
  copied_bytes_ = packed_->bytes();
  weight_format_ = format;
  float_copy_ = std::make_shared<FloatCopy>();
}

GptModel::GptModel(GptConfig config, const GptParams& small, std::shared_ptr<PackedWeights> packed, WeightFormat format)
    : config_(std::move(config)) {
  config_.validate();
  adopt(std::move(packed), small, format);
}

void GptModel::set_weight_format(WeightFormat format) {
  if (format == weight_format_) return;
  if (weight_format_ != WeightFormat::f32)
    throw Error(std::string("model: the weights are already ") + weight_format_name(weight_format_) +
                "; a model converts them only from f32 (load it again)");
  const GptConfig& c = config_;
  const int C = c.n_embd, F = c.inner(), V = c.vocab_size, L = c.n_layer;
  auto pw = std::make_shared<PackedWeights>();
  pw->wte = PackedMatrix::pack(format, params_.wte, V, C, false, "wte.weight");
  pw->blocks.resize(L);
  for (int l = 0; l < L; ++l) {
    const BlockParams& b = params_.blocks[l];
    const std::string h = "h." + std::to_string(l) + ".";
    PackedWeights::Block& p = pw->blocks[l];
    p.c_attn = PackedMatrix::pack(format, b.c_attn.weight, 3 * C, C, true, h + "attn.c_attn.weight");
    p.c_proj = PackedMatrix::pack(format, b.c_proj.weight, C, C, true, h + "attn.c_proj.weight");
    p.c_fc = PackedMatrix::pack(format, b.c_fc.weight, F, C, true, h + "mlp.c_fc.weight");
    p.mlp_proj = PackedMatrix::pack(format, b.mlp_proj.weight, C, F, true, h + "mlp.c_proj.weight");
  }
  const GptParams old = params_;
  adopt(std::move(pw), old, format);
}

std::size_t GptModel::weight_bytes() const {
  if (packed_) return packed_->bytes();
  return static_cast<std::size_t>(config_.parameter_count()) * sizeof(float);
}

const GptParams& GptModel::float_params() const {
  if (!packed_) return params_;
  FloatCopy& f = *float_copy_;
  std::call_once(f.once, [&] {
    const GptConfig& c = config_;
    const std::size_t C = c.n_embd, F = c.inner(), V = c.vocab_size;
    const std::size_t per_block = 3 * C * C + C * C + C * F + F * C;
    f.data.resize(V * C + c.n_layer * per_block);
    float* at = f.data.data();
    GptParams p = params_;
    packed_->wte.unpack(at, false);
    p.wte = at;
    at += V * C;
    for (int l = 0; l < c.n_layer; ++l) {
      const PackedWeights::Block& b = packed_->blocks[l];
      const PackedMatrix* m[4] = {&b.c_attn, &b.c_proj, &b.c_fc, &b.mlp_proj};
      const float** w[4] = {&p.blocks[l].c_attn.weight, &p.blocks[l].c_proj.weight, &p.blocks[l].c_fc.weight,
                            &p.blocks[l].mlp_proj.weight};
      for (int i = 0; i < 4; ++i) {
        m[i]->unpack(at, true);
        *w[i] = at;
        at += static_cast<std::size_t>(m[i]->rows) * m[i]->cols;
      }
    }
    f.params = std::move(p);
  });
  return f.params;
}

}  // namespace jomoim
