// jomoim/formats/safetensors.hpp — safetensors files: memory-mapped and validated on read, written
// atomically.
//
// The format (https://github.com/huggingface/safetensors): 8 bytes, a little-endian u64 N;
// N bytes of UTF-8 JSON, an object mapping each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} plus an optional
// "__metadata__" object of strings; then the data section, in which each tensor occupies
// bytes [begin, end) in C order, little-endian.
//
// Reading trusts nothing in the file. `SafetensorsFile::open` / `from_memory` check, and refuse
// with a one-line jomoim::Error "<file>: <problem>":
//   - a file shorter than 8 bytes; N above 100,000,000 (the reference implementation's limit)
//     or above the bytes that follow it;
//   - a header that does not start with '{', is not valid UTF-8 JSON, is not an object, repeats
//     a key in any object (JSON parsers usually keep one of them silently), or nests deeper
//     than a header can;
//   - an entry that is not an object with exactly "dtype" (one of the DType names below),
//     "shape" (array of non-negative integers) and "data_offsets" ([begin, end], begin <= end);
//   - end - begin != numel × dtype size (the product is overflow-checked);
//   - a range that ends past the data section, ranges that overlap, and — as the reference
//     implementation does — ranges that leave a hole in the data section or bytes after the
//     last tensor: every byte of the data section belongs to exactly one tensor. So any file
//     accepted here is also accepted by Hugging Face's `safetensors`;
//   - "__metadata__" that is not an object of string values.
//
// Memory: `open` maps the file read-only (mmap, MAP_PRIVATE) and copies nothing; `raw` and
// F32 `load_f32` are views into the mapping. The mapping is shared (reference-counted) by every
// copy of the SafetensorsFile and by every FloatArray taken from it, so it lives until the last
// of them is destroyed. Truncating the file on disk while it is mapped makes later reads of
// the cut pages crash (SIGBUS), as with any mapped file: do not rewrite a checkpoint in place
// while it is loaded (write_safetensors replaces files by rename, which is safe).
//
// Thread-safety: a SafetensorsFile is immutable after construction; all const members may be
// called from any number of threads at once. write_safetensors calls on different paths are
// independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jomoim/core/tensor.hpp"

namespace jomoim {

// The element types of the format, with their names as written in headers.
enum class DType { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

// "BOOL", "U8", ..., "F32", ...: the name a header uses for `t`.
std::string_view dtype_name(DType t);
// Bytes per element (1 for BOOL and the F8 types).
std::size_t dtype_size(DType t);
// The DType a header name stands for; false when `name` is not one of them (names are
// case-sensitive, as in the format).
bool parse_dtype(std::string_view name, DType* out);

// One tensor of a file, as its header describes it (after validation).
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // empty for a scalar (1 element)
  std::size_t begin = 0, end = 0;   // byte range inside the data section (after the header)
  // Product of the shape (1 for a scalar, 0 if any dimension is 0). Cannot overflow for a
  // validated entry: numel × dtype size equals end - begin.
  std::int64_t numel() const;
};

// A float32 array: either points straight into the mapped file (F32, 4-byte aligned: zero copy)
// or owns a converted copy (F16, BF16 -> F32; F32 that is misaligned -> copied). keepalive holds
// the mapping or the copy; the pointer stays valid as long as any copy of this struct lives.
// (For a file made with from_memory, a zero-copy array points into the caller's bytes, which
// the caller keeps alive; keepalive is then empty.) `data` may be null when numel() is 0.
struct FloatArray {
  const float* data = nullptr;
  std::vector<std::int64_t> shape;
  bool zero_copy = false;
  std::shared_ptr<const void> keepalive;
  std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // An empty file object: no tensors, no metadata, name "" (to be assigned from open later).
  SafetensorsFile() = default;

  // Maps the file read-only and validates everything (see the top of this header); throws
  // jomoim::Error "<path>: <problem>", also for I/O errors and files that are not regular files.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Same validation over bytes the caller keeps alive for the life of the returned object and
  // of every FloatArray taken from it (tests, fuzzing). No copy. `name` is used in messages.
  static SafetensorsFile from_memory(std::span<const std::byte> bytes, std::string name = "<memory>");

  // Every tensor, sorted by begin offset (ties — zero-size tensors — by name).
  const std::vector<TensorInfo>& tensors() const;
  // The tensor called `name`, or nullptr if absent. O(log n).
  const TensorInfo* find(std::string_view name) const;
  // The "__metadata__" strings (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const;
  // The bytes of tensor `t` (one of tensors()), inside the mapping: little-endian, C order.
  std::span<const std::byte> raw(const TensorInfo& t) const;
  // The tensor called `name` as float32. F32 comes without a copy when its bytes are 4-byte
  // aligned in memory (always, for files written by write_safetensors or by Hugging Face's
  // library, whose data sections start 8-byte aligned); F16 and BF16 are converted exactly
  // (every value, including subnormals, ±0, ±inf and NaN payloads, has an exact float32).
  // Throws Error "<file>: no tensor named 'x'" if absent, and refuses the other dtypes (F64,
  // integers, BOOL, F8) with a message naming the dtype: they are not converted silently.
  FloatArray load_f32(std::string_view name) const;
  // Size of the whole file (or of the bytes given to from_memory).
  std::size_t file_size() const;
  // The path as given to open, or the name given to from_memory.
  const std::string& name() const;
  // Offset of the data section from the start of the file: 8 + header length.
  std::size_t data_offset() const;

 private:
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::string name,
                               std::shared_ptr<const void> keepalive);

  std::string name_;
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> keepalive_;  // the mapping (open), or empty (from_memory)
  std::size_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// One tensor for write_safetensors.
struct TensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* data = nullptr;  // numel(shape) floats, written as F32 little-endian
};

// Writes a safetensors file atomically (temp file in the same folder + rename): header JSON with
// dtype/shape/data_offsets, "__metadata__" if given, header padded with spaces to a multiple of 8,
// tensors laid out in the given order, 8-byte aligned data section start.
// Refuses (Error "<path>: cannot write: <problem>", with `path` left as it was) empty or
// repeated names, the name "__metadata__", negative dimensions, sizes that overflow, null data
// for a non-empty tensor, names or metadata that are not valid UTF-8, and I/O errors.
// `data` is read only; the caller keeps it alive during the call.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace jomoim
