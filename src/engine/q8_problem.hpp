// q8_problem.hpp — an attention_q8kv call after validation (internal).
#pragma once

#include <cstddef>
#include <cstdint>

#include "jomoim/engine/quant.hpp"
#include "problem.hpp"

namespace jomoim::detail {

struct Q8Problem {
  Problem p;  // q, out, options, shape; p.k and p.v are stand-ins that must not be read
  ConstQ8Tensor4 k, v;
  // attention_q4kv: the packed q4 bytes of k and v ([.., D / 2]); k.values and v.values are
  // then null (the kernel unpacks each tile to int8 first) and k.scales, v.scales the q4 scales.
  const std::uint8_t* k4 = nullptr;
  const std::uint8_t* v4 = nullptr;
};

// Target-independent sizes (the plan must not depend on the SIMD target).
inline constexpr std::int64_t kQ8Rows = 8;        // query rows per work item
inline constexpr std::int64_t kQ8Tile = 256;      // keys per tile
inline constexpr std::int64_t kQ8MinSplit = 512;  // keys per split range, at least

struct Q8Plan {
  int threads = 1;
  std::int64_t group = 1;        // Hq / Hkv
  std::int64_t rows_per_bg = 0;  // group * Nq: the rows that read one (b, g)
  std::int64_t chunks = 0;       // ceil(rows_per_bg / kQ8Rows) items per (b, g)
  std::int64_t items = 0;
  std::int64_t splits = 1;
  // K and V rows read ahead (each row once) by an item of one query row (make_q8_plan sets it
  // by the CPU's vendor), and of several (which go through their keys about three times slower,
  // so fewer rows are the same lead time).
  std::int64_t prefetch_one_row = 48, prefetch_rows = 32;
  // Grouped rows (R > 1) prefetch into L1 rather than L2 (make_q8_plan sets it on a Zen 5).
  bool prefetch_near_rows = false;
  // Four rows' scores on AMX-INT8 (amx_attention.hpp; make_q8_plan: the CPU has it and the
  // target pin allows the tiles).
  bool amx_scores = false;
  std::int64_t prefetch_tiles = 64;  // K rows read ahead there (one line per 128 bytes)
  template <std::size_t R>
  std::int64_t prefetch_for() const {
    return R == 1 ? prefetch_one_row : prefetch_rows;
  }
  std::int64_t units() const { return items * splits; }
};

// Validates like attention() (throws Error) and builds the problem.
Q8Problem make_q8_problem(ConstTensor4 q, ConstQ8Tensor4 k, ConstQ8Tensor4 v, const Tensor4* out,
                          const AttentionOptions& options);
Q8Problem make_q4_problem(ConstTensor4 q, ConstQ4Tensor4 k, ConstQ4Tensor4 v, const Tensor4* out,
                          const AttentionOptions& options);

}  // namespace jomoim::detail
