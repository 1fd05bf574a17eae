// fast_attention.cpp — the CPU fast path of jomoim::attention.
//
// Tiled attention with online softmax: for each block of kBlockQ query rows, key/value tiles
// of kBlockK keys stream past; each tile's scores S = Q K^T are computed into a small buffer,
// masked, exponentiated against a running row maximum, and accumulated into the output as
// P V. Tile shapes (64 x 256, and 256 x 64 or 32 x 32 for some problems) are chosen per call
// in plan.hpp. No N x N buffer exists (see attention.hpp for what is allocated). SIMD through Highway
// (compiled for every x86 target, dispatched once per call), threads through OpenMP.
//
// This file is compiled once per SIMD target (Highway's foreach_target re-includes it).
// Shapes use docs/design.md's letters: q [B,Hq,Nq,D], k [B,Hkv,Nk,D], v [B,Hkv,Nk,Dv].
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "amx_attention.hpp"
#include "bf16_dot.hpp"
#include "jomoim/engine/threads.hpp"

#include "plan.hpp"
#include "problem.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fast_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "simd_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF, Exp2NonPositive and Sum4 come from simd_blocks-inl.h.

// Layout. Scores are kept transposed, S^T [keys, rows] with rows (queries) along the SIMD
// lanes: Q^T is packed once per block of query rows, K rows are read in place (no per-tile
// transpose), and the softmax over keys becomes element-wise max/exp/sum across vectors of
// rows, with no horizontal reductions.
//
// Register blocking, one place per register file. AVX-512 has 32 vector registers: 4 key rows x
// 4 vectors of query rows (16 accumulators + 4 operands + a broadcast). The other targets have
// 16: 6 x 2 (12 accumulators + 2 operands + a broadcast), the shape of the classic Haswell
// SGEMM kernel; 4 x 2, 8 accumulators, was exactly the FMA latency times the FMA pipes, so
// every FMA had to issue on time (measured +NN % at (1,12,1024,64) on AVX2, bench/NOTES.md,
// "AVX2 register blocking"). kMR rows are the remainder step of every 6-row kernel.
//   kScore*: S^T = K Q^T (MR keys x NV vectors of rows); kRow*: O += P V in row layout (MR rows
//   x NV vectors of value columns); kValue*: O^T += V^T P^T of the wide blocks (MR value
//   columns x NV vectors of rows).
// With 32 registers the transposed P·V of the wide blocks (O^T += V^T P^T) is blocked 8 x 2,
// not 4 x 4: half the P^T loads per key (its rows are 1 KiB apart and come from L2) and 8 V
// broadcasts from one cache line. Measured +1-2 % at (1,8,2048..4096,128) on one thread; the
// same 8 x 2 blocking for the scores gained nothing (bench/NOTES.md section 10).
constexpr size_t kScoreMR = kManyRegisters ? 4 : 6, kScoreNV = kManyRegisters ? 4 : 2;
constexpr size_t kRowMR = kManyRegisters ? 4 : 6, kRowNV = kManyRegisters ? 4 : 2;
constexpr size_t kValueMR = kManyRegisters ? 8 : 6, kValueNV = 2;
constexpr size_t kMR = 4;
// The decode path streams K and V from memory, each row once: it prefetches the rows this many
// keys ahead (16 KiB at D = 128). Measured on AVX2 at decode 1 x 4096, H32, D128 (Zen 5): one
// thread 29 -> 37 GB/s, two threads 46 -> 51 (bench/NOTES.md, "Decode prefetch").
constexpr std::ptrdiff_t kPrefetchKeys = 32;
// The same distance in bytes for rows of Rd's element type (16-bit rows: twice the keys).
template <class T>
constexpr std::ptrdiff_t kPrefetchKeysOf = kPrefetchKeys* std::ptrdiff_t(sizeof(float) / sizeof(T));
template <size_t N>
using Size = std::integral_constant<size_t, N>;
// Keys per tile of the default 64-row blocks (plan.hpp) when the block has more rows than the
// direct path takes: on the 16-register targets 128 instead of 256, so that a tile's P^T and V
// (32 KiB each at D = 64) come from L1 more often; measured +3-6 % on AVX2 at N = 1024..4096,
// D = 64, non-causal and causal, and -1..+2 % on AVX-512, which keeps 256 (bench/NOTES.md,
// "AVX2 register blocking"). Decode blocks keep 256 keys on every target.
constexpr std::int64_t kRowBlockK = kManyRegisters ? kBlockK : 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// The per-thread cache of V's bf16 pairs (options.bf16_weights): bytes and tiles at most.
constexpr size_t kVwCacheBytes = size_t(256) << 10, kVwMaxSlots = 16;

// Scores are kept in base-2 units: the queries are packed pre-multiplied by scale * log2(e)
// (and a bias by log2(e)), so every exponential of the softmax is 2^x of a non-positive x,
// which needs no range check beyond a clamp. lse is converted back to natural units.
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;

// Transposes the square block of N = lanes vectors in place: v[i] lane j becomes v[j] lane i.
// log2(N) rounds of ConcatEven / ConcatOdd over pairs of rows; each round moves the lowest bit
// of the row index to the top of the lane index and the lowest bit of the lane index to the
// top of the row index, so after log2(N) rounds the two indices have traded places. 64
// two-source permutes for a 16 x 16 block against 256 scalar loads and stores, and the rows
// are read and written as whole vectors.
constexpr size_t kLanes = hn::MaxLanes(DF());
#ifdef JOMOIM_ONE_LANE
HWY_INLINE void TransposeSquare(VF (&)[kLanes]) {}  // one lane: nothing to move
#else
HWY_INLINE void TransposeSquare(VF (&v)[kLanes]) {
  const DF df;
  for (size_t round = 1; round < kLanes; round *= 2) {
    VF w[kLanes];
    for (size_t k = 0; k < kLanes / 2; ++k) {
      w[k] = hn::ConcatEven(df, v[2 * k + 1], v[2 * k]);
      w[k + kLanes / 2] = hn::ConcatOdd(df, v[2 * k + 1], v[2 * k]);
    }
    for (size_t i = 0; i < kLanes; ++i) v[i] = w[i];
  }
}
#endif

// Prefetches the cache lines of one 16-bit row of n values (element stride `stride`; only unit
// strides are worth it). A hint past the tensor's end is harmless.
HWY_INLINE void Prefetch16(const std::uint16_t* row, std::ptrdiff_t stride, std::int64_t n) {
  if (stride != 1) return;
  for (std::int64_t i = 0; i < n; i += 32) PrefetchStream(row + i);
}

// dst[i] = the float32 value of src[i * stride] for i < n, 16-bit storage of format t (bf16 or
// f16; exact). Contiguous sources by whole vectors (F16C's VCVTPH2PS on AVX2 and up; bf16 is a
// shift), the rest and strided sources one by one.
HWY_INLINE void WidenRow(const std::uint16_t* HWY_RESTRICT src, std::ptrdiff_t stride, size_t n,
                         float* HWY_RESTRICT dst, Dtype t) {
  size_t i = 0;
  if (stride == 1) {
    const DF df;
    const size_t L = hn::Lanes(df);
    if (t == Dtype::bf16) {
      const hn::Rebind<hwy::bfloat16_t, DF> dh;
      const auto* s16 = reinterpret_cast<const hwy::bfloat16_t*>(src);
      for (; i + L <= n; i += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s16 + i)), df, dst + i);
    } else {
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto* s16 = reinterpret_cast<const hwy::float16_t*>(src);
      for (; i + L <= n; i += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s16 + i)), df, dst + i);
    }
  }
  for (; i < n; ++i) dst[i] = half_to_float(src[std::ptrdiff_t(i) * stride], t);
}

// Readers of K and V rows for the direct (decode) kernels: L values of a row as float32 at p.
// Float rows as they are; 16-bit rows widened in registers, so a decode step reads bf16 / f16
// keys and values once, in place, like float32 ones (2x fewer bytes), instead of widening each
// tile into a packed buffer first.
struct F32Row {
  using T = float;
  static HWY_INLINE VF Load(const float* HWY_RESTRICT p) { return hn::LoadU(DF(), p); }
  static HWY_INLINE float At(const float* p) { return *p; }
};
struct Bf16Row {
  using T = std::uint16_t;
  static HWY_INLINE VF Load(const std::uint16_t* HWY_RESTRICT p) {
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  }
  static HWY_INLINE float At(const std::uint16_t* p) { return bf16_to_float(*p); }
};
struct F16Row {
  using T = std::uint16_t;
  static HWY_INLINE VF Load(const std::uint16_t* HWY_RESTRICT p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static HWY_INLINE float At(const std::uint16_t* p) { return f16_to_float(*p); }
};
// Elements of a row per 64-byte cache line (the prefetch step).
template <class Rd>
constexpr std::ptrdiff_t kLineOf = 64 / sizeof(typename Rd::T);

// Everything below is instantiated for each tile shape of plan.hpp: kBlockQ query rows by
// kBlockK keys.
template <std::int64_t kBlockQ, std::int64_t kBlockK>
struct Tiled {
  // c[r][x] (+)= sum_d a(r, d) * bt[d][x] for r < MR, x < NV vectors: the register-blocked
  // kernel of both products whose rows run along the lanes.
  //   a(r, d) is a[r * lda + d], or a[d * lda + r] with kColumnsOfA (read by broadcasts; any
  //   alignment or sign of stride); bt [depth, *] (row stride ldb, aligned); c [MR, *] (row
  //   stride ldc, aligned), overwritten, or added to with kAccumulate.
  // Used for S^T = K Q^T (a = K rows, bt = Q^T) and for O^T += V^T P^T (a = V read by columns,
  // bt = P^T, accumulating).
  //   With kAccumulate, a non-null cscale first multiplies c's columns: c[r][x] *= cscale[x]
  //   (the online softmax's rescale of O^T, folded into the one load of c per tile).
  template <size_t MR, size_t NV, bool kColumnsOfA, bool kAccumulate>
  static HWY_INLINE void BroadcastMicro(const float* HWY_RESTRICT a, std::ptrdiff_t lda, const float* HWY_RESTRICT bt,
                                        size_t ldb, float* HWY_RESTRICT c, size_t ldc, size_t depth,
                                        const float* HWY_RESTRICT cscale = nullptr) {
    const DF df;
    const size_t L = hn::Lanes(df);
    VF acc[MR][NV];
    if (kAccumulate && cscale != nullptr) {
      VF f[NV];
      for (size_t x = 0; x < NV; ++x) f[x] = hn::Load(df, cscale + x * L);
      for (size_t r = 0; r < MR; ++r)
        for (size_t x = 0; x < NV; ++x) acc[r][x] = hn::Mul(hn::Load(df, c + r * ldc + x * L), f[x]);
    } else {
      for (size_t r = 0; r < MR; ++r)
        for (size_t x = 0; x < NV; ++x) acc[r][x] = kAccumulate ? hn::Load(df, c + r * ldc + x * L) : hn::Zero(df);
    }
    // a(r, d) at ad[r * ar], ad advancing by ak per d: the addresses are added, not multiplied.
    const std::ptrdiff_t ak = kColumnsOfA ? lda : 1, ar = kColumnsOfA ? 1 : lda;
    const float* HWY_RESTRICT ad = a;
    const float* HWY_RESTRICT bd = bt;
    for (size_t d = 0; d < depth; ++d, ad += ak, bd += ldb) {
      VF bv[NV];
      for (size_t x = 0; x < NV; ++x) bv[x] = hn::Load(df, bd + x * L);
      for (size_t r = 0; r < MR; ++r) {
        const VF ab = hn::Set(df, ad[std::ptrdiff_t(r) * ar]);
        for (size_t x = 0; x < NV; ++x) acc[r][x] = hn::MulAdd(ab, bv[x], acc[r][x]);
      }
    }
    for (size_t r = 0; r < MR; ++r)
      for (size_t x = 0; x < NV; ++x) hn::Store(acc[r][x], df, c + r * ldc + x * L);
  }

