#!/usr/bin/python3
"""Independent float64 forward pass (torch) for Llama-family models, to check Pith's logits.

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
}


def hf_to_canonical(name):
    if name in HF_TO_CANON:
        return HF_TO_CANON[name]
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in HF_LAYER:
        return f"blk.{int(parts[2])}.{HF_LAYER[parts[3]]}"
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
        if os.path.isdir(path) or path.endswith(".safetensors"):
            self._open_hf(path if os.path.isdir(path) else os.path.dirname(path))
        else:
            self._open_gguf(path)
        self.head_dim = self.head_dim or self.dim // self.n_heads

    def _open_gguf(self, path):
        r = self._gguf = G.GGUFReader(path)
        md = r.metadata
        a = self.arch = md["general.architecture"]
        if a not in ("llama", "qwen2", "qwen3"):
            raise ValueError(f"{path}: unsupported architecture {a}")
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        self.n_kv_heads = int(md.get(f"{a}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0))
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self.rope_style = "adjacent" if a == "llama" else "half"
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor
        self.rope_divisors = None
        if "rope_freqs.weight" in self.names:
            self.rope_divisors = torch.tensor(r.tensor("rope_freqs.weight"), dtype=torch.float64)
        self.position_scale = 1.0
        if md.get(f"{a}.rope.scaling.type") == "linear":
            self.position_scale = 1.0 / float(md.get(f"{a}.rope.scaling.factor", 1.0))

    def _open_hf(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[c["model_type"]]
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
                canon = hf_to_canonical(name)
                if canon:
                    where[canon] = (st, name)
        if c.get("tie_word_embeddings", False):
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


def forward(m, tokens, act_q8=False, kv_f16=False):
    """Logits [len(tokens), n_vocab] (float64) with token i at position i. For estimating an engine's
    expected error only: act_q8 (True = blocks of 32, or a block size) simulates 8-bit activation
    quantization before every matrix product, kv_f16 rounds cached keys (after RoPE) and values to
    float16."""
    block = 32 if act_q8 is True else int(act_q8)
    aq = (lambda t: quantize_activations_q8(t, block)) if act_q8 else (lambda t: t)
    tok = torch.tensor(tokens, dtype=torch.long)
    if tok.min() < 0 or tok.max() >= m.n_vocab:
        raise ValueError("token id out of range")
    T, H, KV, hd = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok]
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), diagonal=1)
    for i in range(m.n_layers):
        p = f"blk.{i}."
        h = rms_norm(x, m.w(p + "attn_norm.weight"), m.eps)
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
            q = rms_norm(q, m.w(p + "attn_q_norm.weight"), m.eps)
            k = rms_norm(k, m.w(p + "attn_k_norm.weight"), m.eps)
        q = rope(q, pos, m.theta, m.rope_style, m.rope_divisors, m.position_scale)
        k = rope(k, pos, m.theta, m.rope_style, m.rope_divisors, m.position_scale)
        if kv_f16:
            k, v = k.to(torch.float16).to(torch.float64), v.to(torch.float16).to(torch.float64)
        group = H // KV
        k = k.repeat_interleave(group, dim=1)                          # query head j reads kv head j // group
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
        att = torch.softmax(scores, dim=-1)
        o = torch.einsum("hqk,khd->qhd", att, v).reshape(T, H * hd)
        x = x + aq(o) @ m.w(p + "attn_output.weight").T
        h = rms_norm(x, m.w(p + "ffn_norm.weight"), m.eps)
        hq = aq(h)
        gate = hq @ m.w(p + "ffn_gate.weight").T
        up = hq @ m.w(p + "ffn_up.weight").T
        x = x + aq(torch.nn.functional.silu(gate) * up) @ m.w(p + "ffn_down.weight").T
    x = rms_norm(x, m.w("output_norm.weight"), m.eps)
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    return aq(x) @ out.T


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
