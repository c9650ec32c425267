"""DeepSeek-V2/V3 (`deepseek2`) random-weight models for tools/mkmodel.py, as GGUF or Hugging Face safetensors.

Names and keys: transformers' configuration_deepseek_v3.py / modeling_deepseek_v3.py (and _v2) for config.json
and the tensors; llama.cpp's convert_hf_to_gguf.py (DeepseekV2Model) and llama-model.cpp for GGUF:
  - deepseek2.attention.q_lora_rank (absent without q_lora), kv_lora_rank, key_length / value_length, and as
    llama.cpp's MLA conversion writes them: key_length = kv_lora_rank + rope, value_length = kv_lora_rank and
    key_length_mla = nope + rope, value_length_mla = v (`split=False` writes an older file instead: the
    plain keys are the head widths and only the fused attn_kv_b is there); rope.dimension_count = rope;
    leading_dense_block_count, expert_feed_forward_length, expert_shared_count, expert_weights_scale,
    expert_weights_norm, expert_gating_func (1 softmax, 2 sigmoid), expert_group_count,
    expert_group_used_count; YaRN's rope.scaling.* with yarn_log_multiplier = 0.1 * mscale_all_dim;
  - tensors attn_q_a, attn_q_a_norm, attn_q_b (or attn_q), attn_kv_a_mqa, attn_kv_a_norm, attn_kv_b and the
    split attn_k_b (per head W_UK transposed: numpy [heads, rank, nope]) and attn_v_b ([heads, v, rank]),
    ffn_gate_inp, exp_probs_b.bias (V3's e_score_correction_bias), ffn_*_exps, ffn_*_shexp.
Weights are drawn in Hugging Face layout; q_pe / k_pe rotate adjacent pairs in both formats (llama.cpp's
DEEPSEEK2 is NORM RoPE and its converter does not permute; transformers rotates pairs under rope_interleave,
V3's default, and always in V2), so both formats hold the same numbers.
"""

import json
import math
import os
import struct
import types

import numpy as np

import pith_gguf as G

# Presets. test-deepseek2: V3-style (q_lora, sigmoid + selection bias, 8 experts in 4 groups, top-2 of 2
# groups, routed scale 2.5, renormalised, 1 shared expert, YaRN with mscale), one leading dense layer and
# two MoE layers; every width a multiple of 32 (Q8_0 rows and a Q8_0 KV cache of rank + rope = 96), the
# inputs of dim 256 for the K-quants. test-deepseek2-v2: V2-style without q_lora (DeepSeek-V2-Lite's
# attention), softmax scores, group_limited_greedy routing, 2 shared experts, no renormalisation, no YaRN.
# deepseek2-lite: DeepSeek-V2-Lite's real config (huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json)
# with 4 of its 27 layers, for benchmarks.
PRESETS = {
    "test-deepseek2": dict(v3=True, dim=256, layers=3, heads=4, q_lora=64, kv_lora=64, rope=32, nope=32, v=32,
                           ffn=256, vocab=512, experts=8, experts_used=2, expert_ffn=64, shared=1, dense=1,
                           groups=4, groups_used=2, scale=2.5, norm_topk=True, bias=True, theta=10000.0,
                           ctx=8192, eps=1e-6, yarn=dict(factor=4.0, orig=2048, mscale=0.707, mscale_all=0.707)),
    "test-deepseek2-v2": dict(v3=False, dim=256, layers=3, heads=4, q_lora=0, kv_lora=64, rope=32, nope=64, v=32,
                              ffn=256, vocab=512, experts=8, experts_used=3, expert_ffn=64, shared=2, dense=1,
                              groups=4, groups_used=2, scale=1.0, norm_topk=False, bias=False, theta=10000.0,
                              ctx=4096, eps=1e-6, yarn=None),
    # The MTP head as a draft source that the model accepts (tests/test_engine_mtp.c): the decoder's
    # attention and FFN outputs damped by 0.2 (so that greedy decoding falls into repeating a token) and a
    # copying head (mtp_copy: eh_proj [0 | I], unit hnorm and shared_head_norm, zero attention output and FFN
    # down projections), whose draft is the token just sampled. mtp (any preset): that many nextn layers
    # (llama.cpp's blk.{layers}.nextn.*, Hugging Face model.layers.{num_hidden_layers}.*); mtp_own: the
    # layer's own embed_tokens and shared_head.head.
    "test-deepseek2-mtp-copy": dict(v3=True, dim=256, layers=3, heads=4, q_lora=64, kv_lora=64, rope=32, nope=32,
                                    v=32, ffn=256, vocab=512, experts=8, experts_used=2, expert_ffn=64, shared=1,
                                    dense=1, groups=4, groups_used=2, scale=2.5, norm_topk=True, bias=True,
                                    theta=10000.0, ctx=8192, eps=1e-6,
                                    yarn=dict(factor=4.0, orig=2048, mscale=0.707, mscale_all=0.707),
                                    mtp=1, mtp_copy=True, damp=0.2, tied=True),
    "deepseek2-lite": dict(v3=False, dim=2048, layers=4, heads=16, q_lora=0, kv_lora=512, rope=64, nope=128, v=128,
                           ffn=10944, vocab=102400, experts=64, experts_used=6, expert_ffn=1408, shared=2, dense=1,
                           groups=0, groups_used=0, scale=1.0, norm_topk=False, bias=False, theta=10000.0,
                           ctx=163840, eps=1e-6, yarn=dict(factor=40.0, orig=4096, mscale=0.707, mscale_all=0.707)),
}


