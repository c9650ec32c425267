"""Gemma 4 (text): pith's logits against a float64 torch reference written from transformers'
models/gemma4/modeling_gemma4.py (Gemma4TextModel, Gemma4TextDecoderLayer, Gemma4TextAttention,
Gemma4RMSNorm, Gemma4TextRotaryEmbedding with modeling_rope_utils' _compute_proportional_rope_parameters,
Gemma4ForCausalLM's soft-cap), on tools/mkmodel.py's test-gemma4 (window layers with heads of 64 and 2 KV
heads, global layers with heads of 128, 1 KV head and V = K, proportional RoPE, layer scalars, soft-cap 30),
test-gemma4-mm (the same as Gemma4ForConditionalGeneration) and test-gemma4-e (the E2B / E4B kind:
per-layer embeddings of 128 per layer, the last three layers sharing the K and V of layers 1 and 2, their
FFN twice as wide) and test-gemma4-moe (the 26B-A4B kind: every layer's dense MLP beside 8 routed experts,
2 per token: Gemma4TextRouter's norm, scale, softmax, renormalised top k and per-expert scales, and
Gemma4TextExperts' GELU-tanh experts, each branch post-normed and the sum post-normed again).

First the reference itself: its local RoPE and attention against tools/reference.py's (written
separately), and the weights it reads from a GGUF file and a safetensors directory of one seed against the
generator's; the V norm, the proportional RoPE and the layer scalars each move its logits by far more than
the tolerance (so the cases could not pass with one of them dropped). Then pith against it: GGUF F32 (F32
and F16 cache), Q8_0 and Q4_K_M, safetensors F32 and BF16, the multimodal layout F32, from BOS (72 tokens:
more than four windows of 16) and from a 77-token prompt prefilled in chunks of 7 and in one; and pith's
GGUF and safetensors F32 logits of one seed against each other. Then, where a Vulkan device can run pith,
test-gemma4, test-gemma4-e and test-gemma4-moe GGUF F32 on it (from BOS and from the prompt in chunks of 7, to the float
tolerance), and test-gemma4-e's replayed decode steps against steps recorded every time, bit for bit.
Each case prints its measured max error.

Environment: PITH_BIN (pith binary), PITH_TEST_TMP (scratch). Exit 77 (skip) when torch or numpy is
missing."""

import math
import os
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
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import mkmodel_gemma4  # noqa: E402
import pith_gguf as G  # noqa: E402
import reference  # noqa: E402
import test_reference_models as trm  # noqa: E402  (its main() runs only as a script)

PRESET = "test-gemma4"
MM_PRESET = "test-gemma4-mm"
E_PRESET = "test-gemma4-e"
MOE_PRESET = "test-gemma4-moe"
GGUF_TYPES = ["F32", "Q8_0", "Q4_K_M"]
ST_TYPES = ["F32", "BF16"]
CROSS_FORMAT = trm.TOLERANCES["float"][0]


def expert_weights(cfg, w, i):
    """Layer i's expert matrices [experts, rows, cols] (gate, up, down): from the per-expert generator
    names, GGUF's 3-D ffn_{gate,up,down}_exps, or the Hugging Face fused gate_up_proj / down_proj."""
    b = f"blk.{i}."
    g = w(b + "ffn_gate_exps.weight")
    if g is not None:
        return g, w(b + "ffn_up_exps.weight"), w(b + "ffn_down_exps.weight")
    gu = w(b + "experts.gate_up_proj")
    if gu is not None:
        F = cfg.expert_ffn
        return gu[:, :F], gu[:, F:], w(b + "experts.down_proj")
    return tuple(torch.stack([w(b + f"ffn_{k}.{e}.weight") for e in range(cfg.experts)]) for k in ("gate", "up", "down"))


def weights(cfg, seed=None, path=None):
    """Weights by canonical name as float64 tensors (None when absent): from mkmodel's generator (seed), a
    GGUF file or a safetensors directory (path; Hugging Face names from mkmodel_gemma4's table)."""
    specs = {g: (h, shape, kind) for g, h, shape, kind in mkmodel.tensor_specs(cfg)}
    if path is None:
        def fetch(name):
            return mkmodel.random_tensor(seed, name, *specs[name][1:]) if name in specs else None
    elif path.endswith(".gguf"):
        r = G.GGUFReader(path)

        def fetch(name):
            return r.tensor(name) if name in r.tensors else None
    else:
        import json
        where = {}
        index = os.path.join(path, "model.safetensors.index.json")
        files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
                 else ["model.safetensors"])
        for fn in files:
            st = reference.SafetensorsFile(os.path.join(path, fn))
            where.update({name: st for name in st.header})

        def fetch(name):
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):   # blk.i.experts.*
                i = name.split(".")[1]
                h = f"model.layers.{i}." + name.split(".", 2)[2]
                if h not in where:
                    h = "model.language_model." + h[len("model."):]
                return where[h].tensor(h).reshape(where[h].header[h]["shape"]) if h in where else None
            if name not in specs:
                return None
            h = specs[name][0]
            if h not in where and h.startswith("model."):
                h = "model.language_model." + h[len("model."):]
            return where[h].tensor(h).reshape(specs[name][1]) if h in where else None

    def w(name):
        x = fetch(name)
        return None if x is None else torch.from_numpy(np.array(x, dtype=np.float64))
    return w


