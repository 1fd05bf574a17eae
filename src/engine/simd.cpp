// simd.cpp — naming and pinning the Highway target the kernels dispatch to.
#include "jomoim/engine/simd.hpp"

#include <cctype>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

namespace {
std::int64_t pinned_target = 0;  // 0: no pin, the best target the CPU supports

// Highway's name for a target as users write it: any case, and AVX512 / AVX-512 for AVX3.
std::string canonical_target_name(const std::string& name) {
  std::string up;
  for (char c : name) up += char(std::toupper(static_cast<unsigned char>(c)));
  if (up == "AVX512" || up == "AVX-512") return "AVX3";
  return up;
}
}  // namespace

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;
  hwy::SetSupportedTargetsForTest(0);  // ask the CPU, not a previous pin ...
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) names.push_back(hwy::TargetName(t));
  hwy::SetSupportedTargetsForTest(pinned_target);  // ... then put the pin back
  return names;
}

std::string active_simd_target() {
  hwy::SetSupportedTargetsForTest(pinned_target);
  const std::int64_t t = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(t & -t);  // lowest set bit = best target
}

void set_simd_target(const std::string& name) {
  std::int64_t chosen = 0;
  if (!name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    const std::string wanted = canonical_target_name(name);
    for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
      if (wanted == hwy::TargetName(t)) chosen = t;
    if (chosen == 0) {
      std::string known;
      for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
        known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(t);
      hwy::SetSupportedTargetsForTest(pinned_target);
      throw Error("simd target: '" + name + "' is not available on this CPU (available: " + known + ")");
    }
  }
  pinned_target = chosen;
  hwy::SetSupportedTargetsForTest(pinned_target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace jomoim
