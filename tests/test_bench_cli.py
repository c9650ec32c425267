"""`pith bench` smoke test: tiny random models, one repetition. Checks that the JSON parses, that every
field is present and consistent with the others and with the model file (weight bytes and parameters are
recomputed here from the GGUF's tensor table, independently of the C code), that the table prints the
shape, and that bad arguments exit with status 2. Timings are only checked to be positive and finite:
this is not a timed test."""
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
    import pith_gguf as G  # noqa: E402
except ImportError as e:  # numpy missing
    skip("cannot import the model tools: %s" % e)

# Small and quick everywhere, sanitizers included; the bandwidth buffer is small on purpose (it fits in
# cache, so its figure means nothing here).
QUICK = ["-p", "16", "-n", "4", "-r", "1", "--bw-mib", "8"]
REQUIRED = ["model", "format", "size_bytes", "threads", "test", "tokens_per_s", "stddev", "bandwidth_gbs",
            "ratio"]


def make_model(name, args):
    path = os.path.join(tmp_dir(), "bench-" + name + ".gguf")
    if not os.path.exists(path):
        mkmodel.main(args + ["--format", "gguf", "--out", path + ".tmp"])
        os.replace(path + ".tmp", path)
    return path


def expected_weights(path):
    """(size_bytes, layer_params, output_params, type names of layer matrices by bytes) from the file."""
    r = G.GGUFReader(path)
    try:
        size = layer = 0
        by_type = {}
        for name, (shape, t, _, nbytes) in r.tensors.items():
            if name.startswith("blk.") and len(shape) == 2:
                size += nbytes
                layer += shape[0] * shape[1]
                by_type[G.type_name(t)] = by_type.get(G.type_name(t), 0) + nbytes
        out = "output.weight" if "output.weight" in r.tensors else "token_embd.weight"
        oshape, _, _, onbytes = r.tensors[out]
        eshape, et, _, _ = r.tensors["token_embd.weight"]
        size += onbytes + G.tensor_nbytes((eshape[1],), et)
        types = sorted(by_type, key=lambda k: -by_type[k])
        return size, layer, oshape[0] * oshape[1], types
    finally:
        r.close()


def expected_peak_isa(table, main_type):
    """The instructions of the pp peak: those of the tiles the kernel table runs the main weight type on.
    Q8_0 and Q4_0 go through packed tiles (VNNI where the table has it), K-quants and IQ4 through the
    AVX-512 VNNI table's packed tiles and elsewhere through maddubs; F16
    and BF16 through packed tiles (zmm FMA on the AVX-512 table, ymm elsewhere), F32 through ymm FMA; the
    scalar table through portable C."""
    if table == "scalar":
        return "scalar C"
    if main_type in ("F16", "BF16") and table == "avx512-vnni":
        return "vfmadd231ps zmm (AVX-512)"
    if main_type in ("F32", "F16", "BF16"):
        return "vfmadd231ps ymm"
    if main_type in ("Q8_0", "Q4_0"):
        return {"avx512-vnni": "vpdpbusd zmm (AVX-512 VNNI)", "avx2-vnni": "vpdpbusd ymm (AVX-VNNI)",
                "avx2": "vpmaddubsw+vpmaddwd ymm"}[table]
    if table == "avx512-vnni":
        return "vpdpbusd zmm (AVX-512 VNNI)"
    return "vpmaddubsw+vpmaddwd ymm"


class BenchCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.q8 = make_model("q8", ["--preset", "test-llama", "--dtype", "Q8_0"])
        cls.f32 = make_model("f32", ["--preset", "test-qwen2", "--dtype", "F32"])
        cls.f16 = make_model("f16", ["--preset", "test-llama", "--dtype", "F16"])
        # Rows of 256 so that the Q4_K_M mix really mixes Q4_K and Q6_K.
        cls.mix = make_model("mix", ["--arch", "llama", "--dim", "256", "--layers", "2", "--heads", "4",
                                     "--kv-heads", "2", "--ffn", "512", "--vocab", "512", "--dtype", "Q4_K_M"])

    def bench_json(self, path, extra):
        r = run_pith(["bench", "-m", path, "--json"] + QUICK + extra, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        lines = [l for l in r.stdout.decode().splitlines() if l.strip()]
        return [json.loads(l) for l in lines]

    def check_objects(self, path, objs, threads, tests=("pp16", "tg4"), n_prompt=16, quantized=True):
        size, layer, output, types = expected_weights(path)
        r = G.GGUFReader(path)
        arch = r.metadata["general.architecture"]
        meta = {"dim": r.metadata[arch + ".embedding_length"], "n_layers": r.metadata[arch + ".block_count"],
                "n_heads": r.metadata[arch + ".attention.head_count"],
                "n_kv_heads": r.metadata[arch + ".attention.head_count_kv"],
                "ffn_dim": r.metadata[arch + ".feed_forward_length"]}
        n_vocab = r.tensors["token_embd.weight"][0][0]
        r.close()
        expect_tests = [(t, name) for t in threads for name in tests]
        self.assertEqual([(o["threads"], o["test"]) for o in objs], expect_tests)
        for o in objs:
            for k in REQUIRED:
                self.assertIn(k, o)
            self.assertEqual(o["model"], path)
            self.assertEqual(o["format"], "+".join(types))
            self.assertEqual(o["size_bytes"], size)
            self.assertEqual(o["layer_params"], layer)
            self.assertEqual(o["output_params"], output)
            self.assertEqual(o["arch"], arch)
            for k, v in meta.items():
                self.assertEqual(o[k], v, k)
            self.assertEqual(o["n_vocab"], n_vocab)
            tps = o["tokens_per_s"]
            self.assertTrue(math.isfinite(tps) and tps > 0, o)
            self.assertEqual(o["repetitions"], 1)
            self.assertEqual(len(o["samples_ts"]), 1)
            self.assertAlmostEqual(o["samples_ts"][0], tps, delta=1e-9 * tps)
            self.assertEqual(o["stddev"], 0)  # one repetition has no spread
            bw = o["bandwidth_gbs"]
            # Anything between a floppy disk and ten times the best memory system there is fails.
            self.assertTrue(0.05 < bw < 20000, o)
            self.assertAlmostEqual(bw, (o["bandwidth_before_gbs"] + o["bandwidth_after_gbs"]) / 2, delta=1e-9 * bw)
            self.assertIn(o["probe_isa"], ("avx512-vnni", "avx2-vnni", "avx2", "scalar"))
            self.assertEqual(o["bandwidth_probe_mib"], 8)  # QUICK's --bw-mib
            # Process CPU time over wall time and threads: a share of the machine, so within (0, 1]
            # up to clock granularity.
            self.assertTrue(0 < o["cpu_share"] < 1.5, o)
            if o["test"].startswith("tg"):
                self.assertEqual(o["ratio_kind"], "bandwidth")
                self.assertAlmostEqual(o["achieved_gbs"], size * tps / 1e9, delta=1e-9 * size * tps)
                self.assertAlmostEqual(o["ratio"], size * tps / 1e9 / bw, delta=1e-9 * o["ratio"])
            else:
                self.assertEqual(o["ratio_kind"], "int8_peak" if quantized else "fma_peak")
                # The engine asks for the last prompt token's logits alone, whatever the number of
                # steps of n_batch tokens: the output matrix runs once per prompt.
                ops = 2.0 * (layer * n_prompt + output) * tps / n_prompt
                self.assertAlmostEqual(o["achieved_gops"], ops / 1e9, delta=1e-9 * ops)
                self.assertTrue(o["peak_gops"] > 0)
                self.assertEqual(o["peak_isa"], expected_peak_isa(o["probe_isa"], types[0]), o)
                self.assertAlmostEqual(o["ratio"], ops / 1e9 / o["peak_gops"], delta=1e-9 * o["ratio"])
            # Achieving more than the measured limit by a wide margin would mean a wrong count (the
            # limits are noisy, and a tiny model's weights sit in cache, hence the slack).
            self.assertTrue(0 < o["ratio"] < 50, o)

    def test_q8_two_thread_counts(self):
        objs = self.bench_json(self.q8, ["-t", "1,2"])
        self.check_objects(self.q8, objs, [1, 2])

    def test_force_scalar(self):
        old = os.environ.get("PITH_FORCE_SCALAR")
        os.environ["PITH_FORCE_SCALAR"] = "1"
        try:
            objs = self.bench_json(self.q8, ["-t", "1", "-n", "0"])
        finally:
            if old is None:
                del os.environ["PITH_FORCE_SCALAR"]
            else:
                os.environ["PITH_FORCE_SCALAR"] = old
        self.check_objects(self.q8, objs, [1], tests=["pp16"])
        self.assertEqual(objs[0]["probe_isa"], "scalar")

    def test_float_model_uses_fma_peak(self):
        objs = self.bench_json(self.f32, ["-t", "1", "-b", "5"])
        self.check_objects(self.f32, objs, [1], quantized=False)
        self.assertEqual(objs[0]["n_batch"], 5)

    def test_half_model_uses_packed_fma_peak(self):
        # F16 weights are repacked at load: on the AVX-512 table their peak is zmm FMA, not F32's ymm.
        objs = self.bench_json(self.f16, ["-t", "1", "-n", "0"])
        self.check_objects(self.f16, objs, [1], tests=["pp16"], quantized=False)
        self.assertEqual(objs[0]["format"], "F16")

    def test_mixed_types(self):
        objs = self.bench_json(self.mix, ["-t", "1", "-n", "0"])
        self.check_objects(self.mix, objs, [1], tests=["pp16"])
        self.assertEqual(objs[0]["format"], "Q4_K+Q6_K")
        objs = self.bench_json(self.mix, ["-t", "1", "-p", "0"])
        self.check_objects(self.mix, objs, [1], tests=["tg4"])

    def test_probe_reads_model_size_by_default(self):
        # Without --bw-mib the probe reads what a generated token reads, at least 256 MiB (the test
        # models are tiny, so 256 here).
        args = [a for a in QUICK if a not in ("--bw-mib", "8")]
        r = run_pith(["bench", "-m", self.q8, "-t", "1", "-p", "0", "--json"] + args[2:])
        self.assertEqual(r.returncode, 0, r.stderr)
        o = json.loads(r.stdout.decode().strip().splitlines()[-1])
        self.assertEqual(o["bandwidth_probe_mib"], 256)

    def test_table(self):
        r = run_pith(["bench", "-m", self.q8, "-t", "1"] + QUICK)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn("dim 128, layers 2, heads 4, kv heads 4, head dim 32, ffn 384, vocab 512", out)
        self.assertIn("weights: Q8_0", out)
        self.assertIn("| model | format |", out)
        probes = [l for l in out.splitlines() if l.startswith("probes: kernels ")]
        self.assertEqual(len(probes), 1, out)
        self.assertIn("pp ratio against the int8 peak of ", probes[0])
        rows = [l for l in out.splitlines() if l.startswith("| bench-q8.gguf |")]
        self.assertEqual(len(rows), 2, out)
        self.assertIn("| pp16 |", rows[0])
        self.assertIn("| tg4 |", rows[1])

    def assert_usage_error(self, args, needle):
        r = run_pith(["bench"] + args)
        self.assertEqual(r.returncode, 2, (args, r.stderr))
        self.assertIn(needle, r.stderr, (args, r.stderr))

    def test_bad_arguments(self):
        m = self.q8
        self.assert_usage_error(["--bogus"], b"unknown option")
        self.assert_usage_error(["-m"], b"needs a value")
        self.assert_usage_error(["-m", m, "-r", "0"], b"out of range")
        self.assert_usage_error(["-m", m, "-t", "0"], b"out of range")
        self.assert_usage_error(["-m", m, "-t", "1,,2"], b"comma-separated")
        self.assert_usage_error(["-m", m, "-t", "1,"], b"comma-separated")
        self.assert_usage_error(["-m", m, "-p", "abc"], b"not an integer")
        self.assert_usage_error(["-m", m, "-b", "0"], b"out of range")
        self.assert_usage_error(["-m", m, "-p", "0", "-n", "0"], b"nothing to measure")
        # test-llama's context is 512 positions. pp needs one more than -p (the engine samples a token
        # after the prompt); tg two more than -n (the BOS, and the last token sampled).
        self.assert_usage_error(["-m", m, "-p", "600", "-r", "1", "--bw-mib", "8"], b"context")
        self.assert_usage_error(["-m", m, "-p", "512", "-n", "0", "-r", "1", "--bw-mib", "8"], b"context")
        self.assert_usage_error(["-m", m, "-p", "0", "-n", "512", "-r", "1", "--bw-mib", "8"], b"context")
        self.assert_usage_error(["-m", m, "-p", "0", "-n", "511", "-r", "1", "--bw-mib", "8"], b"context")

    def test_longest_fitting_tests(self):
        # The longest pp and tg that fit test-llama's 512 positions, through the engine's length checks.
        objs = self.bench_json(self.q8, ["-t", "1", "-p", "511", "-n", "510", "-b", "200", "--no-warmup"])
        self.assertEqual([o["test"] for o in objs], ["pp511", "tg510"])
        self.assertEqual(objs[0]["n_batch"], 200)

    def test_missing_model(self):
        r = run_pith(["bench", "-m", os.path.join(tmp_dir(), "no-such-model.gguf"), "-r", "1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"no-such-model.gguf", r.stderr)

    def test_help(self):
        r = run_pith(["bench", "--help"])
        self.assertEqual(r.returncode, 0)
        for opt in [b"-m", b"-t", b"-p", b"-n", b"-r", b"-b", b"--json", b"--bw-mib"]:
            self.assertIn(opt, r.stdout)
        r = run_pith(["--help"])
        self.assertIn(b"bench", r.stdout)


if __name__ == "__main__":
    main()
