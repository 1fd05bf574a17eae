// The model's weight matrices in bf16 or q8 (WeightFormat), and the products that read them.
// Internal to the model part; see GptModel::set_weight_format in jomoim/model/model.hpp.
//
// A PackedMatrix holds W^T: one row per output, its inputs contiguous, so that a decode step's
// product is one dot product per output along a row (jomoim/engine/matvec.hpp). GPT-2's Conv1D
// weights [in, out] are transposed when packed; wte [vocab, n_embd] is already one row per
// output of the tied head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "blas.hpp"
#include "jomoim/model/model.hpp"

namespace jomoim {

struct PackedMatrix {
  WeightFormat format = WeightFormat::bf16;
  int rows = 0, cols = 0;           // outputs, inputs
  int block = 0;                    // q8: inputs per scale
  std::vector<std::uint16_t> bf16;  // bf16: [rows, cols]
  std::vector<std::int8_t> q;       // q8: [rows, cols]
  std::vector<float> scales;        // q8: [rows, cols / block]

  // src is [rows, cols] (conv1d false) or GPT-2's Conv1D [cols, rows] (conv1d true). Throws
  // Error naming `name` for q8 with cols not a multiple of 16, or a non-finite weight.
  static PackedMatrix pack(WeightFormat format, const float* src, int rows, int cols, bool conv1d,
                           const std::string& name);
  std::size_t bytes() const;
  // Row r as float32 [cols] (exactly what the products multiply by).
  void row(int r, float* out) const;
  // Rows [r0, r0 + n) as float32 [n, cols].
  void rows_f32(int r0, int n, float* out) const;
  // The whole matrix as float32 in the layout it was packed from ([rows, cols], or [cols, rows]
  // when conv1d).
  void unpack(float* out, bool conv1d) const;
};

struct PackedWeights {
  struct Block {
    PackedMatrix c_attn, c_proj, c_fc, mlp_proj;
  };
  PackedMatrix wte;
  std::vector<Block> blocks;
  std::vector<float> small;  // wpe, LayerNorms and biases (GptModel::params() points in here)
  std::size_t bytes() const;
  // Copies p's float32 tensors that stay (wpe, LayerNorms, biases) into `small`; returns
  // params pointing there, the matrices null.
  GptParams keep_small(const GptConfig& c, const GptParams& p);
};

// y[N, W.rows] (row stride ldy) = x[N, W.cols] W^T (+ bias): for N up to 16 rows per pass of the
// matvec kernels (64 on AVX-512, 32 on AVX2; 16 with precision bf16) those kernels (passes of
// rows sharing each weight read, over blocks of 64 KiB of weight rows), outputs split across
// threads; above, tiles of 256 outputs widened into float32 (a per-thread scratch of 256 * cols
// floats) and multiplied by model_blas::gemm. With precision bf16 the GEMMs round x and the
// widened tiles to bf16 (model_blas::Precision).
void packed_linear(const float* x, int N, const PackedMatrix& W, const float* bias, float* y, std::size_t ldy,
                   int threads, model_blas::Precision precision = model_blas::Precision::f32);

}  // namespace jomoim
