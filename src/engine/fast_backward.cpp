// fast_backward.cpp — the CPU fast path of jomoim::attention_backward.
//
// FlashAttention-2's backward without atomics: the score tiles are recomputed from q, k and the
// forward's log-sum-exp in two passes, each owning the gradients it writes (see attention.hpp):
//   pass 1, per (batch, kv head, key block): dK, dV (and dbias) of those keys, summed over every
//           query head of the group and every query block that sees them;
//   pass 2, per (batch, query head, query block): dQ of those rows, over every visible key tile.
// A tile is kBq query rows x kBk keys, both in row layout (keys along the SIMD lanes):
//   S = Q K^T, P = exp(s S + bias - lse), dP = dO V^T, dS = P (dP - Delta),
//   dV += P^T dO, dK += s dS^T Q (pass 1), dQ += s dS K (pass 2),
// every product through one register-blocked micro-kernel C += A B whose B rows are contiguous
// packed vectors and whose A is read by broadcasts with any strides (so P^T and dS^T are read
// in place from P and dS). No N x N buffer exists; the per-thread scratch is a few tiles.
// This file is compiled once per SIMD target (Highway's foreach_target re-includes it).
#include <omp.h>

#include <cmath>
#include <limits>

#include "jomoim/engine/threads.hpp"
#include "plan.hpp"
#include "problem.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fast_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "simd_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace bwd {  // own names: the forward's kernel file defines others in the same target namespace
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF and the target's facts come from simd_blocks-inl.h.
constexpr size_t kNV = kManyRegisters ? 4 : 2;  // 4 x 4 accumulators in 32 registers, 4 x 2 in 16
constexpr size_t kMR = 4;
constexpr std::int64_t kBq = 64;  // query rows per tile
constexpr std::int64_t kBk = 64;  // keys per tile (a multiple of every target's lane count)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

// c[r][x] (+)= sum_k a[r*am + k*ak] * b[k*ldb + x], r < MR, x < NV vectors.
template <size_t MR, size_t NV>
HWY_INLINE void Micro(const float* HWY_RESTRICT a, std::ptrdiff_t am, std::ptrdiff_t ak, const float* HWY_RESTRICT b,
                      size_t ldb, float* HWY_RESTRICT c, size_t ldc, size_t depth, bool accumulate) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF acc[MR][NV];
  for (size_t r = 0; r < MR; ++r)
    for (size_t x = 0; x < NV; ++x) acc[r][x] = accumulate ? hn::LoadU(df, c + r * ldc + x * L) : hn::Zero(df);
  for (size_t k = 0; k < depth; ++k) {
    VF bv[NV];
    for (size_t x = 0; x < NV; ++x) bv[x] = hn::LoadU(df, b + k * ldb + x * L);
    for (size_t r = 0; r < MR; ++r) {
      const VF ab = hn::Set(df, a[std::ptrdiff_t(r) * am + std::ptrdiff_t(k) * ak]);
      for (size_t x = 0; x < NV; ++x) acc[r][x] = hn::MulAdd(ab, bv[x], acc[r][x]);
    }
  }
  for (size_t r = 0; r < MR; ++r)
    for (size_t x = 0; x < NV; ++x) hn::StoreU(acc[r][x], df, c + r * ldc + x * L);
}

template <size_t MR>
HWY_INLINE void MicroColumns(const float* a, std::ptrdiff_t am, std::ptrdiff_t ak, const float* b, size_t ldb, float* c,
                             size_t ldc, size_t n, size_t depth, bool accumulate) {
  const size_t L = hn::Lanes(DF());
  size_t x = 0;
  for (; x + kNV * L <= n; x += kNV * L) Micro<MR, kNV>(a, am, ak, b + x, ldb, c + x, ldc, depth, accumulate);
  for (; x < n; x += L) Micro<MR, 1>(a, am, ak, b + x, ldb, c + x, ldc, depth, accumulate);
}

