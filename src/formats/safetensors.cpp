// safetensors.cpp — the validating, memory-mapping safetensors reader and the atomic F32
// writer (see jomoim/formats/safetensors.hpp).
//
// Reading goes: 8-byte header length (bounded) → header text, parsed by nlohmann::json with a
// callback that refuses repeated keys and deep nesting while it parses → each entry checked on
// its own (dtype, shape, offsets, byte count against shape × dtype size) → the ranges checked
// together, sorted by offset, so that every byte of the data section belongs to exactly one
// tensor. Input is untrusted (and fuzzed: fuzz/safetensors_fuzz.cpp): nothing is read outside
// the given bytes, every size computation is overflow-checked, and anything quoted back from
// the file in a message is escaped and clipped so that messages stay one short line.
#include "jomoim/formats/safetensors.hpp"

#include "jomoim/formats/atomic_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace jomoim {
namespace {

using json = nlohmann::json;

// The reference implementation's bound on the header length (HeaderTooLarge).
constexpr std::uint64_t kMaxHeader = 100'000'000;
// JSON nesting a header can have: the root object (depth 0), an entry or "__metadata__"
// object (1), a "shape" or "data_offsets" array (2). One level more is allowed so that a
// wrong value there ("shape": [[2]]) gets a message about the value, not about nesting.
constexpr int kMaxDepth = 3;
// Longest piece of the file (a tensor name, a key) quoted in a message.
constexpr std::size_t kMaxQuote = 60;
constexpr std::string_view kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& name, const std::string& problem) { throw Error(name + ": " + problem); }

// `s` quoted for a message: control characters escaped as \xNN (so the message stays one
// line), clipped to kMaxQuote bytes.
std::string quote(std::string_view s) {
  std::string q = "'";
  for (std::size_t i = 0; i < s.size() && i < kMaxQuote; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      q += hex;
    } else {
      q += char(c);
    }
  }
  if (s.size() > kMaxQuote) q += "...";
  return q + "'";
}

// Built piecewise: "[" + std::to_string(...) trips a false -Wrestrict in g++ 12.
std::string range_string(std::size_t begin, std::size_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ")";
  return s;
}

// A JSON value's type, for messages ("got a string").
std::string kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
      return "a negative integer";
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a fractional or out-of-range number";
    default:
      return "a value of another kind";
  }
}

// Elements × element size in bytes, or false when either product overflows uint64 (which is
// wider than size_t nowhere that matters, and is compared against a size_t range anyway).
bool byte_count(std::span<const std::int64_t> shape, std::size_t elem, std::uint64_t* out) {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, std::uint64_t(d), &n)) return false;
  }
  return !__builtin_mul_overflow(n, std::uint64_t(elem), out);
}

// ------------------------------------------------------------------------------ conversions

// IEEE binary16 → binary32, exactly. Every half has an exact float; NaN payloads are kept
// (shifted into the top of the float mantissa, so quiet NaNs stay quiet).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 → 127
  } else {
    // zero or subnormal: mant × 2^-24, exact in float (mant < 2^10, scaling by a power of 2)
    const float magnitude = float(mant) * 0x1p-24f;
    std::uint32_t m;
    std::memcpy(&m, &magnitude, 4);
    bits = sign | m;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bfloat16 is the top half of a binary32: widening is a shift.
float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t load_u16le(const std::byte* p) { return std::uint16_t(std::uint16_t(p[0]) | (std::uint16_t(p[1]) << 8)); }

std::uint32_t load_u32le(const std::byte* p) {
  return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
}

// ------------------------------------------------------------------------------ the mapping

// A read-only private mapping of a whole file, unmapped when the last owner lets go.
struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  Mapping(void* a, std::size_t s) : addr(a), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(addr, size); }
};

[[noreturn]] void too_short(const std::string& name, std::size_t size) {
  fail(name, "file is " + std::to_string(size) +
                 " bytes, too short for a safetensors file (it starts with an 8-byte header length)");
}

// ------------------------------------------------------------------------------ the header

