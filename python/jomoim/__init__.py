"""jomoim — exact scaled dot-product attention for CPUs, and a GPT-2 runtime on it, from NumPy.

    import numpy as np, jomoim
    q = np.random.rand(1, 8, 128, 64).astype(np.float32)        # [B, Hq, Nq, D]
    k = np.random.rand(1, 2, 128, 64).astype(np.float32)        # [B, Hkv, Nk, D]
    v = np.random.rand(1, 2, 128, 64).astype(np.float32)        # [B, Hkv, Nk, Dv]
    out = jomoim.attention(q, k, v, causal=True)                # [B, Hq, Nq, Dv]
    out, lse = jomoim.attention(q, k, v, return_lse=True)

Functions:
    attention            the engine (float32, any strides, GIL released while it runs)
    attention_reference  its float64 oracle (plain loops), same arguments
    quantize_q8, dequantize_q8
                         the 8-bit K/V format: (int8 values, float32 scale a block of 32)
    attention_q8kv       attention with k and v in that format (decode: 1.125 bytes a value)
    quantize_q4, dequantize_q4, attention_q4kv
                         the same in 4 bits (0.625 bytes a value: for memory, not for speed)
    simd_targets, active_simd_target, set_simd_target
                         which SIMD instruction set the kernels run on
The model (jomoim/model.py):
    m = jomoim.Model.load()         # a GPT-2 model directory; None: $JOMOIM_MODEL, else models/default
    m.tokenize(text), m.decode(ids), m.logits(ids) -> float32 [T, vocab]
    m.predict(text, top=10) -> [Prediction(id, text, probability, logit)]
    m.generate(text, n=50, ...) -> str, m.stream(text, ...) -> pieces as they are sampled

Errors: jomoim.Error (a subclass of ValueError) carries the engine's one-line message;
arguments of the wrong type raise TypeError.

The shapes, masks and notations are those of docs/design.md and include/jomoim/engine/attention.hpp.
"""
# The attention functions are the compiled part itself; the model (jomoim/model.py) is a thin
# Python layer over its compiled core (_jomoim._Model).
from ._jomoim import (
    Error,
    __version__,
    active_simd_target,
    attention,
    attention_q4kv,
    attention_q8kv,
    attention_reference,
    dequantize_q4,
    dequantize_q8,
    quantize_q4,
    quantize_q8,
    set_simd_target,
    simd_targets,
)
from .model import Model, Prediction, Stream, default_model_dir

__all__ = [
    "Error",
    "Model",
    "Prediction",
    "Stream",
    "__version__",
    "active_simd_target",
    "attention",
    "attention_q4kv",
    "attention_q8kv",
    "attention_reference",
    "default_model_dir",
    "dequantize_q4",
    "dequantize_q8",
    "quantize_q4",
    "quantize_q8",
    "set_simd_target",
    "simd_targets",
]