// C [M, N] = (or +=) A [M, K] B [K, N]: A(m, k) at a[m*am + k*ak]; B and C rows contiguous with
// strides ldb, ldc; N a multiple of the lane count (B's padding columns must be finite).
HWY_INLINE void Gemm(size_t M, size_t N, size_t K, const float* a, std::ptrdiff_t am, std::ptrdiff_t ak, const float* b,
                     size_t ldb, float* c, size_t ldc, bool accumulate) {
  size_t m = 0;
  for (; m + kMR <= M; m += kMR)
    MicroColumns<kMR>(a + std::ptrdiff_t(m) * am, am, ak, b, ldb, c + m * ldc, ldc, N, K, accumulate);
  for (; m < M; ++m) MicroColumns<1>(a + std::ptrdiff_t(m) * am, am, ak, b, ldb, c + m * ldc, ldc, N, K, accumulate);
}

// One thread's scratch (floats), carved from the per-thread buffer the forward also uses.
struct Buffers {
  size_t dp = 0, dvp = 0;  // D and Dv rounded up to whole vectors
  float* kt;               // K^T [D, kBk], zero past the tile's keys
  float* vt;               // V^T [Dv, kBk], likewise
  float* qp;               // Q rows [kBq, dp], zero past D
  float* dop;              // dO rows [kBq, dvp], zero past Dv
  float* sp;               // S, then P [kBq, kBk]
  float* dsp;              // dP, then scale * dS [kBq, kBk]
  float* lse;              // [kBq]
  float* delta;            // Delta_i = dO_i . O_i [kBq]
  float* acc1;             // pass 1: dK [kBk, dp]; pass 2: K rows [kBk, dp]
  float* acc2;             // pass 1: dV [kBk, dvp]; pass 2: dQ [kBq, dp]
};

inline Buffers ThreadBuffers(const AttentionShape& s) {
  const size_t L = hn::Lanes(DF());
  const size_t al = 16;  // 64 bytes
  Buffers b;
  b.dp = RoundUp(size_t(s.D), L);
  b.dvp = RoundUp(size_t(s.Dv), L);
  const size_t nkt = RoundUp(size_t(s.D) * kBk, al), nvt = RoundUp(size_t(s.Dv) * kBk, al),
               nq = RoundUp(kBq * b.dp, al), ndo = RoundUp(kBq * b.dvp, al), ns = kBq * kBk, nr = kBq,
               na1 = RoundUp(kBk * b.dp, al), na2 = RoundUp(std::max(kBk * b.dvp, kBq * b.dp), al);
  float* base = Scratch::for_this_thread().reserve(nkt + nvt + nq + ndo + 2 * ns + 2 * nr + na1 + na2);
  b.kt = base;
  b.vt = b.kt + nkt;
  b.qp = b.vt + nvt;
  b.dop = b.qp + nq;
  b.sp = b.dop + ndo;
  b.dsp = b.sp + ns;
  b.lse = b.dsp + ns;
  b.delta = b.lse + nr;
  b.acc1 = b.delta + nr;
  b.acc2 = b.acc1 + na1;
  return b;
}

// A block of query rows of one head: rows i0 .. i0 + n - 1 of (b, h).
struct RowBlock {
  std::int64_t b, h, i0, n;
};

// Packs Q and dO rows, lse and Delta (accumulated in double: it is subtracted from dP).
inline void PackRows(const BackwardProblem& bp, const RowBlock& rb, const Buffers& buf) {
  const Problem& p = bp.p;
  const std::int64_t D = p.s.D, Dv = p.s.Dv;
  for (std::int64_t r = 0; r < rb.n; ++r) {
    const std::int64_t i = rb.i0 + r;
    float* qr = buf.qp + r * std::int64_t(buf.dp);
    const float* q = &p.q(rb.b, rb.h, i, 0);
    for (std::int64_t d = 0; d < D; ++d) qr[d] = q[d * p.q.strides[3]];
    std::fill(qr + D, qr + buf.dp, 0.0f);
    float* dr = buf.dop + r * std::int64_t(buf.dvp);
    double delta = 0;
    for (std::int64_t e = 0; e < Dv; ++e) {
      dr[e] = bp.dout(rb.b, rb.h, i, e);
      delta += double(dr[e]) * double(bp.out(rb.b, rb.h, i, e));
    }
    std::fill(dr + Dv, dr + buf.dvp, 0.0f);
    buf.delta[r] = float(delta);
    buf.lse[r] = bp.lse(rb.b, rb.h, i);
  }
}

