// q8_attention.cpp — attention_q8kv: attention with 8-bit keys and values (jomoim/engine/quant.hpp).
//
// Decode-shaped: a work item is one batch b, one key/value head g and up to kRows query rows of
// the heads that read g (all the group's heads and positions, stacked), so each K and V byte is
// read once per item. Keys go by tiles of kTile: the scores of the tile in row layout
// S [rows, kTile], an online softmax along each row, then O += P V. Every K and V vector is
// widened from int8 to float32 in registers and multiplied by its block's scale (one row:
// each block's sum, or each weight, times the scale once); nothing wider than int8 is stored.
// On CPUs with AMX-INT8 (and the AMX_BF16 target active) four rows' scores over each group of
// 16 keys are int8 tile products instead (amx_attention.hpp: the query in four int8 pieces).
// When the items are too few for the threads, each item's keys are split into ranges merged
// by log-sum-exp afterwards, as in attention(). Compiled once per SIMD target (Highway),
// dispatched once per call.
// attention_q4kv runs the same kernel (Kernel<true>) on the q4 bytes: a vector of values is
// one load of bytes, masked (the row's first half) or shifted (its second half), minus 8, and
// widened like q8's (WidenQ4; one row's scores take the 8 off once a block instead); the AMX
// path is q8's only.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "amx_attention.hpp"
#include "cpu.hpp"
#include "jomoim/engine/threads.hpp"
#include "plan.hpp"
#include "q8_problem.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "q8_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include "simd_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF, Exp2NonPositive and Sum4 come from simd_blocks-inl.h.
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<std::int8_t, DF>;  // as many int8 lanes as DF has floats
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Scores in base-2 units, as in attention(): the queries are packed times scale * log2(e).
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
// One vector of q8 values (inside one block), widened to float32, without its block's scale
// (the callers multiply by it, or scale a whole block's sum once).
HWY_INLINE VF WidenRaw(const std::int8_t* HWY_RESTRICT values) {
  const DF df;
  const DI di;
  const D8 d8;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, values)));
}

// Vectors of value columns whose accumulators stay in registers for all R rows of P·V.
constexpr std::size_t kValueAccumulators = kManyRegisters ? 16 : 8;
// Keys a part of P·V goes through before its next column slice, where a V row takes several.
// On AVX-512 four rows take a V row of 128 in two slices: with a whole tile a part, the second
// slice's lines (a tile's V rows are 32 KB beside K's) came back from L2, and grouped q8 decode
// from memory read K and V at about two thirds of float32's rate; in halves, with the first
// slice prefetching whole rows (PrefetchSpan), 0.85x the time (B 64, 8 K/V heads, 4096 keys,
// 2 threads, a Zen 5; the same from L3). The 16-register targets measured no faster that way.
constexpr std::int64_t kValueSubTile = kManyRegisters ? kQ8Tile / 2 : kQ8Tile;

// A four-row group's query on the AMX-INT8 tiles (group r0 / 4 of an item's rows): its pieces
// and column scales (amx_q8_prepare), ready when ok[group]; cbuf holds C's sums.
static_assert(kQ8Rows <= 8, "an item has at most two four-row groups");
struct AmxRows {
  std::int8_t* pieces[2] = {nullptr, nullptr};
  float* colscale[2] = {nullptr, nullptr};
  bool ok[2] = {false, false};
  std::int32_t* cbuf = nullptr;
};

struct Rows {
  std::int64_t b = 0, g = 0, n = 0;
  std::int64_t head[kQ8Rows], pos[kQ8Rows], visible[kQ8Rows];
  std::int64_t max_visible = 0;
};

// One vector of q4 values from the bytes at `bytes` (quant.hpp): their low nibbles (values of a
// row's first half) or high nibbles (its second half), widened to float32, minus 8 (kStored:
// without it, the stored q + 8 in [1, 15], for loops that subtract the 8 once a block).
template <bool kHigh, bool kStored = false>
HWY_INLINE VF WidenQ4(const std::uint8_t* HWY_RESTRICT bytes) {
  const DF df;
  const DI di;
  const hn::Rebind<std::uint8_t, DF> du8;
  const auto x = hn::PromoteTo(di, hn::LoadU(du8, bytes));
  const auto n = kHigh ? hn::ShiftRight<4>(x) : hn::And(x, hn::Set(di, 0x0F));
  return hn::ConvertTo(df, kStored ? n : hn::Sub(n, hn::Set(di, 8)));
}

template <bool kQ4>
struct Kernel {
  // A K or V row's storage: int8 values, or q4's bytes of two values each.
  using Byte = std::conditional_t<kQ4, std::uint8_t, std::int8_t>;
  static constexpr std::int64_t kPerByte = kQ4 ? 2 : 1;
  // What Raw<true> adds to every value: q4 stores q + 8 (quant.hpp); q8 stores q.
  static constexpr float kStoredOffset = kQ4 ? 8.0f : 0.0f;
  const Q8Problem& qp;
  const Problem& p;
  const Q8Plan& plan;
  // Lanes, a constant (x86 vectors have a fixed width): a column vector's offset c * L is then an
  // immediate, not a register or a stack slot reloaded at every key.
  static constexpr std::size_t L = hn::MaxLanes(DF());
  std::size_t dp, dvp;  // D and Dv rounded up to whole vectors (the q8 rows are whole blocks
                        // of 16, so D and Dv are multiples of 16 >= L: dp = D here)

