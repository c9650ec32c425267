/* Phi-3 and Phi-4 text models (`phi3`; Hugging Face Phi3ForCausalLM, model_type "phi3", which Phi-4 and
 * Phi-4-mini use too): a Llama-shaped pre-norm decoder whose projections are fused and whose long-context
 * models use LongRoPE. The math follows transformers' models/phi3/modeling_phi3.py and
 * configuration_phi3.py; the GGUF side llama.cpp's src/models/phi3.cpp (LLM_ARCH_PHI3), llama-model.cpp
 * and convert_hf_to_gguf.py (Phi3MiniModel).
 *
 * Tensors. Hugging Face self_attn.qkv_proj.weight holds the [q | k | v] rows (n_heads * head_dim, then
 * n_kv_heads * head_dim twice) and mlp.gate_up_proj.weight the [gate | up] rows (2 x intermediate_size:
 * Phi3MLP chunks the product in two and multiplies the second half by silu of the first). The converter
 * keeps both fused, as GGUF blk.N.attn_qkv.weight and blk.N.ffn_up.weight (2 x feed_forward_length rows;
 * llama.cpp's graph runs it as LLM_FFN_SWIGLU, the first half the gate), and permutes nothing: llama.cpp
 * rotates phi3 NEOX-style (halves), as transformers does. llama.cpp also accepts separate
 * blk.N.attn_q/k/v.weight (create_tensor_qkv): they are read too, in every layer or none. Both shapes are
 * checked here at open (finish), since the schema has no symbol for a fused width.
 *
 * RoPE. Plain (Phi-3-mini-4k, Phi-4) or LongRoPE: config.json "rope_scaling" {"type"/"rope_type":
 * "longrope" (formerly "su"; configuration_phi3.py turns "su" and "yarn" into "longrope"), "short_factor",
 * "long_factor": rotated-width / 2 divisors of the frequencies each}, the original context
 * "original_max_position_embeddings" (top level, Phi3Config's default 4096; a "rope_scaling" /
 * "rope_parameters" entry of that name wins), and the attention factor "attention_factor", else
 * sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original (1 when s <= 1), as
 * modeling_rope_utils.py's _compute_longrope_parameters: cos and sin are multiplied by it whichever list is
 * in use. GGUF stores the lists as the global tensors rope_factors_long.weight and
 * rope_factors_short.weight, the original context as rope.scaling.original_context_length (absent:
 * context_length, llama.cpp's n_ctx_orig_yarn) and the factor as rope.scaling.attn_factor (absent: 1);
 * no rope.scaling.type is written. Which list applies is chosen in phi3.c (by the configured context, as
 * llama.cpp does). A partial rotary ("partial_rotary_factor", Phi-4-mini's 0.75; GGUF
 * rope.dimension_count) rotates the first int(head_dim * factor) dimensions of each head.
 *
 * Sliding window. modeling_phi3.py masks with config.sliding_window whenever it is set (Phi-3-mini-4k:
 * 2047; the 128k models: 262144, more than their context), every layer alike, key positions
 * [p - W + 1, p]; GGUF phi3.attention.sliding_window (0 for Phi-4, whose config has none). llama.cpp
 * disables Phi-3's window and attends to the whole context (a warning in llama_model_phi3's
 * load_arch_hparams); Pith does what the model's code does and applies it in both formats. A window no
 * shorter than the trained context is none. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "model/llama_arch.h"
#include "model/phi3.h"

_Static_assert(sizeof(pith_phi3_params) <= 1024, "phi3's hyper-parameters must fit the model file's storage");

static const pith_name_map phi3_hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

static const pith_tensor_spec phi3_global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL}, /* absent: tied (Phi-4-mini) */
    {NULL, 0, 0, 0, NULL},
};

/* attn_qkv.weight ([dim, q + 2 kv]) and ffn_up.weight ([dim, 2 ffn]) have no symbolic shape: finish
 * checks them. */
