"""Pith's logits against an independent float64 torch reference, on random-weight models in real
configurations, in GGUF (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q4_K_M and Q5_K_M mixes) and Hugging Face
safetensors (F32, F16, BF16), with the KV cache in F32 and, once per configuration, in pith run's
default F16; plus linear RoPE scaling (GGUF and safetensors, F32); plus sliding-window Mistral, SmolLM3
(layers without RoPE) and Gemma 3 (GGUF and safetensors, F32 and one F16-cache case each, 72 generated
tokens: more than three windows).

For each case: tools/mkmodel.py writes a small model, `pith run` generates 24 tokens greedily from BOS
writing every logits row it chose from, and tools/reference.py teacher-forces the same sequence
[BOS, argmax(row 0), argmax(row 1), ...] and computes all rows in float64. Tolerances and why they are
what they are: docs/testing.md. Before trusting the reference this test checks it twice: against the
independent float64 logits of stories260K in ../shared, and for self-consistency across formats (a GGUF
llama file, whose Q/K rows are permuted for adjacent-pair RoPE, must give the same logits as the
safetensors directory of the same seed, which uses rotate-half), and for the new architectures also
against simpler formulations (a per-position loop transcription of Gemma 3, full attention for a window
longer than the sequence, llama for a SmolLM3 without no-RoPE layers).

The new architectures are also run from a prompt more than three windows long (77 tokens), prefilled
in chunks of 7 tokens (--max-batch-tokens 7: a chunk boundary inside every window) and in one chunk, and
the rows of the tokens generated after it are checked against the reference over [prompt, generated].

The hybrid architectures (LFM2, Qwen3.5, Qwen3.5-MoE, Granite 4.0-H dense and MoE, Nemotron-H) get the same cases
plus a prompt of more than two DeltaNet / SSD chunks (153 tokens) prefilled in chunks of 7 and in one, then
64 generated tokens (HYBRID_PRESETS); Qwen3.5's multimodal Hugging Face layout is run too
(MULTIMODAL_PRESETS).

OLMo 2 (check_olmo2) has its own float64 reference, olmo2_by_hand (torch, from modeling_olmo2.py), checked
first and then run against pith in GGUF and safetensors, from BOS and from the prompt in chunks of 7 and in
one; pith's GGUF and safetensors logits of one seed must also agree with each other.

Environment: PITH_BIN (pith binary), PITH_TEST_TMP (scratch), PITH_SHARED (optional assets).
Exit 77 (skip) when torch or numpy is missing."""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch  # noqa: F401  (reference.py needs it)
except ImportError as e:
    print(f"skip: {e.name} is not importable (the float64 reference needs numpy and torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # keep the source tree clean (it may be read-only)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import pith_gguf as G  # noqa: E402
import reference  # noqa: E402

N_GEN = 24
# Absolute logit tolerances (the test models' logits have a standard deviation of about 1); the reasons
# and the measurements behind them are in docs/testing.md.
#   name: (max |error|, mean |error| or None, activation block of pith's integer kernels or None)
TOLERANCES = {
    # Float weights, F32 cache: the reference computes with the same weights; only f32-vs-f64 arithmetic.
    "float": (1e-4, None, None),
    # Float weights, pith run's default F16 cache, against the reference rounding the cache likewise
    # (rounding-boundary cases differ by one f16 step).
    "float-kv16": (1e-3, None, None),
    # Q8_0 / Q4_0 / IQ4_NL: pith rounds activations to 8 bits per block of 32 for integer dot products.
    "q32": (0.3, 0.04, 32),
    # Q8_0 on LFM2: the same rounding, but the short convolution multiplies two projections of the rounded
    # input (B * x, then C * conv): over seeds 900-905 the max error was 0.21-0.32 and the mean 0.033-0.043,
    # while pith agreed with the act-q8 simulation to 1e-6 wherever no rounding boundary flipped.
    "q32-gated": (0.5, 0.06, 32),
    # Q8_0 on Qwen3.5: the rounded projections feed sigmoid and SiLU gates, L2 norms and a recurrent state
    # that every later token reads: over seeds 900-905 the max error was 0.53-1.26 and the mean 0.076-0.11
    # (pith against the act-q8 simulation: 0.05-0.14, where rounding boundaries flip). A loose bound on a
    # random model whose logits have a standard deviation of 1; the F32 cases carry the precision.
    "q32-delta": (2.0, 0.15, 32),
    # Q4_K / Q5_K / Q6_K / IQ4_XS: the same per block of 256 (a larger block max, so a larger step).
    "qk": (0.4, 0.05, 256),
    # Mixture of experts with Q8_0 / Q4_0 / MXFP4 weights: as q32, but the 8-bit rounding upstream can flip
    # a router's choice where two experts' logits nearly tie, which moves that step's logits by up to
    # about 0.7 on these models (0.52 the worst seen over five seeds of test-qwen3moe MXFP4, 0.68 on
    # test-gpt-oss MXFP4 over 72 steps; mean errors stay at 0.02): the mean is the real check.
    "moe-q32": (1.0, 0.04, 32),
}
# With the F16 cache, the exact reference is this far at most (the cache rounding alone moves logits by
# up to 3e-3 on these models).
TOL_KV16_VS_EXACT = 1e-2

PRESETS = ["test-llama", "test-llama-gqa", "test-qwen2", "test-qwen3"]
GGUF_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0"]
ST_TYPES = ["F32", "F16", "BF16"]
# K-quant blocks span 256 values: only presets whose matrix rows are multiples of 256.
KQUANT_PRESETS = ["test-llama-gqa", "test-qwen3-k"]
KQUANT_TYPES = ["Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M", "IQ4_NL", "IQ4_XS"]
# Windows, no-RoPE layers and Gemma 3: GGUF and safetensors F32 (+ GGUF F32 with the F16 cache), 72 tokens
# generated, more than three windows of every windowed preset (20 for Mistral, 16 for Gemma 3).
NEW_PRESETS = ["test-mistral-swa", "test-smollm3", "test-gemma3", "test-gemma3-softcap"]
NEW_ST_ONLY = ["test-gemma3-st"]     # what GGUF cannot express (query scale, pattern, local base)
N_GEN_LONG = 72
# GGUF vs safetensors of one seed, per preset, in the reference. Gemma 3's GGUF stores each norm as
# float32(1 + w) while config.json's files give w: that rounding (2^-24 relative) alone moves the logits by
# up to 5.8e-7 (checked: rounding 1 + w to float32 on the safetensors side too leaves 4e-14).
CROSS_FORMAT_BOUND = {"test-gemma3": 3e-6, "test-gemma3-softcap": 3e-6}
# The prompt of the prefill cases: 77 tokens with BOS in these models' vocabulary (more than three
# windows of 20 and of 16), 12 tokens generated after it.
PROMPT_TEXT = ("Once upon a time, in a quiet village by the sea, a small girl found a shell that sang "
               "when the wind blew over it.")
N_GEN_PROMPT = 12
# Hybrid (recurrent) architectures: GGUF and safetensors F32, GGUF with the F16 cache and in Q8_0, and a
# prompt of more than two DeltaNet chunks (64 tokens each; the text twice: 153 tokens) prefilled 7
# tokens at a time and in one chunk, then 64 tokens generated; the recurrent state crosses every chunk
# boundary. Tolerances as for the other float cases: the float64 reference computes the same function
# (recurrent form, token by token) and only float32 arithmetic separates them.
HYBRID_PRESETS = ["test-lfm2", "test-qwen35", "test-qwen35moe", "test-granitehybrid", "test-granitehybrid-moe",
                  "test-nemotronh"]
# Qwen3.5's multimodal Hugging Face layout (Qwen3_5(Moe)ForConditionalGeneration: the text model nested
# under text_config and model.language_model., a vision tower to ignore), safetensors F32.
MULTIMODAL_PRESETS = ["test-qwen35", "test-qwen35moe"]
HYBRID_PROMPT = PROMPT_TEXT + " " + PROMPT_TEXT
N_GEN_HYBRID = 64
# Mixture of experts (Qwen3-MoE, Mixtral): GGUF (3-D expert tensors) in float and 32-block types,
# safetensors (one tensor per expert) in F32 and BF16, and the prompt cases (a prefill puts many tokens on
# each expert); test-qwen3moe-st (norm_topk_prob false) exists only as safetensors.
MOE_PRESETS = ["test-qwen3moe", "test-mixtral"]
MOE_GGUF_TYPES = ["F32", "Q8_0", "Q4_0", "MXFP4"]
MOE_ST_TYPES = ["F32", "BF16"]
MOE_ST_ONLY = ["test-qwen3moe-st"]
# GPT-OSS: GGUF F32 and MXFP4 experts, safetensors (fused experts) F32 and BF16, 72 tokens (four windows
# of 16) and the prompt cases; test-gpt-oss-st (clamp 1.5, truncate false, a layer list) as safetensors.
GPTOSS_PRESETS = ["test-gpt-oss"]
GPTOSS_GGUF_TYPES = ["F32", "MXFP4"]
GPTOSS_ST_ONLY = ["test-gpt-oss-st"]
# OLMo 2 (check_olmo2): its float64 reference is olmo2_by_hand (tools/reference.py does not read olmo2
# files). GGUF F32 (F32 and F16 cache) and Q8_0, safetensors F32 and BF16 (sharded), 72 tokens from BOS, the
# prompt (77 tokens) prefilled in chunks of 7 and in one in both F32 formats, and pith's GGUF and
# safetensors logits of one seed against each other. Tolerances as for the other architectures: the
# reference computes the stored weights' function in float64, so only pith's float32 arithmetic (and, for
# Q8_0, its 8-bit activations) separates them.
OLMO2_PRESETS = ["test-olmo2"]
# Pith's F32 GGUF and F32 safetensors of one seed hold the same float32 weights and run the same kernels,
# so their logits rows should be identical; any difference up to the float tolerance would still be
# rounding (both are within 1e-4 of the reference), more means the two loaders disagree.
OLMO2_CROSS_FORMAT = TOLERANCES["float"][0]
# YaRN (qwen3 x4 over an original context of 64): GGUF and safetensors, and truncate false (safetensors).
YARN_PRESETS = ["test-qwen3-yarn"]
YARN_ST_ONLY = ["test-qwen3-yarn-st"]


def tolerance_kind(dtype):
    if dtype in ("Q8_0", "Q4_0", "IQ4_NL", "MXFP4"):
        return "q32"
    if dtype.startswith(("Q4_K", "Q5_K", "Q6_K", "IQ4_XS")):
        return "qk"
    return "float"


failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def check_reference_on_stories260k(tmp):
    """Convert the real stories260K checkpoint to GGUF and compare with the shared float64 logits."""
    shared = os.environ.get("PITH_SHARED") or os.path.join(HERE, "..", "..", "shared")
    d = os.path.join(shared, "models", "stories260K")
    try:
        blob = open(os.path.join(d, "stories260K.bin"), "rb").read()
        want = np.load(os.path.join(d, "reference", "stories260K_greedy_logits.npy"))
        gen = [int(t) for t in open(os.path.join(d, "reference", "stories260K_greedy_tokens.txt")).read().split()]
    except OSError:
        print(f"note: {d} is absent; the reference is not checked against stories260K")
        return
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", blob[:28])
    w = np.frombuffer(blob, dtype="<f4", offset=28)
    hd, pos = dim // heads, [0]

    def take(*shape):
        n = int(np.prod(shape))
        a = w[pos[0]:pos[0] + n].reshape(shape)
        pos[0] += n
        return a

    emb = take(abs(vocab), dim)
    names = [("attn_norm", (dim,)), ("attn_q", (dim, dim)), ("attn_k", (kv_heads * hd, dim)),
             ("attn_v", (kv_heads * hd, dim)), ("attn_output", (dim, dim)), ("ffn_norm", (dim,)),
             ("ffn_gate", (hidden, dim)), ("ffn_down", (dim, hidden)), ("ffn_up", (hidden, dim))]
    per_layer = {n: take(layers, *s) for n, s in names}
    final = take(dim)
    path = os.path.join(tmp, "stories260K.gguf")
    g = G.GGUFWriter(path)
    g.add_str("general.architecture", "llama")
    for k, v in (("embedding_length", dim), ("block_count", layers), ("feed_forward_length", hidden),
                 ("attention.head_count", heads), ("attention.head_count_kv", kv_heads), ("context_length", seq)):
        g.add_u32("llama." + k, v)
    g.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    g.add_f32("llama.rope.freq_base", 10000.0)
    g.add_tensor("token_embd.weight", emb.shape, "F32", emb)
    for i in range(layers):
        for n, _ in names:
            g.add_tensor(f"blk.{i}.{n}.weight", per_layer[n][i].shape, "F32", per_layer[n][i])
    g.add_tensor("output_norm.weight", final.shape, "F32", final)
    g.write()
    got = reference.forward(reference.Model(path), [1] + gen[:want.shape[0] - 1]).numpy()
    err = float(np.abs(got - want).max())
    print(f"reference vs stories260K float64 logits: max |diff| {err:.2e} over {want.shape[0]} steps")
    # The shared logits are float32 (|logit| <= 22, so about 1e-6 of rounding).
    if err > 1e-5:
        fail(f"reference disagrees with the stories260K logits by {err:.2e}")


def check_cross_format(tmp):
    """A GGUF llama/qwen file and a safetensors directory of the same seed encode the same function."""
    tokens = [1] + list(np.random.default_rng(7).integers(3, 512, 30))
    for preset in PRESETS:
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=11)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=11, shards=2)
        a = reference.forward(reference.Model(gpath), tokens).numpy()
        b = reference.forward(reference.Model(spath), tokens).numpy()
        err = float(np.abs(a - b).max())
        # Only the float32 storage of rope_freqs.weight (Llama 3 scaling) separates the two.
        if err > 1e-6:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
    tokens = [1] + list(np.random.default_rng(8).integers(3, 512, N_GEN_LONG - 1))
    for preset in NEW_PRESETS:
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=12)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=12, shards=2)
        err = float(np.abs(reference.forward(reference.Model(gpath), tokens).numpy() -
                           reference.forward(reference.Model(spath), tokens).numpy()).max())
        bound = CROSS_FORMAT_BOUND.get(preset, 1e-6)
        print(f"{preset}: GGUF vs safetensors of one seed in the reference: {err:.1e} (bound {bound:g})")
        if err > bound:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")


