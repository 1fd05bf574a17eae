"""suite.py — runs the side-by-side benchmark of bench/run-benchmarks.sh and writes its results.

    /usr/bin/python3 bench/suite.py --jomoim build-bench/jomoim [--quick] [--passes N]
                                    [--threads 2] [--markdown BENCHMARKS.md]

Every measurement is one fresh process that prints one JSON line: `jomoim bench --json`,
peers/ort_attention.js (ONNX Runtime, each CPU attention variant), peers/torch_attention.py
(PyTorch naive and sdpa), and `jomoim bench --ceilings-only` for the OpenBLAS sgemm and
memory-copy ceilings. The machine is a shared VM whose speed drifts for minutes at a time, so
programs are interleaved shape by shape (the order reversed on every other pass) and the suite
is repeated; report.py takes the median over passes. Results go to bench/results/ as JSON
lines (one record per measurement, plus a header describing the machine), then report.py turns
them into markdown.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

import report

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SYS_PY = "/usr/bin/python3"  # Debian's python3-torch serves this interpreter only

# (B, Hq, Hkv, Nq, Nk, D, causal, big). "big" shapes are skipped by --quick and timed with
# 1 warm-up call and 3 timed calls (one call takes seconds).
def shapes(quick):
    out = []
    for b, h, n, d in [(1, 12, 128, 64), (1, 12, 512, 64), (1, 12, 1024, 64), (1, 12, 2048, 64),
                       (1, 32, 4096, 128), (4, 8, 256, 64)]:
        big = n >= 4096
        if quick and big:
            continue
        for causal in (0, 1):
            out.append(dict(b=b, hq=h, hkv=h, nq=n, nk=n, d=d, causal=causal, big=big))
    # Decode: one new query row against a 4096-entry KV cache; multi-head, then grouped-query.
    out.append(dict(b=1, hq=32, hkv=32, nq=1, nk=4096, d=128, causal=0, big=False))
    out.append(dict(b=1, hq=32, hkv=8, nq=1, nk=4096, d=128, causal=0, big=False))
    return out


# Memory at long sequences: jomoim's extra memory must not grow with N (no N x N buffer, no
# per-N scratch). Once per run, one call each, next to ONNX Runtime's flash-style MHA.
MEMORY_SWEEP = [dict(b=1, hq=4, hkv=4, nq=n, nk=n, d=64, causal=c, big=True)
                for n in (1024, 4096, 16384) for c in (0, 1)]

ORT_VARIANTS = ["mha", "mha-noflash", "mha-bnsh-kv", "attn23"]

# --target: jomoim and its ceilings pinned to one Highway target, so that a machine with AVX-512
# also measures the AVX2 path (issue 20). OpenBLAS is pinned with OPENBLAS_CORETYPE to the core
# whose kernels use the same vectors; the FMA peak takes jomoim's --target. The peers cannot be
# pinned (ONNX Runtime and PyTorch pick their kernels from CPUID), so next to a pinned jomoim they
# run their best kernels: on a CPU with AVX-512 a speed-up over them is a lower bound for the
# same comparison on a CPU without it.
OPENBLAS_CORE = {"AVX2": "Haswell", "AVX3": "SkylakeX", "AVX3_BF16": "SkylakeX", "AMX_BF16": "SkylakeX", "AVX3_DL": "SkylakeX", "AVX3_ZEN4": "Zen",
                 "SSE4": "Nehalem", "SSSE3": "Core2"}
TORCH_VARIANTS = ["naive", "sdpa"]


def base_env():
    """The caller's environment without the knobs that would silently change a peer."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "OPENBLAS_NUM_THREADS", "LD_PRELOAD",
              "MALLOC_CONF", "ORT_DISABLE_FLASH_ATTENTION", "GOMP_SPINCOUNT"):
        env.pop(k, None)
    return env


def jemalloc_path():
    for p in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"):
        if os.path.exists(p):
            return p
    return None


