"""`pith bench`'s speculative mode (--spec-type ngram|draft|mtp -f PROMPTS): tiny models, one repetition, a
few tokens. Checks the JSON (one object per prompt and a total, every field present and consistent: the
speed-up is the ratio of the rates, accepted <= drafted, the total sums the prompts), that the default
model drafting for itself is accepted nearly always (greedy: >= 90 % over 24 tokens) and takes fewer
forward passes, that prompt lookup drafts on a repetitive prompt, that the table prints the header and
a row per prompt, that `pith run -md` gives the tokens it gives without, that a Qwen3.5 model's MTP head
drafts (a head that repeats the last token, on a model damped to repeat itself: accepted) with the same
tokens in `pith bench` and `pith run`, and that bad arguments exit with status 2 and a draft of another
vocabulary, or --spec-type mtp on a file without an MTP layer, with 1.
Timings are only checked to be positive and finite: this is not a timed test."""
import json
import math
import os
import re
import sys
import unittest

from pithtest import main, run_pith, skip, tmp_dir

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(SRC, "tools"))
try:
    import mkmodel  # noqa: E402
except ImportError as e:  # numpy missing
    skip("cannot import the model tools: %s" % e)

DEFAULT = os.path.join(SRC, "assets", "default.gguf")
QUICK = ["-n", "24", "-t", "1", "--bw-mib", "8", "--no-warmup"]
PROMPTS = ["In the beginning God created the heaven and the earth. In the beginning God created the heaven",
           "And God said, Let there be light"]


def make_model(name, args):
    path = os.path.join(tmp_dir(), "bench-spec-" + name + ".gguf")
    if not os.path.exists(path):
        mkmodel.main(args + ["--format", "gguf", "--out", path + ".tmp"])
        os.replace(path + ".tmp", path)
    return path


def prompts_file(name, lines):
    path = os.path.join(tmp_dir(), "bench-spec-" + name + ".txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n\n")  # a blank line is no prompt
    return path


