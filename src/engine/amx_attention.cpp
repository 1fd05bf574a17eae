// amx_attention.cpp — bf16 prefill and 8-bit keys' scores on AMX tiles (amx_attention.hpp). The
// only file with AMX code; its functions carry their own target attribute, so the file compiles
// for the baseline.
#include "amx_attention.hpp"

#include <immintrin.h>
#include <omp.h>

// GCC 12's AVX-512 headers start the unmasked shuffles from a self-initialised "undefined"
// vector, which -Wuninitialized reports at every use; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <hwy/base.h>

#include "bf16_dot.hpp"
#include "cpu.hpp"

namespace jomoim::detail {

#define JOMOIM_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace {

constexpr std::int64_t kItemRows = 64;   // query rows per work item: 4 row tiles
constexpr std::int64_t kBlockKeys = 64;  // keys per block: 4 key tiles, 2 chunks of 32 for P·V
constexpr std::int64_t kMaxDepth = 256;  // D and Dv at most
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Tile configuration (palette 1): tiles 0-3 the float32 sums C (16 rows x 16 floats), 4, 6, 7
// the A operands, 5 the B operand; every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette, start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

inline __mmask32 first32(std::int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first16(std::int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Weights below 2^kFloor (of the row's running maximum) come out between 2^(kFloor - 0.5) and
// 2^(kFloor + 0.5), and a rescale below it as zero: nothing reaches a denormal, whose arithmetic
// Intel cores run through microcode assists (VSCALEFPS with denormal results took two thirds of
// the kernel's time in a GPT-2 prefill, whose scores span hundreds of units). The error, below
// N 2^-99 of the sum, is far under the float32 bound.
constexpr float kFloor = -100.0f;

// 2^x for x <= 0 (2^kFloor-ish below kFloor): the polynomial of Exp2NonPositive (simd_blocks-inl.h,
// which this file, outside Highway's per-target compilation, cannot include) on f = x - round(x),
// and VSCALEFPS by round(x), at least kFloor, for the power of two.
JOMOIM_AMX_TARGET inline __m512 exp2_nonpositive(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5353361959569156e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3398875016719103e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.61843691766262e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5503323674201965e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022647738456726e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471824645996e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, _mm512_max_ps(n, _mm512_set1_ps(kFloor)));  // off the polynomial's path
}

// x with its low 16 bits cleared: a bf16 value (x truncated towards zero), exact.
JOMOIM_AMX_TARGET inline __m512 high_half(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0xFFFF0000u))));
}

// 16 x 16 32-bit elements transposed in registers: r[i] becomes column i.
JOMOIM_AMX_TARGET inline void transpose16(__m512i (&r)[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // b[4i + j], 128-bit lane L: column 4L + j, rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88), c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xDD);
    const __m512i d0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88);
    const __m512i d1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(c0, d0, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(c0, d0, 0xDD);
    r[4 + j] = _mm512_shuffle_i32x4(c1, d1, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(c1, d1, 0xDD);
  }
}

bool tensor_finite(const TensorView<const std::uint16_t, 4>& t) {
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t h = 0; h < t.shape[1]; ++h)
      if (!values_finite_bf16(t.data + b * t.strides[0] + h * t.strides[1], t.strides[2], std::size_t(t.shape[2]),
                              std::size_t(t.shape[3])))
        return false;
  return true;
}

// One thread's buffers, 64-byte aligned.
struct Buffers {
  std::int64_t dp, dvp, nc, ndv;  // D and Dv rounded up (32, 16); chunks of 32 dims; tiles of 16 values
  std::uint16_t* qp;              // [kItemRows][dp] bf16: the item's query rows, zero-padded
  std::uint32_t* kt;              // [nc][4][16 pairs][16 keys]: K^T of a key block in pairs
  std::uint32_t* vp;              // [2][ndv][16 pairs][16 values]: V of a key block in pairs of keys
  float* s;                       // [kItemRows][kBlockKeys]: the item's scores of a key block
  std::uint16_t* pp;              // [3][kItemRows][kBlockKeys]: its weights in bf16 pieces
  float* ot;                      // [kItemRows][dvp]: the block's P V
  float* o;                       // [kItemRows][dvp]: the running outputs
  float* m;                       // [kItemRows] running maxima (log2 units)
  float* l;                       // [kItemRows][16] running sums, in 16 lanes each
  float* alpha;                   // [kItemRows] this block's rescale of each row
  std::unique_ptr<unsigned char, decltype(&std::free)> mem{nullptr, &std::free};

