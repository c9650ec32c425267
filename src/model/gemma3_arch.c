/* Gemma 3 (text) descriptor: GGUF arch "gemma3", Hugging Face Gemma3ForCausalLM / model_type
 * "gemma3_text" (see model/arch.h).
 *
 * Layers: attn_norm before attention and post_attention_norm after it (before the residual add),
 * ffn_norm before the GELU-tanh gated feed-forward and post_ffw_norm after it; RMS norms on each Q and K
 * head. Hugging Face names post_attention_layernorm the norm *after* attention (for llama it is the
 * feed-forward's pre-norm), pre_feedforward_layernorm the pre-norm. Gemma's RMSNorm multiplies by
 * (1 + w): GGUF stores w + 1 already (convert_hf_to_gguf.py adds 1 to every *norm.weight), Hugging Face
 * stores w, so the Hugging Face load adds 1 to every norm of the schema (owned F32 copies) and canonical
 * norm weights mean the same in both formats. Both formats rotate halves.
 *
 * Attention: five of every six layers use a sliding window. config.json gives the window as
 * "sliding_window" (null: none) and the layers as "layer_types" ("sliding_attention"/"full_attention";
 * newer transformers) or "sliding_window_pattern" N (older: layer l is global iff (l + 1) % N == 0;
 * default 6). GGUF gives gemma3.attention.sliding_window (absent: none, as newer llama.cpp) and, where a
 * converter wrote one, gemma3.attention.sliding_window_pattern (a period, or one bool per layer, true =
 * window); else llama.cpp's hard-coded period 6.
 * RoPE: global layers use rope_theta with the file's rope scaling (linear 8 on 4B and larger); window
 * layers use the local base, unscaled: config.json "rope_local_base_freq" (default 10000), GGUF
 * gemma3.rope.freq_base_swa where present, else 10000 as llama.cpp hard-codes. Transformers v5's
 * "rope_parameters" {"full_attention": {...}, "sliding_attention": {...}} is read too.
 * Scores are scaled by query_pre_attn_scalar^-1/2 (config.json, default 256); GGUF has no key, so as
 * llama.cpp: 1/sqrt(dim / n_heads) for the 62-layer 27B, else 1/sqrt(head_dim). Soft-capping
 * (final_logit_softcapping, attn_logit_softcapping) is null in Gemma 3 but honoured where given.
 * Embeddings are tied unless the file has output.weight; the forward pass scales them by sqrt(dim).
 * The multimodal Gemma3ForConditionalGeneration nests the text model's config under "text_config" and its
 * tensors under "language_model.model." (or "model.language_model."); its vision tower and projector
 * ("vision_tower.*", "multi_modal_projector.*") are the vision encoder's (model/vision.h), not read here.
 * transformers saves only what differs from Gemma3TextConfig's defaults, so those are the defaults here. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "model/gemma3.h"

#define GGUF_SWA_PERIOD 6
#define GGUF_ROPE_THETA_SWA 10000.0f

static const pith_name_map hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
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
    {NULL, NULL},
};

static const pith_tensor_spec global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"attn_q_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_k_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"post_ffw_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Window on every layer but each period-th: layer l is global iff (l + 1) % period == 0. */
static void swa_period(pith_hparams *hp, int period) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, (l + 1) % period != 0);
}

static int check_period(const pith_meta *m, const char *key, int period) {
    if (period >= 1) return 0;
    return pith_errf(m->err, "%s: %s is %d, expected a positive layer count", m->path, key, period);
}

