// fast_attention.cpp — the CPU fast path of jomoim::attention.
//
// Tiled attention with online softmax: for each block of query rows, key/value tiles of
// kBlockK keys stream past; each tile's scores S = Q K^T are computed into a 64 x 64 buffer,
// masked, exponentiated against a running row maximum, and accumulated into the output as
// P V. No N x N buffer exists (see attention.hpp for what is allocated). SIMD through Highway
// (compiled for every x86 target, dispatched once per call), threads through OpenMP.
//
// This file is compiled once per SIMD target (Highway's foreach_target re-includes it).
// Shapes use DESIGN.md's letters: q [B,Hq,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv].
#include <omp.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "attention/plan.hpp"
#include "attention/problem.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/fast_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register blocking of the two micro-kernels: kMR rows x kNV vectors of accumulators. AVX-512
// has 32 vector registers (16 accumulators + 4 operands fit); the other x86 targets have 16.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kNV = 4;
#else
constexpr size_t kNV = 2;
#endif
constexpr size_t kMR = 4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// s[r][c] = sum_d q[r][d] * kt[d][c] for r < MR, c < NV lanes-wide vectors.
//   q  [MR, depth] (row stride ldq), kt [depth, *] (row stride ldk, aligned), s [MR, *] (lds).
template <size_t MR, size_t NV>
HWY_INLINE void ScoreMicro(const float* HWY_RESTRICT q, size_t ldq, const float* HWY_RESTRICT kt,
                           size_t ldk, float* HWY_RESTRICT s, size_t lds, size_t depth) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF acc[MR][NV];
  for (size_t r = 0; r < MR; ++r)
    for (size_t c = 0; c < NV; ++c) acc[r][c] = hn::Zero(df);
  for (size_t d = 0; d < depth; ++d) {
    VF kv[NV];
    for (size_t c = 0; c < NV; ++c) kv[c] = hn::Load(df, kt + d * ldk + c * L);
    for (size_t r = 0; r < MR; ++r) {
      const VF qb = hn::Set(df, q[r * ldq + d]);
      for (size_t c = 0; c < NV; ++c) acc[r][c] = hn::MulAdd(qb, kv[c], acc[r][c]);
    }
  }
  for (size_t r = 0; r < MR; ++r)
    for (size_t c = 0; c < NV; ++c) hn::Store(acc[r][c], df, s + r * lds + c * L);
}

// S [rows, kBlockK] = Qp [rows, D] * Kt [D, kBlockK].
HWY_INLINE void ScoreTile(const float* qp, size_t rows, size_t depth, const float* kt, float* s) {
  const size_t L = hn::Lanes(DF());
  const size_t step = kNV * L;  // kBlockK (64) is a multiple of step on every target
  for (size_t c0 = 0; c0 < size_t(kBlockK); c0 += step) {
    size_t r = 0;
    for (; r + kMR <= rows; r += kMR)
      ScoreMicro<kMR, kNV>(qp + r * depth, depth, kt + c0, kBlockK, s + r * kBlockK + c0, kBlockK, depth);
    for (; r < rows; ++r)
      ScoreMicro<1, kNV>(qp + r * depth, depth, kt + c0, kBlockK, s + r * kBlockK + c0, kBlockK, depth);
  }
}

// Few query rows (decode): s[r][j] = q[r] . k[j] with K read in place, one key row at a time,
// instead of packing K^T. Reads each key once for all R rows; needs K's D-stride to be 1.
//   q [R, depth] (row stride ldq), k [keys, depth] (row stride ldk), s [R, *] (lds).
template <size_t R>
HWY_INLINE void ScoreRowsDirect(const float* HWY_RESTRICT q, size_t ldq, const float* HWY_RESTRICT k,
                                std::ptrdiff_t ldk, size_t keys, float* HWY_RESTRICT s, size_t lds,
                                size_t depth) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t whole = depth / L * L;
  for (size_t j = 0; j < keys; ++j) {
    const float* kr = k + std::ptrdiff_t(j) * ldk;
    VF acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = hn::Zero(df);
    for (size_t d = 0; d < whole; d += L) {
      const VF kv = hn::LoadU(df, kr + d);
      for (size_t r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + d), kv, acc[r]);
    }
    for (size_t r = 0; r < R; ++r) {
      float dot = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (size_t d = whole; d < depth; ++d) dot += q[r * ldq + d] * kr[d];
      s[r * lds + j] = dot;
    }
  }
}

