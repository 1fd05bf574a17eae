// test_safetensors.cpp — the safetensors reader and writer (include/jomoim/formats/safetensors.hpp):
// write/read round trips, zero-copy mapping and its lifetime, exact F16/BF16 widening against a
// reference written here from the IEEE definitions, every refusal with its one-line message,
// and a file written by another writer (tests/make_safetensors_fixtures.py: NumPy + PyTorch).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "file_test_util.hpp"
#include "jomoim/formats/npy.hpp"
#include "jomoim/formats/safetensors.hpp"

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using jomoim::test::read_file_bytes;
using jomoim::test::TempDir;
using jomoim::test::write_file_bytes;

// ------------------------------------------------------------------------------ helpers

std::string le64(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += char((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file built by hand: the length, `header` padded with spaces to a multiple of
// 8 (unless pad is false), then `data`.
std::string st_file(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Bytes held at a chosen offset from an 8-byte aligned base, for from_memory (which needs the
// caller to keep them alive) and for alignment tests.
class Buffer {
 public:
  explicit Buffer(const std::string& s, std::size_t misalign = 0)
      : storage_((s.size() + misalign) / 8 + 1), misalign_(misalign), size_(s.size()) {
    std::memcpy(reinterpret_cast<char*>(storage_.data()) + misalign, s.data(), s.size());
  }
  std::span<const std::byte> bytes() const {
    return {reinterpret_cast<const std::byte*>(storage_.data()) + misalign_, size_};
  }

 private:
  std::vector<std::uint64_t> storage_;
  std::size_t misalign_, size_;
};

std::string float_bytes(const std::vector<float>& v) {
  std::string s;
  for (float f : v) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) s += char((u >> (8 * i)) & 0xff);
  }
  return s;
}

std::string u16_bytes(const std::vector<std::uint16_t>& v) {
  std::string s;
  for (std::uint16_t u : v) {
    s += char(u & 0xff);
    s += char(u >> 8);
  }
  return s;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The message from_memory gives for `file` (named "bad.st"), or "" if it is accepted.
std::string refusal(const std::string& file) {
  Buffer b(file);
  try {
    SafetensorsFile::from_memory(b.bytes(), "bad.st");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One-line refusal naming the file and containing `needle`.
#define EXPECT_REFUSED(file, needle)                                          \
  do {                                                                        \
    const std::string msg_ = refusal(file);                                   \
    EXPECT_NE(msg_, "") << "accepted, expected a refusal with: " << (needle); \
    EXPECT_EQ(msg_.rfind("bad.st: ", 0), 0u) << msg_;                         \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_;   \
    EXPECT_EQ(msg_.find('\n'), std::string::npos) << "message: " << msg_;     \
  } while (0)

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::size_t begin,
                  std::size_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// ------------------------------------------------------------------------------ dtypes

TEST(Safetensors, DtypeNamesAndSizes) {
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  for (const auto& [name, size] : expected) {
    DType t;
    ASSERT_TRUE(parse_dtype(name, &t)) << name;
    EXPECT_EQ(dtype_name(t), name);
    EXPECT_EQ(dtype_size(t), size) << name;
  }
  DType t;
  EXPECT_FALSE(parse_dtype("f32", &t));
  EXPECT_FALSE(parse_dtype("F128", &t));
  EXPECT_FALSE(parse_dtype("", &t));
  EXPECT_EQ(dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(dtype_size(DType::F64), 8u);
}

// ------------------------------------------------------------------------------ round trips

TEST(Safetensors, RoundTripShapesAndMetadata) {
  TempDir dir("st");
  const fs::path path = dir.path() / "m.safetensors";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const std::vector<std::vector<std::int64_t>> shapes = {{},  {0},    {2, 0, 3}, {1},
                                                         {5}, {3, 4}, {2, 3, 4}, {1, 1, 1, 1, 7}};
  std::vector<std::string> names;
  std::vector<std::vector<float>> datas;
  std::vector<std::vector<std::int64_t>> all_shapes;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    names.push_back(std::string("t") + std::to_string(i));
    all_shapes.push_back(shapes[i]);
  }
  // Many more small tensors, with names that sort differently from the write order.
  for (int i = 0; i < 60; ++i) {
    names.push_back(std::string("layer.") + std::to_string(59 - i) + ".w");
    all_shapes.push_back({std::int64_t(1 + i % 5), std::int64_t(i % 3)});
  }
  names.push_back("h.0.attn.c_attn.weight \xc3\xa9");  // UTF-8 in a name
  all_shapes.push_back({4, 12});
  for (const auto& s : all_shapes) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& f : v) f = normal(rng);
    datas.push_back(v);
  }
  datas[3] = {-0.0f};
  datas[4] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
              std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
              std::numeric_limits<float>::max()};
  std::vector<TensorToWrite> tw;
  for (std::size_t i = 0; i < names.size(); ++i) tw.push_back({names[i], all_shapes[i], datas[i].data()});
  tw[1].data = nullptr;  // no elements: no data needed
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n2 lines"}, {"", ""}};
  write_safetensors(path, tw, meta);

  // The layout: 8-byte length, header padded with spaces to a multiple of 8, data in order.
  const std::string bytes = read_file_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[std::size_t(i)])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  const std::string header = bytes.substr(8, std::size_t(n));
  EXPECT_EQ(header.substr(0, 16), "{\"__metadata__\":");
  const auto last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.name(), path.string());
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.data_offset(), 8 + n);
  EXPECT_EQ(f.data_offset() % 8, 0u);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), names.size());
  std::size_t expected_begin = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const TensorInfo* t = f.find(names[i]);
    ASSERT_NE(t, nullptr) << names[i];
    EXPECT_EQ(t->name, names[i]);
    EXPECT_EQ(t->dtype, DType::F32);
    EXPECT_EQ(t->shape, all_shapes[i]);
    EXPECT_EQ(t->numel(), std::int64_t(datas[i].size()));
    EXPECT_EQ(t->begin, expected_begin) << names[i] << ": laid out in the order given";
    expected_begin += 4 * datas[i].size();
    EXPECT_EQ(t->end, expected_begin);
    const FloatArray a = f.load_f32(names[i]);
    EXPECT_EQ(a.shape, all_shapes[i]);
    EXPECT_EQ(a.numel(), std::int64_t(datas[i].size()));
    EXPECT_TRUE(a.zero_copy);
    for (std::size_t j = 0; j < datas[i].size(); ++j)
      ASSERT_EQ(bits_of(a.data[j]), bits_of(datas[i][j])) << names[i] << "[" << j << "]";
    if (!datas[i].empty()) {
      EXPECT_EQ(std::memcmp(f.raw(*t).data(), datas[i].data(), datas[i].size() * 4), 0);
    }
    EXPECT_EQ(f.raw(*t).size(), datas[i].size() * 4);
  }
  EXPECT_EQ(f.data_offset() + expected_begin, f.file_size());
  for (std::size_t i = 1; i < f.tensors().size(); ++i)
    EXPECT_LE(f.tensors()[i - 1].begin, f.tensors()[i].begin) << "tensors() sorted by offset";
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_EQ(f.find("t"), nullptr);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"m.safetensors"}) << "no temporary file left";
}

