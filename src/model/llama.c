/* The decoder forward pass of the Llama family (llama, qwen2, qwen3, smollm3, Mistral) and of the
 * architectures that only vary it (gemma3: see pith_decoder_variant), over a flat batch and the model's
 * own memory groups.
 *
 * One step: embed every token (times embed_scale); per layer, RMSNorm, Q/K/V projections for all tokens
 * at once (optional bias; qwen3 and gemma3 RMS-normalise each Q and K head), RoPE (none in NoPE layers;
 * window layers may use their own base), K/V written to each token's slot of the layer's memory group,
 * causal attention through that group's block tables (a WINDOW group: the last W positions only), the
 * output projection added to the residual (after a post-attention RMSNorm in gemma3), then RMSNorm and a
 * gated feed-forward (SiLU, or GELU-tanh in gemma3; post-FFN RMSNorm in gemma3) likewise; finally the
 * last norm and the vocabulary projection, only for the rows that want logits (soft-capped where the
 * file says). Every projection is one matmul over all tokens of the step, so weights stream from memory
 * once per step whatever the batch holds.
 *
 * Memory: one FULL group for the layers that attend to everything and one WINDOW group for the layers
 * with a sliding window (memory.h), each holding K and V of n_kv_heads * head_dim per token.
 *
 * RoPE frequencies: theta^(-2i/head_dim), divided by rope_freqs.weight when the file has it (llama.cpp's
 * way of storing Llama 3 scaling), else rescaled from the hyper-parameters (Hugging Face's "llama3"
 * rope_type), never both; then multiplied by 1/factor under linear scaling (positions divided by the
 * factor), or blended by YaRN with cos and sin times its attention factor (see pith_hparams). Window
 * layers with their own base (rope_theta_swa) use theta_swa^(-2i/head_dim) unscaled.
 * Angles are computed in double per token, so long positions lose no precision. */
#include "model/llama.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quants.h"
#include "model/batch_check.h"
#include "model/moe.h"
#include "pith/kv.h"

typedef struct llama_layer {
    pith_matrix wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm;
    float *bq, *bk, *bv;        /* qwen2, gpt-oss, else NULL */
    float *bo;                  /* attn_output.bias (gpt-oss), else NULL */
    float *sinks;               /* attn_sinks.weight [n_heads] (gpt-oss), else NULL */
    float *q_norm, *k_norm;     /* qwen3, gemma3, else NULL */
    float *post_attn_norm, *post_ffw_norm; /* gemma3 (variant post_norms), else NULL */
    pith_moe_layer *moe;        /* the FFN is a mixture of experts (hp.n_experts > 0), else NULL */
} llama_layer;

typedef struct llama {
    pith_model base;
    pith_decoder_variant var;
    pith_cpu cpu;
    pith_attn_scratch attn;
    int q_dim, kv_dim;
    /* memory: the declared groups (their layer lists live in group_layers) and where each layer is */
    pith_kv_host kv;
    int *group_layers;          /* [n_layers] */
    int *layer_group;           /* [n_layers] */
    int *layer_index;           /* [n_layers] index in its group's layer list */
    const pith_tensor *embd;
    size_t embd_row_bytes;
    float *out_norm;
    pith_matrix output;
    llama_layer *layers;
    double *inv_freq;           /* [head_dim / 2] */
    double *inv_freq_swa;       /* [head_dim / 2] for window layers with their own base, else NULL */
    float rope_mscale;          /* cos and sin times this (YaRN's attention factor; else 1) */

    /* scratch for up to cap tokens */
    int cap;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *rope_cos, *rope_sin, *rope_cos_swa, *rope_sin_swa;
    pith_moe_scratch moe;
    pith_moe_config moe_cfg;
    pith_moe_loop moe_loop;     /* PITH_MOE_NAIVE: the benchmarks' baseline loops (moe.h) */
} llama;

/* ---------------- build ---------------- */

/* The sliding window of layer l, 0 for full attention. */
static int llama_layer_window(const pith_hparams *hp, int l) {
    return pith_hparams_layer_swa(hp, l) ? hp->sliding_window : 0;
}

