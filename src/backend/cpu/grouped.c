#include "backend/cpu/grouped.h"

#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/split.h"

/* As matmul.c: activation bytes per token tile, weight bytes per unit. */
#define TOKEN_TILE_BYTES (256 * 1024)
#define UNIT_BYTES_MAX ((size_t)1 << 20)
#define UNIT_BYTES ((size_t)32 << 10)

typedef struct grouped_job {
    pith_cpu *c;
    const pith_grouped_out *outs;
    int n_outs;
    const int *offsets;
    int active[PITH_GROUPED_MAX_GROUPS]; /* groups with at least one row, in order */
    int n_active;
    int blocks;                          /* blocks of PITH_PACK_ROWS_MAX rows per matrix */
    int rows;
    pith_tile_fn tile;
    pith_packed_tile_fn tile_packed;
    pith_packed_tile2_fn tile_packed2;
    int rn, token_tile;
    const uint8_t *x;
    size_t xs;
    pith_split split;
    /* quantization of the input rows (phase 1) */
    const float *xf;
    size_t ldx;
    int k;
    pith_act_format fmt;
    int n_rows;        /* source rows to quantize */
    const int *slots;  /* NULL: source row t is gathered row t; else its per_row slots */
    int per_row;
    _Atomic int next_row;
} grouped_job;

static void quantize_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    grouped_job *j = arg;
    uint8_t *buf = j->c->act_buf[j->fmt];
    for (;;) {
        int t = atomic_fetch_add_explicit(&j->next_row, 1, memory_order_relaxed);
        if (t >= j->n_rows) break;
        const float *src = j->xf + (size_t)t * j->ldx;
        const int *slot = j->slots ? j->slots + (size_t)t * j->per_row : &t;
        void *dst = buf + (size_t)slot[0] * j->xs;
        if (j->fmt == PITH_ACT_Q8A) j->c->k->quantize_q8a(src, dst, j->k);
        else j->c->k->quantize_q8k(src, dst, j->k);
        /* the same bits in every slot the row goes to: quantized once, copied */
        for (int i = 1; j->slots && i < j->per_row; i++) memcpy(buf + (size_t)slot[i] * j->xs, dst, j->xs);
    }
}

/* Rows [r0, r1) of w for the input rows [t_lo, t_hi), as matmul.c's run_rows. */
static void run_rows(const grouped_job *j, const pith_matrix *w, float *y, size_t ldy, int t_lo, int t_hi, int r0,
                     int r1) {
    for (int t0 = t_lo; t0 < t_hi; t0 += j->token_tile) {
        int t1 = t0 + j->token_tile < t_hi ? t0 + j->token_tile : t_hi;
        int r = pith_matrix_run_groups(w, j->tile_packed, j->tile_packed2, j->rn, j->x, j->xs, t0, t1, y, ldy, false,
                                       r0, r1);
        for (; r < r1; r += PITH_TILE_MAX_RM) {
            int rm = r1 - r < PITH_TILE_MAX_RM ? r1 - r : PITH_TILE_MAX_RM;
            const uint8_t *wr = w->data + (size_t)r * w->row_bytes;
            for (int t = t0; t < t1; t += j->rn) {
                int rn = t1 - t < j->rn ? t1 - t : j->rn;
                j->tile(w->cols, wr, w->row_bytes, rm, j->x + (size_t)t * j->xs, j->xs, rn, y + (size_t)t * ldy + r,
                        ldy, false);
            }
        }
    }
}

static void grouped_worker(void *arg, int ith, int nth) {
    (void)nth;
    grouped_job *j = arg;
    int b0, b1;
    while (pith_split_next(&j->split, ith, &b0, &b1)) {
        /* items: ((active group * n_outs) + out) * blocks + block; a unit may span several matrices */
        while (b0 < b1) {
            int mat = b0 / j->blocks, blk = b0 % j->blocks;
            int end = (mat + 1) * j->blocks < b1 ? (mat + 1) * j->blocks : b1;
            int g = j->active[mat / j->n_outs];
            const pith_grouped_out *o = &j->outs[mat % j->n_outs];
            int r0 = blk * PITH_PACK_ROWS_MAX, r1 = (blk + end - b0) * PITH_PACK_ROWS_MAX;
            run_rows(j, &o->w[g], o->y, o->ldy, j->offsets[g], j->offsets[g + 1], r0, r1 < j->rows ? r1 : j->rows);
            b0 = end;
        }
    }
}

