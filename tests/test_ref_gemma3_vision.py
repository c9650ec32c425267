"""Gemma 3 with images in the prompt: the whole model's logits against the float64 reference.

The text model is tools/mkmodel.py's test-gemma3 (7 layers, five sliding layers of window 16 and one
global, GQA, QK norms, the embedding scale sqrt(256)); the vision encoder is a small SigLIP with the Gemma
3 projector written as llama.cpp's converter writes it (tests/test_ref_siglip.py, whose float64 encoder
reference gives the image rows here: 112-pixel images, 8 x 8 patches pooled by 2 to 16 tokens of the text
model's width 256). The reference (tools/reference.py forward) follows transformers' Gemma3Model: the
image features replace the image tokens' scaled embeddings (masked_scatter, unscaled), and the attention
mask is the causal (or sliding-window) one OR'd with the image blocks (token_type_ids_mask_function), so
an image's tokens see one another.

tool_image_logits runs the model API with batch.h's embed_rows and attend_last, every position's logits
compared (tolerance "float" of test_reference_models: 1e-4 absolute, F32 weights and cache), on prompts
with two images among 60-odd text tokens (longer than the window), in one chunk and in chunks of 5 (a
chunk never ends inside an image: it runs on to the image's end), alone and two sequences batched with
different images, and with the portable kernels (PITH_FORCE_SCALAR: the other attention path). The look-ahead is checked to matter: the reference with causal image attention is
far from pith (more than 100x the tolerance), as are logits without the image rows.

Environment: PITH_IMAGE_LOGITS (the tool), PITH_TEST_TMP. Exit 77 (skip) without torch or numpy."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import pithtest  # noqa: E402

try:
    import numpy as np
    import torch  # noqa: F401
except ImportError:
    pithtest.skip("torch or numpy is missing (Debian: python3-torch python3-numpy)")
import mkmodel  # noqa: E402
import reference  # noqa: E402
import test_ref_siglip as S  # noqa: E402

TOL = 1e-4
IMAGE = 112
VISION = dict(S.SO400M, dim=64, ffn=96, heads=4, out_dim=256, pool=2)
TPI = (IMAGE // VISION["patch"] // VISION["pool"]) ** 2    # 16 tokens per image


def expand(seq):
    """-1 -> an image of TPI tokens: (positions of each image, spans)."""
    spans, p = [], 0
    for t in seq:
        if t < 0:
            spans.append((p, p + TPI))
            p += TPI
        else:
            p += 1
    return p, spans


class Gemma3Vision(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tool = os.environ.get("PITH_IMAGE_LOGITS")
        if not tool or not os.path.exists(tool):
            pithtest.skip("PITH_IMAGE_LOGITS is not set (run through ctest)")
        cls.tool = tool
        cls.tmp = os.path.join(pithtest.tmp_dir(), "ref_gemma3_vision")
        os.makedirs(cls.tmp, exist_ok=True)
        cfg = mkmodel.build_config("test-gemma3")
        cls.model = os.path.join(cls.tmp, "test-gemma3-F32.gguf")
        mkmodel.write_gguf(cfg, cls.model, "F32", seed=4100)
        cls.ref = reference.Model(cls.model)
        cls.mmproj = os.path.join(cls.tmp, "mmproj.gguf")
        w = S.make_weights(VISION, 2, IMAGE, seed=4101)
        cls.vw = S.write_mmproj(cls.mmproj, VISION, w, IMAGE, pool=VISION["pool"])
        # the same text model and vision tower as one Gemma3ForConditionalGeneration directory
        cls.hf = S.write_hf_multimodal(os.path.join(cls.tmp, "hf"), cfg, VISION, w, IMAGE, VISION["pool"], 4100)
        cls.pixels = S.random_pixels(np.random.default_rng(4102), 4, IMAGE)
        cls.features = [S.reference(cls.vw, IMAGE, VISION, cls.pixels[i]) for i in range(4)]
        rng = np.random.default_rng(4103)
        text = lambda n: [int(t) for t in rng.integers(3, cfg.vocab, size=n)]  # noqa: E731
        cls.seqs = [[2] + text(9) + [-1] + text(30) + [-1] + text(20),
                    [2] + text(25) + [-1] + text(3) + [-1] + text(12)]

    def pith(self, seqs, images, chunk, scalar=False):
        pin, out = os.path.join(self.tmp, "px.f32"), os.path.join(self.tmp, "logits.f32")
        np.asarray(self.pixels[images], dtype=np.float32).tofile(pin)
        env = dict(os.environ, PITH_FORCE_SCALAR="1") if scalar else None
        r = subprocess.run([self.tool, self.model, self.mmproj, pin, str(chunk), out] +
                           [",".join(map(str, s)) for s in seqs], capture_output=True, text=True, timeout=600,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(-1, self.ref.n_vocab)
        res, at = [], 0
        for s in seqs:
            n, _ = expand(s)
            res.append(got[at:at + n])
            at += n
        return res

    def expected(self, seq, images, causal_images=False, drop_images=False):
        n, spans = expand(seq)
        tokens, embeds, k, p = [], {}, 0, 0
        for t in seq:
            if t < 0:
                for i in range(TPI):
                    tokens.append(0)
                    if not drop_images:
                        embeds[p + i] = self.features[images[k]][i]
                k, p = k + 1, p + TPI
            else:
                tokens.append(t)
                p += 1
        return reference.forward(self.ref, tokens, embeds=embeds, spans=() if causal_images else spans).numpy()

    def check(self, got, want, what):
        err = np.abs(got - want).max()
        print(f"{what}: max |error| {err:.2e} over {got.shape[0]} positions (tolerance {TOL:g})")
        self.assertLess(err, TOL, what)

    def test_alone_one_chunk_and_many(self):
        want = self.expected(self.seqs[0], [0, 1])
        for chunk in (1000, 5):
            self.check(self.pith(self.seqs[:1], [0, 1], chunk)[0], want, f"one sequence, two images, chunk {chunk}")
        # the portable kernels take the other attention path (attention.c; the AVX-512 one is attention_tiled.c)
        self.check(self.pith(self.seqs[:1], [0, 1], 5, scalar=True)[0], want, "PITH_FORCE_SCALAR, chunk 5")
        got = self.pith(self.seqs[:1], [0, 1], 1000)[0]
        for what, other in (("causal image attention", self.expected(self.seqs[0], [0, 1], causal_images=True)),
                            ("no image rows", self.expected(self.seqs[0], [0, 1], drop_images=True))):
            moved = np.abs(got - other).max()
            print(f"against the reference with {what}: {moved:.3g}")
            self.assertGreater(moved, 100 * TOL, f"{what} must change the logits")

    def test_batched(self):
        got = self.pith(self.seqs, [0, 1, 2, 3], 7)
        self.check(got[0], self.expected(self.seqs[0], [0, 1]), "batched, sequence 0 (images 0, 1), chunk 7")
        self.check(got[1], self.expected(self.seqs[1], [2, 3]), "batched, sequence 1 (images 2, 3), chunk 7")

    def engine(self, seqs, images, batch, blocks, hf=False):
        pin, out = os.path.join(self.tmp, "px.f32"), os.path.join(self.tmp, "rows.f32")
        np.asarray(self.pixels[images], dtype=np.float32).tofile(pin)
        model, mmproj = (self.hf, self.hf) if hf else (self.model, self.mmproj)
        r = subprocess.run([self.tool, model, mmproj, pin, f"engine:{batch}:{blocks}", out] +
                           [",".join(map(str, s)) for s in seqs], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(2, len(seqs), self.ref.n_vocab)
        words = [line.split() for line in r.stdout.splitlines()]
        cached = {int(w[1]): int(w[2]) for w in words if w[0] == "cached"}
        stats = [w for w in words if w[0] == "encoded"][0]
        return rows, cached, int(stats[1])

    def test_engine(self):
        """The engine's media spans: both requests at once, the encoder inside the step, batches of TPI + 3
        tokens (a chunk that would cut an image ends before it), then both again from the prefix cache."""
        self.engine_case(False)

    def test_engine_hf_directory(self):
        """The same with the text model and the vision tower both read from one Gemma3ForConditionalGeneration
        directory (transformers' names, the norms as w rather than 1 + w)."""
        self.engine_case(True)

    def engine_case(self, hf):
        want = [self.expected(self.seqs[0], [0, 1])[-1], self.expected(self.seqs[1], [2, 3])[-1]]
        rows, cached, encoded = self.engine(self.seqs, [0, 1, 2, 3], TPI + 3, 0, hf)
        src = "Hugging Face directory" if hf else "GGUF + mmproj"
        for turn in (0, 1):
            for s in (0, 1):
                self.check(rows[turn][s][None], want[s][None],
                           f"engine ({src}), turn {turn + 1}, request {s}: last prompt row")
        self.assertEqual(encoded, 4, "each image is encoded once")
        for s in (0, 1):
            n, spans = expand(self.seqs[s])
            # the hit covers every full block but the last prompt token's, past both images
            self.assertGreaterEqual(cached[s], (n - 1) // 16 * 16, f"second turn of request {s}: {cached[s]} cached")
            self.assertGreater(cached[s], spans[-1][1] - 16)

    def test_cli_hf_directory(self):
        """pith run -m DIR --image: a model directory with its vision tower needs no --mmproj, and gives the
        logits of the same weights as GGUF + projector GGUF (the tokenizer, with Gemma 3's image tokens,
        from a GGUF: the test directory has none). F32 K/V, as everywhere here: F16's rounding of K and V would
        turn the last bits the two files differ in (1 + w of the soft norm, rounded once or twice) into 1e-4."""
        exe = os.environ.get("PITH_BIN")
        if not exe or not os.path.exists(exe):
            self.skipTest("PITH_BIN is not set (run through ctest)")
        try:
            from PIL import Image
        except ImportError:
            self.skipTest("PIL is missing (Debian: python3-pil)")
        tok = os.path.join(self.tmp, "tok-image.gguf")
        mkmodel.write_gguf(mkmodel.build_config("test-gemma3", image_tokens=True), tok, "F32", seed=1)
        png = os.path.join(self.tmp, "cli.png")
        Image.fromarray(np.random.default_rng(4104).integers(0, 256, (60, 80, 3)).astype(np.uint8)).save(png)
        rows = {}
        for what, args in (("directory", ["-m", self.hf]), ("GGUF + mmproj", ["-m", self.model, "--mmproj", self.mmproj])):
            out = os.path.join(self.tmp, "cli-logits.f32")
            r = subprocess.run([exe, "run", *args, "--tokenizer", tok, "--image", png, "-p", "Look: <start_of_image> now",
                                "-n", "4", "--temp", "0", "-t", "2", "--kv-f32", "--logits-out", out],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows[what] = np.fromfile(out, dtype=np.float32).astype(np.float64)
        self.assertEqual(rows["directory"].size, 4 * self.ref.n_vocab)
        err = np.abs(rows["directory"] - rows["GGUF + mmproj"]).max()
        print(f"pith run --image: directory against GGUF + mmproj, max |error| {err:.2e} (tolerance {TOL:g})")
        self.assertLess(err, TOL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
