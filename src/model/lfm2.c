/* The LFM2 forward pass (see lfm2_arch.c), over a flat batch and the model's two memory groups.
 *
 * One step: embed every token; per layer, RMSNorm (operator_norm) and then its token mixer:
 *   attention layers: Q/K/V projections, an RMS norm on each Q and K head, RoPE over halves, K/V into
 *     the token's slot of the FULL group, causal attention through the group's block tables, the output
 *     projection added to the residual;
 *   convolution layers: in_proj into B, C and x (in that order), B * x through a causal depthwise
 *     convolution of width K whose last K-1 inputs are the sequence's carried state (zero at
 *     position 0), C times that, out_proj added to the residual;
 * then RMSNorm and a SwiGLU feed-forward added to the residual; finally token_embd_norm and the
 * vocabulary projection (tied to the embeddings unless output.weight exists), only for the rows that
 * want logits or hidden states. Every projection is one matmul over all tokens of the step.
 *
 * Memory: a FULL group of the attention layers (K and V of n_kv_heads * head_dim per token, F16) and a
 * RECURRENT group of the convolution layers: per sequence, for each convolution layer i of the group in
 * order, its state of (K - 1) x dim floats, [K - 1][dim] oldest first (recurrent.h), at float offset
 * i * (K - 1) * dim of the slot. A group is left out when the model has no layer of its kind.
 * Checkpoints (batch.h): a sequence's run is convolved in pieces ending at its checkpointed tokens, and
 * after each piece the state (the last K-1 inputs up to that token) is copied to the checkpoint slot. */
#include "model/lfm2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/recurrent.h"
#include "model/hybrid_common.h"
#include "pith/kv.h"

typedef struct lfm2_layer {
    bool conv;
    pith_matrix wq, wk, wv, wo, in_proj, out_proj, gate, up, down;
    float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    float *conv_w;              /* [dim][K] */
} lfm2_layer;

typedef struct lfm2 {
    pith_model base;
    pith_cpu cpu;
    pith_attn_scratch attn;
    int q_dim, kv_dim, K;
    pith_kv_host mem;
    int *group_layers, *layer_group, *layer_index; /* [n_layers] */
    const pith_tensor *embd;
    size_t embd_row_bytes;
    float *out_norm;
    pith_matrix output;
    lfm2_layer *layers;
    double *inv_freq;           /* [head_dim / 2] */
    /* scratch for up to cap tokens */
    int cap;
    float *x, *xb, *q, *k, *v, *att, *bcx, *hb, *hb2, *rope_cos, *rope_sin;
    int *seq_start;             /* [cap + 1]: first token of each sequence, then n_tokens */
} lfm2;

/* ---------------- build ---------------- */

static int load_layer(lfm2 *m, const pith_model_file *f, int l, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    lfm2_layer *L = &m->layers[l];
    int dim = hp->dim, ffn = hp->ffn_dim, hd = hp->head_dim;
    char n[96];
    L->conv = pith_layer_bit(hp->layer_recurrent, l);
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    if (pith_hy_load_vec(f, NAME("attn_norm.weight"), dim, &L->attn_norm, err) ||
        pith_hy_load_vec(f, NAME("ffn_norm.weight"), dim, &L->ffn_norm, err) ||
        pith_hy_load_mat(f, NAME("ffn_gate.weight"), ffn, dim, &L->gate, err) ||
        pith_hy_load_mat(f, NAME("ffn_up.weight"), ffn, dim, &L->up, err) ||
        pith_hy_load_mat(f, NAME("ffn_down.weight"), dim, ffn, &L->down, err))
        return pith_err_prefix(err, "layer %d", l);
    if (L->conv) {
        const pith_tensor *c = pith_model_file_tensor(f, NAME("shortconv.conv.weight"));
        if (c && c->ne[0] != m->K)
            return pith_errf(err, "layer %d: tensor %s: width %lld, expected %d", l, n, (long long)c->ne[0], m->K);
        if (pith_model_file_tensor(f, NAME("shortconv.in_proj.bias")) ||
            pith_model_file_tensor(f, NAME("shortconv.conv.bias")))
            return pith_errf(err, "layer %d: short convolution biases are not supported", l);
        if (pith_hy_load_vec(f, NAME("shortconv.conv.weight"), (int64_t)dim * m->K, &L->conv_w, err) ||
            pith_hy_load_mat(f, NAME("shortconv.in_proj.weight"), 3 * dim, dim, &L->in_proj, err) ||
            pith_hy_load_mat(f, NAME("shortconv.out_proj.weight"), dim, dim, &L->out_proj, err))
            return pith_err_prefix(err, "layer %d", l);
    } else if (pith_hy_load_mat(f, NAME("attn_q.weight"), m->q_dim, dim, &L->wq, err) ||
               pith_hy_load_mat(f, NAME("attn_k.weight"), m->kv_dim, dim, &L->wk, err) ||
               pith_hy_load_mat(f, NAME("attn_v.weight"), m->kv_dim, dim, &L->wv, err) ||
               pith_hy_load_mat(f, NAME("attn_output.weight"), dim, m->q_dim, &L->wo, err) ||
               pith_hy_load_vec(f, NAME("attn_q_norm.weight"), hd, &L->q_norm, err) ||
               pith_hy_load_vec(f, NAME("attn_k_norm.weight"), hd, &L->k_norm, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
#undef NAME
    return 0;
}

static pith_matrix *layer_mats(lfm2_layer *L, int i) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->in_proj, &L->out_proj, &L->gate, &L->up, &L->down};
    return i < (int)(sizeof ms / sizeof *ms) ? ms[i] : NULL;
}

