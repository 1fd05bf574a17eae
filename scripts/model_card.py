#!/usr/bin/env python3
"""The measurements of the default model's card (models/default/README.md), from the model alone.

    PYTHONPATH=build/release/python /usr/bin/python3 scripts/model_card.py [MODEL_DIR] [--json FILE]

MODEL_DIR defaults to models/default; the corpus is data/corpus/out/ (scripts/make-corpus.sh).
Prints, in Markdown:

1. Held-out loss on EVERY held-out token, and the bigram baseline on the same tokens. The
   held-out documents are encoded one by one and joined with <|endoftext|> after each, as
   `jomoim train --documents eot` does; the ids are cut into consecutive windows of
   n_positions + 1 tokens (the last shorter one included), each scored from scratch: mean
   cross-entropy (nats) of every next token, float64 log-softmax of jomoim's logits. The bigram
   baseline is the trainer's: p = 0.9 p_bigram(b | a) + 0.1 p_unigram(b) from the training ids
   (unigram counts start at 1; an id never seen as a first token uses the unigram alone).
2. `jomoim heads`: the best induction, previous-token, first-token and self heads.
3. The seed's prompts: the top next tokens of "I have a lot" and of
   "Cash or credit card? I have a lot", and how the second shifts the first.
4. Continuations of everyday prompts, greedy and sampled (temperature 0.8, top-k 40,
   top-p 0.95, seed 1), unedited.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "release", "python"))
import jomoim  # noqa: E402

SEP = "\n<|endoftext|>\n"
PROMPTS = ["I have a lot", "Cash or credit card? I have a lot"]
EVERYDAY = ["Once upon a time", "The weather today is", "My favourite food is", "She opened the door and",
            "The President said that"]


def documents(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in f.read().split(SEP) if d]


def joined_ids(model, docs, eos):
    ids = []
    for d in docs:
        ids.extend(model.tokenize(d))
        ids.append(eos)
    return ids


def model_loss(model, ids, window):
    nll, n = 0.0, 0
    for at in range(0, len(ids) - 1, window):
        w = ids[at:at + window + 1]
        if len(w) < 2:
            break
        logits = model.logits(w[:-1]).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        nll -= logp[np.arange(len(w) - 1), w[1:]].sum()
        n += len(w) - 1
    return nll / n, n


def bigram_loss(train, val, vocab):
    train = np.asarray(train, dtype=np.int64)
    uni = np.ones(vocab)
    np.add.at(uni, train[1:], 1)
    frm = np.zeros(vocab)
    np.add.at(frm, train[:-1], 1)
    pairs = train[:-1] * vocab + train[1:]
    keys, counts = np.unique(pairs, return_counts=True)
    table = dict(zip(keys.tolist(), counts.tolist()))
    pu_all = uni / uni.sum()
    nll = 0.0
    for a, b in zip(val[:-1], val[1:]):
        pu = pu_all[b]
        if frm[a] > 0:
            nll -= math.log(0.9 * table.get(a * vocab + b, 0) / frm[a] + 0.1 * pu)
        else:
            nll -= math.log(pu)
    return nll / (len(val) - 1)


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "data", "corpus", "out"))
    ap.add_argument("--jomoim", default=os.path.join(ROOT, "build", "release", "jomoim"))
    ap.add_argument("--json", help="also write the figures as JSON here")
    args = ap.parse_args()
    m = jomoim.Model.load(args.model, threads=1)
    cfg = m.config
    eos = m.eos_id
    out = {}

    val = joined_ids(m, documents(os.path.join(args.corpus, "heldout.txt")), eos)
    train = joined_ids(m, documents(os.path.join(args.corpus, "train.txt")), eos)
    loss, n = model_loss(m, val, cfg["n_positions"])
    # The baseline scores the same next tokens (each window's first token has no model context
    # either way; the bigram sees the token before it).
    base = bigram_loss(train, val, cfg["vocab_size"])
    out["heldout"] = {"tokens": n, "loss": loss, "bigram": base, "below_bigram": base - loss}
    print("## Held-out loss (every held-out token)\n")
    print("| held-out tokens | model | bigram baseline | below the baseline |")
    print("|---|---|---|---|")
    print(f"| {n:,} | {loss:.3f} | {base:.3f} | {base - loss:.3f} nats |\n")

    heads = json.loads(run([args.jomoim, "heads", "--model", args.model, "--json"]))["head_roles"]["heads"]
    out["heads"] = heads
    print("## Head roles (`jomoim heads --model models/default`)\n")
    print("| score | best head | value | label threshold |")
    print("|---|---|---|---|")
    for key, th in (("induction", 0.4), ("previous_token", 0.6), ("first_token", 0.6), ("self", 0.6)):
        b = max(heads, key=lambda h: h[key] if h[key] is not None else -1)
        print(f"| {key} | layer {b['layer']}, head {b['head']} | {b[key]:.3f} | {th} |")
    labelled = [f"L{h['layer']}H{h['head']} {'+'.join(h['labels'])}" for h in heads if h["labels"]]
    print(f"\nLabelled heads: {', '.join(labelled) if labelled else 'none'}.\n")

    print("## The seed's prompts (`jomoim predict`)\n")
    out["prompts"] = {}
    for p in PROMPTS:
        top = m.predict(p, top=5)
        out["prompts"][p] = [(t.text, t.probability) for t in top]
        print(f"- \"{p}\" → " + ", ".join(f"\"{t.text}\" {t.probability:.3f}" for t in top))
    print()

    print("## Continuations (unedited; `jomoim generate`, 30 tokens)\n")
    out["continuations"] = {}
    for p in EVERYDAY:
        greedy = run([args.jomoim, "generate", "--model", args.model, "--threads", "1", "--tokens", "30", "--temperature", "0", p])
        sampled = run([args.jomoim, "generate", "--model", args.model, "--threads", "1", "--tokens", "30", "--temperature", "0.8",
                       "--top-k", "40", "--top-p", "0.95", "--seed", "1", p])
        out["continuations"][p] = {"greedy": greedy, "sampled": sampled}
        print(f"- greedy: `{greedy.strip()!r}`")
        print(f"- sampled (seed 1): `{sampled.strip()!r}`")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
