// matvec.cpp — float32 rows times float32, bf16 or q8 weight rows (jomoim/engine/matvec.hpp).
//
// Four weight rows at a time: each widened weight vector meets the M activation rows (M x 4
// accumulators), and the four row sums of each activation row are folded together at the end
// (Sum4 of simd_blocks-inl.h). Weights are read front to back once per pass of activation rows
// (kPassRows: four, or two on 16-register targets), in blocks of rows that stay in L2 while every
// pass meets them (kBlockBytes); the hardware prefetcher sees four sequential streams. Compiled
// once per SIMD target (Highway's foreach_target).
#include "jomoim/engine/matvec.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "jomoim/core/half.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "matvec.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include "simd_blocks-inl.h"

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF and Sum4 come from simd_blocks-inl.h.
using DU = hn::RebindToUnsigned<DF>;
using D16 = hn::Rebind<std::uint16_t, DF>;  // as many uint16 lanes as DF has floats
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<std::int8_t, DF>;
constexpr int kW = 4;  // weight rows per pass
// Weight rows are prefetched this many groups of kW ahead: the hardware prefetcher does not
// keep up with four short interleaved streams (measured: q8 decode of GPT-2 small 177 -> 319
// tokens/s on Zen 5). A prefetch past the matrix's end is a hint, never a fault.
// The prefetches go to L2 (PrefetchStream, simd_blocks-inl.h): with L1 as the target, GPT-2
// small decode on a 2-vCPU Zen 4 ran at 51-63 tokens/s with bf16 weights instead of 87-117.
constexpr int kPrefetchGroups = 2;

HWY_INLINE VF WidenBf16(const std::uint16_t* HWY_RESTRICT p) {
  const DF df;
  const DU du;
  const D16 d16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

// A weight vector as float32: 16-bit rows widened, float32 rows loaded as they are.
HWY_INLINE VF LoadWeights(const std::uint16_t* HWY_RESTRICT p) { return WidenBf16(p); }
HWY_INLINE VF LoadWeights(const float* HWY_RESTRICT p) { return hn::LoadU(DF(), p); }
HWY_INLINE float WeightValue(std::uint16_t w) { return bf16_to_float(w); }
HWY_INLINE float WeightValue(float w) { return w; }

HWY_INLINE VF WidenQ8(const std::int8_t* HWY_RESTRICT p, VF scale) {
  const DF df;
  const DI di;
  const D8 d8;
  return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p))), scale);
}

// Stores the sums of acc[m][0..nw) (+ bias) into y[m][r..r+nw).
template <int M, int NW>
HWY_INLINE void StoreSums(VF (&acc)[M][kW], const float (&tail)[M][kW], const float* bias, int r, float* y,
                          std::size_t ldy) {
  const DF df;
  for (int m = 0; m < M; ++m) {
    float s[kW];
#ifdef JOMOIM_SUM4
    if constexpr (NW == kW) {
      hn::StoreU(Sum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]), hn::Full128<float>(), s);
    } else {
      for (int j = 0; j < NW; ++j) s[j] = hn::GetLane(hn::SumOfLanes(df, acc[m][j]));
    }
#else
    for (int j = 0; j < NW; ++j) s[j] = hn::GetLane(hn::SumOfLanes(df, acc[m][j]));
#endif
    for (int j = 0; j < NW; ++j) y[m * ldy + r + j] = s[j] + tail[m][j] + (bias ? bias[r + j] : 0.0f);
  }
}

