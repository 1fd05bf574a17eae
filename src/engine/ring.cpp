// ring.cpp — ring attention over MPI (see jomoim/engine/dist.hpp for the contract).
//
// Per call: check the local arguments and allocate everything (any failure is caught), agree
// with every rank on success and on the problem (one MPI_Allgather), then P ring steps. In a
// step the rank posts the transfer of the block it holds to the right neighbour and the
// receive of the next block from the left, computes its two query chunks against the block's
// two key chunks (up to four block pairs, each zero to two attention() calls), and waits.
#include "jomoim/engine/dist.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

namespace jomoim::dist {
namespace {

using I64 = std::int64_t;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Largest piece of a K/V block sent as one message (MPI counts are int).
constexpr I64 kMaxMessage = I64(1) << 28;
constexpr int kTag = 0x6a6d;  // messages travel on a private duplicate of the communicator

// The values every rank must agree on, in the order named in kFieldNames. Slot 0 is the
// rank's verdict: 0 ok, 1 failed.
constexpr int kFields = 13;
constexpr const char* kFieldNames[kFields] = {
    "status",       "B", "Hq", "Hkv", "D", "Dv", "Nq", "Nk", "causal", "scale", "key lengths count", "key lengths",
    "lse requested"};

// FNV-1a over the key lengths: equal lists give equal fingerprints.
I64 hash_lengths(std::span<const I64> lens) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const I64 x : lens)
    for (int byte = 0; byte < 8; ++byte) h = (h ^ ((std::uint64_t(x) >> (8 * byte)) & 0xff)) * 0x100000001b3ull;
  return I64(h >> 1);
}

struct Problem {
  I64 B = 0, Hq = 0, Hkv = 0, D = 0, Dv = 0, Nq = 0, Nk = 0;
  bool causal = false;
  float scale = 1;
  std::span<const I64> key_lengths;
  int rank = 0, ranks = 1;
  int threads = 0;
};

// Floats of the packed K/V block of rank `src`: K [B, Hkv, n, D] then V [B, Hkv, n, Dv].
I64 block_floats(const Problem& p, int src) {
  const I64 n = zigzag_length(p.Nk, src, p.ranks);
  return p.B * p.Hkv * n * (p.D + p.Dv);
}

// The running result of this rank's query rows, in double: out [B, Hq, nq, Dv], lse [B, Hq, nq].
struct Accum {
  I64 nq = 0;
  std::vector<double> out, lse;
};

struct Scratch {
  std::vector<float> out, lse;  // one attention() call's result, up to [B, Hq, chunk, Dv]
};

// Merges block results out_blk [gB, Hq, n, Dv], lse_blk [gB, Hq, n] (rows i0.. of batch b0..)
// into the running result at local rows q_off + i0 ...
// Non-finite inputs (docs/design.md, "Non-finite inputs"): a block's lse is -inf when the row saw none of its keys
// (zeros) or only -inf scores (NaN components kept, nothing else); a NaN lse (a NaN score) makes
// the weights and so the whole row NaN; a NaN component stays NaN through ca * o + cb * ob.
void merge(const Problem& p, Accum& acc, I64 b0, I64 gB, I64 row0, I64 n, const float* out_blk, const float* lse_blk) {
  for (I64 b = 0; b < gB; ++b)
    for (I64 h = 0; h < p.Hq; ++h)
      for (I64 i = 0; i < n; ++i) {
        const I64 blk_row = (b * p.Hq + h) * n + i;
        const double lb = lse_blk[blk_row];
        const I64 row = ((b0 + b) * p.Hq + h) * acc.nq + row0 + i;
        double* o = acc.out.data() + row * p.Dv;
        const float* ob = out_blk + blk_row * p.Dv;
        double& la = acc.lse[std::size_t(row)];
        if (lb == kNegInf) {              // the block saw no key for this row, or only -inf scores: weight 0,
          for (I64 e = 0; e < p.Dv; ++e)  // but its 0 x NaN stays NaN
            if (std::isnan(ob[e])) o[e] = ob[e];
          continue;
        }
        if (la == kNegInf) {
          for (I64 e = 0; e < p.Dv; ++e) o[e] = std::isnan(o[e]) ? o[e] : double(ob[e]);
          la = lb;
          continue;
        }
        const double m = std::max(la, lb);
        const double wa = std::exp(la - m), wb = std::exp(lb - m), s = wa + wb;
        const double ca = wa / s, cb = wb / s;
        for (I64 e = 0; e < p.Dv; ++e) o[e] = ca * o[e] + cb * double(ob[e]);
        la = m + std::log(s);
      }
}

