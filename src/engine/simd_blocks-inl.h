// simd_blocks-inl.h — SIMD building blocks shared by the engine's kernels (internal): what the
// kernels know about the target they are compiled for (the one place that names Highway
// targets), the exponential of the online softmax, bf16 rounding into VDPBF16PS's pairs, the
// four-at-once lane sums, float64 row sums and a register pin against GCC's load folding. Included
// once per Highway target by each kernel file (after <hwy/highway.h>, inside no namespace),
// like Highway's own -inl.h headers: the guard below toggles with HWY_TARGET_TOGGLE.
#if defined(JOMOIM_ENGINE_SIMD_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef JOMOIM_ENGINE_SIMD_BLOCKS_INL_H_
#undef JOMOIM_ENGINE_SIMD_BLOCKS_INL_H_
#else
#define JOMOIM_ENGINE_SIMD_BLOCKS_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace jomoim::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- The target. Kernels ask these questions instead of testing HWY_TARGET themselves; code
// that does not compile on some targets is gated by macros defined here too (JOMOIM_ONE_LANE,
// JOMOIM_SUM4).
// 32 vector registers (AVX-512): the micro-kernels keep wider blocks of accumulators in
// registers (4 x 4 where the 16-register targets take 6 x 2 or 2 x 4).
constexpr bool kManyRegisters = HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL;
// The target on which bf16 products may use VDPBF16PS (bf16_dot.hpp; whether the CPU has
// AVX512_BF16 is asked at run time by bf16_dot_enabled()). jomoim's target AVX3_BF16.
constexpr bool kBf16DotTarget = HWY_TARGET == HWY_AVX3;
// Max returns its second operand when the other is NaN (x86's MAXPS); Highway's emulated
// targets return the number instead.
constexpr bool kMaxReturnsSecondNaN = !(HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR);
// One lane (HWY_SCALAR): nothing to transpose, no int16 pairs.
#undef JOMOIM_ONE_LANE  // this file is included once per target
#if HWY_TARGET == HWY_SCALAR
#define JOMOIM_ONE_LANE 1
#endif

// A prefetch of data streamed once (decode's K/V rows, a matrix-vector product's weights) into
// L2 (prefetcht1 on x86) rather than L1: with L1 as the target a core's prefetches queue behind
// its few L1 miss buffers (measured on a 2-vCPU Zen 4; bench/NOTES.md, "A Zen 4 at last").
template <typename T>
HWY_INLINE void PrefetchStream(const T* p) {
  __builtin_prefetch(p, 0, 2);
}

// A prefetch into L1 (prefetcht0 on x86), for data read soon and more than once (the next query
// rows to pack) or where it measured faster than PrefetchStream (grouped q8 decode on Zen 5).
template <typename T>
HWY_INLINE void PrefetchNear(const T* p) {
  __builtin_prefetch(p, 0, 3);
}

// Keeps v in a register from here on: GCC otherwise folds a vector loaded once and used by
// several FMAs into each FMA's memory operand, one load per use (an empty asm that says it
// reads and writes v; no instruction is emitted).
HWY_INLINE void KeepInRegister(VF& v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+x"(v.raw));
#else
  (void)v;
#endif
}

// 2^x for x <= 0 (and x = -inf gives +0), about 1 ulp: x = n + f with n = round(x),
// f in [-1/2, 1/2]; 2^f by a degree-6 polynomial (relative error 1.0e-7 in float arithmetic,
// fitted here for 2^f with the constant term fixed at 1, so 2^0 = 1 exactly), times 2^n by
// adding n to the exponent field. Adding 1.5 * 2^23 rounds x to an integer in the low mantissa
// bits, whose shift by 23 is n's exponent increment (two's complement wraps correctly). The
// clamp at -127 makes -inf exactly +0 (n = -127, f = 0); x in (-127, -126) gives a denormal
// of about the right size. 14 operations against about 25 for a general exp. A NaN stays NaN
// (docs/design.md, "Non-finite inputs"): x86's max returns its second operand when one is NaN, so the clamp is one
// Max there; Highway's emulated targets return the number, so they compare and select.
HWY_INLINE VF Exp2NonPositive(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  if constexpr (kMaxReturnsSecondNaN)
    x = hn::Max(hn::Set(df, -127.0f), x);
  else
    x = hn::IfThenElse(hn::Lt(x, hn::Set(df, -127.0f)), hn::Set(df, -127.0f), x);
  const VF magic = hn::Set(df, 12582912.0f);
  const VF shifted = hn::Add(x, magic);
  const VF f = hn::Sub(x, hn::Sub(shifted, magic));
  VF p = hn::Set(df, 1.5353361959569156e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.3398875016719103e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.61843691766262e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.5503323674201965e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.4022647738456726e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931471824645996e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const auto e = hn::ShiftLeft<23>(hn::BitCast(di, shifted));
  return hn::BitCast(df, hn::Add(hn::BitCast(di, p), e));
}

// x's bits with bf16 rounding applied (nearest, ties to even): 0x7FFF plus the kept part's
// lowest bit added, so the high 16 bits are bf16(x) for every number (overflow gives an
// infinity). A NaN is not guarded: a carry can make it an infinity or a zero.
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundedBf16Bits(VF x) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, x);
  return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
}

