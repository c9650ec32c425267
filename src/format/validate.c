/* Checks a loaded model file so the forward pass can trust it: sane hyper-parameters (generic checks,
 * then the architecture's own), every tensor of the architecture's schema (model/arch.h) present with
 * the expected shape, 1-D tensors (norms, biases, rope factors) converted to F32, the descriptor's
 * load-time transforms, and every tensor's data aligned for its element type. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "format/modelfile_internal.h"

#define MAX_WIDTH (1 << 20)
#define MAX_LAYERS PITH_MAX_LAYERS
#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 28)

static int check_range(const pith_model_file *f, const char *what, long long v, long long lo, long long hi,
                       pith_err *err) {
    if (v >= lo && v <= hi) return 0;
    return pith_errf(err, "%s: %s is %lld, expected %lld..%lld", f->path, what, v, lo, hi);
}

static int check_hparams(pith_model_file *f, pith_err *err) {
    pith_hparams *hp = &f->hp;
    if (check_range(f, "embedding width (dim)", hp->dim, 1, MAX_WIDTH, err) ||
        check_range(f, "feed-forward width", hp->ffn_dim, 1, MAX_WIDTH, err) ||
        check_range(f, "layer count", hp->n_layers, 1, MAX_LAYERS, err) ||
        check_range(f, "head count", hp->n_heads, 1, MAX_WIDTH, err) ||
        check_range(f, "KV head count", hp->n_kv_heads, 1, hp->n_heads, err) ||
        check_range(f, "vocabulary size", hp->n_vocab, 1, MAX_VOCAB, err) ||
        check_range(f, "context length", hp->ctx_len, 1, MAX_CTX, err))
        return -1;
    if (hp->n_heads % hp->n_kv_heads)
        return pith_errf(err, "%s: head count %d is not a multiple of the KV head count %d",
                         f->path, hp->n_heads, hp->n_kv_heads);
    if (hp->head_dim == 0) {
        if (hp->dim % hp->n_heads)
            return pith_errf(err, "%s: embedding width %d is not divisible by the head count %d", f->path, hp->dim,
                             hp->n_heads);
        hp->head_dim = hp->dim / hp->n_heads;
    }
    if (check_range(f, "head dimension", hp->head_dim, 2, MAX_WIDTH, err) ||
        check_range(f, "query width (heads x head dimension)", (long long)hp->n_heads * hp->head_dim, 1, MAX_WIDTH,
                    err))
        return -1;
    if (hp->head_dim % 2)
        return pith_errf(err, "%s: head dimension %d is odd (RoPE rotates pairs)", f->path, hp->head_dim);
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return pith_errf(err, "%s: norm epsilon %g is not in (0, 1)", f->path, hp->norm_eps);
    if (!(hp->rope_theta > 0 && isfinite(hp->rope_theta)))
        return pith_errf(err, "%s: RoPE theta %g is not a positive number", f->path, hp->rope_theta);
    if (hp->rope_scale_factor != 0) {
        if (!(hp->rope_scale_factor > 0 && isfinite(hp->rope_scale_factor) && hp->rope_low_freq_factor > 0 &&
              hp->rope_high_freq_factor > hp->rope_low_freq_factor && isfinite(hp->rope_high_freq_factor) &&
              hp->rope_orig_ctx > 0))
            return pith_errf(err, "%s: invalid llama3 RoPE scaling (factor %g, low %g, high %g, original context %d)",
                             f->path, hp->rope_scale_factor, hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                             hp->rope_orig_ctx);
    }
    if (hp->rope_linear_factor != 0) {
        if (!(hp->rope_linear_factor > 0 && isfinite(hp->rope_linear_factor)))
            return pith_errf(err, "%s: invalid linear RoPE scaling factor %g", f->path, hp->rope_linear_factor);
        if (hp->rope_scale_factor != 0)
            return pith_errf(err, "%s: both linear and llama3 RoPE scaling are set", f->path);
    }
    if (hp->rope_yarn_factor != 0) {
        if (!(hp->rope_yarn_factor > 0 && isfinite(hp->rope_yarn_factor) && hp->rope_orig_ctx > 0 &&
              hp->rope_yarn_beta_fast > 0 && isfinite(hp->rope_yarn_beta_fast) && hp->rope_yarn_beta_slow > 0 &&
              isfinite(hp->rope_yarn_beta_slow) && hp->rope_yarn_mscale > 0 && isfinite(hp->rope_yarn_mscale)))
            return pith_errf(err, "%s: invalid yarn RoPE scaling (factor %g, original context %d, beta %g/%g, "
                                  "attention factor %g)", f->path, hp->rope_yarn_factor, hp->rope_orig_ctx,
                             hp->rope_yarn_beta_fast, hp->rope_yarn_beta_slow, hp->rope_yarn_mscale);
        if (hp->rope_scale_factor != 0 || hp->rope_linear_factor != 0)
            return pith_errf(err, "%s: yarn and another RoPE scaling are both set", f->path);
    }
    if (check_range(f, "sliding window", hp->sliding_window, 0, MAX_CTX, err)) return -1;
    for (int l = hp->n_layers; l < PITH_MAX_LAYERS; l++)
        if (pith_layer_bit(hp->layer_swa, l) || pith_layer_bit(hp->layer_no_rope, l) ||
            pith_layer_bit(hp->layer_recurrent, l) || pith_layer_bit(hp->layer_mlp, l))
            return pith_errf(err, "%s: per-layer flags name layer %d of %d", f->path, l, hp->n_layers);
    const struct { const char *what; float v; } nonneg[] = {
        {"sliding-window RoPE theta", hp->rope_theta_swa},
        {"query scale", hp->query_scale},
        {"final logit soft-cap", hp->final_logit_softcap},
        {"attention logit soft-cap", hp->attn_logit_softcap},
    };
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (!(nonneg[i].v >= 0 && isfinite(nonneg[i].v)))
            return pith_errf(err, "%s: %s %g is not a non-negative number", f->path, nonneg[i].what, nonneg[i].v);
    if (hp->bos_id < -1 || hp->bos_id >= hp->n_vocab)
        return pith_errf(err, "%s: BOS token id %d is outside the vocabulary (%d)", f->path, hp->bos_id, hp->n_vocab);
    if (hp->eos_id < -1 || hp->eos_id >= hp->n_vocab)
        return pith_errf(err, "%s: EOS token id %d is outside the vocabulary (%d)", f->path, hp->eos_id, hp->n_vocab);
    return 0;
}

/* Replaces a 1-D F16/BF16 view with an owned F32 copy. */
static int to_f32(pith_model_file *f, pith_tensor *t, int64_t n, pith_err *err) {
    if (t->type == PITH_F32) return 0;
    if (t->type != PITH_F16 && t->type != PITH_BF16)
        return pith_errf(err, "%s: tensor '%s' has type %s, but a vector must be F32, F16 or BF16", f->path, t->name,
                         pith_dtype_name(t->type));
    float *dst = pith_mf_alloc(f, (size_t)n * sizeof(float), err);
    if (!dst) return -1;
    const uint8_t *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        dst[i] = t->type == PITH_F16 ? pith_f16_to_f32(h) : pith_bf16_to_f32(h);
    }
    t->data = dst;
    t->type = PITH_F32;
    t->nbytes = (size_t)n * sizeof(float);
    return 0;
}