static int load_vec(const pith_model_file *f, const char *name, int n, bool required, float **out, pith_err *err) {
    *out = NULL;
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return required ? pith_errf(err, "missing tensor %s", name) : 0;
    if (pith_tensor_nelems(t) != n || t->ne[0] != n)
        return pith_errf(err, "tensor %s: expected %d elements", name, n);
    if (!pith_dtype_valid(t->type) || !pith_dtype_row_bytes(t->type, n) || t->nbytes < pith_dtype_row_bytes(t->type, n))
        return pith_errf(err, "tensor %s: bad type or size", name);
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return pith_errf(err, "out of memory");
    pith_dequantize_row(t->type, t->data, *out, n);
    return 0;
}

static int load_mat(const pith_model_file *f, const char *name, int rows, int cols, pith_matrix *m, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (pith_matrix_from_tensor(m, t, err)) return -1;
    if (m->rows != rows || m->cols != cols)
        return pith_errf(err, "tensor %s: shape [%d, %d], expected [%d, %d]", name, m->cols, m->rows, cols, rows);
    return 0;
}

static int load_layer(const pith_model_file *f, const pith_hparams *hp, const pith_decoder_variant *var, int l,
                      llama_layer *L, pith_err *err) {
    char n[96];
    int dim = hp->dim, qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim, ffn = hp->ffn_dim;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    bool dense = hp->n_experts == 0;
    if (load_vec(f, NAME("attn_norm.weight"), dim, true, &L->attn_norm, err) ||
        load_vec(f, NAME(var->ffn_norm ? var->ffn_norm : "ffn_norm.weight"), dim, true, &L->ffn_norm, err) ||
        load_vec(f, NAME("attn_output.bias"), dim, false, &L->bo, err) ||
        load_vec(f, NAME("attn_sinks.weight"), hp->n_heads, false, &L->sinks, err) ||
        load_mat(f, NAME("attn_q.weight"), qd, dim, &L->wq, err) ||
        load_mat(f, NAME("attn_k.weight"), kvd, dim, &L->wk, err) ||
        load_mat(f, NAME("attn_v.weight"), kvd, dim, &L->wv, err) ||
        load_mat(f, NAME("attn_output.weight"), dim, qd, &L->wo, err) ||
        (dense && (load_mat(f, NAME("ffn_gate.weight"), ffn, dim, &L->gate, err) ||
                   load_mat(f, NAME("ffn_up.weight"), ffn, dim, &L->up, err) ||
                   load_mat(f, NAME("ffn_down.weight"), dim, ffn, &L->down, err))) ||
        load_vec(f, NAME("attn_q.bias"), qd, hp->has_qkv_bias, &L->bq, err) ||
        load_vec(f, NAME("attn_k.bias"), kvd, hp->has_qkv_bias, &L->bk, err) ||
        load_vec(f, NAME("attn_v.bias"), kvd, hp->has_qkv_bias, &L->bv, err) ||
        load_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, hp->has_qk_norm, &L->q_norm, err) ||
        load_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, hp->has_qk_norm, &L->k_norm, err) ||
        (var->post_norms && (load_vec(f, NAME("post_attention_norm.weight"), dim, true, &L->post_attn_norm, err) ||
                             load_vec(f, NAME("post_ffw_norm.weight"), dim, true, &L->post_ffw_norm, err))))
        return pith_err_prefix(err, "layer %d", l);
#undef NAME
    if (dense) return 0;
    pith_moe_config cfg;
    pith_moe_config_of(hp, &cfg);
    if (!(L->moe = calloc(1, sizeof *L->moe))) return pith_errf(err, "out of memory");
    return pith_moe_load(f, l, &cfg, var->hf_experts[0] ? var->hf_experts : NULL, L->moe, err);
}

/* Weights in a layout that suits the kernel table, where it has one (see pith_matrix_pack). */
static int pack_layer(pith_cpu *c, llama_layer *L, pith_err *err) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        if (ms[i]->data && pith_matrix_pack(c, ms[i], err)) return -1;
    return L->moe ? pith_moe_pack(c, L->moe, err) : 0;
}

/* Experts repacked or left mapped in the file (pith_moe_choose_mapped), one choice for the model. */
static int place_experts(llama *m, pith_err *err) {
    uint64_t bytes = 0;
    pith_wtype type = PITH_W_F32;
    for (int l = 0; l < m->base.hp.n_layers; l++)
        if (m->layers[l].moe) bytes += pith_moe_mappable_bytes(m->layers[l].moe), type = m->layers[l].moe->gate[0].type;
    bool mapped = false;
    if (pith_moe_choose_mapped(&m->cpu, type, bytes, &mapped, m->base.experts, sizeof m->base.experts, err)) return -1;
    for (int l = 0; l < m->base.hp.n_layers; l++)
        if (m->layers[l].moe) m->layers[l].moe->mapped = mapped;
    return 0;
}