// Packs keys [j0, j0 + tl) of (b, g) as K^T and V^T (zero up to the next whole vector), and as
// K rows when `rows` (pass 2's dQ += dS K).
inline void PackKeys(const Problem& p, std::int64_t b, std::int64_t g, std::int64_t j0, std::int64_t tl, bool rows,
                     const Buffers& buf) {
  const std::int64_t D = p.s.D, Dv = p.s.Dv;
  const std::int64_t cols = std::int64_t(RoundUp(size_t(tl), hn::Lanes(DF())));
  for (std::int64_t j = 0; j < tl; ++j) {
    const float* k = &p.k(b, g, j0 + j, 0);
    for (std::int64_t d = 0; d < D; ++d) buf.kt[d * kBk + j] = k[d * p.k.strides[3]];
    for (std::int64_t e = 0; e < Dv; ++e) buf.vt[e * kBk + j] = p.v(b, g, j0 + j, e);
    if (rows) {
      float* kr = buf.acc1 + j * std::int64_t(buf.dp);
      for (std::int64_t d = 0; d < D; ++d) kr[d] = k[d * p.k.strides[3]];
      std::fill(kr + D, kr + buf.dp, 0.0f);
    }
  }
  for (std::int64_t d = 0; d < D; ++d) std::fill(buf.kt + d * kBk + tl, buf.kt + d * kBk + cols, 0.0f);
  for (std::int64_t e = 0; e < Dv; ++e) std::fill(buf.vt + e * kBk + tl, buf.vt + e * kBk + cols, 0.0f);
}

// P and scale * dS of one tile (rows of rb x keys [j0, j0 + tl)), left in sp and dsp; adds dS
// into dbias when `with_dbias`. Rows and keys must be packed.
inline void TileGrads(const BackwardProblem& bp, const RowBlock& rb, std::int64_t j0, std::int64_t tl, bool with_dbias,
                      const Buffers& buf) {
  const Problem& p = bp.p;
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t cols = RoundUp(size_t(tl), L);
  const size_t n = size_t(rb.n);
  Gemm(n, cols, size_t(p.s.D), buf.qp, std::ptrdiff_t(buf.dp), 1, buf.kt, kBk, buf.sp, kBk, false);      // S
  Gemm(n, cols, size_t(p.s.Dv), buf.dop, std::ptrdiff_t(buf.dvp), 1, buf.vt, kBk, buf.dsp, kBk, false);  // dP
  const VF scale = hn::Set(df, p.s.scale);
  for (std::int64_t r = 0; r < rb.n; ++r) {
    const std::int64_t i = rb.i0 + r;
    float* s = buf.sp + r * kBk;
    float* ds = buf.dsp + r * kBk;
    const std::int64_t end = std::clamp<std::int64_t>(p.visible_keys(rb.b, i) - j0, 0, tl);
    const float lse = buf.lse[r];
    if (end == 0 || lse == kNegInf) {  // nothing visible: P = 0, dS = 0
      std::fill(s, s + cols, 0.0f);
      std::fill(ds, ds + cols, 0.0f);
      continue;
    }
    for (size_t x = 0; x < cols; x += L) hn::StoreU(hn::Mul(hn::LoadU(df, s + x), scale), df, s + x);
    if (p.has_bias) {
      const float* brow = &p.bias(rb.b, rb.h, i, j0);
      const std::int64_t bs = p.bias.strides[3];
      for (std::int64_t j = 0; j < end; ++j) s[j] += brow[j * bs];
    }
    std::fill(s + end, s + cols, kNegInf);
    const VF vlse = hn::Set(df, lse), vdelta = hn::Set(df, buf.delta[r]);
    for (size_t x = 0; x < cols; x += L) {
      const VF pv = hn::Exp(df, hn::Sub(hn::LoadU(df, s + x), vlse));  // exp(-inf) = 0
      hn::StoreU(pv, df, s + x);
      hn::StoreU(hn::Mul(pv, hn::Sub(hn::LoadU(df, ds + x), vdelta)), df, ds + x);
    }
    if (with_dbias) {
      float* dbrow = &bp.dbias(rb.b, rb.h, i, j0);
      const std::int64_t dbs = bp.dbias.strides[3];
      for (std::int64_t j = 0; j < end; ++j) dbrow[j * dbs] += ds[j];
    }
    for (size_t x = 0; x < cols; x += L) hn::StoreU(hn::Mul(hn::LoadU(df, ds + x), scale), df, ds + x);
  }
}

