/* The CPU backend (backend.h): the interface's ops on today's kernel table, tiles and thread pool.
 *
 * Weights are pith_matrix views of the file, repacked for the kernel table as they are made; vectors are
 * float32 arrays. Buffers are host arrays of rows, all grown together by reserve (by half again at
 * least, so a slowly growing batch does not reallocate every step). The step's data are the batch
 * itself: host memory needs no copy, and set_step keeps the list of rows that want logits or hidden
 * states. Row-wise ops run as one pool job each (rows claimed in chunks); matmuls, attention and the
 * MoE block are the existing drivers. Results are the bits the forward passes computed before the
 * backend existed: the same functions in the same order per row. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/info.h"
#include "backend/batch_check.h"
#include "backend/cpu/grouped.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/quants.h"

_Static_assert(PITH_GROUPED_MAX_GROUPS >= PITH_BE_MAX_EXPERTS, "the grouped products must take every expert");

static void row_worker(void *arg, int ith, int nth) {
    (void)nth;
    row_job *j = arg;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (t0 >= j->n) break;
        int t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
        for (int t = t0; t < t1; t++) j->row(j, t, ith);
    }
}

void pith_cpu_be_rows(pith_cpu_be *c, int n, void (*row)(row_job *j, int t, int ith), const void *args, double width) {
    row_job j = {.c = c, .n = n, .row = row, .a = args};
    j.chunk = n / (4 * c->cpu.n_threads);
    if (j.chunk < 1) j.chunk = 1;
    atomic_store_explicit(&j.next, 0, memory_order_relaxed);
    pith_pool_run_sized(c->cpu.pool, row_worker, &j, (double)n * width);
}

void pith_cpu_be_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

void pith_cpu_be_rope(float *v, const float *cs, const float *sn, int half, pith_rope_style style) {
    for (int i = 0; i < half; i++) {
        int a = style == PITH_ROPE_ADJACENT ? 2 * i : i, b = style == PITH_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}


/* ---- weights ---- */

static int add_weight(pith_cpu_be *c, cpu_weight *w, pith_weight **out, pith_err *err) {
    cpu_weight **grown = realloc(c->weights, (size_t)(c->n_weights + 1) * sizeof *grown);
    if (!grown) {
        free(w->owned);
        pith_matrix_free(&w->m);
        free(w);
        return pith_errf(err, "out of memory");
    }
    c->weights = grown;
    w->w.id = c->n_weights;
    w->w.impl = w;
    c->weights[c->n_weights++] = w;
    *out = &w->w;
    return 0;
}

static int cpu_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    cpu_weight *w = calloc(1, sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    if (pith_matrix_from_tensor(&w->m, t, err) || pith_matrix_pack(&c->cpu, &w->m, err)) {
        pith_matrix_free(&w->m);
        free(w);
        return pith_err_prefix(err, "tensor %s", name);
    }
    w->w.rows = w->m.rows, w->w.cols = w->m.cols, w->w.type = t->type;
    return add_weight(c, w, out, err);
}