// NW (1 or 4) rows starting at r; T is the weights' storage (bf16 bits or float32).
template <typename T, int M, int NW>
HWY_INLINE void RowsGroup(const float* HWY_RESTRICT x, std::size_t ldx, const T* HWY_RESTRICT w, std::size_t ldw, int K,
                          int r, const float* bias, float* HWY_RESTRICT y, std::size_t ldy) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  VF acc[M][kW];
  float tail[M][kW] = {};
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < kW; ++j) acc[m][j] = hn::Zero(df);
  const T* row = w + static_cast<std::size_t>(r) * ldw;
  int k = 0;
  for (; k + N <= K; k += N) {
    for (int j = 0; j < NW; ++j) PrefetchStream(row + (kPrefetchGroups * kW + j) * ldw + k);
    VF wv[NW];
    for (int j = 0; j < NW; ++j) wv[j] = LoadWeights(row + j * ldw + k);
    for (int m = 0; m < M; ++m) {
      const VF xv = hn::LoadU(df, x + m * ldx + k);
      for (int j = 0; j < NW; ++j) acc[m][j] = hn::MulAdd(xv, wv[j], acc[m][j]);
    }
  }
  for (; k < K; ++k)
    for (int j = 0; j < NW; ++j) {
      const float wk = WeightValue(row[j * ldw + k]);
      for (int m = 0; m < M; ++m) tail[m][j] += x[m * ldx + k] * wk;
    }
  StoreSums<M, NW>(acc, tail, bias, r, y, ldy);
}

template <int M, int NW>
HWY_INLINE void Q8Group(const float* HWY_RESTRICT x, std::size_t ldx, const std::int8_t* HWY_RESTRICT q,
                        std::size_t ldw, const float* HWY_RESTRICT scales, int block, int K, int r, const float* bias,
                        float* HWY_RESTRICT y, std::size_t ldy) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  const int nb = K / block;
  VF acc[M][kW];
  const float tail[M][kW] = {};
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < kW; ++j) acc[m][j] = hn::Zero(df);
  const std::int8_t* row = q + static_cast<std::size_t>(r) * ldw;
  const float* srow = scales + static_cast<std::size_t>(r) * nb;
  for (int b = 0; b < nb; ++b) {
    VF sv[NW];
    for (int j = 0; j < NW; ++j) sv[j] = hn::Set(df, srow[j * nb + b]);
    for (int k = b * block; k < (b + 1) * block; k += N) {  // block is a multiple of N
      for (int j = 0; j < NW; ++j) PrefetchStream(row + (kPrefetchGroups * kW + j) * ldw + k);
      VF wv[NW];
      for (int j = 0; j < NW; ++j) wv[j] = WidenQ8(row + j * ldw + k, sv[j]);
      for (int m = 0; m < M; ++m) {
        const VF xv = hn::LoadU(df, x + m * ldx + k);
        for (int j = 0; j < NW; ++j) acc[m][j] = hn::MulAdd(xv, wv[j], acc[m][j]);
      }
    }
  }
  StoreSums<M, NW>(acc, tail, bias, r, y, ldy);
}

// The q8 products on integers: each activation row is rounded to int16 per block of the
// weights' blocks (sx = max |x| / 32767 of the block, xq = round(x / sx); relative error at most
// 2^-16 of the block's largest value, against q8's 2^-8 on the weights), then each block's
// int8 x int16 products are summed exactly in int32 (VPMADDWD on x86: 2 products a lane, no
// widening to float), and the sum, converted and times sx, is added times d_w into float32
// accumulators (one vector Mul a row and block, d_w broadcast from memory; against forming
// d_w * sx as a scalar and broadcasting it, 0.93-0.97x the time for one row from L3 on a Zen 5,
// and the default model's q8 decode 4,114 against 3,579 tokens/s natively, level on AVX2):
// about half the instructions of widening every weight to float. Used for M <= 2 (the registers of M x 4
// float and int accumulators) when a block is whole int16 vectors and x is finite; not on
// HWY_SCALAR (one lane: no int16 pairs). Three rows or more take the float path in passes of
// kPassRows: it computes more per instruction there (on a Zen 5, one thread, 2,304 rows of 768:
// 70 against 46 GMAC/s on AVX-512 with four rows a pass, 35 against 32 on AVX2).
#undef JOMOIM_Q8_INT16  // this file is compiled once per target
#ifndef JOMOIM_ONE_LANE
#define JOMOIM_Q8_INT16 1
using DI32 = hn::RebindToSigned<DF>;
using DQ16 = hn::Repartition<std::int16_t, DF>;  // twice DF's lanes
using D8H = hn::Rebind<std::int8_t, DQ16>;       // as many int8 lanes as DQ16 has (half a vector)