  struct Buffers {
    float *qs, *s, *acc, *m, *l;
    AmxRows amx;
    float* planes = nullptr;  // P·V's weight planes (kPlanes), where UsePlanes()
  };
  // kPlanes where a V row has 2 or 4 blocks, an item has several rows to share each widened V
  // vector (one row scales its weight per block already, ValueColumnsOneRow), and a four-row
  // slice of columns lies in one block, so that a key broadcasts no more weights than before:
  // AVX2's two vectors (-13 % for grouped q8 decode on a Zen 5), not AVX-512's four, which span
  // two blocks of 32 and measured no faster.
  bool UsePlanes() const {
    const std::int64_t nb = p.s.Dv / qp.v.block;
    return (nb == 2 || nb == 4) && plan.rows_per_bg >= 2 && std::int64_t(kValueAccumulators / 4 * L) <= qp.v.block;
  }

  void RowsOfItem(std::int64_t item, Rows& rows) const {
    const std::int64_t bg = item / plan.chunks, chunk = item % plan.chunks;
    rows.b = bg / p.s.Hkv;
    rows.g = bg % p.s.Hkv;
    const std::int64_t r0 = chunk * kQ8Rows, r1 = std::min(plan.rows_per_bg, r0 + kQ8Rows);
    rows.n = r1 - r0;
    rows.max_visible = 0;
    for (std::int64_t r = 0; r < rows.n; ++r) {
      const std::int64_t flat = r0 + r;  // head-major: the group's head, then the position
      rows.head[r] = rows.g * plan.group + flat / p.s.Nq;
      rows.pos[r] = flat % p.s.Nq;
      rows.visible[r] = p.visible_keys(rows.b, rows.pos[r]);
      rows.max_visible = std::max(rows.max_visible, rows.visible[r]);
    }
  }

  // Key j's row of the item's K/V head, in the [B, Hkv, Nk] rows of K and of V.
  std::int64_t RowOf(const Rows& rows, std::int64_t j) const { return (rows.b * p.s.Hkv + rows.g) * p.s.Nk + j; }
  // Row `row` of a K or V tensor of `width` values a row: its int8 values, or its q4 bytes.
  const Byte* Values(const ConstQ8Tensor4& x, const std::uint8_t* x4, std::int64_t row, std::int64_t width) const {
    if constexpr (kQ4)
      return x4 + row * (width / 2);
    else
      return x.values + row * width;
  }
  const Byte* KRow(const Rows& rows, std::int64_t j) const { return Values(qp.k, qp.k4, RowOf(rows, j), p.s.D); }
  const float* KScales(const Rows& rows, std::int64_t j) const {
    return qp.k.scales + RowOf(rows, j) * (p.s.D / qp.k.block);
  }
  const Byte* VRow(const Rows& rows, std::int64_t j) const { return Values(qp.v, qp.v4, RowOf(rows, j), p.s.Dv); }
  // The vector of values e, e + 1, ... of a row of `width` values, widened without its scale
  // (q4: a vector lies in one half of the row, whose width / 2 is a multiple of 16).
  // kStored: q4's values as stored, q + 8 (kStoredOffset), for one row's scores, which take the
  // 8 off once a block (q4 decode with one row a K/V head in 0.92-0.98x the time on a Zen 5,
  // AVX2 and AVX-512). P·V keeps the subtraction per vector: 8 times the weights summed over
  // the keys and taken off after them cancelled in float32 (the mean error 0.17 -> 2.5-3.2 u
  // max|v| at 700 keys, near the tests' 4 u).
  template <bool kStored = false>
  static HWY_INLINE VF Raw(const Byte* HWY_RESTRICT row, std::int64_t e, std::int64_t width) {
    if constexpr (kQ4) {
      const std::int64_t half = width / 2;
      return e < half ? WidenQ4<false, kStored>(row + e) : WidenQ4<true, kStored>(row + e - half);
    } else {
      (void)width;
      return WidenRaw(row + e);
    }
  }
  const float* VScales(const Rows& rows, std::int64_t j) const {
    return qp.v.scales + RowOf(rows, j) * (p.s.Dv / qp.v.block);
  }

