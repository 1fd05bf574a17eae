#!/usr/bin/env python3
"""GPT-2-small-shaped model: prefill and KV-cache decode tokens/s, jomoim vs PyTorch, same weights.

    /usr/bin/python3 bench/gpt_bench.py [--jomoim build/release/jomoim] [--threads 2] [--passes 3]
                                        [--prompt 128] [--tokens 64] [--dir /tmp/jomoim-gpt2-small]

Writes a random GPT-2-small checkpoint (12 layers, 12 heads, 768 wide, 50257 vocab, 1024
positions; F32 safetensors, 475 MiB) into --dir once, then runs, interleaved, `passes` times:
`jomoim bench-model` and this script's PyTorch implementation of the same forward pass with a KV
cache (torch ops, float32, no_grad) in a child process each, so each reports its own peak RSS.
Each child reports medians of --reps repetitions; the table shows medians over passes.
"""
import argparse
import json
import math
import os
import resource
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "model"))

SMALL = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257,
             layer_norm_epsilon=1e-5, activation_function="gelu_new", n_inner=None, model_type="gpt2")


def make_checkpoint(d):
    import tiny_gpt2
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return
    os.makedirs(d, exist_ok=True)
    w = tiny_gpt2.random_weights(SMALL, seed=2024)
    tiny_gpt2.write_safetensors(os.path.join(d, "model.safetensors.tmp"), list(w.items()), "F32")
    os.rename(os.path.join(d, "model.safetensors.tmp"), os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(SMALL, n_ctx=1024), f, indent=2)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(mm[b:e], dtype="<f4").reshape(info["shape"])
    return out


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def torch_child(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    cfg = SMALL
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D = C // H
    t0 = time.perf_counter()
    w = {k: torch.from_numpy(np.array(v)) for k, v in read_safetensors(os.path.join(args.dir, "model.safetensors")).items()}
    load_ms = (time.perf_counter() - t0) * 1e3

    def forward(ids, cache, past):
        T = ids.shape[0]
        x = w["wte.weight"][ids] + w["wpe.weight"][past:past + T]
        for l in range(L):
            h = f"h.{l}."
            a = F.layer_norm(x, (C,), w[h + "ln_1.weight"], w[h + "ln_1.bias"], 1e-5)
            qkv = torch.addmm(w[h + "attn.c_attn.bias"], a, w[h + "attn.c_attn.weight"])
            q, k, v = qkv.split(C, dim=-1)
            cache[l][0][past:past + T] = k
            cache[l][1][past:past + T] = v
            K = cache[l][0][:past + T].view(past + T, H, D).transpose(0, 1)
            V = cache[l][1][:past + T].view(past + T, H, D).transpose(0, 1)
            q = q.reshape(T, H, D).transpose(0, 1)
            s = (q @ K.transpose(-1, -2)) * (1.0 / math.sqrt(D))
            if T > 1:
                mask = torch.ones(T, past + T, dtype=torch.bool).tril(past)
                s = s.masked_fill(~mask, float("-inf"))
            o = (torch.softmax(s, dim=-1) @ V).transpose(0, 1).reshape(T, C)
            x = x + torch.addmm(w[h + "attn.c_proj.bias"], o, w[h + "attn.c_proj.weight"])
            a = F.layer_norm(x, (C,), w[h + "ln_2.weight"], w[h + "ln_2.bias"], 1e-5)
            f = F.gelu(torch.addmm(w[h + "mlp.c_fc.bias"], a, w[h + "mlp.c_fc.weight"]), approximate="tanh")
            x = x + torch.addmm(w[h + "mlp.c_proj.bias"], f, w[h + "mlp.c_proj.weight"])
        x = F.layer_norm(x[-1:], (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
        return (x @ w["wte.weight"].T)[0]

    ids = torch.randint(0, cfg["vocab_size"], (args.prompt,), generator=torch.Generator().manual_seed(1))
    n = args.prompt + args.tokens
    prefill, decode = [], []
    with torch.no_grad():
        cache = [(torch.zeros(n, C), torch.zeros(n, C)) for _ in range(L)]
        for _ in range(args.reps):
            t0 = time.perf_counter()
            logits = forward(ids, cache, 0)
            prefill.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            past = args.prompt
            for _ in range(args.tokens):
                nxt = torch.argmax(logits).view(1)
                logits = forward(nxt, cache, past)
                past += 1
            decode.append((time.perf_counter() - t0) * 1e3)
    pm, dm = float(np.median(prefill)), float(np.median(decode))
    print(json.dumps(dict(prefill_ms=pm, decode_ms=dm, load_ms=load_ms,
                          prefill_tokens_per_s=args.prompt / (pm / 1e3), decode_tokens_per_s=args.tokens / (dm / 1e3),
                          peak_rss_mib=peak_rss_mib())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jomoim", default=os.path.join(HERE, "..", "build", "release", "jomoim"))
    ap.add_argument("--dir", default="/tmp/jomoim-gpt2-small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)

    make_checkpoint(args.dir)
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    results = {"jomoim": [], "torch": []}
    for p in range(args.passes):
        for who in ("jomoim", "torch"):
            if who == "jomoim":
                cmd = [args.jomoim, "bench-model", "--model", args.dir, "--json", "--threads", str(args.threads),
                       "--prompt", str(args.prompt), "--tokens", str(args.tokens), "--reps", str(args.reps)]
            else:
                cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", "--dir", args.dir,
                       "--threads", str(args.threads), "--prompt", str(args.prompt), "--tokens", str(args.tokens),
                       "--reps", str(args.reps)]
            r = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
            results[who].append(r)
            print(f"pass {p + 1} {who:6s}: prefill {r['prefill_tokens_per_s']:8.1f} tok/s  decode "
                  f"{r['decode_tokens_per_s']:6.1f} tok/s  peak RSS {r['peak_rss_mib']:6.0f} MiB", file=sys.stderr)

    def med(who, key):
        return float(np.median([r[key] for r in results[who]]))

    j, t = results["jomoim"][-1], None
    print(f"GPT-2-small shape (random weights), {args.threads} threads, prompt {args.prompt} tokens, "
          f"{args.tokens} decoded tokens, medians of {args.passes} passes x {args.reps} reps, "
          f"{time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.2f}\n")
    print("| | jomoim | PyTorch 1.13 | jomoim / PyTorch |")
    print("|---|---:|---:|---:|")
    for key, label in (("prefill_tokens_per_s", "prefill tokens/s"), ("decode_tokens_per_s", "decode tokens/s")):
        a, b = med("jomoim", key), med("torch", key)
        print(f"| {label} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
    a, b = med("jomoim", "peak_rss_mib"), med("torch", "peak_rss_mib")
    print(f"| peak RSS (MiB) | {a:.0f} | {b:.0f} | {a / b:.2f}x |")
    print(f"\njomoim memory: {j['rss_file_mib']:.0f} MiB of mapped (file-backed) weights, "
          f"{j['rss_anon_mib']:.0f} MiB allocated (KV cache {j['kv_cache_mib']:.1f} MiB), "
          f"{j['copied_weight_mib']:.0f} MiB of weights copied; F32 weights are {j['weights_mib']:.0f} MiB.")


if __name__ == "__main__":
    main()
