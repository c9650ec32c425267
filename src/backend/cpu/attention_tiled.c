/* Tiled attention for processors with AVX-512 (the avx512-vnni kernel table): the path pith_attention
 * takes there, for prefill and decode alike (attention.h).
 *
 * Layout: queries along the 16 lanes of a zmm register. An item (a run of up to PITH_ATTN_QTILE tokens of
 * one sequence, one KV head) has nq = tokens x group query rows, cut into nb = ceil(nq / 16) lane
 * blocks; query row i is lane i % 16 of block i / 16, and Q is transposed once per item into
 * qt[d][block][lane], pre-multiplied by the scale. For a chunk of PITH_ATTN_CHUNK positions, K and V are
 * converted once to float rows (whatever the KV type), then
 *   scores  st[block][j][lane] = sum_d k[j][d] * qt[d][block][lane]   (a broadcast K element times a
 *           vector of 16 queries: register tiles of 4 blocks x 6 keys, no horizontal sums),
 *   softmax the running max and sum of each lane are vectors too (a max over keys is a max across
 *           rows), positions outside a lane's [lo, p] get probability exactly 0 (masked),
 *   P V     o[block][d][lane] += sum_j v[j][d] * p[block][j][lane]   (tiles of 2 blocks x 12 dims).
 * Causal and window masking skip every chunk beyond the run's last position or wholly below its lowest
 * window start.
 *
 * Split-K: positions are grouped into segments of PITH_ATTN_SEGMENT (aligned to multiples of it). Each
 * segment is computed from a fresh state (max -inf, sum 0, accumulator 0) and the segments' partial
 * softmaxes are merged in order into a total that starts from the sink (or from nothing):
 *   M' = max(M, m), T = T e^(M - M') + t e^(m - M'), A = A e^(M - M') + a e^(m - M').
 * A long prefill run merges its segments as it goes. A decode run (one lane block) whose batch has few
 * items is split instead: each segment is a work unit of its own, on any thread, writing its partial to
 * scratch, and a second pass merges them in order. The arithmetic is the same either way, so a query's
 * output is bit-identical whatever the batch and the thread count: each lane's dot products, maxima,
 * sums and P V run over the same positions in the same order (a longer or earlier chunk only adds
 * masked positions: exact zeros to sums, nothing to maxima), and a segment a lane does not see leaves
 * its state at -inf and is skipped by the merge. */
#include "backend/cpu/attention_internal.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define L 16
#define UNROLL _Pragma("GCC unroll 16")
#define C PITH_ATTN_CHUNK
#define SEG PITH_ATTN_SEGMENT

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static int max_blocks(const pith_attn_shape *sh) {
    return (PITH_ATTN_QTILE * (sh->n_heads / sh->n_kv_heads) + L - 1) / L;
}

size_t attn_tiled_thread_floats(const pith_attn_shape *sh) {
    size_t hd = (size_t)sh->head_dim, nbm = (size_t)max_blocks(sh);
    /* kc, vc; qt; st; m, l, M, T, lo, p; o, A; orow */
    return 2 * round16((size_t)C * hd) + nbm * L * hd + nbm * L * C + 6 * nbm * L + 2 * nbm * L * hd + (size_t)L * hd;
}