// Two vectors rounded to bf16 (RoundedBf16Bits) and paired lane by lane: lane i holds bf16(a[i])
// in its low 16 bits and bf16(b[i]) in its high 16 bits, the layout VDPBF16PS multiplies (what
// VCVTNE2PS2BF16 and an interleave give, which the Highway targets cannot emit; bf16_dot.hpp).
// Denormals stay denormal where VCVTNE2PS2BF16 flushes them to zero; VDPBF16PS reads them as
// zero either way. NaN unguarded: the softmax's weights are NaN only in a row whose sum is NaN
// too, which makes that row's output NaN whatever P·V adds.
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> PairBf16(VF a, VF b) {
  const hn::RebindToUnsigned<DF> du;
  return hn::Or(hn::ShiftRight<16>(RoundedBf16Bits(a)), hn::And(RoundedBf16Bits(b), hn::Set(du, 0xFFFF0000u)));
}

// Lane sums of four vectors at once, in the four lanes of a 128-bit vector: two levels of
// interleave-and-add within each 128-bit block (a 4 x 4 transpose folded into the adds), then
// the blocks added together. About 13 operations for four sums, where four SumOfLanes take
// about 36. x86 targets with 256-bit vectors or wider; the others use SumOfLanes.
#undef JOMOIM_SUM4  // this file is included once per target
#if HWY_TARGET <= HWY_AVX2
#define JOMOIM_SUM4 1
template <class D>
HWY_INLINE hn::Vec<hn::Full128<float>> FoldBlocks(D d, hn::Vec<D> v) {
  if constexpr (D::kPrivateN <= 4) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> dh;
    return FoldBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}
HWY_INLINE hn::Vec<hn::Full128<float>> Sum4(VF a, VF b, VF c, VF d) {
  const DF df;
  const hn::Repartition<double, DF> dd;
  const VF ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const VF cd = hn::Add(hn::InterleaveLower(df, c, d), hn::InterleaveUpper(df, c, d));
  const auto ab64 = hn::BitCast(dd, ab), cd64 = hn::BitCast(dd, cd);
  const VF abcd = hn::Add(hn::BitCast(df, hn::InterleaveLower(dd, ab64, cd64)),
                          hn::BitCast(df, hn::InterleaveUpper(dd, ab64, cd64)));
  return FoldBlocks(df, abcd);
}
#endif

// Float64 sums over a float32 row, for statistics that must not lose digits (LayerNorm's mean
// and variance): each vector's halves promoted to doubles and folded by add(tag, acc, v) into two
// lanes-of-doubles accumulators, their lanes summed (VectorsF64; it returns where the vectors
// ended), then the tail in scalars (one lane: all of it in scalars).
// SumF64 = sum_i x[i]; SumSquaredDeviationsF64 = sum_i (x[i] - m)^2.
template <class Add>
HWY_INLINE double VectorsF64(const float* HWY_RESTRICT x, size_t n, size_t& end, const Add& add) {
  end = 0;
#ifdef JOMOIM_ONE_LANE
  (void)x, (void)n, (void)add;
  return 0;
#else
  const DF df;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd);
  for (; end + N <= n; end += N) {
    const VF v = hn::LoadU(df, x + end);
    s0 = add(dd, s0, hn::PromoteTo(dd, hn::LowerHalf(dh, v)));
    s1 = add(dd, s1, hn::PromoteTo(dd, hn::UpperHalf(dh, v)));
  }
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
#endif
}
HWY_INLINE double SumF64(const float* HWY_RESTRICT x, size_t n) {
  size_t i;
  double s = VectorsF64(x, n, i, [](auto, auto acc, auto v) { return hn::Add(acc, v); });
  for (; i < n; ++i) s += x[i];
  return s;
}
HWY_INLINE double SumSquaredDeviationsF64(const float* HWY_RESTRICT x, size_t n, double m) {
  size_t i;
  double s = VectorsF64(x, n, i, [m](auto dd, auto acc, auto v) {
    const auto d = hn::Sub(v, hn::Set(dd, m));
    return hn::MulAdd(d, d, acc);
  });
  for (; i < n; ++i) s += (x[i] - m) * (x[i] - m);
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace jomoim::detail
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
