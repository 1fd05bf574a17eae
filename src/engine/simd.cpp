// simd.cpp — naming and pinning the Highway target the kernels dispatch to.
#include "jomoim/engine/simd.hpp"

#include <cctype>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include "amx_attention.hpp"
#include "bf16_dot.hpp"
#include "cpu.hpp"
#include "jomoim/core/tensor.hpp"

namespace jomoim {

namespace {
std::int64_t pinned_target = 0;  // 0: no pin, the best target the CPU supports
// "AVX3_BF16" is not a Highway target: it is AVX3 with the VDPBF16PS score kernel of bf16 inputs
// (bf16_dot.hpp), listed first on CPUs with AVX512_BF16; pinning "AVX3" (or any other target)
// turns that kernel off, so both paths can be run and compared on one machine.
constexpr const char* kBf16Target = "AVX3_BF16";
bool bf16_dot_off = false;
// "AMX_BF16" is AVX3_BF16 with bf16 prefill on AMX tiles (amx_attention.hpp), listed first on
// CPUs with AMX-BF16; pinning "AVX3_BF16" turns the tiles off (and "AVX3" both).
constexpr const char* kAmxTarget = "AMX_BF16";
bool amx_off = false;

bool bf16_target_available() {
  if (!detail::cpu_has_avx512_bf16()) return false;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
    if (t == HWY_AVX3) return true;
  return false;
}

bool amx_target_available() { return bf16_target_available() && detail::cpu_has_amx_bf16(); }

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
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (t == HWY_AVX3 && amx_target_available()) names.push_back(kAmxTarget);
    if (t == HWY_AVX3 && bf16_target_available()) names.push_back(kBf16Target);
    names.push_back(hwy::TargetName(t));
  }
  hwy::SetSupportedTargetsForTest(pinned_target);  // ... then put the pin back
  return names;
}

namespace detail {
bool bf16_dot_enabled() { return !bf16_dot_off && cpu_has_avx512_bf16(); }
bool amx_enabled() { return !amx_off && cpu_has_amx_bf16(); }  // amx_off covers every pin but AMX_BF16
}  // namespace detail

std::string active_simd_target() {
  hwy::SetSupportedTargetsForTest(pinned_target);
  const std::int64_t t = hwy::SupportedTargets() & HWY_TARGETS;
  const std::int64_t best = t & -t;  // lowest set bit = best target
  if (best == HWY_AVX3 && detail::amx_enabled()) return kAmxTarget;
  if (best == HWY_AVX3 && detail::bf16_dot_enabled()) return kBf16Target;
  return hwy::TargetName(best);
}

void set_simd_target(const std::string& name) {
  std::int64_t chosen = 0;
  bool bf16_off = false, tiles_off = false;
  if (!name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    const std::string wanted = canonical_target_name(name);
    if (wanted == kAmxTarget && amx_target_available()) {
      chosen = HWY_AVX3;
    } else if (wanted == kBf16Target && bf16_target_available()) {
      chosen = HWY_AVX3;
      tiles_off = true;
    } else {
      for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
        if (wanted == hwy::TargetName(t)) chosen = t;
      bf16_off = true;
    }
    if (chosen == 0) {
      std::string known;
      for (const std::string& t : simd_targets()) known += (known.empty() ? "" : ", ") + t;
      hwy::SetSupportedTargetsForTest(pinned_target);
      throw Error("simd target: '" + name + "' is not available on this CPU (available: " + known + ")");
    }
  }
  pinned_target = chosen;
  bf16_dot_off = bf16_off;
  amx_off = bf16_off || tiles_off;
  hwy::SetSupportedTargetsForTest(pinned_target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace jomoim
