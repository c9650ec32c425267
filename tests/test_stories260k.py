"""stories260K (a real trained tiny Llama from llama2.c) through `pith run`, against the reference in
../shared: greedy text byte for byte, and logits within 1e-4 absolute for the first 150 steps.

Tolerance: the reference logits were computed in float64; Pith computes in float32 with F32 weights, so
per-logit differences of ~1e-6..1e-5 are expected from rounding. The KV cache is kept in F32
(--kv-f32) for this check: the default F16 cache rounds K/V to 11 significant bits, which moves these
logits by up to ~2e-2 (measured) while leaving the greedy text unchanged; test_stories260k checks the
default F16 cache by its text. 1e-4 is what the issue asks; past step
150 the top-2 gap shrinks to 0.004 (step 185), which is why only the greedy text is compared there."""
import os
import unittest

import numpy as np

from pithtest import main, run_pith, shared_dir, tmp_dir

SHARED = shared_dir()
MODEL = os.path.join(SHARED, "models/stories260K/stories260K.bin")
TOKENIZER = os.path.join(SHARED, "models/stories260K/tok512.bin")
REF = os.path.join(SHARED, "models/stories260K/reference")


class Stories260K(unittest.TestCase):
    def generate(self, threads, extra=()):
        out = os.path.join(tmp_dir(), "stories260k-logits-t%d.bin" % threads)
        r = run_pith(["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-p", "", "-n", "200", "--temp", "0",
                      "-t", str(threads), "--kv-f32", "--logits-out", out] + list(extra))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r, np.fromfile(out, dtype="<f4")

    def check(self, threads):
        r, logits = self.generate(threads)
        with open(os.path.join(REF, "stories260K_greedy_text.txt"), "rb") as f:
            ref_text = f.read()
        self.assertEqual(r.stdout, ref_text + b"\n")
        ref = np.load(os.path.join(REF, "stories260K_greedy_logits.npy"))
        self.assertEqual(logits.size, ref.size)
        logits = logits.reshape(ref.shape)
        err = np.abs(logits[:150].astype(np.float64) - ref[:150]).max()
        print("threads %d: max |logit - ref| over 150 steps = %.3g" % (threads, err))
        self.assertLess(err, 1e-4)
        ref_tokens = [int(x) for x in open(os.path.join(REF, "stories260K_greedy_tokens.txt")).read().split()]
        self.assertEqual(list(logits.argmax(axis=1)[:150]), ref_tokens[:150])
        self.assertIn(b"tok/s", r.stderr)

    def test_one_thread(self):
        self.check(1)

    def test_two_threads(self):
        self.check(2)

    def test_f16_kv_cache_text(self):
        r = run_pith(["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-n", "200", "--temp", "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(REF, "stories260K_greedy_text.txt"), "rb") as f:
            self.assertEqual(r.stdout, f.read() + b"\n")

    def test_continuation_keeps_leading_space(self):
        # The reference text continues "...there was a little" with " girl": the first generated piece
        # keeps its SentencePiece space after a non-empty prompt, both in run and in batch mode.
        prompt = "Once upon a time, there was a little"
        r = run_pith(["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-p", prompt, "-n", "5", "--temp", "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(b" girl named Lily"), r.stdout)
        path = os.path.join(tmp_dir(), "stories260k-prompts.txt")
        with open(path, "w") as f:
            f.write(prompt + "\n")
        r = run_pith(["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-f", path, "--jsonl", "-n", "5", "--temp", "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b'"text":" girl named Lily', r.stdout)

    def test_chat_turns_match_plain_generation(self):
        # stories260K has no chat template, so --chat renders ChatML. The second reply must equal plain
        # generation from the ChatML text of the whole conversation (earlier turns come from the prefix
        # cache in chat mode, so this also checks the cache against a fresh computation).
        base = ["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-n", "20", "--temp", "0"]
        one = run_pith(base + ["--chat"], input=b"Hi\n")
        self.assertEqual(one.returncode, 0, one.stderr)
        reply1 = one.stdout[:-1].decode()
        both = run_pith(base + ["--chat"], input=b"Hi\n\nTell me a story\n")
        self.assertEqual(both.returncode, 0, both.stderr)
        self.assertTrue(both.stdout.startswith(one.stdout), (one.stdout, both.stdout))
        reply2 = both.stdout[len(one.stdout):]
        chatml = ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" + reply1 +
                  "<|im_end|>\n<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n")
        plain = run_pith(base + ["-p", chatml])
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(plain.stdout, reply2)

    def test_ignore_eos_generates_exactly_n(self):
        out = os.path.join(tmp_dir(), "stories260k-n7.bin")
        r = run_pith(["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-n", "7", "--temp", "0",
                      "--ignore-eos", "--logits-out", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.path.getsize(out), 7 * 512 * 4)

    def test_engine_options_apply_to_one_prompt(self):
        # A single prompt runs through the engine: its options are not ignored.
        base = ["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-p", "Once upon a time", "-n", "40", "--temp", "0",
                "--ignore-eos"]
        ref_logits = os.path.join(tmp_dir(), "stories260k-opts-ref.bin")
        ref = run_pith(base + ["--logits-out", ref_logits])
        self.assertEqual(ref.returncode, 0, ref.stderr)
        self.assertNotIn(b"stopped", ref.stderr)
        # Prompt chunks of 2 tokens and blocks of 4: the same tokens, the same logits within rounding.
        chunked_logits = os.path.join(tmp_dir(), "stories260k-opts-chunked.bin")
        chunked = run_pith(base + ["--max-batch-tokens", "2", "--block-size", "4", "--logits-out", chunked_logits])
        self.assertEqual(chunked.returncode, 0, chunked.stderr)
        self.assertEqual(chunked.stdout, ref.stdout)
        a, b = np.fromfile(ref_logits, dtype="<f4"), np.fromfile(chunked_logits, dtype="<f4")
        self.assertEqual(a.size, 40 * 512)
        self.assertLess(np.abs(a - b).max(), 1e-3)
        # The length limit: 5 prompt tokens (BOS included) + 15 generated, and stderr says why it stopped.
        short_logits = os.path.join(tmp_dir(), "stories260k-opts-short.bin")
        short = run_pith(base + ["--max-seq-len", "20", "--logits-out", short_logits])
        self.assertEqual(short.returncode, 0, short.stderr)
        self.assertIn(b"stopped after 15 of 40 tokens", short.stderr)
        self.assertIn(b"generated 15 tokens", short.stderr)
        self.assertEqual(os.path.getsize(short_logits), 15 * 512 * 4)
        self.assertTrue(ref.stdout.startswith(short.stdout.rstrip(b"\n")), (ref.stdout, short.stdout))
        # A KV pool too small for the prompt is a clear error, not a crash.
        tiny = run_pith(base + ["--kv-blocks", "1", "--block-size", "4"])
        self.assertEqual(tiny.returncode, 1, tiny.stderr)
        self.assertIn(b"at most 4 tokens per sequence", tiny.stderr)

    def test_same_seed_same_text(self):
        args = ["run", "-m", MODEL, "--tokenizer", TOKENIZER, "-p", "Once upon a time", "-n", "60",
                "--temp", "1.0", "--top-k", "0", "--top-p", "0.9", "--seed", "42"]
        a, b = run_pith(args), run_pith(args)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(a.stdout, b.stdout)
        c = run_pith(args[:-1] + ["43"])
        self.assertNotEqual(a.stdout, c.stdout)


if __name__ == "__main__":
    main()
