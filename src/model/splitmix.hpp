// SplitMix64 (Steele, Lea and Flood, 2014), the one random-bit generator of the model part:
// sampling (Sampler), weight initialisation (train.cpp) and the trainer's window picks
// (trainer.cpp). Fixed arithmetic, so every platform gives the same stream for a seed, unlike
// the standard library's implementation-defined distributions. Internal to the model part.
#pragma once

#include <cstdint>

namespace jomoim::splitmix {

// A well-mixed 64-bit hash of z: SplitMix64's output for a state that has just reached z - gamma.
inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The next 64 bits of the stream whose state is `state` (advanced).
inline std::uint64_t next(std::uint64_t& state) {
  const std::uint64_t z = mix(state);
  state += 0x9E3779B97F4A7C15ull;
  return z;
}

// The next double in [0, 1): the top 53 bits of next().
inline double uniform(std::uint64_t& state) { return static_cast<double>(next(state) >> 11) * 0x1.0p-53; }

}  // namespace jomoim::splitmix
