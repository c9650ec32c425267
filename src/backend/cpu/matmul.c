#include "backend/cpu/matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

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
    m->packed = NULL;
    m->packed_rows = m->group_rows = 0;
    return 0;
}

typedef struct pack_job {
    const pith_matrix *m;
    pith_pack_fn pack;
    size_t group_bytes;
    int n_groups;
    _Atomic int next;
} pack_job;

static void pack_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    pack_job *j = arg;
    for (;;) {
        int g = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (g >= j->n_groups) break;
        const pith_matrix *m = j->m;
        j->pack(m->cols, m->data + (size_t)g * m->group_rows * m->row_bytes, m->row_bytes,
                m->packed + (size_t)g * j->group_bytes);
    }
}

int pith_matrix_pack(pith_cpu *c, pith_matrix *m, pith_err *err) {
    pith_pack_fn pack = c->k->pack[m->type];
    int gr = c->k->pack_rows;
    if (!pack || m->packed || gr <= 0 || m->rows / gr == 0) return 0;
    int n_groups = m->rows / gr;
    size_t group_bytes = (size_t)gr * m->row_bytes;
    m->group_rows = gr;
    size_t total = (size_t)n_groups * group_bytes;
    /* Decode streams these bytes once per token: on 2 MiB pages the stream costs one TLB miss per
     * 2 MiB instead of per 4 KiB. posix_memalign, not aligned_alloc: no rounding of the size up to
     * the alignment (up to 2 MiB wasted per matrix). */
    size_t align = total >= HUGE_PAGE ? HUGE_PAGE : 64;
    void *buf = NULL;
    if (posix_memalign(&buf, align, total) != 0) buf = NULL;
    m->packed = buf;
    if (!m->packed) return pith_errf(err, "out of memory repacking a %d x %d matrix", m->rows, m->cols);
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE) madvise(m->packed, total / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* a hint only */
#endif
    pack_job j = {.m = m, .pack = pack, .group_bytes = group_bytes, .n_groups = n_groups};
    atomic_init(&j.next, 0);
    pith_pool_run_sized(c->pool, pack_worker, &j, (double)total);
    m->packed_rows = n_groups * gr;
#ifdef MADV_PAGEOUT
    /* The kernels no longer read the packed rows in their file layout: let the kernel reclaim those
     * pages (the whole pages inside them only), or the model would stay resident twice. Only a hint:
     * the contents stay valid and come back if anything reads them (a tied embedding table does). */
    uintptr_t page = 4096, lo = ((uintptr_t)m->data + page - 1) / page * page;
    uintptr_t hi = ((uintptr_t)m->data + total) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#endif
    return 0;
}

void pith_matrix_free(pith_matrix *m) {
    free(m->packed);
    m->packed = NULL;
    m->packed_rows = m->group_rows = 0;
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
    pith_packed_tile_fn tile_packed;
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
            int r = r0;
            const int gr = w->group_rows;
            for (; gr > 0 && r + gr <= r1 && r + gr <= w->packed_rows; r += gr) {
                const uint8_t *g = w->packed + (size_t)r * w->row_bytes; /* groups take their rows' bytes */
                for (int t = t0; t < t1; t += j->rn) {
                    int rn = t1 - t < j->rn ? t1 - t : j->rn;
                    j->tile_packed(w->cols, g, j->x + (size_t)t * j->xs, j->xs, rn, j->y + (size_t)t * j->ldy + r,
                                   j->ldy, j->accumulate);
                }
            }
            for (; r < r1; r += PITH_TILE_MAX_RM) {
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
    j.tile_packed = c->k->tile_packed[w->type];
    if (w->packed && !j.tile_packed) return pith_errf(err, "matmul: matrix packed for another kernel table");
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
    /* About 4 units per thread balances a noisy machine (measured against 2, 8 and 16: longer
     * streams per unit prefetch better, fewer units straggle more); units stay whole packed groups
     * (which are whole row blocks too). */
    int nth = c->n_threads;
    int blocks = (w->rows + PITH_PACK_ROWS_MAX - 1) / PITH_PACK_ROWS_MAX;
    int per_unit = blocks / (4 * nth);
    if (per_unit < 1) per_unit = 1;
    j.unit_rows = per_unit * PITH_PACK_ROWS_MAX;
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
