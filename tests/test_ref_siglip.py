"""Gemma 3's vision encoder (src/model/vision.c) against a float64 torch reference written from
transformers' models/siglip/modeling_siglip.py (SiglipVisionEmbeddings, SiglipEncoderLayer with
SiglipAttention and SiglipMLP, the post-LayerNorm) and models/gemma3/modeling_gemma3.py
(Gemma3MultiModalProjector: AvgPool2d over the patch grid, Gemma3RMSNorm with 1 + w, x @ W).

Projector files are written here as llama.cpp's converter writes them (clip.* metadata, v.* and mm.*
tensors, the soft-embedding norm stored as 1 + w, the input projection as transformers holds it,
[vision width][text width]), with random weights in SigLIP-so400m's shape (width 1152, MLP 4304, 16
heads, patches of 14) and Gemma 3 4B's text width (2560), fewer layers and smaller images than the real
896 pixels (the reference's float64 attention over 4096 patches would not fit this test's time).

First the reference itself: its attention, LayerNorm, GELU and pooling against torch's own functions.
Then tool_vision_encode (the encoder through the CPU backend) against it, on the same pixel tensor:
- F32 weights, two images in one encoder step (224 pixels: 256 patches pooled by 4 to 16 tokens);
  tolerance 1e-5 of the output's largest magnitude (measured: 4e-7): float32 sums over widths of up to
  4304 and two layers against float64 give errors of some 1e-7 relative, 1e-5 leaves room for other
  kernels' summation orders while a wrong piece (a missing bias of 0.05, a pooling off by one patch)
  moves the output by 1e-2 or more;
- F16 weights as llama.cpp ships them (matrices and the projection F16, embeddings F32), 280 pixels (400
  patches, 25 tokens), the reference reading the file's rounded weights; tolerance 1e-5 as above
  (measured 5e-7: the CPU backend's F16 products keep the activations in float32);
- the first image alone gives the rows it got in the batch (tolerance 1e-5: the same ops, tiled
  differently);
- a file with the older MLP naming (fc1 as ffn_down) gives the same rows;
- a real file (PNG and JPEG written by Pillow, 300 x 200 with EXIF orientation 6 on the JPEG) prepared
  as transformers' Gemma3ImageProcessor does with Pillow (exif_transpose, convert RGB, resize to the
  square with BILINEAR, / 255, normalize): the prepared pixels within 1e-6, the rows within 1e-5;
- refusals: another projector type, a missing tensor, a patch grid that does not pool.

Environment: PITH_VISION_ENCODE (the tool), PITH_TEST_TMP. Exit 77 (skip) without torch or numpy."""

import json
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
    import torch
except ImportError:
    pithtest.skip("torch or numpy is missing (Debian: python3-torch python3-numpy)")
import pith_gguf as G  # noqa: E402

torch.set_default_dtype(torch.float64)

SO400M = dict(dim=1152, ffn=4304, heads=16, patch=14, out_dim=2560, eps=1e-6)
MEAN, STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]