/* A lookup table (embeddings): rows read by token, never packed. */
static int cpu_table(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    cpu_weight *w = calloc(1, sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    if (pith_matrix_from_tensor(&w->m, t, err)) {
        free(w);
        return pith_err_prefix(err, "tensor %s", name);
    }
    w->table = t;
    w->w.rows = w->m.rows, w->w.cols = w->m.cols, w->w.type = t->type;
    return add_weight(pith_cpu_be_of(be), w, out, err);
}

static int cpu_vector(pith_backend *be, float *data, int n, pith_weight **out, pith_err *err) {
    cpu_weight *w = calloc(1, sizeof *w);
    if (!w) {
        free(data);
        return pith_errf(err, "out of memory");
    }
    w->owned = data;
    w->w.rows = 1, w->w.cols = n, w->w.vector = true, w->w.type = PITH_F32, w->w.vec = data;
    return add_weight(pith_cpu_be_of(be), w, out, err);
}

static int cpu_moe_load(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                        const char *const hf_experts[3], pith_moe_weights **out, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (c->n_moes == 0) {
        if (pith_moe_config_check(cfg, "experts", err) || pith_moe_loop_from_env(&c->moe_loop, err))
            return -1;
        c->moe_cfg = *cfg;
    }
    pith_moe_weights **grown = realloc(c->moes, (size_t)(c->n_moes + 1) * sizeof *grown);
    if (!grown) return pith_errf(err, "out of memory");
    c->moes = grown;
    pith_moe_weights *w = calloc(1, sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    c->moes[c->n_moes++] = w;
    *out = w;
    return pith_moe_load(f, layer, cfg, hf_experts, &w->layer, err);
}

/* Experts repacked or left mapped in the file (pith_moe_choose_mapped), one choice for the model. */
static int cpu_moe_place(pith_backend *be, char *what, size_t what_size, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    uint64_t bytes = 0;
    pith_wtype type = PITH_W_F32;
    for (int i = 0; i < c->n_moes; i++)
        bytes += pith_moe_mappable_bytes(&c->moes[i]->layer), type = c->moes[i]->layer.gate[0].type;
    bool mapped = false;
    if (pith_moe_choose_mapped(&c->cpu, type, bytes, &mapped, what, what_size, err)) return -1;
    for (int i = 0; i < c->n_moes; i++) {
        c->moes[i]->layer.mapped = mapped;
        if (pith_moe_pack(&c->cpu, &c->moes[i]->layer, err)) return -1;
    }
    return 0;
}

static int cpu_attn_shape(pith_backend *be, const pith_be_attn_shape *shape, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (c->has_shape) return pith_errf(err, "the attention shape is set once");
    pith_attn_shape s = {shape->n_heads, shape->n_kv_heads, shape->head_dim, shape->scale};
    if (pith_attn_scratch_init(&c->attn, &s, c->cpu.n_threads, err)) return -1;
    if (shape->alt_head_dim > 0) {
        pith_attn_shape alt = {shape->n_heads, shape->alt_n_kv_heads, shape->alt_head_dim, shape->scale};
        if (pith_attn_scratch_init(&c->attn_alt, &alt, c->cpu.n_threads, err)) {
            pith_attn_scratch_free(&c->attn);
            return -1;
        }
    }
    c->shape = *shape;
    c->has_shape = true;
    return 0;
}

/* ---- buffers ---- */

static pith_buf *cpu_buffer(pith_backend *be, int cols, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    pith_buf **grown = realloc(c->bufs, (size_t)(c->n_bufs + 1) * sizeof *grown);
    pith_buf *b = calloc(1, sizeof *b);
    if (grown) c->bufs = grown;
    if (!grown || !b || cols < 1) {
        free(b);
        pith_errf(err, cols < 1 ? "a buffer of %d columns" : "out of memory", cols);
        return NULL;
    }
    b->id = c->n_bufs;
    b->cols = cols;
    if (c->cap > 0 && !(b->host = malloc((size_t)c->cap * cols * sizeof(float)))) {
        free(b);
        pith_errf(err, "out of memory");
        return NULL;
    }
    c->bufs[c->n_bufs++] = b;
    return b;
}

static int cpu_reserve(pith_backend *be, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (n <= c->cap) return 0;
    if (c->cap < (1 << 28) && n < c->cap + c->cap / 2) n = c->cap + c->cap / 2;
    int widest = 1;
    for (int i = 0; i < c->n_bufs; i++) {
        free(c->bufs[i]->host);
        c->bufs[i]->host = NULL;
        if (c->bufs[i]->cols > widest) widest = c->bufs[i]->cols;
    }
    free(c->seq_start);
    free(c->seq_end);
    c->cap = 0;
    bool ok = (c->seq_start = malloc(((size_t)n + 1) * sizeof *c->seq_start)) != NULL &&
              (c->seq_end = malloc(((size_t)n + 1) * sizeof *c->seq_end)) != NULL;
    for (int i = 0; ok && i < c->n_bufs; i++)
        ok = (c->bufs[i]->host = malloc((size_t)n * c->bufs[i]->cols * sizeof(float))) != NULL;
    if (!ok) return pith_errf(err, "out of memory for a batch of %d tokens", n);
    if (pith_cpu_reserve(&c->cpu, n, widest, err) || (c->has_shape && pith_attn_scratch_reserve(&c->attn, n, err)) ||
        (c->has_shape && c->shape.alt_head_dim > 0 && pith_attn_scratch_reserve(&c->attn_alt, n, err)) ||
        (c->n_moes > 0 && pith_moe_reserve(&c->cpu, &c->moe_cfg, &c->moe_scratch, n, err)))
        return -1;
    /* Qwen3.5's ops: the DeltaNet scan's scratch, one per thread (it does not grow with the batch) */
    if (c->gdn_scratch_floats > 0 && !c->gdn_scratch &&
        !(c->gdn_scratch = malloc((size_t)c->cpu.n_threads * c->gdn_scratch_floats * sizeof(float))))
        return pith_errf(err, "out of memory for the DeltaNet scan's scratch");
    c->cap = n;
    return 0;
}

/* ---- memory ---- */

static int cpu_mem_alloc(pith_backend *be, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (pith_kv_host_allocated(&c->kv)) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    for (int g = 0; g < lay->n_groups; g++) /* a head's row of a slot must be whole Q8_0 blocks */
        if (lay->type[g] == PITH_Q8_0 && c->has_shape && pith_cpu_be_head_dim(c, g) % 32)
            return pith_errf(err, "a Q8_0 KV cache needs a head dimension that is a multiple of 32, not %d",
                             pith_cpu_be_head_dim(c, g));
    return pith_kv_host_alloc(&c->kv, spec, lay, err);
}

static void cpu_mem_free(pith_backend *be) { pith_kv_host_free(&pith_cpu_be_of(be)->kv); }
static bool cpu_mem_allocated(const pith_backend *be) { return pith_kv_host_allocated(&((const pith_cpu_be *)be)->kv); }

static int cpu_copy_blocks(pith_backend *be, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_kv_host_copy_blocks(&pith_cpu_be_of(be)->kv, g, src, dst, n, err);
}

static int cpu_set_step(pith_backend *be, const pith_batch *b, const pith_mem_spec *spec, int n_vocab, float *logits,
                        pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (!pith_kv_host_allocated(&c->kv) && spec->n_groups > 0) return pith_errf(err, "the model's memory is not allocated");
    if (pith_batch_check(b, spec, &c->kv, n_vocab, err) || cpu_reserve(be, b->n_tokens, err)) return -1;
    /* each sequence's run of tokens (contiguous, in any order of the sequences: batch.h, checked above),
     * for the mixers that scan a sequence */
    for (int t = b->n_tokens - 1; t >= 0; t--) c->seq_start[b->seq[t]] = t;
    for (int t = 0; t < b->n_tokens; t++) c->seq_end[b->seq[t]] = t + 1;
    c->step = b;
    c->logits = logits;
    return 0;
}

/* ---- ops ---- */

typedef struct embed_args {
    const cpu_weight *table;
    float scale;
    pith_buf *out;
} embed_args;

static void embed_row(row_job *j, int t, int ith) {
    (void)ith;
    const embed_args *a = j->a;
    int dim = a->out->cols;
    const pith_batch *b = j->c->step;
    if (b->embed_rows && b->embed_rows[t] >= 0) { /* an image's row, as the encoder left it (batch.h) */
        size_t stride = b->embed_stride ? (size_t)b->embed_stride : (size_t)dim;
        memcpy(row_of(a->out, t), b->embeds + (size_t)b->embed_rows[t] * stride, (size_t)dim * sizeof(float));
        return;
    }
    const uint8_t *src = (const uint8_t *)a->table->table->data + (size_t)j->c->step->tokens[t] * a->table->m.row_bytes;
    float *x = row_of(a->out, t);
    pith_dequantize_row(a->table->table->type, src, x, dim);
    if (a->scale != 0)
        for (int i = 0; i < dim; i++) x[i] *= a->scale;
}

static void cpu_embed(pith_backend *be, const pith_weight *table, float scale, pith_buf *out, int n) {
    embed_args a = {table->impl, scale, out};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, embed_row, &a, out->cols);
}

typedef struct embed_part_args {
    pith_buf *x;
    int part;
} embed_part_args;

static void embed_part_row(row_job *j, int t, int ith) {
    (void)ith;
    const embed_part_args *a = j->a;
    const pith_batch *b = j->c->step;
    if (!b->embed_rows || b->embed_rows[t] < 0) return;
    int dim = a->x->cols;
    size_t stride = b->embed_stride ? (size_t)b->embed_stride : (size_t)dim;
    const float *src = b->embeds + (size_t)b->embed_rows[t] * stride + (size_t)a->part * dim;
    float *x = row_of(a->x, t);
    for (int i = 0; i < dim; i++) x[i] += src[i];
}

static void cpu_add_embed_part(pith_backend *be, pith_buf *x, int part, int n) {
    embed_part_args a = {x, part};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, embed_part_row, &a, x->cols);
}