def config(preset, **over):
    c = dict(mtp=0, mtp_copy=False, damp=0, mtp_own=False, tied=False)
    c.update(PRESETS[preset])
    c.update(over)
    c = types.SimpleNamespace(**c)
    c.preset = preset
    c.arch = "deepseek2"
    if c.mtp not in (0, 1) or ((c.mtp_copy or c.mtp_own) and not c.mtp):
        raise ValueError("deepseek2: --mtp 0 or 1; --mtp-copy needs one MTP layer")
    return c


def kv_bytes_per_token(c, elem=2):
    """(MLA cache, the per-head K and V layout it replaces) bytes per token over all layers."""
    return ((c.kv_lora + c.rope) * c.layers * elem, c.heads * (c.nope + c.rope + c.v) * c.layers * elem)


def specs(c):
    """(GGUF name, Hugging Face name, numpy shape, kind) of every tensor; experts one entry per expert."""
    H, hd = c.heads, c.nope + c.rope
    s = [("token_embd.weight", "model.embed_tokens.weight", (c.vocab, c.dim), "tied_embed" if c.tied else "embed")]
    for i in range(c.layers + c.mtp):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        # the block's output projections: zero in a copying head, damped in the decoder when asked
        copy = c.mtp_copy and i >= c.layers
        out = "zero" if copy else f"damped:{c.damp}" if c.damp and i < c.layers else "matrix"
        if i >= c.layers:   # the MTP layer's own tensors, before its decoder block (as llama.cpp's)
            s += [(b + "nextn.eh_proj.weight", h + "eh_proj.weight", (c.dim, 2 * c.dim),
                   "copy_hidden" if copy else "matrix"),
                  (b + "nextn.enorm.weight", h + "enorm.weight", (c.dim,), "norm"),
                  (b + "nextn.hnorm.weight", h + "hnorm.weight", (c.dim,), "ones" if copy else "norm"),
                  (b + "nextn.shared_head_norm.weight", h + "shared_head.norm.weight", (c.dim,),
                   "ones" if copy else "norm")]
            if c.mtp_own:
                s += [(b + "nextn.embed_tokens.weight", h + "embed_tokens.weight", (c.vocab, c.dim), "embed"),
                      (b + "nextn.shared_head_head.weight", h + "shared_head.head.weight", (c.vocab, c.dim),
                       "matrix")]
        s += [(b + "attn_norm.weight", h + "input_layernorm.weight", (c.dim,), "norm")]
        if c.q_lora:
            s += [(b + "attn_q_a.weight", h + "self_attn.q_a_proj.weight", (c.q_lora, c.dim), "matrix"),
                  (b + "attn_q_a_norm.weight", h + "self_attn.q_a_layernorm.weight", (c.q_lora,), "norm"),
                  (b + "attn_q_b.weight", h + "self_attn.q_b_proj.weight", (H * hd, c.q_lora), "matrix")]
        else:
            s += [(b + "attn_q.weight", h + "self_attn.q_proj.weight", (H * hd, c.dim), "matrix")]
        s += [(b + "attn_kv_a_mqa.weight", h + "self_attn.kv_a_proj_with_mqa.weight", (c.kv_lora + c.rope, c.dim),
               "matrix"),
              (b + "attn_kv_a_norm.weight", h + "self_attn.kv_a_layernorm.weight", (c.kv_lora,), "norm"),
              (b + "attn_kv_b.weight", h + "self_attn.kv_b_proj.weight", (H * (c.nope + c.v), c.kv_lora), "matrix"),
              (b + "attn_output.weight", h + "self_attn.o_proj.weight", (c.dim, H * c.v), out),
              (b + "ffn_norm.weight", h + "post_attention_layernorm.weight", (c.dim,), "norm")]
        if i < c.dense or not c.experts:
            s += [(b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (c.ffn, c.dim), "matrix"),
                  (b + "ffn_up.weight", h + "mlp.up_proj.weight", (c.ffn, c.dim), "matrix"),
                  (b + "ffn_down.weight", h + "mlp.down_proj.weight", (c.dim, c.ffn), out)]
            continue
        s += [(b + "ffn_gate_inp.weight", h + "mlp.gate.weight", (c.experts, c.dim), "router")]
        if c.bias:
            s += [(b + "exp_probs_b.bias", h + "mlp.gate.e_score_correction_bias", (c.experts,), "bias")]
        for kind, shape in (("gate", (c.expert_ffn, c.dim)), ("up", (c.expert_ffn, c.dim)),
                            ("down", (c.dim, c.expert_ffn))):
            s += [(f"{b}ffn_{kind}.{e}.weight", f"{h}mlp.experts.{e}.{kind}_proj.weight", shape,
                   out if kind == "down" else "matrix") for e in range(c.experts)]
        if c.shared:
            S = c.shared * c.expert_ffn
            s += [(b + "ffn_gate_shexp.weight", h + "mlp.shared_experts.gate_proj.weight", (S, c.dim), "matrix"),
                  (b + "ffn_up_shexp.weight", h + "mlp.shared_experts.up_proj.weight", (S, c.dim), "matrix"),
                  (b + "ffn_down_shexp.weight", h + "mlp.shared_experts.down_proj.weight", (c.dim, S), out)]
    s += [("output_norm.weight", "model.norm.weight", (c.dim,), "norm")]
    if not c.tied:   # tied (the copying MTP preset, so that the damped decoder repeats tokens): no lm_head
        s += [("output.weight", "lm_head.weight", (c.vocab, c.dim), "matrix")]
    return s


