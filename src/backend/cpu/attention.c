#include "backend/cpu/attention.h"

#include "backend/cpu/attention_internal.h"
#include "backend/cpu/kv_rows.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

int pith_attn_scratch_init(pith_attn_scratch *s, const pith_attn_shape *shape, int n_threads, pith_err *err) {
    memset(s, 0, sizeof *s);
    s->shape = *shape;
    s->n_threads = n_threads;
    size_t hd = (size_t)shape->head_dim;
    size_t nq = (size_t)PITH_ATTN_QTILE * (size_t)(shape->n_heads / shape->n_kv_heads);
    /* K and V chunks, then per query: scores, running max, running sum, accumulator */
    s->per_thread_floats = 2 * PITH_ATTN_CHUNK * hd + nq * (PITH_ATTN_CHUNK + 2 + hd);
    s->per_thread = malloc(s->per_thread_floats * sizeof(float) * (size_t)n_threads);
    s->tiled_floats = attn_tiled_thread_floats(shape);
    size_t tb = (s->tiled_floats * sizeof(float) * (size_t)n_threads + 63) / 64 * 64;
    size_t pb = (attn_tiled_partial_floats(shape) * sizeof(float) * PITH_ATTN_MAX_PARTIALS + 63) / 64 * 64;
    s->tiled = aligned_alloc(64, tb);
    s->partials = aligned_alloc(64, pb);
    if (!s->per_thread || !s->tiled || !s->partials) {
        pith_attn_scratch_free(s);
        return pith_errf(err, "out of memory for attention scratch");
    }
    return 0;
}

int pith_attn_scratch_reserve(pith_attn_scratch *s, int n_tokens, pith_err *err) {
    if (n_tokens <= s->cap) return 0;
    int *r = realloc(s->runs, 2 * sizeof(int) * (size_t)n_tokens);
    if (!r) return pith_errf(err, "out of memory for attention scratch");
    s->runs = r;
    s->cap = n_tokens;
    /* units: every item, plus a segment unit per partial */
    int units = n_tokens * s->shape.n_kv_heads + PITH_ATTN_MAX_PARTIALS;
    int *u = realloc(s->units, 2 * sizeof(int) * (size_t)units);
    if (u) s->units = u;
    int *po = u ? realloc(s->part_of, sizeof(int) * (size_t)units) : NULL;
    if (po) s->part_of = po;
    int *sf = po ? realloc(s->split_first, sizeof(int) * (size_t)units) : NULL;
    if (!sf) return pith_errf(err, "out of memory for attention scratch");
    s->split_first = sf;
    s->units_cap = units;
    return 0;
}

void pith_attn_scratch_free(pith_attn_scratch *s) {
    free(s->per_thread);
    free(s->runs);
    free(s->tiled);
    free(s->partials);
    free(s->units);
    free(s->part_of);
    free(s->split_first);
    memset(s, 0, sizeof *s);
}

typedef struct attn_job {
    pith_cpu *c;
    const pith_attn_scratch *s;
    const pith_attn_args *a;
    int n_runs;
    int n_items;
    _Atomic int next;
} attn_job;

void attn_load_rows(const pith_cpu_kernels *k, const pith_attn_args *a, const void *cache, int seq, int j0, int n,
                    int kv_head, int hd, float *dst) {
    const int32_t *bt = a->block_tables + (size_t)seq * a->max_blocks;
    const size_t bs = (size_t)a->block_size;
    for (int jj = 0; jj < n;) {
        int j = j0 + jj, in_block = j % a->block_size;
        int rows = a->block_size - in_block < n - jj ? a->block_size - in_block : n - jj;
        size_t off = (size_t)bt[j / a->block_size] * bs * a->kv_dim + ((size_t)kv_head * bs + in_block) * hd;
        size_t count = (size_t)rows * hd;
        pith_kv_load_f32(k, a->kv_type, cache, off, dst + (size_t)jj * hd, count);
        jj += rows;
    }
}