// Parses the header text. The callback sees every key as it is read and refuses a key that
// its object already has (nlohmann::json would keep the last one silently, and a header whose
// two entries for one name disagree is exactly what a hostile file would use), and refuses
// containers nested deeper than kMaxDepth.
json parse_header_json(std::string_view text, const std::string& name) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string path;                         // for messages: the key of the open entry
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > kMaxDepth)
          fail(name, "header nests JSON containers more than " + std::to_string(kMaxDepth + 1) +
                         " deep (a safetensors header nests 3)");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second) {
          if (depth == 1) fail(name, "header has the name " + quote(k) + " twice");
          fail(name, "header has the key " + quote(k) + " twice inside " + quote(path));
        }
        if (depth == 1) path = k;
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." without the tag.
    std::string what = e.what();
    if (const auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    // Its "last read: '...'" quotes header bytes: escape what is not printable ASCII.
    std::string clean;
    for (const char c : what.substr(0, 200)) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u < 0x7f) {
        clean += c;
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", u);
        clean += hex;
      }
    }
    if (what.size() > 200) clean += "...";
    fail(name, "header is not valid JSON: " + clean);
  }
}

// Reads a non-negative JSON integer of at most `max`; `what` names it for messages.
std::uint64_t json_count(const json& v, const std::string& name, const std::string& what,
                         std::uint64_t max = std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
  if (!v.is_number_unsigned()) fail(name, what + " must be a non-negative integer, got " + kind_of(v));
  const auto u = v.get<std::uint64_t>();
  if (u > max) fail(name, what + " " + std::to_string(u) + " is too large (above 2^63 - 1)");
  return u;
}

// Checks one tensor entry on its own and returns it. `data_size`: bytes in the data section.
TensorInfo parse_entry(const std::string& key, const json& v, const std::string& name, std::size_t data_size) {
  const std::string who = "tensor " + quote(key);
  if (!v.is_object())
    fail(name, who + ": entry must be an object with dtype, shape and data_offsets, got " + kind_of(v));
  for (const auto& [k, unused] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail(name, who + ": unexpected key " + quote(k) + " (expected exactly dtype, shape and data_offsets)");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) fail(name, who + ": missing '" + k + "'");
  }

  TensorInfo t;
  t.name = key;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) fail(name, who + ": dtype must be a string, got " + kind_of(dtype));
  if (!parse_dtype(dtype.get_ref<const std::string&>(), &t.dtype))
    fail(name, who + ": unknown dtype " + quote(dtype.get_ref<const std::string&>()));

  const json& shape = v["shape"];
  if (!shape.is_array()) fail(name, who + ": shape must be an array of non-negative integers, got " + kind_of(shape));
  for (const json& d : shape) t.shape.push_back(std::int64_t(json_count(d, name, who + ": shape entry")));

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail(name, who + ": data_offsets must be an array [begin, end], got " +
                   (offsets.is_array() ? "an array of " + std::to_string(offsets.size()) : kind_of(offsets)));
  // Any u64 offset is accepted here; the range check against the data section follows.
  constexpr auto any = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t begin = json_count(offsets[0], name, who + ": data_offsets begin", any);
  const std::uint64_t end = json_count(offsets[1], name, who + ": data_offsets end", any);
  if (begin > end)
    fail(name,
         who + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before they begin");
  if (end > data_size)
    fail(name, who + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   "] run past the end of the data section (" + std::to_string(data_size) + " bytes)");
  t.begin = std::size_t(begin);
  t.end = std::size_t(end);

  std::uint64_t need = 0;
  if (!byte_count(t.shape, dtype_size(t.dtype), &need))
    fail(name, who + ": shape " + shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                   " is too large (its byte count overflows 64 bits)");
  if (need != end - begin)
    fail(name, who + ": shape " + shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs " +
                   std::to_string(need) + " bytes, but data_offsets [" + std::to_string(begin) + ", " +
                   std::to_string(end) + "] hold " + std::to_string(end - begin));
  return t;
}

// ------------------------------------------------------------------------------ writing

}  // namespace

// ------------------------------------------------------------------------------ dtypes

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::BOOL:
      return "BOOL";
    case DType::U8:
      return "U8";
    case DType::I8:
      return "I8";
    case DType::F8_E5M2:
      return "F8_E5M2";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::I16:
      return "I16";
    case DType::U16:
      return "U16";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::U32:
      return "U32";
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::U64:
      return "U64";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::BOOL:
    case DType::U8:
    case DType::I8:
    case DType::F8_E5M2:
    case DType::F8_E4M3:
      return 1;
    case DType::I16:
    case DType::U16:
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::I32:
    case DType::U32:
    case DType::F32:
      return 4;
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
  }
  return 0;
}

