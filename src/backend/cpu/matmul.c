#include "backend/cpu/matmul.h"

#include "backend/cpu/split.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

/* Activation bytes per token tile: a quarter of a typical 1 MiB L2, leaving room for the weights. */
#define TOKEN_TILE_BYTES (256 * 1024)
/* Weight bytes of one unit at most when the unit is read once per token tile (prefill). */
#define UNIT_BYTES_MAX ((size_t)1 << 20)
/* Weight bytes a thread claims at least from its own range (split.h: units shrink towards this as the
 * range runs out): small enough that the threads finish within a microsecond or two of each other. */
#define UNIT_BYTES ((size_t)32 << 10)

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

/* One output of a pith_cpu_matmul_many job, with what its tiles need precomputed. */
typedef struct mm_product {
    const pith_matrix *w;
    float *y;
    size_t ldy;
    bool accumulate;
    pith_tile_fn tile;
    pith_packed_tile_fn tile_packed;
    pith_packed_tile2_fn tile_packed2;
    int rn;
    const uint8_t *x; /* activations in this weight's format */
    size_t xs;
    int token_tile;
    int block0; /* first block (PITH_PACK_ROWS_MAX rows) of this product in the job's numbering */
} mm_product;

typedef struct mm_job {
    pith_cpu *c;
    const pith_acts *a;
    mm_product p[PITH_MATMUL_MAX_OUTS];
    int n_products;
    int n_blocks;     /* over all products */
    pith_split split; /* of the blocks among the threads */
    /* Formats whose activation rows the workers still quantize (phase 1), and counters for it:
     * items are (format, row) pairs. */
    pith_act_format q_fmt[PITH_ACT_N_FORMATS];
    int n_q_fmt;
    _Atomic int next_item;
    _Atomic int items_done;
} mm_job;

static void quantize_item(pith_cpu *c, const pith_acts *a, pith_act_format f, int t) {
    const float *src = a->x + (size_t)t * a->ldx;
    void *dst = (uint8_t *)c->act_buf[f] + (size_t)t * pith_act_row_bytes(f, a->k);
    if (f == PITH_ACT_Q8A) c->k->quantize_q8a(src, dst, a->k);
    else c->k->quantize_q8k(src, dst, a->k);
}

/* Phase 1: quantize the activation rows (claimed one by one), then wait for all of them. */
static void quantize_rows(mm_job *j) {
    const int n = j->a->n, items = j->n_q_fmt * n;
    if (!items) return;
    for (;;) {
        int i = atomic_fetch_add(&j->next_item, 1);
        if (i >= items) break;
        quantize_item(j->c, j->a, j->q_fmt[i / n], i % n);
        atomic_fetch_add(&j->items_done, 1);
    }
    pith_pool_wait_count(&j->items_done, items);
}

int pith_matrix_run_groups(const pith_matrix *w, pith_packed_tile_fn tile, pith_packed_tile2_fn tile2, int rn,
                           const uint8_t *x, size_t xs, int t0, int t1, float *y, size_t ldy, bool accumulate, int r,
                           int r1) {
    const int gr = w->group_rows;
    while (gr > 0 && r + gr <= r1 && r + gr <= w->packed_rows) {
        const uint8_t *g = w->packed + (size_t)r * w->row_bytes; /* groups take their rows' bytes */
        /* two groups a pass only where the products are compute-bound (8 tokens or more: each group is
         * read again from cache per pass); a few tokens stream the weights from memory, where one group
         * after the other is one linear stream that the prefetches lead (pairs decoded at 0.58 of the
         * bandwidth on one thread against 0.87) */
        const bool pair = tile2 && t1 - t0 >= 2 * rn && r + 2 * gr <= r1 && r + 2 * gr <= w->packed_rows;
        for (int t = t0; t < t1; t += rn) {
            int n = t1 - t < rn ? t1 - t : rn;
            const uint8_t *xt = x + (size_t)t * xs;
            float *yt = y + (size_t)t * ldy + r;
            if (pair) tile2(w->cols, g, (size_t)gr * w->row_bytes, xt, xs, n, yt, ldy, accumulate);
            else tile(w->cols, g, xt, xs, n, yt, ldy, accumulate);
        }
        r += pair ? 2 * gr : gr;
    }
    return r;
}

static void run_rows(const mm_product *p, int n, int r0, int r1) {
    const pith_matrix *w = p->w;
    for (int t0 = 0; t0 < n; t0 += p->token_tile) {
        int t1 = t0 + p->token_tile < n ? t0 + p->token_tile : n;
        int r = pith_matrix_run_groups(w, p->tile_packed, p->tile_packed2, p->rn, p->x, p->xs, t0, t1, p->y, p->ldy,
                                       p->accumulate, r0, r1);
        for (; r < r1; r += PITH_TILE_MAX_RM) {
            int rm = r1 - r < PITH_TILE_MAX_RM ? r1 - r : PITH_TILE_MAX_RM;
            const uint8_t *wr = w->data + (size_t)r * w->row_bytes;
            for (int t = t0; t < t1; t += p->rn) {
                int rn = t1 - t < p->rn ? t1 - t : p->rn;
                p->tile(w->cols, wr, w->row_bytes, rm, p->x + (size_t)t * p->xs, p->xs, rn,
                        p->y + (size_t)t * p->ldy + r, p->ldy, p->accumulate);
            }
        }
    }
}