// One attention() call: local query rows [i0, i1) of the chunk at local offset q_off, batches
// [b0, b0 + gB), against the first `keys` keys of the key chunk at offset k_off of the block.
void run_block(const Problem& p, ConstTensor4 q, const float* kv_block, I64 nk_block, I64 b0, I64 gB, I64 q_off, I64 i0,
               I64 i1, I64 k_off, I64 keys, bool causal, Accum& acc, Scratch& sc, RingStats& st) {
  const I64 n = i1 - i0;
  ConstTensor4 qv = q;
  qv.data = q.data + b0 * q.strides[0] + (q_off + i0) * q.strides[2];
  qv.shape = {gB, p.Hq, n, p.D};
  const float* kbase = kv_block;
  const float* vbase = kv_block + p.B * p.Hkv * nk_block * p.D;
  ConstTensor4 kv{kbase + b0 * p.Hkv * nk_block * p.D + k_off * p.D,
                  {gB, p.Hkv, keys, p.D},
                  {p.Hkv * nk_block * p.D, nk_block * p.D, p.D, 1}};
  ConstTensor4 vv{vbase + b0 * p.Hkv * nk_block * p.Dv + k_off * p.Dv,
                  {gB, p.Hkv, keys, p.Dv},
                  {p.Hkv * nk_block * p.Dv, nk_block * p.Dv, p.Dv, 1}};
  AttentionOptions o;
  o.causal = causal;
  o.scale = p.scale;
  o.threads = p.threads;
  o.lse = Tensor3::contiguous(sc.lse.data(), {gB, p.Hq, n});
  attention(qv, kv, vv, Tensor4::contiguous(sc.out.data(), {gB, p.Hq, n, p.Dv}), o);
  ++st.block_calls;
  merge(p, acc, b0, gB, q_off + i0, n, sc.out.data(), sc.lse.data());
}

// Query chunk qa (local offset q_off) against key chunk ka (offset k_off in the block).
// Row i of the chunk (global qa.begin + i) sees global key j iff j < L and, when causal,
// j <= qa.begin + i + (L - Nq), L being the batch's key length (Nk without key lengths). In the
// chunk's own coordinates the rows see nothing, a prefix growing with i, or a fixed prefix.
void block_pair(const Problem& p, ConstTensor4 q, const float* kv_block, I64 nk_block, Rows qa, I64 q_off, Rows ka,
                I64 k_off, Accum& acc, Scratch& sc, RingStats& st) {
  if (qa.size == 0 || ka.size == 0) return;
  // Batches that share a key length share the calls.
  for (I64 b0 = 0; b0 < p.B;) {
    const I64 L = p.key_lengths.empty() ? p.Nk : p.key_lengths[std::size_t(b0)];
    I64 b1 = b0 + 1;
    if (p.key_lengths.empty())
      b1 = p.B;
    else
      while (b1 < p.B && p.key_lengths[std::size_t(b1)] == L) ++b1;
    const I64 gB = b1 - b0;
    const I64 cap = std::clamp<I64>(L - ka.begin, 0, ka.size);  // keys of the chunk below L
    if (cap > 0) {
      if (!p.causal) {
        run_block(p, q, kv_block, nk_block, b0, gB, q_off, 0, qa.size, k_off, cap, false, acc, sc, st);
      } else {
        // Row i sees min(cap, max(0, i + d + 1)) keys of the chunk.
        const I64 d = qa.begin - ka.begin + L - p.Nq;
        const I64 r_none = std::clamp<I64>(-d, 0, qa.size);       // rows [0, r_none): none
        const I64 r_full = std::clamp<I64>(cap - d, 0, qa.size);  // rows [r_full, n): all cap
        if (r_full > r_none)  // growing prefix: a causal call whose last row sees r_full + d keys
          run_block(p, q, kv_block, nk_block, b0, gB, q_off, r_none, r_full, k_off, r_full + d, true, acc, sc, st);
        if (qa.size > r_full)
          run_block(p, q, kv_block, nk_block, b0, gB, q_off, std::max(r_full, r_none), qa.size, k_off, cap, false, acc,
                    sc, st);
      }
    }
    b0 = b1;
  }
}

