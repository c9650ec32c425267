/* Mistral 3 descriptor: GGUF arch "mistral3" (llama.cpp's LLM_ARCH_MISTRAL3), Hugging Face
 * Ministral3ForCausalLM (model_type "ministral3") and Mistral3ForConditionalGeneration (model_type
 * "mistral3": the text model's config under "text_config", its tensors under "model.language_model."
 * (transformers v5) or "language_model.model." with "language_model.lm_head.weight" (older checkpoints:
 * Mistral Small 3.1 / 3.2), the vision tower and projector ignored). See model/arch.h.
 *
 * The tensors are Llama's (llama_arch.c's schema and names; Q/K/V biases and QK norms all-or-none, as
 * llama.cpp's mistral3 graph takes optional biases). llama.cpp converts Ministral 3 with its Llama
 * converter (convert_hf_to_gguf.py, Mistral3Model -> Ministral3Model(LlamaModel)), which permutes Q and K,
 * and llama_model_rope_type lists MISTRAL3 as NORM: GGUF rotates adjacent pairs, Hugging Face halves.
 *
 * What it adds to Llama, after transformers' models/ministral3/modeling_ministral3.py and
 * configuration_ministral3.py:
 *   - YaRN, in "rope_parameters" (transformers v5: rope_type "yarn", rope_theta, factor,
 *     original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim; read the way
 *     src/format/hf_config.c reads a "rope_scaling" YaRN: attention factor get_mscale(factor, mscale) /
 *     get_mscale(factor, mscale_all_dim) when both are given, else 1 + 0.1 ln factor) or in "rope_scaling"
 *     (older configs; the loader's own reader);
 *   - the attention temperature (Ministral3Attention, _get_llama_4_attn_scale): after RoPE the queries of
 *     position p are multiplied by 1 + beta * ln(1 + floor(p / original_max_position_embeddings)), beta =
 *     rope_parameters' "llama_4_scaling_beta" (absent: none). Mistral Small 3.x's text model (model_type
 *     "mistral", no beta) is then a plain Llama.
 * GGUF: {arch}.attention.temperature_scale is beta (the converter writes llama_4_scaling_beta); its length
 * is llama.cpp's n_ctx_orig_yarn: rope.scaling.original_context_length, else context_length
 * (llama-model.cpp, LLM_ARCH_MISTRAL3: n_attn_temp_floor_scale = n_ctx_orig_yarn; no key of its own).
 * llama.cpp's temperature input computes floor((pos + f_attn_temp_offset) / length) with the offset 0 for
 * this architecture (1 only for Llama 4), the formula above. The YaRN attention factor: the converter
 * writes mscale_all_dim as rope.scaling.yarn_log_multiplier and llama.cpp hard-codes mscale 1, so it is
 * get_mscale(factor, 1) / get_mscale(factor, yarn_log_multiplier) (absent: 1, so 1: llama.cpp's
 * src/models/mistral3.cpp passes attn_factor 1 / (1 + 0.1 ln factor), cancelling ggml's YaRN magnitude
 * correction, which is this ratio for the released files' mscale == mscale_all_dim == 1). */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "format/arch.h"
#include "model/llama_arch.h"
#include "model/mistral3.h"

static double get_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0; }

static void every_layer(pith_hparams *hp) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(hp->layer_swa, l, true);
}

static int mistral3_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_mistral3_params *p = pith_arch_params(hp);
    p->attn_temp_length = hp->ctx_len;
    if (pith_meta_float(m, "attention.temperature_scale", false, &p->attn_temp_beta) ||
        pith_meta_int(m, "rope.scaling.original_context_length", false, &p->attn_temp_length))
        return -1;
    if (hp->rope_yarn_factor > 0) {
        float log_mul = 1.0f;
        if (pith_meta_float(m, "rope.scaling.yarn_log_multiplier", false, &log_mul)) return -1;
        hp->rope_yarn_mscale = (float)(get_mscale(hp->rope_yarn_factor, 1.0) / get_mscale(hp->rope_yarn_factor, log_mul));
    }
    return 0;
}

