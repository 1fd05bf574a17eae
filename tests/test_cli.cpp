// test_cli.cpp — `jomoim attend` end to end: the built program (JOMOIM_EXE) is run in a fresh
// temporary directory on .npy files written with write_npy, its outputs are read back and
// compared with the float64 reference, and every kind of bad input must be refused with one
// line on stderr, a non-zero exit and no file written.
//
// Tolerance (out, lse, probs): 4 × the largest error of a naive float32 computation of the
// same case (plain loops in float, std::exp; see naive_attention) plus 16 float32 epsilons of
// the quantity's scale (max |V| for out, since each output is a convex combination of rows of
// V; 1 for probs; max(1, max |lse|) for lse). The first term grows with D, Nk and the size of
// the scores exactly as rounding does in any float32 kernel; the second covers cases where the
// naive computation happens to be exact (Nk = 1, say) while a kernel's vectorised exp (a few
// ulp) and the final rounding to float32 are not. Fully masked rows must be exact: zeros, and
// log-sum-exp -inf.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "file_test_util.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/formats/npy.hpp"

#ifndef JOMOIM_EXE
#error "JOMOIM_EXE must name the jomoim program (tests/CMakeLists.txt defines it)"
#endif

namespace jomoim {
namespace {

namespace fs = std::filesystem;
using jomoim::test::read_file_bytes;
using Shape = std::vector<std::int64_t>;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

struct RunResult {
  int code = -1;
  std::string out, err;
};

// A fresh directory per test: `work` holds the program's files (and is its working
// directory), `logs` its captured stdout and stderr, so a listing of `work` shows exactly the
// files the program created.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directory(work_);
    fs::create_directory(root_ / "logs");
  }

  fs::path path(const std::string& name) const { return work_ / name; }

  void put(const std::string& name, const Shape& shape, const std::vector<float>& data) {
    write_npy(path(name), shape, data.data());
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(work_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Runs `jomoim attend <args>` in the work directory (no shell: arguments pass as they are).
  RunResult attend(const std::vector<std::string>& args) const {
    std::vector<std::string> argv_s = {JOMOIM_EXE, "attend"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const fs::path out = root_ / "logs" / "stdout", err = root_ / "logs" / "stderr";
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 || ::chdir(work_.c_str()) != 0) ::_exit(126);
      ::execv(JOMOIM_EXE, argv.data());
      ::_exit(127);
    }
    RunResult r;
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "could not run " << JOMOIM_EXE;
      return r;
    }
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file_bytes(out);
    r.err = read_file_bytes(err);
    return r;
  }

  jomoim::test::TempDir tmp_{"cli"};
  fs::path root_ = tmp_.path(), work_ = root_ / "work";
};

std::vector<float> random_floats(std::int64_t n, std::mt19937& rng, float magnitude) {
  std::uniform_real_distribution<float> uni(-magnitude, magnitude);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = uni(rng);
  return v;
}

// ------------------------------------------------------------------------ cases that work