  explicit Buffers(const Problem& p) {
    dp = std::int64_t(hwy::RoundUpTo(std::size_t(p.s.D), 32));
    dvp = std::int64_t(hwy::RoundUpTo(std::size_t(p.s.Dv), 16));
    nc = dp / 32;
    ndv = dvp / 16;
    const std::size_t sizes[] = {std::size_t(kItemRows * dp * 2),
                                 std::size_t(nc * 4 * 256 * 4),
                                 std::size_t(2 * ndv * 256 * 4),
                                 std::size_t(kItemRows * kBlockKeys * 4),
                                 std::size_t(3 * kItemRows * kBlockKeys * 2),
                                 std::size_t(kItemRows * dvp * 4),
                                 std::size_t(kItemRows * dvp * 4),
                                 std::size_t(kItemRows * 4),
                                 std::size_t(kItemRows * 16 * 4),
                                 std::size_t(kItemRows * 4)};
    std::size_t total = 0;
    for (std::size_t z : sizes) total += (z + 63) / 64 * 64;
    mem.reset(static_cast<unsigned char*>(std::aligned_alloc(64, total)));
    if (!mem) throw std::bad_alloc();
    unsigned char* at = mem.get();
    void* ptrs[10];
    for (int i = 0; i < 10; ++i) {
      ptrs[i] = at;
      at += (sizes[i] + 63) / 64 * 64;
    }
    qp = static_cast<std::uint16_t*>(ptrs[0]);
    kt = static_cast<std::uint32_t*>(ptrs[1]);
    vp = static_cast<std::uint32_t*>(ptrs[2]);
    s = static_cast<float*>(ptrs[3]);
    pp = static_cast<std::uint16_t*>(ptrs[4]);
    ot = static_cast<float*>(ptrs[5]);
    o = static_cast<float*>(ptrs[6]);
    m = static_cast<float*>(ptrs[7]);
    l = static_cast<float*>(ptrs[8]);
    alpha = static_cast<float*>(ptrs[9]);
  }
};

// K^T of keys [k0, k0 + nk) (nk <= 64) in pairs: kt[(c * 4 + t) * 256 + kk * 16 + n] holds
// k[k0 + 16t + n][32c + 2kk .. + 1]; zero past the keys and past D.
JOMOIM_AMX_TARGET void pack_keys(const std::uint16_t* k, std::ptrdiff_t ldk, std::int64_t nk, std::int64_t depth,
                                 const Buffers& buf) {
  for (std::int64_t t = 0; t < 4; ++t) {
    for (std::int64_t c = 0; c < buf.nc; ++c) {
      __m512i r[16];
      const __mmask32 dm = first32(depth - 32 * c);
      for (std::int64_t n = 0; n < 16; ++n) {
        const std::int64_t key = 16 * t + n;
        r[n] = key < nk ? _mm512_maskz_loadu_epi16(dm, k + key * ldk + 32 * c) : _mm512_setzero_si512();
      }
      transpose16(r);
      std::uint32_t* dst = buf.kt + (c * 4 + t) * 256;
      for (int kk = 0; kk < 16; ++kk) _mm512_store_si512(dst + 16 * kk, r[kk]);
    }
  }
}

// V of keys [k0, k0 + nk) in pairs of keys: vp[(kc * ndv + t) * 256 + kk * 16 + n] holds
// v[32kc + 2kk][16t + n] | v[32kc + 2kk + 1][16t + n] << 16; zero past the keys and past Dv.
JOMOIM_AMX_TARGET void pack_values(const std::uint16_t* v, std::ptrdiff_t ldv, std::int64_t nk, std::int64_t dv,
                                   const Buffers& buf) {
  const __m512i idx0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i idx1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (std::int64_t kc = 0; kc < 2; ++kc) {
    for (std::int64_t kk = 0; kk < 16; ++kk) {
      const std::int64_t j = 32 * kc + 2 * kk;
      for (std::int64_t e = 0; e < buf.dvp; e += 32) {
        const __mmask32 em = first32(dv - e);
        const __m512i x = j < nk ? _mm512_maskz_loadu_epi16(em, v + j * ldv + e) : _mm512_setzero_si512();
        const __m512i y = j + 1 < nk ? _mm512_maskz_loadu_epi16(em, v + (j + 1) * ldv + e) : _mm512_setzero_si512();
        const __m512i lo = _mm512_unpacklo_epi16(x, y), hi = _mm512_unpackhi_epi16(x, y);
        const std::int64_t t = e / 16;
        _mm512_store_si512(buf.vp + (kc * buf.ndv + t) * 256 + kk * 16, _mm512_permutex2var_epi32(lo, idx0, hi));
        if (t + 1 < buf.ndv)
          _mm512_store_si512(buf.vp + (kc * buf.ndv + t + 1) * 256 + kk * 16, _mm512_permutex2var_epi32(lo, idx1, hi));
      }
    }
  }
}

