/* The Granite 4.0-H forward pass (see granitehybrid_arch.c), over a flat batch and the model's two
 * memory groups.
 *
 * One step: embed every token (times embedding_scale); per layer, RMSNorm and then its token mixer:
 *   attention layers: Q/K/V projections, RoPE (only for position_embedding_type "rope"), K/V into the
 *     token's slot of the FULL group, causal attention (scores times attention_multiplier) through the
 *     block tables, the output projection;
 *   Mamba2 layers: ssm_in into [z | xBC | dt]; xBC through the causal convolution (its bias, SiLU) whose
 *     last K-1 inputs are the sequence's carried state; the SSD scan per head (recurrent.h) from the
 *     carried SSM state; y * silu(z), RMS-normed (per B/C group as llama.cpp does for GGUF files, over the
 *     whole width as transformers does for Hugging Face ones); ssm_out;
 * the mixer's output times residual_scale added to the residual; then RMSNorm and the shared SwiGLU MLP
 * (plus the routed experts when the model has them), times residual_scale, added; finally output_norm
 * and the vocabulary projection (tied unless output.weight exists) divided by logit_scale, only for the
 * rows that want logits or hidden states. The residual scale is applied to the input of each block's
 * last projection (the same product, rounded once more) or, with experts, to the summed FFN output
 * (model/moe.h runs the shared MLP as its shared expert then).
 *
 * The Mamba2 mixer itself is model/mamba2.c (shared with Nemotron-H). Every run goes through the
 * recurrent SSD kernel, a prefill chunk too: its result is then the same
 * bits however the scheduler cuts a prompt into chunks, batches it with others or restores it from a
 * snapshot, and with SIMD it is the faster form on a CPU (the chunked form does the same state
 * products, 2 x head_dim x d_state per token and head, plus its intra-chunk terms).
 *
 * State checkpoints (batch.h): a run is cut after every token with a checkpoint, whose conv and SSM
 * state (per unit of work: its channels or its head) is copied into the checkpoint slot, so the
 * engine's speculative decoding can roll the state back.
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the Mamba2
 * layers: per sequence, for each Mamba2 layer i of the group in order, its convolution state ([K - 1]
 * [conv channels] floats, oldest first) followed by its SSM state ([heads][head_dim][d_state] floats),
 * at float offset i * (both) of the slot. A group is left out when the model has no layer of its kind. */
#include "model/granitehybrid.h"
#include "model/hybrid_common.h"
#include "model/mamba2.h"

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
#include "backend/cpu/recurrent.h"
#include "backend/cpu/batch_check.h"
#include "backend/cpu/moe.h"
#include "model/layers.h"
#include "pith/kv.h"

typedef struct gh_layer {
    bool mamba;
    pith_matrix wq, wk, wv, wo, gate, up, down; /* gate, up, down: the dense shared MLP */
    pith_mamba2_layer ssm;
    float *attn_norm, *ffn_norm;
    pith_moe_layer *moe; /* routed experts with the shared MLP as their shared expert, or NULL */
} gh_layer;

typedef struct gh {
    pith_model base;
    pith_cpu cpu;
    pith_attn_scratch attn;
    int q_dim, kv_dim, ffn;
    pith_mamba2_dims md;
    bool rope, adjacent, portable;
    float emb_scale, res_scale, logit_div;
    pith_kv_host mem;
    int *group_layers, *layer_group, *layer_index;
    const pith_tensor *embd;
    size_t embd_row_bytes;
    float *out_norm;
    pith_matrix output;
    gh_layer *layers;
    double *inv_freq;
    bool has_moe;
    pith_moe_config moe_cfg;
    pith_moe_scratch moe_s;
    pith_moe_loop moe_loop; /* PITH_MOE_NAIVE: the benchmarks' baseline loops (moe.h) */
    int cap;
    float *x, *xb, *q, *k, *v, *att, *proj, *hb, *tmp, *rope_cos, *rope_sin;
    int *seq_start;
} gh;

/* ---------------- build ---------------- */

