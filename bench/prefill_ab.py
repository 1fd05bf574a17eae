#!/usr/bin/env python3
"""Engine prefill in each storage format, side by side: `jomoim bench` runs interleaved over rounds
(every shape, causal or not, and format once per round, so the VM's drifting speed hits them
alike). Prints a Markdown table of the median milliseconds and each format's speed-up over
float32 (the median of the per-round ratios, with their range).

    bench/prefill_ab.py [--bin build/release/jomoim] [--rounds 3] [--threads 2] [--target AVX2]
        [--shapes 1x12x1024x64 1x12x2048x64 1x8x4096x128] [--dtypes f32 bf16 bf16w]

A shape is BxHxNxD (Nq = Nk = N). "bf16w" is bf16 storage with the softmax weights rounded to
bf16 for P·V (`--bf16-weights`).
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(args, shape, causal, dtype):
    b, h, n, d = shape
    cmd = [args.bin, "bench", "--batch", str(b), "--heads", str(h), "--q-len", str(n), "--head-dim", str(d),
           "--dtype", "bf16" if dtype == "bf16w" else dtype, "--threads", str(args.threads),
           "--min-time", str(args.min_time), "--json"]
    if dtype == "bf16w":
        cmd.append("--bf16-weights")
    if causal:
        cmd.append("--causal")
    if args.target:
        cmd += ["--target", args.target]
    out = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not rows or rows[-1].get("status") != "ok":
        sys.exit(f"prefill_ab: {' '.join(cmd)} failed: {out.stderr.strip()[:300]}")
    return rows[-1]["median_ms"], rows[-1]["simd_target"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/release/jomoim")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="", help="SIMD target to pin (default: the CPU's best)")
    ap.add_argument("--shapes", nargs="+", default=["1x12x1024x64", "1x12x2048x64", "1x8x4096x128"])
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16", "bf16w"])
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes]
    except ValueError:
        sys.exit("prefill_ab: a shape is BxHxNxD, e.g. 1x12x1024x64")
    if any(len(s) != 4 or min(s) < 1 for s in shapes):
        sys.exit("prefill_ab: a shape is four positive integers BxHxNxD, e.g. 1x12x1024x64")
    if "f32" not in args.dtypes:
        args.dtypes.insert(0, "f32")
    ms, target = {}, ""
    for r in range(args.rounds):
        for shape in shapes:
            for causal in (False, True):
                for dt in args.dtypes:
                    t, target = run(args, shape, causal, dt)
                    ms.setdefault((shape, causal, dt), []).append(t)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    others = [dt for dt in args.dtypes if dt != "f32"]
    print(f"prefill, {args.threads} threads, target {target}, {args.rounds} interleaved rounds; medians")
    print()
    print("| shape | causal | " + " | ".join(f"{dt} ms" for dt in args.dtypes) + " | " +
          " | ".join(f"{dt} / f32" for dt in others) + " |")
    print("|---|---" + "|---:" * len(args.dtypes) + "|---" * len(others) + "|")
    for shape in shapes:
        for causal in (False, True):
            cells = [f"{statistics.median(ms[(shape, causal, dt)]):.2f}" for dt in args.dtypes]
            for dt in others:
                ratios = [a / c for a, c in zip(ms[(shape, causal, "f32")], ms[(shape, causal, dt)])]
                cells.append(f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f})")
            name = " × ".join(str(x) for x in shape)
            print(f"| {name} | {'yes' if causal else 'no'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