static void free_layer(llama_layer *L) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) pith_matrix_free(ms[i]);
    free(L->attn_norm);
    free(L->ffn_norm);
    free(L->bq);
    free(L->bk);
    free(L->bv);
    free(L->bo);
    free(L->sinks);
    free(L->q_norm);
    free(L->k_norm);
    free(L->post_attn_norm);
    free(L->post_ffw_norm);
    if (L->moe) pith_moe_free(L->moe);
    free(L->moe);
}

/* YaRN (see pith_hparams): the dimension whose frequency turns `rotations` times over the original
 * context, then the blend of extrapolated and interpolated frequencies across the ramp. */
static double yarn_dim(const pith_hparams *hp, double rotations) {
    return hp->head_dim * log(hp->rope_orig_ctx / (rotations * 2 * M_PI)) / (2 * log((double)hp->rope_theta));
}

static void yarn_frequencies(const pith_hparams *hp, double *inv_freq) {
    double lo = yarn_dim(hp, hp->rope_yarn_beta_fast), hi = yarn_dim(hp, hp->rope_yarn_beta_slow);
    if (hp->rope_yarn_truncate) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < hp->head_dim - 1 ? hi : hp->head_dim - 1;
    if (hi == lo) hi += 0.001;
    for (int i = 0; i < hp->head_dim / 2; i++) {
        double extra = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim), inter = extra / hp->rope_yarn_factor;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp; /* 0: extrapolate, 1: interpolate */
        inv_freq[i] = inter * ramp + extra * (1 - ramp);
    }
}

static int init_rope(llama *m, const pith_model_file *f, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    int half = hp->head_dim / 2;
    m->inv_freq = malloc((size_t)half * sizeof *m->inv_freq);
    if (!m->inv_freq) return pith_errf(err, "out of memory");
    float *factors;
    if (load_vec(f, "rope_freqs.weight", half, false, &factors, err)) return -1;
    for (int i = 0; i < half; i++) {
        double freq = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim);
        if (factors) {
            freq /= factors[i];
        } else if (hp->rope_scale_factor > 0) {
            double low_wavelen = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double high_wavelen = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            double wavelen = 2 * M_PI / freq;
            if (wavelen > low_wavelen) {
                freq /= hp->rope_scale_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                freq = (1 - smooth) * freq / hp->rope_scale_factor + smooth * freq;
            }
        }
        if (hp->rope_linear_factor > 0) freq /= hp->rope_linear_factor;
        m->inv_freq[i] = freq;
    }
    free(factors);
    m->rope_mscale = 1.0f;
    if (hp->rope_yarn_factor > 0) yarn_frequencies(hp, m->inv_freq), m->rope_mscale = hp->rope_yarn_mscale;
    if (hp->rope_theta_swa > 0 && hp->sliding_window > 0) {
        if (!(m->inv_freq_swa = malloc((size_t)half * sizeof *m->inv_freq_swa))) return pith_errf(err, "out of memory");
        for (int i = 0; i < half; i++) m->inv_freq_swa[i] = pow((double)hp->rope_theta_swa, -2.0 * i / hp->head_dim);
    }
    return 0;
}

static void llama_destroy(pith_model *base);
static int llama_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err);
static int llama_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err);
static void llama_mem_free(pith_model *base);
static int llama_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
static int llama_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops llama_ops = {
    .prepare = llama_prepare, .mem_alloc = llama_mem_alloc, .mem_free = llama_mem_free,
    .copy_blocks = llama_copy_blocks, .forward = llama_forward, .destroy = llama_destroy,
};

/* The memory this model keeps: K and V of every layer, one FULL group (a WINDOW group of the layers
 * that use a sliding window, when the file gives one). */
