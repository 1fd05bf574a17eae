// safetensors_fuzz.cpp — libFuzzer target for the safetensors reader (src/formats/safetensors.cpp).
//
// Any input must either parse into a consistent file or throw jomoim::Error with a one-line
// message. For an accepted file every tensor's bytes are touched (raw), every F32/F16/BF16
// tensor is loaded, and the invariants the reader promises are checked: ranges inside the data
// section, sorted, tiling it exactly, byte counts equal to numel × dtype size. A crash, a
// sanitizer report, a hang, an exception of another type (std::bad_alloc from trusting a size,
// nlohmann's own exceptions escaping) or a broken invariant is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "jomoim/formats/safetensors.hpp"

namespace {

bool one_line(const char* what) { return what[0] != '\0' && std::strchr(what, '\n') == nullptr; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const jomoim::SafetensorsFile f =
        jomoim::SafetensorsFile::from_memory({reinterpret_cast<const std::byte*>(data), size}, "fuzz.st");
    if (f.data_offset() < 8 || f.data_offset() > size || f.file_size() != size) __builtin_trap();
    std::size_t pos = 0;
    volatile unsigned char sink = 0;
    for (const jomoim::TensorInfo& t : f.tensors()) {
      if (t.begin != pos || t.end < t.begin) __builtin_trap();  // sorted, no hole, no overlap
      pos = t.end;
      if (f.find(t.name) != &t) __builtin_trap();
      const std::int64_t n = t.numel();
      if (n < 0 || std::uint64_t(n) * jomoim::dtype_size(t.dtype) != t.end - t.begin) __builtin_trap();
      const auto raw = f.raw(t);
      if (raw.size() != t.end - t.begin) __builtin_trap();
      for (const std::byte b : raw) sink = sink ^ static_cast<unsigned char>(b);
      try {
        const jomoim::FloatArray a = f.load_f32(t.name);
        if (a.numel() != n || a.shape != t.shape) __builtin_trap();
        for (std::int64_t i = 0; i < n; ++i) sink = sink ^ static_cast<unsigned char>(a.data[i] != a.data[i]);
      } catch (const jomoim::Error& e) {
        // Only the dtypes that do not convert are refused.
        const bool floaty =
            t.dtype == jomoim::DType::F32 || t.dtype == jomoim::DType::F16 || t.dtype == jomoim::DType::BF16;
        if (floaty || !one_line(e.what())) __builtin_trap();
      }
    }
    if (f.data_offset() + pos != size) __builtin_trap();  // the tensors cover the data section
  } catch (const jomoim::Error& e) {
    if (!one_line(e.what())) __builtin_trap();
  }
  return 0;
}
