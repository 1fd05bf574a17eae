// attention_cases.hpp — the one table of attention cases: shapes and options as data, each with
// a readable name and the programs that run it.
//
// Who reads it: tests/test_attention.cpp (every case marked kTest, against the float64
// reference on every SIMD target), `jomoim bench --quick` (its self-check and its timing table)
// and bench/attention_gbench.cpp (its shapes and the check it makes before timing). A case says
// what to compute and in what memory (layouts); each program draws its own random inputs
// (the tests from a seed of the name). What is not here: inputs, tolerances, timing, and
// anything of the engine's public API (this target links only jomoim::core, for Notation).
//
// The FLOP count of a case is jomoim::attention_flops (2*B*Hq*Nq*Nk*(D+Dv), halved for causal),
// in the engine, the one place it is written.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "jomoim/core/notation.hpp"

namespace jomoim::cases {

using I64 = std::int64_t;

// The letters of docs/design.md: q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv].
struct Dims {
  I64 B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 8, Dv = 8;
};

// How a logical [d0, d1, d2, d3] (or rank-3) tensor lies in its buffer; the view handed to the
// engine reads it through strides, never through a copy.
struct Layout {
  std::string name = "contig";
  std::array<int, 4> order{0, 1, 2, 3};  // logical dims in memory order, outermost first
  I64 pad = 0;                           // unused elements after each dimension (gaps)
  I64 elem_stride = 1;                   // stride of the innermost memory dimension
  unsigned reverse = 0;                  // bit d: logical dim d has a negative stride
  unsigned broadcast = 0;                // bit d: logical dim d has stride 0 (inputs only)
};

namespace layouts {
inline Layout contig() { return {}; }
inline Layout padded() {
  Layout l;
  l.name = "padded";
  l.pad = 3;
  return l;
}
// [B, N, H, D] memory viewed as [B, H, N, D] (the usual "qkv interleaved" layout).
inline Layout bnhd() {
  Layout l;
  l.name = "bnhd";
  l.order = {0, 2, 1, 3};
  return l;
}
// [B, H, D, N] memory: the natural column-matrix storage of the 3b1b notation.
inline Layout cols() {
  Layout l;
  l.name = "cols";
  l.order = {0, 1, 3, 2};
  return l;
}
inline Layout reversed() {
  Layout l;
  l.name = "reversed";
  l.reverse = 0b1100;
  l.pad = 1;
  return l;
}
// Only the sequence dimension runs backwards: rows keep unit element stride (negative row stride).
inline Layout flipped() {
  Layout l;
  l.name = "flipped";
  l.reverse = 0b0100;
  return l;
}
inline Layout strided() {
  Layout l;
  l.name = "strided";
  l.elem_stride = 2;
  return l;
}
inline Layout bcast_heads() {
  Layout l;
  l.name = "bcasth";
  l.broadcast = 0b10;
  return l;
}
inline Layout bcast_batch() {
  Layout l;
  l.name = "bcastb";
  l.broadcast = 0b01;
  return l;
}
inline Layout scrambled() {
  Layout l;
  l.name = "scrambled";
  l.order = {2, 0, 3, 1};
  l.pad = 2;
  l.reverse = 0b0101;
  return l;
}
// Rank 3 (lse).
inline Layout lse_strided() {
  Layout l;
  l.name = "strided";
  l.elem_stride = 3;
  l.pad = 1;
  return l;
}
inline Layout lse_reversed() {
  Layout l;
  l.name = "reversed";
  l.reverse = 0b110;
  return l;
}
inline Layout lse_transposed() {
  Layout l;
  l.name = "transposed";
  l.order = {2, 0, 1, 3};
  return l;
}
}  // namespace layouts

enum class BiasKind { none, full, rows, keys, heads };  // shapes: see bias_shape()
enum class BiasMask { none, random, prefix };           // -inf entries: random incl. whole rows; or keys j < 0.6 Nk
enum class KeyLens { none, mixed, full, zero };         // see key_lengths_of()

const char* name(BiasKind k);
const char* name(BiasMask m);
const char* name(KeyLens k);

// Which programs run a case (a bit set).
enum Use : unsigned {
  kTest = 1u << 0,            // tests/test_attention.cpp, Attention/Table.MatchesReference
  kQuickCheck = 1u << 1,      // jomoim bench --quick: the self-check of every SIMD target
  kQuickTiming = 1u << 2,     // jomoim bench --quick: the timing table
  kGbench = 1u << 3,          // attention_gbench: BM_attention (Nq > 1), BM_attention_decode (Nq = 1)
  kGbenchBackward = 1u << 4,  // attention_gbench: BM_attention_backward
  kGbenchCheck = 1u << 5,     // attention_gbench: the check against the reference before timing
};

struct Case {
  std::string name;  // unique; the gtest name; made from the fields (see the table)
  Dims n;
  bool causal = false;
  std::optional<float> scale;
  Notation notation = Notation::paper;
  BiasKind bias = BiasKind::none;
  BiasMask bias_mask = BiasMask::none;
  KeyLens key_lengths = KeyLens::none;
  float amp = 1;    // q and k uniform in [-amp, amp); amp = 55 puts scores in the +-1000s
  float v_amp = 1;  // v uniform in [-v_amp, v_amp)
  Layout q_layout, k_layout, v_layout, bias_layout, out_layout, probs_layout;
  Layout lse_layout;
  bool want_lse = true, want_probs = true;
  std::vector<int> threads{1, 2};  // the tests run each of these (0: OpenMP's default)
  unsigned uses = kTest;

