"""Qwen3-Next (qwen3next) for tools/mkmodel.py: Qwen3.5-MoE's tensors (mkmodel.qwen35_tensor_specs) with
the Gated DeltaNet's input projections fused the way Qwen3-Next stores them.

Facts (transformers' modeling_qwen3_next.py, Qwen3NextGatedDeltaNet.fix_query_key_value_ordering;
llama.cpp's convert_hf_to_gguf.py, Qwen3NextModel, and src/models/qwen3next.cpp):
- Hugging Face linear_attn.in_proj_qkvz holds, per key head g, the rows [q_g (dk) | k_g (dk) | v of value
  heads g r .. g r + r - 1 (r dv) | z of the same heads (r dv)] (r = value heads / key heads); in_proj_ba
  [b (r) | a (r)] per key head.
- llama.cpp's converter splits in_proj_qkvz into attn_qkv ([all q | all k | all v]) and attn_gate (all z),
  value heads kept grouped (no tiled reorder for qwen3next: its graph repeats q/k heads by interleaving);
  older GGUF files carry the fused tensor as ssm_in (cfg.legacy_ssm_in writes that); in_proj_ba is ssm_ba
  as it is. Norms w + 1 and ssm_a = -exp(A_log), as for Qwen3.5 (qwen35_gguf_tensor without the reorder).
- GGUF keys: qwen35's without rope.dimension_sections (plain partial RoPE), no nextn layers (the converter
  drops the MTP head).

The random values are drawn per canonical part (blk.i.attn_qkv.weight, attn_gate, ssm_beta, ssm_alpha) and
fused from those, so a GGUF file and a safetensors directory of one seed hold the same weights."""

import numpy as np

import mkmodel as M


def _dims(cfg):
    kd, vd = cfg.lin_k_heads * cfg.lin_k_dim, cfg.lin_v_heads * cfg.lin_v_dim
    return kd, vd, cfg.lin_k_heads, cfg.lin_v_heads // cfg.lin_k_heads


def _fused(cfg, layer, which):
    """(sources [(canonical part name, rows)], groups, per-group row widths of each part) of a fused tensor."""
    kd, vd, nk, r = _dims(cfg)
    b = f"blk.{layer}."
    if which == "q3n_qkvz":
        return ([(b + "attn_qkv.weight", 2 * kd + vd), (b + "attn_gate.weight", vd)], nk,
                [cfg.lin_k_dim, cfg.lin_k_dim, r * cfg.lin_v_dim, r * cfg.lin_v_dim])
    return [(b + "ssm_beta.weight", cfg.lin_v_heads), (b + "ssm_alpha.weight", cfg.lin_v_heads)], nk, [r, r]


def _group(x, groups, widths):
    """Rows [part 0 of every group | part 1 of every group | ...] -> per group [part 0 | part 1 | ...]."""
    starts = np.cumsum([0] + [groups * w for w in widths])
    return np.concatenate([x[starts[p] + g * w:starts[p] + (g + 1) * w]
                           for g in range(groups) for p, w in enumerate(widths)], axis=0)


def fused_tensor(seed, sources, groups, widths, dim):
    x = np.concatenate([M.random_tensor(seed, n, (rows, dim), "matrix") for n, rows in sources], axis=0)
    return _group(x, groups, widths)


def tensor_specs(cfg):
    """The GGUF side: attn_qkv and attn_gate (or, legacy_ssm_in, the fused ssm_in) and the fused ssm_ba
    in place of Qwen3.5's ssm_beta / ssm_alpha."""
    kd, vd, _, _ = _dims(cfg)
    out = []
    for gname, hname, shape, kind in M.qwen35_tensor_specs(cfg):
        parts = gname.split(".")
        h = f"model.layers.{parts[1]}.linear_attn." if parts[0] == "blk" else ""
        if gname.endswith("ssm_alpha.weight") or (cfg.legacy_ssm_in and gname.endswith("attn_gate.weight")):
            continue
        if gname.endswith("ssm_beta.weight"):
            out.append((f"blk.{parts[1]}.ssm_ba.weight", h + "in_proj_ba.weight", (2 * cfg.lin_v_heads, cfg.dim),
                        "q3n_ba"))
        elif cfg.legacy_ssm_in and gname.endswith("attn_qkv.weight"):
            out.append((f"blk.{parts[1]}.ssm_in.weight", h + "in_proj_qkvz.weight", (2 * kd + 2 * vd, cfg.dim),
                        "q3n_qkvz"))
        else:
            out.append((gname, hname, shape, kind))
    return out


def hf_specs(specs, cfg):
    """write_safetensors' view: in_proj_qkvz and in_proj_ba fused from the canonical parts (names: the
    tuple that hf_chunks reads)."""
    kd, vd, _, _ = _dims(cfg)
    out = []
    for gname, hname, shape, kind in specs:
        parts = gname.split(".")
        h = f"model.layers.{parts[1]}.linear_attn." if parts[0] == "blk" else ""
        if gname.endswith("attn_gate.weight"):
            continue
        if gname.endswith("attn_qkv.weight"):
            gname, hname, shape, kind = gname, h + "in_proj_qkvz.weight", (2 * kd + 2 * vd, cfg.dim), "q3n_qkvz"
        if kind in ("q3n_qkvz", "q3n_ba"):
            out.append((_fused(cfg, int(parts[1]), kind) + (cfg.dim,), hname, shape, kind))
        else:
            out.append((gname, hname, shape, kind))
    return out


def hf_chunks(seed, gname, shape, kind):
    yield fused_tensor(seed, *gname)


def gguf_tensor(cfg, seed, name, shape, kind):
    """A tensor as llama.cpp's converter writes it for GGUF qwen3next."""
    if kind in ("q3n_qkvz", "q3n_ba"):
        return fused_tensor(seed, *_fused(cfg, int(name.split(".")[1]), kind), cfg.dim)
    x = M.random_tensor(seed, name, shape, kind)
    if kind.startswith("znorm"):
        return x + np.float32(1)
    if kind == "alog":
        return -np.exp(x)
    return x


def hf_config(cfg, dtype):
    """config.json as transformers writes a Qwen3NextConfig."""
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "full_attention_interval": cfg.full_attn_interval, "linear_conv_kernel_dim": cfg.conv_kernel,
        "linear_key_head_dim": cfg.lin_k_dim, "linear_value_head_dim": cfg.lin_v_dim,
        "linear_num_key_heads": cfg.lin_k_heads, "linear_num_value_heads": cfg.lin_v_heads,
        "hidden_act": "silu", "torch_dtype": M.TORCH_DTYPE[dtype], "rope_theta": cfg.theta,
        "partial_rotary_factor": cfg.partial_rotary, "rope_scaling": None, "attention_bias": False,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "num_experts": cfg.experts,
        "num_experts_per_tok": cfg.experts_used, "moe_intermediate_size": cfg.expert_ffn,
        "shared_expert_intermediate_size": cfg.shared_ffn, "norm_topk_prob": bool(cfg.norm_topk),
        "bos_token_id": M.BOS_ID, "eos_token_id": M.EOS_ID,
    }