def gemma3_by_hand(cfg, seed, tokens):
    """Gemma 3 text written out position by position and head by head in numpy float64, from the formulas of
    transformers' modeling_gemma3.py, with the Hugging Face weights taken straight from mkmodel's generator
    (no file reader involved): the independent check of reference.forward on Gemma 3."""
    specs = {g: (shape, kind) for g, _, shape, kind in mkmodel.tensor_specs(cfg)}

    def w(name):
        return mkmodel.random_tensor(seed, name, *specs[name]).astype(np.float64)

    def norm(x, weight):                       # Gemma3RMSNorm: x / rms(x) * (1 + w)
        return x / np.sqrt(np.mean(x * x) + cfg.eps) * (1.0 + weight)

    def rotate(x, p, base, scale):             # rotate-half RoPE, linear scaling as position / factor
        half = len(x) // 2
        ang = p * scale / base ** (np.arange(half) * 2.0 / len(x))
        a, b = x[:half], x[half:]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)])

    hd, H, KV = cfg.head_dim, cfg.heads, cfg.kv_heads
    emb = w("token_embd.weight")
    xs = [emb[t] * math.sqrt(cfg.dim) for t in tokens]
    kinds = cfg.layer_kinds() if cfg.sliding_window else ["full_attention"] * cfg.layers
    for layer in range(cfg.layers):
        b = f"blk.{layer}."
        wq, wk, wv, wo = (w(b + n + ".weight") for n in ("attn_q", "attn_k", "attn_v", "attn_output"))
        qn, kn = w(b + "attn_q_norm.weight"), w(b + "attn_k_norm.weight")
        local = kinds[layer] == "sliding_attention"
        base = cfg.rope_local_theta if local else cfg.theta
        scale = 1.0 / cfg.rope_factor if (cfg.rope_scaling == "linear" and not local) else 1.0
        keys, values, out = [], [], []
        for p, x in enumerate(xs):
            h = norm(x, w(b + "attn_norm.weight"))
            q, k, v = wq @ h, wk @ h, wv @ h
            keys.append([rotate(norm(k[j * hd:(j + 1) * hd], kn), p, base, scale) for j in range(KV)])
            values.append([v[j * hd:(j + 1) * hd] for j in range(KV)])
            first = max(0, p - cfg.sliding_window + 1) if local else 0
            heads = []
            for j in range(H):
                qj = rotate(norm(q[j * hd:(j + 1) * hd], qn), p, base, scale)
                g = j // (H // KV)
                s = np.array([qj @ keys[t][g] for t in range(first, p + 1)]) / math.sqrt(cfg.query_pre_attn_scalar)
                a = np.exp(s - s.max())
                a /= a.sum()
                heads.append(sum(a[t - first] * values[t][g] for t in range(first, p + 1)))
            x = x + norm(wo @ np.concatenate(heads), w(b + "post_attention_norm.weight"))
            h = norm(x, w(b + "ffn_norm.weight"))
            gate, up = w(b + "ffn_gate.weight") @ h, w(b + "ffn_up.weight") @ h
            gelu = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
            x = x + norm(w(b + "ffn_down.weight") @ (gelu * up), w(b + "post_ffw_norm.weight"))
            out.append(x)
        xs = out
    logits = np.array([emb @ norm(x, w("output_norm.weight")) for x in xs])
    if cfg.final_softcap:
        logits = np.tanh(logits / cfg.final_softcap) * cfg.final_softcap
    return logits