/* Rows [row0, row0 + rows) of a matrix tensor, as a matrix (Hugging Face's fused [gate | up]). */
static int view_rows(const pith_model_file *f, const char *name, int row0, int rows, int cols, pith_matrix *m,
                     pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (t->ne[0] != cols || t->ne[1] != 2 * (int64_t)rows || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %d]", name, (long long)t->ne[0],
                         (long long)t->ne[1], cols, 2 * rows);
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || t->nbytes < rb * 2 * (size_t)rows) return pith_errf(err, "tensor %s: bad type or size", name);
    pith_tensor v = *t;
    v.ne[1] = rows;
    v.data = (const uint8_t *)t->data + (size_t)row0 * rb;
    v.nbytes = rb * (size_t)rows;
    return pith_matrix_from_tensor(m, &v, err);
}

/* The shared MLP's gate and up: GGUF's two matrices (gate_name, up_name), or halves of Hugging Face's
 * fused ffn_gate_up. */
static int load_gate_up(const pith_model_file *f, int l, const char *gate_name, const char *up_name, int F, int dim,
                        pith_matrix *gate, pith_matrix *up, pith_err *err) {
    char n[96], u[96];
    snprintf(n, sizeof n, "blk.%d.ffn_gate_up.weight", l);
    if (pith_model_file_tensor(f, n))
        return view_rows(f, n, 0, F, dim, gate, err) || view_rows(f, n, F, F, dim, up, err) ? -1 : 0;
    snprintf(n, sizeof n, "blk.%d.%s", l, gate_name);
    snprintf(u, sizeof u, "blk.%d.%s", l, up_name);
    return pith_hy_load_mat(f, n, F, dim, gate, err) || pith_hy_load_mat(f, u, F, dim, up, err) ? -1 : 0;
}

/* Hugging Face experts: input_linear {dim, 2 ffn, experts} ([gate | up] per expert) and output_linear
 * {ffn, dim, experts}, viewed expert by expert (nothing is copied until packing). */
static int view_experts(const pith_model_file *f, int l, const char *name, int E, int rows, int cols, int part,
                        pith_matrix *out, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    int stored = part < 0 ? rows : 2 * rows;
    if (!t) return pith_errf(err, "layer %d: missing tensor %s", l, name);
    if (t->ne[0] != cols || t->ne[1] != stored || t->ne[2] != E || t->ne[3] != 1)
        return pith_errf(err, "layer %d: tensor %s: shape [%lld, %lld, %lld], expected [%d, %d, %d]", l, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], cols, stored, E);
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || t->nbytes < rb * (size_t)stored * E) return pith_errf(err, "layer %d: tensor %s: bad type or size", l, name);
    for (int e = 0; e < E; e++) {
        pith_tensor v = *t;
        v.n_dims = 2;
        v.ne[1] = rows, v.ne[2] = 1;
        v.data = (const uint8_t *)t->data + ((size_t)e * stored + (part > 0 ? rows : 0)) * rb;
        v.nbytes = rb * (size_t)rows;
        if (pith_matrix_from_tensor(&out[e], &v, err)) return pith_err_prefix(err, "layer %d", l);
    }
    return 0;
}

static int load_moe(gh *m, const pith_model_file *f, int l, gh_layer *L, pith_err *err) {
    char n[96];
    if (!(L->moe = calloc(1, sizeof *L->moe))) return pith_errf(err, "out of memory");
    snprintf(n, sizeof n, "blk.%d.ffn_gate_up_exps.weight", l);
    if (!pith_model_file_tensor(f, n)) {
        if (pith_moe_load(f, l, &m->moe_cfg, NULL, L->moe, err)) return -1;
        return L->moe->has_shared ? 0 : pith_errf(err, "layer %d: missing tensor blk.%d.ffn_gate_shexp.weight (the shared MLP)", l, l);
    }
    /* Hugging Face: the experts viewed from the fused tensors, the shared MLP as the shared expert */
    pith_moe_layer *M = L->moe;
    const int E = m->moe_cfg.n_experts, F = m->moe_cfg.ffn, dim = m->base.hp.dim;
    M->cfg = m->moe_cfg;
    M->gate = calloc((size_t)E, sizeof *M->gate);
    M->up = calloc((size_t)E, sizeof *M->up);
    M->down = calloc((size_t)E, sizeof *M->down);
    if (!M->gate || !M->up || !M->down) return pith_errf(err, "out of memory");
    char d[96], r[96];
    snprintf(d, sizeof d, "blk.%d.ffn_down_exps.weight", l);
    snprintf(r, sizeof r, "blk.%d.ffn_gate_inp.weight", l);
    if (view_experts(f, l, n, E, F, dim, 0, M->gate, err) || view_experts(f, l, n, E, F, dim, 1, M->up, err) ||
        view_experts(f, l, d, E, dim, F, -1, M->down, err) || pith_hy_load_mat(f, r, E, dim, &M->router, err))
        return -1;
    snprintf(d, sizeof d, "blk.%d.ffn_down.weight", l);
    M->has_shared = true;
    return load_gate_up(f, l, "", "", m->ffn, dim, &M->sh_gate, &M->sh_up, err) ||
                   pith_hy_load_mat(f, d, dim, m->ffn, &M->sh_down, err)
               ? pith_err_prefix(err, "layer %d", l)
               : 0;
}