TEST(Safetensors, WritesAnEmptyFile) {
  TempDir dir("st");
  const fs::path path = dir.path() / "e.safetensors";
  write_safetensors(path, {});
  EXPECT_EQ(read_file_bytes(path), le64(8) + "{}      ");
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.data_offset(), 16u);
}

TEST(Safetensors, ZeroCopyOutlivesTheFileObjectAndTheDirectoryEntry) {
  TempDir dir("st");
  const fs::path path = dir.path() / "z.safetensors";
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f - 3.0f;
  const std::vector<TensorToWrite> tw = {{"a", {10, 100}, v.data()}, {"b", {3}, v.data()}};
  write_safetensors(path, tw);
  FloatArray a;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    a = f.load_f32("a");
    EXPECT_TRUE(a.zero_copy);
    EXPECT_EQ(static_cast<const void*>(a.data), static_cast<const void*>(f.raw(*f.find("a")).data()))
        << "F32 is a view into the mapping";
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data) % 4, 0u);
  }
  fs::remove(path);  // the mapping keeps the file's contents
  const FloatArray copy = a;
  a = FloatArray();
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(copy.data[i], v[i]);
}

TEST(Safetensors, ReplacesAnExistingFileAtomically) {
  TempDir dir("st");
  const fs::path path = dir.path() / "r.safetensors";
  write_file_bytes(path, "old contents");
  const float x[2] = {1.0f, 2.0f};
  const std::vector<TensorToWrite> tw = {{"x", {2}, x}};
  write_safetensors(path, tw, {{"k", "v"}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.load_f32("x").data[1], 2.0f);
  EXPECT_EQ(f.metadata().at("k"), "v");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"r.safetensors"});
}