def moved(name, a, b):
    """A feature must move the reference's logits by far more than the float tolerance, or a Pith case
    could not catch a loader that drops it."""
    d = float(np.abs(a - b).max())
    print(f"  {name}: moves the reference logits by up to {d:.2f}")
    if d < 100 * TOLERANCES["float"][0]:
        fail(f"{name} changes the logits by only {d:.2e}; the cases would not test it")


def check_hybrid_references(tmp):
    """The hybrid references: GGUF against safetensors of one seed, and LFM2's token-by-token convolution
    against the convolution as transformers' prefill writes it (nn.Conv1d with K - 1 zeros of padding,
    the first T outputs)."""
    tokens = [1] + list(np.random.default_rng(10).integers(3, 512, N_GEN_LONG - 1))
    for preset in HYBRID_PRESETS:
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=13)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=13, shards=2)
        err = float(np.abs(reference.forward(reference.Model(gpath), tokens).numpy() -
                           reference.forward(reference.Model(spath), tokens).numpy()).max())
        # Qwen3.5's GGUF stores norms as float32(1 + w) and ssm_a as float32(-exp(A_log)): that rounding alone
        # moves the logits by 1.2e-5 (rounding them likewise on the safetensors side leaves 6e-7).
        bound = 3e-5 if preset.startswith("test-qwen35") else 1e-9
        if preset.startswith("test-granitehybrid"):
            # Granite's GGUF stores ssm_a as float32(-exp(A_log)) (that rounding moves the logits by up to
            # 3.5e-7); and it normalises the Mamba2 output per B/C group (llama.cpp) where config.json's code
            # normalises the whole width: compared with the same norm, then the grouping must matter
            # (test-granitehybrid has 2 groups).
            bound = 2e-6
            g, st = reference.Model(gpath), reference.Model(spath)
            grouped = reference.forward(g, tokens).numpy()
            g.norm_per_group = False
            err = float(np.abs(reference.forward(g, tokens).numpy() - reference.forward(st, tokens).numpy()).max())
            if g.n_groups > 1:
                moved(f"{preset}: the per-group Mamba2 norm", grouped, reference.forward(g, tokens).numpy())
        if preset == "test-nemotronh":
            # The same float32(-exp(A_log)) rounding of ssm_a; both formats normalise per group
            # (MambaRMSNormGated), so the files must agree as they are.
            bound = 2e-6
            check_nemotronh_reference(reference.Model(spath), tokens)
        print(f"{preset}: GGUF vs safetensors of one seed in the reference: {err:.1e} (bound {bound:g})")
        if err > bound:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
        if preset in MULTIMODAL_PRESETS:   # the same tensors under the multimodal names: the same function
            mpath = os.path.join(tmp, f"x-{preset}-mm")
            mkmodel.write_safetensors(mkmodel.build_config(preset, hf_type="multimodal"), mpath, "F32", seed=13)
            err = float(np.abs(reference.forward(reference.Model(mpath), tokens).numpy() -
                               reference.forward(reference.Model(spath), tokens).numpy()).max())
            print(f"{preset}: multimodal vs text-only layout in the reference: {err:.1e}")
            if err > 0:
                fail(f"{preset}: the multimodal layout differs from the text-only one in the reference by {err:.2e}")
    check_granite_multipliers(os.path.join(tmp, "x-test-granitehybrid-st"), tokens)
    m = reference.Model(os.path.join(tmp, "x-test-lfm2-st"))
    D, K, T = m.dim, m.conv_kernel, 40
    bx = torch.from_numpy(np.random.default_rng(3).standard_normal((T, D)))
    w = m.w("blk.0.shortconv.conv.weight").reshape(D, 1, K)
    full = torch.nn.functional.conv1d(bx.T[None], w, groups=D, padding=K - 1)[0, :, :T].T
    state, loop = torch.zeros(K - 1, D, dtype=torch.float64), torch.empty(T, D, dtype=torch.float64)
    for t in range(T):
        window = torch.cat([state, bx[t:t + 1]], dim=0)
        loop[t], state = (window * w.reshape(D, K).T).sum(dim=0), window[1:]
    err = float((full - loop).abs().max())
    print(f"lfm2: the recurrent convolution vs nn.Conv1d: {err:.1e}")
    if err > 1e-12:
        fail(f"lfm2: the reference's recurrent convolution differs from nn.Conv1d by {err:.2e}")


def check_nemotronh_reference(m, tokens):
    """Nemotron-H's grouped Mamba2 norm (2 groups), the skip D and each block kind (a Mamba2, attention or MLP
    layer dropped) must move the reference's logits, or a Pith case could not catch a loader that got one
    wrong."""
    base = reference.forward(m, tokens).numpy()
    m.norm_per_group = False
    moved("nemotron_h: the per-group Mamba2 norm", base, reference.forward(m, tokens).numpy())
    m.norm_per_group = True
    fetch = m._fetch
    m._fetch = lambda name: np.zeros_like(fetch(name)) if name.endswith("ssm_d") else fetch(name)
    moved("nemotron_h: the Mamba2 skip D", base, reference.forward(m, tokens).numpy())
    for kind, out in (("mamba", "ssm_out.weight"), ("attention", "attn_output.weight"), ("mlp", "ffn_down.weight")):
        layer = m.layer_types.index(kind)
        name = f"blk.{layer}.{out}"
        m._fetch = lambda n, name=name: np.zeros_like(fetch(n)) if n == name else fetch(n)
        moved(f"nemotron_h: the {kind} layer {layer}", base, reference.forward(m, tokens).numpy())
    m._fetch = fetch


def check_granite_multipliers(path, tokens):
    """Each of Granite's four multipliers and the Mamba2 skip D must move the reference's logits, or a
    loader that dropped one would pass the Pith cases."""
    m = reference.Model(path)
    base = reference.forward(m, tokens).numpy()
    for attr, value in (("g_emb", 1.0), ("g_res", 1.0), ("g_att", 1.0 / math.sqrt(m.head_dim)), ("g_logit", 1.0)):
        keep = getattr(m, attr)
        setattr(m, attr, value)
        moved(f"granitehybrid: {attr} {keep:g} (vs {value:g})", base, reference.forward(m, tokens).numpy())
        setattr(m, attr, keep)
    fetch = m._fetch
    m._fetch = lambda name: np.zeros_like(fetch(name)) if name.endswith("ssm_d") else fetch(name)
    moved("granitehybrid: the Mamba2 skip D", base, reference.forward(m, tokens).numpy())
    m._fetch = fetch


def moe_by_hand(m, layer, h):
    """The sparse MoE block one token at a time in numpy, from modeling_qwen3_moe.py's definition: the
    independent check of reference.moe_ffn."""
    h = h.numpy()
    router = m.w(f"blk.{layer}.ffn_gate_inp.weight").numpy()
    experts = [[m.expert(layer, k, e).numpy() for k in ("gate", "up", "down")] for e in range(m.n_experts)]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        logits = router @ h[t]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = sorted(range(m.n_experts), key=lambda e: -p[e])[:m.n_experts_used]
        total = sum(p[e] for e in top)
        for e in top:
            g, u, d = experts[e]
            a = g @ h[t]
            out[t] += (p[e] / total if m.norm_topk else p[e]) * (d @ (a / (1 + np.exp(-a)) * (u @ h[t])))
    return out