// Posts the receive of `recv_count` floats from `from` and the send of `send_count` from
// `to`, in pieces that fit an int count.
void post(MPI_Comm comm, const float* send, I64 send_count, int to, float* recv, I64 recv_count, int from,
          std::vector<MPI_Request>& reqs) {
  for (I64 off = 0, piece = 0; off < recv_count; off += kMaxMessage, ++piece) {
    reqs.emplace_back();
    MPI_Irecv(recv + off, int(std::min(kMaxMessage, recv_count - off)), MPI_FLOAT, from, kTag, comm, &reqs.back());
  }
  for (I64 off = 0; off < send_count; off += kMaxMessage) {
    reqs.emplace_back();
    MPI_Isend(send + off, int(std::min(kMaxMessage, send_count - off)), MPI_FLOAT, to, kTag, comm, &reqs.back());
  }
}

// Closes a duplicated communicator on every way out of ring_attention.
struct CommGuard {
  MPI_Comm comm = MPI_COMM_NULL;
  ~CommGuard() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

}  // namespace

std::array<Rows, 2> zigzag_rows(std::int64_t n, int rank, int ranks) {
  if (n < 0) throw Error("zigzag_rows: n must be >= 0, got " + std::to_string(n));
  if (ranks < 1) throw Error("zigzag_rows: ranks must be >= 1, got " + std::to_string(ranks));
  if (rank < 0 || rank >= ranks)
    throw Error("zigzag_rows: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(ranks) + ")");
  const I64 chunks = 2 * I64(ranks);
  // c * n / chunks without overflow for any n below 2^62 / chunks: split n = a * chunks + rem.
  auto start = [&](I64 c) { return c * (n / chunks) + c * (n % chunks) / chunks; };
  const I64 c0 = rank, c1 = chunks - 1 - rank;
  return {Rows{start(c0), start(c0 + 1) - start(c0)}, Rows{start(c1), start(c1 + 1) - start(c1)}};
}

std::int64_t zigzag_length(std::int64_t n, int rank, int ranks) {
  const auto r = zigzag_rows(n, rank, ranks);
  return r[0].size + r[1].size;
}

