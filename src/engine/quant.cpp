// quant.cpp — the q8 format (jomoim/engine/quant.hpp): quantize, dequantize, and the argument
// checks of attention_q8kv. Quantizing rows of contiguous values goes through the vectorized
// matvec::quantize_q8_row (a prompt's KV cache rows: the scalar loop, with its libm rounding call
// per value, was 8 % of a q8-cache prefill); other strides take the scalar definition below.
#include "jomoim/engine/quant.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "jomoim/engine/matvec.hpp"
#include "problem.hpp"
#include "q8_problem.hpp"

namespace jomoim {

namespace {

void check_q8_layout(const char* name, const std::array<std::int64_t, 4>& shape, std::int64_t block) {
  for (std::int64_t d : shape)
    if (d < 0) throw Error(std::string(name) + ": negative dimension in shape " + shape_string(shape));
  if (block < 16 || block % 16 != 0)
    throw Error(std::string(name) + ": q8 block size must be a positive multiple of 16, got " + std::to_string(block));
  if (shape[3] % block != 0)
    throw Error(std::string(name) + ": q8 block size " + std::to_string(block) +
                " does not divide D = " + std::to_string(shape[3]) + " of shape " + shape_string(shape));
}

template <class I8, class F>
void check_q8_view(const char* name, const Q8View<I8, F>& x) {
  check_q8_layout(name, x.shape, x.block);
  if (x.numel() > 0 && (x.values == nullptr || x.scales == nullptr))
    throw Error(std::string(name) + ": null values or scales for a non-empty q8 tensor " + shape_string(x.shape));
}

}  // namespace

void quantize_q8(ConstTensor4 x, Q8Tensor4 out) {
  check_q8_view("q8", out);
  if (x.shape != out.shape)
    throw Error("quantize_q8: input shape " + shape_string(x) + " differs from the q8 tensor's " +
                shape_string(out.shape));
  if (x.numel() > 0 && x.data == nullptr) throw Error("quantize_q8: null data for a non-empty input");
  const auto [B, H, N, D] = x.shape;
  const std::int64_t nb = D / out.block;
  if (x.strides[3] == 1 && D > 0) {
    // Rows of contiguous values: the vectorized kernel, after checking every row (nothing is
    // written when one is not finite; the loop below then names the value).
    auto row_at = [&](std::int64_t b, std::int64_t h, std::int64_t n) { return &x(b, h, n, 0); };
    bool finite = true;
    for (std::int64_t b = 0; b < B && finite; ++b)
      for (std::int64_t h = 0; h < H && finite; ++h)
        for (std::int64_t n = 0; n < N && finite; ++n) finite = matvec::all_finite(row_at(b, h, n), std::size_t(D));
    if (finite) {
      std::int64_t row = 0;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t n = 0; n < N; ++n, ++row)
            matvec::quantize_q8_row(row_at(b, h, n), int(out.block), int(D), out.values + row * D,
                                    out.scales + row * nb);
      return;
    }
  }
  // Refuse before writing anything.
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t d = 0; d < D; ++d)
          if (!std::isfinite(x(b, h, n, d)))
            throw Error("quantize_q8: non-finite value " + std::to_string(x(b, h, n, d)) + " at index " +
                        shape_string(std::array<std::int64_t, 4>{b, h, n, d}) + " (q8 holds finite values only)");
  std::int64_t row = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n, ++row)
        for (std::int64_t k = 0; k < nb; ++k) {
          float amax = 0.0f;
          for (std::int64_t i = 0; i < out.block; ++i) amax = std::max(amax, std::fabs(x(b, h, n, k * out.block + i)));
          const float d = amax / 127.0f;
          const float inv = d > 0 ? 1.0f / d : 0.0f;
          std::int8_t* q = out.values + row * D + k * out.block;
          for (std::int64_t i = 0; i < out.block; ++i) {
            // nearbyint rounds half to even in the default rounding mode; |x| * inv <= 127 up to
            // rounding of inv, so the clamp only catches 127.00001.
            const float r = std::nearbyint(x(b, h, n, k * out.block + i) * inv);
            q[i] = std::int8_t(std::clamp(r, -127.0f, 127.0f));
          }
          out.scales[row * nb + k] = d;
        }
}