def check_yarn_reference(tmp):
    """The reference's YaRN: frequency i is the unscaled one below the ramp and divided by the factor
    above it; a factor of 1 (and attention factor 1) is plain RoPE; truncation and the factor move the
    logits; GGUF and safetensors of one seed agree."""
    y = dict(factor=4.0, orig=64, beta_fast=32.0, beta_slow=1.0, mscale=1.0, truncate=True)
    inv, _ = reference.yarn_freqs(1e6, 64, y)
    base = 1e6 ** (-torch.arange(0, 32, dtype=torch.float64) * 2 / 64)
    low = math.floor(64 * math.log(64 / (32 * 2 * math.pi)) / (2 * math.log(1e6)))
    high = math.ceil(64 * math.log(64 / (1 * 2 * math.pi)) / (2 * math.log(1e6)))
    ok = (torch.allclose(inv[:max(low, 0) + 1], base[:max(low, 0) + 1], rtol=1e-15, atol=0) and
          torch.allclose(inv[high:], base[high:] / 4, rtol=1e-15, atol=0))
    one, _ = reference.yarn_freqs(1e6, 64, dict(y, factor=1.0))
    print(f"yarn: ramp {low}..{high}; below it unscaled, above it / 4: {ok}; factor 1 is plain RoPE: "
          f"{bool(torch.allclose(one, base, rtol=1e-15, atol=0))}")
    if not ok or not torch.allclose(one, base, rtol=1e-15, atol=0):
        fail("yarn: the reference frequencies are not the extrapolated / interpolated ones outside the ramp")
    tokens = [1] + list(np.random.default_rng(17).integers(3, 512, 70))
    cfg = mkmodel.build_config("test-qwen3-yarn")
    gpath, spath = os.path.join(tmp, "yarn.gguf"), os.path.join(tmp, "yarn-st")
    mkmodel.write_gguf(cfg, gpath, "F32", seed=18)
    mkmodel.write_safetensors(cfg, spath, "F32", seed=18)
    mg, ms = reference.Model(gpath), reference.Model(spath)
    if not mg.yarn or not ms.yarn or abs(mg.yarn["mscale"] - (1 + 0.1 * math.log(4))) > 1e-6:
        fail(f"yarn: the reference read {mg.yarn} / {ms.yarn}")
    a = reference.forward(mg, tokens).numpy()
    err = float(np.abs(a - reference.forward(ms, tokens).numpy()).max())
    print(f"yarn: GGUF vs safetensors of one seed in the reference: {err:.1e}")
    if err > 1e-6:
        fail(f"yarn: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
    keep = mg.yarn
    mg.yarn = None
    moved("yarn x4", a, reference.forward(mg, tokens).numpy())
    mg.yarn = dict(keep, truncate=False)
    moved("yarn truncate", a, reference.forward(mg, tokens).numpy())


def gptoss_moe_by_hand(m, layer, h):
    """GPT-OSS's MoE block one token at a time in numpy, from modeling_gpt_oss.py's definition."""
    p = f"blk.{layer}."
    h = h.numpy()
    wr, br = m.w(p + "ffn_gate_inp.weight").numpy(), m.w(p + "ffn_gate_inp.bias").numpy()
    fused = m.has(p + "experts.gate_up_proj")
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        logits = wr @ h[t] + br
        top = sorted(range(m.n_experts), key=lambda e: -logits[e])[:m.n_experts_used]
        w = np.exp(np.array([logits[e] for e in top]) - max(logits[e] for e in top))
        w /= w.sum()
        for wj, e in zip(w, top):
            if fused:
                gu = h[t] @ m.w(p + "experts.gate_up_proj").numpy()[e] + m.w(p + "experts.gate_up_proj_bias").numpy()[e]
                g, u = gu[0::2], gu[1::2]
            else:
                g = m.expert(layer, "gate", e).numpy() @ h[t] + m.w(p + "ffn_gate_exps.bias").numpy()[e]
                u = m.expert(layer, "up", e).numpy() @ h[t] + m.w(p + "ffn_up_exps.bias").numpy()[e]
            g, u = np.minimum(g, m.swiglu_limit), np.clip(u, -m.swiglu_limit, m.swiglu_limit)
            z = (u + 1) * g / (1 + np.exp(-1.702 * g))
            if fused:
                y = z @ m.w(p + "experts.down_proj").numpy()[e] + m.w(p + "experts.down_proj_bias").numpy()[e]
            else:
                y = m.expert(layer, "down", e).numpy() @ z + m.w(p + "ffn_down_exps.bias").numpy()[e]
            out[t] += wj * y
    return out


def check_gptoss_references(tmp):
    """The GPT-OSS reference: GGUF (llama.cpp's separate experts) vs safetensors (transformers' fused,
    interleaved ones) of one seed, the MoE block against a per-token transcription, and each feature
    (sinks, output bias, clamp, windows) moving the logits."""
    tokens = [1] + list(np.random.default_rng(19).integers(3, 512, N_GEN_LONG - 1))
    cfg = mkmodel.build_config("test-gpt-oss")
    gpath, spath = os.path.join(tmp, "x-gptoss.gguf"), os.path.join(tmp, "x-gptoss-st")
    mkmodel.write_gguf(cfg, gpath, "F32", seed=20)
    mkmodel.write_safetensors(cfg, spath, "F32", seed=20, shards=2)
    mg, ms = reference.Model(gpath), reference.Model(spath)
    if mg.layer_types != ms.layer_types or mg.layer_types[:2] != ["sliding_attention", "full_attention"]:
        fail(f"gpt-oss: the reference read layer types {mg.layer_types} / {ms.layer_types}")
    a = reference.forward(mg, tokens).numpy()
    err = float(np.abs(a - reference.forward(ms, tokens).numpy()).max())
    print(f"gpt-oss: GGUF vs safetensors of one seed in the reference: {err:.1e}")
    if err > 1e-6:
        fail(f"gpt-oss: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
    h = torch.tensor(np.random.default_rng(21).standard_normal((9, cfg.dim)) * 3)
    for model in (mg, ms):
        err = float(np.abs(reference.gptoss_moe_ffn(model, 2, h, lambda t: t).numpy() -
                           gptoss_moe_by_hand(model, 2, h)).max())
        print(f"gpt-oss: MoE block vs the per-token transcription: {err:.1e}")
        if err > 1e-12:
            fail(f"gpt-oss: the reference MoE block and its transcription differ by {err:.2e}")
    for what, change in (("gpt-oss clamp 7 -> 0.5", lambda m: setattr(m, "swiglu_limit", 0.5)),
                         ("gpt-oss windows", lambda m: setattr(m, "sliding_window", None))):
        m = reference.Model(gpath)
        change(m)
        moved(what, a, reference.forward(m, tokens).numpy())
    for what, name in (("gpt-oss sinks", "attn_sinks.weight"), ("gpt-oss output bias", "attn_output.bias")):
        m = reference.Model(gpath)
        m.names = {n for n in m.names if not n.endswith(name)}
        moved(what, a, reference.forward(m, tokens).numpy())


def check_moe_references(tmp):
    """The MoE reference: GGUF's 3-D expert tensors vs safetensors' per-expert ones of one seed, the
    block against a per-token transcription, and renormalisation and routing moving the logits."""
    tokens = [1] + list(np.random.default_rng(13).integers(3, 512, 30))
    for preset in MOE_PRESETS:
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=14)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=14, shards=2)
        mg, ms = reference.Model(gpath), reference.Model(spath)
        if (mg.n_experts, mg.n_experts_used, ms.n_experts, ms.n_experts_used) != (cfg.experts, cfg.experts_used) * 2:
            fail(f"{preset}: the reference read experts {mg.n_experts}/{mg.n_experts_used}, "
                 f"{ms.n_experts}/{ms.n_experts_used}")
        a = reference.forward(mg, tokens).numpy()
        err = float(np.abs(a - reference.forward(ms, tokens).numpy()).max())
        print(f"{preset}: GGUF vs safetensors of one seed in the reference: {err:.1e}")
        if err > 1e-6:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
        h = torch.tensor(np.random.default_rng(15).standard_normal((9, cfg.dim)))
        for model in (mg, ms):
            err = float(np.abs(reference.moe_ffn(model, 1, h, lambda t: t).numpy() - moe_by_hand(model, 1, h)).max())
            print(f"{preset}: MoE block vs the per-token transcription: {err:.1e}")
            if err > 1e-12:
                fail(f"{preset}: the reference MoE block and its transcription differ by {err:.2e}")
        mg.norm_topk = False
        moved(f"{preset} renormalised weights", a, reference.forward(mg, tokens).numpy())
        mg.norm_topk, mg.n_experts_used = True, 1
        moved(f"{preset} top-{cfg.experts_used} vs top-1", a, reference.forward(mg, tokens).numpy())
    ms = reference.Model(os.path.join(tmp, "x-test-qwen3moe-st"))
    if not ms.norm_topk:
        fail("test-qwen3moe: the reference read norm_topk_prob false")
    d = os.path.join(tmp, "x-test-qwen3moe-st-nonorm")
    mkmodel.write_safetensors(mkmodel.build_config("test-qwen3moe-st"), d, "F32", seed=16)
    if reference.Model(d).norm_topk:
        fail("test-qwen3moe-st: the reference read norm_topk_prob true")


