// jomoim/npy.hpp — NumPy .npy files of float32, read strictly and written atomically.
//
// This is how the command line (and any outside tool) hands tensors to the engine. It is not a
// general .npy library: it reads exactly one kind of file — little-endian float32 ('<f4'),
// C order, format version 1.0 or 2.0 — and refuses everything else with a one-line
// jomoim::Error naming the file and the problem ("q.npy: data type '<f8' (float64) is not
// supported; expected '<f4' (little-endian float32)"), so that a wrong file is never
// silently reinterpreted. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "jomoim/tensor.hpp"

namespace jomoim {

// A float32 array in C order: shape (empty for a scalar) and shape-product elements.
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// Parses a whole .npy file held in memory. `name` is used in error messages (the file name).
// Never reads outside `bytes`; throws Error for any file that is not exactly a valid
// '<f4' C-order array (header, shape and data length are all checked).
NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& name = "<memory>");

// Reads and parses the file at `path`; throws Error (naming the file) on I/O or format errors.
NpyArray read_npy(const std::filesystem::path& path);

// Writes a version 1.0 .npy file of shape `shape` from the C-order floats at `data` (may be
// null when the shape has no elements), with the header NumPy itself writes (padded so that
// the data starts at a multiple of 64 bytes). Atomic: the bytes go to a temporary file in
// the same directory, which is renamed over `path` only once complete; on failure the
// temporary file is removed, `path` is left as it was, and Error is thrown.
void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> shape,
               const float* data);
// The same for an NpyArray; throws Error when a.data does not hold shape-product elements.
void write_npy(const std::filesystem::path& path, const NpyArray& a);

}  // namespace jomoim
