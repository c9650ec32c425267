#include "backend/cpu/matmul.h"

#include <stdatomic.h>

/* Activation bytes per token tile: a quarter of a typical 1 MiB L2, leaving room for the weights. */
#define TOKEN_TILE_BYTES (256 * 1024)

int pith_matrix_from_tensor(pith_matrix *m, const pith_tensor *t, pith_err *err) {
    int wt = pith_wtype_of(t->type);
    if (wt < 0) return pith_errf(err, "tensor %s: type %s has no matmul kernel", t->name, pith_dtype_name(t->type));
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[0] > INT32_MAX / 4 ||
        t->ne[1] > INT32_MAX / 4)
        return pith_errf(err, "tensor %s: expected a 2-D matrix", t->name);
    size_t rb = pith_dtype_row_bytes(t->type, t->ne[0]);
    if (!rb)
        return pith_errf(err, "tensor %s: row length %lld is not a multiple of the %s block size", t->name,
                         (long long)t->ne[0], pith_dtype_name(t->type));
    if (t->nbytes / rb < (size_t)t->ne[1] || !t->data)
        return pith_errf(err, "tensor %s: data is shorter than its shape", t->name);
    m->type = (pith_wtype)wt;
    m->cols = (int)t->ne[0];
    m->rows = (int)t->ne[1];
    m->data = t->data;
    m->row_bytes = rb;
    return 0;
}

void pith_acts_bind(pith_cpu *c, pith_acts *a, const float *x, int n, int k, size_t ldx) {
    a->x = x;
    a->n = n;
    a->k = k;
    a->ldx = ldx;
    a->id = ++c->act_serial;
}

typedef struct mm_job {
    pith_cpu *c;
    const pith_matrix *w;
    const pith_acts *a;
    pith_tile_fn tile;
    int rn;
    pith_act_format fmt;
    bool quantize;
    const uint8_t *x;
    size_t xs;
    float *y;
    size_t ldy;
    bool accumulate;
    int unit_rows;
    int n_units;
    int token_tile;
    _Atomic int next_unit;
    _Atomic int next_row;   /* activation rows claimed for quantizing */
    _Atomic int rows_done;  /* ... and finished */
} mm_job;

/* Phase 1: quantize the activation rows (claimed one by one), then wait for all of them. */
static void quantize_rows(mm_job *j) {
    const pith_acts *a = j->a;
    for (;;) {
        int t = atomic_fetch_add(&j->next_row, 1);
        if (t >= a->n) break;
        const float *src = a->x + (size_t)t * a->ldx;
        void *dst = (uint8_t *)j->x + (size_t)t * j->xs;
        if (j->fmt == PITH_ACT_Q8A) j->c->k->quantize_q8a(src, dst, a->k);
        else j->c->k->quantize_q8k(src, dst, a->k);
        atomic_fetch_add(&j->rows_done, 1);
    }
    pith_pool_wait_count(&j->rows_done, a->n);
}

static void mm_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mm_job *j = arg;
    if (j->quantize) quantize_rows(j);
    const pith_matrix *w = j->w;
    const int n = j->a->n;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next_unit, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        int r0 = u * j->unit_rows;
        int r1 = r0 + j->unit_rows < w->rows ? r0 + j->unit_rows : w->rows;
        for (int t0 = 0; t0 < n; t0 += j->token_tile) {
            int t1 = t0 + j->token_tile < n ? t0 + j->token_tile : n;
            for (int r = r0; r < r1; r += PITH_TILE_MAX_RM) {
                int rm = r1 - r < PITH_TILE_MAX_RM ? r1 - r : PITH_TILE_MAX_RM;
                const uint8_t *wr = w->data + (size_t)r * w->row_bytes;
                for (int t = t0; t < t1; t += j->rn) {
                    int rn = t1 - t < j->rn ? t1 - t : j->rn;
                    j->tile(w->cols, wr, w->row_bytes, rm, j->x + (size_t)t * j->xs, j->xs, rn,
                            j->y + (size_t)t * j->ldy + r, j->ldy, j->accumulate);
                }
            }
        }
    }
}

int pith_cpu_matmul(pith_cpu *c, const pith_matrix *w, pith_acts *a, float *y, size_t ldy, bool accumulate,
                    pith_err *err) {
    if (a->k != w->cols) return pith_errf(err, "matmul: input has %d columns, weight %d", a->k, w->cols);
    if (a->n <= 0) return 0;
    mm_job j = {.c = c, .w = w, .a = a, .y = y, .ldy = ldy, .accumulate = accumulate};
    j.tile = c->k->tile[w->type];
    j.rn = c->k->tile_rn[w->type];
    j.fmt = pith_act_format_of(w->type);
    if (j.fmt == PITH_ACT_F32) {
        j.x = (const uint8_t *)a->x;
        j.xs = a->ldx * sizeof(float);
    } else {
        j.xs = pith_act_row_bytes(j.fmt, a->k);
        if ((size_t)a->n * j.xs > c->act_cap[j.fmt])
            return pith_errf(err, "matmul: activation scratch too small (%d x %d)", a->n, a->k);
        j.x = c->act_buf[j.fmt];
        j.quantize = c->act_owner[j.fmt] != a->id;
        c->act_owner[j.fmt] = a->id;
    }
    int tile = (int)(TOKEN_TILE_BYTES / j.xs);
    j.token_tile = tile < j.rn ? j.rn : tile / j.rn * j.rn;
    /* About 8 units per thread balances a noisy machine; units stay whole row blocks. */
    int nth = c->n_threads;
    int blocks = (w->rows + PITH_TILE_MAX_RM - 1) / PITH_TILE_MAX_RM;
    int per_unit = blocks / (8 * nth);
    if (per_unit < 1) per_unit = 1;
    j.unit_rows = per_unit * PITH_TILE_MAX_RM;
    j.n_units = (w->rows + j.unit_rows - 1) / j.unit_rows;
    atomic_init(&j.next_unit, 0);
    atomic_init(&j.next_row, 0);
    atomic_init(&j.rows_done, 0);
    /* A few rows (decode) are quantized here, before any worker can join: then no participant ever
     * waits on another for them, even one that the OS has descheduled. */
    if (j.quantize && (double)a->n * a->k < PITH_POOL_MIN_WORK) {
        quantize_rows(&j);
        j.quantize = false;
    }
    pith_pool_run_sized(c->pool, mm_worker, &j, (double)w->rows * w->cols * a->n);
    return 0;
}
