/* The Nemotron-H forward pass (see nemotronh_arch.c), over a flat batch and the model's two memory groups.
 *
 * One step: embed every token; per layer, RMSNorm (the layer's one norm) and then its block, whose
 * output is added to the residual:
 *   Mamba2 layers: model/mamba2.c (projection, convolution and SSD scan with carried state, gated norm
 *     per B/C group, output projection);
 *   attention layers: Q/K/V projections, no RoPE, K/V into the token's slot of the FULL group, causal
 *     attention (scores times 1/sqrt(head_dim)) through the block tables, the output projection;
 *   MLP layers: down(relu(up(x))^2);
 * finally output_norm and the vocabulary projection (tied unless output.weight exists), only for the rows
 * that want logits or hidden states (a last MLP layer runs on those rows alone).
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the Mamba2 layers
 * (mamba2.h's state layout); MLP layers keep nothing. State checkpoints (batch.h) are mamba2.c's. */
#include "model/nemotronh.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quants.h"
#include "model/hybrid_common.h"
#include "model/mamba2.h"
#include "pith/kv.h"

typedef enum nh_kind { NH_MAMBA, NH_ATTN, NH_MLP } nh_kind;

typedef struct nh_layer {
    nh_kind kind;
    float *norm;
    pith_mamba2_layer ssm;
    pith_matrix wq, wk, wv, wo, up, down;
} nh_layer;

typedef struct nh {
    pith_model base;
    pith_cpu cpu;
    pith_attn_scratch attn;
    int q_dim, kv_dim, ffn;
    pith_mamba2_dims md;
    bool portable;
    pith_kv_host mem;
    int *group_layers, *layer_group, *layer_index; /* [n_layers] */
    const pith_tensor *embd;
    size_t embd_row_bytes;
    float *out_norm;
    pith_matrix output;
    nh_layer *layers;
    int cap; /* scratch for up to cap tokens */
    float *x, *xb, *q, *k, *v, *att, *proj, *hb;
    int *seq_start;
} nh;

/* ---------------- build ---------------- */

static int load_layer(nh *m, const pith_model_file *f, int l, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    nh_layer *L = &m->layers[l];
    int dim = hp->dim;
    char n[96];
    L->kind = pith_layer_bit(hp->layer_recurrent, l) ? NH_MAMBA : pith_layer_bit(hp->layer_mlp, l) ? NH_MLP : NH_ATTN;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    int rc = pith_hy_load_vec(f, NAME("attn_norm.weight"), dim, &L->norm, err);
    if (!rc && L->kind == NH_MAMBA) rc = pith_mamba2_load(f, l, &m->md, dim, &L->ssm, err);
    if (!rc && L->kind == NH_MLP)
        rc = pith_hy_load_mat(f, NAME("ffn_up.weight"), m->ffn, dim, &L->up, err) ||
             pith_hy_load_mat(f, NAME("ffn_down.weight"), dim, m->ffn, &L->down, err);
    if (!rc && L->kind == NH_ATTN)
        rc = pith_hy_load_mat(f, NAME("attn_q.weight"), m->q_dim, dim, &L->wq, err) ||
             pith_hy_load_mat(f, NAME("attn_k.weight"), m->kv_dim, dim, &L->wk, err) ||
             pith_hy_load_mat(f, NAME("attn_v.weight"), m->kv_dim, dim, &L->wv, err) ||
             pith_hy_load_mat(f, NAME("attn_output.weight"), dim, m->q_dim, &L->wo, err);
    if (!rc && L->kind != NH_MAMBA && pith_model_file_tensor(f, NAME("ssm_in.weight")))
        rc = pith_errf(err, "tensor %s in a layer the metadata does not make Mamba2", n);
    const char *biases[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_up.bias",
                            "ffn_down.bias", "ssm_in.bias", "ssm_out.bias"};
    for (size_t i = 0; !rc && i < sizeof biases / sizeof *biases; i++)
        if (pith_model_file_tensor(f, NAME(biases[i]))) rc = pith_errf(err, "tensor %s: biases are not supported", n);
#undef NAME
    return rc ? pith_err_prefix(err, "layer %d", l) : 0;
}

