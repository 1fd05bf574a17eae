#!/usr/bin/env python3
"""make_npy_corpus.py: writes the seed corpus of the .npy reader's fuzzer (fuzz/corpus/npy/).

A few valid files (the shapes and header spellings the reader accepts) and one file of each
kind it must refuse, so that the fuzzer starts from every branch of the header parser rather
than having to discover the NumPy format from nothing. Standard library only, deterministic:

    python3 fuzz/make_npy_corpus.py            # rewrites fuzz/corpus/npy/
"""
import os
import struct
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "npy")


def header(d, version=(1, 0), align=64):
    """The preamble and header for the dict text `d`, padded with spaces to `align` as NumPy
    does (align=1: no padding beyond the final newline)."""
    prefix = 10 if version[0] == 1 else 12
    text = d.encode("ascii")
    text += b" " * ((-(prefix + len(text) + 1)) % align) + b"\n"
    length = struct.pack("<H", len(text)) if version[0] == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes(version) + length + text


def dict_for(shape, descr="'<f4'", fortran="False"):
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


def floats(n, start=0.0):
    return struct.pack("<%df" % n, *[start + 0.5 * i for i in range(n)])


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    seeds = {
        # accepted
        "valid_2x3.npy": header(dict_for("(2, 3)")) + floats(6),
        "valid_scalar.npy": header(dict_for("()")) + floats(1),
        "valid_1d.npy": header(dict_for("(5,)")) + floats(5),
        "valid_empty_dim.npy": header(dict_for("(0, 7)")),
        "valid_rank4.npy": header(dict_for("(1, 2, 3, 2)")) + floats(12),
        "valid_v2.npy": header(dict_for("(2, 2)"), version=(2, 0)) + floats(4),
        "valid_unpadded_keys_reordered.npy":
            header('{"shape":(3,),"descr":"<f4","fortran_order":False}', align=1) + floats(3),
        # refused
        "bad_magic.npy": b"\x93NUMPZ" + header(dict_for("(2,)"))[6:] + floats(2),
        "bad_version3.npy": header(dict_for("(2,)"), version=(3, 0)) + floats(2),
        "bad_float64.npy": header(dict_for("(2,)", descr="'<f8'")) + floats(4),
        "bad_big_endian.npy": header(dict_for("(2,)", descr="'>f4'")) + floats(2),
        "bad_structured.npy": header(dict_for("(2,)", descr="[('a', '<f4')]")) + floats(2),
        "bad_fortran.npy": header(dict_for("(2, 2)", fortran="True")) + floats(4),
        "bad_extra_key.npy": header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': None}") + floats(1),
        "bad_shape_int.npy": header(dict_for("(2)")) + floats(2),
        "bad_negative_dim.npy": header(dict_for("(-1, 2)")),
        "bad_overflow.npy": header(dict_for("(4294967296, 4294967296)")),
        "bad_truncated.npy": (header(dict_for("(2, 3)")) + floats(6))[:-3],
        "bad_trailing.npy": header(dict_for("(2,)")) + floats(3),
        "bad_header_past_eof.npy": b"\x93NUMPY\x01\x00\xff\x00{'descr'",
        "bad_no_newline.npy": header(dict_for("(1,)"))[:-1] + b" " + floats(1),
        "bad_empty.npy": b"",
    }
    for name, data in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} files to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