// S = Q K^T for row tile rt: four 16 x 16 tiles of sums into buf.s (rows of kBlockKeys floats).
JOMOIM_AMX_TARGET void score_tiles(const Buffers& buf, std::int64_t rt) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const std::uint16_t* q = buf.qp + rt * 16 * buf.dp;
  for (std::int64_t c = 0; c < buf.nc; ++c) {
    _tile_loadd(4, q + 32 * c, buf.dp * 2);
    const std::uint32_t* kt = buf.kt + c * 4 * 256;
    _tile_loadd(5, kt, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(5, kt + 256, 64);
    _tile_dpbf16ps(1, 4, 5);
    _tile_loadd(5, kt + 512, 64);
    _tile_dpbf16ps(2, 4, 5);
    _tile_loadd(5, kt + 768, 64);
    _tile_dpbf16ps(3, 4, 5);
  }
  float* st = buf.s + rt * 16 * kBlockKeys;
  _tile_stored(0, st, kBlockKeys * 4);
  _tile_stored(1, st + 16, kBlockKeys * 4);
  _tile_stored(2, st + 32, kBlockKeys * 4);
  _tile_stored(3, st + 48, kBlockKeys * 4);
}

// The online softmax of one row tile's scores (rows whose visible keys in this block are vis[r],
// 0 for padding rows): the weights into buf.pp as `pieces` bf16 pieces, m, l and alpha updated.
JOMOIM_AMX_TARGET void softmax_tile(const Buffers& buf, std::int64_t r0, const std::int64_t* vis, float c, int pieces) {
  for (std::int64_t r = 0; r < 16; ++r) {
    const std::int64_t row = r0 + r;
    std::uint16_t* out = buf.pp + row * kBlockKeys;
    if (vis[r] <= 0) {  // nothing seen here: zero weights, the sums as they are
      for (int piece = 0; piece < pieces; ++piece)
        _mm512_store_si512(out + piece * kItemRows * kBlockKeys, _mm512_setzero_si512()),
            _mm512_store_si512(out + piece * kItemRows * kBlockKeys + 32, _mm512_setzero_si512());
      buf.alpha[row] = 1.0f;
      continue;
    }
    __m512 x[4];
    __mmask16 mk[4];
    const float* s = buf.s + row * kBlockKeys;
    const __m512 vc = _mm512_set1_ps(c), ninf = _mm512_set1_ps(kNegInf);
    for (int v = 0; v < 4; ++v) {
      mk[v] = first16(vis[r] - 16 * v);
      x[v] = _mm512_mask_mul_ps(ninf, mk[v], _mm512_load_ps(s + 16 * v), vc);
    }
    const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3])));
    const float m_old = buf.m[row], m_new = std::max(m_old, mx);
    const float alpha =
        m_old - m_new < kFloor ? 0.0f : _mm512_cvtss_f32(exp2_nonpositive(_mm512_set1_ps(m_old - m_new)));
    const __m512 vm = _mm512_set1_ps(m_new);
    __m512 sum = _mm512_setzero_ps();
    __m512 p[4];
    for (int v = 0; v < 4; ++v) {
      p[v] = _mm512_maskz_mov_ps(mk[v], exp2_nonpositive(_mm512_sub_ps(x[v], vm)));  // masked: NaN, then 0
      sum = _mm512_add_ps(sum, p[v]);
    }
    float* lv = buf.l + 16 * row;  // the row's sum in 16 lanes, added up at the end
    _mm512_store_ps(lv, _mm512_fmadd_ps(_mm512_load_ps(lv), _mm512_set1_ps(alpha), sum));
    buf.m[row] = m_new;
    buf.alpha[row] = alpha;
    // The weights in bf16: rounded to nearest even (one piece), or in three pieces, each the
    // high half of what the previous ones left (exact, so VCVTNE2PS2BF16 does not round them):
    // p = p1 + p2 + p3 exactly (amx_attention.hpp).
    for (int h = 0; h < 2; ++h) {
      __m512 lo = p[2 * h], hi = p[2 * h + 1];
      if (pieces == 1) {
        _mm512_store_si512(out + 32 * h, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        continue;
      }
      for (int piece = 0; piece < 3; ++piece) {
        const __m512 lo1 = piece < 2 ? high_half(lo) : lo, hi1 = piece < 2 ? high_half(hi) : hi;
        _mm512_store_si512(out + piece * kItemRows * kBlockKeys + 32 * h, (__m512i)_mm512_cvtne2ps_pbh(hi1, lo1));
        lo = _mm512_sub_ps(lo, lo1);
        hi = _mm512_sub_ps(hi, hi1);
      }
    }
  }
}

