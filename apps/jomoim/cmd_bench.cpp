// cmd_bench.cpp — `jomoim bench`: times the attention engine on one shape, and this machine's
// ceilings to compare it with (OpenBLAS sgemm for compute, a memory copy for decode).
//
//   jomoim bench [--batch B --heads Hq --kv-heads Hkv --q-len Nq --kv-len Nk --head-dim D
//                 --value-dim Dv --causal --threads T --target NAME] [--json]
//   jomoim bench --sgemm --copy --fma-peak ... and the ceilings, measured after the attention
//   jomoim bench --ceilings-only [--sgemm] [--copy] [--fma-peak]
//                                          only the ceilings (all three when none is given)
//   jomoim bench --quick                   self-check of every SIMD target against the float64
//                                          reference, then a small timing table; exit 1 on FAIL
//
// Method: the output of the first call is checked against jomoim::attention_reference before
// anything is timed (the whole output for small problems, a sample of rows through sliced views
// for large ones, since the reference is O(Nq*Nk) double loops per head); then --warmup calls,
// then at least --reps timed calls and --min-time seconds; the median is reported. GFLOP/s is
// jomoim::attention_flops (2*B*Hq*Nq*Nk*(D+Dv), halved for causal) over the median.
//
// This is a measuring tool, not a test: nothing here asserts a time.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "commands.hpp"
#include "fma_peak.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/simd.hpp"
#include "jomoim/core/tensor.hpp"