def random_chunks(M, seed, name, shape, kind):
    """mkmodel's generator, with the two kinds of the MTP presets: "ones" (a norm that changes nothing, the
    copying head's) and "damped:f" (a random matrix times f)."""
    if kind == "ones":
        yield np.ones(shape, dtype=np.float32)
    elif kind.startswith("damped:"):
        f = np.float32(float(kind.split(":")[1]))
        for x in M.random_chunks(seed, name, shape, "matrix"):
            yield x * f
    else:
        yield from M.random_chunks(seed, name, shape, kind)


def random_tensor(M, seed, name, shape, kind):
    return np.concatenate(list(random_chunks(M, seed, name, shape, kind)), axis=0)


def split_kv_b(kv_b, c):
    """llama.cpp's split of kv_b_proj [heads * (nope + v), rank]: k_b [heads, rank, nope] (W_UK transposed per
    head) and v_b [heads, v, rank]."""
    w = kv_b.reshape(c.heads, c.nope + c.v, c.kv_lora)
    return np.ascontiguousarray(w[:, :c.nope, :].transpose(0, 2, 1)), np.ascontiguousarray(w[:, c.nope:, :])


def write_gguf(c, path, dtype="F32", seed=0, split=True, random_blocks=False):
    """random_blocks (benchmark files): Q8_0 and K-quant matrices and experts as random blocks (mkmodel's
    --random-blocks), not quantized random floats; attn_kv_b and its split stay quantized floats."""
    import mkmodel as M
    dtype = dtype.upper()
    a = "deepseek2"
    w = G.GGUFWriter(path)
    w.add_str("general.architecture", a)
    w.add_str("general.name", c.preset)
    w.add_u32("general.file_type", M.FILE_TYPE[dtype])
    w.add_u32(f"{a}.context_length", c.ctx)
    w.add_u32(f"{a}.embedding_length", c.dim)
    w.add_u32(f"{a}.block_count", c.layers + c.mtp)   # llama.cpp counts the MTP layers
    if c.mtp:
        w.add_u32(f"{a}.nextn_predict_layers", c.mtp)
    w.add_u32(f"{a}.feed_forward_length", c.ffn)
    w.add_u32(f"{a}.attention.head_count", c.heads)
    w.add_u32(f"{a}.attention.head_count_kv", 1 if split else c.heads)
    if c.q_lora:
        w.add_u32(f"{a}.attention.q_lora_rank", c.q_lora)
    w.add_u32(f"{a}.attention.kv_lora_rank", c.kv_lora)
    if split:
        w.add_u32(f"{a}.attention.key_length", c.kv_lora + c.rope)
        w.add_u32(f"{a}.attention.value_length", c.kv_lora)
        w.add_u32(f"{a}.attention.key_length_mla", c.nope + c.rope)
        w.add_u32(f"{a}.attention.value_length_mla", c.v)
    else:
        w.add_u32(f"{a}.attention.key_length", c.nope + c.rope)
        w.add_u32(f"{a}.attention.value_length", c.v)
    w.add_u32(f"{a}.rope.dimension_count", c.rope)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", c.eps)
    w.add_f32(f"{a}.rope.freq_base", c.theta)
    w.add_u32(f"{a}.vocab_size", c.vocab)
    w.add_u32(f"{a}.leading_dense_block_count", c.dense)
    if c.experts:
        w.add_u32(f"{a}.expert_count", c.experts)
        w.add_u32(f"{a}.expert_used_count", c.experts_used)
        w.add_u32(f"{a}.expert_feed_forward_length", c.expert_ffn)
        w.add_u32(f"{a}.expert_shared_count", c.shared)
        w.add_f32(f"{a}.expert_weights_scale", c.scale)
        w.add(f"{a}.expert_weights_norm", bool(c.norm_topk), G.BOOL)
        w.add_u32(f"{a}.expert_gating_func", 2 if c.v3 else 1)
        if c.groups:
            w.add_u32(f"{a}.expert_group_count", c.groups)
            w.add_u32(f"{a}.expert_group_used_count", c.groups_used)
    if c.yarn:
        w.add_str(f"{a}.rope.scaling.type", "yarn")
        w.add_f32(f"{a}.rope.scaling.factor", c.yarn["factor"])
        w.add_u32(f"{a}.rope.scaling.original_context_length", c.yarn["orig"])
        w.add_f32(f"{a}.rope.scaling.yarn_log_multiplier", 0.1 * c.yarn["mscale_all"])
    pieces, scores, ttypes = M.vocabulary(c.vocab)
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", pieces, G.STRING)
    w.add_array("tokenizer.ggml.scores", np.array(scores, dtype=np.float32), G.FLOAT32)
    w.add_array("tokenizer.ggml.token_type", ttypes, G.INT32)
    w.add_u32("tokenizer.ggml.bos_token_id", M.BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", M.EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", M.UNK_ID)
    w.add("tokenizer.ggml.add_bos_token", True, G.BOOL)

    def mtype(name, shape):   # every width of the presets is a multiple of 32; K-quants fall back to Q8_0
        return M.matrix_type(c, dtype, name, shape)

    for gname, _, shape, kind in M.stack_experts(specs(c)):
        if len(shape) == 1 or kind == "router":
            ttype = "F32"
        else:
            ttype = mtype(gname, shape)
        if random_blocks and ttype in ("Q8_0",) + M.RANDOM_QUANT_TYPES and not gname.endswith("attn_kv_b.weight"):
            if isinstance(_, list):
                data = (lambda names=_, s=shape[1:], t=ttype: (b for n in names for b in (
                    M.random_q8_0_blocks(seed, n, s) if t == "Q8_0" else M.random_quant_blocks(seed, n, s, t))))
            else:
                data = (lambda n=gname, s=shape, t=ttype: M.random_q8_0_blocks(seed, n, s) if t == "Q8_0"
                        else M.random_quant_blocks(seed, n, s, t))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if isinstance(_, list):   # stacked experts
            data = (lambda names=_, s=shape[1:], k=kind: (random_tensor(M, seed, n, s, k)[None] for n in names))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if gname.endswith("attn_kv_b.weight"):
            kv_b = random_tensor(M, seed, gname, shape, kind)
            if split:
                k_b, v_b = split_kv_b(kv_b, c)
                kb_name, vb_name = gname.replace("attn_kv_b", "attn_k_b"), gname.replace("attn_kv_b", "attn_v_b")
                w.add_tensor(kb_name, k_b.shape, mtype(kb_name, k_b.shape), k_b)
                w.add_tensor(vb_name, v_b.shape, mtype(vb_name, v_b.shape), v_b)
            w.add_tensor(gname, shape, ttype, kv_b)
            continue
        w.add_tensor(gname, shape, ttype, lambda n=gname, s=shape, k=kind: random_chunks(M, seed, n, s, k))
    w.write()