// Rows up to this count take the direct path (measured: decode with 1..8 stacked rows is
// bound by reading K, and packing K^T costs more than the dot products save).
constexpr std::int64_t kDirectRows = 8;

HWY_INLINE void ScoreTileDirect(const float* qp, size_t rows, size_t depth, const float* k, std::ptrdiff_t ldk,
                                size_t keys, float* s) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) ScoreRowsDirect<4>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, kBlockK, depth);
  for (; r + 2 <= rows; r += 2) ScoreRowsDirect<2>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, kBlockK, depth);
  for (; r < rows; ++r) ScoreRowsDirect<1>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, kBlockK, depth);
}

// o[r][c] += sum_j p[r][j] * v[j][c] for r < MR, j < keys, c < NV vectors.
//   p [MR, keys] (row stride ldp), v [keys, *] (row stride ldv, unaligned, may be negative),
//   o [MR, *] (row stride ldo, aligned).
template <size_t MR, size_t NV>
HWY_INLINE void ValueMicro(const float* HWY_RESTRICT p, size_t ldp, const float* HWY_RESTRICT v,
                           std::ptrdiff_t ldv, size_t keys, float* HWY_RESTRICT o, size_t ldo) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF acc[MR][NV];
  for (size_t r = 0; r < MR; ++r)
    for (size_t c = 0; c < NV; ++c) acc[r][c] = hn::Load(df, o + r * ldo + c * L);
  for (size_t j = 0; j < keys; ++j) {
    VF vv[NV];
    for (size_t c = 0; c < NV; ++c) vv[c] = hn::LoadU(df, v + std::ptrdiff_t(j) * ldv + c * L);
    for (size_t r = 0; r < MR; ++r) {
      const VF pb = hn::Set(df, p[r * ldp + j]);
      for (size_t c = 0; c < NV; ++c) acc[r][c] = hn::MulAdd(pb, vv[c], acc[r][c]);
    }
  }
  for (size_t r = 0; r < MR; ++r)
    for (size_t c = 0; c < NV; ++c) hn::Store(acc[r][c], df, o + r * ldo + c * L);
}

template <size_t MR>
HWY_INLINE void ValueColumns(const float* p, const float* v, std::ptrdiff_t ldv, size_t keys,
                             float* o, size_t ldo, size_t dvp) {
  const size_t L = hn::Lanes(DF());
  size_t c0 = 0;
  for (; c0 + kNV * L <= dvp; c0 += kNV * L) ValueMicro<MR, kNV>(p, kBlockK, v + c0, ldv, keys, o + c0, ldo);
  for (; c0 < dvp; c0 += L) ValueMicro<MR, 1>(p, kBlockK, v + c0, ldv, keys, o + c0, ldo);
}

// Acc [rows, dvp] += P [rows, keys] * V [keys, dvp].
HWY_INLINE void ValueTile(const float* p, size_t rows, const float* v, std::ptrdiff_t ldv, size_t keys,
                          float* acc, size_t dvp) {
  size_t r = 0;
  for (; r + kMR <= rows; r += kMR) ValueColumns<kMR>(p + r * kBlockK, v, ldv, keys, acc + r * dvp, dvp, dvp);
  for (; r < rows; ++r) ValueColumns<1>(p + r * kBlockK, v, ldv, keys, acc + r * dvp, dvp, dvp);
}