struct Case {
  const char* name;
  std::int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  bool causal = false;
  std::optional<float> scale = {};
  std::optional<Shape> bias_shape = {};  // rank 0 to 4, broadcast to [B, Hq, Nq, Nk]
  bool mask = false;                     // -inf in the bias, including a whole row
  bool col3b1b = false;
  Shape key_lengths = {};
  int threads = 0;
  bool extras = true;   // also ask for --lse and --probs
  float magnitude = 1;  // inputs uniform in [-magnitude, magnitude)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Float32 attention in plain loops, in the paper layout: the error yardstick for the
// tolerance. Written from the contract in docs/design.md, independently of the library.
struct Float32Result {
  std::vector<float> out, lse, probs;  // [B,Hq,Nq,Dv], [B,Hq,Nq], [B,Hq,Nq,Nk]
};
Float32Result naive_attention(const Case& c, ConstTensor4 q, ConstTensor4 k, ConstTensor4 v,
                              const std::optional<ConstTensor4>& bias, float scale) {
  Float32Result r;
  r.out.assign(std::size_t(c.B * c.Hq * c.Nq * c.Dv), 0.0f);
  r.lse.assign(std::size_t(c.B * c.Hq * c.Nq), -kInf);
  r.probs.assign(std::size_t(c.B * c.Hq * c.Nq * c.Nk), 0.0f);
  std::vector<float> s(static_cast<std::size_t>(c.Nk));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.Hq; ++h)
      for (std::int64_t i = 0; i < c.Nq; ++i) {
        const std::int64_t row = (b * c.Hq + h) * c.Nq + i, hk = h / (c.Hq / c.Hkv);
        const std::int64_t L = c.key_lengths.empty() ? c.Nk : c.key_lengths[std::size_t(b)];
        const std::int64_t visible = c.causal ? std::clamp<std::int64_t>(i + (L - c.Nq) + 1, 0, L) : L;
        float m = -kInf;
        for (std::int64_t j = 0; j < c.Nk; ++j) {
          s[j] = -kInf;
          if (j >= visible) continue;
          float dot = 0;
          for (std::int64_t d = 0; d < c.D; ++d) dot += q(b, h, i, d) * k(b, hk, j, d);
          s[j] = scale * dot;
          if (bias) {
            const auto& bs = bias->shape;
            s[j] += (*bias)(bs[0] == 1 ? 0 : b, bs[1] == 1 ? 0 : h, bs[2] == 1 ? 0 : i, bs[3] == 1 ? 0 : j);
          }
          m = std::max(m, s[j]);
        }
        if (m == -kInf) continue;
        float sum = 0;
        for (std::int64_t j = 0; j < c.Nk; ++j) sum += s[j] = s[j] == -kInf ? 0.0f : std::exp(s[j] - m);
        r.lse[row] = m + std::log(sum);
        for (std::int64_t j = 0; j < c.Nk; ++j) {
          const float p = s[j] / sum;
          r.probs[row * c.Nk + j] = p;
          for (std::int64_t e = 0; e < c.Dv; ++e) r.out[row * c.Dv + e] += p * v(b, hk, j, e);
        }
      }
  return r;
}

// Compares `actual` with the float64 `expected` under the tolerance described at the top.
void expect_close(const char* what, const std::vector<float>& actual, const std::vector<double>& expected,
                  const std::vector<float>& naive, double scale_of_values, std::uint32_t seed) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double naive_err = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (std::isfinite(expected[i])) naive_err = std::max(naive_err, std::fabs(double(naive[i]) - expected[i]));
  const double tol = 4 * naive_err + 16 * double(std::numeric_limits<float>::epsilon()) * scale_of_values;
  std::size_t worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // -inf (a fully masked row's lse) must come back as exactly -inf.
    const double err = std::isfinite(expected[i])         ? std::fabs(double(actual[i]) - expected[i])
                       : double(actual[i]) == expected[i] ? 0.0
                                                          : kInf;
    if (!(err <= worst_err)) {
      worst_err = err;
      worst = i;
    }
  }
  if (expected.empty()) return;
  EXPECT_LE(worst_err, tol) << what << ": worst index " << worst << ", expected " << expected[worst] << ", actual "
                            << actual[worst] << ", tolerance " << tol << " (naive float32 error " << naive_err
                            << "), seed " << seed;
}

class CliAttend : public CliTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CliAttend, OutputsMatchTheFloat64Reference) {
  const Case& c = GetParam();
  const std::uint32_t seed = std::uint32_t(std::hash<std::string_view>{}(c.name));
  std::mt19937 rng(seed);
  const bool col = c.col3b1b;
  const Shape q_shape = col ? Shape{c.B, c.Hq, c.D, c.Nq} : Shape{c.B, c.Hq, c.Nq, c.D};
  const Shape k_shape = col ? Shape{c.B, c.Hkv, c.D, c.Nk} : Shape{c.B, c.Hkv, c.Nk, c.D};
  const Shape v_shape = col ? Shape{c.B, c.Hkv, c.Dv, c.Nk} : Shape{c.B, c.Hkv, c.Nk, c.Dv};
  const std::vector<float> q = random_floats(numel(q_shape), rng, c.magnitude);
  const std::vector<float> k = random_floats(numel(k_shape), rng, c.magnitude);
  const std::vector<float> v = random_floats(numel(v_shape), rng, c.magnitude);
  put("q.npy", q_shape, q);
  put("k.npy", k_shape, k);
  put("v.npy", v_shape, v);
  std::vector<std::string> args = {"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"};