static pith_matrix *layer_mat(nh_layer *L, int i) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->up, &L->down};
    return i < (int)(sizeof ms / sizeof *ms) ? ms[i] : NULL;
}

static void nh_destroy(pith_model *base);
static int nh_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err);
static int nh_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err);
static void nh_mem_free(pith_model *base);
static int nh_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
static int nh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops nh_ops = {
    .prepare = nh_prepare, .mem_alloc = nh_mem_alloc, .mem_free = nh_mem_free,
    .copy_blocks = nh_copy_blocks, .forward = nh_forward, .destroy = nh_destroy,
};

int pith_nemotronh_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    nh *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->base.ops = &nh_ops;
    m->base.hp = *hp;
    m->base.impl = m;
    m->base.has_hidden = true;
    m->base.state_checkpoints = true;
    m->q_dim = hp->n_heads * hp->head_dim;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->ffn = hp->ffn_dim;
    pith_mamba2_dims_of(hp, true, &m->md); /* MambaRMSNormGated: per group in both formats */
    const char *fs = getenv("PITH_FORCE_SCALAR");
    bool force_scalar = fs && *fs && strcmp(fs, "0") != 0;
    m->portable = force_scalar;
    pith_attn_shape shape = {hp->n_heads, hp->n_kv_heads, hp->head_dim, (float)(1.0 / sqrt(hp->head_dim))};
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    int rc = !m->layers ? pith_errf(err, "out of memory") : 0;
    if (!rc) rc = pith_cpu_init(&m->cpu, opt ? opt->n_threads : 0, force_scalar, err);
    if (!rc) rc = pith_attn_scratch_init(&m->attn, &shape, m->cpu.n_threads, err);
    if (!rc) rc = pith_hy_load_io(file, hp, "output_norm.weight", &m->embd, &m->embd_row_bytes, &m->out_norm, &m->output, err);
    const double steps = 2.0 * hp->n_layers;
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = load_layer(m, file, l, err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (l + 1) / steps);
    }
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        nh_layer *L = &m->layers[l];
        for (int i = 0; !rc && layer_mat(L, i); i++)
            if (layer_mat(L, i)->data) rc = pith_matrix_pack(&m->cpu, layer_mat(L, i), err);
        if (!rc && L->kind == NH_MAMBA) rc = pith_mamba2_pack(&m->cpu, &L->ssm, err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (hp->n_layers + l + 1) / steps);
    }
    if (!rc) rc = pith_matrix_pack(&m->cpu, &m->output, err);
    /* MLP layers keep nothing (pith_hy_declare_memory leaves hp.layer_mlp layers out) */
    if (!rc) rc = pith_hy_declare_memory(&m->base, m->kv_dim, m->md.conv_floats + m->md.ssm_floats, 0, &m->group_layers,
                                            &m->layer_group, &m->layer_index, err);
    if (rc) {
        pith_err_prefix(err, "%s", pith_model_file_path(file));
        nh_destroy(&m->base);
        return -1;
    }
    m->base.file = file;
    *out = &m->base;
    return 0;
}

