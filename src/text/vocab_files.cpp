// vocab_files.cpp — Hugging Face's vocab.json + merges.txt: reading (strict, one-line errors
// naming the file) and atomic writing (see jomoim/text/tokenizer.hpp).
//
// vocab.json is read with nlohmann's SAX interface rather than into a DOM: it sees duplicate
// keys (a DOM keeps only the last), stops at the first value that is not a token id, and does
// not build a 50257-node tree just to copy it. Both readers are fed untrusted bytes and are
// fuzzed (fuzz/bpe_fuzz.cpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "jomoim/text/tokenizer.hpp"
#include "tokenizer_impl.hpp"

namespace jomoim {
namespace {

using text::quote;

// ------------------------------------------------------------------------------ vocab.json

// Collects {"token": id, ...} in file order; anything else stops the parse with a message.
class VocabReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::pair<std::string, std::uint64_t>> entries;
  std::string problem;  // set when a handler refused the input

  bool null() override { return refuse("null"); }
  bool boolean(bool) override { return refuse("a boolean"); }
  bool number_integer(number_integer_t v) override { return refuse("the negative number " + std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ != 1) return refuse("a number");
    if (v > std::uint64_t(std::numeric_limits<std::int32_t>::max()))
      return fail("token " + quote(key_) + " has the id " + std::to_string(v) + ", too large for a token id");
    entries.emplace_back(std::move(key_), v);
    return true;
  }
  bool number_float(number_float_t, const string_t& s) override { return refuse("the number " + s); }
  bool string(string_t& s) override { return refuse("the string " + quote(s)); }
  bool binary(binary_t&) override { return refuse("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ != 0) return refuse("an object");
    depth_ = 1;
    return true;
  }
  bool key(string_t& k) override {
    if (!seen_.insert(k).second) return fail("token " + quote(k) + " appears twice");
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    depth_ = 2;  // done: anything after the object is a parse error from the lexer
    return true;
  }
  bool start_array(std::size_t) override { return refuse("an array"); }
  bool end_array() override { return refuse("an array"); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = e.what();
    if (const auto p = what.find("] "); what.starts_with("[json.exception") && p != std::string::npos)
      what = what.substr(p + 2);
    return fail("malformed JSON (" + what + ")");
  }

 private:
  bool fail(std::string message) {
    if (problem.empty()) problem = std::move(message);
    return false;
  }
  bool refuse(const std::string& found) {
    if (depth_ == 0) return fail("expected a JSON object {\"token\": id, ...}, found " + found);
    return fail("token " + quote(key_) + " maps to " + found + "; ids must be non-negative integers");
  }
  int depth_ = 0;
  std::string key_;
  std::unordered_set<std::string> seen_;
};

std::vector<std::string> parse_vocab(std::string_view bytes, const std::string& name) {
  VocabReader reader;
  const bool ok = nlohmann::json::sax_parse(bytes.begin(), bytes.end(), &reader);
  if (!ok || !reader.problem.empty())
    throw Error(name + ": " + (reader.problem.empty() ? std::string("malformed JSON") : reader.problem));
  auto& entries = reader.entries;
  if (entries.empty()) throw Error(name + ": the vocabulary is empty");
  // ids must be exactly 0..n-1: sorted, entry i has id i.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  for (std::size_t i = 1; i < entries.size(); ++i)
    if (entries[i].second == entries[i - 1].second)
      throw Error(name + ": id " + std::to_string(entries[i].second) + " is given to both " +
                  quote(entries[i - 1].first) + " and " + quote(entries[i].first));
  std::vector<std::string> tokens;
  tokens.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].second != i)
      throw Error(name + ": no token has id " + std::to_string(i) + " (ids must be 0.." +
                  std::to_string(entries.size() - 1) + " for " + std::to_string(entries.size()) + " tokens; " +
                  quote(entries[i].first) + " has " + std::to_string(entries[i].second) + ")");
    tokens.push_back(std::move(entries[i].first));
  }
  return tokens;
}

// ------------------------------------------------------------------------------ merges.txt