bool parse_dtype(std::string_view name, DType* out) {
  static constexpr DType all[] = {DType::BOOL, DType::U8,  DType::I8,  DType::F8_E5M2, DType::F8_E4M3,
                                  DType::I16,  DType::U16, DType::F16, DType::BF16,    DType::I32,
                                  DType::U32,  DType::F32, DType::F64, DType::I64,     DType::U64};
  for (const DType t : all) {
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::int64_t FloatArray::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

// ------------------------------------------------------------------------------ reading

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, std::string name,
                                       std::shared_ptr<const void> keepalive) {
  const std::size_t size = bytes.size();
  if (size < 8) too_short(name, size);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(bytes[std::size_t(i)]) << (8 * i);
  if (n > kMaxHeader)
    fail(name, "header length " + std::to_string(n) + " exceeds the format's limit of " + std::to_string(kMaxHeader) +
                   " bytes (corrupt length, or not a safetensors file)");
  if (n > size - 8)
    fail(name, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size - 8) +
                   " bytes follow the length)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, std::size_t(n));
  if (text.empty() || text[0] != '{')
    fail(name, text.empty() ? std::string("header is empty (expected a JSON object)")
                            : "header does not start with '{' (not a safetensors file, or a corrupt header length)");
  // nlohmann::json takes a NUL byte for the end of its input and would ignore what follows.
  // Valid JSON has none (not even inside strings, where control characters must be escaped).
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    fail(name, "header has a NUL byte at offset " + std::to_string(nul) + " (not valid JSON)");

  SafetensorsFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  f.keepalive_ = std::move(keepalive);
  f.data_offset_ = 8 + std::size_t(n);
  const std::size_t data_size = size - f.data_offset_;
  const std::string& fname = f.name_;

  const json header = parse_header_json(text, fname);
  if (!header.is_object()) fail(fname, "header is not a JSON object");  // unreachable after '{'
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) fail(fname, "__metadata__ must be an object of strings, got " + kind_of(value));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail(fname, "__metadata__ value of " + quote(mk) + " must be a string, got " + kind_of(mv));
        f.metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(key, value, fname, data_size));
  }

  // The ranges together: sorted by offset, each must start where the previous one ended.
  // Zero-size tensors sort before a tensor starting at the same offset, so they fit between.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::size_t pos = 0;
  const TensorInfo* last = nullptr;  // the tensor that ends at pos
  for (const TensorInfo& t : f.tensors_) {
    if (t.begin < pos)
      fail(fname, "tensors " + quote(last->name) + " " + range_string(last->begin, last->end) + " and " +
                      quote(t.name) + " " + range_string(t.begin, t.end) + " overlap in the data section");
    if (t.begin > pos)
      fail(fname, "bytes " + range_string(pos, t.begin) + " of the data section belong to no tensor (a hole " +
                      (last ? "between " + quote(last->name) + " and " : "before ") + quote(t.name) +
                      "; the format requires the tensors to cover the data section)");
    pos = t.end;
    last = &t;
  }
  if (pos != data_size)
    fail(fname, "data section has " + std::to_string(data_size - pos) + " bytes after the last tensor" +
                    (last ? " " + quote(last->name) : std::string()) + " (" + std::to_string(data_size) +
                    " bytes, tensors cover " + std::to_string(pos) + ")");

  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

SafetensorsFile SafetensorsFile::from_memory(std::span<const std::byte> bytes, std::string name) {
  return parse(bytes, std::move(name), nullptr);
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(name, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(name, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(name, "not a regular file (a safetensors file is memory-mapped)");
  }
  const auto size = std::size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    too_short(name, size);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (addr == MAP_FAILED) fail(name, std::string("cannot map: ") + std::strerror(err));
  // Pages this mapping faults in from disk come as 2 MiB folios where the kernel and file system
  // can (Linux 6.16+ on ext4, for example), mapped by one TLB entry each: float32 decode reads the
  // whole mapped checkpoint every token. Only a hint; pages already cached keep their size.
  ::madvise(addr, size, MADV_HUGEPAGE);
  auto mapping = std::make_shared<const Mapping>(addr, size);  // unmaps if parse throws
  return parse({static_cast<const std::byte*>(addr), size}, std::move(name), std::move(mapping));
}

const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return tensors_; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return metadata_; }