  bool used_by(unsigned use) const { return (uses & use) != 0; }
  // Every tensor contiguous in its notation's own order ([B, H, N, E] in the paper's, [B, H, E,
  // N] in 3b1b's) and the bias contiguous: the only memory `jomoim bench` lays out.
  bool natural_memory() const;
};

// A case with the given dimensions and every other setting at its default.
inline Case make(Dims n) {
  Case c;
  c.n = n;
  return c;
}

inline std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// [B, Hq, Nq, Nk] with the broadcast dimensions of the kind set to 1.
inline std::array<I64, 4> bias_shape(BiasKind k, const Dims& n) {
  switch (k) {
    case BiasKind::rows:
      return {1, 1, n.Nq, n.Nk};
    case BiasKind::keys:
      return {n.B, 1, 1, n.Nk};
    case BiasKind::heads:
      return {1, n.Hq, 1, 1};
    default:
      return {n.B, n.Hq, n.Nq, n.Nk};
  }
}

// Per-batch key lengths of a kind (empty for none). `below(n)` is the caller's random integer in
// [0, n) (0 when n <= 0); it is called twice per batch for `mixed`, in this order, so that a
// seeded caller gets the same lengths every time.
//   mixed: batch 0 random in [1, Nk]; then 0, Nk, 1, Nk - 1, random in [0, Nk], repeating.
template <class Below>
std::vector<I64> key_lengths_of(KeyLens k, I64 B, I64 Nk, Below&& below) {
  std::vector<I64> lengths;
  switch (k) {
    case KeyLens::none:
      break;
    case KeyLens::full:
      lengths.assign(std::size_t(B), Nk);
      break;
    case KeyLens::zero:
      lengths.assign(std::size_t(B), 0);
      break;
    case KeyLens::mixed:
      for (I64 b = 0; b < B; ++b) {
        const I64 pattern[] = {1 + below(Nk), 0, Nk, std::min<I64>(1, Nk), std::max<I64>(Nk - 1, 0), below(Nk + 1)};
        lengths.push_back(b == 0 ? std::min<I64>(pattern[0], Nk) : pattern[b % 6]);
      }
      break;
  }
  return lengths;
}

// The table, in a fixed order (built once).
const std::vector<Case>& all();
// The cases a program runs, in table order.
std::vector<Case> used_by(unsigned use);
// The case of that name; throws std::out_of_range naming it when there is none.
const Case& named(std::string_view name);

}  // namespace jomoim::cases
