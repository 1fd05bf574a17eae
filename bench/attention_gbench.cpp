// attention_gbench.cpp — Google Benchmark program for jomoim::attention on the shapes of the
// benchmark table (BENCHMARKS.md): the forward pass, fp32, paper layout, every core. The shapes
// and the check problem are cases of the shared table (bench/cases/attention_cases.hpp: kGbench,
// kGbenchBackward, kGbenchCheck).
//
//   build-bench/attention_gbench                          all shapes
//   build-bench/attention_gbench --benchmark_filter=decode --target=AVX2
//   build-bench/attention_gbench --benchmark_filter=decode.*/B:64/ --decode-batch=64   (K/V from memory)
//   build-bench/attention_gbench --benchmark_filter=decode_q8 --q8-block=128   (one q8 scale per row)
//
// Before any timing, main() checks the engine against the float64 reference on a small GQA
// causal problem (Nq != Nk) and exits 1 if they disagree: a fast wrong kernel is not a result. Counters,
// shown per second: FLOP = jomoim::attention_flops (2*B*Hq*Nq*Nk*(D+Dv), halved for causal),
// bytes = q, k, v read once plus out written once. Times are wall-clock (UseRealTime), since the
// engine runs on several threads. Not a test: nothing asserts a time.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/simd.hpp"

namespace {

using jomoim::ConstTensor4;
using jomoim::Tensor4;
using Index = std::int64_t;
namespace cases = jomoim::cases;

struct Inputs {
  std::vector<float> q, k, v, out;
  Index B, Hq, Hkv, Nq, Nk, D;

  Inputs(Index B_, Index Hq_, Index Hkv_, Index Nq_, Index Nk_, Index D_)
      : B(B_), Hq(Hq_), Hkv(Hkv_), Nq(Nq_), Nk(Nk_), D(D_) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto [x, n] : {std::pair{&q, B * Hq * Nq * D}, {&k, B * Hkv * Nk * D}, {&v, B * Hkv * Nk * D}}) {
      x->resize(std::size_t(n));
      for (float& e : *x) e = uni(rng);
    }
    out.assign(std::size_t(B * Hq * Nq * D), std::numeric_limits<float>::quiet_NaN());
  }
  ConstTensor4 qv() const { return ConstTensor4::contiguous(q.data(), {B, Hq, Nq, D}); }
  ConstTensor4 kv() const { return ConstTensor4::contiguous(k.data(), {B, Hkv, Nk, D}); }
  ConstTensor4 vv() const { return ConstTensor4::contiguous(v.data(), {B, Hkv, Nk, D}); }
  Tensor4 outv() { return Tensor4::contiguous(out.data(), {B, Hq, Nq, D}); }
};

// The inputs of the benchmark's shape (Args B, Hq, Hkv, Nq, Nk, D), kept from one repetition,
// and one benchmark, to the next while the shape stays: a fill per repetition cost seconds at
// large batches, and on a VM the calls soon after a fill of fresh memory read it slowly
// (BENCHMARKS.md, "q8 decode timed by jomoim bench": 12-18 % from memory at B 16). One shape
// at a time: the old inputs go before the new ones are made, with their q8 (made by the q8
// benchmark for its block, once per fill).
struct KeptInputs {
  std::unique_ptr<Inputs> in;
  Index q8_block = 0;  // 0: k8 and v8 not made
  jomoim::Q8Buffer k8, v8;
};
KeptInputs& kept_inputs(const benchmark::State& state) {
  static KeptInputs kept;
  const Inputs* in = kept.in.get();
  if (!in || in->B != state.range(0) || in->Hq != state.range(1) || in->Hkv != state.range(2) ||
      in->Nq != state.range(3) || in->Nk != state.range(4) || in->D != state.range(5)) {
    kept = {};
    kept.in = std::make_unique<Inputs>(state.range(0), state.range(1), state.range(2), state.range(3), state.range(4),
                                       state.range(5));
  }
  return kept;
}

