/* Qwen3-VL's text models: GGUF archs "qwen3vl" and "qwen3vlmoe" (llama.cpp's), Hugging Face
 * Qwen3VLForConditionalGeneration and Qwen3VLMoeForConditionalGeneration (model_type "qwen3_vl" /
 * "qwen3_vl_moe", the text model under "text_config" with model_type "qwen3_vl_text" /
 * "qwen3_vl_moe_text" and its tensors under "model.language_model."). See model/arch.h.
 *
 * A Qwen3 (the Llama family's names and schema, RMS norms on each Q and K head, pith_decoder_build) with
 * images: M-RoPE over all of head_dim, interleaved as Qwen3VLTextRotaryEmbedding lays it out
 * ("mrope_section", default [24, 20, 20]; GGUF {arch}.rope.dimension_sections), and DeepStack: the
 * vision tower's mergers after some of its blocks give each image token more parts, the text model adding
 * part k + 1 to the token's hidden state after its layer k (Qwen3VLTextModel._deepstack_process). How many:
 * config.json's vision_config "deepstack_visual_indexes" (Qwen3VLVisionConfig's default [8, 16, 24]),
 * GGUF {arch}.n_deepstack_layers. transformers saves only what differs from a config class's defaults, so
 * Qwen3VLTextConfig's and Qwen3VLMoeTextConfig's are the defaults here. The vision tower itself is the
 * vision encoder's (model/vision.h).
 *
 * Qwen3-VL-MoE is Qwen3-MoE's FFN in every layer (qwen3moe_arch.c: softmax, top k, renormalised):
 * config.json num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob (default true;
 * transformers 4.57's router renormalises always, and every released config says true); GGUF's expert keys
 * (model/moe_arch.h). The released checkpoints fuse each layer's experts (Qwen3VLMoeTextExperts):
 * mlp.experts.gate_up_proj [experts, dim, 2 x ffn], applied as x @ W with gate the first ffn columns
 * (gate_up.chunk(2, -1)), and mlp.experts.down_proj [experts, ffn, dim] (backend.h fused_halves);
 * per-expert mlp.experts.E.{gate,up,down}_proj.weight are read too. */
#include <cjson/cJSON.h>

#include "model/llama.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

typedef struct qwen3vl_params {
    int sections[3];
    int deepstack;
} qwen3vl_params;

static int qwen3vl_read_gguf(const pith_meta *m, pith_hparams *hp) {
    qwen3vl_params *P = pith_arch_params(hp);
    P->sections[0] = 24, P->sections[1] = 20, P->sections[2] = 20;
    return pith_meta_ints(m, "rope.dimension_sections", 3, 0, 1 << 20, P->sections) ||
                   pith_meta_int(m, "n_deepstack_layers", false, &P->deepstack)
               ? -1
               : 0;
}

static int qwen3vl_read_hf(const pith_meta *m, pith_hparams *hp) {
    qwen3vl_params *P = pith_arch_params(hp);
    P->sections[0] = 24, P->sections[1] = 20, P->sections[2] = 20;
    /* transformers 4.x: "rope_scaling" {"rope_type": "default", "mrope_section", "mrope_interleaved"};
     * 5.x: "rope_parameters" with rope_theta beside them */
    const char *keys[2] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, keys[k]);
        if (!cJSON_IsObject(rp)) continue;
        pith_meta r = *m;
        r.json = rp;
        if (pith_meta_float(&r, "rope_theta", false, &hp->rope_theta) ||
            pith_meta_ints(&r, "mrope_section", 3, 0, 1 << 20, P->sections))
            return -1;
    }
    P->deepstack = 3; /* Qwen3VLVisionConfig's deepstack_visual_indexes [8, 16, 24] */
    const cJSON *vc = m->outer ? cJSON_GetObjectItemCaseSensitive(m->outer, "vision_config") : NULL;
    const cJSON *deep = cJSON_GetObjectItemCaseSensitive(vc, "deepstack_visual_indexes");
    if (deep && !cJSON_IsNull(deep)) {
        if (!cJSON_IsArray(deep)) return pith_errf(m->err, "%s: deepstack_visual_indexes is not a list", m->path);
        P->deepstack = cJSON_GetArraySize(deep);
    }
    return 0;
}

