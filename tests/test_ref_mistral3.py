"""Mistral 3 (GGUF arch mistral3; Hugging Face Ministral3ForCausalLM and Mistral3ForConditionalGeneration)
against its own float64 reference, mistral3_by_hand, written in torch from transformers'
models/ministral3/modeling_ministral3.py (Ministral3Attention, _get_llama_4_attn_scale,
Ministral3RotaryEmbedding with modeling_rope_utils' _compute_yarn_parameters, Ministral3RMSNorm,
Ministral3MLP, Ministral3DecoderLayer, Ministral3ForCausalLM).

First the reference itself: its YaRN frequencies against tools/reference.py's yarn_freqs; with the
temperature off, the whole forward against tools/reference.py on a llama safetensors directory of the same
weights and YaRN (the same function, written separately); the temperature moving the logits by far more
than the tolerance; the weights of each file (GGUF F32, whose Q and K rows are permuted for adjacent-pair
RoPE, and every safetensors layout) equal to the generator's.

Then pith against it on test-mistral3 (YaRN x16 over an original context of 32, temperature beta 0.1, so
the factor steps at positions 32 and 64): GGUF F32 (F32 and F16 KV cache), Q8_0 and Q4_K; safetensors F32
as Mistral3ForConditionalGeneration (transformers v5 names), BF16 sharded, F32 in the transformers 4.x
layout (language_model.model.*) and as a text-only Ministral3ForCausalLM; 72 tokens from BOS, and the
77-token prompt prefilled in chunks of 7 and in one, in both F32 formats; plus the same shape without YaRN
or temperature (Mistral Small 3.x's text model). Pith's GGUF and safetensors F32 logits of one seed must
agree with each other. Where `pith devices` lists a Vulkan device, the F32 cases run there too (the
temperature is the backend's attn_temp op, a shader of its own there). Every case prints its measured max
error.

Environment: PITH_BIN, PITH_TEST_TMP. Exit 77 (skip) when torch or numpy is missing."""

import json
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skip: {e.name} is not importable (the float64 reference needs numpy and torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import test_reference_models as R  # noqa: E402  (its main() is guarded)
from test_reference_models import G, mkmodel, reference  # noqa: E402

PRESET = "test-mistral3"
SEED = 3100
# Hugging Face names after the text model's "model." / "model.layers.N." (modeling_ministral3.py), by
# canonical (GGUF) name: this test's own table, not mkmodel's.
HF_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
            "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
            "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
            "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
            "ffn_down.weight": "mlp.down_proj.weight"}
HF_GLOBAL = {"token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight"}


def unpermute(w, n_heads):
    """llama.cpp's converter's Q/K permutation undone: adjacent pairs (2i, 2i + 1) back to (i, i + d/2)."""
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def weights(cfg, seed=None, path=None):
    """Canonical name -> float64 tensor in Hugging Face layout (None for an absent output.weight): from
    mkmodel's generator (seed), a GGUF file (dequantized, Q/K un-permuted) or a safetensors directory in any
    of the layouts (model.X, model.language_model.X, language_model.model.X)."""
    if path is None:
        specs = {g: (shape, kind) for g, _, shape, kind in mkmodel.tensor_specs(cfg)}

        def fetch(name):
            return mkmodel.random_tensor(seed, name, *specs[name]) if name in specs else None
    elif path.endswith(".gguf"):
        r = G.GGUFReader(path)

        def fetch(name):
            if name not in r.tensors:
                return None
            x = np.array(r.tensor(name), dtype=np.float64)
            if name.endswith(("attn_q.weight", "attn_k.weight")):
                x = unpermute(x, cfg.heads if "attn_q" in name else cfg.kv_heads)
            return x
    else:
        index = os.path.join(path, "model.safetensors.index.json")
        files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
                 else ["model.safetensors"])
        where = {}
        for fn in files:
            st = reference.SafetensorsFile(os.path.join(path, fn))
            where.update({name: st for name in st.header})
        text = ("model.language_model." if any(n.startswith("model.language_model.") for n in where) else
                "language_model.model." if any(n.startswith("language_model.model.") for n in where) else "model.")
        head = "language_model.lm_head.weight" if text == "language_model.model." else "lm_head.weight"

        def fetch(name):
            if name == "output.weight":
                hname = head
            elif name.startswith("blk."):
                _, layer, rest = name.split(".", 2)
                hname = f"{text}layers.{layer}.{HF_LAYER[rest]}"
            else:
                hname = text + HF_GLOBAL[name]
            return where[hname].tensor(hname) if hname in where else None

    def w(name):
        x = fetch(name)
        return None if x is None else torch.from_numpy(np.array(x, dtype=np.float64))
    return w


