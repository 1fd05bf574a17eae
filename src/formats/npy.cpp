// npy.cpp — the strict float32 .npy reader and the atomic .npy writer (see jomoim/formats/npy.hpp).
//
// Reading goes preamble (magic, version, header length) → header text, a Python dict literal
// parsed by a small recursive-descent parser that knows only the literals NumPy writes → the
// three keys, checked one by one → data length against the shape. Every refusal says what was
// found, because the usual cause is a file written with another dtype or layout by another
// tool. The parser is fed untrusted bytes (and fuzzed: fuzz/npy_fuzz.cpp): it never reads past
// the span it is given, bounds its recursion, and checks every size computation for overflow.
#include "jomoim/formats/npy.hpp"

#include "jomoim/formats/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

namespace jomoim {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
// NumPy 2's limit on dimensions (NumPy 1 allows 32); it also keeps a written header far below
// the 65535 bytes a version 1.0 header can hold.
constexpr std::size_t kMaxRank = 64;
// The deepest literal nesting the parser follows. A real header nests 2 levels (a shape tuple
// inside the dict; a structured descr, which is refused anyway, 3); the bound keeps hostile
// input like "((((((..." from exhausting the stack.
constexpr int kMaxNesting = 16;
// Longest piece of a header quoted back in an error message, so messages stay one short line.
constexpr std::size_t kMaxQuote = 40;

[[noreturn]] void fail(const std::string& name, const std::string& problem) { throw Error(name + ": " + problem); }

std::string clip(std::string_view s) {
  return s.size() <= kMaxQuote ? std::string(s) : std::string(s.substr(0, kMaxQuote)) + "...";
}

// Number of elements of `shape`, or a message when a dimension is negative or the data size
// (elements × 4 bytes) would not fit in int64 and size_t. Like NumPy, dimensions of length 0
// do not excuse an overflow among the others.
std::uint64_t element_count(std::span<const std::int64_t> shape, std::string* problem) {
  constexpr std::uint64_t max_bytes =
      std::min<std::uint64_t>(std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::size_t>::max());
  if (shape.size() > kMaxRank) {
    *problem = "shape has " + std::to_string(shape.size()) + " dimensions (at most " + std::to_string(kMaxRank) +
               " are supported)";
    return 0;
  }
  std::uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (const std::int64_t d : shape) {
    if (d < 0) {
      *problem = "shape " + shape_string(shape) + " has a negative dimension";
      return 0;
    }
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (nonzero_product > max_bytes / sizeof(float) / std::uint64_t(d)) {
      *problem = "shape " + shape_string(shape) + " has too many elements (its data would exceed " +
                 std::to_string(max_bytes) + " bytes)";
      return 0;
    }
    nonzero_product *= std::uint64_t(d);
  }
  return has_zero ? 0 : nonzero_product;
}

// ---------------------------------------------------------------------------------- reading

// A Python literal, as far as .npy headers use them.
struct Literal {
  enum class Kind { string, integer, boolean, none, tuple, list };
  Kind kind = Kind::none;
  std::string text;            // string: its contents; integer: its digits, '-' first if negative
  bool flag = false;           // boolean: its value
  std::vector<Literal> items;  // tuple, list: the elements
};

// The literal as Python would print it, clipped for error messages.
std::string render(const Literal& v) {
  std::string s;
  switch (v.kind) {
    case Literal::Kind::string:
      s = "'" + v.text + "'";
      break;
    case Literal::Kind::integer:
      s = v.text;
      break;
    case Literal::Kind::boolean:
      s = v.flag ? "True" : "False";
      break;
    case Literal::Kind::none:
      s = "None";
      break;
    case Literal::Kind::tuple:
    case Literal::Kind::list: {
      const bool tuple = v.kind == Literal::Kind::tuple;
      s = tuple ? "(" : "[";
      for (std::size_t i = 0; i < v.items.size() && s.size() <= kMaxQuote; ++i)
        s += (i ? ", " : "") + render(v.items[i]);
      if (tuple && v.items.size() == 1) s += ",";
      s += tuple ? ")" : "]";
      break;
    }
  }
  return clip(s);
}

// Recursive descent over the header text (without its final '\n'). Grammar, a subset of
// Python's:   dict  := '{' [entry (',' entry)* [',']] '}'      entry := string ':' value
//             value := string | integer | True | False | None | tuple | list
// with spaces and tabs allowed between tokens. Strings take no escapes and no prefixes (no
// header NumPy writes needs them); integers are decimal without leading zeros.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  std::vector<std::pair<std::string, Literal>> parse_dict() {
    std::vector<std::pair<std::string, Literal>> entries;
    skip_space();
    if (!at('{')) malformed("expected '{'");
    ++pos_;
    skip_space();
    while (!at('}')) {
      if (!at('\'') && !at('"')) malformed("expected a quoted key or '}'");
      std::string key = parse_string();
      skip_space();
      if (!at(':')) malformed("expected ':' after the key '" + clip(key) + "'");
      ++pos_;
      skip_space();
      Literal value = parse_value(1);
      entries.emplace_back(std::move(key), std::move(value));
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        malformed("expected ',' or '}'");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != s_.size()) malformed("unexpected text after the closing '}'");
    return entries;
  }

 private:
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_char(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }

  [[noreturn]] void malformed(const std::string& what) const {
    fail(name_,
         "header is not a valid dict literal: " + what + " at offset " + std::to_string(pos_) + " of the header");
  }

  std::string parse_string() {
    const char quote = s_[pos_++];
    const std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') malformed("escape sequences in strings are not supported");
      ++pos_;
    }
    if (pos_ == s_.size()) malformed("unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }

  Literal parse_value(int depth) {
    if (depth > kMaxNesting) malformed("values nested more than " + std::to_string(kMaxNesting) + " deep");
    if (pos_ == s_.size()) malformed("expected a value");
    const char c = s_[pos_];
    Literal v;
    if (c == '\'' || c == '"') {
      v.kind = Literal::Kind::string;
      v.text = parse_string();
    } else if (c == '(' || c == '[') {
      return parse_sequence(depth);
    } else if (is_digit(c) || c == '-' || c == '+') {
      v.kind = Literal::Kind::integer;
      if (c == '-') v.text = "-";
      if (c == '-' || c == '+') ++pos_;
      const std::size_t start = pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      const std::string_view digits = s_.substr(start, pos_ - start);
      if (digits.empty()) malformed("expected digits");
      if (pos_ < s_.size() && (is_name_char(s_[pos_]) || s_[pos_] == '.')) malformed("expected a decimal integer");
      if (digits.size() > 1 && digits[0] == '0') malformed("integer with a leading zero");
      v.text += digits;
    } else if (is_name_char(c)) {
      const std::size_t start = pos_;
      while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
      const std::string_view word = s_.substr(start, pos_ - start);
      if (word == "True" || word == "False") {
        v.kind = Literal::Kind::boolean;
        v.flag = word == "True";
      } else if (word == "None") {
        v.kind = Literal::Kind::none;
      } else {
        pos_ = start;
        malformed("unknown name '" + clip(word) + "'");
      }
    } else {
      malformed(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  // '(' ... ')' or '[' ... ']'. As in Python, "(x)" without a comma is just x, not a tuple.
  Literal parse_sequence(int depth) {
    const bool tuple = s_[pos_] == '(';
    const char close = tuple ? ')' : ']';
    ++pos_;
    Literal v;
    v.kind = tuple ? Literal::Kind::tuple : Literal::Kind::list;
    bool comma = false;
    skip_space();
    while (!at(close)) {
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (at(',')) {
        comma = true;
        ++pos_;
        skip_space();
      } else if (!at(close)) {
        malformed(std::string("expected ',' or '") + close + "'");
      }
    }
    ++pos_;
    if (tuple && v.items.size() == 1 && !comma) return std::move(v.items[0]);
    return v;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

// "'<f8' (float64)", "'>f4' (big-endian float32)", "'<i4' (int32)": names a NumPy type string
// for the message that refuses it. Unknown forms are quoted as they are.
std::string describe_dtype(const std::string& d) {
  std::string quoted = "'";  // appended piecewise: "'" + clip(d) trips a false -Wrestrict in g++ 12
  quoted += clip(d);
  quoted += "'";
  if (d.size() < 3 || d.size() > 5 || std::string_view("<>|=").find(d[0]) == std::string_view::npos) return quoted;
  int bytes = 0;
  for (const char c : std::string_view(d).substr(2)) {
    if (c < '0' || c > '9') return quoted;
    bytes = bytes * 10 + (c - '0');
  }
  const std::string bits = std::to_string(bytes * 8);
  std::string what;
  switch (d[1]) {
    case 'f':
      what = "float" + bits;
      break;
    case 'i':
      what = "int" + bits;
      break;
    case 'u':
      what = "uint" + bits;
      break;
    case 'c':
      what = "complex" + bits;
      break;
    case 'b':
      what = "bool";
      break;
    case 'S':
      what = "bytes";
      break;
    case 'U':
      what = "unicode string";
      break;
    case 'V':
      what = "raw bytes";
      break;
    case 'O':
      what = "Python object";
      break;
    default:
      return quoted;
  }
  const char* order = bytes < 2 ? "" : d[0] == '>' ? "big-endian " : d[0] == '=' ? "native-endian " : "";
  return quoted + " (" + order + what + ")";
}

// Checks the header (the bytes between the preamble and the data, '\n' included) and returns
// the shape it describes.
//   descr_out: null for the strict float32 reader ('<f4' only); otherwise '<f2' and '<u2' are
//   accepted too and the type string is stored there.
std::vector<std::int64_t> parse_header(std::string_view header, const std::string& name,
                                       std::string* descr_out = nullptr) {
  if (header.empty() || header.back() != '\n')
    fail(name, "header does not end with a newline (not a NumPy header, or cut short)");
  header.remove_suffix(1);
  for (std::size_t i = 0; i < header.size(); ++i) {
    const auto c = static_cast<unsigned char>(header[i]);
    if (c != '\t' && (c < 0x20 || c > 0x7e)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      fail(name, std::string("header has the byte ") + hex + " at offset " + std::to_string(i) +
                     " (a NumPy header is one line of printable ASCII)");
    }
  }

  const Literal* descr = nullptr;
  const Literal* fortran = nullptr;
  const Literal* shape = nullptr;
  const auto entries = HeaderParser(header, name).parse_dict();
  for (const auto& [key, value] : entries) {
    const Literal** slot = key == "descr"           ? &descr
                           : key == "fortran_order" ? &fortran
                           : key == "shape"         ? &shape
                                                    : nullptr;
    if (!slot)
      fail(name,
           "header has an unexpected key '" + clip(key) + "' (expected exactly 'descr', 'fortran_order' and 'shape')");
    if (*slot) fail(name, "header has the key '" + key + "' twice");
    *slot = &value;
  }
  if (!descr) fail(name, "header has no 'descr' key (the data type)");
  if (!fortran) fail(name, "header has no 'fortran_order' key");
  if (!shape) fail(name, "header has no 'shape' key");

  if (descr->kind != Literal::Kind::string)
    fail(name, "data type " + render(*descr) +
                   " is not supported (structured types are not); expected '<f4' (little-endian float32)");
  if (descr_out) {
    if (descr->text != "<f4" && descr->text != "<f2" && descr->text != "<u2")
      fail(name, "data type " + describe_dtype(descr->text) +
                     " is not supported; expected '<f4' (float32), '<f2' (float16) or '<u2' (bfloat16 bits)");
    *descr_out = descr->text;
  } else if (descr->text != "<f4") {
    fail(name,
         "data type " + describe_dtype(descr->text) + " is not supported; expected '<f4' (little-endian float32)");
  }

  if (fortran->kind != Literal::Kind::boolean)
    fail(name, "'fortran_order' must be True or False, got " + render(*fortran));
  if (fortran->flag)
    fail(name,
         "array is stored in Fortran (column-major) order; only C order is supported "
         "(save np.ascontiguousarray(a) instead)");

  if (shape->kind != Literal::Kind::tuple)
    fail(name, "'shape' must be a tuple of non-negative integers, got " + render(*shape) +
                   (shape->kind == Literal::Kind::integer ? " (a 1-tuple needs a comma: (n,))" : ""));
  std::vector<std::int64_t> dims;
  for (const Literal& d : shape->items) {
    if (d.kind != Literal::Kind::integer)
      fail(name, "'shape' " + render(*shape) + " has the non-integer entry " + render(d));
    const bool negative = d.text[0] == '-';
    std::uint64_t magnitude = 0;
    for (const char c : std::string_view(d.text).substr(negative ? 1 : 0)) {
      const auto digit = std::uint64_t(c - '0');
      if (magnitude > (std::uint64_t(std::numeric_limits<std::int64_t>::max()) - digit) / 10)
        fail(name, "'shape' " + render(*shape) + " has a dimension too large for int64");
      magnitude = magnitude * 10 + digit;
    }
    if (negative && magnitude != 0) fail(name, "'shape' " + render(*shape) + " has a negative dimension");
    dims.push_back(std::int64_t(magnitude));
  }
  return dims;
}

// The whole file, or an Error naming it. Reads until end of file rather than trusting the
// size the file system reports, so pipes and files that change underneath work too.
std::vector<std::byte> read_file(const std::filesystem::path& path, const std::string& name) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(name, std::string("cannot open: ") + std::strerror(errno));
  std::vector<std::byte> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    try {
      bytes.reserve(std::size_t(st.st_size) + 1);  // +1: the read that sees end of file
    } catch (const std::exception&) {
      ::close(fd);
      fail(name, "cannot read: file of " + std::to_string(st.st_size) + " bytes does not fit in memory");
    }
  }
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size())
      bytes.resize(used < bytes.capacity() ? bytes.capacity() : std::max<std::size_t>(2 * used, 65536));
    const ssize_t n = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(name, std::string("cannot read: ") + std::strerror(err));
    }
    if (n == 0) break;
    used += std::size_t(n);
  }
  ::close(fd);
  bytes.resize(used);
  return bytes;
}