static int gemma3_read_gguf(const pith_meta *m, pith_hparams *hp) {
    hp->rope_theta_swa = GGUF_ROPE_THETA_SWA;
    if (pith_meta_int(m, "attention.sliding_window", false, &hp->sliding_window) ||
        pith_meta_float(m, "rope.freq_base_swa", false, &hp->rope_theta_swa) ||
        pith_meta_float(m, "final_logit_softcapping", false, &hp->final_logit_softcap) ||
        pith_meta_float(m, "attn_logit_softcapping", false, &hp->attn_logit_softcap))
        return -1;
    if (hp->sliding_window > 0) {
        char key[96];
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
        const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
        bool found = false;
        if (kv && kv->type == PITH_GGUF_ARRAY) {
            if (pith_meta_layers(m, "attention.sliding_window_pattern", hp->n_layers, "true", hp->layer_swa, &found))
                return -1;
        } else {
            int period = GGUF_SWA_PERIOD;
            if (pith_meta_int(m, "attention.sliding_window_pattern", false, &period) || check_period(m, key, period))
                return -1;
            swa_period(hp, period);
        }
    } else {
        hp->sliding_window = 0;
    }
    /* llama.cpp's rule (after gemma_pytorch): the 27B scales by its query width per head. */
    if (hp->n_layers == 62 && hp->n_heads > 0)
        hp->query_scale = (float)(1.0 / sqrt((double)(hp->dim / hp->n_heads)));
    else if (hp->head_dim > 0)
        hp->query_scale = (float)(1.0 / sqrt((double)hp->head_dim));
    return 0;
}

/* Transformers v5: {"full_attention": {"rope_theta", "rope_type", "factor"}, "sliding_attention": {...}}. */
static int read_rope_parameters(const pith_meta *m, pith_hparams *hp) {
    if (!pith_meta_has(m, "rope_parameters")) return 0;
    pith_meta sub = *m;
    const struct cJSON *rp = cJSON_GetObjectItemCaseSensitive(m->json, "rope_parameters");
    if (!cJSON_IsObject(rp)) return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
    static const char *const kinds[] = {"full_attention", "sliding_attention"};
    for (int i = 0; i < 2; i++) {
        sub.json = cJSON_GetObjectItemCaseSensitive(rp, kinds[i]);
        if (!cJSON_IsObject(sub.json)) continue;
        char type[32] = "default";
        float factor = 1.0f;
        if (pith_meta_float(&sub, "rope_theta", false, i ? &hp->rope_theta_swa : &hp->rope_theta) ||
            pith_meta_str(&sub, "rope_type", type, sizeof type) || pith_meta_float(&sub, "factor", false, &factor))
            return -1;
        bool identity = !strcmp(type, "default") || factor == 1.0f;
        if (i == 0 && !strcmp(type, "linear") && factor > 0 && isfinite(factor)) {
            hp->rope_linear_factor = factor == 1.0f ? 0.0f : factor;
        } else if (!identity) {
            return pith_errf(m->err, "%s: rope_parameters.%s type '%s' (factor %g) is not supported", m->path,
                             kinds[i], type, factor);
        }
    }
    return 0;
}

