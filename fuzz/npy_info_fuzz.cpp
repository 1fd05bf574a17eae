// npy_info_fuzz.cpp — libFuzzer target for the .npy header-only parser (parse_npy_info in
// src/formats/npy.cpp), which `jomoim attend --distributed` uses before its ranged reads.
//
// Differential: on any bytes, parse_npy_info(bytes, size) must accept exactly the files
// parse_npy accepts, with the same shape, an element count equal to the array's, and data that
// ends exactly at the end of the file. Given only a prefix of the file (as read_npy_info reads
// it), it must give the same answer or throw Error, and never read past the prefix. Messages
// are one non-empty line.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "jomoim/formats/npy.hpp"

namespace {

void check_message(const jomoim::Error& e) {
  if (std::strchr(e.what(), '\n') != nullptr || e.what()[0] == '\0') __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> all(reinterpret_cast<const std::byte*>(data), size);
  std::optional<jomoim::NpyInfo> info;
  std::optional<jomoim::NpyArray> array;
  try {
    info = jomoim::parse_npy_info(all, size, "fuzz.npy");
  } catch (const jomoim::Error& e) {
    check_message(e);
  }
  try {
    array = jomoim::parse_npy(all, "fuzz.npy");
  } catch (const jomoim::Error& e) {
    check_message(e);
  }
  if (info.has_value() != array.has_value()) __builtin_trap();
  if (info) {
    if (info->shape != array->shape || info->count != array->data.size()) __builtin_trap();
    if (info->data_offset + info->count * sizeof(float) != size) __builtin_trap();
  }
  // A prefix (in its own buffer, so ASan sees a read past it): cut where the last byte says.
  if (size > 0) {
    const std::size_t cut = std::size_t(data[size - 1]) * size / 256;
    const std::vector<std::byte> prefix(all.begin(), all.begin() + std::ptrdiff_t(cut));
    try {
      const jomoim::NpyInfo p = jomoim::parse_npy_info(prefix, size, "fuzz.npy");
      if (!info || p.shape != info->shape || p.count != info->count || p.data_offset != info->data_offset)
        __builtin_trap();
    } catch (const jomoim::Error& e) {
      check_message(e);
    }
  }
  return 0;
}
