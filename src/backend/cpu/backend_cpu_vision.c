/* The vision encoders' ops on the CPU (backend.h: set_rows, layernorm, add_rows, span_attention,
 * pool_avg, rope_rows, group_rows). Rows are independent in every one but attention, so each runs as row jobs on the backend's
 * pool. Span attention runs on the decoders' attention kernels (attention.h: the tiled AVX-512 path
 * where the kernel table has it): each span is one sequence whose K/V are laid out as one cache block of
 * span slots, and every query sees the whole block. Where the scratch for that cannot be had, one job per
 * (row, head) does an online softmax over the span's keys, with no scratch at all. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"

int pith_cpu_be_set_rows(pith_backend *be, pith_buf *dst, const float *rows, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (n < 0 || n > c->cap) return pith_errf(err, "%d input rows for buffers reserved for %d", n, c->cap);
    memcpy(dst->host, rows, (size_t)n * dst->cols * sizeof(float));
    return 0;
}

typedef struct ln_args {
    const pith_buf *x;
    const float *w, *b;
    float eps;
    pith_buf *out;
} ln_args;

static void layernorm_row(row_job *j, int t, int ith) {
    (void)ith;
    const ln_args *a = j->a;
    int d = a->x->cols;
    const float *x = row_of(a->x, t);
    float *y = row_of(a->out, t);
    double sum = 0, sq = 0;
    for (int i = 0; i < d; i++) sum += x[i];
    double mean = sum / d;
    for (int i = 0; i < d; i++) sq += (x[i] - mean) * (x[i] - mean);
    float inv = (float)(1.0 / sqrt(sq / d + a->eps)), m = (float)mean;
    for (int i = 0; i < d; i++) y[i] = (x[i] - m) * inv * a->w[i] + (a->b ? a->b[i] : 0.0f);
}

void pith_cpu_be_layernorm(pith_backend *be, const pith_buf *x, const pith_weight *w, const pith_weight *b, float eps,
                           pith_buf *out, int n) {
    ln_args a = {x, w->vec, b ? b->vec : NULL, eps, out};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, layernorm_row, &a, 4.0 * x->cols);
}

typedef struct add_rows_args {
    pith_buf *x;
    const float *rows;
    int period;
} add_rows_args;

static void add_rows_row(row_job *j, int t, int ith) {
    (void)ith;
    const add_rows_args *a = j->a;
    int d = a->x->cols;
    float *x = row_of(a->x, t);
    const float *r = a->rows + (size_t)(t % a->period) * d;
    for (int i = 0; i < d; i++) x[i] += r[i];
}

void pith_cpu_be_add_rows(pith_backend *be, pith_buf *x, const pith_weight *rows, int n) {
    add_rows_args a = {x, rows->vec, rows->cols / x->cols};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, add_rows_row, &a, x->cols);
}

/* keys scored per pass of the online softmax; the head's accumulator lives on the stack too */
enum { SPAN_CHUNK = 64, SPAN_MAX_HEAD_DIM = 512 };

static void span_attention_job(row_job *j, int job, int ith) {
    (void)ith;
    const pith_be_span_attn *a = j->a;
    int t = job / a->n_heads, h = job % a->n_heads, hd = a->head_dim;
    int first = t / a->span * a->span;
    const float *q = row_of(a->q, t) + (size_t)h * hd;
    float acc[SPAN_MAX_HEAD_DIM], s[SPAN_CHUNK];
    float scale = 1.0f / sqrtf((float)hd), m = -INFINITY, l = 0;
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (int k0 = 0; k0 < a->span; k0 += SPAN_CHUNK) {
        int nk = a->span - k0 < SPAN_CHUNK ? a->span - k0 : SPAN_CHUNK;
        float mc = m;
        for (int i = 0; i < nk; i++) {
            const float *k = row_of(a->k, first + k0 + i) + (size_t)h * hd;
            float dot = 0;
            for (int e = 0; e < hd; e++) dot += q[e] * k[e];
            s[i] = dot * scale;
            if (s[i] > mc) mc = s[i];
        }
        float back = expf(m - mc); /* the running sum and accumulator to the new maximum (0 at the start) */
        l *= back;
        for (int e = 0; e < hd; e++) acc[e] *= back;
        for (int i = 0; i < nk; i++) {
            float p = expf(s[i] - mc);
            const float *v = row_of(a->v, first + k0 + i) + (size_t)h * hd;
            l += p;
            for (int e = 0; e < hd; e++) acc[e] += p * v[e];
        }
        m = mc;
    }
    float *o = row_of(a->out, t) + (size_t)h * hd;
    for (int e = 0; e < hd; e++) o[e] = acc[e] / l;
}

