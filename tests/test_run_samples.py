#!/usr/bin/python3
"""`pith run -f PROMPTS --samples N` on the default model (assets/default.gguf, no ../shared needed):
N samples per prompt forked from one prefill. Checks that every (line, sample) result appears once in
--jsonl and in order in text mode, that the prompt is computed once per line (the stats line's
computed-token count: prompt tokens once plus each sample's decode tokens), that sample k of line i is
the same draw as that line alone with seed S + i * N + k, and that samples of one prompt differ."""
import json
import os
import re
import unittest

from pithtest import run_pith, tmp_dir

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(SRC, "assets", "default.gguf")
LINES = ["Once upon a time there was a little girl named Lily who loved to play outside in the sun",
         "The dog ran to the park"]
N, T, SEED = 4, 12, 40


def write(name, text):
    path = os.path.join(tmp_dir(), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def run(path, extra):
    r = run_pith(["run", "-m", MODEL, "-t", "1", "-f", path, "-n", str(T), "--temp", "0.9", "--top-k", "0",
                  "--top-p", "1", "--min-p", "0", "--ignore-eos"] + extra)
    return r


class Samples(unittest.TestCase):
    def test_jsonl_text_and_counts(self):
        path = write("samples.txt", "\n".join(LINES) + "\n")
        r = run(path, ["--jsonl", "--samples", str(N), "--seed", str(SEED)])
        self.assertEqual(r.returncode, 0, r.stderr)
        objs = [json.loads(l) for l in r.stdout.decode().splitlines()]
        self.assertEqual(sorted((o["index"], o["sample"]) for o in objs),
                         [(i, k) for i in range(len(LINES)) for k in range(N)])
        for o in objs:
            self.assertEqual(len(o["tokens"]), T)
            self.assertEqual(o["finish_reason"], "length")
        by = {(o["index"], o["sample"]): o for o in objs}
        for i in range(len(LINES)):
            draws = {tuple(by[(i, k)]["tokens"]) for k in range(N)}
            self.assertGreater(len(draws), 1, "the samples of one prompt should differ")
        err = r.stderr.decode()
        m = re.search(r"(\d+) tokens computed, (\d+) forked samples", err)
        self.assertIsNotNone(m, err)
        prompt_tokens = sum(by[(i, 0)]["prompt_tokens"] for i in range(len(LINES)))
        self.assertEqual(int(m.group(2)), len(LINES) * (N - 1))
        # each prompt once, then every sample's decode tokens (its last sampled token is not computed)
        self.assertEqual(int(m.group(1)), prompt_tokens + len(LINES) * N * (T - 1), err)

        text = run(path, ["--samples", str(N), "--seed", str(SEED)])
        self.assertEqual(text.returncode, 0, text.stderr)
        rows = text.stdout.decode().split("\n")
        self.assertEqual(len(rows) - 1, len(LINES) * N)
        for i in range(len(LINES)):
            for k in range(N):
                esc = by[(i, k)]["text"].replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
                self.assertEqual(rows[i * N + k], esc)

        # sample k of line i draws like that line alone with seed S + i * N + k
        for i in range(len(LINES)):
            one = write("samples-one.txt", LINES[i] + "\n")
            for k in (0, N - 1):
                a = run(one, ["--jsonl", "--seed", str(SEED + i * N + k)])
                self.assertEqual(a.returncode, 0, a.stderr)
                alone = json.loads(a.stdout.decode().splitlines()[0])
                self.assertEqual(alone["tokens"], by[(i, k)]["tokens"], (i, k))

    def test_bad_value(self):
        path = write("samples-bad.txt", "hello\n")
        for v in ("0", "1025", "x"):
            r = run(path, ["--samples", v])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b"--samples", r.stderr)


if __name__ == "__main__":
    unittest.main()