typedef struct rope_args {
    const pith_rope *r;
    pith_buf *cs;
} rope_args;

/* cos then sin of each frequency, computed in double per token so long positions lose no precision */
static void rope_row(row_job *j, int t, int ith) {
    (void)ith;
    const rope_args *a = j->a;
    int half = a->r->half;
    float *cs = row_of(a->cs, t), *sn = cs + half;
    double pos = j->c->step->positions[t], ms = a->r->mscale;
    const int *sec = a->r->sections;
    const int32_t *mpos = sec[0] && j->c->step->rope_pos ? j->c->step->rope_pos + 3 * (size_t)t : NULL;
    for (int i = 0; i < half; i++) {
        if (mpos) /* M-RoPE: this frequency's component (backend.h) */
            pos = mpos[i % 3 == 1 && i < 3 * sec[1] ? 1 : i % 3 == 2 && i < 3 * sec[2] ? 2 : 0];
        double angle = pos * a->r->inv_freq[i];
        cs[i] = (float)(cos(angle) * ms);
        sn[i] = (float)(sin(angle) * ms);
    }
}

static void cpu_rope_tables(pith_backend *be, const pith_rope *r, pith_buf *cs, int n) {
    rope_args a = {r, cs};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, rope_row, &a, 16.0 * r->half);
}

