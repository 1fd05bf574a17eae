// ceilings.cpp — sgemm, copy bandwidth and the FMA peak, measured and reported (see
// ceilings.hpp).
#include "bench/ceilings.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>  // types and constants only: OpenBLAS is loaded at run time (OpenBlas below)
#include <dlfcn.h>
#include <omp.h>

#include "fma_peak.hpp"
#include "jomoim/core/tensor.hpp"  // jomoim::Error
#include "jomoim/engine/simd.hpp"

#include "bench/timing.hpp"

namespace jomoim::cli::bench {

namespace {

// OpenBLAS, opened the first time the sgemm ceiling is asked for. The jomoim binary does not
// link it: Debian's pthread build starts a worker thread per core when it is loaded, and those
// spin in sched_yield for ~80 ms, slowing every short jomoim run (src/model/blas.hpp).
struct OpenBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_corename) corename = nullptr;
};

const OpenBlas& openblas() {
  static const OpenBlas lib = [] {
    std::string why;
    void* h = nullptr;
    // Debian's pkg-config libdir first (the build's OpenBLAS), then the loader's alternative.
    const std::string built = std::string(JOMOIM_OPENBLAS_LIBDIR) + "/libopenblas.so.0";
    for (const char* name : {built.c_str(), "libopenblas.so.0"}) {
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      const char* e = dlerror();
      why = e ? e : name;
    }
    if (!h) throw Error("bench --sgemm: cannot load OpenBLAS (" + why + "); install libopenblas0");
    OpenBlas b;
    b.sgemm = reinterpret_cast<decltype(b.sgemm)>(dlsym(h, "cblas_sgemm"));
    b.set_num_threads = reinterpret_cast<decltype(b.set_num_threads)>(dlsym(h, "openblas_set_num_threads"));
    b.corename = reinterpret_cast<decltype(b.corename)>(dlsym(h, "openblas_get_corename"));
    if (!b.sgemm || !b.set_num_threads || !b.corename)
      throw Error("bench --sgemm: the OpenBLAS library found lacks cblas_sgemm or openblas_* functions");
    return b;
  }();
  return lib;
}

}  // namespace

// OpenBLAS cblas_sgemm C = A B (row-major, square n) with the bench's thread count: the fp32
// compute ceiling the attention GFLOP/s are compared with. Measured after the attention runs,
// because OpenBLAS's idle threads keep spinning for a while after a call and would slow the
// OpenMP threads of the engine.
Sgemm bench_sgemm(Index n, int threads, double min_time) {
  const OpenBlas& blas = openblas();
  blas.set_num_threads(threads);
  std::vector<float> a(std::size_t(n * n)), b(std::size_t(n * n)), c(std::size_t(n * n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto* x : {&a, &b})
    for (float& e : *x) e = uni(rng);
  const Timing t = time_calls(
      [&] {
        blas.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.f, a.data(), int(n), b.data(),
                   int(n), 0.f, c.data(), int(n));
      },
      1, 3, min_time);
  const double flop = 2.0 * double(n) * double(n) * double(n);
  return {n, t.median_ms, flop / (t.median_ms * 1e-3) * 1e-9, flop / (t.min_ms * 1e-3) * 1e-9};
}

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
      const std::size_t t = std::size_t(omp_get_thread_num()), nt = std::size_t(omp_get_num_threads());
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
  return Json{{"kind", "sgemm"},
              {"n", g.n},
              {"threads", threads},
              {"median_ms", g.median_ms},
              {"gflops", g.gflops},
              {"gflops_best", g.gflops_best},
              {"openblas_core", openblas().corename()}};
}
Json copy_json(const Copy& c, int threads) {
  return Json{{"kind", "copy"},
              {"mib", c.mib},
              {"threads", threads},
              {"copy_gbs", c.best_gbs},
              {"copy_gbs_median", c.median_gbs}};
}

namespace {

Json fma_json(const FmaPeak& f, int threads) {
  return Json{{"kind", "fma_peak"},
              {"threads", threads},
              {"target", active_simd_target()},
              {"gflops", f.best_gflops},
              {"gflops_median", f.median_gflops},
              {"runs", f.runs}};
}

}  // namespace

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
    if (!o.json) std::fprintf(stderr, "bench: timing OpenBLAS sgemm n=%lld ...\n", (long long)o.sgemm_n);
    const Sgemm g = bench_sgemm(o.sgemm_n, threads, o.min_time);
    if (o.json)
      std::printf("%s\n", sgemm_json(g, threads).dump().c_str());
    else
      std::printf(
          "sgemm ceiling: OpenBLAS (%s) n=%lld, %d threads: %.1f GFLOP/s (median %.2f ms), "
          "%.1f GFLOP/s in the fastest call\n",
          openblas().corename(), (long long)g.n, threads, g.gflops, g.median_ms, g.gflops_best);
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

}  // namespace jomoim::cli::bench
