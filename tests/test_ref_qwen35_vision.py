"""Qwen3.5 with images in the prompt: the whole model through the engine against the float64 reference.

The model is one Qwen3_5ForConditionalGeneration directory: tools/mkmodel.py's test-qwen35 text model
(8 layers, DeltaNet and gated attention, partial rotary of 16 dimensions with M-RoPE sections 3, 3, 2) and
a small Qwen3-VL tower (tests/test_ref_qwen3vl_vision.py, whose float64 reference gives the image rows).
The reference (tools/reference.py qwen35_forward) follows transformers' Qwen3_5Model: the image features
replace the image tokens' embeddings (masked_scatter), and the positions are get_rope_index's, transcribed
below from modeling_qwen3_vl.py (an image's tokens at (start, start + row, start + column); the text after
it continues from the largest + 1), turned by Qwen3VLTextRotaryEmbedding's interleaved M-RoPE
(reference.mrope_partial). The attention stays causal over the token order.

tools' tool_mrope_logits runs the real engine: requests with pith_media spans carrying their grids, the
encoder inside the steps, the engine's M-RoPE positions (batch.h: rope_pos) for the prompt, its chunks
and the generated tokens. Each request's greedy rows (the last prompt row and the row after each
generated token) are compared, tolerance 1e-4 absolute (F32 weights and K/V: float32 sums against
float64 give errors of some 1e-6):
- two requests with three images of different shapes (2 x 3, 3 x 2 and 3 x 3 tokens), at once, the
  whole prompt in one step; then both again as a second turn from the prefix cache;
- chunks of 5 tokens, which cut through the images (Qwen's image tokens are causal, so spans may be cut);
- a KV pool so small that a request is preempted and recomputed;
- the M-RoPE positions are checked to matter: plain positions move the reference far from Pith (more
  than 100x the tolerance), and so do logits without the image rows.

Qwen3-VL runs the same engine cases (Qwen3VLVision): tools/mkmodel.py's test-qwen3 with 4 layers as a
Qwen3VLForConditionalGeneration (M-RoPE over the whole head, sections 12, 10, 10) and a tower with
DeepStack mergers after blocks 0 and 1, whose parts join the image tokens after text layers 0 and 1
(the reference: forward's deepstack, as Qwen3VLTextModel._deepstack_process). Measured: 3.7e-6 and 2.0e-6
in every case; without DeepStack the reference is 1.9 away, with plain positions 2.0. test_gguf runs the
same weights from a qwen3vl text GGUF beside a qwen3vl_merger projector (llama.cpp's layout).

The MoE classes, each from a directory laid out as the released checkpoints (experts fused), the reference
applying the fused tensors as transformers' classes do: Qwen3VLMoeVision (Qwen3VLVision's cases, GGUF
arch qwen3vlmoe included, over test-qwen3moe: gate_up_proj [E, H, 2F] as Qwen3VLMoeTextExperts holds it)
2.4e-5 and 4.5e-6; Qwen35MoeVision (test-qwen35moe as Qwen3_5MoeForConditionalGeneration, gate_up_proj
[E, 2F, H], transformers 5's layout) 1.0e-5 and 3.5e-5.

Environment: PITH_MROPE_LOGITS (the tool), PITH_TEST_TMP. Exit 77 (skip) without torch or numpy."""

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
import test_ref_qwen3vl_vision as V  # noqa: E402

TOL = 1e-4
N_GEN = 4
CFG = V.SMALL                      # out_dim 128: test-qwen35's width
SIZES = [(64, 96), (96, 64), (96, 96)]


def grid(k):
    h, w = SIZES[k]
    return h // 32, w // 32


def expand(seq):
    """-k -> image k's tokens: (the ids, with 0 for image tokens, and the spans (start, image index))."""
    ids, spans = [], []
    for t in seq:
        if t < 0:
            r, c = grid(-t - 1)
            spans.append((len(ids), -t - 1))
            ids += [0] * (r * c)
        else:
            ids.append(t)
    return ids, spans


