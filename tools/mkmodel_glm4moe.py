"""GLM-4.5 / 4.6 / 4.7 mixtures of experts (GGUF arch glm4moe, Hugging Face Glm4MoeForCausalLM) for
tools/mkmodel.py: presets, random weights, and both file formats.

Names and keys: GGUF from llama.cpp (gguf-py constants.py MODEL_ARCH.GLM4_MOE: post_attention_norm is the
FFN's pre-norm, ffn_gate_inp, exp_probs_b.bias, ffn_{gate,up,down}_exps, ffn_{gate,up,down}_shexp, and the
MTP layer's nextn.{eh_proj,enorm,hnorm,shared_head_norm}; convert_hf_to_gguf.py's Glm4MoeModel:
block_count counts the MTP layers, expert_shared_count, leading_dense_block_count, expert_gating_func 2
(sigmoid), expert_weights_scale, expert_weights_norm, nextn_predict_layers, rope.dimension_count =
int(head_dim * partial_rotary_factor), Q/K not permuted); Hugging Face from transformers'
modeling_glm4_moe.py / configuration_glm4_moe.py and the released checkpoints (one tensor per expert,
mlp.gate.e_score_correction_bias, the MTP layer as model.layers.{num_hidden_layers}.*). Expert groups
(n_group > 1) are written to GGUF under llama.cpp's DeepSeek keys expert_group_count /
expert_group_used_count (its glm4moe reads neither; every released GLM-4.5 has one group).

Weights: the generator of mkmodel.py (values depend only on seed and tensor name). The router is scaled
like a matrix (its logits have a spread of about 1, so sigmoid scores spread over (0, 1) instead of
saturating), the selection bias is 0.15 |N(0, 1)|: positive, as transformers' masked_fill(0) of the closed
groups then never beats an open expert, and large enough to change which experts are chosen."""

import json
import os
import struct

import numpy as np

# The architecture's own settings next to mkmodel's common ones (dim, layers, heads, ...).
PRESETS = {
    # Every kind of layer: layer 0 dense, layers 1-2 experts (8 of 64, 2 per token, one shared expert of
    # 64), an MTP layer after them (in the file, not run); Q/K/V biases, partial RoPE over half of each
    # head, sigmoid routing with a selection bias, renormalised and scaled by 2.5. dim 256 and head_dim 64:
    # the K-quants apply to the rows of 256 (experts' down rows of 64 fall back to Q8_0, as in llama.cpp).
    "test-glm4moe": dict(arch="glm4moe", dim=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=256, vocab=512,
                         theta=1e6, ctx=4096, eps=1e-5, experts=8, experts_used=2, expert_ffn=64, shared=1,
                         dense_leading=1, n_group=1, topk_group=1, routed_scale=2.5, norm_topk=True,
                         partial_rotary=0.5, qk_norm=False, qkv_bias=True, nextn=1),
    # The other settings: QK norms (GLM-4.5's 355B), 4 groups of 2 experts of which the 2 best stay open,
    # no renormalisation, two shared experts, two leading dense layers, no MTP layer.
    "test-glm4moe-qk": dict(arch="glm4moe", dim=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=256,
                            vocab=512, theta=1e6, ctx=4096, eps=1e-5, experts=8, experts_used=3, expert_ffn=64,
                            shared=2, dense_leading=2, n_group=4, topk_group=2, routed_scale=1.5,
                            norm_topk=False, partial_rotary=0.5, qk_norm=True, qkv_bias=True, nextn=0),
    # The MTP head as a draft source that the model accepts (tests/test_engine_mtp.c): QK norms,
    # tied embeddings, the decoder's attention and FFN outputs damped by 0.2 (so that greedy decoding
    # falls into repeating a token) and a copying head (mtp_copy: eh_proj [0 | I], unit hnorm and
    # shared_head_norm, zero attention output and FFN down projections), whose draft is the token just
    # sampled: taken in full while the model repeats, in part or not at all before.
    "test-glm4moe-mtp-copy": dict(arch="glm4moe", dim=256, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=256,
                                  vocab=512, theta=1e6, ctx=4096, eps=1e-5, experts=8, experts_used=2,
                                  expert_ffn=64, shared=1, dense_leading=1, n_group=1, topk_group=1,
                                  routed_scale=2.5, norm_topk=True, partial_rotary=0.5, qk_norm=True,
                                  qkv_bias=True, nextn=1, tied=True, mtp_copy=True, damp=0.2),
    # GLM-4.5-Air's real widths (its config.json, as a published conversion script copies it: hidden 4096,
    # 96 heads of 128, 8 KV heads, partial_rotary_factor 0.5, 128 experts of 1408, 8 per token, one shared
    # expert, first_k_dense_replace 1, intermediate 10944, vocab 151552, routed_scaling_factor 1.0,
    # rms_norm_eps 1e-5, attention_bias true, no QK norm; the RoPE base, 1e6 here, changes no timing) with
    # 4 of its 46 layers and without its MTP layer, which Pith does not run (benchmarks; --layers for more,
    # --random-blocks to write Q8_0 or Q4_K_M quickly: each expert layer holds 2.2 G weights).
    "glm45-air": dict(arch="glm4moe", dim=4096, layers=4, heads=96, kv_heads=8, head_dim=128, ffn=10944,
                      vocab=151552, theta=1e6, ctx=131072, eps=1e-5, experts=128, experts_used=8, expert_ffn=1408,
                      shared=1, dense_leading=1, n_group=1, topk_group=1, routed_scale=1.0, norm_topk=True,
                      partial_rotary=0.5, qk_norm=False, qkv_bias=True, nextn=0),
}

