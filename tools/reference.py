#!/usr/bin/python3
"""Independent float64 forward pass (torch) for Llama-family, SmolLM3, Gemma 3, LFM2, Qwen3.5, Granite 4.0-H and Nemotron-H models, to check Pith's logits.

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
same function). YaRN (transformers' modeling_rope_utils._compute_yarn_parameters; GGUF: llama.cpp's keys
rope.scaling.factor / original_context_length / yarn_beta_fast / yarn_beta_slow / attn_factor, always
with truncated correction dimensions as ggml_rope_yarn_corr_dims) blends each frequency between its
extrapolated and interpolated (divided by the factor) values along a linear ramp and multiplies cos and
sin by the attention factor. QKV biases and QK norms are used when the tensors exist.

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
- Mixture of experts (modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock, modeling_mixtral.py
  MixtralSparseMoeBlock): router logits = h @ gate.T, softmax over all experts, the top k probabilities
  (renormalised to sum 1 when norm_topk_prob; Mixtral always), each chosen expert's SwiGLU MLP of h weighted
  by its probability and summed. GGUF (llama.cpp src/models/qwen3moe.cpp, llama.cpp's Mixtral as arch
  llama with llama.expert_count): blk.N.ffn_gate_inp.weight and 3-D ffn_{gate,up,down}_exps.weight (or
  one blk.N.ffn_{gate,up,down}.E.weight per expert); qwen3moe always renormalises (norm_w true), as does
  llama.cpp's Mixtral; {arch}.expert_weights_norm overrides where present. Fused Hugging Face experts
  (mlp.experts.gate_up_proj and down_proj) are applied as their classes apply them: Qwen3VLMoeTextExperts
  (x @ gate_up_proj[e], chunked into gate and up halves; @ down_proj[e]) and transformers 5's
  Qwen3_5MoeExperts (F.linear(x, gate_up_proj[e]) chunked likewise; F.linear with down_proj[e]).
- GPT-OSS (modeling_gpt_oss.py, configuration_gpt_oss.py): Q/K/V/O biases, sinks, "layer_types" windows
  (default: even layers sliding), YaRN, the FFN's pre-norm post_attention_layernorm, and the MoE block
  GptOssTopKRouter + GptOssExperts: logits = h @ W.T + b, the top k logits softmaxed among themselves,
  expert e: gate_up = x @ gate_up_proj[e] + bias (gate the even columns, up the odd ones),
  gate = min(gate, limit), up = clamp(up, -limit, limit), glu = gate * sigmoid(1.702 gate),
  ((up + 1) * glu) @ down_proj[e] + bias. GGUF (llama.cpp LLM_ARCH_OPENAI_MOE "gpt-oss"):
  post_attention_norm, attn_sinks, separate ffn_gate_exps / ffn_up_exps (x @ W.T) with 2-D biases,
  sliding_window_pattern (default 2: layer i windowed when i % 2 == 0), swiglu limit 7.
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
    "self_attn.o_proj.bias": "attn_output.bias",
    # Qwen3-VL-MoE's fused experts (moe_ffn reads them as Qwen3VLMoeTextExperts does)
    "mlp.experts.gate_up_proj": "experts.gate_up_proj", "mlp.experts.down_proj": "experts.down_proj",
}
# GPT-OSS: the FFN pre-norm and the router; the fused experts keep their own names (blk.N.experts.*).
HF_LAYER_GPTOSS = dict(HF_LAYER, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
    "mlp.experts.gate_up_proj": "experts.gate_up_proj", "mlp.experts.gate_up_proj_bias": "experts.gate_up_proj_bias",
    "mlp.experts.down_proj": "experts.down_proj", "mlp.experts.down_proj_bias": "experts.down_proj_bias",
})
# Gemma 3's four norms per block, named as llama.cpp's tensor_mapping.py maps them for MODEL_ARCH.GEMMA3.
HF_LAYER_GEMMA3 = dict(HF_LAYER, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
})


# LFM2 (modeling_lfm2.py), named as llama.cpp's LLM_ARCH_LFM2 names them (token_embd_norm for the final
# norm, shortconv.* for the convolution layers).
HF_TO_CANON_LFM2 = dict(HF_TO_CANON, **{"model.embedding_norm.weight": "token_embd_norm.weight"})
HF_LAYER_LFM2 = {
    "operator_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.out_proj.weight": "attn_output.weight",
    "self_attn.q_layernorm.weight": "attn_q_norm.weight", "self_attn.k_layernorm.weight": "attn_k_norm.weight",
    "conv.conv.weight": "shortconv.conv.weight", "conv.in_proj.weight": "shortconv.in_proj.weight",
    "conv.out_proj.weight": "shortconv.out_proj.weight",
    "feed_forward.w1.weight": "ffn_gate.weight", "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
}

# Qwen3.5 (modeling_qwen3_5.py), named as llama.cpp's LLM_ARCH_QWEN35 names them.
HF_LAYER_QWEN35 = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a", "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    # Qwen3.5-MoE's shared expert (its router and experts: HF_ROUTERS and the expert names below)
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight", "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    # the released checkpoints' fused experts (moe_ffn reads them as transformers 5's Qwen3_5MoeExperts)
    "mlp.experts.gate_up_proj": "experts.gate_up_proj", "mlp.experts.down_proj": "experts.down_proj",
}

# Granite 4.0-H (modeling_granitemoehybrid.py), named as llama.cpp's LLM_ARCH_GRANITE_HYBRID names them;
# the fused shared_mlp.input_linear and block_sparse_moe.input_linear keep their [gate | up] layout.
HF_LAYER_GRANITE = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mamba.in_proj.weight": "ssm_in.weight", "mamba.conv1d.weight": "ssm_conv1d.weight",
    "mamba.conv1d.bias": "ssm_conv1d.bias", "mamba.dt_bias": "ssm_dt.bias", "mamba.A_log": "ssm_a",
    "mamba.D": "ssm_d", "mamba.norm.weight": "ssm_norm.weight", "mamba.out_proj.weight": "ssm_out.weight",
    "shared_mlp.input_linear.weight": "ffn_gate_up.weight", "shared_mlp.output_linear.weight": "ffn_down.weight",
    "block_sparse_moe.router.layer.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.input_linear.weight": "ffn_gate_up_exps.weight",
    "block_sparse_moe.output_linear.weight": "ffn_down_exps.weight",
}

# Nemotron-H (modeling_nemotron_h.py: backbone.layers.N.norm and .mixer.*), named as llama.cpp's
# LLM_ARCH_NEMOTRON_H names them; what a layer's mixer is comes from hybrid_override_pattern.
HF_GLOBAL_NEMOTRON = {"backbone.embeddings.weight": "token_embd.weight", "backbone.norm_f.weight": "output_norm.weight",
                      "lm_head.weight": "output.weight"}
HF_LAYER_NEMOTRON = {
    "norm.weight": "attn_norm.weight", "mixer.in_proj.weight": "ssm_in.weight",
    "mixer.conv1d.weight": "ssm_conv1d.weight", "mixer.conv1d.bias": "ssm_conv1d.bias", "mixer.dt_bias": "ssm_dt.bias",
    "mixer.A_log": "ssm_a", "mixer.D": "ssm_d", "mixer.norm.weight": "ssm_norm.weight",
    "mixer.out_proj.weight": "ssm_out.weight", "mixer.q_proj.weight": "attn_q.weight",
    "mixer.k_proj.weight": "attn_k.weight", "mixer.v_proj.weight": "attn_v.weight",
    "mixer.o_proj.weight": "attn_output.weight", "mixer.up_proj.weight": "ffn_up.weight",
    "mixer.down_proj.weight": "ffn_down.weight",
}

# Routers and experts (after "model.layers.N."): Qwen3-MoE's mlp.*, Mixtral's block_sparse_moe.*.
HF_ROUTERS = {"mlp.gate.weight": "ffn_gate_inp.weight", "block_sparse_moe.gate.weight": "ffn_gate_inp.weight"}
HF_EXPERT_KINDS = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}


def hf_to_canonical(name, family="llama"):
    if family == "nemotron":
        if name in HF_GLOBAL_NEMOTRON:
            return HF_GLOBAL_NEMOTRON[name]
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[:2] == ["backbone", "layers"] and parts[3] in HF_LAYER_NEMOTRON:
            return f"blk.{int(parts[2])}.{HF_LAYER_NEMOTRON[parts[3]]}"
        return None
    glob = HF_TO_CANON_LFM2 if family == "lfm2" else HF_TO_CANON
    if name in glob:
        return glob[name]
    layer = {"gemma3": HF_LAYER_GEMMA3, "lfm2": HF_LAYER_LFM2, "qwen35": HF_LAYER_QWEN35, "granite": HF_LAYER_GRANITE,
             "gpt-oss": HF_LAYER_GPTOSS}.get(family, HF_LAYER)
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in layer:
        return f"blk.{int(parts[2])}.{layer[parts[3]]}"
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in HF_ROUTERS:
        return f"blk.{int(parts[2])}.{HF_ROUTERS[parts[3]]}"
    # mlp.experts.E.gate_proj.weight, block_sparse_moe.experts.E.w1.weight
    rest = parts[3].split(".") if len(parts) == 4 else []
    if (len(rest) == 5 and rest[0] in ("mlp", "block_sparse_moe") and rest[1] == "experts" and rest[2].isdigit()
            and rest[3] in HF_EXPERT_KINDS and rest[4] == "weight"):
        return f"blk.{int(parts[2])}.ffn_{HF_EXPERT_KINDS[rest[3]]}.{int(rest[2])}.weight"
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
        self.yarn = None                # YaRN parameters (factor, orig, beta_fast, beta_slow, mscale, truncate)
        self.n_experts = 0              # mixture of experts: experts per layer (0: dense FFN)
        self.n_experts_used = 0
        self.norm_topk = True
        self.swiglu_limit = None        # GPT-OSS's clamped SwiGLU
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
        if a == "lfm2":
            return self._gguf_lfm2(r, md)
        if a in ("qwen35", "qwen35moe"):
            return self._gguf_qwen35(r, md)
        if a == "granitehybrid":
            return self._gguf_granite(r, md)
        if a == "nemotron_h":
            return self._gguf_nemotron(r, md)
        if a not in ("llama", "qwen2", "qwen3", "smollm3", "gemma3", "qwen3moe", "gpt-oss"):
            raise ValueError(f"{path}: unsupported architecture {a}")
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        self.n_kv_heads = int(md.get(f"{a}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0))
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self.rope_style = "adjacent" if a in ("llama", "smollm3") else "half"
        self.n_experts = int(md.get(f"{a}.expert_count", 0))
        self.n_experts_used = int(md.get(f"{a}.expert_used_count", 0))
        self.norm_topk = bool(md.get(f"{a}.expert_weights_norm", True))
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor
        self.rope_divisors = None
        if "rope_freqs.weight" in self.names:
            self.rope_divisors = torch.tensor(r.tensor("rope_freqs.weight"), dtype=torch.float64)
        self.position_scale = 1.0
        if md.get(f"{a}.rope.scaling.type") == "linear":
            self.position_scale = 1.0 / float(md.get(f"{a}.rope.scaling.factor", 1.0))
        if md.get(f"{a}.rope.scaling.type") == "yarn":
            f = float(md[f"{a}.rope.scaling.factor"])
            self.yarn = dict(factor=f, orig=int(md[f"{a}.rope.scaling.original_context_length"]),
                             beta_fast=float(md.get(f"{a}.rope.scaling.yarn_beta_fast", 32.0)),
                             beta_slow=float(md.get(f"{a}.rope.scaling.yarn_beta_slow", 1.0)), truncate=True,
                             mscale=float(md.get(f"{a}.rope.scaling.attn_factor", 1.0)) *
                             (1 + 0.1 * math.log(f) if f > 1 else 1.0))
        window = int(md.get(f"{a}.attention.sliding_window", 0))
        if a == "llama" and window:
            # Mistral-style: the window applies to every layer.
            self.sliding_window, self.layer_types = window, ["sliding_attention"] * self.n_layers
        if a == "gpt-oss":
            self.family, self.swiglu_limit = "gpt-oss", 7.0
            period = int(md.get(f"{a}.attention.sliding_window_pattern", 2))
            if window:
                self.sliding_window = window
                self.layer_types = ["sliding_attention" if i % period < period - 1 else "full_attention"
                                    for i in range(self.n_layers)]
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
        if c.get("model_type") == "lfm2":
            return self._hf_lfm2(d, c)
        if c.get("model_type") in ("qwen3_5", "qwen3_5_moe") and isinstance(c.get("text_config"), dict):
            # Qwen3_5(Moe)ForConditionalGeneration: the text model's config nested, tying at the top level
            c = dict(c["text_config"], tie_word_embeddings=c.get("tie_word_embeddings",
                                                                 c["text_config"].get("tie_word_embeddings", False)))
        if c.get("model_type") in ("qwen3_5_text", "qwen3_5_moe_text"):
            return self._hf_qwen35(d, c)
        if c.get("model_type") in ("qwen3_vl", "qwen3_vl_moe") and isinstance(c.get("text_config"), dict):
            # Qwen3VLForConditionalGeneration: a Qwen3 with M-RoPE (Qwen3VLTextRotaryEmbedding's mrope_section,
            # default [24, 20, 20]) and DeepStack (forward's deepstack); its tensors under model.language_model.
            # Qwen3VLMoeForConditionalGeneration: the same over Qwen3-MoE's layers (Qwen3VLMoeTextRouter
            # renormalises), its experts fused (Qwen3VLMoeTextExperts).
            tc = c["text_config"]
            rs = tc.get("rope_scaling") or tc.get("rope_parameters") or {}
            self.mrope_section = list(rs.get("mrope_section", [24, 20, 20]))
            moe = c["model_type"] == "qwen3_vl_moe"
            c = dict(tc, model_type="qwen3_moe" if moe else "qwen3", rope_scaling=None,
                     rope_theta=rs.get("rope_theta", tc.get("rope_theta", 5e6)),
                     tie_word_embeddings=c.get("tie_word_embeddings", tc.get("tie_word_embeddings", False)))
            if moe:
                c["norm_topk_prob"] = True
        if c.get("model_type") == "granitemoehybrid":
            return self._hf_granite(d, c)
        if c.get("model_type") == "nemotron_h":
            return self._hf_nemotron(d, c)
        types = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "smollm3": "smollm3",
                 "gemma3_text": "gemma3", "qwen3_moe": "qwen3moe", "mixtral": "llama", "gpt_oss": "gpt-oss"}
        if c.get("model_type") not in types:
            raise ValueError(f"{d}: unsupported model_type {c.get('model_type')!r}")
        self.arch = types[c["model_type"]]
        self.family = self.arch if self.arch in ("gemma3", "gpt-oss") else "llama"
        self.dim = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = c.get("head_dim") or 0
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.theta = float(c.get("rope_theta", 10000.0))
        self.rope_style = "half"
        if c["model_type"] == "qwen3_moe":
            if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
                raise ValueError("Qwen3-MoE dense layers are not modelled")
            self.n_experts, self.n_experts_used = c["num_experts"], c["num_experts_per_tok"]
            self.norm_topk = bool(c.get("norm_topk_prob", False))        # Qwen3MoeConfig's default
        if c["model_type"] == "mixtral":
            self.n_experts, self.n_experts_used = c["num_local_experts"], c["num_experts_per_tok"]
            self.norm_topk = True                                       # MixtralSparseMoeBlock always
        if c["model_type"] == "gpt_oss":
            self.n_experts, self.n_experts_used = c["num_local_experts"], c["num_experts_per_tok"]
            self.swiglu_limit = float(c.get("swiglu_limit", 7.0))
            if c.get("sliding_window"):
                self.sliding_window = int(c["sliding_window"])
                self.layer_types = c.get("layer_types") or [
                    "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(self.n_layers)]
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
                flat = "model." + name[len("model.language_model."):] if name.startswith("model.language_model.") else name
                canon = hf_to_canonical(flat, self.family)
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
        if rs and rs.get("rope_type", rs.get("type")) == "yarn":
            orig = rs.get("original_max_position_embeddings") or c.get("max_position_embeddings")
            f = rs.get("factor") or c["max_position_embeddings"] / orig

            def get_mscale(scale, ms=1.0):
                return 0.1 * ms * math.log(scale) + 1.0 if scale > 1 else 1.0
            mscale = rs.get("attention_factor")
            if mscale is None:
                mscale = (get_mscale(f, rs["mscale"]) / get_mscale(f, rs["mscale_all_dim"])
                          if rs.get("mscale") and rs.get("mscale_all_dim") else get_mscale(f))
            self.yarn = dict(factor=float(f), orig=int(orig), beta_fast=float(rs.get("beta_fast") or 32),
                             beta_slow=float(rs.get("beta_slow") or 1), mscale=float(mscale),
                             truncate=bool(rs.get("truncate", True)))
        n = self.n_layers
        if c["model_type"] in ("mistral", "mixtral") and c.get("sliding_window"):
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

    # LFM2 (configuration_lfm2.py, modeling_lfm2.py; GGUF: llama.cpp's llama-model.cpp LLM_ARCH_LFM2).
    def _lfm2_common(self):
        self.family, self.rope_style, self.rope_divisors, self.position_scale = "lfm2", "half", None, 1.0

    def _gguf_lfm2(self, r, md):
        a = "lfm2"
        self._lfm2_common()
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        kv = md.get(f"{a}.attention.head_count_kv", self.n_heads)
        kv = [int(v) for v in kv] if isinstance(kv, (list, tuple, np.ndarray)) else [int(kv)] * self.n_layers
        self.layer_types = ["conv" if v == 0 else "full_attention" for v in kv]   # head_count_kv 0: a conv layer
        self.n_kv_heads = max(kv) or self.n_heads
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0))
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self.conv_kernel = int(md[f"{a}.shortconv.l_cache"])
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor

    def _hf_lfm2(self, d, c):
        self._lfm2_common()
        self.dim, self.n_layers = c["hidden_size"], c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = 0
        self.eps = float(c.get("norm_eps", 1e-5))
        self.theta = float(c.get("rope_theta", c.get("theta", 1e6)))
        self.conv_kernel = int(c.get("conv_L_cache", 3))
        if c.get("conv_bias"):
            raise ValueError("LFM2 with convolution biases is not modelled")
        n = self.n_layers
        if c.get("layer_types"):
            self.layer_types = list(c["layer_types"])
        else:
            idx = c.get("full_attn_idxs")
            idx = range(n) if idx is None else idx
            self.layer_types = ["full_attention" if i in idx else "conv" for i in range(n)]
        files = ["model.safetensors"]
        index = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        where = {}
        for fn in files:
            st = SafetensorsFile(os.path.join(d, fn))
            for name in st.header:
                canon = hf_to_canonical(name, "lfm2")
                if canon:
                    where[canon] = (st, name)
        if c.get("tie_embedding", c.get("tie_word_embeddings", True)):
            where.pop("output.weight", None)
        self.names = set(where)
        self._fetch = lambda canon: where[canon][0].tensor(where[canon][1])
        self.n_vocab = c["vocab_size"]

    # Qwen3.5 (configuration_qwen3_5.py, modeling_qwen3_5.py / modeling_qwen3_next.py; GGUF: llama.cpp's
    # src/models/qwen35.cpp and its converter, which stores norms as w + 1, A_log as -exp(A_log) and the
    # value heads in tiled order).
    def _gguf_qwen35(self, r, md):
        a = self.arch
        self.n_experts = int(md.get(f"{a}.expert_count", 0))          # qwen35moe
        self.n_experts_used = int(md.get(f"{a}.expert_used_count", 0))
        self.norm_topk = bool(md.get(f"{a}.expert_weights_norm", True))
        self.family, self.rope_style, self.rope_divisors, self.position_scale = "qwen35", "half", None, 1.0
        self.dim = int(md[f"{a}.embedding_length"])
        # block_count counts the MTP layers (llama.cpp's converter numbers them after the decoder's)
        self.n_mtp = int(md.get(f"{a}.nextn_predict_layers", 0))
        self.n_layers = int(md[f"{a}.block_count"]) - self.n_mtp
        self.n_heads = int(md[f"{a}.attention.head_count"])
        self.n_kv_heads = int(md.get(f"{a}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0)) or self.dim // self.n_heads
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self.rope_dim = int(md.get(f"{a}.rope.dimension_count", self.head_dim))
        self.mrope_section = [int(x) for x in md.get(f"{a}.rope.dimension_sections", [11, 11, 10, 0])[:3]]
        self.conv_kernel = int(md[f"{a}.ssm.conv_kernel"])
        self.lin_k_dim = self.lin_v_dim = int(md[f"{a}.ssm.state_size"])
        self.lin_k_heads = int(md[f"{a}.ssm.group_count"])
        self.lin_v_heads = int(md[f"{a}.ssm.time_step_rank"])
        self.lin_v_dim = int(md[f"{a}.ssm.inner_size"]) // self.lin_v_heads
        interval = int(md.get(f"{a}.full_attention_interval", 4))
        self.layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(self.n_layers)]
        self.qk_tiled, self.norm_offset, self.a_is_log = True, 0.0, False
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor
        # The MTP head's Hugging Face names (what qwen35_mtp_logits asks for) as GGUF names.
        L = self.n_layers
        self.mtp_names = {"mtp.fc.weight": f"blk.{L}.nextn.eh_proj.weight",
                          "mtp.pre_fc_norm_embedding.weight": f"blk.{L}.nextn.enorm.weight",
                          "mtp.pre_fc_norm_hidden.weight": f"blk.{L}.nextn.hnorm.weight",
                          "mtp.norm.weight": f"blk.{L}.nextn.shared_head_norm.weight"}
        self.mtp_names.update({"mtp.layers.0." + k: f"blk.{L}.{v}" for k, v in HF_LAYER_QWEN35.items()})

    def _hf_qwen35(self, d, c):
        self.family, self.rope_style, self.rope_divisors, self.position_scale = "qwen35", "half", None, 1.0
        if c["model_type"] == "qwen3_5_moe_text":   # Qwen3VLMoeTextTopKRouter: always renormalised
            self.n_experts, self.n_experts_used, self.norm_topk = c["num_experts"], c["num_experts_per_tok"], True
        self.dim, self.n_layers = c["hidden_size"], c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = c.get("head_dim") or self.dim // self.n_heads
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        rp = c.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        self.rope_dim = int(self.head_dim * float(rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))))
        self.mrope_section = list(rp.get("mrope_section", [11, 11, 10]))   # Qwen3_5TextRotaryEmbedding's default
        self.conv_kernel = int(c.get("linear_conv_kernel_dim", 4))
        self.lin_k_dim, self.lin_v_dim = int(c.get("linear_key_head_dim", 128)), int(c.get("linear_value_head_dim", 128))
        self.lin_k_heads, self.lin_v_heads = int(c.get("linear_num_key_heads", 16)), int(c.get("linear_num_value_heads", 32))
        interval = int(c.get("full_attention_interval", 4))
        self.layer_types = c.get("layer_types") or ["linear_attention" if (i + 1) % interval else "full_attention"
                                                     for i in range(self.n_layers)]
        self.qk_tiled, self.norm_offset, self.a_is_log = False, 1.0, True     # Qwen3NextRMSNorm: x * (1 + w)
        self.n_mtp, self.mtp_names = int(c.get("mtp_num_hidden_layers", 0)), {}
        where = {}
        index = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
        for fn in files:
            st = SafetensorsFile(os.path.join(d, fn))
            for name in st.header:
                flat = "model." + name[len("model.language_model."):] if name.startswith("model.language_model.") else name
                canon = hf_to_canonical(flat, "qwen35") or (name if name.startswith("mtp.") else None)
                if canon:
                    where[canon] = (st, name)
        if c.get("tie_word_embeddings", False):
            where.pop("output.weight", None)
        self.names = set(where)
        self._fetch = lambda canon: where[canon][0].tensor(where[canon][1])
        self.n_vocab = c["vocab_size"]

    # Granite 4.0-H (configuration_granitemoehybrid.py, modeling_granitemoehybrid.py; GGUF: llama.cpp's
    # src/models/granite-hybrid.cpp, its Mamba2 layer and convert_hf_to_gguf.py GraniteHybridModel, which
    # stores -exp(A_log) as ssm_a, splits the fused shared MLP and experts, permutes Q/K for adjacent-pair
    # RoPE, and marks RoPE by rope.scaling.finetuned).
    def _gguf_granite(self, r, md):
        a = "granitehybrid"
        self.family, self.rope_divisors, self.position_scale = "granite", None, 1.0
        self.rope_style = "adjacent"
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        kv = md.get(f"{a}.attention.head_count_kv", self.n_heads)
        kv = [int(v) for v in kv] if isinstance(kv, (list, tuple, np.ndarray)) else [int(kv)] * self.n_layers
        self.layer_types = ["mamba" if v == 0 else "attention" for v in kv]
        self.n_kv_heads = max(kv) or self.n_heads
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0)) or self.dim // self.n_heads
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.theta = float(md.get(f"{a}.rope.freq_base", 10000.0))
        self._gguf_mamba2(md, a)
        self.g_emb = float(md.get(f"{a}.embedding_scale", 0.0)) or 1.0
        self.g_res = float(md.get(f"{a}.residual_scale", 0.0)) or 1.0
        self.g_att = float(md.get(f"{a}.attention.scale", 0.0)) or 1.0 / math.sqrt(self.head_dim)
        self.g_logit = float(md.get(f"{a}.logit_scale", 0.0)) or 1.0
        self.g_rope = bool(md.get(f"{a}.rope.scaling.finetuned", False))
        self.n_experts = int(md.get(f"{a}.expert_count", 0))
        self.n_experts_used = int(md.get(f"{a}.expert_used_count", 0))
        self._gguf_bind(r)

    def _hf_granite(self, d, c):
        self.family, self.rope_divisors, self.position_scale = "granite", None, 1.0
        self.rope_style = "half"
        self.dim, self.n_layers = c["hidden_size"], c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = c.get("head_dim") or self.dim // self.n_heads
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.theta = float(c.get("rope_theta", 10000.0))
        self.layer_types = c.get("layer_types") or ["mamba"] * self.n_layers
        self.conv_kernel = int(c.get("mamba_d_conv", 4))
        self.d_state, self.n_groups = int(c.get("mamba_d_state", 256)), int(c.get("mamba_n_groups", 1))
        self.m_heads = int(c.get("mamba_n_heads", 128))
        inner = int(c.get("mamba_expand", 2)) * self.dim
        dh = c.get("mamba_d_head", "auto")
        self.m_head_dim = inner // self.m_heads if dh == "auto" else int(dh)
        self.g_emb = float(c.get("embedding_multiplier", 1.0))
        self.g_res = float(c.get("residual_multiplier", 1.0))
        self.g_att = float(c.get("attention_multiplier", 1.0))
        self.g_logit = float(c.get("logits_scaling", 1.0))
        self.g_rope = c.get("position_embedding_type") == "rope"
        self.n_experts = int(c.get("num_local_experts", 8))
        self.n_experts_used = int(c.get("num_experts_per_tok", 2))
        self.a_is_log, self.norm_per_group = True, False   # GraniteMoeHybridRMSNormGated: one norm over d_inner
        self._hf_bind(d, c, "granite")

    # Nemotron-H (configuration_nemotron_h.py, modeling_nemotron_h.py; GGUF: llama.cpp's
    # src/models/nemotron-h.cpp and convert_hf_to_gguf.py NemotronHModel, which stores -exp(A_log) as ssm_a
    # and writes per-layer head_count_kv and feed_forward_length: 0 and 0 is Mamba2, KV heads attention, a
    # width an MLP). Both formats normalise the Mamba2 output per B/C group (MambaRMSNormGated group_size).
    def _gguf_nemotron(self, r, md):
        a = "nemotron_h"
        self.family = "nemotron"
        self.dim = int(md[f"{a}.embedding_length"])
        self.n_layers = int(md[f"{a}.block_count"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        kv = [int(v) for v in md[f"{a}.attention.head_count_kv"]]
        ff = [int(v) for v in md[f"{a}.feed_forward_length"]]
        self.layer_types = ["attention" if k else "mlp" if f else "mamba" for k, f in zip(kv, ff)]
        self.n_kv_heads = max(kv) or self.n_heads
        self.head_dim = int(md.get(f"{a}.attention.key_length", 0)) or self.dim // self.n_heads
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self._gguf_mamba2(md, a)
        self._gguf_bind(r)

    def _hf_nemotron(self, d, c):
        self.family = "nemotron"
        self.dim, self.n_layers = c["hidden_size"], c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = c.get("head_dim") or self.dim // self.n_heads
        self.eps = float(c.get("layer_norm_epsilon", 1e-5))
        kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
        self.layer_types = [kinds[ch] for ch in c["hybrid_override_pattern"]]
        self.conv_kernel = int(c.get("conv_kernel", 4))
        self.d_state, self.n_groups = int(c.get("ssm_state_size", 128)), int(c.get("n_groups", 8))
        self.m_heads, self.m_head_dim = int(c.get("mamba_num_heads", 128)), int(c.get("mamba_head_dim", 64))
        self.a_is_log, self.norm_per_group = True, True
        self._hf_bind(d, c, "nemotron")

    def _gguf_mamba2(self, md, a):
        """A Mamba2 model's GGUF keys (llama.cpp's ssm.*: time_step_rank is the head count); llama.cpp stores
        ssm_a as -exp(A_log) and normalises the gated output per group of d_inner / n_group."""
        self.conv_kernel = int(md[f"{a}.ssm.conv_kernel"])
        self.d_state, self.n_groups = int(md[f"{a}.ssm.state_size"]), int(md[f"{a}.ssm.group_count"])
        self.m_heads = int(md[f"{a}.ssm.time_step_rank"])
        self.m_head_dim = int(md[f"{a}.ssm.inner_size"]) // self.m_heads
        self.a_is_log, self.norm_per_group = False, True

    def _gguf_bind(self, r):
        self.names = set(r.tensors)
        self.n_vocab = r.tensors["token_embd.weight"][0][0]
        self._fetch = r.tensor

    def _hf_bind(self, d, c, family):
        """Canonical names -> the tensors of d's safetensors files (one, or those of the sharded index), by
        hf_to_canonical(family); output.weight dropped when config.json ties the embeddings."""
        where = {}
        index = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
        for fn in files:
            st = SafetensorsFile(os.path.join(d, fn))
            for name in st.header:
                canon = hf_to_canonical(name, family)
                if canon:
                    where[canon] = (st, name)
        if c.get("tie_word_embeddings", False):
            where.pop("output.weight", None)
        self.names = set(where)
        self._fetch = lambda canon: where[canon][0].tensor(where[canon][1])
        self.n_vocab = c["vocab_size"]

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

    def expert(self, layer, kind, e):
        """Expert e's gate, up or down matrix of a layer: from GGUF's 3-D tensor or per-expert tensors."""
        stacked = f"blk.{layer}.ffn_{kind}_exps.weight"
        if stacked in self.names:
            return torch.from_numpy(np.array(self._fetch(stacked)[e], dtype=np.float64))
        return self.w(f"blk.{layer}.ffn_{kind}.{e}.weight")

    def w(self, name):
        return torch.from_numpy(np.array(self._fetch(name), dtype=np.float64))


def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def yarn_freqs(theta, hd, y):
    """transformers' _compute_yarn_parameters, in float64: the inverse frequencies and the attention factor."""
    def corr_dim(rot):
        return hd * math.log(y["orig"] / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr_dim(y["beta_fast"]), corr_dim(y["beta_slow"])
    if y["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, hd - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(hd // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    pos_freqs = theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    inv = (1 / (y["factor"] * pos_freqs)) * (1 - extrapolation) + (1 / pos_freqs) * extrapolation
    return inv, y["mscale"]


def rope(x, positions, theta, style, divisors, position_scale=1.0, yarn=None):
    """x: [T, heads, head_dim]. position_scale: 1/factor under linear scaling; yarn: YaRN's parameters."""
    hd = x.shape[-1]
    freqs = theta ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2 / hd)
    if divisors is not None:
        freqs = freqs / divisors
    mscale = 1.0
    if yarn is not None:
        freqs, mscale = yarn_freqs(theta, hd, yarn)
    ang = (positions.to(torch.float64) * position_scale)[:, None] * freqs[None, :]          # [T, hd/2]
    cos, sin = torch.cos(ang)[:, None, :] * mscale, torch.sin(ang)[:, None, :] * mscale
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


def causal_mask(T, window=None, spans=()):
    """[T, T] additive mask: query p sees keys [0, p], or [p - window + 1, p] with a window; and, for each
    (start, end) of spans, the queries in [start, end) see every key of it too (Gemma 3's image tokens:
    transformers' token_type_ids mask joined to the causal one by OR)."""
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = k <= q
    if window is not None:
        allowed = allowed & (k > q - window)
    for a, b in spans:
        allowed = allowed | ((q >= a) & (q < b) & (k >= a) & (k < b))
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


def lfm2_forward(m, tokens, aq, kv_f16):
    """LFM2 (modeling_lfm2.py): per layer operator_norm, then GQA attention with RMS-normed Q and K heads
    and rotate-half RoPE, or the gated short convolution out_proj(C * conv(B * x)), written in its
    recurrent form (Lfm2ShortConv.slow_forward's decode path: a state of the last K - 1 inputs, rolled
    one token at a time); then ffn_norm and the SwiGLU feed-forward (w2(silu(w1 x) * w3 x)); the final
    norm (embedding_norm), a tied output unless lm_head exists."""
    tok = torch.tensor(tokens, dtype=torch.long)
    T, H, KV, hd, D, K = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim, m.dim, m.conv_kernel
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok]
    mask = causal_mask(T)
    for i in range(m.n_layers):
        p = f"blk.{i}."
        h = aq(rms_norm(x, m.w(p + "attn_norm.weight"), m.eps))
        if m.layer_types[i] == "conv":
            B, C, xx = (h @ m.w(p + "shortconv.in_proj.weight").T).split(D, dim=-1)
            bx = B * xx
            w = m.w(p + "shortconv.conv.weight").reshape(D, K)
            state = torch.zeros(K - 1, D, dtype=torch.float64)
            conv = torch.empty(T, D, dtype=torch.float64)
            for t in range(T):
                window = torch.cat([state, bx[t:t + 1]], dim=0)          # [K, D], oldest first
                conv[t] = (window * w.T).sum(dim=0)
                state = window[1:]
            o = aq(C * conv) @ m.w(p + "shortconv.out_proj.weight").T
        else:
            q = (h @ m.w(p + "attn_q.weight").T).view(T, H, hd)
            k = (h @ m.w(p + "attn_k.weight").T).view(T, KV, hd)
            v = (h @ m.w(p + "attn_v.weight").T).view(T, KV, hd)
            q = rope(rms_norm(q, m.w(p + "attn_q_norm.weight"), m.eps), pos, m.theta, "half", None)
            k = rope(rms_norm(k, m.w(p + "attn_k_norm.weight"), m.eps), pos, m.theta, "half", None)
            if kv_f16:
                k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            o = aq(attention(q, k, v, mask, math.sqrt(hd)).reshape(T, H * hd)) @ m.w(p + "attn_output.weight").T
        x = x + o
        h = aq(rms_norm(x, m.w(p + "ffn_norm.weight"), m.eps))
        f = torch.nn.functional.silu(h @ m.w(p + "ffn_gate.weight").T) * (h @ m.w(p + "ffn_up.weight").T)
        x = x + aq(f) @ m.w(p + "ffn_down.weight").T
    x = rms_norm(x, m.w("token_embd_norm.weight"), m.eps)
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    return aq(x) @ out.T