HWY_INLINE float MaxOf(const float* x, size_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF m = hn::Set(df, kNegInf);
  for (size_t c = 0; c < n; c += L) m = hn::Max(m, hn::Load(df, x + c));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

// x[c] = exp(x[c] - shift) (exp(-inf) = 0); returns the sum. n is a multiple of the lanes.
HWY_INLINE float ExpShiftedSum(float* x, size_t n, float shift) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vs = hn::Set(df, shift);
  VF sum = hn::Zero(df);
  for (size_t c = 0; c < n; c += L) {
    const VF e = hn::Exp(df, hn::Sub(hn::Load(df, x + c), vs));
    hn::Store(e, df, x + c);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

HWY_INLINE void ScaleRow(float* x, size_t n, float factor) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF f = hn::Set(df, factor);
  for (size_t c = 0; c < n; c += L) hn::Store(hn::Mul(hn::Load(df, x + c), f), df, x + c);
}

// The rows of one work item: batch b, kv head g, and up to kBlockQ (query head, position) rows.
struct Rows {
  std::int64_t b = 0, g = 0, n = 0;
  std::int64_t head[kBlockQ];
  std::int64_t pos[kBlockQ];
  std::int64_t visible[kBlockQ];  // keys [0, visible) are unmasked for the row
  std::int64_t max_visible = 0;
};

// Work item index -> rows. Under causality the blocks with the most visible keys (the last
// query positions) come first, so dynamic scheduling ends with the cheap blocks.
inline void RowsOfItem(const Problem& p, const Plan& plan, std::int64_t item, Rows& rows) {
  const AttentionShape& s = p.s;
  const std::int64_t bg = item % (s.B * s.Hkv);
  const std::int64_t rank = item / (s.B * s.Hkv);
  rows.b = bg / s.Hkv;
  rows.g = bg % s.Hkv;
  rows.n = 0;
  auto add_rows = [&](std::int64_t hh, std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      rows.head[rows.n] = rows.g * plan.group + hh;
      rows.pos[rows.n] = i;
      rows.visible[rows.n] = p.visible_keys(rows.b, i);
      ++rows.n;
    }
  };
  if (plan.heads_per_block == 1) {
    const std::int64_t qb_rank = rank / plan.group;
    const std::int64_t qb = p.causal ? plan.blocks_per_head - 1 - qb_rank : qb_rank;
    const std::int64_t i0 = qb * kBlockQ;
    add_rows(rank % plan.group, i0, std::min(s.Nq, i0 + kBlockQ));
  } else {
    const std::int64_t hh0 = rank * plan.heads_per_block;
    for (std::int64_t hh = hh0; hh < std::min(plan.group, hh0 + plan.heads_per_block); ++hh) add_rows(hh, 0, s.Nq);
  }
  rows.max_visible = 0;
  for (std::int64_t r = 0; r < rows.n; ++r) rows.max_visible = std::max(rows.max_visible, rows.visible[r]);
}

// Scratch layout of one thread, in floats; every region starts 64-byte aligned.
struct Buffers {
  float *qp, *kt, *vp, *s, *acc, *m, *l;
  size_t dvp;  // Dv rounded up to whole vectors
};

inline size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

inline Buffers ThreadBuffers(const AttentionShape& s) {
  const size_t L = hn::Lanes(DF());
  const size_t a = 16;  // 64 bytes
  Buffers b;
  b.dvp = RoundUp(size_t(s.Dv), L);
  const size_t nq = RoundUp(kBlockQ * s.D, a), nk = RoundUp(s.D * kBlockK, a), nv = RoundUp(kBlockK * b.dvp, a),
               ns = kBlockQ * kBlockK, nacc = RoundUp(kBlockQ * b.dvp, a), nm = RoundUp(kBlockQ, a);
  float* base = Scratch::for_this_thread().reserve(nq + nk + nv + ns + nacc + 2 * nm);
  b.qp = base;
  b.kt = b.qp + nq;
  b.vp = b.kt + nk;
  b.s = b.vp + nv;
  b.acc = b.s + ns;
  b.m = b.acc + nacc;
  b.l = b.m + nm;
  return b;
}