def check_new_references(tmp):
    """The reference on windows, no-RoPE layers, Gemma 3 and sinks against simpler formulations."""
    T = N_GEN_LONG
    tokens = [1] + list(np.random.default_rng(9).integers(3, 512, T - 1))
    # Gemma 3: the loop transcription, on every Gemma preset and on one whose layers are all global.
    variants = [(p, mkmodel.build_config(p)) for p in ["test-gemma3", "test-gemma3-softcap"] + NEW_ST_ONLY]
    variants.append(("gemma3 all global, window >= T", mkmodel.build_config(
        "test-gemma3", sliding_window=T + 8, swa_pattern=None, layer_types=["full_attention"] * 7)))
    for name, cfg in variants:
        d = os.path.join(tmp, "hand-" + name.split()[0])
        mkmodel.write_safetensors(cfg, d, "F32", seed=21)
        got = reference.forward(reference.Model(d), tokens).numpy()
        err = float(np.abs(got - gemma3_by_hand(cfg, 21, tokens)).max())
        print(f"{name}: reference vs the loop transcription of Gemma 3: max |diff| {err:.1e}")
        if err > 1e-9:
            fail(f"{name}: the reference and the loop transcription of Gemma 3 differ by {err:.2e}")
    cfg = mkmodel.build_config("test-gemma3-softcap")
    d = os.path.join(tmp, "hand-test-gemma3-softcap")
    m = reference.Model(d)
    base = reference.forward(m, tokens).numpy()
    for what, attr, value in (("Gemma 3 window", "sliding_window", None),
                              ("Gemma 3 local RoPE base", "rope_local_theta", None),
                              ("Gemma 3 softcap", "final_softcap", None),
                              ("Gemma 3 linear scaling", "position_scale", 1.0),
                              ("Gemma 3 query scale (96 vs 64)", "query_pre_attn_scalar", 64.0)):
        keep = getattr(m, attr)
        setattr(m, attr, value)
        moved(what, base, reference.forward(m, tokens).numpy())
        setattr(m, attr, keep)
    # A window at least as long as the sequence is full attention (same weights, plain llama).
    for fmt in ("gguf", "safetensors"):
        ext = ".gguf" if fmt == "gguf" else "-st"
        wide, plain, narrow = (os.path.join(tmp, f"win-{k}{ext}") for k in ("wide", "plain", "narrow"))
        write = mkmodel.write_gguf if fmt == "gguf" else mkmodel.write_safetensors
        write(mkmodel.build_config("test-mistral-swa", sliding_window=T), wide, "F32", seed=22)
        write(mkmodel.Config(**dict(mkmodel.PRESETS["test-mistral-swa"], sliding_window=None, hf_type=None)),
              plain, "F32", seed=22)
        write(mkmodel.build_config("test-mistral-swa"), narrow, "F32", seed=22)
        mw, mp, mn = reference.Model(wide), reference.Model(plain), reference.Model(narrow)
        if mw.sliding_window != T or mn.sliding_window != 20 or mp.sliding_window is not None:
            fail(f"mistral {fmt}: the reference read windows {mw.sliding_window}, {mn.sliding_window}, "
                 f"{mp.sliding_window}")
        a, b, c = (reference.forward(x, tokens).numpy() for x in (mw, mp, mn))
        err = float(np.abs(a - b).max())
        print(f"mistral {fmt}: window {T} vs full attention: max |diff| {err:.1e}")
        if err > 1e-12:
            fail(f"mistral {fmt}: a window >= the sequence differs from full attention by {err:.2e}")
        moved(f"mistral {fmt} window 20", b, c)
        if np.abs(b[:20] - c[:20]).max() > 1e-12:
            fail(f"mistral {fmt}: the first 20 positions should not see the window")
    # SmolLM3 without no-RoPE layers is llama (GGUF: 3 layers, below llama.cpp's interval of 4).
    for fmt, layers, extra in (("safetensors", 5, dict(no_rope_layers=[1] * 5)), ("gguf", 3, {})):
        ext = ".gguf" if fmt == "gguf" else "-st"
        write = mkmodel.write_gguf if fmt == "gguf" else mkmodel.write_safetensors
        smol, llama = os.path.join(tmp, f"smol-all{ext}"), os.path.join(tmp, f"smol-llama{ext}")
        write(mkmodel.build_config("test-smollm3", layers=layers, **extra), smol, "F32", seed=23)
        write(mkmodel.Config(**dict(mkmodel.PRESETS["test-smollm3"], arch="llama", layers=layers,
                                    no_rope_interval=None)), llama, "F32", seed=23)
        ms = reference.Model(smol)
        err = float(np.abs(reference.forward(ms, tokens).numpy() -
                           reference.forward(reference.Model(llama), tokens).numpy()).max())
        print(f"smollm3 {fmt}, every layer with RoPE, vs llama: max |diff| {err:.1e}")
        if ms.no_rope_layers or err > 1e-12:
            fail(f"smollm3 {fmt} without no-RoPE layers differs from llama by {err:.2e} ({ms.no_rope_layers})")
    for fmt in ("gguf", "safetensors"):
        path = os.path.join(tmp, "smol" + (".gguf" if fmt == "gguf" else "-st"))
        (mkmodel.write_gguf if fmt == "gguf" else mkmodel.write_safetensors)(
            mkmodel.build_config("test-smollm3"), path, "F32", seed=24)
        m = reference.Model(path)
        if m.no_rope_layers != {3}:
            fail(f"smollm3 {fmt}: the reference read no-RoPE layers {sorted(m.no_rope_layers)}, not [3]")
        a = reference.forward(m, tokens).numpy()
        m.no_rope_layers = set()
        moved(f"smollm3 {fmt} layer 3 without RoPE", a, reference.forward(m, tokens).numpy())
    # Attention sinks: a sink is one more softmax column with no value; -inf is no sink.
    rng = np.random.default_rng(10)
    q, k, v = (torch.tensor(rng.standard_normal((9, 3, 8))) for _ in range(3))
    mask = reference.causal_mask(9, 4)
    sinks = torch.tensor([0.5, -1.0, 2.0])
    got = reference.attention(q, k, v, mask, math.sqrt(8), sinks).numpy()
    want = np.zeros_like(got)
    for p in range(9):
        for h in range(3):
            keys = range(max(0, p - 3), p + 1)
            s = [float(q[p, h] @ k[t, h]) / math.sqrt(8) for t in keys] + [float(sinks[h])]
            e = np.exp(np.array(s) - max(s))
            e /= e.sum()
            want[p, h] = sum(e[i] * v[t, h].numpy() for i, t in enumerate(keys))
    none = reference.attention(q, k, v, mask, math.sqrt(8), torch.full((3,), float("-inf"))).numpy()
    plain = reference.attention(q, k, v, mask, math.sqrt(8)).numpy()
    err, err_none = float(np.abs(got - want).max()), float(np.abs(none - plain).max())
    print(f"attention sinks: vs a loop {err:.1e}; -inf sinks vs none {err_none:.1e}")
    if err > 1e-12 or err_none > 0:
        fail(f"attention sinks: {err:.2e} from the loop, {err_none:.2e} from no sinks at -inf")


