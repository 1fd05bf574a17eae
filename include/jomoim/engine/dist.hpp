// jomoim/engine/dist.hpp — ring attention: one attention call split along the sequence over MPI ranks.
//
// Built only when CMake finds MPI (option JOMOIM_WITH_MPI, target jomoim::dist); the rest of
// jomoim does not need it. Link jomoim::dist, which brings MPI::MPI_CXX.
//
// The problem is the one attention() solves (paper layout, see attention.hpp):
//   q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv] -> out [B, Hq, Nq, Dv], lse [B, Hq, Nq]
// but no rank holds it whole. The query sequence (Nq positions) and the key/value sequence (Nk
// positions) are each cut into 2P chunks, and rank r of P holds chunks r and 2P-1-r of both, in
// that order ("zig-zag": zigzag_rows()). That balances causal work: every rank holds one early
// and one late chunk, so every rank has about the same number of visible (query, key) pairs.
//
// The ring: each rank keeps its queries; its K/V block (both chunks, packed) travels around the
// ring of ranks, one hop per step, P steps in all. While a rank computes on the block it holds,
// it has already posted the non-blocking send of that block to rank r+1 and the receive of the
// next one from rank r-1 (MPI_Isend/MPI_Irecv into a second buffer: double buffering), and it
// drives their progress (MPI_Testall) between the block pairs it computes. Each (query chunk,
// key chunk) pair is one attention() call — or none, when causality hides the whole key chunk —
// whose out and log-sum-exp are merged into the rank's running result exactly:
//     lse = log(exp(lse_a) + exp(lse_b)),  out = (exp(lse_a - lse) out_a + exp(lse_b - lse) out_b)
// (in double precision; lse = -inf, a block that saw no key, contributes nothing). Causal
// masking and key lengths need no bias: each block pair's rows are split into rows that see no
// key of the chunk, rows that see a prefix growing by one per row (a causal call on a prefix of
// the key chunk) and rows that see a fixed prefix (a non-causal call), which reproduces the
// engine's bottom-right rule over the whole sequence for any Nq, Nk and chunk sizes.
//
// Memory per rank: the caller's local slices (~1/P of q, k, v, out) plus, inside the call, two
// K/V block buffers of the largest rank's block, the running out and lse in double, and one
// chunk's worth of block output: all proportional to N / P. attention()'s own scratch as usual.
//
// Errors: arguments are checked on every rank, then the ranks exchange their verdicts and
// fingerprints of the problem (shapes, causal, scale, key lengths, lse wanted) before any K/V
// moves; if any rank's arguments are bad or the ranks disagree, every rank throws Error (the
// failing rank with its own message, the others naming the failing ranks), so no rank hangs.
// An exception after the ring has started (out of memory, say) cannot be reported to peers
// that are blocked waiting for this rank: the rank prints one line to stderr and calls
// MPI_Abort(comm, 1), which ends every rank of the job with an error.
//
// Threads: call from one thread per rank (MPI_THREAD_SINGLE suffices); attention() inside uses
// options.threads OpenMP threads. Collective over `comm`: every rank must call it with the
// same problem. The communicator is duplicated for the call, so its messages never mix with
// the caller's.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "jomoim/core/tensor.hpp"
#include "jomoim/engine/attention.hpp"

namespace jomoim::dist {

// A run of sequence positions [begin, begin + size).
struct Rows {
  std::int64_t begin = 0, size = 0;
};

// The zig-zag split of n positions over `ranks` ranks: chunk c of 2*ranks is
// [c*n / (2*ranks), (c+1)*n / (2*ranks)) (integer division: sizes differ by at most 1, and
// some are empty when n < 2*ranks); rank r holds chunks r and 2*ranks-1-r, in that order.
// Throws Error when n < 0, ranks < 1 or rank is not in [0, ranks).
std::array<Rows, 2> zigzag_rows(std::int64_t n, int rank, int ranks);
// The number of positions rank r holds: the sum of its two chunks' sizes.
std::int64_t zigzag_length(std::int64_t n, int rank, int ranks);

// Where a test makes one rank fail on purpose (RingOptions::fail_rank).
enum class FailPhase {
  check,  // as if that rank's arguments were bad: every rank throws Error
  ring,   // an exception in the middle of the ring: MPI_Abort ends the job
};

struct RingOptions {
  bool causal = false;                        // over the whole sequences, aligned bottom-right
  std::optional<float> scale;                 // default 1 / sqrt(D); must be finite
  std::span<const std::int64_t> key_lengths;  // empty, or B entries in [0, Nk] (global lengths)
  std::optional<Tensor3> lse;                 // this rank's rows of lse: [B, Hq, nq_local]
  int threads = 0;                            // attention()'s threads; 0: OpenMP's default
  int fail_rank = -1;                         // testing only: this rank fails in fail_phase
  FailPhase fail_phase = FailPhase::check;
};

// What one call did on this rank.
struct RingStats {
  int steps = 0;                    // ring steps: P (one per K/V block seen)
  int block_calls = 0;              // attention() calls made
  double seconds = 0;               // wall time of the call, checks included
  double compute_seconds = 0;       // in attention() and the merge
  double wait_seconds = 0;          // blocked in MPI_Waitall for the K/V transfers: exposed time
  std::uint64_t bytes_sent = 0;     // K/V bytes this rank sent
  std::int64_t block_capacity = 0;  // floats in each of the two K/V buffers
};

// Ring attention over `comm` (collective). On rank r of P:
//   q   [B, Hq,  zigzag_length(nq_total, r, P), D ]  this rank's query rows, in zig-zag order
//   k   [B, Hkv, zigzag_length(nk_total, r, P), D ]  this rank's keys, likewise
//   v   [B, Hkv, zigzag_length(nk_total, r, P), Dv]
//   out [B, Hq,  zigzag_length(nq_total, r, P), Dv]  written with this rank's rows of the result
// Views may have any strides (outputs as attention() requires). The result equals attention()
// on the whole tensors with the same causal / scale / key_lengths, up to float32 rounding.
// Throws Error as described above ("Errors"); writes out and lse only on success.
RingStats ring_attention(MPI_Comm comm, ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out,
                         std::int64_t nq_total, std::int64_t nk_total, const RingOptions& options = {});

}  // namespace jomoim::dist