def rope(x, inv):
    """apply_rotary_pos_emb (rotate_half) on x [T, heads, hd] at positions 0..T-1, frequencies inv [hd/2]."""
    T, hd = x.shape[0], x.shape[-1]
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :], torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin


def default_inv(theta, hd):
    return 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)


def proportional_inv(theta, hd, partial, factor=1.0):
    """_compute_proportional_rope_parameters: rope_angles = int(partial * hd // 2) pairs at
    theta^(-2i / hd), the other hd / 2 - rope_angles at 0; all divided by factor."""
    angles = int(partial * hd // 2)
    inv = torch.zeros(hd // 2, dtype=torch.float64)
    inv[:angles] = 1.0 / theta ** (torch.arange(0, 2 * angles, 2, dtype=torch.float64) / hd)
    return inv / factor


def attention(q, k, v, window):
    """eager attention, scaling 1.0: q [T, H, hd], k and v [T, KV, hd] (repeat_kv), causal, and for a
    sliding layer key j visible from query i when i - window < j (sliding_window_causal_mask)."""
    T, H, _ = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    ok = (j <= i) & ((j > i - window) if window else True)
    mask = torch.where(ok, 0.0, float("-inf")).to(torch.float64)
    a = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) + mask, dim=-1)
    return torch.einsum("hqk,khd->qhd", a, v)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def moe(cfg, w, i, r, expert_scales=True, router_apart=True):
    """Gemma4TextRouter and Gemma4TextExperts on the residual r [T, hidden]: the router reads RMSNorm(r)
    (no weight) * router.scale * hidden^-1/2, softmax over all experts, the top k renormalised to one and
    times router.per_expert_scale of each; the experts read pre_feedforward_layernorm_2(r), each
    down(gelu_tanh(gate x) * up x) weighted. router_apart=False routes on the experts' input instead."""
    b = f"blk.{i}."

    def norm(x, weight=None):
        y = x * torch.pow((x * x).mean(dim=-1, keepdim=True) + cfg.eps, -0.5)
        return y if weight is None else y * weight
    xe = norm(r, w(b + "pre_ffw_norm_2.weight"))
    xr = norm(r) * w(b + "ffn_gate_inp.scale") * cfg.dim ** -0.5 if router_apart else xe
    probs = torch.softmax(xr @ w(b + "ffn_gate_inp.weight").T, dim=-1)
    top_w, top_i = torch.topk(probs, cfg.experts_used, dim=-1)
    top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    if expert_scales:
        top_w = top_w * w(b + "ffn_down_exps.scale")[top_i]
    gate, up, down = expert_weights(cfg, w, i)
    out = torch.zeros_like(r)
    for t in range(r.shape[0]):
        for j in range(cfg.experts_used):
            e = int(top_i[t, j])
            h = gelu_tanh(gate[e] @ xe[t]) * (up[e] @ xe[t])
            out[t] += top_w[t, j] * (down[e] @ h)
    return out


