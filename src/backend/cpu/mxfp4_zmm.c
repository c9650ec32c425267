/* The AVX-512 VNNI MXFP4 tile (see mxfp4.h): the file layout read as it is, so that memory-mapped
 * experts (and rows beyond the last whole group of 16) run on it as well as any other.
 *
 * Four blocks at a time. Their 4 x 16 code bytes go one per 128-bit lane of a zmm register; the low
 * nibbles (elements 0-15 of each block) and the high ones (elements 16-31) are looked up with one vpshufb
 * each in the table of the doubled values plus 12 (0..24: unsigned, as vpdpbusd wants its first operand).
 * The activations are arranged to match once per token (block j's elements 0-15 in lane j of one vector,
 * 16-31 in lane j of another), so two vpdpbusd give every int32 lane a sum over its own block only; they
 * start from -12 times the same lanes' activation sums (computed once per token), which takes the offset
 * back out exactly. Per row and token, then: two vpdpbusd, a conversion and a multiply-add by the
 * product of the lane's two block scales (weight scale times activation scale, both per lane), and no
 * horizontal sum until the end of the row.
 *
 * Exactness: a lane sums 8 products of at most 24 x 128 and the offset term 12 x 8 x 128: far inside
 * int32. The float sum runs over blocks in a different order than the scalar tile's, so results agree
 * to rounding (tests/test_mxfp4.c). Rows whose block count is not a multiple of 4 end with a padded
 * copy: zero codes (+12) against zero activations add nothing. */
#include "backend/cpu/mxfp4.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/prefetch.h"

#define TGTZ __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINEZ static inline __attribute__((always_inline)) TGTZ
#define MAX_RN 4
#define GROUP_BYTES (4 * PITH_MXFP4_BYTES)

static const int8_t offset_values[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* 2^(e - 128) for every scale byte, as float bits: normal for e >= 2, the denormals 2^-128 and 2^-127
 * below. A table lookup per block: on one token per call the tile ran 30 % slower with the bits computed
 * per block in scalar code and 45 % slower with an in-lane byte shuffle of the scale bytes and vscalefps. */
#define SB(e) ((e) >= 2 ? ((uint32_t)(e)-1) << 23 : 0x200000u << ((e)&1))
#define S4(e) SB(e), SB((e) + 1), SB((e) + 2), SB((e) + 3)
#define S16(e) S4(e), S4((e) + 4), S4((e) + 8), S4((e) + 12)
#define S64(e) S16(e), S16((e) + 16), S16((e) + 32), S16((e) + 48)
static const union {
    uint32_t bits[256];
    float f[256];
} scales = {{S64(0), S64(64), S64(128), S64(192)}};
#define scale_of(e) (scales.f[(e)])

/* s0..s3 each in the 4 int32 lanes of its 128-bit lane. */
INLINEZ __m512 per_lane(float s0, float s1, float s2, float s3) {
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_set_ps(s3, s2, s1, s0)));
}

typedef struct w4 {
    __m512i lo, hi;
    __m512 d;
} w4;

/* Four blocks of one row starting at blk (GROUP_BYTES bytes). */
INLINEZ w4 load_w(const uint8_t *blk, __m512i table) {
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + 1)));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(blk + 1 + PITH_MXFP4_BYTES)), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(blk + 1 + 2 * PITH_MXFP4_BYTES)), 2);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(blk + 1 + 3 * PITH_MXFP4_BYTES)), 3);
    const __m512i m = _mm512_set1_epi8(15);
    w4 w;
    w.lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m));
    w.hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m));
    w.d = per_lane(scale_of(blk[0]), scale_of(blk[PITH_MXFP4_BYTES]), scale_of(blk[2 * PITH_MXFP4_BYTES]),
                   scale_of(blk[3 * PITH_MXFP4_BYTES]));
    return w;
}

typedef struct x4 {
    __m512i lo, hi, neg; /* neg: -12 x the lane's activation sum, where the dot products start */
    __m512 d;
} x4;

/* Four consecutive q8a blocks. */
INLINEZ x4 load_x(const pith_block_q8a *xb) {
    __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].qs)),
                                   _mm256_loadu_si256((const __m256i *)xb[1].qs), 1);
    __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[2].qs)),
                                   _mm256_loadu_si256((const __m256i *)xb[3].qs), 1);
    /* a: lanes x0[0:16] x0[16:32] x1[0:16] x1[16:32]; b: the same for blocks 2 and 3 (64-bit indices) */
    const __m512i ilo = _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), ihi = _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2);
    x4 x;
    x.lo = _mm512_permutex2var_epi64(a, ilo, b);
    x.hi = _mm512_permutex2var_epi64(a, ihi, b);
    const __m512i twelve = _mm512_set1_epi8(12);
    __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), twelve, x.lo), twelve, x.hi);
    x.neg = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    x.d = per_lane(xb[0].d, xb[1].d, xb[2].d, xb[3].d);
    return x;
}