static int declare_memory(llama *m, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    int L = hp->n_layers;
    m->group_layers = malloc((size_t)L * sizeof *m->group_layers);
    m->layer_group = malloc((size_t)L * sizeof *m->layer_group);
    m->layer_index = malloc((size_t)L * sizeof *m->layer_index);
    if (!m->group_layers || !m->layer_group || !m->layer_index) return pith_errf(err, "out of memory");
    pith_mem_spec *spec = &m->base.mem;
    memset(spec, 0, sizeof *spec);
    int n = 0;
    for (int windowed = 0; windowed < 2; windowed++) {
        int first = n;
        for (int l = 0; l < L; l++) {
            if ((llama_layer_window(hp, l) > 0) != (windowed == 1)) continue;
            m->layer_group[l] = spec->n_groups;
            m->layer_index[l] = n - first;
            m->group_layers[n++] = l;
        }
        if (n == first) continue;
        pith_mem_group *g = &spec->groups[spec->n_groups++];
        g->kind = windowed ? PITH_MEM_WINDOW : PITH_MEM_FULL;
        g->window = windowed ? llama_layer_window(hp, m->group_layers[first]) : 0;
        g->n_layers = n - first;
        g->layers = &m->group_layers[first];
        g->type = PITH_F16;
        g->k_dim = g->v_dim = m->kv_dim;
    }
    return pith_mem_spec_check(spec, L, err);
}

int pith_llama_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_decoder_variant plain = {0};
    return pith_decoder_build(file, opt, &plain, out, err);
}

int pith_decoder_build(pith_model_file *file, const pith_model_options *opt, const pith_decoder_variant *var,
                       pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const char *path = pith_model_file_path(file);
    /* The hyper-parameters were checked when the file opened (validate.c and the descriptor). */
    if (hp->attn_logit_softcap != 0)
        return pith_errf(err, "%s: attention logit soft-capping is not supported", path);
    pith_moe_config moe_cfg;
    pith_moe_config_of(hp, &moe_cfg);
    if (hp->n_experts > 0 && var->post_norms)
        return pith_errf(err, "%s: experts with post-FFN norms are not supported", path);
    if (hp->n_experts > 0 && pith_moe_config_check(&moe_cfg, path, err)) return -1;
    pith_moe_loop moe_loop = PITH_MOE_GROUPED;
    if (hp->n_experts > 0 && pith_moe_loop_from_env(&moe_loop, err)) return -1;
    llama *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->moe_loop = moe_loop;
    m->var = *var;
    m->moe_cfg = moe_cfg;
    m->base.ops = &llama_ops;
    m->base.hp = *hp;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->base.impl = m;
    m->base.has_hidden = true;
    m->q_dim = hp->n_heads * hp->head_dim;
    const char *fs = getenv("PITH_FORCE_SCALAR");
    bool force_scalar = fs && *fs && strcmp(fs, "0") != 0;
    float scale = hp->query_scale > 0 ? hp->query_scale : (float)(1.0 / sqrt(hp->head_dim));
    pith_attn_shape shape = {hp->n_heads, hp->n_kv_heads, hp->head_dim, scale};
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    int rc = !m->layers ? pith_errf(err, "out of memory") : 0;
    if (!rc) rc = pith_cpu_init(&m->cpu, opt ? opt->n_threads : 0, force_scalar, err);
    if (!rc) rc = pith_attn_scratch_init(&m->attn, &shape, m->cpu.n_threads, err);
    if (!rc) {
        m->embd = pith_model_file_tensor(file, "token_embd.weight");
        pith_matrix em;
        rc = load_mat(file, "token_embd.weight", hp->n_vocab, hp->dim, &em, err);
        m->embd_row_bytes = em.row_bytes;
    }
    if (!rc) rc = load_vec(file, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc) {
        if (pith_model_file_tensor(file, "output.weight"))
            rc = load_mat(file, "output.weight", hp->n_vocab, hp->dim, &m->output, err);
        else
            rc = load_mat(file, "token_embd.weight", hp->n_vocab, hp->dim, &m->output, err);
    }
    /* Progress: loading a layer (F16/BF16 vectors converted, pages read) and repacking it count one each. */
    const double steps = 2.0 * hp->n_layers;
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = load_layer(file, hp, var, l, &m->layers[l], err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (l + 1) / steps);
    }
    if (!rc && hp->n_experts > 0) rc = place_experts(m, err);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = pack_layer(&m->cpu, &m->layers[l], err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (hp->n_layers + l + 1) / steps);
    }
    if (!rc) rc = pith_matrix_pack(&m->cpu, &m->output, err);
    if (!rc) rc = init_rope(m, file, err);
    if (!rc) rc = declare_memory(m, err);
    if (rc) {
        pith_err_prefix(err, "%s", path);
        llama_destroy(&m->base);
        return -1;
    }
    m->base.file = file;
    *out = &m->base;
    return 0;
}

