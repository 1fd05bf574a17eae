"""test_model.py — jomoim.Model against PyTorch and against the `jomoim` commands.

Needs the tiny checkpoints of tests/model/tiny_gpt2.py (CTest fixture tiny_gpt2) and the CLI:

    JOMOIM_TINY_GPT2=build/release/tests/tiny_gpt2 JOMOIM_EXE=build/release/jomoim \\
    PYTHONPATH=build/release/python /usr/bin/python3 -m pytest -q python/tests/test_model.py

(CTest's python_model sets both.) Logits are compared with tiny_gpt2.torch_logits, an independent
float64 PyTorch implementation of the architecture; tokenize, predict, generate and sampling with
a seed with what the commands print for the same arguments; refusals with the commands' messages.
"""
import gc
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import jomoim
from gil import count_during

SOURCE = pathlib.Path(__file__).resolve().parents[2]
ROOT = os.environ.get("JOMOIM_TINY_GPT2")
EXE = os.environ.get("JOMOIM_EXE")
SANITIZED = os.environ.get("JOMOIM_SANITIZED") == "1"
if not ROOT or not EXE:
    pytest.skip("JOMOIM_TINY_GPT2 (tests/model/tiny_gpt2.py make DIR) and JOMOIM_EXE (the jomoim program) "
                "are not set", allow_module_level=True)

sys.path.insert(0, str(SOURCE / "tests" / "model"))
import tiny_gpt2  # noqa: E402

VARIANTS = [v["name"] for v in tiny_gpt2.VARIANTS]
# Words, repeats, blank lines, one byte, non-ASCII (merges do not cover it: byte tokens).
PROMPTS = ["I have a lot", "Cash or credit card? I have a lot", "the the the\n\n  x", "a", "héllo 조모임 🙂"]


def variant_dir(name):
    return os.path.join(ROOT, name)


def manifest():
    with open(os.path.join(ROOT, "manifest.json")) as f:
        return json.load(f)


_models = {}


def model(name="f32"):
    if name not in _models:
        _models[name] = jomoim.Model.load(variant_dir(name))
    return _models[name]


def cli(*args, ok=True):
    p = subprocess.run([EXE, *args], capture_output=True, timeout=120)
    if ok and p.returncode != 0:
        raise AssertionError(f"jomoim {args} failed: {p.stderr.decode(errors='replace')}")
    return p


def cli_json(*args):
    return json.loads(cli(*args, "--json").stdout)


