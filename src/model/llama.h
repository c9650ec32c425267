/* The Llama-family decoder (llama, qwen2, qwen3, smollm3, Mistral; see llama.c): builds a pith_model from
 * a model file. Architectures that differ from it only in the ways pith_decoder_variant lists build
 * through pith_decoder_build with their own variant (gemma3.c). */
#ifndef PITH_MODEL_LLAMA_H
#define PITH_MODEL_LLAMA_H

#include <stdbool.h>

#include "pith/model.h"

/* What a variant changes; zero everywhere is the Llama decoder. Everything else that varies (biases, QK
 * norms, windows, NoPE layers, RoPE bases, query scale, logit soft-cap) comes from the hyper-parameters. */
typedef struct pith_decoder_variant {
    float embed_scale;  /* 0: none; else embeddings are multiplied by it (gemma3: sqrt(dim)) */
    bool gelu_tanh;     /* gated FFN with GELU (tanh approximation) instead of SiLU */
    bool post_norms;    /* RMSNorm of the attention and FFN outputs before the residual add
                           (post_attention_norm, post_ffw_norm) */
    /* Mixture of experts (hp.n_experts > 0, model/moe.h): the Hugging Face names of each expert's gate,
     * up and down matrices after "model.layers.N.", %d for the expert (all NULL: GGUF names only). */
    const char *hf_experts[3];
    /* The FFN's pre-norm, after "blk.N." (NULL: "ffn_norm.weight"; GPT-OSS's GGUF says
     * "post_attention_norm.weight"). */
    const char *ffn_norm;
    /* Experts: GPT-OSS's clamped SwiGLU with this limit when > 0 (backend.h: PITH_MOE_SWIGLU_CLAMP). */
    float swiglu_limit;
    /* Experts: a checkpoint's fused gate_up_proj holds gate and up as halves (Qwen3-VL-MoE; backend.h
     * pith_moe_config.fused_halves), not interleaved as GPT-OSS's. */
    bool fused_halves;
    /* Images (Qwen3-VL): M-RoPE over the rotated pairs in these sections (0, 0, 0: none; backend.h
     * pith_rope.sections), the model then taking encoder rows (model.h has_embeds, has_mrope); and
     * `deepstack` more parts in each row, part k + 1 joining the hidden state after layer k. */
    int mrope_sections[3];
    int deepstack;
} pith_decoder_variant;

/* Take ownership of `file` on success (and on failure leave it to the caller). */
int pith_llama_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);
int pith_decoder_build(pith_model_file *file, const pith_model_options *opt, const pith_decoder_variant *var,
                       pith_model **out, pith_err *err);

#endif