// ---------------------------------------------------------------------------------- writing

// The header NumPy (1.23 and later) writes for a C-order '<f4' array, byte for byte, '\n'
// included, so that jomoim's files are exactly np.save's.
std::string make_header(std::span<const std::int64_t> shape) {
  std::string tuple = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) tuple += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) tuple += ",";
  tuple += ")";
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + tuple + ", }";
  // NumPy leaves room for the first dimension to grow to 21 digits, so that a file can be
  // appended to by rewriting its header in place.
  if (!shape.empty()) h.append(21 - std::to_string(shape[0]).size(), ' ');
  // Spaces up to a multiple of 64 bytes for the preamble + header + '\n' (so the data is
  // aligned for memory mapping); like NumPy, always at least one.
  const std::size_t total = kMagicLen + 2 + 2 + h.size() + 1;
  h.append(64 - total % 64, ' ');
  h += '\n';
  return h;
}

}  // namespace

namespace {
NpyInfo parse_info(std::span<const std::byte> bytes, std::uint64_t file_size, const std::string& name,
                   std::string* descr_out);
}  // namespace

NpyInfo parse_npy_info(std::span<const std::byte> bytes, std::uint64_t file_size, const std::string& name) {
  return parse_info(bytes, file_size, name, nullptr);
}