TEST(Safetensors, WriterRefusals) {
  TempDir dir("st");
  const fs::path path = dir.path() / "w.safetensors";
  write_file_bytes(path, "keep me");
  const float x[4] = {1, 2, 3, 4};
  struct Case {
    std::vector<TensorToWrite> tensors;
    std::map<std::string, std::string> meta;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{{"", {1}, x}}, {}, "empty name"},
      {{{"a", {1}, x}, {"a", {2}, x}}, {}, "two tensors are named 'a'"},
      {{{"__metadata__", {1}, x}}, {}, "'__metadata__'"},
      {{{"a", {2, -1}, x}}, {}, "negative dimension"},
      {{{"a", {4}, nullptr}}, {}, "no data for shape [4]"},
      {{{"a", {std::int64_t(1) << 40, std::int64_t(1) << 40}, x}}, {}, "too large"},
      {{{"bad\xff", {1}, x}}, {}, "not valid UTF-8"},
      {{{"a", {1}, x}}, {{"k", "\xc3"}}, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    try {
      write_safetensors(path, c.tensors, c.meta);
      ADD_FAILURE() << "accepted; expected: " << c.needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path.string() + ": cannot write: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    }
    EXPECT_EQ(read_file_bytes(path), "keep me");
    EXPECT_EQ(dir.listing(), std::vector<std::string>{"w.safetensors"});
  }
  // A folder that does not exist: nothing is created.
  const std::vector<TensorToWrite> ok = {{"a", {1}, x}};
  EXPECT_THROW(write_safetensors(dir.path() / "missing" / "w.safetensors", ok), Error);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"w.safetensors"});
}

// ------------------------------------------------------------------------------ conversions

// binary16 from its definition: (-1)^s × 2^(e-15) × 1.m for 0 < e < 31, (-1)^s × 2^-14 × 0.m
// for e = 0; e = 31 is inf (m = 0) or NaN. Computed in double, independent of the library.
double half_reference(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(double(m) / 1024.0, -14);
  else
    v = std::ldexp(1.0 + double(m) / 1024.0, e - 15);
  return s ? -v : v;
}

// bfloat16: 1 sign, 8 exponent (bias 127), 7 mantissa bits.
double bf16_reference(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
  double v;
  if (e == 255)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(double(m) / 128.0, -126);
  else
    v = std::ldexp(1.0 + double(m) / 128.0, e - 127);
  return s ? -v : v;
}

// A file with one 16-bit tensor "x" holding `bits`.
std::string u16_file(const std::string& dtype, const std::vector<std::uint16_t>& bits) {
  // Built piecewise: "{" + std::string&& trips a false -Wrestrict in g++ 12 here.
  std::string shape = "[";
  shape += std::to_string(bits.size());
  shape += "]";
  std::string header = "{";
  header += entry("x", dtype, shape, 0, 2 * bits.size());
  header += "}";
  return st_file(header, u16_bytes(bits));
}

void expect_all_16bit_values(const std::string& dtype, double (*reference)(std::uint16_t), int mantissa_bits) {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::uint16_t(i);
  const Buffer b(u16_file(dtype, all));
  const SafetensorsFile f = SafetensorsFile::from_memory(b.bytes());
  const FloatArray a = f.load_f32("x");
  EXPECT_FALSE(a.zero_copy);
  ASSERT_EQ(a.numel(), 65536);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const double want = reference(all[i]);
    const float got = a.data[i];
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << dtype << " 0x" << std::hex << i;
      // The payload survives: the float's top mantissa bits are the 16-bit mantissa.
      const std::uint32_t payload = (bits_of(got) >> (23 - mantissa_bits)) & ((1u << mantissa_bits) - 1);
      ASSERT_EQ(payload, all[i] & ((1u << mantissa_bits) - 1)) << dtype << " 0x" << std::hex << i;
    } else {
      ASSERT_EQ(double(got), want) << dtype << " 0x" << std::hex << i;
    }
    ASSERT_EQ(std::signbit(got), (all[i] & 0x8000) != 0) << dtype << " 0x" << std::hex << i;
  }
}