// false when a value is not finite (the caller takes the float path, which propagates it).
// Per block: sx = amax / 32767, xq = x * (32767 / amax) rounded half to even (nearbyint's
// rounding), clamped to +-32767; all zeros in an all-zero block.
bool QuantizeX16(const float* HWY_RESTRICT x, std::size_t ldx, int M, int K, int block, std::int16_t* HWY_RESTRICT xq,
                 float* HWY_RESTRICT sx) {
  const DF df;
  const DI di;
  const hn::Rebind<std::int16_t, DF> dh;
  const int N = static_cast<int>(hn::Lanes(df));  // divides block (a multiple of DQ16's lanes)
  const VF lo = hn::Set(df, -32767.0f), hi = hn::Set(df, 32767.0f);
  const int nb = K / block;
  for (int m = 0; m < M; ++m)
    for (int b = 0; b < nb; ++b) {
      const float* xb = x + m * ldx + b * block;
      VF amax = hn::Zero(df);
      for (int k = 0; k < block; k += N) {
        const VF v = hn::LoadU(df, xb + k);
        if (!hn::AllTrue(df, hn::IsFinite(v))) return false;  // inf or NaN
        amax = hn::Max(amax, hn::Abs(v));
      }
      const float a = hn::GetLane(hn::MaxOfLanes(df, amax));
      sx[m * nb + b] = a / 32767.0f;
      const VF inv = hn::Set(df, a > 0.0f ? 32767.0f / a : 0.0f);
      std::int16_t* qb = xq + static_cast<std::size_t>(m) * K + b * block;
      for (int k = 0; k < block; k += N) {
        const VF r = hn::Min(hn::Max(hn::Round(hn::Mul(hn::LoadU(df, xb + k), inv)), lo), hi);
        hn::StoreU(hn::DemoteTo(dh, hn::ConvertTo(di, r)), dh, qb + k);
      }
    }
  return true;
}

template <int M, int NW>
HWY_INLINE void Q8Group16(const std::int16_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx, int K,
                          const std::int8_t* HWY_RESTRICT q, std::size_t ldw, const float* HWY_RESTRICT scales,
                          int block, int r, const float* bias, float* HWY_RESTRICT y, std::size_t ldy) {
  const DF df;
  const DI32 di;
  const DQ16 d16;
  const D8H d8;
  const int N16 = static_cast<int>(hn::Lanes(d16));
  const int nb = K / block;
  VF acc[M][kW];
  const float tail[M][kW] = {};
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < kW; ++j) acc[m][j] = hn::Zero(df);
  const std::int8_t* row = q + static_cast<std::size_t>(r) * ldw;
  const float* srow = scales + static_cast<std::size_t>(r) * nb;
  for (int b = 0; b < nb; ++b) {
    hn::Vec<DI32> s0[M][NW], s1[M][NW];
    for (int m = 0; m < M; ++m)
      for (int j = 0; j < NW; ++j) s0[m][j] = s1[m][j] = hn::Zero(di);
    for (int k = b * block; k < (b + 1) * block; k += N16) {
      // The next group's rows, kPrefetchGroups groups ahead (the hardware prefetcher misses
      // four short interleaved streams).
      for (int j = 0; j < NW; ++j) PrefetchStream(row + (kPrefetchGroups * kW + j) * ldw + k);
      hn::Vec<DQ16> wv[NW];
      for (int j = 0; j < NW; ++j) wv[j] = hn::PromoteTo(d16, hn::LoadU(d8, row + j * ldw + k));
      for (int m = 0; m < M; ++m) {
        const auto xv = hn::LoadU(d16, xq + static_cast<std::size_t>(m) * K + k);
        for (int j = 0; j < NW; ++j) s0[m][j] = hn::ReorderWidenMulAccumulate(di, xv, wv[j], s0[m][j], s1[m][j]);
      }
    }
    for (int m = 0; m < M; ++m) {
      const VF sxv = hn::Set(df, sx[m * nb + b]);
      for (int j = 0; j < NW; ++j)
        acc[m][j] = hn::MulAdd(hn::Mul(hn::ConvertTo(df, hn::Add(s0[m][j], s1[m][j])), sxv),
                               hn::Set(df, srow[j * nb + b]), acc[m][j]);
    }
  }
  StoreSums<M, NW>(acc, tail, bias, r, y, ldy);
}