  // acc[r][kk] += q_r . k_kk over the whole row for R query rows (at qr) and G keys (values kv,
  // block scales ks): each key vector widened once, times its block's scale, for the R rows.
  // NB > 0: blocks of NB vectors, that loop unrolled; 0: block / L vectors, counted at run time.
  template <std::size_t R, int G, std::size_t NB>
  HWY_INLINE void RowProducts(const float* const (&qr)[R], const Byte* const (&kv)[G], const float* const (&ks)[G],
                              std::int64_t block, VF (&acc)[R][G]) const {
    const DF df;
    const std::int64_t D = p.s.D, nb = NB > 0 ? std::int64_t(NB) : block / std::int64_t(L);
    for (std::int64_t e0 = 0, bi = 0; e0 < D; e0 += nb * std::int64_t(L), ++bi) {
      VF sc[G];
#pragma GCC unroll 16
      for (int kk = 0; kk < G; ++kk) sc[kk] = hn::Set(df, ks[kk][bi]);
#pragma GCC unroll 4
      for (std::int64_t v = 0; v < nb; ++v) {
        const std::int64_t e = e0 + v * std::int64_t(L);
        VF qv[R];
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) {
          qv[r] = hn::Load(df, qr[r] + e);
          // Four rows, two keys (the 16-register targets): loaded once, not folded into both
          // keys' FMAs (as fast_attention's grouped scores; AVX2 pinned, a Zen 5, H32/Hkv8:
          // 0.87-0.98x the time over five A/B runs at 256-4,096 keys).
          if constexpr (!kManyRegisters && R == 4 && G == 2) KeepInRegister(qv[r]);
        }
#pragma GCC unroll 16
        for (int kk = 0; kk < G; ++kk) {
          const VF k = hn::Mul(Raw(kv[kk], e, D), sc[kk]);
#pragma GCC unroll 16
          for (std::size_t r = 0; r < R; ++r) acc[r][kk] = hn::MulAdd(qv[r], k, acc[r][kk]);
        }
      }
    }
  }

  // s[r][j - t0] = q_r . k_j for the keys [t0, t0 + tl), R rows from row r0 (R = 4 for a
  // grouped head's four rows: each key vector widened once for all of them). Several keys at a
  // time where the target has Sum4 (four lane sums folded together, about 13 operations for four
  // sums instead of 4 x 9), then one key at a time (the same products, RowProducts).
  template <std::size_t R>
  void ScoreRows(const Rows& rows, const float* qs, const AmxRows& amx, std::int64_t r0, std::int64_t t0,
                 std::int64_t tl, float* s) const {
    const DF df;
    const std::int64_t D = p.s.D, block = qp.k.block;
    std::int64_t j = 0;
    if constexpr (R == 4 && !kQ4) {
      // Whole groups of 16 keys on the tiles, the rest below (q8 only: the plan has no tiles for q4).
      if (amx.ok[r0 / 4] && tl >= 16) {
        amx_q8_scores4(amx.pieces[r0 / 4], amx.colscale[r0 / 4], KRow(rows, t0), KScales(rows, t0), D, block, tl / 16,
                       plan.prefetch_tiles, s + r0 * kQ8Tile, kQ8Tile, amx.cbuf);
        j = tl / 16 * 16;
      }
    }
    // The read-ahead distances, out of the key loops (the scales' one divided once, not per key).
    const std::int64_t k_ahead = plan.prefetch_for<R>() * D / kPerByte, ks_ahead = plan.prefetch_for<R>() * (D / block);
    const float* qr[R];  // the rows' queries, addressed once
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) qr[r] = qs + (r0 + std::int64_t(r)) * std::int64_t(dp);
#ifdef JOMOIM_SUM4
    // One row has registers for eight keys (two Sum4s): 8 independent FMA chains, as many as
    // the FMA latency times the pipes; four keys left one row's loop latency-bound. Four rows
    // on a 16-register target take two keys (8 accumulators; a Sum4 then folds two rows' pair).
    constexpr int G = R == 1 ? 8 : (R == 4 && !kManyRegisters ? 2 : 4);
    // The loops over keys and rows fully unrolled: an index that is not a constant kept the
    // R x G accumulators in memory, stored at every vector of K (AVX-512's four rows: 16 stores).
    for (; j + G <= tl; j += G) {
      const Byte* kv[G];
      const float* ks[G];
#pragma GCC unroll 16
      for (int kk = 0; kk < G; ++kk) {
        kv[kk] = KRow(rows, t0 + j + kk);
        ks[kk] = KScales(rows, t0 + j + kk);
        // Every line of the row, and the scales' line.
        for (std::int64_t c = 0; c < D / kPerByte; c += 64) Ahead<R>(kv[kk] + k_ahead + c);
        Ahead<R>(ks[kk] + ks_ahead);
      }
      VF acc[R][G];
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int kk = 0; kk < G; ++kk) acc[r][kk] = hn::Zero(df);
      if constexpr (R == 1) {
        for (std::int64_t e0 = 0, bi = 0; e0 < D; e0 += block, ++bi) {
          // One row: each key's block summed unscaled, then scaled once (a multiplication per
          // block instead of per vector; registers: 8 sums beside the 8 accumulators).
          const VF q0 = hn::Load(df, qr[0] + e0);
          VF t[G];
          if constexpr (kQ4) {
            // q4's stored values q + 8, each block's sums started at -8 times the block's
            // query (lane-wise; computed once for the G keys): sum q (n - 8) = sum q n - 8 sum q.
            VF qsum = q0;
            for (std::int64_t e = e0 + std::int64_t(L); e < e0 + block; e += std::int64_t(L))
              qsum = hn::Add(qsum, hn::Load(df, qr[0] + e));
            const VF start = hn::Mul(qsum, hn::Set(df, -kStoredOffset));
#pragma GCC unroll 16
            for (int kk = 0; kk < G; ++kk) t[kk] = hn::MulAdd(q0, Raw<true>(kv[kk], e0, D), start);
          } else {
#pragma GCC unroll 16
            for (int kk = 0; kk < G; ++kk) t[kk] = hn::Mul(q0, Raw(kv[kk], e0, D));
          }
          for (std::int64_t e = e0 + std::int64_t(L); e < e0 + block; e += std::int64_t(L)) {
            const VF qv = hn::Load(df, qr[0] + e);
#pragma GCC unroll 16
            for (int kk = 0; kk < G; ++kk) t[kk] = hn::MulAdd(qv, Raw<true>(kv[kk], e, D), t[kk]);
          }
#pragma GCC unroll 16
          for (int kk = 0; kk < G; ++kk) acc[0][kk] = hn::MulAdd(t[kk], hn::Set(df, ks[kk][bi]), acc[0][kk]);
        }
      } else if (block == std::int64_t(2 * L)) {
        // Blocks of 2 or 4 vectors (Q8_0's 32 values on AVX-512 and AVX2) with the loop over a
        // block's vectors unrolled: at run time it ran twice a block, with the query rows'
        // addresses recomputed at each block (a quarter of the loop's samples on a Zen 5).
        RowProducts<R, G, 2>(qr, kv, ks, block, acc);
      } else if (block == std::int64_t(4 * L)) {
        RowProducts<R, G, 4>(qr, kv, ks, block, acc);
      } else {
        RowProducts<R, G, 0>(qr, kv, ks, block, acc);
      }
      if constexpr (G == 2) {
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; r += 2) {  // rows r and r + 1, keys j and j + 1
          alignas(16) float dots[4];
          hn::Store(Sum4(acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1]), hn::Full128<float>(), dots);
          float* sr = s + (r0 + std::int64_t(r)) * kQ8Tile + j;
          sr[0] = dots[0], sr[1] = dots[1], sr[kQ8Tile] = dots[2], sr[kQ8Tile + 1] = dots[3];
        }
      } else {
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
          for (int k4 = 0; k4 < G; k4 += 4) {
            alignas(16) float dots[4];
            hn::Store(Sum4(acc[r][k4], acc[r][k4 + 1], acc[r][k4 + 2], acc[r][k4 + 3]), hn::Full128<float>(), dots);
#pragma GCC unroll 16
            for (int kk = 0; kk < 4; ++kk) s[(r0 + std::int64_t(r)) * kQ8Tile + j + k4 + kk] = dots[kk];
          }
      }
    }
