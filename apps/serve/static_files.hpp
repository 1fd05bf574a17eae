// serve/static_files.hpp — which file under the asset folder a URL path names, if any.
//
// The explorer page is served from a folder of the repository (web/). A request path may name
// only a regular file inside that folder: "." and ".." segments, hidden names (".git"),
// backslashes, NUL bytes and paths that leave the folder through a symbolic link are refused.
// The path given here is already percent-decoded once (by the HTTP layer), so "%2e%2e" arrives
// as ".." and is refused; a doubly encoded "%252e" arrives as the literal name "%2e", which is
// looked up as such (and not found).
// Thread safety: pure functions (they read the file system).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace jomoim::serve {

// root must be canonical (std::filesystem::canonical). "/" and paths ending in "/" name
// index.html in that folder. Returns the canonical file path, or nullopt: not found, not a
// regular file, or refused (the caller answers 404 either way, revealing nothing).
std::optional<std::filesystem::path> resolve_asset(const std::filesystem::path& root, std::string_view url_path);

// The Content-Type for a file name by its extension (text types with charset=utf-8);
// application/octet-stream for unknown ones.
std::string content_type_for(const std::filesystem::path& file);

}  // namespace jomoim::serve