static void free_scratch(nh *m) {
    float **bufs[] = {&m->x, &m->xb, &m->q, &m->k, &m->v, &m->att, &m->proj, &m->hb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(*bufs[i]), *bufs[i] = NULL;
    free(m->seq_start);
    m->seq_start = NULL;
    m->cap = 0;
}

static void nh_destroy(pith_model *base) {
    nh *m = base->impl;
    pith_kv_host_free(&m->mem);
    free(m->group_layers);
    free(m->layer_group);
    free(m->layer_index);
    for (int l = 0; m->layers && l < base->hp.n_layers; l++) {
        nh_layer *L = &m->layers[l];
        for (int i = 0; layer_mat(L, i); i++) pith_matrix_free(layer_mat(L, i));
        pith_mamba2_free(&L->ssm);
        free(L->norm);
    }
    free(m->layers);
    pith_matrix_free(&m->output);
    free(m->out_norm);
    free_scratch(m);
    pith_attn_scratch_free(&m->attn);
    if (m->cpu.pool) pith_cpu_free(&m->cpu);
    free(m);
}

/* ---------------- memory ---------------- */

static int reserve(nh *m, int n, pith_err *err) {
    if (n <= m->cap) return 0;
    if (m->cap < (1 << 28) && n < m->cap + m->cap / 2) n = m->cap + m->cap / 2;
    free_scratch(m);
    size_t N = (size_t)n, dim = (size_t)m->base.hp.dim;
    size_t att = (size_t)(m->q_dim > m->md.inner ? m->q_dim : m->md.inner);
    m->x = malloc(N * dim * sizeof(float));
    m->xb = malloc(N * dim * sizeof(float));
    m->q = malloc(N * m->q_dim * sizeof(float));
    m->k = malloc(N * m->kv_dim * sizeof(float));
    m->v = malloc(N * m->kv_dim * sizeof(float));
    m->att = malloc(N * att * sizeof(float));
    m->proj = malloc(N * m->md.proj_dim * sizeof(float));
    m->hb = malloc(N * m->ffn * sizeof(float));
    m->seq_start = malloc((N + 1) * sizeof(int));
    if (!m->x || !m->xb || !m->q || !m->k || !m->v || !m->att || !m->proj || !m->hb || !m->seq_start) {
        free_scratch(m);
        return pith_errf(err, "out of memory for a batch of %d tokens", n);
    }
    int widest = m->base.hp.dim > m->ffn ? m->base.hp.dim : m->ffn;
    widest = widest > m->q_dim ? widest : m->q_dim;
    widest = widest > m->md.proj_dim ? widest : m->md.proj_dim;
    if (pith_cpu_reserve(&m->cpu, n, widest, err) || pith_attn_scratch_reserve(&m->attn, n, err)) {
        free_scratch(m);
        return -1;
    }
    m->cap = n;
    return 0;
}

static int nh_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    return reserve(base->impl, lim->max_batch_tokens, err);
}

static int nh_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err) {
    return pith_hy_mem_alloc(&((nh *)base->impl)->mem, &base->mem, lay, err);
}

static void nh_mem_free(pith_model *base) { pith_kv_host_free(&((nh *)base->impl)->mem); }

static int nh_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_hy_copy_blocks(&((nh *)base->impl)->mem, g, src, dst, n, err);
}

/* ---------------- forward ---------------- */

static void embed_row(pith_hy_job *j, int t, int ith) {
    (void)ith;
    nh *m = j->m;
    int dim = m->base.hp.dim;
    const uint8_t *src = (const uint8_t *)m->embd->data + (size_t)j->b->tokens[t] * m->embd_row_bytes;
    pith_dequantize_row(m->embd->type, src, m->x + (size_t)t * dim, dim);
}

static void norm_row(pith_hy_job *j, int t, int ith) {
    (void)ith;
    nh *m = j->m;
    int dim = m->base.hp.dim;
    pith_hy_rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, j->norm, dim, m->base.hp.norm_eps);
}

static void store_kv_row(pith_hy_job *j, int t, int ith) {
    (void)ith;
    nh *m = j->m;
    pith_hy_store_kv(&m->cpu, &m->mem, j->b, m->layer_group[j->layer], m->layer_index[j->layer], t,
                     m->k + (size_t)t * m->kv_dim, m->v + (size_t)t * m->kv_dim, m->base.hp.n_kv_heads,
                     m->base.hp.head_dim);
}

/* relu(x)^2 in place ("relu2"). */
static void relu2_row(pith_hy_job *j, int t, int ith) {
    (void)ith;
    nh *m = j->m;
    float *h = m->hb + (size_t)t * m->ffn;
    for (int i = 0; i < m->ffn; i++) h[i] = h[i] > 0 ? h[i] * h[i] : 0.0f;
}