TEST(Safetensors, F16ConvertsExactly) {
  // Hand-checked values: ±0, smallest subnormal, largest subnormal, smallest normal, 1, -2,
  // 1/3 rounded, max, ±inf, quiet NaN.
  const std::vector<std::uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xc000,
                                           0x3555, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00};
  const Buffer b(u16_file("F16", bits));
  const FloatArray a = SafetensorsFile::from_memory(b.bytes()).load_f32("x");
  ASSERT_EQ(a.numel(), 13);
  EXPECT_EQ(bits_of(a.data[0]), 0x00000000u);
  EXPECT_EQ(bits_of(a.data[1]), 0x80000000u);
  EXPECT_EQ(a.data[2], 5.9604644775390625e-08f);  // 2^-24
  EXPECT_EQ(a.data[3], 6.0975551605224609375e-05f);
  EXPECT_EQ(a.data[4], 6.103515625e-05f);  // 2^-14
  EXPECT_EQ(a.data[5], 1.0f);
  EXPECT_EQ(a.data[6], -2.0f);
  EXPECT_EQ(a.data[7], 0.333251953125f);
  EXPECT_EQ(a.data[8], 65504.0f);
  EXPECT_EQ(a.data[9], -65504.0f);
  EXPECT_EQ(a.data[10], std::numeric_limits<float>::infinity());
  EXPECT_EQ(a.data[11], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(a.data[12]), 0x7fc00000u);
  expect_all_16bit_values("F16", half_reference, 10);
}

TEST(Safetensors, BF16ConvertsExactly) {
  const std::vector<std::uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80,
                                           0xc000, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x3eab};
  const Buffer b(u16_file("BF16", bits));
  const FloatArray a = SafetensorsFile::from_memory(b.bytes()).load_f32("x");
  ASSERT_EQ(a.numel(), 12);
  EXPECT_EQ(bits_of(a.data[0]), 0x00000000u);
  EXPECT_EQ(bits_of(a.data[1]), 0x80000000u);
  EXPECT_EQ(a.data[2], 0x1p-133f);     // smallest subnormal
  EXPECT_EQ(a.data[3], 0x1.fcp-127f);  // largest subnormal: 127 × 2^-133
  EXPECT_EQ(a.data[4], 0x1p-126f);     // smallest normal
  EXPECT_EQ(a.data[5], 1.0f);
  EXPECT_EQ(a.data[6], -2.0f);
  EXPECT_EQ(a.data[7], 0x1.fep127f);  // max: (2 - 2^-7) × 2^127
  EXPECT_EQ(a.data[8], std::numeric_limits<float>::infinity());
  EXPECT_EQ(a.data[9], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(a.data[10]));
  EXPECT_EQ(a.data[11], 0.333984375f);
  expect_all_16bit_values("BF16", bf16_reference, 7);
}

TEST(Safetensors, MisalignedF32IsCopied) {
  const std::vector<float> v = {1.5f, -2.25f, 3.0e-42f, 7.0f};
  const std::string file = st_file("{" + entry("x", "F32", "[4]", 0, 16) + "}", float_bytes(v));
  for (std::size_t misalign = 0; misalign < 4; ++misalign) {
    const Buffer b(file, misalign);
    const SafetensorsFile f = SafetensorsFile::from_memory(b.bytes());
    const FloatArray a = f.load_f32("x");
    EXPECT_EQ(a.zero_copy, misalign == 0) << misalign;
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bits_of(a.data[i]), bits_of(v[i])) << misalign;
    EXPECT_EQ(a.keepalive != nullptr, misalign != 0) << "from_memory: the caller keeps the bytes";
  }
  // An F32 tensor after an odd-sized one sits at an odd offset inside an aligned file.
  const std::string odd = st_file("{" + entry("b", "U8", "[3]", 0, 3) + "," + entry("x", "F32", "[4]", 3, 19) + "}",
                                  "abc" + float_bytes(v));
  const Buffer b(odd);
  const SafetensorsFile f = SafetensorsFile::from_memory(b.bytes());
  const FloatArray a = f.load_f32("x");
  EXPECT_FALSE(a.zero_copy);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bits_of(a.data[i]), bits_of(v[i]));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.raw(*f.find("b")).data()), 3), "abc");
}