// Args: B, Hq, Hkv, Nq, Nk, D, causal.
void BM_attention(benchmark::State& state) {
  Inputs& in = *kept_inputs(state).in;
  jomoim::AttentionOptions options;
  options.causal = state.range(6) != 0;
  const jomoim::AttentionShape shape = jomoim::check_attention_args(in.qv(), in.kv(), in.vv(), nullptr, options);
  for (auto _ : state) {
    jomoim::attention(in.qv(), in.kv(), in.vv(), in.outv(), options);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP"] =
      benchmark::Counter(jomoim::attention_flops(shape, options.causal), benchmark::Counter::kIsIterationInvariantRate);
  const double bytes = 4.0 * double(in.q.size() + in.k.size() + in.v.size() + in.out.size());
  state.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(jomoim::active_simd_target());
}

// A case as the Args of a run, (B, Hq, Hkv, Nq, Nk, D, causal): the names of the runs. The cases
// of the benchmarks have Dv = D (Inputs makes v as wide as k).
std::vector<std::int64_t> args_of(const cases::Case& c) {
  return {c.n.B, c.n.Hq, c.n.Hkv, c.n.Nq, c.n.Nk, c.n.D, c.causal ? 1 : 0};
}

// The shapes of the benchmark table, each without and with the causal mask (Nq > 1).
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "Hq", "Hkv", "Nq", "Nk", "D", "causal"});
  for (const cases::Case& c : cases::used_by(cases::kGbench))
    if (c.n.Nq > 1) b->Args(args_of(c));
}
BENCHMARK(BM_attention)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// Decode: one new query row against a 4096-entry KV cache, multi-head and grouped-query.
void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "Hq", "Hkv", "Nq", "Nk", "D", "causal"});
  for (const cases::Case& c : cases::used_by(cases::kGbench))
    if (c.n.Nq == 1) b->Args(args_of(c));
}
BENCHMARK(BM_attention)
    ->Name("BM_attention_decode")
    ->Apply(decode_shapes)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The q8 block (--q8-block=N; 32, ggml's Q8_0 size, unless given; N = D is the per-token-per-head
// layout).
Index g_q8_block = 32;

// Decode with 8-bit keys and values (attention_q8kv, q8 blocks of g_q8_block): the same shapes,
// the K/V quantized once outside the timing. bytes counts what is read: q, the q8 values and
// scales, out.
void BM_attention_decode_q8(benchmark::State& state) {
  KeptInputs& kept = kept_inputs(state);
  Inputs& in = *kept.in;
  jomoim::AttentionOptions options;
  options.causal = state.range(6) != 0;
  const jomoim::AttentionShape shape = jomoim::check_attention_args(in.qv(), in.kv(), in.vv(), nullptr, options);
  const Index block = std::min(g_q8_block, in.D);  // a block wider than the row: one block per row
  if (in.D % block != 0) {
    state.SkipWithError("--q8-block does not divide D");
    return;
  }
  if (kept.q8_block != block) {  // quantized once per fill (and block), kept with the inputs
    kept.k8 = {}, kept.v8 = {};
    kept.k8 = jomoim::quantize_q8(in.kv(), block), kept.v8 = jomoim::quantize_q8(in.vv(), block);
    kept.q8_block = block;
  }
  const jomoim::Q8Buffer &k8 = kept.k8, &v8 = kept.v8;
  for (auto _ : state) {
    jomoim::attention_q8kv(in.qv(), k8.view(), v8.view(), in.outv(), options);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP"] =
      benchmark::Counter(jomoim::attention_flops(shape, options.causal), benchmark::Counter::kIsIterationInvariantRate);
  const double bytes = 4.0 * double(in.q.size() + in.out.size()) + double(k8.values.size() + v8.values.size()) +
                       4.0 * double(k8.scales.size() + v8.scales.size());
  state.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(jomoim::active_simd_target());
}
BENCHMARK(BM_attention_decode_q8)->Apply(decode_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Backward: dQ, dK, dV of one forward (out and lse computed once, outside the timing). FLOP
// counts the forward's convention (attention_flops) so the rate compares with BM_attention's:
// the backward does about 3.5x that work (attention.hpp), so equal time means 3.5x the rate.
void BM_attention_backward(benchmark::State& state) {
  Inputs in(state.range(0), state.range(1), state.range(2), state.range(3), state.range(4), state.range(5));
  jomoim::AttentionOptions options;
  options.causal = state.range(6) != 0;
  std::vector<float> lse(std::size_t(in.B * in.Hq * in.Nq)), dout(in.out.size(), 0.5f);
  std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  options.lse = jomoim::Tensor3::contiguous(lse.data(), {in.B, in.Hq, in.Nq});
  jomoim::attention(in.qv(), in.kv(), in.vv(), in.outv(), options);
  options.lse.reset();
  jomoim::AttentionGradients g;
  g.dq = Tensor4::contiguous(dq.data(), {in.B, in.Hq, in.Nq, in.D});
  g.dk = Tensor4::contiguous(dk.data(), {in.B, in.Hkv, in.Nk, in.D});
  g.dv = Tensor4::contiguous(dv.data(), {in.B, in.Hkv, in.Nk, in.D});
  const ConstTensor4 outv = in.outv(), doutv = ConstTensor4::contiguous(dout.data(), {in.B, in.Hq, in.Nq, in.D});
  const jomoim::ConstTensor3 lsev = jomoim::ConstTensor3::contiguous(lse.data(), {in.B, in.Hq, in.Nq});
  const jomoim::AttentionShape shape = jomoim::check_attention_args(in.qv(), in.kv(), in.vv(), nullptr, options);
  for (auto _ : state) {
    jomoim::attention_backward(in.qv(), in.kv(), in.vv(), outv, lsev, doutv, g, options);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP"] =
      benchmark::Counter(jomoim::attention_flops(shape, options.causal), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(jomoim::active_simd_target());
}
void backward_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "Hq", "Hkv", "Nq", "Nk", "D", "causal"});
  for (const cases::Case& c : cases::used_by(cases::kGbenchBackward)) b->Args(args_of(c));
}
BENCHMARK(BM_attention_backward)->Apply(backward_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// The engine against the float64 reference on the case marked kGbenchCheck (a small grouped-query
// causal problem with Nq != Nk). Tolerance: float32's worst-case rounding of this computation
// (see apps/jomoim/bench/check.cpp), eps * (2*D*S + 2*Nk + 16) with |score| <= S = D * scale for
// inputs in [-1, 1).
bool engine_matches_reference() {
  const cases::Case& c = cases::used_by(cases::kGbenchCheck).at(0);
  Inputs in(c.n.B, c.n.Hq, c.n.Hkv, c.n.Nq, c.n.Nk, c.n.D);
  jomoim::AttentionOptions options;
  options.causal = c.causal;
  jomoim::attention(in.qv(), in.kv(), in.vv(), in.outv(), options);
  const jomoim::ReferenceResult ref = jomoim::attention_reference(in.qv(), in.kv(), in.vv(), options);
  const double S = double(in.D) / std::sqrt(double(in.D));
  const double tol = std::numeric_limits<float>::epsilon() * (2.0 * double(in.D) * S + 2.0 * double(in.Nk) + 16);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < in.out.size(); ++i) {
    double err = std::fabs(double(in.out[i]) - ref.out[i]);
    if (std::isnan(err)) err = INFINITY;  // an unwritten (NaN-filled) element fails
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  if (worst <= tol) return true;
  std::fprintf(stderr,
               "attention_gbench: engine differs from the reference: out flat index %zu: got %.9g, "
               "expected %.9g (|err| %.3g > tol %.3g, seed 42)\n",
               at, double(in.out[at]), ref.out[at], worst, tol);
  return false;
}

// --decode-batch=B: the decode runs again at batch B, their K and V B times larger. A model's
// decode reads each layer's cache once per token, so its K and V come from memory; one cache
// read over and over by a benchmark loop stays in the last-level cache where that holds it (the
// 4096-key float32 K/V of 8 heads is 33.5 MiB). At a batch whose K/V is several times the L3 the
// run measures what a model's decode meets.
void register_decode_batch(Index batch) {
  for (const cases::Case& c : cases::used_by(cases::kGbench)) {
    if (c.n.Nq != 1) continue;
    std::vector<std::int64_t> args = args_of(c);
    args[0] = batch;
    for (auto [name, fn] :
         {std::pair{"BM_attention_decode", &BM_attention}, {"BM_attention_decode_q8", &BM_attention_decode_q8}})
      benchmark::RegisterBenchmark(name, fn)
          ->ArgNames({"B", "Hq", "Hkv", "Nq", "Nk", "D", "causal"})
          ->Args(args)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Our flags, --target=NAME (pins the SIMD target), --decode-batch=B and --q8-block=N (above);
  // benchmark::Initialize leaves them in argv.
  Index decode_batch = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--target=", 0) == 0) {
      try {
        jomoim::set_simd_target(arg.substr(9));
      } catch (const jomoim::Error& e) {
        std::fprintf(stderr, "attention_gbench: %s\n", e.what());
        return 1;
      }
    } else if (arg.rfind("--decode-batch=", 0) == 0) {
      char* end = nullptr;
      const long b = std::strtol(arg.c_str() + 15, &end, 10);
      if (end == arg.c_str() + 15 || *end != '\0' || b < 1 || b > 4096) {
        std::fprintf(stderr, "attention_gbench: --decode-batch: want an integer in [1, 4096], got '%s'\n",
                     arg.c_str() + 15);
        return 1;
      }
      decode_batch = b;
    } else if (arg.rfind("--q8-block=", 0) == 0) {
      char* end = nullptr;
      const long b = std::strtol(arg.c_str() + 11, &end, 10);
      if (end == arg.c_str() + 11 || *end != '\0' || b < 16 || b % 16 != 0 || b > 4096) {
        std::fprintf(stderr, "attention_gbench: --q8-block: want a multiple of 16 in [16, 4096], got '%s'\n",
                     arg.c_str() + 11);
        return 1;
      }
      g_q8_block = b;
    } else {
      continue;  // benchmark's own, or unknown: left for ReportUnrecognizedArguments
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];  // ours: taken out of argv
    --argc, --i;
  }
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (decode_batch > 1) register_decode_batch(decode_batch);
  if (!engine_matches_reference()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