  // The kernel above over the columns [x, cols) of bt and c (cols a multiple of the lanes), whose
  // rows are kBlockQ floats apart: NV vectors at a time, then NV / 2, ... for the rest.
  template <size_t MR, size_t NV, bool kColumnsOfA, bool kAccumulate>
  static HWY_INLINE void BroadcastColumns(const float* a, std::ptrdiff_t lda, const float* bt, size_t cols, float* c,
                                          size_t depth, const float* cscale = nullptr, size_t x = 0) {
    const size_t L = hn::Lanes(DF());
    for (; x + NV * L <= cols; x += NV * L)
      BroadcastMicro<MR, NV, kColumnsOfA, kAccumulate>(a, lda, bt + x, kBlockQ, c + x, kBlockQ, depth,
                                                       cscale ? cscale + x : nullptr);
    if constexpr (NV > 1)
      if (x < cols) BroadcastColumns<MR, NV / 2, kColumnsOfA, kAccumulate>(a, lda, bt, cols, c, depth, cscale, x);
  }

  // The kernel over `rows` rows of A (row r at a + r * lda, or at a + r with kColumnsOfA) and of
  // c (kBlockQ apart): MR x NV blocks, then the last rows. On the 16-register targets those
  // take 4 x 2, 2 x 4 and 1 x 8 blocks, at least 8 accumulators each where the columns allow
  // (one row of 2 accumulators is bound by the FMA latency: a 128-key tile's last 2 keys,
  // 128 = 21 x 6 + 2, took about 5 % of the score kernel's time that way); on AVX-512 4 x NV and 1 x NV.
  template <size_t MR, size_t NV, bool kColumnsOfA, bool kAccumulate>
  static HWY_INLINE void BroadcastRows(const float* a, std::ptrdiff_t lda, size_t rows, const float* bt, size_t cols,
                                       float* c, size_t depth, const float* cscale = nullptr) {
    const std::ptrdiff_t rs = kColumnsOfA ? 1 : lda;
    auto at = [&](size_t r) { return a + std::ptrdiff_t(r) * rs; };
    size_t r = 0;
    for (; r + MR <= rows; r += MR)
      BroadcastColumns<MR, NV, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
    if constexpr (MR == 6 && NV == 2) {
      if (r + 4 <= rows) {
        BroadcastColumns<4, 2, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
        r += 4;
      }
      if (r + 2 <= rows) {
        BroadcastColumns<2, 4, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
        r += 2;
      }
      if (r < rows)
        BroadcastColumns<1, 8, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
    } else {
      if constexpr (MR > kMR)
        for (; r + kMR <= rows; r += kMR)
          BroadcastColumns<kMR, NV, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
      for (; r < rows; ++r)
        BroadcastColumns<1, NV, kColumnsOfA, kAccumulate>(at(r), lda, bt, cols, c + r * kBlockQ, depth, cscale);
    }
  }

  // S^T [keys, cols] = K [keys, D] * Q^T [D, cols]; cols = rows rounded up to whole vectors.
  static HWY_INLINE void ScoreTile(const float* k, std::ptrdiff_t ldk, size_t keys, const float* qt, size_t cols,
                                   float* st, size_t depth) {
    BroadcastRows<kScoreMR, kScoreNV, false, false>(k, ldk, keys, qt, cols, st, depth);
  }

  // Row r's dot with key j from its lane sums acc[r]: the lanes added, then the tail of D past
  // the whole vectors by explicit fma (the compiler's contraction of a * b + c differs between
  // the float and the 16-bit instantiations, and a 16-bit K must give the float path's bits).
  template <size_t R, class Rd>
  static HWY_INLINE void FinishDots(VF (&acc)[R], const float* HWY_RESTRICT q, size_t ldq,
                                    const typename Rd::T* HWY_RESTRICT kr, float* HWY_RESTRICT s, size_t j,
                                    size_t whole, size_t depth) {
#ifdef JOMOIM_SUM4
    if constexpr (R == 2 || R == 4) {
      VF third = hn::Zero(DF()), fourth = hn::Zero(DF());  // two rows: the upper two sums are 0
      if constexpr (R == 4) {
        third = acc[2];
        fourth = acc[3];
      }
      alignas(16) float dots[4];
      hn::Store(Sum4(acc[0], acc[1], third, fourth), hn::Full128<float>(), dots);
      for (size_t r = 0; r < R; ++r) {
        float dot = dots[r];
        for (size_t d = whole; d < depth; ++d) dot = std::fma(q[r * ldq + d], Rd::At(kr + d), dot);
        s[r * kBlockK + j] = dot;
      }
      return;
    }
#endif
    for (size_t r = 0; r < R; ++r) {
      float dot = hn::GetLane(hn::SumOfLanes(DF(), acc[r]));
      for (size_t d = whole; d < depth; ++d) dot = std::fma(q[r * ldq + d], Rd::At(kr + d), dot);
      s[r * kBlockK + j] = dot;
    }
  }

  // The K row kPrefetchKeys after kr, every cache line of its depth values.
  template <class Rd>
  static HWY_INLINE void PrefetchKeyRow(const typename Rd::T* kr, std::ptrdiff_t ldk, size_t depth) {
    for (std::ptrdiff_t c = 0; c < std::ptrdiff_t(depth); c += kLineOf<Rd>)
      PrefetchStream(kr + kPrefetchKeysOf<typename Rd::T> * ldk + c);
  }

  // Few query rows (decode): s[r][j] = q[r] . k[j], one key row at a time (two for 2 or 4 rows),
  // vectorised over D.
  // Each key is read once for all R rows; for 1..8 rows this beats the broadcast kernel, whose
  // vectors over rows would be mostly empty. Needs K's D-stride to be 1. The scores stay in row
  // layout S [rows, kBlockK] (softmax along each row), not S^T.
  //   q [R, depth] (row stride ldq), k [keys, depth] (row stride ldk), s [R, kBlockK].
  //   Rd reads K's rows (F32Row, or Bf16Row / F16Row: 16-bit keys widened in registers).
  template <size_t R, class Rd = F32Row>
  static HWY_INLINE void ScoreRowsDirect(const float* HWY_RESTRICT q, size_t ldq, const typename Rd::T* HWY_RESTRICT k,
                                         std::ptrdiff_t ldk, size_t keys, float* HWY_RESTRICT s, size_t depth) {
    const DF df;
    const size_t L = hn::Lanes(df);
    const size_t whole = depth / L * L;
    size_t j = 0;
    if constexpr (R >= 2) {
      // Two keys at a time: each query vector serves both keys' FMAs, so a step needs R + 2
      // loads for 2R FMAs where the query vector stays in a register (GCC folds it into each
      // FMA instead unless told otherwise: see KeepInRegister below), 2R + 2 where it does not.
      // Each dot keeps the one-key loop's order (the same bits).
      for (; j + 2 <= keys; j += 2) {
        const typename Rd::T* k0 = k + std::ptrdiff_t(j) * ldk;
        const typename Rd::T* k1 = k0 + ldk;
        PrefetchKeyRow<Rd>(k0, ldk, depth);
        PrefetchKeyRow<Rd>(k1, ldk, depth);
        VF a0[R], a1[R];
        for (size_t r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
        for (size_t d = 0; d < whole; d += L) {
          const VF kv0 = Rd::Load(k0 + d), kv1 = Rd::Load(k1 + d);
          for (size_t r = 0; r < R; ++r) {
            VF qv = hn::LoadU(df, q + r * ldq + d);
            // Four rows on the 16-register targets: the query vector loaded once for both keys,
            // not folded into each FMA (6 loads per 8 FMAs instead of 10). AVX2 pinned, a Zen 5,
            // H32/Hkv8, 1,024 and 4,096 keys, five A/B runs: float32 0.90-0.98x the time, bf16
            // 0.85-1.00x, f16 0.82-0.91x (bench/NOTES.md, "Grouped decode on AVX2 ...").
            if constexpr (!kManyRegisters && R == 4) KeepInRegister(qv);
            a0[r] = hn::MulAdd(qv, kv0, a0[r]);
            a1[r] = hn::MulAdd(qv, kv1, a1[r]);
          }
        }
        FinishDots<R, Rd>(a0, q, ldq, k0, s, j, whole, depth);
        FinishDots<R, Rd>(a1, q, ldq, k1, s, j + 1, whole, depth);
      }
    }
    for (; j < keys; ++j) {
      const typename Rd::T* kr = k + std::ptrdiff_t(j) * ldk;
      PrefetchKeyRow<Rd>(kr, ldk, depth);
      VF acc[R];
      for (size_t r = 0; r < R; ++r) acc[r] = hn::Zero(df);
      size_t d0 = 0;
      if constexpr (R == 1) {
        // One row: four accumulators, not one chain of D / L dependent FMAs a key (16 on AVX2
        // at D = 128, where the 16-bit rows' widening made that chain the limit: bf16 and f16
        // decode on AVX2 8-9 % faster; the float and 16-bit paths keep one order, the same bits).
        VF a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
        for (; d0 + 4 * L <= whole; d0 += 4 * L) {
          acc[0] = hn::MulAdd(hn::LoadU(df, q + d0), Rd::Load(kr + d0), acc[0]);
          a1 = hn::MulAdd(hn::LoadU(df, q + d0 + L), Rd::Load(kr + d0 + L), a1);
          a2 = hn::MulAdd(hn::LoadU(df, q + d0 + 2 * L), Rd::Load(kr + d0 + 2 * L), a2);
          a3 = hn::MulAdd(hn::LoadU(df, q + d0 + 3 * L), Rd::Load(kr + d0 + 3 * L), a3);
        }
        acc[0] = hn::Add(hn::Add(acc[0], a1), hn::Add(a2, a3));
      }
      for (size_t d = d0; d < whole; d += L) {
        const VF kv = Rd::Load(kr + d);
        for (size_t r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + d), kv, acc[r]);
      }
      FinishDots<R, Rd>(acc, q, ldq, kr, s, j, whole, depth);
    }
  }