template <int M>
void Q8Rows16M(const std::int16_t* xq, const float* sx, int K, const std::int8_t* q, std::size_t ldw,
               const float* scales, int block, int rows, const float* bias, float* y, std::size_t ldy) {
  int r = 0;
  for (; r + kW <= rows; r += kW) Q8Group16<M, kW>(xq, sx, K, q, ldw, scales, block, r, bias, y, ldy);
  for (; r < rows; ++r) Q8Group16<M, 1>(xq, sx, K, q, ldw, scales, block, r, bias, y, ldy);
}
#endif  // JOMOIM_ONE_LANE

template <typename T, int M>
void RowsM(const float* x, std::size_t ldx, const T* w, std::size_t ldw, int K, int rows, const float* bias, float* y,
           std::size_t ldy) {
  int r = 0;
  for (; r + kW <= rows; r += kW) RowsGroup<T, M, kW>(x, ldx, w, ldw, K, r, bias, y, ldy);
  for (; r < rows; ++r) RowsGroup<T, M, 1>(x, ldx, w, ldw, K, r, bias, y, ldy);
}

template <int M>
void Q8RowsM(const float* x, std::size_t ldx, const std::int8_t* q, std::size_t ldw, const float* scales, int block,
             int K, int rows, const float* bias, float* y, std::size_t ldy) {
  int r = 0;
  for (; r + kW <= rows; r += kW) Q8Group<M, kW>(x, ldx, q, ldw, scales, block, K, r, bias, y, ldy);
  for (; r < rows; ++r) Q8Group<M, 1>(x, ldx, q, ldw, scales, block, K, r, bias, y, ldy);
}

// Activation rows a pass over the weights: all of them (up to 4) where M x 4 accumulators fit
// in the registers; two on 16 registers, where three or four rows' 12-16 accumulators beside
// four weight vectors spilled and M = 4 took 2.5-2.8x the time of M = 2 (bf16 pinned to AVX2 on
// a Zen 5, 64 or 2,304 rows of 768 weights; a pass of four rows over two weight rows, nothing
// on the stack, was no faster). In pairs: M = 4 0.75-0.80x the time, M = 3 0.75-0.82x
// (bench/NOTES.md, "bf16_rows on 16 registers").
constexpr int kPassRows = kManyRegisters ? 4 : 2;
// With more activation rows than one pass, the weights go in blocks of rows of about this many
// bytes, each block meeting every pass while it is in L2, instead of every pass streaming all
// the weights again (measured on prompts of up to 32 rows, bench/NOTES.md "Short prompts with
// bf16 weights").
constexpr std::size_t kBlockBytes = 64 * 1024;