// P V of row tile rt over the block's nk keys into ot's rows (4 value tiles at a time): the tile
// unit's part, which the softmax of the next row tile overlaps (run_item).
JOMOIM_AMX_TARGET void value_tiles(const Buffers& buf, std::int64_t rt, std::int64_t nk, int pieces) {
  const std::int64_t nkc = (nk + 31) / 32, ldo = buf.dvp * 4;
  float* ot = buf.ot + rt * 16 * buf.dvp;
  for (std::int64_t t0 = 0; t0 < buf.ndv; t0 += 4) {
    const std::int64_t nt = std::min<std::int64_t>(4, buf.ndv - t0);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t kc = 0; kc < nkc; ++kc) {
      const std::uint16_t* a = buf.pp + rt * 16 * kBlockKeys + 32 * kc;
      _tile_loadd(4, a, kBlockKeys * 2);
      if (pieces > 1) _tile_loadd(6, a + kItemRows * kBlockKeys, kBlockKeys * 2);
      if (pieces > 2) _tile_loadd(7, a + 2 * kItemRows * kBlockKeys, kBlockKeys * 2);
      const std::uint32_t* vb = buf.vp + (kc * buf.ndv + t0) * 256;
#define JOMOIM_AMX_PV(T)                     \
  if (T < nt) {                              \
    _tile_loadd(5, vb + T * 256, 64);        \
    if (pieces > 2) _tile_dpbf16ps(T, 7, 5); \
    if (pieces > 1) _tile_dpbf16ps(T, 6, 5); \
    _tile_dpbf16ps(T, 4, 5);                 \
  }
      JOMOIM_AMX_PV(0)
      JOMOIM_AMX_PV(1)
      JOMOIM_AMX_PV(2)
      JOMOIM_AMX_PV(3)
#undef JOMOIM_AMX_PV
    }
    float* o = ot + 16 * t0;
    _tile_stored(0, o, ldo);
    if (nt > 1) _tile_stored(1, o + 16, ldo);
    if (nt > 2) _tile_stored(2, o + 32, ldo);
    if (nt > 3) _tile_stored(3, o + 48, ldo);
  }
}

// O = alpha O + (P V) for rows [r0, r1).
JOMOIM_AMX_TARGET void rescale_rows(const Buffers& buf, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t row = r0; row < r1; ++row) {
    const __m512 a = _mm512_set1_ps(buf.alpha[row]);
    float* o = buf.o + row * buf.dvp;
    const float* pv = buf.ot + row * buf.dvp;
    for (std::int64_t e = 0; e < buf.dvp; e += 16)
      _mm512_store_ps(o + e, _mm512_fmadd_ps(_mm512_load_ps(o + e), a, _mm512_load_ps(pv + e)));
  }
}

