// test_npy_ranged.cpp — partial access to .npy files (include/jomoim/formats/npy.hpp, "partial access"):
// the header-only parser against the whole-file parser, ranged reads against whole reads, the
// header the writer writes, and refusals (ranges outside the array, files that are not regular
// or that shrink after their header was read).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "file_test_util.hpp"
#include "jomoim/formats/npy.hpp"

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using jomoim::test::read_file_bytes;

// A fresh directory per test (gtest builds the fixture anew for each).
class NpyRanged : public ::testing::Test {
 protected:
  jomoim::test::TempDir tmp_{"npy-ranged"};
  const fs::path& dir_ = tmp_.path();
};

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST_F(NpyRanged, InfoMatchesTheWholeFileParser) {
  for (const std::vector<std::int64_t>& shape :
       std::vector<std::vector<std::int64_t>>{{}, {0}, {7}, {2, 3, 5, 4}, {1, 0, 9}, {3, 1, 100000}}) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> data(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.5f - 3.f;
    const fs::path p = dir_ / "a.npy";
    write_npy(p, shape, data.data());
    const NpyInfo info = read_npy_info(p);
    const NpyArray whole = read_npy(p);
    EXPECT_EQ(info.shape, whole.shape);
    EXPECT_EQ(info.count, whole.data.size());
    EXPECT_EQ(info.data_offset % 64, 0u);
    EXPECT_EQ(info.data_offset + info.count * 4, fs::file_size(p));
    // npy_header is exactly what write_npy put in front of the data.
    const std::string bytes = read_file_bytes(p);
    EXPECT_EQ(npy_header(shape), bytes.substr(0, std::size_t(info.data_offset)));
    // From the header bytes alone, as from the whole file.
    const NpyInfo from_prefix = parse_npy_info(as_bytes(bytes.substr(0, std::size_t(info.data_offset))), bytes.size());
    EXPECT_EQ(from_prefix.shape, info.shape);
    EXPECT_EQ(from_prefix.data_offset, info.data_offset);
  }
}

TEST_F(NpyRanged, RangesReadTheRightElements) {
  const std::vector<std::int64_t> shape = {2, 3, 37, 5};
  std::vector<float> data(2 * 3 * 37 * 5);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(i) + 0.25f;
  const fs::path p = dir_ / "r.npy";
  write_npy(p, shape, data.data());
  const NpyInfo info = read_npy_info(p);
  for (std::uint64_t first : {0u, 1u, 5u, 184u, 1000u, 1109u})
    for (std::uint64_t count : {0u, 1u, 3u, 185u}) {
      if (first + count > data.size()) continue;
      std::vector<float> got(count + 2, -7.f);
      read_npy_elements(p, info, first, count, got.data() + 1);
      EXPECT_EQ(got.front(), -7.f);
      EXPECT_EQ(got.back(), -7.f);
      for (std::uint64_t i = 0; i < count; ++i) ASSERT_EQ(got[i + 1], data[first + i]) << first << "+" << i;
    }
  // The whole array in one range.
  std::vector<float> all(data.size());
  read_npy_elements(p, info, 0, data.size(), all.data());
  EXPECT_EQ(all, data);
}

TEST_F(NpyRanged, Refusals) {
  const std::vector<std::int64_t> shape = {4, 8};
  std::vector<float> data(32, 1.f);
  const fs::path p = dir_ / "x.npy";
  write_npy(p, shape, data.data());
  const NpyInfo info = read_npy_info(p);
  float sink[40];
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { read_npy_elements(p, info, 30, 3, sink); }).find("outside the array of 32 elements"),
            std::string::npos);
  EXPECT_NE(message([&] { read_npy_elements(p, info, 33, 0, sink); }).find("outside the array"), std::string::npos);
  EXPECT_NE(message([&] { read_npy_elements(p, info, ~std::uint64_t(0), 2, sink); }).find("outside the array"),
            std::string::npos);
  // The file shrinks after its header was read.
  ASSERT_EQ(::truncate(p.c_str(), off_t(info.data_offset + 40)), 0);
  EXPECT_NE(message([&] { read_npy_elements(p, info, 0, 32, sink); }).find("file got shorter"), std::string::npos);
  // ... and read_npy_info now refuses it, as read_npy does.
  const std::string info_msg = message([&] { read_npy_info(p); });
  EXPECT_NE(info_msg.find("data is truncated"), std::string::npos) << info_msg;
  EXPECT_EQ(info_msg, message([&] { read_npy(p); }));
  // Not a regular file; a missing file.
  EXPECT_NE(message([&] { read_npy_info(dir_); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(message([&] { read_npy_info(dir_ / "missing.npy"); }).find("cannot open"), std::string::npos);
  // A prefix that stops inside the header the file announces.
  write_npy(p, shape, data.data());
  const std::string bytes = read_file_bytes(p);
  EXPECT_NE(message([&] { parse_npy_info(as_bytes(bytes.substr(0, 20)), bytes.size()); }).find("internal error"),
            std::string::npos);
  // Every refusal of a broken file is the whole-file parser's, word for word.
  for (std::size_t cut : {0u, 3u, 9u, 40u, 127u, 129u})
    EXPECT_EQ(message([&] { parse_npy_info(as_bytes(bytes.substr(0, cut)), cut, "f.npy"); }),
              message([&] { parse_npy(as_bytes(bytes.substr(0, cut)), "f.npy"); }))
        << "cut at " << cut;
}

}  // namespace
}  // namespace jomoim