static int attention_layer(nh *m, const pith_batch *b, int l, pith_hy_job *j, pith_err *err) {
    const nh_layer *L = &m->layers[l];
    int n = b->n_tokens, dim = m->base.hp.dim;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out qkv[] = {
        {&L->wq, m->q, (size_t)m->q_dim, false}, {&L->wk, m->k, m->kv_dim, false}, {&L->wv, m->v, m->kv_dim, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, qkv, 3, err)) return -1;
    pith_hy_run(&m->cpu, j, store_kv_row, n, 4.0 * m->kv_dim);
    pith_hy_attention(&m->cpu, &m->attn, &m->mem, b, m->layer_group[l], m->layer_index[l], m->kv_dim, m->q, m->q_dim,
                      m->att);
    pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
    return pith_cpu_matmul(&m->cpu, &L->wo, &a, m->x, dim, true, err);
}

static int mlp_layer(nh *m, const nh_layer *L, pith_hy_job *j, int n, pith_err *err) {
    int dim = m->base.hp.dim;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    if (pith_cpu_matmul(&m->cpu, &L->up, &a, m->hb, (size_t)m->ffn, false, err)) return -1;
    pith_hy_run(&m->cpu, j, relu2_row, n, 2.0 * m->ffn);
    pith_acts_bind(&m->cpu, &a, m->hb, n, m->ffn, m->ffn);
    return pith_cpu_matmul(&m->cpu, &L->down, &a, m->x, dim, true, err);
}

static int mamba_layer(nh *m, const pith_batch *b, int l, pith_err *err) {
    const pith_mamba2_run r = {
        .cpu = &m->cpu, .d = &m->md, .L = &m->layers[l].ssm, .b = b, .mem = &m->mem, .group = m->layer_group[l],
        .layer_index = m->layer_index[l], .seq_start = m->seq_start, .proj = m->proj, .y = m->att,
        .eps = m->base.hp.norm_eps, .out_scale = 1.0f, .portable = m->portable,
    };
    return pith_mamba2_forward(&r, m->xb, m->base.hp.dim, m->x, err);
}

static int nh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    nh *m = base->impl;
    const pith_hparams *hp = &base->hp;
    if (pith_hy_check(base, &m->mem, b, err) || reserve(m, b->n_tokens, err)) return -1;
    if (b->n_tokens == 0) return 0;
    if (pith_hy_seq_starts(b, m->seq_start, err)) return -1;
    pith_hy_job j = {.m = m, .b = b};
    pith_hy_run(&m->cpu, &j, embed_row, b->n_tokens, hp->dim);
    int n = b->n_tokens;
    for (int l = 0; l < hp->n_layers; l++) {
        const nh_layer *L = &m->layers[l];
        /* a last MLP layer needs only the rows that are read out; the mixers need every token */
        if (l == hp->n_layers - 1 && L->kind == NH_MLP && (n = pith_hy_keep_rows(m->x, b, hp->dim)) == 0) return 0;
        j.layer = l, j.norm = L->norm;
        pith_hy_run(&m->cpu, &j, norm_row, n, hp->dim);
        int rc = L->kind == NH_MAMBA  ? mamba_layer(m, b, l, err)
                 : L->kind == NH_ATTN ? attention_layer(m, b, l, &j, err)
                                      : mlp_layer(m, L, &j, n, err);
        if (rc) return -1;
    }
    if (m->layers[hp->n_layers - 1].kind != NH_MLP && (n = pith_hy_keep_rows(m->x, b, hp->dim)) == 0) return 0;
    j.norm = m->out_norm;
    pith_hy_run(&m->cpu, &j, norm_row, n, hp->dim);
    return pith_hy_output(&m->cpu, b, m->xb, hp->dim, &m->output, hp->n_vocab, logits, err);
}
