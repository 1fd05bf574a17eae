#!/usr/bin/env python3
"""End to end: `jomoim explain` on the tiny checkpoints of tiny_gpt2.py.

The --json numbers are checked against an independent float64 implementation of GPT-2's
attention written here on top of tiny_gpt2.py's weights (Q, K, V, scores, weights, per-head
outputs, next-token probabilities); every option and every refusal of the command is run; the
terminal view is checked for its sections, its numbers (equal to --json's), colour and
truncation.

    test_explain_cli.py JOMOIM_EXE TINY_GPT2_DIR
"""
import json
import math
import os
import re
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt2  # noqa: E402

EXE = None
ROOT = None
SEED = "I have a lot"
SEED2 = "Cash or credit card? I have a lot"


def run(*args, ok=True, env=None):
    e = dict(os.environ)
    e.pop("JOMOIM_MODEL", None)
    e.pop("NO_COLOR", None)
    e["COLUMNS"] = "100"
    if env:
        e.update(env)
    p = subprocess.run([EXE, "explain", *args], capture_output=True, timeout=120, env=e)
    if ok and p.returncode != 0:
        raise AssertionError(f"jomoim explain {' '.join(args)} failed: {p.stderr.decode(errors='replace')}")
    return p


def explain_json(*args):
    return json.loads(run(*args, "--json").stdout)


def load_variant(name):
    return tiny_gpt2.load_variant(ROOT, name)


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x, exact):
    if exact:
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference(cfg, w, ids, silence=(), swap=False):
    """GPT-2 in float64 NumPy, recording per layer q, k, v [H, T, D], scores, weights [H, T, T],
    out [H, T, D]; returns (layers, probabilities of the next token)."""
    C, H = cfg["n_embd"], cfg["n_head"]
    D, T, eps = C // H, len(ids), cfg["layer_norm_epsilon"]
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    heard = np.tril(np.ones((T, T), bool))
    heard[:, list(silence)] = False
    layers = []
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        if swap:
            q, k = k, q
        q, k, v = (m.reshape(T, H, D).transpose(1, 0, 2) for m in (q, k, v))
        s = q @ k.transpose(0, 2, 1)
        z = np.where(heard, s / math.sqrt(D), -np.inf)
        m = z.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        e = np.where(heard, np.exp(z - m), 0)
        tot = e.sum(-1, keepdims=True)
        wts = np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)
        o = wts @ v
        layers.append(dict(q=q, k=k, v=v, scores=s, weights=wts, out=o, heard=heard))
        x = x + o.transpose(1, 0, 2).reshape(T, C) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        a = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        f = gelu(a @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], cfg.get("activation_function") == "gelu")
        x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x[-1] @ w["wte.weight"].T
    pr = np.exp(logits - logits.max())
    return layers, pr / pr.sum()


def arr(m):
    return np.array([[np.nan if v is None else v for v in row] for row in m], dtype=np.float64)


def close(a, b, rel):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) <= rel * max(1.0, np.max(np.abs(b)))


