"""Gemma 4 (text) for mkmodel.py: tensors, GGUF metadata and config.json.

From transformers' models/gemma4 (configuration_gemma4.py Gemma4TextConfig, modeling_gemma4.py) and
llama.cpp's convert_hf_to_gguf.py (Gemma4Model) and llama-model.cpp (LLM_ARCH_GEMMA4):

- window layers: heads of head_dim, kv_heads KV heads; global layers: heads of global_head_dim, and under
  attention_k_eq_v global_kv_heads KV heads and no v_proj (V is the K projection);
- norms multiply by w (no +1 anywhere: the converter's norm_shift is 0), so they are plain "norm" tensors;
- each layer's layer_scalar ([1]; GGUF blk.N.layer_output_scale.weight);
- per-layer embeddings (ple_dim P > 0; hidden_size_per_layer_input): embed_tokens_per_layer [vocab, layers * P]
  (GGUF per_layer_token_embd), per_layer_model_projection [layers * P, hidden] (per_layer_model_proj),
  per_layer_projection_norm [P] (per_layer_proj_norm), and per layer per_layer_input_gate [P, hidden]
  (inp_gate), per_layer_projection [hidden, P] (proj), post_per_layer_input_norm [hidden] (post_norm);
- KV sharing (kv_shared = num_kv_shared_layers): the last kv_shared layers have no k_proj / v_proj / k_norm,
  and under double_wide (use_double_wide_mlp) an FFN of 2 x intermediate_size (GGUF: feed_forward_length
  per layer);
- GGUF: key_length / value_length the global width, key_length_swa / value_length_swa the window one,
  head_count_kv one count per layer, sliding_window_pattern one bool per layer (true: window),
  rope.dimension_count the global width, rope.dimension_count_swa the window one, rope.freq_base_swa,
  rope_freqs.weight [global_head_dim / 2]: 1 for the pairs that rotate (partial_rotary_factor of them),
  1e30 for the others (convert_hf_to_gguf.py's generate_extra_tensors);
- experts (experts > 0: enable_moe_block, the 26B-A4B kind; llama.cpp's LLM_ARCH_GEMMA4 tensors): beside
  every layer's dense MLP, router.proj [experts, hidden] (ffn_gate_inp, F32 in GGUF), router.scale [hidden]
  (ffn_gate_inp.scale), router.per_expert_scale [experts] (ffn_down_exps.scale), experts.gate_up_proj
  [experts, 2 x expert_ffn, hidden] with each expert's gate rows first (GGUF: ffn_gate_exps and ffn_up_exps,
  llama.cpp's unfused form), experts.down_proj [experts, hidden, expert_ffn] (ffn_down_exps),
  pre_feedforward_layernorm_2 (pre_ffw_norm_2), post_feedforward_layernorm_1 / _2 (post_ffw_norm_1 / _2);
  GGUF expert_count, expert_used_count, expert_feed_forward_length.
"""

import numpy as np


def defaults(cfg):
    """Gemma4TextConfig's defaults where the preset says nothing."""
    cfg.global_head_dim = cfg.global_head_dim or 2 * cfg.head_dim
    if cfg.k_eq_v is None:
        cfg.k_eq_v = False
    cfg.global_kv_heads = cfg.global_kv_heads or cfg.kv_heads
    if cfg.partial_rotary is None:
        cfg.partial_rotary = 0.25
    if cfg.rope_local_theta is None:
        cfg.rope_local_theta = 10000.0


def layer_kinds(cfg):
    if not cfg.sliding_window:
        return ["full_attention"] * cfg.layers
    if cfg.layer_types is not None:
        kinds = list(cfg.layer_types)
    else:
        kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(cfg.layers)]
    kinds[-1] = "full_attention"   # Gemma4TextConfig forces it
    return kinds


def first_shared(cfg):
    return cfg.layers - cfg.kv_shared


def ffn_of(cfg, i):
    return 2 * cfg.ffn if cfg.double_wide and cfg.kv_shared and i >= first_shared(cfg) else cfg.ffn


def validate(cfg):
    if not 0 <= cfg.kv_shared < cfg.layers or cfg.ple_dim < 0:
        raise ValueError("gemma4: kv_shared within 0..layers - 1, a non-negative ple_dim")
    if cfg.heads % cfg.global_kv_heads or cfg.heads % cfg.kv_heads:
        raise ValueError("gemma4: heads must be a multiple of kv-heads and of the global KV heads")
    if cfg.global_head_dim % 2 or not 0 < cfg.partial_rotary <= 1:
        raise ValueError("gemma4: an even global head width, a partial rotary in (0, 1]")
    if cfg.layer_types is not None and len(cfg.layer_types) != cfg.layers:
        raise ValueError("layer_types: one per layer")
    if cfg.rope_scaling:
        raise ValueError("gemma4: no RoPE scaling")