namespace {
// parse_npy_info, and with a non-null descr_out also the 16-bit types (parse_header).
NpyInfo parse_info(std::span<const std::byte> bytes, std::uint64_t file_size, const std::string& name,
                   std::string* descr_out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  // `size` is the file's, for every check and message; `bytes` must hold as much of its
  // beginning as the preamble and header need.
  const std::uint64_t size = file_size;
  if (bytes.size() > size)
    fail(name,
         "internal error: " + std::to_string(bytes.size()) + " bytes given for a file of " + std::to_string(size));
  auto need_bytes = [&](std::uint64_t n) {
    if (bytes.size() < n)
      fail(name, "internal error: the first " + std::to_string(n) + " bytes are needed, " +
                     std::to_string(bytes.size()) + " were read");
  };
  if (size == 0) fail(name, "file is empty (0 bytes), not a .npy file");
  if (size < kMagicLen) fail(name, "not a .npy file (it does not start with \\x93NUMPY)");
  need_bytes(kMagicLen);
  if (std::memcmp(p, kMagic, kMagicLen) != 0) fail(name, "not a .npy file (it does not start with \\x93NUMPY)");
  if (size < kMagicLen + 2) fail(name, "file ends inside the .npy preamble (" + std::to_string(size) + " bytes)");
  need_bytes(kMagicLen + 2);
  const unsigned major = p[6], minor = p[7];
  if ((major != 1 && major != 2) || minor != 0)
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (jomoim reads versions 1.0 and 2.0)");
  // Version 1.0 stores the header length in 2 little-endian bytes, 2.0 in 4.
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = kMagicLen + 2 + length_bytes;
  if (size < header_start) fail(name, "file ends inside the .npy preamble (" + std::to_string(size) + " bytes)");
  need_bytes(header_start);
  std::uint64_t header_len = 0;
  for (std::size_t i = 0; i < length_bytes; ++i) header_len |= std::uint64_t(p[kMagicLen + 2 + i]) << (8 * i);
  if (header_len > size - header_start)
    fail(name, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size - header_start) + " bytes follow the preamble)");
  need_bytes(header_start + header_len);