// Calls pass(m0, m, r0, n) for every block of weight rows [r0, r0 + n) and, within it, every
// pass of activation rows [m0, m0 + m), m <= pass_rows. The order changes no sum: each output is
// one pass's dot product.
template <class Pass>
HWY_INLINE void BlocksAndPasses(int M, int pass_rows, int rows, std::size_t row_bytes, const Pass& pass) {
  const int block = M <= pass_rows ? rows : std::max(16, static_cast<int>(kBlockBytes / row_bytes) / 16 * 16);
  for (int r0 = 0; r0 < rows; r0 += block)
    for (int m0 = 0; m0 < M; m0 += pass_rows) pass(m0, std::min(pass_rows, M - m0), r0, std::min(block, rows - r0));
}

template <typename T>
void Rows(const float* x, std::size_t ldx, int M, const T* w, std::size_t ldw, int K, int rows, const float* bias,
          float* y, std::size_t ldy) {
  BlocksAndPasses(M, kPassRows, rows, sizeof(T) * K, [&](int m0, int m, int r0, int n) {
    const float* xs = x + static_cast<std::size_t>(m0) * ldx;
    const T* ws = w + static_cast<std::size_t>(r0) * ldw;
    const float* bs = bias ? bias + r0 : nullptr;
    float* ys = y + static_cast<std::size_t>(m0) * ldy + r0;
    switch (m) {
      case 1:
        return RowsM<T, 1>(xs, ldx, ws, ldw, K, n, bs, ys, ldy);
      case 2:
        return RowsM<T, 2>(xs, ldx, ws, ldw, K, n, bs, ys, ldy);
      case 3:
        return RowsM<T, 3>(xs, ldx, ws, ldw, K, n, bs, ys, ldy);
      default:
        return RowsM<T, 4>(xs, ldx, ws, ldw, K, n, bs, ys, ldy);
    }
  });
}
int PassRows() { return kPassRows; }

void Bf16Rows(const float* x, std::size_t ldx, int M, const std::uint16_t* w, std::size_t ldw, int K, int rows,
              const float* bias, float* y, std::size_t ldy) {
  Rows(x, ldx, M, w, ldw, K, rows, bias, y, ldy);
}
void F32Rows(const float* x, std::size_t ldx, int M, const float* w, std::size_t ldw, int K, int rows,
             const float* bias, float* y, std::size_t ldy) {
  Rows(x, ldx, M, w, ldw, K, rows, bias, y, ldy);
}

// y[j] = beta y[j] + alpha sum_k x[k] w[k][j], W by rows of outputs (GPT-2's [in, out]): the
// outputs stay in y (L1) while four weight rows at a time stream past, each read once, front to
// back within the caller's slice of columns; the next four rows are prefetched (the hardware
// prefetcher does not follow K short strided streams: 12.5 ms a GPT-2 small token, 2 threads, Zen 5,
// against 15 ms without the prefetch and 15-18 ms through OpenBLAS's sgemv).
void F32Cols(const float* HWY_RESTRICT x, int K, const float* HWY_RESTRICT w, std::size_t ldw, int n, float alpha,
             float beta, float* HWY_RESTRICT y) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  if (beta == 0.0f)
    std::fill(y, y + n, 0.0f);
  else if (beta != 1.0f)
    for (int j = 0; j < n; ++j) y[j] *= beta;
  const int nv = n - n % N;
  int k = 0;
  for (; k + kW <= K; k += kW) {
    const float* HWY_RESTRICT r0 = w + static_cast<std::size_t>(k) * ldw;
    const VF x0 = hn::Set(df, alpha * x[k]), x1 = hn::Set(df, alpha * x[k + 1]);
    const VF x2 = hn::Set(df, alpha * x[k + 2]), x3 = hn::Set(df, alpha * x[k + 3]);
    for (int j = 0; j < nv; j += N) {
      for (int i = 0; i < kW; ++i) PrefetchStream(r0 + (kW + i) * ldw + j);
      VF a = hn::LoadU(df, y + j);
      a = hn::MulAdd(x0, hn::LoadU(df, r0 + j), a);
      a = hn::MulAdd(x1, hn::LoadU(df, r0 + ldw + j), a);
      a = hn::MulAdd(x2, hn::LoadU(df, r0 + 2 * ldw + j), a);
      a = hn::MulAdd(x3, hn::LoadU(df, r0 + 3 * ldw + j), a);
      hn::StoreU(a, df, y + j);
    }
  }
  for (; k < K; ++k) {
    const float* HWY_RESTRICT r0 = w + static_cast<std::size_t>(k) * ldw;
    const VF x0 = hn::Set(df, alpha * x[k]);
    for (int j = 0; j < nv; j += N) hn::StoreU(hn::MulAdd(x0, hn::LoadU(df, r0 + j), hn::LoadU(df, y + j)), df, y + j);
  }
  for (int j = nv; j < n; ++j) {  // the last n % N columns, one at a time down the rows
    float s = 0.0f;
    for (k = 0; k < K; ++k) s += x[k] * w[static_cast<std::size_t>(k) * ldw + j];
    y[j] += alpha * s;
  }
}