  AttentionOptions opts;
  std::vector<float> bias;
  if (c.bias_shape) {
    const Shape& bs = *c.bias_shape;
    bias = random_floats(numel(bs), rng, 2.0f);
    if (c.mask) {
      for (std::size_t i = 0; i < bias.size(); i += 3) bias[i] = -kInf;
      // The whole first row (when the bias has a key dimension): a fully masked row.
      if (!bs.empty() && bs.back() == c.Nk)
        std::fill(bias.begin(), bias.begin() + std::min<std::ptrdiff_t>(c.Nk, std::ptrdiff_t(bias.size())), -kInf);
    }
    put("bias.npy", bs, bias);
    args.insert(args.end(), {"--bias", "bias.npy"});
    std::array<std::int64_t, 4> padded = {1, 1, 1, 1};
    std::copy(bs.begin(), bs.end(), padded.end() - bs.size());
    opts.bias = ConstTensor4::contiguous(bias.data(), padded);
  }
  if (c.causal) args.push_back("--causal");
  if (c.scale) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", double(*c.scale));  // 9 digits: the float exactly
    args.insert(args.end(), {"--scale", buf});
  }
  if (col) args.insert(args.end(), {"--notation", "3b1b"});
  if (!c.key_lengths.empty()) {
    std::string list;
    for (auto l : c.key_lengths) {
      if (!list.empty()) list += ',';
      list += std::to_string(l);
    }
    args.insert(args.end(), {"--key-lengths", list});
  }
  if (c.threads) args.insert(args.end(), {"--threads", std::to_string(c.threads)});
  if (c.extras) args.insert(args.end(), {"--lse", "lse.npy", "--probs", "probs.npy"});

  const RunResult r = attend(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "");

  // The reference on the very same floats, in the caller's notation.
  opts.causal = c.causal;
  opts.scale = c.scale;
  opts.notation = col ? Notation::col3b1b : Notation::paper;
  opts.key_lengths = c.key_lengths;
  const auto view = [](const std::vector<float>& d, const Shape& s) {
    return ConstTensor4::contiguous(d.data(), {s[0], s[1], s[2], s[3]});
  };
  const ConstTensor4 qv = view(q, q_shape), kv = view(k, k_shape), vv = view(v, v_shape);
  const ReferenceResult ref = attention_reference(qv, kv, vv, opts);
  const float scale = c.scale ? *c.scale : float(1.0 / std::sqrt(double(c.D)));
  const Float32Result naive = naive_attention(c, col ? qv.transposed(2, 3) : qv, col ? kv.transposed(2, 3) : kv,
                                              col ? vv.transposed(2, 3) : vv, opts.bias, scale);

  // out comes back in the caller's notation; compare in the paper's.
  const NpyArray out = read_npy(path("out.npy"));
  ASSERT_EQ(out.shape, col ? Shape({c.B, c.Hq, c.Dv, c.Nq}) : Shape({c.B, c.Hq, c.Nq, c.Dv}));
  std::vector<float> out_paper = out.data;
  if (col)
    for (std::int64_t bh = 0; bh < c.B * c.Hq; ++bh)
      for (std::int64_t i = 0; i < c.Nq; ++i)
        for (std::int64_t e = 0; e < c.Dv; ++e)
          out_paper[(bh * c.Nq + i) * c.Dv + e] = out.data[(bh * c.Dv + e) * c.Nq + i];
  float max_v = 0;
  for (float x : v) max_v = std::max(max_v, std::fabs(x));
  expect_close("out", out_paper, ref.out, naive.out, max_v, seed);

  // Rows whose keys are all masked: exactly zero.
  for (std::size_t row = 0; row < ref.lse.size(); ++row) {
    if (ref.lse[row] != -double(kInf)) continue;
    for (std::int64_t e = 0; e < c.Dv; ++e) ASSERT_EQ(out_paper[row * c.Dv + e], 0.0f) << "fully masked row " << row;
  }

  if (c.extras) {
    const NpyArray lse = read_npy(path("lse.npy")), probs = read_npy(path("probs.npy"));
    ASSERT_EQ(lse.shape, Shape({c.B, c.Hq, c.Nq}));
    ASSERT_EQ(probs.shape, Shape({c.B, c.Hq, c.Nq, c.Nk}));
    double max_lse = 1;
    for (double x : ref.lse)
      if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(x));
    expect_close("lse", lse.data, ref.lse, naive.lse, max_lse, seed);
    expect_close("probs", probs.data, ref.probs, naive.probs, 1.0, seed);
    for (std::size_t row = 0; row < ref.lse.size(); ++row) {
      if (ref.lse[row] != -double(kInf)) continue;
      EXPECT_EQ(lse.data[row], -kInf) << "fully masked row " << row;
      for (std::int64_t j = 0; j < c.Nk; ++j) ASSERT_EQ(probs.data[row * c.Nk + j], 0.0f) << "fully masked row " << row;
    }
  }
  // Exactly the files asked for, and no temporary file left behind.
  std::vector<std::string> files = {"k.npy", "out.npy", "q.npy", "v.npy"};
  if (c.bias_shape) files.push_back("bias.npy");
  if (c.extras) files.insert(files.end(), {"lse.npy", "probs.npy"});
  std::sort(files.begin(), files.end());
  EXPECT_EQ(listing(), files);
}