def hf_config(c, dtype):
    import mkmodel as M
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM" if c.v3 else "DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v3" if c.v3 else "deepseek_v2", "hidden_size": c.dim, "intermediate_size": c.ffn,
        "num_hidden_layers": c.layers, "num_attention_heads": c.heads, "num_key_value_heads": c.heads,
        "q_lora_rank": c.q_lora or None, "kv_lora_rank": c.kv_lora, "qk_nope_head_dim": c.nope,
        "qk_rope_head_dim": c.rope, "v_head_dim": c.v, "n_routed_experts": c.experts,
        "num_experts_per_tok": c.experts_used, "moe_intermediate_size": c.expert_ffn, "n_shared_experts": c.shared,
        "first_k_dense_replace": c.dense, "moe_layer_freq": 1, "norm_topk_prob": bool(c.norm_topk),
        "routed_scaling_factor": c.scale, "n_group": c.groups or 1, "topk_group": c.groups_used or 1,
        "rms_norm_eps": c.eps, "rope_theta": c.theta, "vocab_size": c.vocab, "max_position_embeddings": c.ctx,
        "tie_word_embeddings": bool(c.tied), "torch_dtype": M.TORCH_DTYPE[dtype], "hidden_act": "silu",
        "attention_bias": False, "bos_token_id": M.BOS_ID, "eos_token_id": M.EOS_ID,
        "num_nextn_predict_layers": c.mtp,
    }
    if c.v3:
        cfg.update(rope_interleave=True, topk_method="noaux_tc", scoring_func="sigmoid", head_dim=c.rope)
    else:
        cfg.update(topk_method="group_limited_greedy" if c.groups else "greedy", scoring_func="softmax")
    cfg["rope_scaling"] = ({"type": "yarn", "factor": c.yarn["factor"], "original_max_position_embeddings":
                            c.yarn["orig"], "mscale": c.yarn["mscale"], "mscale_all_dim": c.yarn["mscale_all"],
                            "beta_fast": 32, "beta_slow": 1} if c.yarn else None)
    return cfg


