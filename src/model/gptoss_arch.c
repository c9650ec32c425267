/* GPT-OSS (transformers' modeling_gpt_oss.py; llama.cpp's LLM_ARCH_OPENAI_MOE, GGUF "gpt-oss"): the
 * decoder of llama.c with
 *   - Q/K/V and output biases, and a learned attention sink per head (attn_sinks.weight);
 *   - sliding-window layers (128 tokens) alternating with full ones: GGUF
 *     gpt-oss.attention.sliding_window and sliding_window_pattern (default 2: layer l is windowed when
 *     l % 2 == 0, llama.cpp's set_swa_pattern); config.json "sliding_window" and "layer_types";
 *   - YaRN RoPE (read by the common loaders), rotate-half in both formats;
 *   - a mixture of experts in every layer (model/moe.h): router with a bias, top-k of the logits and a
 *     softmax over the chosen ones (the same weights as a softmax over all renormalised), experts with
 *     biases and the clamped SwiGLU (alpha 1.702, limit swiglu_limit, default 7; llama.cpp fixes 7);
 *   - the FFN's pre-norm named post_attention_norm in GGUF (HF post_attention_layernorm).
 * Experts: GGUF's 3-D ffn_{gate,up,down}_exps (MXFP4 in the released files) with biases; a Hugging Face
 * checkpoint's fused mlp.experts.gate_up_proj (gate and up interleaved) and down_proj in F32/F16/BF16 are
 * rearranged at load (moe_load.c). Checkpoints stored as MXFP4 blocks and scales are not read. */
#include <string.h>

#include "model/llama.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

#define GGUF_SWA_PERIOD 2
#define SWIGLU_LIMIT 7.0f

static const pith_name_map hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.sinks", "attn_sinks.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"mlp.router.weight", "ffn_gate_inp.weight"},
    {"mlp.router.bias", "ffn_gate_inp.bias"},
    {NULL, NULL},
};

static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"attn_q.bias", PITH_D_Q, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_k.bias", PITH_D_KV, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_v.bias", PITH_D_KV, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_output.bias", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_sinks.weight", PITH_D_HEADS, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* GPT-OSS's own hyper-parameters (pith_arch_params). */
typedef struct gptoss_params {
    float swiglu_limit; /* the experts' clamped SwiGLU: g = min(g, limit), u = clamp(u, -limit, limit) */
} gptoss_params;

static void window_every(pith_hparams *hp, int period) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, hp->sliding_window > 0 && l % period < period - 1);
}

static int gptoss_read_gguf(const pith_meta *m, pith_hparams *hp) {
    int period = GGUF_SWA_PERIOD;
    gptoss_params *p = pith_arch_params(hp);
    p->swiglu_limit = SWIGLU_LIMIT;
    if (pith_moe_read_gguf(m, hp, true) || pith_meta_int(m, "attention.sliding_window", false, &hp->sliding_window) ||
        pith_meta_int(m, "attention.sliding_window_pattern", false, &period))
        return -1;
    if (period < 1)
        return pith_errf(m->err, "%s: %s.attention.sliding_window_pattern %d is not a positive period", m->path,
                         m->arch, period);
    if (hp->sliding_window < 0) hp->sliding_window = 0;
    window_every(hp, period);
    return 0;
}

static int gptoss_read_hf(const pith_meta *m, pith_hparams *hp) {
    gptoss_params *p = pith_arch_params(hp);
    hp->expert_norm_topk = true;
    p->swiglu_limit = SWIGLU_LIMIT;
    if (pith_meta_int(m, "num_local_experts", true, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", true, &hp->n_experts_used) ||
        pith_meta_int(m, "sliding_window", false, &hp->sliding_window) ||
        pith_meta_float(m, "swiglu_limit", false, &p->swiglu_limit))
        return -1;
    hp->expert_ffn_dim = hp->ffn_dim;
    if (hp->sliding_window < 0) hp->sliding_window = 0;
    if (!(p->swiglu_limit > 0))
        return pith_errf(m->err, "%s: \"swiglu_limit\" %g is not a positive number", m->path, p->swiglu_limit);
    bool found = false;
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "sliding_attention", hp->layer_swa, &found)) return -1;
    if (!found) window_every(hp, 2); /* configuration_gpt_oss.py: sliding where (i + 1) % 2 */
    if (!hp->sliding_window) memset(hp->layer_swa, 0, sizeof hp->layer_swa);
    return 0;
}

static int gptoss_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_moe_check_hparams(hp, true, path, err);
}

static int gptoss_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const gptoss_params *p = pith_arch_params(pith_model_file_hparams(file));
    const pith_decoder_variant v = {.ffn_norm = "post_attention_norm.weight", .swiglu_limit = p->swiglu_limit};
    return pith_decoder_build(file, opt, &v, out, err);
}

const pith_arch pith_arch_gpt_oss = {
    .name = "gpt-oss",
    .hf_archs = (const char *const[]){"GptOssForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"gpt_oss", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = hf_layer,
    .global = pith_llama_global,
    .layer = layer,
    .read_gguf = gptoss_read_gguf,
    .read_hf = gptoss_read_hf,
    .check = gptoss_check,
    .finish = pith_llama_finish,
    .build = gptoss_build,
    .params_size = sizeof(gptoss_params),
};