/* A YaRN "rope_parameters" object (transformers' _compute_yarn_parameters). */
static int hf_yarn(const pith_meta *rp, pith_hparams *hp) {
    float factor = 0, attn = 0, ms = 0, ms_all = 0;
    hp->rope_orig_ctx = hp->ctx_len;
    hp->rope_yarn_beta_fast = 32.0f;
    hp->rope_yarn_beta_slow = 1.0f;
    hp->rope_yarn_truncate = true;
    if (pith_meta_int(rp, "original_max_position_embeddings", false, &hp->rope_orig_ctx) ||
        pith_meta_float(rp, "factor", false, &factor) ||
        pith_meta_float(rp, "beta_fast", false, &hp->rope_yarn_beta_fast) ||
        pith_meta_float(rp, "beta_slow", false, &hp->rope_yarn_beta_slow) ||
        pith_meta_float(rp, "attention_factor", false, &attn) || pith_meta_float(rp, "mscale", false, &ms) ||
        pith_meta_float(rp, "mscale_all_dim", false, &ms_all) || pith_meta_bool(rp, "truncate", &hp->rope_yarn_truncate))
        return -1;
    if (factor == 0 && hp->rope_orig_ctx > 0) factor = (float)hp->ctx_len / (float)hp->rope_orig_ctx;
    if (!(factor > 0 && isfinite(factor)))
        return pith_errf(rp->err, "%s: rope_parameters: yarn factor %g is not a positive number", rp->path, factor);
    if (attn == 0)
        attn = (float)(ms != 0 && ms_all != 0 ? get_mscale(factor, ms) / get_mscale(factor, ms_all) : get_mscale(factor, 1));
    hp->rope_yarn_factor = factor;
    hp->rope_yarn_mscale = attn;
    return 0;
}

/* Transformers v5's "rope_parameters": the base, the scaling (replacing whatever "rope_scaling" said) and
 * the temperature's beta and length. */
static int hf_rope_parameters(const pith_meta *m, const cJSON *rp, pith_hparams *hp, pith_mistral3_params *p) {
    if (!cJSON_IsObject(rp)) return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
    pith_meta sub = *m;
    sub.json = rp;
    char type[32] = "default";
    if (!pith_meta_has(&sub, "rope_type") && pith_meta_str(&sub, "type", type, sizeof type)) return -1;
    if (pith_meta_str(&sub, "rope_type", type, sizeof type) || pith_meta_float(&sub, "rope_theta", false, &hp->rope_theta))
        return -1;
    hp->rope_scale_factor = hp->rope_linear_factor = hp->rope_yarn_factor = 0;
    if (!strcmp(type, "yarn")) {
        if (hf_yarn(&sub, hp)) return -1;
    } else if (strcmp(type, "default")) {
        float factor = 1.0f;
        if (pith_meta_float(&sub, "factor", false, &factor)) return -1;
        if (factor != 1.0f)
            return pith_errf(m->err, "%s: rope_parameters type '%s' (factor %g) is not supported (only yarn)", m->path,
                             type, factor);
    }
    return pith_meta_float(&sub, "llama_4_scaling_beta", false, &p->attn_temp_beta) ||
           pith_meta_int(&sub, "original_max_position_embeddings", false, &p->attn_temp_length);
}

static int mistral3_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_mistral3_params *p = pith_arch_params(hp);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(m->json, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m->json, "rope_scaling");
    if (rp && !cJSON_IsNull(rp)) {
        if (hf_rope_parameters(m, rp, hp, p)) return -1;
    } else if (cJSON_IsObject(rs)) { /* the loader read the scaling itself; the temperature rides along */
        pith_meta sub = *m;
        sub.json = rs;
        if (pith_meta_float(&sub, "llama_4_scaling_beta", false, &p->attn_temp_beta) ||
            pith_meta_int(&sub, "original_max_position_embeddings", false, &p->attn_temp_length))
            return -1;
    }
    /* modeling_ministral3.py: "sliding_window" (null: none) on every layer, as Mistral's */
    if (pith_meta_int(m, "sliding_window", false, &hp->sliding_window)) return -1;
    if (hp->sliding_window > 0) every_layer(hp);
    else hp->sliding_window = 0;
    return 0;
}

static int mistral3_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_mistral3_params *p = pith_mistral3_params_of(hp);
    if (!isfinite(p->attn_temp_beta))
        return pith_errf(err, "%s: attention temperature scale (llama_4_scaling_beta) %g is not a finite number", path,
                         p->attn_temp_beta);
    if (p->attn_temp_beta != 0 && p->attn_temp_length <= 0)
        return pith_errf(err, "%s: attention temperature scale %g needs a positive original context length "
                              "(original_max_position_embeddings / rope.scaling.original_context_length), not %d",
                         path, p->attn_temp_beta, p->attn_temp_length);
    return 0;
}

const pith_arch pith_arch_mistral3 = {
    .name = "mistral3",
    .hf_archs = (const char *const[]){"Mistral3ForConditionalGeneration", "Ministral3ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"mistral3", "ministral3", NULL},
    .hf_text_config = true,
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = mistral3_read_gguf,
    .read_hf = mistral3_read_hf,
    .check = mistral3_check,
    .finish = pith_llama_finish,
    .build = pith_mistral3_build,
    .params_size = sizeof(pith_mistral3_params),
};