static int load_layer(gh *m, const pith_model_file *f, int l, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    gh_layer *L = &m->layers[l];
    int dim = hp->dim, ffn = m->ffn;
    char n[96];
    L->mamba = pith_layer_bit(hp->layer_recurrent, l);
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    if (pith_hy_load_vec(f, NAME("attn_norm.weight"), dim, &L->attn_norm, err) ||
        pith_hy_load_vec(f, NAME("ffn_norm.weight"), dim, &L->ffn_norm, err))
        return pith_err_prefix(err, "layer %d", l);
    /* the shared MLP: dense, or the experts' shared expert (GGUF's _shexp tensors) */
    if (m->has_moe) {
        if (load_moe(m, f, l, L, err)) return pith_err_prefix(err, "layer %d", l);
    } else if (load_gate_up(f, l, "ffn_gate.weight", "ffn_up.weight", ffn, dim, &L->gate, &L->up, err) ||
               pith_hy_load_mat(f, NAME("ffn_down.weight"), dim, ffn, &L->down, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
    if (L->mamba) {
        if (pith_mamba2_load(f, l, &m->md, dim, &L->ssm, err)) return pith_err_prefix(err, "layer %d", l);
    } else if (pith_hy_load_mat(f, NAME("attn_q.weight"), m->q_dim, dim, &L->wq, err) ||
               pith_hy_load_mat(f, NAME("attn_k.weight"), m->kv_dim, dim, &L->wk, err) ||
               pith_hy_load_mat(f, NAME("attn_v.weight"), m->kv_dim, dim, &L->wv, err) ||
               pith_hy_load_mat(f, NAME("attn_output.weight"), dim, m->q_dim, &L->wo, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
#undef NAME
    return 0;
}

static pith_matrix *layer_mat(gh_layer *L, int i) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
    return i < (int)(sizeof ms / sizeof *ms) ? ms[i] : NULL;
}

static void free_layer(gh_layer *L) {
    for (int i = 0; layer_mat(L, i); i++) pith_matrix_free(layer_mat(L, i));
    pith_mamba2_free(&L->ssm);
    free(L->attn_norm);
    free(L->ffn_norm);
    if (L->moe) pith_moe_free(L->moe);
    free(L->moe);
}

static void gh_destroy(pith_model *base);
static int gh_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err);
static int gh_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err);
static void gh_mem_free(pith_model *base);
static int gh_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
static int gh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops gh_ops = {
    .prepare = gh_prepare, .mem_alloc = gh_mem_alloc, .mem_free = gh_mem_free,
    .copy_blocks = gh_copy_blocks, .forward = gh_forward, .destroy = gh_destroy,
};

int pith_granitehybrid_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    gh *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->base.ops = &gh_ops;
    m->base.hp = *hp;
    m->base.impl = m;
    m->base.has_hidden = true;
    m->base.state_checkpoints = true;
    m->q_dim = hp->n_heads * hp->head_dim;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->ffn = hp->ffn_dim;
    /* llama.cpp normalises per B/C group (as Mamba2's own code does), transformers' Granite code over the
     * whole width: the same when n_groups is 1, as in every Granite 4.0-H */
    pith_mamba2_dims_of(hp, pith_model_file_format(file) == PITH_FORMAT_GGUF, &m->md);
    m->rope = false;
    for (int l = 0; l < hp->n_layers; l++)
        m->rope |= !pith_layer_bit(hp->layer_recurrent, l) && !pith_layer_bit(hp->layer_no_rope, l);
    m->adjacent = hp->rope_style == PITH_ROPE_ADJACENT;
    m->emb_scale = hp->embedding_scale > 0 ? hp->embedding_scale : 1.0f;
    m->res_scale = hp->residual_scale > 0 ? hp->residual_scale : 1.0f;
    m->logit_div = hp->logit_scale > 0 ? hp->logit_scale : 1.0f;
    m->has_moe = hp->n_experts > 0;
    if (m->has_moe) {
        pith_moe_config_of(hp, &m->moe_cfg);
        m->moe_cfg.shared_ffn = m->ffn; /* the shared MLP, ungated */
    }
    const char *fs = getenv("PITH_FORCE_SCALAR");
    bool force_scalar = fs && *fs && strcmp(fs, "0") != 0;
    m->portable = force_scalar;
    float scale = hp->query_scale > 0 ? hp->query_scale : (float)(1.0 / sqrt(hp->head_dim));
    pith_attn_shape shape = {hp->n_heads, hp->n_kv_heads, hp->head_dim, scale};
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    int rc = !m->layers ? pith_errf(err, "out of memory") : 0;
    if (!rc && m->rope && (hp->rope_scale_factor != 0 || hp->rope_linear_factor != 0 || hp->rope_yarn_factor != 0))
        rc = pith_errf(err, "RoPE scaling is not supported for granitehybrid");
    if (!rc && m->has_moe) rc = pith_moe_config_check(&m->moe_cfg, pith_model_file_path(file), err);
    if (!rc && m->has_moe) rc = pith_moe_loop_from_env(&m->moe_loop, err);
    if (!rc) rc = pith_cpu_init(&m->cpu, opt ? opt->n_threads : 0, force_scalar, err);
    if (!rc) rc = pith_attn_scratch_init(&m->attn, &shape, m->cpu.n_threads, err);
    if (!rc) rc = pith_hy_load_io(file, hp, "output_norm.weight", &m->embd, &m->embd_row_bytes, &m->out_norm, &m->output, err);
    const double steps = 2.0 * hp->n_layers;
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = load_layer(m, file, l, err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (l + 1) / steps);
    }
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        gh_layer *L = &m->layers[l];
        for (int i = 0; !rc && layer_mat(L, i); i++)
            if (layer_mat(L, i)->data) rc = pith_matrix_pack(&m->cpu, layer_mat(L, i), err);
        if (!rc && L->mamba) rc = pith_mamba2_pack(&m->cpu, &L->ssm, err);
        if (!rc && L->moe) rc = pith_moe_pack(&m->cpu, L->moe, err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (hp->n_layers + l + 1) / steps);
    }
    if (!rc) rc = pith_matrix_pack(&m->cpu, &m->output, err);
    int half = hp->head_dim / 2;
    if (!rc && !(m->inv_freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *m->inv_freq))) rc = pith_errf(err, "out of memory");
    for (int i = 0; !rc && i < half; i++) m->inv_freq[i] = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim);
    if (!rc) rc = pith_hy_declare_memory(&m->base, m->kv_dim, m->md.conv_floats + m->md.ssm_floats, 0, &m->group_layers,
                                            &m->layer_group, &m->layer_index, err);
    if (rc) {
        pith_err_prefix(err, "%s", pith_model_file_path(file));
        gh_destroy(&m->base);
        return -1;
    }
    m->base.file = file;
    *out = &m->base;
    return 0;
}