static void free_scratch(llama *m) {
    free(m->x);
    free(m->xb);
    free(m->q);
    free(m->k);
    free(m->v);
    free(m->att);
    free(m->hb);
    free(m->hb2);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->rope_cos_swa);
    free(m->rope_sin_swa);
    m->x = m->xb = m->q = m->k = m->v = m->att = m->hb = m->hb2 = m->rope_cos = m->rope_sin = NULL;
    m->rope_cos_swa = m->rope_sin_swa = NULL;
    m->cap = 0;
}

static void llama_destroy(pith_model *base) {
    llama *m = base->impl;
    pith_kv_host_free(&m->kv);
    free(m->group_layers);
    free(m->layer_group);
    free(m->layer_index);
    if (m->layers)
        for (int l = 0; l < base->hp.n_layers; l++) free_layer(&m->layers[l]);
    free(m->layers);
    pith_matrix_free(&m->output);
    free(m->out_norm);
    free(m->inv_freq);
    free(m->inv_freq_swa);
    free_scratch(m);
    pith_moe_scratch_free(&m->moe);
    pith_attn_scratch_free(&m->attn);
    if (m->cpu.pool) pith_cpu_free(&m->cpu);
    free(m);
}

/* ---------------- forward ---------------- */

/* Grows the per-token scratch (contents need not survive) to at least n tokens, by half again at
 * least, so a slowly growing batch size does not reallocate every step. */
static int reserve(llama *m, int n, pith_err *err) {
    if (n <= m->cap) return 0;
    if (m->cap < (1 << 28) && n < m->cap + m->cap / 2) n = m->cap + m->cap / 2;
    const pith_hparams *hp = &m->base.hp;
    free_scratch(m);
    size_t N = (size_t)n, kvd = (size_t)m->kv_dim;
    m->x = malloc(N * hp->dim * sizeof(float));
    m->xb = malloc(N * hp->dim * sizeof(float));
    m->q = malloc(N * m->q_dim * sizeof(float));
    m->k = malloc(N * kvd * sizeof(float));
    m->v = malloc(N * kvd * sizeof(float));
    m->att = malloc(N * m->q_dim * sizeof(float));
    m->hb = malloc(N * hp->ffn_dim * sizeof(float));
    m->hb2 = malloc(N * hp->ffn_dim * sizeof(float));
    m->rope_cos = malloc(N * (hp->head_dim / 2) * sizeof(float));
    m->rope_sin = malloc(N * (hp->head_dim / 2) * sizeof(float));
    if (m->inv_freq_swa) {
        m->rope_cos_swa = malloc(N * (hp->head_dim / 2) * sizeof(float));
        m->rope_sin_swa = malloc(N * (hp->head_dim / 2) * sizeof(float));
    }
    if (!m->x || !m->xb || !m->q || !m->k || !m->v || !m->att || !m->hb || !m->hb2 || !m->rope_cos || !m->rope_sin ||
        (m->inv_freq_swa && (!m->rope_cos_swa || !m->rope_sin_swa))) {
        free_scratch(m);
        return pith_errf(err, "out of memory for a batch of %d tokens", n);
    }
    int widest = hp->dim > hp->ffn_dim ? hp->dim : hp->ffn_dim;
    widest = widest > m->q_dim ? widest : m->q_dim;
    if (pith_cpu_reserve(&m->cpu, n, widest, err) || pith_attn_scratch_reserve(&m->attn, n, err) ||
        (hp->n_experts > 0 && pith_moe_reserve(&m->cpu, &m->moe_cfg, &m->moe, n, err))) {
        free_scratch(m);
        return -1;
    }
    m->cap = n;
    return 0;
}

static int llama_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    return reserve(base->impl, lim->max_batch_tokens, err);
}

static int llama_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err) {
    llama *m = base->impl;
    if (pith_kv_host_allocated(&m->kv)) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    for (int g = 0; g < lay->n_groups; g++) /* a head's row of a slot must be whole Q8_0 blocks */
        if (lay->type[g] == PITH_Q8_0 && base->hp.head_dim % 32)
            return pith_errf(err, "a Q8_0 KV cache needs a head dimension that is a multiple of 32, not %d", base->hp.head_dim);
    return pith_kv_host_alloc(&m->kv, &base->mem, lay, err);
}

static void llama_mem_free(pith_model *base) { pith_kv_host_free(&((llama *)base->impl)->kv); }