typedef struct norm_args {
    const pith_buf *x;
    const float *w;
    float eps;
    pith_buf *out;
} norm_args;

static void norm_row(row_job *j, int t, int ith) {
    (void)ith;
    const norm_args *a = j->a;
    pith_cpu_be_rmsnorm(row_of(a->out, t), row_of(a->x, t), a->w, a->x->cols, a->eps);
}

static void cpu_rmsnorm(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *out, int n) {
    norm_args a = {x, w->vec, eps, out};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, norm_row, &a, x->cols);
}

static void norm_add_row(row_job *j, int t, int ith) {
    (void)ith;
    const norm_args *a = j->a;
    int dim = a->x->cols;
    float *x = row_of(a->out, t), *y = row_of(a->x, t);
    pith_cpu_be_rmsnorm(y, y, a->w, dim, a->eps);
    for (int i = 0; i < dim; i++) x[i] += y[i];
}

static void cpu_norm_add(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps, int n) {
    norm_args a = {y, w->vec, eps, x};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, norm_add_row, &a, 2.0 * x->cols);
}

static int cpu_matmul(pith_backend *be, const pith_buf *in, const pith_be_mm *outs, int n_outs, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (n_outs < 1 || n_outs > PITH_BE_MAX_MM) return pith_errf(err, "%d products in one matmul", n_outs);
    for (int i = 0; i < n_outs; i++) /* a product must fit its output rows: a file's shapes are not trusted */
        if (outs[i].w->cols != in->cols || outs[i].w->rows > outs[i].out->cols)
            return pith_errf(err, "matmul: a [%d x %d] weight does not take rows of %d into rows of %d", outs[i].w->rows,
                             outs[i].w->cols, in->cols, outs[i].out->cols);
    if (n == 0) return 0;
    pith_acts a;
    pith_acts_bind(&c->cpu, &a, in->host, n, in->cols, in->cols);
    if (n_outs == 1) {
        const cpu_weight *w = outs[0].w->impl;
        return pith_cpu_matmul(&c->cpu, &w->m, &a, outs[0].out->host, outs[0].out->cols, outs[0].accumulate, err);
    }
    pith_matmul_out mo[PITH_BE_MAX_MM];
    for (int i = 0; i < n_outs; i++) {
        const cpu_weight *w = outs[i].w->impl;
        mo[i] = (pith_matmul_out){&w->m, outs[i].out->host, outs[i].out->cols, outs[i].accumulate};
    }
    return pith_cpu_matmul_many(&c->cpu, &a, mo, n_outs, err);
}