  NpyInfo info;
  info.shape = parse_header(std::string_view(reinterpret_cast<const char*>(p + header_start), std::size_t(header_len)),
                            name, descr_out);
  std::string problem;
  const std::uint64_t count = element_count(info.shape, &problem);
  if (!problem.empty()) fail(name, problem);

  const std::uint64_t data_start = header_start + header_len;
  const std::uint64_t have = size - data_start;
  const bool wide = !descr_out || *descr_out == "<f4";
  const std::uint64_t need = count * (wide ? sizeof(float) : 2);
  if (have < need)
    fail(name, "data is truncated: shape " + shape_string(info.shape) + " needs " + std::to_string(need) +
                   " bytes of " + (wide ? "float32" : "16-bit numbers") + ", but only " + std::to_string(have) +
                   " follow the header");
  if (have > need)
    fail(name, "file has " + std::to_string(have - need) + " bytes after the data the header describes (shape " +
                   shape_string(info.shape) + ")");
  info.data_offset = data_start;
  info.count = count;
  return info;
}
}  // namespace

NpyAnyArray parse_npy_any(std::span<const std::byte> bytes, const std::string& name) {
  NpyAnyArray a;
  NpyInfo info = parse_info(bytes, bytes.size(), name, &a.descr);
  a.shape = std::move(info.shape);
  const std::size_t count = std::size_t(info.count);
  if (a.descr == "<f4") {
    a.f32.resize(count);
    if (count > 0) std::memcpy(a.f32.data(), bytes.data() + info.data_offset, count * sizeof(float));
  } else {
    a.u16.resize(count);
    if (count > 0) std::memcpy(a.u16.data(), bytes.data() + info.data_offset, count * 2);
  }
  if constexpr (std::endian::native == std::endian::big) {
    for (float& f : a.f32) f = std::bit_cast<float>(__builtin_bswap32(std::bit_cast<std::uint32_t>(f)));
    for (std::uint16_t& u : a.u16) u = __builtin_bswap16(u);
  }
  return a;
}