def by_hand(cfg, w, tokens, kv_f16=False, v_norm=True, proportional=True, scalars=True, ple=True, sharing=True,
            expert_scales=True, router_apart=True):
    """Gemma 4 text in float64. Gemma4RMSNorm: x * (mean(x^2) + eps)^-1/2 * w (no 1 + w; V's without a
    weight). Embeddings times sqrt(hidden) (exact for hidden 256 in every dtype). Per layer: q_norm / k_norm
    per head, RoPE (sliding: default over head_dim at the local base; full: proportional over
    global_head_dim), v_norm, attention with scaling 1, o_proj, post_attention_layernorm, residual;
    pre_feedforward_layernorm, down(gelu_tanh(gate) * up), post_feedforward_layernorm, residual; then times
    layer_scalar. Per-layer embeddings (Gemma4TextModel.get_per_layer_inputs / project_per_layer_inputs,
    Gemma4TextDecoderLayer): the per-layer table times sqrt(P) plus the per-layer projection of the scaled
    embeddings times hidden^-1/2, RMS-normed per layer, both times 2^-1/2; after each layer's FFN
    x + post_per_layer_input_norm(per_layer_projection(gelu_tanh(per_layer_input_gate(x)) * p_l)). KV
    sharing: the last num_kv_shared_layers layers take the K and V (as cached) of the last earlier layer of
    their type (store_full_length_kv). Final norm, the tied embedding, tanh soft-cap. kv_f16 rounds the
    cached K (after RoPE) and V to float16 as pith's default cache; the flags drop a feature (to show the
    cases see it; sharing=False gives shared layers the K and V of their own Q projection's layer instead:
    their source's recomputed from their own input)."""
    T, H = len(tokens), cfg.heads
    kinds = mkmodel_gemma4.layer_kinds(cfg)
    first = cfg.layers - cfg.kv_shared
    stored = {}

    def norm(x, weight=None):
        y = x * torch.pow((x * x).mean(dim=-1, keepdim=True) + cfg.eps, -0.5)
        return y if weight is None else y * weight

    x = w("token_embd.weight")[torch.tensor(tokens)] * math.sqrt(cfg.dim)
    P = cfg.ple_dim
    if P:
        tok = (w("per_layer_token_embd.weight")[torch.tensor(tokens)] * math.sqrt(P)).view(T, cfg.layers, P)
        proj = ((x @ w("per_layer_model_proj.weight").T) * cfg.dim ** -0.5).view(T, cfg.layers, P)
        pli = (norm(proj, w("per_layer_proj_norm.weight")) + tok) * 2 ** -0.5
    for i in range(cfg.layers):
        b, full = f"blk.{i}.", kinds[i] == "full_attention"
        hd = cfg.global_head_dim if full else cfg.head_dim
        if full:
            inv = (proportional_inv(cfg.theta, hd, cfg.partial_rotary) if proportional
                   else default_inv(cfg.theta, hd))
        else:
            inv = default_inv(cfg.rope_local_theta, hd)
        h = norm(x, w(b + "attn_norm.weight"))
        q = (h @ w(b + "attn_q.weight").T).view(T, H, hd)
        q = rope(norm(q, w(b + "attn_q_norm.weight")), inv)
        if i >= first and sharing:
            k, v = stored[kinds[i]]
        else:
            s = b if i < first else f"blk.{max(j for j in range(first) if kinds[j] == kinds[i])}."
            kp = h @ w(s + "attn_k.weight").T
            wv = w(s + "attn_v.weight")
            vp = kp if wv is None else h @ wv.T            # attention_k_eq_v: V is the K projection
            k, v = kp.view(T, -1, hd), vp.view(T, -1, hd)
            k = rope(norm(k, w(s + "attn_k_norm.weight")), inv)
            if v_norm:
                v = norm(v)
            if kv_f16:
                k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
            if i < first:
                stored[kinds[i]] = k, v
        o = attention(q, k, v, 0 if full else cfg.sliding_window).reshape(T, H * hd) @ w(b + "attn_output.weight").T
        x = x + norm(o, w(b + "post_attention_norm.weight"))
        f = norm(x, w(b + "ffn_norm.weight"))
        f = gelu_tanh(f @ w(b + "ffn_gate.weight").T) * (f @ w(b + "ffn_up.weight").T)
        f = f @ w(b + "ffn_down.weight").T
        if cfg.experts:   # Gemma4TextDecoderLayer with enable_moe_block: both branches post-normed, summed
            f = norm(f, w(b + "post_ffw_norm_1.weight")) + norm(
                moe(cfg, w, i, x, expert_scales, router_apart), w(b + "post_ffw_norm_2.weight"))
        x = x + norm(f, w(b + "post_ffw_norm.weight"))
        if P and ple:
            g = gelu_tanh(x @ w(b + "inp_gate.weight").T) * pli[:, i]
            x = x + norm(g @ w(b + "proj.weight").T, w(b + "post_norm.weight"))
        s = w(b + "layer_output_scale.weight")
        if scalars and s is not None:
            x = x * s[0]
    out = w("output.weight")
    logits = norm(x, w("output_norm.weight")) @ (w("token_embd.weight") if out is None else out).T
    if cfg.final_softcap:
        logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
    return logits.numpy()