INLINEZ void store(float *y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

/* One group of 4 blocks: rows RM of w (ws apart), tokens RN of x (xs apart, q8a blocks). */
INLINEZ void group_step(const int RM, const int RN, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                        __m512i table, __m512 acc[4][MAX_RN]) {
    x4 xv[MAX_RN];
    for (int t = 0; t < RN; t++) xv[t] = load_x((const pith_block_q8a *)(x + (size_t)t * xs));
    for (int r = 0; r < RM; r++) {
        /* rows are short streams (1.5 KiB for GPT-OSS) that the hardware prefetcher starts late on: the
         * same place 4 rows on (the next call's rows), one line per group of 68 bytes */
        pith_prefetch_stream(w + (size_t)(r + 4) * ws);
        w4 wv = load_w(w + (size_t)r * ws, table);
        for (int t = 0; t < RN; t++) {
            __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xv[t].neg, wv.lo, xv[t].lo), wv.hi, xv[t].hi);
            acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), xv[t].d), wv.d, acc[r][t]);
        }
    }
}

/* rm rows (<= 4) by rn tokens (<= MAX_RN), ng whole groups of 4 blocks then tail blocks (0-3). The tail
 * is copied into zero-padded groups first, so that no call sits between the accumulators' uses. */
INLINEZ void tile_body(const int RM, const int RN, int ng, int tail, const uint8_t *w, size_t ws, const uint8_t *x,
                       size_t xs, float *y, size_t ldy, bool accumulate) {
    uint8_t wpad[4][GROUP_BYTES + 16];
    pith_block_q8a xpad[MAX_RN][4];
    if (tail) {
        memset(wpad, 0, sizeof wpad);
        memset(xpad, 0, sizeof xpad);
        for (int r = 0; r < RM; r++)
            memcpy(wpad[r], w + (size_t)r * ws + (size_t)ng * GROUP_BYTES, (size_t)tail * PITH_MXFP4_BYTES);
        for (int t = 0; t < RN; t++)
            memcpy(xpad[t], (const pith_block_q8a *)(x + (size_t)t * xs) + 4 * ng, (size_t)tail * sizeof(pith_block_q8a));
    }
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)offset_values));
    __m512 acc[4][MAX_RN];
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) acc[r][t] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++)
        group_step(RM, RN, w + (size_t)g * GROUP_BYTES, ws, x + (size_t)g * 4 * sizeof(pith_block_q8a), xs, table, acc);
    if (tail) group_step(RM, RN, wpad[0], sizeof wpad[0], (const uint8_t *)xpad, sizeof xpad[0], table, acc);
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) store(&y[(size_t)t * ldy + r], _mm512_reduce_add_ps(acc[r][t]), accumulate);
}

#define TILE(RM, RN)                                                                                            \
    TGTZ static void tile_##RM##_##RN(int ng, int tail, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, \
                                      float *y, size_t ldy, bool accumulate) {                                  \
        tile_body(RM, RN, ng, tail, w, ws, x, xs, y, ldy, accumulate);                                          \
    }
#define ROW(RM) TILE(RM, 1) TILE(RM, 2) TILE(RM, 3) TILE(RM, 4)
ROW(1)
ROW(2)
ROW(3)
ROW(4)

typedef void (*fixed_tile)(int ng, int tail, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
                           size_t ldy, bool accumulate);
#define ENTRIES(RM) {tile_##RM##_1, tile_##RM##_2, tile_##RM##_3, tile_##RM##_4}
static const fixed_tile tiles[4][MAX_RN] = {ENTRIES(1), ENTRIES(2), ENTRIES(3), ENTRIES(4)};

void pith_tile_mxfp4_avx512(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                            size_t ldy, bool accumulate) {
    const int nb = K / 32;
    for (int t = 0; t < rn; t += MAX_RN) {
        int n = rn - t < MAX_RN ? rn - t : MAX_RN;
        tiles[rm - 1][n - 1](nb / 4, nb % 4, w, ws, (const uint8_t *)x + (size_t)t * xs, xs, y + (size_t)t * ldy,
                             ldy, accumulate);
    }
}

#else

void pith_tile_mxfp4_avx512(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                            size_t ldy, bool accumulate) {
    pith_tile_mxfp4_scalar(K, w, ws, rm, x, xs, rn, y, ldy, accumulate);
}

#endif
