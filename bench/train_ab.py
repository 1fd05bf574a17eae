#!/usr/bin/env python3
"""Training throughput of two jomoim binaries, side by side (old vs new), on the default model's
configuration (4 layers, 4 heads, 256 wide, vocabulary 7168, batch 16 x 128, 2 threads).

    /usr/bin/python3 bench/train_ab.py --old /tmp/train-old/jomoim --new build/release/jomoim \
        --data TEXT_FILE [--tokenizer models/default] [--passes 5] [--steps 8] [-- extra args for new]

Each pass runs old then new (the order alternates between passes), `jomoim train` for --steps
optimizer steps after one warm-up step; a pass's figure is the median tokens/s over its steps
(trainer.json), and the table shows per binary the median over passes and the median of the
per-pass ratios. The load average is printed before and after.

--cpu: instead of wall-clock tokens/s, tokens per CPU-second (user + sys of the child), from the
difference between a run of 1 + --steps steps and a run of 1 step (so setup and tokenizing
cancel out). Meant for --threads 1, where no thread spins at a barrier: on a machine that
others load, it still measures the work a step takes when wall-clock figures do not.
"""
import resource
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(binary, args, extra, steps=None):
    out = tempfile.mkdtemp(prefix="jomoim-train-ab-")
    steps = args.steps + 1 if steps is None else steps
    try:
        cmd = [binary, "train", "--data", args.data, "--out", out, "--tokenizer", args.tokenizer, "--layers", "4",
               "--heads", "4", "--embd", "256", "--context", "128", "--batch", "16", "--seq", "128", "--steps",
               str(steps), "--eval-every", "100000", "--eval-batches", "1", "--threads", str(args.threads)]
        c0 = cpu_seconds()
        subprocess.run(cmd + extra, check=True, capture_output=True)
        if args.cpu:
            return cpu_seconds() - c0
        with open(os.path.join(out, "trainer.json")) as f:
            hist = json.load(f)["history"]
        return statistics.median(r["tokens_per_s"] for r in hist[1:])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=os.path.join(HERE, "..", "build", "release", "jomoim"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "models", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--cpu", action="store_true", help="tokens per CPU-second (see above)")
    ap.add_argument("extra", nargs="*", help="extra options for the new binary only")
    args = ap.parse_args()
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    old, new, ratio = [], [], []
    for p in range(args.passes):
        order = [("old", args.old, []), ("new", args.new, args.extra)]
        if p % 2:
            order.reverse()
        if args.cpu:
            got = {name: 16 * 128 * args.steps / (one(b, args, x) - one(b, args, x, steps=1)) for name, b, x in order}
        else:
            got = {name: one(b, args, x) for name, b, x in order}
        old.append(got["old"])
        new.append(got["new"])
        ratio.append(got["new"] / got["old"])
        print("pass %d: old %.0f  new %.0f tokens/s%s  (%.2fx)" % (p + 1, got["old"], got["new"], " per CPU-second" if args.cpu else "", ratio[-1]),
              flush=True)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    print("median of %d passes: old %.0f  new %.0f tokens/s; median ratio %.2fx" %
          (args.passes, statistics.median(old), statistics.median(new), statistics.median(ratio)))


if __name__ == "__main__":
    main()
