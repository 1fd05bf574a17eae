// npy_fuzz.cpp — libFuzzer target for the .npy reader (src/formats/npy.cpp).
//
// Any input must either parse into a consistent array or throw jomoim::Error with a one-line
// message. A crash, a sanitizer report, a hang, an uncaught exception of another type (e.g.
// std::bad_alloc from trusting a size in the header) or a broken invariant is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "jomoim/formats/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const jomoim::NpyArray a = jomoim::parse_npy({reinterpret_cast<const std::byte*>(data), size}, "fuzz.npy");
    // An accepted file holds exactly the elements its shape describes, within the input.
    std::size_t n = 1;
    for (const std::int64_t d : a.shape) {
      if (d < 0) __builtin_trap();
      n *= std::size_t(d);  // cannot overflow: parse_npy bounds the element count
    }
    if (n != a.data.size() || n * sizeof(float) > size) __builtin_trap();
  } catch (const jomoim::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr || e.what()[0] == '\0') __builtin_trap();
  }
  return 0;
}
