// cmd_attend.cpp — `jomoim attend`: one attention call on NumPy .npy files, so that any tool
// can check the engine against the contracts in docs/design.md ("The command line").
//
// A thin front end: it reads the files, checks what only it knows (ranks, paths, the float32
// range of --scale), hands views to jomoim::attention — which validates everything else and
// throws jomoim::Error with a one-line message — and writes the outputs only after the call
// succeeded. Any refusal therefore leaves the file system as it was.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "attend_dist.hpp"
#include "commands.hpp"
#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/formats/npy.hpp"

namespace jomoim::cli {
namespace {

namespace fs = std::filesystem;

// The subcommand's options; their names, defaults and help are in add_attend_command.
struct AttendOptions {
  std::string q, k, v, bias;    // input files
  std::string out, lse, probs;  // output files (lse, probs optional)
  bool causal = false;
  double scale = 0;  // used only when --scale is given
  bool has_scale = false;
  std::string notation = "paper";
  int threads = 0;
  std::vector<std::int64_t> key_lengths;
  bool distributed = false;   // ring attention over MPI (cmd_attend_dist.cpp)
  std::string dtype = "f32";  // of Q, K, V: f32 (the contract), f16, bf16, or auto (from the files)
  bool bf16_weights = false;  // AttentionOptions::bf16_weights (bf16 inputs only)
  bool kv_q8 = false;         // K and V quantized to q8 (jomoim/engine/quant.hpp), attention_q8kv
  std::int64_t q8_block = 32;
};

// An option and the path given to it, as one name for messages: "--q q.npy".
struct PathArg {
  const char* option;
  const std::string* path;
  std::string label() const { return std::string(option) + " " + *path; }
};

// Reads an input file; errors name the option as well as the file.
NpyArray load(const PathArg& arg) {
  try {
    return read_npy(*arg.path);
  } catch (const Error& e) {
    throw Error(std::string(arg.option) + " " + e.what());
  }
}

NpyAnyArray load_any(const PathArg& arg) {
  try {
    return read_npy_any(*arg.path);
  } catch (const Error& e) {
    throw Error(std::string(arg.option) + " " + e.what());
  }
}

// Q, K and V must be rank 4; `layout` names the dimensions in the chosen notation.
std::array<std::int64_t, 4> rank4_shape(const PathArg& arg, const std::vector<std::int64_t>& shape,
                                        const std::string& layout) {
  if (shape.size() != 4)
    throw Error(arg.label() + ": expected a rank-4 array " + layout + ", got shape " + shape_string(shape) + " (rank " +
                std::to_string(shape.size()) + ")");
  return {shape[0], shape[1], shape[2], shape[3]};
}

// The data type of an input file under --dtype (auto, f32, f16, bf16): '<f4' is f32, '<f2' is
// f16, '<u2' holds bf16 bit patterns (NumPy has no bfloat16) and is read only with --dtype bf16.
Dtype input_dtype(const PathArg& arg, const std::string& descr, const std::string& wanted) {
  const Dtype file = descr == "<f4" ? Dtype::f32 : descr == "<f2" ? Dtype::f16 : Dtype::bf16;
  if (file == Dtype::bf16 && wanted != "bf16")
    throw Error(arg.label() + ": data type '<u2' (uint16) is read only as bfloat16 bits, with --dtype bf16");
  if (wanted != "auto" && wanted != dtype_name(file)) {
    const char* expect = wanted == "f32" ? "'<f4'" : wanted == "f16" ? "'<f2'" : "'<u2' (bfloat16 bits)";
    throw Error(arg.label() + ": data type '" + descr + "' does not match --dtype " + wanted + ", which expects " +
                expect + (wanted == "f32" ? " (float32 unless --dtype f16, bf16 or auto says otherwise)" : ""));
  }
  return file;
}

// The bias as a rank-4 view under NumPy's broadcasting rules: its shape is aligned to the
// right of [B, Hq, Nq, Nk] and missing leading dimensions count as 1. attention() then checks
// that each dimension is 1 or full.
ConstTensor4 bias_view(const PathArg& arg, const NpyArray& a) {
  if (a.shape.size() > 4)
    throw Error(arg.label() + ": expected rank 0 to 4 (broadcastable to [B, Hq, Nq, Nk]), got shape " +
                shape_string(a.shape) + " (rank " + std::to_string(a.shape.size()) + ")");
  std::array<std::int64_t, 4> shape = {1, 1, 1, 1};
  std::copy(a.shape.begin(), a.shape.end(), shape.end() - a.shape.size());
  return ConstTensor4::contiguous(a.data.data(), shape);
}

// An output buffer of the given shape, or an Error naming the option if it cannot exist.
std::vector<float> allocate(const char* option, std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > std::int64_t(PTRDIFF_MAX / sizeof(float)))
      throw Error(std::string(option) + ": an output of shape " + shape_string(shape) + " is too large");
  try {
    return std::vector<float>(std::size_t(n));
  } catch (const std::bad_alloc&) {
    throw Error(std::string(option) + ": not enough memory for an output of shape " + shape_string(shape) + " (" +
                std::to_string(n * 4) + " bytes)");
  }
}

// True when two paths name the same file: equal after resolving ".", ".." and symbolic links,
// or the same inode (hard links) when both exist.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  if (fs::exists(a, ec1) && fs::exists(b, ec2)) {
    std::error_code ec;
    if (fs::equivalent(a, b, ec)) return true;
  }
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// Output paths: each different from every input and from each other (or a later write would
// clobber an earlier file), in an existing directory, and not themselves a directory. Checked
// before any work, so a long computation is not wasted on a path that cannot be written.
void check_output_paths(const std::vector<PathArg>& inputs, const std::vector<PathArg>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const PathArg& o = outputs[i];
    for (const PathArg& in : inputs)
      if (same_file(*o.path, *in.path))
        throw Error(o.label() + ": is also the " + in.option + " input; write the output to another file");
    for (std::size_t j = 0; j < i; ++j)
      if (same_file(*o.path, *outputs[j].path))
        throw Error(o.label() + ": is also the " + outputs[j].option + " output; give each output its own file");
    const fs::path p(*o.path);
    std::error_code ec;
    if (!p.has_filename() || fs::is_directory(p, ec)) throw Error(o.label() + ": is a directory, not a file name");
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec)) throw Error(o.label() + ": the directory '" + dir.string() + "' does not exist");
  }
}