TEST(Safetensors, LoadF32Refusals) {
  const std::string file =
      st_file("{" + entry("d", "F64", "[1]", 0, 8) + "," + entry("i", "I64", "[1]", 8, 16) + "," +
                  entry("q", "F8_E4M3", "[2]", 16, 18) + "," + entry("t", "BOOL", "[]", 18, 19) + "}",
              std::string(19, '\0'));
  const Buffer b(file);
  const SafetensorsFile f = SafetensorsFile::from_memory(b.bytes(), "m.st");
  auto message = [&](const std::string& name) -> std::string {
    try {
      f.load_f32(name);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message("nope"), "m.st: no tensor named 'nope'");
  EXPECT_NE(message("d").find("'d' has dtype F64"), std::string::npos) << message("d");
  EXPECT_NE(message("i").find("dtype I64"), std::string::npos);
  EXPECT_NE(message("q").find("dtype F8_E4M3"), std::string::npos);
  EXPECT_NE(message("t").find("dtype BOOL"), std::string::npos);
  EXPECT_EQ(f.raw(*f.find("t")).size(), 1u);
  EXPECT_EQ(f.find("t")->numel(), 1);
  // raw() of a TensorInfo from elsewhere that does not fit this file
  TensorInfo alien{"alien", DType::F32, {100}, 0, 400};
  EXPECT_THROW(f.raw(alien), Error);
}

// ------------------------------------------------------------------------------ acceptance

TEST(Safetensors, AcceptsValidVariants) {
  // Header order differs from data order; zero-size tensors at the start, between and at the
  // end; padding with other JSON whitespace; no padding at all.
  const std::string data = float_bytes({1, 2, 3}) + u16_bytes({0x3c00, 0x4000});
  const std::string header = "{" + entry("late", "F16", "[2]", 12, 16) + ",\n " + entry("z0", "F32", "[0]", 0, 0) +
                             "," + entry("early", "F32", "[3]", 0, 12) + "," + entry("z1", "F32", "[4,0]", 12, 12) +
                             "," + entry("z2", "BF16", "[0,5]", 16, 16) + "}\n\t ";
  for (bool pad : {true, false}) {
    const Buffer b(st_file(header, data, pad));
    const SafetensorsFile f = SafetensorsFile::from_memory(b.bytes());
    ASSERT_EQ(f.tensors().size(), 5u);
    std::vector<std::string> order;
    for (const auto& t : f.tensors()) order.push_back(t.name);
    EXPECT_EQ(order, (std::vector<std::string>{"z0", "early", "z1", "late", "z2"}));
    EXPECT_EQ(f.load_f32("early").data[2], 3.0f);
    EXPECT_EQ(f.load_f32("late").data[1], 2.0f);
    EXPECT_EQ(f.load_f32("z1").numel(), 0);
    EXPECT_EQ(f.load_f32("z1").shape, (std::vector<std::int64_t>{4, 0}));
    EXPECT_EQ(f.load_f32("z2").numel(), 0);
  }
  // No tensors, no data; metadata only.
  const Buffer empty(st_file("{\"__metadata__\":{\"a\":\"b\",\"c\":\"\\u00e9\\n\"}}", ""));
  const SafetensorsFile f = SafetensorsFile::from_memory(empty.bytes());
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata().at("c"), "\xc3\xa9\n");
}

// ------------------------------------------------------------------------------ refusals

