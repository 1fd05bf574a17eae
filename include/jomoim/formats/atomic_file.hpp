// Writing files atomically: the contents go to a hidden temporary file next to the target
// (same file system, so rename() is atomic), are flushed to disk, and only then replace the
// target. A failure at any step removes the temporary file and leaves the target as it was.
// Shared by every writer of the project (.npy, safetensors, config.json, trainer.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace jomoim::detail {

// body(fd) writes the contents; it returns nullptr on success, or the name of the step that
// failed ("writing the data") with errno set. Throws Error "<label>: cannot write: <step>:
// <reason>". The temporary file gets mode 0666 minus the umask, as any new file.
void write_file_atomic(const std::filesystem::path& path, const std::string& label,
                       const std::function<const char*(int fd)>& body);
// The same for a string's bytes.
void write_text_atomic(const std::filesystem::path& path, const std::string& text);

// write(2) until done (retrying EINTR); false on error.
bool write_all(int fd, const void* data, std::size_t n);
// `count` floats as little-endian float32 (byte-swapped on big-endian hosts).
bool write_floats_le(int fd, const float* data, std::uint64_t count);

}  // namespace jomoim::detail