size_t attn_tiled_partial_floats(const pith_attn_shape *sh) { return (size_t)L * ((size_t)sh->head_dim + 2); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TZ __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

bool attn_tiled_available(const pith_cpu *c) { return strcmp(c->k->name, "avx512-vnni") == 0; }

/* One thread's view of an item. */
typedef struct item_ctx {
    int t0, t1, seq, kvh, nq, nb, minlo, maxpos;
    float *kc, *vc, *qt, *st, *m, *l, *M, *T, *o, *A;
    float *orow; /* one lane block's accumulator query-major, [lane][hd] (pv_rows) */
    int32_t *lo, *p;
} item_ctx;

typedef struct tiled_job {
    pith_cpu *c;
    const pith_attn_scratch *s;
    const pith_attn_args *a;
    int n_units;
    _Atomic int next;
} tiled_job;

/* e^x for x <= 88, to about 2 ulp: x = n ln2 + r, |r| <= ln2 / 2, a degree-7 Taylor polynomial in r
 * (truncation below 1e-8 relative), then 2^n with vscalefps, which underflows gracefully to 0; e^0 is
 * exactly 1. */
static inline TZ __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Scores of keys jj..jj+KR-1 for lane blocks b..b+NB-1. Every lane sums over d in order, one FMA per
 * term, whatever NB and KR: the tile shape never changes a result. */
#define SCORE_TILE(NB, KR)                                                                                  \
    static inline TZ void score_##NB##x##KR(const float *qt, int nb, int b, const float *kc, int hd, int jj, \
                                            float *st) {                                                    \
        __m512 acc[NB][KR];                                                                                 \
        UNROLL for (int x = 0; x < NB; x++)                                                                        \
            UNROLL for (int k = 0; k < KR; k++) acc[x][k] = _mm512_setzero_ps();                                   \
        const float *kr = kc + (size_t)jj * hd;                                                             \
        for (int d = 0; d < hd; d++) {                                                                      \
            __m512 q[NB];                                                                                   \
            UNROLL for (int x = 0; x < NB; x++) q[x] = _mm512_loadu_ps(qt + ((size_t)d * nb + b + x) * L);         \
            UNROLL for (int k = 0; k < KR; k++) {                                                                  \
                __m512 kk = _mm512_set1_ps(kr[(size_t)k * hd + d]);                                         \
                UNROLL for (int x = 0; x < NB; x++) acc[x][k] = _mm512_fmadd_ps(kk, q[x], acc[x][k]);              \
            }                                                                                               \
        }                                                                                                   \
        UNROLL for (int x = 0; x < NB; x++)                                                                        \
            UNROLL for (int k = 0; k < KR; k++) _mm512_storeu_ps(st + ((size_t)(b + x) * C + jj + k) * L, acc[x][k]); \
    }
SCORE_TILE(4, 4)
SCORE_TILE(2, 8)
SCORE_TILE(1, 8)
SCORE_TILE(4, 1)
SCORE_TILE(2, 1)
SCORE_TILE(1, 1)

#define SCORE_ROWS(NB, KR)                                                                                  \
    static TZ void score_rows_##NB(const float *qt, int nb, int b, const float *kc, int hd, int jn, float *st) { \
        int jj = 0;                                                                                         \
        for (; jj + KR <= jn; jj += KR) score_##NB##x##KR(qt, nb, b, kc, hd, jj, st);                       \
        for (; jj < jn; jj++) score_##NB##x1(qt, nb, b, kc, hd, jj, st);                                    \
    }
SCORE_ROWS(4, 4)
SCORE_ROWS(2, 8)
SCORE_ROWS(1, 8)

/* o[b + x][d0 + dd][lane] += sum_j v[j][d0 + dd] * p[b + x][j][lane], j in order. */
#define PV_TILE(NB, DR)                                                                                     \
    static inline TZ void pv_##NB##x##DR(float *o, int hd, int b, const float *pt, const float *vc, int d0,  \
                                         int jn) {                                                          \
        __m512 acc[NB][DR];                                                                                 \
        UNROLL for (int x = 0; x < NB; x++)                                                                        \
            UNROLL for (int k = 0; k < DR; k++) acc[x][k] = _mm512_loadu_ps(o + ((size_t)(b + x) * hd + d0 + k) * L); \
        for (int j = 0; j < jn; j++) {                                                                      \
            __m512 p[NB];                                                                                   \
            UNROLL for (int x = 0; x < NB; x++) p[x] = _mm512_loadu_ps(pt + ((size_t)(b + x) * C + j) * L);        \
            const float *vr = vc + (size_t)j * hd + d0;                                                     \
            UNROLL for (int k = 0; k < DR; k++) {                                                                  \
                __m512 vv = _mm512_set1_ps(vr[k]);                                                          \
                UNROLL for (int x = 0; x < NB; x++) acc[x][k] = _mm512_fmadd_ps(vv, p[x], acc[x][k]);              \
            }                                                                                               \
        }                                                                                                   \
        UNROLL for (int x = 0; x < NB; x++)                                                                        \
            UNROLL for (int k = 0; k < DR; k++) _mm512_storeu_ps(o + ((size_t)(b + x) * hd + d0 + k) * L, acc[x][k]); \
    }