namespace jomoim::cli {
namespace {

using Index = std::int64_t;
using Json = nlohmann::ordered_json;

// One place for every flag: name, default and help live in add_bench_command.
struct BenchOptions {
  Index batch = 1, heads = 12, kv_heads = 0, q_len = 512, kv_len = 0, head_dim = 64,
        value_dim = 0;  // 0: same as heads / q_len / head_dim
  bool causal = false;
  int threads = 0;  // 0: every core
  int reps = 5, warmup = 2;
  double min_time = 1.0;  // seconds of timed calls, at least
  std::string target;
  unsigned seed = 42;
  bool json = false, sgemm = false, copy = false, fma = false, ceilings_only = false, quick = false,
       no_check = false;
  Index sgemm_n = 2048;  // large enough that OpenBLAS runs at its plateau on 1-2 cores
  Index copy_mib = 256;  // per buffer: far beyond any cache, as a KV cache would be
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------------------- memory

double current_rss_mib() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return double(pages_resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Peak RSS of this process: the kernel's high-water mark VmHWM. Not getrusage's ru_maxrss: that
// also keeps the peak of the memory image replaced by exec, i.e. of the parent that forked us
// (a Python driver's 13 MiB showed up as 5 MiB of "growth" of a 8 MiB bench), and nothing
// resets it. getrusage remains the fallback where /proc/self/status has no VmHWM.
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "... kB"
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// Lowers the peak-RSS high-water mark to the current RSS (Linux >= 4.0), so that the peak read
// afterwards belongs to what runs next, not to the reference check or an earlier shape.
// Returns false where /proc refuses; the peak is then an upper bound.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

// ------------------------------------------------------------------------- workloads

// One attention problem with its own buffers. Inputs are uniform in [-1, 1) (times
// score_boost for q, to reach large scores); out and lse are filled with NaN before each call
// so that an element the engine forgets to write cannot pass the check.
struct Workload {
  std::string name;
  Index B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 1, Dv = 1;
  bool causal = false;
  Notation notation = Notation::paper;
  bool with_bias = false;  // bias [1, 1, Nq, Nk], broadcast over B and Hq, some keys -inf
  std::vector<std::int64_t> key_lengths;
  bool with_lse = false;
  float score_boost = 1;

  std::vector<float> q, k, v, out, bias, lse;

  void allocate(unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    auto fill = [&](std::vector<float>& x, Index n, float mul) {
      x.resize(std::size_t(n));
      for (float& e : x) e = mul * uni(rng);
    };
    fill(q, B * Hq * Nq * D, score_boost);
    fill(k, B * Hkv * Nk * D, 1);
    fill(v, B * Hkv * Nk * Dv, 1);
    out.assign(std::size_t(B * Hq * Nq * Dv), 0.f);  // touched now: counted as inputs/outputs
    if (with_lse) lse.assign(std::size_t(B * Hq * Nq), 0.f);
    if (with_bias) {
      fill(bias, Nq * Nk, 2);
      std::bernoulli_distribution masked(0.2);
      for (float& e : bias)
        if (masked(rng)) e = -INFINITY;
      // One row with every key masked: it must come out as zeros and lse = -inf.
      for (Index j = 0; j < Nk; ++j) bias[std::size_t((Nq / 2) * Nk + j)] = -INFINITY;
    }
  }

  // Views as the engine takes them: [B, H, N, D], or [B, H, D, N] in 3b1b notation.
  ConstTensor4 view(const std::vector<float>& x, Index H, Index N, Index E) const {
    return notation == Notation::paper ? ConstTensor4::contiguous(x.data(), {B, H, N, E})
                                       : ConstTensor4::contiguous(x.data(), {B, H, E, N});
  }
  ConstTensor4 qv() const { return view(q, Hq, Nq, D); }
  ConstTensor4 kv() const { return view(k, Hkv, Nk, D); }
  ConstTensor4 vv() const { return view(v, Hkv, Nk, Dv); }
  Tensor4 outv() {
    return notation == Notation::paper ? Tensor4::contiguous(out.data(), {B, Hq, Nq, Dv})
                                       : Tensor4::contiguous(out.data(), {B, Hq, Dv, Nq});
  }
  // The output in the paper's layout, whatever the notation (a transposed view, no copy).
  ConstTensor4 out_paper() const {
    const ConstTensor4 o = view(out, Hq, Nq, Dv);
    return notation == Notation::paper ? o : o.transposed(2, 3);
  }

  AttentionOptions options(int threads) {
    AttentionOptions o;
    o.causal = causal;
    o.notation = notation;
    o.threads = threads;
    if (with_bias) {
      ConstTensor4 b = ConstTensor4::contiguous(bias.data(), {1, 1, Nq, Nk});
      b.strides[0] = b.strides[1] = 0;
      o.bias = b;
    }
    o.key_lengths = key_lengths;
    if (with_lse) o.lse = Tensor3::contiguous(lse.data(), {B, Hq, Nq});
    return o;
  }

  AttentionShape shape() { return check_attention_args(qv(), kv(), vv(), nullptr, options(1)); }

  void run(int threads) {
    std::fill(out.begin(), out.end(), NAN);
    std::fill(lse.begin(), lse.end(), NAN);
    attention(qv(), kv(), vv(), outv(), options(threads));
  }

  // Bytes a call must move at least: read q, k, v once, write out.
  double bytes() const { return 4.0 * double(q.size() + k.size() + v.size() + out.size()); }

  std::string shape_label() const {
    std::string s = "B" + std::to_string(B) + " Hq" + std::to_string(Hq);
    if (Hkv != Hq) s += " Hkv" + std::to_string(Hkv);
    s += " Nq" + std::to_string(Nq) + " Nk" + std::to_string(Nk) + " D" + std::to_string(D);
    if (Dv != D) s += " Dv" + std::to_string(Dv);
    return s;
  }
};

// ------------------------------------------------------------------------- the check

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, double(std::fabs(e)));
  return m;
}

// Worst-case float32 rounding of the computation, from the inputs' magnitudes (Higham's
// gamma_n = n*eps bounds): a score is a D-term dot product, so it is off by up to
// D*eps*S where S bounds |score|; a softmax weight exp(s - m)/sum is then off by a relative
// 2*D*eps*S, and the Nk-term sums of weights and weighted values add 2*Nk*eps. The constant 16
// covers exp's own few ulps and the final division. Outputs are convex combinations of rows of
// v, so everything scales with max|v|. Loose for long rows (1.3e-3 at Nk = 4096, D = 128;
// actual errors are near 1e-6): it catches a wrong tile, stride, head mapping or mask edge on
// short rows, but not a single key dropped from a row of thousands (about 2e-4 there); that
// precision is the tests' job (tests/), not this timing tool's.
struct Tolerance {
  double out, lse;
};
Tolerance float32_tolerance(const Workload& w, const AttentionShape& s) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double S = std::fabs(s.scale) * double(w.D) * max_abs(w.q) * max_abs(w.k) + max_abs(w.bias);
  const double terms = 2.0 * double(w.D) * S + 2.0 * double(w.Nk) + 16.0;
  return {eps * terms * std::max(max_abs(w.v), 1e-30), eps * (terms + S)};
}

struct CheckResult {
  std::string mode;  // "full", "N rows", "skipped"
  double max_err = 0, tol = 0;
  bool ok = true;
  std::string worst;  // where the largest error was, for the FAIL message
};

// Tracks the worst |actual - expected| and where it happened. NaN counts as infinitely wrong.
struct WorstError {
  double err = 0;
  std::string where;
  void add(double actual, double expected, const std::string& what) {
    double e = std::fabs(actual - expected);
    if (actual == expected) e = 0;  // both -inf (lse of a fully masked row)
    if (std::isnan(e)) e = INFINITY;
    if (e > err || (e > 0 && where.empty())) {
      err = e;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s: got %.9g, expected %.9g", what.c_str(), actual, expected);
      where = buf;
    }
  }
};

std::string index_string(const char* name, Index a, Index b, Index c, Index d = -1) {
  std::string s = std::string(name) + "[" + std::to_string(a) + ", " + std::to_string(b) + ", " +
                  std::to_string(c);
  return s + (d >= 0 ? ", " + std::to_string(d) : "") + "]";
}

// Compares the engine's out (and lse, when the workload asks for it) with a reference result of
// the whole problem.
CheckResult compare_full(const Workload& w, const ReferenceResult& r, const Tolerance& tol) {
  const ConstTensor4 o = w.out_paper();
  WorstError out_err, lse_err;
  for (Index b = 0; b < w.B; ++b)
    for (Index h = 0; h < w.Hq; ++h)
      for (Index i = 0; i < w.Nq; ++i) {
        const Index row = (b * w.Hq + h) * w.Nq + i;
        for (Index e = 0; e < w.Dv; ++e)
          out_err.add(o(b, h, i, e), r.out[std::size_t(row * w.Dv + e)],
                      index_string("out", b, h, i, e));
        if (w.with_lse)
          lse_err.add(w.lse[std::size_t(row)], r.lse[std::size_t(row)],
                      index_string("lse", b, h, i));
      }
  // Report whichever of the two is closer to (or further past) its tolerance.
  if (w.with_lse && lse_err.err / tol.lse > out_err.err / tol.out)
    return {"full", lse_err.err, tol.lse, lse_err.err <= tol.lse && out_err.err <= tol.out,
            lse_err.where};
  return {"full", out_err.err, tol.out, out_err.err <= tol.out && lse_err.err <= tol.lse,
          out_err.where};
}

// The reference over the whole problem keeps O(B*Hq*Nq*Nk) doubles of probabilities, so it
// runs only for small problems (the threshold keeps that under 8 MiB and well under a second).
constexpr Index kFullCheckMaxScores = Index(1) << 20;

// Rows (b, h, i) checked one at a time through views into the big buffers: query row i of head
// h against the keys it may see, as a [1, 1, 1, D] x [1, 1, visible, D] problem without a mask.
// Only for what the bench command itself builds (paper layout, no bias, no key lengths).
CheckResult check_sampled(Workload& w, const AttentionShape& s, const Tolerance& tol,
                          unsigned seed) {
  std::vector<Index> bs{0, w.B - 1}, hs{0, w.Hq / 2, w.Hq - 1}, is{0, 1, w.Nq / 2, w.Nq - 1};
  std::mt19937 rng(seed + 1);
  for (int extra = 0; extra < 4; ++extra) is.push_back(Index(rng() % std::uint64_t(w.Nq)));
  for (auto* list : {&bs, &hs, &is}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  const ConstTensor4 q = w.qv(), k = w.kv(), v = w.vv(), o = w.out_paper();
  const Index group = w.Hq / w.Hkv;
  WorstError err;
  Index rows = 0;
  for (Index b : bs)
    for (Index h : hs)
      for (Index i : is) {
        // Causal rule of docs/design.md, aligned bottom-right: key j is visible iff j <= i + Nk - Nq.
        const Index visible = w.causal ? std::clamp<Index>(i + w.Nk - w.Nq + 1, 0, w.Nk) : w.Nk;
        ConstTensor4 qr = q, kr = k, vr = v;
        qr.data = &q(b, h, i, 0);
        qr.shape = {1, 1, 1, w.D};
        kr.data = &k(b, h / group, 0, 0);
        kr.shape = {1, 1, visible, w.D};
        vr.data = &v(b, h / group, 0, 0);
        vr.shape = {1, 1, visible, w.Dv};
        AttentionOptions ro;
        ro.scale = s.scale;
        const ReferenceResult r = attention_reference(qr, kr, vr, ro);
        for (Index e = 0; e < w.Dv; ++e)
          err.add(o(b, h, i, e), r.out[std::size_t(e)], index_string("out", b, h, i, e));
        ++rows;
      }
  return {std::to_string(rows) + " rows", err.err, tol.out, err.err <= tol.out, err.where};
}

CheckResult check_output(Workload& w, unsigned seed) {
  const AttentionShape s = w.shape();
  const Tolerance tol = float32_tolerance(w, s);
  if (w.B * w.Hq * w.Nq * w.Nk <= kFullCheckMaxScores)
    return compare_full(w, attention_reference(w.qv(), w.kv(), w.vv(), w.options(1)), tol);
  return check_sampled(w, s, tol, seed);
}

// ------------------------------------------------------------------------- timing

struct Timing {
  double median_ms = 0, min_ms = 0, mean_ms = 0;  // mean: shows stalls the median hides
  int reps = 0, warmup = 0;
};

// `warmup` untimed calls, then timed calls until there are at least `reps` and `min_time`
// seconds have passed (capped at 10000 calls, for tiny shapes).
Timing time_calls(const std::function<void()>& call, int warmup, int reps, double min_time) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> ms;
  const double start = now_s();
  while (ms.size() < 10000 && (int(ms.size()) < reps || now_s() - start < min_time)) {
    const double t0 = now_s();
    call();
    ms.push_back((now_s() - t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double t : ms) sum += t;
  return {ms[ms.size() / 2], ms.front(), sum / double(ms.size()), int(ms.size()), warmup};
}

// ------------------------------------------------------------------------- one shape

struct AttentionRun {
  CheckResult check;
  Timing timing;
  double gflops = 0, gbs = 0;
  double rss_inputs_mib = 0;  // RSS once inputs and outputs exist, before the first call
  double peak_rss_mib = 0;    // the peak (VmHWM) over the engine's calls
  double extra_mib = 0;       // the engine's own growth: peak RSS over the RSS it started from
  bool peak_reset = false;
  bool repeat_bitwise = false;  // the last timed call's output equals the first call's, bit for bit
};

// A 64-bit hash of a float buffer's bytes (FNV-1a over 64-bit words): equal outputs give equal
// hashes; a differing bit almost surely changes it.
std::uint64_t hash_bits(const std::vector<float>& x) {
  std::uint64_t h = 1469598103934665603ull;
  const std::size_t bytes = x.size() * sizeof(float);
  const auto* p = reinterpret_cast<const unsigned char*>(x.data());
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

AttentionRun bench_attention(Workload& w, const BenchOptions& o, int threads) {
  AttentionRun r;
  const AttentionShape s = w.shape();
  // Memory is measured in two windows around the reference check, whose allocations are not the
  // engine's: the first call (which allocates the per-thread scratch), and the timed calls. Each
  // window starts by lowering the peak-RSS mark to the current RSS.
  malloc_trim(0);  // free heap left by earlier work in this process would hide growth
  r.peak_reset = reset_peak_rss();
  r.rss_inputs_mib = current_rss_mib();
  w.run(threads);
  r.peak_rss_mib = peak_rss_mib();
  r.extra_mib = r.peak_rss_mib - r.rss_inputs_mib;
  const std::uint64_t first_hash = hash_bits(w.out);
  if (o.no_check) {
    r.check.mode = "skipped";
  } else {
    r.check = check_output(w, o.seed);
    if (!r.check.ok) return r;
    malloc_trim(0);  // hand the reference's freed heap back, so it is not counted as ours
  }
  r.peak_reset = reset_peak_rss() && r.peak_reset;
  const double rss_timing = current_rss_mib();
  r.timing = time_calls([&] { attention(w.qv(), w.kv(), w.vv(), w.outv(), w.options(threads)); },
                        o.warmup, o.reps, o.min_time);
  const double peak_timing = peak_rss_mib();
  r.repeat_bitwise = hash_bits(w.out) == first_hash;  // same inputs, same threads: same bits
  r.peak_rss_mib = std::max(r.peak_rss_mib, peak_timing);
  r.extra_mib = std::max({0.0, r.extra_mib, peak_timing - rss_timing});
  r.gflops = attention_flops(s, w.causal) / (r.timing.median_ms * 1e-3) * 1e-9;
  r.gbs = w.bytes() / (r.timing.median_ms * 1e-3) * 1e-9;
  return r;
}

Json attention_json(const Workload& w, const AttentionRun& r, int threads) {
  Json j;
  j["kind"] = "attention";
  j["status"] = r.check.ok ? "ok" : "wrong";
  for (auto [key, value] : {std::pair{"b", w.B}, {"hq", w.Hq}, {"hkv", w.Hkv}, {"nq", w.Nq},
                            {"nk", w.Nk}, {"d", w.D}, {"dv", w.Dv}})
    j[key] = value;
  // The same shape under the names of the command-line flags, and as docs/design.md's letters.
  j["shape"] = {{"batch", w.B}, {"heads", w.Hq}, {"kv_heads", w.Hkv}, {"q_len", w.Nq},
                {"kv_len", w.Nk}, {"head_dim", w.D}, {"value_dim", w.Dv}};
  j["causal"] = w.causal;
  j["threads"] = threads;
  j["simd_target"] = active_simd_target();
  j["check"] = r.check.mode;
  j["check_max_err"] = r.check.max_err;
  j["check_tol"] = r.check.tol;
  if (!r.check.ok) {
    j["error"] = r.check.worst;
    return j;
  }
  j["median_ms"] = r.timing.median_ms;
  j["min_ms"] = r.timing.min_ms;
  j["mean_ms"] = r.timing.mean_ms;
  j["reps"] = r.timing.reps;
  j["warmup"] = r.timing.warmup;
  j["gflops"] = r.gflops;
  j["gbs"] = r.gbs;
  j["peak_rss_mib"] = r.peak_rss_mib;
  j["rss_inputs_mib"] = r.rss_inputs_mib;
  j["extra_mib"] = r.extra_mib;
  j["peak_reset"] = r.peak_reset;
  j["repeat_bitwise"] = r.repeat_bitwise;
  return j;
}

// ------------------------------------------------------------------------- ceilings

struct Sgemm {
  Index n;
  double median_ms, gflops;  // from the median call
  double gflops_best;        // from the fastest call: the ceiling when others share the cores
};

// OpenBLAS cblas_sgemm C = A B (row-major, square n) with the bench's thread count: the fp32
// compute ceiling the attention GFLOP/s are compared with. Measured after the attention runs,
// because OpenBLAS's idle threads keep spinning for a while after a call and would slow the
// OpenMP threads of the engine.
Sgemm bench_sgemm(Index n, int threads, double min_time) {
  openblas_set_num_threads(threads);
  std::vector<float> a(std::size_t(n * n)), b(std::size_t(n * n)), c(std::size_t(n * n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto* x : {&a, &b})
    for (float& e : *x) e = uni(rng);
  const Timing t = time_calls(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.f,
                    a.data(), int(n), b.data(), int(n), 0.f, c.data(), int(n));
      },
      1, 3, min_time);
  const double flop = 2.0 * double(n) * double(n) * double(n);
  return {n, t.median_ms, flop / (t.median_ms * 1e-3) * 1e-9, flop / (t.min_ms * 1e-3) * 1e-9};
}

struct Copy {
  Index mib;
  double best_gbs, median_gbs;
};

// Memory copy bandwidth, counted as STREAM does (bytes read + bytes written): each thread
// memcpy's its share of a buffer far larger than the caches. Decode attention streams the whole
// KV cache once, and a read-only stream moves bytes at about a copy's combined rate, so decode
// takes at least about (K + V bytes) / this figure.
Copy bench_copy(Index mib, int threads) {
  const std::size_t n = std::size_t(mib) << 20;
  std::unique_ptr<char[]> src(new char[n]), dst(new char[n]);
  auto copy_all = [&](bool init) {
#pragma omp parallel num_threads(threads)
    {
      const std::size_t t = std::size_t(omp_get_thread_num()),
                        nt = std::size_t(omp_get_num_threads());
      const std::size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      if (init) {  // first touch by the thread that later copies the same pages
        std::memset(src.get() + lo, int(t + 1), hi - lo);
        std::memset(dst.get() + lo, 0, hi - lo);
      } else {
        std::memcpy(dst.get() + lo, src.get() + lo, hi - lo);
      }
    }
  };
  copy_all(true);
  std::vector<double> gbs;
  for (int rep = 0; rep < 11; ++rep) {
    const double t0 = now_s();
    copy_all(false);
    if (rep > 0) gbs.push_back(2.0 * double(n) / (now_s() - t0) * 1e-9);  // rep 0 warms up
  }
  std::sort(gbs.begin(), gbs.end());
  return {mib, gbs.back(), gbs[gbs.size() / 2]};
}

Json sgemm_json(const Sgemm& g, int threads) {
  return Json{{"kind", "sgemm"},    {"n", g.n},
              {"threads", threads}, {"median_ms", g.median_ms},
              {"gflops", g.gflops}, {"gflops_best", g.gflops_best},
              {"openblas_core", openblas_get_corename()}};
}
Json copy_json(const Copy& c, int threads) {
  return Json{{"kind", "copy"},
              {"mib", c.mib},
              {"threads", threads},
              {"copy_gbs", c.best_gbs},
              {"copy_gbs_median", c.median_gbs}};
}

Json fma_json(const FmaPeak& f, int threads) {
  return Json{{"kind", "fma_peak"},
              {"threads", threads},
              {"target", active_simd_target()},
              {"gflops", f.best_gflops},
              {"gflops_median", f.median_gflops},
              {"runs", f.runs}};
}

void print_ceilings(const BenchOptions& o, bool sgemm, bool copy, bool fma, int threads) {
  if (fma) {
    // Five runs of 0.2 s at most, less when --min-time asks for a quicker bench.
    const FmaPeak f = fma_peak(threads, std::clamp(o.min_time / 5, 0.01, 0.2), 5);
    if (o.json)
      std::printf("%s\n", fma_json(f, threads).dump().c_str());
    else
      std::printf(
          "FMA peak: %s, %d threads: %.1f GFLOP/s best, %.1f median (independent FMA chains in "
          "registers: the cores' fp32 limit)\n",
          active_simd_target().c_str(), threads, f.best_gflops, f.median_gflops);
  }
  if (sgemm) {
    if (!o.json)
      std::fprintf(stderr, "bench: timing OpenBLAS sgemm n=%lld ...\n", (long long)o.sgemm_n);
    const Sgemm g = bench_sgemm(o.sgemm_n, threads, o.min_time);
    if (o.json)
      std::printf("%s\n", sgemm_json(g, threads).dump().c_str());
    else
      std::printf(
          "sgemm ceiling: OpenBLAS (%s) n=%lld, %d threads: %.1f GFLOP/s (median %.2f ms), "
          "%.1f GFLOP/s in the fastest call\n",
          openblas_get_corename(), (long long)g.n, threads, g.gflops, g.median_ms, g.gflops_best);
  }
  if (copy) {
    const Copy c = bench_copy(o.copy_mib, threads);
    if (o.json)
      std::printf("%s\n", copy_json(c, threads).dump().c_str());
    else
      std::printf(
          "copy bandwidth: %lld MiB buffers, %d threads: %.1f GB/s best, %.1f GB/s median "
          "(read + write)\n",
          (long long)c.mib, threads, c.best_gbs, c.median_gbs);
  }
}

// ------------------------------------------------------------------------- subcommand bodies

int resolve_threads(int threads) { return threads > 0 ? threads : omp_get_num_procs(); }

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf,
                ms >= 100  ? "%.0f"
                : ms >= 10 ? "%.1f"
                : ms >= 1  ? "%.2f"
                           : "%.3f",
                ms);
  return buf;
}

void run_single(const BenchOptions& o) {
  const int threads = resolve_threads(o.threads);
  if (!o.ceilings_only) {
    Workload w;
    w.B = o.batch, w.Hq = o.heads, w.Hkv = o.kv_heads ? o.kv_heads : o.heads;
    w.Nq = o.q_len, w.Nk = o.kv_len ? o.kv_len : o.q_len;
    w.D = o.head_dim, w.Dv = o.value_dim ? o.value_dim : o.head_dim;
    w.causal = o.causal;
    if (w.Hq % w.Hkv != 0)
      throw Error("bench: --heads (" + std::to_string(w.Hq) +
                  ") must be a multiple of --kv-heads (" + std::to_string(w.Hkv) + ")");
    w.allocate(o.seed);
    std::fprintf(stderr, "bench: %s%s, %d threads, %s: checking, then timing ...\n",
                   w.shape_label().c_str(), w.causal ? " causal" : "", threads,
                   active_simd_target().c_str());
    const AttentionRun r = bench_attention(w, o, threads);
    if (o.json) std::printf("%s\n", attention_json(w, r, threads).dump().c_str());
    if (!r.check.ok)
    {
      char detail[96];
      std::snprintf(detail, sizeof detail, " (|err| %.3g > tol %.3g, seed %u)", r.check.max_err,
                    r.check.tol, o.seed);
      throw Error("bench: output differs from the float64 reference: " + r.check.worst + detail);
    }
    if (!o.json) {
      std::printf("%-36s %-6s %7s %-10s %10s %9s %6s %8s %7s %9s %9s  %s\n", "shape", "causal",
                  "threads", "target", "median ms", "min ms", "reps", "GFLOP/s", "GB/s", "peak MiB",
                  "extra MiB", "check");
      char check[96];
      std::snprintf(check, sizeof check, "ok, %s, max err %.1e", r.check.mode.c_str(),
                    r.check.max_err);
      std::printf("%-36s %-6s %7d %-10s %10s %9s %6d %8.1f %7.1f %9.1f %9.1f  %s\n",
                  w.shape_label().c_str(), w.causal ? "yes" : "no", threads,
                  active_simd_target().c_str(), format_ms(r.timing.median_ms).c_str(),
                  format_ms(r.timing.min_ms).c_str(), r.timing.reps, r.gflops, r.gbs,
                  r.peak_rss_mib, r.extra_mib, o.no_check ? "skipped" : check);
    }
  }
  const bool all = o.ceilings_only && !o.sgemm && !o.copy && !o.fma;
  print_ceilings(o, o.sgemm || all, o.copy || all, o.fma || all, threads);
}

// The self-check cases of --quick: the shapes and options that break kernels (docs/design.md).
std::vector<Workload> quick_cases() {
  auto c = [](std::string name, Index B, Index Hq, Index Hkv, Index Nq, Index Nk, Index D, Index Dv,
              bool causal) {
    Workload w;
    w.name = std::move(name);
    w.B = B, w.Hq = Hq, w.Hkv = Hkv, w.Nq = Nq, w.Nk = Nk, w.D = D, w.Dv = Dv, w.causal = causal;
    w.with_lse = true;
    return w;
  };
  std::vector<Workload> cases{
      c("small", 1, 2, 2, 33, 33, 16, 16, false),
      c("causal", 2, 3, 3, 97, 97, 64, 64, true),
      c("causal Nq<Nk (bottom-right)", 1, 2, 2, 17, 113, 40, 40, true),
      c("causal Nq>Nk (empty rows)", 1, 2, 1, 20, 8, 32, 32, true),
      c("gqa 8:2 causal", 1, 8, 2, 64, 64, 64, 64, true),
      c("mqa decode 1x1025", 2, 4, 1, 1, 1025, 128, 128, false),
      c("odd D=3 Dv=7", 1, 2, 2, 31, 45, 3, 7, false),
      c("D=111 Dv=59 causal", 1, 3, 3, 50, 70, 111, 59, true),
      c("D=256", 1, 2, 2, 40, 40, 256, 256, false),
      c("bias with -inf", 2, 2, 2, 24, 40, 32, 32, false),
      c("3b1b causal", 1, 2, 2, 45, 45, 32, 32, true),
      c("key lengths 30/7/0", 3, 2, 2, 30, 30, 16, 16, true),
      c("scores ~1000", 1, 2, 2, 64, 64, 32, 32, false),
      c("decode 1x4096 H32 Hkv8", 1, 32, 8, 1, 4096, 128, 128, false),
  };
  cases[9].with_bias = true;
  cases[10].notation = Notation::col3b1b;
  cases[11].key_lengths = {30, 7, 0};
  cases[12].score_boost = 1000;  // scaled scores of several hundred, the largest near 1000
  return cases;
}

// Runs every quick case on every SIMD target, with 1 thread and with all of them.
bool quick_self_check(const BenchOptions& o, int threads) {
  const std::vector<std::string> targets = simd_targets();
  std::vector<int> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);
  std::string target_list;
  for (const auto& t : targets) target_list += (target_list.empty() ? "" : ",") + t;
  if (!o.json)
    std::printf("self-check against the float64 reference (targets %s; 1 and %d threads)\n",
                target_list.c_str(), threads);
  int failed = 0;
  for (Workload& w : quick_cases()) {
    w.allocate(o.seed);
    const AttentionShape s = w.shape();
    const Tolerance tol = float32_tolerance(w, s);
    const ReferenceResult ref = attention_reference(w.qv(), w.kv(), w.vv(), w.options(1));
    CheckResult worst{"full", 0, tol.out, true, ""};
    std::string worst_run;
    for (const auto& target : targets)
      for (int t : thread_counts) {
        set_simd_target(target);
        w.run(t);
        const CheckResult c = compare_full(w, ref, tol);
        if ((!c.ok && worst.ok) ||
            (c.ok == worst.ok && c.max_err / c.tol > worst.max_err / worst.tol)) {
          worst = c;
          worst_run = target + ", " + std::to_string(t) + " thread" + (t > 1 ? "s" : "");
        }
      }
    set_simd_target(o.target);
    failed += !worst.ok;
    if (o.json) {
      std::printf("%s\n", Json{{"kind", "check"},
                               {"case", w.name},
                               {"status", worst.ok ? "pass" : "fail"},
                               {"max_err", worst.max_err},
                               {"tol", worst.tol},
                               {"worst_run", worst_run},
                               {"worst", worst.worst}}
                              .dump()
                              .c_str());
    } else {
      std::printf("  %s  %-28s %-30s max err %.1e (tol %.1e, worst on %s)\n",
                  worst.ok ? "PASS" : "FAIL", w.name.c_str(), w.shape_label().c_str(),
                  worst.max_err, worst.tol, worst_run.c_str());
      if (!worst.ok) std::printf("        %s, seed %u\n", worst.worst.c_str(), o.seed);
    }
  }
  return failed == 0;
}