/* ne1 == 0 means a vector of ne0 elements. */
static int check_tensor(pith_model_file *f, const char *name, int64_t ne0, int64_t ne1, bool required,
                        pith_err *err) {
    pith_tensor *t = pith_mf_find(f, name);
    if (!t) return required ? pith_errf(err, "%s: missing tensor '%s'", f->path, name) : 0;
    int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1) {
        if (ne1)
            return pith_errf(err, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", f->path,
                             name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                             (long long)t->ne[3], (long long)ne0, (long long)ne1);
        return pith_errf(err, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld]", f->path, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)ne0);
    }
    return ne1 ? 0 : to_f32(f, t, ne0, err);
}

static int64_t dim_value(const pith_hparams *hp, pith_dim d) {
    switch (d) {
    case PITH_D_NONE: return 0;
    case PITH_D_DIM: return hp->dim;
    case PITH_D_FFN: return hp->ffn_dim;
    case PITH_D_VOCAB: return hp->n_vocab;
    case PITH_D_Q: return (int64_t)hp->n_heads * hp->head_dim;
    case PITH_D_KV: return (int64_t)hp->n_kv_heads * hp->head_dim;
    case PITH_D_HEAD: return hp->head_dim;
    case PITH_D_HALF_HEAD: return hp->head_dim / 2;
    case PITH_D_HEADS: return hp->n_heads;
    }
    return -1;
}