PV_TILE(2, 12)
PV_TILE(2, 4)
PV_TILE(2, 1)
PV_TILE(1, 12)
PV_TILE(1, 4)
PV_TILE(1, 1)

#define PV_DIMS(NB)                                                                                         \
    static TZ void pv_dims_##NB(float *o, int hd, int b, const float *pt, const float *vc, int jn) {         \
        int d = 0;                                                                                          \
        for (; d + 12 <= hd; d += 12) pv_##NB##x12(o, hd, b, pt, vc, d, jn);                                \
        for (; d + 4 <= hd; d += 4) pv_##NB##x4(o, hd, b, pt, vc, d, jn);                                   \
        for (; d < hd; d++) pv_##NB##x1(o, hd, b, pt, vc, d, jn);                                           \
    }
PV_DIMS(2)
PV_DIMS(1)

/* P V for a single lane block, query-major: orow[i][d] += sum_j v[j][d] * p[j][i] for 8 queries i0..i0+7
 * and 32 dimensions at a time, with V rows loaded as vectors (all 16 lanes busy) and each p broadcast.
 * Every element gets the same FMAs in the same order as pv_dims_1 gives it (v * p + acc, j ascending),
 * so the two layouts agree to the bit. */
static TZ void pv_rows(float *orow, int hd, int nq, const float *pt, const float *vc, int jn) {
    for (int i0 = 0; i0 < nq; i0 += 8)
        for (int d0 = 0; d0 < hd; d0 += 32) {
            int w0 = hd - d0 < 16 ? hd - d0 : 16, w1 = hd - d0 - 16 < 0 ? 0 : hd - d0 - 16 < 16 ? hd - d0 - 16 : 16;
            __mmask16 m0 = (__mmask16)((1u << w0) - 1), m1 = (__mmask16)((1u << w1) - 1);
            __m512 acc[8][2];
            UNROLL for (int i = 0; i < 8; i++) {
                acc[i][0] = _mm512_maskz_loadu_ps(m0, orow + (size_t)(i0 + i) * hd + d0);
                acc[i][1] = _mm512_maskz_loadu_ps(m1, orow + (size_t)(i0 + i) * hd + d0 + 16);
            }
            for (int j = 0; j < jn; j++) {
                const float *vr = vc + (size_t)j * hd + d0;
                __m512 v0 = _mm512_maskz_loadu_ps(m0, vr), v1 = _mm512_maskz_loadu_ps(m1, vr + 16);
                UNROLL for (int i = 0; i < 8; i++) {
                    __m512 pp = _mm512_set1_ps(pt[(size_t)j * L + i0 + i]);
                    acc[i][0] = _mm512_fmadd_ps(v0, pp, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(v1, pp, acc[i][1]);
                }
            }
            UNROLL for (int i = 0; i < 8; i++) {
                _mm512_mask_storeu_ps(orow + (size_t)(i0 + i) * hd + d0, m0, acc[i][0]);
                _mm512_mask_storeu_ps(orow + (size_t)(i0 + i) * hd + d0 + 16, m1, acc[i][1]);
            }
        }
}

/* Sets up item `item`: its token range, lanes (position, window start; padding lanes see nothing) and
 * the transposed, scaled queries. */
static TZ void item_prepare(const tiled_job *j, int item, float *scratch, item_ctx *x) {
    const pith_attn_args *a = j->a;
    const pith_attn_shape *sh = &j->s->shape;
    const int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads, nbm = max_blocks(sh);
    const int run = item / sh->n_kv_heads;
    x->kvh = item % sh->n_kv_heads;
    x->t0 = j->s->runs[2 * run];
    x->t1 = j->s->runs[2 * run + 1];
    x->seq = a->seq[x->t0];
    x->nq = (x->t1 - x->t0) * group;
    x->nb = (x->nq + L - 1) / L;
    float *f = scratch;
    x->kc = f, f += round16((size_t)C * hd);
    x->vc = f, f += round16((size_t)C * hd);
    x->qt = f, f += (size_t)nbm * L * hd;
    x->st = f, f += (size_t)nbm * L * C;
    x->m = f, f += (size_t)nbm * L;
    x->l = f, f += (size_t)nbm * L;
    x->M = f, f += (size_t)nbm * L;
    x->T = f, f += (size_t)nbm * L;
    x->lo = (int32_t *)f, f += (size_t)nbm * L;
    x->p = (int32_t *)f, f += (size_t)nbm * L;
    x->o = f, f += (size_t)nbm * L * hd;
    x->A = f, f += (size_t)nbm * L * hd;
    x->orow = f;
    x->maxpos = 0;
    x->minlo = INT_MAX;
    for (int i = 0; i < x->nb * L; i++) {
        if (i < x->nq) {
            int t = x->t0 + i / group, p = attn_hi(a, t), lo = attn_lo(a, a->positions[t]);
            x->p[i] = p;
            x->lo[i] = lo;
            x->maxpos = p > x->maxpos ? p : x->maxpos;
            x->minlo = lo < x->minlo ? lo : x->minlo;
        } else {
            x->p[i] = -1;
            x->lo[i] = INT_MAX;
        }
    }
    const float scale = sh->scale;
    for (int i = 0; i < x->nb * L; i++) {
        int b = i / L, lane = i % L;
        if (i < x->nq) {
            const float *q = a->q + (size_t)(x->t0 + i / group) * a->q_ld + (size_t)(x->kvh * group + i % group) * hd;
            for (int d = 0; d < hd; d++) x->qt[((size_t)d * x->nb + b) * L + lane] = q[d] * scale;
        } else {
            for (int d = 0; d < hd; d++) x->qt[((size_t)d * x->nb + b) * L + lane] = 0.0f;
        }
    }
}

/* The total each lane starts from: its head's sink as one more logit without a value (max = sink,
 * sum = 1), or nothing. A NaN or -inf sink counts as none. */
static void total_init(const tiled_job *j, item_ctx *x, float *M, float *T, float *A) {
    const pith_attn_shape *sh = &j->s->shape;
    const int group = sh->n_heads / sh->n_kv_heads;
    for (int i = 0; i < x->nb * L; i++) {
        float sink = j->a->sinks && i < x->nq ? j->a->sinks[x->kvh * group + i % group] : -INFINITY;
        bool has = sink > -INFINITY;
        M[i] = has ? sink : -INFINITY;
        T[i] = has ? 1.0f : 0.0f;
    }
    memset(A, 0, sizeof(float) * (size_t)x->nb * L * sh->head_dim);
}

/* The partial softmax of segment seg for every lane block, from a fresh state, into m, l, o. */
static TZ void segment(const tiled_job *j, item_ctx *x, int seg, float *m, float *l, float *o) {
    const pith_attn_args *a = j->a;
    const pith_cpu_kernels *k = j->c->k;
    const int hd = j->s->shape.head_dim, nb = x->nb;
    for (int i = 0; i < nb * L; i++) m[i] = -INFINITY, l[i] = 0.0f;
    /* one lane block (a decode run): accumulate query-major in orow, transposed into o at the end */
    const bool rows = nb == 1;
    memset(rows ? x->orow : o, 0, sizeof(float) * (size_t)nb * L * hd);
    int start = seg * SEG, first = x->minlo / C * C;
    int j0 = start > first ? start : first, end = (seg + 1) * SEG - 1 < x->maxpos ? (seg + 1) * SEG - 1 : x->maxpos;
    for (; j0 <= end; j0 += C) {
        int jn = end + 1 - j0 < C ? end + 1 - j0 : C;
        int r0 = x->minlo > j0 ? x->minlo - j0 : 0;
        if (r0) {
            memset(x->kc, 0, sizeof(float) * (size_t)r0 * hd);
            memset(x->vc, 0, sizeof(float) * (size_t)r0 * hd);
        }
        attn_load_rows(k, a, a->k_cache, x->seq, j0 + r0, jn - r0, x->kvh, hd, x->kc + (size_t)r0 * hd);
        attn_load_rows(k, a, a->v_cache, x->seq, j0 + r0, jn - r0, x->kvh, hd, x->vc + (size_t)r0 * hd);
        int b = 0;
        for (; b + 4 <= nb; b += 4) score_rows_4(x->qt, nb, b, x->kc, hd, jn, x->st);
        for (; b + 2 <= nb; b += 2) score_rows_2(x->qt, nb, b, x->kc, hd, jn, x->st);
        for (; b < nb; b++) score_rows_1(x->qt, nb, b, x->kc, hd, jn, x->st);
        for (b = 0; b < nb; b++) {
            __m512i lo = _mm512_loadu_si512(x->lo + (size_t)b * L), p = _mm512_loadu_si512(x->p + (size_t)b * L);
            float *st = x->st + (size_t)b * C * L;
            /* every real lane sees every row of the chunk (the bulk of a long prefill or decode): no masks.
             * Padding lanes then compute throwaway values that reach no other lane and no output. */
            const int real = x->nq - b * L < L ? x->nq - b * L : L;
            const __mmask16 lanes = (__mmask16)((1u << real) - 1);
            const bool all = _mm512_mask_reduce_max_epi32(lanes, lo) <= j0 && _mm512_mask_reduce_min_epi32(lanes, p) >= j0 + jn - 1;
            __m512 mx = _mm512_set1_ps(-INFINITY);
            if (all) {
                for (int jj = 0; jj < jn; jj++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + (size_t)jj * L));
            } else {
                for (int jj = 0; jj < jn; jj++) {
                    __m512i pos = _mm512_set1_epi32(j0 + jj);
                    __mmask16 vis = _mm512_cmple_epi32_mask(lo, pos) & _mm512_cmple_epi32_mask(pos, p);
                    mx = _mm512_mask_max_ps(mx, vis, mx, _mm512_loadu_ps(st + (size_t)jj * L));
                }
            }
            __m512 mo = _mm512_loadu_ps(m + (size_t)b * L), mn = _mm512_max_ps(mo, mx);
            __mmask16 grow = _mm512_cmp_ps_mask(mn, mo, _CMP_GT_OQ) &
                             _mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            if (grow) {
                __m512 corr = _mm512_mask_blend_ps(grow, _mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(mo, mn)));
                _mm512_storeu_ps(l + (size_t)b * L, _mm512_mul_ps(_mm512_loadu_ps(l + (size_t)b * L), corr));
                if (rows) {
                    /* the rows of the lanes whose max grew (the others' factor is exactly 1), a vector at
                     * a time: the same products as element by element */
                    float cs[L];
                    _mm512_storeu_ps(cs, corr);
                    for (int i = 0; i < x->nq; i++) {
                        if (!(grow >> i & 1)) continue;
                        float *row = x->orow + (size_t)i * hd;
                        const __m512 f = _mm512_set1_ps(cs[i]);
                        int d = 0;
                        for (; d + L <= hd; d += L) _mm512_storeu_ps(row + d, _mm512_mul_ps(_mm512_loadu_ps(row + d), f));
                        for (; d < hd; d++) row[d] *= cs[i];
                    }
                } else {
                    float *ob = o + (size_t)b * hd * L;
                    for (int d = 0; d < hd; d++)
                        _mm512_storeu_ps(ob + (size_t)d * L, _mm512_mul_ps(_mm512_loadu_ps(ob + (size_t)d * L), corr));
                }
            }
            _mm512_storeu_ps(m + (size_t)b * L, mn);
            __m512 sum = _mm512_setzero_ps();
            for (int jj = 0; jj < jn; jj++) {
                __mmask16 vis = 0xffff;
                if (!all) {
                    __m512i pos = _mm512_set1_epi32(j0 + jj);
                    vis = _mm512_cmple_epi32_mask(lo, pos) & _mm512_cmple_epi32_mask(pos, p);
                }
                __m512 e = _mm512_maskz_mov_ps(vis, exp16(_mm512_sub_ps(_mm512_loadu_ps(st + (size_t)jj * L), mn)));
                _mm512_storeu_ps(st + (size_t)jj * L, e);
                sum = _mm512_add_ps(sum, e);
            }
            _mm512_storeu_ps(l + (size_t)b * L, _mm512_add_ps(_mm512_loadu_ps(l + (size_t)b * L), sum));
        }
        if (rows) {
            pv_rows(x->orow, hd, x->nq, x->st, x->vc, jn);
            continue;
        }
        for (b = 0; b + 2 <= nb; b += 2) pv_dims_2(o, hd, b, x->st, x->vc, jn);
        for (; b < nb; b++) pv_dims_1(o, hd, b, x->st, x->vc, jn);
    }
    if (rows) /* the real lanes' rows; padding lanes get zeros (merge weighs them by 0) */
        for (int d = 0; d < hd; d++) {
            float *od = o + (size_t)d * L;
            for (int i = 0; i < x->nq; i++) od[i] = x->orow[(size_t)i * hd + d];
            for (int i = x->nq; i < L; i++) od[i] = 0.0f;
        }
}

