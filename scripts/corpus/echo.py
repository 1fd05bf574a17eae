#!/usr/bin/env python3
"""The "echo" version of the training corpus: every document with every third passage said twice.

    /usr/bin/python3 scripts/corpus/echo.py data/corpus/out/train.txt data/corpus/out/train-echo.txt

The default model's second training phase (scripts/train-default-model.sh) reads it. Natural
text repeats itself only now and then (a name, a refrain), which is why small models are slow
to learn in-context copying (induction heads). Here each document is cut into passages of up
to MAX_CHARS characters at sentence ends (". ", "! ", "? " or a newline; a longer sentence is
one passage), and every third passage is followed by itself: "A B C C D E F F ..." (a quarter of the text is an echo). A passage of
at most ~90 tokens and its echo fit in the model's 256-token context. The text is otherwise
untouched: documents stay whole and in order, separated by "\\n<|endoftext|>\\n" as the
corpus is. Deterministic: the same input gives the same bytes.
"""
import os
import re
import sys

SEP = "\n<|endoftext|>\n"
MAX_CHARS = 350
END = re.compile(r"(?<=[.!?])\s+|\n+")


def passages(doc):
    out, cur = [], ""
    pos = 0
    for m in END.finditer(doc):
        piece = doc[pos:m.end()]
        pos = m.end()
        if cur and len(cur) + len(piece) > MAX_CHARS:
            out.append(cur)
            cur = ""
        cur += piece
    piece = doc[pos:]
    if cur and len(cur) + len(piece) > MAX_CHARS:
        out.append(cur)
        cur = ""
    cur += piece
    if cur:
        out.append(cur)
    return out


def echo(doc):
    res = []
    for k, p in enumerate(passages(doc)):
        # A passage ends with the space or newline after its sentence (the last one may not).
        res.append(((p if p[-1:].isspace() else p + " ") + p) if k % 3 == 2 else p)
    return "".join(res)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: echo.py TRAIN.txt OUT.txt")
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.split(SEP) if d]
    out = SEP.join(echo(d) for d in docs) + SEP
    tmp = sys.argv[2] + ".tmp"  # written whole, then renamed
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(out)
    os.replace(tmp, sys.argv[2])
    print(f"echo.py: {len(docs)} documents, {len(text):,} -> {len(out):,} characters")


if __name__ == "__main__":
    main()
