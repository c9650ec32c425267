#!/usr/bin/python3
"""Write random-weight Llama-family models in real configurations, as GGUF or as Hugging Face safetensors.

    mkmodel.py --preset tinyllama --dtype Q8_0 --out /tmp/tinyllama-q8.gguf
    mkmodel.py --preset test-qwen3 --format safetensors --dtype BF16 --out /tmp/qwen3-st
    mkmodel.py --arch llama --dim 256 --layers 2 --heads 8 --kv-heads 2 --ffn 512 --vocab 512 --out m.gguf

The same seed gives the same model in both formats: weights are drawn in Hugging Face layout (rotate-half
RoPE) and, for GGUF `llama` only, the Q and K rows are permuted the way llama.cpp's converter does so that
adjacent-pair RoPE computes the same function. A GGUF llama file and a safetensors directory of one seed
therefore produce the same logits (up to the weight type's rounding).

Initialisation (not the 0.02 of real training recipes, on purpose): matrices are N(0, 1/fan_in) so every
projection keeps activations at unit scale whatever the width, attention scores are O(1) (a weak RoPE or
masking bug then shows in the logits instead of vanishing in a uniform softmax), and logits have a spread
of about 1. Embeddings are N(0, 1) (N(0, 1/dim) when tied, since they are then also the output matrix),
norm weights 1 + N(0, 0.1), biases N(0, 0.1).

A tokenizer comes with every model: GGUF files embed a SentencePiece-style "llama" vocabulary
(<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then plain pieces) in tokenizer.ggml.*;
safetensors directories get the same vocabulary as a llama2.c tokenizer.bin.

Writing streams tensor by tensor in blocks of rows, so the largest presets need little memory.
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pith_gguf as G  # noqa: E402

PRESETS = {
    # Real shapes (benchmarks).
    "stories110M": dict(arch="llama", dim=768, layers=12, heads=12, kv_heads=12, ffn=2048, vocab=32000,
                        theta=10000.0, ctx=1024, eps=1e-5),
    "tinyllama": dict(arch="llama", dim=2048, layers=22, heads=32, kv_heads=4, ffn=5632, vocab=32000,
                      theta=10000.0, ctx=2048, eps=1e-5),
    "qwen2.5-0.5b": dict(arch="qwen2", dim=896, layers=24, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                         theta=1e6, ctx=32768, eps=1e-6, tied=True),
    "llama3.2-1b": dict(arch="llama", dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                        theta=5e5, ctx=131072, eps=1e-5, tied=True, rope_scaling="llama3", rope_factor=32.0,
                        rope_low_freq=1.0, rope_high_freq=4.0, rope_orig_ctx=8192),
    # Small shapes for tests: a few MB, seconds to run.
    "test-llama": dict(arch="llama", dim=128, layers=2, heads=4, kv_heads=4, ffn=384, vocab=512,
                       theta=10000.0, ctx=512, eps=1e-5),
    # GQA 4:1, theta 5e5 and Llama 3 scaling with a short original context so that all three frequency
    # bands (kept, smoothed, divided by the factor) are exercised within a few dozen positions.
    "test-llama-gqa": dict(arch="llama", dim=256, layers=2, heads=8, kv_heads=2, ffn=512, vocab=512,
                           theta=5e5, ctx=512, eps=1e-5, rope_scaling="llama3", rope_factor=8.0,
                           rope_low_freq=1.0, rope_high_freq=4.0, rope_orig_ctx=64),
    "test-qwen2": dict(arch="qwen2", dim=128, layers=2, heads=4, kv_heads=2, ffn=352, vocab=512,
                       theta=1e6, ctx=512, eps=1e-6, tied=True),
    # Every matrix row a multiple of 256, for the K-quants (Q4_K, Q6_K, Q4_K_M).
    "test-qwen3-k": dict(arch="qwen3", dim=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512,
                         vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True),
    "test-qwen3": dict(arch="qwen3", dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=384,
                       vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True),
}

DEFAULTS = dict(arch="llama", dim=128, layers=2, heads=4, kv_heads=None, head_dim=None, ffn=None, vocab=512,
                theta=10000.0, ctx=2048, eps=1e-5, tied=False, qkv_bias=None, qk_norm=None, rope_scaling=None,
                rope_factor=8.0, rope_low_freq=1.0, rope_high_freq=4.0, rope_orig_ctx=8192)

HF_ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
           "qwen3": ("Qwen3ForCausalLM", "qwen3")}
# general.file_type (llama_ftype) for the dominant weight type.
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32, "Q4_K_M": 15, "Q4_K": 15, "Q6_K": 18}
BOS_ID, EOS_ID, UNK_ID = 1, 2, 0


class Config:
    def __init__(self, **kw):
        for k, v in DEFAULTS.items():
            setattr(self, k, kw.get(k, v))
        self.kv_heads = self.kv_heads or self.heads
        self.head_dim = self.head_dim or self.dim // self.heads
        self.ffn = self.ffn or 4 * self.dim
        # Qwen2 always has QKV biases and Qwen3 always has QK norms; plain Llama has neither.
        if self.qkv_bias is None:
            self.qkv_bias = self.arch == "qwen2"
        if self.qk_norm is None:
            self.qk_norm = self.arch == "qwen3"
        self.validate()

    def validate(self):
        if self.arch not in HF_ARCH:
            raise ValueError(f"unknown architecture {self.arch}")
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv-heads")
        if self.head_dim % 2:
            raise ValueError("head-dim must be even for RoPE")
        if self.vocab < 3 + 256 + 1:
            raise ValueError("vocab must hold <unk>, <s>, </s>, 256 byte tokens and at least one piece")
        if self.qkv_bias != (self.arch == "qwen2") or self.qk_norm != (self.arch == "qwen3"):
            raise ValueError("QKV bias is Qwen2's and QK norm Qwen3's: no real model mixes them otherwise")
        if self.rope_scaling not in (None, "llama3", "linear"):
            raise ValueError("rope scaling must be llama3, linear or none")
        if self.rope_scaling and not (self.rope_factor > 0 and math.isfinite(self.rope_factor)):
            raise ValueError("rope-factor must be a positive number")

    def as_dict(self):
        return {k: getattr(self, k) for k in DEFAULTS}


# ---------------------------------------------------------------------------------------------------------
# Vocabulary.

def vocabulary(n_vocab):
    """(pieces with '▁' for spaces, scores, token types) for a SentencePiece-style llama vocabulary."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256   # unknown, control, byte
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    singles = list("▁" + letters + letters.upper() + "0123456789.,!?'\"-:;()")

    def more():
        yield from singles
        for a in letters:
            yield "▁" + a
        length = 2
        while True:   # every piece of length n is two shorter pieces merged, as BPE vocabularies are
            for i in range(len(letters) ** length):
                s, k = "", i
                for _ in range(length):
                    s, k = letters[k % len(letters)] + s, k // len(letters)
                yield s
                yield "▁" + s
            length += 1

    gen = more()
    seen = set(pieces)
    while len(pieces) < n_vocab:
        p = next(gen)
        if p not in seen:
            seen.add(p)
            pieces.append(p)
            types.append(1)
    n_special = 3 + 256
    scores = [0.0] * n_special + [-float(i) for i in range(n_vocab - n_special)]
    # Single characters should lose to any merge, as in a trained SentencePiece model.
    for i in range(n_special, n_vocab):
        if len(pieces[i]) == 1:
            scores[i] = -1e6 - i
    return pieces, scores, types