class ExplainJson(unittest.TestCase):
    def check_against_reference(self, name, prompt, silence=(), swap=False, notation="paper"):
        d, cfg, w = load_variant(name)
        args = ["--model", d, prompt, "--notation", notation, "--top", str(cfg["vocab_size"])]
        if silence:
            args += ["--silence", *map(str, silence)]
        if swap:
            args.append("--swap-qk")
        j = explain_json(*args)
        ids = [t["id"] for t in j["tokens"]]
        layers, probs = reference(cfg, w, ids, silence, swap)
        # float32 model vs float64 NumPy: the error of a few float32 layers, far below the signal.
        tol = 2e-4 if name == "f32" else 1e-3
        for l, L in enumerate(j["layers"]):
            ref = layers[l]
            for h, hj in enumerate(L["heads"]):
                tr = (lambda m: m.T) if notation == "3b1b" else (lambda m: m)
                for key in ("q", "k", "v", "out", "weights"):
                    self.assertTrue(close(tr(arr(hj[key])), ref[key][h], tol), (name, key, l, h))
                s = tr(arr(hj["scores"]))
                self.assertTrue(np.array_equal(np.isnan(s), ~ref["heard"]), "scores are null exactly where masked")
                self.assertEqual(tr(np.array(hj["mask"], bool)).tolist(), ref["heard"].tolist())
                self.assertTrue(close(np.nan_to_num(s), np.where(ref["heard"], ref["scores"][h], 0), tol))
                self.assertTrue(close(np.nan_to_num(tr(arr(hj["scaled"]))),
                                      np.where(ref["heard"], ref["scores"][h] / math.sqrt(cfg["n_embd"] // cfg["n_head"]), 0), tol))
        got = np.zeros(cfg["vocab_size"])
        for t in j["prediction"]["top"]:
            got[t["id"]] = t["probability"]
        self.assertLess(np.max(np.abs(got - probs)), 1e-4, name)
        return j

    def test_numbers_match_an_independent_float64_gpt2(self):
        for name in ["f32", "f16_prefixed", "bf16_gelu_erf"]:
            for prompt in [SEED, SEED2, "a"]:
                self.check_against_reference(name, prompt)

    def test_notation_silence_and_swap_against_the_reference(self):
        self.check_against_reference("f32", SEED2, notation="3b1b")
        j = self.check_against_reference("f32", SEED2, silence=(0, 5))
        self.assertEqual(j["options"]["silence"], [0, 5])
        self.assertIsNotNone(j["baseline"])
        j = self.check_against_reference("f32", SEED, swap=True)
        self.assertTrue(j["options"]["swap_qk"])
        self.check_against_reference("f16_prefixed", SEED, silence=(1,), swap=True, notation="3b1b")

    def test_compare_layer_head_top(self):
        d, cfg, w = load_variant("f32")
        j = explain_json("--model", d, SEED, "--compare", SEED2, "--layer", "1", "--head", "3", "--top", "3")
        self.assertEqual(j["schema"], "jomoim.explain/1")
        self.assertEqual(len(j["prediction"]["top"]), 3)
        self.assertEqual([L["layer"] for L in j["layers"]], [1])
        self.assertEqual([h["head"] for h in j["layers"][0]["heads"]], [3])
        c = j["compare"]
        self.assertEqual(c["prompt"], SEED2)
        self.assertEqual([L["layer"] for L in c["layers"]], [1])
        _, pa = reference(cfg, w, [t["id"] for t in j["tokens"]])
        _, pb = reference(cfg, w, [t["id"] for t in c["tokens"]])
        ids = set(np.argsort(-pa)[:3]) | set(np.argsort(-pb)[:3])
        self.assertEqual({s["id"] for s in c["shift"]}, {int(i) for i in ids})
        for s in c["shift"]:
            self.assertAlmostEqual(s["delta"], pb[s["id"]] - pa[s["id"]], delta=1e-5)
        # --head alone: that head in every layer.
        j = explain_json("--model", d, SEED, "--head", "0")
        self.assertEqual([[h["head"] for h in L["heads"]] for L in j["layers"]], [[0], [0]])

    def test_refusals_are_one_line(self):
        d, cfg, _ = load_variant("f32")
        cases = [
            (["--model", d, SEED, "--layer", "2"], "layer 2 is out of range"),
            (["--model", d, SEED, "--layer", "-1"], "layer -1 is out of range"),
            (["--model", d, SEED, "--head", "4"], "head 4 is out of range"),
            (["--model", d, SEED, "--silence", "4"], "silence index 4 is out of range"),
            (["--model", d, SEED, "--silence", "0", "7"], "silence index 7"),
            (["--model", d, SEED, "--compare", "a", "--silence", "2"], "the compare prompt has 1 token"),
            (["--model", d, "x" * 49], "49 tokens, more than the model's context of 48"),
            (["--model", d, SEED, "--compare", "y" * 60], "the compare prompt has 60 tokens"),
            (["--model", d, SEED, "--notation", "3b2b"], "--notation"),
            (["--model", d, SEED, "--color", "sometimes"], "--color"),
            (["--model", d, SEED, "--top", "0"], "--top must be at least 1"),
            (["--model", d, SEED, "--layer", "one"], "--layer"),
            (["--model", os.path.join(ROOT, "no-such-model"), SEED], "no such directory"),
            (["--model", os.path.join(ROOT, "manifest.json"), SEED], "not a directory"),
            (["--model", ROOT, SEED], "vocab.json"),
        ]
        for args, part in cases:
            for extra in ([], ["--json"]):
                p = run(*args, *extra, ok=False, env={"JOMOIM_MODEL": ""})
                err = p.stderr.decode()
                self.assertNotEqual(p.returncode, 0, args)
                self.assertEqual(p.stdout, b"", (args, "nothing half-written"))
                self.assertEqual(err.count("\n"), 1, (args, err))
                self.assertTrue(err.startswith("jomoim: error: "), err)
                self.assertIn(part, err, args)
        # Without --model: $JOMOIM_MODEL when set (and refused when it names nothing), else the
        # repository's default model.
        p = run(SEED, ok=False, env={"JOMOIM_MODEL": os.path.join(ROOT, "no-such-model")})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("JOMOIM_MODEL", p.stderr.decode())
        self.assertEqual(p.stderr.decode().count("\n"), 1)
        p = run(SEED, "--json", ok=False, env={"JOMOIM_MODEL": ""})
        if p.returncode == 0:
            self.assertTrue(json.loads(p.stdout)["model"]["name"].endswith(os.path.join("models", "default")))
        else:
            self.assertIn("no default model", p.stderr.decode())


class ExplainTerminal(unittest.TestCase):
    def setUp(self):
        self.d = os.path.join(ROOT, "f32")

    def test_default_view_shows_every_section_with_the_json_numbers(self):
        out = run("--model", self.d, SEED).stdout.decode()
        j = explain_json("--model", self.d, SEED)
        for part in ["== the meeting: 4 tokens ==", "== the decision: next token ==",
                     "== the heads: 8 separate meetings, most focused first ==", "raw scores Q_i . K_j",
                     "scaled scores", "causal mask", "softmax weights", "the last token 3 \" lot\"",
                     "question", "offered", "actual answer", "softmax(Q K^T / sqrt(d)) V"]:
            self.assertIn(part, out)
        self.assertNotIn("\x1b[", out, "no colour when stdout is not a terminal")
        # The heatmap shown is the most focused head's, and its numbers are --json's.
        best = j["heads"][0]
        self.assertIn(f"== layer {best['layer']}, head {best['head']} (the paper's notation) ==", out)
        for t in j["tokens"]:
            self.assertRegex(out, rf"\n\s+{t['index']}\s+{t['id']}\s+\"{re.escape(t['text'])}\"\s+"
                                  rf"{t['token_embedding_norm']:.3f}\s+{t['position_embedding_norm']:.3f}")
        for t in j["prediction"]["top"]:
            self.assertIn(f"{t['probability']:.4f}", out)
        w = j["layers"][best["layer"]]["heads"][best["head"]]["weights"]
        self.assertIn(f"{w[3][0]:8.3f}", out)
        # The heads table lists all 8, most focused first.
        rows = re.findall(r"\n\s+(\d)\s+(\d)\s+([0-9.]+)\s+([0-9.]+)\s+([-0-9.]+)\s+([-0-9.]+)\s+([-0-9.]+)"
                          r"\s+([-0-9.]+)\s{2}", out)
        self.assertEqual([(int(r[0]), int(r[1])) for r in rows], [(h["layer"], h["head"]) for h in j["heads"]])
        # ... with each head's role scores (prev, sink, self, ind) from head_roles.
        for r in rows:
            e = j["head_roles"]["heads"][int(r[0]) * j["model"]["n_head"] + int(r[1])]
            self.assertEqual(list(r[4:]), [f"{e[k]:.2f}" for k in ("previous_token", "first_token", "self", "induction")])

    def test_notation_3b1b_says_so_and_transposes(self):
        out = run("--model", self.d, SEED, "--notation", "3b1b", "--layer", "0", "--head", "1").stdout.decode()
        self.assertIn("3Blue1Brown notation, shown instead of the paper's", out)
        self.assertIn("V softmax(K^T Q / sqrt(d))", out)
        self.assertIn("(rows: keys j, columns: queries i)", out)
        j = explain_json("--model", self.d, SEED, "--notation", "3b1b", "--layer", "0", "--head", "1")
        w = j["layers"][0]["heads"][0]["weights"]
        # Row 0 (key 0) is heard by every query: four numbers on the key-0 line of the weights map.
        block = out[out.index("softmax weights"):]
        line = next(l for l in block.splitlines() if l.startswith('   0 "I"'))
        self.assertEqual(re.findall(r"-?\d+\.\d{3}", line), [f"{x:.3f}" for x in w[0]])

    def test_silence_and_swap_show_the_baseline(self):
        out = run("--model", self.d, SEED2, "--silence", "1", "3").stdout.decode()
        self.assertIn("baseline, the plain pass", out)
        self.assertIn("with silencing token 1 3", out)
        self.assertIn("(silenced)", out)
        self.assertIn("how the distribution moved", out)
        out = run("--model", self.d, SEED, "--swap-qk", "--layer", "0").stdout.decode()
        self.assertIn("swapping Q and K", out)
        self.assertEqual(out.count("== layer 0, head"), 4)

    def test_compare_shows_the_shift_and_both_meetings(self):
        out = run("--model", self.d, SEED, "--compare", SEED2).stdout.decode()
        j = explain_json("--model", self.d, SEED, "--compare", SEED2)
        self.assertIn(f'== two meetings: "{SEED}" vs "{SEED2}" ==', out)
        self.assertIn("how the next-token distribution shifts", out)
        self.assertIn("first prompt: where the last token", out)
        self.assertIn("second prompt: where the last token", out)
        for s in j["compare"]["shift"][:3]:
            self.assertIn(f"{s['delta']:+9.4f}", out)

    def test_colour_always_never_auto(self):
        out = run("--model", self.d, SEED, "--color", "always").stdout.decode()
        self.assertRegex(out, r"\x1b\[48;5;\d+m")
        out = run("--model", self.d, SEED, "--color", "never").stdout.decode()
        self.assertNotIn("\x1b[", out)
        for c in ".:-=+*#%@"[-1:]:
            self.assertIn(c, out)

    def test_long_prompt_is_truncated_and_says_so(self):
        prompt = "the" + " the" * 38  # 40 tokens: 2 x 40 columns of cells do not fit in 60 or 80
        for cols in ["60", "80"]:
            p = run("--model", self.d, prompt, "--layer", "1", "--head", "2", env={"COLUMNS": cols})
            out = p.stdout.decode()
            self.assertIn("showing the last", out)
            self.assertIn("--json has every entry", out)
            rows = [l for l in out.splitlines() if re.match(r'^\s*\d+ "', l)]
            self.assertGreater(len(rows), 10)
            for line in rows:
                self.assertLessEqual(len(line), int(cols), line)
        # Tiny terminals and the longest prompt still work.
        run("--model", self.d, "x" * 48, env={"COLUMNS": "10"})

    def test_odd_prompts(self):
        for prompt in ["", "a", "\n\n\t", "héllo 조모임 🙂", "\\x00"]:
            out = run("--model", self.d, prompt).stdout.decode()
            self.assertIn("== the meeting:", out)
        j = explain_json("--model", self.d, "")
        self.assertEqual(len(j["tokens"]), 1, "an empty prompt is <|endoftext|>")


def reference_attribution(cfg, w, ids, target, contrast=None):
    """Direct-logit attribution and the logit lens in float64 NumPy, from the weights alone:
    (per-head totals [n_layer, n_head], per-head by-source [n_layer, n_head, T], MLP terms
    [n_layer], embeddings (token, position), biases, lens logits [n_layer + 1, vocab])."""
    C, H = cfg["n_embd"], cfg["n_head"]
    D, T, eps = C // H, len(ids), cfg["layer_norm_epsilon"]
    L = cfg["n_layer"]
    tok_e, pos_e = w["wte.weight"][ids[-1]], w["wpe.weight"][T - 1]
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    heard = np.tril(np.ones((T, T), bool))
    stream, heads, mlps, bias_parts = [x[-1].copy()], [], [], []
    for l in range(L):
        p = f"h.{l}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (m.reshape(T, H, D).transpose(1, 0, 2) for m in (qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]))
        z = np.where(heard, q @ k.transpose(0, 2, 1) / math.sqrt(D), -np.inf)
        e = np.exp(z - z.max(-1, keepdims=True))
        wts = e / e.sum(-1, keepdims=True)
        Wo = w[p + "attn.c_proj.weight"]
        # head h, source j: w_{T-1,j} V_j (head h's rows of W_O)
        heads.append([[wts[h, -1, j] * v[h, j] @ Wo[h * D:(h + 1) * D] for j in range(T)] for h in range(H)])
        bias_parts.append(w[p + "attn.c_proj.bias"])
        x = x + (wts @ v).transpose(1, 0, 2).reshape(T, C) @ Wo + w[p + "attn.c_proj.bias"]
        a = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        f = gelu(a @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], cfg.get("activation_function") == "gelu")
        mlp = f @ w[p + "mlp.c_proj.weight"]
        mlps.append(mlp[-1])
        bias_parts.append(w[p + "mlp.c_proj.bias"])
        x = x + mlp + w[p + "mlp.c_proj.bias"]
        stream.append(x[-1].copy())
    g, b, U = w["ln_f.weight"], w["ln_f.bias"], w["wte.weight"]
    lens = np.array([layer_norm(s, g, b, eps) @ U.T for s in stream])
    xf = stream[-1]
    sigma = math.sqrt(((xf - xf.mean()) ** 2).mean() + eps)
    d = U[target] - (U[contrast] if contrast is not None else 0)

    def part(p):
        return float((p - p.mean()) / sigma * g @ d)

    by = np.array([[[part(hj) for hj in hh] for hh in hl] for hl in heads])
    return dict(by_source=by, totals=by.sum(-1), mlps=np.array([part(m) for m in mlps]),
                embeddings=(part(tok_e), part(pos_e)), biases=sum(part(p) for p in bias_parts) + float(b @ d),
                lens=lens)


def assert_refused(tc, d, cases):
    """Each (extra arguments, part of the message): with and without --json, a non-zero exit,
    nothing on stdout and one line on stderr that contains the part."""
    for extra, part in cases:
        for js in ([], ["--json"]):
            p = run("--model", d, SEED, *extra, *js, ok=False)
            err = p.stderr.decode()
            tc.assertNotEqual(p.returncode, 0, extra)
            tc.assertEqual(p.stdout, b"", extra)
            tc.assertEqual(err.count("\n"), 1, (extra, err))
            tc.assertIn(part, err)


def load_model_dir(d):
    """A model directory's config and float32 weights as float64 NumPy (read with NumPy from the
    safetensors file itself, not through jomoim); names without the "transformer." prefix."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    w = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        w[name.removeprefix("transformer.")] = np.frombuffer(data[b:e], "<f4").reshape(info["shape"]).astype(np.float64)
    cfg.setdefault("layer_norm_epsilon", 1e-5)
    return cfg, w


DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models",
                             "default")


class Attribution(unittest.TestCase):
    def check(self, name, prompt, target=None, contrast=None, model=None):
        if model is None:
            d, cfg, w = load_variant(name)
        else:
            d = model
            cfg, w = load_model_dir(model)
        args = ["--model", d, prompt, "--top", "4"]
        if target is not None:
            args += ["--target", target]
        if contrast is not None:
            args += ["--contrast", contrast]
        j = explain_json(*args)
        a = j["attribution"]
        ids = [t["id"] for t in j["tokens"]]
        t = a["target"]["id"]
        k = a["contrast"]["id"] if contrast is not None else None
        ref = reference_attribution(cfg, w, ids, t, k)
        _, probs = reference(cfg, w, ids)
        if target is None:
            self.assertEqual(t, int(np.argmax(probs)))
        # float32 model vs float64 NumPy: a few float32 layers' error, relative to the largest part.
        scale = max(1.0, np.max(np.abs(ref["by_source"])), np.max(np.abs(ref["mlps"])))
        tol = (2e-4 if name == "f32" else 2e-3) * scale
        H = cfg["n_head"]
        for e in a["heads"]:
            l, h = e["layer"], e["head"]
            self.assertLess(abs(e["total"] - ref["totals"][l, h]), tol, (name, prompt, l, h))
            self.assertLess(np.max(np.abs(np.array(e["by_source"]) - ref["by_source"][l, h])), tol)
        self.assertEqual(len(a["heads"]), cfg["n_layer"] * H)
        self.assertLess(np.max(np.abs(np.array(a["mlps"]) - ref["mlps"])), tol, (name, prompt))
        self.assertLess(abs(a["embeddings"]["token"] - ref["embeddings"][0]), tol)
        self.assertLess(abs(a["embeddings"]["position"] - ref["embeddings"][1]), tol)
        self.assertLess(abs(a["biases"] - ref["biases"]), tol)
        logit = a["target"]["logit"] - (a["contrast"]["logit"] if k is not None else 0)
        self.assertLess(abs(a["sum"] - logit), 1e-4 * scale)
        self.assertEqual(len(j["logit_lens"]), cfg["n_layer"] + 1)
        for e, ll in zip(j["logit_lens"], ref["lens"]):
            pr = np.exp(ll - ll.max())
            pr /= pr.sum()
            for r in e["top"]:
                self.assertLess(abs(r["logit"] - ll[r["id"]]), tol, e["after"])
                self.assertLess(abs(r["probability"] - pr[r["id"]]), 1e-3)
            top = np.sort(ll)[::-1][:len(e["top"])]
            self.assertLess(np.max(np.abs(np.array([r["logit"] for r in e["top"]]) - top)), tol)
        self.assertEqual([r["id"] for r in j["logit_lens"][-1]["top"]], [r["id"] for r in j["prediction"]["top"]])
        return j

    def test_attribution_and_lens_match_numpy(self):
        for name in ["f32", "f16_prefixed", "bf16_gelu_erf"]:
            self.check(name, SEED2)
        self.check("f32", SEED, target=" lot")
        self.check("f32", SEED2, target=" a", contrast=" lot")
        self.check("f32", "a")

    def test_default_model_attribution_and_lens_match_numpy(self):
        # The shipped model, on the seed's prompts: its prediction, and " of" argued over ".".
        if not os.path.exists(os.path.join(DEFAULT_MODEL, "model.safetensors")):
            self.skipTest("no models/default")
        self.check("f32", SEED, model=DEFAULT_MODEL)
        j = self.check("f32", SEED2, target=" of", contrast=".", model=DEFAULT_MODEL)
        self.assertEqual(j["attribution"]["target"]["text"], " of")
        self.assertEqual(j["attribution"]["contrast"]["text"], ".")

    def test_compare_has_its_own_attribution(self):
        d, cfg, w = load_variant("f32")
        j = explain_json("--model", d, SEED, "--compare", SEED2, "--target", " lot")
        self.assertEqual(j["compare"]["attribution"]["target"]["text"], " lot")
        self.assertEqual(len(j["compare"]["attribution"]["heads"][0]["by_source"]), len(j["compare"]["tokens"]))
        self.assertEqual(len(j["compare"]["logit_lens"]), cfg["n_layer"] + 1)

    def test_target_refusals_are_one_line(self):
        d, _, _ = load_variant("f32")
        cases = [
            (["--target", "ab"], "encodes to 2 tokens: it must be exactly one token"),
            (["--target", ""], "target is empty"),
            (["--target", " lot", "--contrast", " lot"], "contrast is the same token as the target"),
            (["--target", " lot", "--contrast", "xy"], "contrast \"xy\" encodes to 2 tokens"),
            (["--contrast", " a"], "contrast needs a target"),
        ]
        assert_refused(self, d, cases)

    def test_terminal_shows_who_argued_and_the_lens(self):
        d, cfg, _ = load_variant("f32")
        out = run("--model", d, SEED2, "--target", " lot", "--contrast", " a").stdout.decode()
        self.assertIn('== who argued for " lot" over " a" ==', out)
        self.assertIn("top heads:", out)
        self.assertIn("MLPs:", out)
        self.assertIn("sum of the parts", out)
        self.assertIn("== logit lens", out)
        j = explain_json("--model", d, SEED2, "--target", " lot", "--contrast", " a")
        a = j["attribution"]
        m = re.search(r"sum of the parts (\S+) vs the model's logit difference (\S+)", out)
        self.assertIsNotNone(m, out)
        self.assertAlmostEqual(float(m.group(1)), a["sum"], places=5)
        lens = [l for l in out.splitlines() if re.match(r"^  (embeddings|layer \d+) ", l)]
        self.assertEqual(len(lens), cfg["n_layer"] + 1, out)

    def test_terminal_compares_the_two_attributions_side_by_side(self):
        d, cfg, _ = load_variant("f32")
        args = ("--model", d, SEED, "--compare", SEED2, "--target", " lot", "--contrast", " a")
        out = run(*args).stdout.decode()
        j = explain_json(*args)
        a, b = j["attribution"], j["compare"]["attribution"]
        self.assertIn("== who argued, side by side: first prompt vs second ==", out)
        self.assertIn('The same quantity (" lot" over " a") in both prompts', out)
        rows = {}
        for line in out.split("== who argued, side by side")[1].splitlines():
            m = re.match(r"^\s*(.+?)\s+([+-]\d+\.\d+)\s+([+-]\d+\.\d+)\s+([+-]\d+\.\d+)$", line)
            if m:
                rows[m.group(1)] = tuple(float(m.group(k)) for k in (2, 3, 4))
        want = {"token embedding": (a["embeddings"]["token"], b["embeddings"]["token"]),
                "sum": (a["sum"], b["sum"]), "biases": (a["biases"], b["biases"]),
                "attention (all heads)": (sum(h["total"] for h in a["heads"]), sum(h["total"] for h in b["heads"]))}
        for l in range(cfg["n_layer"]):
            want[f"MLP {l}"] = (a["mlps"][l], b["mlps"][l])
        for name, (x, y) in want.items():
            self.assertIn(name, rows, out)
            self.assertAlmostEqual(rows[name][0], x, places=3)
            self.assertAlmostEqual(rows[name][1], y, places=3)
            self.assertAlmostEqual(rows[name][2], y - x, places=3)
        # The heads listed are those that change most, largest first.
        listed = [k for k in rows if k.startswith("layer ")]
        self.assertTrue(listed, out)
        change = {f"layer {h['layer']} head {h['head']}": hb["total"] - h["total"] for h, hb in zip(a["heads"], b["heads"])}
        best = sorted(change, key=lambda k: -abs(change[k]))[:len(listed)]
        self.assertEqual([abs(change[k]) for k in listed], [abs(change[k]) for k in best])


def splitmix64_probe(vocab, n_positions, bos):
    """The role probe as docs/explain.md builds it: R distinct ids by SplitMix64 from seed 1."""
    b = 0 if bos is None else 1
    R = min(50, (n_positions - b) // 2, vocab - b)
    state, half, mask = 1, [], (1 << 64) - 1
    while len(half) < R:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        i = z % vocab
        if i == bos or i in half:
            continue
        half.append(i)
    return R, ([] if bos is None else [bos]) + half + half


def reference_roles(layers, T):
    """previous_token, first_token, self [n_layer, n_head] from NumPy weights: queries i >= 1."""
    i = np.arange(1, T)
    prev = np.array([[l["weights"][h, i, i - 1].mean() for h in range(l["weights"].shape[0])] for l in layers])
    first = np.array([[l["weights"][h, i, 0].mean() for h in range(l["weights"].shape[0])] for l in layers])
    self_ = np.array([[l["weights"][h, i, i].mean() for h in range(l["weights"].shape[0])] for l in layers])
    return prev, first, self_


def reference_induction(layers, R, b):
    r = np.arange(R)
    return np.array([[l["weights"][h, b + R + r, b + r + 1].mean() for h in range(l["weights"].shape[0])]
                     for l in layers])


THRESHOLDS = {"induction": 0.4, "previous_token": 0.6, "self": 0.6, "first_token": 0.6}


def heads_cmd(*args, ok=True):
    e = dict(os.environ)
    e.pop("JOMOIM_MODEL", None)
    e["COLUMNS"] = "100"
    p = subprocess.run([EXE, "heads", *args], capture_output=True, timeout=120, env=e)
    if ok and p.returncode != 0:
        raise AssertionError(f"jomoim heads {' '.join(args)} failed: {p.stderr.decode(errors='replace')}")
    return p


class HeadRoles(unittest.TestCase):
    def check_roles(self, roles, cfg, w, prompt_ids, swap=False, measured_on="prompt"):
        L, H = cfg["n_layer"], cfg["n_head"]
        probe = roles["probe"]
        # The probe is the documented sequence: the tiny vocabulary's last id is <|endoftext|>.
        R, ids = splitmix64_probe(cfg["vocab_size"], cfg["n_positions"], cfg["vocab_size"] - 1)
        self.assertEqual(probe["ids"], ids)
        self.assertEqual(probe["length"], R)
        self.assertTrue(probe["bos"])
        self.assertEqual(probe["seed"], 1)
        self.assertEqual(len(set(ids[1:R + 1])), R)
        self.assertEqual(roles["measured_on"], measured_on)
        self.assertEqual(roles["thresholds"], THRESHOLDS)
        probe_layers, _ = reference(cfg, w, ids, swap=swap)
        ind = reference_induction(probe_layers, R, 1)
        on = ids if measured_on == "probe" else prompt_ids
        prev, first, self_ = reference_roles(reference(cfg, w, on, swap=swap)[0], len(on))
        self.assertEqual([(e["layer"], e["head"]) for e in roles["heads"]], [(l, h) for l in range(L) for h in range(H)])
        for e in roles["heads"]:
            l, h = e["layer"], e["head"]
            for key, ref in (("previous_token", prev), ("first_token", first), ("self", self_), ("induction", ind)):
                self.assertLess(abs(e[key] - ref[l, h]), 2e-4, (key, l, h))
            want = [k for k in ("induction", "previous_token", "self", "first_token") if e[k] >= THRESHOLDS[k]]
            self.assertEqual(e["labels"], want, (l, h))
            self.assertEqual(e["label"], want[0] if want else None)
        return ind

    def test_explain_roles_match_numpy(self):
        for name in ["f32", "bf16_gelu_erf"]:
            d, cfg, w = load_variant(name)
            j = explain_json("--model", d, SEED2, "--top", "2")
            self.check_roles(j["head_roles"], cfg, w, [t["id"] for t in j["tokens"]])
        d, cfg, w = load_variant("f32")
        j = explain_json("--model", d, SEED, "--compare", SEED2, "--swap-qk", "--top", "2")
        ind = self.check_roles(j["head_roles"], cfg, w, [t["id"] for t in j["tokens"]], swap=True)
        self.check_roles(j["compare"]["head_roles"], cfg, w, [t["id"] for t in j["compare"]["tokens"]], swap=True)
        self.assertEqual([e["induction"] for e in j["head_roles"]["heads"]],
                         [e["induction"] for e in j["compare"]["head_roles"]["heads"]])
        one = explain_json("--model", d, "a", "--top", "2")["head_roles"]["heads"]
        self.assertTrue(all(e["previous_token"] is None and e["self"] is None for e in one), "one token: null")
        self.assertTrue(all(e["induction"] is not None for e in one))
        self.assertGreater(ind.size, 0)

    def test_heads_command_json_and_text(self):
        d, cfg, w = load_variant("f32")
        j = json.loads(heads_cmd("--model", d, "--json").stdout)
        self.assertEqual(j["schema"], "jomoim.heads/1")
        self.assertIsNone(j["prompt"])
        self.assertEqual(j["model"]["n_layer"], cfg["n_layer"])
        self.check_roles(j["head_roles"], cfg, w, None, measured_on="probe")
        jp = json.loads(heads_cmd("--model", d, SEED2, "--json").stdout)
        ids = [t["id"] for t in explain_json("--model", d, SEED2, "--top", "1")["tokens"]]
        self.check_roles(jp["head_roles"], cfg, w, ids)
        self.assertEqual(jp["head_roles"], explain_json("--model", d, SEED2, "--top", "1")["head_roles"])
        js = json.loads(heads_cmd("--model", d, "--swap-qk", "--json").stdout)
        self.check_roles(js["head_roles"], cfg, w, None, swap=True, measured_on="probe")
        out = heads_cmd("--model", d).stdout.decode()
        rows = [l.split() for l in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+[-\d.]+", l)]
        self.assertEqual(len(rows), cfg["n_layer"] * cfg["n_head"], out)
        names = {"previous_token": "prev-token", "first_token": "sink"}
        for row, e in zip(rows, j["head_roles"]["heads"]):
            self.assertEqual([int(row[0]), int(row[1])], [e["layer"], e["head"]])
            for x, key in zip(row[2:6], ("previous_token", "first_token", "self", "induction")):
                self.assertEqual(x, f"{e[key]:.2f}")
            self.assertEqual(row[6], "+".join(names.get(k, k) for k in e["labels"]) or "-")
        self.assertIn("repeated twice after <|endoftext|>", " ".join(out.split()))
        p = heads_cmd("--model", d, "x" * 200, ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(p.stdout, b"")
        self.assertEqual(p.stderr.decode().count("\n"), 1)
        self.assertIn("context", p.stderr.decode())

    def test_explain_terminal_shows_roles(self):
        d, cfg, _ = load_variant("f32")
        out = run("--model", d, SEED2).stdout.decode()
        self.assertIn("ind (induction)", out)
        head = [l for l in out.splitlines() if l.lstrip().startswith("layer  head   focus")]
        self.assertEqual(len(head), 1, out)
        for k in ("prev", "sink", "self", "ind", "role"):
            self.assertIn(k, head[0])


def generate_cmd(*args):
    e = dict(os.environ)
    e.pop("JOMOIM_MODEL", None)
    p = subprocess.run([EXE, "generate", *args, "--json"], capture_output=True, timeout=120, env=e)
    if p.returncode != 0:
        raise AssertionError(f"jomoim generate {' '.join(args)} failed: {p.stderr.decode(errors='replace')}")
    return json.loads(p.stdout)


class Generation(unittest.TestCase):
    def test_steps_are_jomoim_generate_s_tokens(self):
        d, cfg, w = load_variant("f32")
        cases = [[], ["--temperature", "0.8", "--seed", "3"], ["--temperature", "1.5", "--top-k", "0", "--seed", "7"],
                 ["--temperature", "0.9", "--top-p", "0.5", "--seed", "1", "--ignore-eos"]]
        for extra in cases:
            gen_extra = extra if extra else ["--temperature", "0"]
            want = generate_cmd("--model", d, SEED, "-n", "8", *gen_extra)
            j = explain_json("--model", d, SEED, "--generate", "8", "--top", "3", *extra)
            self.assertEqual(j["generation"]["ids"], want["ids"], extra)
            self.assertEqual([s["id"] for s in j["steps"]], want["ids"], extra)
            self.assertEqual(j["generation"]["stop"], want["stop"], extra)
            if "--seed" in extra:
                self.assertEqual(j["generation"]["seed"], want["seed"])
            self.assertEqual(j["options"]["generate"], 8)

    def test_each_step_against_numpy(self):
        for name in ["f32", "bf16_gelu_erf"]:
            d, cfg, w = load_variant(name)
            j = explain_json("--model", d, SEED2, "--generate", "5", "--temperature", "1", "--seed", "4",
                             "--top", str(cfg["vocab_size"]))
            prompt = [t["id"] for t in j["tokens"]]
            T = len(prompt)
            ids = j["generation"]["ids"]
            tol = 2e-4 if name == "f32" else 1e-3
            for k, st in enumerate(j["steps"]):
                seq = prompt + ids[:k]
                layers, probs = reference(cfg, w, seq)
                self.assertEqual(st["position"], T + k - 1)
                self.assertEqual(st["id"], ids[k])
                self.assertLess(abs(st["probability"] - probs[ids[k]]), 1e-4)
                got = np.zeros(cfg["vocab_size"])
                for t in st["prediction"]["top"]:
                    got[t["id"]] = t["probability"]
                self.assertLess(np.max(np.abs(got - probs)), 1e-4, (name, k))
                for l, L in enumerate(layers):
                    self.assertTrue(close(np.array(st["attention"][l]), L["weights"][:, -1, :], tol), (name, k, l))
                    self.assertTrue(close(st["last_token_attention"]["mean_over_heads"][l],
                                          L["weights"][:, -1, :].mean(0), tol))
                ref = reference_attribution(cfg, w, seq, ids[k])
                a = st["attribution"]
                scale = max(1.0, np.max(np.abs(ref["by_source"])), np.max(np.abs(ref["mlps"])))
                for e in a["heads"]:
                    self.assertLess(np.max(np.abs(np.array(e["by_source"]) - ref["by_source"][e["layer"], e["head"]])),
                                    (2e-4 if name == "f32" else 2e-3) * scale, (name, k))
                self.assertLess(abs(a["sum"] - st["logit"]), 1e-4 * scale)

    def test_refusals_are_one_line(self):
        d, _, _ = load_variant("f32")
        cases = [
            (["--generate", "0"], "--generate must be in 1..64, got 0"),
            (["--generate", "65"], "--generate must be in 1..64, got 65"),
            (["--generate", "100000000"], "--generate must be in 1..64"),
            (["--generate", "2", "--compare", SEED2], "--generate cannot be combined with --compare"),
            (["--generate", "2", "--silence", "0"], "--generate cannot be combined with --silence or --swap-qk"),
            (["--generate", "2", "--swap-qk"], "--generate cannot be combined with --silence or --swap-qk"),
            (["--generate", "2", "--temperature", "-1"], "temperature must be a finite number >= 0"),
            (["--generate", "2", "--top-p", "0"], "top-p must be in (0, 1]"),
            (["--temperature", "0.8"], "--temperature needs --generate N"),
            (["--seed", "3", "--top-k", "2"], "--top-k needs --generate N"),
            (["--ignore-eos"], "--ignore-eos needs --generate N"),
        ]
        assert_refused(self, d, cases)

    def test_terminal_shows_every_step(self):
        d, _, _ = load_variant("f32")
        out = run("--model", d, SEED, "--generate", "4", "--temperature", "0.8", "--seed", "2").stdout.decode()
        j = explain_json("--model", d, SEED, "--generate", "4", "--temperature", "0.8", "--seed", "2")
        self.assertIn("== generation: 4 new tokens (stop: length) ==", out)
        self.assertIn("seed 2", out)
        for st in j["steps"]:
            m = re.search(rf"step {st['step']}: after {st['position']} .* -> (.*) \(p ([0-9.]+), logit", out)
            self.assertIsNotNone(m, out)
            self.assertEqual(m.group(1), f'"{st["text"]}"')
            self.assertEqual(m.group(2), f"{st['probability']:.4f}")
        self.assertEqual(len(re.findall(r"^  sum of the parts", out, re.M)), 4)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: test_explain_cli.py JOMOIM_EXE TINY_GPT2_DIR")
    EXE, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
