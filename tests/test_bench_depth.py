"""`pith bench -d` (llama-bench's --n-depth) and `--kv-type`: pp and tg after N tokens already in the cache. Checks the
order of the tests, the `depth` field of the JSON and the table's "@ dN" names, that odd depths (not a
multiple of the block size) work, and that bad depths are usage errors. The runner itself fails a test
whose prompt was not served the depth prefix by the cache (usage.cached_tokens), so a 0 exit means each
test really ran at its depth. Not a timed test: tokens per second are only checked to be positive."""
import json
import math
import os
import sys
import unittest

from pithtest import main, run_pith, skip, tmp_dir

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(SRC, "tools"))
try:
    import mkmodel  # noqa: E402
except ImportError as e:  # numpy missing
    skip("cannot import the model tools: %s" % e)

QUICK = ["-p", "16", "-n", "4", "-r", "1", "--bw-mib", "8", "-t", "1", "--no-warmup"]


def model():
    path = os.path.join(tmp_dir(), "bench-depth-q8.gguf")
    if not os.path.exists(path):
        mkmodel.main(["--preset", "test-llama", "--dtype", "Q8_0", "--format", "gguf", "--out", path + ".tmp"])
        os.replace(path + ".tmp", path)
    return path


class BenchDepth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = model()

    def test_json_depths(self):
        # 100 is not a multiple of 16 (the runner's block size shrinks to 4); 495 + 16 + 1 = 512 (pp) and
        # 495 + 4 + 2 (tg) positions fit test-llama's 512, one more would not.
        r = run_pith(["bench", "-m", self.m, "--json", "-d", "0,100,495"] + QUICK, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        objs = [json.loads(l) for l in r.stdout.decode().splitlines() if l.strip()]
        self.assertEqual([(o["test"], o["depth"]) for o in objs],
                         [("pp16", 0), ("tg4", 0), ("pp16", 100), ("tg4", 100), ("pp16", 495), ("tg4", 495)])
        for o in objs:
            self.assertTrue(math.isfinite(o["tokens_per_s"]) and o["tokens_per_s"] > 0, o)
            self.assertEqual(o["n_tokens"], 16 if o["test"] == "pp16" else 4)
        self.assertIn(b"filling the cache to depth 495", r.stderr)

    def test_table_names(self):
        r = run_pith(["bench", "-m", self.m, "-d", "32"] + QUICK, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertIn(b"| pp16 @ d32 |", r.stdout)
        self.assertIn(b"| tg4 @ d32 |", r.stdout)

    def test_bad_depths(self):
        for args, needle in [(["-d", "-1"], b"out of range"), (["-d", "1,,2"], b"comma-separated"),
                             (["-d", "x"], b"not an integer"), (["-d", "496"], b"context"),
                             (["-d", "0,507", "-p", "0"], b"context")]:
            r = run_pith(["bench", "-m", self.m] + QUICK + args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(needle, r.stderr, (args, r.stderr))

    def test_kv_type(self):
        r = run_pith(["bench", "-m", self.m, "--json", "--kv-type", "q8_0", "-d", "64"] + QUICK, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        objs = [json.loads(l) for l in r.stdout.decode().splitlines() if l.strip()]
        self.assertEqual([o["kv_type"] for o in objs], ["q8_0", "q8_0"])
        for kv in ("f16", "bf16", "q8_0", "f32"):
            r = run_pith(["run", "-m", self.m, "-p", "", "-n", "4", "--temp", "0", "--ignore-eos", "--kv-type", kv])
            self.assertEqual(r.returncode, 0, (kv, r.stderr))
        for cmd in (["bench", "-m", self.m], ["run", "-m", self.m]):
            r = run_pith(cmd + ["--kv-type", "q4_0"])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(b"not one of f16, bf16, q8_0, f32", r.stderr)

    def test_q8_0_needs_whole_blocks(self):
        # head dim 48: a head's row is not whole blocks of 32, so the Q8_0 cache is refused with a reason
        path = os.path.join(tmp_dir(), "kv-hd48.gguf")
        if not os.path.exists(path):
            mkmodel.main(["--arch", "llama", "--dim", "96", "--layers", "1", "--heads", "2", "--kv-heads", "2",
                          "--ffn", "128", "--vocab", "300", "--dtype", "F32", "--format", "gguf", "--out", path + ".tmp"])
            os.replace(path + ".tmp", path)
        r = run_pith(["run", "-m", path, "-p", "", "-n", "2", "--kv-type", "q8_0"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"multiple of 32", r.stderr)
        r = run_pith(["run", "-m", path, "-p", "", "-n", "2", "--kv-type", "bf16"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_help(self):
        r = run_pith(["bench", "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--n-depth", r.stdout)


if __name__ == "__main__":
    main()
