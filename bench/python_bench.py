"""python_bench.py — jomoim.attention from Python against PyTorch, timed in one process.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python_bench.py [--rounds 7] \
        [--out bench/results/python_bench.md]

Two tables, written as markdown to --out (and stdout) for BENCHMARKS.md's "Python" section:
  1. Call overhead at a tiny shape, (B, H, N, D) = (1, 1, 1, 8): jomoim.attention, a pybind11
     call that does nothing with the same three arrays (jomoim._jomoim._noop: the floor of any binding),
     and PyTorch's attention written in ops (`naive`) and 1.13's private fused
     F._scaled_dot_product_attention (`sdpa`); microseconds per call.
  2. jomoim.attention(threads=2) against the same two PyTorch variants at some of the engine's
     shapes (those of bench/suite.py), on the same data (torch.from_numpy, no copy).
PyTorch gets the set-up of bench/run-benchmarks.sh: 2 threads, one inter-op thread, inference
mode, OMP_WAIT_POLICY=passive and OPENBLAS_NUM_THREADS=2 (the script re-executes itself with
them, since they must be set before torch loads), jemalloc preloaded when installed. The torch
calls are bench/peers/torch_attention.py's, so both benchmarks time the same code.

The machine is a shared VM whose speed drifts, so the programs are interleaved: every round
times each program once (a batch of calls), in an order that alternates between rounds, and
the tables give the median over rounds. The load average is recorded before and after.
"""
import argparse
import datetime
import os
import pathlib
import platform
import subprocess
import sys
import time
import types

HERE = pathlib.Path(__file__).resolve().parent
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
ENV = {"OMP_WAIT_POLICY": "passive", "OPENBLAS_NUM_THREADS": "2"}


def reexec_with_env():
    """Sets the thread knobs (and jemalloc) before torch is imported, by running again."""
    if os.environ.get("JOMOIM_PYBENCH_CHILD") == "1":
        return
    env = dict(os.environ, JOMOIM_PYBENCH_CHILD="1", **ENV)
    env.pop("OMP_NUM_THREADS", None)
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
        env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def load_avg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed_batch(call, n):
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n


def interleave(programs, rounds, batch):
    """{name: [seconds per call, one per round]}; each round runs every program once."""
    names = list(programs)
    times = {n: [] for n in names}
    for n in names:  # warm-up: scratch buffers, first-touch page faults, torch's lazy init
        programs[n]()
        programs[n]()
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            times[n].append(timed_batch(programs[n], batch(n)))
    return times


def median(xs):
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def main():
    reexec_with_env()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "python_bench.md"))
    args = ap.parse_args()

    import numpy as np
    import torch

    import jomoim

    sys.path.insert(0, str(HERE / "peers"))
    import torch_attention  # noqa: E402  (bench/peers/torch_attention.py: make_call)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    load_before = load_avg()
    started = datetime.datetime.now(datetime.timezone.utc)
    rng = np.random.default_rng(42)

    def problem(b, hq, hkv, nq, nk, d, causal):
        q = rng.uniform(-1, 1, (b, hq, nq, d)).astype(np.float32)
        k = rng.uniform(-1, 1, (b, hkv, nk, d)).astype(np.float32)
        v = rng.uniform(-1, 1, (b, hkv, nk, d)).astype(np.float32)
        shape = types.SimpleNamespace(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, causal=bool(causal))
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        calls = {"jomoim": lambda: jomoim.attention(q, k, v, causal=bool(causal), threads=args.threads)}
        for variant in ("naive", "sdpa"):
            shape.variant = variant
            calls["torch " + variant] = torch_attention.make_call(torch, shape, tq, tk, tv)
        # Same data, same answer: the torch results are the check of jomoim's (float32 rounding).
        want = calls["torch naive"]().numpy()
        got = calls["jomoim"]()
        err = float(np.abs(got - want).max())
        assert err < 1e-4, f"jomoim and torch differ by {err} at {shape}"
        return calls

    lines = []
    with torch.inference_mode():
        # 1. Call overhead.
        calls = problem(1, 1, 1, 1, 1, 8, 0)
        q = np.zeros((1, 1, 1, 8), np.float32)
        calls = {"pybind11 no-op (jomoim._jomoim._noop)": lambda: jomoim._jomoim._noop(q, q, q), **calls}
        t = interleave(calls, max(args.rounds, 9), lambda n: 2000)
        lines += ["### Call overhead, (B, H, N, D) = (1, 1, 1, 8)", "",
                  "| call | µs per call (median) | range over rounds |", "|---|---:|---:|"]
        for n, xs in t.items():
            label = "jomoim.attention" if n == "jomoim" else n
            lines.append(f"| {label} | {median(xs) * 1e6:.2f} | {min(xs) * 1e6:.2f}–{max(xs) * 1e6:.2f} |")

        # 2. The engine's shapes.
        shapes = [(1, 12, 12, 128, 128, 64, 0), (1, 12, 12, 512, 512, 64, 0), (1, 12, 12, 512, 512, 64, 1),
                  (1, 12, 12, 1024, 1024, 64, 0), (1, 12, 12, 1024, 1024, 64, 1), (4, 8, 8, 256, 256, 64, 1),
                  (1, 32, 32, 1, 4096, 128, 0), (1, 32, 8, 1, 4096, 128, 0)]
        lines += ["", f"### jomoim.attention vs PyTorch, {args.threads} threads, ms per call (median over rounds)", "",
                  "| B, Hq, Hkv, Nq, Nk, D | causal | jomoim | torch naive | torch sdpa | naive / jomoim | sdpa / jomoim |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for s in shapes:
            calls = problem(*s)
            probe = {n: timed_batch(c, 1) for n, c in calls.items()}
            # About 0.1 s of calls per program and round, at least one.
            t = interleave(calls, args.rounds, lambda n: max(1, min(200, int(0.1 / max(probe[n], 1e-6)))))
            m = {n: median(xs) * 1e3 for n, xs in t.items()}
            lines.append(f"| {', '.join(map(str, s[:6]))} | {'yes' if s[6] else 'no'} | {m['jomoim']:.3f} | "
                         f"{m['torch naive']:.3f} | {m['torch sdpa']:.3f} | {m['torch naive'] / m['jomoim']:.2f}× | "
                         f"{m['torch sdpa'] / m['jomoim']:.2f}× |")

    finished = datetime.datetime.now(datetime.timezone.utc)
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines += ["", f"- Measured {started:%Y-%m-%d %H:%M}–{finished:%H:%M} UTC, {args.rounds} rounds; "
                  f"load average (1, 5, 15 min) {load_before} before, {load_avg()} after; "
                  f"{os.cpu_count()} CPUs, {platform.platform()}",
              f"- jomoim {jomoim.__version__} at {commit}, SIMD target {jomoim.active_simd_target()}; "
              f"Python {platform.python_version()}, NumPy {np.__version__}, PyTorch {torch.__version__}; "
              f"environment {' '.join(f'{k}={os.environ.get(k)}' for k in ENV)}, "
              f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}"]
    text = "\n".join(lines) + "\n"
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(text)


if __name__ == "__main__":
    main()
