#include "format/hf_config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/json_file.h"
#include "format/mapped_file.h"
#include "format/printable.h"

#define MAX_CONFIG_BYTES (16u << 20)

/* JSON null counts as absent: configs write "head_dim": null and similar. */
static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(j) ? NULL : j;
}

/* bos_token_id / eos_token_id: an int, a list of ints (the first is used) or null. */
static int json_token(const pith_meta *m, const char *key, int *out) {
    const cJSON *j = field(m->json, key);
    if (cJSON_IsArray(j)) j = cJSON_GetArrayItem(j, 0);
    if (!j) return 0;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= 0 && v <= INT_MAX) || v != floor(v))
        return pith_errf(m->err, "%s: \"%s\" is not a token id", m->path, key);
    *out = (int)v;
    return 0;
}

static int find_arch(const pith_meta *m, const pith_arch **out) {
    const cJSON *archs = field(m->json, "architectures");
    const cJSON *name = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *type = field(m->json, "model_type");
    const char *a = cJSON_IsString(name) ? name->valuestring : NULL;
    const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
    if (!a && !t)
        return pith_errf(m->err, "%s: neither \"architectures\" nor \"model_type\" names the model", m->path);
    /* "model_type" decides only when "architectures" does not name the class. */
    if ((*out = pith_arch_find_hf(a, a ? NULL : t))) return 0;
    char shown[PITH_PRINTABLE_CAP], names[512];
    const char *what = a ? a : t;
    return pith_errf(m->err, "%s: unsupported architecture '%s' (supported: %s)", m->path,
                     pith_printable(shown, sizeof shown, what, strlen(what)), pith_arch_names(names, sizeof names, true));
}

/* llama3, linear and yarn frequency scaling are implemented (yarn as transformers' _compute_yarn_parameters:
 * factor, else max_position_embeddings / original_max_position_embeddings; original_max_position_embeddings,
 * else max_position_embeddings; beta_fast 32, beta_slow 1; attention_factor, else from mscale and
 * mscale_all_dim when both are given, else 1 + 0.1 ln factor; truncate, default true). "dynamic" (NTK) changes nothing within the trained
 * context, and any kind with factor 1 is the identity; other kinds would silently change every logit,
 * except those the descriptor reads itself (pith_arch.hf_rope_kinds: phi3's LongRoPE). */
