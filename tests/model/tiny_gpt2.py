#!/usr/bin/env python3
"""Tiny random GPT-2 checkpoints in the exact Hugging Face layout, and their logits from an
independent implementation of the architecture in PyTorch (float64).

    tiny_gpt2.py make OUTDIR      writes OUTDIR/<variant>/ model directories, the logits PyTorch
                                  computes for a few token sequences (.npy, float32 from float64),
                                  and OUTDIR/manifest.json describing them (read by test_gpt.cpp)

The safetensors files are written here by hand (struct + json), not by jomoim, so the test reads
a file from an independent writer. Run with Debian's /usr/bin/python3 (torch, numpy).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def bytes_to_unicode():
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves, the
    others to 256, 257, ... in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def tiny_tokenizer(outdir):
    """A byte-level vocabulary: the 256 byte tokens, a few merges, and <|endoftext|> last."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("a", "v"), ("Ġh", "av"), ("Ġ", "h"),
              ("Ġhav", "e"), ("o", "t"), ("Ġl", "ot"), ("Ġ", "l"), ("i", "n"), ("Ġ", "I")]
    # Merges must produce tokens in the vocabulary; add each result once, in rank order.
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
    for a, b in merges:
        assert a in tokens and b in tokens, (a, b)
    tokens.append("<|endoftext|>")
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    return len(tokens)


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: list of (name, numpy array). F32, F16 or BF16 little-endian."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = a.astype("<f2").tobytes()
        elif dtype == "BF16":
            bits = a.view(np.uint32)
            # round to nearest even on the upper 16 bits
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
            raw = rounded.tobytes()
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def stored_values(a, dtype):
    """What the file holds, as float64 (after F16/BF16 rounding)."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        bits = a.view(np.uint32).astype(np.uint64)
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return r.astype(np.uint32).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def random_weights(cfg, seed):
    rng = np.random.default_rng(seed)
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    Fi = cfg.get("n_inner") or 4 * C
    w = {}

    def n(*shape, s=0.02):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    w["wte.weight"] = n(V, C, s=0.3)
    w["wpe.weight"] = n(P, C, s=0.1)
    for l in range(L):
        h = f"h.{l}."
        w[h + "ln_1.weight"] = (1 + n(C, s=0.1)).astype(np.float32)
        w[h + "ln_1.bias"] = n(C, s=0.1)
        w[h + "attn.c_attn.weight"] = n(C, 3 * C, s=0.3)
        w[h + "attn.c_attn.bias"] = n(3 * C, s=0.1)
        w[h + "attn.c_proj.weight"] = n(C, C, s=0.2)
        w[h + "attn.c_proj.bias"] = n(C, s=0.05)
        w[h + "ln_2.weight"] = (1 + n(C, s=0.1)).astype(np.float32)
        w[h + "ln_2.bias"] = n(C, s=0.1)
        w[h + "mlp.c_fc.weight"] = n(C, Fi, s=0.2)
        w[h + "mlp.c_fc.bias"] = n(Fi, s=0.1)
        w[h + "mlp.c_proj.weight"] = n(Fi, C, s=0.1)
        w[h + "mlp.c_proj.bias"] = n(C, s=0.05)
    w["ln_f.weight"] = (1 + n(C, s=0.1)).astype(np.float32)
    w["ln_f.bias"] = n(C, s=0.1)
    return w


def bf16_round(t):
    """float64 -> float32 -> bfloat16 (nearest, ties to even) -> float64: a bf16 KV cache's rounding."""
    return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def q8_round(t, block):
    """Each row's blocks of `block` values through the q8 format (jomoim/engine/quant.hpp), computed
    the way jomoim computes it in float32: d = amax / 127, q = rint(x * (1 / d)), x' = d * q."""
    x = t.numpy().astype(np.float32)
    shape = x.shape
    xb = x.reshape(-1, block)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(xb * inv), -127, 127).astype(np.float32)
    return torch.from_numpy((d * q).astype(np.float32).reshape(shape).astype(np.float64))


def q4_round(t, block):
    """The same through the q4 format: d = amax / 7, q = rint(x * (1 / d)) in [-7, 7]."""
    x = t.numpy().astype(np.float32)
    shape = x.shape
    xb = x.reshape(-1, block)
    d = (np.abs(xb).max(axis=1, keepdims=True) / np.float32(7)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(xb * inv), -7, 7).astype(np.float32)
    return torch.from_numpy((d * q).astype(np.float32).reshape(shape).astype(np.float64))


