#!/usr/bin/env python3
"""test_numpy_interop.py: `jomoim attend` and NumPy reading each other's .npy files.

NumPy writes the inputs (np.save, including arrays that are not C-contiguous and files NumPy
writes in ways jomoim must refuse), jomoim computes attention, and the result is checked against
a float64 NumPy implementation of the contract in docs/design.md; every file jomoim writes must load
with np.load (and memory-map, which needs the 64-byte alignment). Run by CTest (label cli)
with Debian's interpreter, which has NumPy:

    /usr/bin/python3 tests/test_numpy_interop.py build/release/jomoim

Prints one line per case and "N passed, N failed"; exits non-zero when a case failed.
"""
import io
import os
import subprocess
import sys
import tempfile
import traceback

import numpy as np

EXE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None


def attention(q, k, v, dtype, causal=False, scale=None, bias=None, key_lengths=None):
    """softmax(q k^T * scale + bias, masked) v in the paper layout, computed in `dtype`.

    q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv]; returns out [B, Hq, Nq, Dv],
    lse [B, Hq, Nq], probs [B, Hq, Nq, Nk]. Fully masked rows give zeros and lse = -inf.
    """
    q, k, v = (np.asarray(a, dtype) for a in (q, k, v))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k = np.repeat(k, Hq // Hkv, axis=1)  # query head h reads key/value head h // (Hq // Hkv)
    v = np.repeat(v, Hq // Hkv, axis=1)
    scale = dtype(1 / np.sqrt(D)) if scale is None else dtype(scale)
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if bias is not None:
        s = s + np.asarray(bias, dtype)
    lengths = [Nk] * B if key_lengths is None else key_lengths
    i = np.arange(Nq)[:, None]
    j = np.arange(Nk)[None, :]
    visible = np.zeros((B, 1, Nq, Nk), bool)
    for b, L in enumerate(lengths):
        vis = np.broadcast_to(j < L, (Nq, Nk))
        if causal:  # aligned bottom-right
            vis = vis & (j <= i + (L - Nq))
        visible[b, 0] = vis
    s = np.where(visible, s, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s.max(axis=-1, keepdims=True) if Nk else np.full(s.shape[:-1] + (1,), -np.inf, dtype)
        masked = m == -np.inf
        m = np.where(masked, 0, m).astype(dtype)
        e = np.exp(s - m)
        total = np.where(masked, 1, e.sum(axis=-1, keepdims=True)).astype(dtype)
        p = np.where(masked, 0, e / total).astype(dtype)
        lse = np.where(masked, -np.inf, m + np.log(total))[..., 0].astype(dtype)
    return (p @ v).astype(dtype), lse, p


def check_close(name, actual, expected64, naive32, scale_of_values):
    """The tolerance of test_cli.cpp: 4 x a naive float32 computation's error + 16 float32
    epsilons of the quantity's scale; -inf must match exactly."""
    assert actual.shape == expected64.shape, f"{name}: shape {actual.shape} != {expected64.shape}"
    assert actual.dtype == np.float32, f"{name}: dtype {actual.dtype}"
    finite = np.isfinite(expected64)
    assert np.array_equal(np.isfinite(actual), finite), f"{name}: non-finite entries differ"
    assert np.all(actual[~finite] == expected64[~finite]), f"{name}: -inf entries differ"
    if not finite.any():
        return
    naive_err = np.max(np.abs(naive32[finite].astype(np.float64) - expected64[finite]))
    tol = 4 * naive_err + 16 * np.finfo(np.float32).eps * scale_of_values
    err = np.abs(actual[finite].astype(np.float64) - expected64[finite])
    worst = int(np.argmax(err))
    assert err[worst] <= tol, (f"{name}: error {err[worst]:.3g} > tolerance {tol:.3g} at finite entry {worst}: "
                               f"expected {expected64[finite][worst]!r}, got {actual[finite][worst]!r}")


class Dir:
    """A fresh working directory per case; run() calls `jomoim attend` in it."""

    def __init__(self, path):
        self.path = path

    def __call__(self, name):
        return os.path.join(self.path, name)

    def save(self, name, array):
        np.save(self(name), array)

    def run(self, *args):
        return subprocess.run([EXE, "attend", *args], cwd=self.path, capture_output=True, text=True, timeout=120)

    def files(self):
        return sorted(os.listdir(self.path))


def load_written(path):
    """np.load must read what jomoim wrote, also memory-mapped; the header is version 1.0,
    C order, float32, with the data at a multiple of 64 bytes."""
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        assert not fortran and dtype == np.dtype("<f4"), (fortran, dtype)
        assert f.tell() % 64 == 0, f.tell()
    a = np.load(path)
    m = np.load(path, mmap_mode="r")
    assert a.shape == shape and np.array_equal(a, m, equal_nan=True)
    # NumPy 1.23+ pads the header for in-place growth; jomoim writes the same bytes.
    if hasattr(np.lib.format, "GROWTH_AXIS_MAX_DIGITS"):
        buf = io.BytesIO()
        np.save(buf, a)
        with open(path, "rb") as f:
            assert f.read() == buf.getvalue(), f"{path}: bytes differ from np.save's"
    return a


def expect_refused(d, args, problem):
    before = d.files()
    r = d.run(*args)
    assert r.returncode != 0, "accepted"
    assert r.stdout == "", r.stdout
    assert r.stderr.startswith("jomoim: error: ") and r.stderr.count("\n") == 1, repr(r.stderr)
    assert problem in r.stderr, f"{r.stderr!r} does not mention {problem!r}"
    assert d.files() == before, f"files changed: {before} -> {d.files()}"


def inputs(rng, B, Hq, Hkv, Nq, Nk, D, Dv):
    q = rng.uniform(-1, 1, (B, Hq, Nq, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, Hkv, Nk, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, Hkv, Nk, Dv)).astype(np.float32)
    return q, k, v


def run_and_check(d, q, k, v, extra_args=(), outputs=("out",), **ref_args):
    args = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy", *extra_args]
    for name in outputs[1:]:
        args += [f"--{name}", f"{name}.npy"]
    r = d.run(*args)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    ref = dict(zip(("out", "lse", "probs"), attention(q, k, v, np.float64, **ref_args)))
    naive = dict(zip(("out", "lse", "probs"), attention(q, k, v, np.float32, **ref_args)))
    lse_scale = max(1.0, float(np.max(np.abs(ref["lse"][np.isfinite(ref["lse"])]), initial=0)))
    scales = {"out": float(np.max(np.abs(v), initial=0)), "lse": lse_scale, "probs": 1.0}
    for name in outputs:
        check_close(name, load_written(d(f"{name}.npy")), ref[name], naive[name], scales[name])


# ------------------------------------------------------------------------------------ cases

def case_basic(d, rng):
    q, k, v = inputs(rng, 2, 3, 3, 7, 11, 16, 8)
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    run_and_check(d, q, k, v, outputs=("out", "lse", "probs"))


def case_non_contiguous_inputs(d, rng):
    # A strided slice and an axis-swapped array: np.save writes both in C order
    # (fortran_order False), so jomoim must read them exactly.
    q_big, k_t, v = inputs(rng, 1, 2, 2, 10, 9, 6, 5)
    q = q_big[:, :, ::2, :]
    k = np.swapaxes(rng.uniform(-1, 1, (1, 2, 6, 9)).astype(np.float32), 2, 3)
    assert not q.flags.c_contiguous and not k.flags.c_contiguous and not k.flags.f_contiguous
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    for name in ("q.npy", "k.npy"):
        with open(d(name), "rb") as f:
            np.lib.format.read_magic(f)
            assert np.lib.format.read_array_header_1_0(f)[1] is False
    run_and_check(d, q, k, v)


def case_fortran_order_refused(d, rng):
    q, k, v = inputs(rng, 1, 2, 2, 4, 5, 3, 3)
    np.save(d("q.npy"), np.asfortranarray(q))  # NumPy writes fortran_order True for these
    d.save("k.npy", k), d.save("v.npy", v)
    with open(d("q.npy"), "rb") as f:
        np.lib.format.read_magic(f)
        assert np.lib.format.read_array_header_1_0(f)[1] is True
    expect_refused(d, ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy", "--lse", "l.npy"],
                   "--q q.npy: array is stored in Fortran (column-major) order")


def case_other_dtypes_refused(d, rng):
    q, k, v = inputs(rng, 1, 2, 2, 4, 5, 3, 3)
    d.save("k.npy", k), d.save("v.npy", v)
    for name, array, problem in [
        ("q64.npy", q.astype(np.float64), "'<f8' (float64)"),
        ("qbe.npy", q.astype(">f4"), "'>f4' (big-endian float32)"),
        ("qi.npy", (q * 10).astype(np.int32), "'<i4' (int32)"),
    ]:
        d.save(name, array)
        expect_refused(d, ["--q", name, "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], problem)


def bf16_bits(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # nearest, ties to even


def case_float16_and_bfloat16_inputs(d, rng):
    # f16 ('<f2') with --dtype f16 or auto, bf16 as '<u2' bit patterns with --dtype bf16; the
    # oracle is float64 on the same rounded numbers. Without --dtype the contract holds: float32.
    q, k, v = inputs(rng, 2, 4, 2, 9, 13, 16, 8)
    h = [a.astype(np.float16) for a in (q, k, v)]
    for name, a in zip("qkv", h):
        d.save(f"{name}.npy", a)
    run_and_check(d, *(a.astype(np.float32) for a in h), ["--causal", "--dtype", "f16"], ("out", "lse", "probs"),
                  causal=True)
    run_and_check(d, *(a.astype(np.float32) for a in h), ["--dtype", "auto"], ("out",))
    expect_refused(d, ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"],
                   "--q q.npy: data type '<f2' does not match --dtype f32")
    b = [bf16_bits(a) for a in (q, k, v)]
    for name, a in zip("qkv", b):
        d.save(f"{name}.npy", a)
    wide = [(a.astype(np.uint32) << 16).view(np.float32) for a in b]
    run_and_check(d, *wide, ["--dtype", "bf16"], ("out", "lse"))
    # '<u2' needs --dtype bf16; types must agree among Q, K, V and with --dtype
    expect_refused(d, ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"],
                   "'<u2' (uint16) is read only as bfloat16 bits, with --dtype bf16")
    d.save("kh.npy", h[1]), d.save("q32.npy", q)
    expect_refused(d, ["--q", "q.npy", "--k", "kh.npy", "--v", "v.npy", "--out", "out.npy", "--dtype", "bf16"],
                   "--k kh.npy: data type '<f2' does not match --dtype bf16")
    expect_refused(d, ["--q", "q32.npy", "--k", "kh.npy", "--v", "v.npy", "--out", "out.npy", "--dtype", "auto"],
                   "--k kh.npy: data type '<f2', but --q is '<f4'")
    expect_refused(d, ["--q", "q32.npy", "--k", "kh.npy", "--v", "v.npy", "--out", "out.npy", "--dtype", "f64"],
                   "--dtype: expected auto, f32, f16 or bf16, got 'f64'")


def cpu_has_avx512_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512_bf16" in line for line in f)
    except OSError:
        return False


def case_bf16_weights(d, rng):
    # --bf16-weights: the softmax weights rounded to bf16 for P·V (VDPBF16PS where the CPU has
    # AVX512_BF16; elsewhere nothing changes). Each output moves by at most 2^-8 sum_j p_j |v_j|
    # beyond float32's error, from the float64 oracle's weights on the same rounded inputs; lse
    # stays float32's. A prefill-shaped and a decode-shaped (grouped-query) call; refused without
    # bfloat16 inputs and with --distributed.
    for B, Hq, Hkv, Nq, Nk, D, Dv in ((1, 4, 2, 70, 300, 64, 48), (2, 8, 2, 1, 257, 32, 64)):
        q, k, v = inputs(rng, B, Hq, Hkv, Nq, Nk, D, Dv)
        b = [bf16_bits(a) for a in (q, k, v)]
        for name, a in zip("qkv", b):
            d.save(f"{name}.npy", a)
        wq, wk, wv = [(a.astype(np.uint32) << 16).view(np.float32) for a in b]
        r = d.run("--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy", "--lse", "lse.npy",
                  "--dtype", "bf16", "--bf16-weights")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        ref_out, ref_lse, ref_p = attention(wq, wk, wv, np.float64)
        absv = np.repeat(np.abs(wv.astype(np.float64)), Hq // Hkv, axis=1)
        moved = 2.0**-8 * (ref_p @ absv) + 1e-5 * float(np.max(np.abs(wv)))
        err = np.abs(load_written(d("out.npy")).astype(np.float64) - ref_out)
        assert np.all(err <= moved), f"out off by {float(np.max(err - moved))} beyond the weights' rounding"
        lse_err = np.abs(load_written(d("lse.npy")).astype(np.float64) - ref_lse)
        assert float(np.max(lse_err)) <= 1e-5 * max(1.0, float(np.max(np.abs(ref_lse)))), float(np.max(lse_err))
        if cpu_has_avx512_bf16():  # the option reached the engine: other bits than float32 P·V
            r = d.run("--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "plain.npy", "--dtype", "bf16")
            assert r.returncode == 0 and r.stderr == "", r.stderr
            assert not np.array_equal(load_written(d("plain.npy")), load_written(d("out.npy"))), "option ignored"
    h = [a.astype(np.float16) for a in (q, k, v)]
    for name, a in zip("qkv", h):
        d.save(f"h{name}.npy", a)
    expect_refused(d, ["--q", "hq.npy", "--k", "hk.npy", "--v", "hv.npy", "--out", "out2.npy", "--dtype", "f16",
                       "--bf16-weights"], "--bf16-weights: needs bfloat16 inputs (--dtype bf16); these are f16")
    expect_refused(d, ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out2.npy", "--distributed",
                       "--bf16-weights"], "--bf16-weights: --distributed reads float32 files only")


def q8_round_trip(x, block):
    """The q8 format's numbers (docs/design.md): d = max|x| / 127 per block along the last
    axis, q = round_half_even(x * (1 / d)), in float32; returns d * q."""
    x = np.ascontiguousarray(x, np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))
    d = (np.abs(blocks).max(axis=-1, initial=np.float32(0)) / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inv[..., None]), -127, 127).astype(np.float32)
    return (q * d[..., None]).astype(np.float32).reshape(x.shape)


def case_kv_q8(d, rng):
    # --kv-q8: K and V quantized by jomoim to 8-bit blocks, then attention on them; the oracle
    # is float64 on the same rounded numbers (a NumPy transcription of the format). Grouped
    # decode and a causal prompt, blocks of 32 and of 16, both notations (a 3b1b file's rows
    # along D are its columns); refusals name the problem and write nothing.
    for (B, Hq, Hkv, Nq, Nk, D, Dv), block, extra, kw in [
        ((1, 8, 2, 1, 301, 64, 32), 32, [], {}),
        ((2, 4, 4, 19, 40, 32, 48), 16, ["--causal", "--q8-block", "16"], {"causal": True}),
    ]:
        q, k, v = inputs(rng, B, Hq, Hkv, Nq, Nk, D, Dv)
        kq, vq = q8_round_trip(k, block), q8_round_trip(v, block)
        assert not np.array_equal(kq, k)  # the rounding is there to see
        d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
        run_and_check_on(d, (q, k, v), (q, kq, vq), ["--kv-q8", *extra], ("out", "lse"), **kw)
        r = d.run("--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "plain.npy", *extra[:1])
        assert r.returncode == 0, r.stderr
        err = np.abs(load_written(d("plain.npy")) - load_written(d("out.npy")))
        assert 0 < float(err.max()) < 0.05, float(err.max())  # q8's error against float32 attention
    # 3b1b: Q, K, V, OUT as column matrices
    q, k, v = inputs(rng, 1, 4, 2, 3, 33, 32, 64)
    tq, tk, tv = (np.ascontiguousarray(np.swapaxes(a, 2, 3)) for a in (q, k, v))
    d.save("qc.npy", tq), d.save("kc.npy", tk), d.save("vc.npy", tv)
    r = d.run("--q", "qc.npy", "--k", "kc.npy", "--v", "vc.npy", "--out", "oc.npy", "--kv-q8", "--notation", "3b1b")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    want = attention(q, q8_round_trip(k, 32), q8_round_trip(v, 32), np.float64)[0]
    np.testing.assert_allclose(np.swapaxes(load_written(d("oc.npy")), 2, 3), want, rtol=0, atol=1e-5)
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    base = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o2.npy"]
    expect_refused(d, base + ["--kv-q8", "--probs", "p.npy"],
                   "--kv-q8: attention on q8 keys and values writes no --probs")
    expect_refused(d, base + ["--kv-q8", "--q8-block", "24"],
                   "--k k.npy: quantize_q8: q8 block size must be a positive multiple of 16, got 24")
    expect_refused(d, base + ["--kv-q8", "--q8-block", "64"],
                   "--k k.npy: quantize_q8: q8 block size 64 does not divide")
    expect_refused(d, base + ["--kv-q8", "--distributed"], "--kv-q8: --distributed attends on float32 K and V only")
    expect_refused(d, base + ["--q8-block", "16"], "--q8-block: only with --kv-q8")
    bad = k.copy()
    bad[0, 1, 7, 3] = np.nan
    d.save("kn.npy", bad)
    expect_refused(d, ["--q", "q.npy", "--k", "kn.npy", "--v", "v.npy", "--out", "o2.npy", "--kv-q8"],
                   "--k kn.npy: quantize_q8: non-finite value nan at index [0, 1, 7, 3]")
    h = [a.astype(np.float16) for a in (q, k, v)]
    for name, a in zip("qkv", h):
        d.save(f"h{name}.npy", a)
    expect_refused(d, ["--q", "hq.npy", "--k", "hk.npy", "--v", "hv.npy", "--out", "o2.npy", "--dtype", "f16",
                       "--kv-q8"], "--kv-q8: quantizes float32 K and V files; these are f16")


def run_and_check_on(d, files, numbers, extra_args, outputs, **ref_args):
    """run_and_check for inputs whose files (`files`, already saved) differ from the numbers
    the engine computes on (`numbers`: here the q8-rounded K and V)."""
    args = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy", *extra_args]
    for name in outputs[1:]:
        args += [f"--{name}", f"{name}.npy"]
    r = d.run(*args)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    q, k, v = numbers
    ref = dict(zip(("out", "lse", "probs"), attention(q, k, v, np.float64, **ref_args)))
    naive = dict(zip(("out", "lse", "probs"), attention(q, k, v, np.float32, **ref_args)))
    lse_scale = max(1.0, float(np.max(np.abs(ref["lse"][np.isfinite(ref["lse"])]), initial=0)))
    scales = {"out": float(np.max(np.abs(v), initial=0)), "lse": lse_scale}
    for name in outputs:
        check_close(name, load_written(d(f"{name}.npy")), ref[name], naive[name], scales[name])


def case_truncated_and_mismatched_refused(d, rng):
    q, k, v = inputs(rng, 1, 3, 2, 4, 5, 3, 3)  # Hq = 3 is not a multiple of Hkv = 2
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    expect_refused(d, ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], "not a multiple")
    with open(d("k.npy"), "rb") as f:
        data = f.read()
    with open(d("kt.npy"), "wb") as f:
        f.write(data[:-5])
    expect_refused(d, ["--q", "q.npy", "--k", "kt.npy", "--v", "v.npy", "--out", "out.npy"], "truncated")
    d.save("q3.npy", q[0])
    expect_refused(d, ["--q", "q3.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"],
                   "expected a rank-4 array [B, Hq, Nq, D], got shape [3, 4, 3] (rank 3)")


def case_causal_gqa_bias_masks(d, rng):
    q, k, v = inputs(rng, 2, 4, 2, 6, 9, 8, 5)
    bias = rng.uniform(-2, 2, (6, 9)).astype(np.float32)
    bias[:, ::4] = -np.inf
    bias[2, :] = -np.inf  # a fully masked row
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v), d.save("bias.npy", bias)
    run_and_check(d, q, k, v, ["--causal", "--bias", "bias.npy", "--scale", "0.25"], ("out", "lse", "probs"),
                  causal=True, bias=bias, scale=0.25)
    out = np.load(d("out.npy"))
    assert np.all(out[:, :, 2, :] == 0), "fully masked row is not zero"
    assert np.all(np.load(d("lse.npy"))[:, :, 2] == -np.inf)


def case_bias_ranks(d, rng):
    q, k, v = inputs(rng, 2, 2, 1, 3, 4, 5, 6)
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    for shape in [(), (4,), (3, 1), (2, 1, 4), (2, 1, 3, 4), (2, 2, 3, 4)]:
        bias = np.asarray(rng.uniform(-1, 1, shape), np.float32)
        d.save("bias.npy", bias)
        run_and_check(d, q, k, v, ["--bias", "bias.npy"], ("out", "probs"), bias=bias)


def case_notation_3b1b(d, rng):
    q, k, v = inputs(rng, 1, 4, 2, 5, 7, 6, 3)
    col = lambda a: np.ascontiguousarray(np.swapaxes(a, 2, 3))  # [B, H, N, D] -> [B, H, D, N]
    d.save("q.npy", col(q)), d.save("k.npy", col(k)), d.save("v.npy", col(v))
    r = d.run("--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy", "--notation", "3b1b",
              "--causal", "--lse", "lse.npy")
    assert r.returncode == 0, r.stderr
    ref = attention(q, k, v, np.float64, causal=True)
    naive = attention(q, k, v, np.float32, causal=True)
    out = load_written(d("out.npy"))
    assert out.shape == (1, 4, 3, 5), out.shape  # [B, Hq, Dv, Nq]
    check_close("out", np.ascontiguousarray(np.swapaxes(out, 2, 3)), ref[0], naive[0], float(np.abs(v).max()))
    check_close("lse", load_written(d("lse.npy")), ref[1], naive[1], max(1.0, float(np.abs(ref[1]).max())))


def case_key_lengths_and_threads(d, rng):
    q, k, v = inputs(rng, 3, 2, 2, 4, 8, 8, 8)
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    for threads in ("1", "2"):
        run_and_check(d, q, k, v, ["--key-lengths", "8,0,3", "--threads", threads], ("out", "lse"),
                      key_lengths=[8, 0, 3])


def case_version_2_and_scalar_inputs(d, rng):
    q, k, v = inputs(rng, 1, 1, 1, 3, 4, 2, 2)
    with open(d("q.npy"), "wb") as f:
        np.lib.format.write_array(f, q, version=(2, 0))
    d.save("k.npy", k), d.save("v.npy", v)
    d.save("bias.npy", np.float32(0.5))  # a 0-d array: shape ()
    run_and_check(d, q, k, v, ["--bias", "bias.npy"], bias=np.float32(0.5))


def case_empty_arrays(d, rng):
    q, k, v = inputs(rng, 1, 2, 2, 3, 0, 4, 5)  # no keys: every row fully masked
    d.save("q.npy", q), d.save("k.npy", k), d.save("v.npy", v)
    run_and_check(d, q, k, v, outputs=("out", "lse", "probs"))
    assert np.all(np.load(d("out.npy")) == 0) and np.all(np.load(d("lse.npy")) == -np.inf)
    assert np.load(d("probs.npy")).shape == (1, 2, 3, 0)


def main():
    if EXE is None:
        print("usage: test_numpy_interop.py path/to/jomoim", file=sys.stderr)
        return 2
    cases = [(name[5:], fn) for name, fn in globals().items() if name.startswith("case_")]
    passed = failed = 0
    for i, (name, fn) in enumerate(cases):
        with tempfile.TemporaryDirectory(prefix="jomoim-interop-") as tmp:
            try:
                fn(Dir(tmp), np.random.default_rng(1000 + i))
                print(f"PASS {name}")
                passed += 1
            except Exception:  # report every failing case, not only the first
                print(f"FAIL {name} (seed {1000 + i})")
                traceback.print_exc(file=sys.stdout)
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
