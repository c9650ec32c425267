/* Paged attention (src/backend/cpu/attention.c) against a float64 reference computed directly from the
 * same cache contents: full and sliding-window causal attention, with and without sinks.
 *
 * Each case builds one batch of several sequences (a prefill from 0 in several runs, a decode far out,
 * a chunked prefill straddling a chunk boundary, and one split into two runs by another sequence's
 * token) over a cache whose block ids are shuffled. Every cache row a query of the batch may not see
 * below its sequence's lowest window start is filled with NaN, the rows past each sequence's end too,
 * and the block table entries of blocks wholly below that start are -1, pointing into a NaN guard
 * block just before the cache: reading any of them, even to multiply by probability 0, turns the output
 * into NaN and fails the comparison (ASan builds see the same reads as NaN, not as overflows).
 *
 * Tolerance, per output element, with u = 2^-24, N = positions the query sees (lo..p), nch = chunks
 * they span, nseg = segments of PITH_ATTN_SEGMENT they span (the tiled path merges one partial softmax
 * per segment: two more exps and a multiply-add each, counted like a chunk's rescale), S = max |score|
 * (or |sink|), and the score error
 *   delta = max_j [(hd + 8) u scale sum_d |q_d k_jd| + u |s_j|]
 * (a float dot product of hd terms in any order, plus the scale's rounding): each weight exp(s_j - m)
 * is off by at most delta + 4 u S (rounding of s - m and of the running-max differences) + 8 u per exp
 * and per rescale (the exp kernels' accuracy, test_kernels), the float sums over N positive terms by
 * (N + nch) u, the final 1/sum and product by 2u; a relative weight error e moves a convex combination
 * by at most 2e sum_j p_j |v_jd|. Together:
 *   |out - ref| <= 2 * [2 delta + (2N + 20 nch + 20 nseg + 8S + 40) u] * sum_j p_j |v_jd| + 1e-30,
 * twice the first-order bound for the second-order terms; the 1e-30 covers the exp kernels clamping
 * their argument at -87 (weights of 1.6e-38 instead of ~0 under a huge sink). The cache (F32, F16,
 * BF16 or Q8_0) is read by both sides through the same exact conversion to float, so its type adds no
 * error here: what rounding to it costs is measured on whole models (docs/performance.md). A wrong mask by one
 * position moves an output by about 1/N relative, far above this bound (about 1e-4 at N = 400). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/kv_rows.h"
#include "check.h"
#include "pith/tensor.h"

#define U 5.9604645e-08 /* 2^-24 */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rnd_f(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() >> 8) * (1.0f / 16777216.0f); }

typedef struct attn_case {
    int n_heads, n_kv_heads, hd;
    pith_dtype kv_type;
    int block_size;
    int window;
    int sink_mode; /* 0: none, 1: random in [-3, 3], 2: one huge (1e4), one large (40), one -1e4 */
} attn_case;

typedef struct seq_part {
    int seq, start, n;
} seq_part;

typedef struct world {
    attn_case c;
    int n_seqs, n_tokens, max_blocks, n_blocks, kv_dim;
    int end[4];   /* positions 0..end-1 of each sequence are in the cache */
    int minlo[4]; /* lowest window start of the sequence's queries in the batch */
    int32_t *positions, *seq, *bt;
    void *kbuf, *vbuf;            /* guard block + n_blocks blocks, in the KV type */
    const void *k_cache, *v_cache; /* first real block */
    float *kref, *vref;           /* the same, as float (the type's exact dequantization) */
    float *q, *out, *out1, *sinks;
    size_t q_ld, out_ld;
    int released; /* block table entries set to -1 */
} world;

static int lo_of(int window, int p) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

static const char *type_name(pith_dtype t) {
    return t == PITH_F16 ? "f16" : t == PITH_BF16 ? "bf16" : t == PITH_Q8_0 ? "q8_0" : "f32";
}

/* Element d of kv head h at position j of sequence s, as an index into the block-0-based cache. */
static size_t kv_index(const world *w, int s, int j, int h, int d) {
    int b = w->bt[s * w->max_blocks + j / w->c.block_size];
    size_t bs = (size_t)w->c.block_size;
    return (size_t)b * bs * w->kv_dim + ((size_t)h * bs + (size_t)(j % w->c.block_size)) * w->c.hd + d;
}

