// plan.hpp — how one attention call is cut into work units (internal, target-independent).
//
// A work item is one batch b, one key/value head g, and one block of at most block_q query
// rows of the query heads that read g (the GQA group). When Nq >= block_q a block holds
// consecutive rows of one head; when Nq is small (decode) a block stacks the Nq rows of
// several heads of the group, so those heads share every pass over K and V.
// When there are too few items to keep the threads busy, each item's keys are split into
// `splits` ranges computed independently and merged by log-sum-exp afterwards.
// The plan depends only on the shape and the thread count, so results are bitwise
// reproducible for a given thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include <hwy/aligned_allocator.h>

#include "problem.hpp"

namespace jomoim::detail {

// Tile sizes: query rows per block x keys per tile. 64 x 256 is the default. 64 rows: at D = 64
// as fast as 128 or 256 rows non-causal and 5-20 % faster causal (less work on the diagonal).
// 256 keys: the output accumulator is reloaded and rescaled once per tile, so longer tiles
// amortise it; 3-8 % faster than 64 keys at (1,12,1024..4096,64) on two threads, 3-4 % causal,
// 512 keys no faster (bench/NOTES.md section 9). A tile's last keys are not computed past the
// block's last visible key, so causal blocks do no more work with longer tiles.
// Wide blocks, 256 x 64, serve long non-causal problems with D >= 128: each pass over K and V
// (4 MiB per head at N = 4096, D = 128, beyond L2) then serves 4x more query rows; measured
// 8 % faster at (1,8,4096,128) on 2 threads, 7 % at (1,8,2048,128) on one, as 256 x 32; 64
// keys per tile instead of 32 gained 3-4 % more once these blocks accumulate O^T, 128 keys
// nothing (bench/NOTES.md).
inline constexpr std::int64_t kBlockQ = 64;
inline constexpr std::int64_t kBlockK = 256;
inline constexpr std::int64_t kWideBlockQ = 256;
inline constexpr std::int64_t kWideBlockK = 64;
// Narrow tiles, 32 x 32, serve short causal problems (Nq <= 512), where the diagonal tiles
// (half masked) are a large share of the work: measured 15 % faster at (1,12,128,64), 2-5 %
// at (4,8,256,64) and (1,12,512,64), and no faster from N = 1024 on.
inline constexpr std::int64_t kNarrowBlockQ = 32;
inline constexpr std::int64_t kNarrowBlockK = 32;
// A key range handed to one thread on the decode path is at least this many keys, so that
// merging partial results stays cheap next to computing them.
inline constexpr std::int64_t kMinKeysPerSplit = 256;

struct Plan {
  int threads = 1;
  std::int64_t block_q = kBlockQ;     // kBlockQ, kWideBlockQ or kNarrowBlockQ (with its keys)
  std::int64_t group = 1;             // Hq / Hkv
  std::int64_t heads_per_block = 1;   // > 1 only when Nq < block_q (stacked heads)
  std::int64_t blocks_per_head = 1;   // ceil(Nq / block_q) when heads_per_block == 1
  std::int64_t blocks_per_group = 0;  // row blocks per (b, g)
  std::int64_t items = 0;             // B * Hkv * blocks_per_group
  std::int64_t splits = 1;            // key ranges per item
  std::int64_t units() const { return items * splits; }
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline Plan make_plan(const Problem& p, int threads) {
  Plan plan;
  plan.threads = std::max(1, threads);
  const AttentionShape& s = p.s;
  plan.group = s.Hq / s.Hkv;
  if (s.B == 0 || s.Hq == 0 || s.Nq == 0) return plan;  // nothing to compute
  if (!p.causal && s.D >= 128 && s.Nq >= kWideBlockQ && s.Nk >= 512) plan.block_q = kWideBlockQ;
  if (p.causal && s.Nq <= 512) plan.block_q = kNarrowBlockQ;
  if (s.Nq >= plan.block_q) {
    plan.blocks_per_head = ceil_div(s.Nq, plan.block_q);
    plan.blocks_per_group = plan.group * plan.blocks_per_head;
  } else {
    plan.heads_per_block = std::min<std::int64_t>(plan.group, std::max<std::int64_t>(1, plan.block_q / s.Nq));
    plan.blocks_per_group = ceil_div(plan.group, plan.heads_per_block);
  }
  plan.items = s.B * s.Hkv * plan.blocks_per_group;
  // Split keys when there are fewer than 4 items per thread (enough for dynamic balance), but
  // never when probabilities are requested (that pass needs each row's final softmax).
  const std::int64_t want = 4 * std::int64_t(plan.threads);
  if (plan.threads > 1 && plan.items < want && !p.has_probs) {
    const std::int64_t by_keys = std::max<std::int64_t>(1, s.Nk / kMinKeysPerSplit);
    plan.splits = std::clamp<std::int64_t>(ceil_div(want, plan.items), 1, by_keys);
  }
  return plan;
}

// Per-thread scratch memory, grown on demand and kept for later calls on the same thread
// (OpenMP reuses its threads), so the hot path allocates nothing after the first call.
class Scratch {
 public:
  float* reserve(std::size_t floats) {
    if (floats > capacity_) {
      mem_ = hwy::AllocateAligned<float>(floats);
      if (!mem_) throw Error("attention: out of memory for " + std::to_string(floats) + " floats of scratch");
      capacity_ = floats;
    }
    return mem_.get();
  }
  static Scratch& for_this_thread() {
    static thread_local Scratch s;
    return s;
  }