/* Merges one segment's partial (m, l, o) of lane block b into the total (M, T, A). */
static TZ void merge(int hd, int b, const float *m, const float *l, const float *o, float *M, float *T, float *A) {
    __m512 ms = _mm512_loadu_ps(m + (size_t)b * L), Mo = _mm512_loadu_ps(M + (size_t)b * L);
    __mmask16 valid = _mm512_cmp_ps_mask(ms, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    if (!valid) return;
    __m512 Mn = _mm512_mask_max_ps(Mo, valid, Mo, ms);
    __m512 ea = _mm512_mask_blend_ps(valid, _mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(Mo, Mn)));
    __m512 eb = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(ms, Mn)));
    _mm512_storeu_ps(M + (size_t)b * L, Mn);
    __m512 Tn = _mm512_fmadd_ps(_mm512_loadu_ps(l + (size_t)b * L), eb, _mm512_mul_ps(_mm512_loadu_ps(T + (size_t)b * L), ea));
    _mm512_storeu_ps(T + (size_t)b * L, Tn);
    const float *ob = o + (size_t)b * hd * L;
    float *Ab = A + (size_t)b * hd * L;
    for (int d = 0; d < hd; d++) {
        __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(ob + (size_t)d * L), eb, _mm512_mul_ps(_mm512_loadu_ps(Ab + (size_t)d * L), ea));
        _mm512_storeu_ps(Ab + (size_t)d * L, v);
    }
}

