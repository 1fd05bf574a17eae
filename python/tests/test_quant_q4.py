"""The q4 format from Python: jomoim.quantize_q4, dequantize_q4 and attention_q4kv.

The format's definition (docs/design.md, jomoim/engine/quant.hpp) is re-implemented in NumPy
below and the module must match it bit for bit; attention_q4kv must match the float64 formula
on the dequantized keys and values (jomoim.attention_reference on dequantize_q4's arrays).
"""
import numpy as np
import pytest

import jomoim
from test_quant import EPS, check_quantized, rng


def np_quantize(x, block):
    """The q4 definition in float32 NumPy: d = max|x| / 7, q = round_half_even(x * (1 / d)) in
    [-7, 7], stored q + 8; byte i of a row: value i low, value i + D / 2 high."""
    x = np.asarray(x, dtype=np.float32)
    D = x.shape[-1]
    blocks = x.reshape(x.shape[:-1] + (D // block, block))
    d = (np.abs(blocks).max(axis=-1, initial=np.float32(0)) / np.float32(7)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = (np.clip(np.rint(blocks * inv[..., None]), -7, 7) + 8).astype(np.uint8).reshape(x.shape)
    return (q[..., : D // 2] | (q[..., D // 2:] << 4)).astype(np.uint8), d


def np_dequantize(values, scales):
    D = 2 * values.shape[-1]
    q = np.concatenate([values & 0x0F, values >> 4], axis=-1).astype(np.int32) - 8
    return (np.repeat(scales, D // scales.shape[-1], axis=-1) * q).astype(np.float32)


@pytest.mark.parametrize("shape,block", [
    ((32,), 32),
    ((3, 64), 32),
    ((2, 5, 64), 64),
    ((2, 3, 7, 96), 32),
    ((1, 2, 4, 128), 128),
    ((1, 1, 0, 32), 32),
    ((0, 2, 3, 64), 32),
])
def test_quantize_matches_the_definition_and_round_trips(shape, block):
    r = rng(hash((shape, block)) % 2**32)
    x = (r.standard_normal(shape) * r.uniform(0.01, 100)).astype(np.float32)
    if x.size:
        x.reshape(-1)[: min(x.size, block)] = 0  # a block of zeros: scale 0, values 0
        x.reshape(-1)[-1] = 1e-30  # tiny next to its block
    values, scales = jomoim.quantize_q4(x, block=block)
    assert values.dtype == np.uint8 and values.shape == x.shape[:-1] + (shape[-1] // 2,)
    assert values.flags.c_contiguous
    assert scales.dtype == np.float32 and scales.shape == x.shape[:-1] + (shape[-1] // block,)
    want_q, want_d = np_quantize(x, block)
    np.testing.assert_array_equal(values, want_q)
    np.testing.assert_array_equal(scales, want_d)
    nibbles = np.concatenate([values & 0x0F, values >> 4], axis=-1)
    assert ((nibbles >= 1) & (nibbles <= 15)).all()
    back = jomoim.dequantize_q4(values, scales)
    assert back.dtype == np.float32 and back.shape == x.shape
    np.testing.assert_array_equal(back, np_dequantize(values, scales))
    bound = np.repeat(scales, block, axis=-1) * np.float32(0.5 + 4 * EPS) + np.abs(x) * 4 * EPS
    assert (np.abs(back - x) <= bound).all()
    np.testing.assert_array_equal(jomoim.dequantize_q4(values, scales, block=block), back)


def test_quantize_reads_strided_views():
    x = rng(3).standard_normal((2, 6, 4, 64)).astype(np.float32)
    view = x.transpose(0, 2, 1, 3)  # [B, N, H, D] memory read as [B, H, N, D]
    before = x.copy()
    a = jomoim.quantize_q4(view)
    b = jomoim.quantize_q4(np.ascontiguousarray(view))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("call,exc,message", [
    (lambda: jomoim.quantize_q4(np.zeros((2, 64), np.float64)), TypeError, "x: expected dtype float32"),
    (lambda: jomoim.quantize_q4(np.zeros((2, 64), np.float32), block=16), jomoim.Error, "multiple of 32, got 16"),
    (lambda: jomoim.quantize_q4(np.zeros((2, 64), np.float32), block=128), jomoim.Error,
     "does not divide D = 64"),
    (lambda: jomoim.quantize_q4(np.zeros((1, 1, 1, 2, 64), np.float32)), jomoim.Error, "rank 1 to 4"),
    (lambda: jomoim.dequantize_q4(np.zeros((2, 32), np.int8), np.ones((2, 2), np.float32)), TypeError,
     "q4 values: expected dtype uint8"),
    (lambda: jomoim.dequantize_q4(np.zeros((2, 32), np.uint8), np.ones((3, 2), np.float32)), jomoim.Error,
     "q4 scales: shape"),
    (lambda: jomoim.dequantize_q4(np.zeros((2, 32), np.uint8), np.ones((2, 4), np.float32)), jomoim.Error,
     "multiple of 32, got 16"),
])
def test_refusals(call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_with_their_index(bad):
    x = np.ones((2, 3, 4, 32), np.float32)
    x[1, 2, 3, 5] = bad
    with pytest.raises(jomoim.Error, match=r"non-finite value .* at index \[1, 2, 3, 5\]"):
        jomoim.quantize_q4(x)


# (B, Hq, Hkv, Nq, Nk, D, Dv, block): decode, grouped, key counts across tiles of 256, a prompt.
SHAPES = [
    (1, 1, 1, 1, 1, 32, 32, 32),
    (1, 4, 1, 1, 7, 32, 64, 32),
    (2, 8, 2, 1, 301, 64, 64, 32),
    (1, 6, 3, 3, 600, 96, 32, 32),
    (2, 4, 4, 17, 65, 128, 64, 64),
    (1, 32, 8, 1, 1000, 128, 128, 32),
]


def q4_problem(shape, seed):
    B, Hq, Hkv, Nq, Nk, D, Dv, block = shape
    r = rng(seed)
    q = r.uniform(-1, 1, (B, Hq, Nq, D)).astype(np.float32)
    k = r.uniform(-2, 2, (B, Hkv, Nk, D)).astype(np.float32)
    v = r.uniform(-1, 1, (B, Hkv, Nk, Dv)).astype(np.float32)
    return q, jomoim.quantize_q4(k, block=block), jomoim.quantize_q4(v, block=min(block, Dv))


def check_q4(q, k4, v4, **kw):
    return check_quantized(jomoim.attention_q4kv, jomoim.dequantize_q4, q, k4, v4, **kw)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_attention_q4kv_matches_float64_on_the_dequantized_inputs(shape, causal):
    q, k4, v4 = q4_problem(shape, hash((shape, causal)) % 2**32)
    check_q4(q, k4, v4, causal=causal)


def test_attention_q4kv_options_and_every_target():
    q, k4, v4 = q4_problem((2, 8, 2, 2, 523, 64, 64, 32), 5)
    check_q4(q, k4, v4, key_lengths=[523, 0], causal=True)
    assert (jomoim.attention_q4kv(q, k4, v4, key_lengths=[523, 0])[1] == 0).all()
    bias = np.where(rng(6).uniform(size=(1, 8, 2, 523)) < 0.3, -np.inf, 0.5).astype(np.float32)
    check_q4(q, k4, v4, bias=bias, scale=0.3)
    out_c = jomoim.attention_q4kv(np.swapaxes(q, 2, 3), k4, v4, notation="3b1b")
    np.testing.assert_array_equal(np.swapaxes(out_c, 2, 3), jomoim.attention_q4kv(q, k4, v4))
    try:
        for t in jomoim.simd_targets():
            jomoim.set_simd_target(t)
            for threads in (1, 2):
                check_q4(q, k4, v4, causal=True, threads=threads)
    finally:
        jomoim.set_simd_target("")


def test_q4_error_against_float32_is_q8s_times_the_resolution_ratio():
    """The format's error against float32 attention on unrounded random inputs (not a kernel's):
    q4's 7 levels a side against q8's 127 should cost about 127 / 7 = 18x q8's mean error
    (measured 16-19x at D 64-128, 500-4,096 keys), and stay small next to the values."""
    r = rng(9)
    q = r.standard_normal((1, 8, 1, 64)).astype(np.float32)
    k = r.standard_normal((1, 2, 500, 64)).astype(np.float32)
    v = r.standard_normal((1, 2, 500, 64)).astype(np.float32)
    exact = jomoim.attention(q, k, v)
    e4 = np.abs(jomoim.attention_q4kv(q, jomoim.quantize_q4(k), jomoim.quantize_q4(v)) - exact).mean()
    e8 = np.abs(jomoim.attention_q8kv(q, jomoim.quantize_q8(k), jomoim.quantize_q8(v)) - exact).mean()
    assert 8 * e8 < e4 < 40 * e8
    assert e4 < 0.005 * np.abs(v).max()


def test_attention_q4kv_refusals():
    q, k4, v4 = q4_problem((1, 4, 2, 1, 33, 32, 32, 32), 8)
    cases = [
        ((q, k4[0], v4), TypeError, "k: expected a \\(values, scales\\) pair from quantize_q4"),
        ((q, (k4[0].view(np.int8), k4[1]), v4), TypeError, "k values: expected dtype uint8"),
        ((q, (k4[0][0], k4[1][0]), v4), jomoim.Error, "k values: expected a rank-4 array"),
        ((q, (k4[0], k4[1][:, :, :5]), v4), jomoim.Error, "k scales: shape"),
        ((q, jomoim.quantize_q4(np.zeros((1, 2, 33, 64), np.float32)), v4), jomoim.Error, ""),  # D differs from q's
        ((q[:, :3], k4, v4), jomoim.Error, "Hq"),
    ]
    for args, exc, message in cases:
        with pytest.raises(exc, match=message) as info:
            jomoim.attention_q4kv(*args)
        assert "\n" not in str(info.value)


def test_docs_and_stubs_name_the_functions():
    assert jomoim.quantize_q4.__doc__.startswith("quantize_q4(x, *, block=32) -> (values, scales)")
    assert jomoim.dequantize_q4.__doc__.startswith("dequantize_q4(values, scales, *, block=None)")
    assert jomoim.attention_q4kv.__doc__.startswith("attention_q4kv(q, k, v, *, causal=False")
    for name in ("quantize_q4", "dequantize_q4", "attention_q4kv"):
        assert name in jomoim.__all__
