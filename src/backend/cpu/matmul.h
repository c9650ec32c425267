/* Matrix products y = x W^T over all tokens of a step, split across the pool by output rows.
 *
 * A pith_matrix is a weight viewed for the kernels: rows output features of cols inputs, each row
 * row_bytes apart in its own format. A pith_acts binds an input (n rows of k floats) to the context,
 * so that matmuls reading the same input (Q, K and V; gate and up) quantize it only once.
 *
 * Each thread streams its own share of the output rows and steals from the others when it runs out
 * (split.h: the machine is shared and noisy, so plain static splits straggle); inside a unit it walks
 * token tiles that fit in L2, weight rows a packed group (8 or 16) or 4 at a time, tokens tile_rn at a
 * time, so in a prefill the weights stream from memory about once per 256 KiB of activations and the
 * activations stay cached. */
#ifndef PITH_CPU_MATMUL_H
#define PITH_CPU_MATMUL_H

#include "backend/cpu/cpu.h"
#include "pith/tensor.h"

typedef struct pith_matrix {
    pith_wtype type;
    int rows;
    int cols;
    const uint8_t *data;
    size_t row_bytes;
    /* Rows [0, packed_rows) repacked for the kernel table (pith_matrix_pack), group_rows rows per
     * group of group_rows * row_bytes bytes; NULL when the table keeps the file layout. */
    uint8_t *packed;
    int packed_rows;
    int group_rows;
} pith_matrix;

/* Views a 2-D weight tensor (ne = {cols, rows}); fails when the type has no kernel, the shape is not
 * 2-D, cols is not a multiple of the block size, or the data is shorter than the shape says. */
int pith_matrix_from_tensor(pith_matrix *m, const pith_tensor *t, pith_err *err);

/* Repacks the whole groups of rows when c's kernel table has a packed layout for the type (otherwise
 * does nothing). The packed copy is owned by m: release it with pith_matrix_free. Results are the same
 * bits with or without packing only per table: packing is part of the kernel choice. */
int pith_matrix_pack(pith_cpu *c, pith_matrix *m, pith_err *err);
void pith_matrix_free(pith_matrix *m);

/* The whole packed groups of w's rows from r up to r1 (and up to packed_rows), for tokens [t0, t1) of x
 * (rows xs bytes apart, in w's activation format) into y (token t's row at y + t * ldy), rn tokens a
 * call; two groups a call through tile2 where the table has one and the pass is compute-bound. Returns
 * the first row left for the ordinary tile. The loop of both matmul.c and grouped.c. */
int pith_matrix_run_groups(const pith_matrix *w, pith_packed_tile_fn tile, pith_packed_tile2_fn tile2, int rn,
                           const uint8_t *x, size_t xs, int t0, int t1, float *y, size_t ldy, bool accumulate, int r,
                           int r1);

typedef struct pith_acts {
    const float *x;
    int n;         /* rows (tokens) */
    int k;         /* elements per row */
    size_t ldx;    /* floats between rows */
    uint64_t id;   /* binding serial, see pith_cpu.act_owner */
} pith_acts;

void pith_acts_bind(pith_cpu *c, pith_acts *a, const float *x, int n, int k, size_t ldx);

/* One product of a matmul job: y[t * ldy + r] (+)= sum_k W[r][k] x[t][k]. */
typedef struct pith_matmul_out {
    const pith_matrix *w;
    float *y;
    size_t ldy;
    bool accumulate;
} pith_matmul_out;

#define PITH_MATMUL_MAX_OUTS 4

/* Several products of the same input (Q, K and V; gate and up) in one pass of the pool: one
 * wake-up and one final wait instead of one per matrix, and the units of all of them balance
 * together. Same results as separate pith_cpu_matmul calls. */
int pith_cpu_matmul_many(pith_cpu *c, pith_acts *a, const pith_matmul_out *outs, int n_outs, pith_err *err);

/* y[t * ldy + r] (+)= sum_k W[r][k] x[t][k] for every token t < a->n and row r < w->rows. Fails only
 * when the shapes disagree or pith_cpu_reserve was not called for this size. */
int pith_cpu_matmul(pith_cpu *c, const pith_matrix *w, pith_acts *a, float *y, size_t ldy, bool accumulate,
                    pith_err *err);

#endif