static int read_rope_scaling(const pith_meta *c, pith_hparams *hp, const pith_arch *arch) {
    const cJSON *rs = field(c->json, "rope_scaling");
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) return pith_errf(c->err, "%s: \"rope_scaling\" is not an object", c->path);
    pith_meta m = *c;
    m.json = rs;
    const cJSON *type = field(rs, "rope_type");
    if (!type) type = field(rs, "type");
    if (!cJSON_IsString(type)) return pith_errf(c->err, "%s: \"rope_scaling\" has no type", c->path);
    const char *t = type->valuestring;
    for (const char *const *k = arch->hf_rope_kinds; k && *k; k++)
        if (!strcmp(*k, t)) return 0; /* the descriptor's read_hf reads it */
    if (!strcmp(t, "llama3")) {
        if (pith_meta_float(&m, "factor", true, &hp->rope_scale_factor) ||
            pith_meta_float(&m, "low_freq_factor", true, &hp->rope_low_freq_factor) ||
            pith_meta_float(&m, "high_freq_factor", true, &hp->rope_high_freq_factor) ||
            pith_meta_int(&m, "original_max_position_embeddings", true, &hp->rope_orig_ctx))
            return -1;
        if (hp->rope_scale_factor <= 0)
            return pith_errf(c->err, "%s: rope_scaling factor must be positive", c->path);
        return 0;
    }
    if (!strcmp(t, "linear")) {
        float factor;
        if (pith_meta_float(&m, "factor", true, &factor)) return -1;
        /* 0 stands for none in pith_hparams, so a zero factor must be refused here, not stored. */
        if (!(factor > 0 && isfinite(factor)))
            return pith_errf(c->err, "%s: linear rope_scaling factor %g is not a positive number", c->path, factor);
        hp->rope_linear_factor = factor == 1.0f ? 0.0f : factor;
        return 0;
    }
    if (!strcmp(t, "yarn")) {
        float factor = 0, attn = 0, ms = 0, ms_all = 0;
        hp->rope_orig_ctx = hp->ctx_len;
        hp->rope_yarn_beta_fast = 32.0f;
        hp->rope_yarn_beta_slow = 1.0f;
        hp->rope_yarn_truncate = true;
        if (pith_meta_int(&m, "original_max_position_embeddings", false, &hp->rope_orig_ctx) ||
            pith_meta_float(&m, "factor", false, &factor) ||
            pith_meta_float(&m, "beta_fast", false, &hp->rope_yarn_beta_fast) ||
            pith_meta_float(&m, "beta_slow", false, &hp->rope_yarn_beta_slow) ||
            pith_meta_float(&m, "attention_factor", false, &attn) || pith_meta_float(&m, "mscale", false, &ms) ||
            pith_meta_float(&m, "mscale_all_dim", false, &ms_all) ||
            pith_meta_bool(&m, "truncate", &hp->rope_yarn_truncate))
            return -1;
        if (factor == 0 && hp->rope_orig_ctx > 0) factor = (float)hp->ctx_len / (float)hp->rope_orig_ctx;
        if (!(factor > 0 && isfinite(factor)))
            return pith_errf(c->err, "%s: yarn rope_scaling factor %g is not a positive number", c->path, factor);
        if (attn == 0) {
            double f = factor, a = f > 1 ? 0.1 * log(f) + 1 : 1;
            if (ms != 0 && ms_all != 0)
                a = (f > 1 ? 0.1 * ms * log(f) + 1 : 1) / (f > 1 ? 0.1 * ms_all * log(f) + 1 : 1);
            attn = (float)a;
        }
        hp->rope_yarn_factor = factor;
        hp->rope_yarn_mscale = attn;
        return 0;
    }
    float factor = 1.0f;
    if (pith_meta_float(&m, "factor", false, &factor)) return -1;
    if (!strcmp(t, "default") || !strcmp(t, "dynamic") || factor == 1.0f) return 0;
    char shown[PITH_PRINTABLE_CAP];
    return pith_errf(c->err, "%s: rope_scaling type '%s' (factor %g) is not supported (only llama3, linear and yarn)",
                     c->path, pith_printable(shown, sizeof shown, t, strlen(t)), factor);
}

static int parse_text(const pith_meta *outer, const pith_meta *m, pith_hparams *hp, const pith_arch **arch);

/* m's config with the keys it lacks taken from defaults (the descriptor's JSON): a copy in *merged that
 * m->json then points at, freed by the caller. */
static int with_defaults(pith_meta *m, const char *defaults, cJSON **merged) {
    cJSON *d = cJSON_Parse(defaults), *copy = cJSON_Duplicate(m->json, true);
    if (!d || !copy) {
        cJSON_Delete(d);
        cJSON_Delete(copy);
        return pith_errf(m->err, "%s: out of memory (or a malformed descriptor default)", m->path);
    }
    for (cJSON *kv = d->child, *next; kv; kv = next) {
        next = kv->next;
        if (cJSON_HasObjectItem(copy, kv->string)) continue;
        cJSON_AddItemToObject(copy, kv->string, cJSON_DetachItemViaPointer(d, kv));
    }
    cJSON_Delete(d);
    m->json = copy;
    *merged = copy;
    return 0;
}