void run_quick(const BenchOptions& base) {
  const int threads = resolve_threads(base.threads);
  const bool checks_pass = quick_self_check(base, threads);

  // A short timing table; each row is still checked against the reference before it is timed.
  struct Row {
    Index Hq, Hkv, Nq, Nk, D;
    bool causal;
  };
  const Row rows[] = {{12, 12, 128, 128, 64, false}, {12, 12, 128, 128, 64, true},
                      {12, 12, 512, 512, 64, false}, {12, 12, 512, 512, 64, true},
                      {32, 32, 1, 4096, 128, false}, {32, 8, 1, 4096, 128, false}};
  BenchOptions o = base;
  o.min_time = std::min(base.min_time, 0.25);  // "well under a minute" for the whole command
  std::vector<std::pair<Workload, AttentionRun>> results;
  bool timing_checks_pass = true;
  for (const Row& row : rows) {
    Workload w;
    w.Hq = row.Hq, w.Hkv = row.Hkv, w.Nq = row.Nq, w.Nk = row.Nk, w.D = w.Dv = row.D;
    w.causal = row.causal;
    w.allocate(o.seed);
    std::fprintf(stderr, "bench: timing %s%s ...\n", w.shape_label().c_str(),
                 w.causal ? " causal" : "");
    AttentionRun r = bench_attention(w, o, threads);
    timing_checks_pass = timing_checks_pass && r.check.ok;
    if (o.json) std::printf("%s\n", attention_json(w, r, threads).dump().c_str());
    results.emplace_back(std::move(w), std::move(r));
  }
  std::fprintf(stderr, "bench: timing the OpenBLAS sgemm ceiling ...\n");
  const Sgemm g = bench_sgemm(std::min<Index>(o.sgemm_n, 1536), threads, o.min_time);
  if (o.json) {
    std::printf("%s\n", sgemm_json(g, threads).dump().c_str());
  } else {
    // The ceiling is the fastest sgemm call: on a shared machine the median sgemm call may be
    // slowed by other work that the shorter attention calls' medians escaped.
    std::printf(
        "\ntiming, %d threads, target %s (median of >= %d calls and %.2f s; sgemm ceiling "
        "%.1f GFLOP/s at n=%lld, fastest call)\n",
        threads, active_simd_target().c_str(), o.reps, o.min_time, g.gflops_best, (long long)g.n);
    std::printf("  %-36s %-6s %10s %8s %8s %7s %10s\n", "shape", "causal", "median ms", "GFLOP/s",
                "% sgemm", "GB/s", "extra MiB");
    bool above_ceiling = false;
    for (const auto& [w, r] : results) {
      if (!r.check.ok) {
        std::printf("  %-36s %-6s FAIL: %s\n", w.shape_label().c_str(), w.causal ? "yes" : "no",
                    r.check.worst.c_str());
        continue;
      }
      above_ceiling = above_ceiling || r.gflops > g.gflops_best;
      std::printf("  %-36s %-6s %10s %8.1f %7.1f%% %7.1f %10.1f\n", w.shape_label().c_str(),
                  w.causal ? "yes" : "no", format_ms(r.timing.median_ms).c_str(), r.gflops,
                  100.0 * r.gflops / g.gflops_best, r.gbs, r.extra_mib);
    }
    if (above_ceiling)
      std::printf("  (above 100%%: the sgemm ceiling was measured while other work used the cores; "
                  "run again on a quiet machine)\n");
  }
  if (!checks_pass || !timing_checks_pass)
    throw Error(
        "bench --quick: the fast path disagrees with the float64 reference (see FAIL above)");
}