// One work item: rows [i0, i0 + n) of head h of batch b.
JOMOIM_AMX_TARGET void run_item(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t n,
                                const Buffers& buf) {
  const AttentionShape& s = p.s;
  const std::int64_t hk = h / (s.Hq / s.Hkv);
  const int pieces = p.bf16_weights ? 1 : 3;
  const float c = float(double(s.scale) * 1.4426950408889634);  // scores in log2 units
  // The query rows, zero-padded to dp and to kItemRows rows.
  const std::uint16_t* q = p.q16.data + b * p.q.strides[0] + h * p.q.strides[1] + i0 * p.q.strides[2];
  for (std::int64_t r = 0; r < kItemRows; ++r) {
    std::uint16_t* dst = buf.qp + r * buf.dp;
    for (std::int64_t e = 0; e < buf.dp; e += 32)
      _mm512_storeu_si512(dst + e, r < n ? _mm512_maskz_loadu_epi16(first32(s.D - e), q + r * p.q.strides[2] + e)
                                         : _mm512_setzero_si512());
  }
  for (std::int64_t r = 0; r < kItemRows; ++r) buf.m[r] = kNegInf;
  std::memset(buf.l, 0, std::size_t(kItemRows * 16) * 4);
  std::memset(buf.o, 0, std::size_t(kItemRows * buf.dvp) * 4);

  std::int64_t seen[kItemRows];  // keys each row sees (0 for padding rows)
  std::int64_t kmax = 0;
  for (std::int64_t r = 0; r < kItemRows; ++r) {
    seen[r] = r < n ? p.visible_keys(b, i0 + r) : 0;
    kmax = std::max(kmax, seen[r]);
  }
  const std::uint16_t* k = p.k16.data + b * p.k.strides[0] + hk * p.k.strides[1];
  const std::uint16_t* v = p.v16.data + b * p.v.strides[0] + hk * p.v.strides[1];
  const std::int64_t ntiles = (n + 15) / 16;
  for (std::int64_t k0 = 0; k0 < kmax; k0 += kBlockKeys) {
    const std::int64_t nk = std::min(kBlockKeys, kmax - k0);
    pack_keys(k + k0 * p.k.strides[2], p.k.strides[2], nk, s.D, buf);
    pack_values(v + k0 * p.v.strides[2], p.v.strides[2], nk, s.Dv, buf);
    // The scores of all the row tiles that see a key of the block back to back; then each row
    // tile's softmax (AVX-512) and P V (tiles), so that the tile unit multiplies one row tile's
    // weights while the vector units compute the next one's; then the outputs' rescale.
    std::int64_t vis[kItemRows];
    std::int64_t rt0 = ntiles;  // the first row tile that sees a key here (rows see more keys further down)
    for (std::int64_t r = 0; r < kItemRows; ++r) {
      vis[r] = std::clamp<std::int64_t>(seen[r] - k0, 0, nk);
      if (vis[r] > 0) rt0 = std::min(rt0, r / 16);
    }
    for (std::int64_t rt = rt0; rt < ntiles; ++rt) score_tiles(buf, rt);
    for (std::int64_t rt = rt0; rt < ntiles; ++rt) {
      softmax_tile(buf, rt * 16, vis + rt * 16, c, pieces);
      value_tiles(buf, rt, nk, pieces);  // the tiles work on it while the next softmax runs
    }
    rescale_rows(buf, rt0 * 16, ntiles * 16);
  }
  // out = O / l and the lse; zeros and -inf for rows that saw no key.
  for (std::int64_t r = 0; r < n; ++r) {
    const float l = _mm512_reduce_add_ps(_mm512_load_ps(buf.l + 16 * r)), inv = l == 0 ? 0.0f : 1.0f / l;
    float* o = p.out.data + b * p.out.strides[0] + h * p.out.strides[1] + (i0 + r) * p.out.strides[2];
    const float* acc = buf.o + r * buf.dvp;
    if (p.out.strides[3] == 1) {
      for (std::int64_t e = 0; e < s.Dv; e += 16)
        _mm512_mask_storeu_ps(o + e, first16(s.Dv - e), _mm512_mul_ps(_mm512_load_ps(acc + e), _mm512_set1_ps(inv)));
    } else {
      for (std::int64_t e = 0; e < s.Dv; ++e) o[e * p.out.strides[3]] = acc[e] * inv;
    }
    if (p.has_lse) p.lse(b, h, i0 + r) = l == 0 ? kNegInf : buf.m[r] * 0.6931471805599453f + std::log(l);
  }
}

// A static object, not a local one: GCC's _tile_loadconfig tells the compiler that it reads 8
// bytes, so the stores that fill a local configuration can be dropped as dead.
constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

JOMOIM_AMX_TARGET void load_tile_config() { _tile_loadconfig(&kTileConfig); }

JOMOIM_AMX_TARGET void release_tiles() { _tile_release(); }

}  // namespace