static int llama_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_kv_host_copy_blocks(&((llama *)base->impl)->kv, g, src, dst, n, err);
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void rope(float *v, const float *cs, const float *sn, int hd, pith_rope_style style) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        int a = style == PITH_ROPE_ADJACENT ? 2 * i : i, b = style == PITH_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* Per-token work between two matmuls: a row function run over all tokens, split across threads. */
typedef struct row_job {
    llama *m;
    const pith_batch *b;
    int layer;
    int n;
    void (*row)(struct row_job *j, int t);
    int chunk;
    _Atomic int next;
} row_job;

static void row_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    row_job *j = arg;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (t0 >= j->n) break;
        int t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
        for (int t = t0; t < t1; t++) j->row(j, t);
    }
}

/* width: elements each row touches, a measure of its work */
static void run_rows(llama *m, row_job *j, void (*row)(row_job *j, int t), int width) {
    j->row = row;
    j->chunk = j->n / (4 * m->cpu.n_threads);
    if (j->chunk < 1) j->chunk = 1;
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    pith_pool_run_sized(m->cpu.pool, row_worker, j, (double)j->n * width);
}

static void embed_row(row_job *j, int t) {
    llama *m = j->m;
    int dim = m->base.hp.dim, half = m->base.hp.head_dim / 2;
    const uint8_t *src = (const uint8_t *)m->embd->data + (size_t)j->b->tokens[t] * m->embd_row_bytes;
    float *x = m->x + (size_t)t * dim;
    pith_dequantize_row(m->embd->type, src, x, dim);
    if (m->var.embed_scale != 0)
        for (int i = 0; i < dim; i++) x[i] *= m->var.embed_scale;
    double pos = j->b->positions[t], ms = m->rope_mscale;
    for (int i = 0; i < half; i++) {
        double angle = pos * m->inv_freq[i];
        m->rope_cos[(size_t)t * half + i] = (float)(cos(angle) * ms);
        m->rope_sin[(size_t)t * half + i] = (float)(sin(angle) * ms);
    }
    for (int i = 0; m->inv_freq_swa && i < half; i++) {
        double angle = pos * m->inv_freq_swa[i];
        m->rope_cos_swa[(size_t)t * half + i] = (float)cos(angle);
        m->rope_sin_swa[(size_t)t * half + i] = (float)sin(angle);
    }
}

static void attn_norm_row(row_job *j, int t) {
    llama *m = j->m;
    int dim = m->base.hp.dim;
    rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, m->layers[j->layer].attn_norm, dim, m->base.hp.norm_eps);
}

static void ffn_norm_row(row_job *j, int t) {
    llama *m = j->m;
    int dim = m->base.hp.dim;
    rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, m->layers[j->layer].ffn_norm, dim, m->base.hp.norm_eps);
}

/* Bias, QK-norm and RoPE on this token's Q and K, then its K and V into the cache. */
static void qkv_row(row_job *j, int t) {
    llama *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    const llama_layer *L = &m->layers[j->layer];
    int hd = hp->head_dim, kvd = m->kv_dim, half = hd / 2;
    float *q = m->q + (size_t)t * m->q_dim, *k = m->k + (size_t)t * kvd, *v = m->v + (size_t)t * kvd;
    if (L->bq) {
        for (int i = 0; i < m->q_dim; i++) q[i] += L->bq[i];
        for (int i = 0; i < kvd; i++) k[i] += L->bk[i], v[i] += L->bv[i];
    }
    bool local = m->inv_freq_swa && pith_hparams_layer_swa(hp, j->layer);
    const float *cs = (local ? m->rope_cos_swa : m->rope_cos) + (size_t)t * half;
    const float *sn = (local ? m->rope_sin_swa : m->rope_sin) + (size_t)t * half;
    bool use_rope = !pith_hparams_layer_no_rope(hp, j->layer);
    for (int h = 0; h < hp->n_heads; h++) {
        if (L->q_norm) rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->norm_eps);
        if (use_rope) rope(q + h * hd, cs, sn, hd, hp->rope_style);
    }
    for (int h = 0; h < hp->n_kv_heads; h++) {
        if (L->k_norm) rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->norm_eps);
        if (use_rope) rope(k + h * hd, cs, sn, hd, hp->rope_style);
    }
    /* head-major inside the block (kv.h): head h of this slot is row slot % bs of the block's head h */
    int g = m->layer_group[j->layer];
    const pith_kv_cache *kv = &m->kv.groups[g];
    size_t bs = (size_t)kv->block_size, slot = (size_t)j->b->mem[g].slots[t];
    size_t block_off = pith_kv_k_offset(kv, m->layer_index[j->layer], (int)(slot / bs));
    for (int h = 0; h < hp->n_kv_heads; h++) {
        size_t off = block_off + ((size_t)h * bs + slot % bs) * hd;
        pith_kv_store_f32(m->cpu.k, kv->type, k + h * hd, kv->k, off, (size_t)hd);
        pith_kv_store_f32(m->cpu.k, kv->type, v + h * hd, kv->v, off, (size_t)hd);
    }
}