static int parse(const pith_meta *outer, pith_hparams *hp, const pith_arch **arch) {
    if (find_arch(outer, arch)) return -1;
    /* A multimodal class (Qwen3_5ForConditionalGeneration) nests its text model's config under
     * "text_config"; "tie_word_embeddings" at the top level, where present, wins (transformers ties the
     * embeddings by the outer config). */
    pith_meta nested = *outer;
    const cJSON *tc = field(outer->json, "text_config");
    if ((*arch)->hf_text_config && tc) {
        if (!cJSON_IsObject(tc)) return pith_errf(outer->err, "%s: \"text_config\" is not an object", outer->path);
        nested.json = tc;
        nested.outer = outer->json;
    }
    cJSON *merged = NULL;
    if ((*arch)->hf_defaults && with_defaults(&nested, (*arch)->hf_defaults, &merged)) return -1;
    int rc = parse_text(outer, &nested, hp, arch);
    cJSON_Delete(merged);
    return rc;
}

static int parse_text(const pith_meta *outer, const pith_meta *m, pith_hparams *hp, const pith_arch **arch) {
    snprintf(hp->arch, sizeof hp->arch, "%s", (*arch)->name);
    hp->rope_style = (*arch)->rope_hf;
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-6f;
    hp->ctx_len = 2048;
    hp->n_kv_heads = 0;
    hp->tied_embeddings = false;
    if (pith_meta_int(m, "hidden_size", true, &hp->dim) ||
        pith_meta_int(m, "intermediate_size", !pith_meta_has(m, "moe_intermediate_size"), &hp->ffn_dim) ||
        pith_meta_int(m, "num_hidden_layers", true, &hp->n_layers) ||
        pith_meta_int(m, "num_attention_heads", true, &hp->n_heads) ||
        pith_meta_int(m, "num_key_value_heads", false, &hp->n_kv_heads) ||
        pith_meta_int(m, "head_dim", false, &hp->head_dim) ||
        pith_meta_float(m, "rms_norm_eps", false, &hp->norm_eps) ||
        pith_meta_float(m, "rope_theta", false, &hp->rope_theta) ||
        pith_meta_int(m, "max_position_embeddings", false, &hp->ctx_len) ||
        pith_meta_int(m, "vocab_size", false, &hp->n_vocab) || read_rope_scaling(m, hp, *arch) ||
        json_token(m, "bos_token_id", &hp->bos_id) || json_token(m, "eos_token_id", &hp->eos_id) ||
        pith_meta_bool(m, "tie_word_embeddings", &hp->tied_embeddings))
        return -1;
    if (m->json != outer->json && pith_meta_bool(outer, "tie_word_embeddings", &hp->tied_embeddings)) return -1;
    if ((*arch)->read_hf && (*arch)->read_hf(m, hp)) return -1;
    if (!hp->n_kv_heads) hp->n_kv_heads = hp->n_heads;
    return 0;
}

/* Python's json module writes an infinite float as the bare word Infinity (Mamba2 configs:
 * "time_step_limit": [0.0, Infinity]), which is not JSON; outside strings it becomes 1e999, a number
 * strtod reads as infinity, in place (same length). NaN stays an error. */
static void python_infinities(char *text, size_t len) {
    static const char word[] = "Infinity";
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == 'I' && len - i >= sizeof word - 1 && !memcmp(text + i, word, sizeof word - 1)) {
            memcpy(text + i, "1e999   ", sizeof word - 1);
            i += sizeof word - 2;
        }
    }
}

int pith_hf_parse_config(const char *config_path, pith_hparams *hp, const pith_arch **arch, pith_err *err) {
    char *text;
    size_t len;
    if (pith_read_small_file(config_path, MAX_CONFIG_BYTES, &text, &len, err)) return -1;
    if (pith_json_count_values(text, len) > PITH_JSON_MAX_VALUES) {
        free(text);
        return pith_errf(err, "%s: more than %zu JSON values", config_path, PITH_JSON_MAX_VALUES);
    }
    python_infinities(text, len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pith_errf(err, "%s: not a JSON object", config_path);
    }
    pith_meta m = {config_path, NULL, NULL, root, false, err, NULL};
    int rc = parse(&m, hp, arch);
    cJSON_Delete(root);
    return rc;
}