void Q8Rows(const float* x, std::size_t ldx, int M, const std::int8_t* q, std::size_t ldw, const float* scales,
            int block, int K, int rows, const float* bias, float* y, std::size_t ldy, std::int16_t* xq, float* sx) {
#ifdef JOMOIM_Q8_INT16
  const DQ16 d16;
  if (M <= 2 && block % static_cast<int>(hn::Lanes(d16)) == 0 && QuantizeX16(x, ldx, M, K, block, xq, sx)) {
    if (M == 1) return Q8Rows16M<1>(xq, sx, K, q, ldw, scales, block, rows, bias, y, ldy);
    return Q8Rows16M<2>(xq, sx, K, q, ldw, scales, block, rows, bias, y, ldy);
  }
#else
  (void)xq;
  (void)sx;
#endif
  const int nb = K / block;
  BlocksAndPasses(M, kPassRows, rows, K, [&](int m0, int m, int r0, int n) {
    const float* xs = x + static_cast<std::size_t>(m0) * ldx;
    const std::int8_t* qs = q + static_cast<std::size_t>(r0) * ldw;
    const float* ws = scales + static_cast<std::size_t>(r0) * nb;
    const float* bs = bias ? bias + r0 : nullptr;
    float* ys = y + static_cast<std::size_t>(m0) * ldy + r0;
    switch (m) {
      case 1:
        return Q8RowsM<1>(xs, ldx, qs, ldw, ws, block, K, n, bs, ys, ldy);
      case 2:
        return Q8RowsM<2>(xs, ldx, qs, ldw, ws, block, K, n, bs, ys, ldy);
      case 3:
        return Q8RowsM<3>(xs, ldx, qs, ldw, ws, block, K, n, bs, ys, ldy);
      default:
        return Q8RowsM<4>(xs, ldx, qs, ldw, ws, block, K, n, bs, ys, ldy);
    }
  });
}

void WidenBf16Array(const std::uint16_t* src, float* dst, std::size_t n) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(WidenBf16(src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void DequantizeQ8Row(const std::int8_t* values, const float* scales, int block, int K, float* dst) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  for (int b = 0; b < K / block; ++b) {
    const VF s = hn::Set(df, scales[b]);
    for (int k = b * block; k < (b + 1) * block; k += N) hn::StoreU(WidenQ8(values + k, s), df, dst + k);
  }
}

// The q8 format's rounding (quant.hpp) of one row: per block d = max |x| / 127 and
// q = x * (1 / d) rounded half to even, clamped to +-127 (0 in an all-zero block): the scalar
// definition's operations in the same order, so the same bits. x must be finite (AllFinite).
void QuantizeQ8Row(const float* HWY_RESTRICT x, int block, int K, std::int8_t* HWY_RESTRICT values,
                   float* HWY_RESTRICT scales) {
  const DF df;
  const DI di;
  const D8 d8;
  const int N = static_cast<int>(hn::Lanes(df));  // divides block (a multiple of 16)
  const VF lo = hn::Set(df, -127.0f), hi = hn::Set(df, 127.0f);
  for (int b = 0; b < K / block; ++b) {
    const float* xb = x + b * block;
    VF m = hn::Zero(df);
    for (int k = 0; k < block; k += N) m = hn::Max(m, hn::Abs(hn::LoadU(df, xb + k)));
    const float d = hn::GetLane(hn::MaxOfLanes(df, m)) / 127.0f;
    const VF inv = hn::Set(df, d > 0 ? 1.0f / d : 0.0f);
    for (int k = 0; k < block; k += N) {
      const VF r = hn::Min(hn::Max(hn::Round(hn::Mul(hn::LoadU(df, xb + k), inv)), lo), hi);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, values + b * block + k);
    }
    scales[b] = d;
  }
}