/* Biases, QK-norm and RoPE on this token's Q and K, then its K and V into the cache. */
static void qkv_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_qkv_args *a = j->a;
    pith_cpu_be *c = j->c;
    int hd = pith_cpu_be_head_dim(c, a->group), qd = a->q->cols, kvd = a->k ? a->k->cols : 0, nh = c->shape.n_heads,
        nkv = a->k ? pith_cpu_be_kv_heads(c, a->group) : 0;
    float *q = row_of(a->q, t), *k = a->k ? row_of(a->k, t) : NULL, *v = a->k ? row_of(a->v, t) : NULL;
    if (a->bq) {
        for (int i = 0; i < qd; i++) q[i] += a->bq->vec[i];
        for (int i = 0; i < kvd; i++) k[i] += a->bk->vec[i], v[i] += a->bv->vec[i];
    }
    if (a->qk_norm == PITH_QK_NORM_ALL) {
        pith_cpu_be_rmsnorm(q, q, a->q_norm->vec, qd, a->eps);
        if (k) pith_cpu_be_rmsnorm(k, k, a->k_norm->vec, kvd, a->eps);
    }
    int half = a->rope_cs ? a->rope_cs->cols / 2 : 0;
    const float *cs = a->rope_cs ? row_of(a->rope_cs, t) : NULL, *sn = cs ? cs + half : NULL;
    bool per_head = a->qk_norm == PITH_QK_NORM_HEAD;
    for (int h = 0; h < nh; h++) {
        if (per_head) pith_cpu_be_rmsnorm(q + h * hd, q + h * hd, a->q_norm->vec, hd, a->eps);
        if (cs) pith_cpu_be_rope(q + h * hd, cs, sn, half, a->rope_style);
    }
    for (int h = 0; h < nkv; h++) {
        if (per_head) pith_cpu_be_rmsnorm(k + h * hd, k + h * hd, a->k_norm->vec, hd, a->eps);
        if (cs) pith_cpu_be_rope(k + h * hd, cs, sn, half, a->rope_style);
    }
    if (a->v_norm) /* RMSNorm without a weight, in double as pith_cpu_be_rmsnorm */
        for (int h = 0; h < nkv; h++) {
            float *vh = v + h * hd;
            double ss = 0;
            for (int i = 0; i < hd; i++) ss += (double)vh[i] * vh[i];
            float r = (float)(1.0 / sqrt(ss / hd + a->eps));
            for (int i = 0; i < hd; i++) vh[i] *= r;
        }
    if (k) pith_cpu_be_store_kv(c, a->group, a->layer_index, t, k, v);
}

void pith_cpu_be_store_kv(const pith_cpu_be *c, int g, int layer_index, int t, const float *k, const float *v) {
    int hd = pith_cpu_be_head_dim(c, g);
    /* head-major inside the block (kv.h): head h of this slot is row slot % bs of the block's head h */
    const pith_kv_cache *kv = &c->kv.groups[g];
    size_t bs = (size_t)kv->block_size, slot = (size_t)c->step->mem[g].slots[t];
    size_t block_off = pith_kv_k_offset(kv, layer_index, (int)(slot / bs));
    for (int h = 0; h < pith_cpu_be_kv_heads(c, g); h++) {
        size_t off = block_off + ((size_t)h * bs + slot % bs) * hd;
        pith_kv_store_f32(c->cpu.k, kv->type, k + h * hd, kv->k, off, (size_t)hd);
        pith_kv_store_f32(c->cpu.k, kv->type, v + h * hd, kv->v, off, (size_t)hd);
    }
}

static void cpu_qkv(pith_backend *be, const pith_be_qkv_args *a, int n) {
    pith_cpu_be_rows(pith_cpu_be_of(be), n, qkv_row, a, 4.0 * (a->q->cols + (a->k ? 2 * a->k->cols : 0)));
}

static void cpu_attention(pith_backend *be, const pith_be_attn *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const pith_batch *b = c->step;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    size_t layer_off = pith_kv_bytes(kv->type, pith_kv_k_offset(kv, a->layer_index, 0));
    pith_attn_args aa = {
        .n_tokens = n, .positions = b->positions, .seq = b->seq, .block_tables = b->mem[a->group].block_tables,
        .max_blocks = b->mem[a->group].max_blocks, .block_size = kv->block_size, .window = a->window,
        .k_cache = (const uint8_t *)kv->k + layer_off, .v_cache = (const uint8_t *)kv->v + layer_off,
        .kv_type = kv->type, .kv_dim = kv->k_dim, .q = a->q->host, .q_ld = a->q->cols, .out = a->out->host,
        .out_ld = a->out->cols, .sinks = a->sinks ? a->sinks->vec : NULL, .last = b->attend_last,
    };
    pith_attention(&c->cpu, pith_cpu_be_alt(c, a->group) ? &c->attn_alt : &c->attn, &aa);
}