def torch_env(threads):
    """PyTorch's best setting on this machine kind (../shared/ENVIRONMENT.md): OpenMP threads
    that sleep instead of spinning while OpenBLAS works, OpenBLAS limited to the same threads,
    and jemalloc that keeps freed pages (no page-fault churn on the large score matrices)."""
    env = base_env()
    env.update(OMP_WAIT_POLICY="passive", OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    je = jemalloc_path()
    if je:
        env.update(LD_PRELOAD=je, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
    return env


def steal_seconds():
    """Hypervisor steal time so far (seconds): how much CPU the VM's neighbours took."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def load_average():
    """1-minute load average: other work on the machine while a measurement starts."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_one(cmd, env, timeout_s, fallback):
    """Runs a command that prints one JSON line; failures become a record with status 'error'."""
    load, steal0, t0 = load_average(), steal_seconds(), time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        records = [json.loads(ln) for ln in lines]
        if not records:
            tail = " ".join(p.stderr.strip().splitlines()[-3:])[-300:]
            records = [dict(fallback, status="error", error=f"exit {p.returncode}: {tail}")]
    except subprocess.TimeoutExpired:
        records = [dict(fallback, status="error", error=f"timed out after {timeout_s} s")]
    wall, steal = time.monotonic() - t0, steal_seconds() - steal0
    for r in records:
        r.setdefault("status", "ok")
        r.update(process_s=round(wall, 2), steal_s=round(steal, 2), load1=load)
    return records


def command_output(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def reproduce_command(args):
    words = ["bash bench/run-benchmarks.sh"]
    if args.quick:
        words.append("--quick")
    if args.passes != (1 if args.quick else 3):
        words += ["--passes", str(args.passes)]
    if args.threads != 2:
        words += ["--threads", str(args.threads)]
    if args.only:
        words += ["--only", f"'{args.only}'"]
    if args.target:
        words += ["--target", args.target]
    if args.no_torch:
        words.append("--no-torch")
    return " ".join(words)


def machine_record(args):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        info = f.read()
        m = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
        cpu = m.group(1) if m else cpu
        fm = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
        flags = set(fm.group(1).split()) if fm else set()
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 2**20
    dpkg = lambda p: command_output(["dpkg-query", "-W", "-f=${Version}", p]) or "?"  # noqa: E731
    ort_pkg = HERE / "node_modules" / "onnxruntime-node" / "package.json"
    dirty = command_output(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "kind": "machine",
        "date_start": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cpu_family_model": " ".join(re.findall(r"^(?:cpu family|model)\s*:\s*(\d+)$", info, re.M)[:2]),
        "avx512": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "cores": os.cpu_count(),
        "mem_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "os": command_output(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "jomoim_commit": command_output(["git", "rev-parse", "--short", "HEAD"]) + (" (modified)" if dirty else ""),
        "gxx": command_output(["g++", "-dumpfullversion"]),
        "openblas": dpkg("libopenblas0-pthread"),
        "torch": dpkg("python3-torch"),
        "onnxruntime_node": json.loads(ort_pkg.read_text())["version"] if ort_pkg.exists() else "?",
        "node": command_output(["node", "--version"]),
        "threads": args.threads,
        "target": args.target,
        "openblas_coretype": OPENBLAS_CORE.get(args.target) if args.target else None,
        "passes": args.passes,
        "quick": args.quick,
        "command": reproduce_command(args),
    }


def measurements(shape, args, once=False):
    """(label, command, env, fallback record) for every program timed on one shape; with once,
    one untimed-warm-up-free call (for memory) by jomoim and ORT mha only."""
    s = shape
    timing = ["--warmup", "0", "--reps", "1", "--min-time", "0"] if once else \
             ["--warmup", "1", "--reps", "3", "--min-time", "0"] if s["big"] else \
             ["--warmup", "2", "--reps", "5", "--min-time", "1"]
    common = dict(b=s["b"], hq=s["hq"], hkv=s["hkv"], nq=s["nq"], nk=s["nk"], d=s["d"], dv=s["d"],
                  causal=bool(s["causal"]), threads=args.threads)
    peer_args = ["--b", s["b"], "--hq", s["hq"], "--hkv", s["hkv"], "--nq", s["nq"], "--nk", s["nk"],
                 "--d", s["d"], "--causal", s["causal"], "--threads", args.threads] + timing
    peer_args = [str(x) for x in peer_args]
    out = []
    jomoim = [args.jomoim, "bench", "--json", "--batch", str(s["b"]), "--heads", str(s["hq"]), "--kv-heads",
              str(s["hkv"]), "--q-len", str(s["nq"]), "--kv-len", str(s["nk"]), "--head-dim", str(s["d"]),
              "--threads", str(args.threads)] + timing + (["--causal"] if s["causal"] else []) + \
        (["--target", args.target] if args.target else [])
    out.append(("jomoim", jomoim, base_env(), dict(common, impl="jomoim", variant="")))
    for v in ["mha"] if once else ORT_VARIANTS:
        out.append((f"onnxruntime {v}", ["node", str(HERE / "peers" / "ort_attention.js"), "--variant", v] + peer_args,
                    base_env(), dict(common, impl="onnxruntime", variant=v)))
    for v in [] if once or args.no_torch else TORCH_VARIANTS:
        out.append((f"torch {v}", [SYS_PY, str(HERE / "peers" / "torch_attention.py"), "--variant", v] + peer_args,
                    torch_env(args.threads), dict(common, impl="torch", variant=v)))
    return out


def summary(r):
    """One measurement in a few words, for the progress lines."""
    if r.get("status") != "ok":
        return f"{r.get('status')}: {str(r.get('error', ''))[:120]}"
    if r.get("kind") == "sgemm":
        return f"sgemm {r['gflops']:.0f} GFLOP/s"
    if r.get("kind") == "copy":
        return f"copy {r['copy_gbs']:.1f} GB/s"
    if r.get("kind") == "fma_peak":
        return f"FMA peak {r['gflops']:.0f} GFLOP/s"
    return f"{r['median_ms']:.3f} ms"


def progress(text):
    print(f"[bench] {text}", file=sys.stderr, flush=True)


class OneLineErrors(argparse.ArgumentParser):
    def error(self, message):
        sys.exit(f"run-benchmarks: error: {message} (see bench/run-benchmarks.sh for usage)")


def main():
    ap = OneLineErrors(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jomoim", required=True, help="the jomoim program to time")
    ap.add_argument("--quick", action="store_true", help="skip the (1,32,4096,128) shapes; 1 pass")
    ap.add_argument("--passes", type=int, help="passes over the suite (default 3; 1 with --quick)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", default=str(ROOT / "BENCHMARKS.md"), help="where the report goes ('-': stdout)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds one measurement may take")
    ap.add_argument("--only", metavar="TEXT", help="only shapes whose label contains TEXT, e.g. '(1,12,128,64)'")
    ap.add_argument("--target", metavar="NAME", help="pin jomoim and its ceilings to one SIMD target (e.g. AVX2); "
                    "the report then goes to its own section of BENCHMARKS.md")
    ap.add_argument("--no-torch", action="store_true", help="time ONNX Runtime only among the peers")
    ap.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.passes is None:
        args.passes = 1 if args.quick else 3
    if args.passes < 1 or args.threads < 1:
        ap.error("--passes and --threads must be >= 1")
    suite = [s for s in shapes(args.quick) if args.only is None or args.only in report.shape_label(s)]
    if not suite:
        ap.error(f"--only {args.only!r} matches no shape")
    if args.target and args.target not in OPENBLAS_CORE:
        ap.error(f"--target {args.target!r}: one of {', '.join(OPENBLAS_CORE)}")
    if args.check_args:
        return 0

    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = results_dir / f"run-{stamp}.jsonl"
    records = [machine_record(args)]
    with open(path, "w") as log:
        def keep(rs):
            for r in rs:
                records.append(r)
                log.write(json.dumps(r) + "\n")
            log.flush()

        log.write(json.dumps(records[0]) + "\n")
        ceilings = [args.jomoim, "bench", "--ceilings-only", "--json", "--threads", str(args.threads)]
        ceilings_env = base_env()
        if args.target:
            ceilings += ["--target", args.target]
            ceilings_env["OPENBLAS_CORETYPE"] = OPENBLAS_CORE[args.target]
        for pass_no in range(1, args.passes + 1):
            progress(f"pass {pass_no} of {args.passes}")
            for shape_no, shape in enumerate(suite):
                # The ceilings are measured with every shape, so that their best and their drift are
                # known over the whole run, not from one moment of it.
                runs = [("ceilings", ceilings, ceilings_env, dict(kind="ceilings"))]
                runs += measurements(shape, args)
                if pass_no % 2 == 0:
                    runs.reverse()  # no program always runs right after the same neighbour
                for label, cmd, env, fallback in runs:
                    rs = run_one(cmd, env, args.timeout, fallback)
                    for r in rs:
                        r.update({"pass": pass_no, "shape_no": shape_no})
                        if r.get("kind") in (None, "attention"):
                            r.setdefault("impl", fallback["impl"])
                            r.setdefault("variant", fallback["variant"])
                    keep(rs)
                    what = "; ".join(summary(r) for r in rs)
                    progress(f"pass {pass_no} {report.shape_label(shape)}{' causal' if shape['causal'] else ''} "
                             f"{label}: {what}")
        if not args.quick and args.only is None and not args.target:
            progress("memory at long sequences")
            for shape in MEMORY_SWEEP:
                for label, cmd, env, fallback in measurements(shape, args, once=True):
                    rs = run_one(cmd, env, args.timeout, fallback)
                    for r in rs:
                        r["sweep"] = "memory"
                        r.setdefault("impl", fallback["impl"])
                        r.setdefault("variant", fallback["variant"])
                    keep(rs)
                    progress(f"memory {report.shape_label(shape)}{' causal' if shape['causal'] else ''} {label}: "
                             + "; ".join(summary(r) for r in rs))
        end = dict(kind="end", date_end=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        keep([end])
    latest = results_dir / "latest.jsonl"
    latest.unlink(missing_ok=True)
    latest.symlink_to(path.name)
    progress(f"results: {path.relative_to(ROOT)}")

    markdown = report.render_pinned(records) if args.target else report.render(records)
    if args.markdown == "-":
        sys.stdout.write(markdown)
    elif args.target:
        report.write_section(args.markdown, markdown)  # replaces only its own section
    else:
        report.write_markdown(args.markdown, markdown)  # keeps the sections other parts added
        progress(f"wrote {args.markdown}")
    # A wrong result from jomoim is a failure of the run, not just a table cell.
    return 1 if any(r.get("impl") == "jomoim" and r.get("status") == "wrong" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