static void free_layer(lfm2_layer *L) {
    for (int i = 0; layer_mats(L, i); i++) pith_matrix_free(layer_mats(L, i));
    free(L->attn_norm);
    free(L->ffn_norm);
    free(L->q_norm);
    free(L->k_norm);
    free(L->conv_w);
}

static void lfm2_destroy(pith_model *base);
static int lfm2_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err);
static int lfm2_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err);
static void lfm2_mem_free(pith_model *base);
static int lfm2_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
static int lfm2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops lfm2_ops = {
    .prepare = lfm2_prepare, .mem_alloc = lfm2_mem_alloc, .mem_free = lfm2_mem_free,
    .copy_blocks = lfm2_copy_blocks, .forward = lfm2_forward, .destroy = lfm2_destroy,
};

int pith_lfm2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    lfm2 *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->base.ops = &lfm2_ops;
    m->base.hp = *hp;
    m->base.impl = m;
    m->base.has_hidden = true;
    m->base.state_checkpoints = true; /* conv_unit copies the state after checkpointed tokens */
    m->q_dim = hp->n_heads * hp->head_dim;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->K = hp->conv_kernel;
    const char *fs = getenv("PITH_FORCE_SCALAR");
    bool force_scalar = fs && *fs && strcmp(fs, "0") != 0;
    pith_attn_shape shape = {hp->n_heads, hp->n_kv_heads, hp->head_dim, (float)(1.0 / sqrt(hp->head_dim))};
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    int rc = !m->layers ? pith_errf(err, "out of memory") : 0;
    if (!rc) rc = pith_cpu_init(&m->cpu, opt ? opt->n_threads : 0, force_scalar, err);
    if (!rc) rc = pith_attn_scratch_init(&m->attn, &shape, m->cpu.n_threads, err);
    if (!rc) rc = pith_hy_load_io(file, hp, "token_embd_norm.weight", &m->embd, &m->embd_row_bytes, &m->out_norm, &m->output, err);
    const double steps = 2.0 * hp->n_layers;
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = load_layer(m, file, l, err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (l + 1) / steps);
    }
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        for (int i = 0; !rc && layer_mats(&m->layers[l], i); i++)
            if (layer_mats(&m->layers[l], i)->data) rc = pith_matrix_pack(&m->cpu, layer_mats(&m->layers[l], i), err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (hp->n_layers + l + 1) / steps);
    }
    if (!rc) rc = pith_matrix_pack(&m->cpu, &m->output, err);
    if (!rc && !(m->inv_freq = malloc((size_t)(hp->head_dim / 2) * sizeof *m->inv_freq))) rc = pith_errf(err, "out of memory");
    for (int i = 0; !rc && i < hp->head_dim / 2; i++) m->inv_freq[i] = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim);
    if (!rc) rc = pith_hy_declare_memory(&m->base, m->kv_dim, (size_t)(m->K - 1) * (size_t)hp->dim, 0, &m->group_layers,
                                            &m->layer_group, &m->layer_index, err);
    if (rc) {
        pith_err_prefix(err, "%s", pith_model_file_path(file));
        lfm2_destroy(&m->base);
        return -1;
    }
    m->base.file = file;
    *out = &m->base;
    return 0;
}