void run_attend(const AttendOptions& o) {
  AttentionOptions opts;
  opts.notation = parse_notation(o.notation);
  const bool col = opts.notation == Notation::col3b1b;
  opts.causal = o.causal;
  resolve_threads(o.threads, "--threads");  // refuses negative counts
  opts.threads = o.threads;
  if (o.has_scale) {
    // Checked here, not only by attention(): converting a double beyond float's range to
    // float is undefined behaviour.
    if (!std::isfinite(o.scale) || std::fabs(o.scale) > std::numeric_limits<float>::max()) {
      char given[32];
      std::snprintf(given, sizeof given, "%g", o.scale);
      throw Error(std::string("--scale: expected a finite float32 number, got ") + given);
    }
    opts.scale = float(o.scale);
  }
  opts.key_lengths = o.key_lengths;

  const PathArg q_arg{"--q", &o.q}, k_arg{"--k", &o.k}, v_arg{"--v", &o.v}, bias_arg{"--bias", &o.bias};
  const PathArg out_arg{"--out", &o.out}, lse_arg{"--lse", &o.lse}, probs_arg{"--probs", &o.probs};
  std::vector<PathArg> inputs = {q_arg, k_arg, v_arg};
  if (!o.bias.empty()) inputs.push_back(bias_arg);
  std::vector<PathArg> outputs = {out_arg};
  if (!o.lse.empty()) outputs.push_back(lse_arg);
  if (!o.probs.empty()) outputs.push_back(probs_arg);
  check_output_paths(inputs, outputs);

  const std::string in_notation = col ? " in 3b1b notation" : "";
  if (o.dtype != "auto" && o.dtype != "f32" && o.dtype != "f16" && o.dtype != "bf16")
    throw Error("--dtype: expected auto, f32, f16 or bf16, got '" + o.dtype + "'");
  const NpyAnyArray q = load_any(q_arg), k = load_any(k_arg), v = load_any(v_arg);
  const std::array<std::int64_t, 4> qs =
      rank4_shape(q_arg, q.shape, (col ? "[B, Hq, D, Nq]" : "[B, Hq, Nq, D]") + in_notation);
  const std::array<std::int64_t, 4> ks =
      rank4_shape(k_arg, k.shape, (col ? "[B, Hkv, D, Nk]" : "[B, Hkv, Nk, D]") + in_notation);
  const std::array<std::int64_t, 4> vs =
      rank4_shape(v_arg, v.shape, (col ? "[B, Hkv, Dv, Nk]" : "[B, Hkv, Nk, Dv]") + in_notation);
  // One data type for Q, K and V (float32, float16 or bfloat16).
  const Dtype dtype = input_dtype(q_arg, q.descr, o.dtype);
  for (const auto& [arg, a] : {std::pair{k_arg, &k}, {v_arg, &v}})
    if (input_dtype(arg, a->descr, o.dtype) != dtype)
      throw Error(arg.label() + ": data type '" + a->descr + "', but --q is '" + q.descr +
                  "' (Q, K and V must share one data type)");
  if (o.bf16_weights && dtype != Dtype::bf16)
    throw Error(std::string("--bf16-weights: needs bfloat16 inputs (--dtype bf16); these are ") + dtype_name(dtype));
  opts.bf16_weights = o.bf16_weights;
  if (o.kv_q8 && dtype != Dtype::f32)
    throw Error(std::string("--kv-q8: quantizes float32 K and V files; these are ") + dtype_name(dtype));
  if (o.kv_q8 && !o.probs.empty())
    throw Error("--kv-q8: attention on q8 keys and values writes no --probs (the weights are never stored)");
  const bool half = dtype != Dtype::f32;
  const ConstTensor4 qv = ConstTensor4::contiguous(q.f32.data(), qs), kv = ConstTensor4::contiguous(k.f32.data(), ks),
                     vv = ConstTensor4::contiguous(v.f32.data(), vs);
  using Bits4 = TensorView<const std::uint16_t, 4>;
  const ConstTensor4x16 qh{Bits4::contiguous(q.u16.data(), qs), dtype}, kh{Bits4::contiguous(k.u16.data(), ks), dtype},
      vh{Bits4::contiguous(v.u16.data(), vs), dtype};
  NpyArray bias;
  if (!o.bias.empty()) {
    bias = load(bias_arg);
    opts.bias = bias_view(bias_arg, bias);
  }

  // The shapes of every output; check_attention_args refuses inconsistent inputs first, so
  // the dimensions read below are the validated ones.
  const AttentionShape s =
      half ? check_attention_args(qh, kh, vh, nullptr, opts) : check_attention_args(qv, kv, vv, nullptr, opts);
  const std::vector<std::int64_t> out_shape =
      col ? std::vector<std::int64_t>{s.B, s.Hq, s.Dv, s.Nq} : std::vector<std::int64_t>{s.B, s.Hq, s.Nq, s.Dv};
  const std::vector<std::int64_t> lse_shape = {s.B, s.Hq, s.Nq};
  const std::vector<std::int64_t> probs_shape = {s.B, s.Hq, s.Nq, s.Nk};
  std::vector<float> out = allocate("--out", out_shape), lse, probs;
  if (!o.lse.empty()) {
    lse = allocate("--lse", lse_shape);
    opts.lse = Tensor3::contiguous(lse.data(), {s.B, s.Hq, s.Nq});
  }
  if (!o.probs.empty()) {
    probs = allocate("--probs", probs_shape);
    opts.probs = Tensor4::contiguous(probs.data(), {s.B, s.Hq, s.Nq, s.Nk});
  }
  const Tensor4 out_view = Tensor4::contiguous(out.data(), {out_shape[0], out_shape[1], out_shape[2], out_shape[3]});
  if (o.kv_q8) {
    // K and V in the q8 format's [B, Hkv, N, D] rows (a 3b1b file read through transposed
    // strides), quantized here: 1.125 bytes a value at block 32, next to the float32 files.
    auto quantize = [&](const PathArg& arg, const ConstTensor4& t) {
      try {
        return quantize_q8(col ? t.transposed(2, 3) : t, o.q8_block);
      } catch (const Error& e) {
        throw Error(arg.label() + ": " + e.what());
      }
    };
    const Q8Buffer k8 = quantize(k_arg, kv), v8 = quantize(v_arg, vv);
    attention_q8kv(qv, k8.view(), v8.view(), out_view, opts);
  } else if (half) {
    attention(qh, kh, vh, out_view, opts);
  } else {
    attention(qv, kv, vv, out_view, opts);
  }

  // All or nothing: each file is written atomically, and if a later one fails the earlier
  // ones of this run are removed again.
  const std::vector<std::tuple<PathArg, const std::vector<std::int64_t>*, const std::vector<float>*>> files = {
      {out_arg, &out_shape, &out}, {lse_arg, &lse_shape, &lse}, {probs_arg, &probs_shape, &probs}};
  std::vector<std::string> written;
  for (const auto& [arg, shape, data] : files) {
    if (arg.path->empty()) continue;
    try {
      write_npy(*arg.path, *shape, data->data());
    } catch (const Error& e) {
      for (const std::string& p : written) {
        std::error_code ec;
        fs::remove(p, ec);
      }
      throw Error(std::string(arg.option) + " " + e.what());
    }
    written.push_back(*arg.path);
  }
}

}  // namespace

