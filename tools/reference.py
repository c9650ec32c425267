#!/usr/bin/python3
"""Independent float64 forward pass (torch) for Llama-family, SmolLM3 and Gemma 3 models, to check Pith's logits.

    reference.py --model MODEL.gguf --tokens 1,42,7 [--out logits.npy]
    reference.py --model HF_DIR --tokens 1,42,7

Reads GGUF files (with pith_gguf's reader; F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K dequantized exactly as
stored) or a Hugging Face directory (config.json + model.safetensors or a sharded index; F32, F16, BF16),
and computes the logits at every position of a token sequence (teacher forcing, full causal attention).
Everything after dequantization is float64, so the only difference from the exact function of the stored
weights is float64 rounding.

Model semantics follow the format: GGUF `llama` rotates adjacent pairs (x[2i], x[2i+1]); GGUF `qwen2` /
`qwen3` and every Hugging Face file rotate halves (x[i], x[i + d/2]). Llama 3 rope scaling comes from the
rope_freqs.weight tensor in GGUF (divisors of each frequency, as llama.cpp stores them) and from
config.json's rope_scaling for Hugging Face. Linear rope scaling ({arch}.rope.scaling.type "linear" in GGUF,
rope_scaling type "linear" in config.json) divides every position by its factor before the angles are
taken (the original Hugging Face formulation; engines usually scale the frequencies instead, which is the
same function). QKV biases and QK norms are used when the tensors exist.

Sliding windows, layers without RoPE, Gemma 3 and attention sinks, written from the published code (read,
not copied; each part names what it follows):
- Sliding-window attention (transformers' masking_utils sliding_window_overlay as used by
  modeling_mistral.py / modeling_gemma3.py; llama.cpp's LLAMA_SWA_TYPE_STANDARD): a query at position p
  sees keys [p - W + 1, p]. Mistral (config.json "sliding_window"; GGUF `llama.attention.sliding_window`)
  windows every layer; Gemma 3 only its "sliding_attention" layers.
- SmolLM3 (modeling_smollm3.py, configuration_smollm3.py): config.json "no_rope_layers"[i] = 1 means
  layer i applies RoPE, 0 that it does not (default: 0 where (i + 1) % no_rope_layer_interval == 0,
  interval 4). GGUF `smollm3` (llama.cpp src/models/smollm3.cpp, llama-model.cpp): no key; the interval
  is fixed at 4; Q/K are permuted for adjacent-pair RoPE as for llama.
- Gemma 3 text (modeling_gemma3.py, configuration_gemma3.py): embedding times sqrt(hidden) (transformers
  rounds that scale to the weights' dtype first: Gemma3TextScaledWordEmbedding; GGUF: float32 sqrtf as in
  llama.cpp), RMSNorm by (1 + w) on Hugging Face weights and by w on GGUF weights (llama.cpp's converter
  stores w + 1), QK norm per head, rotate-half RoPE with base rope_theta (and rope_scaling) on
  "full_attention" layers and rope_local_base_freq without scaling on "sliding_attention" layers, scores
  times query_pre_attn_scalar^-1/2, the output of attention and of the FFN each normed before its
  residual add, GELU-tanh gated FFN, tied output, and final_logit_softcapping: tanh(x / c) * c. The layer
  pattern is layer_types, else sliding_window_pattern (global where (i + 1) % pattern == 0). For GGUF
  `gemma3` the values llama.cpp hard-codes (llama-model.cpp, LLM_ARCH_GEMMA3): pattern 6 (global where
  i % 6 == 5), local base 10000, query scale 1/sqrt(head_dim) (1/sqrt(hidden / heads) at 62 layers); the
  window is `gemma3.attention.sliding_window` (no window: every layer global), the softcap
  `gemma3.final_logit_softcapping`, linear scaling `gemma3.rope.scaling.*` (global layers only).
- Attention sinks (modeling_gpt_oss.py eager_attention_forward): a learned logit per head joins the
  softmax denominator as one more column and is dropped after it (it has no value vector). attention()
  takes them as an option; forward() uses them when a layer has `attn_sinks.weight` (HF self_attn.sinks).
"""

import argparse
import json
import math
import mmap
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pith_gguf as G  # noqa: E402

HF_TO_CANON = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
HF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.sinks": "attn_sinks.weight",
}
# Gemma 3's four norms per block, named as llama.cpp's tensor_mapping.py maps them for MODEL_ARCH.GEMMA3.
HF_LAYER_GEMMA3 = dict(HF_LAYER, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
})