static void swiglu_row(row_job *j, int t) {
    llama *m = j->m;
    int ffn = m->base.hp.ffn_dim;
    float *g = m->hb + (size_t)t * ffn, *u = m->hb2 + (size_t)t * ffn;
    m->cpu.k->silu_mul(g, u, ffn);
}

/* GELU with the tanh approximation (PyTorch's gelu(approximate="tanh")) of the gate, times up. */
static void geglu_row(row_job *j, int t) {
    llama *m = j->m;
    int ffn = m->base.hp.ffn_dim;
    float *g = m->hb + (size_t)t * ffn, *u = m->hb2 + (size_t)t * ffn;
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int i = 0; i < ffn; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

/* x += RMSNorm(xb) with the layer's post-attention or post-FFN norm (gemma3). */
static void post_norm_add(llama *m, int t, const float *w) {
    int dim = m->base.hp.dim;
    float *x = m->x + (size_t)t * dim, *xb = m->xb + (size_t)t * dim;
    rmsnorm(xb, xb, w, dim, m->base.hp.norm_eps);
    for (int i = 0; i < dim; i++) x[i] += xb[i];
}
static void post_attn_row(row_job *j, int t) { post_norm_add(j->m, t, j->m->layers[j->layer].post_attn_norm); }
static void post_ffw_row(row_job *j, int t) { post_norm_add(j->m, t, j->m->layers[j->layer].post_ffw_norm); }

static void out_bias_row(row_job *j, int t) {
    llama *m = j->m;
    int dim = m->base.hp.dim;
    const float *bo = m->layers[j->layer].bo;
    float *y = (m->layers[j->layer].post_attn_norm ? m->xb : m->x) + (size_t)t * dim;
    for (int i = 0; i < dim; i++) y[i] += bo[i];
}

static void out_norm_row(row_job *j, int t) {
    llama *m = j->m;
    int dim = m->base.hp.dim;
    rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, m->out_norm, dim, m->base.hp.norm_eps);
}

/* After the last layer's attention only the rows that want logits or hidden states matter: moves their attention output
 * and residual rows to the front (in batch order) and returns their count, so the rest of the layer and
 * the output projection skip the others. */
static int keep_logit_rows(llama *m, const pith_batch *b) {
    int n = 0, dim = m->base.hp.dim;
    for (int t = 0; t < b->n_tokens; t++) {
        if (!b->want_logits[t] && !(b->want_hidden && b->want_hidden[t])) continue;
        if (n != t) {
            memcpy(m->att + (size_t)n * m->q_dim, m->att + (size_t)t * m->q_dim, m->q_dim * sizeof(float));
            memcpy(m->x + (size_t)n * dim, m->x + (size_t)t * dim, dim * sizeof(float));
        }
        n++;
    }
    return n;
}