# OLMo 2's Hugging Face names after "model.layers.N." (modeling_olmo2.py), by canonical (GGUF) name.
OLMO2_HF_LAYER = {"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
                  "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
                  "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
                  "post_attention_norm.weight": "post_attention_layernorm.weight",
                  "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
                  "ffn_down.weight": "mlp.down_proj.weight",
                  "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}
OLMO2_HF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                   "output.weight": "lm_head.weight"}


def olmo2_weights(cfg, seed=None, path=None):
    """OLMo 2's weights by canonical name, as float64 tensors (None for an absent output.weight): straight
    from mkmodel's generator (seed), or as stored (dequantized) in a GGUF file or a safetensors directory
    (path), whose Hugging Face names are looked up in the table above, not in mkmodel's."""
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
        tied = json.load(open(os.path.join(path, "config.json"))).get("tie_word_embeddings", False)

        def fetch(name):
            if name == "output.weight" and tied:
                return None
            if name.startswith("blk."):
                _, layer, rest = name.split(".", 2)
                name = f"model.layers.{layer}.{OLMO2_HF_LAYER[rest]}"
            else:
                name = OLMO2_HF_GLOBAL[name]
            return where[name].tensor(name) if name in where else None

    def w(name):
        x = fetch(name)
        return None if x is None else torch.from_numpy(np.array(x, dtype=np.float64))
    return w


def olmo2_rope(x, theta):
    """Rotate-half RoPE on x [T, heads, head_dim] at positions 0..T-1, as modeling_olmo2.py's
    apply_rotary_pos_emb: x cos + rotate_half(x) sin, inverse frequencies theta^(-2i/head_dim) for each half."""
    T, hd = x.shape[0], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :], torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin


def olmo2_attention(q, k, v):
    """Causal GQA attention, q [T, H, hd], k and v [T, KV, hd]: query head j reads KV head j // (H / KV)
    (repeat_kv), scores / sqrt(hd)."""
    T, H, hd = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    a = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask, dim=-1)
    return torch.einsum("hqk,khd->qhd", a, v)


def olmo2_by_hand(cfg, w, tokens, kv_f16=False, qk_norm_per_head=False):
    """OLMo 2 in torch float64, written from transformers' modeling_olmo2.py: Olmo2RMSNorm is
    x * rsqrt(mean(x^2) + eps) * w; Olmo2Attention norms q_proj(x) and k_proj(x) over their whole width
    (n_heads * head_dim, n_kv_heads * head_dim) before splitting them into heads, then rotate-half RoPE,
    causal GQA attention, o_proj; Olmo2DecoderLayer has no input norms: h = x + post_attention_layernorm(
    attn(x)), out = h + post_feedforward_layernorm(down(silu(gate(h)) * up(h))); the final norm, then
    lm_head (the embedding when tied). w: olmo2_weights. kv_f16 rounds cached keys (after RoPE) and values
    to float16, as pith run's default cache. qk_norm_per_head norms each head by its slice of the weight
    instead (Qwen3's way): only to show that the cases tell the two apart."""
    T, H, KV, hd = len(tokens), cfg.heads, cfg.kv_heads, cfg.head_dim

    def norm(x, weight):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + cfg.eps) * weight

    x = w("token_embd.weight")[torch.tensor(tokens)]
    for i in range(cfg.layers):
        b = f"blk.{i}."
        q, k, v = (x @ w(b + n + ".weight").T for n in ("attn_q", "attn_k", "attn_v"))
        qn, kn = w(b + "attn_q_norm.weight"), w(b + "attn_k_norm.weight")
        if qk_norm_per_head:
            q, k = norm(q.view(T, H, hd), qn.view(H, hd)), norm(k.view(T, KV, hd), kn.view(KV, hd))
        else:
            q, k = norm(q, qn).view(T, H, hd), norm(k, kn).view(T, KV, hd)
        q, k, v = olmo2_rope(q, cfg.theta), olmo2_rope(k, cfg.theta), v.view(T, KV, hd)
        if kv_f16:
            k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
        o = olmo2_attention(q, k, v).reshape(T, H * hd) @ w(b + "attn_output.weight").T
        x = x + norm(o, w(b + "post_attention_norm.weight"))
        f = torch.nn.functional.silu(x @ w(b + "ffn_gate.weight").T) * (x @ w(b + "ffn_up.weight").T)
        x = x + norm(f @ w(b + "ffn_down.weight").T, w(b + "post_ffw_norm.weight"))
    out = w("output.weight")
    return (norm(x, w("output_norm.weight")) @ (w("token_embd.weight") if out is None else out).T).numpy()


def check_olmo2(pith, tmp):
    """OLMo 2. First the reference: its RoPE and attention against tools/reference.py's (written
    separately), the weights of a GGUF file and a safetensors directory of one seed against the generator's,
    and the whole-width QK norm moving the logits far from a per-head one. Then pith against it
    (OLMO2_PRESETS' comment), and pith's F32 GGUF and safetensors against each other."""
    rng = np.random.default_rng(26)
    x = torch.tensor(rng.standard_normal((20, 4, 64)))
    err = float((olmo2_rope(x, 5e5) - reference.rope(x, torch.arange(20), 5e5, "half", None)).abs().max())
    q, k, v = torch.tensor(rng.standard_normal((20, 4, 16))), *(torch.tensor(rng.standard_normal((20, 2, 16)))
                                                               for _ in range(2))
    want = reference.attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), reference.causal_mask(20), 4.0)
    err = max(err, float((olmo2_attention(q, k, v) - want).abs().max()))
    print(f"olmo2: RoPE and attention vs tools/reference.py's: max |diff| {err:.1e}")
    if err > 1e-12:
        fail(f"olmo2: the reference's RoPE or attention differs from tools/reference.py's by {err:.2e}")
    T = N_GEN_LONG
    tokens = [1] + list(np.random.default_rng(27).integers(3, 512, T - 1))
    seed = 1000   # fixed, whatever the cases before number
    for preset in OLMO2_PRESETS:
        cfg = mkmodel.build_config(preset)
        for tied in (False, True):
            c = mkmodel.build_config(preset, tied=tied)
            gpath, spath = os.path.join(tmp, f"x-{preset}-{tied}.gguf"), os.path.join(tmp, f"x-{preset}-{tied}-st")
            mkmodel.write_gguf(c, gpath, "F32", seed=seed)
            mkmodel.write_safetensors(c, spath, "F32", seed=seed, shards=2)
            base = olmo2_by_hand(c, olmo2_weights(c, seed=seed), tokens)
            if not tied:
                moved("olmo2 QK norm over the whole projection (vs per head)", base,
                      olmo2_by_hand(c, olmo2_weights(c, seed=seed), tokens, qk_norm_per_head=True))
            for fmt, path in (("gguf", gpath), ("safetensors", spath)):
                # F32 files hold the generator's float32 values as they are: the same function exactly.
                err = float(np.abs(olmo2_by_hand(c, olmo2_weights(c, path=path), tokens) - base).max())
                print(f"{preset}{' tied' if tied else ''}: reference on the {fmt} file vs on the generator's "
                      f"weights: {err:.1e}")
                if err > 0:
                    fail(f"{preset}{' tied' if tied else ''}: the {fmt} file's weights differ from the generator's "
                         f"({err:.2e} in the logits)")
        f32 = {}
        for fmt, dtype in (("gguf", "F32"), ("gguf", "Q8_0"), ("safetensors", "F32"), ("safetensors", "BF16")):
            model, tok, n_vocab = make_model(tmp, preset, fmt, dtype, seed)
            w = olmo2_weights(cfg, path=model)

            def ref(toks, kv_f16, w=w):
                return olmo2_by_hand(cfg, w, toks, kv_f16=kv_f16)
            name = f"{preset} {fmt} {dtype}"
            compare(pith, tmp, name, model, tok, n_vocab, tolerance_kind(dtype), n_gen=N_GEN_LONG, ref_fn=ref)
            if dtype != "F32":
                continue
            f32[fmt] = (model, tok)
            if fmt == "gguf":
                compare(pith, tmp, name + " kv-f16", model, tok, n_vocab, "float-kv16", kv_f32=False,
                        n_gen=N_GEN_LONG, ref_fn=ref)
            for chunk in (7, 2048):
                compare(pith, tmp, f"{name} prompt/{chunk}", model, tok, n_vocab, "float", n_gen=N_GEN_PROMPT,
                        prompt=PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)), ref_fn=ref)
        # (b) Pith's two F32 formats of one seed (make_model wrote both with `seed`), from BOS and from the
        # prompt in chunks of 7.
        for what, kw in (("from BOS", dict(n_gen=N_GEN_LONG)),
                         ("prompt/7", dict(n_gen=N_GEN_PROMPT, prompt=PROMPT_TEXT, extra=("--max-batch-tokens", "7")))):
            runs = [pith_logits(pith, tmp, f"{preset} {fmt} F32 {what}", *f32[fmt], cfg.vocab, **kw)
                    for fmt in ("gguf", "safetensors")]
            if None in runs:
                continue
            (pa, a), (pb, b) = runs
            err = float(np.abs(a - b).max())
            print(f"{preset}: pith GGUF vs safetensors F32, {what}: max |diff| {err:.1e} "
                  f"(bound {OLMO2_CROSS_FORMAT:g})")
            if pa != pb or err > OLMO2_CROSS_FORMAT:
                fail(f"{preset}: pith's GGUF and safetensors logits differ by {err:.2e} {what}")