static void build(world *w, const attn_case *c, int maxlen) {
    memset(w, 0, sizeof *w);
    w->c = *c;
    w->n_seqs = 4;
    w->kv_dim = c->n_kv_heads * c->hd;
    int s2 = 120 + (int)(rnd_u32() % 9), s3 = maxlen - 40 + (int)(rnd_u32() % 6);
    /* batch order: seq 2, seq 0, first part of seq 3, seq 1 (decode), rest of seq 3 */
    const seq_part parts[] = {{2, s2, 20}, {0, 0, 37}, {3, s3, 10}, {1, maxlen - 1, 1}, {3, s3 + 10, 8}};
    const int n_parts = (int)(sizeof parts / sizeof parts[0]);
    for (int i = 0; i < 4; i++) w->minlo[i] = -1;
    for (int i = 0; i < n_parts; i++) {
        const seq_part *p = &parts[i];
        if (w->minlo[p->seq] < 0) w->minlo[p->seq] = lo_of(c->window, p->start);
        if (p->start + p->n > w->end[p->seq]) w->end[p->seq] = p->start + p->n;
        w->n_tokens += p->n;
    }
    w->positions = malloc(sizeof(int32_t) * w->n_tokens);
    w->seq = malloc(sizeof(int32_t) * w->n_tokens);
    for (int i = 0, t = 0; i < n_parts; i++)
        for (int k = 0; k < parts[i].n; k++, t++) w->positions[t] = parts[i].start + k, w->seq[t] = parts[i].seq;

    /* block tables: every sequence's blocks drawn from one shuffled pool, plus a few unused blocks */
    const int bs = c->block_size;
    for (int s = 0; s < 4; s++) {
        int nb = (w->end[s] + bs - 1) / bs;
        w->n_blocks += nb;
        if (nb + 1 > w->max_blocks) w->max_blocks = nb + 1;
    }
    w->n_blocks += 3;
    int *ids = malloc(sizeof(int) * w->n_blocks);
    for (int i = 0; i < w->n_blocks; i++) ids[i] = i;
    for (int i = w->n_blocks - 1; i > 0; i--) {
        int r = (int)(rnd_u32() % (uint32_t)(i + 1)), tmp = ids[i];
        ids[i] = ids[r], ids[r] = tmp;
    }
    w->bt = malloc(sizeof(int32_t) * 4 * w->max_blocks);
    for (int i = 0, next = 0; i < 4 * w->max_blocks; i++) {
        int s = i / w->max_blocks, b = i % w->max_blocks;
        w->bt[i] = b < (w->end[s] + bs - 1) / bs ? ids[next++] : -1;
    }
    free(ids);

    /* values as float first (NaN rows are whole head rows, so whole Q8_0 blocks), then stored in the KV
     * type, then read back: the reference sees exactly what attention reads */
    size_t block_elems = (size_t)bs * w->kv_dim;
    size_t total = (size_t)(w->n_blocks + 1) * block_elems;
    w->kref = malloc(total * sizeof(float));
    w->vref = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) {
        /* guard block: NaN */
        bool guard = i < block_elems;
        w->kref[i] = guard ? NAN : rnd_f(-1, 1);
        w->vref[i] = guard ? NAN : rnd_f(-1, 1);
    }
    float *kc = w->kref + block_elems, *vc = w->vref + block_elems;
    for (int s = 0; s < 4; s++) {
        int nb = (w->end[s] + bs - 1) / bs;
        /* rows no query may read: below the sequence's lowest window start, and past its end */
        for (int j = 0; j < nb * bs; j++) {
            if (j >= w->minlo[s] && j < w->end[s]) continue;
            for (int h = 0; h < c->n_kv_heads; h++)
                for (int d = 0; d < c->hd; d++) {
                    kc[kv_index(w, s, j, h, d)] = NAN;
                    vc[kv_index(w, s, j, h, d)] = NAN;
                }
        }
        for (int b = 0; (b + 1) * bs <= w->minlo[s]; b++) w->bt[s * w->max_blocks + b] = -1, w->released++;
    }
    const pith_cpu_kernels *sk = pith_cpu_kernels_scalar();
    size_t bytes = pith_kv_bytes(c->kv_type, total);
    w->kbuf = malloc(bytes);
    w->vbuf = malloc(bytes);
    pith_kv_store_f32(sk, c->kv_type, w->kref, w->kbuf, 0, total);
    pith_kv_store_f32(sk, c->kv_type, w->vref, w->vbuf, 0, total);
    pith_kv_load_f32(sk, c->kv_type, w->kbuf, 0, w->kref, total);
    pith_kv_load_f32(sk, c->kv_type, w->vbuf, 0, w->vref, total);
    w->k_cache = (const uint8_t *)w->kbuf + pith_kv_bytes(c->kv_type, block_elems);
    w->v_cache = (const uint8_t *)w->vbuf + pith_kv_bytes(c->kv_type, block_elems);
    kc = w->kref + block_elems;
    vc = w->vref + block_elems;
    w->kref = kc; /* block-0-based, like k_cache (destroy frees from the guard) */
    w->vref = vc;

    int qd = c->n_heads * c->hd;
    w->q_ld = (size_t)qd + 5;
    w->out_ld = (size_t)qd + 3;
    w->q = malloc(sizeof(float) * w->q_ld * w->n_tokens);
    w->out = malloc(sizeof(float) * w->out_ld * w->n_tokens);
    w->out1 = malloc(sizeof(float) * w->out_ld);
    /* large enough queries that the softmax is far from flat (scores of a few units) */
    for (size_t i = 0; i < w->q_ld * w->n_tokens; i++) w->q[i] = rnd_f(-6, 6);
    for (size_t i = 0; i < w->out_ld * w->n_tokens; i++) w->out[i] = 12345.0f;
    if (c->sink_mode) {
        w->sinks = malloc(sizeof(float) * c->n_heads);
        for (int h = 0; h < c->n_heads; h++) w->sinks[h] = rnd_f(-3, 3);
        if (c->sink_mode == 2) {
            w->sinks[0] = 1e4f;
            w->sinks[1 % c->n_heads] = 40.0f;
            w->sinks[c->n_heads - 1] = -1e4f;
        }
    }
}

