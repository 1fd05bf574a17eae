#!/usr/bin/env python3
"""The explorer's server on a GPT-2-small-sized model at ~1024 tokens: seconds and peak memory.

    /usr/bin/python3 bench/explain_memory.py [--jomoim build/release/jomoim] [--dir /tmp/jomoim-explain-small]
                                             [--chars 4100] [--threads 2]

Writes once, into --dir, a random checkpoint of GPT-2 small's shape (12 layers x 12 heads x 768,
context 1024) with the default model's tokenizer (models/default: its vocabulary size), F32
safetensors. The prompt is the first --chars characters of the corpus's held-out text
(data/corpus/out/heldout.txt; scripts/make-corpus.sh), else of README.md, cut to the context.
For each request below it starts a fresh `jomoim serve` on a free port, sends that one
`POST /api/explain` (then, for "summary, then one head", the second on the same server), and
reads the server's peak resident memory (VmHWM of /proc/PID/status) after the answer:

    summary           {"prompt", "matrices": false}: tokens, prediction, heads summary, roles,
                      attribution, lens (what the page asks first at this size)
    one head          {"prompt", "layer": 5, "head": 3}: one head's matrices in full
    summary, then one head   both on one server, as the page does

Prints one Markdown table (request, answer size, seconds, peak RSS) and the machine.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))

SHAPE = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, layer_norm_epsilon=1e-5,
             activation_function="gelu_new", n_inner=None, model_type="gpt2")


def make_checkpoint(d, tokenizer_dir):
    import tiny_gpt2
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(tokenizer_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = len(json.load(f))
    cfg = dict(SHAPE, vocab_size=vocab)
    w = tiny_gpt2.random_weights(cfg, seed=2024)
    tiny_gpt2.write_safetensors(os.path.join(d, "model.safetensors.tmp"), list(w.items()), "F32")
    os.rename(os.path.join(d, "model.safetensors.tmp"), os.path.join(d, "model.safetensors"))
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(tokenizer_dir, name), d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(cfg, n_ctx=1024), f, indent=2)


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def serve(args):
    p = subprocess.Popen([args.jomoim, "serve", "--model", args.dir, "--port", "0", "--threads", str(args.threads),
                          "--max-prompt-bytes", "100000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    for line in p.stdout:
        m = re.search(r"http://[\w.:\[\]]+:(\d+)", line)
        if m:
            return p, int(m.group(1))
        if time.time() > deadline:
            break
    p.kill()
    raise RuntimeError("jomoim serve printed no URL")


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/explain", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
    return len(data), time.perf_counter() - t0, json.loads(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jomoim", default=os.path.join(ROOT, "build", "release", "jomoim"))
    ap.add_argument("--dir", default="/tmp/jomoim-explain-small")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--chars", type=int, default=4100)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    make_checkpoint(args.dir, args.tokenizer)
    src = os.path.join(ROOT, "data", "corpus", "out", "heldout.txt")
    if not os.path.exists(src):
        src = os.path.join(ROOT, "README.md")
    with open(src, encoding="utf-8") as f:
        prompt = f.read(args.chars)
    summary = {"prompt": prompt, "matrices": False}
    head = {"prompt": prompt, "layer": 5, "head": 3}
    rows = []
    for name, bodies in (("summary", [summary]), ("one head", [head]), ("summary, then one head", [summary, head])):
        p, port = serve(args)
        try:
            size = secs = 0.0
            for b in bodies:
                n, s, j = post(port, b)
                size += n
                secs += s
            rows.append((name, len(j["tokens"]), size / 1e6, secs, peak_rss_mib(p.pid)))
        finally:
            p.terminate()
            p.wait()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"GPT-2-small shape (random), {args.threads} threads, {cpu}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| request | tokens | answer | seconds | server peak RSS |")
    print("|---|---|---|---|---|")
    for name, t, mb, s, rss in rows:
        print(f"| {name} | {t} | {mb:.1f} MB | {s:.1f} | {rss / 1024:.2f} GiB ({rss:.0f} MiB) |")


if __name__ == "__main__":
    main()