typedef struct glu_args {
    pith_glu kind;
    pith_buf *gate;
    const pith_buf *up;
} glu_args;

static void glu_row(row_job *j, int t, int ith) {
    (void)ith;
    const glu_args *a = j->a;
    int n = a->gate->cols;
    float *g = row_of(a->gate, t);
    const float *u = row_of(a->up, t);
    if (a->kind == PITH_GLU_SILU) {
        j->c->cpu.k->silu_mul(g, u, n);
        return;
    }
    for (int i = 0; i < n; i++) g[i] = pith_gelu_tanh(g[i]) * u[i];
}

static void cpu_glu(pith_backend *be, pith_glu kind, pith_buf *gate, const pith_buf *up, int n) {
    glu_args a = {kind, gate, up};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, glu_row, &a, 8.0 * gate->cols);
}

typedef struct bias_args {
    pith_buf *y;
    const float *b;
} bias_args;

static void bias_row(row_job *j, int t, int ith) {
    (void)ith;
    const bias_args *a = j->a;
    float *y = row_of(a->y, t);
    for (int i = 0; i < a->y->cols; i++) y[i] += a->b[i];
}

static void cpu_add_bias(pith_backend *be, pith_buf *y, const pith_weight *bias, int n) {
    bias_args a = {y, bias->vec};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, bias_row, &a, y->cols);
}

typedef struct scale_args {
    pith_buf *x;
    const pith_buf *y;
    float s;
    pith_activation kind;
} scale_args;

static void scale_row(row_job *j, int t, int ith) {
    (void)ith;
    const scale_args *a = j->a;
    float *x = row_of(a->x, t);
    for (int i = 0; i < a->x->cols; i++) x[i] *= a->s;
}

static void cpu_scale(pith_backend *be, pith_buf *y, float s, int n) {
    scale_args a = {.x = y, .s = s};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, scale_row, &a, y->cols);
}

static void scale_add_row(row_job *j, int t, int ith) {
    (void)ith;
    const scale_args *a = j->a;
    float *x = row_of(a->x, t);
    const float *y = row_of(a->y, t);
    for (int i = 0; i < a->x->cols; i++) x[i] += a->s * y[i];
}

static void cpu_scale_add(pith_backend *be, pith_buf *x, const pith_buf *y, float s, int n) {
    scale_args a = {.x = x, .y = y, .s = s};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, scale_add_row, &a, 2.0 * x->cols);
}

typedef struct attn_temp_args {
    pith_buf *y;
    double beta;
    int length;
} attn_temp_args;

/* The factor in double from the exact integer floor (positions are non-negative), rounded once to float. */
static void attn_temp_row(row_job *j, int t, int ith) {
    (void)ith;
    const attn_temp_args *a = j->a;
    int32_t pos = j->c->step->positions[t];
    float s = (float)(1.0 + a->beta * log(1.0 + (double)(pos / a->length)));
    float *y = row_of(a->y, t);
    for (int i = 0; i < a->y->cols; i++) y[i] *= s;
}

static void cpu_attn_temp(pith_backend *be, pith_buf *y, float beta, int length, int n) {
    attn_temp_args a = {y, beta, length > 0 ? length : 1};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, attn_temp_row, &a, y->cols);
}

static void cpu_copy_cols(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n) {
    (void)be;
    for (int t = 0; t < n; t++) memcpy(row_of(dst, t), row_of(src, t) + col0, (size_t)dst->cols * sizeof(float));
}

/* One memset: clearing memory is bandwidth, not work to spread over the pool. */
static void cpu_zero(pith_backend *be, pith_buf *y, int n) {
    (void)be;
    memset(y->host, 0, (size_t)n * y->cols * sizeof(float));
}