TEST(Safetensors, RefusesShortFilesAndBadLengths) {
  EXPECT_REFUSED("", "file is 0 bytes, too short");
  EXPECT_REFUSED(std::string(7, '\0'), "file is 7 bytes, too short");
  EXPECT_REFUSED(le64(100'000'001) + "{}", "header length 100000001 exceeds the format's limit of 100000000");
  EXPECT_REFUSED(le64(~std::uint64_t(0)) + "{}", "exceeds the format's limit");
  EXPECT_REFUSED(le64(16) + "{}", "header length 16 runs past the end of the file (2 bytes follow the length)");
  EXPECT_REFUSED(le64(0), "header is empty");
  EXPECT_REFUSED(le64(2) + "[]", "does not start with '{'");
  EXPECT_REFUSED(le64(3) + " {}", "does not start with '{'");
  // A valid file cut short: its header length now runs past the end, or its data is missing.
  const std::string whole = st_file("{" + entry("x", "F32", "[4]", 0, 16) + "}", float_bytes({1, 2, 3, 4}));
  EXPECT_REFUSED(whole.substr(0, 40), "runs past the end of the file");
  EXPECT_REFUSED(whole.substr(0, whole.size() - 1), "run past the end of the data section (15 bytes)");
}

TEST(Safetensors, RefusesBadJson) {
  EXPECT_REFUSED(st_file("{\"a\":", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{} x", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{}{}", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{'a': 1}", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{\"a\":1,}", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file(std::string("{\"\xff\":{}}"), ""), "UTF-8");
  // The parser's message quotes the bad byte; it comes back escaped, as printable ASCII.
  const std::string msg = refusal(st_file(std::string("{\"\xff\":{}}"), ""));
  EXPECT_NE(msg.find("\\xff"), std::string::npos) << msg;
  EXPECT_TRUE(std::all_of(msg.begin(), msg.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) << msg;
  EXPECT_REFUSED(st_file(std::string("{\"\xc3\x28\":{}}"), ""), "UTF-8");
  EXPECT_REFUSED(st_file(std::string("{}\xc3\xa9"), ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file(std::string("{}\0", 3), ""), "header has a NUL byte at offset 2");
  EXPECT_REFUSED(st_file(std::string("{}\0{\"junk\":1}", 13), ""), "NUL byte");
  EXPECT_REFUSED(st_file(std::string("{\"a\0\":1}", 8), ""), "NUL byte");
  EXPECT_REFUSED(st_file("{\"a\n\":1}", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{/*c*/}", ""), "header is not valid JSON");
  EXPECT_REFUSED(st_file("{\"a\":{\"b\":[[[[1]]]]}}", ""), "nests JSON containers more than 4 deep");
  EXPECT_REFUSED(st_file("{\"a\":[" + std::string(100000, '[') + "]}", ""), "nests JSON containers");
}

TEST(Safetensors, RefusesDuplicateKeys) {
  const std::string e = entry("x", "F32", "[1]", 0, 4);
  EXPECT_REFUSED(st_file("{" + e + "," + e + "}", float_bytes({1})), "header has the name 'x' twice");
  EXPECT_REFUSED(
      st_file("{" + entry("x", "F32", "[1]", 0, 4) + "," + entry("x", "F32", "[0]", 4, 4) + "}", float_bytes({1})),
      "'x' twice");
  EXPECT_REFUSED(
      st_file("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}", float_bytes({1})),
      "key 'dtype' twice inside 'x'");
  EXPECT_REFUSED(st_file("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", ""), "key 'a' twice inside '__metadata__'");
  EXPECT_REFUSED(st_file("{\"__metadata__\":{},\"__metadata__\":{}}", ""), "'__metadata__' twice");
  // The same name spelled with an escape is the same name.
  EXPECT_REFUSED(
      st_file("{" + e + ",\"\\u0078\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", float_bytes({1})),
      "'x' twice");
}

TEST(Safetensors, RefusesBadEntries) {
  const std::string d4 = float_bytes({1});
  EXPECT_REFUSED(st_file("{\"x\":5}", ""),
                 "tensor 'x': entry must be an object with dtype, shape and data_offsets, got an integer");
  EXPECT_REFUSED(st_file("{\"x\":[]}", ""), "entry must be an object");
  EXPECT_REFUSED(st_file("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", d4), "tensor 'x': missing 'dtype'");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", d4), "missing 'shape'");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", d4), "missing 'data_offsets'");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", d4),
                 "tensor 'x': unexpected key 'extra'");
  EXPECT_REFUSED(st_file("{" + entry("x", "F128", "[1]", 0, 4) + "}", d4), "tensor 'x': unknown dtype 'F128'");
  EXPECT_REFUSED(st_file("{" + entry("x", "f32", "[1]", 0, 4) + "}", d4), "unknown dtype 'f32'");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", d4), "dtype must be a string");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "1", 0, 4) + "}", d4), "shape must be an array");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[-1]", 0, 4) + "}", d4),
                 "shape entry must be a non-negative integer, got a negative integer");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[1.0]", 0, 4) + "}", d4), "got a fractional or out-of-range number");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[\"1\"]", 0, 4) + "}", d4), "got a string");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[[1]]", 0, 4) + "}", d4), "got an array");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[9223372036854775808]", 0, 4) + "}", d4), "too large");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[99999999999999999999]", 0, 4) + "}", d4), "out-of-range number");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", d4),
                 "data_offsets must be an array [begin, end], got an array of 3");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", d4),
                 "data_offsets must be an array [begin, end], got an object");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", d4),
                 "data_offsets end must be a non-negative integer");
  EXPECT_REFUSED(st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[null,4]}}", d4),
                 "data_offsets begin must be a non-negative integer, got null");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[0]", 4, 0) + "}", d4), "data_offsets [4, 0] end before they begin");
  // A name with a newline is quoted escaped, keeping the message on one line.
  EXPECT_REFUSED(st_file("{\"a\\nb\":5}", ""), "tensor 'a\\x0ab'");
}