// Scores of the tile of keys [t0, t0 + tl) for every row: S = scale * Q K^T + bias, with
// masked keys (and the padding past tl) set to -inf. Q must already be packed (scaled) in
// buf.qp. K^T is packed into buf.kt here.
inline void TileScores(const Problem& p, const Rows& rows, std::int64_t t0, std::int64_t tl, const Buffers& buf) {
  const AttentionShape& s = p.s;
  const std::int64_t D = s.D;
  const float* kbase = p.k.data + rows.b * p.k.strides[0] + rows.g * p.k.strides[1] + t0 * p.k.strides[2];
  const std::int64_t ksn = p.k.strides[2], ksd = p.k.strides[3];
  if (rows.n <= kDirectRows && ksd == 1) {
    ScoreTileDirect(buf.qp, size_t(rows.n), size_t(D), kbase, ksn, size_t(tl), buf.s);
  } else {
    // Pack K^T: kt[d][j] = k[b, g, t0 + j, d]; zero columns past tl.
    for (std::int64_t j = 0; j < tl; ++j) {
      const float* kr = kbase + j * ksn;
      for (std::int64_t d = 0; d < D; ++d) buf.kt[d * kBlockK + j] = kr[d * ksd];
    }
    if (tl < kBlockK)
      for (std::int64_t d = 0; d < D; ++d) std::fill(buf.kt + d * kBlockK + tl, buf.kt + (d + 1) * kBlockK, 0.0f);
    ScoreTile(buf.qp, size_t(rows.n), size_t(D), buf.kt, buf.s);
  }
  for (std::int64_t r = 0; r < rows.n; ++r) {
    float* srow = buf.s + r * kBlockK;
    const std::int64_t end = std::clamp<std::int64_t>(rows.visible[r] - t0, 0, tl);
    if (p.has_bias) {
      const float* brow = p.bias.data + rows.b * p.bias.strides[0] + rows.head[r] * p.bias.strides[1] +
                          rows.pos[r] * p.bias.strides[2] + t0 * p.bias.strides[3];
      const std::int64_t bs = p.bias.strides[3];
      for (std::int64_t j = 0; j < end; ++j) srow[j] += brow[j * bs];
    }
    std::fill(srow + end, srow + kBlockK, kNegInf);
  }
}

// Packs the block's query rows, pre-multiplied by the scale: qp[r][d] = scale * q[b, h_r, i_r, d].
inline void PackQueries(const Problem& p, const Rows& rows, const Buffers& buf) {
  const std::int64_t D = p.s.D;
  for (std::int64_t r = 0; r < rows.n; ++r) {
    const float* qr = p.q.data + rows.b * p.q.strides[0] + rows.head[r] * p.q.strides[1] + rows.pos[r] * p.q.strides[2];
    for (std::int64_t d = 0; d < D; ++d) buf.qp[r * D + d] = p.s.scale * qr[d * p.q.strides[3]];
  }
}

// Online softmax over the keys [k0, k1) for every row of the block: leaves the running
// maximum m, the sum l of exp(score - m) and the unnormalised output acc in buf.
inline void AttendKeys(const Problem& p, const Rows& rows, std::int64_t k0, std::int64_t k1, const Buffers& buf) {
  const AttentionShape& s = p.s;
  std::fill(buf.m, buf.m + rows.n, kNegInf);
  std::fill(buf.l, buf.l + rows.n, 0.0f);
  std::fill(buf.acc, buf.acc + rows.n * buf.dvp, 0.0f);
  // V rows are read in place when they are contiguous whole vectors; otherwise packed.
  const bool direct_v = p.v.strides[3] == 1 && size_t(s.Dv) == buf.dvp;
  for (std::int64_t t0 = k0; t0 < k1; t0 += kBlockK) {
    const std::int64_t tl = std::min<std::int64_t>(kBlockK, k1 - t0);
    TileScores(p, rows, t0, tl, buf);
    // Online softmax: rescale what was accumulated so far to the new row maximum.
    for (std::int64_t r = 0; r < rows.n; ++r) {
      float* srow = buf.s + r * kBlockK;
      const float m_new = std::max(buf.m[r], MaxOf(srow, kBlockK));
      if (m_new == kNegInf) {  // nothing visible yet: P = 0, keep m = -inf (no -inf - -inf)
        std::fill(srow, srow + kBlockK, 0.0f);
        continue;
      }
      const float sum = ExpShiftedSum(srow, kBlockK, m_new);
      if (buf.m[r] != m_new) {
        const float alpha = std::exp(buf.m[r] - m_new);  // exp(-inf) = 0 on the first tile
        buf.l[r] *= alpha;
        ScaleRow(buf.acc + r * buf.dvp, buf.dvp, alpha);
        buf.m[r] = m_new;
      }
      buf.l[r] += sum;
    }
    const float* vbase = p.v.data + rows.b * p.v.strides[0] + rows.g * p.v.strides[1] + t0 * p.v.strides[2];
    if (direct_v) {
      ValueTile(buf.s, size_t(rows.n), vbase, p.v.strides[2], size_t(tl), buf.acc, buf.dvp);
    } else {
      for (std::int64_t j = 0; j < tl; ++j) {
        float* dst = buf.vp + j * buf.dvp;
        const float* src = vbase + j * p.v.strides[2];
        for (std::int64_t e = 0; e < s.Dv; ++e) dst[e] = src[e * p.v.strides[3]];
        std::fill(dst + s.Dv, dst + buf.dvp, 0.0f);
      }
      ValueTile(buf.s, size_t(rows.n), buf.vp, std::ptrdiff_t(buf.dvp), size_t(tl), buf.acc, buf.dvp);
    }
  }
}