static void activation_row(row_job *j, int t, int ith) {
    (void)ith;
    const scale_args *a = j->a;
    float *x = row_of(a->x, t);
    if (a->kind == PITH_ACTIVATION_RELU2)
        for (int i = 0; i < a->x->cols; i++) x[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
    if (a->kind == PITH_ACTIVATION_GELU_TANH)
        for (int i = 0; i < a->x->cols; i++) x[i] = pith_gelu_tanh(x[i]);
    if (a->kind == PITH_ACTIVATION_GELU)
        for (int i = 0; i < a->x->cols; i++) x[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] * 0.70710678118654752440)));
}

static void cpu_activation(pith_backend *be, pith_activation kind, pith_buf *y, int n) {
    scale_args a = {.x = y, .kind = kind};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, activation_row, &a, 2.0 * y->cols);
}

static int cpu_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    return pith_moe_forward(&c->cpu, &w->layer, &c->moe_scratch, in->host, in->cols, n, out->host, out->cols,
                            c->moe_loop, err);
}

static void cpu_keep_rows(pith_backend *be, pith_buf *const *bufs, int n_bufs) {
    const pith_batch *b = pith_cpu_be_of(be)->step;
    int n = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (!b->want_logits[t] && !(b->want_hidden && b->want_hidden[t])) continue;
        for (int i = 0; n != t && i < n_bufs; i++)
            memcpy(row_of(bufs[i], n), row_of(bufs[i], t), (size_t)bufs[i]->cols * sizeof(float));
        n++;
    }
}

static int cpu_head(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const pith_batch *b = c->step;
    float *logits = c->logits;
    if (n_kept == 0) return 0;
    int dim = h->x->cols;
    norm_args na = {h->x, h->norm->vec, h->eps, h->scratch};
    pith_cpu_be_rows(c, n_kept, norm_row, &na, dim);
    /* hidden rows out, then the logits rows to the front of the scratch (in order: r only moves down) */
    float *xb = h->scratch->host;
    int n_out = 0, n_hid = 0;
    for (int t = 0, r = 0; t < b->n_tokens; t++) {
        bool wl = b->want_logits[t] != 0, wh = b->want_hidden && b->want_hidden[t];
        if (!wl && !wh) continue;
        const float *row = xb + (size_t)r++ * dim;
        if (wh) memcpy(b->hidden + (size_t)n_hid++ * dim, row, (size_t)dim * sizeof(float));
        if (wl && xb + (size_t)n_out * dim != row) memmove(xb + (size_t)n_out * dim, row, (size_t)dim * sizeof(float));
        n_out += wl;
    }
    if (n_logits == 0) return 0;
    pith_acts a;
    pith_acts_bind(&c->cpu, &a, xb, n_logits, dim, dim);
    const cpu_weight *w = h->output->impl;
    if (pith_cpu_matmul(&c->cpu, &w->m, &a, logits, n_vocab, false, err)) return -1;
    if (h->logit_scale > 0 && h->logit_scale != 1.0f) /* divided, not times the inverse: Granite's rounding */
        for (size_t i = 0; i < (size_t)n_logits * n_vocab; i++) logits[i] /= h->logit_scale;
    if (h->softcap > 0) {
        const float cap = h->softcap, inv = 1.0f / cap;
        for (size_t i = 0; i < (size_t)n_logits * n_vocab; i++) logits[i] = cap * tanhf(logits[i] * inv);
    }
    return 0;
}

static int cpu_buf_write(pith_backend *be, pith_buf *b, int n, const float *src, pith_err *err) {
    if (n > pith_cpu_be_of(be)->cap) return pith_errf(err, "buf_write: %d rows into %d", n, pith_cpu_be_of(be)->cap);
    memcpy(b->host, src, (size_t)n * b->cols * sizeof(float));
    return 0;
}

static int cpu_buf_read(pith_backend *be, const pith_buf *b, int n, float *dst, pith_err *err) {
    if (n > pith_cpu_be_of(be)->cap) return pith_errf(err, "buf_read: %d rows of %d", n, pith_cpu_be_of(be)->cap);
    memcpy(dst, b->host, (size_t)n * b->cols * sizeof(float));
    return 0;
}

static int cpu_sync(pith_backend *be, pith_err *err) { /* every op has run when it returns */
    (void)be, (void)err;
    return 0;
}