def write_tokenizer_bin(path, n_vocab):
    """llama2.c format: int32 max_token_length, then per token float32 score, int32 length, bytes."""
    pieces, scores, _ = vocabulary(n_vocab)
    enc = []
    for i, p in enumerate(pieces):
        if i == BOS_ID:
            p = "\n<s>\n"
        elif i == EOS_ID:
            p = "\n</s>\n"
        enc.append(p.replace("▁", " ").encode("utf-8"))
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(b) for b in enc)))
        for b, s in zip(enc, scores):
            f.write(struct.pack("<fi", s, len(b)) + b)


# ---------------------------------------------------------------------------------------------------------
# Tensors: canonical (GGUF) name, Hugging Face name, numpy shape, initialisation.

def tensor_specs(cfg):
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    # A tied embedding is also the output projection: scaled like a matrix so that logits stay O(1).
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "norm"),
            (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
            (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
        ]
        if cfg.qkv_bias:
            specs += [(b + "attn_q.bias", h + "self_attn.q_proj.bias", (q_dim,), "bias"),
                      (b + "attn_k.bias", h + "self_attn.k_proj.bias", (kv_dim,), "bias"),
                      (b + "attn_v.bias", h + "self_attn.v_proj.bias", (kv_dim,), "bias")]
        if cfg.qk_norm:
            specs += [(b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (cfg.head_dim,), "norm"),
                      (b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (cfg.head_dim,), "norm")]
        specs += [
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "ffn_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


CHUNK_ELEMENTS = 1 << 22


def rows_per_chunk(shape):
    row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else shape[0]
    return max(1, CHUNK_ELEMENTS // max(row, 1)) if len(shape) > 1 else shape[0]


def random_chunks(seed, name, shape, kind):
    """Yield float32 row blocks of the tensor. Each block has its own generator keyed by (seed, name,
    block), so values depend only on these, not on the output format or on which other tensors exist."""
    key = zlib.crc32(name.encode())
    rows = rows_per_chunk(shape)
    for c, r0 in enumerate(range(0, shape[0], rows)):
        n = min(rows, shape[0] - r0)
        rng = np.random.default_rng([seed, key, c])
        x = rng.standard_normal((n,) + tuple(shape[1:]), dtype=np.float32)
        if kind == "matrix" or kind == "tied_embed":
            x *= np.float32(1.0 / math.sqrt(shape[1]))
        elif kind == "norm":
            x = np.float32(1) + np.float32(0.1) * x
        elif kind == "bias":
            x *= np.float32(0.1)
        yield x


def random_tensor(seed, name, shape, kind):
    return np.concatenate(list(random_chunks(seed, name, shape, kind)), axis=0)


def permute_for_adjacent_rope(w, n_heads):
    """Reorder the rows of a Q or K projection (or bias) within each head from rotate-half order
    (i, i + d/2) to adjacent pairs (2i, 2i + 1), as llama.cpp's converter does for GGUF llama."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """Per-frequency divisors of the rotation speed (what llama.cpp stores as rope_freqs.weight)."""
    half = cfg.head_dim // 2
    freqs = cfg.theta ** (-np.arange(half, dtype=np.float64) * 2 / cfg.head_dim)
    wavelen = 2 * math.pi / freqs
    low_wavelen = cfg.rope_orig_ctx / cfg.rope_low_freq
    high_wavelen = cfg.rope_orig_ctx / cfg.rope_high_freq
    smooth = (cfg.rope_orig_ctx / wavelen - cfg.rope_low_freq) / (cfg.rope_high_freq - cfg.rope_low_freq)
    factors = np.where(wavelen < high_wavelen, 1.0,
                       np.where(wavelen > low_wavelen, cfg.rope_factor,
                                1.0 / ((1 - smooth) / cfg.rope_factor + smooth)))
    return factors.astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# GGUF.

def matrix_type(cfg, dtype, name, shape):
    """Tensor type of a weight matrix. Q4_K_M mixes types like llama.cpp's Q4_K_M: Q6_K for the output
    and for attn_v / ffn_down in the first and last eighth of the layers and every third one between,
    Q4_K elsewhere. K-quant blocks span 256 values: rows of other lengths fall back to Q8_0 (llama.cpp
    picks Q5_0 / Q8_0 there; Pith has no Q5_0)."""
    if dtype != "Q4_K_M":
        return dtype
    t = "Q4_K"
    if name == "output.weight" or (cfg.tied and name == "token_embd.weight"):
        t = "Q6_K"
    elif name.endswith(("attn_v.weight", "ffn_down.weight")):
        i, n = int(name.split(".")[1]), cfg.layers
        if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2:
            t = "Q6_K"
    return t if shape[-1] % 256 == 0 else "Q8_0"


def write_gguf(cfg, path, dtype="F32", seed=0, name="random"):
    dtype = dtype.upper()
    if dtype != "Q4_K_M":
        G.type_id(dtype)
    w = G.GGUFWriter(path)
    a = cfg.arch
    w.add_str("general.architecture", a)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", FILE_TYPE[dtype])
    w.add_u32(f"{a}.context_length", cfg.ctx)
    w.add_u32(f"{a}.embedding_length", cfg.dim)
    w.add_u32(f"{a}.block_count", cfg.layers)
    w.add_u32(f"{a}.feed_forward_length", cfg.ffn)
    w.add_u32(f"{a}.attention.head_count", cfg.heads)
    w.add_u32(f"{a}.attention.head_count_kv", cfg.kv_heads)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    w.add_f32(f"{a}.rope.freq_base", cfg.theta)
    w.add_u32(f"{a}.vocab_size", cfg.vocab)
    if cfg.head_dim != cfg.dim // cfg.heads or a == "qwen3":
        w.add_u32(f"{a}.attention.key_length", cfg.head_dim)
        w.add_u32(f"{a}.attention.value_length", cfg.head_dim)
    if a == "llama":
        w.add_u32(f"{a}.rope.dimension_count", cfg.head_dim)
    pieces, scores, types = vocabulary(cfg.vocab)
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", pieces, G.STRING)
    w.add_array("tokenizer.ggml.scores", np.array(scores, dtype=np.float32), G.FLOAT32)
    w.add_array("tokenizer.ggml.token_type", types, G.INT32)
    w.add_u32("tokenizer.ggml.bos_token_id", BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", UNK_ID)
    w.add("tokenizer.ggml.add_bos_token", True, G.BOOL)

    if cfg.rope_scaling == "linear":
        w.add_str(f"{a}.rope.scaling.type", "linear")
        w.add_f32(f"{a}.rope.scaling.factor", cfg.rope_factor)
    if cfg.rope_scaling == "llama3":
        w.add_tensor("rope_freqs.weight", (cfg.head_dim // 2,), G.F32, llama3_rope_factors(cfg))
    for gname, _, shape, kind in tensor_specs(cfg):
        # Like llama.cpp: 1-D tensors (norms, biases) stay F32, matrices take the requested type.
        ttype = matrix_type(cfg, dtype, gname, shape) if len(shape) == 2 else "F32"
        permute = a == "llama" and any(s in gname for s in ("attn_q.", "attn_k."))
        if permute:
            heads = cfg.heads if "attn_q." in gname else cfg.kv_heads
            data = (lambda n=gname, s=shape, k=kind, h=heads:
                    permute_for_adjacent_rope(random_tensor(seed, n, s, k), h))
        else:
            data = (lambda n=gname, s=shape, k=kind: random_chunks(seed, n, s, k))
        w.add_tensor(gname, shape, ttype, data)
    w.write()


# ---------------------------------------------------------------------------------------------------------
# Hugging Face safetensors.

ST_DTYPES = {"F32": ("F32", 4), "F16": ("F16", 2), "BF16": ("BF16", 2)}
TORCH_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def st_encode(x, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "F16":
        return x.astype("<f2").tobytes()
    return G.f32_to_bf16_bits(x).astype("<u2").tobytes()


def hf_config(cfg, dtype):
    arch_cls, model_type = HF_ARCH[cfg.arch]
    c = {
        "architectures": [arch_cls], "model_type": model_type, "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "rope_theta": cfg.theta, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_word_embeddings": bool(cfg.tied), "torch_dtype": TORCH_DTYPE[dtype], "hidden_act": "silu",
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }
    if cfg.arch == "llama":
        c["attention_bias"] = False
        c["mlp_bias"] = False
    if cfg.rope_scaling == "llama3":
        c["rope_scaling"] = {"rope_type": "llama3", "factor": cfg.rope_factor,
                             "low_freq_factor": cfg.rope_low_freq, "high_freq_factor": cfg.rope_high_freq,
                             "original_max_position_embeddings": cfg.rope_orig_ctx}
    elif cfg.rope_scaling == "linear":
        # Older configs (Llama 2 / CodeLlama fine-tunes) spell the kind "type", not "rope_type".
        c["rope_scaling"] = {"type": "linear", "factor": cfg.rope_factor}
    else:
        c["rope_scaling"] = None
    return c


def write_safetensors(cfg, out_dir, dtype="F32", seed=0, shards=1):
    dtype = dtype.upper()
    if dtype not in ST_DTYPES:
        raise ValueError(f"safetensors supports F32, F16 and BF16, not {dtype}")
    os.makedirs(out_dir, exist_ok=True)
    specs = tensor_specs(cfg)
    st_name, elem = ST_DTYPES[dtype]
    # Balance shards by bytes, keeping tensor order.
    sizes = [int(np.prod(s)) * elem for _, _, s, _ in specs]
    total = sum(sizes)
    shards = max(1, min(shards, len(specs)))
    groups, acc, cur = [[] for _ in range(shards)], 0, 0
    for spec, size in zip(specs, sizes):
        if cur < shards - 1 and acc >= total * (cur + 1) / shards:
            cur += 1
        groups[cur].append(spec)
        acc += size
    groups = [g for g in groups if g]
    names = (["model.safetensors"] if len(groups) == 1 else
             [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))])
    weight_map = {}
    for fname, group in zip(names, groups):
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for _, hname, shape, _ in group:
            n = int(np.prod(shape)) * elem
            header[hname] = {"dtype": st_name, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[hname] = fname
        hjson = json.dumps(header, separators=(",", ":")).encode()
        hjson += b" " * ((-len(hjson)) % 8)
        with open(os.path.join(out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hjson)) + hjson)
            for gname, _, shape, kind in group:
                for chunk in random_chunks(seed, gname, shape, kind):
                    f.write(st_encode(chunk, dtype))
    if len(groups) > 1:
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, dtype), f, indent=2)
    write_tokenizer_bin(os.path.join(out_dir, "tokenizer.bin"), cfg.vocab)


# ---------------------------------------------------------------------------------------------------------

def build_config(preset=None, **overrides):
    kw = dict(PRESETS[preset]) if preset else {}
    kw.update({k: v for k, v in overrides.items() if v is not None})
    if kw.get("rope_scaling") == "none":
        kw["rope_scaling"] = None
    return Config(**kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="presets: " + ", ".join(PRESETS))
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--arch", choices=sorted(HF_ARCH))
    ap.add_argument("--dim", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int, help="per-head width (default dim / heads)")
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--ctx", type=int, help="trained context length written to the metadata")
    ap.add_argument("--theta", type=float, help="RoPE base")
    ap.add_argument("--eps", type=float, help="RMSNorm epsilon")
    ap.add_argument("--rope-scaling", choices=["llama3", "linear", "none"])
    ap.add_argument("--rope-factor", type=float, help="llama3 or linear scaling factor (default 8)")
    ap.add_argument("--rope-low-freq", type=float)
    ap.add_argument("--rope-high-freq", type=float)
    ap.add_argument("--rope-orig-ctx", type=int)
    ap.add_argument("--tied", action="store_true", default=None, help="output shares the token embedding")
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--qkv-bias", action="store_true", default=None, help="(implied by qwen2)")
    ap.add_argument("--qk-norm", action="store_true", default=None, help="(implied by qwen3)")
    ap.add_argument("--dtype", default="F32", help="F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K Q4_K_M (a llama.cpp-like mix; safetensors: F32 F16 BF16)")
    ap.add_argument("--format", choices=["gguf", "safetensors"], default=None,
                    help="default: gguf, or safetensors when --out does not end in .gguf")
    ap.add_argument("--shards", type=int, default=1, help="safetensors files (index written when > 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    rope = args.rope_scaling
    try:
        cfg = build_config(args.preset, arch=args.arch, dim=args.dim, layers=args.layers, heads=args.heads,
                           kv_heads=args.kv_heads, head_dim=args.head_dim, ffn=args.ffn, vocab=args.vocab,
                           ctx=args.ctx, theta=args.theta, eps=args.eps, tied=args.tied,
                           qkv_bias=args.qkv_bias, qk_norm=args.qk_norm,
                           rope_factor=args.rope_factor, rope_low_freq=args.rope_low_freq,
                           rope_high_freq=args.rope_high_freq, rope_orig_ctx=args.rope_orig_ctx,
                           rope_scaling=rope)
        fmt = args.format or ("gguf" if args.out.endswith(".gguf") else "safetensors")
        if fmt == "gguf":
            write_gguf(cfg, args.out, args.dtype, args.seed, name=args.preset or "random")
        else:
            write_safetensors(cfg, args.out, args.dtype, args.seed, args.shards)
    except ValueError as e:
        print(f"mkmodel: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({fmt}, {args.dtype}, {cfg.arch}, dim {cfg.dim}, {cfg.layers} layers)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