static const pith_tensor_spec phi3_layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_ALL_OR_NONE, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_ALL_OR_NONE, NULL},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_ALL_OR_NONE, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Every layer windowed by w, or none (0, or a window no shorter than the trained context: the same). */
static int set_window(const pith_meta *m, pith_hparams *hp, int w, const char *key) {
    if (w < 0) return pith_errf(m->err, "%s: %s %d is negative", m->path, key, w);
    hp->sliding_window = w > 0 && w < hp->ctx_len ? w : 0;
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(hp->layer_swa, l, hp->sliding_window > 0);
    return 0;
}

static int phi3_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_phi3_params *P = pith_arch_params(hp);
    int window = 0;
    P->orig_ctx = hp->ctx_len;
    P->attn_factor = 1.0f;
    if (pith_meta_int(m, "rope.dimension_count", false, &P->rope_dim) ||
        pith_meta_int(m, "rope.scaling.original_context_length", false, &P->orig_ctx) ||
        pith_meta_float(m, "rope.scaling.attn_factor", false, &P->attn_factor) ||
        pith_meta_int(m, "attention.sliding_window", false, &window))
        return -1;
    return set_window(m, hp, window, "attention.sliding_window");
}

/* A list of numbers (LongRoPE factors) into out[PITH_PHI3_MAX_FACTORS]; *n its length. */
static int read_factors(const pith_meta *m, const cJSON *rs, const char *key, float *out, int *n) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!cJSON_IsArray(j)) return pith_errf(m->err, "%s: LongRoPE \"%s\" is missing or not a list", m->path, key);
    int i = 0;
    for (const cJSON *e = j->child; e; e = e->next, i++) {
        if (i == PITH_PHI3_MAX_FACTORS)
            return pith_errf(m->err, "%s: LongRoPE \"%s\" has more than %d entries (not supported)", m->path, key,
                             PITH_PHI3_MAX_FACTORS);
        if (!cJSON_IsNumber(e)) return pith_errf(m->err, "%s: LongRoPE \"%s\" entry %d is not a number", m->path, key, i);
        out[i] = (float)e->valuedouble;
    }
    *n = i;
    return 0;
}

static int phi3_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_phi3_params *P = pith_arch_params(hp);
    float partial = 1.0f;
    int window = 0;
    P->orig_ctx = 4096; /* configuration_phi3.py's default */
    if (pith_meta_float(m, "partial_rotary_factor", false, &partial) ||
        pith_meta_int(m, "original_max_position_embeddings", false, &P->orig_ctx) ||
        pith_meta_int(m, "sliding_window", false, &window))
        return -1;
    /* "rope_scaling" as released configs write it, else the "rope_parameters" of newer transformers (which
     * the loader does not read: a kind other than these is refused here) */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "rope_scaling");
    bool params = false;
    if (!rs || cJSON_IsNull(rs)) {
        params = true;
        rs = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "rope_parameters");
        if (rs && !cJSON_IsNull(rs) && !cJSON_IsObject(rs))
            return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
    }
    if (cJSON_IsObject(rs)) {
        pith_meta r = *m;
        r.json = rs;
        if (pith_meta_float(&r, "rope_theta", false, &hp->rope_theta) ||
            pith_meta_float(&r, "partial_rotary_factor", false, &partial) ||
            pith_meta_int(&r, "original_max_position_embeddings", false, &P->orig_ctx))
            return -1;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (params && *t && strcmp(t, "default") && strcmp(t, "longrope") && strcmp(t, "su") && strcmp(t, "yarn"))
            return pith_errf(m->err, "%s: rope_parameters.rope_type '%s' is not supported for phi3 (default or longrope)",
                             m->path, t);
        if (!strcmp(t, "longrope") || !strcmp(t, "su") || !strcmp(t, "yarn")) {
            int n_long = 0;
            float attn = 0;
            if (read_factors(m, rs, "short_factor", P->short_factor, &P->n_factors) ||
                read_factors(m, rs, "long_factor", P->long_factor, &n_long) ||
                pith_meta_float(&r, "attention_factor", false, &attn))
                return -1;
            if (n_long != P->n_factors)
                return pith_errf(m->err, "%s: LongRoPE \"short_factor\" has %d entries and \"long_factor\" %d", m->path,
                                 P->n_factors, n_long);
            if (P->orig_ctx < 1)
                return pith_errf(m->err, "%s: \"original_max_position_embeddings\" %d is not positive", m->path,
                                 P->orig_ctx);
            if (attn == 0) {
                double s = (double)hp->ctx_len / P->orig_ctx;
                attn = s <= 1 ? 1.0f : (float)sqrt(1 + log(s) / log((double)P->orig_ctx));
            }
            P->attn_factor = attn;
            if (P->n_factors == 0) return pith_errf(m->err, "%s: LongRoPE factor lists are empty", m->path);
        }
    }
    if (!(partial > 0 && partial <= 1))
        return pith_errf(m->err, "%s: partial_rotary_factor %g is not in (0, 1]", m->path, partial);
    /* transformers: int(head_dim * partial_rotary_factor), head_dim defaulting to hidden / heads */
    int hd = hp->head_dim > 0 ? hp->head_dim : hp->n_heads > 0 ? hp->dim / hp->n_heads : 0;
    P->rope_dim = (int)(hd * (double)partial);
    return set_window(m, hp, window, "sliding_window");
}