/* y[t * ldy + r] (+)= W[r] . x[t] for rows x tokens, with the float matmul tiles. */
static void small_matmul(const pith_cpu_kernels *k, const float *w, int w_ld, int rows, int K, const float *x,
                         int x_ld, int n, float *y, int ldy, bool accumulate) {
    const int rn = k->tile_rn[PITH_W_F32];
    for (int r = 0; r < rows; r += PITH_TILE_MAX_RM) {
        int rm = rows - r < PITH_TILE_MAX_RM ? rows - r : PITH_TILE_MAX_RM;
        for (int t = 0; t < n; t += rn)
            k->tile[PITH_W_F32](K, (const uint8_t *)(w + (size_t)r * w_ld), (size_t)w_ld * sizeof(float), rm,
                                x + (size_t)t * x_ld, (size_t)x_ld * sizeof(float), n - t < rn ? n - t : rn,
                                y + (size_t)t * ldy + r, (size_t)ldy, accumulate);
    }
}

/* One run of tokens against one KV head. Per chunk of positions: scores = Q K^T for every query of the
 * run and head of the group (one small matmul per token), online-softmax bookkeeping per query, then
 * acc += P V for all of them at once. Positions outside a query's [lo, p] get probability 0, so every
 * query can use the whole chunk.
 *
 * The run starts at the chunk holding the lowest window start of its queries; rows of that chunk below
 * it are never read from the cache (their blocks may be released, -1) but zeroed, so the matmul and
 * P V see finite values there and multiply them by probability 0.
 *
 * A query's result must not depend on what else is in the batch (decode and prefill agree to the last
 * bit): the chunks start at multiples of PITH_ATTN_CHUNK whatever the batch, each score is a dot product
 * of fixed length, and P V sums over positions in order, so a longer chunk only appends exact zeros and
 * an earlier start only prepends chunks that are fully masked for this query. A fully masked chunk
 * leaves the running max and sum alone, and adds exact zeros to the accumulator: every nonzero bit stays
 * as it was. Only a zero's sign can move: a product that underflows makes an element -0, and a later
 * 0 * v with v > 0 makes it +0 again, so a batch that reads more masked rows can turn -0 into +0. The
 * output adds +0 to every element (-0 + 0 = +0, x + 0 = x otherwise), so both give +0. */