const Case kCases[] = {
    {.name = "basic", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 5, .Nk = 7, .D = 8, .Dv = 8},
    {.name = "value_dim_differs", .B = 2, .Hq = 3, .Hkv = 3, .Nq = 4, .Nk = 9, .D = 5, .Dv = 11, .extras = false},
    {.name = "head_dim_1", .B = 1, .Hq = 1, .Hkv = 1, .Nq = 3, .Nk = 4, .D = 1, .Dv = 2},
    {.name = "one_key", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 3, .Nk = 1, .D = 4, .Dv = 4},
    {.name = "odd_sizes", .B = 1, .Hq = 2, .Hkv = 1, .Nq = 113, .Nk = 97, .D = 59, .Dv = 40},
    {.name = "causal_square", .B = 1, .Hq = 2, .Hkv = 1, .Nq = 16, .Nk = 16, .D = 16, .Dv = 16, .causal = true},
    {.name = "causal_more_keys", .B = 2, .Hq = 2, .Hkv = 2, .Nq = 3, .Nk = 10, .D = 8, .Dv = 8, .causal = true},
    {.name = "causal_more_queries", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 10, .Nk = 3, .D = 8, .Dv = 8, .causal = true},
    {.name = "scale", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 6, .Nk = 6, .D = 8, .Dv = 8, .scale = 0.3f},
    {.name = "negative_scale", .B = 1, .Hq = 1, .Hkv = 1, .Nq = 6, .Nk = 9, .D = 8, .Dv = 8, .scale = -2.5f},
    {.name = "large_scores",
     .B = 1,
     .Hq = 2,
     .Hkv = 2,
     .Nq = 9,
     .Nk = 33,
     .D = 16,
     .Dv = 8,
     .scale = 4.0f,
     .magnitude = 8},
    {.name = "gqa", .B = 2, .Hq = 6, .Hkv = 2, .Nq = 5, .Nk = 8, .D = 8, .Dv = 8},
    {.name = "mqa", .B = 1, .Hq = 4, .Hkv = 1, .Nq = 5, .Nk = 8, .D = 8, .Dv = 6},
    {.name = "bias_scalar", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 4, .Nk = 6, .D = 8, .Dv = 8, .bias_shape = Shape{}},
    {.name = "bias_keys_masked",
     .B = 2,
     .Hq = 2,
     .Hkv = 2,
     .Nq = 4,
     .Nk = 6,
     .D = 8,
     .Dv = 8,
     .bias_shape = Shape{6},
     .mask = true},
    {.name = "bias_rows_masked",
     .B = 1,
     .Hq = 2,
     .Hkv = 1,
     .Nq = 4,
     .Nk = 6,
     .D = 8,
     .Dv = 8,
     .bias_shape = Shape{4, 6},
     .mask = true},
    {.name = "bias_heads", .B = 2, .Hq = 3, .Hkv = 3, .Nq = 4, .Nk = 6, .D = 8, .Dv = 8, .bias_shape = Shape{3, 1, 6}},
    {.name = "bias_batch_rows",
     .B = 2,
     .Hq = 3,
     .Hkv = 1,
     .Nq = 4,
     .Nk = 6,
     .D = 8,
     .Dv = 8,
     .bias_shape = Shape{2, 1, 4, 1}},
    {.name = "bias_full_masked_causal",
     .B = 2,
     .Hq = 2,
     .Hkv = 2,
     .Nq = 5,
     .Nk = 7,
     .D = 8,
     .Dv = 8,
     .causal = true,
     .bias_shape = Shape{2, 2, 5, 7},
     .mask = true},
    {.name = "notation_3b1b", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 5, .Nk = 7, .D = 8, .Dv = 6, .col3b1b = true},
    {.name = "notation_3b1b_gqa_causal_bias",
     .B = 2,
     .Hq = 4,
     .Hkv = 2,
     .Nq = 6,
     .Nk = 9,
     .D = 5,
     .Dv = 7,
     .causal = true,
     .bias_shape = Shape{6, 9},
     .mask = true,
     .col3b1b = true},
    {.name = "key_lengths", .B = 3, .Hq = 2, .Hkv = 2, .Nq = 4, .Nk = 9, .D = 8, .Dv = 8, .key_lengths = {5, 0, 9}},
    {.name = "key_lengths_causal",
     .B = 2,
     .Hq = 2,
     .Hkv = 1,
     .Nq = 4,
     .Nk = 9,
     .D = 8,
     .Dv = 8,
     .causal = true,
     .key_lengths = {6, 2}},
    {.name = "threads_1",
     .B = 2,
     .Hq = 4,
     .Hkv = 2,
     .Nq = 70,
     .Nk = 130,
     .D = 40,
     .Dv = 24,
     .causal = true,
     .threads = 1},
    {.name = "threads_2",
     .B = 2,
     .Hq = 4,
     .Hkv = 2,
     .Nq = 70,
     .Nk = 130,
     .D = 40,
     .Dv = 24,
     .causal = true,
     .threads = 2},
    {.name = "no_keys", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 3, .Nk = 0, .D = 4, .Dv = 4},
    {.name = "no_queries", .B = 1, .Hq = 2, .Hkv = 2, .Nq = 0, .Nk = 5, .D = 4, .Dv = 4},
};

