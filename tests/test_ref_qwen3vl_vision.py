"""Qwen3-VL's vision tower as Qwen3.5 uses it (src/model/vision_qwen3vl.c) against a float64 torch
reference written from transformers' models/qwen3_vl/modeling_qwen3_vl.py: Qwen3VLVisionPatchEmbed (the
Conv3d over the image repeated temporal_patch_size times), Qwen3VLVisionModel.fast_pos_embed_interpolate
(the learned grid sampled bilinearly, align-corners, then put in merge-block order) and rot_pos_emb (a
patch's row and column each turn head_dim / 4 frequencies; rotate-half over the head), Qwen3VLVisionBlock
(pre-LayerNorm, fused QKV with biases, bidirectional attention over the image, GELU-tanh MLP) and
Qwen3VLVisionPatchMerger (LayerNorm per patch, 2 x 2 patches side by side, Linear, exact GELU, Linear),
and Qwen3-VL's DeepStack mergers (use_postshuffle_norm: the patches side by side, then the LayerNorm). The pixel tensor is laid out as
Qwen2VLImageProcessor lays it out (patches in merge-block order, each [C][T][P][P]), and the reference
runs torch's conv3d on it: an independent route to the patch embedding the C code computes with the
frames' kernels summed.

Files are written as llama.cpp's converter writes a "qwen3vl_merger" projector (clip.* metadata; v.* and
mm.* tensors, the Conv3d as one kernel per frame, v.patch_embd.weight and v.patch_embd.weight.1, the
merger's norm as v.post_ln, its MLP as mm.0 and mm.2) and as a Qwen3_5ForConditionalGeneration directory
(model.visual.*, the Conv3d kernel 5-D; tools/mkmodel.py's test-qwen35 as the text model).

Cases (tolerance 1e-5 of the output's largest magnitude: float32 sums over a few thousand terms against
float64 give some 1e-7 relative, while a wrong piece, a RoPE axis swapped or a patch out of block order,
moves the output by 1e-2 or more):
- small tower (width 64, 4 heads of 16, 2 layers, a 6 x 6 position grid), three images of different
  sizes and aspect (64 x 96, 32 x 32: one token, 96 x 64), each against the reference;
- the same weights from the Hugging Face directory: the same rows;
- Qwen3.5's real width (1152, 16 heads of 72, MLP 4304, a 48 x 48 grid), one layer, F16 matrices as
  llama.cpp ships them, a 128 x 160 image (80 patches, 20 tokens);
- each feature checked to matter: the reference with the RoPE's row and column swapped, and with the
  positions not interpolated, is far from Pith;
- DeepStack (Qwen3-VL): mergers after two of three blocks, each token's row the merger's part then theirs,
  from the GGUF and from the directory;
- refusals: an image side that is not a multiple of 32, a missing tensor.

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
    import torch.nn.functional as F
except ImportError:
    pithtest.skip("torch or numpy is missing (Debian: python3-torch python3-numpy)")
import pith_gguf as G  # noqa: E402

torch.set_default_dtype(torch.float64)

SMALL = dict(dim=64, ffn=96, heads=4, patch=16, merge=2, temporal=2, pos_side=6, out_dim=128, eps=1e-6)
QWEN35 = dict(dim=1152, ffn=4304, heads=16, patch=16, merge=2, temporal=2, pos_side=48, out_dim=1024, eps=1e-6)
MEAN, STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
TOL = 1e-5


def make_weights(cfg, layers, seed, deepstack=()):
    rng = np.random.default_rng(seed)
    d, f, p, T, m = cfg["dim"], cfg["ffn"], cfg["patch"], cfg["temporal"], cfg["merge"]
    wide = d * m * m

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def small(*shape, s=0.05):
        return rng.standard_normal(shape) * s

    w = {"patch_w": rng.standard_normal((d, 3, T, p, p)) / np.sqrt(3 * T * p * p), "patch_b": small(d),
         "pos": small(cfg["pos_side"] ** 2, d, s=0.5), "norm_w": 1 + small(d, s=0.2), "norm_b": small(d),
         "fc1": mat(wide, wide), "fc1_b": small(wide), "fc2": mat(cfg["out_dim"], wide), "fc2_b": small(cfg["out_dim"]),
         "blk": []}
    w["deepstack"] = {l: {"norm_w": 1 + small(wide, s=0.2), "norm_b": small(wide), "fc1": mat(wide, wide),
                          "fc1_b": small(wide), "fc2": mat(cfg["out_dim"], wide), "fc2_b": small(cfg["out_dim"])}
                      for l in deepstack}
    for _ in range(layers):
        w["blk"].append({"ln1_w": 1 + small(d, s=0.2), "ln1_b": small(d), "ln2_w": 1 + small(d, s=0.2),
                         "ln2_b": small(d), "qkv": mat(3 * d, d), "qkv_b": small(3 * d), "o": mat(d, d),
                         "o_b": small(d), "fc1": mat(f, d), "fc1_b": small(f), "fc2": mat(d, f), "fc2_b": small(d)})
    return w


def as_f32(w):
    """The weights as an F32 file holds them (float64 again, for the reference)."""
    f32 = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64)  # noqa: E731
    return {k: ([{kk: f32(vv) for kk, vv in b.items()} for b in v] if k == "blk" else
                {l: {kk: f32(vv) for kk, vv in ds.items()} for l, ds in v.items()} if k == "deepstack" else f32(v))
            for k, v in w.items()}


def write_mmproj(path, cfg, w, matrix_type="F32", drop=None):
    """As llama.cpp's converter writes a qwen3vl_merger projector; returns the weights as the file rounds
    them (the reference reads those)."""
    g = G.GGUFWriter(path)
    g.add_str("general.architecture", "clip")
    g.add_str("clip.projector_type", "qwen3vl_merger")
    g.add("clip.has_vision_encoder", True)
    g.add_u32("clip.vision.image_size", cfg["pos_side"] * cfg["patch"])
    g.add_u32("clip.vision.patch_size", cfg["patch"])
    g.add_u32("clip.vision.embedding_length", cfg["dim"])
    g.add_u32("clip.vision.feed_forward_length", cfg["ffn"])
    g.add_u32("clip.vision.block_count", len(w["blk"]))
    g.add_u32("clip.vision.attention.head_count", cfg["heads"])
    g.add_f32("clip.vision.attention.layer_norm_epsilon", cfg["eps"])
    g.add_u32("clip.vision.spatial_merge_size", cfg["merge"])
    g.add_u32("clip.vision.projection_dim", cfg["out_dim"])
    g.add_array("clip.vision.image_mean", MEAN, G.FLOAT32)
    g.add_array("clip.vision.image_std", STD, G.FLOAT32)
    if w["deepstack"]:
        g.add_array("clip.vision.is_deepstack_layers", [i in w["deepstack"] for i in range(len(w["blk"]))], G.BOOL)
    r = {}

    def put(name, arr, t="F32"):
        if drop == name:
            return None
        arr = np.asarray(arr, dtype=np.float32)
        g.add_tensor(name, arr.shape, t, arr)
        out = arr.astype(np.float16).astype(np.float64) if t == "F16" else arr.astype(np.float64)
        return out

    frames = [put("v.patch_embd.weight" + (f".{t}" if t else ""), w["patch_w"][:, :, t]) for t in range(cfg["temporal"])]
    r["patch_w"] = np.stack(frames, axis=2)
    r["patch_b"] = put("v.patch_embd.bias", w["patch_b"])
    r["pos"] = put("v.position_embd.weight", w["pos"])
    r["blk"] = []
    for i, b in enumerate(w["blk"]):
        pre, rb = f"v.blk.{i}.", {}
        for nm, key in (("ln1.weight", "ln1_w"), ("ln1.bias", "ln1_b"), ("ln2.weight", "ln2_w"), ("ln2.bias", "ln2_b"),
                        ("attn_qkv.bias", "qkv_b"), ("attn_out.bias", "o_b"), ("ffn_up.bias", "fc1_b"),
                        ("ffn_down.bias", "fc2_b")):
            rb[key] = put(pre + nm, b[key])
        for nm, key in (("attn_qkv.weight", "qkv"), ("attn_out.weight", "o"), ("ffn_up.weight", "fc1"),
                        ("ffn_down.weight", "fc2")):
            rb[key] = put(pre + nm, b[key], matrix_type)
        r["blk"].append(rb)
    r["norm_w"] = put("v.post_ln.weight", w["norm_w"])
    r["norm_b"] = put("v.post_ln.bias", w["norm_b"])
    r["fc1"] = put("mm.0.weight", w["fc1"], matrix_type)
    r["fc1_b"] = put("mm.0.bias", w["fc1_b"])
    r["fc2"] = put("mm.2.weight", w["fc2"], matrix_type)
    r["fc2_b"] = put("mm.2.bias", w["fc2_b"])
    r["deepstack"] = {}
    for l, ds in w["deepstack"].items():
        pre = f"v.deepstack.{l}."
        r["deepstack"][l] = {"norm_w": put(pre + "norm.weight", ds["norm_w"]), "norm_b": put(pre + "norm.bias", ds["norm_b"]),
                             "fc1": put(pre + "fc1.weight", ds["fc1"], matrix_type), "fc1_b": put(pre + "fc1.bias", ds["fc1_b"]),
                             "fc2": put(pre + "fc2.weight", ds["fc2"], matrix_type), "fc2_b": put(pre + "fc2.bias", ds["fc2_b"])}
    g.write()
    return r


def write_hf(out_dir, cfg, w, seed=0, text=None):
    """A Qwen3_5ForConditionalGeneration directory: test-qwen35's text model (width cfg["out_dim"]) with
    this vision tower under model.visual.*, config.json's vision_config and preprocessor_config.json.
    text: (tensors by Hugging Face name, config.json) of another text model instead (Qwen3-VL's)."""
    import mkmodel
    import test_ref_siglip as S
    if text is None:
        text_cfg = mkmodel.build_config("test-qwen35", hf_type="multimodal", dim=cfg["out_dim"])
        mkmodel.write_safetensors(text_cfg, out_dir, "F32", seed=seed)
        tensors = {k: v for k, v in S.read_safetensors(os.path.join(out_dir, "model.safetensors")).items()
                   if not k.startswith("model.visual.")}
        with open(os.path.join(out_dir, "config.json")) as fh:
            config = json.load(fh)
    else:
        os.makedirs(out_dir, exist_ok=True)
        tensors, config = dict(text[0]), dict(text[1])
    v = {"patch_embed.proj.weight": w["patch_w"], "patch_embed.proj.bias": w["patch_b"], "pos_embed.weight": w["pos"],
         "merger.norm.weight": w["norm_w"], "merger.norm.bias": w["norm_b"], "merger.linear_fc1.weight": w["fc1"],
         "merger.linear_fc1.bias": w["fc1_b"], "merger.linear_fc2.weight": w["fc2"], "merger.linear_fc2.bias": w["fc2_b"]}
    for k, l in enumerate(sorted(w["deepstack"])):
        ds = w["deepstack"][l]
        for hf, key in (("norm.weight", "norm_w"), ("norm.bias", "norm_b"), ("linear_fc1.weight", "fc1"),
                        ("linear_fc1.bias", "fc1_b"), ("linear_fc2.weight", "fc2"), ("linear_fc2.bias", "fc2_b")):
            v[f"deepstack_merger_list.{k}.{hf}"] = ds[key]
    for i, b in enumerate(w["blk"]):
        for hf, key in (("norm1.weight", "ln1_w"), ("norm1.bias", "ln1_b"), ("norm2.weight", "ln2_w"),
                        ("norm2.bias", "ln2_b"), ("attn.qkv.weight", "qkv"), ("attn.qkv.bias", "qkv_b"),
                        ("attn.proj.weight", "o"), ("attn.proj.bias", "o_b"), ("mlp.linear_fc1.weight", "fc1"),
                        ("mlp.linear_fc1.bias", "fc1_b"), ("mlp.linear_fc2.weight", "fc2"),
                        ("mlp.linear_fc2.bias", "fc2_b")):
            v[f"blocks.{i}.{hf}"] = b[key]
    tensors.update({"model.visual." + k: a for k, a in v.items()})
    S.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    config["vision_config"] = {"model_type": "qwen3_5", "depth": len(w["blk"]), "hidden_size": cfg["dim"],
                               "intermediate_size": cfg["ffn"], "num_heads": cfg["heads"], "patch_size": cfg["patch"],
                               "spatial_merge_size": cfg["merge"], "temporal_patch_size": cfg["temporal"],
                               "out_hidden_size": cfg["out_dim"], "num_position_embeddings": cfg["pos_side"] ** 2,
                               "in_channels": 3, "hidden_act": "gelu_pytorch_tanh",
                               "deepstack_visual_indexes": sorted(w["deepstack"])}
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as fh:
        json.dump({"image_processor_type": "Qwen2VLImageProcessor", "size": {"shortest_edge": 1024,
                   "longest_edge": 65536}, "patch_size": cfg["patch"], "temporal_patch_size": cfg["temporal"],
                   "merge_size": cfg["merge"], "image_mean": MEAN, "image_std": STD, "resample": 3}, fh, indent=2)
    return out_dir


# ---- the reference, from modeling_qwen3_vl.py ----

def processor_patches(cfg, px):
    """Qwen2VLImageProcessor's flattened patches of one image ([3][H][W] normalized): the image repeated
    over temporal_patch_size frames, patches in merge-block order, each [C][T][P][P]."""
    p, T, m = cfg["patch"], cfg["temporal"], cfg["merge"]
    C, H, W = px.shape
    gh, gw = H // p, W // p
    frames = np.repeat(px[None], T, axis=0)                               # (T, C, H, W)
    x = frames.reshape(1, T, C, gh // m, m, p, gw // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return torch.tensor(x.reshape(gh * gw, C * T * p * p)), gh, gw


def pos_interpolate(cfg, w, gh, gw, swap=False, nearest=False):
    S, m = cfg["pos_side"], cfg["merge"]
    table = torch.tensor(w["pos"])
    hs, ws = torch.linspace(0, S - 1, gh), torch.linspace(0, S - 1, gw)
    if nearest:
        hs, ws = hs.round(), ws.round()
    h0, w0 = hs.floor().long(), ws.floor().long()
    h1, w1 = (h0 + 1).clamp(max=S - 1), (w0 + 1).clamp(max=S - 1)
    dh, dw = (hs - h0)[:, None], (ws - w0)[None, :]
    pe = ((1 - dh) * (1 - dw))[..., None] * table[h0[:, None] * S + w0[None, :]] + \
         ((1 - dh) * dw)[..., None] * table[h0[:, None] * S + w1[None, :]] + \
         (dh * (1 - dw))[..., None] * table[h1[:, None] * S + w0[None, :]] + \
         (dh * dw)[..., None] * table[h1[:, None] * S + w1[None, :]]       # (gh, gw, d)
    pe = pe.reshape(gh // m, m, gw // m, m, -1).permute(0, 2, 1, 3, 4).reshape(gh * gw, -1)
    return pe


def rotary(cfg, gh, gw, swap=False):
    """(cos, sin) per patch in merge-block order, over the whole head: rot_pos_emb, then cat(emb, emb)."""
    m, hd = cfg["merge"], cfg["dim"] // cfg["heads"]
    dim = hd // 2
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rows = (torch.arange(gh // m)[:, None, None, None] * m + torch.arange(m)[None, None, :, None]).expand(gh // m, gw // m, m, m)
    cols = (torch.arange(gw // m)[None, :, None, None] * m + torch.arange(m)[None, None, None, :]).expand(gh // m, gw // m, m, m)
    rows, cols = rows.reshape(-1), cols.reshape(-1)
    if swap:
        rows, cols = cols, rows
    freqs = torch.cat([rows[:, None] * inv[None], cols[:, None] * inv[None]], dim=1)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def reference(cfg, w, px, swap=False, nearest=False):
    """Qwen3VLVisionModel(pixel_values, grid_thw) for one image, then its patch merger."""
    d, heads, p, T = cfg["dim"], cfg["heads"], cfg["patch"], cfg["temporal"]
    hd = d // heads
    x, gh, gw = processor_patches(cfg, px)
    n = gh * gw
    x = F.conv3d(x.view(-1, 3, T, p, p), torch.tensor(w["patch_w"]), torch.tensor(w["patch_b"]),
                 stride=(T, p, p)).view(n, d)
    x = x + pos_interpolate(cfg, w, gh, gw, nearest=nearest)
    cos, sin = rotary(cfg, gh, gw, swap)
    cos, sin = cos[:, None, :], sin[:, None, :]
    deep = []
    for li, b in enumerate(w["blk"]):
        t = lambda k: torch.tensor(b[k])  # noqa: E731
        h = F.layer_norm(x, (d,), t("ln1_w"), t("ln1_b"), cfg["eps"])
        qkv = (h @ t("qkv").T + t("qkv_b")).reshape(n, 3, heads, hd).permute(1, 0, 2, 3)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        q, k, v = (a.transpose(0, 1) for a in (q, k, v))                  # (heads, n, hd)
        att = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5, dim=-1) @ v
        x = x + att.transpose(0, 1).reshape(n, d) @ t("o").T + t("o_b")
        h = F.layer_norm(x, (d,), t("ln2_w"), t("ln2_b"), cfg["eps"])
        x = x + F.gelu(h @ t("fc1").T + t("fc1_b"), approximate="tanh") @ t("fc2").T + t("fc2_b")
        if li in w["deepstack"]:   # Qwen3VLVisionPatchMerger(use_postshuffle_norm=True)
            ds = {k: torch.tensor(a) for k, a in w["deepstack"][li].items()}
            y = x.reshape(-1, d * cfg["merge"] ** 2)
            y = F.layer_norm(y, (y.shape[1],), ds["norm_w"], ds["norm_b"], 1e-6)
            deep.append(F.gelu(y @ ds["fc1"].T + ds["fc1_b"]) @ ds["fc2"].T + ds["fc2_b"])
    wt = lambda k: torch.tensor(w[k])  # noqa: E731
    x = F.layer_norm(x, (d,), wt("norm_w"), wt("norm_b"), 1e-6).view(-1, d * cfg["merge"] ** 2)
    x = F.gelu(x @ wt("fc1").T + wt("fc1_b")) @ wt("fc2").T + wt("fc2_b")
    return torch.cat([x] + deep, dim=1).numpy()   # a token's row: the merger's part, then DeepStack's


def run_tool(path, images, tmp, threads=2, expect_fail=False):
    tool = os.environ.get("PITH_VISION_ENCODE")
    if not tool or not os.path.exists(tool):
        pithtest.skip("PITH_VISION_ENCODE is not set (run through ctest)")
    pin, pout = os.path.join(tmp, "pixels.f32"), os.path.join(tmp, "out.f32")
    np.concatenate([np.asarray(i, dtype=np.float32).ravel() for i in images]).tofile(pin)
    sizes = ",".join(f"{i.shape[1]}x{i.shape[2]}" for i in images)
    r = subprocess.run([tool, path, "--sized", pin, sizes, pout, str(threads)], capture_output=True, text=True,
                       timeout=600)
    if expect_fail:
        return r
    if r.returncode != 0:
        raise AssertionError(f"tool_vision_encode failed: {r.stderr}")
    return np.fromfile(pout, dtype=np.float32).astype(np.float64)


def random_image(rng, h, w):
    u8 = rng.integers(0, 256, size=(3, h, w)).astype(np.float64)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    u8 = 0.5 * u8 + 0.5 * 255 * (0.5 + 0.5 * np.sin(6 * xx + 4 * yy))[None]
    return ((np.round(u8) / 255.0) - 0.5) / 0.5


class Qwen3VLTower(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = os.path.join(pithtest.tmp_dir(), "ref_qwen3vl_vision")
        os.makedirs(cls.tmp, exist_ok=True)

    def compare(self, got, want, what, tol=TOL):
        scale = np.abs(want).max()
        err = np.abs(got.reshape(want.shape) - want).max() / scale
        print(f"{what}: max error {err:.2e} of the largest magnitude {scale:.3g} (tolerance {tol:g})")
        self.assertLess(err, tol, what)
        return err

    def split(self, out, images, cfg, parts=1):
        res, at = [], 0
        for im in images:
            k = (im.shape[1] // 32) * (im.shape[2] // 32) * cfg["out_dim"] * parts
            res.append(out[at:at + k].reshape(-1, cfg["out_dim"] * parts))
            at += k
        self.assertEqual(at, out.size)
        return res

    def test_small_three_sizes_gguf_and_hf(self):
        cfg = SMALL
        w = make_weights(cfg, 2, seed=21)
        path = os.path.join(self.tmp, "small.gguf")
        r = write_mmproj(path, cfg, w)
        rng = np.random.default_rng(22)
        images = [random_image(rng, 64, 96), random_image(rng, 32, 32), random_image(rng, 96, 64)]
        got = self.split(run_tool(path, images, self.tmp), images, cfg)
        want = [reference(cfg, r, im) for im in images]
        for im, g, wnt in zip(images, got, want):
            self.compare(g, wnt, f"GGUF, {im.shape[2]}x{im.shape[1]} ({g.shape[0]} tokens)")
        # each feature matters
        for what, other in (("RoPE row and column swapped", reference(cfg, r, images[0], swap=True)),
                            ("positions not interpolated", reference(cfg, r, images[0], nearest=True))):
            moved = np.abs(got[0] - other).max() / np.abs(other).max()
            print(f"against the reference with {what}: {moved:.3g}")
            self.assertGreater(moved, 100 * TOL, f"{what} must change the output")
        hf = write_hf(os.path.join(self.tmp, "hf"), cfg, w)
        from_hf = self.split(run_tool(hf, images, self.tmp), images, cfg)
        for im, g, wnt in zip(images, from_hf, want):
            self.compare(g, wnt, f"Hugging Face directory, {im.shape[2]}x{im.shape[1]}")

    def test_deepstack(self):
        """Qwen3-VL's DeepStack: mergers after blocks 0 and 2 of 3, their parts after the merger's in each
        token's row; from the GGUF (v.deepstack.L.*, clip.vision.is_deepstack_layers) and the directory
        (deepstack_merger_list.K.*, deepstack_visual_indexes)."""
        cfg = SMALL
        w = make_weights(cfg, 3, seed=28, deepstack=(0, 2))
        path = os.path.join(self.tmp, "deepstack.gguf")
        r = write_mmproj(path, cfg, w)
        rng = np.random.default_rng(29)
        images = [random_image(rng, 64, 96), random_image(rng, 32, 64)]
        got = self.split(run_tool(path, images, self.tmp), images, cfg, parts=3)
        hf = self.split(run_tool(write_hf(os.path.join(self.tmp, "hf_deepstack"), cfg, w), images, self.tmp), images,
                        cfg, parts=3)
        for im, g, h in zip(images, got, hf):
            want = reference(cfg, r, im)
            self.compare(g, want, f"DeepStack, GGUF, {im.shape[2]}x{im.shape[1]} (3 parts a token)")
            self.compare(h, want, f"DeepStack, Hugging Face directory, {im.shape[2]}x{im.shape[1]}")
            for k in (1, 2):
                part = slice(k * cfg["out_dim"], (k + 1) * cfg["out_dim"])
                self.assertGreater(np.abs(g[:, part] - g[:, :cfg["out_dim"]]).max(), 0.1, "the parts differ")

    def test_real_width_f16(self):
        cfg = QWEN35
        w = make_weights(cfg, 1, seed=23)
        path = os.path.join(self.tmp, "wide.gguf")
        r = write_mmproj(path, cfg, w, matrix_type="F16")
        im = random_image(np.random.default_rng(24), 128, 160)
        got = run_tool(path, [im], self.tmp).reshape(-1, cfg["out_dim"])
        self.assertEqual(got.shape[0], 20)
        self.compare(got, reference(cfg, r, im), "Qwen3.5's width, F16 matrices, 160x128 (20 tokens)")

    def test_refusals(self):
        cfg = SMALL
        w = make_weights(cfg, 1, seed=25)
        im = random_image(np.random.default_rng(26), 32, 32)
        cases = [(dict(drop="mm.2.bias"), [im], "missing tensor mm.2.bias"),
                 (dict(), [random_image(np.random.default_rng(27), 40, 32)], "multiples of 32")]
        for i, (kw, images, msg) in enumerate(cases):
            path = os.path.join(self.tmp, f"bad{i}.gguf")
            write_mmproj(path, cfg, w, **kw)
            r = run_tool(path, images, self.tmp, expect_fail=True)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(msg, r.stderr)
            print(f"refused: {r.stderr.strip()}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