RingStats ring_attention(MPI_Comm user_comm, ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out,
                         std::int64_t nq_total, std::int64_t nk_total, const RingOptions& options) {
  RingStats st;
  const double t_start = MPI_Wtime();
  CommGuard guard;
  MPI_Comm_dup(user_comm, &guard.comm);
  const MPI_Comm comm = guard.comm;
  Problem p;
  MPI_Comm_rank(comm, &p.rank);
  MPI_Comm_size(comm, &p.ranks);
  const std::string who = "rank " + std::to_string(p.rank) + " of " + std::to_string(p.ranks);

  // ---- local checks and allocation; any failure becomes this rank's verdict
  std::string problem;
  std::array<I64, kFields> mine{};
  Accum acc;
  Scratch sc;
  std::array<std::vector<float>, 2> buf;
  std::array<Rows, 2> qrows{}, krows{};
  try {
    if (nq_total < 0 || nk_total < 0)
      throw Error("ring_attention: nq_total and nk_total must be >= 0, got " + std::to_string(nq_total) + " and " +
                  std::to_string(nk_total));
    qrows = zigzag_rows(nq_total, p.rank, p.ranks);
    krows = zigzag_rows(nk_total, p.rank, p.ranks);
    const I64 nq_local = qrows[0].size + qrows[1].size, nk_local = krows[0].size + krows[1].size;
    auto rows_check = [&](const char* what, I64 got, I64 want, const char* total_name, I64 total) {
      if (got != want)
        throw Error(std::string(what) + ": " + who + " holds " + std::to_string(got) + " rows, expected " +
                    std::to_string(want) + " (its zig-zag share of " + total_name + " = " + std::to_string(total) +
                    ")");
    };
    rows_check("q", q.shape[2], nq_local, "Nq", nq_total);
    rows_check("k", k.shape[2], nk_local, "Nk", nk_total);
    rows_check("v", v.shape[2], nk_local, "Nk", nk_total);
    AttentionOptions check;
    check.scale = options.scale;
    check.lse = options.lse;
    check.threads = options.threads;
    const AttentionShape s = check_attention_args(q, k, v, &out, check);
    if (options.threads < 0)
      throw Error("threads: expected 0 (OpenMP's default) or a positive count, got " + std::to_string(options.threads));
    if (!options.key_lengths.empty()) {
      if (I64(options.key_lengths.size()) != s.B)
        throw Error("key_lengths: expected B = " + std::to_string(s.B) + " entries, got " +
                    std::to_string(options.key_lengths.size()));
      for (std::size_t b = 0; b < options.key_lengths.size(); ++b)
        if (options.key_lengths[b] < 0 || options.key_lengths[b] > nk_total)
          throw Error("key_lengths[" + std::to_string(b) + "] = " + std::to_string(options.key_lengths[b]) +
                      " is not in [0, Nk = " + std::to_string(nk_total) + "]");
    }
    p.B = s.B, p.Hq = s.Hq, p.Hkv = s.Hkv, p.D = s.D, p.Dv = s.Dv, p.Nq = nq_total, p.Nk = nk_total;
    p.causal = options.causal;
    p.scale = s.scale;
    p.key_lengths = options.key_lengths;
    p.threads = options.threads;
    mine = {0,
            p.B,
            p.Hq,
            p.Hkv,
            p.D,
            p.Dv,
            p.Nq,
            p.Nk,
            I64(p.causal),
            I64(std::bit_cast<std::uint32_t>(p.scale)),
            I64(p.key_lengths.size()),
            hash_lengths(p.key_lengths),
            I64(options.lse.has_value())};
    if (options.fail_rank == p.rank && options.fail_phase == FailPhase::check)
      throw Error("ring_attention: " + who + ": injected failure (test hook, before the ring)");

    I64 cap = 0;
    for (int r = 0; r < p.ranks; ++r) cap = std::max(cap, block_floats(p, r));
    st.block_capacity = cap;
    for (auto& b : buf) b.resize(std::size_t(cap));
    acc.nq = nq_local;
    acc.out.assign(std::size_t(p.B * p.Hq * nq_local * p.Dv), 0.0);
    acc.lse.assign(std::size_t(p.B * p.Hq * nq_local), kNegInf);
    const I64 chunk = std::max(qrows[0].size, qrows[1].size);
    sc.out.resize(std::size_t(p.B * p.Hq * chunk * p.Dv));
    sc.lse.resize(std::size_t(p.B * p.Hq * chunk));
    // This rank's block: K then V, C order, its rows in zig-zag order as given.
    float* kp = buf[0].data();
    float* vp = kp + p.B * p.Hkv * nk_local * p.D;
    for (I64 b = 0; b < p.B; ++b)
      for (I64 h = 0; h < p.Hkv; ++h)
        for (I64 j = 0; j < nk_local; ++j) {
          for (I64 d = 0; d < p.D; ++d) *kp++ = k(b, h, j, d);
          for (I64 e = 0; e < p.Dv; ++e) *vp++ = v(b, h, j, e);
        }
  } catch (const std::exception& e) {
    problem = e.what();
    mine[0] = 1;
  }

  // ---- agreement: every rank sees every rank's verdict and problem
  std::vector<I64> all(std::size_t(kFields) * std::size_t(p.ranks));
  MPI_Allgather(mine.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, comm);
  if (!problem.empty()) throw Error(who + ": " + problem);
  std::string failed;
  for (int r = 0; r < p.ranks; ++r)
    if (all[std::size_t(r) * kFields] != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty())
    throw Error("ring_attention: " + who + ": stopped because rank(s) " + failed + " failed (see their messages)");
  for (int f = 1; f < kFields; ++f)
    for (int r = 1; r < p.ranks; ++r)
      if (all[std::size_t(r) * kFields + f] != all[std::size_t(f)])
        throw Error("ring_attention: " + who + ": ranks 0 and " + std::to_string(r) + " disagree on " + kFieldNames[f] +
                    " (every rank must pass the same problem)");

  // ---- the ring
  try {
    const int right = (p.rank + 1) % p.ranks, left = (p.rank + p.ranks - 1) % p.ranks;
    std::vector<MPI_Request> reqs;
    for (int t = 0; t < p.ranks; ++t) {
      const int src = (p.rank - t + p.ranks) % p.ranks;    // whose block this rank holds now
      const int next_src = (src - 1 + p.ranks) % p.ranks;  // whose block arrives next
      float* cur = buf[std::size_t(t % 2)].data();
      float* nxt = buf[std::size_t((t + 1) % 2)].data();
      reqs.clear();
      if (t + 1 < p.ranks) post(comm, cur, block_floats(p, src), right, nxt, block_floats(p, next_src), left, reqs);
      if (options.fail_rank == p.rank && options.fail_phase == FailPhase::ring && t == 0)
        throw Error("injected failure (test hook, in ring step " + std::to_string(t) + ")");

      const double t0 = MPI_Wtime();
      const auto kr = zigzag_rows(p.Nk, src, p.ranks);
      const I64 nk_block = kr[0].size + kr[1].size;
      const I64 q_off[2] = {0, qrows[0].size}, k_off[2] = {0, kr[0].size};
      for (int qi = 0; qi < 2; ++qi)
        for (int ki = 0; ki < 2; ++ki) {
          block_pair(p, q, cur, nk_block, qrows[qi], q_off[qi], kr[ki], k_off[ki], acc, sc, st);
          if (!reqs.empty()) {  // lets the transfer progress while this rank computes
            int done = 0;
            MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
          }
        }
      const double t1 = MPI_Wtime();
      if (!reqs.empty()) MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
      const double t2 = MPI_Wtime();
      st.compute_seconds += t1 - t0;
      st.wait_seconds += t2 - t1;
      if (t + 1 < p.ranks) st.bytes_sent += std::uint64_t(block_floats(p, src)) * sizeof(float);
      ++st.steps;
    }
  } catch (const std::exception& e) {
    // The neighbours are blocked on this rank's messages and cannot be told otherwise.
    std::fprintf(stderr, "jomoim: error: %s: ring attention failed mid-ring: %s; aborting every rank\n", who.c_str(),
                 e.what());
    std::fflush(stderr);
    MPI_Abort(comm, 1);
  }

  // ---- results
  for (I64 b = 0; b < p.B; ++b)
    for (I64 h = 0; h < p.Hq; ++h)
      for (I64 i = 0; i < acc.nq; ++i) {
        const I64 row = (b * p.Hq + h) * acc.nq + i;
        for (I64 e = 0; e < p.Dv; ++e) out(b, h, i, e) = float(acc.out[std::size_t(row * p.Dv + e)]);
        if (options.lse) (*options.lse)(b, h, i) = float(acc.lse[std::size_t(row)]);
      }
  st.seconds = MPI_Wtime() - t_start;
  return st;
}

}  // namespace jomoim::dist
