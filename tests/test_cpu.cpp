// The engine's CPUID answers (src/engine/cpu.hpp) against what Linux reports in /proc/cpuinfo:
// the vendor and the family that choose the q8 decode's read-ahead (Q8Plan), and the feature
// flags that choose kernels. Skipped where /proc/cpuinfo is missing or not an x86 one.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/cpu.hpp"

namespace {

// The first value of `key` in /proc/cpuinfo ("" if absent).
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (name == key) return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "";
}

bool has_flag(const std::string& flag) {
  std::istringstream flags(" " + cpuinfo("flags") + " ");
  for (std::string f; flags >> f;)
    if (f == flag) return true;
  return false;
}

}  // namespace

TEST(Cpu, FamilyAndVendorMatchProcCpuinfo) {
  const std::string family = cpuinfo("cpu family"), vendor = cpuinfo("vendor_id");
  if (family.empty() || vendor.empty()) GTEST_SKIP() << "no x86 /proc/cpuinfo";
  EXPECT_EQ(jomoim::detail::cpu_family(), std::stoi(family));
  EXPECT_EQ(jomoim::detail::cpu_is_amd(), vendor == "AuthenticAMD");
}

TEST(Cpu, FeaturesMatchProcCpuinfo) {
  if (cpuinfo("flags").empty()) GTEST_SKIP() << "no x86 /proc/cpuinfo";
  // The kernel lists a feature only where the OS supports it too, as cpu.cpp requires.
  const bool bf16 = has_flag("avx512_bf16") && has_flag("avx512f") && has_flag("avx512bw") && has_flag("avx512vl");
  EXPECT_EQ(jomoim::detail::cpu_has_avx512_bf16(), bf16);
  if (!has_flag("amx_tile") || !has_flag("amx_bf16")) EXPECT_FALSE(jomoim::detail::cpu_has_amx_bf16());
  if (!has_flag("amx_int8")) EXPECT_FALSE(jomoim::detail::cpu_has_amx_int8());
}