def cli_printable(raw: bytes) -> str:
    """How the commands' JSON spells a token's bytes (cmd_model.cpp's printable): valid UTF-8
    as is, control bytes and the backslash escaped, invalid bytes as \\xNN."""
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        n = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        chunk = raw[i:i + n] if n else b""
        if not n or len(chunk) < n or any(b >> 6 != 2 for b in chunk[1:]):
            out.append(f"\\x{c:02x}")
            i += 1
            continue
        if n == 1 and (c < 0x20 or c == 0x7F or c == 0x5C):
            out.append({0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r", 0x5C: "\\\\"}.get(c, f"\\x{c:02x}"))
        else:
            out.append(chunk.decode("utf-8", errors="surrogateescape"))
        i += n
    return "".join(out)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# ---------------------------------------------------------------------------------------------
# Numbers: logits against PyTorch.

@pytest.mark.parametrize("name", VARIANTS)
def test_logits_equal_pytorch(name):
    m = model(name)
    var = next(v for v in manifest()["variants"] if v["name"] == name)
    assert m.vocab_size == var["vocab_size"]
    for case in var["cases"]:
        ids = case["ids"]
        expected = np.load(os.path.join(ROOT, case["logits"]))
        got = m.logits(ids)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.flags.writeable
        assert got.shape == (len(ids), m.vocab_size) == expected.shape
        assert rel(got, expected) <= 1e-4, (name, len(ids), rel(got, expected))
        # Row t only depends on ids[:t + 1] (causal): the last row of a prefix is that row.
        t = len(ids) // 2
        np.testing.assert_allclose(m.logits(ids[:t + 1])[-1], got[t], rtol=1e-5, atol=1e-5 * np.abs(got).max())


def test_logits_accept_integer_sequences_and_arrays():
    m = model()
    ids = [40, 3, 257, 0, m.vocab_size - 1]
    ref = m.logits(ids)
    for form in (tuple(ids), np.array(ids, np.int64), np.array(ids, np.uint16), np.array(ids, np.int32)[::1],
                 np.array(ids + ids, np.int64)[::2][:5] * 0 + np.array(ids), (np.int64(i) for i in ids)):
        np.testing.assert_array_equal(m.logits(form), ref)
    # A fresh array each call, owned by NumPy's side: writing to it changes nothing else.
    a = m.logits(ids)
    a[:] = 0
    np.testing.assert_array_equal(m.logits(ids), ref)


def test_predict_is_the_softmax_of_the_last_logits():
    m = model("f16_prefixed")
    for prompt in PROMPTS:
        last = m.logits(m.tokenize(prompt))[-1].astype(np.float64)
        top = m.predict(prompt, top=m.vocab_size)
        assert sorted(x.id for x in top) == list(range(m.vocab_size))
        # The probabilities are the float64 softmax of the logits predict reports ...
        logits = np.zeros(m.vocab_size)
        for x in top:
            logits[x.id] = x.logit
        p = np.exp(logits - logits.max())
        p /= p.sum()
        for x in top:
            assert isinstance(x, jomoim.Prediction)
            # ... which are the last row of logits() (another path: the KV-cache pass of the prompt).
            assert x.logit == pytest.approx(last[x.id], rel=1e-5, abs=1e-5 * np.abs(last).max())
            assert x.probability == pytest.approx(p[x.id], rel=1e-12, abs=1e-15)
            assert x.text == m.token_bytes(x.id).decode("utf-8", errors="backslashreplace")
        probs = [x.probability for x in top]
        assert probs == sorted(probs, reverse=True)
        assert sum(probs) == pytest.approx(1.0, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# The same answers as the commands.

@pytest.mark.parametrize("name", VARIANTS)
def test_tokenize_equals_the_cli(name):
    m = model(name)
    texts = PROMPTS + ["", " ", "I\tI  I\n", "x" * 100]
    for text in texts:
        if text:  # the CLI takes the text as an argument: no empty argument needed
            assert m.tokenize(text) == cli_json("tokenize", "--model", variant_dir(name), text)["ids"], text
        ids = m.tokenize(text)
        assert m.decode(ids) == text
        assert m.decode_bytes(ids) == text.encode()
        assert m.tokenize(text.encode()) == ids  # bytes and str agree
    # Bytes that are not UTF-8 go through as bytes, both ways.
    raw = b"ab\xff\xfe \xe2\x82 z\x80"
    ids = m.tokenize(raw)
    assert ids == cli_json("tokenize", "--model", variant_dir(name), raw)["ids"]
    assert m.decode_bytes(ids) == raw
    assert m.decode(ids) == raw.decode("utf-8", errors="replace")
    assert m.tokenize("") == [] and m.decode([]) == "" and m.decode_bytes([]) == b""


@pytest.mark.parametrize("name", VARIANTS)
def test_predict_equals_the_cli(name):
    m = model(name)
    for prompt in PROMPTS:
        for top in (1, 3, m.vocab_size, m.vocab_size + 5):
            want = cli_json("predict", "--model", variant_dir(name), "--top", str(top), prompt)["top"]
            got = m.predict(prompt, top=top)
            assert [x.id for x in got] == [t["id"] for t in want], (prompt, top)
            assert len(got) == min(top, m.vocab_size)
            for x, t in zip(got, want):
                assert x.probability == pytest.approx(t["probability"], rel=1e-6, abs=1e-12)
                assert x.logit == pytest.approx(t["logit"], rel=1e-6, abs=1e-6)
                assert cli_printable(m.token_bytes(x.id)) == t["text"]
    # The empty prompt starts from <|endoftext|>, as the CLI's does.
    assert m.eos_id == m.vocab_size - 1
    want = cli_json("predict", "--model", variant_dir(name), "--top", "5", "")
    assert want["ids"] == [m.eos_id]
    assert [x.id for x in m.predict("", top=5)] == [t["id"] for t in want["top"]]
    last = m.logits([m.eos_id])[-1]
    assert [x.id for x in m.predict(b"", top=5)] == sorted(range(m.vocab_size), key=lambda i: (-last[i], i))[:5]


def cli_generate(name, prompt, *args):
    return cli_json("generate", "--model", variant_dir(name), *args, prompt)


@pytest.mark.parametrize("name", VARIANTS)
def test_greedy_generation_equals_the_cli(name):
    m = model(name)
    for prompt in ["I have a lot", "the", ""]:
        for n, eos in ((12, False), (30, True), (0, True), (1, False)):
            want = cli_generate(name, prompt, "--temperature", "0", "-n", str(n), *([] if eos else ["--ignore-eos"]))
            s = m.stream(prompt, n=n, temperature=0, stop_at_eos=eos)
            text = "".join(s)
            assert s.prompt_ids == want["prompt_ids"]
            assert s.ids == want["ids"], (prompt, n, eos)
            assert s.stop == want["stop"]
            assert text == m.decode(s.ids)
            assert m.generate(prompt, n=n, temperature=0, stop_at_eos=eos) == text
            if m.decode_bytes(s.ids).decode("utf-8", errors="ignore") == m.decode_bytes(s.ids).decode("utf-8", "replace"):
                assert text == want["text"]  # valid UTF-8: the same text (the CLI's JSON replaces otherwise)


@pytest.mark.parametrize("name", ["f32", "bf16_gelu_erf"])
def test_seeded_sampling_equals_the_cli(name):
    m = model(name)
    settings = [
        ([], {}),  # the defaults: temperature 0.8, top_k 40, top_p 0.95
        (["--temperature", "1.5", "--top-k", "0", "--top-p", "1"], dict(temperature=1.5, top_k=0, top_p=1.0)),
        (["--temperature", "0.3", "--top-k", "3"], dict(temperature=0.3, top_k=3)),
        (["--temperature", "2", "--top-p", "0.5"], dict(temperature=2.0, top_p=0.5)),
    ]
    for seed in (0, 5, 123456789, 2**64 - 1):
        for args, kw in settings:
            want = cli_generate(name, "I have", "--seed", str(seed), "-n", "25", "--ignore-eos", *args)
            s = m.stream("I have", n=25, seed=seed, stop_at_eos=False, **kw)
            list(s)
            assert want["seed"] == s.seed == seed
            assert s.ids == want["ids"], (seed, args)
            assert s.stop == want["stop"] == "length"
    # Into the context's end: prompt + generated = n_positions, then "context".
    want = cli_generate(name, "I have a lot", "--seed", "1", "-n", "1000", "--ignore-eos")
    s = m.stream("I have a lot", n=1000, seed=1, stop_at_eos=False)
    list(s)
    assert s.ids == want["ids"] and s.stop == want["stop"] == "context"
    assert len(s.prompt_ids) + len(s.ids) == m.config["n_positions"]


def test_cli_and_python_run_one_generation_loop():
    # jomoim::Generation behind both: for each option, the same tokens and stop reason, whether
    # the loop ends at n, at <|endoftext|>, at the context's end or before the first token.
    m = model("f32")
    cases = [
        ([], {}),  # every default
        (["--temperature", "0"], dict(temperature=0)),
        (["--temperature", "1.2", "--top-k", "5"], dict(temperature=1.2, top_k=5)),
        (["--temperature", "3", "--top-k", "0", "--top-p", "0.7"], dict(temperature=3.0, top_k=0, top_p=0.7)),
    ]
    stops = set()
    for prompt in ("I have", ""):
        for n in (0, 7, 1000):
            for (args, kw), seed in zip(cases, (2, 2**40 + 3, 77, 2**64 - 2)):
                for eos in (True, False):
                    want = cli_generate("f32", prompt, "-n", str(n), "--seed", str(seed), *args,
                                        *([] if eos else ["--ignore-eos"]))
                    s = m.stream(prompt, n=n, seed=seed, stop_at_eos=eos, **kw)
                    list(s)
                    assert (s.prompt_ids, s.ids, s.stop, s.seed) == \
                        (want["prompt_ids"], want["ids"], want["stop"], want["seed"]), (prompt, n, seed, args, eos)
                    stops.add(s.stop)
    assert stops == {"length", "eos", "context"}
    # Without a seed both draw a fresh one of 32 bits (one rule), and report it: the CLI given
    # Python's drawn seed reproduces Python's tokens.
    s = m.stream("I have", n=12, stop_at_eos=False)
    list(s)
    want = cli_generate("f32", "I have", "-n", "12", "--ignore-eos", "--seed", str(s.seed))
    assert want["ids"] == s.ids
    drawn = [m.stream("I", n=0).seed for _ in range(8)] + [cli_generate("f32", "I", "-n", "0")["seed"] for _ in range(2)]
    assert all(0 <= x < 2**32 for x in drawn) and len(set(drawn)) > 1, drawn


def test_stream_pieces_and_state():
    m = model()
    s = m.stream("héllo", n=40, temperature=1.5, top_k=0, top_p=1.0, seed=7, stop_at_eos=False)
    assert iter(s) is s and s.stop is None and s.ids == [] and s.seed == 7
    assert s.prompt_ids == m.tokenize("héllo")
    pieces = []
    for piece in s:
        assert isinstance(piece, str) and piece
        pieces.append(piece)
        assert "".join(pieces) == m.decode_bytes(s.ids).decode("utf-8", errors="ignore") or "\ufffd" in "".join(pieces)
    assert s.stop == "length" and len(s.ids) == 40
    assert "".join(pieces) == m.decode(s.ids)
    assert list(s) == [] and s.stop == "length"  # exhausted stays exhausted
    # Random weights over a byte vocabulary: sampled bytes that are not UTF-8 come out as U+FFFD,
    # exactly as a whole decode gives them.
    for seed in range(8):
        t = m.stream(b"\xe2", n=30, temperature=3.0, top_k=0, top_p=1.0, seed=seed, stop_at_eos=False)
        assert "".join(t) == m.decode(t.ids)
    # seed=None draws a seed, and reports it: the same seed reproduces the ids.
    a = m.stream("I", n=10, stop_at_eos=False)
    list(a)
    b = m.stream("I", n=10, seed=a.seed, stop_at_eos=False)
    list(b)
    assert a.ids == b.ids
    # A stream keeps its model alive.
    loose = jomoim.Model.load(variant_dir("f32")).stream("I have", n=5, temperature=0)
    gc.collect()
    assert len(list(loose)) >= 1 and loose.stop in ("length", "eos")
    assert "Stream" in repr(loose)


def test_config_and_properties():
    m = model("bf16_gelu_erf")
    with open(os.path.join(variant_dir("bf16_gelu_erf"), "config.json")) as f:
        hf = json.load(f)
    c = m.config
    for key in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "n_inner", "activation_function"):
        assert c[key] == hf[key], key
    assert c["layer_norm_epsilon"] == pytest.approx(hf["layer_norm_epsilon"], rel=1e-6)
    assert c["head_dim"] == hf["n_embd"] // hf["n_head"]
    c["n_layer"] = 99  # a copy
    assert m.config["n_layer"] == hf["n_layer"]
    assert model("f32").config["n_inner"] is None
    assert m.path == variant_dir("bf16_gelu_erf") and m.path in repr(m)
    C, V, P, L, Fi = hf["n_embd"], hf["vocab_size"], hf["n_positions"], hf["n_layer"], hf["n_inner"]
    assert m.parameter_count == V * C + P * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C + C * Fi + Fi + Fi * C + C) + 2 * C
    assert jomoim.Model.load(pathlib.Path(variant_dir("f32"))).path == variant_dir("f32")
    assert jomoim.Model.load(variant_dir("f32"), threads=1).logits([1, 2]).shape == (2, model().vocab_size)


def test_default_model(monkeypatch):
    monkeypatch.setenv("JOMOIM_MODEL", variant_dir("f16_prefixed"))
    assert jomoim.default_model_dir() == variant_dir("f16_prefixed")
    m = jomoim.Model.load()
    assert m.path == variant_dir("f16_prefixed") and m.config["n_layer"] == 3
    monkeypatch.setenv("JOMOIM_MODEL", "/nonexistent/jomoim-model")
    with pytest.raises(jomoim.Error, match="^JOMOIM_MODEL /nonexistent/jomoim-model: no such directory$"):
        jomoim.Model.load()
    monkeypatch.delenv("JOMOIM_MODEL")
    if (SOURCE / "models" / "default").is_dir():
        # Found beside the package (the build tree's share/jomoim links to models/default).
        assert os.path.realpath(jomoim.default_model_dir()) == str((SOURCE / "models" / "default").resolve())
    else:
        with pytest.raises(jomoim.Error, match="no default model at .*set JOMOIM_MODEL"):
            jomoim.Model.load()


# ---------------------------------------------------------------------------------------------
# explain(): the CLI's JSON, with NumPy arrays for the matrices.

def assert_same_content(got, want, where="$"):
    """got (Model.explain) holds what want (json.loads of the CLI's output) holds: arrays equal
    the JSON lists read as their dtype (null -> -inf), everything else equal exactly."""
    if isinstance(got, np.ndarray):
        assert isinstance(want, list), where
        if got.dtype == bool:
            expected = np.array(want, dtype=bool)
        else:
            nulls = [[-np.inf if x is None else x for x in row] if isinstance(row, list) else row for row in want]
            expected = np.array(nulls, dtype=np.float64).astype(got.dtype)
        assert got.shape == expected.shape, where
        np.testing.assert_array_equal(got, expected, err_msg=where)
    elif isinstance(got, dict):
        assert isinstance(want, dict) and sorted(got) == sorted(want), (where, sorted(got), sorted(want))
        for k in got:
            assert_same_content(got[k], want[k], f"{where}.{k}")
    elif isinstance(got, list):
        assert isinstance(want, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same_content(a, b, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, (where, got, want)


EXPLAIN_CASES = [
    ([], {}),
    (["--layer", "1", "--head", "2", "--top", "3"], dict(layer=1, head=2, top=3)),
    (["--notation", "3b1b", "--layer", "0"], dict(notation="3b1b", layer=0)),
    (["--silence", "0", "--silence", "2", "--head", "1"], dict(silence=[2, 0, 2], head=1)),
    (["--swap-qk", "--top", "4"], dict(swap_qk=True, top=4)),
    (["--compare", "héllo a lot", "--layer", "1"], dict(compare="héllo a lot", layer=1)),
    (["--target", " lot", "--contrast", " a", "--layer", "0"], dict(target=" lot", contrast=" a", layer=0)),
]


@pytest.mark.parametrize("name", ["f32", "f16_prefixed"])
def test_explain_equals_the_cli(name):
    m = model(name)
    for prompt in ["I have a lot", "the the the\n\n  x"]:
        for args, kw in EXPLAIN_CASES:
            if name == "f16_prefixed" and kw.get("head") == 2:  # 2 heads there
                args, kw = args[:3] + ["1"] + args[4:], dict(kw, head=1)
            want = cli_json("explain", "--model", variant_dir(name), *args, prompt)
            got = m.explain(prompt, **kw)
            assert_same_content(got, want)
    # The empty prompt is explained as <|endoftext|>.
    got = m.explain("", layer=0, head=0)
    assert [t["id"] for t in got["tokens"]] == [m.eos_id]
    assert_same_content(got, cli_json("explain", "--model", variant_dir(name), "--layer", "0", "--head", "0", ""))


def test_explain_target_and_contrast():
    m = model("f32")
    j = m.explain("I have a lot", target=" lot", contrast=" a", matrices=False)
    a = j["attribution"]
    assert (a["target"]["text"], a["contrast"]["text"]) == (" lot", " a")
    assert abs(a["sum"] - (a["target"]["logit"] - a["contrast"]["logit"])) < 1e-4
    assert len(j["logit_lens"]) == m.config["n_layer"] + 1
    with pytest.raises(jomoim.Error, match="^target \"ab\" encodes to 2 tokens: it must be exactly one token$"):
        m.explain("I have a lot", target="ab")
    with pytest.raises(jomoim.Error, match="^contrast is the same token as the target$"):
        m.explain("I have a lot", target=" lot", contrast=" lot")


def test_explain_generate_equals_the_cli_and_stream():
    m = model("f32")
    d = variant_dir("f32")
    for kw, args in [({}, []), (dict(temperature=0.8, seed=3), ["--temperature", "0.8", "--seed", "3"]),
                     (dict(temperature=1.2, top_k=0, top_p=0.5, seed=9, stop_at_eos=False),
                      ["--temperature", "1.2", "--top-k", "0", "--top-p", "0.5", "--seed", "9", "--ignore-eos"])]:
        got = m.explain("I have a lot", generate=6, matrices=False, **kw)
        want = cli_json("explain", "--model", d, "--generate", "6", *args, "I have a lot")
        if "seed" not in kw:  # greedy: the seed does not matter, and the CLI drew its own
            want["generation"]["seed"] = got["generation"]["seed"]
        assert got["generation"] == want["generation"]
        assert [s["id"] for s in got["steps"]] == want["generation"]["ids"]
        s = m.stream("I have a lot", n=6, **dict(dict(temperature=0.0), **kw))
        list(s)
        assert s.ids == got["generation"]["ids"]
        for a, b in zip(got["steps"], want["steps"]):
            assert isinstance(a["attention"], np.ndarray) and a["attention"].dtype == np.float32
            assert a["attention"].shape == (m.config["n_layer"], m.config["n_head"], a["position"] + 1)
            assert a["attention"].tolist() == np.array(b["attention"], np.float64).astype(np.float32).tolist()
            assert a["attribution"] == b["attribution"] and a["prediction"] == b["prediction"]
    with pytest.raises(jomoim.Error, match="generate must be in 0..64"):
        m.explain("I have a lot", generate=65)
    with pytest.raises(jomoim.Error, match="^generate cannot be combined with compare$"):
        m.explain("I have a lot", generate=2, compare="a")
    with pytest.raises(TypeError, match="stop_at_eos"):
        m.explain("I have a lot", generate=2, stop_at_eos=1)


def test_head_roles_equal_the_cli():
    m = model("f32")
    d = variant_dir("f32")
    assert m.head_roles() == cli_json("heads", "--model", d)
    assert m.head_roles("I have a lot") == cli_json("heads", "--model", d, "I have a lot")
    assert m.head_roles(swap_qk=True) == cli_json("heads", "--model", d, "--swap-qk")
    j = m.head_roles()
    assert j["schema"] == "jomoim.heads/1" and j["head_roles"]["measured_on"] == "probe"
    assert len(j["head_roles"]["heads"]) == m.config["n_layer"] * m.config["n_head"]
    # explain()'s head_roles is the same measurement for its prompt.
    assert m.explain("I have a lot", matrices=False)["head_roles"] == m.head_roles("I have a lot")["head_roles"]
    with pytest.raises(TypeError, match="swap_qk"):
        m.head_roles(swap_qk=1)
    with pytest.raises(jomoim.Error, match="context"):
        m.head_roles("x" * 200)


def test_explain_arrays_are_the_model_s_attention():
    m = model()
    prompt = "Cash or credit card? I have a lot"
    ids = m.tokenize(prompt)
    T, D = len(ids), m.config["head_dim"]
    j = m.explain(prompt, silence=[1, 0])
    col = m.explain(prompt, silence=[0, 1], notation="3b1b")
    assert j["options"]["silence"] == [0, 1] and [t["silenced"] for t in j["tokens"][:3]] == [True, True, False]
    assert j["schema"] == "jomoim.explain/1" and j["model"]["name"] == m.path
    assert [t["id"] for t in j["tokens"]] == ids
    assert [x["id"] for x in j["baseline"]["top"]] == [x.id for x in m.predict(prompt)]
    assert len(j["layers"]) == m.config["n_layer"] and all(len(L["heads"]) == m.config["n_head"] for L in j["layers"])
    causal = np.tril(np.ones((T, T), bool))
    for L, Lc in zip(j["layers"], col["layers"]):
        for h, hc in zip(L["heads"], Lc["heads"]):
            q, k, v, w = h["q"], h["k"], h["v"], h["weights"]
            assert q.shape == k.shape == v.shape == h["out"].shape == (T, D) and w.shape == (T, T)
            assert q.dtype == w.dtype == h["scores"].dtype == np.float32 and h["mask"].dtype == bool
            mask = causal.copy()
            mask[:, :2] = False
            np.testing.assert_array_equal(h["mask"], mask)
            assert np.isneginf(h["scores"][~mask]).all() and np.isfinite(h["scores"][mask]).all()
            q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
            s = q64 @ k64.T
            np.testing.assert_allclose(h["scores"][mask], s[mask], rtol=1e-5, atol=1e-5 * np.abs(s).max())
            z = np.where(mask, s * h["scale"], -np.inf)
            zmax = z.max(axis=1, keepdims=True)
            live = np.isfinite(zmax[:, 0])
            p = np.zeros_like(z)
            p[live] = np.exp(z[live] - zmax[live])
            p[live] /= p[live].sum(axis=1, keepdims=True)
            np.testing.assert_allclose(w, p, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(h["out"], w.astype(np.float64) @ v64, rtol=1e-4, atol=1e-5 * np.abs(v64).max())
            assert not live[:2].any() and live[2:].all()  # queries 0 and 1 hear no one: zeros
            assert (w[:2] == 0).all() and (h["out"][:2] == 0).all()
            # 3b1b: the same numbers transposed.
            for key in ("q", "k", "v", "out", "scores", "scaled", "weights", "mask"):
                np.testing.assert_array_equal(hc[key], h[key].T, err_msg=key)
            np.testing.assert_array_equal(h["last_token"]["weights"], w[-1])
            np.testing.assert_allclose(h["last_token"]["value_norms"], np.linalg.norm(v64, axis=1), rtol=1e-6)
    mean = j["last_token_attention"]["mean_over_heads"]
    assert mean.dtype == np.float64 and mean.shape == (m.config["n_layer"], T)
    summary = m.explain(prompt, matrices=False)
    assert summary["layers"] == [] and len(summary["heads"]) == m.config["n_layer"] * m.config["n_head"]


def test_explain_refusals():
    m = model()
    P = m.config["n_positions"]
    for kw, word, cli_args in [
        (dict(layer=2), "layer 2 is out of range", ["--layer", "2"]),
        (dict(head=-1), "head -1 is out of range", ["--head", "-1"]),
        (dict(silence=[9]), "silence", ["--silence", "9"]),
        (dict(top=0), "top", None),
        (dict(notation="columns"), "notation", None),
        (dict(compare="x" * (P + 3)), "context", ["--compare", "x" * (P + 3)]),
    ]:
        with pytest.raises(jomoim.Error) as e:
            m.explain("I have", **kw)
        assert word in one_line(e), (kw, str(e.value))
        if cli_args:
            err = cli("explain", "--model", variant_dir("f32"), *cli_args, "--json", "I have", ok=False).stderr.decode()
            assert err == f"jomoim: error: {one_line(e)}\n"
    for kw in (dict(layer=1.0), dict(silence=3), dict(silence="12"), dict(swap_qk=1), dict(notation=3),
               dict(top="5"), dict(compare=7)):
        with pytest.raises(TypeError):
            m.explain("I have", **kw)
    with pytest.raises(TypeError):
        m.explain("I have", 0)  # options are keyword-only


# ---------------------------------------------------------------------------------------------
# Refusals: one-line jomoim.Error (a ValueError) with the engine's message, or TypeError.

def one_line(e):
    msg = str(e.value)
    assert msg and "\n" not in msg, msg
    return msg


def test_load_refusals(tmp_path):
    (tmp_path / "file").write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [("/nonexistent/model", "no such directory"), (str(tmp_path / "file"), "not a directory"),
             (str(empty), "vocab.json")]
    for path, word in cases:
        with pytest.raises(jomoim.Error) as e:
            jomoim.Model.load(path)
        assert word in one_line(e)
        # The engine's own message, word for word, as the CLI prints it.
        if path == str(empty):
            err = cli("predict", "--model", path, "hi", ok=False).stderr.decode()
            assert err == f"jomoim: error: {one_line(e)}\n"
    # Weights that disagree with config.json are named.
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in ("vocab.json", "merges.txt", "model.safetensors"):
        (broken / f).write_bytes((pathlib.Path(variant_dir("f32")) / f).read_bytes())
    cfg = json.loads((pathlib.Path(variant_dir("f32")) / "config.json").read_text())
    cfg["n_embd"] = 16
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(jomoim.Error) as e:
        jomoim.Model.load(str(broken))
    assert "model.safetensors" in one_line(e)
    with pytest.raises(TypeError, match="path"):
        jomoim.Model.load(3)
    with pytest.raises(jomoim.Error, match="threads"):
        jomoim.Model.load(variant_dir("f32"), threads=0)
    with pytest.raises(TypeError):
        jomoim.Model()


def test_call_refusals():
    m = model()
    V, P = m.vocab_size, m.config["n_positions"]
    value_errors = [
        (lambda: m.logits([]), "no tokens"),
        (lambda: m.logits([1, V]), "outside the vocabulary"),
        (lambda: m.logits([-1]), "outside the vocabulary"),
        (lambda: m.logits([2**40]), "outside the range of token ids"),
        (lambda: m.logits([1] * (P + 1)), "context"),
        (lambda: m.logits(np.zeros((2, 2), np.int64)), "1-D"),
        (lambda: m.decode([V + 7]), "id"),
        (lambda: m.token_bytes(-1), "id"),
        (lambda: m.predict("x" * (P + 5)), "context"),
        (lambda: m.predict("hi", top=0), "top"),
        (lambda: m.generate("hi", n=-1), "n must be >= 0"),
        (lambda: m.generate("hi", temperature=-1), "temperature"),
        (lambda: m.generate("hi", temperature=float("nan")), "temperature"),
        (lambda: m.generate("hi", temperature=1e300), "temperature"),
        (lambda: m.generate("hi", top_p=0), "top-p"),
        (lambda: m.generate("hi", top_p=1.5), "top-p"),
        (lambda: m.generate("hi", top_k=-2), "top_k"),
        (lambda: m.stream("hi", seed=-1), "seed"),
        (lambda: m.stream("hi", seed=2**64), "seed"),
        (lambda: m.tokenize("\ud800"), "UTF-8"),
    ]
    for call, word in value_errors:
        with pytest.raises(jomoim.Error) as e:
            call()
        assert isinstance(e.value, ValueError)
        assert word in one_line(e), (word, str(e.value))
    type_errors = [
        (lambda: m.logits("hello"), "ids"),
        (lambda: m.logits([1, 2.0]), "ids[1]"),
        (lambda: m.logits(np.array([1.0])), "dtype"),
        (lambda: m.logits(5), "ids"),
        (lambda: m.tokenize(5), "text"),
        (lambda: m.predict("hi", top=2.0), "top"),
        (lambda: m.generate("hi", n="3"), "n"),
        (lambda: m.generate("hi", temperature="hot"), "temperature"),
        (lambda: m.generate("hi", seed=1.0), "seed"),
        (lambda: m.generate("hi", stop_at_eos=1), "stop_at_eos"),
    ]
    for call, word in type_errors:
        with pytest.raises(TypeError) as e:
            call()
        assert word in one_line(e)
    # The engine's words are the CLI's words.
    for args, call in ((["predict", "x" * (P + 5)], lambda: m.predict("x" * (P + 5))),
                       (["generate", "--temperature", "-1", "hi"], lambda: m.generate("hi", temperature=-1)),
                       (["generate", "--top-p", "0", "hi"], lambda: m.generate("hi", top_p=0))):
        err = cli(args[0], "--model", variant_dir("f32"), *args[1:], ok=False).stderr.decode()
        with pytest.raises(jomoim.Error) as e:
            call()
        assert err == f"jomoim: error: {one_line(e)}\n"


def test_help_and_stubs_show_the_api():
    for f in (jomoim.Model.load, jomoim.Model.logits, jomoim.Model.predict, jomoim.Model.generate,
              jomoim.Model.stream, jomoim.Model.tokenize, jomoim.Model.decode):
        assert f.__doc__ and len(f.__doc__) > 60, f
    assert "GIL" in jomoim.Model.logits.__doc__ and "jomoim generate" in jomoim.Model.stream.__doc__
    stub = open(os.path.join(os.path.dirname(jomoim.__file__), "__init__.pyi")).read()
    compile(stub, "__init__.pyi", "exec")
    assert "jomoim.explain/1" in jomoim.Model.explain.__doc__ and "-inf" in jomoim.Model.explain.__doc__
    for name in ("class Model", "class Prediction", "class Stream", "def logits", "def predict", "def generate",
                 "def stream", "def explain", "def head_roles", "def default_model_dir"):
        assert name in stub, name


# ---------------------------------------------------------------------------------------------
# Threads, the GIL, leaks. A bigger random model, so that one forward pass takes a while.

@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("big_gpt2")
    vocab = tiny_gpt2.tiny_tokenizer(str(d))
    cfg = dict(n_layer=4, n_head=4, n_embd=256, n_positions=512, layer_norm_epsilon=1e-5,
               activation_function="gelu_new", n_inner=None, vocab_size=vocab, model_type="gpt2", n_ctx=512)
    w = tiny_gpt2.random_weights(cfg, seed=77)
    tiny_gpt2.write_safetensors(str(d / "model.safetensors"), list(w.items()))
    (d / "config.json").write_text(json.dumps(cfg))
    return jomoim.Model.load(str(d))


def test_gil_is_released_during_forward_passes(big):
    ids = list(np.random.default_rng(3).integers(0, big.vocab_size, size=512 if not SANITIZED else 256))
    elapsed, during, rate = count_during(lambda: big.logits(ids))
    assert elapsed > 0.02, "the forward pass is too quick to tell"
    assert during > 0.1 * rate * elapsed, (during, rate, elapsed)


def test_threads_share_a_model(big):
    prompts = ["I have a lot", "the the", "héllo", "a"]
    serial = [(big.logits(big.tokenize(p)), [x.id for x in big.predict(p, top=5)],
               big.stream(p, n=8, seed=3, stop_at_eos=False)) for p in prompts]
    for _, _, s in serial:
        list(s)
    results = [None] * len(prompts)
    errors = []

    def work(i):
        try:
            p = prompts[i]
            s = big.stream(p, n=8, seed=3, stop_at_eos=False)
            list(s)
            results[i] = (big.logits(big.tokenize(p)), [x.id for x in big.predict(p, top=5)], s.ids)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for (l, top, s), (l2, top2, ids2) in zip(serial, results):
        np.testing.assert_allclose(l2, l, rtol=1e-5, atol=1e-5 * np.abs(l).max())
        assert top2 == top and ids2 == s.ids


def test_a_stream_refuses_a_second_thread(big):
    prompt = bytes(np.random.default_rng(4).integers(0, 256, size=400, dtype=np.uint8))  # <= 400 tokens
    for _ in range(5):
        s = big.stream(prompt, n=3, temperature=0)
        errors = []

        def first():
            try:
                next(s)
            except Exception as e:  # pragma: no cover
                errors.append(e)

        t = threading.Thread(target=first)
        t.start()
        time.sleep(0.005)
        try:
            busy = t.is_alive()
            try:
                next(s)
                refused = None
            except jomoim.Error as e:
                refused = str(e)
        finally:
            t.join()
        assert not errors
        if busy and refused is not None:
            assert "already running in another thread" in refused
            return
    pytest.skip("the first step never outlasted the second thread's start")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")


def test_no_reference_or_memory_leaks():
    m = model()
    ids = np.array(m.tokenize("I have a lot of"), np.int64)
    ids_list = ids.tolist()

    def calls(n):
        for i in range(n):
            m.logits(ids)
            m.logits(ids_list)
            m.tokenize("the the\n x")
            m.decode(ids_list)
            m.predict("I have", top=3)
            m.explain("I have", layer=i % 2, silence=[0], compare="a")
            m.generate("I have", n=6, seed=i)
            s = m.stream("I", n=6, seed=i, stop_at_eos=False)
            next(s)  # abandoned midway
            for bad in (lambda: m.logits([]), lambda: m.logits([10**6]), lambda: m.predict("x" * 100),
                        lambda: m.generate("hi", top_p=0), lambda: m.logits([1.5]),
                        lambda: m.explain("hi", layer=5)):
                try:
                    bad()
                except (ValueError, TypeError):
                    pass

    calls(30)  # warm-up
    gc.collect()
    refs = [sys.getrefcount(ids), sys.getrefcount(m)]
    out = m.logits(ids)
    assert sys.getrefcount(out) == 2
    tracemalloc.start()
    try:
        traced = tracemalloc.get_traced_memory()[0]
        rss = rss_bytes()
        calls(300)
        gc.collect()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced
        rss_growth = rss_bytes() - rss
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(ids), sys.getrefcount(m)] == refs
    assert traced_growth < 64 * 1024, traced_growth
    if not SANITIZED:
        assert rss_growth < 4 * 2**20, rss_growth


# ---------------------------------------------------------------------------------------------
# KV cache formats: Model.load(kv_cache=...) against the reference with the format's rounding,
# against the CLI's --kv-cache, and refused where they cannot be.

@pytest.mark.parametrize("kv", ["f32", "bf16", "q8", "q4"])
def test_kv_cache_formats(kv):
    kf = manifest()["kv_formats"]
    d = os.path.join(ROOT, kf["dir"])
    m = jomoim.Model.load(d, kv_cache=kv)
    assert m.kv_cache == kv
    for case in kf["cases"]:
        want = np.load(os.path.join(ROOT, case["logits"][kv]))
        got = m.logits(case["ids"])
        assert rel(got, want) <= (1e-4 if kv == "f32" else 1e-3), (kv, len(case["ids"]))
        if kv != "f32" and len(case["ids"]) > 1:
            unrounded = np.load(os.path.join(ROOT, case["logits"]["f32"]))
            assert rel(got, want) * 10 < rel(got, unrounded)
    # The CLI's --kv-cache gives the same distribution, and says which format it used.
    for prompt in PROMPTS[:3]:
        j = cli_json("predict", "--model", d, "--kv-cache", kv, "--top", "5", prompt)
        assert j["kv_cache"] == kv
        got = m.predict(prompt, top=5)
        assert [x.id for x in got] == [t["id"] for t in j["top"]]
        for x, t in zip(got, j["top"]):
            assert x.probability == pytest.approx(t["probability"], rel=1e-6, abs=1e-12)
    # Generation and explain run on the format (explain's attribution reads the cache's values).
    g = cli_json("generate", "--model", d, "--kv-cache", kv, "-n", "5", "--temperature", "0", "I have")
    assert g["kv_cache"] == kv
    assert m.generate("I have", n=5, temperature=0) == g["text"]
    e = m.explain("I have a lot")
    assert e["model"]["kv_cache"] == kv
    ex = cli_json("explain", "--model", d, "--kv-cache", kv, "I have a lot")
    assert ex["model"]["kv_cache"] == kv
    assert [t["id"] for t in ex["prediction"]["top"]] == [t["id"] for t in e["prediction"]["top"]]
    a = ex["attribution"]
    assert a["sum"] == pytest.approx(a["target"]["logit"], abs=1e-3 * max(1.0, abs(a["target"]["logit"])))


@pytest.mark.parametrize("w", ["bf16", "q8"])
def test_weight_formats(w):
    kf = manifest()["kv_formats"]
    d = os.path.join(ROOT, kf["dir"])
    m = jomoim.Model.load(d, weights=w)
    f = jomoim.Model.load(d)
    assert m.weights == w and m.kv_cache == "f32" and f.weights == "f32"
    # 2 bytes a matrix weight (bf16) or 1 + 4 / 32 (q8), against 4.
    assert m.weight_bytes < f.weight_bytes * (0.55 if w == "bf16" else 0.35), (m.weight_bytes, f.weight_bytes)
    for case in kf["cases"]:
        want = np.load(os.path.join(ROOT, case["logits"]["weights_" + w]))
        got = m.logits(case["ids"])
        # q8 also rounds the activations to int16 per block in its products (see test_gpt.cpp).
        assert rel(got, want) <= (5e-4 if w == "q8" else 1e-4), (w, len(case["ids"]))
        if len(case["ids"]) > 1:
            assert rel(got, want) * 10 < rel(got, np.load(os.path.join(ROOT, case["logits"]["f32"])))
    both = jomoim.Model.load(d, weights=w, kv_cache="q8")
    assert (both.weights, both.kv_cache) == (w, "q8")
    # The commands' --weights: the same distribution, and they say which format they used.
    for prompt in PROMPTS[:3]:
        j = cli_json("predict", "--model", d, "--weights", w, "--top", "5", prompt)
        assert j["weights"] == w and j["kv_cache"] == "f32"
        got = m.predict(prompt, top=5)
        assert [x.id for x in got] == [t["id"] for t in j["top"]]
        for x, t in zip(got, j["top"]):
            assert x.probability == pytest.approx(t["probability"], rel=1e-6, abs=1e-12)
    g = cli_json("generate", "--model", d, "--weights", w, "-n", "5", "--temperature", "0", "I have")
    assert g["weights"] == w
    assert m.generate("I have", n=5, temperature=0) == g["text"]
    e = m.explain("I have a lot")
    assert e["model"]["weights"] == w
    ex = cli_json("explain", "--model", d, "--weights", w, "I have a lot")
    assert ex["model"]["weights"] == w
    assert [t["id"] for t in ex["prediction"]["top"]] == [t["id"] for t in e["prediction"]["top"]]
    a = ex["attribution"]  # read from the widened weights: still sums to the logit
    assert a["sum"] == pytest.approx(a["target"]["logit"], abs=1e-3 * max(1.0, abs(a["target"]["logit"])))
    b = cli_json("bench-model", "--model", d, "--weights", w, "--prompt", "6", "--tokens", "3", "--reps", "1")
    assert b["weights"] == w
    assert b["weights_mib"] == pytest.approx(m.weight_bytes / 2**20, rel=1e-9)


def test_matmul_bf16():
    # Model.load(matmul="bf16") / --matmul bf16: a prompt's products (more than 16 tokens) round
    # their inputs to bf16; up to 16 tokens nothing changes. The commands say which they used.
    kf = manifest()["kv_formats"]
    d = os.path.join(ROOT, kf["dir"])
    f = jomoim.Model.load(d)
    b = jomoim.Model.load(d, matmul="bf16", weights="q8")
    assert (f.matmul, b.matmul, b.weights) == ("f32", "bf16", "q8")
    fq = jomoim.Model.load(d, weights="q8")
    long_ids = [(7 * i + 3) % 50 for i in range(40)]
    err = rel(b.logits(long_ids), fq.logits(long_ids))
    assert err <= 0.1, err
    assert np.array_equal(b.logits(long_ids[:16]), fq.logits(long_ids[:16]))
    with pytest.raises(jomoim.Error, match="matmul"):
        jomoim.Model.load(d, matmul="int8")
    with pytest.raises(TypeError, match="matmul"):
        jomoim.Model.load(d, matmul=16)
    for cmd in (["predict", "--top", "3", "hello"], ["generate", "-n", "2", "--temperature", "0", "hello"],
                ["bench-model", "--prompt", "20", "--tokens", "2", "--reps", "1"]):
        j = cli_json(*cmd[:1], "--model", d, "--matmul", "bf16", *cmd[1:])
        assert j["matmul"] == "bf16", cmd
    ex = cli_json("explain", "--model", d, "--matmul", "bf16", "I have a lot")
    assert ex["model"]["matmul"] == "bf16"
    p = cli("predict", "--model", d, "--matmul", "int8", "hi", ok=False)
    assert p.returncode != 0 and b"--matmul" in p.stderr


def test_bench_model_pins_the_simd_target():
    # bench-model --target pins jomoim's kernels (as `jomoim bench --target`) and says so; the
    # pinned run computes the same model (greedy decode over random ids), a bad name is refused.
    kf = manifest()["kv_formats"]
    d = os.path.join(ROOT, kf["dir"])
    targets = jomoim.simd_targets()
    pin = "AVX2" if "AVX2" in targets else targets[-1]
    b = cli_json("bench-model", "--model", d, "--target", pin.lower(), "--prompt", "6", "--tokens", "2", "--reps", "1")
    assert b["target"] == pin
    assert cli_json("bench-model", "--model", d, "--prompt", "6", "--tokens", "2", "--reps", "1")["target"] == targets[0]
    p = cli("bench-model", "--model", d, "--target", "avx9", ok=False)
    assert p.returncode != 0 and b"avx9" in p.stderr and b"\n" not in p.stderr.strip()


def test_weight_format_refusals():
    with pytest.raises(jomoim.Error, match="weights: expected 'f32', 'bf16' or 'q8', got 'q4'"):
        jomoim.Model.load(variant_dir("f32"), weights="q4")
    with pytest.raises(TypeError, match="weights"):
        jomoim.Model.load(variant_dir("f32"), weights=8)
    # n_embd 24: no q8 block (a multiple of 16) divides it; bf16 takes any width.
    with pytest.raises(jomoim.Error, match="multiples of 16"):
        jomoim.Model.load(variant_dir("f16_prefixed"), weights="q8")
    assert jomoim.Model.load(variant_dir("f16_prefixed"), weights="bf16").weights == "bf16"
    p = cli("predict", "--model", variant_dir("f16_prefixed"), "--weights", "q8", "hi", ok=False)
    assert p.returncode != 0 and b"multiples of 16" in p.stderr and p.stdout == b""
    assert len(p.stderr.strip().splitlines()) == 1
    p = cli("generate", "--model", variant_dir("f32"), "--weights", "int8", "hi", ok=False)
    assert p.returncode != 0 and b"--weights" in p.stderr


def test_kv_cache_refusals():
    with pytest.raises(jomoim.Error, match="kv_cache: expected 'f32', 'bf16', 'q8' or 'q4', got 'q2'"):
        jomoim.Model.load(variant_dir("f32"), kv_cache="q2")
    with pytest.raises(TypeError, match="kv_cache"):
        jomoim.Model.load(variant_dir("f32"), kv_cache=8)
    # head_dim 8: no q8 block (a multiple of 16) divides it.
    with pytest.raises(jomoim.Error, match="multiple of 16"):
        jomoim.Model.load(variant_dir("f32"), kv_cache="q8")
    p = cli("predict", "--model", variant_dir("f32"), "--kv-cache", "q8", "hi", ok=False)
    assert p.returncode != 0 and b"multiple of 16" in p.stderr and p.stdout == b""
    p = cli("generate", "--model", variant_dir("f32"), "--kv-cache", "int8", "hi", ok=False)
    assert p.returncode != 0 and b"--kv-cache" in p.stderr


@pytest.mark.skipif(not (SOURCE / "models" / "default" / "model.safetensors").exists(), reason="no models/default")
def test_kv_cache_and_weight_formats_kl_on_the_default_model():
    # The accuracy target: the next-token distribution with 8-bit (and bf16) KV caches and weights
    # within a mean KL of 1e-3 of float32's, every position of a text the model did not train on
    # (its own card; bench/kv_cache.py measures it on the held-out corpus).
    d = str(SOURCE / "models" / "default")
    ref = jomoim.Model.load(d, threads=1)
    text = (SOURCE / "models" / "default" / "README.md").read_text(encoding="utf-8")
    ids = ref.tokenize(text)[: 2 * ref.config["n_positions"]]
    windows = [ids[i:i + ref.config["n_positions"]] for i in range(0, len(ids), ref.config["n_positions"])]

    def logp(m, w):
        x = m.logits(w).astype(np.float64)
        x -= x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    base = [logp(ref, w) for w in windows]
    # Each KV cache format with float32 weights, each weight format (--weights) with a float32
    # cache, and both 16- or 8-bit together.
    for wf, kv in (("f32", "bf16"), ("f32", "q8"), ("bf16", "f32"), ("q8", "f32"), ("bf16", "bf16"), ("q8", "q8")):
        m = jomoim.Model.load(d, threads=1, weights=wf, kv_cache=kv)
        kl = np.concatenate([(np.exp(p) * (p - logp(m, w))).sum(axis=1) for p, w in zip(base, windows)])
        assert kl.mean() <= 1e-3, (wf, kv, kl.mean())
        assert kl.mean() > 0, (wf, kv)  # the format does round something
    # The 4-bit cache (optional in the issue, no target): 18 times coarser steps than q8 move the
    # distribution by about 2e-2 nats (bench/kv_cache.py), far more than q8 and still a model.
    m = jomoim.Model.load(d, threads=1, kv_cache="q4")
    kl = np.concatenate([(np.exp(p) * (p - logp(m, w))).sum(axis=1) for p, w in zip(base, windows)])
    assert 1e-3 < kl.mean() < 1e-1, kl.mean()
