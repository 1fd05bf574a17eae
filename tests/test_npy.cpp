// test_npy.cpp — the .npy reader and writer (include/jomoim/formats/npy.hpp): round trips, the exact
// bytes the writer produces, every kind of file the reader must refuse (and the one-line
// message it gives), and atomic replacement on disk. NumPy itself reading and writing these
// files is checked by test_numpy_interop.py.
#include <gtest/gtest.h>
#include <sys/stat.h>

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

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using jomoim::test::read_file_bytes;
using jomoim::test::TempDir;

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The little-endian bytes of some floats, as they follow a '<f4' header.
std::string float_bytes(const std::vector<float>& v) {
  std::string s;
  for (float f : v) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) s += char((u >> (8 * i)) & 0xff);
  }
  return s;
}

// A .npy file built by hand: preamble of the given version, `dict` padded with spaces and a
// '\n' so the data starts at a multiple of 64 (as NumPy pads), then `data`.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1, int minor = 0) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append(63 - (preamble + header.size()) % 64, ' ');
  header += '\n';
  std::string f = "\x93NUMPY";
  f += char(major);
  f += char(minor);
  for (std::size_t i = 0; i < preamble - 8; ++i) f += char((header.size() >> (8 * i)) & 0xff);
  return f + header + data;
}

std::string dict_for(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

// ------------------------------------------------------------------------------ round trips

class NpyRoundTrip : public ::testing::TestWithParam<std::vector<std::int64_t>> {};

TEST_P(NpyRoundTrip, WriteThenReadGivesTheSameShapeAndBits) {
  const std::vector<std::int64_t> shape = GetParam();
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::mt19937 rng(std::uint32_t(n * 31 + shape.size()));
  std::uniform_real_distribution<float> uni(-1e3f, 1e3f);
  std::vector<float> data(static_cast<std::size_t>(n));
  for (auto& x : data) x = uni(rng);
  // Values a byte-level bug would mangle: signed zero, infinities, a NaN payload, subnormals.
  const float special[] = {-0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::lowest()};
  for (std::size_t i = 0; i < data.size() && i < std::size(special); ++i) data[i] = special[i];
  if (data.size() > std::size(special)) {
    const std::uint32_t nan_bits = 0x7fc01234u;
    std::memcpy(&data[std::size(special)], &nan_bits, 4);
  }

  TempDir dir("npy");
  const fs::path p = dir.path() / "a.npy";
  write_npy(p, shape, data.data());
  const NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, shape);
  ASSERT_EQ(a.data.size(), data.size());
  if (!data.empty()) {
    EXPECT_EQ(0, std::memcmp(a.data.data(), data.data(), data.size() * 4));  // bitwise
  }
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"a.npy"});  // no temporary file left

  // The same through parse_npy, and through the NpyArray overload of the writer.
  const NpyArray b = parse_npy(as_bytes(read_file_bytes(p)), "a.npy");
  EXPECT_EQ(b.shape, shape);
  write_npy(dir.path() / "b.npy", a);
  EXPECT_EQ(read_file_bytes(p), read_file_bytes(dir.path() / "b.npy"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, NpyRoundTrip,
                         ::testing::Values(std::vector<std::int64_t>{}, std::vector<std::int64_t>{0},
                                           std::vector<std::int64_t>{1}, std::vector<std::int64_t>{7},
                                           std::vector<std::int64_t>{1000}, std::vector<std::int64_t>{2, 3},
                                           std::vector<std::int64_t>{0, 5}, std::vector<std::int64_t>{5, 0},
                                           std::vector<std::int64_t>{3, 0, 2}, std::vector<std::int64_t>{1, 1, 1, 1},
                                           std::vector<std::int64_t>{2, 3, 4, 5},
                                           std::vector<std::int64_t>{2, 1, 3, 1, 2},
                                           std::vector<std::int64_t>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2},
                                           std::vector<std::int64_t>{123456789012, 0}));

// ------------------------------------------------------------------------------ the writer