static int check_spec(pith_model_file *f, const pith_tensor_spec *s, const char *name, bool required, pith_err *err) {
    return check_tensor(f, name, dim_value(&f->hp, s->ne0), dim_value(&f->hp, s->ne1), required, err);
}

/* Per-layer tensors: required ones in every layer they apply to; all-or-none ones wherever the first
 * layer they apply to has one. */
static int check_layers(pith_model_file *f, const pith_tensor_spec *specs, pith_err *err) {
    const pith_hparams *hp = &f->hp;
    for (const pith_tensor_spec *s = specs; s && s->name; s++) {
        int first = -1;
        bool present = false;
        for (int l = 0; l < hp->n_layers; l++) {
            if (s->in_layer && !s->in_layer(hp, l)) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, s->name);
            if (first < 0) {
                first = l;
                present = pith_mf_find(f, name) != NULL;
            }
            bool required = s->presence == PITH_REQUIRED || (s->presence == PITH_ALL_OR_NONE && present);
            if (required && s->presence == PITH_ALL_OR_NONE && !pith_mf_find(f, name))
                return pith_errf(err, "%s: missing tensor '%s' (layer %d has one, so every layer needs it)", f->path,
                                 name, first);
            if (check_spec(f, s, name, required, err)) return -1;
        }
    }
    return 0;
}

int pith_mf_own_vector(pith_model_file *f, const char *name, float **data, int64_t *n, pith_err *err) {
    *data = NULL;
    *n = 0;
    pith_tensor *t = pith_mf_find(f, name);
    if (!t) return 0;
    int64_t ne = pith_tensor_nelems(t);
    if (to_f32(f, t, ne, err)) return -1;
    float *copy = pith_mf_alloc(f, (size_t)ne * sizeof(float), err);
    if (!copy) return -1;
    memcpy(copy, t->data, (size_t)ne * sizeof(float));
    t->data = copy;
    *data = copy;
    *n = ne;
    return 0;
}

int pith_mf_own_bytes(pith_model_file *f, const char *name, void **data, const pith_tensor **out, pith_err *err) {
    *data = NULL;
    *out = NULL;
    pith_tensor *t = pith_mf_find(f, name);
    if (!t) return 0;
    void *copy = pith_mf_alloc(f, t->nbytes ? t->nbytes : 1, err);
    if (!copy) return -1;
    memcpy(copy, t->data, t->nbytes);
    t->data = copy;
    *data = copy;
    *out = t;
    return 0;
}

/* Kernels read F32 as floats and the quantized/16-bit types through 2-byte fields: copy any view that the
 * file left misaligned (possible in safetensors, or GGUF with general.alignment < 4). */
static int realign(pith_model_file *f, pith_err *err) {
    for (int i = 0; i < f->n_tensors; i++) {
        pith_tensor *t = &f->tensors[i];
        uintptr_t need = t->type == PITH_F32 ? 4 : 2;
        if ((uintptr_t)t->data % need == 0) continue;
        void *copy = pith_mf_alloc(f, t->nbytes, err);
        if (!copy) return -1;
        memcpy(copy, t->data, t->nbytes);
        t->data = copy;
    }
    return 0;
}

int pith_model_file_validate(pith_model_file *f, pith_err *err) {
    pith_hparams *hp = &f->hp;
    hp->tied_embeddings = pith_mf_find(f, "output.weight") == NULL;
    if (realign(f, err)) return -1;
    /* Unregistered architectures open (their metadata stays readable) and the model layer rejects them. */
    const pith_arch *arch = pith_arch_find(hp->arch);
    if (!arch) return 0;
    if (check_hparams(f, err)) return -1;
    if (arch->check && arch->check(hp, f->path, err)) return -1;
    for (const pith_tensor_spec *s = arch->global; s && s->name; s++)
        if (check_spec(f, s, s->name, s->presence == PITH_REQUIRED, err)) return -1;
    if (check_layers(f, arch->layer, err)) return -1;
    return arch->finish ? arch->finish(f, hp, err) : 0;
}
