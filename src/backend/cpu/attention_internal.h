/* What the two attention paths share (attention.h): the window rule and the K/V row loader. */
#ifndef PITH_CPU_ATTENTION_INTERNAL_H
#define PITH_CPU_ATTENTION_INTERNAL_H

#include "backend/cpu/attention.h"

/* Lowest position a query at position p sees. */
static inline int attn_lo(const pith_attn_args *a, int p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* Highest position query t sees. */
static inline int attn_hi(const pith_attn_args *a, int t) { return a->last ? a->last[t] : a->positions[t]; }

/* Converts rows j0..j0+n-1 of sequence seq (this KV head's part of each slot) to float rows of hd, from
 * any KV type (kv.h: pith_kv_row_to_f32). A block holds each head's rows contiguously, so this is one
 * conversion per block touched. */
void attn_load_rows(const pith_cpu_kernels *k, const pith_attn_args *a, const void *cache, int seq, int j0, int n,
                    int kv_head, int hd, float *dst);

/* The tiled AVX-512 path (attention_tiled.c): available with the avx512-vnni kernel table (otherwise
 * the portable path in attention.c runs). run: s->runs holds n_runs token runs; work sizes the job. */
bool attn_tiled_available(const pith_cpu *c);
void attn_tiled_run(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a, int n_runs, double work);
size_t attn_tiled_thread_floats(const pith_attn_shape *shape);
size_t attn_tiled_partial_floats(const pith_attn_shape *shape);

#endif
