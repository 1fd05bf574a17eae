// cmd_attend_dist.cpp — `mpirun -np P jomoim attend --distributed ...` (see attend_dist.hpp).
//
// Input: each rank reads only its own rows. It parses the three headers (read_npy_info) and
// reads its zig-zag rows of Q, K and V by offset (read_npy_elements: B x H x 2 ranged reads
// per file), so no rank ever holds more than its 1/P share plus the ring's buffers: memory per
// rank is proportional to N / P. Every rank must see the same files (one machine, or a shared
// file system).
// Output: rank 0 creates one temporary file per output next to its target (the header, then
// the full data length), every rank writes its rows into it at their offsets (pwrite) and
// flushes it, and once all have succeeded rank 0 renames the files into place. On any failure
// the temporary files are removed: as with plain `attend`, nothing is half-written.
// Errors: every phase ends in an agreement (MPI_Allgather of each rank's verdict); a failure
// on any rank makes every rank throw, the failing rank with its own message, so every process
// prints one line and exits 1. A failure inside the ring ends the job via MPI_Abort
// (jomoim/engine/dist.hpp). Testing hook: JOMOIM_DIST_FAIL=RANK:read or RANK:ring makes that rank fail
// while reading its input, or in the middle of the ring.
#include "attend_dist.hpp"

#include "jomoim/core/tensor.hpp"

#if JOMOIM_HAVE_MPI
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>

#include "jomoim/engine/dist.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/formats/npy.hpp"
#endif

namespace jomoim::cli {

#if !JOMOIM_HAVE_MPI

void run_attend_distributed(const DistAttendArgs&) {
  throw Error(
      "--distributed: this jomoim was built without MPI (install Open MPI, e.g. Debian's libopenmpi-dev, "
      "and reconfigure with -DJOMOIM_WITH_MPI=ON)");
}

#else

namespace {

namespace fs = std::filesystem;
using I64 = std::int64_t;

// MPI_Init on entry when nobody has; MPI_Finalize at exit (atexit), after main has printed this
// rank's error line: Open MPI's finalize synchronises the ranks, so no rank exits (and makes
// mpirun kill the others) before every rank has said why it stops.
void start_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  MPI_Init(nullptr, nullptr);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

struct Ctx {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, ranks = 1;
  std::string who;  // "rank 1 of 4"
  int fail_rank = -1;
  std::string fail_phase;
};

// Runs f on this rank, then every rank learns every verdict; throws on every rank when any
// rank failed. The failing rank's message is its own, prefixed with its rank.
template <class F>
void agreed(const Ctx& c, F&& f) {
  std::string problem;
  try {
    f();
  } catch (const std::exception& e) {
    problem = e.what();
    if (problem.empty()) problem = "unknown error";
  }
  int mine = problem.empty() ? 0 : 1;
  std::vector<int> all(std::size_t(c.ranks));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, c.comm);
  if (mine) throw Error(c.who + ": " + problem);
  std::string failed;
  for (int r = 0; r < c.ranks; ++r)
    if (all[std::size_t(r)]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty()) throw Error(c.who + ": stopped because rank(s) " + failed + " failed (see their messages)");
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code e1, e2, e3;
  if (fs::exists(a, e1) && fs::exists(b, e2) && fs::equivalent(a, b, e3)) return true;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// One input: its header and this rank's rows, read by offset.
struct LocalInput {
  NpyInfo info;
  std::vector<float> rows;  // [B, H, n_local, X] C order
};

LocalInput read_rows(const char* option, const std::string& path, const char* layout, const Ctx& c) {
  LocalInput in;
  try {
    in.info = read_npy_info(path);
  } catch (const Error& e) {
    throw Error(std::string(option) + " " + e.what());
  }
  const auto& s = in.info.shape;
  if (s.size() != 4)
    throw Error(std::string(option) + " " + path + ": expected a rank-4 array " + layout + ", got shape " +
                shape_string(s) + " (rank " + std::to_string(s.size()) + ")");
  const I64 B = s[0], H = s[1], N = s[2], X = s[3];
  const auto chunks = dist::zigzag_rows(N, c.rank, c.ranks);
  in.rows.resize(std::size_t(B * H * (chunks[0].size + chunks[1].size) * X));
  float* dst = in.rows.data();
  try {
    for (I64 b = 0; b < B; ++b)
      for (I64 h = 0; h < H; ++h)
        for (const dist::Rows& r : chunks) {
          read_npy_elements(path, in.info, std::uint64_t(((b * H + h) * N + r.begin) * X), std::uint64_t(r.size * X),
                            dst);
          dst += r.size * X;
        }
  } catch (const Error& e) {
    throw Error(std::string(option) + " " + e.what());
  }
  return in;
}

// A temporary output file that rank 0 creates and every rank fills in.
struct OutFile {
  const char* option;
  std::string path, tmp;
  std::vector<I64> shape;  // [B, Hq, Nq, Dv] or [B, Hq, Nq]
  const float* local = nullptr;
};

void write_all_at(int fd, const char* p, std::uint64_t n, std::uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, std::size_t(std::min<std::uint64_t>(n, std::uint64_t(1) << 30)), off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(std::string("cannot write: ") + std::strerror(errno));
    p += w;
    n -= std::uint64_t(w);
    offset += std::uint64_t(w);
  }
}

// Rank 0: the temporary file with the header and the full length (zeros until written).
void create_tmp(OutFile& f) {
  const fs::path p(f.path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string header = npy_header(f.shape);
  std::uint64_t count = 1;
  for (I64 d : f.shape) count *= std::uint64_t(d);
  for (int attempt = 0;; ++attempt) {
    std::string name = ".";  // appended piecewise: "." + s trips a false -Wrestrict in g++ 12
    name += p.filename().string().substr(0, 100);
    name += ".tmp-" + std::to_string(::getpid()) + "-dist-" + std::to_string(attempt);
    f.tmp = (dir / name).string();
    const int fd = ::open(f.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST && attempt < 100) continue;
    if (fd < 0)
      throw Error(std::string(f.option) + " " + f.path + ": cannot create a temporary file in '" + dir.string() +
                  "': " + std::strerror(errno));
    try {
      write_all_at(fd, header.data(), header.size(), 0);
      if (::ftruncate(fd, off_t(header.size() + count * sizeof(float))) != 0)
        throw Error(std::string("cannot size the file: ") + std::strerror(errno));
    } catch (const Error& e) {
      ::close(fd);
      ::unlink(f.tmp.c_str());
      f.tmp.clear();
      throw Error(std::string(f.option) + " " + f.path + ": " + e.what());
    }
    ::close(fd);
    return;
  }
}

// Every rank: its rows of [B, Hq, Nq(, Dv)] at their offsets.
void write_rows(const OutFile& f, const Ctx& c) {
  const I64 B = f.shape[0], H = f.shape[1], N = f.shape[2], X = f.shape.size() == 4 ? f.shape[3] : 1;
  const auto chunks = dist::zigzag_rows(N, c.rank, c.ranks);
  const std::uint64_t data_start = npy_header(f.shape).size();
  const int fd = ::open(f.tmp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(std::string(f.option) + " " + f.path + ": cannot open the temporary file: " + std::strerror(errno));
  try {
    const float* src = f.local;
    for (I64 b = 0; b < B; ++b)
      for (I64 h = 0; h < H; ++h)
        for (const dist::Rows& r : chunks) {
          const std::uint64_t offset = data_start + std::uint64_t(((b * H + h) * N + r.begin) * X) * sizeof(float);
          write_all_at(fd, reinterpret_cast<const char*>(src), std::uint64_t(r.size * X) * sizeof(float), offset);
          src += r.size * X;
        }
    if (::fsync(fd) != 0) throw Error(std::string("cannot flush to disk: ") + std::strerror(errno));
  } catch (const Error& e) {
    ::close(fd);
    throw Error(std::string(f.option) + " " + f.path + ": " + e.what());
  }
  if (::close(fd) != 0) throw Error(std::string(f.option) + " " + f.path + ": cannot close: " + std::strerror(errno));
}

// Strings from rank 0 to every rank.
void broadcast(std::string& s, const Ctx& c) {
  long long n = (long long)s.size();
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, c.comm);
  s.resize(std::size_t(n));
  MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, c.comm);
}

}  // namespace

