// plan.hpp — how one attention call is cut into work units (internal, target-independent).
//
// A work item is one batch b, one key/value head g, and one block of at most kBlockQ query
// rows of the query heads that read g (the GQA group). When Nq >= kBlockQ a block holds
// consecutive rows of one head; when Nq is small (decode) a block stacks the Nq rows of
// several heads of the group, so those heads share every pass over K and V.
// When there are too few items to keep the threads busy, each item's keys are split into
// `splits` ranges computed independently and merged by log-sum-exp afterwards.
// The plan depends only on the shape and the thread count, so results are bitwise
// reproducible for a given thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include <hwy/aligned_allocator.h>

#include "attention/problem.hpp"

namespace jomoim::detail {

// Tile sizes. 64 x 64 keeps the score tile (16 KiB) and a packed K^T tile (16 KiB at D = 64)
// in L1 next to each other on Zen 4 (32 KiB L1d, 1 MiB L2); measured on this machine kind.
inline constexpr std::int64_t kBlockQ = 64;
inline constexpr std::int64_t kBlockK = 64;
// A key range handed to one thread on the decode path is at least this many keys, so that
// merging partial results stays cheap next to computing them.
inline constexpr std::int64_t kMinKeysPerSplit = 256;

struct Plan {
  int threads = 1;
  std::int64_t group = 1;            // Hq / Hkv
  std::int64_t heads_per_block = 1;  // > 1 only when Nq < kBlockQ (stacked heads)
  std::int64_t blocks_per_head = 1;  // ceil(Nq / kBlockQ) when heads_per_block == 1
  std::int64_t blocks_per_group = 0; // row blocks per (b, g)
  std::int64_t items = 0;            // B * Hkv * blocks_per_group
  std::int64_t splits = 1;           // key ranges per item
  std::int64_t units() const { return items * splits; }
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline Plan make_plan(const Problem& p, int threads) {
  Plan plan;
  plan.threads = std::max(1, threads);
  const AttentionShape& s = p.s;
  plan.group = s.Hq / s.Hkv;
  if (s.B == 0 || s.Hq == 0 || s.Nq == 0) return plan;  // nothing to compute
  if (s.Nq >= kBlockQ) {
    plan.blocks_per_head = ceil_div(s.Nq, kBlockQ);
    plan.blocks_per_group = plan.group * plan.blocks_per_head;
  } else {
    plan.heads_per_block = std::min<std::int64_t>(plan.group, std::max<std::int64_t>(1, kBlockQ / s.Nq));
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

}  // namespace jomoim::detail
