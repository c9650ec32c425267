"""Mistral 3 for tools/mkmodel.py: Ministral 3's text model (transformers' models/ministral3:
configuration_ministral3.py, modeling_ministral3.py) and llama.cpp's GGUF arch "mistral3"
(convert_hf_to_gguf.py's Ministral3Model, a LlamaModel: Q/K permuted for adjacent-pair RoPE).

A Llama with YaRN and Llama 4's attention temperature: after RoPE the queries of position p are multiplied
by 1 + beta * ln(1 + floor(p / original_max_position_embeddings)), beta = rope_parameters'
"llama_4_scaling_beta" (cfg.attn_temp_beta). config.json is written as transformers v5 writes it (the
RoPE in "rope_parameters"); hf_type "multimodal" nests it under text_config of a
Mistral3ForConditionalGeneration with the text model under model.language_model. (transformers v5),
"multimodal-legacy" under language_model.model. and language_model.lm_head.weight (transformers 4.x's
Mistral Small 3.1 checkpoints); both get a token vision tower tensor for the loader to ignore. GGUF: the
rope.scaling.* keys, {arch}.attention.temperature_scale (beta) and rope.scaling.yarn_log_multiplier
(mscale_all_dim, 1), as the converter writes them."""

HF_TYPES = {("mistral3", "multimodal"): ("Mistral3ForConditionalGeneration", "mistral3"),
            ("mistral3", "multimodal-legacy"): ("Mistral3ForConditionalGeneration", "mistral3")}
# What stands for the vision tower (Pixtral's patch convolution, flattened): the loader must ignore it.
VISION = ("vision_tower.patch_conv.weight", (16, 12), "matrix")


def validate(cfg):
    if cfg.attn_temp_beta is not None and cfg.arch != "mistral3":
        raise ValueError("an attention temperature (llama_4_scaling_beta) is Mistral 3's")
    if cfg.arch != "mistral3":
        return
    if cfg.rope_scaling not in (None, "yarn"):
        raise ValueError("mistral3: YaRN or no RoPE scaling")
    if cfg.attn_temp_beta and cfg.rope_scaling != "yarn":
        raise ValueError("mistral3: the temperature's length is YaRN's original context: use rope_scaling yarn")
    if cfg.sliding_window is not None or cfg.experts:
        raise ValueError("mistral3: no window, no experts")


def gguf_metadata(cfg, w):
    a = cfg.arch
    w.add_u32(f"{a}.rope.dimension_count", cfg.head_dim)
    if cfg.rope_scaling == "yarn":
        w.add_f32(f"{a}.rope.scaling.yarn_beta_fast", 32.0)
        w.add_f32(f"{a}.rope.scaling.yarn_beta_slow", 1.0)
        w.add_f32(f"{a}.rope.scaling.yarn_log_multiplier", 1.0)   # mscale_all_dim
    if cfg.attn_temp_beta:
        w.add_f32(f"{a}.attention.temperature_scale", cfg.attn_temp_beta)


def text_config(cfg, dtype, torch_dtype):
    rp = {"rope_type": "default", "rope_theta": cfg.theta}
    if cfg.rope_scaling == "yarn":
        rp = {"type": "yarn", "rope_type": "yarn", "rope_theta": cfg.theta, "factor": cfg.rope_factor,
              "original_max_position_embeddings": cfg.rope_orig_ctx, "max_position_embeddings": cfg.ctx,
              "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
        if cfg.attn_temp_beta:
            rp["llama_4_scaling_beta"] = cfg.attn_temp_beta
    return {
        "architectures": ["Ministral3ForCausalLM"], "model_type": "ministral3", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "torch_dtype": torch_dtype, "hidden_act": "silu", "sliding_window": None, "attention_dropout": 0.0,
        "rope_parameters": rp, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 11,
    }


def hf_config(cfg, dtype, torch_dtype):
    text = text_config(cfg, dtype, torch_dtype)
    if cfg.hf_type not in ("multimodal", "multimodal-legacy"):
        return text
    del text["architectures"]
    return {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "text_config": text,
            "vision_config": {"model_type": "pixtral", "hidden_size": 16, "patch_size": 2, "num_channels": 3,
                              "image_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 16,
                              "intermediate_size": 16},
            "image_token_index": 10, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
            "vision_feature_layer": -1, "multimodal_projector_bias": False,
            "tie_word_embeddings": bool(cfg.tied), "torch_dtype": torch_dtype}


def hf_specs(cfg, specs):
    """The Hugging Face names of the chosen layout (see the module docstring)."""
    if cfg.hf_type == "multimodal":
        out = [(g, "model.language_model." + h[len("model."):] if h.startswith("model.") else h, s, k)
               for g, h, s, k in specs]
        return out + [("v.patch_conv.weight", "model." + VISION[0], VISION[1], VISION[2])]
    if cfg.hf_type == "multimodal-legacy":
        out = [(g, "language_model." + h, s, k) for g, h, s, k in specs]
        return out + [("v.patch_conv.weight", VISION[0], VISION[1], VISION[2])]
    return specs
