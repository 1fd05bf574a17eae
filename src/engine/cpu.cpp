// cpu.cpp — CPUID and the OS's grant of the AMX tile state (cpu.hpp).
#include "cpu.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

namespace jomoim::detail {

namespace {

// CPUID.(7,0):EDX, or 0 where there is none.
unsigned cpuid7_edx() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return d;
#else
  return 0;
#endif
}

bool os_grants_amx() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // asm/prctl.h, XSAVE feature 18
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
  static const bool has = [] {
#if defined(__x86_64__) || defined(__i386__)
    if (!cpu_has_avx512_bf16() || !__builtin_cpu_supports("avx512dq")) return false;
    const unsigned d = cpuid7_edx();
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    return amx_bf16 && amx_tile && os_grants_amx();
#else
    return false;
#endif
  }();
  return has;
}

bool cpu_has_amx_int8() {
  static const bool has = cpu_has_amx_bf16() && ((cpuid7_edx() >> 25) & 1) != 0;  // EDX.AMX-INT8
  return has;
}

bool cpu_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
#else
  return false;
#endif
}

int cpu_family() {
#if defined(__x86_64__) || defined(__i386__)
  static const int family = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base = (a >> 8) & 0xF;  // CPUID.1:EAX, the displayed family (base + extended)
    return int(base == 0xF ? base + ((a >> 20) & 0xFF) : base);
  }();
  return family;
#else
  return 0;
#endif
}

}  // namespace jomoim::detail