def check_reference(tmp, tokens, seed):
    rng = np.random.default_rng(46)
    x = torch.tensor(rng.standard_normal((20, 4, 64)))
    err = float((rope(x, default_inv(1e4, 64)) - reference.rope(x, torch.arange(20), 1e4, "half", None)).abs().max())
    q, k, v = torch.tensor(rng.standard_normal((20, 4, 16))), *(torch.tensor(rng.standard_normal((20, 2, 16)))
                                                               for _ in range(2))
    want = reference.attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), reference.causal_mask(20),
                               1.0)
    err = max(err, float((attention(q, k, v, 0) - want).abs().max()))
    print(f"gemma4: reference RoPE and attention vs tools/reference.py's: max |diff| {err:.1e}")
    if err > 1e-12:
        trm.fail(f"gemma4: the reference's RoPE or attention differs from tools/reference.py's by {err:.2e}")
    cfg = mkmodel.build_config(PRESET)
    base = by_hand(cfg, weights(cfg, seed=seed), tokens)
    for what, kw in (("the V norm", dict(v_norm=False)), ("proportional RoPE (vs all pairs)", dict(proportional=False)),
                     ("the layer scalars", dict(scalars=False))):
        trm.moved(f"gemma4 {what}", base, by_hand(cfg, weights(cfg, seed=seed), tokens, **kw))
    c = mkmodel.build_config(E_PRESET)
    base_e = by_hand(c, weights(c, seed=seed), tokens)
    for what, kw in (("per-layer embeddings", dict(ple=False)), ("KV sharing", dict(sharing=False))):
        trm.moved(f"gemma4 {what}", base_e, by_hand(c, weights(c, seed=seed), tokens, **kw))
    c = mkmodel.build_config(MOE_PRESET)
    base_m = by_hand(c, weights(c, seed=seed), tokens)
    for what, kw in (("per-expert scales", dict(expert_scales=False)),
                     ("the router's own input", dict(router_apart=False))):
        trm.moved(f"gemma4 {what}", base_m, by_hand(c, weights(c, seed=seed), tokens, **kw))
    for preset in (PRESET, MM_PRESET, E_PRESET, MOE_PRESET):
        c = mkmodel.build_config(preset)
        base = {E_PRESET: base_e, MOE_PRESET: base_m}.get(preset)
        if base is None:
            base = by_hand(c, weights(c, seed=seed), tokens)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_safetensors(c, spath, "F32", seed=seed, shards=2)
        paths = [("safetensors", spath)]
        if preset != MM_PRESET:
            mkmodel.write_gguf(c, gpath, "F32", seed=seed)
            paths.insert(0, ("gguf", gpath))
        for fmt, path in paths:
            err = float(np.abs(by_hand(c, weights(c, path=path), tokens) - base).max())
            print(f"{preset}: reference on the {fmt} file vs on the generator's weights: {err:.1e}")
            if err > 0:
                trm.fail(f"{preset}: the {fmt} file's weights differ from the generator's ({err:.2e} in the logits)")


