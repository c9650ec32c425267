"""Phi-3 / Phi-4 (`phi3`): Pith's logits against a float64 torch forward written from transformers'
models/phi3/modeling_phi3.py (phi3_by_hand below), on tools/mkmodel.py's test-phi3 (Phi-4-mini-like: GQA,
tied embeddings, partial rotary 0.75, LongRoPE with original context 64 of 512) and test-phi3-plain
(Phi-3-mini-4k-like: no scaling, a sliding window of 16 on every layer).

First the reference itself: its RoPE (factors 1, whole head) and attention against tools/reference.py's,
written separately; the weights it reads from a GGUF file and a safetensors directory against mkmodel's
generator; and each feature moving the logits far beyond the tolerance (long against short factors,
LongRoPE against plain RoPE, the window against none), so that a loader dropping one cannot pass.

Then pith against it, printing each case's max error:
- F32 GGUF and safetensors ("float", 1e-4), from BOS (72 generated tokens: more than four windows of
  test-phi3-plain) and from a 77-token prompt prefilled with --max-batch-tokens 7 and in one chunk;
- test-phi3 with `-c 64` (the configured context within original_max_position_embeddings: the short
  factors; 48 tokens from BOS, and a 40-token prompt, PROMPT_SHORT, with 12 generated) and `-c 512`
  (beyond it: the long factors), every case above in both;
- Q8_0 and Q4_K_M GGUF within the quantized tolerances ("q32", "qk"), BF16 safetensors within "float"
  against the reference on the file's own (rounded) weights;
- pith's GGUF and safetensors F32 logits of one seed against each other;
- where a Vulkan device can run pith, the GGUF F32 cases again on the device (check_vulkan).

Pith chooses LongRoPE's list by the configured context, as llama.cpp does (model/phi3.c); transformers
switches by the longest position of each forward call, which agrees with the cases here since every
sequence stays within the context it was run with (short: at most 64 positions; long: the reference
uses the long factors throughout, as transformers does after its cache recomputation beyond 64).

Environment: PITH_BIN (pith binary), PITH_TEST_TMP (scratch). Exit 77 (skip) when torch or numpy is
missing."""

import json
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import test_reference_models as R  # noqa: E402  (exits 77 itself when torch or numpy is missing)

np, torch = R.np, R.torch
mkmodel, G, reference = R.mkmodel, R.G, R.reference
import mkmodel_phi3  # noqa: E402  (tools/, on the path through test_reference_models)

SEED = 3100
N_GEN_LONG = R.N_GEN_LONG          # 72 from BOS
N_GEN_PROMPT = R.N_GEN_PROMPT      # 12 after the 77-token prompt
N_GEN_SHORT = 48                   # from BOS within -c 64
PROMPT_SHORT = R.PROMPT_TEXT[:len(R.PROMPT_TEXT) // 2]   # 40 tokens, + 12 generated within -c 64
CROSS_FORMAT = 1e-4                # pith's F32 GGUF against its F32 safetensors (float rounding only)

PHI3_HF_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_qkv.weight": "self_attn.qkv_proj.weight",
                 "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
                 "ffn_up.weight": "mlp.gate_up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
PHI3_HF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}


def phi3_weights(cfg, seed=None, path=None):
    """Weights by canonical name as float64 tensors (None when absent): from mkmodel's generator (seed) or as
    stored (dequantized) in a GGUF file or a safetensors directory (path, Hugging Face names looked up in the
    table above, not in mkmodel's)."""
    if path is None:
        specs = {g: (shape, kind) for g, _, shape, kind in mkmodel.tensor_specs(cfg)}

        def fetch(name):
            return mkmodel.random_tensor(seed, name, *specs[name]) if name in specs else None
    elif path.endswith(".gguf"):
        r = G.GGUFReader(path)

        def fetch(name):
            return r.tensor(name) if name in r.tensors else None
    else:
        index = os.path.join(path, "model.safetensors.index.json")
        files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
                 else ["model.safetensors"])
        where = {}
        for fn in files:
            st = reference.SafetensorsFile(os.path.join(path, fn))
            where.update({name: st for name in st.header})

        def fetch(name):
            if name.startswith("blk."):
                _, layer, rest = name.split(".", 2)
                name = f"model.layers.{layer}.{PHI3_HF_LAYER[rest]}"
            else:
                name = PHI3_HF_GLOBAL[name]
            return where[name].tensor(name) if name in where else None

    def w(name):
        x = fetch(name)
        return None if x is None else torch.from_numpy(np.array(x, dtype=np.float64))
    return w


