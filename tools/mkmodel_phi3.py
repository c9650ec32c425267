"""Phi-3 / Phi-4 (`phi3`) for mkmodel.py: presets, tensor names, GGUF metadata and config.json.

From transformers' models/phi3/modeling_phi3.py / configuration_phi3.py and llama.cpp's convert_hf_to_gguf.py
(Phi3MiniModel) and src/models/phi3.cpp:
- the fused projections: Hugging Face self_attn.qkv_proj.weight ([q | k | v] rows) is GGUF
  blk.N.attn_qkv.weight, mlp.gate_up_proj.weight ([gate | up] rows, 2 x intermediate_size) is GGUF
  blk.N.ffn_up.weight; nothing is permuted (llama.cpp rotates phi3 NEOX-style, halves, as transformers);
  the same random values in both formats (one tensor per fused name);
- LongRoPE: config.json "rope_scaling" {"type": "longrope", "short_factor", "long_factor"} (rotated width / 2
  numbers each) with "original_max_position_embeddings" at the top level; GGUF the tensors
  rope_factors_long.weight / rope_factors_short.weight (F32), rope.scaling.original_context_length and
  rope.scaling.attn_factor = sqrt(1 + ln(s) / ln(original)), s = max_position_embeddings / original
  (1 when s <= 1), as the converter writes them;
- the partial rotary (Phi-4-mini's partial_rotary_factor 0.75): GGUF rope.dimension_count =
  int(head_dim * factor), as the converter's int(rot_pct * n_embd) // n_head;
- the sliding window: config.json "sliding_window" (null when none), GGUF phi3.attention.sliding_window
  (the converter writes 0 for none).

Presets:
- `test-phi3`: Phi-4-mini-like (GQA, tied embeddings, partial rotary 0.75, LongRoPE) with a small original
  context (64 of 512) so that tests run both lists: `-c 64` (short factors) and `-c 512` (long). Every
  engine configuration of tests/test_engine_models.c (pools of 128 tokens and more) takes the long list;
- `test-phi3-plain`: Phi-3-mini-4k-like (no scaling, untied) with a sliding window of 16 on every layer;
- `phi3-mini`: Phi-3-mini-4k-instruct's real shape (benchmarks; its window 2047)."""

import math

import numpy as np

PRESETS = {
    "test-phi3": dict(arch="phi3", dim=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=512,
                      theta=10000.0, ctx=512, eps=1e-5, tied=True, rope_scaling="longrope", rope_orig_ctx=64,
                      partial_rotary=0.75),
    "test-phi3-plain": dict(arch="phi3", dim=256, layers=2, heads=4, kv_heads=4, head_dim=64, ffn=512, vocab=512,
                            theta=10000.0, ctx=256, eps=1e-5, tied=False, sliding_window=16),
    "phi3-mini": dict(arch="phi3", dim=3072, layers=32, heads=32, kv_heads=32, ffn=8192, vocab=32064,
                      theta=10000.0, ctx=4096, eps=1e-5, tied=False, sliding_window=2047),
}

HF_ARCH = ("Phi3ForCausalLM", "phi3")


def rope_dim(cfg):
    return int(cfg.head_dim * (cfg.partial_rotary or 1.0))


def longrope_factors(cfg):
    """(short, long) factors, float32, rope_dim / 2 each: fixed, not random, and far apart from each other and
    from 1 so that a test run tells the three RoPEs apart within a few dozen positions."""
    n = rope_dim(cfg) // 2
    short = np.linspace(1.0, 1.6, n, dtype=np.float64)
    long = np.geomspace(1.25, 16.0, n, dtype=np.float64)
    return short.astype(np.float32), long.astype(np.float32)


def attn_factor(cfg):
    """_compute_longrope_parameters' default (and the converter's rope.scaling.attn_factor)."""
    s = cfg.ctx / cfg.rope_orig_ctx
    return math.sqrt(1 + math.log(s) / math.log(cfg.rope_orig_ctx)) if s > 1 else 1.0


def validate(cfg):
    if cfg.heads * cfg.head_dim != cfg.dim:
        raise ValueError("phi3: head_dim is hidden_size / num_attention_heads (config.json has no head_dim)")
    if cfg.qkv_bias or cfg.qk_norm or cfg.experts:
        raise ValueError("phi3: no biases, QK norms or experts")
    if cfg.rope_scaling not in (None, "longrope"):
        raise ValueError("phi3: RoPE plain or longrope")
    if cfg.partial_rotary is not None and (not 0 < cfg.partial_rotary <= 1 or rope_dim(cfg) % 2):
        raise ValueError("phi3: the rotated part of a head must be even")
    if cfg.rope_scaling == "longrope" and not 0 < cfg.rope_orig_ctx:
        raise ValueError("phi3: longrope needs an original context")


def tensor_specs(cfg):
    """(GGUF name, Hugging Face name, numpy shape, kind), as mkmodel.tensor_specs."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "norm"),
            (b + "attn_qkv.weight", h + "self_attn.qkv_proj.weight", (q_dim + 2 * kv_dim, cfg.dim), "matrix"),
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "ffn_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_up.weight", h + "mlp.gate_up_proj.weight", (2 * cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def gguf_metadata(cfg, w, G):
    a = "phi3"
    w.add_u32(f"{a}.rope.dimension_count", rope_dim(cfg))
    if not cfg.sliding_window:
        w.add_u32(f"{a}.attention.sliding_window", 0)   # the converter's "none" (Phi-4)
    if cfg.rope_scaling == "longrope":
        w.add_u32(f"{a}.rope.scaling.original_context_length", cfg.rope_orig_ctx)
        w.add_f32(f"{a}.rope.scaling.attn_factor", attn_factor(cfg))


def gguf_tensors(cfg, w, G):
    if cfg.rope_scaling == "longrope":
        short, long = longrope_factors(cfg)
        w.add_tensor("rope_factors_long.weight", long.shape, G.F32, long)
        w.add_tensor("rope_factors_short.weight", short.shape, G.F32, short)


def hf_config(cfg, dtype, torch_dtype, bos, eos):
    c = {
        "architectures": [HF_ARCH[0]], "model_type": HF_ARCH[1], "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "rms_norm_eps": cfg.eps, "rope_theta": cfg.theta,
        "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "torch_dtype": torch_dtype, "hidden_act": "silu", "bos_token_id": bos, "eos_token_id": eos,
        "sliding_window": cfg.sliding_window, "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "rope_scaling": None,
    }
    if cfg.partial_rotary is not None:
        c["partial_rotary_factor"] = cfg.partial_rotary
    if cfg.rope_scaling == "longrope":
        short, long = longrope_factors(cfg)
        c["original_max_position_embeddings"] = cfg.rope_orig_ctx
        c["rope_scaling"] = {"type": "longrope", "short_factor": [float(x) for x in short],
                             "long_factor": [float(x) for x in long]}
    return c