// Flag checks whose failure reads as one short line ("--batch: must be >= 1, got 0"); CLI11's
// own PositiveNumber prints the whole range of a double.
CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        try {
          std::size_t used = 0;
          const double x = std::stod(s, &used);
          if (used == s.size() && x >= lo) return {};
        } catch (const std::exception&) {
        }
        char buf[64];
        std::snprintf(buf, sizeof buf, "must be a number >= %g, got ", lo);
        return buf + s;
      },
      lo == 0 ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time the attention engine on one shape (checked against the float64 reference first); "
      "--sgemm/--copy/--fma-peak add this machine's ceilings; --quick runs the self-check and a small table");
  std::vector<CLI::Option*> shape_flags{
      cmd->add_option("--batch", o->batch, "B: batch size")
          ->check(at_least(1))
          ->capture_default_str(),
      cmd->add_option("--heads", o->heads, "Hq: query heads")
          ->check(at_least(1))
          ->capture_default_str(),
      cmd->add_option("--kv-heads", o->kv_heads, "Hkv: key/value heads (default: --heads)")
          ->check(at_least(1)),
      cmd->add_option("--q-len", o->q_len, "Nq: query rows")
          ->check(at_least(1))
          ->capture_default_str(),
      cmd->add_option("--kv-len", o->kv_len, "Nk: keys (default: --q-len)")->check(at_least(1)),
      cmd->add_option("--head-dim", o->head_dim, "D: query/key width")
          ->check(at_least(1))
          ->capture_default_str(),
      cmd->add_option("--value-dim", o->value_dim, "Dv: value width (default: --head-dim)")
          ->check(at_least(1)),
      cmd->add_flag("--causal", o->causal, "causal mask (aligned bottom-right)"),
  };
  cmd->add_option("--threads", o->threads,
                  "threads for the engine and the ceilings (default: every core)")
      ->check(at_least(1));
  cmd->add_option("--reps", o->reps, "timed calls, at least")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed calls before timing")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--min-time", o->min_time, "seconds of timed calls, at least")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--target", o->target,
                  "pin the SIMD target (one of those --quick lists, e.g. AVX2)");
  cmd->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line on stdout instead of tables");
  cmd->add_flag("--no-check", o->no_check,
                "skip the check against the reference (for quick profiling)");
  cmd->add_flag("--sgemm", o->sgemm, "also time OpenBLAS cblas_sgemm (the fp32 compute ceiling)");
  cmd->add_option("--sgemm-n", o->sgemm_n, "sgemm matrix size")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_flag("--copy", o->copy, "also measure memory copy bandwidth (the decode ceiling)");
  cmd->add_option("--copy-mib", o->copy_mib, "copy buffer size, MiB")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_flag("--fma-peak", o->fma,
                "also measure the fp32 FMA peak (independent FMA chains in registers)");
  cmd->add_flag("--ceilings-only", o->ceilings_only,
                "measure only the ceilings (those of --sgemm/--copy/--fma-peak; all three when none is given)");
  CLI::Option* quick =
      cmd->add_flag("--quick", o->quick,
                    "self-check every SIMD target against the float64 reference on a "
                    "dozen small cases, then time a few shapes; exit 1 on any FAIL");
  for (CLI::Option* f : shape_flags) quick->excludes(f);
  quick->excludes("--ceilings-only");

  cmd->callback([o] {
    if (!o->target.empty()) set_simd_target(o->target);  // throws Error naming the choices
    if (o->quick)
      run_quick(*o);
    else
      run_single(*o);
    std::fflush(stdout);
  });
}

}  // namespace jomoim::cli