def hf_to_canonical(name, family="llama"):
    if name in HF_TO_CANON:
        return HF_TO_CANON[name]
    layer = HF_LAYER_GEMMA3 if family == "gemma3" else HF_LAYER
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in layer:
        return f"blk.{int(parts[2])}.{layer[parts[3]]}"
    return None


class SafetensorsFile:
    def __init__(self, path):
        self.path = path
        self._f = open(path, "rb")
        self._map = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        (hlen,) = struct.unpack("<Q", self._map[:8])
        if 8 + hlen > len(self._map):
            raise ValueError(f"{path}: header past the end of the file")
        self.header = json.loads(self._map[8:8 + hlen])
        self.header.pop("__metadata__", None)
        self.base = 8 + hlen

    def tensor(self, name):
        info = self.header[name]
        b, e = info["data_offsets"]
        raw = np.frombuffer(self._map, dtype=np.uint8, count=e - b, offset=self.base + b)
        dt = info["dtype"]
        if dt == "F32":
            x = raw.view("<f4")
        elif dt == "F16":
            x = raw.view("<f2")
        elif dt == "BF16":
            x = G.bf16_bits_to_f32(raw.view("<u2"))
        else:
            raise ValueError(f"{self.path}: {name} has unsupported dtype {dt}")
        return x.reshape(info["shape"])