def yarn_inv_freq(cfg, hd):
    """_compute_yarn_parameters (modeling_rope_utils.py) in float64: (inv_freq, attention_factor) for
    rope_parameters {factor, original_max_position_embeddings, beta_fast 32, beta_slow 1, mscale 1,
    mscale_all_dim 1}, truncate (default true)."""
    base, factor, orig = cfg.theta, cfg.rope_factor, cfg.rope_orig_ctx

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
    attention_factor = get_mscale(factor, 1.0) / get_mscale(factor, 1.0)

    def correction_dim(rot):
        return hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = math.floor(correction_dim(32.0)), math.ceil(correction_dim(1.0))
    low, high = max(low, 0), min(high, hd - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    extrapolation_factor = 1 - torch.clamp((torch.arange(hd // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    inv = (1 / (factor * pos_freqs)) * (1 - extrapolation_factor) + (1 / pos_freqs) * extrapolation_factor
    return inv, attention_factor


def mistral3_by_hand(cfg, w, tokens, kv_f16=False, beta=None, mscale=None):
    """Ministral 3 in torch float64 from modeling_ministral3.py: RMSNorm x * rsqrt(mean(x^2) + eps) * w;
    per layer h = input_layernorm(x), q/k/v projections, rotate-half RoPE with cos and sin times the YaRN
    attention factor (or plain RoPE without YaRN), then q *= 1 + beta * log(1 + floor(p / original_max)),
    causal GQA attention with scores / sqrt(head_dim), o_proj into the residual; post_attention_layernorm,
    down(silu(gate) * up) into the residual; the final norm and lm_head (the embedding when tied).
    beta: the temperature (None: the config's); mscale overrides the attention factor (the llama check).
    kv_f16 rounds cached keys (after RoPE) and values to float16, as pith run's default cache."""
    T, H, KV, hd = len(tokens), cfg.heads, cfg.kv_heads, cfg.head_dim
    beta = (cfg.attn_temp_beta or 0.0) if beta is None else beta
    pos = torch.arange(T, dtype=torch.float64)
    if cfg.rope_scaling == "yarn":
        inv, af = yarn_inv_freq(cfg, hd)
    else:
        inv, af = 1.0 / cfg.theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd), 1.0
    af = af if mscale is None else mscale
    ang = pos[:, None] * inv[None, :]
    cos = (torch.cat([ang.cos(), ang.cos()], -1) * af)[:, None, :]
    sin = (torch.cat([ang.sin(), ang.sin()], -1) * af)[:, None, :]

    def rope(x):
        return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    temp = (1 + beta * torch.log(1 + torch.floor(pos / cfg.rope_orig_ctx)))[:, None, None] if beta else None

    def norm(x, weight):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + cfg.eps) * weight

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = w("token_embd.weight")[torch.tensor(tokens)]
    for i in range(cfg.layers):
        b = f"blk.{i}."
        h = norm(x, w(b + "attn_norm.weight"))
        q, k, v = (h @ w(b + n + ".weight").T for n in ("attn_q", "attn_k", "attn_v"))
        q, k, v = rope(q.view(T, H, hd)), rope(k.view(T, KV, hd)), v.view(T, KV, hd)
        if temp is not None:
            q = q * temp
        if kv_f16:
            k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        a = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask, dim=-1)
        x = x + torch.einsum("hqk,khd->qhd", a, v).reshape(T, H * hd) @ w(b + "attn_output.weight").T
        h = norm(x, w(b + "ffn_norm.weight"))
        f = torch.nn.functional.silu(h @ w(b + "ffn_gate.weight").T) * (h @ w(b + "ffn_up.weight").T)
        x = x + f @ w(b + "ffn_down.weight").T
    out = w("output.weight")
    return (norm(x, w("output_norm.weight")) @ (w("token_embd.weight") if out is None else out).T).numpy()


def check_reference(tmp):
    cfg = mkmodel.build_config(PRESET)
    inv, af = yarn_inv_freq(cfg, cfg.head_dim)
    want, _ = reference.yarn_freqs(cfg.theta, cfg.head_dim, dict(factor=cfg.rope_factor, orig=cfg.rope_orig_ctx,
                                                                 beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                                                 truncate=True))
    err = float((inv - want).abs().max() / want.abs().max())
    print(f"mistral3: YaRN frequencies vs tools/reference.py's: max relative |diff| {err:.1e}; attention factor {af}")
    if err > 1e-15 or af != 1.0:
        R.fail(f"mistral3: the reference's YaRN differs from tools/reference.py's ({err:.2e}, factor {af})")
    tokens = [1] + list(np.random.default_rng(31).integers(3, 512, R.N_GEN_LONG - 1))
    gen = weights(cfg, seed=SEED)
    # (a) no temperature: tools/reference.py on a llama safetensors directory of the same weights and YaRN
    # (its attention factor 1 + 0.1 ln factor, transformers' default without mscale keys).
    llama = mkmodel.build_config("test-llama", dim=cfg.dim, layers=cfg.layers, heads=cfg.heads, kv_heads=cfg.kv_heads,
                                 head_dim=cfg.head_dim, ffn=cfg.ffn, vocab=cfg.vocab, theta=cfg.theta, ctx=cfg.ctx,
                                 eps=cfg.eps, tied=cfg.tied, rope_scaling="yarn", rope_factor=cfg.rope_factor,
                                 rope_orig_ctx=cfg.rope_orig_ctx)
    lpath = os.path.join(tmp, "m3-as-llama-st")
    mkmodel.write_safetensors(llama, lpath, "F32", seed=SEED)
    lm = reference.forward(reference.Model(lpath), tokens).numpy()
    mine = mistral3_by_hand(cfg, gen, tokens, beta=0.0, mscale=1 + 0.1 * math.log(cfg.rope_factor))
    err = float(np.abs(lm - mine).max())
    print(f"mistral3: reference without temperature vs tools/reference.py's llama+YaRN: max |diff| {err:.1e}")
    if err > 1e-9:
        R.fail(f"mistral3: the reference without temperature differs from tools/reference.py's by {err:.2e}")
    base = mistral3_by_hand(cfg, gen, tokens)
    R.moved("mistral3 attention temperature (beta 0.1 vs none)", base, mistral3_by_hand(cfg, gen, tokens, beta=0.0))
    R.moved("mistral3 YaRN attention factor 1 (vs 1 + 0.1 ln 16)", base,
            mistral3_by_hand(cfg, gen, tokens, mscale=1 + 0.1 * math.log(cfg.rope_factor)))
    # (b) every file's weights are the generator's
    for name, c, fmt in (("gguf", cfg, "gguf"), ("multimodal", cfg, "st"),
                         ("multimodal-legacy", mkmodel.build_config(PRESET, hf_type="multimodal-legacy"), "st"),
                         ("text-only", text_only_config(), "st")):
        path = os.path.join(tmp, f"m3-w-{name}" + (".gguf" if fmt == "gguf" else "-st"))
        if fmt == "gguf":
            mkmodel.write_gguf(c, path, "F32", seed=SEED)
        else:
            mkmodel.write_safetensors(c, path, "F32", seed=SEED, shards=2)
        err = float(np.abs(mistral3_by_hand(c, weights(c, path=path), tokens) - base).max())
        print(f"mistral3: reference on the {name} file vs on the generator's weights: {err:.1e}")
        if err > 0:
            R.fail(f"mistral3: the {name} file's weights differ from the generator's ({err:.2e} in the logits)")


def text_only_config():
    c = mkmodel.build_config(PRESET)
    c.hf_type = None   # Ministral3ForCausalLM, the text config at the top level
    return c


def make(tmp, cfg, tag, fmt, dtype, seed):
    if fmt == "gguf":
        model = os.path.join(tmp, f"m3-{tag}-{dtype}.gguf")
        mkmodel.write_gguf(cfg, model, dtype, seed=seed)
        return model, None
    model = os.path.join(tmp, f"m3-{tag}-{dtype}-st")
    mkmodel.write_safetensors(cfg, model, dtype, seed=seed, shards=2 if dtype == "BF16" else 1)
    return model, os.path.join(model, "tokenizer.bin")


def check_pith(pith, tmp):
    cfg = mkmodel.build_config(PRESET)
    cases = [("gguf", "F32", cfg, "mm"), ("gguf", "Q8_0", cfg, "mm"), ("gguf", "Q4_K", cfg, "mm"),
             ("safetensors", "F32", cfg, "mm"), ("safetensors", "BF16", cfg, "mm"),
             ("safetensors", "F32", mkmodel.build_config(PRESET, hf_type="multimodal-legacy"), "legacy"),
             ("safetensors", "F32", text_only_config(), "text")]
    f32 = {}
    for fmt, dtype, c, tag in cases:
        model, tok = make(tmp, c, tag, fmt, dtype, SEED)
        w = weights(c, path=model)

        def ref(toks, kv_f16, w=w, c=c):
            return mistral3_by_hand(c, w, toks, kv_f16=kv_f16)
        name = f"{PRESET} {fmt} {dtype}" + ("" if tag == "mm" else f" {tag}")
        R.compare(pith, tmp, name, model, tok, c.vocab, R.tolerance_kind(dtype), n_gen=R.N_GEN_LONG, ref_fn=ref)
        if dtype != "F32" or tag != "mm":
            continue
        f32[fmt] = (model, tok)
        if fmt == "gguf":
            R.compare(pith, tmp, name + " kv-f16", model, tok, c.vocab, "float-kv16", kv_f32=False, n_gen=R.N_GEN_LONG,
                      ref_fn=ref)
        for chunk in (7, 2048):
            R.compare(pith, tmp, f"{name} prompt/{chunk}", model, tok, c.vocab, "float", n_gen=R.N_GEN_PROMPT,
                      prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)), ref_fn=ref)
    # Mistral Small 3.x's text model: no YaRN, no temperature (a plain Llama under this descriptor).
    plain = mkmodel.build_config(PRESET, rope_scaling="none", attn_temp_beta=0.0)
    for fmt in ("gguf", "safetensors"):
        model, tok = make(tmp, plain, "plain", fmt, "F32", SEED + 1)
        w = weights(plain, path=model)
        R.compare(pith, tmp, f"{PRESET} {fmt} F32 no yarn/temperature", model, tok, plain.vocab, "float",
                  n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", "7"),
                  ref_fn=lambda toks, kv_f16, w=w: mistral3_by_hand(plain, w, toks, kv_f16=kv_f16))
    # Pith's two F32 formats of one seed against each other.
    for what, kw in (("from BOS", dict(n_gen=R.N_GEN_LONG)),
                     ("prompt/7", dict(n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", "7")))):
        runs = [R.pith_logits(pith, tmp, f"{PRESET} {fmt} F32 {what}", *f32[fmt], cfg.vocab, **kw)
                for fmt in ("gguf", "safetensors")]
        if None in runs:
            continue
        (pa, a), (pb, b) = runs
        err = float(np.abs(a - b).max())
        bound = R.TOLERANCES["float"][0]
        print(f"{PRESET}: pith GGUF vs safetensors F32, {what}: max |diff| {err:.1e} (bound {bound:g})")
        if pa != pb or err > bound:
            R.fail(f"{PRESET}: pith's GGUF and safetensors logits differ by {err:.2e} {what}")


def check_vulkan(pith, tmp):
    """The F32 cases on the first Vulkan device, when there is one (PITH_DEVICE, read by pith run)."""
    r = subprocess.run([pith, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if b"vulkan:0" not in r.stdout:
        print("note: no Vulkan device; the mistral3 cases ran on the CPU only")
        return
    cfg = mkmodel.build_config(PRESET)
    old = os.environ.get("PITH_DEVICE")
    os.environ["PITH_DEVICE"] = "vulkan"
    try:
        for fmt in ("gguf", "safetensors"):
            model, tok = make(tmp, cfg, "vk", fmt, "F32", SEED)
            w = weights(cfg, path=model)

            def ref(toks, kv_f16, w=w):
                return mistral3_by_hand(cfg, w, toks, kv_f16=kv_f16)
            R.compare(pith, tmp, f"{PRESET} {fmt} F32 vulkan", model, tok, cfg.vocab, "float", n_gen=R.N_GEN_LONG,
                      ref_fn=ref)
            R.compare(pith, tmp, f"{PRESET} {fmt} F32 vulkan prompt/7", model, tok, cfg.vocab, "float",
                      n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", "7"), ref_fn=ref)
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
    with tempfile.TemporaryDirectory(prefix="ref-mistral3-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference(tmp)
        check_pith(pith, tmp)
        check_vulkan(pith, tmp)
    print(f"{time.time() - t0:.1f} s")
    if R.failures:
        print(f"{len(R.failures)} failure(s)")
        return 1
    print("all mistral3 reference checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