#endif
    for (; j < tl; ++j) {
      const Byte* kv = KRow(rows, t0 + j);
      const float* ks = KScales(rows, t0 + j);
      for (std::int64_t c = 0; c < D / kPerByte; c += 64) Ahead<R>(kv + k_ahead + c);
      Ahead<R>(ks + ks_ahead);
      const Byte* const kv1[1] = {kv};
      const float* const ks1[1] = {ks};
      VF acc[R][1];
      for (std::size_t r = 0; r < R; ++r) acc[r][0] = hn::Zero(df);
      RowProducts<R, 1, 0>(qr, kv1, ks1, block, acc);  // the same products as a group's, one key
      for (std::size_t r = 0; r < R; ++r)
        s[(r0 + std::int64_t(r)) * kQ8Tile + j] = hn::GetLane(hn::SumOfLanes(df, acc[r][0]));
    }
  }

  // A prefetch of K/V rows (and their scales) streamed once by an item of R rows: into L2
  // (PrefetchStream), except grouped q8 rows where the plan asks for L1
  // (Q8Plan::prefetch_near_rows; q4's grouped rows measured 0.96-1.00x the time that way).
  template <std::size_t R, typename T>
  HWY_INLINE void Ahead(const T* p) const {
    if (R > 1 && !kQ4 && plan.prefetch_near_rows)
      PrefetchNear(p);
    else
      PrefetchStream(p);
  }

  // How P·V's weights meet V's scales (AttendKeys picks one per call):
  //   kScaleVectors: each widened V vector times its block's scale, shared by the R rows;
  //   kPrescaled: one scale per V row (block = Dv), already in P's weights;
  //   kPlanes: 2 or 4 blocks a row; P is that many planes, plane b the weights times each key's
  //            scale of block b (kPlaneFloats apart), so a V vector is only widened.
  enum ScaleMode { kScaleVectors, kPrescaled, kPlanes };
  static constexpr std::int64_t kPlaneFloats = kQ8Rows * kQ8Tile;

  // acc[r] += sum_j P[r][j] v_j for R rows from r0, from column e0 on: C vectors of value
  // columns at a time (R * C accumulators in registers, each V vector widened once for the R
  // rows), then C / 2, ..., 1 for the rest.
  // Value vectors a column slice of R rows takes at once (R * that accumulators in registers).
  static constexpr std::size_t SliceVectors(std::size_t R) { return std::max<std::size_t>(1, kValueAccumulators / R); }

  template <std::size_t R, ScaleMode kMode, std::size_t C = SliceVectors(R)>
  void ValueRows(const Rows& rows, const float* P, std::int64_t r0, std::int64_t t0, std::int64_t tl, float* acc,
                 std::int64_t e0 = 0) const {
    const std::int64_t step = std::int64_t(C * L);
    for (; e0 + step <= p.s.Dv; e0 += step) ValueColumns<R, C, kMode>(rows, P, r0, t0, tl, acc, e0, qp.v.block);
    if constexpr (C > 1)
      if (e0 < p.s.Dv) ValueRows<R, kMode, C / 2>(rows, P, r0, t0, tl, acc, e0);
  }
  // How much of each V row a column slice starting at e0 prefetches: the first slice the whole
  // row and the others none, as fast_attention's decode does (7167754). On AVX-512 each slice
  // took its own part until four rows' two slices at Dv 128 measured slower from memory that way
  // (kValueSubTile).
  std::int64_t PrefetchSpan(std::int64_t e0) const { return e0 == 0 ? p.s.Dv : 0; }

  template <std::size_t R, std::size_t C, ScaleMode kMode>
  void ValueColumns(const Rows& rows, const float* P, std::int64_t r0, std::int64_t t0, std::int64_t tl, float* acc,
                    std::int64_t e0, std::int64_t block) const {
    const DF df;
    // Every loop over r and c fully unrolled: an index that is not a constant kept the
    // accumulators in memory, stored at every key (AVX2's four rows: 8 stores a key).
    VF a[R][C];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (std::size_t c = 0; c < C; ++c)
        a[r][c] = hn::Load(df, acc + (r0 + std::int64_t(r)) * std::int64_t(dvp) + e0 + std::int64_t(c * L));
    std::int64_t bi[C];  // each column vector's block (a vector lies inside one block)
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) bi[c] = (e0 + std::int64_t(c * L)) / block;
    if constexpr (kMode == kPlanes) {
      // Columns c and c' share a plane's weight when they share a block: all C when the slice
      // lies in one block, else NV at a time from a block's start (NV vectors a block).
      const std::int64_t lo = e0 / block, hi = (e0 + std::int64_t(C * L) - 1) / block;
      if (lo == hi) return ValueColumnsPlanes<R, C, C>(rows, P, r0, t0, tl, acc, e0, a, bi);
      if (e0 % block == 0 && block == std::int64_t(2 * L))
        return ValueColumnsPlanes<R, C, 2>(rows, P, r0, t0, tl, acc, e0, a, bi);
      if (e0 % block == 0 && block == std::int64_t(4 * L))
        return ValueColumnsPlanes<R, C, 4>(rows, P, r0, t0, tl, acc, e0, a, bi);
      return ValueColumnsPlanes<R, C, 1>(rows, P, r0, t0, tl, acc, e0, a, bi);
    } else if constexpr (kMode == kScaleVectors && R == 1) {
      // One row: the weight times each block's scale once per block, not each vector times its
      // scale (the usual block of 32 is 2 vectors on AVX-512, 4 on AVX2).
      if (e0 % block == 0) {
        if (block == std::int64_t(2 * L)) return ValueColumnsOneRow<C, 2>(rows, P, r0, t0, tl, acc, e0, a, bi);
        if (block == std::int64_t(4 * L)) return ValueColumnsOneRow<C, 4>(rows, P, r0, t0, tl, acc, e0, a, bi);
      }
      // The whole slice inside one block (wider blocks: block = Dv is one scale per row, the
      // per-token-per-head layout): one multiplication per key.
      if (bi[C - 1] == bi[0]) return ValueColumnsOneRow<C, C>(rows, P, r0, t0, tl, acc, e0, a, bi);
    }
    const std::int64_t prefetch = PrefetchSpan(e0);
    // The read-ahead distances, out of the key loop (the scales' one divided once, not per key).
    const std::int64_t v_ahead = plan.prefetch_for<R>() * p.s.Dv / kPerByte,
                       vs_ahead = plan.prefetch_for<R>() * (p.s.Dv / block);
    for (std::int64_t j = 0; j < tl; ++j) {
      const Byte* vv = VRow(rows, t0 + j);
      const float* vs = VScales(rows, t0 + j);
      for (std::int64_t c = 0; c < prefetch / kPerByte; c += 64) Ahead<R>(vv + v_ahead + c);
      if (e0 == 0) Ahead<R>(vs + vs_ahead);
      VF pr[R];
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r) pr[r] = hn::Set(df, P[(r0 + std::int64_t(r)) * kQ8Tile + j]);
#pragma GCC unroll 16
      for (std::size_t c = 0; c < C; ++c) {
        const VF raw = Raw(vv, e0 + std::int64_t(c * L), p.s.Dv);
        const VF v = kMode == kPrescaled ? raw : hn::Mul(raw, hn::Set(df, vs[bi[c]]));
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) a[r][c] = hn::MulAdd(pr[r], v, a[r][c]);
      }
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (std::size_t c = 0; c < C; ++c)
        hn::Store(a[r][c], df, acc + (r0 + std::int64_t(r)) * std::int64_t(dvp) + e0 + std::int64_t(c * L));
  }

  // ValueColumns on P's planes (kPlanes): column c's weights from plane bi[c], each V vector
  // only widened. Per: columns per plane weight (the C columns in groups of Per share a block),
  // so a key broadcasts R * C / Per weights where kScaleVectors multiplies C vectors.
  template <std::size_t R, std::size_t C, std::size_t Per>
  void ValueColumnsPlanes(const Rows& rows, const float* planes, std::int64_t r0, std::int64_t t0, std::int64_t tl,
                          float* acc, std::int64_t e0, VF (&a)[R][C], const std::int64_t (&bi)[C]) const {
    const DF df;
    constexpr std::size_t NW = (C + Per - 1) / Per;
    const float* w[NW][R];  // each weight group's plane row
#pragma GCC unroll 16
    for (std::size_t g = 0; g < NW; ++g)
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r)
        w[g][r] = planes + bi[g * Per] * kPlaneFloats + (r0 + std::int64_t(r)) * kQ8Tile;
    const std::int64_t prefetch = PrefetchSpan(e0);
    const std::int64_t v_ahead = plan.prefetch_for<R>() * p.s.Dv / kPerByte;
    for (std::int64_t j = 0; j < tl; ++j) {
      const Byte* vv = VRow(rows, t0 + j);
      for (std::int64_t c = 0; c < prefetch / kPerByte; c += 64) Ahead<R>(vv + v_ahead + c);
      VF pr[NW][R];
#pragma GCC unroll 16
      for (std::size_t g = 0; g < NW; ++g)
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) pr[g][r] = hn::Set(df, w[g][r][j]);
#pragma GCC unroll 16
      for (std::size_t c = 0; c < C; ++c) {
        const VF v = Raw(vv, e0 + std::int64_t(c * L), p.s.Dv);
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) a[r][c] = hn::MulAdd(pr[c / Per][r], v, a[r][c]);
      }
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (std::size_t c = 0; c < C; ++c)
        hn::Store(a[r][c], df, acc + (r0 + std::int64_t(r)) * std::int64_t(dvp) + e0 + std::int64_t(c * L));
  }

  // ValueColumns for one row when each block is NV whole vectors (C a multiple of NV, or fewer
  // vectors than one block: then the C vectors lie in one block).
  template <std::size_t C, std::size_t NV>
  void ValueColumnsOneRow(const Rows& rows, const float* P, std::int64_t r0, std::int64_t t0, std::int64_t tl,
                          float* acc, std::int64_t e0, VF (&a)[1][C], const std::int64_t (&bi)[C]) const {
    const DF df;
    constexpr std::size_t step = C < NV ? C : NV;
    const std::int64_t prefetch = PrefetchSpan(e0);
    const std::int64_t v_ahead = plan.prefetch_one_row * p.s.Dv / kPerByte,
                       vs_ahead = plan.prefetch_one_row * (p.s.Dv / qp.v.block);
    for (std::int64_t j = 0; j < tl; ++j) {
      const Byte* vv = VRow(rows, t0 + j);
      const float* vs = VScales(rows, t0 + j);
      for (std::int64_t c = 0; c < prefetch / kPerByte; c += 64) PrefetchStream(vv + v_ahead + c);
      if (e0 == 0) PrefetchStream(vs + vs_ahead);
      const float pj = P[r0 * kQ8Tile + j];
#pragma GCC unroll 16
      for (std::size_t c0 = 0; c0 < C; c0 += step) {
        const VF w = hn::Set(df, pj * vs[bi[c0]]);
#pragma GCC unroll 16
        for (std::size_t c = c0; c < c0 + step; ++c)
          a[0][c] = hn::MulAdd(w, Raw(vv, e0 + std::int64_t(c * L), p.s.Dv), a[0][c]);
      }
    }
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) hn::Store(a[0][c], df, acc + r0 * std::int64_t(dvp) + e0 + std::int64_t(c * L));
  }

  template <class F>
  static void ByRows(std::int64_t n, F&& f) {  // f(r0, Size<R>) over blocks of 4, 2, 1 rows
    std::int64_t r = 0;
    for (; r + 4 <= n; r += 4) f(r, std::integral_constant<std::size_t, 4>());
    for (; r + 2 <= n; r += 2) f(r, std::integral_constant<std::size_t, 2>());
    for (; r < n; ++r) f(r, std::integral_constant<std::size_t, 1>());
  }
  // kPlanes' weights for the keys [t0, t0 + tl) of the item's rows: plane b = the weights s times
  // each key's scale of V block b (two or four blocks a row), 16 (or 8) keys' scales of every
  // block deinterleaved by one load; the next tile's scales (before k1) read ahead, a ninth of
  // P·V's lines, read here and not in its key loop.
  void WritePlanes(const Rows& rows, std::int64_t t0, std::int64_t k1, std::int64_t tl, const float* s,
                   float* planes) const {
    const DF df;
    const std::int64_t nb = p.s.Dv / qp.v.block;
    const float* vs = VScales(rows, t0);  // [tl][nb], contiguous
    if (t0 + kQ8Tile < k1)
      for (std::int64_t c = 0; c < kQ8Tile * nb; c += 16) PrefetchStream(vs + kQ8Tile * nb + c);
    std::int64_t j = 0;
    for (; j + std::int64_t(L) <= tl; j += std::int64_t(L)) {
      VF sc[4];
      if (nb == 4)
        hn::LoadInterleaved4(df, vs + j * 4, sc[0], sc[1], sc[2], sc[3]);
      else
        hn::LoadInterleaved2(df, vs + j * 2, sc[0], sc[1]);
      for (std::int64_t r = 0; r < rows.n; ++r) {
        const VF w = hn::Load(df, s + r * kQ8Tile + j);
        for (std::int64_t b = 0; b < nb; ++b)
          hn::Store(hn::Mul(w, sc[b]), df, planes + b * kPlaneFloats + r * kQ8Tile + j);
      }
    }
    for (; j < tl; ++j)
      for (std::int64_t r = 0; r < rows.n; ++r)
        for (std::int64_t b = 0; b < nb; ++b)
          planes[b * kPlaneFloats + r * kQ8Tile + j] = s[r * kQ8Tile + j] * vs[j * nb + b];
  }

  // Online softmax over the keys [k0, k1) for the item's rows: m, l and the unnormalised acc.
  void AttendKeys(const Rows& rows, std::int64_t k0, std::int64_t k1, const Buffers& buf) const {
    const DF df;
    float *s = buf.s, *acc = buf.acc, *m = buf.m, *l = buf.l;
    for (std::int64_t r = 0; r < rows.n; ++r) {
      m[r] = kNegInf;
      l[r] = 0.0f;
      std::fill(acc + r * dvp, acc + (r + 1) * dvp, 0.0f);
    }
    for (std::int64_t t0 = k0; t0 < k1; t0 += kQ8Tile) {
      const std::int64_t tl = std::min(kQ8Tile, k1 - t0);
      ByRows(rows.n,
             [&](std::int64_t r0, auto R) { ScoreRows<decltype(R)::value>(rows, buf.qs, buf.amx, r0, t0, tl, s); });
      for (std::int64_t r = 0; r < rows.n; ++r) {
        float* sr = s + r * kQ8Tile;
        const std::int64_t end = std::clamp<std::int64_t>(rows.visible[r] - t0, 0, tl);
        if (p.has_bias)
          for (std::int64_t j = 0; j < end; ++j) {
            const float bias = p.bias(rows.b, rows.head[r], rows.pos[r], t0 + j);
            sr[j] = bias == kNegInf ? kNegInf : sr[j] + kLog2e * bias;
          }
        for (std::int64_t j = end; j < kQ8Tile; ++j) sr[j] = kNegInf;  // masked keys and the padding
        // Softmax step (base 2): m' = max(m, max_j s_j), p_j = 2^(s_j - m'), l' = l 2^(m - m') + sum_j p_j.
        VF mv = hn::Set(df, m[r]);
        for (std::int64_t j = 0; j < kQ8Tile; j += std::int64_t(L)) mv = hn::Max(mv, hn::Load(df, sr + j));
        const float m_new = hn::GetLane(hn::MaxOfLanes(df, mv));
        const float shift = m_new == kNegInf ? 0.0f : m_new;  // nothing seen yet: no -inf - -inf
        const VF vs = hn::Set(df, shift);
        VF sum = hn::Zero(df);
        for (std::int64_t j = 0; j < kQ8Tile; j += std::int64_t(L)) {
          // 2^-inf (a masked key) is exactly 0; a NaN score stays NaN.
          const VF e = Exp2NonPositive(df, hn::Sub(hn::Load(df, sr + j), vs));
          hn::Store(e, df, sr + j);
          sum = hn::Add(sum, e);
        }
        const float alpha = m[r] == kNegInf ? 1.0f : std::exp2(m[r] - shift);
        l[r] = l[r] * alpha + hn::GetLane(hn::SumOfLanes(df, sum));
        m[r] = m_new;
        if (alpha != 1.0f) {
          const VF av = hn::Set(df, alpha);
          for (std::size_t e = 0; e < dvp; e += L)
            hn::Store(hn::Mul(hn::Load(df, acc + r * dvp + e), av), df, acc + r * dvp + e);
        }
      }
      // The weights times V's scales once here, a vector of keys at a time, where that saves P·V
      // a multiplication per V vector (which R rows share): one scale per V row (block = Dv, the
      // per-token-per-head layout) in place; two or four blocks a row into planes (UsePlanes).
      const ScaleMode mode = buf.planes ? kPlanes : qp.v.block == p.s.Dv ? kPrescaled : kScaleVectors;
      if (mode == kPlanes) {
        WritePlanes(rows, t0, k1, tl, s, buf.planes);
      } else if (mode == kPrescaled) {
        const float* vs = VScales(rows, t0);  // contiguous: one float a key
        for (std::int64_t r = 0; r < rows.n; ++r) {
          float* sr = s + r * kQ8Tile;
          std::int64_t j = 0;
          for (; j + std::int64_t(L) <= tl; j += std::int64_t(L))
            hn::Store(hn::Mul(hn::Load(df, sr + j), hn::LoadU(df, vs + j)), df, sr + j);
          for (; j < tl; ++j) sr[j] *= vs[j];
        }
      }
      // The mode a constant in each ByRows loop: one loop choosing per row group measured 5-15 %
      // slower on a Zen 5, AVX2 and AVX-512 alike.
      // Where a V row takes several column slices, P·V goes through the tile in parts of
      // kValueSubTile keys, each part through all the slices.
      const auto value_rows = [&](auto kMode, const float* P) {
        ByRows(rows.n, [&](std::int64_t r0, auto R) {
          constexpr std::size_t kR = decltype(R)::value;
          const std::int64_t part = std::int64_t(SliceVectors(kR) * L) < p.s.Dv ? kValueSubTile : tl;
          for (std::int64_t s0 = 0; s0 < tl; s0 += part)
            ValueRows<kR, decltype(kMode)::value>(rows, P + s0, r0, t0 + s0, std::min(part, tl - s0), acc);
        });
      };
      if (mode == kPlanes)
        value_rows(std::integral_constant<ScaleMode, kPlanes>(), buf.planes);
      else if (mode == kPrescaled)
        value_rows(std::integral_constant<ScaleMode, kPrescaled>(), s);
      else
        value_rows(std::integral_constant<ScaleMode, kScaleVectors>(), s);
    }
  }

  void WriteRow(const Rows& rows, std::int64_t r, float m, float l, const float* acc) const {
    const float inv = l == 0 ? 0.0f : 1.0f / l;
    for (std::int64_t e = 0; e < p.s.Dv; ++e) p.out(rows.b, rows.head[r], rows.pos[r], e) = acc[e] * inv;
    if (p.has_lse) p.lse(rows.b, rows.head[r], rows.pos[r]) = l == 0 ? kNegInf : m * kLn2 + std::log(l);
  }

  Buffers ThreadBuffers() const {
    const std::size_t nq = kQ8Rows * dp, ns = kQ8Rows * kQ8Tile, na = kQ8Rows * dvp;
    // AMX: the two four-row groups' pieces (16 D bytes each) and column scales, and C's sums.
    const std::size_t npieces = plan.amx_scores ? 2 * amx_q8_piece_bytes(p.s.D) / sizeof(float) : 0;
    const std::size_t namx = plan.amx_scores ? kAmxQ8ScoreInts + 2 * 16 + npieces : 0;
    const std::size_t nplanes = UsePlanes() ? std::size_t(p.s.Dv / qp.v.block * kPlaneFloats) : 0;
    float* base = Scratch::for_this_thread().reserve(nq + ns + na + 2 * 16 + namx + nplanes);
    Buffers b{base, base + nq, base + nq + ns, base + nq + ns + na, base + nq + ns + na + 16, {}};
    if (plan.amx_scores) {
      float* at = base + nq + ns + na + 2 * 16;  // 64-byte aligned: every size above is a multiple of 16
      b.amx.cbuf = reinterpret_cast<std::int32_t*>(at);
      b.amx.colscale[0] = at + kAmxQ8ScoreInts;
      b.amx.colscale[1] = b.amx.colscale[0] + 16;
      b.amx.pieces[0] = reinterpret_cast<std::int8_t*>(b.amx.colscale[1] + 16);
      b.amx.pieces[1] = b.amx.pieces[0] + amx_q8_piece_bytes(p.s.D);
    }
    if (nplanes) b.planes = base + nq + ns + na + 2 * 16 + namx;  // 64-byte aligned, as above
    return b;
  }

  void RunUnit(std::int64_t u, SplitPartials& parts) const {
    const std::int64_t item = u / plan.splits, split = u % plan.splits;
    Rows rows;
    RowsOfItem(item, rows);
    Buffers buf = ThreadBuffers();
    // The queries, times the scale.
    for (std::int64_t r = 0; r < rows.n; ++r)
      for (std::int64_t d = 0; d < p.s.D; ++d)
        buf.qs[r * std::int64_t(dp) + d] = p.s.scale * kLog2e * p.q(rows.b, rows.head[r], rows.pos[r], d);
    if (plan.amx_scores)  // ByRows gives four-row groups at rows 0 and 4
      for (std::int64_t r0 = 0; r0 + 4 <= rows.n; r0 += 4)
        buf.amx.ok[r0 / 4] = amx_q8_prepare(buf.qs + r0 * std::int64_t(dp), std::int64_t(dp), p.s.D,
                                            buf.amx.pieces[r0 / 4], buf.amx.colscale[r0 / 4]);
    const std::int64_t chunk = (rows.max_visible + plan.splits - 1) / plan.splits;
    const std::int64_t k0 = std::min(rows.max_visible, split * chunk), k1 = std::min(rows.max_visible, k0 + chunk);
    AttendKeys(rows, k0, k1, buf);
    if (plan.splits == 1) {
      for (std::int64_t r = 0; r < rows.n; ++r) WriteRow(rows, r, buf.m[r], buf.l[r], buf.acc + r * dvp);
      return;
    }
    const std::size_t base = std::size_t(u) * kQ8Rows;
    std::copy(buf.m, buf.m + rows.n, parts.m.begin() + std::ptrdiff_t(base));
    std::copy(buf.l, buf.l + rows.n, parts.l.begin() + std::ptrdiff_t(base));
    std::copy(buf.acc, buf.acc + rows.n * dvp, parts.acc.begin() + std::ptrdiff_t(base * dvp));
  }

  // The splits of one item by log-sum-exp (SplitPartials::merge), into this thread's scratch.
  void MergeItem(std::int64_t item, const SplitPartials& parts) const {
    Rows rows;
    RowsOfItem(item, rows);
    const Buffers buf = ThreadBuffers();
    for (std::int64_t r = 0; r < rows.n; ++r) {
      float l = 0;
      const float M = parts.merge(item * plan.splits, plan.splits, r, buf.acc, &l);
      WriteRow(rows, r, M, l, buf.acc);
    }
  }
};