FIELDS = ("arch", "dim", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab", "theta", "ctx", "eps",
          "experts", "experts_used", "expert_ffn", "shared", "dense_leading", "n_group", "topk_group",
          "routed_scale", "norm_topk", "partial_rotary", "qk_norm", "qkv_bias", "nextn", "tied", "mtp_copy",
          "damp", "mtp_own")
# mkmodel.py's options that mean the same here (mtp: the MTP layers).
OVERRIDES = {"dim", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab", "theta", "ctx", "eps", "experts",
             "experts_used", "expert_ffn", "qk_norm", "qkv_bias", "tied", "mtp", "mtp_copy"}


class Config:
    """A glm4moe model's settings (attribute names as mkmodel.Config's where they mean the same)."""

    def __init__(self, **kw):
        defaults = dict(PRESETS["test-glm4moe"], tied=False, mtp_copy=False, damp=0, mtp_own=False)
        for k in FIELDS:
            setattr(self, k, kw.get(k, defaults[k]))
        # what mkmodel.py's shared code reads of a config
        self.mtp, self.rope_scaling, self.hf_type, self.sliding_window = self.nextn, None, None, None
        self.rope_dim = int(self.head_dim * self.partial_rotary)
        self.validate()

    def validate(self):
        if self.heads % self.kv_heads or self.rope_dim % 2 or not 0 < self.rope_dim <= self.head_dim:
            raise ValueError("glm4moe: heads a multiple of kv-heads, an even rotated part of each head")
        if not 1 <= self.experts_used <= self.experts or not 0 <= self.dense_leading <= self.layers:
            raise ValueError("glm4moe: 1..experts experts per token, at most --layers leading dense layers")
        if self.experts % self.n_group or self.topk_group * (self.experts // self.n_group) < self.experts_used:
            raise ValueError("glm4moe: groups must divide the experts and leave experts_used of them open")
        if self.nextn < 0 or self.shared < 0:
            raise ValueError("glm4moe: negative MTP layers or shared experts")
        if self.mtp_copy and self.nextn != 1:
            raise ValueError("glm4moe: --mtp-copy needs one MTP layer")

    def as_dict(self):
        return {k: getattr(self, k) for k in FIELDS}


def wants(preset, overrides):
    return preset in PRESETS or overrides.get("arch") == "glm4moe"


def build_config(preset=None, **overrides):
    kw = dict(PRESETS[preset]) if preset else {}
    for k, v in overrides.items():
        if v is None or k == "arch":
            continue
        if k not in OVERRIDES:
            raise ValueError(f"glm4moe: --{k.replace('_', '-')} does not apply")
        kw["nextn" if k == "mtp" else k] = v
    return Config(**kw)


def tensor_specs(cfg):
    """(canonical name, Hugging Face name, shape, kind) of every tensor, experts one entry each (GGUF
    stacks them: mkmodel.stack_experts); the MTP layers follow the decoder's as blocks n_layers + j."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers + cfg.nextn):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        # the block's output projections: zero in a copying head, damped in the decoder when asked
        copy = cfg.mtp_copy and i >= cfg.layers
        out = "zero" if copy else f"damped:{cfg.damp}" if cfg.damp and i < cfg.layers else "matrix"
        if i >= cfg.layers:   # the MTP layer's own tensors, before its decoder block (as llama.cpp's)
            specs += [(b + "nextn.eh_proj.weight", h + "eh_proj.weight", (cfg.dim, 2 * cfg.dim),
                       "copy_hidden" if copy else "matrix"),
                      (b + "nextn.enorm.weight", h + "enorm.weight", (cfg.dim,), "norm"),
                      (b + "nextn.hnorm.weight", h + "hnorm.weight", (cfg.dim,), "ones" if copy else "norm"),
                      (b + "nextn.shared_head_norm.weight", h + "shared_head.norm.weight", (cfg.dim,),
                       "ones" if copy else "norm")]
            if cfg.mtp_own:   # the layer's own embedding and vocabulary head (llama.cpp: optional)
                specs += [(b + "nextn.embed_tokens.weight", h + "embed_tokens.weight", (cfg.vocab, cfg.dim), "embed"),
                          (b + "nextn.shared_head_head.weight", h + "shared_head.head.weight", (cfg.vocab, cfg.dim),
                           "matrix")]
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
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), out),
            (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
        ]
        if i < cfg.dense_leading:
            specs += [(b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
                      (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
                      (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), out)]
            continue
        specs += [(b + "ffn_gate_inp.weight", h + "mlp.gate.weight", (cfg.experts, cfg.dim), "glm_router"),
                  (b + "exp_probs_b.bias", h + "mlp.gate.e_score_correction_bias", (cfg.experts,), "select_bias")]
        for kind, shape in (("gate", (cfg.expert_ffn, cfg.dim)), ("up", (cfg.expert_ffn, cfg.dim)),
                            ("down", (cfg.dim, cfg.expert_ffn))):
            specs += [(f"{b}ffn_{kind}.{e}.weight", f"{h}mlp.experts.{e}.{kind}_proj.weight", shape,
                       out if kind == "down" else "matrix") for e in range(cfg.experts)]
        if cfg.shared:
            sh = cfg.shared * cfg.expert_ffn
            specs += [(b + "ffn_gate_shexp.weight", h + "mlp.shared_experts.gate_proj.weight", (sh, cfg.dim), "matrix"),
                      (b + "ffn_up_shexp.weight", h + "mlp.shared_experts.up_proj.weight", (sh, cfg.dim), "matrix"),
                      (b + "ffn_down_shexp.weight", h + "mlp.shared_experts.down_proj.weight", (cfg.dim, sh),
                       out)]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def random_tensor(M, seed, name, shape, kind):
    """mkmodel's generator, with this architecture's two kinds (see the module docstring)."""
    if kind == "glm_router":
        return M.random_tensor(seed, name, shape, "matrix")
    if kind == "select_bias":
        return np.abs(M.random_tensor(seed, name, shape, "bias")) * np.float32(1.5)
    if kind == "ones":   # a norm that changes nothing (the copying MTP head's)
        return np.ones(shape, dtype=np.float32)
    if kind.startswith("damped:"):   # a random matrix times the factor after the colon
        return M.random_tensor(seed, name, shape, "matrix") * np.float32(float(kind.split(":")[1]))
    return M.random_tensor(seed, name, shape, kind)


def write_gguf(M, cfg, path, dtype="F32", seed=0, name="random", random_blocks=False):
    """The GGUF file llama.cpp's converter would write (M: the mkmodel module, whose writer, vocabulary
    and quantized-type choices are used)."""
    G = M.G
    dtype = dtype.upper()
    if dtype not in M.KQUANT_MIXES:
        G.type_id(dtype)
    if dtype == "MXFP4":
        raise ValueError("glm4moe: MXFP4 is GPT-OSS's expert format")
    w = G.GGUFWriter(path)
    a = "glm4moe"
    w.add_str("general.architecture", a)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", M.FILE_TYPE[dtype])
    w.add_u32(f"{a}.context_length", cfg.ctx)
    w.add_u32(f"{a}.embedding_length", cfg.dim)
    w.add_u32(f"{a}.block_count", cfg.layers + cfg.nextn)   # llama.cpp counts the MTP layers
    w.add_u32(f"{a}.feed_forward_length", cfg.ffn)
    w.add_u32(f"{a}.attention.head_count", cfg.heads)
    w.add_u32(f"{a}.attention.head_count_kv", cfg.kv_heads)
    w.add_u32(f"{a}.attention.key_length", cfg.head_dim)
    w.add_u32(f"{a}.attention.value_length", cfg.head_dim)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    w.add_f32(f"{a}.rope.freq_base", cfg.theta)
    w.add_u32(f"{a}.rope.dimension_count", cfg.rope_dim)
    w.add_u32(f"{a}.vocab_size", cfg.vocab)
    w.add_u32(f"{a}.expert_count", cfg.experts)
    w.add_u32(f"{a}.expert_used_count", cfg.experts_used)
    w.add_u32(f"{a}.expert_feed_forward_length", cfg.expert_ffn)
    w.add_u32(f"{a}.expert_shared_count", cfg.shared)
    w.add_u32(f"{a}.leading_dense_block_count", cfg.dense_leading)
    w.add_u32(f"{a}.expert_gating_func", 2)
    w.add_f32(f"{a}.expert_weights_scale", cfg.routed_scale)
    w.add(f"{a}.expert_weights_norm", bool(cfg.norm_topk), G.BOOL)
    if cfg.n_group > 1:
        w.add_u32(f"{a}.expert_group_count", cfg.n_group)
        w.add_u32(f"{a}.expert_group_used_count", cfg.topk_group)
    w.add_u32(f"{a}.nextn_predict_layers", cfg.nextn)
    pieces, scores, types = M.vocabulary(cfg.vocab)
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", pieces, G.STRING)
    w.add_array("tokenizer.ggml.scores", np.array(scores, dtype=np.float32), G.FLOAT32)
    w.add_array("tokenizer.ggml.token_type", types, G.INT32)
    w.add_u32("tokenizer.ggml.bos_token_id", M.BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", M.EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", M.UNK_ID)
    w.add("tokenizer.ggml.add_bos_token", True, G.BOOL)
    for gname, hname, shape, kind in M.stack_experts(tensor_specs(cfg)):
        # As llama.cpp: vectors and the router F32, matrices the requested type (mkmodel's mixes).
        ttype = M.matrix_type(cfg, dtype, gname, shape) if len(shape) >= 2 and kind != "glm_router" else "F32"
        stacked = isinstance(hname, list)
        if random_blocks and ttype == "Q8_0":
            if stacked:
                data = (lambda names=hname, s=shape[1:]: (c for n in names for c in M.random_q8_0_blocks(seed, n, s)))
            else:
                data = (lambda n=gname, s=shape: M.random_q8_0_blocks(seed, n, s))
        elif random_blocks and ttype in M.RANDOM_QUANT_TYPES:
            if stacked:
                data = (lambda names=hname, s=shape[1:], t=ttype:
                        (c for n in names for c in M.random_quant_blocks(seed, n, s, t)))
            else:
                data = (lambda n=gname, s=shape, t=ttype: M.random_quant_blocks(seed, n, s, t))
        elif stacked:
            data = (lambda names=hname, s=shape[1:], k=kind: (random_tensor(M, seed, n, s, k)[None] for n in names))
        else:
            data = (lambda n=gname, s=shape, k=kind: random_tensor(M, seed, n, s, k))
        w.add_tensor(gname, shape, ttype, data)
    w.write()


def hf_config(M, cfg, dtype):
    """config.json as the released GLM-4.5 checkpoints write it (configuration_glm4_moe.py's keys)."""
    return {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "partial_rotary_factor": cfg.partial_rotary,
        "rms_norm_eps": cfg.eps, "rope_theta": cfg.theta, "rope_scaling": None, "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied), "torch_dtype": M.TORCH_DTYPE[dtype],
        "hidden_act": "silu", "attention_bias": bool(cfg.qkv_bias), "use_qk_norm": bool(cfg.qk_norm),
        "attention_dropout": 0.0, "n_routed_experts": cfg.experts, "num_experts_per_tok": cfg.experts_used,
        "moe_intermediate_size": cfg.expert_ffn, "n_shared_experts": cfg.shared,
        "first_k_dense_replace": cfg.dense_leading, "n_group": cfg.n_group, "topk_group": cfg.topk_group,
        "routed_scaling_factor": cfg.routed_scale, "norm_topk_prob": bool(cfg.norm_topk),
        "num_nextn_predict_layers": cfg.nextn, "topk_method": "noaux_tc", "bos_token_id": M.BOS_ID,
        "eos_token_id": M.EOS_ID,
    }



def write_safetensors(M, cfg, out_dir, dtype="F32", seed=0, shards=1):
    dtype = dtype.upper()
    if dtype not in M.ST_DTYPES:
        raise ValueError(f"safetensors supports F32, F16 and BF16, not {dtype}")
    os.makedirs(out_dir, exist_ok=True)
    specs = tensor_specs(cfg)
    st_name, elem = M.ST_DTYPES[dtype]
    shards = max(1, min(shards, len(specs)))
    per = -(-len(specs) // shards)
    groups = [specs[i:i + per] for i in range(0, len(specs), per)]
    names = (["model.safetensors"] if len(groups) == 1 else
             [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))])
    weight_map, total = {}, 0
    for fname, group in zip(names, groups):
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for _, hname, shape, kind in group:
            # transformers keeps e_score_correction_bias in float32 (_keep_in_fp32_modules_strict)
            dt, size = ("F32", 4) if kind == "select_bias" else (st_name, elem)
            n = int(np.prod(shape)) * size
            header[hname] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[hname] = fname
        total += off
        hjson = json.dumps(header, separators=(",", ":")).encode()
        hjson += b" " * ((-len(hjson)) % 8)
        with open(os.path.join(out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hjson)) + hjson)
            for gname, _, shape, kind in group:
                x = random_tensor(M, seed, gname, shape, kind)
                f.write(M.st_encode(x, "F32" if kind == "select_bias" else dtype))
    if len(groups) > 1:
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(M, cfg, dtype), f, indent=2)
    M.write_tokenizer_bin(os.path.join(out_dir, "tokenizer.bin"), cfg.vocab)