def torch_logits(cfg, w, ids, kv="f32"):
    """GPT-2 forward in PyTorch, float64, every position: [T, V]. kv: the KV cache format whose
    rounding is applied to what attention reads (jomoim/model/model.hpp's KvFormat): "f32" none;
    "bf16" queries, keys and values rounded to bf16; "q8" keys and values through q8 (blocks of
    32 along head_dim, or 16 when 32 does not divide it); "q4" through q4 (blocks of 32)."""
    t = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in w.items()}
    C, H = cfg["n_embd"], cfg["n_head"]
    D = C // H
    eps = cfg["layer_norm_epsilon"]
    act = cfg.get("activation_function", "gelu_new")
    ids = torch.tensor(ids, dtype=torch.long)
    T = ids.shape[0]
    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["n_layer"]):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), t[h + "ln_1.weight"], t[h + "ln_1.bias"], eps)
        qkv = a @ t[h + "attn.c_attn.weight"] + t[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(T, H, D).transpose(0, 1)
        k = k.view(T, H, D).transpose(0, 1)
        v = v.view(T, H, D).transpose(0, 1)
        if kv == "bf16":
            q, k, v = bf16_round(q), bf16_round(k), bf16_round(v)
        elif kv == "q8":
            block = 32 if D % 32 == 0 else 16
            k, v = q8_round(k, block), q8_round(v, block)
        elif kv == "q4":
            k, v = q4_round(k, 32), q4_round(v, 32)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v
        o = o.transpose(0, 1).reshape(T, C)
        x = x + o @ t[h + "attn.c_proj.weight"] + t[h + "attn.c_proj.bias"]
        a = F.layer_norm(x, (C,), t[h + "ln_2.weight"], t[h + "ln_2.bias"], eps)
        f = a @ t[h + "mlp.c_fc.weight"] + t[h + "mlp.c_fc.bias"]
        f = F.gelu(f) if act == "gelu" else F.gelu(f, approximate="tanh")
        x = x + f @ t[h + "mlp.c_proj.weight"] + t[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), t["ln_f.weight"], t["ln_f.bias"], eps)
    return (x @ t["wte.weight"].T).numpy()


def write_npy(path, a):
    np.save(path, np.ascontiguousarray(a, dtype=np.float32))


# Variants: plain F32 as Hugging Face saves GPT-2; "transformer."-prefixed F16 with the
# attention mask buffers and an lm_head copy (ignored by loaders); BF16 with exact GELU and
# an explicit n_inner.
VARIANTS = [
    dict(name="f32", dtype="F32", prefix="", extras=False,
         cfg=dict(n_layer=2, n_head=4, n_embd=32, n_positions=48, layer_norm_epsilon=1e-5,
                  activation_function="gelu_new", n_inner=None)),
    dict(name="f16_prefixed", dtype="F16", prefix="transformer.", extras=True,
         cfg=dict(n_layer=3, n_head=2, n_embd=24, n_positions=40, layer_norm_epsilon=1e-5,
                  activation_function="gelu_new", n_inner=None)),
    dict(name="bf16_gelu_erf", dtype="BF16", prefix="", extras=False,
         cfg=dict(n_layer=1, n_head=3, n_embd=36, n_positions=32, layer_norm_epsilon=1e-6,
                  activation_function="gelu", n_inner=80)),
]


def variant_weights(cfg, index):
    """The weights of VARIANTS[index]: one fixed seed per variant, so tests can regenerate them."""
    return random_weights(cfg, seed=1234 + index)


def make(outdir):
    os.makedirs(outdir, exist_ok=True)
    manifest = {"variants": []}
    for i, var in enumerate(VARIANTS):
        d = os.path.join(outdir, var["name"])
        os.makedirs(d, exist_ok=True)
        vocab = tiny_tokenizer(d)
        cfg = dict(var["cfg"], vocab_size=vocab, model_type="gpt2", n_ctx=var["cfg"]["n_positions"])
        w = variant_weights(cfg, i)
        tensors = [(var["prefix"] + k, v) for k, v in w.items()]
        if var["extras"]:
            P = cfg["n_positions"]
            for l in range(cfg["n_layer"]):
                tensors.append((var["prefix"] + f"h.{l}.attn.bias", np.tril(np.ones((1, 1, P, P), np.float32))))
                tensors.append((var["prefix"] + f"h.{l}.attn.masked_bias", np.array(-1e4, np.float32)))
            tensors.append(("lm_head.weight", w["wte.weight"]))
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, var["dtype"])
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        stored = {k: stored_values(v, var["dtype"]) for k, v in w.items()}
        rng = np.random.default_rng(99 + i)
        cases = []
        for j, T in enumerate([1, 2, 7, 19, cfg["n_positions"]]):
            ids = rng.integers(0, vocab, size=T).tolist()
            logits = torch_logits(cfg, stored, ids)
            fname = f"{var['name']}_logits_{j}.npy"
            write_npy(os.path.join(outdir, fname), logits)
            cases.append({"ids": ids, "logits": fname})
        manifest["variants"].append({"name": var["name"], "dir": var["name"], "cases": cases,
                                     "vocab_size": vocab})
    manifest["kv_formats"] = make_kv_formats(os.path.join(outdir, KV_FORMATS["name"]), outdir)
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    make_long_context(os.path.join(outdir, LONG_CONTEXT["name"]))