static void free_scratch(gh *m) {
    float **bufs[] = {&m->x, &m->xb, &m->q, &m->k, &m->v, &m->att, &m->proj, &m->hb, &m->tmp, &m->rope_cos, &m->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(*bufs[i]), *bufs[i] = NULL;
    free(m->seq_start);
    m->seq_start = NULL;
    m->cap = 0;
}

static void gh_destroy(pith_model *base) {
    gh *m = base->impl;
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
    pith_moe_scratch_free(&m->moe_s);
    pith_attn_scratch_free(&m->attn);
    if (m->cpu.pool) pith_cpu_free(&m->cpu);
    free(m);
}

/* ---------------- memory ---------------- */

static int reserve(gh *m, int n, pith_err *err) {
    if (n <= m->cap) return 0;
    if (m->cap < (1 << 28) && n < m->cap + m->cap / 2) n = m->cap + m->cap / 2;
    const pith_hparams *hp = &m->base.hp;
    free_scratch(m);
    size_t N = (size_t)n, dim = (size_t)hp->dim, half = (size_t)hp->head_dim / 2 + 1;
    size_t att = (size_t)(m->q_dim > m->md.inner ? m->q_dim : m->md.inner);
    m->x = malloc(N * dim * sizeof(float));
    m->xb = malloc(N * dim * sizeof(float));
    m->q = malloc(N * m->q_dim * sizeof(float));
    m->k = malloc(N * m->kv_dim * sizeof(float));
    m->v = malloc(N * m->kv_dim * sizeof(float));
    m->att = malloc(N * att * sizeof(float));
    m->proj = malloc(N * m->md.proj_dim * sizeof(float));
    m->hb = malloc(N * 2 * m->ffn * sizeof(float));
    m->tmp = malloc(N * dim * sizeof(float));
    m->rope_cos = malloc(N * half * sizeof(float));
    m->rope_sin = malloc(N * half * sizeof(float));
    m->seq_start = malloc((N + 1) * sizeof(int));
    if (!m->x || !m->xb || !m->q || !m->k || !m->v || !m->att || !m->proj || !m->hb || !m->tmp || !m->rope_cos ||
        !m->rope_sin || !m->seq_start) {
        free_scratch(m);
        return pith_errf(err, "out of memory for a batch of %d tokens", n);
    }
    int widest = hp->dim > 2 * m->ffn ? hp->dim : 2 * m->ffn;
    widest = widest > m->q_dim ? widest : m->q_dim;
    widest = widest > m->md.proj_dim ? widest : m->md.proj_dim;
    if (pith_cpu_reserve(&m->cpu, n, widest, err) || pith_attn_scratch_reserve(&m->attn, n, err) ||
        (m->has_moe && pith_moe_reserve(&m->cpu, &m->moe_cfg, &m->moe_s, n, err))) {
        free_scratch(m);
        return -1;
    }
    m->cap = n;
    return 0;
}

static int gh_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    return reserve(base->impl, lim->max_batch_tokens, err);
}