// The AMX tile configuration on this thread for one unit of work, released after it.
struct TileState {
  bool on;
  TileState(bool amx, std::int64_t block) : on(amx) {
    if (on) amx_q8_configure(block);
  }
  ~TileState() {
    if (on) amx_q8_release();
  }
  TileState(const TileState&) = delete;
  TileState& operator=(const TileState&) = delete;
};

template <bool kQ4>
void RunKernel(const Q8Problem& qp, const Q8Plan& plan) {
  const Problem& p = qp.p;
  const Kernel<kQ4> kernel{qp, p, plan, std::size_t(p.s.D), std::size_t(p.s.Dv)};
  static thread_local SplitPartials callers_partials;  // the caller's, shared by the workers
  SplitPartials& parts = callers_partials;
  if (plan.splits > 1) parts.reserve(plan.units(), kQ8Rows, kernel.dvp);
  FirstError errors;
  const std::int64_t units = plan.units();
#pragma omp parallel for schedule(dynamic, 1) num_threads(plan.threads) if (plan.threads > 1 && units > 1)
  for (std::int64_t u = 0; u < units; ++u)
    errors.run([&] {
      const TileState tiles(plan.amx_scores, qp.k.block);
      kernel.RunUnit(u, parts);
    });
  errors.rethrow();
  if (plan.splits > 1) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
    for (std::int64_t item = 0; item < plan.items; ++item) errors.run([&] { kernel.MergeItem(item, parts); });
    errors.rethrow();
  }
}