def phi3_rope(x, theta, rotary_dim, factors=None, attention_factor=1.0):
    """x [T, heads, head_dim] at positions 0..T-1, as modeling_phi3.py's apply_rotary_pos_emb: the first
    rotary_dim dimensions rotate (x cos + rotate_half(x) sin over that part), the rest pass; inverse
    frequencies 1 / (factors * theta^(arange(0, d, 2) / d)) and cos, sin times attention_factor, as
    modeling_rope_utils.py's _compute_longrope_parameters (factors None: the default RoPE)."""
    T, d = x.shape[0], rotary_dim
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    if factors is not None:
        inv = inv / torch.tensor(np.asarray(factors, dtype=np.float64))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)[:, None, :]
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    rot, rest = x[..., :d], x[..., d:]
    rotated = rot * cos + torch.cat([-rot[..., d // 2:], rot[..., :d // 2]], -1) * sin
    return torch.cat([rotated, rest], -1)


def phi3_attention(q, k, v, window=None):
    """Causal GQA attention (repeat_kv), q [T, H, hd], k and v [T, KV, hd], scores * head_dim^-0.5; with a
    window, query p sees keys [p - window + 1, p] (masking_utils' sliding window: kv > q - window)."""
    T, H, hd = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = ki <= qi
    if window:
        allowed = allowed & (ki > qi - window)
    mask = torch.where(allowed, torch.zeros((), dtype=torch.float64), torch.tensor(float("-inf"), dtype=torch.float64))
    a = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5 + mask, dim=-1)
    return torch.einsum("hqk,khd->qhd", a, v)


def longrope(cfg, long):
    """(factors, attention factor) of the list in use, or (None, 1) without LongRoPE."""
    if cfg.rope_scaling != "longrope":
        return None, 1.0
    short, lng = mkmodel_phi3.longrope_factors(cfg)
    return (lng if long else short), mkmodel_phi3.attn_factor(cfg)


def phi3_by_hand(cfg, w, tokens, long=True, kv_f16=False, rope="file", window="file"):
    """Phi-3 in torch float64, from modeling_phi3.py: Phi3RMSNorm is w * x * rsqrt(mean(x^2) + eps);
    Phi3Attention splits qkv_proj(x) into q (heads x head_dim), k and v (kv_heads x head_dim each), RoPE
    (partial, LongRoPE's short or long factors), causal attention (sliding window when the config has one),
    o_proj; Phi3DecoderLayer: h = x + attn(input_layernorm(x)), out = h + mlp(post_attention_layernorm(h))
    with Phi3MLP: gate, up = gate_up_proj(x).chunk(2), down(up * silu(gate)); the final norm, then lm_head
    (the embedding when tied). long picks LongRoPE's list; kv_f16 rounds the cached K (after RoPE) and V to
    float16 as pith run's default cache. rope="plain" / window=None drop the file's LongRoPE / window (only
    to show that the cases tell them apart)."""
    T, H, KV, hd = len(tokens), cfg.heads, cfg.kv_heads, cfg.head_dim
    q_dim, kv_dim = H * hd, KV * hd
    factors, attn = longrope(cfg, long) if rope == "file" else (None, 1.0)
    win = cfg.sliding_window if window == "file" else window

    def norm(x, weight):
        return weight * (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + cfg.eps))

    x = w("token_embd.weight")[torch.tensor(tokens)]
    for i in range(cfg.layers):
        b = f"blk.{i}."
        qkv = norm(x, w(b + "attn_norm.weight")) @ w(b + "attn_qkv.weight").T
        q, k, v = qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]
        q = phi3_rope(q.reshape(T, H, hd), cfg.theta, mkmodel_phi3.rope_dim(cfg), factors, attn)
        k = phi3_rope(k.reshape(T, KV, hd), cfg.theta, mkmodel_phi3.rope_dim(cfg), factors, attn)
        v = v.reshape(T, KV, hd)
        if kv_f16:
            k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
        x = x + phi3_attention(q, k, v, win).reshape(T, q_dim) @ w(b + "attn_output.weight").T
        gu = norm(x, w(b + "ffn_norm.weight")) @ w(b + "ffn_up.weight").T
        gate, up = gu[:, :cfg.ffn], gu[:, cfg.ffn:]
        x = x + (up * torch.nn.functional.silu(gate)) @ w(b + "ffn_down.weight").T
    out = w("output.weight")
    return (norm(x, w("output_norm.weight")) @ (w("token_embd.weight") if out is None else out).T).numpy()


