// file_test_util.hpp — test-only helpers for tests that write and read files: a temporary
// directory that removes itself with everything in it, a listing that shows exactly what a call
// left behind (the "nothing half-written" checks), and whole-file reads and writes.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace jomoim::test {

// A fresh directory under the system's temporary directory, named jomoim-<tag>-XXXXXX.
class TempDir {
 public:
  explicit TempDir(std::string_view tag) {
    std::string templ = (std::filesystem::temp_directory_path() / ("jomoim-" + std::string(tag) + "-XXXXXX")).string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The names in the directory (or in its subdirectory sub), sorted.
  std::vector<std::string> listing(const std::filesystem::path& sub = {}) const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_ / sub))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

// The whole file as bytes (empty when it cannot be opened: callers that need it to exist check
// that first).
inline std::string read_file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file_bytes(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace jomoim::test