static int gh_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err) {
    gh *m = base->impl;
    if (pith_kv_host_allocated(&m->mem)) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    return pith_kv_host_alloc(&m->mem, &base->mem, lay, err);
}

static void gh_mem_free(pith_model *base) { pith_kv_host_free(&((gh *)base->impl)->mem); }

static int gh_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_hy_copy_blocks(&((gh *)base->impl)->mem, g, src, dst, n, err);
}

/* ---------------- forward ---------------- */

/* Per-token (or per-unit) work between two matmuls, claimed in chunks by the pool's threads. */
typedef struct job {
    gh *m;
    const pith_batch *b;
    int layer, n;
    const float *norm;
    void (*row)(struct job *j, int t);
    int chunk;
    _Atomic int next;
} job;

static void job_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    job *j = arg;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (t0 >= j->n) break;
        int t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
        for (int t = t0; t < t1; t++) j->row(j, t);
    }
}

static void run(gh *m, job *j, void (*row)(job *j, int t), int n, double width) {
    j->row = row;
    j->n = n;
    j->chunk = n / (4 * m->cpu.n_threads);
    if (j->chunk < 1) j->chunk = 1;
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    pith_pool_run_sized(m->cpu.pool, job_worker, j, (double)n * width);
}

static void embed_row(job *j, int t) {
    gh *m = j->m;
    int dim = m->base.hp.dim, half = m->base.hp.head_dim / 2;
    float *x = m->x + (size_t)t * dim;
    const uint8_t *src = (const uint8_t *)m->embd->data + (size_t)j->b->tokens[t] * m->embd_row_bytes;
    pith_dequantize_row(m->embd->type, src, x, dim);
    if (m->emb_scale != 1.0f)
        for (int i = 0; i < dim; i++) x[i] *= m->emb_scale;
    if (!m->rope) return;
    double pos = j->b->positions[t];
    for (int i = 0; i < half; i++) {
        m->rope_cos[(size_t)t * half + i] = (float)cos(pos * m->inv_freq[i]);
        m->rope_sin[(size_t)t * half + i] = (float)sin(pos * m->inv_freq[i]);
    }
}