def check_reference(tmp):
    """The reference before pith: RoPE and attention against tools/reference.py's, the files' weights
    against the generator's, each feature moving the logits."""
    rng = np.random.default_rng(31)
    x = torch.tensor(rng.standard_normal((20, 4, 64)))
    err = float((phi3_rope(x, 1e4, 64) - reference.rope(x, torch.arange(20), 1e4, "half", None)).abs().max())
    # partial: only the first 48 dimensions turn, by tools/reference.py's RoPE of a 48-wide head
    part = phi3_rope(x, 1e4, 48)
    err = max(err, float((part[..., :48] - reference.rope(x[..., :48], torch.arange(20), 1e4, "half", None))
                         .abs().max()), float((part[..., 48:] - x[..., 48:]).abs().max()))
    # factors: dividing every frequency by f is reference.rope's divisors; the attention factor scales cos, sin
    f = np.linspace(1.0, 3.0, 32)
    err = max(err, float((phi3_rope(x, 1e4, 64, f, 1.5) - 1.5 * reference.rope(
        x, torch.arange(20), 1e4, "half", torch.tensor(f))).abs().max()))
    q, k, v = torch.tensor(rng.standard_normal((20, 4, 16))), *(torch.tensor(rng.standard_normal((20, 2, 16)))
                                                               for _ in range(2))
    for window in (None, 5):
        want = reference.attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                   reference.causal_mask(20, window), 4.0)
        err = max(err, float((phi3_attention(q, k, v, window) - want).abs().max()))
    print(f"phi3: RoPE (whole, partial, factors) and attention (with and without a window) vs "
          f"tools/reference.py's: max |diff| {err:.1e}")
    if err > 1e-12:
        R.fail(f"phi3: the reference's RoPE or attention differs from tools/reference.py's by {err:.2e}")
    tokens = [mkmodel.BOS_ID] + [int(t) for t in np.random.default_rng(32).integers(3, 512, N_GEN_LONG - 1)]
    for preset in ("test-phi3", "test-phi3-plain"):
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"w-{preset}.gguf"), os.path.join(tmp, f"w-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=SEED)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=SEED, shards=2)
        gen = phi3_weights(cfg, seed=SEED)
        base = phi3_by_hand(cfg, gen, tokens)
        for fmt, path in (("gguf", gpath), ("safetensors", spath)):
            err = float(np.abs(phi3_by_hand(cfg, phi3_weights(cfg, path=path), tokens) - base).max())
            print(f"{preset}: reference on the {fmt} file vs on the generator's weights: {err:.1e}")
            if err > 0:
                R.fail(f"{preset}: the {fmt} file's weights differ from the generator's ({err:.2e} in the logits)")
        if cfg.rope_scaling == "longrope":
            R.moved("phi3 LongRoPE long vs short factors", base, phi3_by_hand(cfg, gen, tokens, long=False))
            R.moved("phi3 LongRoPE (short) vs plain RoPE", phi3_by_hand(cfg, gen, tokens, long=False),
                    phi3_by_hand(cfg, gen, tokens, rope="plain"))
        if cfg.sliding_window:
            R.moved("phi3 sliding window vs none", base, phi3_by_hand(cfg, gen, tokens, window=None))


def contexts(cfg):
    """(label, -c value, long factors, tokens from BOS, prompt) for each configured context a preset is run
    with."""
    if cfg.rope_scaling == "longrope":
        return [(f"c{cfg.rope_orig_ctx} short", cfg.rope_orig_ctx, False, N_GEN_SHORT, PROMPT_SHORT),
                (f"c{cfg.ctx} long", cfg.ctx, True, N_GEN_LONG, R.PROMPT_TEXT)]
    return [("", cfg.ctx, True, N_GEN_LONG, R.PROMPT_TEXT)]


def check_pith(pith, tmp):
    seed = SEED
    for preset in ("test-phi3", "test-phi3-plain"):
        cfg = mkmodel.build_config(preset)
        f32 = {}
        for fmt, dtype in (("gguf", "F32"), ("safetensors", "F32"), ("gguf", "Q8_0"), ("gguf", "Q4_K_M"),
                           ("safetensors", "BF16")):
            model, tok, n_vocab = R.make_model(tmp, preset, fmt, dtype, seed)
            w = phi3_weights(cfg, path=model)
            for label, ctx, long, n_bos, prompt in contexts(cfg):
                if dtype not in ("F32",) and long is False:
                    continue   # the quantized and BF16 files: the long list (the trained context) only
                name = f"{preset} {fmt} {dtype}{' ' + label if label else ''}"
                c = ("-c", str(ctx))

                def ref(toks, kv_f16, w=w, long=long):
                    return phi3_by_hand(cfg, w, toks, long=long, kv_f16=kv_f16)
                R.compare(pith, tmp, name, model, tok, n_vocab, R.tolerance_kind(dtype), n_gen=n_bos, extra=c,
                          ref_fn=ref)
                if dtype != "F32":
                    continue
                f32[(fmt, ctx)] = (model, tok)
                if fmt == "gguf":
                    R.compare(pith, tmp, name + " kv-f16", model, tok, n_vocab, "float-kv16", kv_f32=False,
                              n_gen=n_bos, extra=c, ref_fn=ref)
                for chunk in (7, 2048):
                    R.compare(pith, tmp, f"{name} prompt/{chunk}", model, tok, n_vocab, "float", n_gen=N_GEN_PROMPT,
                              prompt=prompt, extra=c + ("--max-batch-tokens", str(chunk)), ref_fn=ref)
        # pith's two F32 formats of one seed, from BOS and from the prompt in chunks of 7
        for label, ctx, _, n_bos, prompt in contexts(cfg):
            for what, kw in (("from BOS", dict(n_gen=n_bos, extra=("-c", str(ctx)))),
                             ("prompt/7", dict(n_gen=N_GEN_PROMPT, prompt=prompt,
                                               extra=("-c", str(ctx), "--max-batch-tokens", "7")))):
                runs = [R.pith_logits(pith, tmp, f"{preset} {fmt} F32 {what}", *f32[(fmt, ctx)], cfg.vocab, **kw)
                        for fmt in ("gguf", "safetensors")]
                if None in runs:
                    continue
                (pa, a), (pb, b) = runs
                err = float(np.abs(a - b).max())
                print(f"{preset}{' ' + label if label else ''}: pith GGUF vs safetensors F32, {what}: max |diff| "
                      f"{err:.1e} (bound {CROSS_FORMAT:g})")
                if pa != pb or err > CROSS_FORMAT:
                    R.fail(f"{preset}: pith's GGUF and safetensors logits differ by {err:.2e} {what}")
        seed += 1


def check_vulkan(pith, tmp):
    """The GGUF F32 files of test-phi3 (LongRoPE past the original context, partial rotary) and
    test-phi3-plain (its window) on the first Vulkan device, when there is one, in every context of
    contexts() from BOS and from the prompt in chunks of 7, against the same reference with the float
    tolerance (every F32 case on the device: test_vulkan_models.py)."""
    import subprocess
    r = subprocess.run([pith, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if b"vulkan:0" not in r.stdout:
        print("note: no Vulkan device; the phi3 cases ran on the CPU only")
        return
    old = os.environ.get("PITH_DEVICE")
    os.environ["PITH_DEVICE"] = "vulkan"
    try:
        for preset in ("test-phi3", "test-phi3-plain"):
            cfg = mkmodel.build_config(preset)
            model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", SEED + 50)
            w = phi3_weights(cfg, path=model)
            for label, ctx, long, n_bos, prompt in contexts(cfg):
                name = f"{preset} gguf F32 vulkan{' ' + label if label else ''}"
                c = ("-c", str(ctx))

                def ref(toks, kv_f16, w=w, long=long):
                    return phi3_by_hand(cfg, w, toks, long=long, kv_f16=kv_f16)
                R.compare(pith, tmp, name, model, tok, n_vocab, "float", n_gen=n_bos, extra=c, ref_fn=ref)
                R.compare(pith, tmp, f"{name} prompt/7", model, tok, n_vocab, "float", n_gen=N_GEN_PROMPT,
                          prompt=prompt, extra=c + ("--max-batch-tokens", "7"), ref_fn=ref)
    finally:
        if old is None:
            del os.environ["PITH_DEVICE"]
        else:
            os.environ["PITH_DEVICE"] = old


def main():
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.access(pith, os.X_OK):
        print(f"FAIL: PITH_BIN ({pith!r}) is not an executable pith binary")
        return 1
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ref-phi3-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference(tmp)
        check_pith(pith, tmp)
        check_vulkan(pith, tmp)
    print(f"{time.time() - t0:.0f} s")
    if R.failures:
        print(f"{len(R.failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