 private:
  hwy::AlignedFreeUniquePtr<float[]> mem_;
  std::size_t capacity_ = 0;
};

// The first exception thrown by any of a parallel loop's bodies, rethrown after the loop (an
// exception must not leave an OpenMP region): for (...) errors.run([&] { ... }); errors.rethrow();
class FirstError {
 public:
  template <class F>
  void run(F&& body) {
    try {
      body();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::mutex mutex_;
};

// Partial results of key splits (the decode path): for unit u and row r of its block, the
// running maximum m (base 2), the sum l and the unnormalised output acc over that unit's keys.
// Kept per calling thread by the kernels and only grown, so repeated calls allocate nothing.
struct SplitPartials {
  std::vector<float> m, l, acc;  // [units, rows], [units, rows], [units, rows, dvp]
  std::size_t rows = 0, dvp = 0;
  void reserve(std::int64_t units, std::size_t rows_per_unit, std::size_t dvp_) {
    rows = rows_per_unit;
    dvp = dvp_;
    m.resize(std::size_t(units) * rows);
    l.resize(std::size_t(units) * rows);
    acc.resize(std::size_t(units) * rows * dvp);
  }
  // Row r of the splits [unit0, unit0 + splits) merged by log-sum-exp, in split order
  // (deterministic): M = max_s m_s, l = sum_s l_s 2^(m_s - M), out = sum_s acc_s 2^(m_s - M)
  // (dvp floats, unnormalised). Returns M and sets *l_out.
  float merge(std::int64_t unit0, std::int64_t splits, std::int64_t r, float* out, float* l_out) const {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    float M = kNegInf;
    for (std::int64_t sp = 0; sp < splits; ++sp) M = std::max(M, m[std::size_t(unit0 + sp) * rows + std::size_t(r)]);
    std::fill(out, out + dvp, 0.0f);
    float lsum = 0;
    for (std::int64_t sp = 0; sp < splits; ++sp) {
      const std::size_t at = std::size_t(unit0 + sp) * rows + std::size_t(r);
      const float* a = acc.data() + at * dvp;
      if (l[at] == 0) {  // no key seen, or only -inf scores: a is 0, or NaN where 0 x NaN
        for (std::size_t e = 0; e < dvp; ++e) out[e] += a[e];
        continue;
      }
      // A split with l != 0 and m = -inf saw only NaN scores (l is NaN): weight 1 keeps it.
      const float w = m[at] == kNegInf ? 1.0f : std::exp2(m[at] - M);
      lsum += l[at] * w;
      for (std::size_t e = 0; e < dvp; ++e) out[e] += a[e] * w;
    }
    *l_out = lsum;
    return M;
  }
};

}  // namespace jomoim::detail