static int check_factors(const pith_phi3_params *P, int n_rot, const char *path, pith_err *err) {
    if (P->n_factors != n_rot / 2)
        return pith_errf(err, "%s: LongRoPE has %d factors per list, expected %d (half the %d rotated dimensions)",
                         path, P->n_factors, n_rot / 2, n_rot);
    for (int i = 0; i < P->n_factors; i++)
        if (!(P->short_factor[i] > 0 && isfinite(P->short_factor[i]) && P->long_factor[i] > 0 &&
              isfinite(P->long_factor[i])))
            return pith_errf(err, "%s: LongRoPE factor %d (short %g, long %g) is not a positive number", path, i,
                             P->short_factor[i], P->long_factor[i]);
    if (P->orig_ctx < 1) return pith_errf(err, "%s: LongRoPE original context %d is not positive", path, P->orig_ctx);
    if (!(P->attn_factor > 0 && isfinite(P->attn_factor)))
        return pith_errf(err, "%s: LongRoPE attention factor %g is not a positive number", path, P->attn_factor);
    return 0;
}

static int phi3_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_phi3_params *P = pith_arch_params(hp);
    if (P->rope_dim < 0 || P->rope_dim > hp->head_dim || P->rope_dim % 2)
        return pith_errf(err, "%s: RoPE over %d of %d head dimensions", path, P->rope_dim, hp->head_dim);
    if (P->n_factors > 0 && check_factors(P, P->rope_dim > 0 ? P->rope_dim : hp->head_dim, path, err)) return -1;
    if (P->n_factors > 0 && (hp->rope_scale_factor || hp->rope_linear_factor || hp->rope_yarn_factor))
        return pith_errf(err, "%s: LongRoPE and another RoPE scaling are both set", path);
    return 0;
}

/* A matrix of [cols, rows] (GGUF order) named in layer l, or an error naming it. */
static int check_matrix(const pith_model_file *f, int l, const char *name, int64_t cols, int64_t rows,
                        const char *why, pith_err *err) {
    char full[96];
    snprintf(full, sizeof full, "blk.%d.%s", l, name);
    const pith_tensor *t = pith_model_file_tensor(f, full);
    if (!t) return pith_errf(err, "%s: missing tensor '%s'%s", pith_model_file_path(f), full, why);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         pith_model_file_path(f), full, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)cols, (long long)rows);
    return 0;
}

