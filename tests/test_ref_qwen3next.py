"""Qwen3-Next (qwen3next) against its own float64 torch reference, qwen3next_by_hand, written from
transformers' models/qwen3_next/modeling_qwen3_next.py (Qwen3NextForCausalLM) and run on the weights of
the file pith runs (dequantized, so a quantized file is checked against the function its weights hold).

The reference reads the Hugging Face layout (in_proj_qkvz and in_proj_ba grouped per key head, undone by
fix_query_key_value_ordering; norms (1 + w); A_log); a GGUF file is turned back into it (weights_from_gguf:
w + 1 norms minus 1, ssm_a = -exp(A_log), attn_qkv and attn_gate fused again per key head, or the older
ssm_in as it is). Before trusting it the test checks: the recurrent gated delta rule against transformers'
chunked form (torch_chunk_gated_delta_rule, transcribed), a GGUF file (both layouts) and a safetensors
directory of one seed giving the same logits, and the features Pith could get wrong moving the logits
(the grouped value-head order, the fused projections' grouping, partial RoPE, norm_topk_prob).

Pith cases (tests/test_reference_models.py's compare, tolerances in its TOLERANCES and docs/testing.md):
test-qwen3next GGUF F32 (F32 and F16 cache), GGUF F32 of the older ssm_in layout, safetensors F32 and BF16,
each from BOS (72 tokens) and the GGUF / safetensors F32 ones also from a 153-token prompt (more than two
64-token DeltaNet chunks) prefilled in chunks of 7 and in one, 64 tokens generated; GGUF Q8_0 and
test-qwen3next-k (widths multiples of 256) in Q4_K_M and Q6_K, all three under "q32-delta", Qwen3.5's
quantized tolerance: the rounded activations feed the DeltaNet's gates, L2 norms and recurrent state, and
the router can flip on them (measured: Q8_0 0.70 max / 0.046 mean, Q4_K_M 0.57 / 0.051, Q6_K 0.51 / 0.039,
above "qk"'s 0.4); pith's GGUF and safetensors F32 logits of one seed against each other; where a Vulkan
device can run pith, the GGUF F32 file again on the device, from BOS and from the prompt in chunks of 7
(check_vulkan). Each case prints its measured max error.

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
    import torch.nn.functional as F
except ImportError as e:
    print(f"skip: {e.name} is not importable (the float64 reference needs numpy and torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import pith_gguf as G  # noqa: E402
import reference  # noqa: E402
import test_reference_models as T  # noqa: E402  (its checks run only under __main__)

PRESET = "test-qwen3next"
KQUANT_PRESET = "test-qwen3next-k"
KQUANT_TYPES = ["Q4_K_M", "Q6_K"]
CROSS_FORMAT_BOUND = 3e-5   # GGUF's float32(1 + w) norms and float32(-exp(A_log)) (Qwen3.5 measured 1.2e-5)


def fail(msg):
    T.fail(msg)


# ---------------------------------------------------------------------------------------------------------
# Weights in the Hugging Face layout, by Hugging Face name, as float64 tensors.

class Config:
    """The hyper-parameters the reference reads, from config.json or the GGUF metadata."""

    def __init__(self, path):
        if path.endswith(".gguf"):
            r = G.GGUFReader(path)
            md, a = r.metadata, "qwen3next"
            self.dim, self.layers = int(md[f"{a}.embedding_length"]), int(md[f"{a}.block_count"])
            self.heads, self.kv_heads = int(md[f"{a}.attention.head_count"]), int(md[f"{a}.attention.head_count_kv"])
            self.head_dim = int(md.get(f"{a}.attention.key_length", self.dim // self.heads))
            self.eps, self.theta = float(md[f"{a}.attention.layer_norm_rms_epsilon"]), float(md[f"{a}.rope.freq_base"])
            self.rot = int(md.get(f"{a}.rope.dimension_count", self.head_dim))
            self.K, self.dk = int(md[f"{a}.ssm.conv_kernel"]), int(md[f"{a}.ssm.state_size"])
            self.nk, self.nv = int(md[f"{a}.ssm.group_count"]), int(md[f"{a}.ssm.time_step_rank"])
            self.dv = int(md[f"{a}.ssm.inner_size"]) // self.nv
            self.interval = int(md.get(f"{a}.full_attention_interval", 4))
            self.experts, self.used = int(md[f"{a}.expert_count"]), int(md[f"{a}.expert_used_count"])
            self.norm_topk = True   # llama.cpp's qwen3next always renormalises
            self.linear = [(i + 1) % self.interval != 0 for i in range(self.layers)]
            r.close()
            return
        c = json.load(open(os.path.join(path, "config.json")))
        self.dim, self.layers, self.heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
        self.kv_heads, self.head_dim = c["num_key_value_heads"], c.get("head_dim") or self.dim // self.heads
        self.eps, self.theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
        self.rot = int(self.head_dim * c.get("partial_rotary_factor", 0.25))
        self.K, self.dk, self.dv = c["linear_conv_kernel_dim"], c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.nk, self.nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.interval = c.get("full_attention_interval", 4)
        self.experts, self.used = c["num_experts"], c["num_experts_per_tok"]
        self.norm_topk = c.get("norm_topk_prob", True)
        kinds = c.get("layer_types") or ["linear_attention" if (i + 1) % self.interval else "full_attention"
                                         for i in range(self.layers)]
        self.linear = [k == "linear_attention" for k in kinds]


def weights_from_safetensors(path):
    index = os.path.join(path, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
             else ["model.safetensors"])
    where = {}
    for fn in files:
        st = reference.SafetensorsFile(os.path.join(path, fn))
        where.update({name: st for name in st.header})
    tied = json.load(open(os.path.join(path, "config.json"))).get("tie_word_embeddings", False)

    def w(name):
        if name == "lm_head.weight" and tied:
            name = "model.embed_tokens.weight"
        return torch.from_numpy(np.array(where[name].tensor(name), dtype=np.float64))
    return w


def regroup(x, groups, widths):
    """Rows [part 0 of every group | part 1 ...] -> per group [part 0 | part 1 | ...] (in_proj_qkvz's order)."""
    starts = np.cumsum([0] + [groups * w for w in widths])
    return torch.cat([x[starts[p] + g * wd:starts[p] + (g + 1) * wd] for g in range(groups)
                      for p, wd in enumerate(widths)], dim=0)


def weights_from_gguf(path, cfg):
    """The GGUF file's tensors under their Hugging Face names, undoing llama.cpp's converter."""
    r = G.GGUFReader(path)

    def g(name):
        return torch.from_numpy(np.array(r.tensor(name), dtype=np.float64))

    r_ = cfg.nv // cfg.nk
    layer_map = {"input_layernorm.weight": ("attn_norm.weight", -1), "post_attention_layernorm.weight":
                 ("post_attention_norm.weight", -1), "self_attn.q_proj.weight": ("attn_q.weight", 0),
                 "self_attn.k_proj.weight": ("attn_k.weight", 0), "self_attn.v_proj.weight": ("attn_v.weight", 0),
                 "self_attn.o_proj.weight": ("attn_output.weight", 0),
                 "self_attn.q_norm.weight": ("attn_q_norm.weight", -1),
                 "self_attn.k_norm.weight": ("attn_k_norm.weight", -1),
                 "linear_attn.in_proj_ba.weight": ("ssm_ba.weight", 0),
                 "linear_attn.dt_bias": ("ssm_dt.bias", 0), "linear_attn.norm.weight": ("ssm_norm.weight", 0),
                 "linear_attn.out_proj.weight": ("ssm_out.weight", 0), "mlp.gate.weight": ("ffn_gate_inp.weight", 0),
                 "mlp.shared_expert.gate_proj.weight": ("ffn_gate_shexp.weight", 0),
                 "mlp.shared_expert.up_proj.weight": ("ffn_up_shexp.weight", 0),
                 "mlp.shared_expert.down_proj.weight": ("ffn_down_shexp.weight", 0)}

    def w(name):
        if name == "model.embed_tokens.weight":
            return g("token_embd.weight")
        if name == "model.norm.weight":
            return g("output_norm.weight") - 1
        if name == "lm_head.weight":
            return g("output.weight") if "output.weight" in r.tensors else g("token_embd.weight")
        _, _, i, rest = name.split(".", 3)
        b = f"blk.{i}."
        if rest in layer_map:
            n, shift = layer_map[rest]
            return g(b + n) + shift
        if rest == "linear_attn.in_proj_qkvz.weight":
            if b + "ssm_in.weight" in r.tensors:
                return g(b + "ssm_in.weight")
            return regroup(torch.cat([g(b + "attn_qkv.weight"), g(b + "attn_gate.weight")]), cfg.nk,
                           [cfg.dk, cfg.dk, r_ * cfg.dv, r_ * cfg.dv])
        if rest == "linear_attn.conv1d.weight":
            x = g(b + "ssm_conv1d.weight")
            return x.reshape(x.shape[0], 1, x.shape[-1])
        if rest == "linear_attn.A_log":
            return torch.log(-g(b + "ssm_a"))
        if rest == "mlp.shared_expert_gate.weight":
            return g(b + "ffn_gate_inp_shexp.weight").reshape(1, -1)
        if rest.startswith("mlp.experts."):
            _, _, e, proj, _ = rest.split(".")
            return g(b + f"ffn_{proj.split('_')[0]}_exps.weight")[int(e)]
        raise KeyError(name)
    return w


def load(path):
    cfg = Config(path)
    return cfg, (weights_from_gguf(path, cfg) if path.endswith(".gguf") else weights_from_safetensors(path))


# ---------------------------------------------------------------------------------------------------------
# The forward pass (modeling_qwen3_next.py), float64, one sequence from position 0.

def rms_1p(x, w, eps):
    """Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(q, k, v, g, beta):
    """torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel: q, k [T, H, dk], v [T, H, dv],
    g, beta [T, H]; returns [T, H, dv]."""
    q, k = l2norm(q) / math.sqrt(q.shape[-1]), l2norm(k)
    Tn, H, dk = k.shape
    S = torch.zeros(H, dk, v.shape[-1], dtype=torch.float64)
    out = torch.empty(Tn, H, v.shape[-1], dtype=torch.float64)
    for t in range(Tn):
        S = S * g[t].exp()[:, None, None]
        kv = (S * k[t][:, :, None]).sum(-2)
        delta = (v[t] - kv) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        out[t] = (S * q[t][:, :, None]).sum(-2)
    return out


def chunk_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """torch_chunk_gated_delta_rule (transcribed, one sequence), for checking the recurrent form."""
    q, k = l2norm(q), l2norm(k)
    q, k, v, beta, g = (x.transpose(0, 1) for x in (q, k, v, beta, g))   # [H, T, ...]
    H, Tn, dk = k.shape
    pad = (chunk - Tn % chunk) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    q = q / math.sqrt(dk)
    v_beta, k_beta = v * beta[..., None], k * beta[..., None]
    q, k, v, k_beta, v_beta = (x.reshape(H, -1, chunk, x.shape[-1]) for x in (q, k, v, k_beta, v_beta))
    g = g.reshape(H, -1, chunk).cumsum(-1)
    mask = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=0)
    decay = (g[..., :, None] - g[..., None, :]).tril().exp().tril()
    attn = -((k_beta @ k.transpose(-1, -2)) * decay).masked_fill(mask, 0)
    for i in range(1, chunk):
        row, sub = attn[..., i, :i].clone(), attn[..., :i, :i].clone()
        attn[..., i, :i] = row + (row[..., None] * sub).sum(-2)
    attn = attn + torch.eye(chunk, dtype=torch.float64)
    value = attn @ v_beta
    k_cumdecay = attn @ (k_beta * g.exp()[..., None])
    S = torch.zeros(H, dk, v.shape[-1], dtype=torch.float64)
    out = torch.zeros_like(value)
    mask = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=1)
    for i in range(value.shape[1]):
        qi, ki = q[:, i], k[:, i]
        a = (qi @ ki.transpose(-1, -2) * decay[:, i]).masked_fill(mask, 0)
        v_new = value[:, i] - k_cumdecay[:, i] @ S
        out[:, i] = (qi * g[:, i, :, None].exp()) @ S + a @ v_new
        S = S * g[:, i, -1, None, None].exp() + (ki * (g[:, i, -1, None] - g[:, i]).exp()[..., None]).transpose(
            -1, -2) @ v_new
    return out.reshape(H, -1, v.shape[-1])[:, :Tn].transpose(0, 1)


def rope_partial(x, rot, theta):
    """apply_rotary_pos_emb over the first rot dims (rotate_half), positions 0..T-1; x [T, heads, hd]."""
    Tn = x.shape[0]
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    rh = torch.cat([-xr[..., rot // 2:], xr[..., :rot // 2]], -1)
    return torch.cat([xr * cos + rh * sin, xp], -1)


def qwen3next_by_hand(cfg, w, tokens, kv_f16=False, tiled=False, grouping=True, rot=None, norm_topk=None):
    """Qwen3NextForCausalLM.forward in float64 over `tokens` (one sequence from position 0): the logits
    [T, vocab]. kv_f16 rounds the attention's cached K (after RoPE) and V to float16 (pith run's default
    cache). The other switches only show that the cases would catch a loader that got a feature wrong:
    tiled (value head h reads key head h % key heads, Qwen3.5's GGUF order), grouping False (the fused
    projections read as [all q | all k | all v | all z]), rot (another rotary width), norm_topk."""
    Tn, H, KV, hd = len(tokens), cfg.heads, cfg.kv_heads, cfg.head_dim
    rot = cfg.rot if rot is None else rot
    norm_topk = cfg.norm_topk if norm_topk is None else norm_topk
    r = cfg.nv // cfg.nk
    x = w("model.embed_tokens.weight")[torch.tensor(tokens)]
    mask = torch.full((Tn, Tn), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        h = rms_1p(x, w(p + "input_layernorm.weight"), cfg.eps)
        if cfg.linear[i]:
            a = p + "linear_attn."
            qkvz, ba = h @ w(a + "in_proj_qkvz.weight").T, h @ w(a + "in_proj_ba.weight").T
            if grouping:   # fix_query_key_value_ordering
                qkvz = qkvz.view(Tn, cfg.nk, 2 * cfg.dk + 2 * r * cfg.dv)
                q, k, v, z = torch.split(qkvz, [cfg.dk, cfg.dk, r * cfg.dv, r * cfg.dv], dim=-1)
                b, al = torch.split(ba.view(Tn, cfg.nk, 2 * r), [r, r], dim=-1)
            else:
                kd, vd = cfg.nk * cfg.dk, cfg.nv * cfg.dv
                q, k, v, z = torch.split(qkvz, [kd, kd, vd, vd], dim=-1)
                b, al = torch.split(ba, [cfg.nv, cfg.nv], dim=-1)
            q, k, v = (t.reshape(Tn, -1) for t in (q, k, v))
            z, b, al = z.reshape(Tn, cfg.nv, cfg.dv), b.reshape(Tn, cfg.nv), al.reshape(Tn, cfg.nv)
            mixed = torch.cat([q, k, v], -1).T[None]   # [1, channels, T]
            cw = w(a + "conv1d.weight")
            mixed = F.silu(F.conv1d(mixed, cw, groups=mixed.shape[1], padding=cfg.K - 1)[..., :Tn])[0].T
            q, k, v = torch.split(mixed, [cfg.nk * cfg.dk, cfg.nk * cfg.dk, cfg.nv * cfg.dv], dim=-1)
            q, k, v = q.reshape(Tn, cfg.nk, cfg.dk), k.reshape(Tn, cfg.nk, cfg.dk), v.reshape(Tn, cfg.nv, cfg.dv)
            beta = torch.sigmoid(b)
            g = -w(a + "A_log").exp() * F.softplus(al + w(a + "dt_bias"))
            if tiled:
                q, k = q.repeat(1, r, 1), k.repeat(1, r, 1)
            else:
                q, k = q.repeat_interleave(r, dim=1), k.repeat_interleave(r, dim=1)
            o = recurrent_gated_delta_rule(q, k, v, g, beta)
            # Qwen3NextRMSNormGated: norm(o) * w * silu(z), per value head
            o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + cfg.eps) * w(a + "norm.weight") * F.silu(z)
            h = o.reshape(Tn, -1) @ w(a + "out_proj.weight").T
        else:
            s = p + "self_attn."
            qg = (h @ w(s + "q_proj.weight").T).view(Tn, H, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(Tn, H * hd)
            q = rms_1p(q, w(s + "q_norm.weight"), cfg.eps)
            k = rms_1p((h @ w(s + "k_proj.weight").T).view(Tn, KV, hd), w(s + "k_norm.weight"), cfg.eps)
            v = (h @ w(s + "v_proj.weight").T).view(Tn, KV, hd)
            q, k = rope_partial(q, rot, cfg.theta), rope_partial(k, rot, cfg.theta)
            if kv_f16:
                k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            att = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask, dim=-1)
            o = torch.einsum("hqk,khd->qhd", att, v).reshape(Tn, H * hd) * torch.sigmoid(gate)
            h = o @ w(s + "o_proj.weight").T
        x = x + h
        h = rms_1p(x, w(p + "post_attention_layernorm.weight"), cfg.eps)
        m = p + "mlp."
        probs = torch.softmax(h @ w(m + "gate.weight").T, dim=-1)   # Qwen3NextTopKRouter
        top, idx = torch.topk(probs, cfg.used, dim=-1)
        if norm_topk:
            top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(cfg.experts):
            sel = (idx == e)
            rows = sel.any(-1)
            if not rows.any():
                continue
            he = h[rows]
            y = (F.silu(he @ w(m + f"experts.{e}.gate_proj.weight").T) * (he @ w(m + f"experts.{e}.up_proj.weight").T)
                 ) @ w(m + f"experts.{e}.down_proj.weight").T
            out[rows] += y * (top * sel)[rows].sum(-1, keepdim=True)
        sh = (F.silu(h @ w(m + "shared_expert.gate_proj.weight").T) * (h @ w(m + "shared_expert.up_proj.weight").T)
              ) @ w(m + "shared_expert.down_proj.weight").T
        x = x + out + torch.sigmoid(h @ w(m + "shared_expert_gate.weight").T) * sh
    x = rms_1p(x, w("model.norm.weight"), cfg.eps)
    return (x @ w("lm_head.weight").T).numpy()


# ---------------------------------------------------------------------------------------------------------

def moved(name, a, b):
    d = float(np.abs(a - b).max())
    print(f"  {name}: moves the reference logits by up to {d:.2f}")
    if d < 100 * T.TOLERANCES["float"][0]:
        fail(f"{name} changes the logits by only {d:.2e}; the cases would not test it")


def check_reference(tmp):
    """The reference's delta rule against the chunked form, the formats of one seed against each other,
    and the features that must matter."""
    rng = np.random.default_rng(5)
    Tn, Hh, dk, dv = 150, 3, 16, 8
    q, k = (torch.tensor(rng.standard_normal((Tn, Hh, dk))) for _ in range(2))
    v = torch.tensor(rng.standard_normal((Tn, Hh, dv)))
    g = -torch.tensor(rng.uniform(0.0, 0.3, (Tn, Hh)))
    beta = torch.sigmoid(torch.tensor(rng.standard_normal((Tn, Hh))))
    err = float((recurrent_gated_delta_rule(q, k, v, g, beta) - chunk_gated_delta_rule(q, k, v, g, beta)).abs().max())
    print(f"qwen3next: recurrent vs chunked gated delta rule (150 tokens, chunks of 64): {err:.1e}")
    if err > 1e-10:
        fail(f"qwen3next: the reference's recurrent delta rule differs from the chunked form by {err:.2e}")
    tokens = [1] + list(np.random.default_rng(10).integers(3, 512, T.N_GEN_LONG - 1))
    paths = {}
    for preset, fmt in ((PRESET, "gguf"), ("test-qwen3next-legacy", "gguf"), (PRESET, "safetensors")):
        cfg = mkmodel.build_config(preset)
        path = os.path.join(tmp, f"x-{preset}.gguf" if fmt == "gguf" else f"x-{preset}-st")
        (mkmodel.write_gguf if fmt == "gguf" else mkmodel.write_safetensors)(cfg, path, "F32", seed=13)
        paths[(preset, fmt)] = path
    base_cfg, base_w = load(paths[(PRESET, "safetensors")])
    base = qwen3next_by_hand(base_cfg, base_w, tokens)
    for (preset, fmt), path in paths.items():
        if fmt == "safetensors":
            continue
        err = float(np.abs(qwen3next_by_hand(*load(path), tokens) - base).max())
        print(f"{preset}: GGUF vs safetensors of one seed in the reference: {err:.1e} (bound {CROSS_FORMAT_BOUND:g})")
        if err > CROSS_FORMAT_BOUND:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")
    moved("value heads read key heads tiled (h % key heads) instead of grouped",
          base, qwen3next_by_hand(base_cfg, base_w, tokens, tiled=True))
    moved("in_proj_qkvz / in_proj_ba read ungrouped", base, qwen3next_by_hand(base_cfg, base_w, tokens, grouping=False))
    moved("RoPE over the whole head instead of a quarter", base,
          qwen3next_by_hand(base_cfg, base_w, tokens, rot=base_cfg.head_dim))
    moved("norm_topk_prob false", base, qwen3next_by_hand(base_cfg, base_w, tokens, norm_topk=False))


def ref_for(model):
    cfg, w = load(model)

    def ref(toks, kv_f16):
        return qwen3next_by_hand(cfg, w, toks, kv_f16=kv_f16)
    return ref


def check_vulkan(pith, tmp, f32):
    """test-qwen3next's GGUF F32 file on the first Vulkan device, when there is one (its experts, fused
    projections and partial RoPE there), from BOS and from the prompt in chunks of 7, against the same
    reference with the float tolerance (every F32 case on the device: test_vulkan_models.py)."""
    r = subprocess.run([pith, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if b"vulkan:0" not in r.stdout:
        print("note: no Vulkan device; the qwen3next cases ran on the CPU only")
        return
    model, tok = f32["gguf"]
    ref, n_vocab = ref_for(model), mkmodel.build_config(PRESET).vocab
    old = os.environ.get("PITH_DEVICE")
    os.environ["PITH_DEVICE"] = "vulkan"
    try:
        T.compare(pith, tmp, f"{PRESET} gguf F32 vulkan", model, tok, n_vocab, "float", n_gen=T.N_GEN_LONG,
                  ref_fn=ref)
        T.compare(pith, tmp, f"{PRESET} gguf F32 vulkan prompt/7", model, tok, n_vocab, "float", n_gen=T.N_GEN_HYBRID,
                  prompt=T.HYBRID_PROMPT, extra=("--max-batch-tokens", "7"), ref_fn=ref)
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
    with tempfile.TemporaryDirectory(prefix="ref-qwen3next-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference(tmp)
        seed = 900
        f32 = {}
        cases = [(PRESET, "gguf", "F32"), ("test-qwen3next-legacy", "gguf", "F32"), (PRESET, "safetensors", "F32"),
                 (PRESET, "safetensors", "BF16"), (PRESET, "gguf", "Q8_0")]
        cases += [(KQUANT_PRESET, "gguf", t) for t in KQUANT_TYPES]
        for preset, fmt, dtype in cases:
            # one seed for the F32 files of test-qwen3next (the cross-format check below)
            model, tok, n_vocab = T.make_model(tmp, preset, fmt, dtype, 900 if dtype == "F32" else seed)
            ref = ref_for(model)
            name = f"{preset} {fmt} {dtype}"
            kind = "q32-delta" if T.tolerance_kind(dtype) != "float" else "float"
            T.compare(pith, tmp, name, model, tok, n_vocab, kind, n_gen=T.N_GEN_LONG if dtype == "F32" else T.N_GEN,
                      ref_fn=ref)
            seed += 1
            if dtype != "F32":
                continue
            if fmt == "gguf" and preset == PRESET:
                T.compare(pith, tmp, name + " kv-f16", model, tok, n_vocab, "float-kv16", kv_f32=False,
                          n_gen=T.N_GEN_LONG, ref_fn=ref)
            if preset == PRESET:
                f32[fmt] = (model, tok)
            for chunk in (7, 2048):
                if chunk == 2048 and preset != PRESET:
                    continue
                T.compare(pith, tmp, f"{name} prompt/{chunk}", model, tok, n_vocab, "float", n_gen=T.N_GEN_HYBRID,
                          prompt=T.HYBRID_PROMPT, extra=("--max-batch-tokens", str(chunk)), ref_fn=ref)
        for what, kw in (("from BOS", dict(n_gen=T.N_GEN_LONG)),
                         ("prompt/7", dict(n_gen=T.N_GEN_HYBRID, prompt=T.HYBRID_PROMPT,
                                           extra=("--max-batch-tokens", "7")))):
            runs = [T.pith_logits(pith, tmp, f"{PRESET} {fmt} F32 {what}", *f32[fmt], 512, **kw)
                    for fmt in ("gguf", "safetensors")]
            if None in runs:
                continue
            (pa, a), (pb, b) = runs
            err = float(np.abs(a - b).max())
            print(f"{PRESET}: pith GGUF vs safetensors F32, {what}: max |diff| {err:.1e} "
                  f"(bound {CROSS_FORMAT_BOUND:g})")
            if pa != pb or err > CROSS_FORMAT_BOUND:
                fail(f"{PRESET}: pith's GGUF and safetensors logits differ by {err:.2e} {what}")
        check_vulkan(pith, tmp, f32)
    print(f"{time.time() - t0:.1f} s")
    if T.failures:
        print(f"{len(T.failures)} failure(s)")
        for f in T.failures:
            print("  " + f)
        return 1
    print("all qwen3next reference checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
