#!/usr/bin/env python3
"""Why a model's look-back heads spread their weight: their attention logits on the previous-token
probe, split by where the query and the key come from.

    /usr/bin/python3 bench/probes/lookback_logits.py [models/default/model.safetensors] [--heads 3]

A NumPy float64 GPT-2 forward pass (F32 safetensors with Hugging Face names) over `jomoim heads`'
kind of probe (<|endoftext|>, then 50 random distinct tokens said twice; 8 draws). For the heads
with the most weight on the previous token it prints their mean weights (previous, self, first)
and, with each LayerNorm's scale frozen at its value (so the query and the key are sums of one
part per residual component: token embedding, position embedding, each earlier layer's attention
and MLP output, the biases), the mean logit gap between the previous token and the query's own
position ("prev - self") and between the previous token and the older ones ("prev - older"), per
(query part, key part) pair that moves either by more than 0.1 / 0.3. bench/NOTES.md, "Where the
look-back heads lose the previous token".
"""
import argparse, json, struct
import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("path", nargs="?", default="models/default/model.safetensors")
ap.add_argument("--heads", type=int, default=3, help="how many of the best look-back heads to split")
args = ap.parse_args()

with open(args.path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    base = 8 + n
    W = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            raise SystemExit(f"{args.path}: {k} is {v['dtype']}; this probe reads F32 checkpoints")
        a, b = v["data_offsets"]
        f.seek(base + a)
        W[k] = np.frombuffer(f.read(b - a), dtype=np.float32).reshape(v["shape"]).astype(np.float64)
cfg = json.load(open(args.path.rsplit("/", 1)[0] + "/config.json")) if "/" in args.path else json.load(open("config.json"))
V, C = W["wte.weight"].shape
H, L, eps = cfg["n_head"], cfg["n_layer"], cfg.get("layer_norm_epsilon", 1e-5)
D = C // H
eot = cfg.get("eos_token_id", V - 1)


def norm(x, p):
    m = x.mean(-1, keepdims=True)
    s = np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)
    return (x - m) / s * W[p + ".weight"] + W[p + ".bias"], s


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(ids):
    """Each layer's attention weights [H, T, T], each residual component, each layer's (input, sigma)."""
    T = len(ids)
    comps = {"tok": W["wte.weight"][ids], "pos": W["wpe.weight"][:T]}
    x = comps["tok"] + comps["pos"]
    probs, inputs = [], []
    for l in range(L):
        h1, s = norm(x, f"h.{l}.ln_1")
        inputs.append((dict(comps), s))
        qkv = h1 @ W[f"h.{l}.attn.c_attn.weight"] + W[f"h.{l}.attn.c_attn.bias"]
        outs, ps = [], []
        for h in range(H):
            q, k, v = (qkv[:, j * C + h * D: j * C + (h + 1) * D] for j in range(3))
            sc = q @ k.T / np.sqrt(D)
            sc[np.triu_indices(T, 1)] = -np.inf
            p = np.exp(sc - sc.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            ps.append(p)
            outs.append(p @ v)
        a = np.concatenate(outs, 1) @ W[f"h.{l}.attn.c_proj.weight"] + W[f"h.{l}.attn.c_proj.bias"]
        x = x + a
        h2, _ = norm(x, f"h.{l}.ln_2")
        m = gelu(h2 @ W[f"h.{l}.mlp.c_fc.weight"] + W[f"h.{l}.mlp.c_fc.bias"]) @ W[f"h.{l}.mlp.c_proj.weight"] \
            + W[f"h.{l}.mlp.c_proj.bias"]
        x = x + m
        comps[f"attn{l}"], comps[f"mlp{l}"] = a, m
        probs.append(ps)
    return probs, inputs


rng = np.random.default_rng(1)
draws = []
for _ in range(8):
    seq = rng.choice([t for t in range(V) if t != eot], 50, replace=False)
    ids = np.concatenate([[eot], seq, seq])
    draws.append((ids, *forward(ids)))
T = len(draws[0][0])
i = np.arange(1, T)
j = np.arange(3, T)  # rows with two tokens between them and the first


def role(p):
    back = [p[j, j - d].mean() for d in (2, 3)] + [np.mean([p[t, 1:t - 3].sum() for t in j])]
    return [p[i, i - 1].mean(), p[i, i].mean(), p[i, 0].mean()] + back


roles = {(l, h): np.mean([role(p[l][h]) for _, p, _ in draws], 0) for l in range(L) for h in range(H)}
best = sorted(roles, key=lambda t: -roles[t][0])[: args.heads]
print(f"{args.path}: {L} layers x {H} heads; probe {T} tokens, 8 draws")
for l, h in best:
    w = roles[(l, h)]
    print(f"L{l}H{h}: previous {w[0]:.3f}, self {w[1]:.3f}, first {w[2]:.3f}; two back {w[3]:.3f}, three back "
          f"{w[4]:.3f}, four or more back (first excluded) {w[5]:.3f}")
    gaps = {}
    for _, _, inputs in draws:
        comps, s = inputs[l]
        g, Wqkv, bqkv = W[f"h.{l}.ln_1.weight"], W[f"h.{l}.attn.c_attn.weight"], W[f"h.{l}.attn.c_attn.bias"]
        Wq, Wk = Wqkv[:, h * D:(h + 1) * D], Wqkv[:, C + h * D:C + (h + 1) * D]
        part = lambda Wm: {c: ((v - v.mean(-1, keepdims=True)) / s * g) @ Wm for c, v in comps.items()}
        qc, kc = part(Wq), part(Wk)
        qc["bias"] = np.broadcast_to(bqkv[h * D:(h + 1) * D] + W[f"h.{l}.ln_1.bias"] @ Wq, (T, D))
        kc["bias"] = np.broadcast_to(bqkv[C + h * D:C + (h + 1) * D] + W[f"h.{l}.ln_1.bias"] @ Wk, (T, D))
        r = np.arange(3, T)
        for a in qc:
            for b in kc:
                dots = qc[a] @ kc[b].T / np.sqrt(D)
                prev, own = dots[r, r - 1], dots[r, r]
                older = np.array([dots[t, 1:t - 1].mean() for t in r])
                gaps.setdefault((a, b), []).append(((prev - own).mean(), (prev - older).mean(), (prev - own).std()))
    tot = np.zeros(2)
    for (a, b), v in gaps.items():
        v = np.mean(v, 0)
        tot += v[:2]
        if abs(v[0]) > 0.1 or abs(v[1]) > 0.3:
            print(f"  query {a:6s} key {b:6s}  prev - self {v[0]:+.2f} (sd {v[2]:.2f} over positions)  prev - older {v[1]:+.2f}")
    print(f"  all parts:             prev - self {tot[0]:+.2f}                            prev - older {tot[1]:+.2f}")