static void write_out(const tiled_job *j, const item_ctx *x) {
    const pith_attn_args *a = j->a;
    const pith_attn_shape *sh = &j->s->shape;
    const int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads;
    for (int i = 0; i < x->nq; i++) {
        int b = i / L, lane = i % L, t = x->t0 + i / group, h = x->kvh * group + i % group;
        float *out = a->out + (size_t)t * a->out_ld + (size_t)h * hd;
        float inv = 1.0f / x->T[i];
        for (int d = 0; d < hd; d++) out[d] = x->A[((size_t)b * hd + d) * L + lane] * inv;
    }
}

static int first_seg(const item_ctx *x) { return x->minlo / C * C / SEG; }
static int last_seg(const item_ctx *x) { return x->maxpos / SEG; }

/* A work unit: item u->item whole, or one segment of it into a partial (u->seg >= 0). */
static void run_unit(const tiled_job *j, int unit, float *scratch) {
    const pith_attn_scratch *s = j->s;
    const int item = s->units[2 * unit], seg = s->units[2 * unit + 1];
    item_ctx x;
    item_prepare(j, item, scratch, &x);
    if (seg >= 0) {
        float *part = s->partials + (size_t)s->part_of[unit] * attn_tiled_partial_floats(&s->shape);
        segment(j, &x, seg, part, part + L, part + 2 * L);
        return;
    }
    total_init(j, &x, x.M, x.T, x.A);
    for (int sg = first_seg(&x); sg <= last_seg(&x); sg++) {
        segment(j, &x, sg, x.m, x.l, x.o);
        for (int b = 0; b < x.nb; b++) merge(s->shape.head_dim, b, x.m, x.l, x.o, x.M, x.T, x.A);
    }
    write_out(j, &x);
}