TEST(Safetensors, RefusesLyingOffsets) {
  const std::string d16 = float_bytes({1, 2, 3, 4});
  // Wrong length for the dtype and shape.
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[2]", 0, 4) + "}", d16.substr(0, 4)),
                 "tensor 'x': shape [2] of F32 needs 8 bytes, but data_offsets [0, 4] hold 4");
  EXPECT_REFUSED(st_file("{" + entry("x", "F16", "[2,2]", 0, 16) + "}", d16), "shape [2, 2] of F16 needs 8 bytes");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[]", 0, 0) + "}", ""), "shape [] of F32 needs 4 bytes");
  // Sizes whose product overflows 64 bits (a naive check would wrap to the given length).
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[4611686018427387904,4]", 0, 0) + "}", ""), "overflows");
  EXPECT_REFUSED(st_file("{" + entry("x", "U8", "[4294967296,4294967296]", 0, 0) + "}", ""), "overflows");
  EXPECT_REFUSED(st_file("{" + entry("x", "F64", "[2305843009213693952]", 0, 0) + "}", ""), "overflows");
  // Out of the data section.
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[4]", 4, 20) + "}", d16),
                 "data_offsets [4, 20] run past the end of the data section (16 bytes)");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[1]", 18446744073709551611ull, 18446744073709551615ull) + "}", d16),
                 "data_offsets [18446744073709551611, 18446744073709551615] run past the end");
  EXPECT_REFUSED(st_file("{" + entry("x", "F32", "[1]", 0, 4) + "}", ""), "data_offsets [0, 4] run past the end");
  // Overlaps.
  EXPECT_REFUSED(st_file("{" + entry("a", "F32", "[3]", 0, 12) + "," + entry("b", "F32", "[2]", 8, 16) + "}", d16),
                 "tensors 'a' [0, 12) and 'b' [8, 16) overlap");
  EXPECT_REFUSED(st_file("{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("b", "F32", "[4]", 0, 16) + "}", d16),
                 "overlap");
  EXPECT_REFUSED(st_file("{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("z", "F32", "[0]", 8, 8) + "}", d16),
                 "overlap");
  // Holes and trailing bytes (refused, as the reference implementation refuses them).
  EXPECT_REFUSED(st_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[2]", 8, 16) + "}", d16),
                 "bytes [4, 8) of the data section belong to no tensor (a hole between 'a' and 'b'");
  EXPECT_REFUSED(st_file("{" + entry("b", "F32", "[3]", 4, 16) + "}", d16),
                 "bytes [0, 4) of the data section belong to no tensor (a hole before 'b'");
  EXPECT_REFUSED(st_file("{" + entry("a", "F32", "[3]", 0, 12) + "}", d16),
                 "data section has 4 bytes after the last tensor 'a'");
  EXPECT_REFUSED(st_file("{}", d16), "data section has 16 bytes after the last tensor");
}

