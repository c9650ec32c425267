/* GGUF as a model file: hyper-parameters from "{arch}.*" metadata, tensors as stored (GGUF names are
 * already canonical). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/modelfile_internal.h"
#include "format/printable.h"

typedef struct keys {
    pith_model_file *f;
    const pith_gguf *g;
    bool strict; /* supported architecture: required keys must be present */
    pith_err *err;
} keys;

/* Reads "{arch}.{suffix}" (or the key itself when suffix is NULL) as an int. Absent: *out keeps its
 * default, which is an error only when required and strict. */
static int get_int(keys *k, const char *key, bool required, int *out) {
    int64_t v;
    if (!pith_gguf_find(k->g, key)) {
        if (required && k->strict) return pith_errf(k->err, "%s: missing metadata key %s", k->f->path, key);
        return 0;
    }
    if (!pith_gguf_get_i64(k->g, key, &v)) {
        if (!k->strict) return 0;
        return pith_errf(k->err, "%s: metadata key %s is not an integer", k->f->path, key);
    }
    if (v < -1 || v > INT32_MAX) {
        if (!k->strict) return 0;
        return pith_errf(k->err, "%s: metadata key %s = %lld is out of range", k->f->path, key, (long long)v);
    }
    *out = (int)v;
    return 0;
}

static int get_float(keys *k, const char *key, bool required, float *out) {
    double v;
    if (!pith_gguf_find(k->g, key)) {
        if (required && k->strict) return pith_errf(k->err, "%s: missing metadata key %s", k->f->path, key);
        return 0;
    }
    if (!pith_gguf_get_f64(k->g, key, &v)) {
        if (!k->strict) return 0;
        return pith_errf(k->err, "%s: metadata key %s is not a number", k->f->path, key);
    }
    *out = (float)v;
    return 0;
}

static int read_arch(pith_model_file *f, const pith_gguf *g, pith_err *err) {
    pith_str arch;
    if (!pith_gguf_get_str(g, "general.architecture", &arch))
        return pith_errf(err, "%s: missing metadata key general.architecture (a string)", f->path);
    char shown[PITH_PRINTABLE_CAP];
    if (arch.len == 0 || arch.len >= sizeof f->hp.arch || memchr(arch.ptr, '\0', (size_t)arch.len))
        return pith_errf(err, "%s: invalid general.architecture '%s'", f->path,
                         pith_printable(shown, sizeof shown, arch.ptr, arch.len));
    memcpy(f->hp.arch, arch.ptr, (size_t)arch.len);
    f->hp.arch[arch.len] = '\0';
    return 0;
}

/* RoPE scaling: llama3's comes as rope_freqs.weight; "linear" divides positions by rope.scaling.factor
 * (absent: 1). Any other kind would silently change every logit, so it is refused unless it is the
 * identity (factor 1). */
static int read_rope_scaling(keys *k, const char *arch, pith_hparams *hp) {
    char key[96];
    pith_str type;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (!k->strict || !pith_gguf_get_str(k->g, key, &type) || pith_str_eq(type, "none")) return 0;
    float factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if (get_float(k, key, false, &factor)) return -1;
    if (pith_str_eq(type, "linear")) {
        /* 0 stands for none in pith_hparams, so a zero factor must be refused here, not stored. */
        if (!(factor > 0 && isfinite(factor)))
            return pith_errf(k->err, "%s: linear RoPE scaling factor %g is not a positive number", k->f->path,
                             factor);
        hp->rope_linear_factor = factor == 1.0f ? 0.0f : factor;
        return 0;
    }
    if (factor == 1.0f) return 0;
    char shown[PITH_PRINTABLE_CAP];
    return pith_errf(k->err, "%s: RoPE scaling '%s' (factor %g) is not supported (only linear)", k->f->path,
                     pith_printable(shown, sizeof shown, type.ptr, type.len), factor);
}

int pith_load_gguf_model(pith_model_file *f, pith_err *err) {
    if (pith_gguf_open(f->path, &f->gguf, err)) return -1;
    const pith_gguf *g = f->gguf;
    if (read_arch(f, g, err)) return -1;
    pith_hparams *hp = &f->hp;
    const char *a = hp->arch;
    keys k = {f, g, pith_arch_supported(a), err};
    hp->rope_style = strcmp(a, "qwen2") && strcmp(a, "qwen3") ? PITH_ROPE_ADJACENT : PITH_ROPE_HALF;
    hp->rope_theta = 10000.0f;
    hp->n_kv_heads = -1;
    hp->head_dim = 0;
    int rope_dims = -1, value_dim = -1;
    char key[96];
#define ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    if (get_int(&k, ARCH_KEY("context_length"), true, &hp->ctx_len) ||
        get_int(&k, ARCH_KEY("embedding_length"), true, &hp->dim) ||
        get_int(&k, ARCH_KEY("block_count"), true, &hp->n_layers) ||
        get_int(&k, ARCH_KEY("feed_forward_length"), true, &hp->ffn_dim) ||
        get_int(&k, ARCH_KEY("attention.head_count"), true, &hp->n_heads) ||
        get_int(&k, ARCH_KEY("attention.head_count_kv"), false, &hp->n_kv_heads) ||
        get_int(&k, ARCH_KEY("attention.key_length"), false, &hp->head_dim) ||
        get_int(&k, ARCH_KEY("attention.value_length"), false, &value_dim) ||
        get_int(&k, ARCH_KEY("rope.dimension_count"), false, &rope_dims) ||
        get_float(&k, ARCH_KEY("attention.layer_norm_rms_epsilon"), true, &hp->norm_eps) ||
        get_float(&k, ARCH_KEY("rope.freq_base"), false, &hp->rope_theta) ||
        get_int(&k, "tokenizer.ggml.bos_token_id", false, &hp->bos_id) ||
        get_int(&k, "tokenizer.ggml.eos_token_id", false, &hp->eos_id) || read_rope_scaling(&k, a, hp))
        return -1;
#undef ARCH_KEY
    if (hp->n_kv_heads == -1) hp->n_kv_heads = hp->n_heads;
    if (hp->head_dim <= 0 && hp->n_heads > 0 && hp->dim % hp->n_heads == 0) hp->head_dim = hp->dim / hp->n_heads;
    if (k.strict && value_dim != -1 && value_dim != hp->head_dim)
        return pith_errf(err, "%s: value head size %d differs from key head size %d (not supported)", f->path,
                         value_dim, hp->head_dim);
    if (k.strict && rope_dims != -1 && rope_dims != hp->head_dim)
        return pith_errf(err, "%s: RoPE over %d of %d head dimensions (partial rotary) is not supported", f->path,
                         rope_dims, hp->head_dim);

    for (int64_t i = 0; i < pith_gguf_n_tensors(g); i++)
        if (pith_mf_add_tensor(f, pith_gguf_tensor_at(g, i), 0, err)) return -1;

    const pith_gguf_kv *tokens = pith_gguf_find(g, "tokenizer.ggml.tokens");
    const pith_tensor *embd = pith_gguf_find_tensor(g, "token_embd.weight");
    if (tokens && tokens->type == PITH_GGUF_ARRAY)
        hp->n_vocab = tokens->arr_n > INT32_MAX ? INT32_MAX : (int)tokens->arr_n;
    else if (embd)
        hp->n_vocab = embd->ne[1] > INT32_MAX ? INT32_MAX : (int)embd->ne[1];
    return 0;
}