typedef struct span_kv_args {
    const pith_be_span_attn *a;
    float *k, *v;
} span_kv_args;

/* Row t's K and V into its span's block, head-major as the cache holds them (kv.h). */
static void span_kv_row(row_job *j, int t, int ith) {
    (void)ith;
    const span_kv_args *s = j->a;
    const pith_be_span_attn *a = s->a;
    int hd = a->head_dim, span = a->span, block = t / span, slot = t % span;
    for (int h = 0; h < a->n_heads; h++) {
        size_t at = (((size_t)block * a->n_heads + h) * span + slot) * hd;
        memcpy(s->k + at, row_of(a->k, t) + (size_t)h * hd, (size_t)hd * sizeof(float));
        memcpy(s->v + at, row_of(a->v, t) + (size_t)h * hd, (size_t)hd * sizeof(float));
    }
}

/* The scratch for n rows of this shape; false when memory is short (the caller falls back). */
static bool span_scratch(pith_cpu_be *c, const pith_be_span_attn *a, int n) {
    pith_attn_shape shape = {.n_heads = a->n_heads, .n_kv_heads = a->n_heads, .head_dim = a->head_dim,
                             .scale = 1.0f / sqrtf((float)a->head_dim)};
    pith_err err;
    if (c->has_span_attn && (c->span_attn.shape.n_heads != shape.n_heads || c->span_attn.shape.head_dim != shape.head_dim)) {
        pith_attn_scratch_free(&c->span_attn);
        c->has_span_attn = false;
    }
    if (!c->has_span_attn) {
        if (pith_attn_scratch_init(&c->span_attn, &shape, c->cpu.n_threads, &err)) return false;
        c->has_span_attn = true;
    }
    if (pith_attn_scratch_reserve(&c->span_attn, n, &err)) return false;
    size_t dim = (size_t)a->n_heads * a->head_dim;
    if ((size_t)n > c->span_cap) {
        float *k = malloc((size_t)n * dim * sizeof *k), *v = malloc((size_t)n * dim * sizeof *v);
        int32_t *idx = malloc((size_t)4 * n * sizeof *idx);
        if (!k || !v || !idx) {
            free(k), free(v), free(idx);
            return false;
        }
        free(c->span_k), free(c->span_v), free(c->span_idx);
        c->span_k = k, c->span_v = v, c->span_idx = idx;
        c->span_cap = (size_t)n;
    }
    return true;
}

void pith_cpu_be_span_attention(pith_backend *be, const pith_be_span_attn *a, int n) {
    /* model/vision.c refuses wider heads at load; a span never straddles the step's end */
    if (a->head_dim > SPAN_MAX_HEAD_DIM || a->span < 1 || n % a->span) return;
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (!span_scratch(c, a, n)) {
        pith_cpu_be_rows(c, n * a->n_heads, span_attention_job, a, 4.0 * a->span * a->head_dim);
        return;
    }
    span_kv_args kv = {a, c->span_k, c->span_v};
    pith_cpu_be_rows(c, n, span_kv_row, &kv, 2.0 * a->n_heads * a->head_dim);
    int32_t *pos = c->span_idx, *seq = pos + n, *last = seq + n, *tables = last + n;
    for (int t = 0; t < n; t++) pos[t] = t % a->span, seq[t] = t / a->span, last[t] = a->span - 1;
    for (int b = 0; b < n / a->span; b++) tables[b] = b;
    pith_attn_args aa = {
        .n_tokens = n, .positions = pos, .seq = seq, .block_tables = tables, .max_blocks = 1, .block_size = a->span,
        .k_cache = c->span_k, .v_cache = c->span_v, .kv_type = PITH_F32, .kv_dim = a->n_heads * a->head_dim,
        .q = a->q->host, .q_ld = (size_t)a->q->cols, .out = a->out->host, .out_ld = (size_t)a->out->cols, .last = last,
    };
    pith_attention(&c->cpu, &c->span_attn, &aa);
}

