// Element-wise kernels of the model layers, vectorised with Highway (run-time dispatch to the
// best SIMD target, like the attention kernels; jomoim::set_simd_target applies here too).
#pragma once

#include <cstddef>
#include <cstdint>

namespace jomoim::elementwise {

// y = GELU(x) with the tanh approximation (GPT-2's "gelu_new"); y may alias x.
void gelu_tanh(const float* x, float* y, std::size_t n);
// dx = dy * GELU'(x) (tanh approximation); dx may alias dy.
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n);
// out[i] = bf16_from_float(x[i]) (jomoim/core/half.hpp): nearest, ties to even; NaN stays NaN.
void round_to_bf16(const float* x, std::uint16_t* out, std::size_t n);
// One row of LayerNorm, n >= 1: y = (x - mean) / sqrt(var + eps) * g + b, mean and variance
// summed in float64; the row's mean and 1 / sqrt(var + eps) to *mean, *rstd when not null; y may
// alias x.
void layer_norm_row(const float* x, std::size_t n, const float* g, const float* b, float eps, float* y, float* mean,
                    float* rstd);
// max(x[0..n)) for n >= 1.
float row_max(const float* x, std::size_t n);
// sum of exp(x[i] - shift), accumulated in float lanes and reduced in double.
double sum_exp(const float* x, std::size_t n, float shift);
// x[i] = exp(x[i] - shift) * scale.
void exp_scale(float* x, std::size_t n, float shift, float scale);

}  // namespace jomoim::elementwise
