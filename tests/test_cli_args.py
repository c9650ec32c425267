"""The pith command line: help text, and clear errors with exit status 2 for bad arguments."""
import os
import unittest

from pithtest import main, run_pith, tmp_dir


class CliArgs(unittest.TestCase):
    def test_help(self):
        r = run_pith(["--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"run", r.stdout)
        r = run_pith(["run", "--help"])
        self.assertEqual(r.returncode, 0)
        for opt in [b"-m", b"--tokenizer", b"-p", b"-n", b"-t", b"--temp", b"--top-k", b"--top-p",
                    b"--min-p", b"--seed", b"--ignore-eos", b"--logits-out", b"--max-seq-len", b"--kv-blocks",
                    b"--kv-mem", b"--block-size", b"--max-batch-tokens", b"--no-prefix-cache", b"--ctx-size", b"-c,",
                    b"--file-prompt", b"--option=value"]:
            self.assertIn(opt, r.stdout, opt)

    def assert_usage_error(self, args, needle):
        r = run_pith(args)
        self.assertEqual(r.returncode, 2, (args, r.stderr))
        self.assertIn(needle, r.stderr, (args, r.stderr))
        self.assertNotIn(b"Segmentation", r.stderr)

    def test_bad_arguments(self):
        self.assert_usage_error([], b"usage")
        self.assert_usage_error(["frobnicate"], b"unknown command")
        self.assert_usage_error(["run", "--bogus"], b"unknown option")
        self.assert_usage_error(["run", "-m"], b"needs a value")
        self.assert_usage_error(["run", "-m", "x", "-n", "abc"], b"not an integer")
        self.assert_usage_error(["run", "-m", "x", "-n", "-5"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--temp", "nan"], b"not a number")
        self.assert_usage_error(["run", "-m", "x", "--top-p", "1.5"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "-t", "0"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--jsonl"], b"needs -f")
        self.assert_usage_error(["run", "-m", "x", "-f", "p.txt", "--logits-out", "l.bin"], b"single prompt")
        self.assert_usage_error(["run", "-m", "x", "--max-seq-len", "1"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--kv-mem", "12Q"], b"not a size")
        self.assert_usage_error(["run", "-m", "x", "-c", "1"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--ctx-size=1"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "-n", "-2"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--seed", "-2"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--top-k=-2"], b"out of range")
        self.assert_usage_error(["run", "-m", "x", "--n-predict="], b"not an integer")
        self.assert_usage_error(["help", "frobnicate"], b"unknown command")

    def test_missing_model_file(self):
        r = run_pith(["run", "-m", os.path.join(tmp_dir(), "does-not-exist.gguf"), "-n", "1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"does-not-exist.gguf", r.stderr)


if __name__ == "__main__":
    main()