static int qwen3vl_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const qwen3vl_params *P = pith_arch_params(hp);
    if (P->sections[0] + P->sections[1] + P->sections[2] != hp->head_dim / 2)
        return pith_errf(err, "%s: M-RoPE sections %d + %d + %d do not cover head_dim / 2 = %d", path, P->sections[0],
                         P->sections[1], P->sections[2], hp->head_dim / 2);
    if (P->deepstack < 0 || P->deepstack > 8 || P->deepstack >= hp->n_layers)
        return pith_errf(err, "%s: %d DeepStack layers for %d layers", path, P->deepstack, hp->n_layers);
    return 0;
}

static int qwen3vl_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const qwen3vl_params *P = pith_arch_params(pith_model_file_hparams(file));
    const pith_decoder_variant v = {
        .mrope_sections = {P->sections[0], P->sections[1], P->sections[2]},
        .deepstack = P->deepstack,
        .hf_experts = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                       "mlp.experts.%d.down_proj.weight"},
        .fused_halves = true,
    };
    return pith_decoder_build(file, opt, &v, out, err);
}

const pith_arch pith_arch_qwen3vl = {
    .name = "qwen3vl",
    .hf_archs = (const char *const[]){"Qwen3VLForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"qwen3_vl", "qwen3_vl_text", NULL},
    .hf_text_config = true,
    /* transformers' Qwen3VLTextConfig */
    .hf_defaults = "{\"vocab_size\": 151936, \"hidden_size\": 4096, \"intermediate_size\": 22016, "
                   "\"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 32, "
                   "\"head_dim\": 128, \"rms_norm_eps\": 1e-6, \"rope_theta\": 5000000.0, "
                   "\"max_position_embeddings\": 128000}",
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = qwen3vl_read_gguf,
    .read_hf = qwen3vl_read_hf,
    .check = qwen3vl_check,
    .finish = pith_llama_finish,
    .build = qwen3vl_build,
    .params_size = sizeof(qwen3vl_params),
};

static int qwen3vlmoe_read_gguf(const pith_meta *m, pith_hparams *hp) {
    return qwen3vl_read_gguf(m, hp) || pith_moe_read_gguf(m, hp, true) ? -1 : 0;
}

static int qwen3vlmoe_read_hf(const pith_meta *m, pith_hparams *hp) {
    hp->expert_norm_topk = true; /* Qwen3VLMoeTextConfig's default (its hf_defaults give the other keys) */
    hp->expert_gating = PITH_GATING_SOFTMAX;
    return qwen3vl_read_hf(m, hp) || pith_moe_read_hf_qwen(m, hp) ? -1 : 0;
}

static int qwen3vlmoe_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return qwen3vl_check(hp, path, err) || pith_moe_check_hparams(hp, true, path, err) ? -1 : 0;
}

const pith_arch pith_arch_qwen3vlmoe = {
    .name = "qwen3vlmoe",
    .hf_archs = (const char *const[]){"Qwen3VLMoeForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"qwen3_vl_moe", "qwen3_vl_moe_text", NULL},
    .hf_text_config = true,
    /* transformers' Qwen3VLMoeTextConfig (head_dim: hidden_size / num_attention_heads) */
    .hf_defaults = "{\"vocab_size\": 151936, \"hidden_size\": 2048, \"intermediate_size\": 5632, "
                   "\"num_hidden_layers\": 24, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
                   "\"rms_norm_eps\": 1e-6, \"rope_theta\": 5000000.0, \"max_position_embeddings\": 128000, "
                   "\"num_experts\": 60, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 1408}",
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = qwen3vlmoe_read_gguf,
    .read_hf = qwen3vlmoe_read_hf,
    .check = qwen3vlmoe_check,
    .finish = pith_llama_finish,
    .build = qwen3vl_build,
    .params_size = sizeof(qwen3vl_params),
};