void run_attend_distributed(const DistAttendArgs& a) {
  // Refusals that need no MPI (identical on every rank).
  if (!a.probs.empty())
    throw Error(
        "--probs: not available with --distributed (the N x N weights are what ring attention avoids); "
        "run plain `jomoim attend` for them");
  if (!a.bias.empty())
    throw Error(
        "--bias: not available with --distributed (an arbitrary bias is an N x N input); use --causal "
        "and --key-lengths, which need none");
  if (a.notation != "paper")
    throw Error("--notation " + a.notation + ": --distributed reads and writes the paper layout only ([B, H, N, D])");
  resolve_threads(a.threads, "--threads");  // refuses negative counts
  std::optional<float> scale;
  if (a.has_scale) {
    if (!std::isfinite(a.scale) || std::fabs(a.scale) > std::numeric_limits<float>::max()) {
      char given[32];
      std::snprintf(given, sizeof given, "%g", a.scale);
      throw Error(std::string("--scale: expected a finite float32 number, got ") + given);
    }
    scale = float(a.scale);
  }

  start_mpi();
  Ctx c;
  MPI_Comm_rank(c.comm, &c.rank);
  MPI_Comm_size(c.comm, &c.ranks);
  c.who = "rank " + std::to_string(c.rank) + " of " + std::to_string(c.ranks);
  if (const char* hook = std::getenv("JOMOIM_DIST_FAIL")) {  // testing: "RANK:read" or "RANK:ring"
    const std::string h = hook;
    const auto colon = h.find(':');
    if (colon != std::string::npos) {
      c.fail_rank = std::atoi(h.substr(0, colon).c_str());
      c.fail_phase = h.substr(colon + 1);
    }
  }

  // ---- output paths, then this rank's rows of the inputs
  std::vector<OutFile> files;
  LocalInput q, k, v;
  agreed(c, [&] {
    const std::vector<std::pair<const char*, const std::string*> > inputs = {
        {"--q", &a.q}, {"--k", &a.k}, {"--v", &a.v}};
    std::vector<std::pair<const char*, const std::string*> > outputs = {{"--out", &a.out}};
    if (!a.lse.empty()) outputs.push_back({"--lse", &a.lse});
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const std::string label = std::string(outputs[i].first) + " " + *outputs[i].second;
      for (const auto& in : inputs)
        if (same_file(*outputs[i].second, *in.second))
          throw Error(label + ": is also the " + in.first + " input; write the output to another file");
      for (std::size_t j = 0; j < i; ++j)
        if (same_file(*outputs[i].second, *outputs[j].second))
          throw Error(label + ": is also the " + outputs[j].first + " output; give each output its own file");
      const fs::path p(*outputs[i].second);
      std::error_code ec;
      if (!p.has_filename() || fs::is_directory(p, ec)) throw Error(label + ": is a directory, not a file name");
      const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
      if (!fs::is_directory(dir, ec)) throw Error(label + ": the directory '" + dir.string() + "' does not exist");
    }
    q = read_rows("--q", a.q, "[B, Hq, Nq, D]", c);
    k = read_rows("--k", a.k, "[B, Hkv, Nk, D]", c);
    v = read_rows("--v", a.v, "[B, Hkv, Nk, Dv]", c);
    if (c.fail_rank == c.rank && c.fail_phase == "read")
      throw Error("--q " + a.q + ": injected failure while reading (JOMOIM_DIST_FAIL)");
  });

  // ---- the ring (its own agreement on arguments; MPI_Abort if it fails midway)
  const auto& qs = q.info.shape;
  const auto& ks = k.info.shape;
  const auto& vs = v.info.shape;
  const I64 B = qs[0], Hq = qs[1], Nq = qs[2], Nk = ks[2], Dv = vs[3];
  const I64 nq = dist::zigzag_length(Nq, c.rank, c.ranks), nk = dist::zigzag_length(Nk, c.rank, c.ranks);
  std::vector<float> out, lse;
  agreed(c, [&] {
    out.resize(std::size_t(B * Hq * nq * Dv));
    if (!a.lse.empty()) lse.resize(std::size_t(B * Hq * nq));
  });
  dist::RingOptions o;
  o.causal = a.causal;
  o.scale = scale;
  o.key_lengths = a.key_lengths;
  o.threads = a.threads;
  if (!a.lse.empty()) o.lse = Tensor3::contiguous(lse.data(), {B, Hq, nq});
  if (c.fail_rank >= 0 && c.fail_phase == "ring") {
    o.fail_rank = c.fail_rank;
    o.fail_phase = dist::FailPhase::ring;
  }
  try {
    dist::ring_attention(c.comm, ConstTensor4::contiguous(q.rows.data(), {qs[0], qs[1], nq, qs[3]}),
                         ConstTensor4::contiguous(k.rows.data(), {ks[0], ks[1], nk, ks[3]}),
                         ConstTensor4::contiguous(v.rows.data(), {vs[0], vs[1], nk, vs[3]}),
                         Tensor4::contiguous(out.data(), {B, Hq, nq, Dv}), Nq, Nk, o);
  } catch (const Error& e) {
    // Messages name the library's arguments; say which files they came from.
    throw Error(std::string("--q/--k/--v: ") + e.what());
  }
  q = {}, k = {}, v = {};
  agreed(c, [] {});  // every rank is through the ring before any file is created

  // ---- outputs: rank 0 creates, everyone writes its rows, rank 0 renames
  files.push_back({"--out", a.out, "", {B, Hq, Nq, Dv}, out.data()});
  if (!a.lse.empty()) files.push_back({"--lse", a.lse, "", {B, Hq, Nq}, lse.data()});
  auto remove_tmps = [&] {
    if (c.rank != 0) return;
    for (OutFile& f : files)
      if (!f.tmp.empty()) ::unlink(f.tmp.c_str());
  };
  try {
    agreed(c, [&] {
      if (c.rank == 0)
        for (OutFile& f : files) create_tmp(f);
    });
    for (OutFile& f : files) broadcast(f.tmp, c);
    agreed(c, [&] {
      for (const OutFile& f : files) write_rows(f, c);
    });
    agreed(c, [&] {
      if (c.rank != 0) return;
      std::vector<std::string> renamed;
      for (OutFile& f : files) {
        if (::rename(f.tmp.c_str(), f.path.c_str()) != 0) {
          const int err = errno;
          for (const std::string& p : renamed) ::unlink(p.c_str());
          throw Error(std::string(f.option) + " " + f.path +
                      ": cannot write: replacing the file: " + std::strerror(err));
        }
        f.tmp.clear();
        renamed.push_back(f.path);
      }
    });
  } catch (...) {
    remove_tmps();
    throw;
  }
}

#endif

}  // namespace jomoim::cli