bool amx_fits(const Problem& p) {
  const AttentionShape& s = p.s;
  if (p.dtype != Dtype::bf16 || p.has_bias || p.has_probs) return false;
  if (s.D < 1 || s.D > kMaxDepth || s.Dv < 1 || s.Dv > kMaxDepth || s.Nq < 32 || s.Nk < 1) return false;
  if (p.q.strides[3] != 1 || p.k.strides[3] != 1 || p.v.strides[3] != 1) return false;
  return tensor_finite(p.q16) && tensor_finite(p.k16) && tensor_finite(p.v16);
}

void amx_attention(const Problem& p, int threads) {
  const AttentionShape& s = p.s;
  const std::int64_t blocks = (s.Nq + kItemRows - 1) / kItemRows;
  const std::int64_t items = s.B * s.Hq * blocks;
#pragma omp parallel num_threads(threads)
  {
    const Buffers buf(p);
    load_tile_config();
    // Later query blocks see more keys under the causal rule: they go first.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t u = 0; u < items; ++u) {
      const std::int64_t heads = s.B * s.Hq, blk = blocks - 1 - u / heads, bh = u % heads;
      const std::int64_t i0 = blk * kItemRows;
      run_item(p, bh / s.Hq, bh % s.Hq, i0, std::min(kItemRows, s.Nq - i0), buf);
    }
    release_tiles();
  }
}

// ---- 8-bit keys on AMX-INT8 (amx_attention.hpp) ----

#define JOMOIM_AMX_Q8_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16,amx-int8")))

JOMOIM_AMX_Q8_TARGET bool amx_q8_prepare(const float* q, std::int64_t ldq, std::int64_t D, std::int8_t* pieces,
                                         float* colscale) {
  for (std::int64_t r = 0; r < 4; ++r) {
    const float* qr = q + r * ldq;
    __m512 amax = _mm512_setzero_ps();
    for (std::int64_t d = 0; d < D; d += 16) {
      const __m512 x = _mm512_loadu_ps(qr + d);
      if (_mm512_fpclass_ps_mask(x, 0x99) != 0) return false;  // NaN or +-inf
      amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
    }
    // s_r in float32, the pieces against that same value: q = s_r * sum_p a_p 2^-7p + e holds
    // with the s_r the sums are multiplied by. In float64, 8 values at a time, each piece the
    // nearest integer (ties to even) and the rest times 2^7.
    const float s = _mm512_reduce_max_ps(amax) / 127.0f;
    const __m512d inv = _mm512_set1_pd(s > 0 ? 1.0 / double(s) : 0.0);
    for (std::int64_t d = 0; d < D; d += 8) {
      __m512d x = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(qr + d)), inv);
      for (std::int64_t piece = 0; piece < 4; ++piece) {
        const __m512d a = _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // d..d + 3 and d + 4..d + 7: four bytes each at (d / 4) * 64 + (piece * 4 + r) * 4.
        const __m128i bytes = _mm256_cvtepi32_epi8(_mm512_cvtpd_epi32(a));
        const std::int32_t lo = _mm_cvtsi128_si32(bytes), hi = _mm_extract_epi32(bytes, 1);
        std::memcpy(pieces + (d / 4) * 64 + (piece * 4 + r) * 4, &lo, 4);
        std::memcpy(pieces + (d / 4 + 1) * 64 + (piece * 4 + r) * 4, &hi, 4);
        x = _mm512_mul_pd(_mm512_sub_pd(x, a), _mm512_set1_pd(128.0));
      }
    }
    for (int piece = 0; piece < 4; ++piece) colscale[piece * 4 + r] = std::ldexp(s, -7 * piece);
  }
  return true;
}