static int layer_forward(llama *m, const pith_batch *b, int l, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    const llama_layer *L = &m->layers[l];
    const int dim = hp->dim, kvd = m->kv_dim, ffn = hp->ffn_dim;
    int n = b->n_tokens;
    row_job j = {.m = m, .b = b, .layer = l, .n = n};
    pith_acts a;

    run_rows(m, &j, attn_norm_row, dim);
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out qkv[] = {
        {&L->wq, m->q, m->q_dim, false}, {&L->wk, m->k, kvd, false}, {&L->wv, m->v, kvd, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, qkv, 3, err)) return -1;
    run_rows(m, &j, qkv_row, 4 * (m->q_dim + 2 * kvd));

    const int g = m->layer_group[l];
    const pith_kv_cache *kv = &m->kv.groups[g];
    const pith_mem_group *mg = &m->base.mem.groups[g];
    size_t layer_off = pith_kv_bytes(kv->type, pith_kv_k_offset(kv, m->layer_index[l], 0));
    pith_attn_args aa = {
        .n_tokens = n, .positions = b->positions, .seq = b->seq, .block_tables = b->mem[g].block_tables,
        .max_blocks = b->mem[g].max_blocks, .block_size = kv->block_size,
        .window = mg->kind == PITH_MEM_WINDOW ? mg->window : 0,
        .k_cache = (const uint8_t *)kv->k + layer_off, .v_cache = (const uint8_t *)kv->v + layer_off,
        .kv_type = kv->type, .kv_dim = kvd, .q = m->q, .q_ld = m->q_dim, .out = m->att, .out_ld = m->q_dim,
        .sinks = L->sinks,
    };
    pith_attention(&m->cpu, &m->attn, &aa);
    if (l == hp->n_layers - 1 && (n = j.n = keep_logit_rows(m, b)) == 0) return 0;
    pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
    if (L->post_attn_norm) {
        if (pith_cpu_matmul(&m->cpu, &L->wo, &a, m->xb, dim, false, err)) return -1;
        if (L->bo) run_rows(m, &j, out_bias_row, dim);
        run_rows(m, &j, post_attn_row, 2 * dim);
    } else if (pith_cpu_matmul(&m->cpu, &L->wo, &a, m->x, dim, true, err)) {
        return -1;
    } else if (L->bo) {
        run_rows(m, &j, out_bias_row, dim);
    }

    run_rows(m, &j, ffn_norm_row, dim);
    if (L->moe) return pith_moe_forward(&m->cpu, L->moe, &m->moe, m->xb, dim, n, m->x, dim, m->moe_loop, err);
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out gate_up[] = {{&L->gate, m->hb, ffn, false}, {&L->up, m->hb2, ffn, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, gate_up, 2, err)) return -1;
    run_rows(m, &j, m->var.gelu_tanh ? geglu_row : swiglu_row, 8 * ffn);
    pith_acts_bind(&m->cpu, &a, m->hb, n, ffn, ffn);
    if (!L->post_ffw_norm) return pith_cpu_matmul(&m->cpu, &L->down, &a, m->x, dim, true, err);
    if (pith_cpu_matmul(&m->cpu, &L->down, &a, m->xb, dim, false, err)) return -1;
    run_rows(m, &j, post_ffw_row, 2 * dim);
    return 0;
}

static int llama_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    llama *m = base->impl;
    const pith_hparams *hp = &base->hp;
    if (!pith_kv_host_allocated(&m->kv) && base->mem.n_groups > 0) return pith_errf(err, "the model's memory is not allocated");
    if (pith_batch_check(b, &base->mem, &m->kv, hp->n_vocab, err) || reserve(m, b->n_tokens, err)) return -1;
    if (b->n_tokens == 0) return 0;
    row_job j = {.m = m, .b = b, .n = b->n_tokens};
    run_rows(m, &j, embed_row, hp->dim + 16 * hp->head_dim);
    for (int l = 0; l < hp->n_layers; l++)
        if (layer_forward(m, b, l, err)) return -1;

    /* the last layer left only the rows that want logits or hidden states, in order */
    int n_kept = 0, n_out = 0, n_hid = 0;
    for (int t = 0; t < b->n_tokens; t++) n_kept += b->want_logits[t] || (b->want_hidden && b->want_hidden[t]);
    if (n_kept == 0) return 0;
    j.n = n_kept;
    run_rows(m, &j, out_norm_row, hp->dim);
    /* hidden rows out, then the logits rows to the front of xb (in order: r only moves down) */
    for (int t = 0, r = 0; t < b->n_tokens; t++) {
        bool wl = b->want_logits[t] != 0, wh = b->want_hidden && b->want_hidden[t];
        if (!wl && !wh) continue;
        const float *row = m->xb + (size_t)r++ * hp->dim;
        if (wh) memcpy(b->hidden + (size_t)n_hid++ * hp->dim, row, (size_t)hp->dim * sizeof(float));
        if (wl && m->xb + (size_t)n_out * hp->dim != row)
            memmove(m->xb + (size_t)n_out * hp->dim, row, (size_t)hp->dim * sizeof(float));
        n_out += wl;
    }
    if (n_out == 0) return 0;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n_out, hp->dim, hp->dim);
    if (pith_cpu_matmul(&m->cpu, &m->output, &a, logits, hp->n_vocab, false, err)) return -1;
    if (hp->final_logit_softcap > 0) {
        const float cap = hp->final_logit_softcap, inv = 1.0f / cap;
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] = cap * tanhf(logits[i] * inv);
    }
    return 0;
}