static void free_scratch(lfm2 *m) {
    float **bufs[] = {&m->x, &m->xb, &m->q, &m->k, &m->v, &m->att, &m->bcx, &m->hb, &m->hb2, &m->rope_cos, &m->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(*bufs[i]), *bufs[i] = NULL;
    free(m->seq_start);
    m->seq_start = NULL;
    m->cap = 0;
}

static void lfm2_destroy(pith_model *base) {
    lfm2 *m = base->impl;
    pith_kv_host_free(&m->mem);
    free(m->group_layers);
    free(m->layer_group);
    free(m->layer_index);
    if (m->layers)
        for (int l = 0; l < base->hp.n_layers; l++) free_layer(&m->layers[l]);
    free(m->layers);
    pith_matrix_free(&m->output);
    free(m->out_norm);
    free(m->inv_freq);
    free_scratch(m);
    pith_attn_scratch_free(&m->attn);
    if (m->cpu.pool) pith_cpu_free(&m->cpu);
    free(m);
}

/* ---------------- memory ---------------- */

static int reserve(lfm2 *m, int n, pith_err *err) {
    if (n <= m->cap) return 0;
    if (m->cap < (1 << 28) && n < m->cap + m->cap / 2) n = m->cap + m->cap / 2;
    const pith_hparams *hp = &m->base.hp;
    free_scratch(m);
    size_t N = (size_t)n, dim = (size_t)hp->dim, half = (size_t)hp->head_dim / 2;
    size_t att = (size_t)m->q_dim > dim ? (size_t)m->q_dim : dim;
    m->x = malloc(N * dim * sizeof(float));
    m->xb = malloc(N * dim * sizeof(float));
    m->q = malloc(N * m->q_dim * sizeof(float));
    m->k = malloc(N * m->kv_dim * sizeof(float));
    m->v = malloc(N * m->kv_dim * sizeof(float));
    m->att = malloc(N * att * sizeof(float));
    m->bcx = malloc(N * 3 * dim * sizeof(float));
    m->hb = malloc(N * hp->ffn_dim * sizeof(float));
    m->hb2 = malloc(N * hp->ffn_dim * sizeof(float));
    m->rope_cos = malloc(N * half * sizeof(float));
    m->rope_sin = malloc(N * half * sizeof(float));
    m->seq_start = malloc((N + 1) * sizeof(int));
    if (!m->x || !m->xb || !m->q || !m->k || !m->v || !m->att || !m->bcx || !m->hb || !m->hb2 || !m->rope_cos ||
        !m->rope_sin || !m->seq_start) {
        free_scratch(m);
        return pith_errf(err, "out of memory for a batch of %d tokens", n);
    }
    int widest = hp->dim > hp->ffn_dim ? hp->dim : hp->ffn_dim;
    widest = widest > m->q_dim ? widest : m->q_dim;
    if (pith_cpu_reserve(&m->cpu, n, widest, err) || pith_attn_scratch_reserve(&m->attn, n, err)) {
        free_scratch(m);
        return -1;
    }
    m->cap = n;
    return 0;
}

static int lfm2_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    return reserve(base->impl, lim->max_batch_tokens, err);
}

static int lfm2_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err) {
    return pith_hy_mem_alloc(&((lfm2 *)base->impl)->mem, &base->mem, lay, err);
}

static void lfm2_mem_free(pith_model *base) { pith_kv_host_free(&((lfm2 *)base->impl)->mem); }

static int lfm2_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_hy_copy_blocks(&((lfm2 *)base->impl)->mem, g, src, dst, n, err);
}

/* ---------------- forward ---------------- */

typedef pith_hy_job job;

static void run(lfm2 *m, job *j, void (*row)(job *j, int t, int ith), int n, double width) {
    pith_hy_run(&m->cpu, j, row, n, width);
}