// Returns the merges and sets *line_offset so that merge i is on line i + *line_offset.
std::vector<std::pair<std::string, std::string>> parse_merges(std::string_view bytes, const std::string& name,
                                                              std::size_t* line_offset) {
  std::vector<std::pair<std::string, std::string>> merges;
  *line_offset = 1;
  std::size_t line_no = 0;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t eol = bytes.find('\n', at);
    std::string_view line = bytes.substr(at, eol == std::string_view::npos ? std::string_view::npos : eol - at);
    at = eol == std::string_view::npos ? bytes.size() : eol + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line_no == 1 && line.starts_with("#version")) {
      *line_offset = 2;
      continue;
    }
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw Error(name + " line " + std::to_string(line_no) + ": expected two tokens separated by one space, found " +
                  quote(line));
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return merges;
}

// ------------------------------------------------------------------------------ files

[[noreturn]] void io_fail(const std::string& name, const std::string& what) {
  throw Error(name + ": " + what + ": " + std::strerror(errno));
}

std::string read_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail(name, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(name + ": is a directory, not a file");
  }
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      io_fail(name, "cannot read");
    }
    if (n == 0) break;
    bytes.append(buf, std::size_t(n));
  }
  ::close(fd);
  return bytes;
}

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t w = ::write(fd, s.data(), std::min<std::size_t>(s.size(), std::size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    s.remove_prefix(std::size_t(w));
  }
  return true;
}

// Writes `contents` to a new temporary file next to `path` (same file system, so rename is
// atomic), flushed to disk; returns its path. Throws Error naming `path`, leaving nothing.
std::filesystem::path write_temp(const std::filesystem::path& path, std::string_view contents) {
  static std::atomic<unsigned> serial{0};
  const std::string name = path.string();
  // (Built by appending: GCC 12 warns falsely about `"." + std::string`, -Wrestrict.)
  std::string stem = ".";
  stem += path.filename().string();
  stem += ".tmp-" + std::to_string(::getpid()) + "-";
  std::filesystem::path tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = path.parent_path() / (stem + std::to_string(serial++));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) io_fail(name, "cannot write: cannot create a temporary file");
  }
  bool ok = write_all(fd, contents) && ::fsync(fd) == 0;
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = err != 0 ? err : EIO;  // a write of 0 bytes sets no errno
    io_fail(name, "cannot write");
  }
  return tmp;
}

}  // namespace

Tokenizer Tokenizer::parse(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                           const std::string& merges_name) {
  std::vector<std::string> tokens = parse_vocab(vocab_json, vocab_name);
  std::size_t line_offset = 1;
  auto merges = parse_merges(merges_txt, merges_name, &line_offset);
  text::Origin origin;
  origin.vocab = vocab_name;
  origin.merges_file = merges_name;
  origin.merge_line_offset = line_offset;
  return Tokenizer(text::build_tokenizer(std::move(tokens), std::move(merges), origin));
}

Tokenizer Tokenizer::load(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt) {
  const std::string vocab = read_file(vocab_json);
  const std::string merges = read_file(merges_txt);
  return parse(vocab, merges, vocab_json.string(), merges_txt.string());
}

Tokenizer Tokenizer::load_dir(const std::filesystem::path& dir) { return load(dir / "vocab.json", dir / "merges.txt"); }

void Tokenizer::save(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create the directory: " + ec.message());

  // vocab.json as Hugging Face writes it: one line, ids in order, UTF-8 as is.
  std::string vocab = "{";
  for (std::size_t id = 0; id < impl_->tokens.size(); ++id) {
    if (id) vocab += ',';
    vocab += nlohmann::json(impl_->tokens[id]).dump();
    vocab += ':';
    vocab += std::to_string(id);
  }
  vocab += "}";
  std::string merges = "#version: 0.2\n";
  for (const auto& [left, right] : impl_->merges) {
    merges += left;
    merges += ' ';
    merges += right;
    merges += '\n';
  }

  const std::filesystem::path vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
  const std::filesystem::path vocab_tmp = write_temp(vocab_path, vocab);
  std::filesystem::path merges_tmp;
  try {
    merges_tmp = write_temp(merges_path, merges);
  } catch (...) {
    ::unlink(vocab_tmp.c_str());
    throw;
  }
  if (::rename(vocab_tmp.c_str(), vocab_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(vocab_tmp.c_str());
    ::unlink(merges_tmp.c_str());
    errno = err;
    io_fail(vocab_path.string(), "cannot write: replacing the file");
  }
  if (::rename(merges_tmp.c_str(), merges_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(merges_tmp.c_str());
    errno = err;
    io_fail(merges_path.string(), "cannot write: replacing the file");
  }
}

}  // namespace jomoim
