#!/usr/bin/env python3
"""make_safetensors_fixtures.py: writes tests/data/safetensors/, the files test_safetensors.cpp
reads to check jomoim against a writer it does not share code with.

There is no `safetensors` Python package on Debian, so this script writes the format the way
Hugging Face's writer does, by hand from the published layout (8-byte little-endian header
length, compact JSON header with "__metadata__" first, padded with spaces to a multiple of 8,
tensors back to back in the data section). The values come from NumPy (float32, float16, the
float16 -> float32 widening) and PyTorch (float32 -> bfloat16 rounding and bfloat16 -> float32
widening); the expected float32 arrays are saved with np.save, so the test compares jomoim's
load_f32 with what NumPy/PyTorch computed, bit for bit.

    /usr/bin/python3 tests/make_safetensors_fixtures.py     # rewrites tests/data/safetensors/

Deterministic (fixed seed); needs /usr/bin/python3 with numpy and torch (Debian python3-torch).
"""
import json
import os
import struct

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "safetensors")


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype name, shape, raw little-endian bytes), laid out in order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    rng = np.random.default_rng(20240604)

    weight = rng.standard_normal((3, 4)).astype("<f4")
    scalar = np.array(-1.5, dtype="<f4")
    empty = np.zeros((0, 3), dtype="<f4")

    # float16: the special values, then random bit patterns (every kind: subnormal, normal, NaN).
    special16 = [0.0, -0.0, 1.0, -2.0, 65504.0, -65504.0, 6.103515625e-05, 5.960464477539063e-08,
                 -5.960464477539063e-08, 6.097555160522461e-05, 0.333251953125, np.inf, -np.inf]
    half = np.array(special16, dtype="<f2")
    half_bits = np.concatenate([half.view("<u2"), np.array([0x7E00, 0xFE01, 0x7C01], dtype="<u2"),
                                rng.integers(0, 1 << 16, size=200, dtype=np.uint32).astype("<u2")])
    half = half_bits.view("<f2").reshape(4, 54)
    half_expected = half.astype("<f4")  # NumPy's widening keeps NaN payloads

    # bfloat16: PyTorch rounds float32 values to bfloat16 and widens them back.
    bf_src = np.concatenate([np.array([0.0, -0.0, 1.0, -2.0, 3.0e38, -3.0e38, 1e-40, -1e-40, np.inf, -np.inf,
                                       np.nan, 0.1, 1.0 / 3.0], dtype="<f4"),
                             (rng.standard_normal(100) * np.exp(rng.uniform(-80, 80, 100))).astype("<f4")])
    bf = torch.from_numpy(bf_src).to(torch.bfloat16)
    bf_bits = bf.view(torch.int16).numpy().astype("<i2").view("<u2")
    bf_expected = bf.to(torch.float32).numpy().astype("<f4")

    ids = np.array([1, -2, 3], dtype="<i8")

    # Hugging Face sorts tensors by alignment (largest dtype first), then by name; "ids" (I64)
    # first makes every later offset a multiple of 8 except after the 2-byte tensors.
    tensors = [
        ("ids", "I64", ids.shape, ids.tobytes()),
        ("transformer.h.0.weight", "F32", weight.shape, weight.tobytes()),
        ("empty", "F32", empty.shape, b""),
        ("scalar", "F32", scalar.shape, scalar.tobytes()),
        ("half", "F16", half.shape, half_bits.tobytes()),
        ("bf", "BF16", bf_bits.shape, bf_bits.tobytes()),
    ]
    write_safetensors(os.path.join(OUT, "interop.safetensors"), tensors, {"format": "pt", "note": "h\u00e9llo"})
    np.save(os.path.join(OUT, "interop_weight.npy"), weight)
    np.save(os.path.join(OUT, "interop_scalar.npy"), scalar)
    np.save(os.path.join(OUT, "interop_empty.npy"), empty)
    np.save(os.path.join(OUT, "interop_half.npy"), half_expected)
    np.save(os.path.join(OUT, "interop_bf.npy"), bf_expected)


if __name__ == "__main__":
    main()
