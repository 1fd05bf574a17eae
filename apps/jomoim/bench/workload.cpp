// workload.cpp — the bench's attention problems and their random inputs (see workload.hpp).
#include "bench/workload.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

namespace jomoim::cli::bench {

Workload Workload::from_case(const cases::Case& c, bool with_lse) {
  if (!c.natural_memory()) throw Error("bench: case " + c.name + " needs memory layouts the bench does not lay out");
  Workload w;
  w.name = c.name;
  w.B = c.n.B, w.Hq = c.n.Hq, w.Hkv = c.n.Hkv, w.Nq = c.n.Nq, w.Nk = c.n.Nk;
  w.D = c.n.D, w.Dv = c.n.Dv;
  w.causal = c.causal;
  w.scale = c.scale;
  w.notation = c.notation;
  w.bias_kind = c.bias;
  w.bias_mask = c.bias_mask;
  w.key_kind = c.key_lengths;
  w.with_lse = with_lse;
  w.amp = c.amp;
  return w;
}

void Workload::allocate(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  auto fill = [&](std::vector<float>& x, Index n, float mul) {
    x.resize(std::size_t(n));
    for (float& e : x) e = mul * uni(rng);
  };
  fill(q, B * Hq * Nq * D, amp);
  fill(k, B * Hkv * Nk * D, amp);
  fill(v, B * Hkv * Nk * Dv, 1);
  // 16-bit storage: the inputs rounded to the format, kept as bits for the engine and as their
  // (exact) float32 values for the check against the reference.
  auto narrow = [&](std::vector<float>& x, std::vector<std::uint16_t>& bits) {
    bits.clear();
    if (dtype == Dtype::f32) return;
    bits.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      bits[i] = half_from_float(x[i], dtype);
      x[i] = half_to_float(bits[i], dtype);
    }
  };
  narrow(q, q16);
  narrow(k, k16);
  narrow(v, v16);
  // q8 / q4: rows [B, Hkv, Nk, E] whatever the notation (3b1b's k and v are [B, Hkv, E, Nk] in
  // memory) quantized, then the float copy overwritten by what the quantized values stand for.
  auto quantize = [&](std::vector<float>& x, Index E, auto& buf, Index block) {
    const Tensor4 rows = notation == Notation::paper ? Tensor4::contiguous(x.data(), {B, Hkv, Nk, E})
                                                     : Tensor4::contiguous(x.data(), {B, Hkv, E, Nk}).transposed(2, 3);
    if constexpr (std::is_same_v<std::decay_t<decltype(buf)>, Q4Buffer>) {
      buf = quantize_q4(rows, block);
      dequantize_q4(buf.view(), rows);
    } else {
      buf = quantize_q8(rows, block);
      dequantize_q8(buf.view(), rows);
    }
  };
  if (q8_block > 0) {
    quantize(k, D, k8, q8_block);
    quantize(v, Dv, v8, q8_block);
  }
  if (q4_block > 0) {
    quantize(k, D, k4, q4_block);
    quantize(v, Dv, v4, q4_block);
  }
  out.assign(std::size_t(B * Hq * Nq * Dv), 0.f);  // touched now: counted as inputs/outputs
  if (with_lse) lse.assign(std::size_t(B * Hq * Nq), 0.f);
  if (bias_kind != cases::BiasKind::none) {
    const auto shape = cases::bias_shape(bias_kind, {B, Hq, Hkv, Nq, Nk, D, Dv});
    fill(bias, shape[0] * shape[1] * shape[2] * shape[3], 2);
    if (bias_mask == cases::BiasMask::random) {
      std::bernoulli_distribution masked(0.2);
      for (float& e : bias)
        if (masked(rng)) e = -INFINITY;
      // One row with every key masked: it must come out as zeros and lse = -inf.
      if (shape[2] == Nq && Nq > 0)
        for (Index j = 0; j < Nk; ++j) bias[std::size_t((Nq / 2) * Nk + j)] = -INFINITY;
    } else if (bias_mask == cases::BiasMask::prefix) {
      for (std::size_t e = 0; e < bias.size(); ++e)
        if (double(Index(e) % Nk) < 0.6 * double(Nk)) bias[e] = -INFINITY;
    }
  }
  if (key_kind != cases::KeyLens::none)
    key_lengths = cases::key_lengths_of(key_kind, B, Nk,
                                        [&](Index n) { return n <= 0 ? Index(0) : Index(rng() % std::uint64_t(n)); });
}

ConstTensor4 Workload::view(const std::vector<float>& x, Index H, Index N, Index E) const {
  return notation == Notation::paper ? ConstTensor4::contiguous(x.data(), {B, H, N, E})
                                     : ConstTensor4::contiguous(x.data(), {B, H, E, N});
}

Tensor4 Workload::outv() {
  return notation == Notation::paper ? Tensor4::contiguous(out.data(), {B, Hq, Nq, Dv})
                                     : Tensor4::contiguous(out.data(), {B, Hq, Dv, Nq});
}

ConstTensor4 Workload::out_paper() const {
  const ConstTensor4 o = view(out, Hq, Nq, Dv);
  return notation == Notation::paper ? o : o.transposed(2, 3);
}

AttentionOptions Workload::options(int threads) {
  AttentionOptions o;
  o.causal = causal;
  o.scale = scale;
  o.notation = notation;
  o.threads = threads;
  o.bf16_weights = bf16_weights;
  if (bias_kind != cases::BiasKind::none) {
    ConstTensor4 b = ConstTensor4::contiguous(bias.data(), cases::bias_shape(bias_kind, {B, Hq, Hkv, Nq, Nk, D, Dv}));
    for (int d = 0; d < 4; ++d)
      if (b.shape[d] == 1) b.strides[d] = 0;  // broadcast
    o.bias = b;
  }
  o.key_lengths = key_lengths;
  if (with_lse) o.lse = Tensor3::contiguous(lse.data(), {B, Hq, Nq});
  return o;
}

void Workload::run(int threads) {
  std::fill(out.begin(), out.end(), NAN);
  std::fill(lse.begin(), lse.end(), NAN);
  call(threads);
}

ConstTensor4x16 Workload::view16(const std::vector<std::uint16_t>& x, Index H, Index N, Index E) const {
  using Bits4 = TensorView<const std::uint16_t, 4>;
  return {notation == Notation::paper ? Bits4::contiguous(x.data(), {B, H, N, E})
                                      : Bits4::contiguous(x.data(), {B, H, E, N}),
          dtype};
}

void Workload::call(int threads) {
  if (q8_block > 0) {
    attention_q8kv(qv(), k8.view(), v8.view(), outv(), options(threads));
  } else if (q4_block > 0) {
    attention_q4kv(qv(), k4.view(), v4.view(), outv(), options(threads));
  } else if (dtype == Dtype::f32) {
    attention(qv(), kv(), vv(), outv(), options(threads));
  } else {
    attention(view16(q16, Hq, Nq, D), view16(k16, Hkv, Nk, D), view16(v16, Hkv, Nk, Dv), outv(), options(threads));
  }
}

std::string Workload::shape_label() const {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "B" + std::to_string(B) here.
  std::string s;
  auto put = [&s](const char* letters, Index x) { s.append(letters).append(std::to_string(x)); };
  put("B", B);
  put(" Hq", Hq);
  if (Hkv != Hq) put(" Hkv", Hkv);
  put(" Nq", Nq);
  put(" Nk", Nk);
  put(" D", D);
  if (Dv != D) put(" Dv", Dv);
  return s;
}

}  // namespace jomoim::cli::bench