Q8Buffer quantize_q8(ConstTensor4 x, std::int64_t block) {
  check_q8_layout("quantize_q8", x.shape, block);
  Q8Buffer buf;
  buf.shape = x.shape;
  buf.block = block;
  const std::int64_t n = x.numel();
  buf.values.resize(std::size_t(n));
  buf.scales.resize(std::size_t(n / block));
  quantize_q8(x, buf.view());
  return buf;
}

void dequantize_q8(ConstQ8Tensor4 x, Tensor4 out) {
  check_q8_view("q8", x);
  if (x.shape != out.shape)
    throw Error("dequantize_q8: output shape " + shape_string(out) + " differs from the q8 tensor's " +
                shape_string(x.shape));
  if (out.numel() > 0 && out.data == nullptr) throw Error("dequantize_q8: null data for a non-empty output");
  const auto [B, H, N, D] = x.shape;
  const std::int64_t nb = D / x.block;
  std::int64_t row = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n, ++row) {
        if (out.strides[3] == 1 && D > 0) {  // a contiguous row: the vectorized kernel, the same products
          matvec::dequantize_q8_row(x.values + row * D, x.scales + row * nb, int(x.block), int(D), &out(b, h, n, 0));
          continue;
        }
        for (std::int64_t d = 0; d < D; ++d)
          out(b, h, n, d) = x.scales[row * nb + d / x.block] * float(x.values[row * D + d]);
      }
}

namespace detail {

namespace {
// Byte range of a q8 tensor's two arrays against a float view's.
bool overlaps_bytes(const void* a, std::int64_t abytes, const void* b, std::int64_t bbytes) {
  const auto a0 = reinterpret_cast<std::uintptr_t>(a), b0 = reinterpret_cast<std::uintptr_t>(b);
  return abytes > 0 && bbytes > 0 && a0 < b0 + std::uintptr_t(bbytes) && b0 < a0 + std::uintptr_t(abytes);
}
std::pair<const void*, std::int64_t> byte_span(const TensorView<float, 4>& v) {
  if (v.numel() == 0) return {nullptr, 0};
  std::int64_t lo = 0, hi = 0;
  for (int d = 0; d < 4; ++d) {
    const std::int64_t ext = v.strides[d] * (v.shape[d] - 1);
    (ext < 0 ? lo : hi) += ext;
  }
  return {v.data + lo, (hi - lo + 1) * std::int64_t(sizeof(float))};
}
}  // namespace

Q8Problem make_q8_problem(ConstTensor4 q, ConstQ8Tensor4 k, ConstQ8Tensor4 v, const Tensor4* out,
                          const AttentionOptions& options) {
  check_q8_view("k", k);
  check_q8_view("v", v);
  if (options.probs) throw Error("probs: not available with q8 keys and values (attention_q8kv)");
  // Stand-ins with the q8 tensors' shapes let make_problem check every shape and option as
  // attention() does; they point at one float and are never read.
  static const float kNothing = 0.0f;
  const bool col = options.notation == Notation::col3b1b;
  auto stand_in = [&](const std::array<std::int64_t, 4>& shape) {
    ConstTensor4 t;
    t.data = &kNothing;
    t.shape = shape;
    if (col) std::swap(t.shape[2], t.shape[3]);
    t.strides = {0, 0, 0, 0};
    return t;
  };
  Q8Problem qp;
  qp.p = make_problem(q, stand_in(k.shape), stand_in(v.shape), out, options);
  qp.k = k;
  qp.v = v;
  if (out) {
    const auto [o, obytes] = byte_span(*out);
    for (const auto& [name, x] : {std::pair{"k", k}, {"v", v}}) {
      if (overlaps_bytes(o, obytes, x.values, x.numel()) ||
          overlaps_bytes(o, obytes, x.scales, x.numel() / x.block * std::int64_t(sizeof(float))))
        throw Error(std::string("out: memory overlaps the q8 input ") + name);
    }
  }
  return qp;
}

}  // namespace detail
}  // namespace jomoim
