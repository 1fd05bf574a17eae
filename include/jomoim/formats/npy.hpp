// jomoim/formats/npy.hpp — NumPy .npy files of float32, read strictly and written atomically.
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

#include "jomoim/core/tensor.hpp"

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

// The same strictness, for readers of 16-bit inputs too (`jomoim attend`): '<f4' (float32,
// into f32), '<f2' (IEEE float16) and '<u2' (uint16, the bit patterns of bfloat16, which NumPy
// has no type for) into u16; descr is the file's type string. Everything else is refused.
struct NpyAnyArray {
  std::vector<std::int64_t> shape;
  std::string descr;  // "<f4", "<f2" or "<u2"
  std::vector<float> f32;
  std::vector<std::uint16_t> u16;
};
NpyAnyArray parse_npy_any(std::span<const std::byte> bytes, const std::string& name = "<memory>");
NpyAnyArray read_npy_any(const std::filesystem::path& path);

// Writes a version 1.0 .npy file of shape `shape` from the C-order floats at `data` (may be
// null when the shape has no elements), with the header NumPy itself writes (padded so that
// the data starts at a multiple of 64 bytes). Atomic: the bytes go to a temporary file in
// the same directory, which is renamed over `path` only once complete; on failure the
// temporary file is removed, `path` is left as it was, and Error is thrown.
void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> shape, const float* data);
// The same for an NpyArray; throws Error when a.data does not hold shape-product elements.
void write_npy(const std::filesystem::path& path, const NpyArray& a);

// ------------------------------------------------------------------------------ partial access
// For callers that hold only part of an array in memory (`jomoim attend --distributed`, where
// each MPI rank reads its own rows). Same strictness as read_npy: the header is checked in full
// and the file's size must be exactly what it describes.

// Where a file's float32 data lives: its shape, element count, and the byte offset of element 0.
struct NpyInfo {
  std::vector<std::int64_t> shape;
  std::uint64_t count = 0;        // shape product
  std::uint64_t data_offset = 0;  // bytes from the start of the file to the first float
};

// Parses the preamble and header of a file of `file_size` bytes whose first bytes are `bytes`
// (at least the preamble and header; the whole file works too). Never reads outside `bytes`.
// Throws Error for the same files parse_npy refuses, including a size that does not match
// the shape.
NpyInfo parse_npy_info(std::span<const std::byte> bytes, std::uint64_t file_size, const std::string& name = "<memory>");

// Reads only the preamble and header of the regular file at `path`; throws Error (naming it).
NpyInfo read_npy_info(const std::filesystem::path& path);

// Reads `count` floats starting at element `first` (C order) of the file that `info` describes
// into `out`; throws Error when the range lies outside the array or on I/O errors (a file that
// got shorter since read_npy_info included). Thread-safe: opens its own descriptor.
void read_npy_elements(const std::filesystem::path& path, const NpyInfo& info, std::uint64_t first, std::uint64_t count,
                       float* out);

// The preamble and header write_npy writes for `shape` (its length is a multiple of 64; the
// data follows directly). For writers that fill a file in parts. Throws Error when the shape
// is too large.
std::string npy_header(std::span<const std::int64_t> shape);

}  // namespace jomoim
