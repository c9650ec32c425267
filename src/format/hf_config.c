#include "format/hf_config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/mapped_file.h"
#include "format/printable.h"

#define MAX_CONFIG_BYTES (16u << 20)

typedef struct cfg {
    const char *path;
    const cJSON *root;
    pith_err *err;
} cfg;

/* JSON null counts as absent: configs write "head_dim": null and similar. */
static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static int json_int(cfg *c, const cJSON *obj, const char *key, bool required, int *out) {
    const cJSON *j = field(obj, key);
    if (!j) return required ? pith_errf(c->err, "%s: missing \"%s\"", c->path, key) : 0;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= INT_MIN && v <= INT_MAX) || v != floor(v))
        return pith_errf(c->err, "%s: \"%s\" is not an integer in the int range", c->path, key);
    *out = (int)v;
    return 0;
}

static int json_float(cfg *c, const cJSON *obj, const char *key, bool required, float *out) {
    const cJSON *j = field(obj, key);
    if (!j) return required ? pith_errf(c->err, "%s: missing \"%s\"", c->path, key) : 0;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return pith_errf(c->err, "%s: \"%s\" is not a number", c->path, key);
    *out = (float)j->valuedouble;
    return 0;
}

/* bos_token_id / eos_token_id: an int, a list of ints (the first is used) or null. */
static int json_token(cfg *c, const char *key, int *out) {
    const cJSON *j = field(c->root, key);
    if (cJSON_IsArray(j)) j = cJSON_GetArrayItem(j, 0);
    if (!j) return 0;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= 0 && v <= INT_MAX) || v != floor(v))
        return pith_errf(c->err, "%s: \"%s\" is not a token id", c->path, key);
    *out = (int)v;
    return 0;
}

static int read_arch(cfg *c, pith_hparams *hp) {
    static const struct { const char *hf, *arch; } table[] = {
        {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "llama"}, {"Qwen2ForCausalLM", "qwen2"},
        {"Qwen3ForCausalLM", "qwen3"}, {"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "qwen2"},
        {"qwen3", "qwen3"},
    };
    const cJSON *archs = field(c->root, "architectures");
    const cJSON *name = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(name)) name = field(c->root, "model_type");
    if (!cJSON_IsString(name))
        return pith_errf(c->err, "%s: neither \"architectures\" nor \"model_type\" names the model", c->path);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!strcmp(name->valuestring, table[i].hf)) {
            strcpy(hp->arch, table[i].arch);
            return 0;
        }
    }
    char shown[PITH_PRINTABLE_CAP];
    return pith_errf(c->err, "%s: unsupported architecture '%s' (supported: LlamaForCausalLM, MistralForCausalLM, "
                     "Qwen2ForCausalLM, Qwen3ForCausalLM)", c->path,
                     pith_printable(shown, sizeof shown, name->valuestring, strlen(name->valuestring)));
}

/* llama3 and linear frequency scaling are implemented. "dynamic" (NTK) changes nothing within the trained
 * context, and any kind with factor 1 is the identity; other kinds would silently change every logit. */
static int read_rope_scaling(cfg *c, pith_hparams *hp) {
    const cJSON *rs = field(c->root, "rope_scaling");
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) return pith_errf(c->err, "%s: \"rope_scaling\" is not an object", c->path);
    const cJSON *type = field(rs, "rope_type");
    if (!type) type = field(rs, "type");
    if (!cJSON_IsString(type)) return pith_errf(c->err, "%s: \"rope_scaling\" has no type", c->path);
    const char *t = type->valuestring;
    if (!strcmp(t, "llama3")) {
        if (json_float(c, rs, "factor", true, &hp->rope_scale_factor) ||
            json_float(c, rs, "low_freq_factor", true, &hp->rope_low_freq_factor) ||
            json_float(c, rs, "high_freq_factor", true, &hp->rope_high_freq_factor) ||
            json_int(c, rs, "original_max_position_embeddings", true, &hp->rope_orig_ctx))
            return -1;
        if (hp->rope_scale_factor <= 0)
            return pith_errf(c->err, "%s: rope_scaling factor must be positive", c->path);
        return 0;
    }
    if (!strcmp(t, "linear")) {
        float factor;
        if (json_float(c, rs, "factor", true, &factor)) return -1;
        /* 0 stands for none in pith_hparams, so a zero factor must be refused here, not stored. */
        if (!(factor > 0 && isfinite(factor)))
            return pith_errf(c->err, "%s: linear rope_scaling factor %g is not a positive number", c->path, factor);
        hp->rope_linear_factor = factor == 1.0f ? 0.0f : factor;
        return 0;
    }
    float factor = 1.0f;
    if (json_float(c, rs, "factor", false, &factor)) return -1;
    if (!strcmp(t, "default") || !strcmp(t, "dynamic") || factor == 1.0f) return 0;
    char shown[PITH_PRINTABLE_CAP];
    return pith_errf(c->err, "%s: rope_scaling type '%s' (factor %g) is not supported (only llama3 and linear)",
                     c->path, pith_printable(shown, sizeof shown, t, strlen(t)), factor);
}

static int parse(cfg *c, pith_hparams *hp, bool *tie) {
    const cJSON *r = c->root;
    hp->rope_style = PITH_ROPE_HALF;
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-6f;
    hp->ctx_len = 2048;
    hp->n_kv_heads = 0;
    if (read_arch(c, hp) || json_int(c, r, "hidden_size", true, &hp->dim) ||
        json_int(c, r, "intermediate_size", true, &hp->ffn_dim) ||
        json_int(c, r, "num_hidden_layers", true, &hp->n_layers) ||
        json_int(c, r, "num_attention_heads", true, &hp->n_heads) ||
        json_int(c, r, "num_key_value_heads", false, &hp->n_kv_heads) ||
        json_int(c, r, "head_dim", false, &hp->head_dim) ||
        json_float(c, r, "rms_norm_eps", false, &hp->norm_eps) ||
        json_float(c, r, "rope_theta", false, &hp->rope_theta) ||
        json_int(c, r, "max_position_embeddings", false, &hp->ctx_len) ||
        json_int(c, r, "vocab_size", false, &hp->n_vocab) || read_rope_scaling(c, hp) ||
        json_token(c, "bos_token_id", &hp->bos_id) || json_token(c, "eos_token_id", &hp->eos_id))
        return -1;
    if (!hp->n_kv_heads) hp->n_kv_heads = hp->n_heads;
    const cJSON *t = field(r, "tie_word_embeddings");
    if (t && !cJSON_IsBool(t)) return pith_errf(c->err, "%s: \"tie_word_embeddings\" is not a boolean", c->path);
    *tie = cJSON_IsTrue(t);
    /* "sliding_window" (Mistral) is accepted and ignored: the forward pass attends to the whole context. */
    return 0;
}

int pith_hf_parse_config(const char *config_path, pith_hparams *hp, bool *tie, pith_err *err) {
    char *text;
    size_t len;
    if (pith_read_small_file(config_path, MAX_CONFIG_BYTES, &text, &len, err)) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pith_errf(err, "%s: not a JSON object", config_path);
    }
    cfg c = {config_path, root, err};
    int rc = parse(&c, hp, tie);
    cJSON_Delete(root);
    return rc;
}
