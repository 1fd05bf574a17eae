// cmd_bench.cpp — `jomoim bench`: times the attention engine on one shape, and this machine's
// ceilings to compare it with (OpenBLAS sgemm for compute, a memory copy for decode).
//
//   jomoim bench [--batch B --heads Hq --kv-heads Hkv --q-len Nq --kv-len Nk --head-dim D
//                 --value-dim Dv --causal --threads T --target NAME --dtype f32|bf16|f16|q8] [--json]
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
//
// The parts live in bench/: options.hpp, memory (RSS from /proc), workload (the problem and its
// inputs), check (against the reference), timing (the loop), attention_run (one shape checked,
// timed and measured), ceilings (sgemm, copy; FMA peak in fma_peak.cpp), self_test (--quick, on
// the cases of the shared table bench/cases/attention_cases.hpp).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "jomoim/engine/simd.hpp"
#include "jomoim/engine/threads.hpp"

#include "bench/attention_run.hpp"
#include "bench/ceilings.hpp"
#include "bench/options.hpp"
#include "bench/self_test.hpp"
#include "bench/timing.hpp"
#include "bench/workload.hpp"

namespace jomoim::cli {
namespace {

using namespace bench;

void run_single(const BenchOptions& o, bool q8_block_given, bool q4_block_given) {
  const int threads = resolve_threads(o.threads);
  if (!o.ceilings_only) {
    Workload w;
    w.B = o.batch, w.Hq = o.heads, w.Hkv = o.kv_heads ? o.kv_heads : o.heads;
    w.Nq = o.q_len, w.Nk = o.kv_len ? o.kv_len : o.q_len;
    w.D = o.head_dim, w.Dv = o.value_dim ? o.value_dim : o.head_dim;
    w.causal = o.causal;
    const bool q8 = o.dtype == "q8", q4 = o.dtype == "q4";
    const std::optional<Dtype> dt = q8 || q4 ? Dtype::f32 : parse_dtype(o.dtype);
    if (!dt) throw Error("bench: --dtype: expected f32, bf16, f16, q8 or q4, got '" + o.dtype + "'");
    w.dtype = *dt;
    // --q8-block / --q4-block: checked here under the flag's name (quantize_q8 / quantize_q4
    // would refuse them too); given without their --dtype, refused.
    auto block_of = [&](bool chosen, bool given, const char* format, Index block, Index multiple) -> Index {
      const std::string flag = std::string("--") + format + "-block";
      if (!chosen) {
        if (given) throw Error("bench: " + flag + " needs --dtype " + format);
        return 0;
      }
      for (auto [name, width] : {std::pair{"--head-dim", w.D}, {"--value-dim", w.Dv}})
        if (block < multiple || block % multiple != 0 || width % block != 0)
          throw Error("bench: " + flag + ": want a multiple of " + std::to_string(multiple) + " dividing " +
                      std::string(name) + " (" + std::to_string(width) + "), got " + std::to_string(block));
      return block;
    };
    w.q8_block = block_of(q8, q8_block_given, "q8", o.q8_block, 16);
    w.q4_block = block_of(q4, q4_block_given, "q4", o.q4_block, 32);
    if (o.bf16_weights && w.dtype != Dtype::bf16) throw Error("bench: --bf16-weights needs --dtype bf16");
    w.bf16_weights = o.bf16_weights;
    if (w.Hq % w.Hkv != 0)
      throw Error("bench: --heads (" + std::to_string(w.Hq) + ") must be a multiple of --kv-heads (" +
                  std::to_string(w.Hkv) + ")");
    w.allocate(o.seed);
    std::fprintf(stderr, "bench: %s%s, %s%s, %d threads, %s: checking, then timing ...\n", w.shape_label().c_str(),
                 w.causal ? " causal" : "", w.storage_name().c_str(), w.bf16_weights ? " (bf16 weights)" : "", threads,
                 active_simd_target().c_str());
    const AttentionRun r = bench_attention(w, o, threads);
    if (o.json) std::printf("%s\n", attention_json(w, r, threads).dump().c_str());
    if (!r.check.ok) {
      char detail[96];
      std::snprintf(detail, sizeof detail, " (|err| %.3g > tol %.3g, seed %u)", r.check.max_err, r.check.tol, o.seed);
      throw Error("bench: output differs from the float64 reference: " + r.check.worst + detail);
    }
    if (!o.json) {
      std::printf("%-36s %-6s %-5s %7s %-10s %10s %9s %6s %8s %7s %9s %9s  %s\n", "shape", "causal", "dtype", "threads",
                  "target", "median ms", "min ms", "reps", "GFLOP/s", "GB/s", "peak MiB", "extra MiB", "check");
      char check[96];
      std::snprintf(check, sizeof check, "ok, %s, max err %.1e", r.check.mode.c_str(), r.check.max_err);
      std::printf("%-36s %-6s %-5s %7d %-10s %10s %9s %6d %8.1f %7.1f %9.1f %9.1f  %s\n", w.shape_label().c_str(),
                  w.causal ? "yes" : "no", w.storage_name().c_str(), threads, active_simd_target().c_str(),
                  format_ms(r.timing.median_ms).c_str(), format_ms(r.timing.min_ms).c_str(), r.timing.reps, r.gflops,
                  r.gbs, r.peak_rss_mib, r.extra_mib, o.no_check ? "skipped" : check);
    }
  }
  const bool all = o.ceilings_only && !o.sgemm && !o.copy && !o.fma;
  print_ceilings(o, o.sgemm || all, o.copy || all, o.fma || all, threads);
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
      cmd->add_option("--batch", o->batch, "B: batch size")->check(at_least(1))->capture_default_str(),
      cmd->add_option("--heads", o->heads, "Hq: query heads")->check(at_least(1))->capture_default_str(),
      cmd->add_option("--kv-heads", o->kv_heads, "Hkv: key/value heads (default: --heads)")->check(at_least(1)),
      cmd->add_option("--q-len", o->q_len, "Nq: query rows")->check(at_least(1))->capture_default_str(),
      cmd->add_option("--kv-len", o->kv_len, "Nk: keys (default: --q-len)")->check(at_least(1)),
      cmd->add_option("--head-dim", o->head_dim, "D: query/key width")->check(at_least(1))->capture_default_str(),
      cmd->add_option("--value-dim", o->value_dim, "Dv: value width (default: --head-dim)")->check(at_least(1)),
      cmd->add_flag("--causal", o->causal, "causal mask (aligned bottom-right)"),
  };
  cmd->add_option("--threads", o->threads, std::string(threads_help) + ", for the engine and the ceilings")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "timed calls, at least")->check(at_least(1))->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed calls before timing")->check(at_least(0))->capture_default_str();
  cmd->add_option("--min-time", o->min_time, "seconds of timed calls, at least")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--target", o->target,
                  "pin the SIMD target (one of those --quick lists, any case, e.g. AVX2 or avx2; AVX512 means AVX3)");
  cmd->add_option("--dtype", o->dtype,
                  "storage of q, k, v: f32, bf16 or f16 (inputs rounded to it; computed in float32, out float32); "
                  "q8: k and v 8-bit with a float scale per block (attention_q8kv), q float32; q4: the same in "
                  "4 bits (attention_q4kv)")
      ->type_name("f32|bf16|f16|q8|q4")
      ->capture_default_str();
  CLI::Option* q8_block = cmd->add_option("--q8-block", o->q8_block,
                                          "with --dtype q8: values per scale, a multiple of 16 dividing --head-dim "
                                          "and --value-dim (32: ggml's Q8_0 blocks; --head-dim: one scale per row)")
                              ->capture_default_str();
  CLI::Option* q4_block = cmd->add_option("--q4-block", o->q4_block,
                                          "with --dtype q4: values per scale, a multiple of 32 dividing --head-dim "
                                          "and --value-dim")
                              ->capture_default_str();
  cmd->add_flag("--bf16-weights", o->bf16_weights,
                "with --dtype bf16: round the softmax weights to bf16 for P·V (VDPBF16PS on AVX512_BF16; each weight "
                "moves by up to 2^-8, the check's tolerance says so)");
  cmd->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line on stdout instead of tables");
  cmd->add_flag("--no-check", o->no_check, "skip the check against the reference (for quick profiling)");
  cmd->add_flag("--sgemm", o->sgemm, "also time OpenBLAS cblas_sgemm (the fp32 compute ceiling)");
  cmd->add_option("--sgemm-n", o->sgemm_n, "sgemm matrix size")->check(at_least(1))->capture_default_str();
  cmd->add_flag("--copy", o->copy, "also measure memory copy bandwidth (the decode ceiling)");
  cmd->add_option("--copy-mib", o->copy_mib, "copy buffer size, MiB")->check(at_least(1))->capture_default_str();
  cmd->add_flag("--fma-peak", o->fma, "also measure the fp32 FMA peak (independent FMA chains in registers)");
  cmd->add_flag("--ceilings-only", o->ceilings_only,
                "measure only the ceilings (those of --sgemm/--copy/--fma-peak; all three when none is given)");
  CLI::Option* quick = cmd->add_flag("--quick", o->quick,
                                     "self-check every SIMD target against the float64 reference on a "
                                     "dozen small cases (float32 and bf16 inputs), then time a few "
                                     "shapes; exit 1 on any FAIL");
  for (CLI::Option* f : shape_flags) quick->excludes(f);
  quick->excludes("--ceilings-only");

  cmd->callback([o, q8_block, q4_block] {
    if (!o->target.empty()) set_simd_target(o->target);  // throws Error naming the choices
    if (o->quick)
      run_quick(*o);
    else
      run_single(*o, q8_block->count() > 0, q4_block->count() > 0);
    std::fflush(stdout);
  });
}

}  // namespace jomoim::cli