NpyAnyArray read_npy_any(const std::filesystem::path& path) {
  const std::string name = path.string();
  const std::vector<std::byte> bytes = read_file(path, name);
  return parse_npy_any(bytes, name);
}

NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& name) {
  NpyInfo info = parse_npy_info(bytes, bytes.size(), name);
  NpyArray a;
  a.shape = std::move(info.shape);
  const std::uint64_t count = info.count;
  a.data.resize(std::size_t(count));
  if (count > 0) std::memcpy(a.data.data(), bytes.data() + info.data_offset, std::size_t(count * sizeof(float)));
  if constexpr (std::endian::native == std::endian::big) {
    for (float& f : a.data) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      u = __builtin_bswap32(u);
      std::memcpy(&f, &u, 4);
    }
  }
  return a;
}

NpyInfo read_npy_info(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(name, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(name, "cannot read its header: not a regular file (ranged reads need one)");
  }
  const std::uint64_t size = std::uint64_t(st.st_size);
  // The preamble (at most 12 bytes), then the header it announces (at most 4 GiB by the
  // format; bounded here by the file's size).
  std::vector<std::byte> head(std::size_t(std::min<std::uint64_t>(size, 12)));
  auto read_at = [&](std::uint64_t offset, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, head.data() + offset + got, n - got, off_t(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : 0;
        ::close(fd);
        fail(name, std::string("cannot read: ") + (err ? std::strerror(err) : "file got shorter while reading"));
      }
      got += std::size_t(r);
    }
  };
  read_at(0, head.size());
  if (head.size() >= 8 && std::memcmp(head.data(), kMagic, kMagicLen) == 0) {
    const auto* p = reinterpret_cast<const unsigned char*>(head.data());
    const std::size_t length_bytes = p[6] == 1 ? 2 : p[6] == 2 ? 4 : 0;
    if (length_bytes && head.size() >= kMagicLen + 2 + length_bytes) {
      std::uint64_t header_len = 0;
      for (std::size_t i = 0; i < length_bytes; ++i) header_len |= std::uint64_t(p[kMagicLen + 2 + i]) << (8 * i);
      const std::uint64_t end = std::min<std::uint64_t>(size, kMagicLen + 2 + length_bytes + header_len);
      const std::size_t old = head.size();
      if (end > old) {
        head.resize(std::size_t(end));
        read_at(old, std::size_t(end - old));
      } else {
        head.resize(std::size_t(end));
      }
    }
  }
  ::close(fd);
  return parse_npy_info(head, size, name);
}

