/* Reductions over one logits row, vectorised: the per-token passes of sampling (sampler.c), the
 * engine's logprobs (core/logprobs.c) and greedy drafting (the MTP head's mtp_logits op,
 * backend/cpu/backend_cpu_gdn.c). Each is a handful of passes over the row in independent lanes the
 * compiler keeps in vector registers (no loop-carried load, no call per element), so that a 150-260k
 * vocabulary costs tens of microseconds, not the milliseconds a plain loop with expf or a compare
 * against x[best] takes.
 *
 * Conventions: NaN never counts (not a maximum, exp 0); -inf counts as a value whose exp is 0. Rows are
 * any length >= 1. Nothing here allocates or keeps state. */
#ifndef PITH_SAMPLE_ROWS_H
#define PITH_SAMPLE_ROWS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pith_row_softmax sums its terms per block of this many entries (bsum has n / PITH_ROW_BLOCK + 1). */
enum { PITH_ROW_BLOCK = 256 };

/* The largest value, NaN ignored; -inf when there is none. */
float pith_row_max(const float *x, int n);

/* The id of the largest value, ties to the lowest id; NaN never wins. When no value is above -inf: the
 * first -inf, else (all NaN) 0. */
int32_t pith_row_argmax(const float *x, int n);

/* Tempers x in place (x[i] / temp) and writes e[i] = exp(x[i] / temp - maxl / temp), 0 for NaN and
 * -inf, where maxl is the row's maximum (pith_row_max: so every term is at most 1 and the best is
 * exactly 1). bsum[b] gets the sum of block b's terms, summed in float lanes (at most 256 terms of at
 * most 1) then in double; returns the blocks' total, summed in order. */
double pith_row_softmax(float *x, int n, float temp, float maxl, float *e, double *bsum);

/* log(sum exp(x[i])) over the non-NaN values; -inf when there is none above -inf. Relative error of the
 * exp: a few float ulps (the polynomial in rows.c). */
double pith_row_logsumexp(const float *x, int n);

#ifdef __cplusplus
}
#endif

#endif