typedef struct pool_args {
    const pith_buf *in;
    pith_buf *out;
    int side, k;
} pool_args;

static void pool_row(row_job *j, int o, int ith) {
    (void)ith;
    const pool_args *a = j->a;
    int per_side = a->side / a->k, per_img = per_side * per_side, d = a->in->cols;
    int img = o / per_img, r = o % per_img, oy = r / per_side, ox = r % per_side;
    float *y = row_of(a->out, o);
    memset(y, 0, (size_t)d * sizeof *y);
    for (int dy = 0; dy < a->k; dy++)
        for (int dx = 0; dx < a->k; dx++) {
            int p = img * a->side * a->side + (oy * a->k + dy) * a->side + ox * a->k + dx;
            const float *x = row_of(a->in, p);
            for (int i = 0; i < d; i++) y[i] += x[i];
        }
    float inv = 1.0f / (float)(a->k * a->k);
    for (int i = 0; i < d; i++) y[i] *= inv;
}

void pith_cpu_be_pool_avg(pith_backend *be, const pith_buf *in, pith_buf *out, int side, int k, int n) {
    if (side < 1 || k < 1 || side % k || n % (side * side)) return; /* model/vision.c checks the shapes */
    pool_args a = {in, out, side, k};
    int n_out = n / (side * side) * (side / k) * (side / k);
    pith_cpu_be_rows(pith_cpu_be_of(be), n_out, pool_row, &a, (double)k * k * in->cols);
}

typedef struct rope_rows_args {
    pith_buf *x;
    const pith_buf *cs;
} rope_rows_args;

static void rope_rows_row(row_job *j, int t, int ith) {
    (void)ith;
    const rope_rows_args *a = j->a;
    int half = a->cs->cols / 2, hd = 2 * half;
    float *x = row_of(a->x, t);
    const float *c = row_of(a->cs, t), *s = c + half;
    for (int h = 0; h + hd <= a->x->cols; h += hd)
        for (int i = 0; i < half; i++) {
            float x1 = x[h + i], x2 = x[h + half + i];
            x[h + i] = x1 * c[i] - x2 * s[i];
            x[h + half + i] = x2 * c[i] + x1 * s[i];
        }
}

void pith_cpu_be_rope_rows(pith_backend *be, pith_buf *x, const pith_buf *cs, int n) {
    rope_rows_args a = {x, cs};
    pith_cpu_be_rows(pith_cpu_be_of(be), n, rope_rows_row, &a, 3.0 * x->cols);
}

typedef struct group_args {
    const pith_buf *in;
    pith_buf *out;
    int k;
} group_args;

static void group_row(row_job *j, int r, int ith) {
    (void)ith;
    const group_args *a = j->a;
    size_t w = (size_t)a->in->cols;
    float *y = row_of(a->out, r);
    for (int i = 0; i < a->k; i++) memcpy(y + i * w, row_of(a->in, r * a->k + i), w * sizeof *y);
}

void pith_cpu_be_group_rows(pith_backend *be, const pith_buf *in, pith_buf *out, int k, int n) {
    if (k < 1 || n % k || out->cols != k * in->cols) return; /* the encoder checks the shapes */
    group_args a = {in, out, k};
    pith_cpu_be_rows(pith_cpu_be_of(be), n / k, group_row, &a, (double)k * in->cols);
}