def qwen35_delta_rule(q, k, v, g, beta, dk):
    """torch_recurrent_gated_delta_rule of modeling_qwen3_next.py, one token at a time: q and k
    L2-normalised (eps 1e-6), q scaled by dk^-1/2; per head S = S exp(g); delta = beta (v - S^T k);
    S = S + k delta^T; out = S^T q. q, k: [T, H, dk] (already repeated to the value heads), v: [T, H, dv]."""
    T, H, dv = v.shape
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    S = torch.zeros(H, dk, dv, dtype=torch.float64)
    out = torch.empty(T, H, dv, dtype=torch.float64)
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        kv = torch.einsum("hd,hde->he", k[t], S)
        delta = (v[t] - kv) * beta[t][:, None]
        S = S + torch.einsum("hd,he->hde", k[t], delta)
        out[t] = torch.einsum("hd,hde->he", q[t], S)
    return out


def mrope_partial(t, r, theta, section, positions):
    """Qwen3VLTextRotaryEmbedding (Qwen3.5's) on the first r dimensions of t [T, heads, hd]: the three
    position rows (temporal, height, width) [T, 3] each turn every frequency, and apply_interleaved_mrope
    keeps the height's at indices 1, 4, ... below 3 section[1] and the width's at 2, 5, ... below
    3 section[2], the temporal's elsewhere; then rotate-half with cat(freqs, freqs)."""
    half = r // 2
    inv = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2 / r)
    pos = torch.as_tensor(positions, dtype=torch.float64)                    # [T, 3]
    freqs = pos.T[:, :, None] * inv[None, None, :]                            # [3, T, half]
    f = freqs[0].clone()
    for dim, offset in ((1, 1), (2, 2)):
        idx = slice(offset, section[dim] * 3, 3)
        f[..., idx] = freqs[dim][..., idx]
    cos, sin = f.cos()[:, None, :], f.sin()[:, None, :]
    a, b = t[..., :half], t[..., half:r]
    return torch.cat([a * cos - b * sin, a * sin + b * cos, t[..., r:]], dim=-1)