static void mm_worker(void *arg, int ith, int nth) {
    (void)nth;
    mm_job *j = arg;
    quantize_rows(j);
    int b0, b1;
    while (pith_split_next(&j->split, ith, &b0, &b1)) {
        /* a unit may span the end of one product and the start of the next */
        for (int i = 0; i < j->n_products && b0 < b1; i++) {
            const mm_product *p = &j->p[i];
            int end = i + 1 < j->n_products ? j->p[i + 1].block0 : j->n_blocks;
            if (b0 >= end) continue;
            int e = b1 < end ? b1 : end;
            int r1 = (e - p->block0) * PITH_PACK_ROWS_MAX;
            run_rows(p, j->a->n, (b0 - p->block0) * PITH_PACK_ROWS_MAX, r1 < p->w->rows ? r1 : p->w->rows);
            b0 = e;
        }
    }
}

static int prepare_product(pith_cpu *c, const pith_acts *a, const pith_matmul_out *o, mm_product *p, pith_err *err) {
    const pith_matrix *w = o->w;
    if (a->k != w->cols) return pith_errf(err, "matmul: input has %d columns, weight %d", a->k, w->cols);
    *p = (mm_product){.w = w, .y = o->y, .ldy = o->ldy, .accumulate = o->accumulate};
    p->tile = c->k->tile[w->type];
    p->tile_packed = c->k->tile_packed[w->type];
    p->tile_packed2 = c->k->tile_packed2[w->type];
    if (w->packed && !p->tile_packed) return pith_errf(err, "matmul: matrix packed for another kernel table");
    p->rn = c->k->tile_rn[w->type];
    pith_act_format f = pith_act_format_of(w->type);
    if (f == PITH_ACT_F32) {
        p->x = (const uint8_t *)a->x;
        p->xs = a->ldx * sizeof(float);
    } else {
        p->xs = pith_act_row_bytes(f, a->k);
        if ((size_t)a->n * p->xs > c->act_cap[f])
            return pith_errf(err, "matmul: activation scratch too small (%d x %d)", a->n, a->k);
        p->x = c->act_buf[f];
    }
    int tile = (int)(TOKEN_TILE_BYTES / p->xs);
    p->token_tile = tile < p->rn ? p->rn : tile / p->rn * p->rn;
    return 0;
}

int pith_cpu_matmul_many(pith_cpu *c, pith_acts *a, const pith_matmul_out *outs, int n_outs, pith_err *err) {
    if (n_outs < 1 || n_outs > PITH_MATMUL_MAX_OUTS)
        return pith_errf(err, "matmul: %d outputs (1 to %d allowed)", n_outs, PITH_MATMUL_MAX_OUTS);
    mm_job j = {.c = c, .a = a, .n_products = n_outs};
    int min_unit = 0, max_unit = INT32_MAX; /* in blocks */
    for (int i = 0; i < n_outs; i++) {
        mm_product *p = &j.p[i];
        if (prepare_product(c, a, &outs[i], p, err)) return -1;
        p->block0 = j.n_blocks;
        j.n_blocks += (p->w->rows + PITH_PACK_ROWS_MAX - 1) / PITH_PACK_ROWS_MAX;
        /* In a prefill a unit's weights are read once per token tile: keep them cache-sized. */
        if (a->n > p->token_tile) {
            int cap = (int)(UNIT_BYTES_MAX / (PITH_PACK_ROWS_MAX * p->w->row_bytes));
            if (cap < max_unit) max_unit = cap < 1 ? 1 : cap;
        }
        if (i == 0) min_unit = (int)(UNIT_BYTES / (PITH_PACK_ROWS_MAX * p->w->row_bytes));
    }
    if (a->n <= 0) return 0;
    /* A prefill re-reads the activations once per unit: there, units as large as the cache allows. */
    if (max_unit < INT32_MAX) min_unit = max_unit;
    min_unit = min_unit < 1 ? 1 : min_unit > max_unit ? max_unit : min_unit;
    if (max_unit == INT32_MAX) max_unit = j.n_blocks;
    /* Quantize each activation format the products read once per binding. */
    for (int i = 0; i < n_outs; i++) {
        pith_act_format f = pith_act_format_of(j.p[i].w->type);
        if (f == PITH_ACT_F32 || c->act_owner[f] == a->id) continue;
        c->act_owner[f] = a->id;
        j.q_fmt[j.n_q_fmt++] = f;
    }
    pith_split_init(&j.split, j.n_blocks, c->n_threads, min_unit, max_unit);
    atomic_init(&j.next_item, 0);
    atomic_init(&j.items_done, 0);
    /* A few rows (decode) are quantized here, before any worker can join: then no participant ever
     * waits on another for them, even one that the OS has descheduled. */
    if (j.n_q_fmt && (double)a->n * a->k * j.n_q_fmt < PITH_POOL_MIN_WORK) {
        for (int f = 0; f < j.n_q_fmt; f++)
            for (int t = 0; t < a->n; t++) quantize_item(c, a, j.q_fmt[f], t);
        j.n_q_fmt = 0;
    }
    double work = 0;
    for (int i = 0; i < n_outs; i++) work += (double)j.p[i].w->rows * a->k * a->n;
    pith_pool_run_sized(c->pool, mm_worker, &j, work);
    return 0;
}

int pith_cpu_matmul(pith_cpu *c, const pith_matrix *w, pith_acts *a, float *y, size_t ldy, bool accumulate,
                    pith_err *err) {
    pith_matmul_out o = {.w = w, .y = y, .ldy = ldy, .accumulate = accumulate};
    return pith_cpu_matmul_many(c, a, &o, 1, err);
}
