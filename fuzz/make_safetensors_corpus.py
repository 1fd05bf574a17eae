#!/usr/bin/env python3
"""make_safetensors_corpus.py: writes the seed corpus of the safetensors reader's fuzzer
(fuzz/corpus/safetensors/).

A few valid files (every dtype family, scalars, zero-size tensors, metadata, header padding
and order variants) and one file of each kind the reader must refuse, so that the fuzzer
starts from every branch of the validation. Standard library only, deterministic:

    python3 fuzz/make_safetensors_corpus.py      # rewrites fuzz/corpus/safetensors/
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def st(header, data=b"", pad=True):
    """A file from a header (dict, or str/bytes taken as is) and data bytes."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def e(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    d16 = f32(1, 2, 3, 4)
    seeds = {
        # accepted
        "valid_empty": st({}),
        "valid_f32": st({"w": e("F32", [2, 2], 0, 16)}, d16),
        "valid_scalar": st({"s": e("F32", [], 0, 4)}, f32(7)),
        "valid_mixed": st({"__metadata__": {"format": "pt"}, "i": e("I64", [1], 0, 8), "h": e("F16", [2], 8, 12),
                           "b": e("BF16", [2], 12, 16), "z": e("F32", [0, 3], 16, 16), "u": e("U8", [3], 16, 19),
                           "f": e("F32", [1], 19, 23)},
                          struct.pack("<q", -5) + struct.pack("<HH", 0x3C00, 0x7C00) + struct.pack("<HH", 0x3F80, 0x0001)
                          + b"abc" + f32(0.5)),
        "valid_unpadded_reordered": st('{"b":{"shape":[1],"data_offsets":[4,8],"dtype":"F32"},'
                                       '"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}}\n\t', f32(1, 2), pad=False),
        "valid_all_dtypes": st({t: e(t, [1], i * 8, i * 8 + s) if s == 8 else e(t, [8 // s], i * 8, i * 8 + 8)
                                for i, (t, s) in enumerate([("BOOL", 1), ("U8", 1), ("I8", 1), ("F8_E5M2", 1),
                                                            ("F8_E4M3", 1), ("I16", 2), ("U16", 2), ("F16", 2),
                                                            ("BF16", 2), ("I32", 4), ("U32", 4), ("F32", 4),
                                                            ("F64", 8), ("I64", 8), ("U64", 8)])}, bytes(range(120))),
        # refused
        "bad_short": b"\x08\x00\x00",
        "bad_length_huge": struct.pack("<Q", 2**64 - 1) + b"{}",
        "bad_length_past_end": struct.pack("<Q", 64) + b"{}",
        "bad_not_object": st("[]"),
        "bad_json": st('{"a":'),
        "bad_utf8": st(b'{"\xff":{}}'),
        "bad_nul": st(b"{}\x00{}"),
        "bad_duplicate": st('{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                            '"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
        "bad_entry_not_object": st('{"x":[1,2]}'),
        "bad_unknown_key": st('{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"k":0}}', f32(1)),
        "bad_dtype": st({"x": e("F128", [1], 0, 16)}, d16),
        "bad_negative_dim": st({"x": e("F32", [-1], 0, 4)}, f32(1)),
        "bad_float_dim": st('{"x":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', f32(1)),
        "bad_wrong_length": st({"x": e("F32", [3], 0, 16)}, d16),
        "bad_overflow": st({"x": e("F32", [2**62, 4], 0, 0)}),
        "bad_past_data": st({"x": e("F32", [4], 4, 20)}, d16),
        "bad_overlap": st({"a": e("F32", [3], 0, 12), "b": e("F32", [2], 8, 16)}, d16),
        "bad_hole": st({"a": e("F32", [1], 0, 4), "b": e("F32", [2], 8, 16)}, d16),
        "bad_trailing": st({"a": e("F32", [3], 0, 12)}, d16),
        "bad_metadata": st('{"__metadata__":{"n":1}}'),
        "bad_deep": st('{"a":[[[[[[1]]]]]]}'),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