// out = acc / l and lse = m + log(l); zeros and -inf for rows that saw no key.
inline void WriteRow(const Problem& p, const Rows& rows, std::int64_t r, float m, float l, const float* acc) {
  const std::int64_t b = rows.b, h = rows.head[r], i = rows.pos[r];
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  float* o = p.out.data + b * p.out.strides[0] + h * p.out.strides[1] + i * p.out.strides[2];
  for (std::int64_t e = 0; e < p.s.Dv; ++e) o[e * p.out.strides[3]] = acc[e] * inv;
  if (p.has_lse) p.lse(b, h, i) = l > 0 ? m + std::log(l) : kNegInf;
}

// Second pass for the probabilities output: probs[row][j] = exp(score - m) / l, zero where
// masked. Reuses the tile machinery; only called with the row's final m and l in buf.
inline void WriteProbs(const Problem& p, const Rows& rows, const Buffers& buf) {
  const std::int64_t Nk = p.s.Nk;
  for (std::int64_t t0 = 0; t0 < Nk; t0 += kBlockK) {
    const std::int64_t tl = std::min<std::int64_t>(kBlockK, Nk - t0);
    const bool any_visible = t0 < rows.max_visible;
    if (any_visible) TileScores(p, rows, t0, tl, buf);
    for (std::int64_t r = 0; r < rows.n; ++r) {
      float* srow = buf.s + r * kBlockK;
      float* prow = p.probs.data + rows.b * p.probs.strides[0] + rows.head[r] * p.probs.strides[1] +
                    rows.pos[r] * p.probs.strides[2] + t0 * p.probs.strides[3];
      const std::int64_t ps = p.probs.strides[3];
      if (!any_visible || buf.l[r] == 0) {
        for (std::int64_t j = 0; j < tl; ++j) prow[j * ps] = 0.0f;
        continue;
      }
      ExpShiftedSum(srow, kBlockK, buf.m[r]);
      const float inv = 1.0f / buf.l[r];
      for (std::int64_t j = 0; j < tl; ++j) prow[j * ps] = srow[j] * inv;
    }
  }
}

// Partial results of the decode path: for unit u and row r, the running max, sum and
// unnormalised output over that unit's key range.
struct Partials {
  std::vector<float> m, l, acc;  // [units, kBlockQ], [units, kBlockQ], [units, kBlockQ, dvp]
  size_t dvp = 0;
};