std::span<const std::byte> SafetensorsFile::raw(const TensorInfo& t) const {
  if (t.begin > t.end || t.end > bytes_.size() - data_offset_)
    fail(name_, "tensor " + quote(t.name) + ": range " + range_string(t.begin, t.end) +
                    " is not inside this file's data section");
  return bytes_.subspan(data_offset_ + t.begin, t.end - t.begin);
}

FloatArray SafetensorsFile::load_f32(std::string_view tensor_name) const {
  const TensorInfo* t = find(tensor_name);
  if (!t) fail(name_, "no tensor named " + quote(tensor_name));
  if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
    fail(name_, "tensor " + quote(t->name) + " has dtype " + std::string(dtype_name(t->dtype)) +
                    "; only F32, F16 and BF16 tensors load as float32");
  const std::span<const std::byte> src = raw(*t);
  const auto n = std::size_t(t->numel());

  FloatArray a;
  a.shape = t->shape;
  if (t->dtype == DType::F32 && std::endian::native == std::endian::little &&
      reinterpret_cast<std::uintptr_t>(src.data()) % alignof(float) == 0) {
    a.data = n ? reinterpret_cast<const float*>(src.data()) : nullptr;
    a.zero_copy = true;
    a.keepalive = keepalive_;
    return a;
  }
  auto copy = std::make_shared<std::vector<float>>(n);
  float* out = copy->data();
  switch (t->dtype) {
    case DType::F32:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t u = load_u32le(src.data() + 4 * i);
        std::memcpy(out + i, &u, 4);
      }
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i] = half_to_float(load_u16le(src.data() + 2 * i));
      break;
    default:  // BF16
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load_u16le(src.data() + 2 * i));
      break;
  }
  a.data = n ? out : nullptr;
  a.keepalive = std::move(copy);
  return a;
}

std::size_t SafetensorsFile::file_size() const { return bytes_.size(); }

const std::string& SafetensorsFile::name() const { return name_; }

std::size_t SafetensorsFile::data_offset() const { return data_offset_; }

// ------------------------------------------------------------------------------ writing

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string name = path.string();
  auto refuse = [&](const std::string& problem) { fail(name, "cannot write: " + problem); };
  if (!path.has_filename()) refuse("not a file name");

  // Header in the order given ("__metadata__" first, as Hugging Face writes it).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header[std::string(kMetadataKey)] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::set<std::string_view> seen;
  std::vector<std::uint64_t> counts;
  std::uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string who = "tensor " + quote(t.name);
    if (t.name.empty()) refuse("a tensor has an empty name");
    if (t.name == kMetadataKey) refuse("a tensor cannot be named '__metadata__'");
    if (!seen.insert(t.name).second) refuse("two tensors are named " + quote(t.name));
    for (const std::int64_t d : t.shape)
      if (d < 0) refuse(who + ": shape " + shape_string(t.shape) + " has a negative dimension");
    std::uint64_t bytes = 0;
    if (!byte_count(t.shape, sizeof(float), &bytes) ||
        bytes > std::uint64_t(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_add_overflow(offset, bytes, &offset))
      refuse(who + ": shape " + shape_string(t.shape) + " is too large");
    if (bytes > 0 && t.data == nullptr) refuse(who + ": no data for shape " + shape_string(t.shape));
    counts.push_back(bytes / sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset - bytes, offset}}};
  }
  std::string text;
  try {
    text = header.dump();  // strict: throws on strings that are not valid UTF-8
  } catch (const nlohmann::json::exception&) {
    refuse("a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  if (text.size() > kMaxHeader)
    refuse("header of " + std::to_string(text.size()) + " bytes exceeds the format's limit");
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));

  detail::write_file_atomic(path, name, [&](int fd) -> const char* {
    if (!detail::write_all(fd, length, 8) || !detail::write_all(fd, text.data(), text.size()))
      return "writing the header";
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (!detail::write_floats_le(fd, tensors[i].data, counts[i])) return "writing the data";
    return nullptr;
  });
}

}  // namespace jomoim