namespace {
// Depth of one A tile: the widest of 64, 32, 16 bytes that divides the key block.
std::int64_t q8_chunk(std::int64_t block) { return block % 64 == 0 ? 64 : block % 32 == 0 ? 32 : 16; }

// Tiles 0, 1: the int32 sums C of two key blocks in turn (16 keys x 16 columns); 4, 5 their A
// (16 keys x chunk bytes), 6, 7 their B (chunk / 4 rows of 16 columns x 4 bytes).
struct Q8Configs {
  TileConfig by_chunk[3];  // chunk 16, 32, 64
  Q8Configs() {
    for (int i = 0; i < 3; ++i) {
      TileConfig& c = by_chunk[i];
      c = TileConfig{};
      c.palette = 1;
      const std::uint16_t chunk = std::uint16_t(16 << i);
      for (int t : {0, 1}) c.colsb[t] = 64, c.rows[t] = 16;
      for (int t : {4, 5}) c.colsb[t] = chunk, c.rows[t] = 16;
      for (int t : {6, 7}) c.colsb[t] = 64, c.rows[t] = std::uint8_t(chunk / 4);
    }
  }
};
const Q8Configs kQ8Configs;

// Tile C = sum over the key block at e0 of its chunks, A (16 K rows) x B (the query pieces), then
// stored to cb. A macro: GCC's tile intrinsics paste the tile number into the assembly.
#define JOMOIM_Q8_BLOCK_TILE(C, A, B, k, D, pieces, e0, block, chunk, cb) \
  do {                                                                    \
    _tile_zero(C);                                                        \
    for (std::int64_t e = (e0); e < (e0) + (block); e += (chunk)) {       \
      _tile_loadd(A, (k) + e, (D));                                       \
      _tile_loadd(B, (pieces) + (e / 4) * 64, 64);                        \
      _tile_dpbssd(C, A, B);                                              \
    }                                                                     \
    _tile_stored(C, (cb), 64);                                            \
  } while (0)
}  // namespace

JOMOIM_AMX_Q8_TARGET void amx_q8_configure(std::int64_t block) {
  _tile_loadconfig(&kQ8Configs.by_chunk[std::countr_zero(std::uint64_t(q8_chunk(block))) - 4]);  // 16, 32, 64
}
void amx_q8_release() { release_tiles(); }

JOMOIM_AMX_Q8_TARGET void amx_q8_scores4(const std::int8_t* pieces, const float* colscale, const std::int8_t* k,
                                         const float* scales, std::int64_t D, std::int64_t block, std::int64_t groups,
                                         std::int64_t prefetch, float* s, std::int64_t lds, std::int32_t* cbuf) {
  const std::int64_t nb = D / block, chunk = q8_chunk(block);
  const __m512 cs = _mm512_loadu_ps(colscale);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int8_t* kg = k + g * 16 * D;
    const float* sg = scales + g * 16 * nb;
    __m512 acc[16];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    // Block b + 1 goes to the tiles before block b's sums are read, in the other C tile.
    JOMOIM_Q8_BLOCK_TILE(0, 4, 6, kg, D, pieces, 0, block, chunk, cbuf);
    for (std::int64_t b = 0; b < nb; ++b) {
      // The keys `prefetch` rows ahead, every line (the hardware prefetchers alone left K from
      // memory at about half the bandwidth), spread over the blocks so the line fill buffers are
      // not all taken at once; and their scales, 16 nb floats = nb lines, one a block.
      for (std::int64_t kk = b * 16 / nb; kk < (b + 1) * 16 / nb; ++kk)
        for (std::int64_t c = 0; c < D; c += 64) __builtin_prefetch(kg + (prefetch + kk) * D + c, 0, 3);
      __builtin_prefetch(sg + prefetch * nb + b * 16, 0, 3);
      if (b + 1 < nb) {
        if ((b + 1) & 1)
          JOMOIM_Q8_BLOCK_TILE(1, 5, 7, kg, D, pieces, (b + 1) * block, block, chunk, cbuf + 256);
        else
          JOMOIM_Q8_BLOCK_TILE(0, 4, 6, kg, D, pieces, (b + 1) * block, block, chunk, cbuf);
      }
      const std::int32_t* cb = cbuf + (b & 1) * 256;
      for (std::int64_t kk = 0; kk < 16; ++kk)
        acc[kk] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + kk * 16)), _mm512_set1_ps(sg[kk * nb + b]),
                                  acc[kk]);
    }
    __m512i t[16];
    for (int kk = 0; kk < 16; ++kk) t[kk] = _mm512_castps_si512(_mm512_mul_ps(acc[kk], cs));
    transpose16(t);  // t[p * 4 + r]: piece p of row r, over the 16 keys
    for (int r = 0; r < 4; ++r) {
      const __m512 small = _mm512_add_ps(_mm512_castsi512_ps(t[12 + r]), _mm512_castsi512_ps(t[8 + r]));
      const __m512 v = _mm512_add_ps(_mm512_add_ps(small, _mm512_castsi512_ps(t[4 + r])), _mm512_castsi512_ps(t[r]));
      _mm512_storeu_ps(s + r * lds + g * 16, v);
    }
  }
}

}  // namespace jomoim::detail
