#include "backend/cpu/attention.h"

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
    if (!s->per_thread) return pith_errf(err, "out of memory for attention scratch");
    return 0;
}

int pith_attn_scratch_reserve(pith_attn_scratch *s, int n_tokens, pith_err *err) {
    if (n_tokens <= s->cap) return 0;
    int *r = realloc(s->runs, 2 * sizeof(int) * (size_t)n_tokens);
    if (!r) return pith_errf(err, "out of memory for attention scratch");
    s->runs = r;
    s->cap = n_tokens;
    return 0;
}

void pith_attn_scratch_free(pith_attn_scratch *s) {
    free(s->per_thread);
    free(s->runs);
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

static void load_rows(const pith_cpu_kernels *k, const pith_attn_args *a, const void *cache, int seq, int j0,
                      int n, int kv_head, int hd, float *dst) {
    const int32_t *bt = a->block_tables + (size_t)seq * a->max_blocks;
    for (int jj = 0; jj < n; jj++) {
        int j = j0 + jj;
        size_t slot = (size_t)bt[j / a->block_size] * a->block_size + j % a->block_size;
        size_t off = slot * a->kv_dim + (size_t)kv_head * hd;
        if (a->kv_type == PITH_F16) k->f16_to_f32((const uint16_t *)cache + off, dst + (size_t)jj * hd, hd);
        else memcpy(dst + (size_t)jj * hd, (const float *)cache + off, hd * sizeof(float));
    }
}

static void attend_item(const attn_job *j, int item, float *scratch) {
    const pith_attn_args *a = j->a;
    const pith_attn_shape *sh = &j->s->shape;
    const pith_cpu_kernels *k = j->c->k;
    const int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads;
    const int run = item / sh->n_kv_heads, kvh = item % sh->n_kv_heads;
    const int t0 = j->s->runs[2 * run], t1 = j->s->runs[2 * run + 1];
    const int seq = a->seq[t0], nq = (t1 - t0) * group;

    float *kc = scratch, *vc = kc + (size_t)PITH_ATTN_CHUNK * hd;
    float *scores = vc + (size_t)PITH_ATTN_CHUNK * hd;
    float *mx = scores + (size_t)nq * PITH_ATTN_CHUNK, *sum = mx + nq, *acc = sum + nq;
    int maxpos = 0;
    for (int t = t0; t < t1; t++) maxpos = a->positions[t] > maxpos ? a->positions[t] : maxpos;
    for (int i = 0; i < nq; i++) mx[i] = -INFINITY, sum[i] = 0.0f;
    memset(acc, 0, (size_t)nq * hd * sizeof(float));

    for (int j0 = 0; j0 <= maxpos; j0 += PITH_ATTN_CHUNK) {
        int jn = maxpos + 1 - j0 < PITH_ATTN_CHUNK ? maxpos + 1 - j0 : PITH_ATTN_CHUNK;
        load_rows(k, a, a->k_cache, seq, j0, jn, kvh, hd, kc);
        load_rows(k, a, a->v_cache, seq, j0, jn, kvh, hd, vc);
        for (int i = 0; i < nq; i++) {
            int t = t0 + i / group, h = kvh * group + i % group;
            int lim = a->positions[t] - j0 + 1;
            if (lim <= 0) continue;
            if (lim > jn) lim = jn;
            const float *q = a->q + (size_t)t * a->q_ld + (size_t)h * hd;
            float *s = scores + (size_t)i * PITH_ATTN_CHUNK;
            float m = mx[i];
            for (int jj = 0; jj < lim; jj++) {
                s[jj] = k->dot(q, kc + (size_t)jj * hd, hd) * sh->scale;
                m = s[jj] > m ? s[jj] : m;
            }
            float *ac = acc + (size_t)i * hd;
            if (m > mx[i] && mx[i] != -INFINITY) {
                float corr = mx[i];
                k->exp_shifted(&corr, m, 1); /* exp(old max - new max) */
                sum[i] *= corr;
                k->scale(ac, corr, hd);
            }
            mx[i] = m;
            sum[i] += k->exp_shifted(s, m, lim);
            for (int jj = 0; jj < lim; jj++) k->axpy(ac, s[jj], vc + (size_t)jj * hd, hd);
        }
    }
    for (int i = 0; i < nq; i++) {
        int t = t0 + i / group, h = kvh * group + i % group;
        float *o = a->out + (size_t)t * a->out_ld + (size_t)h * hd;
        float inv = 1.0f / sum[i];
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)i * hd + d] * inv;
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
    for (int t = 0; t < a->n_tokens; t++) work += (double)(a->positions[t] + 1) * s->shape.n_heads * s->shape.head_dim;
    for (int t = 0; t < a->n_tokens;) {
        int e = t + 1;
        while (e < a->n_tokens && e - t < PITH_ATTN_QTILE && a->seq[e] == a->seq[t]) e++;
        s->runs[2 * n_runs] = t;
        s->runs[2 * n_runs + 1] = e;
        n_runs++;
        t = e;
    }
    attn_job j = {.c = c, .s = s, .a = a, .n_runs = n_runs, .n_items = n_runs * s->shape.n_kv_heads};
    atomic_init(&j.next, 0);
    pith_pool_run_sized(c->pool, attn_worker, &j, 2 * work);
}
