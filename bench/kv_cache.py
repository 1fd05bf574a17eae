#!/usr/bin/env python3
"""The KV cache formats (--kv-cache f32|bf16|q8|q4) and the weight formats (--weights f32|bf16|q8)
on a real model: how far the next-token distributions move, and what decoding costs.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/kv_cache.py [--model models/default]
        [--windows 16] [--jomoim build/release/jomoim] [--threads 2] [--rounds 3]
        [--small-dir /tmp/jomoim-explain-small] [--no-small] [--no-speed]

Accuracy: the held-out text (data/corpus/out/heldout.txt, scripts/make-corpus.sh; else README.md)
is tokenized, joined and cut into --windows consecutive windows of the model's context; each
window's logits at every position come from Model.load(weights=W, kv_cache=F).logits (the
prompt through a cache of format F: every position reads the rounded keys and values; the
matrices in format W). Per position, KL(p_f32 || p_W,F) in nats; reported: the mean, the 99th
percentile and the maximum over all positions, and how often the most likely token is the same.

Speed and memory: `jomoim bench-model --weights W --kv-cache F --json` for each pair, taking
turns in each of --rounds rounds (the same machine state for all), medians of the rounds'
medians: on --model (prompt of half its context, 64 new tokens) and, unless --no-small, on a
random checkpoint of GPT-2 small's shape (bench/explain_memory.py's; prompt 960, 64 new tokens).
Prints Markdown tables and the machine.
"""
import argparse
import json
import os
import platform
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FORMATS = ("f32", "bf16", "q8", "q4")
# (weights, KV cache): F32 weights with each KV cache, then bf16 / q8 weights with an f32 cache
# and with the cache of their own precision.
CONFIGS = [("f32", kv) for kv in FORMATS] + [("bf16", "f32"), ("q8", "f32"), ("bf16", "bf16"), ("q8", "q8")]


def cpu_line():
    name, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    simd = "AVX512_BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags else (
        "AVX2" if "avx2" in flags else "no AVX2")
    return f"{name}, {os.cpu_count()} logical CPUs, {simd}"


def held_out_text():
    for p in (os.path.join(ROOT, "data", "corpus", "out", "heldout.txt"), os.path.join(ROOT, "README.md")):
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                return p, f.read()
    sys.exit("no held-out text (run scripts/make-corpus.sh)")


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def accuracy(args, jomoim):
    where, text = held_out_text()
    base = jomoim.Model.load(args.model, threads=args.threads)
    ctx = base.config["n_positions"]
    ids = base.tokenize(text)
    n = min(args.windows, len(ids) // ctx)
    if n < 1:
        sys.exit(f"{where}: fewer tokens than one window of {ctx}")
    windows = [ids[i * ctx:(i + 1) * ctx] for i in range(n)]
    ref = [log_softmax(base.logits(w)) for w in windows]
    rows = []
    for wf, fmt in CONFIGS[1:]:
        m = jomoim.Model.load(args.model, threads=args.threads, weights=wf, kv_cache=fmt)
        kls, same = [], 0
        for w, lp in zip(windows, ref):
            lq = log_softmax(m.logits(w))
            kls.append((np.exp(lp) * (lp - lq)).sum(axis=-1))
            same += int((lp.argmax(-1) == lq.argmax(-1)).sum())
        kl = np.concatenate(kls)
        rows.append((wf, fmt, kl.size, kl.mean(), np.percentile(kl, 99), kl.max(), same / kl.size))
    print(f"\n### Next-token distributions with each weight and KV cache format vs f32 ({args.model})\n")
    print(f"{n} windows x {ctx} tokens of {os.path.relpath(where, ROOT)}, every position.\n")
    print("| weights | KV cache | positions | mean KL (nats) | 99th pct | max | same top-1 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for wf, fmt, k, mean, p99, mx, agree in rows:
        print(f"| {wf} | {fmt} | {k} | {mean:.2e} | {p99:.2e} | {mx:.2e} | {100 * agree:.2f}% |")
    return rows


def bench(args, model, prompt, tokens):
    runs = {c: [] for c in CONFIGS}
    for _ in range(args.rounds):
        for wf, fmt in CONFIGS:
            out = subprocess.run([args.jomoim, "bench-model", "--model", model, "--weights", wf, "--kv-cache", fmt,
                                  "--prompt", str(prompt), "--tokens", str(tokens), "--reps", "3", "--threads",
                                  str(args.threads), "--json"], check=True, capture_output=True, text=True).stdout
            runs[(wf, fmt)].append(json.loads(out))
    med = lambda xs: float(np.median(xs))
    print(f"\n### Decoding with each weight and KV cache format ({model}: prompt {prompt}, {tokens} new tokens, "
          f"{args.threads} threads, medians of {args.rounds} rounds)\n")
    print("| weights | KV cache | weight bytes | KV bytes | prefill tokens/s | decode tokens/s | prefill, decode vs f32 "
          "| peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    base = med([r["decode_tokens_per_s"] for r in runs[("f32", "f32")]])
    base_p = med([r["prefill_tokens_per_s"] for r in runs[("f32", "f32")]])
    for wf, fmt in CONFIGS:
        r = runs[(wf, fmt)]
        d = med([x["decode_tokens_per_s"] for x in r])
        p = med([x["prefill_tokens_per_s"] for x in r])
        print(f"| {wf} | {fmt} | {r[0]['weights_mib']:.0f} MiB | {r[0]['kv_cache_mib']:.1f} MiB | {p:.0f} | "
              f"{d:.1f} | {p / base_p:.2f}x, {d / base:.2f}x | {med([x['peak_rss_mib'] for x in r]):.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--jomoim", default=os.path.join(ROOT, "build", "release", "jomoim"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small-dir", default="/tmp/jomoim-explain-small")
    ap.add_argument("--no-small", action="store_true")
    ap.add_argument("--no-speed", action="store_true", help="accuracy only")
    args = ap.parse_args()
    import jomoim
    print(f"Machine: {cpu_line()}; jomoim SIMD target {jomoim.active_simd_target()}")
    accuracy(args, jomoim)
    if args.no_speed:
        return
    with open(os.path.join(args.model, "config.json")) as f:
        ctx = json.load(f)["n_positions"]
    bench(args, args.model, ctx // 2, 64)
    if not args.no_small:
        sys.path.insert(0, HERE)
        import explain_memory
        explain_memory.make_checkpoint(args.small_dir, args.model)
        bench(args, args.small_dir, 960, 64)


if __name__ == "__main__":
    main()