static void destroy(world *w) {
    free(w->positions);
    free(w->seq);
    free(w->bt);
    free(w->kbuf);
    free(w->vbuf);
    size_t guard = (size_t)w->c.block_size * w->kv_dim;
    free(w->kref - guard);
    free(w->vref - guard);
    free(w->q);
    free(w->out);
    free(w->out1);
    free(w->sinks);
}

static pith_attn_args args_of(const world *w, int window) {
    return (pith_attn_args){
        .n_tokens = w->n_tokens, .positions = w->positions, .seq = w->seq, .block_tables = w->bt,
        .max_blocks = w->max_blocks, .block_size = w->c.block_size, .k_cache = w->k_cache,
        .v_cache = w->v_cache, .kv_type = w->c.kv_type, .kv_dim = w->kv_dim, .q = w->q, .q_ld = w->q_ld,
        .out = w->out, .out_ld = w->out_ld, .window = window, .sinks = w->sinks,
    };
}

/* Worst |out - ref| / bound over the batch (> 1 fails); counts non-finite outputs in *bad. */
static double compare_reference(const world *w, float scale, int *bad) {
    const attn_case *c = &w->c;
    const int group = c->n_heads / c->n_kv_heads, C = PITH_ATTN_CHUNK;
    int maxn = 0;
    for (int s = 0; s < 4; s++) maxn = w->end[s] > maxn ? w->end[s] : maxn;
    double *sc = malloc(sizeof(double) * maxn), *wt = malloc(sizeof(double) * maxn);
    double worst = 0;
    for (int t = 0; t < w->n_tokens; t++) {
        int s = w->seq[t], p = w->positions[t], lo = lo_of(c->window, p), N = p - lo + 1;
        int nch = p / C - lo / C + 1, nseg = p / PITH_ATTN_SEGMENT - lo / PITH_ATTN_SEGMENT + 1;
        for (int h = 0; h < c->n_heads; h++) {
            const float *q = w->q + (size_t)t * w->q_ld + (size_t)h * c->hd;
            int kvh = h / group;
            double m = -INFINITY, S = 0, delta = 0;
            for (int j = lo; j <= p; j++) {
                double dot = 0, mag = 0;
                for (int d = 0; d < c->hd; d++) {
                    double kv = w->kref[kv_index(w, s, j, kvh, d)];
                    dot += q[d] * kv;
                    mag += fabs(q[d] * kv);
                }
                sc[j - lo] = dot * scale;
                m = fmax(m, sc[j - lo]);
                S = fmax(S, fabs(sc[j - lo]));
                delta = fmax(delta, (c->hd + 8) * U * scale * mag + U * fabs(sc[j - lo]));
            }
            double sink = w->sinks ? w->sinks[h] : -INFINITY;
            if (w->sinks) {
                m = fmax(m, sink);
                S = fmax(S, fabs(sink));
            }
            double den = w->sinks ? exp(sink - m) : 0;
            for (int j = 0; j < N; j++) den += wt[j] = exp(sc[j] - m);
            double rel = 2 * (2 * delta + (2.0 * N + 20.0 * nch + 20.0 * nseg + 8 * S + 40) * U);
            const float *o = w->out + (size_t)t * w->out_ld + (size_t)h * c->hd;
            for (int d = 0; d < c->hd; d++) {
                double ref = 0, mass = 0;
                for (int j = lo; j <= p; j++) {
                    double v = w->vref[kv_index(w, s, j, kvh, d)];
                    ref += wt[j - lo] * v;
                    mass += wt[j - lo] * fabs(v);
                }
                ref /= den;
                mass /= den;
                if (!isfinite(o[d])) {
                    (*bad)++;
                    continue;
                }
                worst = fmax(worst, fabs(o[d] - ref) / (rel * mass + 1e-30));
            }
        }
    }
    free(sc);
    free(wt);
    return worst;
}

