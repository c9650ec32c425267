/* Grouped matrix products for mixture-of-experts layers: one pool job for all the experts of a layer.
 *
 * The input rows are grouped: rows [offsets[g], offsets[g + 1]) of x belong to group g (an expert) and
 * multiply that group's own matrix. A group with no rows costs nothing; a group holding every row is
 * an ordinary matrix product. Several outputs may read the same input (an expert's gate and up): their
 * matrices must have the same shape and type.
 *
 * The job's work items are (group, output, block of PITH_PACK_ROWS_MAX weight rows), numbered group by
 * group, split among the threads like pith_cpu_matmul (split.h): each thread streams one contiguous run
 * of the active experts' weights. Inside an item the tiles walk the group's rows as pith_cpu_matmul
 * walks a batch (packed groups of rows where the matrix is packed, then 4-row tiles), so each output
 * row is computed exactly as pith_cpu_matmul would compute it for that input row alone: results do not
 * depend on which other rows share the group. */
#ifndef PITH_CPU_GROUPED_H
#define PITH_CPU_GROUPED_H

#include "backend/cpu/matmul.h"

/* One output: y[r * ldy + i] = sum_k W_g[i][k] x[r][k] for every row r of group g, W_g = w[g]. */
typedef struct pith_grouped_out {
    const pith_matrix *w; /* [n_groups] matrices, all of one shape and type */
    float *y;
    size_t ldy;
} pith_grouped_out;

#define PITH_GROUPED_MAX_OUTS 2
#define PITH_GROUPED_MAX_GROUPS 1024

/* x: offsets[n_groups] rows of k floats, ldx apart (offsets has n_groups + 1 entries, offsets[0] = 0). The activation scratch of c must hold that many
 * rows of k (pith_cpu_reserve); its contents are overwritten. Fails on shapes that disagree. */
int pith_cpu_matmul_grouped(pith_cpu *c, const float *x, size_t ldx, int k, const int *offsets, int n_groups,
                            const pith_grouped_out *outs, int n_outs, pith_err *err);

/* The same products with the input rows scattered from their sources: source row t of x (n_src rows,
 * ldx apart) is gathered row slots[t * per_row + i] for every i < per_row (a mixture-of-experts layer:
 * a token and its top-k experts' rows), so offsets[n_groups] must be n_src * per_row and every gathered
 * row must be some slot exactly once. Each source row is quantized once and copied to its slots, which
 * gives each gathered row the bits quantizing it alone would. Only for weights whose activations are
 * quantized (pith_act_format_of not PITH_ACT_F32): float activations are read in place, so gather them
 * and call pith_cpu_matmul_grouped. */
int pith_cpu_matmul_grouped_scatter(pith_cpu *c, const float *x, size_t ldx, int k, int n_src, const int *slots,
                                    int per_row, const int *offsets, int n_groups, const pith_grouped_out *outs,
                                    int n_outs, pith_err *err);

#endif