def rope_index(n, spans):
    """transformers' Qwen3VLModel.get_rope_index for one sequence of n tokens (the generated ones
    included) with its images at spans: [n, 3] (temporal, height, width)."""
    pos, st, last = [], 0, -1
    for start, k in spans:
        r, c = grid(k)
        text_len = start - st
        st_idx = last + 1
        pos += [[st_idx + i] * 3 for i in range(text_len)]
        base = st_idx + text_len
        pos += [[base, base + i // c, base + i % c] for i in range(r * c)]
        last = max(max(p) for p in pos)
        st = start + r * c
    st_idx = last + 1
    pos += [[st_idx + i] * 3 for i in range(n - st)]
    return np.array(pos)


class Qwen35Vision(unittest.TestCase):
    # each class: its directory under PITH_TEST_TMP, its seeds (text model, tower + 1, images and prompts
    # + 2), the tower's DeepStack blocks, and the directory's writer
    NAME, SEED, DEEPSTACK = "ref_qwen35_vision", 4200, ()

    @classmethod
    def write(cls, out_dir, w):
        return V.write_hf(out_dir, CFG, w, seed=cls.SEED)

    @classmethod
    def setUpClass(cls):
        tool = os.environ.get("PITH_MROPE_LOGITS")
        if not tool or not os.path.exists(tool):
            pithtest.skip("PITH_MROPE_LOGITS is not set (run through ctest)")
        cls.tool = tool
        # the weights as the F32 files hold them
        w = V.as_f32(V.make_weights(CFG, 2, seed=cls.SEED + 1, deepstack=cls.DEEPSTACK))
        cls.build(cls.NAME, w, lambda d: cls.write(d, w), seed=cls.SEED + 2)

    @classmethod
    def build(cls, name, w, write, seed):
        """The model directory (write), the reference, the images, their reference rows and the prompts."""
        cls.tmp = os.path.join(pithtest.tmp_dir(), name)
        os.makedirs(cls.tmp, exist_ok=True)
        cls.w = w
        cls.hf = write(os.path.join(cls.tmp, "hf"))
        cls.ref = reference.Model(cls.hf)
        rng = np.random.default_rng(seed)
        cls.images = [V.random_image(rng, h, wd) for h, wd in SIZES]
        cls.features = [V.reference(CFG, w, im) for im in cls.images]
        text = lambda n: [int(t) for t in rng.integers(3, 500, size=n)]  # noqa: E731
        bos = mkmodel.BOS_ID
        cls.seqs = [[bos] + text(5) + [-1] + text(7) + [-3] + text(10),
                    [bos] + text(20) + [-2] + text(4)]
        cls.pixels = os.path.join(cls.tmp, "px.f32")
        np.concatenate([np.asarray(im, dtype=np.float32).ravel() for im in cls.images]).tofile(cls.pixels)

    def run_engine(self, mode, model=None, projector=None):
        out = os.path.join(self.tmp, "rows.f32")
        sizes = ",".join(f"{h}x{w}" for h, w in SIZES)
        r = subprocess.run([self.tool, model or self.hf, projector or self.hf, self.pixels, sizes, mode, str(N_GEN), out] +
                           [",".join(map(str, s)) for s in self.seqs], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        V_ = self.ref.n_vocab
        rows = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(2, len(self.seqs), N_GEN, V_)
        words = [line.split() for line in r.stdout.splitlines()]
        toks = {(int(x[1]), int(x[2])): [int(t) for t in x[3:]] for x in words if x[0] == "tokens"}
        cached = {int(x[1]): int(x[2]) for x in words if x[0] == "cached"}
        stats = [x for x in words if x[0] == "encoded"][0]
        return rows, toks, cached, int(stats[1]), int(stats[3])

    def expected(self, s, gen, plain=False, drop_images=False, no_deepstack=False):
        ids, spans = expand(self.seqs[s])
        n_prompt = len(ids)
        tokens = ids + gen[:-1]
        D = CFG["out_dim"]
        parts = self.features[0].shape[1] // D
        embeds, deep = {}, [dict() for _ in range(parts - 1)]
        if not drop_images:
            for start, k in spans:
                for i, row in enumerate(self.features[k]):
                    embeds[start + i] = row[:D]
                    for j in range(parts - 1):   # DeepStack (Qwen3-VL): part j + 1 after layer j
                        deep[j][start + i] = row[(j + 1) * D:(j + 2) * D]
        mrope = None if plain else rope_index(len(tokens), spans)
        logits = reference.forward(self.ref, tokens, embeds=embeds, mrope=mrope,
                                   deepstack=None if no_deepstack else deep).numpy()
        return logits[n_prompt - 1:]

    def check(self, got, want, what):
        err = np.abs(got - want).max()
        print(f"{what}: max |error| {err:.2e} over {got.shape[0]} rows (tolerance {TOL:g})")
        self.assertLess(err, TOL, what)

    def engine_case(self, mode, what, model=None, projector=None):
        rows, toks, cached, encoded, preempted = self.run_engine(mode, model, projector)
        for s in range(len(self.seqs)):
            self.assertEqual(toks[(0, s)], toks[(1, s)], f"{what}: the second turn generates the same tokens")
            want = self.expected(s, toks[(0, s)])
            for turn in (0, 1):
                self.check(rows[turn][s], want, f"{what}, turn {turn + 1}, request {s}")
        self.assertEqual(encoded, 3, "each image is encoded once")
        return rows, toks, cached, preempted

    def test_whole_prompt_and_second_turn(self):
        rows, toks, cached, _ = self.engine_case("512:0", "one step")
        for s in range(len(self.seqs)):
            ids, _ = expand(self.seqs[s])
            self.assertGreaterEqual(cached[s], (len(ids) - 1) // 16 * 16, f"second turn of request {s}: cached")
        # the features are checked to matter
        got = rows[0][0]
        for what, other in (("plain positions", self.expected(0, toks[(0, 0)], plain=True)),
                            ("no image rows", self.expected(0, toks[(0, 0)], drop_images=True))):
            moved = np.abs(got - other).max()
            print(f"against the reference with {what}: {moved:.3g}")
            self.assertGreater(moved, 100 * TOL, f"{what} must change the logits")

    def test_chunks_cut_images(self):
        self.engine_case("5:0", "chunks of 5")

    def test_preempted(self):
        # 5 blocks of 16 for two requests of 38 and 31 tokens (+ 4 generated): one must give way
        _, _, _, preempted = self.engine_case("512:5", "a pool of 5 blocks")
        self.assertGreater(preempted, 0, "the small pool preempts a request")

    def smart_size(self, h, w, factor=32, min_pixels=1024, max_pixels=65536):
        """transformers' smart_resize (qwen2_vl image processing), with the test directory's budget."""
        import math
        hb, wb = round(h / factor) * factor, round(w / factor) * factor
        if hb * wb > max_pixels:
            beta = math.sqrt(h * w / max_pixels)
            hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
        elif hb * wb < min_pixels:
            beta = math.sqrt(min_pixels / (h * w))
            hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
        return hb, wb

    def cli_setup(self):
        """(the pith binary, PIL's Image, a GGUF tokenizer with Qwen-VL's image tokens), or a skip."""
        exe = os.environ.get("PITH_BIN")
        if not exe or not os.path.exists(exe):
            self.skipTest("PITH_BIN is not set (run through ctest)")
        try:
            from PIL import Image
        except ImportError:
            self.skipTest("PIL is missing (Debian: python3-pil)")
        tok = os.path.join(self.tmp, "tok-qwen.gguf")
        mkmodel.write_gguf(mkmodel.build_config("test-qwen35", image_tokens="qwen"), tok, "F32", seed=1)
        return exe, Image, tok

    def test_cli_and_server(self):
        """pith run -m DIR --image (the directory carries its vision tower) against the reference, with the
        image prepared as Qwen2VLImageProcessor does with Pillow (smart_resize to 96 x 128, bicubic,
        normalized); then pith serve -m DIR takes the same image in a chat message."""
        exe, Image, tok = self.cli_setup()
        rng = np.random.default_rng(4203)
        yy, xx = np.mgrid[0:100, 0:140]
        arr = np.stack([xx * 255 // 139, yy * 255 // 99, (3 * xx + yy) % 256], -1) + rng.integers(-30, 31, (100, 140, 3))
        png = os.path.join(self.tmp, "cli.png")
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(png)
        hb, wb = self.smart_size(100, 140)
        self.assertEqual((hb, wb), (96, 128))
        im = Image.open(png).convert("RGB").resize((wb, hb), Image.BICUBIC)
        px = ((np.asarray(im, dtype=np.float64) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)
        w = V.make_weights(CFG, 2, seed=4201)
        w = V.as_f32(w)
        feats = V.reference(CFG, w, px)
        rows_n, cols_n = hb // 32, wb // 32
        prompt = "Look: <|vision_start|><|image_pad|><|vision_end|> now"
        out = os.path.join(self.tmp, "cli-logits.f32")
        r = subprocess.run([exe, "run", "-m", self.hf, "--tokenizer", tok, "--image", png, "-p", prompt, "-n", str(N_GEN),
                            "--temp", "0", "-t", "2", "--kv-f32", "--logits-out", out], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(N_GEN, self.ref.n_vocab)
        expanded = prompt.replace("<|image_pad|>", "<|image_pad|>" * (rows_n * cols_n))
        t = subprocess.run([exe, "tokenize", "-m", tok], input=expanded, capture_output=True, text=True, timeout=60)
        self.assertEqual(t.returncode, 0, t.stderr)
        ids = [int(x) for x in t.stdout.split()]
        t = subprocess.run([exe, "tokenize", "-m", tok, "--no-bos"], input="<|image_pad|>", capture_output=True,
                           text=True, timeout=60)
        pad = int(t.stdout.split()[0])
        start = ids.index(pad)
        self.assertEqual(ids.count(pad), rows_n * cols_n)
        gen = [int(np.argmax(row)) for row in got]
        tokens = ids + gen[:-1]
        embeds = {start + i: row for i, row in enumerate(feats)}
        pos = []
        for i in range(len(tokens)):      # get_rope_index for one image at start
            if i < start:
                pos.append([i] * 3)
            elif i < start + rows_n * cols_n:
                k = i - start
                pos.append([start, start + k // cols_n, start + k % cols_n])
            else:
                pos.append([i - rows_n * cols_n + max(rows_n, cols_n)] * 3)
        want = reference.forward(self.ref, tokens, embeds=embeds, mrope=np.array(pos)).numpy()[len(ids) - 1:]
        self.check(got, want, "pith run -m DIR --image (Pillow's preprocessing in the reference)")
        import base64
        with open(png, "rb") as fh:
            url = "data:image/png;base64," + base64.b64encode(fh.read()).decode()
        with pithtest.Server(["-m", self.hf, "--tokenizer", tok, "-t", "2"]) as srv:
            body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                              {"type": "text", "text": "What is this?"}]}],
                    "max_tokens": 2, "temperature": 0}
            status, reply = srv.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, reply)
            text_only = {"messages": [{"role": "user", "content": "What is this?"}], "max_tokens": 2, "temperature": 0}
            status2, reply2 = srv.post("/v1/chat/completions", text_only)
            self.assertEqual(status2, 200, reply2)
            added = reply["usage"]["prompt_tokens"] - reply2["usage"]["prompt_tokens"]
            print(f"pith serve: the image adds {added} prompt tokens (its {rows_n * cols_n} and the vision markers)")
            self.assertGreaterEqual(added, rows_n * cols_n)
            self.assertEqual(srv.close(), 0)
        # pith bench's image mode on a tower of any size: the synthetic 640 x 480 image is smart-resized
        # within the directory's budget (at most 65536 pixels: 192 x 288, 6 x 9 tokens)
        import json
        r = subprocess.run([exe, "bench", "-m", self.hf, "--mmproj", self.hf, "-r", "1", "-t", "2", "--json"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        tests = {row["test"]: row for row in (json.loads(x) for x in r.stdout.splitlines() if x.startswith("{"))}
        self.assertEqual(set(tests), {"image-encode", "image-prefill"})
        enc, pre = tests["image-encode"], tests["image-prefill"]
        print(f"pith bench: a {enc['width']}x{enc['height']} image, {enc['tokens']} tokens, {enc['ms_mean']:.1f} ms")
        self.assertEqual((enc["width"], enc["height"], enc["tokens"]), (288, 192, 54))
        self.assertEqual(pre["image_tokens"], 54)
        self.assertTrue(enc["ms_mean"] > 0 and 0 < enc["of_peak"] < 1.5 and pre["tok_s_mean"] > 0)

    def test_image_budgets(self):
        """--image-max-tokens caps each image as the processor's max_pixels would (smart_resize within the
        cap's pixels): the 100 x 140 image is 3 x 4 tokens within the directory's budget, 1 x 2 under a cap
        of 4 (smart_resize to 32 x 64), in pith run and pith serve alike. A request whose images take the
        context (six of 12 tokens in 72) is refused with context_length_exceeded before more are prepared."""
        import base64
        import re
        exe, Image, tok = self.cli_setup()
        png = os.path.join(self.tmp, "budget.png")
        Image.fromarray(np.random.default_rng(4204).integers(0, 256, (100, 140, 3)).astype(np.uint8)).save(png)
        self.assertEqual(self.smart_size(100, 140), (96, 128))
        self.assertEqual(self.smart_size(100, 140, max_pixels=4 * 32 * 32), (32, 64))

        def run_prompt_tokens(*extra):
            r = subprocess.run([exe, "run", "-m", self.hf, "--tokenizer", tok, "--image", png, "-p", "x", "-n", "1",
                                "-t", "2", *extra], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            return int(re.search(r"prompt (\d+) tokens", r.stderr).group(1))
        full, capped = run_prompt_tokens(), run_prompt_tokens("--image-max-tokens", "4")
        self.assertEqual(full - capped, 12 - 2, "pith run: the cap's image is 2 tokens, the full one 12")
        self.assertEqual(run_prompt_tokens("--image-max-tokens", "0"), full, "0: the processor's budget")

        with open(png, "rb") as fh:
            part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(fh.read()).decode()}}
        body = {"messages": [{"role": "user", "content": [part, {"type": "text", "text": "x"}]}], "max_tokens": 1}
        with pithtest.Server(["-m", self.hf, "--tokenizer", tok, "-t", "2", "--image-max-tokens", "4"]) as srv:
            status, capped_reply = srv.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, capped_reply)
            self.assertEqual(srv.close(), 0)
        with pithtest.Server(["-m", self.hf, "--tokenizer", tok, "-t", "2", "-c", "72"]) as srv:
            status, full_reply = srv.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, full_reply)
            self.assertEqual(full_reply["usage"]["prompt_tokens"] - capped_reply["usage"]["prompt_tokens"], 10)
            six = {"messages": [{"role": "user", "content": [part] * 6}], "max_tokens": 1}
            status, reply = srv.post("/v1/chat/completions", six)
            print(f"six images of 12 tokens in a context of 72: {status} {reply}")
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["code"], "context_length_exceeded")
            self.assertIn("messages[0].content[5]", reply["error"]["message"])
            status, reply = srv.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, "the server stays healthy")
            self.assertEqual(srv.close(), 0)
        r = subprocess.run([exe, "serve", "-m", self.hf, "--image-max-tokens", "-1"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--image-max-tokens", r.stderr)


def fuse_experts(tensors, halves):
    """Each layer's per-expert ...mlp.experts.E.{gate,up,down}_proj.weight ([F, H], [F, H], [H, F]) fused as
    the released checkpoints hold them. halves (Qwen3VLMoeTextExperts, applied as x @ W): gate_up_proj
    [E, H, 2F] = [gate^T | up^T], down_proj [E, F, H] = down^T. Otherwise (Qwen3.5-MoE, transformers 5's
    layout): gate_up_proj [E, 2F, H], gate rows then up rows, and down_proj [E, H, F]."""
    import re
    out, per = {}, {}
    for k, v in tensors.items():
        m = re.match(r"(.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            per.setdefault(m.group(1), {}).setdefault(m.group(3), {})[int(m.group(2))] = v
        else:
            out[k] = v
    assert per, "no per-expert tensors to fuse"
    for prefix, kinds in per.items():
        g, u, d = (np.stack([kinds[kind][e] for e in range(len(kinds[kind]))]) for kind in ("gate", "up", "down"))
        gate_up = np.concatenate([g, u], axis=1)
        out[prefix + "gate_up_proj"] = np.ascontiguousarray(gate_up.transpose(0, 2, 1)) if halves else gate_up
        out[prefix + "down_proj"] = np.ascontiguousarray(d.transpose(0, 2, 1)) if halves else d
    return out


def write_qwen3vl(out_dir, w, seed, preset="test-qwen3"):
    """A Qwen3VLForConditionalGeneration directory: tools/mkmodel.py's test-qwen3 with 4 layers (width 128,
    heads of 64: M-RoPE sections 12, 10, 10 of its 32 rotated pairs) under model.language_model., and the
    tower w (with its DeepStack mergers) under model.visual. preset test-qwen3moe: a
    Qwen3VLMoeForConditionalGeneration, its experts fused as Qwen3VLMoeTextExperts holds them."""
    import json
    import test_ref_siglip as S
    moe = preset == "test-qwen3moe"
    tcfg = mkmodel.build_config(preset, layers=4, dim=CFG["out_dim"])
    mkmodel.write_safetensors(tcfg, out_dir + ".text", "F32", seed=seed)
    tensors = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in S.read_safetensors(os.path.join(out_dir + ".text", "model.safetensors")).items()}
    if moe:
        tensors = fuse_experts(tensors, halves=True)
    with open(os.path.join(out_dir + ".text", "config.json")) as fh:
        text = json.load(fh)
    for k in ("architectures", "torch_dtype"):
        text.pop(k, None)
    text.update(model_type="qwen3_vl_moe_text" if moe else "qwen3_vl_text",
                rope_scaling={"rope_type": "default", "mrope_section": [12, 10, 10], "mrope_interleaved": True})
    top = {"architectures": ["Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"],
           "model_type": "qwen3_vl_moe" if moe else "qwen3_vl", "text_config": text,
           "tie_word_embeddings": text.get("tie_word_embeddings", False)}
    return V.write_hf(out_dir, CFG, w, text=(tensors, top))


def write_qwen35moe(out_dir, w, seed):
    """A Qwen3_5MoeForConditionalGeneration directory as released: tools/mkmodel.py's test-qwen35moe (8
    experts of 64, 2 per token, a shared expert) with its experts fused (gate_up_proj [E, 2F, H]), and the
    tower w."""
    import json
    import test_ref_siglip as S
    tcfg = mkmodel.build_config("test-qwen35moe", hf_type="multimodal", dim=CFG["out_dim"])
    mkmodel.write_safetensors(tcfg, out_dir + ".text", "F32", seed=seed)
    tensors = fuse_experts({k: v for k, v in S.read_safetensors(os.path.join(out_dir + ".text", "model.safetensors")).items()
                            if not k.startswith("model.visual.")}, halves=False)
    with open(os.path.join(out_dir + ".text", "config.json")) as fh:
        top = json.load(fh)
    return V.write_hf(out_dir, CFG, w, text=(tensors, top))


class Qwen3VLVision(Qwen35Vision):
    """Qwen3-VL: the same engine cases with a Qwen3 text model (M-RoPE over its whole head) and DeepStack
    (mergers after vision blocks 0 and 1, their parts joining the image tokens after text layers 0 and
    1). The reference adds them as Qwen3VLTextModel._deepstack_process does. test_gguf: the same weights
    as llama.cpp's files hold them."""
    PRESET, ARCH, NAME, SEED, DEEPSTACK = "test-qwen3", "qwen3vl", "ref_qwen3vl_model", 4300, (0, 1)

    @classmethod
    def write(cls, out_dir, w):
        return write_qwen3vl(out_dir, w, seed=cls.SEED, preset=cls.PRESET)

    def test_bench(self):
        """pith bench's image mode with DeepStack: each of the image's rows is 1 + 2 parts wide (a bench that
        kept room for one part wrote past its buffer)."""
        import json
        exe = os.environ.get("PITH_BIN")
        if not exe or not os.path.exists(exe):
            self.skipTest("PITH_BIN is not set (run through ctest)")
        r = subprocess.run([exe, "bench", "-m", self.hf, "--mmproj", self.hf, "-r", "1", "-t", "2", "--json"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        tests = {row["test"]: row for row in (json.loads(x) for x in r.stdout.splitlines() if x.startswith("{"))}
        self.assertEqual((tests["image-encode"]["tokens"], tests["image-prefill"]["image_tokens"]), (54, 54))

    def test_gguf(self):
        """llama.cpp's layout of the same weights: the text model a GGUF of arch qwen3vl (qwen3vlmoe), with
        {arch}.rope.dimension_sections (four entries, as its converter writes them) and
        {arch}.n_deepstack_layers, beside a qwen3vl_merger projector with its DeepStack mergers."""
        cfg = mkmodel.build_config(self.PRESET, layers=4, dim=CFG["out_dim"])
        src, model = os.path.join(self.tmp, "text.gguf"), os.path.join(self.tmp, self.ARCH + ".gguf")
        mkmodel.write_gguf(cfg, src, "F32", seed=self.SEED)
        G = mkmodel.G
        G.rewrite(src, model, key=lambda k: self.ARCH + k[len(cfg.arch):] if k.startswith(cfg.arch + ".") else k,
                  meta={"general.architecture": (G.STRING, self.ARCH),
                        f"{self.ARCH}.rope.dimension_sections": (G.ARRAY, [12, 10, 10, 0], G.INT32),
                        f"{self.ARCH}.n_deepstack_layers": (G.UINT32, 2)})
        projector = os.path.join(self.tmp, "mmproj.gguf")
        V.write_mmproj(projector, CFG, self.w)
        self.engine_case("5:0", "GGUF, chunks of 5", model=model, projector=projector)

    def test_whole_prompt_and_second_turn(self):
        super().test_whole_prompt_and_second_turn()
        rows, toks, _, _, _ = self.run_engine("512:0")
        other = self.expected(0, toks[(0, 0)], no_deepstack=True)
        moved = np.abs(rows[0][0] - other).max()
        print(f"against the reference without DeepStack: {moved:.3g}")
        self.assertGreater(moved, 100 * TOL, "DeepStack must change the logits")

    test_cli_and_server = test_image_budgets = None  # the CLI and server path is Qwen3.5's, tested there


class Qwen3VLMoeVision(Qwen3VLVision):
    """Qwen3-VL-MoE: Qwen3VLVision's cases over test-qwen3moe's layers (8 experts of 64, 2 per token),
    its experts fused as the released checkpoints hold them (Qwen3VLMoeTextExperts: gate_up_proj
    [E, H, 2F], gate the first F columns), which the reference applies as that class does; test_gguf
    with GGUF's 3-D expert tensors (arch qwen3vlmoe)."""
    PRESET, ARCH, NAME, SEED = "test-qwen3moe", "qwen3vlmoe", "ref_qwen3vlmoe_model", 4500


class Qwen35MoeVision(Qwen35Vision):
    """Qwen3.5-MoE as released: Qwen35Vision's cases over test-qwen35moe, its experts fused
    (gate_up_proj [E, 2F, H], down_proj [E, H, F]; the reference applies them as transformers 5's
    Qwen3_5MoeExperts does)."""
    NAME, SEED = "ref_qwen35moe_vision", 4600

    @classmethod
    def write(cls, out_dir, w):
        return write_qwen35moe(out_dir, w, seed=cls.SEED)

    test_cli_and_server = test_image_budgets = None  # the CLI and server path is Qwen3.5's, tested there


if __name__ == "__main__":
    unittest.main(verbosity=2)