static bool attn_split_expected(const pith_cpu *one, const attn_case *c, int maxlen) {
    bool tiled = !strcmp(one->k->name, "avx512-vnni");
    int lo = lo_of(c->window, maxlen - 1);
    return tiled && one->n_threads == 1 && c->n_kv_heads < 4 && c->n_heads / c->n_kv_heads <= 16 &&
           (maxlen - 1) / PITH_ATTN_SEGMENT > lo / PITH_ATTN_CHUNK * PITH_ATTN_CHUNK / PITH_ATTN_SEGMENT;
}

static int run_case(pith_cpu *cpu_batch, pith_cpu *cpu_one, const attn_case *c, int maxlen, double *worst_all) {
    world w;
    build(&w, c, maxlen);
    pith_err err;
    pith_attn_shape shape = {c->n_heads, c->n_kv_heads, c->hd, (float)(1.0 / sqrt(c->hd))};
    pith_attn_scratch sb, s1;
    if (pith_attn_scratch_init(&sb, &shape, cpu_batch->n_threads, &err) || pith_attn_scratch_reserve(&sb, w.n_tokens, &err) ||
        pith_attn_scratch_init(&s1, &shape, cpu_one->n_threads, &err) || pith_attn_scratch_reserve(&s1, 1, &err)) {
        CHECKF(0, "%s", err.msg);
        destroy(&w);
        return 1;
    }
    char what[160];
    snprintf(what, sizeof what, "%s: heads %d/%d hd %d %s bs %d window %d sinks %d", cpu_batch->k->name,
             c->n_heads, c->n_kv_heads, c->hd, type_name(c->kv_type), c->block_size, c->window,
             c->sink_mode);
    pith_attn_args a = args_of(&w, c->window);
    pith_attention(cpu_batch, &sb, &a);

    int bad = 0;
    double worst = compare_reference(&w, shape.scale, &bad);
    CHECKF(bad == 0 && worst <= 1.0, "%s: %d non-finite outputs, worst error %.3g of the bound", what, bad, worst);
    if (worst > *worst_all) *worst_all = worst;
    int gaps = 0, qd = c->n_heads * c->hd;
    for (int t = 0; t < w.n_tokens; t++)
        for (size_t i = (size_t)qd; i < w.out_ld; i++) gaps += w.out[(size_t)t * w.out_ld + i] != 12345.0f;
    CHECKF(gaps == 0, "%s: wrote %d elements between output rows", what, gaps);
    /* the harness itself must exercise the -1 rule whenever the window is short against the sequences */
    if (c->window > 0 && c->window + 2 * c->block_size < maxlen - 40)
        CHECKF(w.released > 0, "%s: no block table entry released", what);

    /* every token alone, as a one-token decode batch of its own sequence, on another thread count:
     * bit-identical to its row of the batch */
    int differ = 0, far_split = -1;
    for (int t = 0; t < w.n_tokens; t++) {
        int32_t zero = 0;
        pith_attn_args d = a;
        d.n_tokens = 1;
        d.positions = &w.positions[t];
        d.seq = &zero;
        d.block_tables = w.bt + (size_t)w.seq[t] * w.max_blocks;
        d.q = w.q + (size_t)t * w.q_ld;
        d.out = w.out1;
        pith_attention(cpu_one, &s1, &d);
        differ += memcmp(w.out1, w.out + (size_t)t * w.out_ld, sizeof(float) * qd) != 0;
        if (w.seq[t] == 1) far_split = s1.n_split;
    }
    CHECKF(differ == 0, "%s: %d tokens differ between the batch and a decode of their own", what, differ);
    /* The last decode alone (position maxlen - 1, one item per KV head on one thread) is split into
     * segments on the tiled path whenever it spans several: the comparison above then checked the
     * split-K merge against the unsplit batch, to the bit. */
    if (attn_split_expected(cpu_one, c, maxlen))
        CHECKF(far_split == c->n_kv_heads, "%s: the long decode was split for %d of %d KV heads", what, far_split,
               c->n_kv_heads);

    /* a window no query outgrows is full attention, to the bit */
    if (c->window > maxlen) {
        float *keep = malloc(sizeof(float) * w.out_ld * w.n_tokens);
        memcpy(keep, w.out, sizeof(float) * w.out_ld * w.n_tokens);
        pith_attn_args f = args_of(&w, 0);
        pith_attention(cpu_batch, &sb, &f);
        CHECKF(!memcmp(keep, w.out, sizeof(float) * w.out_ld * w.n_tokens), "%s: differs from window 0", what);
        free(keep);
    }
    pith_attn_scratch_free(&sb);
    pith_attn_scratch_free(&s1);
    destroy(&w);
    return 0;
}