void read_npy_elements(const std::filesystem::path& path, const NpyInfo& info, std::uint64_t first, std::uint64_t count,
                       float* out) {
  const std::string name = path.string();
  if (first > info.count || count > info.count - first)
    fail(name, "elements " + std::to_string(first) + " to " + std::to_string(first + count) +
                   " are outside the array of " + std::to_string(info.count) + " elements");
  if (count == 0) return;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(name, std::string("cannot open: ") + std::strerror(errno));
  auto* dst = reinterpret_cast<char*>(out);
  const std::uint64_t bytes = count * sizeof(float);
  const std::uint64_t offset = info.data_offset + first * sizeof(float);
  std::uint64_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::pread(fd, dst + got, std::size_t(std::min<std::uint64_t>(bytes - got, std::uint64_t(1) << 30)),
                              off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : 0;
      ::close(fd);
      fail(name, std::string("cannot read: ") + (err ? std::strerror(err) : "file got shorter while reading"));
    }
    got += std::uint64_t(r);
  }
  ::close(fd);
  if constexpr (std::endian::native == std::endian::big) {
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint32_t u;
      std::memcpy(&u, out + i, 4);
      u = __builtin_bswap32(u);
      std::memcpy(out + i, &u, 4);
    }
  }
}

std::string npy_header(std::span<const std::int64_t> shape) {
  std::string problem;
  element_count(shape, &problem);
  if (!problem.empty()) throw Error("cannot write: " + problem);
  const std::string header = make_header(shape);
  std::string preamble(kMagic, kMagicLen);
  preamble += '\x01';
  preamble += '\x00';
  preamble += char(header.size() & 0xff);
  preamble += char(header.size() >> 8);
  return preamble + header;
}

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  const std::vector<std::byte> bytes = read_file(path, name);
  return parse_npy(bytes, name);
}

void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> shape, const float* data) {
  const std::string name = path.string();
  std::string problem;
  const std::uint64_t count = element_count(shape, &problem);
  if (!problem.empty()) fail(name, "cannot write: " + problem);
  if (count > 0 && data == nullptr) fail(name, "cannot write: no data for shape " + shape_string(shape));
  if (!path.has_filename()) fail(name, "cannot write: not a file name");

  const std::string header = make_header(shape);
  std::string preamble(kMagic, kMagicLen);
  preamble += '\x01';  // version 1.0: every header jomoim writes is far below 64 KiB
  preamble += '\x00';
  preamble += char(header.size() & 0xff);
  preamble += char(header.size() >> 8);
  preamble += header;

  detail::write_file_atomic(path, name, [&](int fd) -> const char* {
    if (!detail::write_all(fd, preamble.data(), preamble.size())) return "writing the header";
    if (!detail::write_floats_le(fd, data, count)) return "writing the data";
    return nullptr;
  });
}

void write_npy(const std::filesystem::path& path, const NpyArray& a) {
  std::string problem;
  const std::uint64_t count = element_count(a.shape, &problem);
  if (problem.empty() && count != a.data.size())
    fail(path.string(), "cannot write: shape " + shape_string(a.shape) + " needs " + std::to_string(count) +
                            " elements, but the array holds " + std::to_string(a.data.size()));
  write_npy(path, a.shape, a.data.data());
}

}  // namespace jomoim