static void cpu_destroy(pith_backend *be) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    pith_kv_host_free(&c->kv);
    for (int i = 0; i < c->n_bufs; i++) free(c->bufs[i]->host), free(c->bufs[i]);
    free(c->bufs);
    for (int i = 0; i < c->n_weights; i++) {
        pith_matrix_free(&c->weights[i]->m);
        free(c->weights[i]->owned);
        free(c->weights[i]);
    }
    free(c->weights);
    for (int i = 0; i < c->n_moes; i++) pith_moe_free(&c->moes[i]->layer), free(c->moes[i]);
    free(c->moes);
    pith_moe_scratch_free(&c->moe_scratch);
    if (c->has_shape) pith_attn_scratch_free(&c->attn);
    if (c->has_shape && c->shape.alt_head_dim > 0) pith_attn_scratch_free(&c->attn_alt);
    if (c->has_span_attn) pith_attn_scratch_free(&c->span_attn);
    free(c->span_k);
    free(c->span_v);
    free(c->span_idx);
    pith_cpu_be_qwen35_free(c);
    free(c->seq_start);
    free(c->seq_end);
    if (c->cpu.pool) pith_cpu_free(&c->cpu);
    free(c);
}

static const pith_backend_vt cpu_vt = {
    .name = "cpu", .destroy = cpu_destroy, .matrix = cpu_matrix, .table = cpu_table, .vector = cpu_vector,
    .moe_load = cpu_moe_load, .moe_place = cpu_moe_place, .attn_shape = cpu_attn_shape, .buffer = cpu_buffer,
    .reserve = cpu_reserve, .mem_alloc = cpu_mem_alloc, .mem_free = cpu_mem_free, .mem_allocated = cpu_mem_allocated,
    .copy_blocks = cpu_copy_blocks, .set_step = cpu_set_step, .embed = cpu_embed, .add_embed_part = cpu_add_embed_part, .rope_tables = cpu_rope_tables,
    .rmsnorm = cpu_rmsnorm, .matmul = cpu_matmul, .qkv = cpu_qkv, .attention = cpu_attention, .glu = cpu_glu,
    .add_bias = cpu_add_bias, .norm_add = cpu_norm_add, .scale = cpu_scale, .scale_add = cpu_scale_add,
    .attn_temp = cpu_attn_temp,
    .zero = cpu_zero, .copy_cols = cpu_copy_cols, .activation = cpu_activation, .moe = cpu_moe,
    .keep_rows = cpu_keep_rows, .head = cpu_head,
    .short_conv = pith_cpu_be_short_conv, .mamba2 = pith_cpu_be_mamba2,
    /* Qwen3.5 */
    .gdn_shape = pith_cpu_be_gdn_shape, .gdn = pith_cpu_be_gdn, .gated_norm = pith_cpu_be_gated_norm,
    .gated_qkv = pith_cpu_be_gated_qkv, .attn_gate = pith_cpu_be_attn_gate, .set_draft = pith_cpu_be_set_draft,
    .mtp_input = pith_cpu_be_mtp_input, .mtp_save = pith_cpu_be_mtp_save, .mtp_attention = pith_cpu_be_mtp_attention,
    .mtp_logits = pith_cpu_be_mtp_logits, .mtp_pick = pith_cpu_be_mtp_pick, .buf_write = cpu_buf_write, .buf_read = cpu_buf_read, .sync = cpu_sync,
    /* DeepSeek */
    .mla = pith_cpu_be_mla, .mtp_mla = pith_cpu_be_mtp_mla,
    /* vision encoders */
    .set_rows = pith_cpu_be_set_rows, .layernorm = pith_cpu_be_layernorm, .add_rows = pith_cpu_be_add_rows,
    .span_attention = pith_cpu_be_span_attention, .pool_avg = pith_cpu_be_pool_avg,
    .rope_rows = pith_cpu_be_rope_rows, .group_rows = pith_cpu_be_group_rows,
};

int pith_backend_cpu_create(int n_threads, pith_backend **out, pith_err *err) {
    *out = NULL;
    pith_cpu_be *c = calloc(1, sizeof *c);
    if (!c) return pith_errf(err, "out of memory");
    c->portable = pith_backend_force_scalar();
    if (pith_cpu_init(&c->cpu, n_threads, c->portable, err)) {
        free(c);
        return -1;
    }
    c->base.vt = &cpu_vt;
    c->base.n_threads = c->cpu.n_threads;
    snprintf(c->base.kernels, sizeof c->base.kernels, "%s", c->cpu.k->name);
    *out = &c->base;
    return 0;
}
