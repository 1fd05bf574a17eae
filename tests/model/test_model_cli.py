#!/usr/bin/env python3
"""End to end: `jomoim tokenize | predict | generate` on the tiny checkpoints of tiny_gpt2.py,
against the PyTorch implementation of the same architecture in that file.

    test_model_cli.py JOMOIM_EXE TINY_GPT2_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt2  # noqa: E402

EXE = None
ROOT = None
PROMPTS = ["I have a lot", "Cash or credit card? I have a lot", "the the the\n\n  x", "a", "héllo 조모임 🙂"]


def run(*args, ok=True):
    p = subprocess.run([EXE, *args], capture_output=True, timeout=120)
    if ok and p.returncode != 0:
        raise AssertionError(f"jomoim {' '.join(args)} failed: {p.stderr.decode(errors='replace')}")
    return p


def load_variant(name):
    return tiny_gpt2.load_variant(ROOT, name)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


class ModelCli(unittest.TestCase):
    def test_predict_matches_pytorch(self):
        for name in ["f32", "f16_prefixed", "bf16_gelu_erf"]:
            d, cfg, w = load_variant(name)
            V = cfg["vocab_size"]
            for prompt in PROMPTS:
                tok = json.loads(run("tokenize", "--model", d, "--json", prompt).stdout)
                ids = tok["ids"]
                self.assertEqual(ids, [t["id"] for t in tok["tokens"]])
                plain = run("tokenize", "--model", d, prompt).stdout.decode().split()
                self.assertEqual([int(x) for x in plain], ids)
                expected = tiny_gpt2.torch_logits(cfg, w, ids)[-1]
                got = json.loads(run("predict", "--model", d, "--json", "--top", str(V), prompt).stdout)
                self.assertEqual(got["ids"], ids)
                self.assertEqual(len(got["top"]), V)
                logits = np.zeros(V)
                probs = np.zeros(V)
                for t in got["top"]:
                    logits[t["id"]] = t["logit"]
                    probs[t["id"]] = t["probability"]
                self.assertLessEqual(rel(logits, expected), 1e-4, (name, prompt))
                p = np.exp(expected - expected.max())
                p /= p.sum()
                self.assertLess(np.max(np.abs(probs - p)), 1e-5, (name, prompt))
                # Sorted by probability, descending.
                ps = [t["probability"] for t in got["top"]]
                self.assertEqual(ps, sorted(ps, reverse=True))
                # The table form names the most likely token.
                table = run("predict", "--model", d, "--top", "3", prompt).stdout.decode()
                self.assertIn(str(int(np.argmax(expected))), table)

    def test_greedy_generation_matches_pytorch(self):
        d, cfg, w = load_variant("f32")
        for prompt in ["I have a lot", "the"]:
            out = json.loads(run("generate", "--model", d, "--json", "--temperature", "0", "-n", "12",
                                 "--ignore-eos", prompt).stdout)
            ids = list(out["prompt_ids"])
            for step, nxt in enumerate(out["ids"]):
                logits = tiny_gpt2.torch_logits(cfg, w, ids)[-1]
                order = np.argsort(-logits)
                if logits[order[0]] - logits[order[1]] > 1e-3:  # a clear winner
                    self.assertEqual(nxt, int(order[0]), (prompt, step))
                ids.append(nxt)
            self.assertEqual(len(out["ids"]), 12)
            self.assertEqual(out["stop"], "length")

    def test_sampling_is_seeded_and_context_bounded(self):
        d, cfg, _ = load_variant("f32")
        a = run("generate", "--model", d, "--json", "--seed", "5", "-n", "10", "--ignore-eos", "I have").stdout
        b = run("generate", "--model", d, "--json", "--seed", "5", "-n", "10", "--ignore-eos", "I have").stdout
        ja, jb = json.loads(a), json.loads(b)
        self.assertEqual(ja["ids"], jb["ids"])
        self.assertEqual(ja["seed"], 5)
        full = json.loads(run("generate", "--model", d, "--json", "--seed", "1", "-n", "1000", "--ignore-eos",
                              "I have a lot").stdout)
        self.assertEqual(full["stop"], "context")
        self.assertEqual(len(full["prompt_ids"]) + len(full["ids"]), cfg["n_positions"])
        # Streaming form: the prompt, then the continuation, then a report on stderr.
        p = run("generate", "--model", d, "--seed", "5", "-n", "10", "--ignore-eos", "I have")
        self.assertTrue(p.stdout.startswith(b"I have"))
        self.assertIn(b"tokens/s", p.stderr)

    def test_refusals_are_one_line(self):
        d, cfg, _ = load_variant("f32")
        with tempfile.TemporaryDirectory() as empty:
            cases = [
                (["predict", "--model", "/nonexistent/model", "hi"], "no such directory"),
                (["predict", "--model", empty, "hi"], "vocab.json"),
                (["predict", "--model", d, "x" * (cfg["n_positions"] + 5)], "context"),
                (["generate", "--model", d, "--temperature", "-1", "hi"], "temperature"),
                (["generate", "--model", d, "--top-p", "0", "hi"], "top-p"),
                (["predict", "--model", d, "--top", "0", "hi"], "--top"),
                (["predict", "--model", d, "--no-such-option", "hi"], "no-such-option"),
                (["tokenize"], "text"),
            ]
            for args, word in cases:
                p = run(*args, ok=False)
                err = p.stderr.decode()
                self.assertNotEqual(p.returncode, 0, args)
                self.assertTrue(err.startswith("jomoim: error:"), (args, err))
                self.assertEqual(err.count("\n"), 1, (args, err))
                self.assertIn(word, err, args)
                self.assertEqual(p.stdout, b"", args)


if __name__ == "__main__":
    EXE, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