void RunUnit(const Problem& p, const Plan& plan, std::int64_t u, Partials* parts) {
  const std::int64_t item = u / plan.splits, split = u % plan.splits;
  Rows rows;
  RowsOfItem(p, plan, item, rows);
  const Buffers buf = ThreadBuffers(p.s);
  const std::int64_t chunk = RoundUp(size_t(ceil_div(rows.max_visible, plan.splits)), kBlockK);
  const std::int64_t k0 = std::min(rows.max_visible, split * chunk);
  const std::int64_t k1 = std::min(rows.max_visible, k0 + chunk);
  PackQueries(p, rows, buf);
  AttendKeys(p, rows, k0, k1, buf);
  if (plan.splits == 1) {
    for (std::int64_t r = 0; r < rows.n; ++r) WriteRow(p, rows, r, buf.m[r], buf.l[r], buf.acc + r * buf.dvp);
    if (p.has_probs) WriteProbs(p, rows, buf);
    return;
  }
  const size_t base = size_t(u) * kBlockQ;
  std::copy(buf.m, buf.m + rows.n, parts->m.begin() + base);
  std::copy(buf.l, buf.l + rows.n, parts->l.begin() + base);
  std::copy(buf.acc, buf.acc + rows.n * buf.dvp, parts->acc.begin() + base * buf.dvp);
}

// Merges the splits of one item by log-sum-exp, in split order (deterministic):
//   M = max_s m_s,  l = sum_s l_s e^(m_s - M),  out = sum_s acc_s e^(m_s - M) / l.
void MergeItem(const Problem& p, const Plan& plan, std::int64_t item, const Partials& parts) {
  Rows rows;
  RowsOfItem(p, plan, item, rows);
  const Buffers buf = ThreadBuffers(p.s);
  for (std::int64_t r = 0; r < rows.n; ++r) {
    float M = kNegInf;
    for (std::int64_t sp = 0; sp < plan.splits; ++sp) M = std::max(M, parts.m[size_t(item * plan.splits + sp) * kBlockQ + r]);
    float* acc = buf.acc;
    std::fill(acc, acc + buf.dvp, 0.0f);
    float l = 0;
    if (M != kNegInf) {
      for (std::int64_t sp = 0; sp < plan.splits; ++sp) {
        const size_t at = size_t(item * plan.splits + sp) * kBlockQ + r;
        if (parts.l[at] == 0) continue;
        const float w = std::exp(parts.m[at] - M);
        l += parts.l[at] * w;
        const float* a = parts.acc.data() + at * parts.dvp;
        for (size_t e = 0; e < buf.dvp; ++e) acc[e] += a[e] * w;
      }
    }
    WriteRow(p, rows, r, M, l, acc);
  }
}

void RunAttention(const Problem& p, const Plan& plan) {
  Partials parts;
  if (plan.splits > 1) {
    parts.dvp = RoundUp(size_t(p.s.Dv), hn::Lanes(DF()));
    parts.m.resize(size_t(plan.units()) * kBlockQ);
    parts.l.resize(size_t(plan.units()) * kBlockQ);
    parts.acc.resize(size_t(plan.units()) * kBlockQ * parts.dvp);
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](auto&& fn) {
    try {
      fn();
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  const std::int64_t units = plan.units();
#pragma omp parallel for schedule(dynamic, 1) num_threads(plan.threads) if (plan.threads > 1 && units > 1)
  for (std::int64_t u = 0; u < units; ++u) guarded([&] { RunUnit(p, plan, u, &parts); });
  if (error) std::rethrow_exception(error);
  if (plan.splits > 1) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
    for (std::int64_t item = 0; item < plan.items; ++item) guarded([&] { MergeItem(p, plan, item, parts); });
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim {
namespace detail {
HWY_EXPORT(RunAttention);
// One dispatch per call: the chosen target's RunAttention runs the whole parallel loop.
static void Dispatch(const Problem& p, const Plan& plan) { HWY_DYNAMIC_DISPATCH(RunAttention)(p, plan); }
}  // namespace detail

void attention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out, const AttentionOptions& options) {
  const detail::Problem p = detail::make_problem(q, k, v, &out, options);
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const detail::Plan plan = detail::make_plan(p, threads);
  if (plan.items == 0) return;  // B, Hq or Nq is zero: no output element exists
  detail::Dispatch(p, plan);
}

}  // namespace jomoim
#endif  // HWY_ONCE