def check_vulkan(pith, tmp, seed):
    """The GGUF F32 cases of test-gemma4 (the second attention shape, the V norm, proportional RoPE) and
    test-gemma4-e (per-layer embeddings through copy_cols, Q-only KV-shared layers, double-wide FFNs) and
    test-gemma4-moe (the router's and the experts' input norms on the device) on the first Vulkan device,
    when there is one, from BOS and from the prompt in chunks of 7; and the
    e preset's replayed decode steps against steps recorded every time (PITH_VK_REPLAY=0), bit for bit.
    Held to the float tolerance, as every F32 case on the device (test_vulkan_models.py)."""
    import subprocess
    r = subprocess.run([pith, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if b"vulkan:0" not in r.stdout:
        print("note: no Vulkan device; the gemma4 cases ran on the CPU only")
        return
    old = {k: os.environ.get(k) for k in ("PITH_DEVICE", "PITH_VK_REPLAY")}
    os.environ["PITH_DEVICE"] = "vulkan"
    try:
        for preset in (PRESET, E_PRESET, MOE_PRESET):
            cfg = mkmodel.build_config(preset)
            model, tok, n_vocab = trm.make_model(tmp, preset, "gguf", "F32", seed)
            w = weights(cfg, path=model)

            def ref(toks, kv_f16, w=w, cfg=cfg):
                return by_hand(cfg, w, toks, kv_f16=kv_f16)
            trm.compare(pith, tmp, f"{preset} gguf F32 vulkan", model, tok, n_vocab, "float", n_gen=trm.N_GEN_LONG,
                        ref_fn=ref)
            trm.compare(pith, tmp, f"{preset} gguf F32 vulkan prompt/7", model, tok, n_vocab, "float",
                        n_gen=trm.N_GEN_PROMPT, prompt=trm.PROMPT_TEXT, extra=("--max-batch-tokens", "7"), ref_fn=ref)
            if preset != E_PRESET:
                continue
            runs = []
            for replay in ("1", "0"):
                os.environ["PITH_VK_REPLAY"] = replay
                runs.append(trm.pith_logits(pith, tmp, f"{preset} vulkan replay {replay}", model, tok, n_vocab,
                                            n_gen=24))
            if None not in runs:
                same = np.array_equal(runs[0][1], runs[1][1])
                print(f"{preset} vulkan: 24 decode steps replayed vs recorded every step: "
                      f"{'identical' if same else 'DIFFERENT'}")
                if not same:
                    trm.fail(f"{preset} vulkan: replayed steps differ from recorded ones")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main():
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.access(pith, os.X_OK):
        print(f"FAIL: PITH_BIN ({pith!r}) is not an executable pith binary")
        return 1
    t0 = time.time()
    seed = 4000
    T = trm.N_GEN_LONG
    tokens = [mkmodel.BOS_ID] + [int(t) for t in np.random.default_rng(47).integers(3, 512, T - 1)]
    with tempfile.TemporaryDirectory(prefix="ref-gemma4-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference(tmp, tokens, seed)
        f32 = {}
        cases = ([(PRESET, "gguf", t) for t in GGUF_TYPES] + [(PRESET, "safetensors", t) for t in ST_TYPES] +
                 [(MM_PRESET, "safetensors", "F32")] + [(E_PRESET, "gguf", t) for t in ("F32", "Q8_0")] +
                 [(E_PRESET, "safetensors", t) for t in ST_TYPES] +
                 [(MOE_PRESET, "gguf", t) for t in GGUF_TYPES] + [(MOE_PRESET, "safetensors", t) for t in ST_TYPES])
        for preset, fmt, dtype in cases:
            cfg = mkmodel.build_config(preset)
            model, tok, n_vocab = trm.make_model(tmp, preset, fmt, dtype, seed)
            w = weights(cfg, path=model)

            def ref(toks, kv_f16, w=w, cfg=cfg):
                return by_hand(cfg, w, toks, kv_f16=kv_f16)
            name = f"{preset} {fmt} {dtype}"
            kind = trm.tolerance_kind(dtype)
            if preset == MOE_PRESET and kind != "float":   # a router's near-tie can flip (see TOLERANCES)
                kind = "moe-q32" if kind == "q32" else kind
            trm.compare(pith, tmp, name, model, tok, n_vocab, kind, n_gen=trm.N_GEN_LONG, ref_fn=ref)
            if dtype != "F32" or preset == MM_PRESET:
                continue
            f32[(preset, fmt)] = (model, tok)
            if fmt == "gguf":
                trm.compare(pith, tmp, name + " kv-f16", model, tok, n_vocab, "float-kv16", kv_f32=False,
                            n_gen=trm.N_GEN_LONG, ref_fn=ref)
            for chunk in (7, 2048):
                trm.compare(pith, tmp, f"{name} prompt/{chunk}", model, tok, n_vocab, "float",
                            n_gen=trm.N_GEN_PROMPT, prompt=trm.PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)),
                            ref_fn=ref)
        # pith's two F32 formats of one seed: the same weights, the same kernels
        for preset, what, kw in [(p, what, kw) for p in (PRESET, E_PRESET, MOE_PRESET) for what, kw in (
                ("from BOS", dict(n_gen=trm.N_GEN_LONG)),
                ("prompt/7", dict(n_gen=trm.N_GEN_PROMPT, prompt=trm.PROMPT_TEXT, extra=("--max-batch-tokens", "7"))))]:
            cfg = mkmodel.build_config(preset)
            runs = [trm.pith_logits(pith, tmp, f"{preset} {fmt} F32 {what}", *f32[(preset, fmt)], cfg.vocab, **kw)
                    for fmt in ("gguf", "safetensors") if (preset, fmt) in f32]
            if len(runs) != 2 or None in runs:
                trm.fail(f"{preset}: no pair of F32 runs to compare {what}")
                continue
            (pa, a), (pb, b) = runs
            err = float(np.abs(a - b).max())
            print(f"{preset}: pith GGUF vs safetensors F32, {what}: max |diff| {err:.1e} (bound {CROSS_FORMAT:g})")
            if pa != pb or err > CROSS_FORMAT:
                trm.fail(f"{preset}: pith's GGUF and safetensors logits differ by {err:.2e} {what}")
        check_vulkan(pith, tmp, seed)
    print(f"{time.time() - t0:.1f} s")
    if trm.failures:
        print(f"{len(trm.failures)} failure(s)")
        return 1
    print("all gemma4 reference checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
