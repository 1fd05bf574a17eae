// validate.cpp — argument checks at the engine's boundary, shared by the fast path and the
// reference. Every failure throws jomoim::Error with one line naming the argument.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "problem.hpp"

namespace jomoim {

double attention_flops(const AttentionShape& s, bool causal) {
  const double f = 2.0 * double(s.B) * double(s.Hq) * double(s.Nq) * double(s.Nk) * double(s.D + s.Dv);
  return causal ? f / 2 : f;
}

namespace detail {
namespace {

// Byte range [lo, hi) covered by a view's elements (empty view: lo == hi).
template <class T, std::size_t R>
std::pair<std::uintptr_t, std::uintptr_t> span_of(const TensorView<T, R>& v) {
  if (v.numel() == 0) return {0, 0};
  std::int64_t lo = 0, hi = 0;
  for (std::size_t d = 0; d < R; ++d) {
    const std::int64_t ext = v.strides[d] * (v.shape[d] - 1);
    (ext < 0 ? lo : hi) += ext;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  const std::int64_t size = std::int64_t(sizeof(T));  // 4, or 2 for 16-bit inputs
  return {base + lo * size, base + (hi + 1) * size};
}

template <class A, class B>
bool overlaps(const A& a, const B& b) {
  const auto [alo, ahi] = span_of(a);
  const auto [blo, bhi] = span_of(b);
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

template <class T, std::size_t R>
void check_view_basics(const char* name, const TensorView<T, R>& v) {
  for (std::size_t d = 0; d < R; ++d)
    if (v.shape[d] < 0) throw Error(std::string(name) + ": negative dimension in shape " + shape_string(v));
  if (v.numel() > 0 && v.data == nullptr)
    throw Error(std::string(name) + ": null data for a non-empty tensor " + shape_string(v));
}

// Outputs: distinct elements must not share memory (no zero strides, no interleaving that
// makes two indices meet).
template <std::size_t R>
void check_output_strides(const char* name, const TensorView<float, R>& v) {
  if (v.numel() == 0) return;  // no element, nothing can collide
  std::vector<std::size_t> dims;
  for (std::size_t d = 0; d < R; ++d)
    if (v.shape[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [&](std::size_t a, std::size_t b) { return std::llabs(v.strides[a]) < std::llabs(v.strides[b]); });
  std::int64_t reach = 0;  // largest offset reachable by the inner dimensions
  for (std::size_t d : dims) {
    const std::int64_t st = std::llabs(v.strides[d]);
    if (st <= reach)
      throw Error(std::string(name) + ": strides " + shape_string(v.strides) +
                  " make distinct elements share memory (outputs need non-overlapping strides)");
    reach += st * (v.shape[d] - 1);
  }
}

template <class T>
void expect_shape(const char* name, const TensorView<T, 4>& v, const std::array<std::int64_t, 4>& want,
                  const char* letters, Notation n, const TensorView<T, 4>& as_given) {
  if (v.shape != want) {
    // Report in the caller's own layout.
    std::array<std::int64_t, 4> w = want;
    if (n == Notation::col3b1b) std::swap(w[2], w[3]);
    throw Error(std::string(name) + ": expected shape " + shape_string(w) + " " + letters + ", got " +
                shape_string(as_given));
  }
}

// The float view the kernels index with: the input's shape and strides; its data for float32
// inputs, null for 16-bit ones (whose bits the problem keeps beside it).
ConstTensor4 float_view(const ConstTensor4& v) { return v; }
ConstTensor4 float_view(const TensorView<const std::uint16_t, 4>& v) { return {nullptr, v.shape, v.strides}; }

// Both element types of the inputs: float32, or 16-bit bits (bf16 / f16, the dtype in Problem).
template <class T>
Problem make_problem_of(TensorView<const T, 4> q_in, TensorView<const T, 4> k_in, TensorView<const T, 4> v_in,
                        const Tensor4* out_in, const AttentionOptions& o, Problem p) {
  const bool col = o.notation == Notation::col3b1b;
  const char* q_letters = col ? "[B, Hq, D, Nq]" : "[B, Hq, Nq, D]";
  const char* k_letters = col ? "[B, Hkv, D, Nk]" : "[B, Hkv, Nk, D]";
  const char* v_letters = col ? "[B, Hkv, Dv, Nk]" : "[B, Hkv, Nk, Dv]";
  const char* o_letters = col ? "[B, Hq, Dv, Nq]" : "[B, Hq, Nq, Dv]";
  check_view_basics("q", q_in);
  check_view_basics("k", k_in);
  check_view_basics("v", v_in);

  const TensorView<const T, 4> q_p = col ? q_in.transposed(2, 3) : q_in, k_p = col ? k_in.transposed(2, 3) : k_in,
                               v_p = col ? v_in.transposed(2, 3) : v_in;
  p.q = float_view(q_p);
  p.k = float_view(k_p);
  p.v = float_view(v_p);
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    p.q16 = q_p;
    p.k16 = k_p;
    p.v16 = v_p;
  }
  AttentionShape& s = p.s;
  s.B = p.q.shape[0];
  s.Hq = p.q.shape[1];
  s.Nq = p.q.shape[2];
  s.D = p.q.shape[3];
  s.Hkv = p.k.shape[1];
  s.Nk = p.k.shape[2];
  s.Dv = p.v.shape[3];
  if (s.D < 1)
    throw Error(std::string("q: head dimension D must be at least 1, got shape ") + shape_string(q_in) + " " +
                q_letters);
  if (s.Hkv < 1)
    throw Error(std::string("k: needs at least one key/value head, got shape ") + shape_string(k_in) + " " + k_letters);
  expect_shape("k", k_p, {s.B, s.Hkv, s.Nk, s.D}, k_letters, o.notation, k_in);
  expect_shape("v", v_p, {s.B, s.Hkv, s.Nk, s.Dv}, v_letters, o.notation, v_in);
  if (s.Hq % s.Hkv != 0)
    throw Error("q: Hq = " + std::to_string(s.Hq) + " query heads is not a multiple of Hkv = " + std::to_string(s.Hkv) +
                " key/value heads");

  if (o.scale && !std::isfinite(*o.scale))
    throw Error("scale: expected a finite number, got " + std::to_string(*o.scale));
  s.scale = o.scale ? *o.scale : float(1.0 / std::sqrt(double(s.D)));
  p.causal = o.causal;
  p.bf16_weights = o.bf16_weights && p.dtype == Dtype::bf16;
  static std::atomic<std::uint64_t> calls{0};
  p.call_id = ++calls;

  if (out_in) {
    check_view_basics("out", *out_in);
    p.out = col ? out_in->transposed(2, 3) : *out_in;
    expect_shape("out", p.out, {s.B, s.Hq, s.Nq, s.Dv}, o_letters, o.notation, *out_in);
    check_output_strides("out", p.out);
    for (const auto& [name, in] : {std::pair{"q", q_in}, {"k", k_in}, {"v", v_in}})
      if (overlaps(p.out, in)) throw Error(std::string("out: memory overlaps the input ") + name);
  }

  if (o.bias) {
    const ConstTensor4& b = *o.bias;
    check_view_basics("bias", b);
    const std::array<std::int64_t, 4> full = {s.B, s.Hq, s.Nq, s.Nk};
    p.has_bias = true;
    p.bias = b;
    for (int d = 0; d < 4; ++d) {
      if (b.shape[d] == full[d]) continue;
      if (b.shape[d] != 1)
        throw Error("bias: shape " + shape_string(b) +
                    " does not broadcast to [B, Hq, Nq, Nk] = " + shape_string(full));
      p.bias.shape[d] = full[d];
      p.bias.strides[d] = 0;
    }
  }

  if (!o.key_lengths.empty()) {
    if (std::int64_t(o.key_lengths.size()) != s.B)
      throw Error("key_lengths: expected " + std::to_string(s.B) + " entries (one per batch), got " +
                  std::to_string(o.key_lengths.size()));
    for (std::size_t b = 0; b < o.key_lengths.size(); ++b)
      if (o.key_lengths[b] < 0 || o.key_lengths[b] > s.Nk)
        throw Error("key_lengths: entry " + std::to_string(b) + " is " + std::to_string(o.key_lengths[b]) +
                    ", expected 0.." + std::to_string(s.Nk));
    p.key_lengths = o.key_lengths.data();
  }

  if (o.lse) {
    check_view_basics("lse", *o.lse);
    const std::array<std::int64_t, 3> want = {s.B, s.Hq, s.Nq};
    if (o.lse->shape != want)
      throw Error("lse: expected shape " + shape_string(want) + " [B, Hq, Nq], got " + shape_string(*o.lse));
    check_output_strides("lse", *o.lse);
    p.has_lse = true;
    p.lse = *o.lse;
  }
  if (o.probs) {
    check_view_basics("probs", *o.probs);
    const std::array<std::int64_t, 4> want = {s.B, s.Hq, s.Nq, s.Nk};
    if (o.probs->shape != want)
      throw Error("probs: expected shape " + shape_string(want) + " [B, Hq, Nq, Nk], got " + shape_string(*o.probs));
    check_output_strides("probs", *o.probs);
    p.has_probs = true;
    p.probs = *o.probs;
  }
  // Outputs must not overlap inputs or each other.
  auto check_out = [&](const char* name, const auto& view) {
    for (const auto& [iname, in] : {std::pair{"q", q_in}, {"k", k_in}, {"v", v_in}})
      if (overlaps(view, in)) throw Error(std::string(name) + ": memory overlaps the input " + iname);
    if (p.has_bias && overlaps(view, *o.bias)) throw Error(std::string(name) + ": memory overlaps the input bias");
  };
  if (out_in) check_out("out", p.out);
  if (p.has_lse) {
    check_out("lse", p.lse);
    if (out_in && overlaps(p.lse, p.out)) throw Error("lse: memory overlaps out");
  }
  if (p.has_probs) {
    check_out("probs", p.probs);
    if (out_in && overlaps(p.probs, p.out)) throw Error("probs: memory overlaps out");
    if (p.has_lse && overlaps(p.probs, p.lse)) throw Error("probs: memory overlaps lse");
  }
  return p;
}

}  // namespace

Problem make_problem(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const Tensor4* out, const AttentionOptions& o) {
  return make_problem_of<float>(q, k, v, out, o, Problem{});
}

Problem make_problem(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v, const Tensor4* out,
                     const AttentionOptions& o) {
  // One format for all three inputs: bf16, or f16 (a mix would need a second widening per
  // operand for no known use).
  for (const auto& [name, t] : {std::pair{"q", q.dtype}, {"k", k.dtype}, {"v", v.dtype}})
    if (t != Dtype::bf16 && t != Dtype::f16)
      throw Error(std::string(name) + ": 16-bit inputs must be bf16 or f16, got " + dtype_name(t));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    throw Error(std::string("k, v: must have q's dtype (") + dtype_name(q.dtype) + "), got k " + dtype_name(k.dtype) +
                ", v " + dtype_name(v.dtype) + " (bf16 and f16 do not mix)");
  Problem p;
  p.dtype = q.dtype;
  return make_problem_of<std::uint16_t>(q.bits, k.bits, v.bits, out, o, p);
}

BackwardProblem make_backward_problem(ConstTensor4 q_in, ConstTensor4 k_in, ConstTensor4 v_in,
                                      const ConstTensor4* out_in, const ConstTensor3* lse_in, ConstTensor4 dout_in,
                                      const AttentionGradients* g, const AttentionOptions& options) {
  AttentionOptions o = options;  // the forward's outputs are not part of a backward call
  o.lse.reset();
  o.probs.reset();
  BackwardProblem bp;
  bp.p = make_problem(q_in, k_in, v_in, nullptr, o);
  const AttentionShape& s = bp.p.s;
  const bool col = o.notation == Notation::col3b1b;
  auto paper = [&](const auto& view) { return col ? view.transposed(2, 3) : view; };
  const char* o_letters = col ? "[B, Hq, Dv, Nq]" : "[B, Hq, Nq, Dv]";
  const std::array<std::int64_t, 4> out_shape = {s.B, s.Hq, s.Nq, s.Dv};

  check_view_basics("dout", dout_in);
  bp.dout = paper(dout_in);
  expect_shape("dout", bp.dout, out_shape, o_letters, o.notation, dout_in);
  if (out_in) {
    check_view_basics("out", *out_in);
    bp.out = paper(*out_in);
    expect_shape("out", bp.out, out_shape, o_letters, o.notation, *out_in);
  }
  if (lse_in) {
    check_view_basics("lse", *lse_in);
    const std::array<std::int64_t, 3> want = {s.B, s.Hq, s.Nq};
    if (lse_in->shape != want)
      throw Error("lse: expected shape " + shape_string(want) + " [B, Hq, Nq], got " + shape_string(*lse_in));
    bp.lse = *lse_in;
  }
  if (!g) return bp;

  // Gradients: each exactly like its input (in the caller's notation), distinct memory.
  const std::pair<const char*, const Tensor4*> outs[] = {{"dq", &g->dq}, {"dk", &g->dk}, {"dv", &g->dv}};
  const ConstTensor4 like[] = {q_in, k_in, v_in};
  Tensor4* dst[] = {&bp.dq, &bp.dk, &bp.dv};
  for (int t = 0; t < 3; ++t) {
    const auto& [name, view] = outs[t];
    check_view_basics(name, *view);
    if (view->shape != like[t].shape)
      throw Error(std::string(name) + ": expected the shape of " + (name + 1) + ", " + shape_string(like[t]) +
                  ", got " + shape_string(*view));
    check_output_strides(name, *view);
    *dst[t] = paper(*view);
  }
  if (g->dbias) {
    if (!o.bias) throw Error("dbias: given, but options.bias is not (a bias gradient needs a bias)");
    const Tensor4& db = *g->dbias;
    check_view_basics("dbias", db);
    if (db.shape != o.bias->shape)
      throw Error("dbias: expected the shape of bias, " + shape_string(*o.bias) + ", got " + shape_string(db));
    check_output_strides("dbias", db);
    bp.has_dbias = true;
    bp.dbias_given = db;
    bp.dbias = db;
    const std::array<std::int64_t, 4> full = {s.B, s.Hq, s.Nq, s.Nk};
    for (int d = 0; d < 4; ++d)
      if (db.shape[d] != full[d]) {
        bp.dbias.shape[d] = full[d];
        bp.dbias.strides[d] = 0;
      }
  }
  // No output may overlap an input or another output.
  std::vector<std::pair<const char*, ConstTensor4>> inputs = {{"q", q_in}, {"k", k_in}, {"v", v_in}, {"dout", dout_in}};
  if (out_in) inputs.push_back({"out", *out_in});
  if (o.bias) inputs.push_back({"bias", *o.bias});
  std::vector<std::pair<const char*, Tensor4>> written = {{"dq", g->dq}, {"dk", g->dk}, {"dv", g->dv}};
  if (g->dbias) written.push_back({"dbias", *g->dbias});
  for (std::size_t a = 0; a < written.size(); ++a) {
    const auto& [name, view] = written[a];
    for (const auto& [iname, in] : inputs)
      if (overlaps(view, in)) throw Error(std::string(name) + ": memory overlaps the input " + iname);
    if (lse_in && overlaps(view, *lse_in)) throw Error(std::string(name) + ": memory overlaps the input lse");
    for (std::size_t b = 0; b < a; ++b)
      if (overlaps(view, written[b].second))
        throw Error(std::string(name) + ": memory overlaps the output " + written[b].first);
  }
  return bp;
}

}  // namespace detail

AttentionShape check_attention_args(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, const Tensor4* out,
                                    const AttentionOptions& options) {
  return detail::make_problem(q, k, v, out, options).s;
}

AttentionShape check_attention_args(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v,
                                    const Tensor4* out, const AttentionOptions& options) {
  return detail::make_problem(q, k, v, out, options).s;
}

}  // namespace jomoim
