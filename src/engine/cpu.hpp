// cpu.hpp — what this CPU has, and what the OS lets this process use: the one place the engine
// reads CPUID. Each answer is computed once. The SIMD target switch (simd.cpp) and the kernels
// outside Highway's dispatch (bf16_dot.cpp, amx_attention.cpp) decide from these.
#pragma once

namespace jomoim::detail {

// AVX512_BF16, with AVX512F, BW and VL.
bool cpu_has_avx512_bf16();
// AMX-TILE and AMX-BF16, with what cpu_has_avx512_bf16 needs and AVX512DQ, and the kernel lets
// this process use the tile state (Linux asks for it once: arch_prctl ARCH_REQ_XCOMP_PERM).
bool cpu_has_amx_bf16();
// AMX-INT8 as well as what cpu_has_amx_bf16 needs.
bool cpu_has_amx_int8();
// An AMD CPU: tuning that differs by vendor (the q8 decode's prefetch distance).
bool cpu_is_amd();
// The x86 family CPUID reports (base plus extended: AMD's Zen 3 and 4 are 0x19, Zen 5 0x1A); 0
// where there is none.
int cpu_family();

}  // namespace jomoim::detail
