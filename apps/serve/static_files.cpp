// Mapping URL paths to files of the asset folder. See static_files.hpp.
#include "static_files.hpp"

#include <algorithm>
#include <cctype>
#include <system_error>

namespace jomoim::serve {

namespace fs = std::filesystem;

std::optional<fs::path> resolve_asset(const fs::path& root, std::string_view url_path) {
  if (url_path.empty() || url_path.front() != '/') return std::nullopt;
  if (url_path.find('\0') != std::string_view::npos || url_path.find('\\') != std::string_view::npos)
    return std::nullopt;
  std::string rel(url_path.substr(1));
  if (rel.empty() || rel.back() == '/') rel += "index.html";
  // Every segment must be a plain, visible name: no "", ".", "..", ".hidden".
  fs::path relative;
  std::size_t start = 0;
  while (start <= rel.size()) {
    const std::size_t end = std::min(rel.find('/', start), rel.size());
    const std::string_view seg(rel.data() + start, end - start);
    if (seg.empty() || seg.front() == '.') return std::nullopt;
    relative /= std::string(seg);
    start = end + 1;
  }
  std::error_code ec;
  const fs::path file = fs::canonical(root / relative, ec);  // follows every link
  if (ec) return std::nullopt;
  // Inside root after resolving links: root's components are a prefix of file's.
  auto [r, f] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (r != root.end() || f == file.end()) return std::nullopt;
  if (!fs::is_regular_file(file, ec) || ec) return std::nullopt;
  return file;
}

std::string content_type_for(const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".html" || ext == ".htm") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json") return "application/json; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".txt" || ext == ".md") return "text/plain; charset=utf-8";
  if (ext == ".woff2") return "font/woff2";
  return "application/octet-stream";
}

}  // namespace jomoim::serve
