/* Causal attention over a paged KV cache, for one layer and every token of a batch, optionally
 * sliding-window and with attention sinks.
 *
 * Each query token t (sequence s, position p) attends to positions lo..hi of s, hi = p (causal) or
 * a->last[t] (look-ahead inside an image span), where lo = 0 for full
 * attention and lo = max(0, p - window + 1) with a window (position j is masked when p - j >= window,
 * as in Hugging Face and llama.cpp). The K/V sit in the cache slots named by s's block table (batch.h),
 * head-major inside each block (kv.h). The cache rows must already hold this batch's own K/V.
 *
 * With a window the engine may release blocks that every query of s has slid past, leaving -1 in the
 * block table: attention never reads a block table entry whose block lies wholly below the lowest lo of
 * the queries of s in the batch, and its work per token is O(window), not O(position).
 *
 * Sinks (GPT-OSS): head h has a learned logit sink[h] that joins the softmax's denominator but carries
 * no value, p_j = exp(s_j) / (exp(sink[h]) + sum_k exp(s_k)), where s_j = scale * q.k_j and the sink is
 * not scaled. Any finite sink is safe (a huge one gives outputs near 0, never inf or NaN).
 *
 * Work is split into items of (run of up to PITH_ATTN_QTILE consecutive batch tokens of one sequence,
 * KV head): an item loads its sequence's K/V in chunks of PITH_ATTN_CHUNK positions (converting the KV
 * type to F32 once per chunk) and updates every query of the run and every query head sharing that KV
 * head with an online softmax, so a prefill reads each K/V row once per run instead of once per token
 * and head. Chunks wholly below every query's window are skipped. Two paths: with the avx512-vnni
 * kernel table, the tiled one (attention_tiled.c: queries along vector lanes, register tiles, segments
 * of PITH_ATTN_SEGMENT positions merged as partial softmaxes, and a decode at depth split across
 * threads by segment); otherwise the portable one (attention.c, on the kernel table's tiles). On
 * either, a query's output is bit-identical whatever else is in the batch and whatever the thread
 * count (attend_item and attention_tiled.c say why), windowed or not. */
#ifndef PITH_CPU_ATTENTION_H
#define PITH_CPU_ATTENTION_H

#include "backend/cpu/cpu.h"
#include "pith/tensor.h"

#define PITH_ATTN_QTILE 16
#define PITH_ATTN_CHUNK 64
#define PITH_ATTN_SEGMENT 256       /* split-K unit of the tiled path, a multiple of the chunk */
#define PITH_ATTN_MAX_PARTIALS 512  /* segment partials one batch may split into (tiled path) */

typedef struct pith_attn_shape {
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale; /* applied to q.k */
} pith_attn_shape;

typedef struct pith_attn_args {
    int n_tokens;
    const int32_t *positions;
    const int32_t *seq;
    const int32_t *block_tables;
    int max_blocks;
    int block_size;
    const void *k_cache; /* this layer's first block: [block][kv_head][slot in block][head_dim] */
    const void *v_cache;
    pith_dtype kv_type;  /* PITH_F32, PITH_F16, PITH_BF16 or PITH_Q8_0 (kv.h) */
    int kv_dim;          /* elements per slot = n_kv_heads * head_dim */
    const float *q;      /* [n_tokens][q_ld]: head h at q + h * head_dim */
    size_t q_ld;
    float *out;          /* [n_tokens][out_ld], same head layout */
    size_t out_ld;
    int window;          /* > 0: sliding window of this many positions (the query's own included); 0: full */
    const int32_t *last; /* NULL, or [n_tokens] the last position each query sees (>= its own, stored:
                            image tokens that see their whole image, batch.h attend_last); NULL: its own */
    const float *sinks;  /* NULL or [n_heads] raw sink logits */
} pith_attn_args;

typedef struct pith_attn_scratch {
    pith_attn_shape shape;
    int n_threads;
    float *per_thread;     /* n_threads * per_thread_floats */
    size_t per_thread_floats;
    int *runs;             /* [2 * cap] token ranges */
    int cap;
    /* tiled path */
    float *tiled;          /* n_threads * tiled_floats, 64-byte aligned */
    size_t tiled_floats;
    float *partials;       /* PITH_ATTN_MAX_PARTIALS segment partials */
    int *units;            /* [2 * units_cap] (item, segment or -1 for the whole item) */
    int *part_of;          /* [units_cap] partial of a segment unit */
    int *split_first;      /* [units_cap] first unit of each split item */
    int n_split;
    int units_cap;
} pith_attn_scratch;

int pith_attn_scratch_init(pith_attn_scratch *s, const pith_attn_shape *shape, int n_threads, pith_err *err);
int pith_attn_scratch_reserve(pith_attn_scratch *s, int n_tokens, pith_err *err);
void pith_attn_scratch_free(pith_attn_scratch *s);

/* The caller has checked the batch: positions >= 0, and every block table entry of a block holding a
 * position some query sees (lo..p) in range. Entries below the window of all of a sequence's queries
 * may be anything, -1 included. */
void pith_attention(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a);

#endif