class BenchSpec(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(DEFAULT):
            skip("no assets/default.gguf")
        cls.prompts = prompts_file("bible", PROMPTS)

    def bench(self, extra):
        r = run_pith(["bench", "--json"] + QUICK + extra, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        return [json.loads(line) for line in r.stdout.decode().splitlines()]

    def check(self, objs, spec_type, snapshot_points=False):
        self.assertEqual([o["test"] for o in objs], ["spec", "spec", "spec-total"])
        self.assertEqual([o.get("prompt_index") for o in objs], [0, 1, None])
        for o in objs:
            self.assertEqual(o["spec_type"], spec_type)
            self.assertTrue(o["identical"])
            self.assertEqual(o["n_gen"], 24)
            self.assertEqual(o["threads"], 1)
            for k in ("tokens_per_s", "spec_tokens_per_s", "bandwidth_gbs", "ratio", "spec_ratio", "cpu_share"):
                self.assertTrue(math.isfinite(o[k]) and o[k] > 0, (k, o))
            self.assertAlmostEqual(o["speedup"], o["spec_tokens_per_s"] / o["tokens_per_s"], delta=1e-9 * o["speedup"])
            self.assertAlmostEqual(o["spec_ratio"] / o["ratio"], o["speedup"], delta=1e-6 * o["speedup"])
            self.assertLessEqual(o["accepted_tokens"], o["draft_tokens"])
            if o["draft_tokens"]:
                self.assertAlmostEqual(o["acceptance"], o["accepted_tokens"] / o["draft_tokens"])
            # plain decoding: the prefill pass and one per token but the first (a model with recurrent
            # state may end a prefill chunk at a snapshot point: one more pass per prompt)
            if snapshot_points:
                self.assertTrue(1 - 1e-9 <= o["passes_per_token"] <= 1 + 1 / o["n_gen"] + 1e-9, o)
            else:
                self.assertAlmostEqual(o["passes_per_token"], 1.0, delta=1e-9)
        tot = objs[2]
        self.assertEqual(tot["draft_tokens"], objs[0]["draft_tokens"] + objs[1]["draft_tokens"])
        self.assertEqual(tot["n_prompt"], objs[0]["n_prompt"] + objs[1]["n_prompt"])

    def test_self_draft(self):
        objs = self.bench(["-m", DEFAULT, "-md", DEFAULT, "-f", self.prompts])
        self.check(objs, "draft")
        tot = objs[2]
        self.assertEqual(tot["draft_model"], DEFAULT)
        self.assertGreaterEqual(tot["acceptance"], 0.9, tot)
        self.assertLess(tot["spec_passes_per_token"], 0.5, tot)

    def test_ngram(self):
        objs = self.bench(["-m", DEFAULT, "--spec-type", "ngram", "-f", self.prompts])
        self.check(objs, "ngram")
        self.assertGreater(objs[0]["draft_tokens"], 0, objs[0])  # the repeated sentence

    def test_random_draft_table(self):
        target = make_model("target", ["--preset", "test-llama", "--dtype", "Q8_0", "--seed", "3"])
        draft = make_model("draft", ["--arch", "llama", "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads",
                                     "2", "--ffn", "128", "--vocab", "512", "--ctx", "512", "--seed", "4"])
        r = run_pith(["bench", "-m", target, "--draft-model", draft, "-f", self.prompts] + QUICK, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        out = r.stdout.decode()
        self.assertIn("draft model: " + draft, out)
        self.assertIn("shape: dim 128, layers 2", out)
        rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| prompt")]
        self.assertEqual([row.split("|")[1].strip() for row in rows], ["1", "2", "all"])

    def test_run_draft_model(self):
        """`pith run -f --jsonl` with -md: the same tokens, and the stats line counts the drafts."""
        def run(extra):
            r = run_pith(["run", "-m", DEFAULT, "-f", self.prompts, "--jsonl", "-n", "24", "--temp", "0",
                          "--ignore-eos", "-t", "1"] + extra)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            return [json.loads(line)["tokens"] for line in r.stdout.decode().splitlines()], r.stderr.decode()
        base, _ = run([])
        got, err = run(["-md", DEFAULT])
        self.assertEqual(got, base)
        m = re.search(r"(\d+) of (\d+) draft tokens accepted", err)
        self.assertTrue(m, err)
        self.assertGreaterEqual(int(m.group(1)), 0.9 * int(m.group(2)))
        self.assertGreater(int(m.group(2)), 0)
        r = run_pith(["run", "-m", DEFAULT, "--spec-type", "draft", "-p", "x", "-n", "2"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("draft model", r.stderr.decode())

    def test_mtp(self):
        model = make_model("mtp-copy", ["--preset", "test-qwen35", "--mtp", "1", "--mtp-copy", "--damp", "0:0.2",
                                        "--dtype", "Q8_0", "--seed", "7"])
        objs = self.bench(["-m", model, "--spec-type", "mtp", "-f", self.prompts])
        self.check(objs, "mtp", snapshot_points=True)
        self.assertGreater(objs[2]["accepted_tokens"], 0, objs[2])

        def run(extra):
            r = run_pith(["run", "-m", model, "-f", self.prompts, "--jsonl", "-n", "24", "--temp", "0",
                          "--ignore-eos", "-t", "1"] + extra)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            return [json.loads(line)["tokens"] for line in r.stdout.decode().splitlines()], r.stderr.decode()
        base, _ = run([])
        got, err = run(["--spec-type", "mtp"])
        self.assertEqual(got, base)
        m = re.search(r"(\d+) of (\d+) draft tokens accepted", err)
        self.assertTrue(m and int(m.group(2)) > 0 and int(m.group(1)) > 0, err)
        plain = make_model("qwen35-plain", ["--preset", "test-qwen35", "--dtype", "Q8_0"])
        r = run_pith(["run", "-m", plain, "--spec-type", "mtp", "-p", "x", "-n", "2"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("no multi-token-prediction (MTP) layers", r.stderr.decode())

    def test_errors(self):
        cases = [["--spec-type", "draft", "-f", self.prompts],           # no draft model
                 ["--spec-type", "ngram"],                               # no prompts
                 ["-f", self.prompts],                                   # no spec type
                 ["--spec-type", "lookahead", "-f", self.prompts],
                 ["--spec-type", "ngram", "-f", self.prompts, "-n", "1"],
                 ["--spec-type", "ngram", "-f", self.prompts, "--spec-max-draft", "17"]]
        for extra in cases:
            r = run_pith(["bench", "-m", DEFAULT] + QUICK[2:] + extra)
            self.assertEqual(r.returncode, 2, (extra, r.stderr))
        other = make_model("v600", ["--arch", "llama", "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads",
                                    "2", "--ffn", "128", "--vocab", "600", "--ctx", "512"])
        r = run_pith(["bench", "-m", DEFAULT, "-md", other, "-f", self.prompts] + QUICK)
        self.assertEqual(r.returncode, 1)
        self.assertIn("vocabulary has 600 tokens, the target's 2048", r.stderr.decode())
        r = run_pith(["bench", "-m", DEFAULT, "--spec-type", "ngram", "-f", "/nonexistent/prompts.txt"] + QUICK)
        self.assertEqual(r.returncode, 1)


if __name__ == "__main__":
    main()
