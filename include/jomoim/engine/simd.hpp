// jomoim/engine/simd.hpp — which SIMD instruction set the kernels run on.
//
// The library is compiled for several x86 targets (SSE4, AVX2, AVX-512 ...) through Highway and
// picks the best one the CPU supports at run time. Tests and benchmarks can pin one target to
// check every code path on one machine.
#pragma once

#include <string>
#include <vector>

namespace jomoim {

// Targets compiled into the library that this CPU can run, best first (e.g. "AVX3", "AVX2",
// "SSE4", "EMU128"). On CPUs with AVX512_BF16 the first is "AVX3_BF16": Highway's AVX3 plus the
// VDPBF16PS kernel for the Q·K^T products of bf16 inputs (the default there); pinning "AVX3"
// runs the same AVX3 code with bf16 inputs widened to float32 instead.
std::vector<std::string> simd_targets();

// The target the kernels dispatch to now.
std::string active_simd_target();

// Restricts dispatch to the named target (one of simd_targets(), in any case; "AVX512" names
// AVX3); "" restores the default.
// Throws Error for an unknown name. Not thread-safe: call it between attention calls.
void set_simd_target(const std::string& name);
}  // namespace jomoim
