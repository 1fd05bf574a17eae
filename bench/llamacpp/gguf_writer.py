"""A small GGUF v3 writer (NumPy only) and a Hugging Face GPT-2 -> GGUF converter for llama.cpp's
`gpt2` architecture, with F32, F16 and Q8_0 weights.

    /usr/bin/python3 bench/llamacpp/gguf_writer.py MODEL_DIR OUT.gguf --type f32|f16|q8_0

Neither Debian 12 nor npm has a maintained GGUF writer (llama.cpp's own gguf-py is not packaged
here), so this follows the published format:

  header   "GGUF", u32 version (3), u64 tensor count, u64 metadata count
  metadata key (u64 length + UTF-8), u32 value type, value (arrays: u32 element type, u64 count)
  tensors  name, u32 dims, u64 ne[dims] (ne[0] the fastest-varying), u32 ggml type,
           u64 offset from the start of the data section (each a multiple of the alignment)
  data     after padding the header to `general.alignment` (32)

Tensor layout for `gpt2` (llama.cpp's LLM_ARCH_GPT2): token_embd, position_embd, output_norm,
blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm, ffn_up, ffn_down} (.weight and .bias);
`output` is left out, so llama.cpp ties the head to token_embd. Hugging Face stores GPT-2's
Conv1D matrices as [in, out]; ggml wants ne = {in, out}, which is NumPy [out, in], so they are
transposed. Quantization rules as llama.cpp's converter applies them: 1-D tensors (norms,
biases) and position_embd stay F32; the other matrices take the requested type. Q8_0 = blocks of
32 values along a row: an f16 scale d = max|x| / 127 and 32 int8 round(x / d) (round half away
from zero, as C's roundf).
"""
import json
import os
import struct
import sys

import numpy as np

# GGUF metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
_SCALAR = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f", T_BOOL: "?",
           T_U64: "Q", T_I64: "q", T_F64: "d"}
_NUMPY = {T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4", T_F32: "<f4",
          T_U64: "<u8", T_I64: "<i8", T_F64: "<f8"}
# ggml tensor types, and llama_ftype (general.file_type) for a file that is "mostly" that type
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
WEIGHT_TYPES = {"f32": (GGML_F32, 0), "f16": (GGML_F16, 1), "q8_0": (GGML_Q8_0, 7)}
QK8_0 = 32
ALIGNMENT = 32


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class GGUFWriter:
    """Collects metadata and tensors, then writes the file in one pass."""

    def __init__(self, alignment=ALIGNMENT):
        self.alignment = alignment
        self.meta = []     # (key, type, value, element type)
        self.tensors = []  # (name, ne, ggml type, raw bytes)
        self.add("general.alignment", T_U32, alignment)

    def add(self, key, vtype, value, etype=None):
        if any(k == key for k, *_ in self.meta):
            raise ValueError(f"duplicate metadata key {key}")
        self.meta.append((key, vtype, value, etype))

    def add_tensor(self, name, array, ggml_type):
        """array: float32 NumPy array in row-major order ([rows, cols] -> ne = {cols, rows})."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        if ggml_type == GGML_F32:
            raw = a.astype("<f4").tobytes()
        elif ggml_type == GGML_F16:
            raw = a.astype("<f2").tobytes()
        elif ggml_type == GGML_Q8_0:
            raw = quantize_q8_0(a)
        else:
            raise ValueError(f"ggml type {ggml_type}")
        self.tensors.append((name, list(reversed(a.shape)), ggml_type, raw))

    def _value(self, vtype, value, etype):
        if vtype == T_STRING:
            return _string(value)
        if vtype != T_ARRAY:
            return struct.pack("<" + _SCALAR[vtype], value)
        head = struct.pack("<IQ", etype, len(value))
        if etype == T_STRING:
            return head + b"".join(_string(s) for s in value)
        if etype in _NUMPY:
            return head + np.asarray(value, dtype=_NUMPY[etype]).tobytes()
        return head + b"".join(struct.pack("<" + _SCALAR[etype], v) for v in value)

    def write(self, path):
        pad = lambda n: (-n) % self.alignment
        head = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.meta))]
        for key, vtype, value, etype in self.meta:
            head += [_string(key), struct.pack("<I", vtype), self._value(vtype, value, etype)]
        offset = 0
        for name, ne, gtype, raw in self.tensors:
            head += [_string(name), struct.pack(f"<I{len(ne)}Q", len(ne), *ne), struct.pack("<IQ", gtype, offset)]
            offset += len(raw) + pad(len(raw))
        head = b"".join(head)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head + b"\0" * pad(len(head)))
            for _, _, _, raw in self.tensors:
                f.write(raw + b"\0" * pad(len(raw)))
        os.replace(tmp, path)


def quantize_q8_0(a):
    """Q8_0 blocks of the rows of a (the last dimension a multiple of 32): per block an f16
    d = max|x| / 127, then 32 int8 roundf(x / d) (x * (1/d) in float32, as ggml computes it)."""
    x = a.reshape(-1, QK8_0).astype(np.float32)
    d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    y = (x * inv[:, None]).astype(np.float64)  # the float32 product, rounded exactly in float64
    q = (np.sign(y) * np.floor(np.abs(y) + 0.5)).astype(np.int8)
    block = np.empty((x.shape[0], 2 + QK8_0), dtype=np.uint8)
    block[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    block[:, 2:] = q.view(np.uint8)
    return block.tobytes()


def dequantize_q8_0(raw, shape):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 2 + QK8_0)
    d = b[:, :2].copy().view("<f2").astype(np.float32)
    return (b[:, 2:].copy().view(np.int8).astype(np.float32) * d).reshape(shape)


def read_safetensors(path):
    """name -> float32 array (F32, F16 or BF16 files)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = data[lo:hi]
        if info["dtype"] == "F32":
            a = raw.view("<f4")
        elif info["dtype"] == "F16":
            a = raw.view("<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {info['dtype']}")
        out[name] = np.asarray(a, dtype=np.float32).reshape(info["shape"])
    return out


