// attention_test_util.hpp — test-only machinery for tests/test_attention.cpp.
//
// What is here: seeded random inputs stored in deliberately awkward memory (transposed, padded,
// reversed, broadcast), output buffers poisoned with NaN and surrounded by guard elements, a
// naive float32 attention whose own error against the float64 reference sets the tolerance, a
// tiled float32 model kernel that checks the tolerance is not too tight, and the comparison
// that reports the worst element. What is not: anything the library uses; this file only sees
// the public headers, so the masking rules below are restated from attention.hpp, not shared.
// The cases themselves (shapes, options, layouts) are data in bench/cases/attention_cases.hpp,
// the table the tests share with `jomoim bench --quick` and attention_gbench.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attention_cases.hpp"
#include "jomoim/core/tensor.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/simd.hpp"

namespace attn_test {

using I64 = std::int64_t;
using jomoim::Notation;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU = 0x1p-24;  // unit roundoff of float32: half an ulp of 1

// ---------------------------------------------------------------------------------------------
// Seeds and random numbers (own generator: std distributions differ between standard libraries,
// and a failing seed must reproduce everywhere).

// FNV-1a of the case name: fixed per case, different between cases, printed on failure.
inline std::uint64_t seed_of(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float amp) {  // in [-amp, amp)
    return amp * float(double(next() >> 40) * 0x1p-23 - 1.0);
  }
  I64 below(I64 n) { return n <= 0 ? 0 : I64(next() % std::uint64_t(n)); }
  bool chance(double p) { return double(next() >> 11) * 0x1p-53 < p; }

 private:
  std::uint64_t s_;
};

// ---------------------------------------------------------------------------------------------
// Memory layouts (attention_cases.hpp): how a logical [d0, d1, d2, d3] (or rank-3) tensor is laid
// out in its buffer; the view handed to the library reads it through strides, never a copy.

using jomoim::cases::Layout;
namespace layouts = jomoim::cases::layouts;

// Guard and poison value: a quiet NaN with a payload arithmetic never produces. Whole buffers are
// filled with it; output elements must be overwritten, every other element must keep its bits.
constexpr std::uint32_t kPoisonBits = 0x7fdeadbeu;
inline float poison() { return std::bit_cast<float>(kPoisonBits); }
inline bool is_poison(float x) { return std::bit_cast<std::uint32_t>(x) == kPoisonBits; }
constexpr I64 kGuard = 37;  // guard elements before and after every buffer (not a vector width)