static void embed_row(job *j, int t, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    int dim = m->base.hp.dim, half = m->base.hp.head_dim / 2;
    const uint8_t *src = (const uint8_t *)m->embd->data + (size_t)j->b->tokens[t] * m->embd_row_bytes;
    pith_dequantize_row(m->embd->type, src, m->x + (size_t)t * dim, dim);
    double pos = j->b->positions[t];
    for (int i = 0; i < half; i++) {
        m->rope_cos[(size_t)t * half + i] = (float)cos(pos * m->inv_freq[i]);
        m->rope_sin[(size_t)t * half + i] = (float)sin(pos * m->inv_freq[i]);
    }
}

static void norm_row(job *j, int t, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    int dim = m->base.hp.dim;
    pith_hy_rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, j->norm, dim, m->base.hp.norm_eps);
}

static void rope(float *v, const float *cs, const float *sn, int hd) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs[i] - x1 * sn[i];
        v[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

/* QK norms and RoPE on this token's Q and K, then its K and V into the FULL group (head-major blocks,
 * as the Llama decoder lays them out: kv.h). */
static void qkv_row(job *j, int t, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    const lfm2_layer *L = &m->layers[j->layer];
    int hd = hp->head_dim, half = hd / 2;
    float *q = m->q + (size_t)t * m->q_dim, *k = m->k + (size_t)t * m->kv_dim, *v = m->v + (size_t)t * m->kv_dim;
    const float *cs = m->rope_cos + (size_t)t * half, *sn = m->rope_sin + (size_t)t * half;
    for (int h = 0; h < hp->n_heads; h++) {
        pith_hy_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->norm_eps);
        rope(q + h * hd, cs, sn, hd);
    }
    for (int h = 0; h < hp->n_kv_heads; h++) {
        pith_hy_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->norm_eps);
        rope(k + h * hd, cs, sn, hd);
    }
    pith_hy_store_kv(&m->cpu, &m->mem, j->b, m->layer_group[j->layer], m->layer_index[j->layer], t, k, v,
                     hp->n_kv_heads, hd);
}

static void bx_row(job *j, int t, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    int dim = m->base.hp.dim;
    const float *bcx = m->bcx + (size_t)t * 3 * dim;
    float *bx = m->att + (size_t)t * dim;
    for (int c = 0; c < dim; c++) bx[c] = bcx[c] * bcx[2 * dim + c];
}

#define CONV_CHANNELS 256

/* Unit u: sequence u / blocks, channels of block u % blocks: the convolution over the sequence's run,
 * in place in att, then times C. */