def make_weights(cfg, layers, image, seed):
    rng = np.random.default_rng(seed)
    d, f, p = cfg["dim"], cfg["ffn"], cfg["patch"]
    n_patch = (image // p) ** 2

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def small(*shape, s=0.05):
        return rng.standard_normal(shape) * s

    w = {"patch_w": rng.standard_normal((d, 3, p, p)) / np.sqrt(3 * p * p), "patch_b": small(d),
         "pos": small(n_patch, d, s=0.5), "post_w": 1 + small(d, s=0.2), "post_b": small(d),
         "soft": small(d, s=0.3), "proj": rng.standard_normal((d, cfg["out_dim"])) / np.sqrt(d), "blk": []}
    for _ in range(layers):
        w["blk"].append({"ln1_w": 1 + small(d, s=0.2), "ln1_b": small(d), "ln2_w": 1 + small(d, s=0.2),
                         "ln2_b": small(d), "q": mat(d, d), "q_b": small(d), "k": mat(d, d), "k_b": small(d),
                         "v": mat(d, d), "v_b": small(d), "o": mat(d, d), "o_b": small(d),
                         "fc1": mat(f, d), "fc1_b": small(f), "fc2": mat(d, f), "fc2_b": small(d)})
    return w


def write_mmproj(path, cfg, w, image, pool=None, matrix_type="F32", projector="gemma3", legacy_mlp=False,
                 drop=None):
    """As llama.cpp's converter writes Gemma 3's projector; returns the weights as the file rounds them."""
    g = G.GGUFWriter(path)
    g.add_str("general.architecture", "clip")
    g.add_str("clip.projector_type", projector)
    g.add("clip.has_vision_encoder", True)
    g.add_u32("clip.vision.image_size", image)
    g.add_u32("clip.vision.patch_size", cfg["patch"])
    g.add_u32("clip.vision.embedding_length", cfg["dim"])
    g.add_u32("clip.vision.feed_forward_length", cfg["ffn"])
    g.add_u32("clip.vision.block_count", len(w["blk"]))
    g.add_u32("clip.vision.attention.head_count", cfg["heads"])
    g.add_f32("clip.vision.attention.layer_norm_epsilon", cfg["eps"])
    g.add_array("clip.vision.image_mean", MEAN, G.FLOAT32)
    g.add_array("clip.vision.image_std", STD, G.FLOAT32)
    if pool is not None:
        g.add_u32("clip.vision.projector.scale_factor", pool)
    rounded = {}

    def put(name, arr, t="F32"):
        if drop == name:
            return
        arr = np.asarray(arr, dtype=np.float32)
        g.add_tensor(name, arr.shape, t, arr)
        rounded[name] = arr.astype(np.float16).astype(np.float64) if t == "F16" else arr.astype(np.float64)

    put("v.patch_embd.weight", w["patch_w"])
    put("v.patch_embd.bias", w["patch_b"])
    put("v.position_embd.weight", w["pos"])
    for i, b in enumerate(w["blk"]):
        pre = f"v.blk.{i}."
        for nm, key in (("ln1.weight", "ln1_w"), ("ln1.bias", "ln1_b"), ("ln2.weight", "ln2_w"), ("ln2.bias", "ln2_b")):
            put(pre + nm, b[key])
        for nm, key in (("attn_q", "q"), ("attn_k", "k"), ("attn_v", "v"), ("attn_out", "o")):
            put(pre + nm + ".weight", b[key], matrix_type)
            put(pre + nm + ".bias", b[key + "_b"])
        up, down = ("ffn_down", "ffn_up") if legacy_mlp else ("ffn_up", "ffn_down")
        put(pre + up + ".weight", b["fc1"], matrix_type)
        put(pre + up + ".bias", b["fc1_b"])
        put(pre + down + ".weight", b["fc2"], matrix_type)
        put(pre + down + ".bias", b["fc2_b"])
    put("v.post_ln.weight", w["post_w"])
    put("v.post_ln.bias", w["post_b"])
    put("mm.soft_emb_norm.weight", 1 + w["soft"])          # the converter's Gemma3RMSNorm correction
    put("mm.input_projection.weight", w["proj"], "F16" if matrix_type == "F16" else "F32")
    g.write()
    return rounded


def read_safetensors(path):
    """name -> float64 array of an F32 safetensors file."""
    with open(path, "rb") as fh:
        data = fh.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def write_safetensors(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(arr)), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def write_hf_multimodal(out_dir, text_cfg, cfg, w, image, pool, seed, layout="legacy", processor=None,
                        drop=None, vision_config=True):
    """A Gemma3ForConditionalGeneration checkpoint as transformers saves one: tools/mkmodel.py's text model
    (seed) under "language_model.model." (layout "legacy", the released checkpoints) or
    "model.language_model." ("nested", transformers >= 4.52), the vision tower's and projector's weights w
    under SiglipVisionModel's and Gemma3MultiModalProjector's names (the soft norm as w, not 1 + w),
    config.json with text_config and vision_config, and preprocessor_config.json (processor: its keys)."""
    import mkmodel
    text_dir = out_dir + ".text"
    mkmodel.write_safetensors(text_cfg, text_dir, "F32", seed=seed)
    text = read_safetensors(os.path.join(text_dir, "model.safetensors"))
    with open(os.path.join(text_dir, "config.json")) as fh:
        text_config = json.load(fh)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for name, arr in text.items():
        if layout == "legacy":
            tensors["language_model." + name] = arr
        else:
            tensors["model.language_model." + name[len("model."):] if name.startswith("model.") else name] = arr
    tower = "vision_tower.vision_model." if layout == "legacy" else "model.vision_tower.vision_model."
    proj = "multi_modal_projector." if layout == "legacy" else "model.multi_modal_projector."
    v = {"embeddings.patch_embedding.weight": w["patch_w"], "embeddings.patch_embedding.bias": w["patch_b"],
         "embeddings.position_embedding.weight": w["pos"], "post_layernorm.weight": w["post_w"],
         "post_layernorm.bias": w["post_b"]}
    for i, b in enumerate(w["blk"]):
        pre = f"encoder.layers.{i}."
        for hf, key in (("layer_norm1.weight", "ln1_w"), ("layer_norm1.bias", "ln1_b"), ("layer_norm2.weight", "ln2_w"),
                        ("layer_norm2.bias", "ln2_b"), ("self_attn.q_proj.weight", "q"), ("self_attn.q_proj.bias", "q_b"),
                        ("self_attn.k_proj.weight", "k"), ("self_attn.k_proj.bias", "k_b"),
                        ("self_attn.v_proj.weight", "v"), ("self_attn.v_proj.bias", "v_b"),
                        ("self_attn.out_proj.weight", "o"), ("self_attn.out_proj.bias", "o_b"),
                        ("mlp.fc1.weight", "fc1"), ("mlp.fc1.bias", "fc1_b"), ("mlp.fc2.weight", "fc2"),
                        ("mlp.fc2.bias", "fc2_b")):
            v[pre + hf] = b[key]
    for name, arr in v.items():
        if drop != name:
            tensors[tower + name] = arr
    tensors[proj + "mm_input_projection_weight"] = w["proj"]
    tensors[proj + "mm_soft_emb_norm.weight"] = w["soft"]
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    for k in ("architectures", "torch_dtype"):
        text_config.pop(k, None)
    tpi = (image // cfg["patch"] // pool) ** 2
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": text_config, "mm_tokens_per_image": tpi, "boi_token_index": 255999,
              "eoi_token_index": 256000, "image_token_index": 262144}
    if vision_config:
        config["vision_config"] = {"model_type": "siglip_vision_model", "hidden_size": cfg["dim"],
                                   "intermediate_size": cfg["ffn"], "num_hidden_layers": len(w["blk"]),
                                   "num_attention_heads": cfg["heads"], "image_size": image,
                                   "patch_size": cfg["patch"], "layer_norm_eps": cfg["eps"], "vision_use_head": False}
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
    pre = {"image_processor_type": "Gemma3ImageProcessor", "do_resize": True, "size": {"height": image, "width": image},
           "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": MEAN,
           "image_std": STD, "do_pan_and_scan": False}
    pre.update(processor or {})
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as fh:
        json.dump(pre, fh, indent=2)
    return out_dir


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def attention(x, q, qb, k, kb, v, vb, o, ob, heads):
    """SiglipAttention: full (bidirectional) softmax attention over the image's patches."""
    n, d = x.shape
    hd = d // heads
    Q = (x @ q.T + qb).view(n, heads, hd).transpose(0, 1)
    K = (x @ k.T + kb).view(n, heads, hd).transpose(0, 1)
    V = (x @ v.T + vb).view(n, heads, hd).transpose(0, 1)
    s = Q @ K.transpose(1, 2) * hd ** -0.5
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    return (p @ V).transpose(0, 1).reshape(n, d) @ o.T + ob


def avg_pool(x, side, k):
    """[side * side, d] row-major grid -> [(side / k)^2, d], each k x k window's mean."""
    d = x.shape[1]
    g = x.view(side // k, k, side // k, k, d)
    return g.mean(dim=(1, 3)).reshape(-1, d)


def reference(f, image, cfg, pixels):
    """f: the file's weights by name (float64); pixels [3][image][image] -> [tokens][out_dim]."""
    t = {k: torch.tensor(v) for k, v in f.items()}
    p, d, eps = cfg["patch"], cfg["dim"], cfg["eps"]
    side = image // p
    px = torch.tensor(pixels)
    # SiglipVisionEmbeddings: the conv of stride patch, flattened row-major, plus the position table
    patches = px.view(3, side, p, side, p).permute(1, 3, 0, 2, 4).reshape(side * side, 3 * p * p)
    x = patches @ t["v.patch_embd.weight"].reshape(d, -1).T + t["v.patch_embd.bias"] + t["v.position_embd.weight"]
    i = 0
    while f"v.blk.{i}.ln1.weight" in t:
        pre = f"v.blk.{i}."
        h = layer_norm(x, t[pre + "ln1.weight"], t[pre + "ln1.bias"], eps)
        x = x + attention(h, *(t[pre + nm] for nm in ("attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
                                                    "attn_v.weight", "attn_v.bias", "attn_out.weight",
                                                    "attn_out.bias")), cfg["heads"])
        h = layer_norm(x, t[pre + "ln2.weight"], t[pre + "ln2.bias"], eps)
        up, down = ("ffn_up", "ffn_down") if t[pre + "ffn_up.weight"].shape[1] == d else ("ffn_down", "ffn_up")
        x = x + gelu_tanh(h @ t[pre + up + ".weight"].T + t[pre + up + ".bias"]) @ t[pre + down + ".weight"].T \
            + t[pre + down + ".bias"]
        i += 1
    x = layer_norm(x, t["v.post_ln.weight"], t["v.post_ln.bias"], eps)
    # Gemma3MultiModalProjector
    k = cfg.get("pool", 4)
    pooled = avg_pool(x, side, k)
    normed = pooled * torch.rsqrt((pooled ** 2).mean(-1, keepdim=True) + eps) * t["mm.soft_emb_norm.weight"]
    return (normed @ t["mm.input_projection.weight"]).numpy()


def run_tool(path, pixels, tmp, threads=2, expect_fail=False):
    tool = os.environ.get("PITH_VISION_ENCODE")
    if not tool or not os.path.exists(tool):
        pithtest.skip("PITH_VISION_ENCODE is not set (run through ctest)")
    pin, pout = os.path.join(tmp, "pixels.f32"), os.path.join(tmp, "out.f32")
    np.asarray(pixels, dtype=np.float32).tofile(pin)
    r = subprocess.run([tool, path, pin, str(len(pixels)), pout, str(threads)], capture_output=True, text=True,
                       timeout=600)
    if expect_fail:
        return r
    if r.returncode != 0:
        raise AssertionError(f"tool_vision_encode failed: {r.stderr}")
    return np.fromfile(pout, dtype=np.float32).astype(np.float64)


def random_pixels(rng, n, image):
    """Normalized pixels as the processor makes them: (u8 / 255 - 0.5) / 0.5, smooth enough to be an image."""
    u8 = rng.integers(0, 256, size=(n, 3, image, image)).astype(np.float64)
    yy, xx = np.mgrid[0:image, 0:image] / image
    u8 = 0.5 * u8 + 0.5 * 255 * (0.5 + 0.5 * np.sin(6 * xx + 4 * yy))[None, None]
    return ((np.round(u8) / 255.0) - np.array(MEAN)[None, :, None, None]) / np.array(STD)[None, :, None, None]


class ReferenceSelfCheck(unittest.TestCase):
    """The hand-written pieces against torch's own."""

    def test_pieces(self):
        F = torch.nn.functional
        g = torch.Generator().manual_seed(1)
        x = torch.randn(64, 32, generator=g)
        w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
        self.assertLess((layer_norm(x, w, b, 1e-6) - F.layer_norm(x, (32,), w, b, 1e-6)).abs().max(), 1e-12)
        self.assertLess((gelu_tanh(x) - F.gelu(x, approximate="tanh")).abs().max(), 1e-12)
        q, k, v, o = (torch.randn(32, 32, generator=g) for _ in range(4))
        z = torch.zeros(32)
        mine = attention(x, q, z, k, z, v, z, o, z, 4)
        Q, K, V = ((x @ m.T).view(64, 4, 8).transpose(0, 1) for m in (q, k, v))
        theirs = (torch.softmax(Q @ K.transpose(1, 2) / np.sqrt(8), -1) @ V).transpose(0, 1).reshape(64, 32) @ o.T
        self.assertLess((mine - theirs).abs().max(), 1e-10)
        grid = torch.randn(8 * 8, 5, generator=g)
        pooled = torch.nn.AvgPool2d(2, 2)(grid.T.reshape(1, 5, 8, 8)).flatten(2).transpose(1, 2)[0]
        self.assertLess((avg_pool(grid, 8, 2) - pooled).abs().max(), 1e-12)
        # a conv of stride patch equals the product over each patch's pixels in (channel, row, column) order
        px = torch.randn(3, 28, 28, generator=g)
        kern = torch.randn(6, 3, 14, 14, generator=g)
        conv = F.conv2d(px[None], kern, stride=14).flatten(2).transpose(1, 2)[0]
        patches = px.view(3, 2, 14, 2, 14).permute(1, 3, 0, 2, 4).reshape(4, -1)
        self.assertLess((patches @ kern.reshape(6, -1).T - conv).abs().max(), 1e-10)


class Encoder(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = os.path.join(pithtest.tmp_dir(), "ref_siglip")
        os.makedirs(cls.tmp, exist_ok=True)

    def compare(self, got, want, tol, what):
        scale = np.abs(want).max()
        err = np.abs(got.reshape(want.shape) - want).max() / scale
        print(f"{what}: max error {err:.2e} of the largest magnitude {scale:.3g} (tolerance {tol:g})")
        self.assertLess(err, tol, what)
        return err

    def test_f32_two_images(self):
        image, cfg = 224, dict(SO400M)
        w = make_weights(cfg, 2, image, seed=11)
        path = os.path.join(self.tmp, "f32.gguf")
        f = write_mmproj(path, cfg, w, image)
        px = random_pixels(np.random.default_rng(5), 2, image)
        got = run_tool(path, px, self.tmp).reshape(2, 16, cfg["out_dim"])
        for i in range(2):
            self.compare(got[i], reference(f, image, cfg, px[i]), 1e-5, f"F32, 224 px, image {i} of 2")
        alone = run_tool(path, px[:1], self.tmp).reshape(16, cfg["out_dim"])
        self.compare(alone, got[0], 1e-5, "F32, the first image alone against its rows in the batch")
        self.assertGreater(np.abs(got[0] - got[1]).max(), 0.1, "two different images give different rows")
        legacy = os.path.join(self.tmp, "legacy.gguf")
        write_mmproj(legacy, cfg, w, image, legacy_mlp=True)
        self.compare(run_tool(legacy, px, self.tmp).reshape(got.shape), got, 1e-6, "older MLP naming")

    def test_f16_280(self):
        image, cfg = 280, dict(SO400M)
        w = make_weights(cfg, 1, image, seed=12)
        path = os.path.join(self.tmp, "f16.gguf")
        f = write_mmproj(path, cfg, w, image, matrix_type="F16")
        px = random_pixels(np.random.default_rng(6), 1, image)
        got = run_tool(path, px, self.tmp)
        self.compare(got, reference(f, image, cfg, px[0]), 1e-5, "F16 matrices, 280 px (25 tokens)")

    def test_small_pool(self):
        """A test model's scale factor (clip.vision.projector.scale_factor): 2 instead of 4."""
        image, cfg = 112, dict(SO400M, dim=64, ffn=96, heads=4, out_dim=48, pool=2)
        w = make_weights(cfg, 2, image, seed=13)
        path = os.path.join(self.tmp, "pool2.gguf")
        f = write_mmproj(path, cfg, w, image, pool=2)
        px = random_pixels(np.random.default_rng(7), 3, image)
        got = run_tool(path, px, self.tmp).reshape(3, 16, 48)
        for i in range(3):
            self.compare(got[i], reference(f, image, cfg, px[i]), 1e-5, f"small, pooled by 2, image {i} of 3")

    def test_image_file(self):
        try:
            from PIL import Image, ImageOps
        except ImportError:
            self.skipTest("PIL is missing (Debian: python3-pil)")
        image, cfg = 112, dict(SO400M, dim=64, ffn=96, heads=4, out_dim=48)
        w = make_weights(cfg, 1, image, seed=15)
        path = os.path.join(self.tmp, "file.gguf")
        f = write_mmproj(path, cfg, w, image)
        rng = np.random.default_rng(9)
        yy, xx = np.mgrid[0:200, 0:300]
        arr = np.stack([xx * 255 // 299, yy * 255 // 199, (xx + yy) % 256], -1).astype(np.int64)
        arr = np.clip(arr + rng.integers(-40, 41, arr.shape), 0, 255).astype(np.uint8)
        tool = os.environ.get("PITH_VISION_ENCODE")
        for name, kw in (("img.png", {}), ("img.jpg", {"quality": 90})):
            img = Image.fromarray(arr)
            fpath = os.path.join(self.tmp, name)
            if name.endswith(".jpg"):
                exif = img.getexif()
                exif[0x0112] = 6
                img.save(fpath, exif=exif.tobytes(), **kw)
            else:
                img.save(fpath, **kw)
            # Gemma3ImageProcessor with Pillow: orientation applied, RGB, bilinear to the square, rescale, normalize
            ref_img = ImageOps.exif_transpose(Image.open(fpath)).convert("RGB").resize((image, image), Image.BILINEAR)
            px = ((np.asarray(ref_img, dtype=np.float64) / 255.0 - MEAN) / STD).transpose(2, 0, 1)
            out = os.path.join(self.tmp, "file.f32")
            r = subprocess.run([tool, path, "--image", fpath, out, "2"], capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = np.fromfile(out, dtype=np.float32).astype(np.float64)
            n_px = 3 * image * image
            self.compare(got[:n_px].reshape(px.shape), px, 1e-6, f"{name}: prepared pixels against Pillow's")
            self.compare(got[n_px:], reference(f, image, cfg, px).reshape(-1), 1e-5, f"{name}: the encoder's rows")

    def test_hf_directory(self):
        """Gemma3ForConditionalGeneration's vision tower from a Hugging Face directory, in both of
        transformers' layouts: the reference, and the very rows of the same weights from a projector GGUF."""
        import mkmodel
        image, text_cfg = 112, mkmodel.build_config("test-gemma3")
        cfg = dict(SO400M, dim=64, ffn=96, heads=4, out_dim=text_cfg.dim, pool=2)
        w = make_weights(cfg, 2, image, seed=16)
        gguf = os.path.join(self.tmp, "hf_twin.gguf")
        f = write_mmproj(gguf, cfg, w, image, pool=2)
        px = random_pixels(np.random.default_rng(10), 2, image)
        from_gguf = run_tool(gguf, px, self.tmp).reshape(2, 16, cfg["out_dim"])
        for layout in ("legacy", "nested"):
            d = write_hf_multimodal(os.path.join(self.tmp, f"hf_{layout}"), text_cfg, cfg, w, image, 2, 17, layout)
            for path in (d, os.path.join(d, "config.json")):
                got = run_tool(path, px, self.tmp).reshape(2, 16, cfg["out_dim"])
                for i in range(2):
                    self.compare(got[i], reference(f, image, cfg, px[i]), 1e-5, f"Hugging Face ({layout}), image {i}")
                self.compare(got, from_gguf, 1e-6, f"Hugging Face ({layout}) against the projector GGUF")
        bad = [(dict(processor={"do_pan_and_scan": True}), "only the default preprocessing"),
               (dict(processor={"size": {"height": 224, "width": 224}}), "differs from the vision tower's image size"),
               (dict(vision_config=False), "no vision tower Pith can run"),
               (dict(drop="encoder.layers.1.mlp.fc2.weight"),
                "missing tensor vision_tower.vision_model.encoder.layers.1.mlp.fc2.weight (llama.cpp's v.blk.1.ffn_down")]
        for i, (kw, msg) in enumerate(bad):
            d = write_hf_multimodal(os.path.join(self.tmp, f"hf_bad{i}"), text_cfg, cfg, w, image, 2, 17, **kw)
            r = run_tool(d, px, self.tmp, expect_fail=True)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(msg, r.stderr)
            print(f"refused: {r.stderr.strip()}")

    def test_refusals(self):
        image, cfg = 112, dict(SO400M, dim=64, ffn=96, heads=4, out_dim=48)
        w = make_weights(cfg, 1, image, seed=14)
        px = random_pixels(np.random.default_rng(8), 1, image)
        cases = [(dict(projector="qwen2vl_merger"), "not supported"),
                 (dict(drop="v.blk.0.attn_k.weight"), "missing tensor v.blk.0.attn_k.weight"),
                 (dict(pool=3), "do not pool by 3")]
        for i, (kw, msg) in enumerate(cases):
            path = os.path.join(self.tmp, f"bad{i}.gguf")
            write_mmproj(path, cfg, w, image, **kw)
            r = run_tool(path, px, self.tmp, expect_fail=True)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(msg, r.stderr)
            print(f"refused: {r.stderr.strip()}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