void add_attend_command(CLI::App& app) {
  auto o = std::make_shared<AttendOptions>();
  // An empty path would otherwise read as "option not given" for the optional files.
  const CLI::Validator file_name(
      [](std::string& s) { return s.empty() ? std::string("expected a file name, got ''") : std::string(); }, "");
  CLI::App* cmd = app.add_subcommand(
      "attend", "Exact scaled dot-product attention on .npy files: OUT = softmax(Q K^T * scale + BIAS, masked) V");
  cmd->add_option("--q", o->q, "queries, .npy (see --dtype): [B, Hq, Nq, D] ([B, Hq, D, Nq] in 3b1b notation)")
      ->required()
      ->type_name("Q.npy")
      ->check(file_name);
  cmd->add_option("--k", o->k, "keys, .npy (see --dtype): [B, Hkv, Nk, D] ([B, Hkv, D, Nk] in 3b1b notation)")
      ->required()
      ->type_name("K.npy")
      ->check(file_name);
  cmd->add_option("--v", o->v, "values, .npy (see --dtype): [B, Hkv, Nk, Dv] ([B, Hkv, Dv, Nk] in 3b1b notation)")
      ->required()
      ->type_name("V.npy")
      ->check(file_name);
  cmd->add_flag("--causal", o->causal,
                "causal mask aligned bottom-right: query i sees key j iff j <= i + (Nk - Nq) "
                "(with --key-lengths, Nk is that batch's length)");
  CLI::Option* scale =
      cmd->add_option("--scale", o->scale, "multiplies Q K^T before the softmax; finite (default 1/sqrt(D))")
          ->type_name("S");
  cmd->add_option("--bias", o->bias,
                  "additive float32 bias broadcastable (NumPy rules, rank 0 to 4) to [B, Hq, Nq, Nk] in "
                  "either notation; -inf masks a key")
      ->type_name("BIAS.npy")
      ->check(file_name);
  cmd->add_option("--notation", o->notation,
                  "paper: rows are tokens ([B, H, N, D]); 3b1b: columns are tokens ([B, H, D, N]) for Q, K, V "
                  "and OUT (BIAS, LSE, PROBS keep the paper layout)")
      ->type_name("paper|3b1b")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output, float32 .npy: [B, Hq, Nq, Dv] ([B, Hq, Dv, Nq] in 3b1b notation)")
      ->required()
      ->type_name("OUT.npy")
      ->check(file_name);
  cmd->add_option("--lse", o->lse,
                  "also write each row's natural-log log-sum-exp of its scaled, biased scores: [B, Hq, Nq] "
                  "(-inf where every key is masked)")
      ->type_name("LSE.npy")
      ->check(file_name);
  cmd->add_option("--probs", o->probs,
                  "also write the softmax weights: [B, Hq, Nq, Nk] (the full score matrix: B*Hq*Nq*Nk floats)")
      ->type_name("P.npy")
      ->check(file_name);
  cmd->add_option("--threads", o->threads, threads_help)->type_name("N")->capture_default_str();
  cmd->add_option("--dtype", o->dtype,
                  "storage of Q, K, V (one for all three): f32 ('<f4'), f16 ('<f2'), auto (the files' own, '<f4' or "
                  "'<f2'); "
                  "bf16 reads '<u2' files as bfloat16 bit patterns (NumPy has no bfloat16). Computed in float32; "
                  "OUT, LSE, PROBS are float32")
      ->type_name("auto|f32|f16|bf16")
      ->capture_default_str();
  cmd->add_flag("--bf16-weights", o->bf16_weights,
                "with --dtype bf16: round the softmax weights to bf16 for P·V, as PyTorch's bf16 kernels do "
                "(VDPBF16PS on AVX512_BF16; each weight moves by at most 2^-8 of itself, so OUT by at most 2^-8 "
                "sum_j p_j |v_j|; LSE and PROBS stay float32)");
  cmd->add_flag("--kv-q8", o->kv_q8,
                "quantize the float32 K and V to jomoim's 8-bit format (blocks of --q8-block values along D, one "
                "float scale each, |k - d q| <= d/2) and attend on them (attention_q8kv: the float64 formula on the "
                "dequantized K and V is its oracle); no --probs");
  CLI::Option* q8_block =
      cmd->add_option("--q8-block", o->q8_block, "with --kv-q8: values per scale, a multiple of 16 dividing D and Dv")
          ->type_name("N")
          ->capture_default_str();
  cmd->add_option("--key-lengths", o->key_lengths,
                  "valid keys per batch entry, B comma-separated counts in 0..Nk; keys j >= L_b of batch b "
                  "are masked (padded sequences)")
      ->type_name("L0,L1,...")
      ->delimiter(',');
  cmd->add_flag("--distributed", o->distributed,
                "ring attention over MPI: run as `mpirun -np P jomoim attend --distributed ...`; each rank reads "
                "its rows of Q, K, V and writes its rows of OUT/LSE (paper notation; no --probs, --bias)");
  cmd->footer(
      "Q and K are not interchangeable: the softmax runs over the keys of each query.\n"
      "Hq must be a multiple of Hkv: query head h reads key/value head h / (Hq / Hkv) (grouped-query).\n"
      "A query row whose keys are all masked gives zeros (and log-sum-exp -inf).\n"
      "Files are C order; Q, K, V float32, float16 or bfloat16 bits (--dtype), the rest float32. Bad input is refused "
      "with one line on stderr and a non-zero exit;\n"
      "outputs are written only when everything succeeded, each atomically.");
  cmd->callback([o, scale, q8_block] {
    o->has_scale = scale->count() > 0;
    if (q8_block->count() > 0 && !o->kv_q8) throw Error("--q8-block: only with --kv-q8");
    if (o->distributed) {
      if (o->dtype != "auto" && o->dtype != "f32")
        throw Error("--dtype " + o->dtype + ": --distributed reads float32 files only");
      if (o->bf16_weights) throw Error("--bf16-weights: --distributed reads float32 files only");
      if (o->kv_q8) throw Error("--kv-q8: --distributed attends on float32 K and V only");
      run_attend_distributed({o->q, o->k, o->v, o->bias, o->out, o->lse, o->probs, o->causal, o->has_scale, o->scale,
                              o->notation, o->threads, o->key_lengths});
      return;
    }
    run_attend(*o);
  });
}

}  // namespace jomoim::cli
