#!/usr/bin/env python3
"""`jomoim train` from the command line: Ctrl-C (SIGINT) saves a checkpoint and exits 130, the
checkpoint is a model directory the other commands load, --resume continues from it, and bad
options are refused with one line.

    test_train_cli.py JOMOIM_EXE
"""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

EXE = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_corpus(d):
    os.makedirs(d, exist_ok=True)
    rng = random.Random(3)
    words = "the cat dog group project has wants sees a lot of work ideas quiet room".split()
    for i in range(12):
        with open(os.path.join(d, f"doc{i:02d}.txt"), "w") as f:
            f.write(" ".join(rng.choice(words) for _ in range(600)) + ".\n")


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


SMALL = ["--vocab-size", "300", "--layers", "1", "--heads", "2", "--embd", "16", "--context", "16",
         "--batch", "2", "--seq", "16", "--eval-every", "1000000", "--eval-batches", "1", "--threads", "1",
         "--log-every", "1", "--val-fraction", "0.1"]


class TrainCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.data = os.path.join(self.tmp.name, "data")
        write_corpus(self.data)

    def tearDown(self):
        self.tmp.cleanup()

    def interrupt_after(self, args, min_step):
        """Starts `jomoim train`, sends SIGINT once it reports step >= min_step, returns (rc, stderr)."""
        p = subprocess.Popen([EXE, "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        deadline = time.time() + 120
        for line in p.stderr:
            lines.append(line)
            if line.startswith("step "):
                step = int(line.split()[1].split("/")[0])
                if step >= min_step:
                    p.send_signal(signal.SIGINT)
                    break
            if time.time() > deadline:
                p.kill()
                self.fail("no progress line within 120 s")
        rest_out, rest_err = p.communicate(timeout=120)
        return p.returncode, "".join(lines) + rest_err

    def step_of(self, out):
        with open(os.path.join(out, "trainer.json")) as f:
            return json.load(f)["step"]

    def test_ctrl_c_saves_and_resume_continues(self):
        out = os.path.join(self.tmp.name, "run")
        args = ["--data", self.data, "--out", out, "--steps", "1000000", *SMALL]
        rc, err = self.interrupt_after(args, 5)
        self.assertEqual(rc, 130, err)
        self.assertIn("--resume", err)
        first = self.step_of(out)
        self.assertGreaterEqual(first, 5)
        # The checkpoint is a model directory every command reads.
        p = subprocess.run([EXE, "predict", "--model", out, "--json", "the cat"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(json.loads(p.stdout)["top"]), 10)
        # Resuming continues from the saved step, and the history keeps every step once.
        rc, err = self.interrupt_after([*args, "--resume"], first + 3)
        self.assertEqual(rc, 130, err)
        self.assertIn(f"resuming at step {first}", err)
        second = self.step_of(out)
        self.assertGreater(second, first)
        with open(os.path.join(out, "trainer.json")) as f:
            steps = [r["step"] for r in json.load(f)["history"]]
        self.assertEqual(steps, list(range(1, second + 1)))

    def test_stop_at_then_resume_equals_one_run(self):
        # A run in two phases (--stop-at, then --resume) ends with the same weights as one run
        # (the same data: the batches depend on the step, not on the invocation).
        one, two = os.path.join(self.tmp.name, "one"), os.path.join(self.tmp.name, "two")
        base = ["--data", self.data, "--steps", "8", "--save-every", "1000", *SMALL]
        p = subprocess.run([EXE, "train", "--out", one, *base], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([EXE, "train", "--out", two, *base, "--stop-at", "3"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("stopped (--stop-at): checkpoint at step 3", p.stderr)
        self.assertEqual(self.step_of(two), 3)
        p = subprocess.run([EXE, "train", "--out", two, *base, "--resume"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.step_of(two), 8)
        with open(os.path.join(one, "model.safetensors"), "rb") as a, open(os.path.join(two, "model.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        p = subprocess.run([EXE, "train", "--out", os.path.join(self.tmp.name, "bad"), *base, "--stop-at", "9"],
                           capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--stop-at must be in 0..--steps", p.stderr)

    def test_init_from_starts_a_new_run_from_saved_weights(self):
        # --init-from: a new run (step 0, fresh schedule, its own history) whose first weights and
        # tokenizer are a saved model's; step 1's training loss is the saved model's loss on that
        # batch, far below a fresh model's; the shape must match, and --tokenizer is refused.
        base = os.path.join(self.tmp.name, "base")
        p = subprocess.run([EXE, "train", "--data", self.data, "--out", base, "--steps", "60", "--lr", "3e-3",
                            "--save-every", "1000", *SMALL], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        ft, fresh = os.path.join(self.tmp.name, "ft"), os.path.join(self.tmp.name, "fresh")
        args = ["--data", self.data, "--steps", "2", "--save-every", "1000", "--seed", "5", *SMALL]
        p = subprocess.run([EXE, "train", "--out", ft, "--init-from", base, *args], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("starting from the weights of", p.stderr)
        with open(os.path.join(ft, "trainer.json")) as f:
            st = json.load(f)
        self.assertEqual(st["step"], 2)
        self.assertEqual([r["step"] for r in st["history"]], [1, 2])
        self.assertEqual(st["init_from"], base)
        for name in ("vocab.json", "merges.txt"):
            with open(os.path.join(base, name), "rb") as a, open(os.path.join(ft, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        p = subprocess.run([EXE, "train", "--out", fresh, "--tokenizer", base, *args], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(fresh, "trainer.json")) as f:
            fresh_loss = json.load(f)["history"][0]["loss"]
        self.assertLess(st["history"][0]["loss"], fresh_loss - 1.0, (st["history"][0], fresh_loss))
        # Resuming keeps where the run started.
        p = subprocess.run([EXE, "train", "--out", ft, *args[:args.index("--steps")], "--steps", "3",
                            *args[args.index("--steps") + 2:], "--resume"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(ft, "trainer.json")) as f:
            self.assertEqual(json.load(f)["init_from"], base)
        for extra, word in [(["--heads", "1"], "differs from the options"), (["--tokenizer", base], "--tokenizer")]:
            small = list(SMALL)
            if extra[0] in small:
                i = small.index(extra[0])
                small[i + 1] = extra[1]
                extra = []
            p = subprocess.run([EXE, "train", "--data", self.data, "--out", os.path.join(self.tmp.name, "bad"),
                                "--init-from", base, "--steps", "2", *small, *extra], capture_output=True, text=True,
                               timeout=120)
            self.assertNotEqual(p.returncode, 0, extra)
            self.assertTrue(p.stderr.startswith("jomoim: error:"), p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertIn(word, p.stderr)

    def test_freeze_wpe_keeps_the_position_code(self):
        # --freeze-wpe: the saved position embedding is the start (--wpe-init fourier: rows
        # orthogonal, as many positions as dimensions here) after training steps, while the same
        # run without the option moves it; trainer.json records the option.
        def wpe(model_dir):
            dtype, (rows, cols), raw = read_safetensors(os.path.join(model_dir, "model.safetensors"))["wpe.weight"]
            self.assertEqual(dtype, "F32")
            flat = struct.unpack(f"<{rows * cols}f", raw)
            return [flat[r * cols:(r + 1) * cols] for r in range(rows)]

        got = {}
        for freeze in (True, False):
            out = os.path.join(self.tmp.name, f"freeze{int(freeze)}")
            p = subprocess.run([EXE, "train", "--data", self.data, "--out", out, "--steps", "4", "--lr", "3e-3",
                                "--wpe-init", "fourier", "--save-every", "1000", *SMALL,
                                *(["--freeze-wpe"] if freeze else [])], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "trainer.json")) as f:
                self.assertEqual(json.load(f)["options"]["freeze_wpe"], freeze)
            got[freeze] = wpe(out)
        rows = got[True]
        self.assertEqual(len(rows), 16)
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                dot = sum(x * y for x, y in zip(rows[i], rows[j]))
                self.assertLess(abs(dot), 1e-6, (i, j))
        self.assertNotEqual(got[True], got[False])

    def test_seed_previous_token_head_points_one_back(self):
        # scripts/seed_previous_token_head.py (the default model's start): on a fresh
        # initialisation, only the chosen head's W_Q and W_K columns (and biases) change, the
        # explorer then measures that head as a previous-token head, the result trains with
        # --init-from, and a head the model lacks is refused with one line.
        python_dir = os.path.join(os.path.dirname(EXE), "python")
        if not os.path.isdir(os.path.join(python_dir, "jomoim")):
            self.skipTest("no Python module in this build")
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("no torch")
        script = os.path.join(ROOT, "scripts", "seed_previous_token_head.py")
        text = os.path.join(self.tmp.name, "text.txt")
        with open(text, "w") as f:
            for name in sorted(os.listdir(self.data)) * 2:
                with open(os.path.join(self.data, name)) as d:
                    f.write(d.read())
        init = os.path.join(self.tmp.name, "init")
        p = subprocess.run([EXE, "train", "--data", self.data, "--out", init, "--steps", "10", "--stop-at", "1",
                            "--wpe-init", "fourier", *SMALL], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        seeded = os.path.join(self.tmp.name, "seeded")
        env = dict(os.environ, PYTHONPATH=python_dir)
        p = subprocess.run([sys.executable, script, init, seeded, "--head", "1", "--data", text],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)

        a = read_safetensors(os.path.join(init, "model.safetensors"))
        b = read_safetensors(os.path.join(seeded, "model.safetensors"))
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k][:2], b[k][:2], k)
            if k not in ("h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias"):
                self.assertEqual(a[k][2], b[k][2], k)
        # c_attn is [C, 3C] (Q | K | V columns); C 16, 2 heads of 8: head 1's Q columns 8-15, K 24-31.
        before, after = a["h.0.attn.c_attn.weight"][2], b["h.0.attn.c_attn.weight"][2]
        changed = {i % 48 for i in range(len(before) // 4) if before[4 * i:4 * i + 4] != after[4 * i:4 * i + 4]}
        self.assertTrue(changed)
        self.assertLessEqual(changed, set(range(8, 16)) | set(range(24, 32)))
        p = subprocess.run([EXE, "heads", "--model", seeded, "--json"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        heads = {(h["layer"], h["head"]): h for h in json.loads(p.stdout)["head_roles"]["heads"]}
        self.assertGreaterEqual(heads[(0, 1)]["previous_token"], 0.6)
        self.assertIn("previous_token", heads[(0, 1)]["labels"])
        p = subprocess.run([EXE, "heads", "--model", init, "--json"], capture_output=True, text=True, timeout=120)
        self.assertLess(json.loads(p.stdout)["head_roles"]["heads"][1]["previous_token"], 0.6)
        out = os.path.join(self.tmp.name, "trained")
        p = subprocess.run([EXE, "train", "--data", self.data, "--out", out, "--steps", "2", "--init-from", seeded,
                            *SMALL], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([sys.executable, script, init, os.path.join(self.tmp.name, "x"), "--head", "2",
                            "--data", text], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("--head 2", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "x")))

    def test_refusals_are_one_line(self):
        out = os.path.join(self.tmp.name, "r")
        cases = [
            (["--out", out, *SMALL], "--data"),
            (["--data", os.path.join(self.tmp.name, "nope"), "--out", out, *SMALL], "no such file"),
            (["--data", self.data, "--out", out, *SMALL, "--seq", "64"], "--seq"),
            (["--data", self.data, "--out", out, *SMALL, "--vocab-size", "10"], "--vocab-size"),
            (["--data", self.data, "--out", out, *SMALL, "--lr", "-1"], "--lr"),
        ]
        # The corpus format (documents ended by "\n<|endoftext|>\n") and a held-out file.
        corpus = os.path.join(self.tmp.name, "corpus.txt")
        with open(corpus, "w") as f:
            for name in sorted(os.listdir(self.data)):
                with open(os.path.join(self.data, name)) as d:
                    f.write(d.read() + "\n<|endoftext|>\n")
        plain = os.path.join(self.data, "doc00.txt")
        small = [a for a in SMALL if a not in ("--val-fraction", "0.1")]
        cases += [
            (["--data", corpus, "--out", out, *small, "--documents", "eot", "--val-data", plain], "no document separator"),
            (["--data", corpus, "--out", out, *small, "--val-data", corpus], "--documents eot"),
            (["--data", corpus, "--out", out, *small, "--documents", "eot", "--val-data", os.path.join(self.tmp.name, "nope")],
             "--val-data"),
            (["--data", corpus, "--out", out, *SMALL, "--val-data", corpus], "--val-fraction"),
            (["--data", corpus, "--out", out, *small, "--documents", "lines"], "--documents"),
        ]
        for args, word in cases:
            p = subprocess.run([EXE, "train", *args], capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertTrue(p.stderr.startswith("jomoim: error:"), (args, p.stderr))
            self.assertEqual(p.stderr.count("\n"), 1, (args, p.stderr))
            self.assertIn(word, p.stderr, args)
        # A finished run is not overwritten without --resume.
        done = os.path.join(self.tmp.name, "done")
        p = subprocess.run([EXE, "train", "--data", self.data, "--out", done, "--steps", "2", *SMALL],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([EXE, "train", "--data", self.data, "--out", done, "--steps", "2", *SMALL],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--resume", p.stderr)
        # The corpus format trains, held out by file, scored on every held-out token.
        eot = os.path.join(self.tmp.name, "eot")
        p = subprocess.run([EXE, "train", "--data", corpus, "--val-data", corpus, "--documents", "eot", "--out", eot,
                            "--steps", "2", *small[:small.index("--eval-batches")], "--eval-batches", "0",
                            *small[small.index("--eval-batches") + 2:]], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("12 training documents", p.stderr)
        self.assertIn("from --val-data", p.stderr)
        with open(os.path.join(eot, "trainer.json")) as f:
            st = json.load(f)
        self.assertEqual(st["val_documents"], 12)
        self.assertEqual(st["val_scored_tokens"], (st["val_tokens"] - 1) // 16 * 16)
        self.assertGreater(st["bigram_val_loss"], 0)


if __name__ == "__main__":
    EXE = sys.argv[1]
    unittest.main(argv=[sys.argv[0], "-v"])