/* One of GGUF's LongRoPE lists into out (F32 after pith_mf_own_vector); *n -1 when absent. */
static int gguf_factors(pith_model_file *f, const char *name, int n_rot, float *out, int *n, pith_err *err) {
    const char *path = pith_model_file_path(f);
    const pith_tensor *t = pith_model_file_tensor(f, name);
    *n = -1;
    if (!t) return 0;
    if (t->ne[0] != n_rot / 2 || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%d] (half the %d rotated "
                              "dimensions)", path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], n_rot / 2, n_rot);
    if (n_rot / 2 > PITH_PHI3_MAX_FACTORS)
        return pith_errf(err, "%s: tensor '%s': more than %d LongRoPE factors (not supported)", path, name,
                         PITH_PHI3_MAX_FACTORS);
    float *data;
    int64_t count;
    if (pith_mf_own_vector(f, name, &data, &count, err)) return -1;
    memcpy(out, data, (size_t)count * sizeof *out);
    *n = (int)count;
    return 0;
}

/* GGUF's LongRoPE lists (a Hugging Face file has them in config.json: read_hf). */
static int gguf_longrope(pith_model_file *f, pith_phi3_params *P, const pith_hparams *hp, pith_err *err) {
    int n_rot = P->rope_dim > 0 ? P->rope_dim : hp->head_dim, n_long, n_short;
    if (gguf_factors(f, "rope_factors_long.weight", n_rot, P->long_factor, &n_long, err) ||
        gguf_factors(f, "rope_factors_short.weight", n_rot, P->short_factor, &n_short, err))
        return -1;
    if ((n_long < 0) != (n_short < 0))
        return pith_errf(err, "%s: missing tensor '%s' (LongRoPE needs both lists)", pith_model_file_path(f),
                         n_long < 0 ? "rope_factors_long.weight" : "rope_factors_short.weight");
    if (n_long >= 0) {
        P->n_factors = n_long;
        if (check_factors(P, n_rot, pith_model_file_path(f), err)) return -1;
    }
    return 0;
}

static int phi3_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    pith_phi3_params *P = pith_arch_params(hp);
    int64_t qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    char name[96];
    snprintf(name, sizeof name, "blk.0.attn_q.weight");
    bool split = pith_model_file_tensor(f, name) != NULL; /* the schema made the others follow layer 0 */
    for (int l = 0; l < hp->n_layers; l++) {
        if ((!split && check_matrix(f, l, "attn_qkv.weight", hp->dim, qd + 2 * kvd,
                                    " (fused [q | k | v]; or attn_q, attn_k and attn_v.weight)", err)) ||
            check_matrix(f, l, "ffn_up.weight", hp->dim, 2 * (int64_t)hp->ffn_dim, " (fused [gate | up])", err))
            return -1;
    }
    /* llama.cpp's phi3 graph would take these (biases; experts, PhiMoE's); no Phi-3 or Phi-4 has them, and
     * the forward pass here would ignore them: refused rather than run without */
    static const char *const unsupported[] = {"blk.0.attn_qkv.bias", "blk.0.attn_q.bias", "blk.0.attn_output.bias",
                                              "blk.0.ffn_gate_inp.weight", "output.bias"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (pith_model_file_tensor(f, unsupported[i]))
            return pith_errf(err, "%s: tensor '%s' is not supported for architecture phi3 (no biases or experts)",
                             pith_model_file_path(f), unsupported[i]);
    if (pith_model_file_format(f) == PITH_FORMAT_GGUF && gguf_longrope(f, P, hp, err)) return -1;
    /* without LongRoPE neither means anything: the same bytes from both formats */
    if (P->n_factors == 0) P->orig_ctx = 0, P->attn_factor = 0;
    return 0;
}

const pith_arch pith_arch_phi3 = {
    .name = "phi3",
    .hf_archs = (const char *const[]){"Phi3ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"phi3", NULL},
    .rope_gguf = PITH_ROPE_HALF, /* llama.cpp: NEOX; the converter permutes nothing */
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = phi3_hf_layer,
    .global = phi3_global,
    .layer = phi3_layer,
    .read_gguf = phi3_read_gguf,
    .read_hf = phi3_read_hf,
    .check = phi3_check,
    .finish = phi3_finish,
    .build = pith_phi3_build,
    .params_size = sizeof(pith_phi3_params),
    .partial_rotary = true,
    .hf_rope_kinds = (const char *const[]){"longrope", "su", "yarn", NULL},
};