def is_global(cfg, i):
    return layer_kinds(cfg)[i] == "full_attention"


def tensor_specs(cfg):
    """Canonical (GGUF) name, Hugging Face name, numpy shape, initialisation (mkmodel's kinds)."""
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        g = is_global(cfg, i)
        hd = cfg.global_head_dim if g else cfg.head_dim
        kvh = cfg.global_kv_heads if g and cfg.k_eq_v else cfg.kv_heads
        q_dim, kv_dim = cfg.heads * hd, kvh * hd
        shared = i >= first_shared(cfg)
        specs.append((b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "norm"))
        specs.append((b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"))
        if not shared:
            specs.append((b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"))
        if not shared and not (g and cfg.k_eq_v):
            specs.append((b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"))
        specs.append((b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (hd,), "norm"))
        if not shared:
            specs.append((b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (hd,), "norm"))
        f = ffn_of(cfg, i)
        specs += [
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (f, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (f, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, f), "matrix"),
            (b + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", (cfg.dim,), "norm"),
            (b + "layer_output_scale.weight", h + "layer_scalar", (1,), "norm"),
        ]
        if cfg.experts:
            specs += expert_specs(cfg, i)
        if cfg.ple_dim:
            specs += [
                (b + "inp_gate.weight", h + "per_layer_input_gate.weight", (cfg.ple_dim, cfg.dim), "matrix"),
                (b + "proj.weight", h + "per_layer_projection.weight", (cfg.dim, cfg.ple_dim), "matrix"),
                (b + "post_norm.weight", h + "post_per_layer_input_norm.weight", (cfg.dim,), "norm"),
            ]
    if cfg.ple_dim:
        lp = cfg.layers * cfg.ple_dim
        specs += [
            ("per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight", (cfg.vocab, lp), "embed"),
            ("per_layer_model_proj.weight", "model.per_layer_model_projection.weight", (lp, cfg.dim), "matrix"),
            ("per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight", (cfg.ple_dim,), "norm"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def expert_specs(cfg, i):
    """Layer i's router, norms and per-expert matrices (hname None: hf_specs fuses them for safetensors,
    mkmodel's stack_experts for GGUF)."""
    b, h, E, F = f"blk.{i}.", f"model.layers.{i}.", cfg.experts, cfg.expert_ffn
    specs = [
        (b + "post_ffw_norm_1.weight", h + "post_feedforward_layernorm_1.weight", (cfg.dim,), "norm"),
        (b + "pre_ffw_norm_2.weight", h + "pre_feedforward_layernorm_2.weight", (cfg.dim,), "norm"),
        (b + "post_ffw_norm_2.weight", h + "post_feedforward_layernorm_2.weight", (cfg.dim,), "norm"),
        (b + "ffn_gate_inp.weight", h + "router.proj.weight", (E, cfg.dim), "router"),
        (b + "ffn_gate_inp.scale", h + "router.scale", (cfg.dim,), "norm"),
        (b + "ffn_down_exps.scale", h + "router.per_expert_scale", (E,), "norm"),
    ]
    for e in range(E):
        specs += [(b + f"ffn_gate.{e}.weight", None, (F, cfg.dim), "matrix"),
                  (b + f"ffn_up.{e}.weight", None, (F, cfg.dim), "matrix"),
                  (b + f"ffn_down.{e}.weight", None, (cfg.dim, F), "matrix")]
    return specs


def hf_specs(specs, cfg):
    """write_safetensors' view: each layer's per-expert entries as experts.gate_up_proj ([experts][gate |
    up][hidden]) and experts.down_proj ([experts][hidden][expert_ffn]), mkmodel's Granite kinds gh_exp_in /
    gh_exp_out (the same per-expert values as the GGUF file)."""
    out, pend = [], {}
    for gname, hname, shape, kind in specs:
        if hname is not None:
            out.append((gname, hname, shape, kind))
            continue
        parts = gname.split(".")   # blk.i.ffn_{gate,up,down}.e.weight
        pend.setdefault(parts[2], []).append(gname)
        if parts[2] == "ffn_down" and len(pend["ffn_down"]) == cfg.experts:
            h, E, F = f"model.layers.{parts[1]}.", cfg.experts, cfg.expert_ffn
            out.append((tuple(zip(pend.pop("ffn_gate"), pend.pop("ffn_up"))), h + "experts.gate_up_proj",
                        (E, 2 * F, cfg.dim), "gh_exp_in"))
            out.append((tuple(pend.pop("ffn_down")), h + "experts.down_proj", (E, cfg.dim, F), "gh_exp_out"))
    return out


def rope_freqs(cfg):
    half = cfg.global_head_dim // 2
    rot = int(cfg.global_head_dim * cfg.partial_rotary / 2)
    return np.array([1.0] * rot + [1e30] * (half - rot), dtype=np.float32)


def gguf_metadata(cfg, w, G):
    """The keys convert_hf_to_gguf.py's Gemma4Model writes beyond the common ones (written by mkmodel)."""
    a = "gemma4"
    kinds = layer_kinds(cfg)
    w.add_array(f"{a}.attention.head_count_kv",
                [cfg.global_kv_heads if k == "full_attention" and cfg.k_eq_v else cfg.kv_heads for k in kinds],
                G.UINT32)
    w.add_u32(f"{a}.attention.key_length", cfg.global_head_dim)
    w.add_u32(f"{a}.attention.value_length", cfg.global_head_dim)
    w.add_u32(f"{a}.attention.key_length_swa", cfg.head_dim)
    w.add_u32(f"{a}.attention.value_length_swa", cfg.head_dim)
    w.add_u32(f"{a}.rope.dimension_count", cfg.global_head_dim)
    w.add_u32(f"{a}.rope.dimension_count_swa", cfg.head_dim)
    w.add_f32(f"{a}.rope.freq_base_swa", cfg.rope_local_theta)
    w.add_u32(f"{a}.attention.shared_kv_layers", cfg.kv_shared)
    w.add_u32(f"{a}.embedding_length_per_layer_input", cfg.ple_dim)
    if cfg.double_wide:   # convert_hf_to_gguf.py: the widths per layer
        w.add_array(f"{a}.feed_forward_length", [ffn_of(cfg, i) for i in range(cfg.layers)], G.UINT32)
    if cfg.sliding_window:
        w.add_array(f"{a}.attention.sliding_window_pattern", [k == "sliding_attention" for k in kinds], G.BOOL)
    w.add_tensor("rope_freqs.weight", (cfg.global_head_dim // 2,), G.F32, rope_freqs(cfg))


def hf_text_config(cfg, dtype_name):
    return {
        "model_type": "gemma4_text", "hidden_size": cfg.dim, "intermediate_size": cfg.ffn,
        "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
        "num_global_key_value_heads": cfg.global_kv_heads if cfg.k_eq_v else None,
        "head_dim": cfg.head_dim, "global_head_dim": cfg.global_head_dim, "attention_k_eq_v": bool(cfg.k_eq_v),
        "rms_norm_eps": cfg.eps, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_word_embeddings": bool(cfg.tied), "torch_dtype": dtype_name, "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": cfg.sliding_window, "layer_types": layer_kinds(cfg),
        "final_logit_softcapping": cfg.final_softcap, "attention_bias": False,
        "hidden_size_per_layer_input": cfg.ple_dim, "vocab_size_per_layer_input": cfg.vocab,
        "num_kv_shared_layers": cfg.kv_shared, "enable_moe_block": bool(cfg.experts),
        "num_experts": cfg.experts or None, "top_k_experts": cfg.experts_used if cfg.experts else None,
        "moe_intermediate_size": cfg.expert_ffn if cfg.experts else None,
        "use_double_wide_mlp": bool(cfg.double_wide), "bos_token_id": 1, "eos_token_id": 2,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": cfg.rope_local_theta},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": cfg.partial_rotary,
                               "rope_theta": cfg.theta},
        },
    }


def hf_config(cfg, dtype_name):
    """Gemma4ForCausalLM's config.json, or (hf_type "multimodal") Gemma4ForConditionalGeneration's with the
    text model under text_config (its tensors then under model.language_model.)."""
    tc = hf_text_config(cfg, dtype_name)
    if cfg.hf_type == "multimodal":
        return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": tc,
                "tie_word_embeddings": bool(cfg.tied), "torch_dtype": dtype_name}
    return {"architectures": ["Gemma4ForCausalLM"], **tc}