static void attend_item(const attn_job *j, int item, float *scratch) {
    const pith_attn_args *a = j->a;
    const pith_attn_shape *sh = &j->s->shape;
    const pith_cpu_kernels *k = j->c->k;
    const int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads, C = PITH_ATTN_CHUNK;
    const int run = item / sh->n_kv_heads, kvh = item % sh->n_kv_heads;
    const int t0 = j->s->runs[2 * run], t1 = j->s->runs[2 * run + 1];
    const int seq = a->seq[t0], nq = (t1 - t0) * group;

    float *kc = scratch, *vc = kc + (size_t)C * hd;
    float *scores = vc + (size_t)C * hd;
    float *mx = scores + (size_t)nq * C, *sum = mx + nq, *acc = sum + nq;
    int maxpos = 0, minlo = a->positions[t0];
    for (int t = t0; t < t1; t++) {
        int lo = attn_lo(a, a->positions[t]), hi = attn_hi(a, t);
        maxpos = hi > maxpos ? hi : maxpos;
        minlo = lo < minlo ? lo : minlo;
    }
    /* The sink is one more logit without a value: starting the running max at it and the sum at
     * exp(sink - sink) = 1 keeps every exponent <= 0, so no sink however large can overflow. A NaN or
     * -inf sink counts as none. */
    for (int i = 0; i < nq; i++) {
        float sink = a->sinks ? a->sinks[kvh * group + i % group] : -INFINITY;
        bool has = sink > -INFINITY; /* also false for NaN */
        mx[i] = has ? sink : -INFINITY;
        sum[i] = has ? 1.0f : 0.0f;
    }
    memset(acc, 0, (size_t)nq * hd * sizeof(float));

    for (int j0 = minlo / C * C; j0 <= maxpos; j0 += C) {
        int jn = maxpos + 1 - j0 < C ? maxpos + 1 - j0 : C;
        int r0 = minlo > j0 ? minlo - j0 : 0; /* first row any query of the run sees */
        if (r0) {
            memset(kc, 0, (size_t)r0 * hd * sizeof(float));
            memset(vc, 0, (size_t)r0 * hd * sizeof(float));
        }
        attn_load_rows(k, a, a->k_cache, seq, j0 + r0, jn - r0, kvh, hd, kc + (size_t)r0 * hd);
        attn_load_rows(k, a, a->v_cache, seq, j0 + r0, jn - r0, kvh, hd, vc + (size_t)r0 * hd);
        for (int t = t0; t < t1; t++) {
            const float *q = a->q + (size_t)t * a->q_ld + (size_t)kvh * group * hd;
            small_matmul(k, kc, hd, jn, hd, q, hd, group, scores + (size_t)(t - t0) * group * C, C, false);
        }
        for (int i = 0; i < nq; i++) {
            int t = t0 + i / group;
            int first = attn_lo(a, a->positions[t]) - j0, lim = attn_hi(a, t) - j0 + 1;
            first = first < 0 ? 0 : first > jn ? jn : first;
            lim = lim < first ? first : lim > jn ? jn : lim;
            float *s = scores + (size_t)i * C;
            memset(s, 0, (size_t)first * sizeof(float));
            memset(s + lim, 0, (size_t)(jn - lim) * sizeof(float));
            if (lim == first) continue; /* fully masked: max, sum and (below) accumulator unchanged */
            float *sv = s + first;
            const int nv = lim - first;
            k->scale(sv, sh->scale, nv);
            float m = mx[i];
            for (int jj = 0; jj < nv; jj++) m = sv[jj] > m ? sv[jj] : m;
            if (m > mx[i] && mx[i] != -INFINITY) {
                float corr = mx[i];
                k->exp_shifted(&corr, m, 1); /* exp(old max - new max) */
                sum[i] *= corr;
                k->scale(acc + (size_t)i * hd, corr, hd);
            }
            mx[i] = m;
            sum[i] += k->exp_shifted(sv, m, nv);
        }
        k->pv_accumulate(acc, hd, scores, C, nq, vc, hd, jn, hd);
    }
    for (int i = 0; i < nq; i++) {
        int t = t0 + i / group, h = kvh * group + i % group;
        float *o = a->out + (size_t)t * a->out_ld + (size_t)h * hd;
        float inv = 1.0f / sum[i];
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)i * hd + d] * inv + 0.0f;
    }
}

static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_job *j = arg;
    float *scratch = j->s->per_thread + (size_t)ith * j->s->per_thread_floats;
    for (;;) {
        int item = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (item >= j->n_items) break;
        /* later runs of a prefill attend to more positions: start with them so the short ones fill gaps */
        attend_item(j, j->n_items - 1 - item, scratch);
    }
}

void pith_attention(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a) {
    int n_runs = 0;
    double work = 0;
    for (int t = 0; t < a->n_tokens; t++) {
        work += (double)(attn_hi(a, t) - attn_lo(a, a->positions[t]) + 1) * s->shape.n_heads * s->shape.head_dim;
    }
    for (int t = 0; t < a->n_tokens;) {
        int e = t + 1;
        while (e < a->n_tokens && e - t < PITH_ATTN_QTILE && a->seq[e] == a->seq[t]) e++;
        s->runs[2 * n_runs] = t;
        s->runs[2 * n_runs + 1] = e;
        n_runs++;
        t = e;
    }
    if (attn_tiled_available(c)) {
        attn_tiled_run(c, s, a, n_runs, work);
        return;
    }
    attn_job j = {.c = c, .s = s, .a = a, .n_runs = n_runs, .n_items = n_runs * s->shape.n_kv_heads};
    atomic_init(&j.next, 0);
    pith_pool_run_sized(c->pool, attn_worker, &j, 2 * work);
}