def run_pith(pith, model, tokenizer, out, kv_f32, n_gen=N_GEN, prompt="", extra=()):
    cmd = [pith, "run", "-m", model, "-p", prompt, "-n", str(n_gen), "--temp", "0", "--ignore-eos", "-t", "2",
           "--logits-out", out, *extra]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    if kv_f32:
        cmd.append("--kv-f32")
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    except subprocess.TimeoutExpired:
        return "timed out after 120 s"
    if r.returncode != 0:
        return f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-400:]}"
    return None


def make_model(tmp, preset, fmt, dtype, seed):
    cfg = mkmodel.build_config(preset)
    if fmt == "gguf":
        model, tokenizer = os.path.join(tmp, f"{preset}-{dtype}.gguf"), None
        mkmodel.write_gguf(cfg, model, dtype, seed=seed)
    else:
        model = os.path.join(tmp, f"{preset}-{dtype}-st")
        # The BF16 directories go through a sharded index.
        mkmodel.write_safetensors(cfg, model, dtype, seed=seed, shards=2 if dtype == "BF16" else 1)
        tokenizer = os.path.join(model, "tokenizer.bin")
    return model, tokenizer, cfg.vocab


def tokenize(pith, model, tokenizer, text):
    r = subprocess.run([pith, "tokenize", "-m", tokenizer or model], input=text.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        fail(f"pith tokenize {tokenizer or model}: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return None
    return [int(t) for t in r.stdout.split()]


def pith_logits(pith, tmp, name, model, tokenizer, n_vocab, kv_f32=True, n_gen=N_GEN, prompt="", extra=()):
    """Run pith on the model (from BOS, or from `prompt` with `extra` options): (prompt ids, the logits rows
    of the n_gen generated tokens as float64), or None after a failure."""
    out = os.path.join(tmp, "logits.bin")
    if os.path.exists(out):
        os.remove(out)
    prompt_ids = tokenize(pith, model, tokenizer, prompt) if prompt else [mkmodel.BOS_ID]
    if prompt_ids is None:
        return None
    err = run_pith(pith, model, tokenizer, out, kv_f32, n_gen, prompt, extra)
    if err:
        fail(f"{name}: pith run failed: {err}")
        return None
    raw = open(out, "rb").read()
    if len(raw) != n_gen * n_vocab * 4:
        fail(f"{name}: --logits-out wrote {len(raw)} bytes, expected {n_gen} x {n_vocab} float32")
        return None
    got = np.frombuffer(raw, dtype="<f4").reshape(n_gen, n_vocab).astype(np.float64)
    if not np.all(np.isfinite(got)):
        fail(f"{name}: non-finite logits")
        return None
    return prompt_ids, got


def compare(pith, tmp, name, model, tokenizer, n_vocab, kind, kv_f32=True, n_gen=N_GEN, prompt="", extra=(),
            ref_fn=None):
    """Run pith on the model (from BOS, or from `prompt` with `extra` options) and check the logits rows of
    the generated tokens against the reference: reference.forward on the file, or ref_fn(tokens, kv_f16), a
    function giving float64 logits [len(tokens), n_vocab] (OLMo 2's, which tools/reference.py does not
    read; no act-q8 simulation then). Returns the max error."""
    r = pith_logits(pith, tmp, name, model, tokenizer, n_vocab, kv_f32, n_gen, prompt, extra)
    if r is None:
        return None
    prompt_ids, got = r
    chosen = got.argmax(axis=1)
    tokens = prompt_ids + [int(t) for t in chosen[:-1]]
    rows = slice(len(prompt_ids) - 1, None)   # the rows the generated tokens were chosen from
    m = reference.Model(model) if ref_fn is None else None

    def forward(kv_f16=False, act_q8=False):
        if ref_fn is not None:
            return ref_fn(tokens, kv_f16)
        return reference.forward(m, tokens, act_q8=act_q8, kv_f16=kv_f16).numpy()
    exact = forward()[rows]
    err_exact = np.abs(got - exact)
    tol, tol_mean, act_block = TOLERANCES[kind]
    info = ""
    if kind == "float-kv16":
        ref = forward(kv_f16=True)[rows]
        if err_exact.max() > TOL_KV16_VS_EXACT:
            fail(f"{name}: max |error| vs the exact reference {err_exact.max():.2e} > {TOL_KV16_VS_EXACT}")
        info = f"  vs exact {err_exact.max():.1e}"
    else:
        ref = exact
    err = np.abs(got - ref)
    if act_block and m is not None:
        # For information only: distance to a reference that rounds activations as integer kernels do
        # (the scheme is the kernels' choice, so it is not asserted).
        sim = forward(act_q8=act_block)[rows]
        info = f"  vs act-q8/{act_block} sim {np.abs(got - sim).max():.1e}"
    worst = float(err.max())
    row, col = np.unravel_index(int(err.argmax()), err.shape)
    if worst > tol:
        fail(f"{name}: max |logit error| {worst:.3e} > {tol} (step {row}, token {col})")
    if tol_mean is not None and err.mean() > tol_mean:
        fail(f"{name}: mean |logit error| {err.mean():.4f} > {tol_mean}")
    # Where the reference's top-2 gap exceeds twice the tolerance, the greedy choices must agree.
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * tol
    disagree = [i for i in range(n_gen) if decisive[i] and ref[i].argmax() != chosen[i]]
    if disagree:
        fail(f"{name}: greedy token differs from the reference's at steps {disagree}")
    print(f"{name:34s} max|err| {worst:.2e} (tol {tol:g})  mean {err.mean():.1e}  "
          f"argmax checked {int(decisive.sum()):2d}/{n_gen}{info}", flush=True)
    return worst


LINEAR_FACTOR = 4.0


def check_linear_scaling(pith, tmp, seed):
    """Linear RoPE scaling (factor 4, so every frequency and each position's angle shrinks fourfold) in
    GGUF metadata and in config.json. The reference must also tell the scaled model from the unscaled
    one by far more than the tolerance, or the comparison could not catch a loader that drops it."""
    cfg = mkmodel.build_config("test-llama", rope_scaling="linear", rope_factor=LINEAR_FACTOR)
    for fmt in ("gguf", "safetensors"):
        if fmt == "gguf":
            model, tok = os.path.join(tmp, f"linear-{seed}.gguf"), None
            mkmodel.write_gguf(cfg, model, "F32", seed=seed)
        else:
            model = os.path.join(tmp, f"linear-{seed}-st")
            mkmodel.write_safetensors(cfg, model, "F32", seed=seed)
            tok = os.path.join(model, "tokenizer.bin")
        m = reference.Model(model)
        if m.position_scale != 1 / LINEAR_FACTOR:
            fail(f"linear {fmt}: the reference read position scale {m.position_scale}")
        tokens = [mkmodel.BOS_ID] + list(np.random.default_rng(seed).integers(3, cfg.vocab, N_GEN - 1))
        scaled = reference.forward(m, tokens).numpy()
        m.position_scale = 1.0
        unscaled = reference.forward(m, tokens).numpy()
        moved = float(np.abs(scaled - unscaled).max())
        print(f"linear {fmt}: scaling moves the reference logits by up to {moved:.2f}")
        if moved < 100 * TOLERANCES["float"][0]:
            fail(f"linear {fmt}: scaling changes the logits by only {moved:.2e}; the case would not test it")
        compare(pith, tmp, f"test-llama {fmt} F32 linear x{LINEAR_FACTOR:g}", model, tok, cfg.vocab, "float")
        seed += 1


def main():
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.access(pith, os.X_OK):
        print(f"FAIL: PITH_BIN ({pith!r}) is not an executable pith binary")
        return 1
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="refmodels-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference_on_stories260k(tmp)
        check_cross_format(tmp)
        # A file written by llama.cpp's tools rather than ours (F16, dim 8, 32,000-token vocabulary).
        fixture = os.path.join(os.environ.get("PITH_SHARED") or os.path.join(HERE, "..", "..", "shared"),
                               "models", "fixtures", "llama-2-tiny-random.gguf")
        if os.path.exists(fixture):
            compare(pith, tmp, "llama-2-tiny-random (llama.cpp)", fixture, None, 32000, "float")
        else:
            print(f"note: {fixture} is absent; skipping that case")
        seed = 100
        for preset in PRESETS:
            for fmt, types in (("gguf", GGUF_TYPES), ("safetensors", ST_TYPES)):
                for dtype in types:
                    model, tok, n_vocab = make_model(tmp, preset, fmt, dtype, seed)
                    compare(pith, tmp, f"{preset} {fmt} {dtype}", model, tok, n_vocab, tolerance_kind(dtype))
                    if dtype == "F32" and fmt == "gguf":
                        # pith run's default cache type, once per configuration.
                        compare(pith, tmp, f"{preset} {fmt} {dtype} kv-f16", model, tok, n_vocab,
                                "float-kv16", kv_f32=False)
                    seed += 1
        for preset in KQUANT_PRESETS:
            for dtype in KQUANT_TYPES:
                model, tok, n_vocab = make_model(tmp, preset, "gguf", dtype, seed)
                compare(pith, tmp, f"{preset} gguf {dtype}", model, tok, n_vocab, tolerance_kind(dtype))
                seed += 1
        check_linear_scaling(pith, tmp, seed)
        seed += 2
        check_new_references(tmp)
        for preset in NEW_PRESETS + NEW_ST_ONLY:
            fmts = ("safetensors",) if preset in NEW_ST_ONLY else ("gguf", "safetensors")
            for fmt in fmts:
                model, tok, n_vocab = make_model(tmp, preset, fmt, "F32", seed)
                compare(pith, tmp, f"{preset} {fmt} F32", model, tok, n_vocab, "float", n_gen=N_GEN_LONG)
                if fmt == "gguf":
                    compare(pith, tmp, f"{preset} {fmt} F32 kv-f16", model, tok, n_vocab, "float-kv16",
                            kv_f32=False, n_gen=N_GEN_LONG)
                # A prompt longer than three windows, prefilled 7 tokens at a time and in one chunk.
                for chunk in (7, 2048):
                    compare(pith, tmp, f"{preset} {fmt} F32 prompt/{chunk}", model, tok, n_vocab, "float",
                            n_gen=N_GEN_PROMPT, prompt=PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)))
                seed += 1
        check_hybrid_references(tmp)
        seed = 900   # fixed, whatever the cases above number
        for preset in HYBRID_PRESETS:
            for fmt in ("gguf", "safetensors"):
                model, tok, n_vocab = make_model(tmp, preset, fmt, "F32", seed)
                compare(pith, tmp, f"{preset} {fmt} F32", model, tok, n_vocab, "float", n_gen=N_GEN_LONG)
                if fmt == "gguf":
                    compare(pith, tmp, f"{preset} {fmt} F32 kv-f16", model, tok, n_vocab, "float-kv16",
                            kv_f32=False, n_gen=N_GEN_LONG)
                for chunk in (7, 2048):
                    compare(pith, tmp, f"{preset} {fmt} F32 prompt/{chunk}", model, tok, n_vocab, "float",
                            n_gen=N_GEN_HYBRID, prompt=HYBRID_PROMPT, extra=("--max-batch-tokens", str(chunk)))
                seed += 1
            model, tok, n_vocab = make_model(tmp, preset, "gguf", "Q8_0", seed)
            # Granite 4.0-H in Q8_0 (seed 950, 24 tokens): max 0.093 / mean 0.016 dense, 0.076 / 0.010 with
            # experts, inside q32 and moe-q32 (a router can flip on the rounded input, as for Qwen3-MoE).
            # Nemotron-H in Q8_0 (seed 917, 24 tokens): max 0.110 / mean 0.018, inside q32.
            q8 = {"test-qwen35": "q32-delta", "test-qwen35moe": "q32-delta", "test-lfm2": "q32-gated", "test-granitehybrid": "q32",
                  "test-nemotronh": "q32"}
            compare(pith, tmp, f"{preset} gguf Q8_0", model, tok, n_vocab, q8.get(preset, "moe-q32"))
            seed += 1
        for preset in MULTIMODAL_PRESETS:
            model = os.path.join(tmp, f"{preset}-mm-st")
            cfg = mkmodel.build_config(preset, hf_type="multimodal")
            mkmodel.write_safetensors(cfg, model, "F32", seed=seed)
            compare(pith, tmp, f"{preset} multimodal safetensors F32", model, os.path.join(model, "tokenizer.bin"),
                    cfg.vocab, "float", n_gen=N_GEN_LONG)
            seed += 1
        check_yarn_reference(tmp)
        for preset in YARN_PRESETS + YARN_ST_ONLY:
            for fmt in (("safetensors",) if preset in YARN_ST_ONLY else ("gguf", "safetensors")):
                model, tok, n_vocab = make_model(tmp, preset, fmt, "F32", seed)
                compare(pith, tmp, f"{preset} {fmt} F32", model, tok, n_vocab, "float", n_gen=N_GEN_LONG)
                seed += 1
        check_moe_references(tmp)
        check_gptoss_references(tmp)
        for preset in GPTOSS_PRESETS + GPTOSS_ST_ONLY:
            cases = [("safetensors", t) for t in MOE_ST_TYPES]
            if preset not in GPTOSS_ST_ONLY:
                cases = [("gguf", t) for t in GPTOSS_GGUF_TYPES] + cases
            for fmt, dtype in cases:
                model, tok, n_vocab = make_model(tmp, preset, fmt, dtype, seed)
                kind = "moe-q32" if tolerance_kind(dtype) == "q32" else tolerance_kind(dtype)
                compare(pith, tmp, f"{preset} {fmt} {dtype}", model, tok, n_vocab, kind, n_gen=N_GEN_LONG)
                if dtype == "F32":
                    for chunk in (7, 2048):
                        compare(pith, tmp, f"{preset} {fmt} F32 prompt/{chunk}", model, tok, n_vocab, "float",
                                n_gen=N_GEN_PROMPT, prompt=PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)))
                seed += 1
        for preset in MOE_PRESETS + MOE_ST_ONLY:
            cases = [("safetensors", t) for t in MOE_ST_TYPES]
            if preset not in MOE_ST_ONLY:
                cases = [("gguf", t) for t in MOE_GGUF_TYPES] + cases
            for fmt, dtype in cases:
                model, tok, n_vocab = make_model(tmp, preset, fmt, dtype, seed)
                kind = "moe-q32" if tolerance_kind(dtype) == "q32" else tolerance_kind(dtype)
                compare(pith, tmp, f"{preset} {fmt} {dtype}", model, tok, n_vocab, kind)
                if dtype == "F32":
                    for chunk in (7, 2048):
                        compare(pith, tmp, f"{preset} {fmt} F32 prompt/{chunk}", model, tok, n_vocab, "float",
                                n_gen=N_GEN_PROMPT, prompt=PROMPT_TEXT, extra=("--max-batch-tokens", str(chunk)))
                seed += 1
        check_olmo2(pith, tmp)
    print(f"{time.time() - t0:.1f} s")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all reference model checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
