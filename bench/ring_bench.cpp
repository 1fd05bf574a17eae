// ring_bench.cpp — times jomoim::dist::ring_attention under mpirun (bench/ring-bench.sh runs it
// for P = 1, 2, 4 and writes the rows BENCHMARKS.md shows).
//
//   mpirun -np P ring_bench [--n 32768] [--heads 8] [--kv-heads 8] [--dim 64] [--causal]
//                           [--threads T] [--reps 1]
//
// Each rank fills its own zig-zag share of Q, K, V with uniform random numbers (no rank ever
// holds the whole problem), runs the ring `reps` times and reports, on rank 0, one line of
// `key=value` fields:
//   seconds      wall time of the slowest rank, best of the reps
//   compute_s    time in attention() + merge, slowest rank (same rep)
//   wait_s       time blocked in MPI_Waitall, slowest rank: the exposed communication
//   transfer_s   the same P-1 block hops alone (MPI_Sendrecv around the ring, no compute),
//                slowest rank: what the transfers cost when nothing hides them
//   hidden_s     max(0, transfer_s - wait_s): communication time that overlapped compute
//   block_mib    one K/V block (the most rows any rank holds), MiB
//   gflops_rank  compute rate per rank: its FLOPs (causal-halved convention) / compute_s
//   rss_mib      peak RSS (VmHWM) of each rank, MiB
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "jomoim/engine/dist.hpp"

namespace {

using I64 = std::int64_t;

double peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return -1;
}

// splitmix64-based uniform floats in [-1, 1), distinct per rank and tensor.
void fill(std::vector<float>& v, std::uint64_t seed) {
  std::uint64_t s = seed;
  for (float& x : v) {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    x = float(double((z ^ (z >> 31)) >> 40) * 0x1p-23 - 1.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  I64 N = 32768, H = 8, Hkv = -1, D = 64;
  bool causal = false;
  int threads = 0, reps = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "ring_bench: %s needs a value\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return std::atoll(argv[++i]);
    };
    if (a == "--n")
      N = next();
    else if (a == "--heads")
      H = next();
    else if (a == "--kv-heads")
      Hkv = next();
    else if (a == "--dim")
      D = next();
    else if (a == "--threads")
      threads = int(next());
    else if (a == "--reps")
      reps = int(next());
    else if (a == "--causal")
      causal = true;
    else {
      if (rank == 0) std::fprintf(stderr, "ring_bench: unknown argument %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (Hkv < 0) Hkv = H;
  const I64 n = jomoim::dist::zigzag_length(N, rank, ranks);
  std::vector<float> q(std::size_t(H * n * D)), k(std::size_t(Hkv * n * D)), v(std::size_t(Hkv * n * D)),
      out(std::size_t(H * n * D)), lse(std::size_t(H * n));
  fill(q, 1000 + std::uint64_t(rank));
  fill(k, 2000 + std::uint64_t(rank));
  fill(v, 3000 + std::uint64_t(rank));
  jomoim::dist::RingOptions o;
  o.causal = causal;
  o.threads = threads;
  o.lse = jomoim::Tensor3::contiguous(lse.data(), {1, H, n});

  double best[3] = {1e300, 0, 0};  // seconds, compute, wait of the best rep (slowest rank)
  jomoim::dist::RingStats st;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    st = jomoim::dist::ring_attention(MPI_COMM_WORLD, jomoim::ConstTensor4::contiguous(q.data(), {1, H, n, D}),
                                      jomoim::ConstTensor4::contiguous(k.data(), {1, Hkv, n, D}),
                                      jomoim::ConstTensor4::contiguous(v.data(), {1, Hkv, n, D}),
                                      jomoim::Tensor4::contiguous(out.data(), {1, H, n, D}), N, N, o);
    double mine[3] = {st.seconds, st.compute_seconds, st.wait_seconds}, slowest[3];
    MPI_Allreduce(mine, slowest, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (slowest[0] < best[0]) std::copy(slowest, slowest + 3, best);
  }

  // The transfers alone: P - 1 hops of a full block around the ring.
  std::vector<float> a(std::size_t(st.block_capacity)), b(a.size());
  fill(a, 4000 + std::uint64_t(rank));
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int hop = 0; hop + 1 < ranks; ++hop) {
    for (I64 off = 0; off < I64(a.size()); off += I64(1) << 28) {
      const int count = int(std::min<I64>(I64(1) << 28, I64(a.size()) - off));
      MPI_Sendrecv(a.data() + off, count, MPI_FLOAT, (rank + 1) % ranks, 7, b.data() + off, count, MPI_FLOAT,
                   (rank + ranks - 1) % ranks, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    std::swap(a, b);
  }
  double transfer = MPI_Wtime() - t0, transfer_max = 0;
  MPI_Allreduce(&transfer, &transfer_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  // FLOPs this rank computed: visible (query, key) pairs x 2 (D + Dv) per head, the
  // benchmarks' convention (causal: every pair of the lower triangle incl. the diagonal).
  const auto rows = jomoim::dist::zigzag_rows(N, rank, ranks);
  double pairs = 0;
  for (const auto& r : rows)
    for (I64 i = r.begin; i < r.begin + r.size; ++i) pairs += causal ? double(i + 1) : double(N);
  const double flops = pairs * double(H) * 2.0 * double(2 * D);
  double rate = st.compute_seconds > 0 ? flops / st.compute_seconds / 1e9 : 0, rate_min = 0;
  MPI_Allreduce(&rate, &rate_min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);

  double rss = peak_rss_mib();
  std::vector<double> all_rss(static_cast<std::size_t>(ranks));
  MPI_Gather(&rss, 1, MPI_DOUBLE, all_rss.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "P=%d N=%lld H=%lld Hkv=%lld D=%lld causal=%d threads=%d reps=%d seconds=%.3f compute_s=%.3f "
        "wait_s=%.4f transfer_s=%.4f hidden_s=%.4f block_mib=%.2f gflops_rank=%.1f rss_mib=",
        ranks, (long long)N, (long long)H, (long long)Hkv, (long long)D, int(causal), threads, reps, best[0], best[1],
        best[2], transfer_max, std::max(0.0, transfer_max - best[2]), double(st.block_capacity) * 4 / 1048576.0,
        rate_min);
    for (int r = 0; r < ranks; ++r) std::printf("%s%.0f", r ? "," : "", all_rss[std::size_t(r)]);
    std::printf("\n");
  }
  MPI_Finalize();
  return 0;
}