INSTANTIATE_TEST_SUITE_P(Cases, CliAttend, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(CliTest, RepeatedRunsAreBitwiseIdentical) {
  std::mt19937 rng(7);
  put("q.npy", {1, 4, 67, 32}, random_floats(1 * 4 * 67 * 32, rng, 1));
  put("k.npy", {1, 2, 131, 32}, random_floats(1 * 2 * 131 * 32, rng, 1));
  put("v.npy", {1, 2, 131, 16}, random_floats(1 * 2 * 131 * 16, rng, 1));
  for (const char* out : {"a.npy", "b.npy"})
    ASSERT_EQ(attend({"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", out, "--threads", "2"}).code, 0);
  EXPECT_EQ(read_file_bytes(path("a.npy")), read_file_bytes(path("b.npy")));
}

TEST_F(CliTest, HelpNamesEveryOption) {
  const RunResult r = attend({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  for (const char* opt :
       {"--q", "--k", "--v", "--causal", "--scale", "--bias", "--notation", "--out", "--lse", "--probs", "--threads",
        "--key-lengths", "--dtype", "3b1b", "[B, Hq, Nq, D]", "[B, Hq, D, Nq]"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

// ------------------------------------------------------------------------ refusals

// Replaces the value of `flag` in `args` (or appends the pair when absent).
std::vector<std::string> with(std::vector<std::string> args, const std::string& flag, const std::string& value) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end() && it + 1 != args.end()) {
    *(it + 1) = value;
  } else {
    args.insert(args.end(), {flag, value});
  }
  return args;
}
std::vector<std::string> without(std::vector<std::string> args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end()) args.erase(it, it + 2);
  return args;
}

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  const char* problem;  // a piece of the expected message
};
void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

const std::vector<std::string> kGood = {"--q",   "q.npy",   "--k",   "k.npy",   "--v",     "v.npy",
                                        "--out", "out.npy", "--lse", "lse.npy", "--probs", "probs.npy"};

std::vector<BadInput> bad_inputs() {
  const auto& g = kGood;
  return {
      {"QRank3", with(g, "--q", "q3.npy"),
       "--q q3.npy: expected a rank-4 array [B, Hq, Nq, D], got shape [2, 3, 4] (rank 3)"},
      {"QRank3In3b1b", with(with(g, "--q", "q3.npy"), "--notation", "3b1b"),
       "--q q3.npy: expected a rank-4 array [B, Hq, D, Nq] in 3b1b notation, got shape [2, 3, 4]"},
      {"VRank5", with(g, "--v", "bias5.npy"), "--v bias5.npy: expected a rank-4 array [B, Hkv, Nk, Dv]"},
      {"KHeadDimMismatch", with(g, "--k", "k_d3.npy"),
       "k: expected shape [1, 2, 5, 4] [B, Hkv, Nk, D], got [1, 2, 5, 3]"},
      {"VKeyCountMismatch", with(g, "--v", "v_n4.npy"),
       "v: expected shape [1, 2, 5, 6] [B, Hkv, Nk, Dv], got [1, 2, 4, 6]"},
      {"BatchMismatch", with(g, "--q", "q_b2.npy"), "k: expected shape [2, 2, 5, 4]"},
      {"Paper3b1bMismatch", with(g, "--notation", "3b1b"), "expected shape"},
      {"QFloat64", with(g, "--q", "q64.npy"), "--q q64.npy: data type '<f8' (float64) is not supported"},
      {"KFortranOrder", with(g, "--k", "k_fortran.npy"), "--k k_fortran.npy: array is stored in Fortran"},
      {"KTruncated", with(g, "--k", "k_trunc.npy"), "--k k_trunc.npy: data is truncated"},
      {"VTrailingBytes", with(g, "--v", "v_trailing.npy"), "--v v_trailing.npy: file has 2 bytes after the data"},
      {"NotNpy", with(g, "--q", "notes.txt"), "--q notes.txt: not a .npy file"},
      {"HqNotMultipleOfHkv", with(g, "--q", "q_h3.npy"), "Hq = 3 query heads is not a multiple of Hkv = 2"},
      {"MissingFile", with(g, "--v", "nothere.npy"), "--v nothere.npy: cannot open: No such file or directory"},
      {"MissingOut", without(g, "--out"), "--out is required"},
      {"MissingQ", without(g, "--q"), "--q is required"},
      {"UnknownOption", with(g, "--bogus", "1"), "--bogus"},
      {"BadNotation", with(g, "--notation", "matrix"), "notation: expected 'paper' or '3b1b', got 'matrix'"},
      {"OutIsQ", with(g, "--out", "q.npy"), "--out q.npy: is also the --q input"},
      {"OutIsKSpelledDifferently", with(g, "--out", "./sub/../k.npy"), "--out ./sub/../k.npy: is also the --k input"},
      {"OutIsALinkToV", with(g, "--out", "link_to_v.npy"), "--out link_to_v.npy: is also the --v input"},
      {"LseIsV", with(g, "--lse", "v.npy"), "--lse v.npy: is also the --v input"},
      {"ProbsIsOut", with(g, "--probs", "out.npy"), "--probs out.npy: is also the --out output"},
      {"OutIsBias", with(with(g, "--bias", "bias_ok.npy"), "--out", "bias_ok.npy"), "is also the --bias input"},
      {"OutDirectoryMissing", with(g, "--out", "nodir/out.npy"),
       "--out nodir/out.npy: the directory 'nodir' does not exist"},
      {"OutIsADirectory", with(g, "--probs", "sub"), "--probs sub: is a directory"},
      {"BiasDoesNotBroadcast", with(g, "--bias", "bias_bad.npy"), "bias: shape [1, 1, 3, 4] does not broadcast"},
      {"BiasRank5", with(g, "--bias", "bias5.npy"), "--bias bias5.npy: expected rank 0 to 4"},
      {"BiasFloat64", with(g, "--bias", "q64.npy"), "--bias q64.npy: data type '<f8' (float64)"},
      {"KeyLengthsCount", with(g, "--key-lengths", "2,3"), "key_lengths: expected 1 entries (one per batch), got 2"},
      {"KeyLengthTooLarge", with(g, "--key-lengths", "6"), "key_lengths: entry 0 is 6, expected 0..5"},
      {"KeyLengthNegative", with(g, "--key-lengths", "-1"), "key_lengths: entry 0 is -1"},
      {"KeyLengthNotANumber", with(g, "--key-lengths", "x"), "--key-lengths"},
      {"ScaleNaN", with(g, "--scale", "nan"), "--scale: expected a finite float32 number"},
      {"ScaleInfinite", with(g, "--scale", "inf"), "--scale: expected a finite float32 number"},
      {"ScaleBeyondFloat", with(g, "--scale", "1e39"), "--scale: expected a finite float32 number, got 1e+39"},
      {"ScaleNotANumber", with(g, "--scale", "big"), "--scale"},
      {"ThreadsNegative", with(g, "--threads", "-1"),
       "--threads: expected 0 (OpenMP's default) or a positive count, got -1"},
      {"ThreadsNotANumber", with(g, "--threads", "two"), "--threads"},
      {"EmptyOutPath", with(g, "--out", ""), "--out: expected a file name"},
      {"EmptyLsePath", with(g, "--lse", ""), "--lse: expected a file name"},
  };
}

class CliRefusal : public CliTest, public ::testing::WithParamInterface<BadInput> {
 protected:
  // Good inputs (B=1, Hq=Hkv=2, Nq=3, Nk=5, D=4, Dv=6) and one bad file of each kind.
  void SetUp() override {
    CliTest::SetUp();
    std::mt19937 rng(11);
    put("q.npy", {1, 2, 3, 4}, random_floats(24, rng, 1));
    put("k.npy", {1, 2, 5, 4}, random_floats(40, rng, 1));
    put("v.npy", {1, 2, 5, 6}, random_floats(60, rng, 1));
    put("q3.npy", {2, 3, 4}, random_floats(24, rng, 1));
    put("k_d3.npy", {1, 2, 5, 3}, random_floats(30, rng, 1));
    put("v_n4.npy", {1, 2, 4, 6}, random_floats(48, rng, 1));
    put("q_b2.npy", {2, 2, 3, 4}, random_floats(48, rng, 1));
    put("q_h3.npy", {1, 3, 3, 4}, random_floats(36, rng, 1));
    put("bias_ok.npy", {3, 5}, random_floats(15, rng, 1));
    put("bias_bad.npy", {3, 4}, random_floats(12, rng, 1));
    put("bias5.npy", {1, 1, 1, 3, 5}, random_floats(15, rng, 1));
    const std::string k = read_file_bytes(path("k.npy"));
    std::ofstream(path("k_trunc.npy"), std::ios::binary) << k.substr(0, k.size() - 3);
    std::ofstream(path("v_trailing.npy"), std::ios::binary) << read_file_bytes(path("v.npy")) << "xy";
    std::ofstream(path("notes.txt")) << "not an array\n";
    // float64 and Fortran-order files, written by hand as NumPy would.
    const auto npy = [](const std::string& dict, std::size_t data_bytes) {
      std::string h = dict;
      h.append(63 - (10 + h.size()) % 64, ' ');
      h += '\n';
      return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h +
             std::string(data_bytes, '\0');
    };
    std::ofstream(path("q64.npy"), std::ios::binary)
        << npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", 24 * 8);
    std::ofstream(path("k_fortran.npy"), std::ios::binary)
        << npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 5, 4), }", 40 * 4);
    fs::create_symlink("v.npy", path("link_to_v.npy"));
    fs::create_directory(path("sub"));
  }
};

TEST_P(CliRefusal, OneLineOnStderrNonZeroExitNothingWritten) {
  const BadInput& b = GetParam();
  const std::vector<std::string> before = listing();
  const RunResult r = attend(b.args);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("jomoim: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.back(), '\n') << r.err;
  EXPECT_NE(r.err.find(b.problem), std::string::npos) << "stderr: " << r.err << "expected to contain: " << b.problem;
  EXPECT_EQ(listing(), before);  // no output, no temporary file
}

INSTANTIATE_TEST_SUITE_P(Inputs, CliRefusal, ::testing::ValuesIn(bad_inputs()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(CliTest, RefusalLeavesAnExistingOutputUntouched) {
  std::mt19937 rng(3);
  put("q.npy", {1, 1, 2, 4}, random_floats(8, rng, 1));
  put("k.npy", {1, 1, 3, 5}, random_floats(15, rng, 1));  // D mismatch: refused
  put("v.npy", {1, 1, 3, 4}, random_floats(12, rng, 1));
  std::ofstream(path("out.npy")) << "previous result";
  const RunResult r = attend({"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"});
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(read_file_bytes(path("out.npy")), "previous result");
}

}  // namespace
}  // namespace jomoim
