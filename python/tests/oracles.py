"""oracles.py — attention written independently of jomoim, to check it against.

np_attention: NumPy in any float dtype (float64: the oracle; float32: the naive evaluation
whose own error sets the tolerance, as tests/attention_test_util.hpp does).
torch_attention: PyTorch 1.13 ops in float32 (its public scaled_dot_product_attention only
arrived in 2.0), the way model code writes attention.

Both take jomoim's arguments (docs/design.md's contracts) and return out, lse, probs; out in the
caller's notation, lse [B, Hq, Nq], probs [B, Hq, Nq, Nk]. A row whose keys are all masked
gives zeros and lse = -inf.
"""
import numpy as np


def default_scale(d, scale):
    # The engine's scale is a float32 (1 / sqrt(D) rounded to float32 when not given).
    return float(np.float32(1.0 / np.sqrt(d) if scale is None else scale))


def mask_of(b, nq, nk, causal, key_lengths):
    """True where a key is hidden, [B, 1, Nq, Nk]."""
    lengths = np.full(b, nk) if key_lengths is None else np.asarray(key_lengths, np.int64)
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    m = np.zeros((b, 1, nq, nk), bool)
    for bi in range(b):
        m[bi, 0] |= j >= lengths[bi]
        if causal:  # bottom-right aligned to the sequence's own length
            m[bi, 0] |= j > i + (lengths[bi] - nq)
    return m


def paper(a, notation):
    return np.swapaxes(a, 2, 3) if notation == "3b1b" else a


def np_attention(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation="paper",
                 dtype=np.float64):
    q, k, v = (np.asarray(paper(a, notation), dtype) for a in (q, k, v))
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=1)  # query head h reads key/value head h // (Hq // Hkv)
    v = np.repeat(v, hq // hkv, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * dtype(default_scale(d, scale))
    if bias is not None:
        s = s + np.asarray(bias, dtype)
    s = np.where(mask_of(b, nq, nk, causal, key_lengths), dtype(-np.inf), s)
    if nk == 0:
        m = np.full((b, hq, nq, 1), -np.inf, dtype)
    else:
        m = s.max(axis=-1, keepdims=True)
    dead = np.isneginf(m)
    m0 = np.where(dead, 0, m).astype(dtype)
    e = np.exp(s - m0)
    z = e.sum(axis=-1, keepdims=True)
    z1 = np.where(dead, 1, z).astype(dtype)
    p = np.where(dead, 0, e / z1).astype(dtype)
    lse = np.where(dead, -np.inf, m0 + np.log(z1))[..., 0].astype(dtype)
    out = (p @ v).astype(dtype)
    return paper(out, notation), lse, p


def torch_attention(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation="paper"):
    import torch

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, np.float32))

    q, k, v = (t(paper(a, notation)) for a in (q, k, v))
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    s = torch.matmul(q, k.transpose(-2, -1)) * default_scale(d, scale)
    if bias is not None:
        s = s + t(bias)
    s = s.masked_fill(torch.from_numpy(mask_of(b, nq, nk, causal, key_lengths)), float("-inf"))
    lse = torch.logsumexp(s, dim=-1) if nk else torch.full((b, hq, nq), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)  # all -inf rows: NaN -> 0
    out = torch.matmul(p, v)
    return paper(out.numpy(), notation), lse.numpy(), p.numpy()
