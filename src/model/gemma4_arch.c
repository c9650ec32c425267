/* Gemma 4 (text) descriptor: GGUF arch "gemma4", Hugging Face Gemma4ForCausalLM (model_type "gemma4_text")
 * and the text model of Gemma4ForConditionalGeneration (config under "text_config", tensors under
 * "model.language_model."; the vision and audio towers are ignored). See model/arch.h.
 *
 * Facts from transformers' models/gemma4/configuration_gemma4.py and modeling_gemma4.py (Gemma4TextConfig,
 * Gemma4TextAttention, Gemma4TextDecoderLayer, Gemma4TextModel) and llama.cpp's LLM_ARCH_GEMMA4
 * (src/models/gemma4-iswa.cpp, llama-model.cpp's hparams and tensors, convert_hf_to_gguf.py's Gemma4Model):
 *
 *  - Layers as Gemma 3 (attn_norm, post_attention_norm, ffn_norm, GELU-tanh gated FFN, post_ffw_norm, RMS
 *    norms on each Q and K head) but norms multiply by w, not 1 + w: Gemma4RMSNorm scales by its weight
 *    and the converter's norm_shift is 0, so both formats store w and nothing is shifted at load.
 *  - Window ("sliding_attention") and global ("full_attention") layers have different shapes: the window
 *    layers' heads are head_dim wide (GGUF attention.key_length_swa), the global layers' global_head_dim
 *    (GGUF attention.key_length), with num_key_value_heads and, under attention_k_eq_v,
 *    num_global_key_value_heads KV heads (GGUF: head_count_kv per layer). Under attention_k_eq_v a global
 *    layer has no v_proj: V is the K projection (before K's norm and RoPE). A layer without attn_v.weight
 *    reads V from attn_k.weight in both formats, as llama.cpp does.
 *  - V is RMS-normed per head without a weight (v_norm, with_scale=False; llama.cpp ggml_rms_norm).
 *  - Scores are not scaled (self.scaling = 1.0; llama.cpp f_attention_scale = 1, no GGUF key).
 *  - RoPE (rotate-half in both formats): window layers "default" with the local base (config.json
 *    rope_parameters.sliding_attention.rope_theta, default 10000; GGUF rope.freq_base_swa, absent: the
 *    global base, as llama.cpp); global layers "proportional": only the first partial_rotary_factor
 *    (default 0.25) of the head's frequency pairs rotate, at theta^(-2i / global_head_dim) (default base
 *    1e6), divided by rope_parameters.full_attention.factor; GGUF stores the same as rope_freqs.weight
 *    (1 for a rotating pair, 1e30 for the others: llama.cpp divides each frequency by it).
 *  - Each layer ends by multiplying the residual stream by layer_scalar (GGUF layer_output_scale; absent:
 *    1); embeddings are scaled by sqrt(hidden) (the embedding dtype's rounding of it in transformers);
 *    logits soft-capped by final_logit_softcapping (null: none).
 *  - The window pattern: config.json "layer_types" (default: every 6th layer global), the last layer
 *    always global (Gemma4TextConfig forces it); GGUF attention.sliding_window_pattern, one bool per layer
 *    (true = window), or a period.
 *
 *  - Per-layer embeddings (the E2B / E4B models; hidden_size_per_layer_input P > 0, GGUF
 *    embedding_length_per_layer_input): a second token table of n_layers x P per token
 *    (per_layer_token_embd, times sqrt(P)) plus a projection of the scaled embeddings (per_layer_model_proj
 *    times hidden^-1/2, RMS-normed per layer by per_layer_proj_norm), summed and times 2^-1/2, give each
 *    layer its input p_l; after its FFN the layer adds RMSNorm_post_norm(proj(gelu_tanh(inp_gate x) * p_l)).
 *  - KV sharing: the last num_kv_shared_layers layers (GGUF attention.shared_kv_layers) have no K/V
 *    projections and attend over the K and V of the last earlier layer of their kind (transformers'
 *    store_full_length_kv; llama.cpp's n_layer_kv_from_start); under use_double_wide_mlp their FFN is
 *    2 x intermediate_size wide (GGUF: feed_forward_length per layer).
 *
 *  - Experts (the 26B-A4B model; config.json enable_moe_block with num_experts, top_k_experts,
 *    moe_intermediate_size; GGUF expert_count, expert_used_count, expert_feed_forward_length): every
 *    layer runs its dense MLP (intermediate_size; GGUF feed_forward_length) and routed experts beside it
 *    (Gemma4TextDecoderLayer). Tensors (Hugging Face -> GGUF, as llama.cpp's LLM_ARCH_GEMMA4):
 *    router.proj.weight -> ffn_gate_inp.weight, router.scale -> ffn_gate_inp.scale,
 *    router.per_expert_scale -> ffn_down_exps.scale, experts.gate_up_proj ([experts][2 x moe width][hidden],
 *    gate rows first) -> ffn_gate_up_exps.weight (GGUF may split it into ffn_gate_exps and ffn_up_exps),
 *    experts.down_proj -> ffn_down_exps.weight, pre/post_feedforward_layernorm_2 -> pre/post_ffw_norm_2,
 *    post_feedforward_layernorm_1 -> post_ffw_norm_1. Softmax gating, the top k renormalised and no
 *    routed scale are fixed in both (no keys; llama.cpp hard-codes them in gemma4-iswa.cpp).
 *
 * Refused with a message rather than run wrong: Q/K/V biases, bidirectional attention, a partial rotary on window layers, a RoPE type
 * other than these two, a per-layer vocabulary other than the model's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "model/gemma4.h"

#define DEFAULT_GLOBAL_HEAD_DIM 512     /* Gemma4TextConfig's global_head_dim default */
#define DEFAULT_PARTIAL_ROTARY 0.25f    /* its full_attention rope_parameters default */
#define DEFAULT_SWA_PERIOD 6
#define PITH_GEMMA4_MAX_EXPERTS 1024   /* PITH_BE_MAX_EXPERTS: what every backend's MoE op takes */