def qwen35_forward(m, tokens, aq, kv_f16, hidden=False, embeds=None, mrope=None):
    """Qwen3.5 text (modeling_qwen3_5.py): Qwen3NextRMSNorm (x * (1 + w)) before each mixer and before the
    MLP; Gated DeltaNet layers: in_proj_qkv through a causal depthwise conv1d (kernel K, no bias, SiLU;
    written here as the per-token window of its last K inputs), beta = sigmoid(in_proj_b x),
    g = -exp(A_log) softplus(in_proj_a x + dt_bias), query/key heads repeat_interleave'd to the value
    heads (GGUF: tiled, ggml_repeat), the recurrent delta rule, RMSNormGated (rms(x) w silu(z)) per head,
    out_proj; attention layers: q_proj giving [query | gate] per head, q/k norms, rotate-half RoPE on the
    first rope_dim dimensions (M-RoPE with every section at the text position is exactly this),
    softmax(q k / sqrt(head_dim)), times sigmoid(gate), o_proj; then the SwiGLU MLP. Images: embeds maps
    positions to rows that replace those tokens' embeddings (masked_scatter), mrope gives every token's
    (temporal, height, width) positions (get_rope_index) for mrope_partial."""
    tok = torch.tensor(tokens, dtype=torch.long)
    T, H, KV, hd, D = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim, m.dim
    NK, NV, dk, dv, K = m.lin_k_heads, m.lin_v_heads, m.lin_k_dim, m.lin_v_dim, m.conv_kernel
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok]
    for p, row in (embeds or {}).items():
        x[p] = torch.as_tensor(row, dtype=torch.float64)
    mask = causal_mask(T)

    def norm(t, name):
        return rms_norm(t, m.w(name) + m.norm_offset, m.eps)

    def rope_partial(t):
        r = m.rope_dim
        if mrope is not None:
            return mrope_partial(t, r, m.theta, m.mrope_section, mrope)
        return torch.cat([rope(t[..., :r], pos, m.theta, "half", None), t[..., r:]], dim=-1)

    for i in range(m.n_layers):
        p = f"blk.{i}."
        h = aq(norm(x, p + "attn_norm.weight"))
        if m.layer_types[i] == "linear_attention":
            mixed = h @ m.w(p + "attn_qkv.weight").T                              # [T, conv_dim]
            C = mixed.shape[1]
            w = m.w(p + "ssm_conv1d.weight").reshape(C, K)
            padded = torch.cat([torch.zeros(K - 1, C, dtype=torch.float64), mixed], dim=0)
            conv = torch.stack([(padded[t:t + K] * w.T).sum(0) for t in range(T)])
            conv = torch.nn.functional.silu(conv)
            q, k, v = conv.split([NK * dk, NK * dk, NV * dv], dim=-1)
            q, k, v = q.reshape(T, NK, dk), k.reshape(T, NK, dk), v.reshape(T, NV, dv)
            if m.qk_tiled:
                q, k = q.repeat(1, NV // NK, 1), k.repeat(1, NV // NK, 1)
            else:
                q, k = q.repeat_interleave(NV // NK, dim=1), k.repeat_interleave(NV // NK, dim=1)
            beta = torch.sigmoid(h @ m.w(p + "ssm_beta.weight").T)
            A = -torch.exp(m.w(p + "ssm_a")) if m.a_is_log else m.w(p + "ssm_a")
            g = A * torch.nn.functional.softplus(h @ m.w(p + "ssm_alpha.weight").T + m.w(p + "ssm_dt.bias"))
            o = qwen35_delta_rule(q, k, v, g, beta, dk)                            # [T, NV, dv]
            z = (h @ m.w(p + "attn_gate.weight").T).reshape(T, NV, dv)
            o = rms_norm(o, m.w(p + "ssm_norm.weight"), m.eps) * torch.nn.functional.silu(z)
            o = aq(o.reshape(T, NV * dv)) @ m.w(p + "ssm_out.weight").T
        else:
            qg = (h @ m.w(p + "attn_q.weight").T).view(T, H, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
            k = (h @ m.w(p + "attn_k.weight").T).view(T, KV, hd)
            v = (h @ m.w(p + "attn_v.weight").T).view(T, KV, hd)
            q = rope_partial(norm(q, p + "attn_q_norm.weight"))
            k = rope_partial(norm(k, p + "attn_k_norm.weight"))
            if kv_f16:
                k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            o = attention(q, k, v, mask, math.sqrt(hd)) * torch.sigmoid(gate)
            o = aq(o.reshape(T, H * hd)) @ m.w(p + "attn_output.weight").T
        x = x + o
        h = aq(norm(x, p + "post_attention_norm.weight"))
        if m.n_experts:   # Qwen3.5-MoE (Qwen3NextSparseMoeBlock): experts, plus the gated shared expert
            x = x + moe_ffn(m, i, h, aq)
            if m.has(p + "ffn_gate_shexp.weight"):
                f = torch.nn.functional.silu(h @ m.w(p + "ffn_gate_shexp.weight").T) * (h @ m.w(p + "ffn_up_shexp.weight").T)
                gate = torch.sigmoid(h @ m.w(p + "ffn_gate_inp_shexp.weight").reshape(-1))
                x = x + gate[:, None] * (aq(f) @ m.w(p + "ffn_down_shexp.weight").T)
            continue
        f = torch.nn.functional.silu(h @ m.w(p + "ffn_gate.weight").T) * (h @ m.w(p + "ffn_up.weight").T)
        x = x + aq(f) @ m.w(p + "ffn_down.weight").T
    x = norm(x, "output_norm.weight")
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    return (aq(x) @ out.T, x) if hidden else aq(x) @ out.T


def qwen35_mtp_logits(m, tokens, steps):
    """The MTP head's logits for `steps` greedy drafts after tokens x_0..x_n, transcribed from vLLM's
    qwen3_next_mtp.py (Qwen3NextMultiTokenPredictor) and its EAGLE-style proposer: the decoder's
    final-normed hidden states h_0..h_{n-1} of x_0..x_{n-1}; the head's input at position i is
    fc([pre_fc_norm_embedding(embed(x_{i+1})) | pre_fc_norm_hidden(h_i)]) for i < n, one gated
    full-attention decoder layer (causal over the head's own positions 0..i, RoPE at i), mtp.norm,
    and the decoder's vocabulary projection. Draft j + 1 continues at position n - 1 + j + 1 with the
    drafted token and the head's own normed output in place of h. Returns [steps, n_vocab]."""
    n = len(tokens) - 1
    _, h = qwen35_forward(m, tokens[:n], lambda t: t, False, hidden=True)
    H, KV, hd = m.n_heads, m.n_kv_heads, m.head_dim
    w = (lambda name: m.w(m.mtp_names.get(name, name)))
    norm = (lambda t, name: rms_norm(t, w(name) + m.norm_offset, m.eps))
    emb = m.w("token_embd.weight")
    out = m.w("output.weight") if m.has("output.weight") else emb
    p = "mtp.layers.0."
    toks, hid = list(tokens[1:]), [h[i] for i in range(n)]       # pairs (x_{i+1}, h_i), i < n
    rows = []
    for _ in range(steps):
        T = len(toks)
        e = norm(emb[torch.tensor(toks)], "mtp.pre_fc_norm_embedding.weight")
        g = norm(torch.stack(hid), "mtp.pre_fc_norm_hidden.weight")
        u = torch.cat([e, g], dim=-1) @ w("mtp.fc.weight").T
        x = norm(u, p + "input_layernorm.weight")
        pos = torch.arange(T)
        r = m.rope_dim
        rot = (lambda t: torch.cat([rope(t[..., :r], pos, m.theta, "half", None), t[..., r:]], dim=-1))
        qg = (x @ w(p + "self_attn.q_proj.weight").T).view(T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (x @ w(p + "self_attn.k_proj.weight").T).view(T, KV, hd)
        v = (x @ w(p + "self_attn.v_proj.weight").T).view(T, KV, hd)
        q, k = rot(norm(q, p + "self_attn.q_norm.weight")), rot(norm(k, p + "self_attn.k_norm.weight"))
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        o = attention(q, k, v, causal_mask(T), math.sqrt(hd)) * torch.sigmoid(gate)
        u = u + o.reshape(T, H * hd) @ w(p + "self_attn.o_proj.weight").T
        f = norm(u, p + "post_attention_layernorm.weight")
        f = torch.nn.functional.silu(f @ w(p + "mlp.gate_proj.weight").T) * (f @ w(p + "mlp.up_proj.weight").T)
        u = u + f @ w(p + "mlp.down_proj.weight").T
        last = norm(u[-1], "mtp.norm.weight")
        row = last @ out.T
        rows.append(row)
        toks.append(int(torch.argmax(row)))
        hid.append(last)
    return torch.stack(rows)


def gptoss_moe_ffn(m, layer, h, aq):
    """GPT-OSS's MoE block (see the module docstring), from either format's expert layout."""
    p = f"blk.{layer}."
    logits = aq(h) @ m.w(p + "ffn_gate_inp.weight").T + m.w(p + "ffn_gate_inp.bias")
    top, chosen = torch.topk(logits, m.n_experts_used, dim=-1)
    weights = torch.softmax(top, dim=-1)
    fused = m.has(p + "experts.gate_up_proj")
    if fused:
        gu_w, gu_b = m.w(p + "experts.gate_up_proj"), m.w(p + "experts.gate_up_proj_bias")
        d_w, d_b = m.w(p + "experts.down_proj"), m.w(p + "experts.down_proj_bias")
    else:
        gb, ub, db = (m.w(p + f"ffn_{k}_exps.bias") for k in ("gate", "up", "down"))
    limit, out = m.swiglu_limit, torch.zeros_like(h)
    for e in range(m.n_experts):
        rows, slot = torch.nonzero(chosen == e, as_tuple=True)
        if len(rows) == 0:
            continue
        x = aq(h[rows])
        if fused:
            gate_up = x @ gu_w[e] + gu_b[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        else:
            gate = x @ m.expert(layer, "gate", e).T + gb[e]
            up = x @ m.expert(layer, "up", e).T + ub[e]
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
        z = aq((up + 1) * gate * torch.sigmoid(gate * 1.702))
        y = (z @ d_w[e] + d_b[e]) if fused else (z @ m.expert(layer, "down", e).T + db[e])
        out.index_add_(0, rows, y * weights[rows, slot][:, None])
    return out


def moe_ffn(m, layer, h, aq):
    """The sparse MoE block of Qwen3-MoE / Mixtral (see the module docstring), for every token."""
    router = m.w(f"blk.{layer}.ffn_gate_inp.weight")
    probs = torch.softmax(aq(h) @ router.T, dim=-1)                     # [T, experts]
    weights, chosen = torch.topk(probs, m.n_experts_used, dim=-1)
    if m.norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    fused = m.has(f"blk.{layer}.experts.gate_up_proj")
    if fused:
        gu_w, d_w = m.w(f"blk.{layer}.experts.gate_up_proj"), m.w(f"blk.{layer}.experts.down_proj")
    for e in range(m.n_experts):
        rows, slot = torch.nonzero(chosen == e, as_tuple=True)
        if len(rows) == 0:
            continue
        x = aq(h[rows])
        if fused and m.family == "qwen35":
            # transformers 5's Qwen3_5MoeExperts: F.linear(x, gate_up_proj[e]).chunk(2, -1); F.linear(., down_proj[e])
            gate, up = (x @ gu_w[e].T).chunk(2, dim=-1)
            y = aq(torch.nn.functional.silu(gate) * up) @ d_w[e].T
        elif fused:
            # Qwen3VLMoeTextExperts: (x @ gate_up_proj[e]).chunk(2, -1); (up * act(gate)) @ down_proj[e]
            gate, up = (x @ gu_w[e]).chunk(2, dim=-1)
            y = aq(up * torch.nn.functional.silu(gate)) @ d_w[e]
        else:
            gate, up = x @ m.expert(layer, "gate", e).T, x @ m.expert(layer, "up", e).T
            y = aq(torch.nn.functional.silu(gate) * up) @ m.expert(layer, "down", e).T
        out.index_add_(0, rows, y * weights[rows, slot][:, None])
    return out


def granite_mamba2(m, p, h):
    """GraniteMoeHybridMambaLayer (transformers' torch_forward) in its recurrent form, the one its decode
    path uses for every token: in_proj into [z | xBC | dt]; xBC through the causal depthwise conv1d (with
    bias, SiLU) written as the window of its last K inputs; per token and head, dt = softplus(dt + dt_bias),
    S = exp(dt A) S + dt x B^T with A = -exp(A_log) and B, C of the head's group (repeat_interleave),
    y = S C + D x; then y * silu(z), RMS-normed (over d_inner, or per group for GGUF as llama.cpp does),
    times the norm weight, out_proj."""
    T, H, P, N, G, K = h.shape[0], m.m_heads, m.m_head_dim, m.d_state, m.n_groups, m.conv_kernel
    inner = H * P
    proj = h @ m.w(p + "ssm_in.weight").T
    z, xbc, dt = proj[:, :inner], proj[:, inner:2 * inner + 2 * G * N], proj[:, 2 * inner + 2 * G * N:]
    C_ = xbc.shape[1]
    w = m.w(p + "ssm_conv1d.weight").reshape(C_, K)
    padded = torch.cat([torch.zeros(K - 1, C_, dtype=torch.float64), xbc], dim=0)
    conv = torch.stack([(padded[t:t + K] * w.T).sum(0) for t in range(T)]) + m.w(p + "ssm_conv1d.bias")
    conv = torch.nn.functional.silu(conv)
    xs = conv[:, :inner].reshape(T, H, P)
    B = conv[:, inner:inner + G * N].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    C = conv[:, inner + G * N:].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    A = -torch.exp(m.w(p + "ssm_a").reshape(H)) if m.a_is_log else m.w(p + "ssm_a").reshape(H)
    D = m.w(p + "ssm_d").reshape(H)
    dt = torch.nn.functional.softplus(dt + m.w(p + "ssm_dt.bias"))
    S = torch.zeros(H, P, N, dtype=torch.float64)
    y = torch.zeros(T, H, P, dtype=torch.float64)
    for t in range(T):
        S = S * torch.exp(dt[t] * A)[:, None, None] + (dt[t][:, None] * xs[t])[:, :, None] * B[t][:, None, :]
        y[t] = torch.einsum("hpn,hn->hp", S, C[t]) + D[:, None] * xs[t]
    y = y.reshape(T, inner) * torch.nn.functional.silu(z)
    groups = G if m.norm_per_group else 1
    y = rms_norm(y.reshape(T, groups, inner // groups), torch.ones(inner // groups, dtype=torch.float64), m.eps)
    y = y.reshape(T, inner) * m.w(p + "ssm_norm.weight").reshape(inner)
    return y @ m.w(p + "ssm_out.weight").T


def granite_forward(m, tokens, aq, kv_f16):
    """Granite 4.0-H (GraniteMoeHybridModel / DecoderLayer): embeddings times embedding_multiplier; per
    layer input_layernorm, Mamba2 (granite_mamba2) or GQA attention (RoPE only for "rope", scores times
    attention_multiplier), residual + out * residual_multiplier; post_attention_layernorm, the shared MLP
    (silu(gate) * up from its fused [gate | up]) plus, with experts, the top-k experts (softmax over the
    chosen router logits, GraniteMoeHybridTopKGating), residual + out * residual_multiplier; the final norm,
    logits / logits_scaling."""
    tok = torch.tensor(tokens, dtype=torch.long)
    T, H, KV, hd = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok] * m.g_emb
    mask = causal_mask(T)
    for i in range(m.n_layers):
        p = f"blk.{i}."
        h = aq(rms_norm(x, m.w(p + "attn_norm.weight"), m.eps))
        if m.layer_types[i] == "mamba":
            o = granite_mamba2(m, p, h)
        else:
            q = (h @ m.w(p + "attn_q.weight").T).view(T, H, hd)
            k = (h @ m.w(p + "attn_k.weight").T).view(T, KV, hd)
            v = (h @ m.w(p + "attn_v.weight").T).view(T, KV, hd)
            if m.g_rope:
                q, k = rope(q, pos, m.theta, m.rope_style, None), rope(k, pos, m.theta, m.rope_style, None)
            if kv_f16:
                k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            o = attention(q, k, v, mask, 1.0 / m.g_att).reshape(T, H * hd)
            o = aq(o) @ m.w(p + "attn_output.weight").T
        x = x + o * m.g_res
        h = aq(rms_norm(x, m.w(p + "ffn_norm.weight"), m.eps))
        sh = "_shexp" if m.n_experts and m.has(p + "ffn_gate_shexp.weight") else ""
        if m.has(p + "ffn_gate_up.weight"):
            gate, up = (h @ m.w(p + "ffn_gate_up.weight").T).chunk(2, dim=-1)
        else:
            gate, up = h @ m.w(p + f"ffn_gate{sh}.weight").T, h @ m.w(p + f"ffn_up{sh}.weight").T
        f = aq(torch.nn.functional.silu(gate) * up) @ m.w(p + f"ffn_down{sh}.weight").T
        if m.n_experts:
            logits = h @ m.w(p + "ffn_gate_inp.weight").T
            top, chosen = torch.topk(logits, m.n_experts_used, dim=-1)
            weights = torch.softmax(top, dim=-1)
            fused = m.has(p + "ffn_gate_up_exps.weight")
            if fused:
                gu_all, d_all = m.w(p + "ffn_gate_up_exps.weight"), m.w(p + "ffn_down_exps.weight")
            for e in range(m.n_experts):
                rows, slot = torch.nonzero(chosen == e, as_tuple=True)
                if len(rows) == 0:
                    continue
                if fused:
                    g, u = (h[rows] @ gu_all[e].T).chunk(2, dim=-1)
                    y = aq(torch.nn.functional.silu(g) * u) @ d_all[e].T
                else:
                    g, u = h[rows] @ m.expert(i, "gate", e).T, h[rows] @ m.expert(i, "up", e).T
                    y = aq(torch.nn.functional.silu(g) * u) @ m.expert(i, "down", e).T
                f = f.index_add(0, rows, y * weights[rows, slot][:, None])
        x = x + f * m.g_res
    x = rms_norm(x, m.w("output_norm.weight"), m.eps)
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    return (aq(x) @ out.T) / m.g_logit


def nemotron_forward(m, tokens, aq, kv_f16):
    """Nemotron-H (NemotronHModel / NemotronHBlock): per layer x = x + mixer(RMSNorm(x)), the mixer being
    Mamba2 (granite_mamba2: the same NemotronHMamba2Mixer recurrence, its gated norm per group), attention
    without positional encoding (NemotronHAttention: GQA, scores / sqrt(head_dim), o_proj) or the MLP
    (NemotronHMLP: down_proj(relu(up_proj(x))^2)); then norm_f and lm_head (tied unless lm_head exists)."""
    tok = torch.tensor(tokens, dtype=torch.long)
    T, H, KV, hd = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim
    x = m.w("token_embd.weight")[tok]
    mask = causal_mask(T)
    for i in range(m.n_layers):
        p = f"blk.{i}."
        h = aq(rms_norm(x, m.w(p + "attn_norm.weight"), m.eps))
        if m.layer_types[i] == "mamba":
            o = granite_mamba2(m, p, h)
        elif m.layer_types[i] == "attention":
            q = (h @ m.w(p + "attn_q.weight").T).view(T, H, hd)
            k = (h @ m.w(p + "attn_k.weight").T).view(T, KV, hd)
            v = (h @ m.w(p + "attn_v.weight").T).view(T, KV, hd)
            if kv_f16:
                k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            o = aq(attention(q, k, v, mask, math.sqrt(hd)).reshape(T, H * hd)) @ m.w(p + "attn_output.weight").T
        else:
            o = aq(torch.relu(h @ m.w(p + "ffn_up.weight").T) ** 2) @ m.w(p + "ffn_down.weight").T
        x = x + o
    x = rms_norm(x, m.w("output_norm.weight"), m.eps)
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    return aq(x) @ out.T


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


def forward(m, tokens, act_q8=False, kv_f16=False, embeds=None, spans=(), mrope=None, deepstack=None):
    """Logits [len(tokens), n_vocab] (float64) with token i at position i. For estimating an engine's
    expected error only: act_q8 (True = blocks of 32, or a block size) simulates 8-bit activation
    quantization before every matrix product, kv_f16 rounds cached keys (after RoPE) and values to
    float16 (True or "f16"), bfloat16 ("bf16") or Q8_0 blocks of 32 along the head dimension ("q8_0").
    Images (the llama-style decoders, Gemma 3): embeds maps positions to rows that replace those tokens'
    scaled embeddings (transformers' masked_scatter of the image features), spans lists the (start, end)
    of each image whose tokens see one another (causal_mask). Qwen3.5: embeds likewise, and mrope the
    [T, 3] M-RoPE positions (qwen35_forward). Qwen3-VL (a qwen3 with m.mrope_section): mrope likewise over
    the whole head, and deepstack a list of {position: row} added to the hidden state after layer i
    (Qwen3VLTextModel._deepstack_process)."""
    block = 32 if act_q8 is True else int(act_q8)
    aq = (lambda t: quantize_activations_q8(t, block)) if act_q8 else (lambda t: t)
    tok = torch.tensor(tokens, dtype=torch.long)
    if tok.min() < 0 or tok.max() >= m.n_vocab:
        raise ValueError("token id out of range")
    if m.family == "lfm2":
        return lfm2_forward(m, tokens, aq, kv_f16)
    if m.family == "qwen35":
        return qwen35_forward(m, tokens, aq, kv_f16, embeds=embeds, mrope=mrope)
    if m.family == "granite":
        return granite_forward(m, tokens, aq, kv_f16)
    if m.family == "nemotron":
        return nemotron_forward(m, tokens, aq, kv_f16)
    T, H, KV, hd = len(tokens), m.n_heads, m.n_kv_heads, m.head_dim
    gemma = m.family == "gemma3"
    pos = torch.arange(T)
    x = m.w("token_embd.weight")[tok]
    if m.embed_scale is not None:
        x = x * m.embed_scale
    for p, row in (embeds or {}).items():
        x[p] = torch.as_tensor(row, dtype=torch.float64)
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
            masks[window] = causal_mask(T, window, spans)
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
        if mrope is not None:
            q = mrope_partial(q, hd, m.theta, m.mrope_section, mrope)
            k = mrope_partial(k, hd, m.theta, m.mrope_section, mrope)
        elif i not in m.no_rope_layers:
            if sliding and m.rope_local_theta is not None:
                # Gemma 3 local layers: their own base, no scaling.
                theta, divisors, pscale = m.rope_local_theta, None, 1.0
            else:
                theta, divisors, pscale = m.theta, m.rope_divisors, m.position_scale
            yarn = None if (sliding and m.rope_local_theta is not None) else m.yarn
            q = rope(q, pos, theta, m.rope_style, divisors, pscale, yarn)
            k = rope(k, pos, theta, m.rope_style, divisors, pscale, yarn)
        if kv_f16:
            k, v = round_kv(k, kv_f16), round_kv(v, kv_f16)
        group = H // KV
        k = k.repeat_interleave(group, dim=1)                          # query head j reads kv head j // group
        v = v.repeat_interleave(group, dim=1)
        sinks = m.w(p + "attn_sinks.weight") if m.has(p + "attn_sinks.weight") else None
        o = attention(q, k, v, masks[window], denominator, sinks).reshape(T, H * hd)
        o = aq(o) @ m.w(p + "attn_output.weight").T
        if m.has(p + "attn_output.bias"):
            o = o + m.w(p + "attn_output.bias")
        if gemma:
            o = norm(o, p + "post_attention_norm.weight")
        x = x + o
        if m.family == "gpt-oss":
            x = x + gptoss_moe_ffn(m, i, norm(x, p + "post_attention_norm.weight"), aq)
            continue
        h = norm(x, p + "ffn_norm.weight")
        if m.n_experts:
            x = x + moe_ffn(m, i, h, aq)
        else:
            hq = aq(h)
            gate = hq @ m.w(p + "ffn_gate.weight").T
            up = hq @ m.w(p + "ffn_up.weight").T
            act = gelu_tanh(gate) if gemma else torch.nn.functional.silu(gate)
            f = aq(act * up) @ m.w(p + "ffn_down.weight").T
            if gemma:
                f = norm(f, p + "post_ffw_norm.weight")
            x = x + f
        if deepstack and i < len(deepstack):
            for pos_, row in deepstack[i].items():
                x[pos_] = x[pos_] + torch.as_tensor(row, dtype=torch.float64)
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