// Pass 1 for one key block of (b, g): dK and dV of keys [j0, j0 + tl), and their dbias terms.
inline void KeyBlock(const BackwardProblem& bp, std::int64_t b, std::int64_t g, std::int64_t kb) {
  const Problem& p = bp.p;
  const AttentionShape& s = p.s;
  const Buffers buf = ThreadBuffers(s);
  const std::int64_t j0 = kb * kBk, tl = std::min(kBk, s.Nk - j0);
  const std::int64_t group = s.Hq / s.Hkv;
  std::fill(buf.acc1, buf.acc1 + tl * std::int64_t(buf.dp), 0.0f);
  std::fill(buf.acc2, buf.acc2 + tl * std::int64_t(buf.dvp), 0.0f);
  if (j0 < p.key_length(b)) {
    PackKeys(p, b, g, j0, tl, false, buf);
    for (std::int64_t hh = 0; hh < group; ++hh)
      for (std::int64_t i0 = 0; i0 < s.Nq; i0 += kBq) {
        const RowBlock rb{b, g * group + hh, i0, std::min(kBq, s.Nq - i0)};
        if (p.visible_keys(b, i0 + rb.n - 1) <= j0) continue;  // visibility grows with i: none sees these keys
        PackRows(bp, rb, buf);
        TileGrads(bp, rb, j0, tl, bp.has_dbias, buf);
        // dV += P^T dO and dK += (s dS)^T Q: P^T and dS^T read in place (column strides).
        Gemm(size_t(tl), buf.dvp, size_t(rb.n), buf.sp, 1, kBk, buf.dop, buf.dvp, buf.acc2, buf.dvp, true);
        Gemm(size_t(tl), buf.dp, size_t(rb.n), buf.dsp, 1, kBk, buf.qp, buf.dp, buf.acc1, buf.dp, true);
      }
  }
  for (std::int64_t j = 0; j < tl; ++j) {
    float* dk = &bp.dk(b, g, j0 + j, 0);
    for (std::int64_t d = 0; d < s.D; ++d) dk[d * bp.dk.strides[3]] = buf.acc1[j * std::int64_t(buf.dp) + d];
    for (std::int64_t e = 0; e < s.Dv; ++e) bp.dv(b, g, j0 + j, e) = buf.acc2[j * std::int64_t(buf.dvp) + e];
  }
}

// Pass 2 for one block of query rows: dQ over every key tile some row of the block sees.
inline void QueryBlock(const BackwardProblem& bp, const RowBlock& rb) {
  const Problem& p = bp.p;
  const AttentionShape& s = p.s;
  const Buffers buf = ThreadBuffers(s);
  const std::int64_t g = rb.h / (s.Hq / s.Hkv);
  std::fill(buf.acc2, buf.acc2 + rb.n * std::int64_t(buf.dp), 0.0f);
  const std::int64_t kmax = p.visible_keys(rb.b, rb.i0 + rb.n - 1);
  if (kmax > 0) PackRows(bp, rb, buf);
  for (std::int64_t j0 = 0; j0 < kmax; j0 += kBk) {
    const std::int64_t tl = std::min(kBk, kmax - j0);
    PackKeys(p, rb.b, g, j0, tl, true, buf);
    TileGrads(bp, rb, j0, tl, false, buf);
    Gemm(size_t(rb.n), buf.dp, size_t(tl), buf.dsp, kBk, 1, buf.acc1, buf.dp, buf.acc2, buf.dp, true);  // dQ += s dS K
  }
  for (std::int64_t r = 0; r < rb.n; ++r) {
    float* dq = &bp.dq(rb.b, rb.h, rb.i0 + r, 0);
    for (std::int64_t d = 0; d < s.D; ++d) dq[d * bp.dq.strides[3]] = buf.acc2[r * std::int64_t(buf.dp) + d];
  }
}

}  // namespace bwd

