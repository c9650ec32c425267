/* MXFP4 blocks: dequantization, the scalar and AVX2 tiles, and the kernel tables that carry them (see
 * mxfp4.h). */
#include "backend/cpu/mxfp4.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PITH_MXFP4_X86 1
#endif

const int8_t pith_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float pith_mxfp4_scale(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

void pith_dequant_mxfp4(const uint8_t *src, float *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++, src += PITH_MXFP4_BYTES, dst += 32) {
        float d = pith_mxfp4_scale(src[0]);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * pith_mxfp4_values[src[1 + j] & 15];
            dst[j + 16] = d * pith_mxfp4_values[src[1 + j] >> 4];
        }
    }
}

static inline void store(float *y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

void pith_tile_mxfp4_scalar(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                            size_t ldy, bool accumulate) {
    const int nb = K / 32;
    for (int r = 0; r < rm; r++)
        for (int t = 0; t < rn; t++) {
            const pith_block_q8a *xb = (const pith_block_q8a *)((const uint8_t *)x + (size_t)t * xs);
            const uint8_t *blk = w + (size_t)r * ws;
            float sum = 0;
            for (int b = 0; b < nb; b++, blk += PITH_MXFP4_BYTES) {
                int isum = 0;
                for (int j = 0; j < 16; j++)
                    isum += pith_mxfp4_values[blk[1 + j] & 15] * xb[b].qs[j] +
                            pith_mxfp4_values[blk[1 + j] >> 4] * xb[b].qs[j + 16];
                sum += pith_mxfp4_scale(blk[0]) * xb[b].d * (float)isum;
            }
            store(&y[(size_t)t * ldy + r], sum, accumulate);
        }
}

#ifdef PITH_MXFP4_X86
#define TGT __attribute__((target("avx2,fma")))

TGT static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* pith_mxfp4_scale without the libm call: the float's bits (normal for e >= 2, denormal below). */
static inline float scale_bits(uint8_t e) {
    uint32_t bits = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x200000u << e;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 32 doubled values of a block, in element order (low lane 0..15, high lane 16..31). */
TGT static inline __m256i decode(const uint8_t *blk, __m256i table) {
    __m128i q = _mm_loadu_si128((const __m128i *)(blk + 1));
    const __m128i m = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(q, m), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    return _mm256_shuffle_epi8(table, _mm256_set_m128i(hi, lo));
}

/* A fixed RM x RN tile: the weight block of each row is decoded once per block for every token. */
#define MXFP4_TILE(RM, RN)                                                                                       \
    TGT static void tile_##RM##_##RN(int nb, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y, \
                                     size_t ldy, bool accumulate) {                                            \
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pith_mxfp4_values)); \
        const __m256i ones = _mm256_set1_epi16(1);                                                             \
        __m256 acc[RM][RN];                                                                                    \
        for (int r = 0; r < RM; r++)                                                                           \
            for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();                                      \
        for (int b = 0; b < nb; b++) {                                                                         \
            __m256i aw[RM], wv[RM];                                                                            \
            float dw[RM];                                                                                      \
            for (int r = 0; r < RM; r++) {                                                                     \
                const uint8_t *blk = w + (size_t)r * ws + (size_t)b * PITH_MXFP4_BYTES;                        \
                wv[r] = decode(blk, table);                                                                    \
                aw[r] = _mm256_sign_epi8(wv[r], wv[r]);                                                        \
                dw[r] = scale_bits(blk[0]);                                                                    \
            }                                                                                                  \
            for (int t = 0; t < RN; t++) {                                                                     \
                const pith_block_q8a *xb = (const pith_block_q8a *)(x + (size_t)t * xs) + b;                   \
                __m256i q = _mm256_loadu_si256((const __m256i *)xb->qs);                                       \
                for (int r = 0; r < RM; r++) {                                                                 \
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(q, wv[r])), ones); \
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[r] * xb->d), acc[r][t]); \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (int r = 0; r < RM; r++)                                                                           \
            for (int t = 0; t < RN; t++) store(&y[(size_t)t * ldy + r], hsum(acc[r][t]), accumulate);          \
    }

#define MXFP4_ROW(RM) MXFP4_TILE(RM, 1) MXFP4_TILE(RM, 2) MXFP4_TILE(RM, 3) MXFP4_TILE(RM, 4)
MXFP4_ROW(1)
MXFP4_ROW(2)
MXFP4_ROW(3)
MXFP4_ROW(4)

typedef void (*fixed_tile)(int nb, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y, size_t ldy,
                           bool accumulate);
#define ROW_ENTRIES(RM) {tile_##RM##_1, tile_##RM##_2, tile_##RM##_3, tile_##RM##_4}
static const fixed_tile tiles[4][4] = {ROW_ENTRIES(1), ROW_ENTRIES(2), ROW_ENTRIES(3), ROW_ENTRIES(4)};

void pith_tile_mxfp4_avx2(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                          size_t ldy, bool accumulate) {
    for (int t = 0; t < rn; t += 4) {
        int n = rn - t < 4 ? rn - t : 4;
        tiles[rm - 1][n - 1](K / 32, w, ws, (const uint8_t *)x + (size_t)t * xs, xs, y + (size_t)t * ldy, ldy,
                             accumulate);
    }
}
#else
void pith_tile_mxfp4_avx2(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                          size_t ldy, bool accumulate) {
    pith_tile_mxfp4_scalar(K, w, ws, rm, x, xs, rn, y, ldy, accumulate);
}
#endif

/* ---- tables ---- */

static pith_cpu_kernels extended[4];
static const pith_cpu_kernels *bases[4];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void extend_all(void) {
    bases[0] = pith_cpu_kernels_scalar();
    bases[1] = pith_cpu_kernels_avx2();
    bases[2] = pith_cpu_kernels_avx2_vnni();
    bases[3] = pith_cpu_kernels_avx512_vnni();
    for (int i = 0; i < 4; i++) {
        if (!bases[i]) continue;
        extended[i] = *bases[i];
        extended[i].tile[PITH_W_MXFP4] = i == 0   ? pith_tile_mxfp4_scalar
                                         : i == 3 ? pith_tile_mxfp4_avx512
                                                  : pith_tile_mxfp4_avx2;
        extended[i].tile_rn[PITH_W_MXFP4] = 4;
    }
}

const pith_cpu_kernels *pith_kernels_with_mxfp4(const pith_cpu_kernels *k) {
    pthread_once(&once, extend_all);
    for (int i = 0; i < 4; i++)
        if (k && (k == bases[i] || k == &extended[i])) return &extended[i];
    return k;
}
