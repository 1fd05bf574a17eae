#!/usr/bin/env python3
"""test_dist_cli.py: `mpirun -np P jomoim attend --distributed` against plain `jomoim attend`.

NumPy writes the inputs; the distributed command (2 and 4 processes) must write the same
OUT and LSE as the single-process command up to float32 rounding (and both must match a
float64 NumPy computation), and its refusals and failures (a bad file, --probs/--bias, an
injected failure on one rank while reading or in the middle of the ring) must end every rank
with an error within a timeout and leave no file behind. Run by CTest (label mpi):

    /usr/bin/python3 tests/test_dist_cli.py build/jomoim mpirun [mpirun flags...]

Prints one line per case and "N passed, N failed"; exits non-zero when a case failed.
"""
import os
import subprocess
import sys
import tempfile
import traceback

import numpy as np

EXE = os.path.abspath(sys.argv[1])
MPIRUN = sys.argv[2:]  # e.g. ["mpirun", "--oversubscribe", "--allow-run-as-root"]
TIMEOUT = 60


def reference(q, k, v, causal=False, scale=None, key_lengths=None):
    """float64 attention in the paper layout; fully masked rows give 0 and lse -inf."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k = np.repeat(k, Hq // Hkv, axis=1)
    v = np.repeat(v, Hq // Hkv, axis=1)
    scale = 1 / np.sqrt(D) if scale is None else scale
    s = scale * (q @ np.swapaxes(k, -1, -2))
    i = np.arange(Nq)[:, None]
    j = np.arange(Nk)[None, :]
    lengths = [Nk] * B if key_lengths is None else key_lengths
    for b, L in enumerate(lengths):
        vis = np.broadcast_to(j < L, (Nq, Nk))
        if causal:
            vis = vis & (j <= i + (L - Nq))
        s[b][:, ~vis] = -np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s.max(axis=-1, keepdims=True) if Nk else np.full(s.shape[:-1] + (1,), -np.inf)
        dead = m == -np.inf
        e = np.exp(s - np.where(dead, 0, m))
        tot = np.where(dead, 1, e.sum(axis=-1, keepdims=True))
        p = np.where(dead, 0, e / tot)
        lse = np.where(dead, -np.inf, np.where(dead, 0, m) + np.log(tot))[..., 0]
    return p @ v, lse


def run(args, env=None, np_=None, leaks=True):
    """leaks=False turns LeakSanitizer off for this run where the build has it (the asan preset):
    its exit scan costs about 2 s per MPI process, and the numerical cases other than one per
    process count repeat the path a leak-checked case has already been through."""
    cmd = ([*MPIRUN[:1], "-np", str(np_), *MPIRUN[1:]] if np_ else []) + [EXE, "attend", *args]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    if not leaks and "detect_leaks=1" in full_env.get("ASAN_OPTIONS", ""):
        full_env["ASAN_OPTIONS"] = full_env["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")
    full_env.update(env or {})
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=full_env)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung: still running after {TIMEOUT} s: {' '.join(cmd)}")
    return r


def save(d, name, a):
    path = os.path.join(d, name)
    np.save(path, np.ascontiguousarray(a, np.float32))
    return path


def inputs(d, B, Hq, Hkv, Nq, Nk, D, Dv, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (B, Hq, Nq, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, Hkv, Nk, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, Hkv, Nk, Dv)).astype(np.float32)
    return q, k, v, ["--q", save(d, "q.npy", q), "--k", save(d, "k.npy", k), "--v", save(d, "v.npy", v)]


def close(name, got, want, atol, rtol):
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    dead = np.isneginf(want)
    assert np.array_equal(np.isneginf(got), dead), f"{name}: -inf where the other has a number"
    g, w = np.where(dead, 0, got), np.where(dead, 0, want)
    err = np.abs(g.astype(np.float64) - w)
    bound = atol + rtol * np.abs(w)
    assert (err <= bound).all(), f"{name}: max |diff| {err.max():.3g} (tolerance {atol:.1g} + {rtol:.1g}|x|)"


def no_outputs(d):
    extra = sorted(f for f in os.listdir(d) if not f.endswith(".npy") or f.startswith(("out", "lse", ".")))
    extra = [f for f in extra if f not in ("q.npy", "k.npy", "v.npy")]
    assert not extra, f"files left behind: {extra}"


def case_matches(P, B, Hq, Hkv, Nq, Nk, D, Dv, causal=False, scale=None, key_lengths=None, leaks=False):
    with tempfile.TemporaryDirectory() as d:
        q, k, v, args = inputs(d, B, Hq, Hkv, Nq, Nk, D, Dv, seed=Nq * 7 + Nk + P)
        extra = (["--causal"] if causal else []) + (["--scale", str(scale)] if scale is not None else [])
        if key_lengths is not None:
            extra += ["--key-lengths", ",".join(map(str, key_lengths))]
        one = run(args + extra + ["--out", f"{d}/out1.npy", "--lse", f"{d}/lse1.npy", "--threads", "1"])
        assert one.returncode == 0, one.stderr
        dist = run(args + extra + ["--distributed", "--out", f"{d}/out2.npy", "--lse", f"{d}/lse2.npy",
                                   "--threads", "1"], np_=P, leaks=leaks)
        assert dist.returncode == 0, dist.stderr + dist.stdout
        assert dist.stderr.strip() == "", dist.stderr
        o1, o2 = np.load(f"{d}/out1.npy"), np.load(f"{d}/out2.npy", mmap_mode="r")
        l1, l2 = np.load(f"{d}/lse1.npy"), np.load(f"{d}/lse2.npy")
        close("out vs attend", o2, o1, 2e-6, 2e-5)
        close("lse vs attend", l2, l1, 2e-6, 2e-6)
        ro, rl = reference(q, k, v, causal, scale, key_lengths)
        close("out vs float64", o2, ro, 1e-5, 1e-4)
        close("lse vs float64", l2, rl, 1e-5, 1e-5)
        assert not [f for f in os.listdir(d) if f.startswith(".")], "temporary files left behind"


def case_fails(P, extra, pattern, env=None, every_rank=True, make_bad=None):
    with tempfile.TemporaryDirectory() as d:
        _, _, _, args = inputs(d, 1, 2, 1, 21, 21, 8, 8, seed=5)
        if make_bad:
            make_bad(d)
        r = run(args + ["--distributed", "--out", f"{d}/out.npy", "--lse", f"{d}/lse.npy"] + extra, env=env, np_=P)
        assert r.returncode != 0, "exit 0; expected a failure"
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("jomoim: error:")]
        assert any(pattern in ln for ln in errors), f"no error line with '{pattern}': {r.stderr[:600]}"
        if every_rank:
            assert len(errors) == P, f"{len(errors)} error lines from {P} ranks: {errors}"
        no_outputs(d)


def truncate_q(d):
    p = os.path.join(d, "q.npy")
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) - 4])


CASES = []
for P in (2, 4):
    CASES += [
        (f"P{P} non-causal (2,4,64,16)", lambda P=P: case_matches(P, 2, 4, 4, 64, 64, 16, 16)),
        (f"P{P} causal (2,4,64,16)", lambda P=P: case_matches(P, 2, 4, 4, 64, 64, 16, 16, causal=True)),
        (f"P{P} causal uneven N=37", lambda P=P: case_matches(P, 1, 2, 2, 37, 37, 8, 8, causal=True)),
        (f"P{P} causal N=3 < 2P", lambda P=P: case_matches(P, 1, 2, 1, 3, 3, 8, 8, causal=True)),
        (f"P{P} GQA 8/2 causal, Dv != D", lambda P=P: case_matches(P, 1, 8, 2, 45, 45, 16, 24, causal=True, leaks=True)),
        (f"P{P} key lengths causal", lambda P=P: case_matches(P, 4, 2, 1, 29, 29, 8, 8, True, None, [29, 0, 1, 17])),
        (f"P{P} key lengths, scale", lambda P=P: case_matches(P, 2, 2, 1, 29, 29, 8, 8, False, 0.5, [3, 29])),
        (f"P{P} Nq != Nk causal", lambda P=P: case_matches(P, 1, 2, 1, 40, 19, 8, 8, causal=True)),
    ]
CASES += [
    ("refuses --probs", lambda: case_fails(2, ["--probs", "/tmp/never.npy"], "--probs: not available")),
    ("refuses --notation 3b1b", lambda: case_fails(2, ["--notation", "3b1b"], "paper layout only")),
    ("truncated --q on every rank", lambda: case_fails(4, [], "data is truncated", make_bad=truncate_q)),
    ("missing --k file", lambda: case_fails(2, [], "--k", make_bad=lambda d: os.remove(os.path.join(d, "k.npy")))),
    ("injected read failure on rank 1 of 4",
     lambda: case_fails(4, [], "stopped because rank(s) 1 failed", env={"JOMOIM_DIST_FAIL": "1:read"})),
    ("injected failure mid-ring on rank 1 of 2",
     lambda: case_fails(2, [], "injected failure", env={"JOMOIM_DIST_FAIL": "1:ring"}, every_rank=False)),
    ("injected failure mid-ring on rank 3 of 4",
     lambda: case_fails(4, [], "injected failure", env={"JOMOIM_DIST_FAIL": "3:ring"}, every_rank=False)),
]


def main():
    passed = failed = 0
    for name, fn in CASES:
        try:
            fn()
            print(f"ok   {name}")
            passed += 1
        except Exception:
            print(f"FAIL {name}\n{traceback.format_exc()}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
