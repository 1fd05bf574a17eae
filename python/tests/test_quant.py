"""The q8 format from Python: jomoim.quantize_q8, dequantize_q8 and attention_q8kv.

The format's definition (docs/design.md, jomoim/engine/quant.hpp) is re-implemented in NumPy
below and the module must match it bit for bit; attention_q8kv must match the float64 formula
on the dequantized keys and values (jomoim.attention_reference on dequantize_q8's arrays).
"""
import numpy as np
import pytest

import jomoim

EPS = float(np.finfo(np.float32).eps)


def rng(seed):
    return np.random.default_rng(seed)


def np_quantize(x, block):
    """The q8 definition in float32 NumPy: d = max|x| / 127, q = round_half_even(x * (1 / d))."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))
    d = (np.abs(blocks).max(axis=-1, initial=np.float32(0)) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inv[..., None]), -127, 127).astype(np.int8)
    return q.reshape(x.shape), d


@pytest.mark.parametrize("shape,block", [
    ((16,), 16),
    ((3, 32), 32),
    ((2, 5, 64), 16),
    ((2, 3, 7, 96), 32),
    ((1, 2, 4, 128), 128),
    ((2, 1, 3, 48), 48),
    ((1, 1, 0, 32), 32),
    ((0, 2, 3, 32), 16),
])
def test_quantize_matches_the_definition_and_round_trips(shape, block):
    r = rng(hash((shape, block)) % 2**32)
    x = (r.standard_normal(shape) * r.uniform(0.01, 100)).astype(np.float32)
    if x.size:
        x.reshape(-1)[: min(x.size, block)] = 0  # a block of zeros: scale 0, values 0
        x.reshape(-1)[-1] = 1e-30  # tiny next to its block
    values, scales = jomoim.quantize_q8(x, block=block)
    assert values.dtype == np.int8 and values.shape == x.shape and values.flags.c_contiguous
    assert scales.dtype == np.float32 and scales.shape == x.shape[:-1] + (shape[-1] // block,)
    want_q, want_d = np_quantize(x, block)
    np.testing.assert_array_equal(values, want_q)
    np.testing.assert_array_equal(scales, want_d)
    assert (np.abs(values.astype(np.int32)) <= 127).all()
    back = jomoim.dequantize_q8(values, scales)
    assert back.dtype == np.float32 and back.shape == x.shape
    np.testing.assert_array_equal(back, (np.repeat(scales, block, axis=-1) * values).astype(np.float32))
    # |x - d q| <= d / 2 (plus the rounding of d q and of x / d)
    bound = np.repeat(scales, block, axis=-1) * np.float32(0.5 + 4 * EPS) + np.abs(x) * 4 * EPS
    assert (np.abs(back - x) <= bound).all()
    np.testing.assert_array_equal(jomoim.dequantize_q8(values, scales, block=block), back)
    # Quantizing the round trip again gives the same q8 tensor.
    v2, s2 = jomoim.quantize_q8(back, block=block)
    np.testing.assert_array_equal(v2, values)
    np.testing.assert_allclose(s2, scales, rtol=2 * EPS, atol=0)


def test_quantize_reads_strided_views_and_leaves_the_input_alone():
    r = rng(3)
    base = r.standard_normal((2, 64, 5, 3)).astype(np.float32)
    x = np.swapaxes(base, 1, 3)[:, ::1, :, :]  # [2, 3, 5, 64], last axis strided
    assert not x.flags.c_contiguous
    copy = base.copy()
    values, scales = jomoim.quantize_q8(x)
    np.testing.assert_array_equal(base, copy)
    want_v, want_s = jomoim.quantize_q8(np.ascontiguousarray(x))
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(scales, want_s)
    # non-contiguous q8 arrays are read through a C-order copy
    np.testing.assert_array_equal(jomoim.dequantize_q8(values[:, ::2], scales[:, ::2]),
                                  jomoim.dequantize_q8(values, scales)[:, ::2])


@pytest.mark.parametrize("call,exc,message", [
    (lambda: jomoim.quantize_q8(np.zeros((2, 64))), TypeError, "x: expected dtype float32"),
    (lambda: jomoim.quantize_q8([1.0] * 32), TypeError, "x: expected a numpy.ndarray of float32, got list"),
    (lambda: jomoim.quantize_q8(np.zeros((2, 64), np.float32), block=8), jomoim.Error, "multiple of 16, got 8"),
    (lambda: jomoim.quantize_q8(np.zeros((2, 64), np.float32), block=0), jomoim.Error, "multiple of 16, got 0"),
    (lambda: jomoim.quantize_q8(np.zeros((2, 64), np.float32), block=48), jomoim.Error, "48 does not divide D = 64"),
    (lambda: jomoim.quantize_q8(np.zeros((2, 64), np.float32), block=32.0), TypeError, "block: expected an integer"),
    (lambda: jomoim.quantize_q8(np.float32(1)), TypeError, "x: expected a numpy.ndarray"),
    (lambda: jomoim.quantize_q8(np.zeros((), np.float32)), jomoim.Error, "rank 1 to 4"),
    (lambda: jomoim.quantize_q8(np.zeros((1, 1, 1, 1, 32), np.float32)), jomoim.Error, "rank 1 to 4"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int16), np.ones((2, 2), np.float32)), TypeError,
     "q8 values: expected dtype int8"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((2, 2), np.float64)), TypeError,
     "q8 scales: expected dtype float32"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((3, 2), np.float32)), jomoim.Error,
     "q8 scales: shape"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((2, 3), np.float32)), jomoim.Error,
     "3 blocks a row do not divide D = 64"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((2,), np.float32)), jomoim.Error,
     "q8 scales: shape"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((2, 8), np.float32)), jomoim.Error,
     "multiple of 16, got 8"),
    (lambda: jomoim.dequantize_q8(np.zeros((2, 64), np.int8), np.ones((2, 2), np.float32), block=16),
     jomoim.Error, "q8 scales: shape"),
])
def test_refusals(call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_block_is_keyword_only():
    with pytest.raises(TypeError):
        jomoim.quantize_q8(np.zeros(64, np.float32), 32)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_with_their_index(bad):
    x = np.ones((2, 3, 4, 32), np.float32)
    x[1, 2, 3, 5] = bad
    with pytest.raises(jomoim.Error, match=r"non-finite value .* at index \[1, 2, 3, 5\]"):
        jomoim.quantize_q8(x)


# (B, Hq, Hkv, Nq, Nk, D, Dv, block): decode, grouped, odd key counts, one block a row, a prompt.
SHAPES = [
    (1, 1, 1, 1, 1, 16, 16, 16),
    (1, 4, 1, 1, 7, 32, 32, 32),
    (2, 8, 2, 1, 301, 64, 64, 32),
    (1, 6, 3, 3, 129, 48, 16, 16),
    (2, 4, 4, 17, 65, 128, 64, 128),
    (1, 32, 8, 1, 1000, 128, 128, 32),
]


def q8_problem(shape, seed):
    B, Hq, Hkv, Nq, Nk, D, Dv, block = shape
    r = rng(seed)
    q = r.uniform(-1, 1, (B, Hq, Nq, D)).astype(np.float32)
    k = r.uniform(-2, 2, (B, Hkv, Nk, D)).astype(np.float32)
    v = r.uniform(-1, 1, (B, Hkv, Nk, Dv)).astype(np.float32)
    return q, jomoim.quantize_q8(k, block=block), jomoim.quantize_q8(v, block=min(block, Dv))


def check_quantized(attend, dequantize, q, kq, vq, **kw):
    """attend(q, kq, vq, **kw) (attention_q8kv or attention_q4kv) against the float64 reference on
    dequantize(*kq), dequantize(*vq); returns the output. Also used by test_quant_q4.py."""
    out, lse = attend(q, kq, vq, return_lse=True, **kw)
    kd, vd = dequantize(*kq), dequantize(*vq)
    ref_kw = {key: val for key, val in kw.items() if key != "threads"}
    want, want_lse = jomoim.attention_reference(q, kd, vd, return_lse=True, **ref_kw)
    assert out.dtype == np.float32 and out.shape == want.shape and out.flags.c_contiguous
    vmax = float(np.abs(vd).max()) if vd.size else 0.0
    np.testing.assert_allclose(out, want, rtol=0, atol=64 * EPS * (vmax + 1))
    live = ~np.isneginf(want_lse)
    np.testing.assert_array_equal(np.isneginf(lse), ~live)
    np.testing.assert_allclose(lse[live], want_lse[live], rtol=64 * EPS, atol=64 * EPS)
    return out


def check_q8(q, k8, v8, **kw):
    return check_quantized(jomoim.attention_q8kv, jomoim.dequantize_q8, q, k8, v8, **kw)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_attention_q8kv_matches_float64_on_the_dequantized_inputs(shape, causal):
    q, k8, v8 = q8_problem(shape, hash((shape, causal)) % 2**32)
    out = check_q8(q, k8, v8, causal=causal)
    # against float32 attention on the unrounded keys: the format's error, not a bug's
    k, v = (jomoim.dequantize_q8(*a) for a in (k8, v8))
    assert np.abs(out - jomoim.attention(q, k, v, causal=causal)).max() < 1e-4


def test_attention_q8kv_options():
    q, k8, v8 = q8_problem((2, 4, 2, 5, 40, 32, 32, 32), 5)
    check_q8(q, k8, v8, key_lengths=[40, 0], causal=True)  # batch 1: every key masked
    out = jomoim.attention_q8kv(q, k8, v8, key_lengths=[40, 0])
    assert (out[1] == 0).all()
    bias = np.where(rng(6).uniform(size=(1, 4, 5, 40)) < 0.3, -np.inf, 0.5).astype(np.float32)
    check_q8(q, k8, v8, bias=bias, scale=0.3)
    # 3b1b notation: q and out are column matrices, k and v stay in the q8 layout
    qc = np.swapaxes(q, 2, 3)
    out_c = jomoim.attention_q8kv(qc, k8, v8, notation="3b1b")
    np.testing.assert_array_equal(np.swapaxes(out_c, 2, 3), jomoim.attention_q8kv(q, k8, v8))


def test_attention_q8kv_every_simd_target_and_thread_count():
    q, k8, v8 = q8_problem((1, 8, 2, 2, 523, 64, 64, 32), 7)
    try:
        for t in jomoim.simd_targets():
            jomoim.set_simd_target(t)
            for threads in (1, 2):
                a = check_q8(q, k8, v8, causal=True, threads=threads)
                np.testing.assert_array_equal(a, jomoim.attention_q8kv(q, k8, v8, causal=True, threads=threads))
    finally:
        jomoim.set_simd_target("")


def test_attention_q8kv_refusals():
    q, k8, v8 = q8_problem((1, 4, 2, 1, 33, 32, 32, 32), 8)
    cases = [
        ((q, k8[0], v8), TypeError, "k: expected a \\(values, scales\\) pair"),
        ((q, (k8[0],), v8), TypeError, "k: expected a \\(values, scales\\) pair from quantize_q8, got 1 items"),
        ((q.astype(np.float64), k8, v8), TypeError, "q: expected dtype float32"),
        ((q, (k8[0].astype(np.int16), k8[1]), v8), TypeError, "k values: expected dtype int8"),
        ((q, (k8[0][0], k8[1][0]), v8), jomoim.Error, "k values: expected a rank-4 array"),
        ((q, (k8[0], k8[1][:, :, :5]), v8), jomoim.Error, "k scales: shape"),
        ((q, k8, (v8[0][:, :, :9], v8[1][:, :, :9])), jomoim.Error, ""),  # Nk differs between k and v
        ((q[:, :3], k8, v8), jomoim.Error, "Hq"),
    ]
    for args, exc, message in cases:
        with pytest.raises(exc, match=message) as info:
            jomoim.attention_q8kv(*args)
        assert "\n" not in str(info.value)
    with pytest.raises(TypeError):
        jomoim.attention_q8kv(q, k8, v8, return_probs=True)  # not offered


def test_docs_and_stubs_name_the_functions():
    assert jomoim.quantize_q8.__doc__.startswith("quantize_q8(x, *, block=32) -> (values, scales)")
    assert jomoim.dequantize_q8.__doc__.startswith("dequantize_q8(values, scales, *, block=None)")
    assert jomoim.attention_q8kv.__doc__.startswith("attention_q8kv(q, k, v, *, causal=False")
    for name in ("quantize_q8", "dequantize_q8", "attention_q8kv"):
        assert name in jomoim.__all__