_BLOCK = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
          "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
_TOP = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight", "ln_f.weight": "output_norm.weight",
        "ln_f.bias": "output_norm.bias"}


def gguf_name(hf_name):
    """(GGUF name, is a Conv1D matrix) for a Hugging Face GPT-2 tensor, or None to leave out."""
    n = hf_name[len("transformer."):] if hf_name.startswith("transformer.") else hf_name
    if n.endswith((".attn.bias", ".attn.masked_bias")) or n == "lm_head.weight":
        return None  # causal-mask buffers; the head is tied to wte
    if n in _TOP:
        return _TOP[n], False
    parts = n.split(".")
    if parts[0] != "h" or len(parts) < 4:
        raise ValueError(f"unexpected tensor {hf_name}")
    module, kind = ".".join(parts[2:-1]), parts[-1]
    if module not in _BLOCK:
        raise ValueError(f"unexpected tensor {hf_name}")
    return f"blk.{int(parts[1])}.{_BLOCK[module]}.{kind}", kind == "weight" and module not in ("ln_1", "ln_2")


def read_tokenizer(model_dir, vocab_size):
    with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    for piece, i in vocab.items():
        if i < vocab_size:
            tokens[i] = piece
    merges = []
    with open(os.path.join(model_dir, "merges.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#version"):
                merges.append(line)
    return tokens, merges


def convert(model_dir, out_path, wtype="f32"):
    if wtype not in WEIGHT_TYPES:
        raise ValueError(f"--type: expected one of {', '.join(WEIGHT_TYPES)}, got {wtype}")
    ggml_type, file_type = WEIGHT_TYPES[wtype]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("tie_word_embeddings", True) is False:
        raise ValueError("untied output heads are not handled (jomoim's GPT-2 ties them)")
    C, V = cfg["n_embd"], cfg["vocab_size"]
    tokens, merges = read_tokenizer(model_dir, V)
    eot = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else V - 1
    eos = cfg.get("eos_token_id", eot)
    bos = cfg.get("bos_token_id", eos)

    w = GGUFWriter()
    w.add("general.architecture", T_STRING, "gpt2")
    w.add("general.name", T_STRING, os.path.basename(os.path.abspath(model_dir)))
    w.add("general.file_type", T_U32, file_type)
    if ggml_type == GGML_Q8_0:
        w.add("general.quantization_version", T_U32, 2)
    w.add("gpt2.context_length", T_U32, cfg["n_positions"])
    w.add("gpt2.embedding_length", T_U32, C)
    w.add("gpt2.feed_forward_length", T_U32, cfg.get("n_inner") or 4 * C)
    w.add("gpt2.block_count", T_U32, cfg["n_layer"])
    w.add("gpt2.attention.head_count", T_U32, cfg["n_head"])
    w.add("gpt2.attention.layer_norm_epsilon", T_F32, float(cfg.get("layer_norm_epsilon", 1e-5)))
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, "gpt-2")
    w.add("tokenizer.ggml.tokens", T_ARRAY, tokens, T_STRING)
    # llama_token_type: 1 normal, 3 control
    w.add("tokenizer.ggml.token_type", T_ARRAY, [3 if t == "<|endoftext|>" else 1 for t in tokens], T_I32)
    w.add("tokenizer.ggml.merges", T_ARRAY, merges, T_STRING)
    w.add("tokenizer.ggml.bos_token_id", T_U32, bos)
    w.add("tokenizer.ggml.eos_token_id", T_U32, eos)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)

    for hf, a in read_safetensors(os.path.join(model_dir, "model.safetensors")).items():
        m = gguf_name(hf)
        if m is None:
            continue
        name, conv1d = m
        if conv1d:
            a = a.T
        keep_f32 = a.ndim < 2 or name == "position_embd.weight"
        t = GGML_F32 if keep_f32 else ggml_type
        if t == GGML_Q8_0 and a.shape[-1] % QK8_0:
            t = GGML_F16  # rows that do not split into blocks of 32
        w.add_tensor(name, a, t)
    w.write(out_path)
    return out_path


if __name__ == "__main__":
    args = sys.argv[1:]
    wtype = "f32"
    if "--type" in args:
        i = args.index("--type")
        wtype = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    convert(args[0], args[1], wtype)
    print(f"wrote {args[1]} ({os.path.getsize(args[1]) / 2**20:.1f} MiB, {wtype})")
