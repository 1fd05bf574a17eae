"""jomoim — exact scaled dot-product attention for CPUs, from NumPy.

    import numpy as np, jomoim
    q = np.random.rand(1, 8, 128, 64).astype(np.float32)        # [B, Hq, Nq, D]
    k = np.random.rand(1, 2, 128, 64).astype(np.float32)        # [B, Hkv, Nk, D]
    v = np.random.rand(1, 2, 128, 64).astype(np.float32)        # [B, Hkv, Nk, Dv]
    out = jomoim.attention(q, k, v, causal=True)                # [B, Hq, Nq, Dv]
    out, lse = jomoim.attention(q, k, v, return_lse=True)

Functions:
    attention            the engine (float32, any strides, GIL released while it runs)
    attention_reference  its float64 oracle (plain loops), same arguments
    simd_targets, active_simd_target, set_simd_target
                         which SIMD instruction set the kernels run on
Errors: jomoim.Error (a subclass of ValueError) carries the engine's one-line message;
arguments of the wrong type raise TypeError.

The shapes, masks and notations are those of DESIGN.md and include/jomoim/attention.hpp.
"""
# The compiled part holds the whole API today. The model (jomoim.Model, on top of the GPT
# runtime) will be a further module of this package, e.g. jomoim/model.py, imported here.
from ._jomoim import (
    Error,
    __version__,
    active_simd_target,
    attention,
    attention_reference,
    set_simd_target,
    simd_targets,
)

__all__ = [
    "Error",
    "__version__",
    "active_simd_target",
    "attention",
    "attention_reference",
    "set_simd_target",
    "simd_targets",
]