static const pith_name_map hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    {NULL, NULL},
};

static const pith_name_map hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
    {"per_layer_input_gate.weight", "inp_gate.weight"},
    {"per_layer_projection.weight", "proj.weight"},
    {"post_per_layer_input_norm.weight", "post_norm.weight"},
    {"router.proj.weight", "ffn_gate_inp.weight"},
    {"router.scale", "ffn_gate_inp.scale"},
    {"router.per_expert_scale", "ffn_down_exps.scale"},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight"},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
    {NULL, NULL},
};

static bool window_layer(const pith_hparams *hp, int l) {
    return hp->sliding_window > 0 && pith_layer_bit(hp->layer_swa, l);
}

/* a window layer with K and V of its own */
static bool window_kv_layer(const pith_hparams *hp, int l) {
    return window_layer(hp, l) && l < pith_gemma4_first_shared(hp);
}

/* a layer whose FFN is ffn_dim wide (the double-wide ones are checked by gemma4.c) */
static bool narrow_ffn(const pith_hparams *hp, int l) {
    return !pith_gemma4_params_of(hp)->double_wide || l < pith_gemma4_first_shared(hp);
}

static bool moe_layer(const pith_hparams *hp, int l) {
    (void)l;
    return hp->n_experts > 0;
}

static const pith_tensor_spec global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* The schema's symbolic widths are the window layers' (pith_hparams.head_dim, n_kv_heads); a global
 * layer's attention tensors have the global shape and are bound, shape-checked, by gemma4.c. */