  // Blocks of at most this many rows take the direct path.
  static constexpr std::int64_t kDirectRows = 8;

  template <class Rd = F32Row>
  static HWY_INLINE void ScoreTileDirect(const float* qp, size_t rows, size_t depth, const typename Rd::T* k,
                                         std::ptrdiff_t ldk, size_t keys, float* s) {
    size_t r = 0;
    for (; r + 4 <= rows; r += 4) ScoreRowsDirect<4, Rd>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, depth);
    for (; r + 2 <= rows; r += 2) ScoreRowsDirect<2, Rd>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, depth);
    for (; r < rows; ++r) ScoreRowsDirect<1, Rd>(qp + r * depth, depth, k, ldk, keys, s + r * kBlockK, depth);
  }

  // o[r][x] += sum_j p[r][j] * v[j][x] for r < MR, j < keys, x < NV vectors.
  //   p: element (r, j) at p[r * pr + j * pj] (P^T or P, read by broadcasts), v [keys, *] (row
  //   stride ldv, unaligned, may be negative), o [MR, *] (row stride ldo, aligned).
  struct PLayout {
    size_t pr, pj;  // strides of P's rows and keys in the score buffer
  };
  //   With a non-null oscale, o's rows are first multiplied by oscale[r] (the online softmax's
  //   rescale, folded into the one load of o per tile, as for O^T).
  //   With kStream (the few rows of the direct path, which read each V row once), the first
  //   pf_elems values of the V row kPrefetchKeys ahead are prefetched. Rd reads V's rows
  //   (F32Row, or 16-bit rows widened in registers: Bf16Row, F16Row).
  template <size_t MR, size_t NV, bool kStream, class Rd = F32Row>
  static HWY_INLINE void ValueMicro(const float* HWY_RESTRICT pt, PLayout pl, const typename Rd::T* HWY_RESTRICT v,
                                    std::ptrdiff_t ldv, size_t keys, float* HWY_RESTRICT o, size_t ldo,
                                    const float* HWY_RESTRICT oscale, size_t pf_elems) {
    const DF df;
    const size_t L = hn::Lanes(df);
    VF acc[MR][NV];
    for (size_t r = 0; r < MR; ++r) {
      const VF f = hn::Set(df, oscale != nullptr ? oscale[r] : 1.0f);
      for (size_t x = 0; x < NV; ++x)
        acc[r][x] =
            oscale != nullptr ? hn::Mul(hn::Load(df, o + r * ldo + x * L), f) : hn::Load(df, o + r * ldo + x * L);
    }
    const typename Rd::T* HWY_RESTRICT vj = v;
    const float* HWY_RESTRICT pj = pt;
    for (size_t j = 0; j < keys; ++j, vj += ldv, pj += pl.pj) {
      if constexpr (kStream)
        for (std::ptrdiff_t c = 0; c < std::ptrdiff_t(pf_elems); c += kLineOf<Rd>)
          PrefetchStream(vj + kPrefetchKeysOf<typename Rd::T> * ldv + c);
      if constexpr (MR == 1) {
        // One row: each V vector widened next to its FMA. Widening all NV first kept 2 NV + 1
        // vectors live, and on AVX2's 16 registers GCC kept one accumulator on the stack, stored
        // and reloaded every key (bf16 one-row decode pinned to AVX2 on a Zen 5: 0.84-0.95x the
        // time from L3, 0.88-0.93x from memory). The same FMAs in the same order.
        const VF pb = hn::Set(df, pj[0]);
        for (size_t x = 0; x < NV; ++x) acc[0][x] = hn::MulAdd(pb, Rd::Load(vj + x * L), acc[0][x]);
      } else {
        // Several rows share each widened V vector.
        VF vv[NV];
        for (size_t x = 0; x < NV; ++x) vv[x] = Rd::Load(vj + x * L);
        for (size_t r = 0; r < MR; ++r) {
          const VF pb = hn::Set(df, pj[r * pl.pr]);
          for (size_t x = 0; x < NV; ++x) acc[r][x] = hn::MulAdd(pb, vv[x], acc[r][x]);
        }
      }
    }
    for (size_t r = 0; r < MR; ++r)
      for (size_t x = 0; x < NV; ++x) hn::Store(acc[r][x], df, o + r * ldo + x * L);
  }

  // The kernel above over the columns [x, dvp) of V and o: NV vectors at a time, then NV / 2, ...
  template <size_t MR, size_t NV, bool kStream, class Rd = F32Row>
  static HWY_INLINE void ValueColumns(const float* pt, PLayout pl, const typename Rd::T* v, std::ptrdiff_t ldv,
                                      size_t keys, float* o, size_t dvp, const float* oscale, size_t x = 0) {
    const size_t L = hn::Lanes(DF());
    for (; x + NV * L <= dvp; x += NV * L) {
      // What of each V row to prefetch: the first slice the whole row (7167754), except float32
      // rows on AVX-512, where each slice its own part. 16-bit rows on AVX-512 took their parts
      // too until four rows' two slices (a 256-byte bf16 row at Dv = 128, two lines each) measured
      // 0.79-0.87x the time with the whole row prefetched first (grouped decode from memory, Zen 5;
      // float32 rows: no difference, BENCHMARKS.md "Grouped 16-bit decode from memory").
      const size_t prefetch = kManyRegisters && std::is_same_v<Rd, F32Row> ? NV * L : x == 0 ? dvp : 0;
      ValueMicro<MR, NV, kStream, Rd>(pt, pl, v + x, ldv, keys, o + x, dvp, oscale, prefetch);
    }
    if constexpr (NV > 1)
      if (x < dvp) ValueColumns<MR, NV / 2, kStream, Rd>(pt, pl, v, ldv, keys, o, dvp, oscale, x);
  }

  // AccT [dv, cols] = AccT * alpha (per column) + V^T [dv, keys] * P^T [keys, cols], the score
  // kernel's shape: P^T by aligned vector loads, V by broadcasts. The rescale by alpha rides on
  // the single load of each AccT element per tile (a separate sweep over the 128 KiB AccT, in
  // L2, took about 3 % of the time at D = 128). Blocked kValueMR x kValueNV, the last rows of AccT as
  // BroadcastRows says.
  static HWY_INLINE void ValueTileT(const float* pt, size_t cols, const float* v, std::ptrdiff_t ldv, size_t keys,
                                    float* acct, size_t dv, const float* alpha) {
    BroadcastRows<kValueMR, kValueNV, true, true>(v, ldv, dv, pt, cols, acct, keys, alpha);
  }

  // Wide blocks (256 rows) accumulate O^T, rows along the lanes: P^T is then read by aligned
  // vector loads and V by broadcasts, each V element once per 64 rows, the score kernel's
  // shape. Measured +3-5 % at (1,8,4096,128) and (1,8,2048,128) with 256 x 32 tiles (and so
  // 64 keys per tile became worthwhile); 2-10 % slower for 64-row blocks at D = 64, where the
  // row layout stays (bench/NOTES.md section 9).
  static constexpr bool kValuesTransposed = kBlockQ >= 256;

  // Acc [rows, dvp] = Acc * alpha (per row) + P [rows, keys] * V [keys, dvp], P laid out as pl
  // says. The rescale rides on the one load of Acc per tile (a separate pass over Acc cost about
  // 1 % at D = 64).
  //   Rd reads V's rows; 16-bit rows (Bf16Row, F16Row) only for the direct path's few rows.
  template <class Rd = F32Row>
  static HWY_INLINE void ValueTile(const float* pt, PLayout pl, size_t rows, const typename Rd::T* v,
                                   std::ptrdiff_t ldv, size_t keys, float* acc, size_t dvp, const float* alpha) {
    size_t r = 0;
    auto block = [&](auto mr, auto nv) {
      constexpr size_t MR = decltype(mr)::value, NV = decltype(nv)::value;
      if (rows <= std::size_t(kDirectRows)) {
        ValueColumns<MR, NV, true, Rd>(pt + r * pl.pr, pl, v, ldv, keys, acc + r * dvp, dvp, alpha + r);
      } else if constexpr (std::is_same_v<Rd, F32Row>) {
        ValueColumns<MR, NV, false>(pt + r * pl.pr, pl, v, ldv, keys, acc + r * dvp, dvp, alpha + r);
      }
      r += MR;
    };
    while (r + kRowMR <= rows) block(Size<kRowMR>(), Size<kRowNV>());
    // The last rows as BroadcastRows takes them; one row (decode) has registers for twice the
    // columns, so each V row is read in one pass instead of kRowNV-vector slices (at Dv = 128 on
    // AVX-512, one pass instead of two).
    if constexpr (kRowMR == 6 && kRowNV == 2) {
      // Four rows of the direct path (grouped-query decode: a K/V head's four query heads) in
      // slices of three vectors: twelve independent FMA chains a key instead of eight (AVX2
      // pinned, a Zen 5, H32/Hkv8, 4096 keys: float32, bf16 and f16 0.91-0.94x the time from
      // L3; from memory float32 0.96x, f16 0.91x, bf16 level; bench/NOTES.md, "Grouped decode
      // on AVX2 with twelve accumulators").
      if (r + 4 <= rows) {
        if (rows <= std::size_t(kDirectRows))
          block(Size<4>(), Size<3>());
        else
          block(Size<4>(), Size<2>());
      }
      if (r + 2 <= rows) block(Size<2>(), Size<4>());
      if (r < rows) block(Size<1>(), Size<8>());
    } else {
      if constexpr (kRowMR > kMR)
        while (r + kMR <= rows) block(Size<kMR>(), Size<kRowNV>());
      while (r < rows) block(Size<1>(), Size<2 * kRowNV>());
    }
  }

  static HWY_INLINE float MaxOf(const float* x, size_t n) {
    const DF df;
    const size_t L = hn::Lanes(df);
    VF m = hn::Set(df, kNegInf);
    for (size_t c = 0; c < n; c += L) m = hn::Max(m, hn::Load(df, x + c));
    return hn::GetLane(hn::MaxOfLanes(df, m));
  }

  // x[c] = 2^(x[c] - shift) (2^-inf = 0; shift >= every x[c]); returns the sum. n is a multiple
  // of the lanes.
  static HWY_INLINE float ExpShiftedSum(float* x, size_t n, float shift) {
    const DF df;
    const size_t L = hn::Lanes(df);
    const VF vs = hn::Set(df, shift);
    VF sum = hn::Zero(df);
    for (size_t c = 0; c < n; c += L) {
      const VF e = Exp2NonPositive(df, hn::Sub(hn::Load(df, x + c), vs));
      hn::Store(e, df, x + c);
      sum = hn::Add(sum, e);
    }
    return hn::GetLane(hn::SumOfLanes(df, sum));
  }

  static HWY_INLINE void ScaleRow(float* x, size_t n, float factor) {
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
    std::int64_t max_visible = 0, min_visible = 0;
  };

  // Work item index -> rows. The blocks of one (batch, kv head) are consecutive items: the
  // threads then read the same K and V, which stay in cache, instead of each streaming another
  // head's, and a thread's bf16 V pairs (ValueTileBf16) serve its next blocks of the head.
  // Under causality a head's blocks come heaviest first (the last query positions see the
  // most keys), so dynamic scheduling ends each head, and the call, with its cheapest blocks.
  static inline void RowsOfItem(const Problem& p, const Plan& plan, std::int64_t item, Rows& rows) {
    const AttentionShape& s = p.s;
    const std::int64_t bg = item / plan.blocks_per_group;
    const std::int64_t rank = item % plan.blocks_per_group;
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
    rows.min_visible = rows.n > 0 ? rows.visible[0] : 0;
    for (std::int64_t r = 0; r < rows.n; ++r) {
      rows.max_visible = std::max(rows.max_visible, rows.visible[r]);
      rows.min_visible = std::min(rows.min_visible, rows.visible[r]);
    }
  }

  static inline size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

  // Scratch of one thread, in floats; every region starts 64-byte aligned.
  struct Buffers {
    float* qt;     // Q^T [D, kBlockQ], scaled queries, zero past the block's rows
    float* qp;     // Q [kBlockQ, D], scaled queries (direct path)
    float* kp;     // K [kBlockK, D], packed only when K's D-stride is not 1
    float* vp;     // V [kBlockK, dvp], packed only when V rows are not whole contiguous vectors
    float* st;     // S^T then P^T [kBlockK, kBlockQ]; S then P [kBlockQ, kBlockK] when direct
    float* acc;    // unnormalised output [kBlockQ, dvp]
    float* acct;   // the same transposed, O^T [Dv, kBlockQ], for wide blocks (not direct)
    float* m;      // running row maximum [kBlockQ]
    float* l;      // running row sum of 2^(score - m) [kBlockQ] (scores in base 2)
    float* alpha;  // per-tile rescale factors [kBlockQ]
    float* ends;   // TileScores' per-row ends of the visible keys in the tile [kBlockQ]
    float* tmax;   // the tile's maximum score of each row, from the score kernel [kBlockQ]
    size_t dvp;    // Dv rounded up to whole vectors
    size_t cols;   // the block's rows rounded up to whole vectors
    bool direct;   // few rows: score against K rows in place, vectorised over D
    // bf16 inputs on AVX3 with AVX512_BF16 (bf16_dot.hpp): qt holds Q as bf16 pairs, not
    // pre-scaled ((D + 1) / 2 rows of kBlockQ 32-bit lanes), and K tiles are read in place.
    bool bf16dot;
    // The direct path's bf16 inputs on AVX3 with AVX512_BF16, blocks of 2 rows or more (one row
    // widens K in registers, as on AVX3 without it): qt holds the block's query rows as
    // bf16 bits (unscaled, rows of ldq16 zero-padded), scored by VDPBF16PS against K in place
    // (score_rows_bf16). P·V stays float32 (V widened in registers) unless bf16pvdirect.
    bool bf16direct;
    // The direct path's bf16 values with options.bf16_weights on AVX3 with AVX512_BF16, blocks of
    // 2-8 rows: P·V by VDPBF16PS on V's rows in place, the weights rounded and paired in
    // registers (value_rows_direct_bf16), in the tiles the direct path reads V in place. Decode
    // 1 x 32 x 4096 x 128 on Zen 5: 8 K/V heads (4 rows) the same as float32 P·V (both at the
    // memory's speed), 16 K/V heads (2 rows) 1.15x, 4 K/V heads (8 rows) 1.19x; one row is
    // 5 % slower (pairing V costs more than it saves) and keeps float32 P·V.
    bool bf16pvdirect;
    // bf16 values with bf16dot and options.bf16_weights: P·V by VDPBF16PS too (bf16_dot.hpp),
    // P rounded to bf16 and paired along the keys in pp [kBlockK / 2, kBlockQ], V paired in vw
    // (below), for the tiles whose masked keys (if any) hold finite values.
    bool bf16pv;
    std::uint32_t* pp;
    // bf16pv: V's pairs of the last tiles this thread packed, vw_slots tiles of vw_tile u32 each
    // (about 256 KiB in all), tile t0 / kBlockK in slot (t0 / kBlockK) % vw_slots: every block of
    // a head that the thread runs reuses them (1 x 12 x 1024 x 64: 16 blocks a head).
    std::uint32_t* vw;
    size_t vw_tile, vw_slots;
    size_t ldq16;
    // Strides of row r and key j in st.
    PLayout layout() const { return direct ? PLayout{size_t(kBlockK), 1} : PLayout{1, size_t(kBlockQ)}; }
    // Whether the output accumulates as O^T in acct (wide blocks, not direct) rather than in acc.
    bool values_transposed() const { return !direct && kValuesTransposed; }
  };

  static inline Buffers ThreadBuffers(const Problem& p, std::int64_t rows) {
    const AttentionShape& s = p.s;
    const size_t L = hn::Lanes(DF());
    const size_t a = 16;  // 64 bytes
    Buffers b;
    b.dvp = RoundUp(size_t(s.Dv), L);
    b.cols = RoundUp(size_t(rows), L);
    b.direct = rows <= kDirectRows && (p.half() || p.k.strides[3] == 1);  // 16-bit K: widened rows
    const bool bf16_keys = kBf16DotTarget && p.dtype == Dtype::bf16 && p.k.strides[3] == 1 && bf16_dot_enabled();
    // Blocks of many rows on a CPU with AMX-BF16 widen K instead, when the tiles did not take the
    // call (a bias, probabilities): on the Intel Xeon with AMX here VDPBF16PS's tile kernel ran
    // bf16 prefill at 0.75-0.82x float32, the widening one at 0.95-1.02x (bench/NOTES.md, "AMX").
    b.bf16dot = bf16_keys && !b.direct && !amx_enabled();
    // One row (decode with a K/V head per query head) widens K in registers instead: on Zen 4
    // VDPBF16PS's 16-key kernel read K at 2/3 of the widening kernel's speed there (3.1-3.3
    // against 1.9-2.2 ms at 1 x 32 x 4096 x 128), on Zen 5 the two were level (bench/NOTES.md).
    b.bf16direct = bf16_keys && b.direct && rows >= 2;
    b.bf16pv = b.bf16dot && p.bf16_weights && p.v.strides[3] == 1;
    b.bf16pvdirect = kBf16DotTarget && b.direct && rows >= 2 && p.bf16_weights && bf16_dot_enabled();
    b.ldq16 = RoundUp(size_t(s.D), 32);
    // qt also holds a direct block's bf16 rows (bf16direct): kDirectRows rows of ldq16 halves,
    // more than D * kBlockQ floats only for D < 8 in 32-row blocks.
    const size_t nq = RoundUp(std::max(size_t(s.D) * kBlockQ, size_t(kDirectRows) * b.ldq16 / 2), a),
                 nk = RoundUp(kBlockK * size_t(s.D), a), nv = RoundUp(kBlockK * b.dvp, a), ns = kBlockK * kBlockQ,
                 nacc = RoundUp(kBlockQ * b.dvp, a), nm = kBlockQ;
    const size_t nacct = kValuesTransposed ? RoundUp(size_t(s.Dv) * kBlockQ, a) : 0;
    const size_t npp = b.bf16pv ? RoundUp(kBlockK / 2 * kBlockQ, a) : 0;
    static_assert(kBlockK % 2 == 0);
    b.vw_tile = size_t(kBlockK) / 2 * RoundUp(size_t(s.Dv), 32);
    b.vw_slots = b.bf16pv ? std::clamp<size_t>(kVwCacheBytes / 4 / b.vw_tile, 1, kVwMaxSlots) : 0;
    float* base = Scratch::for_this_thread().reserve(2 * nq + nk + nv + ns + nacc + nacct + 5 * nm + npp +
                                                     b.vw_slots * b.vw_tile);
    b.qt = base;
    b.qp = b.qt + nq;
    b.kp = b.qp + nq;
    b.vp = b.kp + nk;
    b.st = b.vp + nv;
    b.acc = b.st + ns;
    b.acct = b.acc + nacc;
    b.m = b.acct + nacct;
    b.l = b.m + nm;
    b.alpha = b.l + nm;
    b.ends = b.alpha + nm;
    b.tmax = b.ends + nm;
    b.pp = reinterpret_cast<std::uint32_t*>(b.tmax + nm);
    b.vw = b.pp + npp;
    return b;
  }

  // Every line of a contiguous row of `bytes` bytes, into L1: PackQueries reads the next group of
  // query rows while it transposes this one (its loads waited on L3 or memory: half of its own
  // samples, bf16 prefill on Zen 5).
  static inline void PrefetchRow(const void* row, size_t bytes) {
    const char* c = static_cast<const char*>(row);
    for (size_t b = 0; b < bytes; b += 64) PrefetchNear(c + b);
  }

  // Packs the block's query rows, pre-multiplied by the scale, as Q^T (or as Q rows for the
  // direct path): qt[d][r] = scale * q[b, h_r, i_r, d].
  //   16-bit queries are first widened into qp (rows of D floats; free unless direct) and packed
  //   from there like contiguous float32 rows.
  static inline void PackQueries(const Problem& p, const Rows& rows, const Buffers& buf) {
    const std::int64_t D = p.s.D;
    const bool half = p.half();
    const std::int64_t sd = half ? 1 : p.q.strides[3];
    const float scale2 = p.s.scale * kLog2e;  // scores in base-2 units
    // Row r's first element in 16-bit storage (element stride p.q.strides[3]).
    auto row16 = [&](std::int64_t r) {
      return p.q16.data + rows.b * p.q.strides[0] + rows.head[r] * p.q.strides[1] + rows.pos[r] * p.q.strides[2];
    };
    auto row = [&](std::int64_t r) {
      if (half) return static_cast<const float*>(buf.qp + r * D);
      return p.q.data + rows.b * p.q.strides[0] + rows.head[r] * p.q.strides[1] + rows.pos[r] * p.q.strides[2];
    };
    if (buf.bf16dot) {  // pairs of bf16 bits: lane r of row d / 2 holds q[r][d] | q[r][d + 1] << 16
      auto* qp = reinterpret_cast<std::uint32_t*>(buf.qt);
      const std::int64_t pairs = (D + 1) / 2, sq = p.q.strides[3];
      std::int64_t r0 = 0;
      if (sq == 1 && D % 2 == 0) {
        // Contiguous rows of even D are pairs already: lanes x lanes squares of 32-bit pairs
        // transposed in registers (as float lanes: only moved, never computed on), like the
        // float32 queries below. The scalar loop took 5 % of causal bf16 prefill at D = 64.
        const DF df;
        constexpr std::int64_t L = std::int64_t(kLanes);
        auto* qf = reinterpret_cast<float*>(qp);
        for (; r0 + L <= rows.n; r0 += L) {
          const float* src[kLanes];
          for (std::int64_t i = 0; i < L; ++i) src[i] = reinterpret_cast<const float*>(row16(r0 + i));
          for (std::int64_t i = r0 + L; i < std::min(rows.n, r0 + 2 * L); ++i)  // the next group's rows
            PrefetchRow(row16(i), size_t(D) * sizeof(std::uint16_t));
          std::int64_t d0 = 0;
          for (; d0 + L <= pairs; d0 += L) {
            VF v[kLanes];
            for (std::int64_t i = 0; i < L; ++i) v[i] = hn::LoadU(df, src[i] + d0);
            TransposeSquare(v);
            for (std::int64_t i = 0; i < L; ++i) hn::Store(v[i], df, qf + (d0 + i) * kBlockQ + r0);
          }
          for (; d0 < pairs; ++d0)
            for (std::int64_t i = 0; i < L; ++i) std::memcpy(qp + d0 * kBlockQ + r0 + i, src[i] + d0, 4);
        }
      }
      for (std::int64_t r = r0; r < rows.n; ++r) {
        const std::uint16_t* qr = row16(r);
        for (std::int64_t d2 = 0; d2 < pairs; ++d2) {
          const std::uint32_t lo = qr[2 * d2 * sq], hi = 2 * d2 + 1 < D ? qr[(2 * d2 + 1) * sq] : 0u;
          qp[d2 * kBlockQ + r] = lo | hi << 16;
        }
      }
      for (std::int64_t d2 = 0; d2 < pairs; ++d2)
        std::fill(qp + d2 * kBlockQ + rows.n, qp + d2 * kBlockQ + buf.cols, 0u);
      return;
    }
    if (buf.bf16direct) {  // rows of bf16 bits as they are, zero-padded to ldq16
      auto* q16 = reinterpret_cast<std::uint16_t*>(buf.qt);
      const std::int64_t sq = p.q.strides[3];
      for (std::int64_t r = 0; r < rows.n; ++r) {
        const std::uint16_t* qr = row16(r);
        std::uint16_t* dst = q16 + r * std::int64_t(buf.ldq16);
        for (std::int64_t d = 0; d < D; ++d) dst[d] = qr[d * sq];
        std::fill(dst + D, dst + buf.ldq16, std::uint16_t(0));
      }
      return;
    }
    if (half) {
      for (std::int64_t r = 0; r < rows.n; ++r) WidenRow(row16(r), p.q.strides[3], size_t(D), buf.qp + r * D, p.dtype);
      if (buf.direct) {
        for (std::int64_t x = 0; x < rows.n * D; ++x) buf.qp[x] *= scale2;
        return;
      }
    }
    if (buf.direct) {
      for (std::int64_t r = 0; r < rows.n; ++r) {
        const float* qr = row(r);
        for (std::int64_t d = 0; d < D; ++d) buf.qp[r * D + d] = scale2 * qr[d * sd];
      }
      return;
    }
    std::int64_t r0 = 0;
    if (sd == 1) {
      // Contiguous rows: lanes x lanes squares, each query row read as whole vectors (so a
      // group of rows streams from memory in order) and transposed in registers. The scalar
      // scatter this replaces, with the scalar O^T transpose and output pass, took 2-4 % of the
      // time at (1,32,4096,128) on two threads (bench/NOTES.md section 11).
      const DF df;
      const VF scale_v = hn::Set(df, scale2);
      constexpr std::int64_t L = std::int64_t(kLanes);
      for (; r0 + L <= rows.n; r0 += L) {
        const float* src[kLanes];
        for (std::int64_t i = 0; i < L; ++i) src[i] = row(r0 + i);
        for (std::int64_t i = r0 + L; i < std::min(rows.n, r0 + 2 * L); ++i)  // the next group's rows
          PrefetchRow(row(i), size_t(D) * sizeof(float));
        std::int64_t d0 = 0;
        for (; d0 + L <= D; d0 += L) {
          VF v[kLanes];
          for (std::int64_t i = 0; i < L; ++i) v[i] = hn::LoadU(df, src[i] + d0);
          TransposeSquare(v);
          for (std::int64_t i = 0; i < L; ++i) hn::Store(hn::Mul(v[i], scale_v), df, buf.qt + (d0 + i) * kBlockQ + r0);
        }
        for (; d0 < D; ++d0)
          for (std::int64_t i = 0; i < L; ++i) buf.qt[d0 * kBlockQ + r0 + i] = scale2 * src[i][d0];
      }
    }
    // The remaining rows (all of them for strided queries), 16 of Q^T's rows at a time for wide
    // blocks: those stay in L1 while every query row is scattered into them (they are 1 KiB
    // apart, so a whole column of them would share a quarter of L1's sets).
    const std::int64_t strip = kBlockQ >= 256 ? 16 : D;
    for (std::int64_t d0 = 0; d0 < D; d0 += strip) {
      const std::int64_t d1 = std::min(D, d0 + strip);
      for (std::int64_t r = r0; r < rows.n; ++r) {
        const float* qr = row(r);
        for (std::int64_t d = d0; d < d1; ++d) buf.qt[d * kBlockQ + r] = scale2 * qr[d * sd];
      }
    }
    for (std::int64_t d = 0; d < D; ++d)
      std::fill(buf.qt + d * kBlockQ + rows.n, buf.qt + d * kBlockQ + buf.cols, 0.0f);
  }

  // Whether row r sees key `key` (absolute index): not cut by causality or key lengths, and no
  // -inf bias. Used off the hot path only (tiles with masked entries and non-finite values).
  static inline bool Sees(const Problem& p, const Rows& rows, std::int64_t r, std::int64_t key) {
    if (key >= rows.visible[r]) return false;
    return !p.has_bias || p.bias(rows.b, rows.head[r], rows.pos[r], key) != kNegInf;
  }

  // Scores of the keys [t0, t0 + tl) for every row, as S^T, in base-2 units:
  // st[j][r] = log2(e) (scale q_r . k_j + bias),
  // and -inf where the key is masked for the row, whatever K holds there (a -inf bias is a
  // select, not an add: -inf + NaN would be NaN). Queries must already be packed. Returns the
  // first key (in the tile) that some row does not see, tl when every row sees the whole tile.
  // With tile_max, sets *tile_max to each row's maximum score over the tile (buf.tmax, cols
  // floats) where the score kernel left it and nothing was masked or added after, else nullptr.
  static inline std::int64_t TileScores(const Problem& p, const Rows& rows, std::int64_t t0, std::int64_t tl,
                                        const Buffers& buf, const float** tile_max = nullptr) {
    if (tile_max != nullptr) *tile_max = nullptr;
    // The tiles that stay as scored: every row sees all of it, and no bias.
    const bool whole = !buf.direct && !p.has_bias && t0 + tl <= rows.min_visible;
    const AttentionShape& s = p.s;
    const std::int64_t D = s.D;
    const std::int64_t koff = rows.b * p.k.strides[0] + rows.g * p.k.strides[1] + t0 * p.k.strides[2];
    const float* kbase = p.half() ? nullptr : p.k.data + koff;
    std::int64_t ksn = p.k.strides[2], ksd = p.k.strides[3];
    bool scored = false;
    if (buf.bf16direct) {  // VDPBF16PS on K's bf16 rows in place; the scale applied to the sums
      score_rows_bf16(reinterpret_cast<const std::uint16_t*>(buf.qt), buf.ldq16, size_t(rows.n), p.k16.data + koff, ksn,
                      size_t(tl), buf.st, kBlockK, size_t(D), s.scale * kLog2e, kPrefetchKeysOf<std::uint16_t>);
      scored = true;
    } else if (p.half() && !buf.bf16dot && buf.direct && ksd == 1) {
      // Few rows (decode), contiguous 16-bit keys: read in place, widened in registers.
      if (p.dtype == Dtype::bf16) {
        ScoreTileDirect<Bf16Row>(buf.qp, size_t(rows.n), size_t(D), p.k16.data + koff, ksn, size_t(tl), buf.st);
      } else {
        ScoreTileDirect<F16Row>(buf.qp, size_t(rows.n), size_t(D), p.k16.data + koff, ksn, size_t(tl), buf.st);
      }
      scored = true;
    } else if (p.half() && !buf.bf16dot) {  // 16-bit K: the tile widened into kp, then read as float32 rows
      for (std::int64_t j = 0; j < tl; ++j) {
        // Streamed from memory once, like the float32 decode path's rows: prefetched ahead.
        Prefetch16(p.k16.data + koff + (j + kPrefetchKeys) * ksn, ksd, D);
        WidenRow(p.k16.data + koff + j * ksn, ksd, size_t(D), buf.kp + j * D, p.dtype);
      }
      kbase = buf.kp;
      ksn = D;
      ksd = 1;
    }
    if (scored) {
    } else if (buf.bf16dot) {  // VDPBF16PS on K's bf16 rows in place; the scale applied to the sums
      const bool with_max = whole && tile_max != nullptr;
      score_tile_bf16(p.k16.data + koff, ksn, size_t(tl), reinterpret_cast<const std::uint32_t*>(buf.qt), kBlockQ,
                      buf.cols, buf.st, kBlockQ, size_t(D), s.scale * kLog2e, with_max ? buf.tmax : nullptr);
      if (with_max) *tile_max = buf.tmax;
    } else if (buf.direct) {
      ScoreTileDirect(buf.qp, size_t(rows.n), size_t(D), kbase, ksn, size_t(tl), buf.st);
    } else if (ksd == 1) {
      ScoreTile(kbase, ksn, size_t(tl), buf.qt, buf.cols, buf.st, size_t(D));
    } else {
      for (std::int64_t j = 0; j < tl; ++j)
        for (std::int64_t d = 0; d < D; ++d) buf.kp[j * D + d] = kbase[j * ksn + d * ksd];
      ScoreTile(buf.kp, D, size_t(tl), buf.qt, buf.cols, buf.st, size_t(D));
    }
    // Bias and masks; in row layout also the padding past tl, so rows are whole vectors. Nothing
    // to do in S^T layout for a tile that every row sees whole, without a bias (otherwise a walk
    // over the block's rows for every tile: 16 K row visits per wide block at N = 4096).
    if (whole) return tl;
    const PLayout pl = buf.layout();
    const std::int64_t stop = buf.direct ? kBlockK : tl;
    std::int64_t first_masked = std::clamp<std::int64_t>(rows.min_visible - t0, 0, tl);
    if (!buf.direct && !p.has_bias) {
      // S^T without a bias (a causal block's last tile, a key length): the keys past each row's
      // end masked a vector of rows at a time (one scalar store per entry took about 5 % of
      // causal bf16 prefill). The rows' ends as floats (exact below 2^24) in ends; padding rows
      // keep their scores.
      const DF df;
      for (size_t x = 0; x < buf.cols; ++x)
        buf.ends[x] = float(std::int64_t(x) < rows.n ? std::clamp<std::int64_t>(rows.visible[x] - t0, 0, tl) : tl);
      const VF neg_inf = hn::Set(df, kNegInf);
      for (std::int64_t j = first_masked; j < tl; ++j) {
        const VF jv = hn::Set(df, float(j));
        float* sj = buf.st + j * kBlockQ;
        for (size_t x = 0; x < buf.cols; x += hn::Lanes(df))
          hn::Store(hn::IfThenElse(hn::Ge(jv, hn::Load(df, buf.ends + x)), neg_inf, hn::Load(df, sj + x)), df, sj + x);
      }
      return first_masked;
    }
    for (std::int64_t r = 0; r < rows.n; ++r) {
      float* sr = buf.st + r * pl.pr;
      const std::int64_t end = std::clamp<std::int64_t>(rows.visible[r] - t0, 0, tl);
      if (p.has_bias) {
        const float* brow = p.bias.data + rows.b * p.bias.strides[0] + rows.head[r] * p.bias.strides[1] +
                            rows.pos[r] * p.bias.strides[2] + t0 * p.bias.strides[3];
        const std::int64_t bs = p.bias.strides[3];
        for (std::int64_t j = 0; j < end; ++j) {
          const float bias = brow[j * bs];
          if (bias == kNegInf) {
            sr[j * pl.pj] = kNegInf;
            first_masked = std::min(first_masked, j);
          } else {
            sr[j * pl.pj] += kLog2e * bias;
          }
        }
      }
      for (std::int64_t j = end; j < stop; ++j) sr[j * pl.pj] = kNegInf;
    }
    return first_masked;
  }

  // Online softmax step over one tile of S^T [tl, cols], vectorised across rows:
  //   m' = max(m, max_j s_j),  p_j = 2^(s_j - m'),  l' = l 2^(m - m') + sum_j p_j,
  // leaving P^T in st and the factors 2^(m - m') in alpha. Rows that have seen no unmasked key
  // keep m = -inf and get p = 0, alpha = 1 (no -inf - -inf). tile_max (nullable): each row's
  // max_j s_j, known already (TileScores). pairs (nullable): P^T written there instead, rounded
  // to bf16 and paired along the keys for P·V by VDPBF16PS (pp of Buffers: row j / 2 holds keys
  // j and j + 1, a zero high half past an odd tl); l sums the unrounded p.
  static inline void SoftmaxStep(const Buffers& buf, std::int64_t tl, const float* tile_max, std::uint32_t* pairs) {
    if (pairs != nullptr) {
      SoftmaxStep<true>(buf, tl, tile_max, pairs);
    } else {
      SoftmaxStep<false>(buf, tl, tile_max, nullptr);
    }
  }
  template <bool kPairs>
  static inline void SoftmaxStep(const Buffers& buf, std::int64_t tl, const float* tile_max,
                                 std::uint32_t* HWY_RESTRICT pairs) {
    float* HWY_RESTRICT st = buf.st;
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const size_t L = hn::Lanes(df);
    const VF neg_inf = hn::Set(df, kNegInf);
    for (size_t x = 0; x < buf.cols; x += L) {
      const VF m_old = hn::Load(df, buf.m + x);
      VF m_new;
      if (tile_max != nullptr) {
        m_new = hn::Max(m_old, hn::Load(df, tile_max + x));
      } else {
        // Two independent chains each for the maximum and the sum (half the latency-bound length).
        VF m_a = m_old, m_b = m_old;
        std::int64_t j = 0;
        for (; j + 2 <= tl; j += 2) {
          m_a = hn::Max(m_a, hn::Load(df, st + j * kBlockQ + x));
          m_b = hn::Max(m_b, hn::Load(df, st + (j + 1) * kBlockQ + x));
        }
        if (j < tl) m_a = hn::Max(m_a, hn::Load(df, st + j * kBlockQ + x));
        m_new = hn::Max(m_a, m_b);
      }
      const auto seen = hn::Ne(m_new, neg_inf);
      const VF shift = hn::IfThenElseZero(seen, m_new);
      VF sum_a = hn::Zero(df), sum_b = hn::Zero(df);
      std::int64_t j = 0;
      for (; j + 2 <= tl; j += 2) {
        float* s0 = st + j * kBlockQ + x;
        float* s1 = s0 + kBlockQ;
        const VF e0 = Exp2NonPositive(df, hn::Sub(hn::Load(df, s0), shift));
        const VF e1 = Exp2NonPositive(df, hn::Sub(hn::Load(df, s1), shift));
        if constexpr (kPairs) {
          hn::Store(PairBf16(e0, e1), du, pairs + (j / 2) * kBlockQ + x);
        } else {
          hn::Store(e0, df, s0);
          hn::Store(e1, df, s1);
        }
        sum_a = hn::Add(sum_a, e0);
        sum_b = hn::Add(sum_b, e1);
      }
      if (j < tl) {
        float* s0 = st + j * kBlockQ + x;
        const VF e0 = Exp2NonPositive(df, hn::Sub(hn::Load(df, s0), shift));
        if constexpr (kPairs) {
          hn::Store(PairBf16(e0, hn::Zero(df)), du, pairs + (j / 2) * kBlockQ + x);
        } else {
          hn::Store(e0, df, s0);
        }
        sum_a = hn::Add(sum_a, e0);
      }
      const VF sum = hn::Add(sum_a, sum_b);
      const VF alpha = hn::IfThenElse(seen, Exp2NonPositive(df, hn::Sub(m_old, shift)), hn::Set(df, 1.0f));
      hn::Store(hn::MulAdd(hn::Load(df, buf.l + x), alpha, sum), df, buf.l + x);
      hn::Store(m_new, df, buf.m + x);
      hn::Store(alpha, df, buf.alpha + x);
    }
  }

  // The same step in row layout (direct path), one row at a time over the whole padded tile.
  static inline void SoftmaxStepRows(const Buffers& buf, std::int64_t n) {
    for (std::int64_t r = 0; r < n; ++r) {
      float* sr = buf.st + r * kBlockK;
      const float m_new = std::max(buf.m[r], MaxOf(sr, kBlockK));
      if (m_new == kNegInf) {  // nothing visible yet: p = 0 (NaN for a NaN score), alpha = 1
        buf.l[r] += ExpShiftedSum(sr, kBlockK, 0.0f);
        buf.alpha[r] = 1.0f;
        continue;
      }
      const float sum = ExpShiftedSum(sr, kBlockK, m_new);
      buf.alpha[r] = std::exp2(buf.m[r] - m_new);  // 2^-inf = 0 on the first visible tile
      buf.l[r] = buf.l[r] * buf.alpha[r] + sum;
      buf.m[r] = m_new;
    }
  }

  // Online softmax over the keys [k0, k1) for every row of the block: leaves the running
  // maximum m, the sum l of 2^(score - m) and the unnormalised output acc in buf.
  static inline void AttendKeys(const Problem& p, const Rows& rows, std::int64_t k0, std::int64_t k1,
                                const Buffers& buf) {
    const AttentionShape& s = p.s;
    std::fill(buf.m, buf.m + kBlockQ, kNegInf);
    std::fill(buf.l, buf.l + kBlockQ, 0.0f);
    // O [rows, dvp] accumulates in acc, or, for wide blocks, O^T [Dv, cols] in acct with the rows
    // along the lanes like S^T (left there: RunUnit writes it out).
    const bool value_t = buf.values_transposed();
    if (!value_t) {
      std::fill(buf.acc, buf.acc + rows.n * buf.dvp, 0.0f);
    } else {
      std::fill(buf.acct, buf.acct + s.Dv * kBlockQ, 0.0f);
    }
    // V rows are read in place when they are contiguous (whole vectors for the direct path);
    // otherwise packed.
    const bool direct_v = !p.half() && p.v.strides[3] == 1 && (value_t || size_t(s.Dv) == buf.dvp);
    // 16-bit V read in place by the direct path (few rows, contiguous rows of whole vectors), in
    // tiles without masked keys (the others take the packed path, which handles non-finite values
    // under masked keys: docs/design.md, "Non-finite inputs").
    const bool direct_v16 = p.half() && buf.direct && p.v.strides[3] == 1 && size_t(s.Dv) == buf.dvp;
    for (std::int64_t t0 = k0; t0 < k1; t0 += kBlockK) {
      const std::int64_t tl = std::min<std::int64_t>(kBlockK, k1 - t0);
      const float* tile_max = nullptr;
      const std::int64_t first_masked = TileScores(p, rows, t0, tl, buf, &tile_max);
      const std::int64_t voff = rows.b * p.v.strides[0] + rows.g * p.v.strides[1] + t0 * p.v.strides[2];
      // bf16pv: P·V by VDPBF16PS where the masked keys' values (if any) are finite; the softmax
      // then writes the weights as bf16 pairs.
      const std::uint32_t* vw = nullptr;
      if (buf.bf16pv) {
        bool finite = false;
        vw = ValuePairs(p, p.v16.data + voff, t0, tl, buf, &finite);
        if (!(first_masked >= tl || finite ||
              values_finite_bf16(p.v16.data + voff + first_masked * p.v.strides[2], p.v.strides[2],
                                 size_t(tl - first_masked), size_t(s.Dv))))
          vw = nullptr;
      }
      if (buf.direct) {
        SoftmaxStepRows(buf, rows.n);
      } else {
        SoftmaxStep(buf, tl, tile_max, vw != nullptr ? buf.pp : nullptr);
      }
      // (acc and O^T are rescaled by alpha inside ValueTile and ValueTileT)
      if (vw != nullptr) {
        ValueTileBf16(p, rows, vw, tl, buf);
        continue;
      }
      if (direct_v16 && first_masked >= tl) {
        const std::uint16_t* v16 = p.v16.data + voff;
        if (buf.bf16pvdirect) {
          value_rows_direct_bf16(buf.st, kBlockK, size_t(rows.n), v16, p.v.strides[2], size_t(tl), size_t(s.Dv),
                                 buf.acc, buf.dvp, buf.alpha, kPrefetchKeysOf<std::uint16_t>);
        } else if (p.dtype == Dtype::bf16) {
          ValueTile<Bf16Row>(buf.st, buf.layout(), size_t(rows.n), v16, p.v.strides[2], size_t(tl), buf.acc, buf.dvp,
                             buf.alpha);
        } else {
          ValueTile<F16Row>(buf.st, buf.layout(), size_t(rows.n), v16, p.v.strides[2], size_t(tl), buf.acc, buf.dvp,
                            buf.alpha);
        }
        continue;
      }
      const float* vbase = p.half() ? nullptr : p.v.data + voff;
      const float* vrows = vbase;
      std::ptrdiff_t ldv = p.v.strides[2];
      if (!direct_v) {
        for (std::int64_t j = 0; j < tl; ++j) {
          float* dst = buf.vp + j * buf.dvp;
          if (p.half()) {  // 16-bit V: widened while packing (prefetched ahead, as K)
            Prefetch16(p.v16.data + voff + (j + kPrefetchKeys) * p.v.strides[2], p.v.strides[3], s.Dv);
            WidenRow(p.v16.data + voff + j * p.v.strides[2], p.v.strides[3], size_t(s.Dv), dst, p.dtype);
          } else {
            const float* src = vbase + j * p.v.strides[2];
            for (std::int64_t e = 0; e < s.Dv; ++e) dst[e] = src[e * p.v.strides[3]];
          }
          std::fill(dst + s.Dv, dst + buf.dvp, 0.0f);
        }
        vrows = buf.vp;
        ldv = std::ptrdiff_t(buf.dvp);
      }
      // A masked entry has p = 0, and 0 x NaN would be NaN: a tile with masked entries whose
      // values are not all finite takes the exact path (docs/design.md, "Non-finite inputs").
      const bool exact = first_masked < tl && !ValuesFinite(vrows, ldv, s.Dv, first_masked, tl);
      if (exact) {
        vrows = FiniteValues(p, rows, t0, tl, buf);
        ldv = std::ptrdiff_t(buf.dvp);
      }
      if (!value_t) {
        ValueTile(buf.st, buf.layout(), size_t(rows.n), vrows, ldv, size_t(tl), buf.acc, buf.dvp, buf.alpha);
      } else {
        ValueTileT(buf.st, buf.cols, vrows, ldv, size_t(tl), buf.acct, size_t(s.Dv), buf.alpha);
      }
      if (exact) AddNonFiniteValues(p, rows, t0, tl, buf);
    }
  }

  // V's tile [t0, t0 + tl) as bf16 pairs for P·V by VDPBF16PS (bf16pv), from the thread's cache
  // of packed tiles or packed now; *finite says whether the packed rows (at least tl of them)
  // hold no infinity or NaN.
  static inline const std::uint32_t* ValuePairs(const Problem& p, const std::uint16_t* v, std::int64_t t0,
                                                std::int64_t tl, const Buffers& buf, bool* finite) {
    // The slot's tag: this call, this tile's first V row, how many rows are packed, whether they
    // are finite, and the slot's address (a grown scratch buffer holds none of the old contents).
    struct Tag {
      std::uint64_t call = 0;
      const std::uint16_t* v = nullptr;
      std::int64_t rows = 0;
      bool finite = false;
      const std::uint32_t* at = nullptr;
    };
    static thread_local Tag tags[kVwMaxSlots];
    const size_t slot = size_t(t0 / kBlockK) % buf.vw_slots;
    std::uint32_t* vw = buf.vw + slot * buf.vw_tile;
    Tag& tag = tags[slot];
    // A tile is packed to its full extent in V (kBlockK rows, fewer at the end), so that a
    // causal block's shorter last tile and the longer ones of the blocks after it share one
    // packing (1 x 12 x 2048 x 64 causal: each tile packed once instead of four times). A
    // shorter tile reads the pairs up to row 2 * pairs - 1, which for an odd tl is the row past
    // it, weighted 0: that row is packed as zero only in a packing of exactly tl rows.
    const bool fits =
        tag.call == p.call_id && tag.v == v && tag.at == vw && (tag.rows == tl || (tag.rows > tl && tl % 2 == 0));
    if (!fits) {
      const std::int64_t packed = tl % 2 == 0 ? std::min<std::int64_t>(kBlockK, p.s.Nk - t0) : tl;
      const bool all_finite =
          pack_value_pairs(v, p.v.strides[2], size_t(packed), size_t(p.s.Dv), vw, RoundUp(size_t(p.s.Dv), 32));
      tag = {p.call_id, v, packed, all_finite, vw};
    }
    *finite = tag.finite;
    return vw;
  }

  // P·V of one tile by VDPBF16PS (bf16pv): the weights' bf16 pairs in pp (SoftmaxStep), V's tile
  // paired (vw, from ValuePairs), into acc (row layout) or O^T, rescaled by alpha on the way, as
  // ValueTile / ValueTileT do.
  static inline void ValueTileBf16(const Problem& p, const Rows& rows, const std::uint32_t* vw, std::int64_t tl,
                                   const Buffers& buf) {
    const size_t Dv = size_t(p.s.Dv), ldw = RoundUp(Dv, 32), pairs = size_t(tl + 1) / 2;
    if (buf.values_transposed()) {
      value_cols_bf16(vw, ldw, Dv, buf.pp, kBlockQ, buf.cols, pairs, buf.acct, kBlockQ, buf.alpha);
    } else {
      value_rows_bf16(buf.pp, kBlockQ, size_t(rows.n), vw, ldw, buf.dvp, pairs, buf.acc, buf.dvp, buf.alpha);
    }
  }

  // Whether V rows [j0, j1) of the tile (row stride ldv, unit element stride) are all finite:
  // x * 0 is 0 for a finite x and NaN otherwise, so one MulAdd per vector, in four independent
  // chains (one chain would be bound by the FMA latency).
  static inline bool ValuesFinite(const float* v, std::ptrdiff_t ldv, std::int64_t Dv, std::int64_t j0,
                                  std::int64_t j1) {
    const DF df;
    const std::int64_t L = std::int64_t(hn::Lanes(df));
    const VF zero = hn::Zero(df);
    VF acc[4] = {zero, zero, zero, zero};
    float tail = 0.0f;
    for (std::int64_t j = j0; j < j1; ++j) {
      const float* vr = v + j * ldv;
      std::int64_t e = 0;
      for (; e + 4 * L <= Dv; e += 4 * L)
        for (std::int64_t c = 0; c < 4; ++c) acc[c] = hn::MulAdd(hn::LoadU(df, vr + e + c * L), zero, acc[c]);
      for (; e + L <= Dv; e += L) acc[0] = hn::MulAdd(hn::LoadU(df, vr + e), zero, acc[0]);
      for (; e < Dv; ++e) tail += vr[e] * 0.0f;
    }
    const VF all = hn::Add(hn::Add(acc[0], acc[1]), hn::Add(hn::Add(acc[2], acc[3]), hn::Set(df, tail)));
    return hn::AllTrue(df, hn::Eq(all, zero));
  }

  // V [tl, dvp] of the tile into buf.vp with its non-finite entries replaced by 0 (the product
  // then adds exactly what it adds for masked entries with finite junk: nothing).
  static inline const float* FiniteValues(const Problem& p, const Rows& rows, std::int64_t t0, std::int64_t tl,
                                          const Buffers& buf) {
    for (std::int64_t j = 0; j < tl; ++j) {
      float* dst = buf.vp + j * buf.dvp;
      for (std::int64_t e = 0; e < p.s.Dv; ++e) {
        const float x = p.v_at(rows.b, rows.g, t0 + j, e);
        dst[e] = std::isfinite(x) ? x : 0.0f;
      }
      std::fill(dst + p.s.Dv, dst + buf.dvp, 0.0f);
    }
    return buf.vp;
  }

  // Each non-finite V entry (j, e) of the tile, times p[r][j], into output column e of the rows
  // that see key j (NaN or infinity there, as IEEE arithmetic gives it; nothing for the others).
  static inline void AddNonFiniteValues(const Problem& p, const Rows& rows, std::int64_t t0, std::int64_t tl,
                                        const Buffers& buf) {
    const PLayout pl = buf.layout();
    for (std::int64_t j = 0; j < tl; ++j)
      for (std::int64_t e = 0; e < p.s.Dv; ++e) {
        const float x = p.v_at(rows.b, rows.g, t0 + j, e);
        if (std::isfinite(x)) continue;
        for (std::int64_t r = 0; r < rows.n; ++r) {
          if (!Sees(p, rows, r, t0 + j)) continue;
          const float add = buf.st[size_t(r) * pl.pr + size_t(j) * pl.pj] * x;
          float& o = buf.values_transposed() ? buf.acct[e * kBlockQ + r] : buf.acc[r * std::int64_t(buf.dvp) + e];
          o += add;
        }
      }
  }

  // O^T (wide blocks) into acc [rows, dvp], for the general writer and for partial results.
  // 16 output columns at a time: the 16 rows of O^T being read (1 KiB apart, so they share a
  // quarter of L1's sets) stay in L1 while all block rows are written.
  static inline void TransposeOutput(const Problem& p, const Rows& rows, const Buffers& buf) {
    const std::int64_t Dv = p.s.Dv;
    constexpr std::int64_t kStrip = 16;
    for (std::int64_t e0 = 0; e0 < Dv; e0 += kStrip) {
      const std::int64_t e1 = std::min(Dv, e0 + kStrip);
      for (std::int64_t r = 0; r < rows.n; ++r) {
        float* a = buf.acc + r * buf.dvp;
        for (std::int64_t e = e0; e < e1; ++e) a[e] = buf.acct[e * kBlockQ + r];
      }
    }
    for (std::int64_t r = 0; r < rows.n; ++r) std::fill(buf.acc + r * buf.dvp + Dv, buf.acc + (r + 1) * buf.dvp, 0.0f);
  }

  // 1 / l, and 0 for a row that saw no key (its output is zeros). A NaN l (a NaN or +inf
  // score) gives NaN: the whole row is NaN.
  static inline float InverseSum(float l) { return l == 0 ? 0.0f : 1.0f / l; }

  // lse = m + log(l) (m is in base 2), -inf for a row that saw no key, NaN for a NaN l.
  static inline void WriteLse(const Problem& p, const Rows& rows, std::int64_t r, float m, float l) {
    if (p.has_lse) p.lse(rows.b, rows.head[r], rows.pos[r]) = l == 0 ? kNegInf : m * kLn2 + std::log(l);
  }

  static inline float* OutRow(const Problem& p, const Rows& rows, std::int64_t r) {
    return p.out.data + rows.b * p.out.strides[0] + rows.head[r] * p.out.strides[1] + rows.pos[r] * p.out.strides[2];
  }

  // out = acc / l and the lse; zeros and -inf for rows that saw no key.
  static inline void WriteRow(const Problem& p, const Rows& rows, std::int64_t r, float m, float l, const float* acc) {
    const float inv = InverseSum(l);
    float* o = OutRow(p, rows, r);
    std::int64_t e = 0;
    if (p.out.strides[3] == 1) {  // contiguous: whole vectors (acc is aligned, the row need not be)
      const DF df;
      const VF vi = hn::Set(df, inv);
      const std::int64_t L = std::int64_t(hn::Lanes(df));
      for (; e + L <= p.s.Dv; e += L) hn::StoreU(hn::Mul(hn::Load(df, acc + e), vi), df, o + e);
    }
    for (; e < p.s.Dv; ++e) o[e * p.out.strides[3]] = acc[e] * inv;
    WriteLse(p, rows, r, m, l);
  }

  // The same for wide blocks whose output rows are contiguous, straight from O^T: lanes x lanes
  // squares transposed in registers and stored as whole vectors (the same products as WriteRow,
  // without the pass through acc).
  static inline void WriteRowsTransposed(const Problem& p, const Rows& rows, const Buffers& buf) {
    const DF df;
    constexpr std::int64_t L = std::int64_t(kLanes);
    const std::int64_t Dv = p.s.Dv;
    std::int64_t r0 = 0;
    for (; r0 + L <= rows.n; r0 += L) {
      float* dst[kLanes];
      float inv[kLanes];
      for (std::int64_t i = 0; i < L; ++i) {
        dst[i] = OutRow(p, rows, r0 + i);
        inv[i] = InverseSum(buf.l[r0 + i]);
      }
      std::int64_t e0 = 0;
      for (; e0 + L <= Dv; e0 += L) {
        VF v[kLanes];
        for (std::int64_t i = 0; i < L; ++i) v[i] = hn::Load(df, buf.acct + (e0 + i) * kBlockQ + r0);
        TransposeSquare(v);
        for (std::int64_t i = 0; i < L; ++i) hn::StoreU(hn::Mul(v[i], hn::Set(df, inv[i])), df, dst[i] + e0);
      }
      for (; e0 < Dv; ++e0)
        for (std::int64_t i = 0; i < L; ++i) dst[i][e0] = buf.acct[e0 * kBlockQ + r0 + i] * inv[i];
    }
    for (; r0 < rows.n; ++r0) {
      float* o = OutRow(p, rows, r0);
      const float inv = InverseSum(buf.l[r0]);
      for (std::int64_t e = 0; e < Dv; ++e) o[e] = buf.acct[e * kBlockQ + r0] * inv;
    }
    for (std::int64_t r = 0; r < rows.n; ++r) WriteLse(p, rows, r, buf.m[r], buf.l[r]);
  }

  // Second pass for the probabilities output: probs[row][j] = 2^(score - m) / l, zero where
  // masked or where the row saw no key. Needs each row's final m and l in buf.
  static inline void WriteProbs(const Problem& p, const Rows& rows, const Buffers& buf) {
    const DF df;
    const size_t L = hn::Lanes(df);
    const std::int64_t Nk = p.s.Nk;
    for (std::int64_t r = 0; r < rows.n; ++r) buf.alpha[r] = InverseSum(buf.l[r]);
    for (std::int64_t t0 = 0; t0 < Nk; t0 += kBlockK) {
      const std::int64_t tl = std::min<std::int64_t>(kBlockK, Nk - t0);
      const bool any_visible = t0 < rows.max_visible;
      if (any_visible && buf.direct) {
        TileScores(p, rows, t0, tl, buf);
        for (std::int64_t r = 0; r < rows.n; ++r) {
          float* sr = buf.st + r * kBlockK;
          if (buf.l[r] == 0) continue;
          ExpShiftedSum(sr, kBlockK, buf.m[r]);
          ScaleRow(sr, kBlockK, buf.alpha[r]);
        }
      } else if (any_visible) {
        TileScores(p, rows, t0, tl, buf);
        for (size_t x = 0; x < buf.cols; x += L) {
          const VF m = hn::Load(df, buf.m + x), inv = hn::Load(df, buf.alpha + x);
          const auto seen = hn::Ne(m, hn::Set(df, kNegInf));
          const VF shift = hn::IfThenElseZero(seen, m);
          for (std::int64_t j = 0; j < tl; ++j) {
            float* sj = buf.st + j * kBlockQ + x;
            hn::Store(hn::Mul(Exp2NonPositive(df, hn::Sub(hn::Load(df, sj), shift)), inv), df, sj);
          }
        }
      }
      for (std::int64_t r = 0; r < rows.n; ++r) {
        float* prow = p.probs.data + rows.b * p.probs.strides[0] + rows.head[r] * p.probs.strides[1] +
                      rows.pos[r] * p.probs.strides[2] + t0 * p.probs.strides[3];
        const std::int64_t ps = p.probs.strides[3];
        const PLayout pl = buf.layout();
        const bool zero = !any_visible || buf.l[r] == 0;
        if (std::isnan(buf.l[r])) {  // a NaN row: NaN where it sees a key, 0 where masked
          for (std::int64_t j = 0; j < tl; ++j)
            prow[j * ps] = Sees(p, rows, r, t0 + j) ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
          continue;
        }
        for (std::int64_t j = 0; j < tl; ++j) prow[j * ps] = zero ? 0.0f : buf.st[r * pl.pr + j * pl.pj];
      }
    }
  }

  static void RunUnit(const Problem& p, const Plan& plan, std::int64_t u, SplitPartials* parts) {
    const std::int64_t item = u / plan.splits, split = u % plan.splits;
    Rows rows;
    RowsOfItem(p, plan, item, rows);
    const Buffers buf = ThreadBuffers(p, rows.n);
    const std::int64_t chunk = RoundUp(size_t(ceil_div(rows.max_visible, plan.splits)), kBlockK);
    const std::int64_t k0 = std::min(rows.max_visible, split * chunk);
    const std::int64_t k1 = std::min(rows.max_visible, k0 + chunk);
    PackQueries(p, rows, buf);
    AttendKeys(p, rows, k0, k1, buf);
    if (buf.values_transposed() && plan.splits == 1 && p.out.strides[3] == 1) {
      WriteRowsTransposed(p, rows, buf);
      if (p.has_probs) WriteProbs(p, rows, buf);
      return;
    }
    if (buf.values_transposed()) TransposeOutput(p, rows, buf);
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
  static void MergeItem(const Problem& p, const Plan& plan, std::int64_t item, const SplitPartials& parts) {
    Rows rows;
    RowsOfItem(p, plan, item, rows);
    const Buffers buf = ThreadBuffers(p, rows.n);
    for (std::int64_t r = 0; r < rows.n; ++r) {
      float l = 0;
      const float M = parts.merge(item * plan.splits, plan.splits, r, buf.acc, &l);
      WriteRow(p, rows, r, M, l, buf.acc);
    }
  }

  static void Run(const Problem& p, const Plan& plan) {
    // Kept per calling thread and only ever grown: repeated decode calls allocate nothing. The
    // workers must use the caller's instance, hence the reference (a thread_local named inside
    // the parallel loop would be each worker's own).
    static thread_local SplitPartials callers_partials;
    SplitPartials& parts = callers_partials;
    if (plan.splits > 1) parts.reserve(plan.units(), kBlockQ, RoundUp(size_t(p.s.Dv), hn::Lanes(DF())));
    FirstError errors;
    const std::int64_t units = plan.units();
#pragma omp parallel for schedule(dynamic, 1) num_threads(plan.threads) if (plan.threads > 1 && units > 1)
    for (std::int64_t u = 0; u < units; ++u) errors.run([&] { RunUnit(p, plan, u, &parts); });
    errors.rethrow();
    if (plan.splits > 1) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
      for (std::int64_t item = 0; item < plan.items; ++item) errors.run([&] { MergeItem(p, plan, item, parts); });
      errors.rethrow();
    }
  }
};