void RunBackward(const BackwardProblem& bp, int threads) {
  using namespace bwd;
  const AttentionShape& s = bp.p.s;
  FirstError errors;
  // Pass 1 items: (key block, batch, kv head), key blocks outermost so that under causality the
  // blocks seen by the most queries start first. A dimension the bias gradient sums over is not
  // split between items (it is looped inside one), so no two threads add into one dbias element.
  const std::int64_t nkb = ceil_div(s.Nk, kBk);
  const bool split_b = !(bp.has_dbias && bp.dbias.strides[0] == 0 && s.B > 1);
  const bool split_g = !(bp.has_dbias && bp.dbias.strides[1] == 0 && s.Hq > 1);
  const bool split_k = !(bp.has_dbias && bp.dbias.strides[3] == 0 && s.Nk > 1);
  const std::int64_t ib = split_b ? s.B : 1, ig = split_g ? s.Hkv : 1, ik = split_k ? nkb : 1;
  const std::int64_t items1 = ib * ig * ik;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && items1 > 1)
  for (std::int64_t item = 0; item < items1; ++item)
    errors.run([&] {
      const std::int64_t xk = item / (ib * ig), xb = item / ig % ib, xg = item % ig;
      for (std::int64_t kb = split_k ? xk : 0; kb < (split_k ? xk + 1 : nkb); ++kb)
        for (std::int64_t b = split_b ? xb : 0; b < (split_b ? xb + 1 : s.B); ++b)
          for (std::int64_t g = split_g ? xg : 0; g < (split_g ? xg + 1 : s.Hkv); ++g) KeyBlock(bp, b, g, kb);
    });
  errors.rethrow();
  // Pass 2 items: (query block, batch, query head); under causality the last blocks (most keys) first.
  const std::int64_t nqb = ceil_div(s.Nq, kBq);
  const std::int64_t items2 = nqb * s.B * s.Hq;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && items2 > 1)
  for (std::int64_t item = 0; item < items2; ++item)
    errors.run([&] {
      const std::int64_t rank = item / (s.B * s.Hq), bh = item % (s.B * s.Hq);
      const std::int64_t qb = bp.p.causal ? nqb - 1 - rank : rank;
      const std::int64_t i0 = qb * kBq;
      QueryBlock(bp, RowBlock{bh / s.Hq, bh % s.Hq, i0, std::min(kBq, s.Nq - i0)});
    });
  errors.rethrow();
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim {
namespace detail {
HWY_EXPORT(RunBackward);
// One dispatch per call: the chosen target's RunBackward runs both parallel passes.
static void DispatchBackward(const BackwardProblem& bp, int threads) { HWY_DYNAMIC_DISPATCH(RunBackward)(bp, threads); }
}  // namespace detail

void attention_backward(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, ConstTensor4 out, ConstTensor3 lse,
                        ConstTensor4 dout, const AttentionGradients& grads, const AttentionOptions& options) {
  const detail::BackwardProblem bp = detail::make_backward_problem(q, k, v, &out, &lse, dout, &grads, options);
  // dbias is accumulated: zero the caller's elements first (after validation: nothing is
  // written on refusal).
  if (bp.has_dbias) {
    const Tensor4& db = bp.dbias_given;
    for (std::int64_t a = 0; a < db.shape[0]; ++a)
      for (std::int64_t h = 0; h < db.shape[1]; ++h)
        for (std::int64_t i = 0; i < db.shape[2]; ++i)
          for (std::int64_t j = 0; j < db.shape[3]; ++j) db(a, h, i, j) = 0.0f;
  }
  const int threads = resolve_threads(options.threads);
  detail::DispatchBackward(bp, threads);
}

}  // namespace jomoim
#endif  // HWY_ONCE