static int gemma3_read_hf(const pith_meta *m, pith_hparams *hp) {
    char act[32] = "gelu_pytorch_tanh";
    float qpas = 256.0f;
    int pattern = 6;
    bool found;
    hp->rope_theta = 1000000.0f;
    hp->rope_theta_swa = 10000.0f;
    hp->ctx_len = 131072;
    hp->tied_embeddings = true;
    hp->sliding_window = 4096;
    if (pith_meta_str(m, "hidden_act", act, sizeof act) || pith_meta_str(m, "hidden_activation", act, sizeof act) ||
        pith_meta_float(m, "rope_theta", false, &hp->rope_theta) ||
        pith_meta_float(m, "rope_local_base_freq", false, &hp->rope_theta_swa) ||
        pith_meta_int(m, "max_position_embeddings", false, &hp->ctx_len) ||
        pith_meta_bool(m, "tie_word_embeddings", &hp->tied_embeddings) ||
        pith_meta_float(m, "query_pre_attn_scalar", false, &qpas) ||
        pith_meta_float(m, "final_logit_softcapping", false, &hp->final_logit_softcap) ||
        pith_meta_float(m, "attn_logit_softcapping", false, &hp->attn_logit_softcap) || read_rope_parameters(m, hp))
        return -1;
    if (strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh"))
        return pith_errf(m->err, "%s: Gemma 3 activation '%s' is not supported (only gelu_pytorch_tanh)", m->path, act);
    if (!hp->head_dim) hp->head_dim = 256;
    if (!(qpas > 0))
        return pith_errf(m->err, "%s: \"query_pre_attn_scalar\" is %g, expected a positive number", m->path, qpas);
    hp->query_scale = (float)(1.0 / sqrt((double)qpas));
    /* "sliding_window": null (or absent from a file that sets it null) means full attention everywhere. */
    const struct cJSON *w = cJSON_GetObjectItemCaseSensitive(m->json, "sliding_window");
    if (cJSON_IsNull(w)) hp->sliding_window = 0;
    else if (pith_meta_int(m, "sliding_window", false, &hp->sliding_window)) return -1;
    if (hp->sliding_window <= 0) {
        hp->sliding_window = 0;
        return 0;
    }
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "sliding_attention", hp->layer_swa, &found)) return -1;
    if (found) return 0;
    if (pith_meta_int(m, "sliding_window_pattern", false, &pattern) ||
        check_period(m, "\"sliding_window_pattern\"", pattern))
        return -1;
    swa_period(hp, pattern);
    return 0;
}

static int gemma3_check(const pith_hparams *hp, const char *path, pith_err *err) {
    if (!(hp->query_scale > 0))
        return pith_errf(err, "%s: Gemma 3 query scale %g is not positive", path, hp->query_scale);
    if (hp->sliding_window > 0 && !(hp->rope_theta_swa > 0))
        return pith_errf(err, "%s: Gemma 3 local RoPE base %g is not positive", path, hp->rope_theta_swa);
    if (hp->rope_scale_factor != 0)
        return pith_errf(err, "%s: llama3 RoPE scaling on Gemma 3 is not supported", path);
    return 0;
}

static bool is_norm(const pith_tensor_spec *s) {
    size_t n = strlen(s->name);
    return s->ne1 == PITH_D_NONE && n >= 11 && !strcmp(s->name + n - 11, "norm.weight");
}

/* Hugging Face norms store w for (1 + w): add the 1 GGUF already holds. */
static int shift_norms(pith_model_file *f, const pith_hparams *hp, pith_err *err) {
    for (int l = -1; l < hp->n_layers; l++) {
        for (const pith_tensor_spec *s = l < 0 ? global : layer; s->name; s++) {
            if (!is_norm(s)) continue;
            char name[96];
            if (l < 0) snprintf(name, sizeof name, "%s", s->name);
            else snprintf(name, sizeof name, "blk.%d.%s", l, s->name);
            float *w;
            int64_t n;
            if (pith_mf_own_vector(f, name, &w, &n, err)) return -1;
            for (int64_t i = 0; i < n; i++) w[i] += 1.0f;
        }
    }
    return 0;
}

static int gemma3_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    hp->has_qk_norm = true;
    hp->has_qkv_bias = false;
    return pith_model_file_format(f) == PITH_FORMAT_SAFETENSORS ? shift_norms(f, hp, err) : 0;
}

const pith_arch pith_arch_gemma3 = {
    .name = "gemma3",
    .hf_archs = (const char *const[]){"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"gemma3_text", "gemma3", NULL},
    .hf_text_config = true,
    /* transformers' Gemma3TextConfig */
    .hf_defaults = "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216, "
                   "\"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                   "\"head_dim\": 256, \"rms_norm_eps\": 1e-6, \"bos_token_id\": 2, \"eos_token_id\": 1}",
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = hf_global,
    .hf_layer = hf_layer,
    .global = global,
    .layer = layer,
    .read_gguf = gemma3_read_gguf,
    .read_hf = gemma3_read_hf,
    .check = gemma3_check,
    .finish = gemma3_finish,
    .build = pith_gemma3_build,
};
