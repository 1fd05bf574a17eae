#!/usr/bin/env python3
"""Engine decode in each storage format, side by side: `jomoim bench` runs of one or more
binaries (e.g. before/after a kernel change), interleaved over rounds so the VM's drifting speed
hits every configuration alike. Prints the median milliseconds of each configuration and, per
binary and SIMD target, each format's speed-up over float32 (the median of the per-round ratios,
with their range).

    bench/decode_ab.py --bin build/release/jomoim [--bin other/jomoim] [--rounds 5]
        [--batch 64] [--kv-heads 32 8] [--targets default AVX2] [--dtypes f32 bf16 bf16w f16] [--threads 2]

"bf16w" is bf16 storage with the softmax weights rounded to bf16 for P·V (`--bf16-weights`).
"q8" is 8-bit K/V (attention_q8kv, blocks of 32, or `--q8-block 128`: one scale per row, the
per-token-per-head layout), `jomoim bench --dtype q8`, timed as every other format (the median
of its calls) and divided by the same f32 runs. `--q8-gbench` times it as the tables of
BENCHMARKS.md up to d9e8a1f did: by `attention_gbench` (next to each --bin) at its fixed
decode shapes (32 heads, 4096 or 256 keys, D 128, K/V heads 32 or 8, OpenMP's threads), its
ratio to the float32 decode of the same gbench process (before beed720 each repetition filled
fresh inputs, and both formats read 12-18 % slower from memory than in `jomoim bench` on a Zen 5
VM; the ratio held). `--batch 64` (with `--kv-heads 8`: 2.1 GiB of float32 K/V, 0.6 GiB in q8)
reads K and V from memory on every call, as a model's decode does (each layer's cache once per
token), where one 4096-key cache of a batch of 1 (33.5 MiB in float32) can stay in a large L3
between calls. `--kv-len 256` keeps K and V in the caches between calls: the compute each
format's kernel needs, without the memory. A format whose kernel computes no faster than
float32's cannot beat float32 at 4096 keys by more than float32's 4096-key time over 16 times its
256-key time.
"""
import os
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, kv, dtype, target, args):
    cmd = [binary, "bench", "--batch", str(args.batch), "--heads", str(args.heads), "--kv-heads", str(kv), "--q-len", "1", "--kv-len",
           str(args.kv_len), "--head-dim", str(args.head_dim), "--dtype", "bf16" if dtype == "bf16w" else dtype,
           "--threads", str(args.threads),
           "--min-time", str(args.min_time), "--json"]
    if dtype == "bf16w":
        cmd += ["--bf16-weights"]
    if dtype == "q8":
        cmd += ["--q8-block", str(args.q8_block)]
    if target != "default":
        cmd += ["--target", target]
    out = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not rows or rows[-1].get("status") != "ok":
        sys.exit(f"decode_ab: {' '.join(cmd)} failed: {out.stderr.strip()[:300]}")
    return rows[-1]["median_ms"], rows[-1]["simd_target"]


def run_gbench(binary, kv, target, args):
    """(f32 ms, q8 ms, target) from attention_gbench next to `binary`, one process."""
    gb = os.path.join(os.path.dirname(os.path.abspath(binary)), "attention_gbench")
    if (args.heads, args.head_dim) != (32, 128) or args.kv_len not in (4096, 256) or kv not in (32, 8):
        sys.exit("decode_ab: q8 runs at attention_gbench's shapes only (--heads 32 --kv-len 4096 or 256 "
                 "--head-dim 128, --kv-heads 32 and/or 8)")
    cmd = [gb, f"--benchmark_filter=BM_attention_decode(_q8)?/B:{args.batch}/Hq:32/Hkv:{kv}/Nq:1/Nk:{args.kv_len}/",
           "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true", "--benchmark_format=json"]
    if args.batch != 1:
        cmd.append(f"--decode-batch={args.batch}")
    if target != "default":
        cmd.append(f"--target={target}")
    if args.q8_block != 32:
        cmd.append(f"--q8-block={args.q8_block}")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"decode_ab: {' '.join(cmd)} failed: {out.stderr.strip()[:300]}")
    med = {}
    label = None
    for bm in json.loads(out.stdout)["benchmarks"]:
        if bm.get("aggregate_name") == "median":
            med["q8" if "decode_q8" in bm["run_name"] else "f32"] = bm["real_time"] / 1000.0  # us -> ms
            label = bm.get("label", label)
    if set(med) != {"f32", "q8"}:
        sys.exit(f"decode_ab: {' '.join(cmd)}: no f32 and q8 medians")
    return med["f32"], med["q8"], label


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", action="append", required=True, help="a jomoim binary (repeat to compare)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1,
                    help="B: e.g. 64 puts K and V far beyond the L3, as a model's layers are (see above)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, nargs="+", default=[32, 8])
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--targets", nargs="+", default=["default"], help="SIMD targets to pin (default: none)")
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.4)
    ap.add_argument("--q8-block", type=int, default=32,
                    help="q8's block along D (a multiple of 16 dividing D; D: one scale per row)")
    ap.add_argument("--q8-gbench", action="store_true",
                    help="time q8 by attention_gbench against its own f32, as the tables up to d9e8a1f (see above)")
    args = ap.parse_args()
    if args.q8_block < 16 or args.q8_block % 16 or args.head_dim % args.q8_block:
        ap.error(f"--q8-block: want a multiple of 16 dividing --head-dim {args.head_dim}, got {args.q8_block}")
    if "f32" not in args.dtypes:
        args.dtypes.insert(0, "f32")
    ms = {}
    names = {}
    for r in range(args.rounds):
        for kv in args.kv_heads:
            for target in args.targets:
                for b in args.bin:
                    for dt in args.dtypes:
                        if dt == "q8" and args.q8_gbench:
                            f, t, name = run_gbench(b, kv, target, args)
                            ms.setdefault((kv, target, b, "f32 (gbench)"), []).append(f)
                        else:
                            t, name = run(b, kv, dt, target, args)
                        ms.setdefault((kv, target, b, dt), []).append(t)
                        names[(kv, target, b)] = name
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"decode {args.batch} x {args.heads} x {args.kv_len} x {args.head_dim}, {args.threads} threads, "
          f"{args.rounds} interleaved rounds; medians" +
          (f"; q8 blocks of {args.q8_block}" if "q8" in args.dtypes else ""))
    print()
    # With --q8-gbench, q8's ratio is to the f32 decode of its own gbench process: that time gets
    # its own column.
    gb = "q8" in args.dtypes and args.q8_gbench
    cols = args.dtypes + (["f32 (gbench)"] if gb else [])
    print("| K/V heads | target | binary | " + " | ".join(f"{dt} ms" for dt in cols) + " | " +
          " | ".join(f"{dt} / f32" for dt in args.dtypes if dt != "f32") + " |")
    print("|---" * (3 + len(cols) + len(args.dtypes) - 1) + "|")
    for kv in args.kv_heads:
        for target in args.targets:
            for b in args.bin:
                cells = [f"{statistics.median(ms[(kv, target, b, dt)]):.3f}" for dt in cols]
                for dt in args.dtypes:
                    if dt == "f32":
                        continue
                    base = ms[(kv, target, b, "f32 (gbench)" if dt == "q8" and gb else "f32")]
                    ratios = [a / c for a, c in zip(base, ms[(kv, target, b, dt)])]
                    cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
                print(f"| {kv} | {names[(kv, target, b)]} | {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