static int grouped_run(pith_cpu *c, const float *x, size_t ldx, int k, int n_src, const int *slots, int per_row,
                       const int *offsets, int n_groups, const pith_grouped_out *outs, int n_outs, pith_err *err) {
    if (n_outs < 1 || n_outs > PITH_GROUPED_MAX_OUTS || n_groups < 1 || n_groups > PITH_GROUPED_MAX_GROUPS)
        return pith_errf(err, "grouped matmul: %d outputs of %d groups", n_outs, n_groups);
    grouped_job j;
    j.c = c;
    j.outs = outs;
    j.n_outs = n_outs;
    j.offsets = offsets;
    j.n_active = 0;
    const pith_matrix *w0 = &outs[0].w[0];
    for (int o = 0; o < n_outs; o++)
        for (int g = 0; g < n_groups; g++) {
            const pith_matrix *w = &outs[o].w[g];
            if (w->type != w0->type || w->rows != w0->rows || w->cols != w0->cols)
                return pith_errf(err, "grouped matmul: matrices of different shapes or types");
            if (w->packed && !c->k->tile_packed[w->type])
                return pith_errf(err, "grouped matmul: matrix packed for another kernel table");
        }
    if (k != w0->cols) return pith_errf(err, "grouped matmul: input has %d columns, weight %d", k, w0->cols);
    if (offsets[0] != 0) return pith_errf(err, "grouped matmul: offsets do not start at 0");
    for (int g = 0; g < n_groups; g++) {
        if (offsets[g + 1] < offsets[g]) return pith_errf(err, "grouped matmul: offsets decrease");
        if (offsets[g + 1] > offsets[g]) j.active[j.n_active++] = g;
    }
    int n = offsets[n_groups];
    if (n == 0) return 0;
    j.rows = w0->rows;
    j.blocks = (w0->rows + PITH_PACK_ROWS_MAX - 1) / PITH_PACK_ROWS_MAX;
    j.tile = c->k->tile[w0->type];
    j.tile_packed = c->k->tile_packed[w0->type];
    j.tile_packed2 = c->k->tile_packed2[w0->type];
    j.rn = c->k->tile_rn[w0->type];
    j.fmt = pith_act_format_of(w0->type);
    j.xf = x;
    j.ldx = ldx;
    j.k = k;
    j.n_rows = slots ? n_src : n;
    j.slots = slots;
    j.per_row = per_row;
    if (slots && (j.fmt == PITH_ACT_F32 || (int64_t)n_src * per_row != n))
        return pith_errf(err, "grouped matmul: %d source rows x %d slots for %d gathered rows%s", n_src, per_row, n,
                         j.fmt == PITH_ACT_F32 ? " (float activations: gather the rows instead)" : "");
    if (j.fmt == PITH_ACT_F32) {
        j.x = (const uint8_t *)x;
        j.xs = ldx * sizeof(float);
    } else {
        j.xs = pith_act_row_bytes(j.fmt, k);
        if ((size_t)n * j.xs > c->act_cap[j.fmt])
            return pith_errf(err, "grouped matmul: activation scratch too small (%d x %d)", n, k);
        j.x = c->act_buf[j.fmt];
        c->act_owner[j.fmt] = 0; /* no binding owns what is written here */
        atomic_init(&j.next_row, 0);
        pith_pool_run_sized(c->pool, quantize_worker, &j, (double)n * k);
    }
    int tile = (int)(TOKEN_TILE_BYTES / j.xs);
    j.token_tile = tile < j.rn ? j.rn : tile / j.rn * j.rn;
    int n_items = j.n_active * n_outs * j.blocks;
    size_t block_bytes = (size_t)PITH_PACK_ROWS_MAX * w0->row_bytes;
    int min_unit = (int)(UNIT_BYTES / block_bytes), max_unit = n_items;
    /* In a prefill an expert with many rows reads its weights once per token tile: cache-sized units. */
    if (n > j.token_tile * j.n_active) {
        int cap = (int)(UNIT_BYTES_MAX / block_bytes);
        max_unit = cap < 1 ? 1 : cap;
        min_unit = max_unit;
    }
    min_unit = min_unit < 1 ? 1 : min_unit > max_unit ? max_unit : min_unit;
    pith_split_init(&j.split, n_items, c->n_threads, min_unit, max_unit);
    pith_pool_run_sized(c->pool, grouped_worker, &j, (double)n * k * w0->rows * n_outs);
    return 0;
}

int pith_cpu_matmul_grouped(pith_cpu *c, const float *x, size_t ldx, int k, const int *offsets, int n_groups,
                            const pith_grouped_out *outs, int n_outs, pith_err *err) {
    return grouped_run(c, x, ldx, k, 0, NULL, 0, offsets, n_groups, outs, n_outs, err);
}

int pith_cpu_matmul_grouped_scatter(pith_cpu *c, const float *x, size_t ldx, int k, int n_src, const int *slots,
                                    int per_row, const int *offsets, int n_groups, const pith_grouped_out *outs,
                                    int n_outs, pith_err *err) {
    if (n_src < 1 || per_row < 1 || !slots)
        return pith_errf(err, "grouped matmul: %d source rows of %d slots", n_src, per_row);
    return grouped_run(c, x, ldx, k, n_src, slots, per_row, offsets, n_groups, outs, n_outs, err);
}