static void unit_worker(void *arg, int ith, int nth) {
    (void)nth;
    tiled_job *j = arg;
    float *scratch = j->s->tiled + (size_t)ith * j->s->tiled_floats;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        run_unit(j, u, scratch);
    }
}

/* Second pass: every split item merges its segments' partials in order. */
static void merge_worker(void *arg, int ith, int nth) {
    (void)nth;
    tiled_job *j = arg;
    const pith_attn_scratch *s = j->s;
    float *scratch = s->tiled + (size_t)ith * s->tiled_floats;
    const size_t pf = attn_tiled_partial_floats(&s->shape);
    for (;;) {
        int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= s->n_split) break;
        int u0 = s->split_first[i];
        item_ctx x;
        item_prepare(j, s->units[2 * u0], scratch, &x);
        total_init(j, &x, x.M, x.T, x.A);
        for (int sg = first_seg(&x); sg <= last_seg(&x); sg++) {
            const float *part = s->partials + (size_t)s->part_of[u0 + sg - first_seg(&x)] * pf;
            merge(s->shape.head_dim, 0, part, part + L, part + 2 * L, x.M, x.T, x.A);
        }
        write_out(j, &x);
    }
}

void attn_tiled_run(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a, int n_runs, double work) {
    const pith_attn_shape *sh = &s->shape;
    const int n_items = n_runs * sh->n_kv_heads, group = sh->n_heads / sh->n_kv_heads;
    /* Split the long one-block items when there are too few items to keep every thread busy. */
    bool want_split = n_items < 4 * c->n_threads;
    int n_units = 0, n_parts = 0;
    s->n_split = 0;
    if (want_split) {
        for (int it = n_items - 1; it >= 0; it--) {
            int run = it / sh->n_kv_heads, t0 = s->runs[2 * run], t1 = s->runs[2 * run + 1];
            if ((t1 - t0) * group > L) continue;
            int maxpos = 0, minlo = INT_MAX;
            for (int t = t0; t < t1; t++) {
                int p = attn_hi(a, t), lo = attn_lo(a, a->positions[t]);
                maxpos = p > maxpos ? p : maxpos;
                minlo = lo < minlo ? lo : minlo;
            }
            int s0 = minlo / C * C / SEG, s1 = maxpos / SEG;
            if (s1 == s0 || n_parts + (s1 - s0 + 1) > PITH_ATTN_MAX_PARTIALS) continue;
            s->split_first[s->n_split++] = n_units;
            for (int sg = s0; sg <= s1; sg++) {
                s->units[2 * n_units] = it;
                s->units[2 * n_units + 1] = sg;
                s->part_of[n_units++] = n_parts++;
            }
        }
    }
    for (int it = n_items - 1; it >= 0; it--) {
        bool split = false;
        for (int i = 0; i < s->n_split && !split; i++) split = s->units[2 * s->split_first[i]] == it;
        if (split) continue;
        s->units[2 * n_units] = it;
        s->units[2 * n_units + 1] = -1;
        s->part_of[n_units++] = -1;
    }
    tiled_job j = {.c = c, .s = s, .a = a, .n_units = n_units};
    atomic_init(&j.next, 0);
    pith_pool_run_sized(c->pool, unit_worker, &j, 2 * work);
    if (s->n_split) {
        atomic_store(&j.next, 0);
        pith_pool_run_sized(c->pool, merge_worker, &j, (double)s->n_split * sh->head_dim * L * 8);
    }
}

#else

bool attn_tiled_available(const pith_cpu *c) {
    (void)c;
    return false;
}

void attn_tiled_run(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a, int n_runs, double work) {
    (void)c, (void)s, (void)a, (void)n_runs, (void)work;
}

#endif
