#!/usr/bin/env python3
"""Training throughput of the default model's configuration: jomoim vs PyTorch 1.13.

    /usr/bin/python3 bench/train_bench.py --data build/brown-text [--jomoim build/release/jomoim]
        [--threads 2] [--passes 3] [--steps 8] [--matmul auto|f32|bf16]

Both train the same architecture (GPT-2 blocks; vocabulary, layers, heads, width, context of
models/default), with AdamW, the same batch (16 windows) and sequence length (128), the same
threads, for --steps optimizer steps after one warm-up step; tokens/s is the median over steps of
a pass, and the table shows the median over passes, run interleaved. jomoim runs `jomoim train`
on the real data with a given tokenizer; PyTorch trains on random token ids of the same
vocabulary (the speed does not depend on the ids). PyTorch runs with OMP_WAIT_POLICY=passive and
OPENBLAS_NUM_THREADS set to the thread count (see ENVIRONMENT.md).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(vocab=7168, layers=4, heads=4, embd=256, context=128, batch=16, seq=128)


def torch_child(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, L, H, C, P = CFG["vocab"], CFG["layers"], CFG["heads"], CFG["embd"], CFG["context"]
    B, T = CFG["batch"], CFG["seq"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            s = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.c_proj(a)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.h:
                x = b(x)
            return self.ln_f(x) @ self.wte.weight.T

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    rates = []
    for step in range(args.steps + 1):
        idx = torch.randint(0, V, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step > 0:
            rates.append(B * T / dt)
    print(json.dumps({"tokens_per_s": statistics.median(rates)}))


def jomoim_pass(args, tokenizer_dir):
    out = tempfile.mkdtemp(prefix="jomoim-train-bench-")
    try:
        cmd = [args.jomoim, "train", "--data", args.data, "--out", out, "--tokenizer", tokenizer_dir,
               "--layers", str(CFG["layers"]), "--heads", str(CFG["heads"]), "--embd", str(CFG["embd"]),
               "--context", str(CFG["context"]), "--batch", str(CFG["batch"]), "--seq", str(CFG["seq"]),
               "--steps", str(args.steps + 1), "--eval-every", "100000", "--eval-batches", "1",
               "--threads", str(args.threads), "--matmul", args.matmul]
        subprocess.run(cmd, check=True, capture_output=True)
        with open(os.path.join(out, "trainer.json")) as f:
            hist = json.load(f)["history"]
        return statistics.median(r["tokens_per_s"] for r in hist[1:])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jomoim", default=os.path.join(HERE, "..", "build", "release", "jomoim"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "build", "brown-text"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "models", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--matmul", default="auto", choices=["auto", "f32", "bf16"],
                    help="jomoim's product precision (auto: bf16 where the CPU has AVX512_BF16)")
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OPENBLAS_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    res = {"jomoim": [], "torch": []}
    for p in range(args.passes):
        res["jomoim"].append(jomoim_pass(args, args.tokenizer))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-child", "--threads", str(args.threads),
                              "--steps", str(args.steps)], env=env, check=True, capture_output=True, text=True).stdout
        res["torch"].append(json.loads(out)["tokens_per_s"])
        print(f"pass {p + 1}: jomoim {res['jomoim'][-1]:.0f} tok/s, PyTorch {res['torch'][-1]:.0f} tok/s", file=sys.stderr)
    j, t = statistics.median(res["jomoim"]), statistics.median(res["torch"])
    print(f"Training throughput, default model configuration ({CFG['layers']} layers, {CFG['heads']} heads, "
          f"{CFG['embd']} wide, vocabulary {CFG['vocab']}, batch {CFG['batch']} x {CFG['seq']} tokens), "
          f"{args.threads} threads, jomoim --matmul {args.matmul}, medians of {args.passes} passes x {args.steps} steps, "
          f"{time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.2f}\n")
    print("| | jomoim | PyTorch 1.13 | jomoim / PyTorch |")
    print("|---|---:|---:|---:|")
    print(f"| training tokens/s | {j:.0f} | {t:.0f} | {j / t:.2f}x |")


if __name__ == "__main__":
    main()