static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, window_layer},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, window_kv_layer},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_OPTIONAL, window_kv_layer},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, window_layer},
    {"attn_q_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, window_layer},
    {"attn_k_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, window_kv_layer},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, narrow_ffn},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, narrow_ffn},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, narrow_ffn},
    {"post_ffw_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    /* the experts' norms; the router and experts are bound and shape-checked by the backend's MoE load */
    {"post_ffw_norm_1.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, moe_layer},
    {"post_ffw_norm_2.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, moe_layer},
    {NULL, 0, 0, 0, NULL},
};

static void swa_period(pith_hparams *hp, int period) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, (l + 1) % period != 0);
}

/* What this build does not run, and the new widths' ranges, from either format. */
static int refuse_unsupported(const pith_meta *m, pith_hparams *hp, const pith_gemma4_params *P, bool gguf) {
    if (P->ple_dim < 0 || P->ple_dim > (1 << 16))
        return pith_errf(m->err, "%s: %s is %d, expected a width in 0..65536", m->path,
                         gguf ? "embedding_length_per_layer_input" : "\"hidden_size_per_layer_input\"", P->ple_dim);
    if (P->kv_shared_layers < 0 || P->kv_shared_layers >= hp->n_layers)
        return pith_errf(m->err, "%s: %s is %d, expected fewer than the %d layers", m->path,
                         gguf ? "attention.shared_kv_layers" : "\"num_kv_shared_layers\"", P->kv_shared_layers,
                         hp->n_layers);
    if (hp->n_experts == 0) return 0;
    /* the experts: softmax over all of them, the top k renormalised, no routed scale (fixed in both) */
    hp->expert_gating = PITH_GATING_SOFTMAX;
    hp->expert_norm_topk = true;
    hp->expert_weights_scale = 0;
    if (hp->n_experts < 1 || hp->n_experts > PITH_GEMMA4_MAX_EXPERTS)
        return pith_errf(m->err, "%s: %s is %d, expected 1..%d", m->path, gguf ? "expert_count" : "\"num_experts\"",
                         hp->n_experts, PITH_GEMMA4_MAX_EXPERTS);
    if (hp->n_experts_used < 1 || hp->n_experts_used > hp->n_experts)
        return pith_errf(m->err, "%s: %s is %d, expected 1..%d (the experts)", m->path,
                         gguf ? "expert_used_count" : "\"top_k_experts\"", hp->n_experts_used, hp->n_experts);
    if (hp->expert_ffn_dim < 1 || hp->expert_ffn_dim > (1 << 20))
        return pith_errf(m->err, "%s: %s is %d, expected a width", m->path,
                         gguf ? "expert_feed_forward_length" : "\"moe_intermediate_size\"", hp->expert_ffn_dim);
    return 0;
}

static int gemma4_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_gemma4_params *P = pith_arch_params(hp);
    char key[96];
    int value_swa = -1, rot_swa = -1;
    /* the common reader took key_length as the head width: the global layers' */
    P->head_dim_full = hp->head_dim;
    P->rope_factor_full = 1.0f;
    hp->rope_theta_swa = hp->rope_theta; /* llama.cpp: rope_freq_base_train_swa defaults to the global base */
    hp->query_scale = 1.0f;
    if (pith_meta_int(m, "attention.key_length_swa", false, &hp->head_dim) ||
        pith_meta_int(m, "attention.value_length_swa", false, &value_swa) ||
        pith_meta_int(m, "rope.dimension_count_swa", false, &rot_swa) ||
        pith_meta_float(m, "rope.freq_base_swa", false, &hp->rope_theta_swa) ||
        pith_meta_int(m, "attention.sliding_window", false, &hp->sliding_window) ||
        pith_meta_float(m, "final_logit_softcapping", false, &hp->final_logit_softcap) ||
        pith_meta_int(m, "embedding_length_per_layer_input", false, &P->ple_dim) ||
        pith_meta_int(m, "attention.shared_kv_layers", false, &P->kv_shared_layers) ||
        pith_meta_int(m, "expert_count", false, &hp->n_experts))
        return -1;
    /* llama.cpp reads both where expert_count is set */
    if (hp->n_experts > 0 && (pith_meta_int(m, "expert_used_count", true, &hp->n_experts_used) ||
                              pith_meta_int(m, "expert_feed_forward_length", true, &hp->expert_ffn_dim)))
        return -1;
    if (value_swa != -1 && value_swa != hp->head_dim)
        return pith_errf(m->err, "%s: %s.attention.value_length_swa %d differs from key_length_swa %d", m->path,
                         m->arch, value_swa, hp->head_dim);
    if (rot_swa != -1 && rot_swa != hp->head_dim)
        return pith_errf(m->err, "%s: %s.rope.dimension_count_swa %d: a partial rotary on window layers is not "
                         "supported", m->path, m->arch, rot_swa);
    if (refuse_unsupported(m, hp, P, true)) return -1;
    /* the window pattern: one bool per layer (true: window), or a period */
    if (hp->sliding_window > 0) {
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
        const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
        bool found = false;
        if (kv && kv->type == PITH_GGUF_ARRAY) {
            if (pith_meta_layers(m, "attention.sliding_window_pattern", hp->n_layers, "true", hp->layer_swa, &found))
                return -1;
        } else {
            int period = DEFAULT_SWA_PERIOD;
            if (pith_meta_int(m, "attention.sliding_window_pattern", false, &period)) return -1;
            if (period < 1)
                return pith_errf(m->err, "%s: %s is %d, expected a positive layer count", m->path, key, period);
            swa_period(hp, period);
        }
    } else {
        hp->sliding_window = 0;
    }
    /* KV heads: one count, or one per layer (the converter writes the window and global counts) */
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
    if (!kv || kv->type != PITH_GGUF_ARRAY) {
        if (hp->n_kv_heads == -1) hp->n_kv_heads = hp->n_heads;
        P->n_kv_heads_full = hp->n_kv_heads;
    } else {
        if (kv->arr_n != (uint64_t)hp->n_layers || hp->n_layers > PITH_MAX_LAYERS)
            return pith_errf(m->err, "%s: %s has %llu entries, expected one per layer (%d)", m->path, key,
                             (unsigned long long)kv->arr_n, hp->n_layers);
        int kinds[2] = {0, 0}; /* window, global */
        for (int l = 0; l < hp->n_layers; l++) {
            int64_t v;
            int *kind = &kinds[pith_layer_bit(hp->layer_swa, l) && hp->sliding_window > 0 ? 0 : 1];
            if (!pith_gguf_arr_i64(kv, (uint64_t)l, &v) || v < 1 || v > hp->n_heads)
                return pith_errf(m->err, "%s: %s entry %d is not a head count in 1..%d", m->path, key, l, hp->n_heads);
            if (*kind && *kind != v)
                return pith_errf(m->err, "%s: %s: layers of one kind with different KV head counts (%d, %lld)", m->path,
                                 key, *kind, (long long)v);
            *kind = (int)v;
        }
        hp->n_kv_heads = kinds[0] ? kinds[0] : kinds[1];
        P->n_kv_heads_full = kinds[1] ? kinds[1] : kinds[0];
    }
    /* per layer feed-forward widths: one width, or the converter's double-wide MLP (twice the width in the
     * KV-shared layers) */
    snprintf(key, sizeof key, "%s.feed_forward_length", m->arch);
    const pith_gguf_kv *ff = pith_gguf_find(m->gguf, key);
    if (ff && ff->type == PITH_GGUF_ARRAY) {
        int first = hp->n_layers - P->kv_shared_layers;
        if (ff->arr_n != (uint64_t)hp->n_layers)
            return pith_errf(m->err, "%s: %s has %llu entries, expected one per layer (%d)", m->path, key,
                             (unsigned long long)ff->arr_n, hp->n_layers);
        for (int l = 0; l < hp->n_layers; l++) {
            int64_t v;
            if (!pith_gguf_arr_i64(ff, (uint64_t)l, &v) || v < 1 || v > (1 << 20))
                return pith_errf(m->err, "%s: %s entry %d is not a width", m->path, key, l);
            if (l == 0) hp->ffn_dim = (int)v;
            else if (l == first && v == 2 * (int64_t)hp->ffn_dim) P->double_wide = true;
            if (v != hp->ffn_dim * (P->double_wide && l >= first ? 2 : 1))
                return pith_errf(m->err, "%s: %s: entry %d is %lld; only one width, or twice it in the KV-shared "
                                 "layers (the double-wide MLP), is supported", m->path, key, l, (long long)v);
        }
    }
    return 0;
}

/* rope_parameters {"sliding_attention": {"rope_type": "default", "rope_theta"}, "full_attention":
 * {"rope_type": "proportional", "partial_rotary_factor", "rope_theta", "factor"}}. */
static int read_rope_parameters(const pith_meta *m, pith_hparams *hp, pith_gemma4_params *P, float *partial) {
    if (!pith_meta_has(m, "rope_parameters")) return 0;
    const struct cJSON *rp = cJSON_GetObjectItemCaseSensitive(m->json, "rope_parameters");
    if (!cJSON_IsObject(rp)) return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
    static const char *const kinds[] = {"full_attention", "sliding_attention"};
    for (int i = 0; i < 2; i++) {
        pith_meta sub = *m;
        sub.json = cJSON_GetObjectItemCaseSensitive(rp, kinds[i]);
        if (!sub.json) continue;
        if (!cJSON_IsObject(sub.json))
            return pith_errf(m->err, "%s: rope_parameters.%s is not an object", m->path, kinds[i]);
        char type[32] = "default";
        float factor = 1.0f, part = i ? 1.0f : *partial;
        if (pith_meta_float(&sub, "rope_theta", false, i ? &hp->rope_theta_swa : &hp->rope_theta) ||
            pith_meta_str(&sub, "rope_type", type, sizeof type) || pith_meta_float(&sub, "factor", false, &factor) ||
            pith_meta_float(&sub, "partial_rotary_factor", false, &part))
            return -1;
        bool ok = i == 0 ? !strcmp(type, "proportional") || (!strcmp(type, "default") && factor == 1.0f)
                         : !strcmp(type, "default") && part == 1.0f;
        if (!ok)
            return pith_errf(m->err, "%s: rope_parameters.%s type '%s' (factor %g, partial_rotary_factor %g) is not "
                             "supported", m->path, kinds[i], type, factor, part);
        if (!(factor > 0) || !isfinite(factor) || !(part > 0) || part > 1)
            return pith_errf(m->err, "%s: rope_parameters.%s: factor %g, partial_rotary_factor %g out of range",
                             m->path, kinds[i], factor, part);
        if (i == 0) {
            P->rope_factor_full = factor;
            /* "default" rotates every pair of the global head */
            *partial = !strcmp(type, "default") ? 1.0f : part;
        }
    }
    return 0;
}

static int gemma4_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_gemma4_params *P = pith_arch_params(hp);
    char act[32] = "gelu_pytorch_tanh", bidir[16] = "";
    bool k_eq_v = false, moe = false, bias = false, double_wide = false, found;
    int vocab_pl = hp->n_vocab;
    float partial = DEFAULT_PARTIAL_ROTARY;
    int global_kv = 0;
    hp->rope_theta = 1000000.0f;
    hp->rope_theta_swa = 10000.0f;
    hp->ctx_len = 131072;
    hp->tied_embeddings = true;
    hp->sliding_window = 512;
    hp->query_scale = 1.0f;
    if (!hp->head_dim) hp->head_dim = 256;
    P->head_dim_full = DEFAULT_GLOBAL_HEAD_DIM;
    P->ple_dim = 256; /* Gemma4TextConfig's default: a config without the key has per-layer embeddings */
    P->rope_factor_full = 1.0f;
    if (pith_meta_str(m, "hidden_activation", act, sizeof act) ||
        pith_meta_int(m, "max_position_embeddings", false, &hp->ctx_len) ||
        pith_meta_bool(m, "tie_word_embeddings", &hp->tied_embeddings) ||
        pith_meta_float(m, "final_logit_softcapping", false, &hp->final_logit_softcap) ||
        pith_meta_int(m, "global_head_dim", false, &P->head_dim_full) ||
        pith_meta_int(m, "num_global_key_value_heads", false, &global_kv) ||
        pith_meta_bool(m, "attention_k_eq_v", &k_eq_v) ||
        pith_meta_int(m, "num_kv_shared_layers", false, &P->kv_shared_layers) ||
        pith_meta_int(m, "hidden_size_per_layer_input", false, &P->ple_dim) ||
        pith_meta_bool(m, "enable_moe_block", &moe) || pith_meta_bool(m, "attention_bias", &bias) ||
        (moe && (pith_meta_int(m, "num_experts", true, &hp->n_experts) ||
                 pith_meta_int(m, "top_k_experts", true, &hp->n_experts_used) ||
                 pith_meta_int(m, "moe_intermediate_size", true, &hp->expert_ffn_dim))) ||
        pith_meta_bool(m, "use_double_wide_mlp", &double_wide) ||
        pith_meta_int(m, "vocab_size_per_layer_input", false, &vocab_pl) ||
        pith_meta_str(m, "use_bidirectional_attention", bidir, sizeof bidir) ||
        read_rope_parameters(m, hp, P, &partial))
        return -1;
    /* null: none (transformers tests it for truth), unlike an absent key */
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m->json, "hidden_size_per_layer_input"))) P->ple_dim = 0;
    if (strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh"))
        return pith_errf(m->err, "%s: Gemma 4 activation '%s' is not supported (only gelu_pytorch_tanh)", m->path, act);
    if (bias) return pith_errf(m->err, "%s: Gemma 4 with \"attention_bias\" is not supported", m->path);
    if (!strcmp(bidir, "all"))
        return pith_errf(m->err, "%s: \"use_bidirectional_attention\": \"all\" (an encoder) is not supported", m->path);
    if (moe && hp->n_experts < 1)
        return pith_errf(m->err, "%s: \"enable_moe_block\" with \"num_experts\" %d", m->path, hp->n_experts);
    if (refuse_unsupported(m, hp, P, false)) return -1;
    if (P->ple_dim > 0 && vocab_pl != hp->n_vocab)
        return pith_errf(m->err, "%s: \"vocab_size_per_layer_input\" %d differs from the vocabulary (%d): not "
                         "supported", m->path, vocab_pl, hp->n_vocab);
    /* Gemma4TextMLP: twice the width where the layer is KV-shared (and some layer is) */
    P->double_wide = double_wide && P->kv_shared_layers > 0;
    if (P->head_dim_full < 2 || P->head_dim_full % 2 || P->head_dim_full > (1 << 16))
        return pith_errf(m->err, "%s: \"global_head_dim\" is %d, expected an even head width", m->path,
                         P->head_dim_full);
    if (!hp->n_kv_heads) hp->n_kv_heads = hp->n_heads;
    P->n_kv_heads_full = k_eq_v && global_kv > 0 ? global_kv : hp->n_kv_heads;
    P->k_eq_v = k_eq_v;
    P->rope_pairs_full = (int)(partial * (float)P->head_dim_full / 2.0f);
    /* "sliding_window": null means full attention everywhere */
    const struct cJSON *w = cJSON_GetObjectItemCaseSensitive(m->json, "sliding_window");
    if (cJSON_IsNull(w)) hp->sliding_window = 0;
    else if (pith_meta_int(m, "sliding_window", false, &hp->sliding_window)) return -1;
    if (hp->sliding_window <= 0) {
        hp->sliding_window = 0;
        return 0;
    }
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "sliding_attention", hp->layer_swa, &found)) return -1;
    if (!found) swa_period(hp, DEFAULT_SWA_PERIOD);
    /* Gemma4TextConfig: the last layer is always global */
    if (hp->n_layers > 0 && hp->n_layers <= PITH_MAX_LAYERS) pith_layer_set(hp->layer_swa, hp->n_layers - 1, false);
    return 0;
}

