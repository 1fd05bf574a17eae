#!/usr/bin/env python3
"""make_bpe_corpus.py: writes the seed corpus of the tokenizer's fuzzer (fuzz/corpus/bpe/).

The first byte of an input picks the mode (see bpe_fuzz.cpp): 0 text to encode, 1 a merge
spec and text, 2 vocab.json and merges.txt for the loader (valid and each kind of invalid).
Standard library only, deterministic:

    python3 fuzz/make_bpe_corpus.py            # rewrites fuzz/corpus/bpe/
"""
import json
import os
import shutil

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "bpe")


def byte_alphabet():
    """GPT-2's byte -> character table."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def tok(raw: bytes) -> str:
    t = byte_alphabet()
    return "".join(t[b] for b in raw)


def vocab(extra):
    tokens = [tok(bytes([b])) for b in range(256)] + [tok(e) for e in extra]
    return json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False).encode()


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    seeds = {}
    texts = {
        "english": b"I have a lot of things, don't you? They'll see.",
        "code": b"for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "spaces": b"a  b   c\n\n\n    d \t\t e   ",
        "korean": "\uc5b4\ud150\uc158\uc774 \uc870\ubaa8\uc784\uc774\ub77c\uba74 123".encode(),
        "emoji": "go \U0001F680\U0001F600! caf\u00e9 na\u00efve".encode(),
        "invalid": b"ab\xff\xfe\xc3 \xed\xa0\x80 x\xf4\x90\x80\x80 \xc0\xaf!",
        "whitespace_kinds": "a\u00a0b\u3000c\u0085d\u180ee\ufefff\u2028".encode(),
    }
    for name, t in texts.items():
        seeds["text_" + name] = b"\x00" + t
    seeds["merges_chain"] = b"\x01" + bytes([0, 1, 0, 4, 0, 0, 4, 4, 1, 2, 4, 0]) + b"\x00abab ab aab\xff\xff"
    seeds["merges_reordered"] = b"\x01" + bytes([0, 1, 0, 4, 0, 0, 0, 0, 9, 3, 3, 1]) + b"\x00abababa  a\xff"
    extra = [b"ab", b"abc", b" a"]
    good_vocab = vocab(extra)
    good_merges = "#version: 0.2\n{} {}\n{} {}\n{} {}\n".format(
        tok(b"a"), tok(b"b"), tok(b"ab"), tok(b"c"), tok(b" "), tok(b"a")).encode()
    seeds["load_valid"] = b"\x02" + good_vocab + b"\x00" + good_merges
    seeds["load_no_version_crlf"] = b"\x02" + good_vocab + b"\x00" + good_merges.split(b"\n", 1)[1].replace(b"\n", b"\r\n")
    seeds["load_duplicate_key"] = b"\x02" + good_vocab[:-1] + b', "a": 300}' + b"\x00"
    seeds["load_gap"] = b"\x02" + good_vocab[:-1] + b', "zz": 400}' + b"\x00"
    seeds["load_not_object"] = b"\x02[1, 2, {\"a\": 3}]\x00"
    seeds["load_truncated"] = b"\x02" + good_vocab[: len(good_vocab) // 2] + b"\x00"
    seeds["load_bad_merge_line"] = b"\x02" + good_vocab + b"\x00a b c\n"
    seeds["load_unknown_merge"] = b"\x02" + good_vocab + b"\x00a zz\n"
    seeds["load_bad_result"] = b"\x02" + good_vocab + b"\x00b a\n"
    seeds["load_missing_byte"] = b"\x02{\"a\": 0}\x00"
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"make_bpe_corpus.py: {len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