template <std::size_t R, class F>
void for_each_index(const std::array<I64, R>& shape, F&& f) {
  for (I64 s : shape)
    if (s <= 0) return;
  std::array<I64, R> idx{};
  for (;;) {
    f(std::as_const(idx));
    std::size_t d = R;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// A tensor in its own guarded buffer. The view is rebuilt from the buffer on every access, so a
// Stored can be copied or moved freely.
template <std::size_t R>
struct Stored {
  std::vector<float> buf;
  I64 base = 0;  // offset of element (0, ..., 0) in buf
  std::array<I64, R> shape{}, strides{};

  jomoim::TensorView<float, R> view() { return {buf.data() + base, shape, strides}; }
  jomoim::TensorView<const float, R> cview() const { return {buf.data() + base, shape, strides}; }
  I64 offset(const std::array<I64, R>& idx) const {
    I64 o = base;
    for (std::size_t d = 0; d < R; ++d) o += idx[d] * strides[d];
    return o;
  }
  float at(const std::array<I64, R>& idx) const { return buf[offset(idx)]; }
  I64 numel() const {
    I64 n = 1;
    for (I64 s : shape) n *= s;
    return n;
  }
};

template <std::size_t R>
Stored<R> store(const std::array<I64, R>& shape, const Layout& l) {
  Stored<R> s;
  s.shape = shape;
  I64 step = l.elem_stride;
  for (std::size_t k = R; k-- > 0;) {
    const int d = l.order[k];
    if (l.broadcast >> d & 1) {
      s.strides[d] = 0;
      continue;
    }
    s.strides[d] = step;
    step = step * std::max<I64>(shape[d], 1) + l.pad;
  }
  I64 extent = 1;
  s.base = kGuard;
  for (std::size_t d = 0; d < R; ++d) {
    const I64 e = (std::max<I64>(shape[d], 1) - 1) * s.strides[d];
    extent += e;
    if (l.reverse >> d & 1) {
      s.base += e;
      s.strides[d] = -s.strides[d];
    }
  }
  s.buf.assign(std::size_t(kGuard + extent + l.pad + kGuard), poison());
  return s;
}

template <std::size_t R>
void fill_uniform(Stored<R>& s, Rng& rng, float amp) {
  for_each_index(s.shape, [&](const auto& i) { s.buf[s.offset(i)] = rng.uniform(amp); });
}

// C-order copy of the logical tensor (reads through the view, so broadcasts are honoured).
template <std::size_t R>
std::vector<float> logical(const Stored<R>& s) {
  std::vector<float> out;
  out.reserve(std::size_t(std::max<I64>(s.numel(), 0)));
  for_each_index(s.shape, [&](const auto& i) { out.push_back(s.at(i)); });
  return out;
}

// Writes C-order values through the view.
template <std::size_t R>
void set_logical(Stored<R>& s, const std::vector<float>& values) {
  std::size_t n = 0;
  for_each_index(s.shape, [&](const auto& i) { s.buf[s.offset(i)] = values[n++]; });
}

// Every buffer element outside the view still holds the poison bits (guards and gaps).
template <std::size_t R>
::testing::AssertionResult untouched_outside(const char* what, const Stored<R>& s) {
  std::vector<char> in(s.buf.size(), 0);
  for_each_index(s.shape, [&](const auto& i) { in[std::size_t(s.offset(i))] = 1; });
  I64 bad = 0, first = -1;
  for (std::size_t o = 0; o < s.buf.size(); ++o)
    if (!in[o] && !is_poison(s.buf[o])) {
      if (first < 0) first = I64(o);
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad
                                       << " element(s) outside the view were written (guard/gap), first at "
                                       << "buffer offset " << first << " (view starts at " << s.base << ", buffer size "
                                       << s.buf.size() << "), value " << s.buf[std::size_t(first)];
}

// ---------------------------------------------------------------------------------------------
// A test case: shapes, options and layouts, from the shared table (attention_cases.hpp, which
// also prints a case by its name for gtest).

using jomoim::cases::bias_shape;
using jomoim::cases::BiasKind;
using jomoim::cases::BiasMask;
using jomoim::cases::Case;
using jomoim::cases::Dims;
using jomoim::cases::KeyLens;
using jomoim::cases::make;
using jomoim::cases::name;

// ---------------------------------------------------------------------------------------------
// The inputs of one call, in their layouts, plus C-order copies (paper layout) for the naive
// implementations. The bias copy is expanded to [B, Hq, Nq, Nk].

struct Inputs {
  Dims n;
  bool causal = false;
  std::optional<float> scale;
  Notation notation = Notation::paper;
  Stored<4> q, k, v;
  std::optional<Stored<4>> bias;
  std::vector<I64> key_lengths;
  std::uint64_t seed = 0;
  std::vector<float> Q, K, V, BIAS;

  float scale_value() const { return scale ? *scale : float(1.0 / std::sqrt(double(n.D))); }
  I64 rows() const { return n.B * n.Hq * n.Nq; }
  I64 group() const { return n.Hq / n.Hkv; }
  float qv(I64 b, I64 h, I64 i, I64 d) const { return Q[std::size_t(((b * n.Hq + h) * n.Nq + i) * n.D + d)]; }
  float kv(I64 b, I64 h, I64 j, I64 d) const { return K[std::size_t(((b * n.Hkv + h) * n.Nk + j) * n.D + d)]; }
  float vv(I64 b, I64 h, I64 j, I64 e) const { return V[std::size_t(((b * n.Hkv + h) * n.Nk + j) * n.Dv + e)]; }
  float biasv(I64 b, I64 h, I64 i, I64 j) const {
    return BIAS.empty() ? 0.f : BIAS[std::size_t(((b * n.Hq + h) * n.Nq + i) * n.Nk + j)];
  }

  // The contract (attention.hpp), restated: query i of batch b sees keys j < visible(b, i);
  // key lengths cut the tail, causal masking is aligned bottom-right to the key length.
  I64 visible(I64 b, I64 i) const {
    const I64 L = key_lengths.empty() ? n.Nk : key_lengths[std::size_t(b)];
    if (!causal) return L;
    return std::clamp<I64>(i + (L - n.Nq) + 1, 0, L);
  }
  bool masked(I64 b, I64 h, I64 i, I64 j) const {
    return j >= visible(b, i) || biasv(b, h, i, j) == -std::numeric_limits<float>::infinity();
  }

  // Options for the reference (paper notation, no outputs).
  jomoim::AttentionOptions options() const {
    jomoim::AttentionOptions o;
    o.causal = causal;
    o.scale = scale;
    if (bias) o.bias = bias->cview();
    o.key_lengths = std::span<const I64>(key_lengths);
    return o;
  }

  // Re-reads the C-order copies after a test wrote new values through the views.
  void refresh() {
    Q = logical(q);
    K = logical(k);
    V = logical(v);
    BIAS.clear();
    if (!bias) return;
    const auto& bs = bias->shape;
    for_each_index<4>({n.B, n.Hq, n.Nq, n.Nk}, [&](const auto& i) {
      std::array<I64, 4> j;
      for (int d = 0; d < 4; ++d) j[d] = bs[d] == 1 ? 0 : i[d];
      BIAS.push_back(bias->at(j));
    });
  }
};

inline Inputs build(const Case& c, std::uint64_t seed) {
  Inputs s;
  s.n = c.n;
  s.causal = c.causal;
  s.scale = c.scale;
  s.notation = c.notation;
  s.seed = seed;
  Rng rng(seed);
  const Dims& n = c.n;
  s.q = store<4>({n.B, n.Hq, n.Nq, n.D}, c.q_layout);
  s.k = store<4>({n.B, n.Hkv, n.Nk, n.D}, c.k_layout);
  s.v = store<4>({n.B, n.Hkv, n.Nk, n.Dv}, c.v_layout);
  fill_uniform(s.q, rng, c.amp);
  fill_uniform(s.k, rng, c.amp);
  fill_uniform(s.v, rng, c.v_amp);
  if (c.bias != BiasKind::none) {
    s.bias = store<4>(bias_shape(c.bias, n), c.bias_layout);
    Stored<4>& b = *s.bias;
    const float ninf = -std::numeric_limits<float>::infinity();
    // Multiples of 1/256 in [-2, 2]: adding 16 * m to them is exact (see BiasRowShift).
    for_each_index(b.shape, [&](const auto& i) {
      float x = float(rng.below(1025) - 512) / 256.f;
      if (c.bias_mask == BiasMask::random) {
        if (rng.chance(0.15)) x = ninf;
        // Whole rows of -inf: every 5th query row; for [B,1,1,Nk] the last batch; for
        // [1,Hq,1,1] the last head (when there is more than one).
        if (c.bias == BiasKind::full || c.bias == BiasKind::rows) {
          if (i[2] % 5 == 2) x = ninf;
        } else if (c.bias == BiasKind::keys) {
          if (b.shape[0] > 1 && i[0] == b.shape[0] - 1) x = ninf;
        } else if (c.bias == BiasKind::heads) {
          x = (b.shape[1] > 1 && i[1] == b.shape[1] - 1) ? ninf : x;
        }
      } else if (c.bias_mask == BiasMask::prefix) {
        if (double(i[3]) < 0.6 * double(n.Nk)) x = ninf;
      }
      b.buf[b.offset(i)] = x;
    });
  }
  s.key_lengths = jomoim::cases::key_lengths_of(c.key_lengths, n.B, n.Nk, [&](I64 m) { return rng.below(m); });
  s.refresh();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Float32 implementations of the definition.

struct F32Result {
  std::vector<float> out, lse, probs;  // [B,Hq,Nq,Dv], [B,Hq,Nq], [B,Hq,Nq,Nk]
};

// The naive float32 attention: sequential sums, expf, one division per row. Its error against the
// float64 reference on the same inputs is the yardstick of the tolerance (see expect()).
inline F32Result naive_f32(const Inputs& s) {
  const Dims& n = s.n;
  const float scale = s.scale_value();
  const float ninf = -std::numeric_limits<float>::infinity();
  F32Result r;
  r.out.assign(std::size_t(s.rows() * n.Dv), 0.f);
  r.lse.assign(std::size_t(s.rows()), ninf);
  r.probs.assign(std::size_t(s.rows() * n.Nk), 0.f);
  std::vector<float> sc(std::size_t(n.Nk));
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const I64 row = (b * n.Hq + h) * n.Nq + i, hk = h / s.group();
        float m = ninf;
        for (I64 j = 0; j < n.Nk; ++j) {
          float dot = 0;
          for (I64 d = 0; d < n.D; ++d) dot += s.qv(b, h, i, d) * s.kv(b, hk, j, d);
          sc[j] = j < s.visible(b, i) ? scale * dot + s.biasv(b, h, i, j) : ninf;
          m = std::max(m, sc[j]);
        }
        if (m == ninf) continue;
        float l = 0;
        for (I64 j = 0; j < n.Nk; ++j) l += (sc[j] = std::exp(sc[j] - m));
        for (I64 e = 0; e < n.Dv; ++e) {
          float acc = 0;
          for (I64 j = 0; j < n.Nk; ++j) acc += sc[j] * s.vv(b, hk, j, e);
          r.out[std::size_t(row * n.Dv + e)] = acc / l;
        }
        r.lse[std::size_t(row)] = m + std::log(l);
        for (I64 j = 0; j < n.Nk; ++j) r.probs[std::size_t(row * n.Nk + j)] = sc[j] / l;
      }
  return r;
}

// A model of a plausible fast kernel, in scalar code: 16-lane partial dot products reduced as a
// tree, q pre-multiplied by scale * log2(e), exp2, online softmax over tiles of 64 keys with
// rescaling, out = acc * (1 / l), probs recomputed from the final max and sum. It is not the
// library's kernel; it exists so every case checks that the tolerance admits a legitimate
// change of evaluation order (the "self-check").
inline F32Result tiled_f32_model(const Inputs& s) {
  constexpr I64 kTile = 64, kLanes = 16;
  const Dims& n = s.n;
  const float log2e = 1.44269504f, ln2 = 0.693147181f;
  const float c = s.scale_value() * log2e;
  const float ninf = -std::numeric_limits<float>::infinity();
  F32Result r;
  r.out.assign(std::size_t(s.rows() * n.Dv), 0.f);
  r.lse.assign(std::size_t(s.rows()), ninf);
  r.probs.assign(std::size_t(s.rows() * n.Nk), 0.f);
  std::vector<float> qs(std::size_t(n.D)), acc(std::size_t(n.Dv)), s2(std::size_t(n.Nk));
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const I64 row = (b * n.Hq + h) * n.Nq + i, hk = h / s.group();
        for (I64 d = 0; d < n.D; ++d) qs[d] = s.qv(b, h, i, d) * c;
        for (I64 j = 0; j < n.Nk; ++j) {
          if (j >= s.visible(b, i)) {
            s2[j] = ninf;
            continue;
          }
          float lane[kLanes] = {};
          for (I64 d = 0; d < n.D; ++d) lane[d % kLanes] += qs[d] * s.kv(b, hk, j, d);
          for (I64 w = kLanes / 2; w >= 1; w /= 2)
            for (I64 t = 0; t < w; ++t) lane[t] += lane[t + w];
          s2[j] = lane[0] + s.biasv(b, h, i, j) * log2e;
        }
        float m = ninf, l = 0;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (I64 t0 = 0; t0 < n.Nk; t0 += kTile) {
          const I64 t1 = std::min(n.Nk, t0 + kTile);
          float mt = ninf;
          for (I64 j = t0; j < t1; ++j) mt = std::max(mt, s2[j]);
          if (mt == ninf) continue;
          const float mn = std::max(m, mt);
          const float alpha = m == ninf ? 0.f : std::exp2(m - mn);
          l *= alpha;
          for (float& a : acc) a *= alpha;
          for (I64 j = t0; j < t1; ++j) {
            const float p = std::exp2(s2[j] - mn);
            l += p;
            for (I64 e = 0; e < n.Dv; ++e) acc[e] += p * s.vv(b, hk, j, e);
          }
          m = mn;
        }
        if (m == ninf) continue;
        const float inv = 1.f / l, m2 = m + std::log2(l);
        for (I64 e = 0; e < n.Dv; ++e) r.out[std::size_t(row * n.Dv + e)] = acc[e] * inv;
        r.lse[std::size_t(row)] = m2 * ln2;
        for (I64 j = 0; j < n.Nk; ++j) r.probs[std::size_t(row * n.Nk + j)] = std::exp2(s2[j] - m2);
      }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Expected results and tolerances.
//
// Derivation. Let u = 2^-24. Compute the row's scores in float32 in any order and its error is
// bounded by |ds_j| <= (D + 5) u A_j, A_j = |scale| sum_d |q_d k_jd| + |bias_j| (the dot
// product's gamma_D, the scale, the bias, the max subtraction, an exp2 pre-scale). Softmax turns
// score errors into relative errors of p_j of at most 2 max|ds|, the sum over Nk keys adds
// gamma_Nk, so every float32 evaluation order obeys, first order,
//     |d out_e| <= (2 (D + 5) u max_j A_j + 2 (Nk + 3) u) * sum_j p_j |v_je|.
// That worst case is far above the typical error (sqrt growth, not linear), so it would let real
// bugs through. Instead each row's tolerance is a multiple of what a naive float32 evaluation
// (sequential sums: the largest error bound of the usual orders) actually loses on these inputs:
//     tol_out[row]   = 8 * max_e |naive_e - ref_e| + 4 ulp(max_e sum_j p_j |v_je|)
//     tol_lse[row]   = 8 * |naive_lse - ref_lse|   + 4 ulp(max_j A_j + |lse|)
//     tol_probs[row] = 8 * max_j |naive_pj - ref_pj| + 4 ulp(max_j p_j)
//                      + max_j p_j * 2 ulp(max_j A_j + |lse|)
// The factor 8 covers a different summation order and the few extra roundings a tiled kernel
// makes (pre-scaling, exp2, rescaling by exp(m_old - m_new)); the ulp floor covers rows where the
// naive result happens to be exact (ulp(x) = 2u|x|). The last probs term is for kernels that
// write probs as exp(s_j - lse) (as a backward pass does): s_j and lse are float32 numbers, each
// uncertain by an ulp of its magnitude, and the naive p_j = exp(s_j - m) / l does not see that
// (s_j - m is exact near the maximum); with scores in the 1000s this term dominates. The naive error itself is checked
// against the worst-case bound above, so the tolerance can never exceed 8x that bound, and every case checks the
// tolerance admits tiled_f32_model(). Rows whose keys are all masked must be exact: out = 0, probs = 0, lse = -inf;
// masked keys of other rows must have probs exactly 0.

struct Expected {
  jomoim::ReferenceResult ref;
  F32Result naive;
  std::vector<double> tol_out, tol_lse, tol_probs, tol_psum;  // per row
  std::vector<char> all_masked;                               // per row
  std::string oracle_issue;  // non-empty: the test's own machinery disagrees with the reference
};

inline Expected expect(const Inputs& s) {
  const Dims& n = s.n;
  Expected e;
  e.ref = jomoim::attention_reference(s.q.cview(), s.k.cview(), s.v.cview(), s.options());
  e.naive = naive_f32(s);
  const I64 rows = s.rows();
  e.tol_out.assign(std::size_t(rows), 0);
  e.tol_lse.assign(std::size_t(rows), 0);
  e.tol_probs.assign(std::size_t(rows), 0);
  e.tol_psum.assign(std::size_t(rows), 0);
  e.all_masked.assign(std::size_t(rows), 1);
  const double scale = std::fabs(double(s.scale_value()));
  std::ostringstream issue;
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const std::size_t row = std::size_t((b * n.Hq + h) * n.Nq + i);
        const I64 hk = h / s.group();
        double score_mag = 0;
        for (I64 j = 0; j < n.Nk; ++j) {
          if (s.masked(b, h, i, j)) continue;
          e.all_masked[row] = 0;
          double a = 0;
          for (I64 d = 0; d < n.D; ++d) a += std::fabs(double(s.qv(b, h, i, d)) * s.kv(b, hk, j, d));
          score_mag = std::max(score_mag, scale * a + std::fabs(double(s.biasv(b, h, i, j))));
        }
        const double ref_lse = e.ref.lse[row];
        if (bool(e.all_masked[row]) != (ref_lse == -kInf)) {
          issue << "row " << row << ": the test's mask says all-masked=" << int(e.all_masked[row])
                << " but the reference lse is " << ref_lse << "; ";
          continue;
        }
        if (e.all_masked[row]) continue;  // exact checks only
        double out_scale = 0, out_err = 0;
        for (I64 c = 0; c < n.Dv; ++c) {
          double w = 0;
          for (I64 j = 0; j < n.Nk; ++j)
            w += e.ref.probs[row * std::size_t(n.Nk) + std::size_t(j)] * std::fabs(double(s.vv(b, hk, j, c)));
          out_scale = std::max(out_scale, w);
          const std::size_t o = row * std::size_t(n.Dv) + std::size_t(c);
          out_err = std::max(out_err, std::fabs(double(e.naive.out[o]) - e.ref.out[o]));
        }
        double p_max = 0, p_err = 0, p_err_sum = 0;
        for (I64 j = 0; j < n.Nk; ++j) {
          const std::size_t o = row * std::size_t(n.Nk) + std::size_t(j);
          p_max = std::max(p_max, e.ref.probs[o]);
          const double d = std::fabs(double(e.naive.probs[o]) - e.ref.probs[o]);
          p_err = std::max(p_err, d);
          p_err_sum += d;
        }
        const double lse_err = std::fabs(double(e.naive.lse[row]) - ref_lse);
        const double bound = (2.0 * double(n.D + 5) * kU * score_mag + 2.0 * double(n.Nk + 3) * kU) * 2.0;
        if (!(out_err <= bound * out_scale + 8 * kU * out_scale) || !std::isfinite(lse_err)) {
          issue << "row " << row << ": naive float32 error " << out_err << " (lse " << lse_err
                << ") exceeds its worst-case bound " << bound * out_scale << "; ";
        }
        e.tol_out[row] = 8 * out_err + 8 * kU * out_scale;
        e.tol_lse[row] = 8 * lse_err + 8 * kU * (score_mag + std::fabs(ref_lse));
        e.tol_probs[row] = 8 * p_err + 8 * kU * p_max + 4 * kU * p_max * (score_mag + std::fabs(ref_lse));
        e.tol_psum[row] = 8 * p_err_sum + 8 * kU;
      }
  e.oracle_issue = issue.str().substr(0, 2000);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Comparison that names the worst element.

struct Worst {
  explicit Worst(const char* w) : what(w) {}
  const char* what;
  I64 total = 0, bad = 0;
  double ratio = -1, expected = 0, actual = 0, tol = 0;
  std::string where;

  template <class Where>
  void see(double expect, double actual_, double tolerance, Where&& where_fn) {
    ++total;
    const double err = std::fabs(actual_ - expect);
    const bool ok = (expect == actual_) || err <= tolerance;  // == handles -inf == -inf
    double r =
        ok ? (tolerance > 0 ? err / tolerance : 0) : (tolerance > 0 && std::isfinite(err) ? err / tolerance : kInf);
    if (!ok) ++bad;
    if (r > ratio) {
      ratio = r;
      expected = expect;
      actual = actual_;
      tol = tolerance;
      where = where_fn();
    }
  }
  void report(std::ostream& os) const {
    os.precision(9);
    os << "\n  " << what << ": " << bad << " of " << total << " outside tolerance; worst at " << where << ": expected "
       << expected << ", actual " << actual << ", |diff| " << std::fabs(actual - expected) << ", tol " << tol;
  }
};

inline std::string idx_string(std::initializer_list<I64> idx) {
  std::ostringstream os;
  const char* sep = "[";
  for (I64 x : idx) {
    os << sep << x;
    sep = ",";
  }
  os << "]";
  return os.str();
}

// got holds C-order paper-layout results; lse/probs are checked when has_lse/has_probs.
inline ::testing::AssertionResult compare(const Inputs& s, const Expected& e, const F32Result& got, bool has_lse,
                                          bool has_probs, double* worst_ratio = nullptr) {
  const Dims& n = s.n;
  Worst wo{"out"}, wl{"lse"}, wp{"probs"};
  for (I64 b = 0; b < n.B; ++b)
    for (I64 h = 0; h < n.Hq; ++h)
      for (I64 i = 0; i < n.Nq; ++i) {
        const std::size_t row = std::size_t((b * n.Hq + h) * n.Nq + i);
        const bool dead = e.all_masked[row];
        const char* tag = dead ? " (row all masked)" : "";
        for (I64 c = 0; c < n.Dv; ++c) {
          const std::size_t o = row * std::size_t(n.Dv) + std::size_t(c);
          wo.see(e.ref.out[o], got.out[o], e.tol_out[row], [&] { return "out" + idx_string({b, h, i, c}) + tag; });
        }
        if (has_lse)
          wl.see(e.ref.lse[row], got.lse[row], e.tol_lse[row], [&] { return "lse" + idx_string({b, h, i}) + tag; });
        if (has_probs)
          for (I64 j = 0; j < n.Nk; ++j) {
            const std::size_t o = row * std::size_t(n.Nk) + std::size_t(j);
            const bool km = s.masked(b, h, i, j);  // masked keys: exactly 0
            wp.see(e.ref.probs[o], got.probs[o], km ? 0.0 : e.tol_probs[row], [&] {
              return "probs" + idx_string({b, h, i, j}) + tag + (km ? " (key masked)" : "");
            });
          }
      }
  if (worst_ratio) *worst_ratio = std::max({wo.ratio, wl.ratio, wp.ratio});
  if (wo.bad + wl.bad + wp.bad == 0) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  std::ostringstream os;
  if (wo.bad) wo.report(os);
  if (wl.bad) wl.report(os);
  if (wp.bad) wp.report(os);
  return f << os.str();
}

// ---------------------------------------------------------------------------------------------
// Outputs of the fast path: each in its own poisoned, guarded buffer (separate from the expected
// results), in the case's layouts, always kept as paper-layout views.

struct Outputs {
  Stored<4> out;
  std::optional<Stored<3>> lse;
  std::optional<Stored<4>> probs;
};

inline Outputs make_outputs(const Dims& n, const Layout& out_l, const std::optional<Layout>& lse_l,
                            const std::optional<Layout>& probs_l) {
  Outputs o;
  o.out = store<4>({n.B, n.Hq, n.Nq, n.Dv}, out_l);
  if (lse_l) o.lse = store<3>({n.B, n.Hq, n.Nq}, *lse_l);
  if (probs_l) o.probs = store<4>({n.B, n.Hq, n.Nq, n.Nk}, *probs_l);
  return o;
}
inline Outputs make_outputs(const Case& c) {
  return make_outputs(c.n, c.out_layout, c.want_lse ? std::optional(c.lse_layout) : std::nullopt,
                      c.want_probs ? std::optional(c.probs_layout) : std::nullopt);
}

// Calls jomoim::attention in the setup's notation (3b1b: the column views of the same memory).
inline void run_fast(const Inputs& s, Outputs& o, int threads) {
  jomoim::AttentionOptions opt = s.options();
  opt.notation = s.notation;
  opt.threads = threads;
  if (o.lse) opt.lse = o.lse->view();
  if (o.probs) opt.probs = o.probs->view();
  const bool col = s.notation == Notation::col3b1b;
  auto as_given = [&](auto view) { return col ? view.transposed(2, 3) : view; };
  jomoim::attention(as_given(s.q.cview()), as_given(s.k.cview()), as_given(s.v.cview()), as_given(o.out.view()), opt);
}

inline F32Result read(const Outputs& o) {
  F32Result r;
  r.out = logical(o.out);
  if (o.lse) r.lse = logical(*o.lse);
  if (o.probs) r.probs = logical(*o.probs);
  return r;
}

inline ::testing::AssertionResult untouched_outside(const Outputs& o) {
  if (auto r = untouched_outside("out", o.out); !r) return r;
  if (o.lse)
    if (auto r = untouched_outside("lse", *o.lse); !r) return r;
  if (o.probs)
    if (auto r = untouched_outside("probs", *o.probs); !r) return r;
  return ::testing::AssertionSuccess();
}

// Bitwise copies of the input buffers (views, gaps and guards), to check nothing was written.
inline std::vector<std::vector<float>> snapshot(const Inputs& s) {
  std::vector<std::vector<float>> v{s.q.buf, s.k.buf, s.v.buf};
  if (s.bias) v.push_back(s.bias->buf);
  return v;
}
inline ::testing::AssertionResult unchanged(const Inputs& s, const std::vector<std::vector<float>>& snap) {
  const auto now = snapshot(s);
  const char* names[] = {"q", "k", "v", "bias"};
  for (std::size_t t = 0; t < now.size(); ++t)
    if (std::memcmp(now[t].data(), snap[t].data(), now[t].size() * sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "input " << names[t] << " was modified";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// SIMD targets.

inline const std::vector<std::string>& targets() {
  static const std::vector<std::string> t = jomoim::simd_targets();
  return t;
}

// Pins one target for a scope; the destructor restores the default even when a check fails.
class PinTarget {
 public:
  explicit PinTarget(const std::string& t) { jomoim::set_simd_target(t); }
  ~PinTarget() { jomoim::set_simd_target(""); }
  PinTarget(const PinTarget&) = delete;
  PinTarget& operator=(const PinTarget&) = delete;
};

inline std::string layout_names(const Case& c) {
  std::string s =
      "q=" + c.q_layout.name + " k=" + c.k_layout.name + " v=" + c.v_layout.name + " out=" + c.out_layout.name;
  if (c.bias != BiasKind::none) s += " bias=" + c.bias_layout.name;
  if (c.want_lse) s += " lse=" + c.lse_layout.name;
  if (c.want_probs) s += " probs=" + c.probs_layout.name;
  return s;
}

inline std::string describe(const Case& c, std::uint64_t seed) {
  std::ostringstream os;
  const Dims& n = c.n;
  os << "case " << c.name << " seed 0x" << std::hex << seed << std::dec << " [B=" << n.B << " Hq=" << n.Hq
     << " Hkv=" << n.Hkv << " Nq=" << n.Nq << " Nk=" << n.Nk << " D=" << n.D << " Dv=" << n.Dv
     << (c.causal ? " causal" : "") << " notation=" << jomoim::notation_name(c.notation) << " bias=" << name(c.bias)
     << "/" << name(c.bias_mask) << " key_lengths=" << name(c.key_lengths) << " amp=" << c.amp;
  if (c.scale) os << " scale=" << *c.scale;
  os << " " << layout_names(c) << "]";
  return os.str();
}

}  // namespace attn_test
