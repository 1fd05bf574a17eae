// quant.cpp — the q8 and q4 formats (jomoim/engine/quant.hpp): quantize, dequantize, and the
// argument checks of attention_q8kv and attention_q4kv. Quantizing q8 rows of contiguous values
// goes through the vectorized matvec::quantize_q8_row (a prompt's KV cache rows: the scalar
// loop, with its libm rounding call per value, was 8 % of a q8-cache prefill); other strides
// take the scalar definition below.
#include "jomoim/engine/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "jomoim/engine/matvec.hpp"
#include "problem.hpp"
#include "q8_problem.hpp"

namespace jomoim {

namespace {

// A q8 (format "q8", blocks a multiple of 16) or q4 ("q4", 32) tensor's shape and block size.
void check_layout(const char* name, const char* format, std::int64_t multiple, const std::array<std::int64_t, 4>& shape,
                  std::int64_t block) {
  for (std::int64_t d : shape)
    if (d < 0) throw Error(std::string(name) + ": negative dimension in shape " + shape_string(shape));
  if (block < multiple || block % multiple != 0)
    throw Error(std::string(name) + ": " + format + " block size must be a positive multiple of " +
                std::to_string(multiple) + ", got " + std::to_string(block));
  if (shape[3] % block != 0)
    throw Error(std::string(name) + ": " + format + " block size " + std::to_string(block) +
                " does not divide D = " + std::to_string(shape[3]) + " of shape " + shape_string(shape));
}
void check_q8_layout(const char* name, const std::array<std::int64_t, 4>& shape, std::int64_t block) {
  check_layout(name, "q8", 16, shape, block);
}
void check_q4_layout(const char* name, const std::array<std::int64_t, 4>& shape, std::int64_t block) {
  check_layout(name, "q4", 32, shape, block);
}

// The layout, and the arrays of a non-empty tensor (View: a Q8View or Q4View).
template <class View>
void check_view(const char* name, const char* format, std::int64_t multiple, const View& x) {
  check_layout(name, format, multiple, x.shape, x.block);
  if (x.numel() > 0 && (x.values == nullptr || x.scales == nullptr))
    throw Error(std::string(name) + ": null values or scales for a non-empty " + format + " tensor " +
                shape_string(x.shape));
}
template <class I8, class F>
void check_q8_view(const char* name, const Q8View<I8, F>& x) {
  check_view(name, "q8", 16, x);
}
template <class U8, class F>
void check_q4_view(const char* name, const Q4View<U8, F>& x) {
  check_view(name, "q4", 32, x);
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

// ---------------------------------------------------------------------------------------------
// q4: as q8 with 15 levels, two values a byte (quant.hpp).

void quantize_q4(ConstTensor4 x, Q4Tensor4 out) {
  check_q4_view("q4", out);
  if (x.shape != out.shape)
    throw Error("quantize_q4: input shape " + shape_string(x) + " differs from the q4 tensor's " +
                shape_string(out.shape));
  if (x.numel() > 0 && x.data == nullptr) throw Error("quantize_q4: null data for a non-empty input");
  const auto [B, H, N, D] = x.shape;
  // Refuse before writing anything.
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t d = 0; d < D; ++d)
          if (!std::isfinite(x(b, h, n, d)))
            throw Error("quantize_q4: non-finite value " + std::to_string(x(b, h, n, d)) + " at index " +
                        shape_string(std::array<std::int64_t, 4>{b, h, n, d}) + " (q4 holds finite values only)");
  const std::int64_t nb = D / out.block, half = D / 2;
  // A row at a time through contiguous buffers, in loops the compiler vectorizes: the row's
  // values, then each block's levels q + 8.
  std::vector<float> row(static_cast<std::size_t>(D));
  std::vector<std::uint8_t> levels(static_cast<std::size_t>(D));
  std::int64_t r = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n, ++r) {
        for (std::int64_t d = 0; d < D; ++d) row[static_cast<std::size_t>(d)] = x(b, h, n, d);
        for (std::int64_t k = 0; k < nb; ++k) {
          const float* v = row.data() + k * out.block;
          float amax = 0.0f;
          for (std::int64_t i = 0; i < out.block; ++i) amax = std::max(amax, std::fabs(v[i]));
          const float d = amax / 7.0f;
          const float inv = d > 0 ? 1.0f / d : 0.0f;
          std::uint8_t* lv = levels.data() + k * out.block;
          for (std::int64_t i = 0; i < out.block; ++i) {
            // Round half to even by the float adder (|v inv| <= 7.000001 is far below 2^22): the
            // same as nearbyint in the default rounding mode; the clamp only catches 7.000001.
            const float q = (v[i] * inv + 12582912.0f) - 12582912.0f;
            lv[i] = static_cast<std::uint8_t>(std::clamp(q, -7.0f, 7.0f) + 8.0f);
          }
          out.scales[r * nb + k] = d;
        }
        std::uint8_t* q = out.values + r * half;
        for (std::int64_t i = 0; i < half; ++i)
          q[i] = static_cast<std::uint8_t>(levels[static_cast<std::size_t>(i)] |
                                           (levels[static_cast<std::size_t>(half + i)] << 4));
      }
}

Q4Buffer quantize_q4(ConstTensor4 x, std::int64_t block) {
  check_q4_layout("quantize_q4", x.shape, block);
  Q4Buffer buf;
  buf.shape = x.shape;
  buf.block = block;
  const std::int64_t n = x.numel();
  buf.values.resize(std::size_t(n / 2));
  buf.scales.resize(std::size_t(n / block));
  quantize_q4(x, buf.view());
  return buf;
}

void dequantize_q4(ConstQ4Tensor4 x, Tensor4 out) {
  check_q4_view("q4", x);
  if (x.shape != out.shape)
    throw Error("dequantize_q4: output shape " + shape_string(out) + " differs from the q4 tensor's " +
                shape_string(x.shape));
  if (out.numel() > 0 && out.data == nullptr) throw Error("dequantize_q4: null data for a non-empty output");
  const auto [B, H, N, D] = x.shape;
  const std::int64_t nb = D / x.block, half = D / 2;
  std::vector<float> row(static_cast<std::size_t>(D));
  std::int64_t r = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N && D > 0; ++n, ++r) {
        // The row's levels minus 8 (first half from the low nibbles, second from the high), then
        // each block times its scale.
        const std::uint8_t* q = x.values + r * half;
        for (std::int64_t i = 0; i < half; ++i) {
          row[static_cast<std::size_t>(i)] = static_cast<float>(int(q[i] & 0x0F) - 8);
          row[static_cast<std::size_t>(half + i)] = static_cast<float>(int(q[i] >> 4) - 8);
        }
        for (std::int64_t k = 0; k < nb; ++k) {
          const float d = x.scales[r * nb + k];
          float* v = row.data() + k * x.block;
          for (std::int64_t i = 0; i < x.block; ++i) v[i] *= d;
        }
        if (out.strides[3] == 1) {
          std::memcpy(&out(b, h, n, 0), row.data(), sizeof(float) * static_cast<std::size_t>(D));
        } else {
          for (std::int64_t d = 0; d < D; ++d) out(b, h, n, d) = row[static_cast<std::size_t>(d)];
        }
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

// The problem with stand-ins of the quantized tensors' shapes, checked as attention() checks
// (they point at one float and are never read), and out checked against the quantized arrays'
// bytes.
Q8Problem make_quantized_problem(ConstTensor4 q, const std::array<std::int64_t, 4>& kshape,
                                 const std::array<std::int64_t, 4>& vshape, const Tensor4* out,
                                 const AttentionOptions& options, const char* format,
                                 const std::array<std::pair<const void*, std::int64_t>, 4>& arrays) {
  if (options.probs)
    throw Error(std::string("probs: not available with ") + format + " keys and values (attention_" + format + "kv)");
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
  qp.p = make_problem(q, stand_in(kshape), stand_in(vshape), out, options);
  if (out) {
    const auto [o, obytes] = byte_span(*out);
    for (std::size_t i = 0; i < arrays.size(); ++i)
      if (overlaps_bytes(o, obytes, arrays[i].first, arrays[i].second))
        throw Error(std::string("out: memory overlaps the ") + format + " input " + (i < 2 ? "k" : "v"));
  }
  return qp;
}
}  // namespace

Q8Problem make_q8_problem(ConstTensor4 q, ConstQ8Tensor4 k, ConstQ8Tensor4 v, const Tensor4* out,
                          const AttentionOptions& options) {
  check_q8_view("k", k);
  check_q8_view("v", v);
  const auto scale_bytes = [](const ConstQ8Tensor4& x) { return x.numel() / x.block * std::int64_t(sizeof(float)); };
  Q8Problem qp = make_quantized_problem(
      q, k.shape, v.shape, out, options, "q8",
      {{{k.values, k.numel()}, {k.scales, scale_bytes(k)}, {v.values, v.numel()}, {v.scales, scale_bytes(v)}}});
  qp.k = k;
  qp.v = v;
  return qp;
}

Q8Problem make_q4_problem(ConstTensor4 q, ConstQ4Tensor4 k, ConstQ4Tensor4 v, const Tensor4* out,
                          const AttentionOptions& options) {
  check_q4_view("k", k);
  check_q4_view("v", v);
  const auto scale_bytes = [](const ConstQ4Tensor4& x) { return x.numel() / x.block * std::int64_t(sizeof(float)); };
  Q8Problem qp = make_quantized_problem(
      q, k.shape, v.shape, out, options, "q4",
      {{{k.values, k.numel() / 2}, {k.scales, scale_bytes(k)}, {v.values, v.numel() / 2}, {v.scales, scale_bytes(v)}}});
  // The int8 views carry the shapes, blocks and scales; the kernel unpacks k4 and v4 by tiles.
  qp.k = ConstQ8Tensor4{k.shape, k.block, nullptr, k.scales};
  qp.v = ConstQ8Tensor4{v.shape, v.block, nullptr, v.scales};
  qp.k4 = k.values;
  qp.v4 = v.values;
  return qp;
}

}  // namespace detail
}  // namespace jomoim
