#!/usr/bin/env python3
"""Start one head of layer 0 as a previous-token head (the default model's recipe, issue 18).

    PYTHONPATH=build/release/python /usr/bin/python3 scripts/seed_previous_token_head.py \
        SRC_DIR DST_DIR [--head 2] [--data data/corpus/out/train.txt]

SRC_DIR is a freshly initialised model directory (`jomoim train ... --stop-at 1`); DST_DIR gets
the same files with one head's query and key projections replaced, for `jomoim train
--init-from DST_DIR`. Only the head's W_Q and W_K columns (and their biases) change: they are
fitted, with every other weight fixed, so that the head's causal softmax at each query i >= 1
puts its weight on key i - 1, on layer 0's real inputs LN_1(wte[token] + wpe[position]):
half the fitting batches are windows of the training text, half windows of uniformly random
tokens, so that the head learns to point by position rather than by which words it sees.
Adam, 600 steps, learning rate 3e-3, fixed seeds: the same inputs give the same bits on the
same machine and thread count.

This is an initialisation, not a constraint: training updates the head like any other (its
W_V and W_O keep their random start), and decides whether the network uses it. A position
embedding that tells neighbours apart is what makes the fit sharp: with `--wpe-init fourier`
the head puts ~0.88 of its weight on the previous token of unseen text at the start, with
`sinusoidal` (mostly slow waves) ~0.57. bench/NOTES.md ("A previous-token head from the start")
has the measurements.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "release", "python"))


def fail(msg):
    print(f"seed_previous_token_head.py: {msg}", file=sys.stderr)
    sys.exit(1)


def load_safetensors(path, torch):
    """{name: float32 tensor} and the metadata of a safetensors file of F32 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail(f"{path}: not a safetensors file (shorter than its header length)")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > len(raw) - 8:
        fail(f"{path}: header length {n} beyond the file")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            fail(f"{path}: {name} is {info['dtype']}; this script reads the trainer's F32 checkpoints")
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"]).copy()
        tensors[name] = torch.from_numpy(arr)
    return tensors, meta


def save_safetensors(path, tensors, meta):
    header = {"__metadata__": meta}
    blobs, offset = [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def layer_norm(x, w, b):
    """GPT-2's LayerNorm with the trainer's epsilon (1e-5)."""
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt() * w + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="model directory to start from (config.json, model.safetensors, vocab.json, merges.txt)")
    ap.add_argument("dst", help="model directory to write")
    ap.add_argument("--head", type=int, default=2, help="which head of layer 0 (default 2)")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "corpus", "out", "train.txt"),
                    help="training text the fitting windows come from")
    args = ap.parse_args()

    import torch
    import jomoim

    with open(os.path.join(args.src, "config.json")) as f:
        cfg = json.load(f)
    C, H, T = cfg["n_embd"], cfg["n_head"], cfg["n_positions"]
    if not 0 <= args.head < H:
        fail(f"--head {args.head}: layer 0 has heads 0..{H - 1}")
    D = C // H
    torch.manual_seed(1)
    torch.set_num_threads(2)
    W, meta = load_safetensors(os.path.join(args.src, "model.safetensors"), torch)
    model = jomoim.Model.load(args.src)
    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    if len(text) < 40000:
        fail(f"{args.data}: {len(text)} characters; the fitting windows need at least 40,000")

    # 48 windows of T tokens from random places of the text: 40 to fit, 8 to report on.
    rng = np.random.default_rng(1)
    rows = [model.tokenize(text[s:s + 6000])[:T] for s in rng.integers(0, len(text) - 20000, 48)]
    if any(len(r) < T for r in rows):
        fail(f"{args.data}: a window of 6,000 characters gave fewer than {T} tokens")
    ids = torch.tensor(rows)
    ln_w, ln_b = W["h.0.ln_1.weight"], W["h.0.ln_1.bias"]
    a = layer_norm(W["wte.weight"][ids] + W["wpe.weight"][:T], ln_w, ln_b)
    cw, cb = W["h.0.attn.c_attn.weight"], W["h.0.attn.c_attn.bias"]  # [C, 3C]: Q | K | V columns
    q0, k0 = args.head * D, C + args.head * D
    Wq = cw[:, q0:q0 + D].clone().requires_grad_()
    bq = cb[q0:q0 + D].clone().requires_grad_()
    Wk = cw[:, k0:k0 + D].clone().requires_grad_()
    bk = cb[k0:k0 + D].clone().requires_grad_()
    opt = torch.optim.Adam([Wq, bq, Wk, bk], lr=3e-3)
    mask = torch.ones(T, T).tril().bool()
    fit, report = a[:40], a[40:]

    def log_weights(x):
        s = ((x @ Wq + bq) @ (x @ Wk + bk).transpose(-1, -2)) / math.sqrt(D)
        return s.masked_fill(~mask, float("-inf")).log_softmax(-1)

    V = W["wte.weight"].shape[0]
    g = torch.Generator().manual_seed(1)

    def random_tokens():
        r = torch.randint(0, V, (16, T), generator=g)
        return layer_norm(W["wte.weight"][r] + W["wpe.weight"][:T], ln_w, ln_b)

    for it in range(600):
        batch = random_tokens() if it % 2 else fit[torch.randint(0, 40, (16,), generator=g)]
        loss = -log_weights(batch).diagonal(offset=-1, dim1=1, dim2=2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it % 100 == 0 or it == 599:
            with torch.no_grad():
                held = log_weights(report).exp().diagonal(offset=-1, dim1=1, dim2=2).mean().item()
            print(f"step {it}: fit loss {loss.item():.4f}, weight on the previous token (8 unseen windows) {held:.3f}",
                  flush=True)
    with torch.no_grad():
        cw[:, q0:q0 + D] = Wq
        cb[q0:q0 + D] = bq
        cw[:, k0:k0 + D] = Wk
        cb[k0:k0 + D] = bk
    os.makedirs(args.dst, exist_ok=True)
    for name in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(os.path.join(args.src, name), args.dst)
    save_safetensors(os.path.join(args.dst, "model.safetensors"), W, meta)
    print(f"layer 0, head {args.head} seeded; wrote {args.dst}")


if __name__ == "__main__":
    main()