TEST(NpyWriter, WritesExactlyTheBytesNumPyWrites) {
  // NumPy 1.24's np.save(f, np.zeros((2, 3), np.float32)): a 118-byte header (the dict, 20
  // spaces of room for the first dimension to grow, spaces up to 128 bytes in all, '\n').
  TempDir dir("npy");
  const std::vector<float> data = {1, 2, 3, 4, 5, -6.5f};
  write_npy(dir.path() / "a.npy", std::vector<std::int64_t>{2, 3}, data.data());
  const std::string f = read_file_bytes(dir.path() / "a.npy");
  const std::string dict = dict_for("(2, 3)");
  ASSERT_EQ(f.size(), 128u + 24u);
  EXPECT_EQ(f.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));
  EXPECT_EQ(f.substr(10, 118), dict + std::string(118 - dict.size() - 1, ' ') + "\n");
  EXPECT_EQ(f.substr(128), float_bytes(data));
}

TEST(NpyWriter, ScalarAndOneDimensionalHeaders) {
  TempDir dir("npy");
  const float x = 1.5f;
  write_npy(dir.path() / "s.npy", std::vector<std::int64_t>{}, &x);
  const std::string s = read_file_bytes(dir.path() / "s.npy");
  ASSERT_EQ(s.size(), 128u + 4u);
  EXPECT_EQ(s.substr(10, dict_for("()").size()), dict_for("()"));  // no room to grow: no dimension
  EXPECT_EQ(s.substr(128), float_bytes({1.5f}));

  const std::vector<float> five(5, 0.25f);
  write_npy(dir.path() / "v.npy", std::vector<std::int64_t>{5}, five.data());
  const std::string v = read_file_bytes(dir.path() / "v.npy");
  EXPECT_EQ(v.substr(10, dict_for("(5,)").size()), dict_for("(5,)"));  // a 1-tuple has its comma
}

TEST(NpyWriter, HeaderIsAlignedTo64AndOneLineForManyRanks) {
  TempDir dir("npy");
  for (std::size_t rank = 0; rank <= 40; ++rank) {
    std::vector<std::int64_t> shape(rank, 1);
    if (rank) shape[0] = 98765;  // a first dimension of several digits
    std::vector<float> data(rank ? 98765 : 1, 0.0f);
    const fs::path p = dir.path() / "r.npy";
    write_npy(p, shape, data.data());
    const std::string f = read_file_bytes(p);
    const std::size_t hlen = std::uint8_t(f[8]) | std::size_t(std::uint8_t(f[9])) << 8;
    EXPECT_EQ((10 + hlen) % 64, 0u) << "rank " << rank;
    EXPECT_EQ(f[10 + hlen - 1], '\n') << "rank " << rank;
    EXPECT_EQ(f.substr(10, hlen - 1).find('\n'), std::string::npos) << "rank " << rank;
    EXPECT_EQ(f[10 + hlen - 2], ' ') << "rank " << rank;  // at least one space of padding
    EXPECT_EQ(read_npy(p).shape, shape);
  }
}

TEST(NpyWriter, ReplacesAnExistingFileAtomically) {
  TempDir dir("npy");
  const fs::path p = dir.path() / "a.npy";
  std::ofstream(p) << "old contents";
  const float x = 2.0f;
  write_npy(p, std::vector<std::int64_t>{1}, &x);
  EXPECT_EQ(read_npy(p).data, std::vector<float>{2.0f});
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"a.npy"});
}

TEST(NpyWriter, NewFilesGetTheUmaskPermissions) {
  TempDir dir("npy");
  const mode_t mask = ::umask(0);
  ::umask(mask);
  const float x = 0;
  write_npy(dir.path() / "a.npy", std::vector<std::int64_t>{1}, &x);
  struct stat st {};
  ASSERT_EQ(0, ::stat((dir.path() / "a.npy").c_str(), &st));
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
}

void expect_write_refused(const fs::path& p, std::span<const std::int64_t> shape, const float* data,
                          const std::string& problem) {
  try {
    write_npy(p, shape, data);
    ADD_FAILURE() << "write_npy(" << p << ") did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(NpyWriter, FailuresThrowAndLeaveNothingBehind) {
  TempDir dir("npy");
  const float x[4] = {};
  // The target is a directory: the rename fails, the temporary file is removed.
  fs::create_directory(dir.path() / "d.npy");
  expect_write_refused(dir.path() / "d.npy", std::vector<std::int64_t>{4}, x, "cannot write");
  EXPECT_TRUE(fs::is_directory(dir.path() / "d.npy"));
  EXPECT_TRUE(fs::is_empty(dir.path() / "d.npy"));
  // No such directory.
  expect_write_refused(dir.path() / "missing" / "a.npy", std::vector<std::int64_t>{4}, x, "No such file");
  // Shapes that describe no valid array.
  expect_write_refused(dir.path() / "n.npy", std::vector<std::int64_t>{2, -1}, x, "negative");
  expect_write_refused(dir.path() / "o.npy", std::vector<std::int64_t>{1 << 30, 1 << 30, 1 << 30}, x,
                       "too many elements");
  expect_write_refused(dir.path() / "z.npy", std::vector<std::int64_t>{4}, nullptr, "no data");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"d.npy"});

  NpyArray wrong{{2, 3}, std::vector<float>(5)};
  EXPECT_THROW(write_npy(dir.path() / "w.npy", wrong), Error);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"d.npy"});
}