// Rows of a full block of the plan (a block of one head's rows, or the stacked rows of several
// heads when Nq is small).
inline std::int64_t BlockRows(const Problem& p, const Plan& plan) {
  return plan.heads_per_block > 1 ? p.s.Nq * plan.heads_per_block : std::min(p.s.Nq, plan.block_q);
}

void RunAttention(const Problem& p, const Plan& plan) {
  if (plan.block_q == kWideBlockQ) {
    Tiled<kWideBlockQ, kWideBlockK>::Run(p, plan);
  } else if (plan.block_q == kNarrowBlockQ) {
    Tiled<kNarrowBlockQ, kNarrowBlockK>::Run(p, plan);
  } else if (kRowBlockK != kBlockK && BlockRows(p, plan) > Tiled<kBlockQ, kBlockK>::kDirectRows) {
    Tiled<kBlockQ, kRowBlockK>::Run(p, plan);
  } else {
    Tiled<kBlockQ, kBlockK>::Run(p, plan);
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

namespace {
void run(const detail::Problem& p, int threads_option) {
  const int threads = resolve_threads(threads_option);
  if (detail::amx_enabled() && detail::amx_fits(p)) {  // bf16 prefill on AMX tiles
    detail::amx_attention(p, threads);
    return;
  }
  const detail::Plan plan = detail::make_plan(p, threads);
  if (plan.items == 0) return;  // B, Hq or Nq is zero: no output element exists
  detail::Dispatch(p, plan);
}
}  // namespace

void attention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out, const AttentionOptions& options) {
  run(detail::make_problem(q, k, v, &out, options), options.threads);
}

void attention(const ConstTensor4x16& q, const ConstTensor4x16& k, const ConstTensor4x16& v, Tensor4 out,
               const AttentionOptions& options) {
  run(detail::make_problem(q, k, v, &out, options), options.threads);
}

}  // namespace jomoim
#endif  // HWY_ONCE
