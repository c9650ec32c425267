/* The vision encoders' ops on the CPU (backend.h: set_rows, layernorm, add_rows, span_attention,
 * pool_avg). Rows are independent in every one, so each runs as row jobs on the backend's pool; span
 * attention is one job per (row, head), an online softmax over its span's keys in chunks, so it needs
 * no scratch however long the span. */
#include <math.h>
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

void pith_cpu_be_span_attention(pith_backend *be, const pith_be_span_attn *a, int n) {
    /* model/vision.c refuses wider heads at load; a span never straddles the step's end */
    if (a->head_dim > SPAN_MAX_HEAD_DIM || a->span < 1 || n % a->span) return;
    pith_cpu_be_rows(pith_cpu_be_of(be), n * a->n_heads, span_attention_job, a, 4.0 * a->span * a->head_dim);
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