static void conv_unit(job *j, int u, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    const pith_batch *b = j->b;
    int dim = m->base.hp.dim, blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS, K = m->K;
    int s = u / blocks, c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < dim ? c0 + CONV_CHANNELS : dim;
    int t0 = m->seq_start[s], n = m->seq_start[s + 1] - t0, g = m->layer_group[j->layer];
    const pith_kv_cache *c = &m->mem.groups[g];
    float *state = (float *)(c->state + (size_t)b->mem[g].state_slots[s] * c->state_bytes) +
                   (size_t)m->layer_index[j->layer] * (K - 1) * dim;
    if (b->positions[t0] == 0)
        for (int r = 0; r < K - 1; r++) memset(state + (size_t)r * dim + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    float *x = m->att + (size_t)t0 * dim;
    const int32_t *ck = b->mem[g].checkpoints ? b->mem[g].checkpoints + t0 : NULL;
    /* in pieces ending at the tokens whose state is checkpointed (batch.h): after each, this unit's
     * channels of the state go into the checkpoint slot (the same arithmetic as one call) */
    for (int done = 0, end; done < n; done = end) {
        end = done + 1;
        while (end < n && !(ck && ck[end - 1] >= 0)) end++;
        pith_conv1d_args a = {end - done, dim, K, x + (size_t)done * dim, (size_t)dim, m->layers[j->layer].conv_w,
                              NULL, state, x + (size_t)done * dim, (size_t)dim, false, NULL};
        pith_conv1d(&a, c0, c1);
        if (ck && ck[end - 1] >= 0) {
            float *dst = (float *)(c->state + (size_t)ck[end - 1] * c->state_bytes) +
                         (size_t)m->layer_index[j->layer] * (K - 1) * dim;
            for (int r = 0; r < K - 1; r++)
                memcpy(dst + (size_t)r * dim + c0, state + (size_t)r * dim + c0, (size_t)(c1 - c0) * sizeof(float));
        }
    }
    for (int t = 0; t < n; t++) {
        const float *C = m->bcx + (size_t)(t0 + t) * 3 * dim + dim;
        float *y = x + (size_t)t * dim;
        for (int i = c0; i < c1; i++) y[i] *= C[i];
    }
}

static void swiglu_row(job *j, int t, int ith) {
    (void)ith;
    lfm2 *m = j->m;
    int ffn = m->base.hp.ffn_dim;
    m->cpu.k->silu_mul(m->hb + (size_t)t * ffn, m->hb2 + (size_t)t * ffn, ffn);
}

/* Moves the residual rows that want logits or hidden states to the front, in batch order. */
static int layer_forward(lfm2 *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    const lfm2_layer *L = &m->layers[l];
    const int dim = hp->dim, ffn = hp->ffn_dim;
    int n = b->n_tokens;
    job j = {.m = m, .b = b, .layer = l, .norm = L->attn_norm};
    pith_acts a;
    run(m, &j, norm_row, n, dim);
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    if (L->conv) {
        if (pith_cpu_matmul(&m->cpu, &L->in_proj, &a, m->bcx, 3 * (size_t)dim, false, err)) return -1;
        run(m, &j, bx_row, n, dim);
        int blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS;
        run(m, &j, conv_unit, b->n_seqs * blocks, (double)n / b->n_seqs * CONV_CHANNELS * (m->K + 1));
        pith_acts_bind(&m->cpu, &a, m->att, n, dim, dim);
        if (pith_cpu_matmul(&m->cpu, &L->out_proj, &a, m->x, dim, true, err)) return -1;
    } else {
        const pith_matmul_out qkv[] = {
            {&L->wq, m->q, m->q_dim, false}, {&L->wk, m->k, m->kv_dim, false}, {&L->wv, m->v, m->kv_dim, false}};
        if (pith_cpu_matmul_many(&m->cpu, &a, qkv, 3, err)) return -1;
        run(m, &j, qkv_row, n, 4.0 * (m->q_dim + 2 * m->kv_dim));
        const int g = m->layer_group[l];
        pith_hy_attention(&m->cpu, &m->attn, &m->mem, b, g, m->layer_index[l], m->kv_dim, m->q, m->q_dim, m->att);
        pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
        if (pith_cpu_matmul(&m->cpu, &L->wo, &a, m->x, dim, true, err)) return -1;
    }
    /* after the last mixer only the rows that want output matter */
    if (l == hp->n_layers - 1) n = pith_hy_keep_rows(m->x, b, hp->dim);
    *n_rows = n;
    if (n == 0) return 0;
    j.norm = L->ffn_norm;
    run(m, &j, norm_row, n, dim);
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out gate_up[] = {{&L->gate, m->hb, ffn, false}, {&L->up, m->hb2, ffn, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, gate_up, 2, err)) return -1;
    run(m, &j, swiglu_row, n, 8.0 * ffn);
    pith_acts_bind(&m->cpu, &a, m->hb, n, ffn, ffn);
    return pith_cpu_matmul(&m->cpu, &L->down, &a, m->x, dim, true, err);
}

static int lfm2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    lfm2 *m = base->impl;
    const pith_hparams *hp = &base->hp;
    if (pith_hy_check(base, &m->mem, b, err) || reserve(m, b->n_tokens, err)) return -1;
    if (b->n_tokens == 0) return 0;
    if (pith_hy_seq_starts(b, m->seq_start, err)) return -1; /* each sequence's run (contiguous: batch.h) */
    job j = {.m = m, .b = b};
    run(m, &j, embed_row, b->n_tokens, hp->dim + 16.0 * hp->head_dim);
    int n = b->n_tokens;
    for (int l = 0; l < hp->n_layers; l++)
        if (layer_forward(m, b, l, &n, err)) return -1;
    if (n == 0) return 0;
    j.norm = m->out_norm;
    run(m, &j, norm_row, n, hp->dim);
    return pith_hy_output(&m->cpu, b, m->xb, hp->dim, &m->output, hp->n_vocab, logits, err);
}
