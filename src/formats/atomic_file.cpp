// See formats/atomic_file.hpp.
#include "jomoim/formats/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "jomoim/core/tensor.hpp"

namespace jomoim::detail {

bool write_all(int fd, const void* buf, std::size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<std::size_t>(n, std::size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= std::size_t(w);
  }
  return true;
}

bool write_floats_le(int fd, const float* data, std::uint64_t count) {
  if constexpr (std::endian::native == std::endian::little) {
    return write_all(fd, data, std::size_t(count * sizeof(float)));
  } else {  // swap each float's bytes, a block at a time
    std::uint32_t block[4096];
    for (std::uint64_t i = 0; i < count;) {
      const std::size_t n = std::size_t(std::min<std::uint64_t>(count - i, 4096));
      for (std::size_t j = 0; j < n; ++j) {
        std::uint32_t u;
        std::memcpy(&u, data + i + j, 4);
        block[j] = __builtin_bswap32(u);
      }
      if (!write_all(fd, block, n * 4)) return false;
      i += n;
    }
    return true;
  }
}

void write_file_atomic(const std::filesystem::path& path, const std::string& label,
                       const std::function<const char*(int fd)>& body) {
  auto fail = [&](const std::string& problem) { throw Error(label + ": cannot write: " + problem); };
  if (!path.has_filename()) fail("not a file name");
  // Hidden, unique per process and call.
  static std::atomic<unsigned> serial{0};
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const std::string stem = "." + path.filename().string().substr(0, 100) + ".tmp-" + std::to_string(::getpid()) + "-";
  std::filesystem::path tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = dir / (stem + std::to_string(serial++));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100))
      fail("cannot create a temporary file in '" + dir.string() + "': " + std::strerror(errno));
  }
  auto give_up = [&](const char* step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(std::string(step) + ": " + std::strerror(err));
  };
  if (const char* step = body(fd)) give_up(step);
  // On disk before the rename makes it visible, so a crash leaves the old file or the new one.
  if (::fsync(fd) != 0) give_up("flushing to disk");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) give_up("closing the file");
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("replacing the file");
}

void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
  write_file_atomic(path, path.string(), [&](int fd) -> const char* {
    return write_all(fd, text.data(), text.size()) ? nullptr : "writing the text";
  });
}

}  // namespace jomoim::detail