void RunQ8(const Q8Problem& qp, const Q8Plan& plan) {
  if (qp.k4)
    RunKernel<true>(qp, plan);
  else
    RunKernel<false>(qp, plan);
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim {
namespace detail {
HWY_EXPORT(RunQ8);

Q8Plan make_q8_plan(const Problem& p, int threads) {
  Q8Plan plan;
  plan.threads = std::max(1, threads);
  const AttentionShape& s = p.s;
  plan.group = s.Hq / s.Hkv;
  plan.rows_per_bg = plan.group * s.Nq;
  plan.chunks = (plan.rows_per_bg + kQ8Rows - 1) / kQ8Rows;
  plan.items = s.B * s.Hkv * plan.chunks;
  // One row's distance by vendor, as measured on a Zen 4 (16 rows 775 us, 48 rows 619-663) and an
  // Intel Xeon (48 rows 24.7-25.9 ms from memory, 24 rows 23.1-23.6); grouped rows keep
  // Q8Plan's 32 everywhere (bench/NOTES.md, "The q8 prefetch distance by machine").
  plan.prefetch_one_row = cpu_is_amd() ? 48 : 24;
  // Grouped q8 rows read ahead into L1 on AMD family 1Ah (Zen 5): 1.03-1.09x from memory, level
  // in L3; one row lost 4-7 % that way and keeps L2, as every row does on a Zen 4 (family 19h,
  // where grouped rows read into L1 measured 0.93-0.95x from memory) and Intel (bench/NOTES.md,
  // "Grouped q8 rows read ahead into L1 on Zen 5" and "A Zen 4 again: two probes").
  plan.prefetch_near_rows = cpu_is_amd() && cpu_family() == 0x1A;
  // Four rows' scores on AMX-INT8 where the CPU has it and the pin allows tiles, for D up to
  // 1024 (the pieces take 16 D bytes a group of rows per thread).
  plan.amx_scores = amx_enabled() && cpu_has_amx_int8() && s.D <= 1024 && plan.rows_per_bg >= 4;
  const std::int64_t want = 4 * std::int64_t(plan.threads);
  if (plan.threads > 1 && plan.items > 0 && plan.items < want)
    plan.splits = std::clamp<std::int64_t>((want + plan.items - 1) / plan.items, 1,
                                           std::max<std::int64_t>(1, s.Nk / kQ8MinSplit));
  return plan;
}
}  // namespace detail

void attention_q8kv(ConstTensor4 q, ConstQ8Tensor4 k, ConstQ8Tensor4 v, Tensor4 out, const AttentionOptions& options) {
  const detail::Q8Problem qp = detail::make_q8_problem(q, k, v, &out, options);
  const detail::Q8Plan plan = detail::make_q8_plan(qp.p, resolve_threads(options.threads));
  if (plan.items == 0) return;  // B, Hq or Nq is zero: no output element exists
  HWY_DYNAMIC_DISPATCH(detail::RunQ8)(qp, plan);
}

void attention_q4kv(ConstTensor4 q, ConstQ4Tensor4 k, ConstQ4Tensor4 v, Tensor4 out, const AttentionOptions& options) {
  const detail::Q8Problem qp = detail::make_q4_problem(q, k, v, &out, options);
  detail::Q8Plan plan = detail::make_q8_plan(qp.p, resolve_threads(options.threads));
  if (plan.items == 0) return;
  plan.amx_scores = false;  // the tiles take int8 rows: q8's path only
  HWY_DYNAMIC_DISPATCH(detail::RunQ8)(qp, plan);
}

}  // namespace jomoim
#endif  // HWY_ONCE