TEST(Safetensors, RefusesBadMetadata) {
  EXPECT_REFUSED(st_file("{\"__metadata__\":[]}", ""), "__metadata__ must be an object of strings, got an array");
  EXPECT_REFUSED(st_file("{\"__metadata__\":\"x\"}", ""), "__metadata__ must be an object");
  EXPECT_REFUSED(st_file("{\"__metadata__\":{\"n\":1}}", ""),
                 "__metadata__ value of 'n' must be a string, got an integer");
  EXPECT_REFUSED(st_file("{\"__metadata__\":{\"n\":{}}}", ""), "must be a string, got an object");
  EXPECT_REFUSED(st_file("{\"__metadata__\":{\"n\":null}}", ""), "got null");
}

TEST(Safetensors, OpenRefusals) {
  TempDir dir("st");
  auto message = [](const fs::path& p) -> std::string {
    try {
      SafetensorsFile::open(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const fs::path missing = dir.path() / "missing.safetensors";
  EXPECT_EQ(message(missing).rfind(missing.string() + ": cannot open: ", 0), 0u) << message(missing);
  EXPECT_NE(message(dir.path()).find(": not a regular file"), std::string::npos) << message(dir.path());
  const fs::path empty = dir.path() / "empty.safetensors";
  write_file_bytes(empty, "");
  EXPECT_EQ(message(empty), empty.string() +
                                ": file is 0 bytes, too short for a safetensors file "
                                "(it starts with an 8-byte header length)");
  // A valid file truncated on disk.
  const fs::path cut = dir.path() / "cut.safetensors";
  const float x[8] = {};
  const std::vector<TensorToWrite> tw = {{"x", {8}, x}};
  write_safetensors(cut, tw);
  fs::resize_file(cut, fs::file_size(cut) - 4);
  EXPECT_NE(message(cut).find(cut.string() + ": tensor 'x': data_offsets [0, 32] run past the end"), std::string::npos)
      << message(cut);
  fs::resize_file(cut, 12);
  EXPECT_NE(message(cut).find("runs past the end of the file"), std::string::npos) << message(cut);
}

// ------------------------------------------------------------------------------ interop

// A file written by tests/make_safetensors_fixtures.py (NumPy and PyTorch, no shared code)
// against float32 arrays that NumPy/PyTorch computed and np.save wrote.
TEST(Safetensors, ReadsAFileFromAnIndependentWriter) {
  const fs::path dir = fs::path(JOMOIM_TEST_DATA_DIR) / "safetensors";
  const SafetensorsFile f = SafetensorsFile::open(dir / "interop.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "h\xc3\xa9llo"}}));
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.tensors()[0].name, "ids");
  const TensorInfo* ids = f.find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::I64);
  std::int64_t idv[3];
  ASSERT_EQ(f.raw(*ids).size(), sizeof idv);
  std::memcpy(idv, f.raw(*ids).data(), sizeof idv);
  EXPECT_EQ(idv[0], 1);
  EXPECT_EQ(idv[1], -2);
  EXPECT_EQ(idv[2], 3);
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"transformer.h.0.weight", "weight"}, {"scalar", "scalar"}, {"empty", "empty"}, {"half", "half"}, {"bf", "bf"}};
  for (const auto& [tensor, npy] : pairs) {
    const NpyArray want = read_npy(dir / ("interop_" + npy + ".npy"));
    const FloatArray got = f.load_f32(tensor);
    EXPECT_EQ(got.shape, want.shape) << tensor;
    ASSERT_EQ(got.numel(), std::int64_t(want.data.size())) << tensor;
    for (std::size_t i = 0; i < want.data.size(); ++i)
      ASSERT_EQ(bits_of(got.data[i]), bits_of(want.data[i])) << tensor << "[" << i << "]";
  }
  EXPECT_TRUE(f.load_f32("transformer.h.0.weight").zero_copy);
  EXPECT_EQ(f.find("half")->dtype, DType::F16);
  EXPECT_EQ(f.find("bf")->dtype, DType::BF16);
  EXPECT_EQ(f.load_f32("half").numel(), 216);
}

}  // namespace
}  // namespace jomoim