bool AllFinite(const float* HWY_RESTRICT x, std::size_t n) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N)
    if (!hn::AllTrue(df, hn::IsFinite(hn::LoadU(df, x + i)))) return false;
  for (; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace jomoim::detail {
HWY_EXPORT(PassRows);
HWY_EXPORT(Bf16Rows);
HWY_EXPORT(F32Rows);
HWY_EXPORT(F32Cols);
HWY_EXPORT(Q8Rows);
HWY_EXPORT(WidenBf16Array);
HWY_EXPORT(DequantizeQ8Row);
HWY_EXPORT(QuantizeQ8Row);
HWY_EXPORT(AllFinite);
}  // namespace jomoim::detail

namespace jomoim::matvec {
int pass_rows() { return HWY_DYNAMIC_DISPATCH(detail::PassRows)(); }
void bf16_rows(const float* x, std::size_t ldx, int M, const std::uint16_t* w, std::size_t ldw, int K, int rows,
               const float* bias, float* y, std::size_t ldy) {
  if (M <= 0 || rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(detail::Bf16Rows)(x, ldx, M, w, ldw, K, rows, bias, y, ldy);
}
void f32_rows(const float* x, std::size_t ldx, int M, const float* w, std::size_t ldw, int K, int rows,
              const float* bias, float* y, std::size_t ldy) {
  if (M <= 0 || rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(detail::F32Rows)(x, ldx, M, w, ldw, K, rows, bias, y, ldy);
}
void f32_cols(const float* x, int K, const float* w, std::size_t ldw, int n, float alpha, float beta, float* y) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(detail::F32Cols)(x, K, w, ldw, n, alpha, beta, y);
}
void q8_rows(const float* x, std::size_t ldx, int M, const std::int8_t* values, std::size_t ldw, const float* scales,
             int block, int K, int rows, const float* bias, float* y, std::size_t ldy) {
  if (M <= 0 || rows <= 0) return;
  thread_local std::vector<std::int16_t> xq;  // one or two activation rows in int16 (Q8Group16)
  thread_local std::vector<float> sx;
  const std::size_t m16 = M <= 2 ? M : 0;
  xq.resize(m16 * K);
  sx.resize(m16 * (K / block));
  HWY_DYNAMIC_DISPATCH(detail::Q8Rows)
  (x, ldx, M, values, ldw, scales, block, K, rows, bias, y, ldy, xq.data(), sx.data());
}
void widen_bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(detail::WidenBf16Array)(src, dst, n);
}
void dequantize_q8_row(const std::int8_t* values, const float* scales, int block, int K, float* dst) {
  HWY_DYNAMIC_DISPATCH(detail::DequantizeQ8Row)(values, scales, block, K, dst);
}
void quantize_q8_row(const float* x, int block, int K, std::int8_t* values, float* scales) {
  HWY_DYNAMIC_DISPATCH(detail::QuantizeQ8Row)(x, block, K, values, scales);
}
bool all_finite(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(detail::AllFinite)(x, n); }
}  // namespace jomoim::matvec
#endif  // HWY_ONCE