// ------------------------------------------------------------------------------ the reader

TEST(NpyReader, AcceptsEveryWayNumPyAndPythonMaySpellTheHeader) {
  const std::string six = float_bytes({1, 2, 3, 4, 5, 6});
  const std::vector<std::string> dicts = {
      dict_for("(2, 3)"),
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",  // no trailing comma
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",  // any key order
      "{'fortran_order': False, 'descr': '<f4', 'shape': (2, 3),}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",    // double quotes
      "  {  'descr' :'<f4' ,\t'fortran_order':False,'shape':( 2 ,3 , ) , }",  // odd spacing
      "{'descr': '<f4', 'fortran_order': False, 'shape': (+2, 3)}",
  };
  for (const std::string& d : dicts) {
    SCOPED_TRACE(d);
    for (int major : {1, 2}) {
      const NpyArray a = parse_npy(as_bytes(npy_file(d, six, major)), "t.npy");
      EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
      EXPECT_EQ(a.data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    }
  }
  // Without alignment padding: the header only has to end in '\n'.
  std::string unpadded = dict_for("(2, 3)") + "\n";
  std::string f = std::string("\x93NUMPY\x01\x00", 8) + char(unpadded.size()) + '\0' + unpadded + six;
  EXPECT_EQ(parse_npy(as_bytes(f), "t.npy").shape, (std::vector<std::int64_t>{2, 3}));
  // Scalars, 1-tuples, empty arrays.
  EXPECT_EQ(parse_npy(as_bytes(npy_file(dict_for("()"), float_bytes({7}))), "t.npy").data, std::vector<float>{7});
  EXPECT_EQ(parse_npy(as_bytes(npy_file(dict_for("(3,)"), float_bytes({1, 2, 3}))), "t.npy").shape,
            std::vector<std::int64_t>{3});
  EXPECT_EQ(parse_npy(as_bytes(npy_file(dict_for("(0, 9)"), "")), "t.npy").shape, (std::vector<std::int64_t>{0, 9}));
  EXPECT_EQ(parse_npy(as_bytes(npy_file(dict_for("(-0,)"), "")), "t.npy").shape, std::vector<std::int64_t>{0});
}

struct Refusal {
  const char* name;
  std::string file;
  const char* problem;  // a piece of the expected message
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

std::string with_dict(const std::string& dict, const std::string& data = float_bytes({1, 2, 3, 4, 5, 6})) {
  return npy_file(dict, data);
}

std::vector<Refusal> refusals() {
  const std::string six = float_bytes({1, 2, 3, 4, 5, 6});
  const std::string good = npy_file(dict_for("(2, 3)"), six);
  std::string huge_header = std::string("\x93NUMPY\x02\x00", 8) + std::string("\xff\xff\xff\x7f", 4) + "{";
  std::string short_header = good.substr(0, 8) + char(0x7f) + char(0x00) + good.substr(10, 50);
  std::string no_newline = good;
  no_newline[127] = ' ';
  std::string nul_inside = good;
  nul_inside[80] = '\0';
  std::string newline_inside = good;
  newline_inside[80] = '\n';
  std::string high_byte = good;
  high_byte[80] = char(0xe9);
  std::string zero_header = std::string("\x93NUMPY\x01\x00\x00\x00", 10);
  std::string deep =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(200, '(') + std::string(200, ')') + "}";
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1, ";
  rank65 += ")";
  return {
      {"EmptyFile", "", "file is empty (0 bytes)"},
      {"ShorterThanMagic", "\x93NUM", "not a .npy file"},
      {"BadMagic", "\x93NUMPZ" + good.substr(6), "not a .npy file"},
      {"TextFile", "hello, world\n", "not a .npy file"},
      {"MagicOnly", "\x93NUMPY", "ends inside the .npy preamble"},
      {"CutInHeaderLength", std::string("\x93NUMPY\x02\x00\x10", 9), "ends inside the .npy preamble"},
      {"Version3", npy_file(dict_for("(2, 3)"), six, 3, 0), "unsupported .npy format version 3.0"},
      {"Version1_1", npy_file(dict_for("(2, 3)"), six, 1, 1), "unsupported .npy format version 1.1"},
      {"Version0", npy_file(dict_for("(2, 3)"), six, 0, 0), "unsupported .npy format version 0.0"},
      {"HeaderLengthPastEOF", short_header, "header length 127 runs past the end of the file"},
      {"HugeHeaderLength", huge_header, "header length 2147483647 runs past the end of the file"},
      {"ZeroLengthHeader", zero_header, "does not end with a newline"},
      {"HeaderWithoutNewline", no_newline, "does not end with a newline"},
      {"NulInHeader", nul_inside, "byte 0x00 at offset 70"},
      {"NewlineInHeader", newline_inside, "byte 0x0a at offset 70"},
      {"NonAsciiInHeader", high_byte, "byte 0xe9"},
      {"BigEndian", with_dict("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }"),
       "data type '>f4' (big-endian float32) is not supported; expected '<f4'"},
      {"Float64", with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", six + six),
       "data type '<f8' (float64)"},
      {"Int32", with_dict("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }"), "data type '<i4' (int32)"},
      {"Float16", with_dict("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }"),
       "data type '<f2' (float16)"},
      {"Uint8", with_dict("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }"), "data type '|u1' (uint8)"},
      {"NativeOrder", with_dict("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }"),
       "'=f4' (native-endian float32)"},
      {"Structured", with_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }"),
       "data type [('a', '<f4')] is not supported (structured"},
      {"FortranOrder", with_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"),
       "Fortran (column-major) order"},
      {"FortranOrderNotBool", with_dict("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }"),
       "'fortran_order' must be True or False, got 0"},
      {"MissingDescr", with_dict("{'fortran_order': False, 'shape': (2, 3), }"), "no 'descr' key"},
      {"MissingFortranOrder", with_dict("{'descr': '<f4', 'shape': (2, 3), }"), "no 'fortran_order' key"},
      {"MissingShape", with_dict("{'descr': '<f4', 'fortran_order': False, }"), "no 'shape' key"},
      {"ExtraKey", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'foo': 1}"),
       "unexpected key 'foo'"},
      {"DuplicateKey", with_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}"),
       "the key 'descr' twice"},
      {"EmptyDict", with_dict("{}"), "no 'descr' key"},
      {"NotADict", with_dict("['descr', '<f4']"), "expected '{'"},
      {"UnclosedDict", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"), "expected ',' or '}'"},
      {"MissingColon", with_dict("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}"),
       "expected ':' after the key 'descr'"},
      {"MissingComma", with_dict("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}"), "expected ',' or '}'"},
      {"DoubleComma", with_dict("{'descr': '<f4',, 'fortran_order': False, 'shape': (2, 3)}"), "expected a quoted key"},
      {"UnquotedKey", with_dict("{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}"), "expected a quoted key"},
      {"UnterminatedString", with_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}"),
       "expected ',' or '}'"},
      {"UnterminatedAtEnd", with_dict("{'descr': '<f4"), "unterminated string"},
      {"EscapeInString", with_dict("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}"),
       "escape sequences"},
      {"TextAfterDict", with_dict(dict_for("(2, 3)") + " x"), "unexpected text after the closing '}'"},
      {"LowercaseFalse", with_dict("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3)}"),
       "unknown name 'false'"},
      {"MissingValue", with_dict("{'descr': '<f4', 'fortran_order': , 'shape': (2, 3)}"), "unexpected character ','"},
      {"ShapeIsList", with_dict(dict_for("[2, 3]")), "'shape' must be a tuple of non-negative integers, got [2, 3]"},
      {"ShapeIsInteger", with_dict(dict_for("(6)")), "got 6 (a 1-tuple needs a comma"},
      {"ShapeIsNone", with_dict(dict_for("None")), "got None"},
      {"ShapeHasFloat", with_dict(dict_for("(2.0, 3)")), "expected a decimal integer"},
      {"ShapeHasHex", with_dict(dict_for("(0x2, 3)")), "expected a decimal integer"},
      {"ShapeHasLeadingZero", with_dict(dict_for("(02, 3)")), "leading zero"},
      {"ShapeHasBool", with_dict(dict_for("(True, 3)")), "non-integer entry True"},
      {"ShapeHasString", with_dict(dict_for("('2', 3)")), "non-integer entry '2'"},
      {"ShapeHasTuple", with_dict(dict_for("((2,), 3)")), "non-integer entry (2,)"},
      {"ShapeUnclosed", with_dict(dict_for("(2, 3")), "unexpected character '}'"},
      {"ShapeMissingComma", with_dict(dict_for("(2 3)")), "expected ',' or ')'"},
      {"ShapeBareSign", with_dict(dict_for("(-, 3)")), "expected digits"},
      {"DeepNesting", with_dict(deep), "nested more than 16 deep"},
      {"NegativeDimension", with_dict(dict_for("(-2, 3)")), "negative dimension"},
      {"DimensionTooLargeForInt64", with_dict(dict_for("(99999999999999999999,)")), "too large for int64"},
      {"ZeroDoesNotExcuseHugeDimension", with_dict(dict_for("(0, 9223372036854775808)")), "too large for int64"},
      {"ElementBytesOverflow", with_dict(dict_for("(2305843009213693952,)")), "too many elements"},
      {"ProductOverflow", with_dict(dict_for("(4294967296, 4294967296)")), "too many elements"},
      {"ZeroDoesNotExcuseOverflow", with_dict(dict_for("(0, 4294967296, 4294967296)")), "too many elements"},
      {"TooManyDimensions", with_dict(dict_for(rank65)), "65 dimensions"},
      {"LargestShapeStillNeedsItsData", with_dict(dict_for("(2305843009213693951,)")), "data is truncated"},
      {"TruncatedData", good.substr(0, good.size() - 1),
       "data is truncated: shape [2, 3] needs 24 bytes of float32, but only 23 follow the header"},
      {"NoData", npy_file(dict_for("(2, 3)"), ""), "needs 24 bytes of float32, but only 0"},
      {"ScalarWithoutData", npy_file(dict_for("()"), ""), "needs 4 bytes"},
      {"TrailingData", good + "abcd", "file has 4 bytes after the data the header describes"},
      {"TrailingByteAfterEmpty", npy_file(dict_for("(0,)"), "x"), "file has 1 bytes after the data"},
  };
}

class NpyRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(NpyRefusal, ThrowsOneLineNamingTheFileAndTheProblem) {
  const Refusal& r = GetParam();
  try {
    parse_npy(as_bytes(r.file), "dir/t.npy");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("dir/t.npy: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(r.problem), std::string::npos) << "message: " << msg << "\nexpected to contain: " << r.problem;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 250u) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, NpyRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(NpyReader, ReadNpyNamesTheFileForIoErrors) {
  TempDir dir("npy");
  for (const auto& [path, problem] : {std::pair{dir.path() / "missing.npy", "cannot open: No such file or directory"},
                                      std::pair{dir.path(), "cannot read: Is a directory"}}) {
    try {
      read_npy(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), path.string() + ": " + problem);
    }
  }
  // A refused file read from disk is named by its path.
  std::ofstream(dir.path() / "bad.npy") << "not numpy";
  try {
    read_npy(dir.path() / "bad.npy");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind((dir.path() / "bad.npy").string() + ": not a .npy file", 0), 0u);
  }
}

// Every prefix and every one-byte change of a valid file either parses or throws Error: never
// another exception, never a read out of bounds (the sanitizer build and the fuzzer check the
// latter more thoroughly).
TEST(NpyReader, SurvivesEveryTruncationAndOneByteChange) {
  const std::string good = npy_file(dict_for("(2, 3)"), float_bytes({1, 2, 3, 4, 5, 6}));
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::vector<char> prefix(good.begin(), good.begin() + std::ptrdiff_t(n));  // exact-size buffer
    EXPECT_THROW(parse_npy({reinterpret_cast<const std::byte*>(prefix.data()), n}, "t.npy"), Error) << n;
  }
  int accepted = 0;
  for (std::size_t i = 0; i < 128; ++i)
    for (int b = 0; b < 256; ++b) {
      std::string f = good;
      f[i] = char(b);
      try {
        parse_npy(as_bytes(f), "t.npy");
        ++accepted;
      } catch (const Error&) {
      }
    }
  // Some changes keep the file valid (a space for a tab, a digit of the padding ...), most don't.
  EXPECT_GT(accepted, 128);
  EXPECT_LT(accepted, 128 * 256 / 4);
}

}  // namespace
}  // namespace jomoim