# A tiny F32 model whose head_dim (32) the q8 KV cache accepts, with the logits of each KV cache
# format and each weight format from the reference above (manifest "kv_formats"; test_gpt.cpp's
# GptTorch.KvFormats... and GptTorch.WeightFormats...).
KV_FORMATS = dict(name="kv_formats", cfg=dict(n_layer=2, n_head=2, n_embd=64, n_positions=40,
                                              layer_norm_epsilon=1e-5, activation_function="gelu_new",
                                              n_inner=None))


def make_random_f32(d, base_cfg, seed):
    """A model directory d of random F32 weights with the tiny tokenizer: (vocab, cfg, weights)."""
    os.makedirs(d, exist_ok=True)
    vocab = tiny_tokenizer(d)
    cfg = dict(base_cfg, vocab_size=vocab, model_type="gpt2", n_ctx=base_cfg["n_positions"])
    w = random_weights(cfg, seed=seed)
    write_safetensors(os.path.join(d, "model.safetensors"), list(w.items()), "F32")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return vocab, cfg, w


MATRICES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def rounded_weights(w, fmt):
    """The weights a model holds with --weights fmt (jomoim/model/model.hpp's WeightFormat): wte
    and every block's four matrices rounded, each output's inputs together (wte's rows; the
    columns of GPT-2's Conv1D [in, out]): "bf16" to bfloat16, "q8" through q8 blocks of 32 inputs
    (16 when 32 does not divide the width). Everything else as it is."""
    out = dict(w)
    for k, a in w.items():
        if not (k == "wte.weight" or k.split(".", 2)[-1] in MATRICES):
            continue
        rows = torch.from_numpy(np.ascontiguousarray(a if k == "wte.weight" else a.T).astype(np.float64))
        if fmt == "bf16":
            r = bf16_round(rows)
        else:
            r = q8_round(rows, 32 if rows.shape[1] % 32 == 0 else 16)
        r = r.numpy().astype(np.float32)
        out[k] = r if k == "wte.weight" else np.ascontiguousarray(r.T)
    return out


def make_kv_formats(d, outdir):
    vocab, cfg, w = make_random_f32(d, KV_FORMATS["cfg"], seed=2468)
    rng = np.random.default_rng(1357)
    cases = []
    for j, T in enumerate([1, 5, 17, cfg["n_positions"]]):
        ids = rng.integers(0, vocab, size=T).tolist()
        files = {}
        for kv in ("f32", "bf16", "q8", "q4"):
            files[kv] = f"kv_formats_{kv}_logits_{j}.npy"
            write_npy(os.path.join(outdir, files[kv]), torch_logits(cfg, w, ids, kv))
        # The weight formats (f32 KV cache): the same reference on the rounded weights.
        for fmt in ("bf16", "q8"):
            files["weights_" + fmt] = f"kv_formats_weights_{fmt}_logits_{j}.npy"
            write_npy(os.path.join(outdir, files["weights_" + fmt]), torch_logits(cfg, rounded_weights(w, fmt), ids))
        cases.append({"ids": ids, "logits": files})
    return {"dir": KV_FORMATS["name"], "vocab_size": vocab, "cases": cases}


# A tiny model with GPT-2's context of 1024 positions, for the explorer page's long-prompt test
# (not in the manifest: no reference logits).
LONG_CONTEXT = dict(name="long_context", cfg=dict(n_layer=2, n_head=4, n_embd=32, n_positions=1024,
                                                  layer_norm_epsilon=1e-5, activation_function="gelu_new",
                                                  n_inner=None))


def make_long_context(d):
    make_random_f32(d, LONG_CONTEXT["cfg"], seed=4321)


def load_variant(root, name):
    """A fixture written by this script: (its directory, config, the weights as stored, i.e. after
    the variant's dtype rounding), regenerated from the same seed instead of read back."""
    d = os.path.join(root, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    var = next(v for v in VARIANTS if v["name"] == name)
    w = variant_weights(cfg, VARIANTS.index(var))
    return d, cfg, {k: stored_values(v, var["dtype"]) for k, v in w.items()}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "make":
        sys.exit("usage: tiny_gpt2.py make OUTDIR")
    make(sys.argv[2])