class Model:
    """Hyper-parameters plus a way to fetch each canonical tensor as float64 (fetched on use, so large
    models are dequantized one layer at a time)."""

    def __init__(self, path):
        self.path = path
        # Defaults: a Llama-family model (full causal attention, RoPE on every layer, plain RMSNorm).
        self.family = "llama"
        self.sliding_window = None      # W, for the layers whose layer_types entry is "sliding_attention"
        self.layer_types = None         # None: every layer "full_attention"
        self.no_rope_layers = set()     # indices of layers that skip RoPE
        self.rope_local_theta = None    # RoPE base of sliding layers when they have their own (Gemma 3)
        self.query_pre_attn_scalar = None   # scores / sqrt(this); None: sqrt(head_dim)
        self.final_softcap = None
        self.embed_scale = None         # None: embeddings unscaled
        self.norm_offset = 0.0          # RMSNorm multiplies by (norm_offset + w)
        if os.path.isdir(path) or path.endswith(".safetensors"):
            self._open_hf(path if os.path.isdir(path) else os.path.dirname(path))
        else:
            self._open_gguf(path)
        self.head_dim = self.head_dim or self.dim // self.n_heads
        if self.layer_types is None:
            self.layer_types = ["full_attention"] * self.n_layers
        if len(self.layer_types) != self.n_layers:
            raise ValueError(f"{path}: {len(self.layer_types)} layer types for {self.n_layers} layers")

    def _open_gguf(self, path):
        r = self._gguf = G.GGUFReader(path)
        md = r.metadata
        a = self.arch = md["general.architecture"]
        if a not in ("llama", "qwen2", "qwen3", "smollm3", "gemma3"):
            raise ValueError(f"{path}: unsupported architecture {a}")
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        self.n_kv_heads = int(md.get(f"{a}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0))
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self.rope_style = "adjacent" if a in ("llama", "smollm3") else "half"
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor
        self.rope_divisors = None
        if "rope_freqs.weight" in self.names:
            self.rope_divisors = torch.tensor(r.tensor("rope_freqs.weight"), dtype=torch.float64)
        self.position_scale = 1.0
        if md.get(f"{a}.rope.scaling.type") == "linear":
            self.position_scale = 1.0 / float(md.get(f"{a}.rope.scaling.factor", 1.0))
        window = int(md.get(f"{a}.attention.sliding_window", 0))
        if a == "llama" and window:
            # Mistral-style: the window applies to every layer.
            self.sliding_window, self.layer_types = window, ["sliding_attention"] * self.n_layers
        if a == "smollm3":
            # llama.cpp: n_no_rope_layer_step = 4, use_rope = (il + 1) % 4 != 0.
            self.no_rope_layers = {i for i in range(self.n_layers) if (i + 1) % 4 == 0}
        if a == "gemma3":
            self.family = "gemma3"
            if window:
                # llama.cpp: set_swa_pattern(6), i.e. layer il is local when il % 6 < 5; local base 10000.
                self.sliding_window = window
                self.layer_types = ["sliding_attention" if i % 6 < 5 else "full_attention"
                                    for i in range(self.n_layers)]
                self.rope_local_theta = 10000.0
            hd = self.head_dim or self.dim // self.n_heads
            self.query_pre_attn_scalar = float(self.dim // self.n_heads if self.n_layers == 62 else hd)
            cap = float(md.get(f"{a}.final_logit_softcapping", 0.0))
            self.final_softcap = cap if cap > 0 else None
            self.embed_scale = float(np.sqrt(np.float32(self.dim)))     # sqrtf(n_embd) in llama.cpp
            self.norm_offset = 0.0                                       # stored as w + 1

    def _open_hf(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        types = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "smollm3": "smollm3",
                 "gemma3_text": "gemma3"}
        if c.get("model_type") not in types:
            raise ValueError(f"{d}: unsupported model_type {c.get('model_type')!r}")
        self.arch = types[c["model_type"]]
        self.family = "gemma3" if self.arch == "gemma3" else "llama"
        self.dim = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = c.get("head_dim") or 0
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.theta = float(c.get("rope_theta", 10000.0))
        self.rope_style = "half"
        index = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        where = {}
        for fn in files:
            st = SafetensorsFile(os.path.join(d, fn))
            for name in st.header:
                canon = hf_to_canonical(name, self.family)
                if canon:
                    where[canon] = (st, name)
        # Gemma3TextConfig's tie_word_embeddings defaults to True; the others' to False.
        if c.get("tie_word_embeddings", self.arch == "gemma3"):
            where.pop("output.weight", None)
        self.names = set(where)
        self._fetch = lambda canon: where[canon][0].tensor(where[canon][1])
        self.n_vocab = c["vocab_size"]
        self.rope_divisors = None
        rs = c.get("rope_scaling")
        if rs and rs.get("rope_type", rs.get("type")) == "llama3":
            self.rope_divisors = self._hf_llama3_divisors(rs, self.head_dim or self.dim // self.n_heads)
        self.position_scale = 1.0
        if rs and rs.get("rope_type", rs.get("type")) == "linear":
            self.position_scale = 1.0 / float(rs["factor"])
        n = self.n_layers
        if c["model_type"] == "mistral" and c.get("sliding_window"):
            self.sliding_window, self.layer_types = int(c["sliding_window"]), ["sliding_attention"] * n
        if self.arch == "smollm3":
            flags = c.get("no_rope_layers") or [int((i + 1) % c.get("no_rope_layer_interval", 4) != 0)
                                                 for i in range(n)]
            self.no_rope_layers = {i for i in range(n) if not flags[i]}
            if c.get("use_sliding_window") and c.get("sliding_window"):
                self.sliding_window = int(c["sliding_window"])
                self.layer_types = c.get("layer_types") or ["sliding_attention"] * n
        if self.arch == "gemma3":
            self._hf_gemma3(c, where)

    def _hf_gemma3(self, c, where):
        n = self.n_layers
        if c.get("attn_logit_softcapping") is not None or c.get("use_bidirectional_attention"):
            raise ValueError("Gemma 3 with attention-logit softcapping or bidirectional attention is not modelled")
        self.theta = float(c.get("rope_theta", 1e6))
        self.rope_local_theta = float(c.get("rope_local_base_freq", 10000.0))
        rs = c.get("rope_scaling")
        rp = c.get("rope_parameters")
        if isinstance(rp, dict) and "full_attention" in rp:
            # Newer transformers: one rope dict per layer type.
            full, local = rp["full_attention"] or {}, rp.get("sliding_attention") or {}
            self.theta = float(full.get("rope_theta", self.theta))
            self.rope_local_theta = float(local.get("rope_theta", self.rope_local_theta))
            rs = full if full.get("rope_type", "default") != "default" else None
            if local.get("rope_type", "default") != "default":
                raise ValueError("scaled RoPE on Gemma 3's local layers is not modelled")
        self.position_scale, self.rope_divisors = 1.0, None
        if rs:
            kind = rs.get("rope_type", rs.get("type"))
            if kind == "linear":
                self.position_scale = 1.0 / float(rs["factor"])
            elif kind != "default":
                raise ValueError(f"Gemma 3 rope scaling {kind!r} is not modelled")
        self.sliding_window = c.get("sliding_window")
        if c.get("layer_types"):
            self.layer_types = list(c["layer_types"])
        else:
            pattern = c.get("sliding_window_pattern", 6)
            self.layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        self.query_pre_attn_scalar = float(c.get("query_pre_attn_scalar", 256))
        cap = c.get("final_logit_softcapping")
        self.final_softcap = float(cap) if cap else None
        # Gemma3TextScaledWordEmbedding: torch.tensor(hidden ** 0.5) (float32), cast to the weights' dtype.
        st, name = where["token_embd.weight"]
        dt = st.header[name]["dtype"]
        scale = torch.tensor(self.dim ** 0.5, dtype=torch.float32)
        scale = scale.to({"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dt])
        self.embed_scale = float(scale.to(torch.float64))
        self.norm_offset = 1.0                                            # Gemma3RMSNorm: x * (1 + w)

    def _hf_llama3_divisors(self, rs, head_dim):
        """Hugging Face's formulation: scale the inverse frequencies by wavelength band."""
        inv = 1.0 / (self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        orig = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > orig / lo, inv / factor, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
        scaled = torch.where(medium, smoothed, scaled)
        return inv / scaled

    def has(self, name):
        return name in self.names

    def w(self, name):
        return torch.from_numpy(np.array(self._fetch(name), dtype=np.float64))


def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, theta, style, divisors, position_scale=1.0):
    """x: [T, heads, head_dim]. position_scale: 1/factor under linear scaling."""
    hd = x.shape[-1]
    freqs = theta ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2 / hd)
    if divisors is not None:
        freqs = freqs / divisors
    ang = (positions.to(torch.float64) * position_scale)[:, None] * freqs[None, :]          # [T, hd/2]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    if style == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., :hd // 2], x[..., hd // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def quantize_activations_q8(x, block=32):
    """Round each block of values (32 for Q8_0/Q4_0 kernels, 256 for K-quants) to int8 steps of
    max|x|/127, as engines do before integer dot products with quantized weights. Only for estimating
    that error, never in the reference itself."""
    shape = x.shape
    if shape[-1] % block:
        return x
    b = x.reshape(-1, block)
    d = b.abs().amax(dim=1, keepdim=True) / 127
    q = torch.where(d > 0, torch.round(b / torch.where(d > 0, d, torch.ones_like(d))), torch.zeros_like(b))
    return (q * d).reshape(shape)


def causal_mask(T, window=None):
    """[T, T] additive mask: query p sees keys [0, p], or [p - window + 1, p] with a window."""
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = k <= q
    if window is not None:
        allowed = allowed & (k > q - window)
    zero = torch.zeros((), dtype=torch.float64)
    return torch.where(allowed, zero, torch.tensor(float("-inf"), dtype=torch.float64))


def attention(q, k, v, mask, denominator, sinks=None):
    """q [T, H, hd], k and v [T, H, hd] (already repeated for GQA), mask [T, T]; scores / denominator.
    sinks: optional [H] logits, one extra softmax column per head whose probability is dropped (GPT-OSS)."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / denominator + mask
    if sinks is None:
        att = torch.softmax(scores, dim=-1)
    else:
        H, T = scores.shape[0], scores.shape[1]
        col = sinks.to(torch.float64).reshape(H, 1, 1).expand(H, T, 1)
        att = torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("hqk,khd->qhd", att, v)


def gelu_tanh(x):
    """GELU, tanh approximation (transformers' gelu_pytorch_tanh)."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def round_kv(t, kind):
    """Cached K or V [T, heads, head_dim] as a KV cache of `kind` holds it (see forward)."""
    if kind is True or kind == "f16":
        return t.to(torch.float16).to(torch.float64)
    if kind == "bf16":
        return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)
    if kind == "q8_0":  # GGML's Q8_0: d = max|x| / 127 (stored as float16), q = round(x / d)
        b = t.to(torch.float32).reshape(*t.shape[:-1], -1, 32)
        d = b.abs().amax(dim=-1, keepdim=True) / 127
        q = torch.where(d > 0, b * (1 / d), torch.zeros_like(b))
        q = torch.sign(q) * torch.floor(q.abs() + 0.5)  # roundf: halves away from zero
        return (d.to(torch.float16).to(torch.float64) * q.to(torch.float64)).reshape(t.shape)
    raise ValueError(f"unknown KV kind {kind}")


def forward(m, tokens, act_q8=False, kv_f16=False):
    """Logits [len(tokens), n_vocab] (float64) with token i at position i. For estimating an engine's
    expected error only: act_q8 (True = blocks of 32, or a block size) simulates 8-bit activation
    quantization before every matrix product, kv_f16 rounds cached keys (after RoPE) and values to
    float16 (True or "f16"), bfloat16 ("bf16") or Q8_0 blocks of 32 along the head dimension ("q8_0")."""
    block = 32 if act_q8 is True else int(act_q8)
    aq = (lambda t: quantize_activations_q8(t, block)) if act_q8 else (lambda t: t)
    tok = torch.tensor(tokens, dtype=torch.long)
    if tok.min() < 0 or tok.max() >= m.n_vocab:
        raise ValueError("token id out of range")
    T, H, KV, hd = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim
    gemma = m.family == "gemma3"
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok]
    if m.embed_scale is not None:
        x = x * m.embed_scale
    masks = {}
    denominator = math.sqrt(m.query_pre_attn_scalar if m.query_pre_attn_scalar is not None else hd)

    def norm(t, name):
        w = m.w(name)
        return rms_norm(t, w + m.norm_offset if m.norm_offset else w, m.eps)

    for i in range(m.n_layers):
        p = f"blk.{i}."
        sliding = m.layer_types[i] == "sliding_attention" and m.sliding_window is not None
        window = m.sliding_window if sliding else None
        if window not in masks:
            masks[window] = causal_mask(T, window)
        h = norm(x, p + "attn_norm.weight")
        hq = aq(h)
        q = hq @ m.w(p + "attn_q.weight").T
        k = hq @ m.w(p + "attn_k.weight").T
        v = hq @ m.w(p + "attn_v.weight").T
        if m.has(p + "attn_q.bias"):
            q = q + m.w(p + "attn_q.bias")
            k = k + m.w(p + "attn_k.bias")
            v = v + m.w(p + "attn_v.bias")
        q, k, v = q.view(T, H, hd), k.view(T, KV, hd), v.view(T, KV, hd)
        if m.has(p + "attn_q_norm.weight"):
            q = norm(q, p + "attn_q_norm.weight")
            k = norm(k, p + "attn_k_norm.weight")
        if i not in m.no_rope_layers:
            if sliding and m.rope_local_theta is not None:
                # Gemma 3 local layers: their own base, no scaling.
                theta, divisors, pscale = m.rope_local_theta, None, 1.0
            else:
                theta, divisors, pscale = m.theta, m.rope_divisors, m.position_scale
            q = rope(q, pos, theta, m.rope_style, divisors, pscale)
            k = rope(k, pos, theta, m.rope_style, divisors, pscale)
        if kv_f16:
            k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
        group = H // KV
        k = k.repeat_interleave(group, dim=1)                          # query head j reads kv head j // group
        v = v.repeat_interleave(group, dim=1)
        sinks = m.w(p + "attn_sinks.weight") if m.has(p + "attn_sinks.weight") else None
        o = attention(q, k, v, masks[window], denominator, sinks).reshape(T, H * hd)
        o = aq(o) @ m.w(p + "attn_output.weight").T
        if gemma:
            o = norm(o, p + "post_attention_norm.weight")
        x = x + o
        h = norm(x, p + "ffn_norm.weight")
        hq = aq(h)
        gate = hq @ m.w(p + "ffn_gate.weight").T
        up = hq @ m.w(p + "ffn_up.weight").T
        act = gelu_tanh(gate) if gemma else torch.nn.functional.silu(gate)
        f = aq(act * up) @ m.w(p + "ffn_down.weight").T
        if gemma:
            f = norm(f, p + "post_ffw_norm.weight")
        x = x + f
    x = norm(x, "output_norm.weight")
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    logits = aq(x) @ out.T
    if m.final_softcap is not None:
        logits = torch.tanh(logits / m.final_softcap) * m.final_softcap
    return logits


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 reference logits for a token sequence")
    ap.add_argument("--model", required=True, help="GGUF file or Hugging Face directory")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,42,7")
    ap.add_argument("--out", help="write the logits as .npy (float64 [n_tokens, n_vocab])")
    ap.add_argument("--simulate-act-q8", type=int, nargs="?", const=32, default=0, metavar="BLOCK",
                    help="round matrix-product inputs to 8 bits per block of BLOCK values (default 32; "
                         "256 for K-quant kernels); for error estimation only")
    ap.add_argument("--simulate-kv-f16", action="store_true",
                    help="round cached keys and values to float16 (error estimation only)")
    args = ap.parse_args(argv)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    logits = forward(Model(args.model), tokens, act_q8=args.simulate_act_q8,
                     kv_f16=args.simulate_kv_f16).numpy()
    if args.out:
        np.save(args.out, logits)
    for i, row in enumerate(logits):
        top = np.argsort(-row)[:5]
        print(f"pos {i} token {tokens[i]}: top " + " ".join(f"{t}:{row[t]:.4f}" for t in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