static void norm_row(job *j, int t) {
    int dim = j->m->base.hp.dim;
    pith_hy_rmsnorm(j->m->xb + (size_t)t * dim, j->m->x + (size_t)t * dim, j->norm, dim, j->m->base.hp.norm_eps);
}

/* Adjacent pairs (x[2i], x[2i+1]) (GGUF) or halves (x[i], x[i + d/2]) (Hugging Face). */
static void rope(float *v, const float *cs, const float *sn, int hd, bool adjacent) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* RoPE on this token's Q and K (if the model rotates), then K and V into the FULL group. */
static void qkv_row(job *j, int t) {
    gh *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    int hd = hp->head_dim, half = hd / 2;
    float *q = m->q + (size_t)t * m->q_dim, *k = m->k + (size_t)t * m->kv_dim, *v = m->v + (size_t)t * m->kv_dim;
    if (!pith_layer_bit(hp->layer_no_rope, j->layer)) {
        const float *cs = m->rope_cos + (size_t)t * half, *sn = m->rope_sin + (size_t)t * half;
        for (int h = 0; h < hp->n_heads; h++) rope(q + h * hd, cs, sn, hd, m->adjacent);
        for (int h = 0; h < hp->n_kv_heads; h++) rope(k + h * hd, cs, sn, hd, m->adjacent);
    }
    int g = m->layer_group[j->layer];
    const pith_kv_cache *kv = &m->mem.groups[g];
    size_t bs = (size_t)kv->block_size, slot = (size_t)j->b->mem[g].slots[t];
    size_t block_off = pith_kv_k_offset(kv, m->layer_index[j->layer], (int)(slot / bs));
    for (int h = 0; h < hp->n_kv_heads; h++) {
        size_t off = block_off + ((size_t)h * bs + slot % bs) * hd;
        pith_kv_store_f32(m->cpu.k, kv->type, k + h * hd, kv->k, off, (size_t)hd);
        pith_kv_store_f32(m->cpu.k, kv->type, v + h * hd, kv->v, off, (size_t)hd);
    }
}

static void attn_scale_row(job *j, int t) {
    gh *m = j->m;
    float *o = m->att + (size_t)t * m->q_dim;
    for (int i = 0; i < m->q_dim; i++) o[i] *= m->res_scale;
}

/* silu(gate) * up in place of the gate half of [gate | up], times the residual scale. */
static void swiglu_row(job *j, int t) {
    gh *m = j->m;
    float *r = m->hb + (size_t)t * 2 * m->ffn;
    m->cpu.k->silu_mul(r, r + m->ffn, m->ffn);
    if (m->res_scale != 1.0f)
        for (int i = 0; i < m->ffn; i++) r[i] *= m->res_scale;
}

static void ffn_add_row(job *j, int t) {
    gh *m = j->m;
    int dim = m->base.hp.dim;
    float *x = m->x + (size_t)t * dim;
    const float *y = m->tmp + (size_t)t * dim;
    for (int i = 0; i < dim; i++) x[i] += m->res_scale * y[i];
}

static int attention_layer(gh *m, const pith_batch *b, int l, job *j, pith_err *err) {
    const gh_layer *L = &m->layers[l];
    int n = b->n_tokens, dim = m->base.hp.dim;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out qkv[] = {
        {&L->wq, m->q, (size_t)m->q_dim, false}, {&L->wk, m->k, m->kv_dim, false}, {&L->wv, m->v, m->kv_dim, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, qkv, 3, err)) return -1;
    run(m, j, qkv_row, n, 4.0 * (m->q_dim + 2 * m->kv_dim));
    const int g = m->layer_group[l];
    const pith_kv_cache *kv = &m->mem.groups[g];
    size_t layer_off = pith_kv_bytes(kv->type, pith_kv_k_offset(kv, m->layer_index[l], 0));
    pith_attn_args aa = {
        .n_tokens = n, .positions = b->positions, .seq = b->seq, .block_tables = b->mem[g].block_tables,
        .max_blocks = b->mem[g].max_blocks, .block_size = kv->block_size,
        .k_cache = (const uint8_t *)kv->k + layer_off, .v_cache = (const uint8_t *)kv->v + layer_off,
        .kv_type = kv->type, .kv_dim = m->kv_dim, .q = m->q, .q_ld = m->q_dim, .out = m->att, .out_ld = m->q_dim,
    };
    pith_attention(&m->cpu, &m->attn, &aa);
    if (m->res_scale != 1.0f) run(m, j, attn_scale_row, n, m->q_dim);
    pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
    return pith_cpu_matmul(&m->cpu, &L->wo, &a, m->x, dim, true, err);
}