def write_safetensors(c, out_dir, dtype="F32", seed=0):
    import mkmodel as M
    dtype = dtype.upper()
    if dtype not in M.ST_DTYPES:
        raise ValueError(f"safetensors supports F32, F16 and BF16, not {dtype}")
    os.makedirs(out_dir, exist_ok=True)
    st_name, elem = M.ST_DTYPES[dtype]
    sp = specs(c)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for _, hname, shape, _ in sp:
        n = int(np.prod(shape)) * elem
        header[hname] = {"dtype": st_name, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((-len(hjson)) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        for gname, _, shape, kind in sp:
            for chunk in random_chunks(M, seed, gname, shape, kind):
                f.write(M.st_encode(chunk, dtype))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(c, dtype), f, indent=2)
    M.write_tokenizer_bin(os.path.join(out_dir, "tokenizer.bin"), c.vocab)


def main_preset(args):
    """mkmodel.py --preset test-deepseek2... (only --dtype, --seed, --out, --format apply)."""
    over = {"layers": args.layers} if args.layers else {}
    if args.mtp is not None:
        over["mtp"] = args.mtp
    if args.mtp_copy is not None:
        over["mtp_copy"] = args.mtp_copy
    if getattr(args, "mtp_own", None):
        over["mtp_own"] = True
    c = config(args.preset, **over)
    fmt = args.format or ("gguf" if args.out.endswith(".gguf") else "safetensors")
    if fmt == "gguf":
        write_gguf(c, args.out, args.dtype, args.seed, random_blocks=args.random_blocks)
    else:
        write_safetensors(c, args.out, args.dtype, args.seed)
    return c, fmt