static int gemma4_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_gemma4_params *P = pith_gemma4_params_of(hp);
    if (P->head_dim_full < 2 || P->head_dim_full % 2 || P->head_dim_full > (1 << 16))
        return pith_errf(err, "%s: Gemma 4 global head width %d is not an even width", path, P->head_dim_full);
    if (P->n_kv_heads_full < 1 || P->n_kv_heads_full > hp->n_heads || hp->n_heads % P->n_kv_heads_full)
        return pith_errf(err, "%s: Gemma 4 global layers' %d KV heads do not divide %d heads", path,
                         P->n_kv_heads_full, hp->n_heads);
    if (hp->head_dim % 2) return pith_errf(err, "%s: Gemma 4 head width %d is odd", path, hp->head_dim);
    if (P->rope_pairs_full < 0 || P->rope_pairs_full > P->head_dim_full / 2)
        return pith_errf(err, "%s: Gemma 4 global RoPE over %d pairs of a %d-wide head", path, P->rope_pairs_full,
                         P->head_dim_full);
    if (!(P->rope_factor_full > 0) || !isfinite(P->rope_factor_full))
        return pith_errf(err, "%s: Gemma 4 global RoPE factor %g", path, P->rope_factor_full);
    if (hp->sliding_window > 0 && !(hp->rope_theta_swa > 0))
        return pith_errf(err, "%s: Gemma 4 local RoPE base %g is not positive", path, hp->rope_theta_swa);
    if (hp->rope_scale_factor != 0 || hp->rope_linear_factor != 0 || hp->rope_yarn_factor != 0)
        return pith_errf(err, "%s: RoPE scaling (rope.scaling.* / rope_scaling) on Gemma 4 is not supported", path);
    return 0;
}

static int gemma4_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    (void)f, (void)err;
    hp->has_qk_norm = true;
    hp->has_qkv_bias = false;
    return 0;
}

const pith_arch pith_arch_gemma4 = {
    .name = "gemma4",
    .hf_archs = (const char *const[]){"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"gemma4_text", "gemma4", NULL},
    .hf_text_config = true,
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = hf_global,
    .hf_layer = hf_layer,
    .global = global,
    .layer = layer,
    .read_gguf = gemma4_read_gguf,
    .read_hf = gemma4_read_hf,
    .check = gemma4_check,
    .finish = gemma4_finish,
    .build = pith_gemma4_build,
    .params_size = sizeof(pith_gemma4_params),
    .partial_rotary = true,
};