static int mamba_layer(gh *m, const pith_batch *b, int l, pith_err *err) {
    const pith_mamba2_run r = {
        .cpu = &m->cpu, .d = &m->md, .L = &m->layers[l].ssm, .b = b, .mem = &m->mem, .group = m->layer_group[l],
        .layer_index = m->layer_index[l], .seq_start = m->seq_start, .proj = m->proj, .y = m->att,
        .eps = m->base.hp.norm_eps, .out_scale = m->res_scale, .portable = m->portable,
    };
    return pith_mamba2_forward(&r, m->xb, m->base.hp.dim, m->x, err);
}

static int ffn(gh *m, const gh_layer *L, job *j, int n, pith_err *err) {
    const int dim = m->base.hp.dim, F = m->ffn;
    if (L->moe) {
        /* the experts and the shared MLP, summed, then scaled into the residual */
        memset(m->tmp, 0, (size_t)n * dim * sizeof(float));
        if (pith_moe_forward(&m->cpu, L->moe, &m->moe_s, m->xb, dim, n, m->tmp, dim, m->moe_loop, err)) return -1;
        run(m, j, ffn_add_row, n, 2.0 * dim);
        return 0;
    }
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out gate_up[] = {{&L->gate, m->hb, 2 * (size_t)F, false}, {&L->up, m->hb + F, 2 * (size_t)F, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, gate_up, 2, err)) return -1;
    run(m, j, swiglu_row, n, 8.0 * F);
    pith_acts_bind(&m->cpu, &a, m->hb, n, F, 2 * (size_t)F);
    return pith_cpu_matmul(&m->cpu, &L->down, &a, m->x, dim, true, err);
}

static int layer_forward(gh *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    const gh_layer *L = &m->layers[l];
    job j = {.m = m, .b = b, .layer = l, .norm = L->attn_norm};
    run(m, &j, norm_row, b->n_tokens, hp->dim);
    if (L->mamba ? mamba_layer(m, b, l, err) : attention_layer(m, b, l, &j, err)) return -1;
    int n = b->n_tokens;
    if (l == hp->n_layers - 1) n = pith_hy_keep_rows(m->x, b, m->base.hp.dim);
    *n_rows = n;
    if (n == 0) return 0;
    j.norm = L->ffn_norm;
    run(m, &j, norm_row, n, hp->dim);
    return ffn(m, L, &j, n, err);
}

static int gh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    gh *m = base->impl;
    const pith_hparams *hp = &base->hp;
    if (!pith_kv_host_allocated(&m->mem) && base->mem.n_groups > 0) return pith_errf(err, "the model's memory is not allocated");
    if (pith_batch_check(b, &base->mem, &m->mem, hp->n_vocab, err) ||
        reserve(m, b->n_tokens, err))
        return -1;
    if (b->n_tokens == 0) return 0;
    for (int s = 0, t = 0; s <= b->n_seqs; s++) {
        m->seq_start[s] = t;
        while (t < b->n_tokens && b->seq[t] == s) t++;
    }
    for (int s = 0; s < b->n_seqs; s++)
        if (m->seq_start[s + 1] == m->seq_start[s])
            return pith_errf(err, "batch: sequences are not numbered in the order of their tokens");
    job j = {.m = m, .b = b};
    run(m, &j, embed_row, b->n_tokens, hp->dim + (m->rope ? 16.0 * hp->head_dim : 0));
    int n = b->n_tokens;
    for (int l = 0; l < hp->n_layers; l++)
        if (layer_forward(m, b, l, &n, err)) return -1;
    if (n == 0) return 0;
    j.norm = m->out_norm;
    run(m, &j, norm_row, n, hp->dim);
    int n_out = 0, n_hid = 0;
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
    if (m->logit_div != 1.0f) {
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] /= m->logit_div;
    }
    return 0;
}