/* Sinks alone, on a tiny case worked by hand: window 1 leaves one score s, so the output is
 * v * exp(s) / (exp(sink) + exp(s)) = v / (1 + exp(sink - s)). */
static void test_sink_by_hand(pith_cpu *cpu) {
    enum { HD = 8 };
    float k[2 * HD], v[2 * HD], q[HD], out[HD];
    for (int i = 0; i < 2 * HD; i++) k[i] = 0.25f, v[i] = (float)(i % HD) - 3.0f;
    for (int i = 0; i < HD; i++) q[i] = 1.0f; /* s = 8 * 0.25 * scale(0.5) = 1 */
    int32_t pos = 1, seq = 0, bt = 0;
    const float sinks[3] = {0.0f, 1e30f, -1e30f};
    const double expect_scale[3] = {1.0 / (1.0 + exp(-1.0)), 0.0, 1.0};
    pith_attn_shape shape = {1, 1, HD, 0.5f};
    pith_attn_scratch s;
    pith_err err;
    if (pith_attn_scratch_init(&s, &shape, cpu->n_threads, &err) || pith_attn_scratch_reserve(&s, 1, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    for (int i = 0; i < 3; i++) {
        pith_attn_args a = {.n_tokens = 1, .positions = &pos, .seq = &seq, .block_tables = &bt, .max_blocks = 1,
                            .block_size = 2, .k_cache = k, .v_cache = v, .kv_type = PITH_F32, .kv_dim = HD,
                            .q = q, .q_ld = HD, .out = out, .out_ld = HD, .window = 1, .sinks = &sinks[i]};
        pith_attention(cpu, &s, &a);
        int bad = 0;
        /* a handful of roundings in the exp and the division: 16u relative, plus the clamped exp's
         * 1.6e-38 floor for the huge sink */
        for (int d = 0; d < HD; d++) {
            double ref = ((double)d - 3.0) * expect_scale[i];
            bad += !(fabs(out[d] - ref) <= 16 * U * fabs(ref) + 1e-30);
        }
        CHECKF(bad == 0, "%s: sink %g by hand: %d wrong", cpu->k->name, sinks[i], bad);
    }
    pith_attn_scratch_free(&s);
}

int main(void) {
    static const int heads[4][3] = {{4, 4, 64}, {8, 2, 40}, {6, 3, 64}, {2, 1, 40}};
    static const int windows[] = {0, 1, 5, 64, 100, 1000};
    static const int lens[] = {260, 200, 200, 232, 340, 400}; /* >= 3 windows + the runs' 40 */
    static const int block_sizes[] = {16, 48, 128};
    const pith_dtype types[4] = {PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0};
    /* Long contexts: several thousand positions, many chunks and segments, TinyLlama's GQA ratio (8),
     * an odd one (3, head dim 96) and one query head per KV head, each KV type, windows and sinks. */
    static const attn_case longs[] = {
        {16, 2, 64, PITH_F16, 16, 0, 0},      {6, 2, 96, PITH_Q8_0, 16, 1000, 1},
        {8, 1, 64, PITH_BF16, 48, 0, 2},      {3, 3, 40, PITH_F32, 16, 700, 1},
    };
    static const int long_lens[] = {3000, 3100, 2600, 2500}; /* >= 3 windows + 40 */
    /* pass 0: scalar; 1: the AVX2 table (the portable path over an AVX2 cache loader), where the
     * processor has it; 2: the best table */
    for (int pass = 0; pass < 3; pass++) {
        const bool scalar = pass == 0;
        pith_cpu cpu2, cpu1;
        pith_err err;
        if (pass == 1 && !pith_cpu_kernels_avx2()) continue;
        if (pith_cpu_init(&cpu2, 2, scalar, &err) || pith_cpu_init(&cpu1, 1, scalar, &err)) {
            CHECKF(0, "%s", err.msg);
            return check_summary("test_attention");
        }
        if (pass == 1) cpu2.k = cpu1.k = pith_cpu_kernels_avx2();
        if (pass == 2 && cpu2.k == pith_cpu_kernels_scalar())
            printf("note: no AVX2/FMA/F16C on this machine; the scalar kernels were tested twice\n");
        test_sink_by_hand(&cpu1);
        double worst = 0;
        int n = 0, ran = 0;
        for (int wi = 0; wi < 6; wi++)
            for (int bi = 0; bi < 3; bi++)
                for (int ti = 0; ti < 4; ti++, n++) {
                    /* the AVX2 pass: every KV type, but half the shapes (the portable path is the scalar
                     * pass's code over other tiles; what is its own is the tiles and the cache loaders) */
                    if (pass == 1 && (wi + bi) % 2) continue;
                    const int *hh = heads[(n + n / 12) % 4];
                    int hd = types[ti] == PITH_Q8_0 && hh[2] % 32 ? 32 : hh[2]; /* Q8_0: whole blocks */
                    attn_case c = {hh[0], hh[1], hd, types[ti], block_sizes[bi], windows[wi], (n + n / 24) % 3};
                    run_case(&cpu2, &cpu1, &c, lens[wi], &worst);
                    ran++;
                }
        for (int i = 0; i < (int)(sizeof longs / sizeof longs[0]); i++, n++)
            if (pass != 1 || longs[i].kv_type == PITH_Q8_0) {
                run_case(&cpu2, &cpu1, &longs[i], long_lens[i], &worst);
                ran++;
            }
        printf("%s: %d cases, worst error %.3g of the bound\n", cpu2.k->name, ran, worst);
        pith_cpu_free(&cpu2);
        pith_cpu_free(&cpu1);
    }
    return check_summary("test_attention");
}
