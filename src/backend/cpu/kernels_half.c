/* Packed F16 / BF16 weights (layout in kernels_half.h): the portable packers and the AVX2 (8 rows, ymm)
 * and AVX-512 (16 rows, zmm) packed tiles.
 *
 * Why a packed layout: decode reads every weight once, so it runs at memory speed only if the loads
 * stream sequentially and the arithmetic never waits. The file layout, read one row at a time, puts
 * every product of a row on one FMA dependency chain; here each instruction advances R rows, four
 * chains per output hide the FMA latency, and one software-prefetched stream covers DRAM latency. */
#include <string.h>

#include "backend/cpu/prefetch.h"
#include "backend/cpu/kernels_half.h"

void pith_pack_half_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / 8, rem = K % 8;
    for (int h = 0; h < 2; h++) {
        uint8_t *quad = dst + (size_t)h * 8 * K;
        for (int r = 0; r < 4; r++) {
            const uint8_t *row = w + (size_t)(4 * h + r) * w_stride;
            for (int b = 0; b < nb; b++) memcpy(quad + 64 * (size_t)b + 16 * r, row + 16 * (size_t)b, 16);
            memcpy(quad + 64 * (size_t)nb + 2 * rem * r, row + 16 * (size_t)nb, 2 * (size_t)rem);
        }
    }
}

void pith_pack_half_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    for (int r = 0; r < 16; r++) {
        const uint8_t *row = w + (size_t)r * w_stride;
        for (int k = 0; k < K; k++) memcpy(dst + 2 * ((size_t)k * 16 + r), row + 2 * (size_t)k, 2);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "backend/cpu/half_load.h"
#include "backend/cpu/unroll.h"
#define CHAINS 4
/* Prefetch distance in bytes of the group stream: far enough ahead to cover DRAM latency at full
 * bandwidth on one core (see tile_packed_impl in kernels_avx2.c for the measurements behind the same
 * choice for the integer tiles). */
#define PREFETCH_YMM 6144
#define PREFETCH_ZMM 12288

/* ---- AVX2: 8 rows as two quads, ymm ---- */

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT
/* Tokens per pass over a quad: 4 rows x 3 tokens = 12 accumulators of the 16 ymm registers, the
 * register blocking of the unpacked AVX2 tile (3 multiply-adds per weight conversion). */
#define YMM_MAX_RN 3


INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 4 rows (one quad, q) x RN tokens. Each output: 8 lane sums over the 8-element blocks, their
 * horizontal sum, then the K % 8 tail in order. PF: prefetch the quad's stream (the first pass over
 * it; later passes find it in cache). */
INLINE void quad_impl(int K, const uint8_t *q, const uint8_t *x, size_t xs, float *y, size_t ldy,
                      bool accumulate, bool bf16, const int RN, const bool PF) {
    const float *xr[YMM_MAX_RN];
    __m256 acc[4][YMM_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const float *)(x + t * xs);
        UNROLL for (int r = 0; r < 4; r++) acc[r][t] = _mm256_setzero_ps();
    }
    const int nb = K / 8;
    for (int b = 0; b < nb; b++) {
        const uint8_t *qb = q + 64 * (size_t)b; /* one line per block */
        if (PF) pith_prefetch_stream((const char *)qb + PREFETCH_YMM);
        __m256 xv[YMM_MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) xv[t] = _mm256_loadu_ps(xr[t] + 8 * b);
        UNROLL for (int r = 0; r < 4; r++) {
            __m256 w = pith_half8_to_f32(qb + 16 * r, bf16);
            UNROLL for (int t = 0; t < RN; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    const int rem = K - 8 * nb;
    const uint8_t *tail = q + 64 * (size_t)nb;
    UNROLL for (int r = 0; r < 4; r++)
        UNROLL for (int t = 0; t < RN; t++) {
            float s = hsum8(acc[r][t]);
            for (int j = 0; j < rem; j++) s += pith_half1_to_f32(tail + 2 * (rem * r + j), bf16) * xr[t][8 * nb + j];
            float *yt = y + t * ldy + r;
            *yt = accumulate ? *yt + s : s;
        }
}

/* One pass of N tokens, in a switch on 2 N + (first pass): only the first pass over the weights
 * prefetches them. */
#define PASS(IMPL, N, BF16)                                                                                \
    case 2 * N + 1: IMPL(K, w, xt, xs, yt, ldy, accumulate, BF16, N, true); break;                         \
    case 2 * N: IMPL(K, w, xt, xs, yt, ldy, accumulate, BF16, N, false); break;

/* Each quad in turn (one sequential stream), its tokens in passes of at most 3, split evenly (5
 * tokens: 3 + 2). */
#define QUADS_ENTRY(NAME, BF16)                                                                            \
    TGT void NAME(int K, const uint8_t *g, const void *x, size_t xs, int rn, float *y, size_t ldy,          \
                  bool accumulate) {                                                                       \
        int passes = (rn + YMM_MAX_RN - 1) / YMM_MAX_RN;                                                   \
        for (int h = 0; h < 2; h++) {                                                                      \
            const uint8_t *w = g + (size_t)h * 8 * K;                                                      \
            for (int p = 0, t = 0; p < passes; p++) {                                                      \
                int n = (rn - t) / (passes - p);                                                           \
                const uint8_t *xt = (const uint8_t *)x + t * xs;                                           \
                float *yt = y + t * ldy + 4 * h;                                                           \
                switch (2 * n + (p == 0)) {                                                                \
                PASS(quad_impl, 1, BF16) PASS(quad_impl, 2, BF16) PASS(quad_impl, 3, BF16)                 \
                }                                                                                          \
                t += n;                                                                                    \
            }                                                                                              \
        }                                                                                                  \
    }

QUADS_ENTRY(pith_tile_packed_f16_x8, false)
QUADS_ENTRY(pith_tile_packed_bf16_x8, true)

/* ---- AVX-512: 16 rows, zmm ---- */

#define TGTZ __attribute__((target("avx2,fma,f16c,avx512f")))
#define INLINEZ static inline __attribute__((always_inline)) TGTZ
/* 4 chains x 6 tokens = 24 accumulators of the 32 zmm registers: 6 multiply-adds per weight conversion
 * (measured: prefill runs a tenth faster than with 4) */
#define ZMM_MAX_RN 6

INLINEZ __m512 load16(const uint8_t *p, bool bf16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (!bf16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINEZ void tile16_impl(int K, const uint8_t *g, const uint8_t *x, size_t xs, float *y, size_t ldy,
                         bool accumulate, bool bf16, const int RN, const bool PF) {
    const float *xr[ZMM_MAX_RN];
    __m512 acc[CHAINS][ZMM_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const float *)(x + t * xs);
        UNROLL for (int c = 0; c < CHAINS; c++) acc[c][t] = _mm512_setzero_ps();
    }
    int k = 0;
    for (; k + CHAINS <= K; k += CHAINS) {
        const uint8_t *gk = g + 32 * (size_t)k; /* 128 bytes: two lines per step */
        if (PF) {
            pith_prefetch_stream((const char *)gk + PREFETCH_ZMM);
            pith_prefetch_stream((const char *)gk + PREFETCH_ZMM + 64);
        }
        UNROLL for (int c = 0; c < CHAINS; c++) {
            __m512 w = load16(gk + 32 * c, bf16);
            UNROLL for (int t = 0; t < RN; t++) acc[c][t] = _mm512_fmadd_ps(w, _mm512_set1_ps(xr[t][k + c]), acc[c][t]);
        }
    }
    /* K % 4 left: the same chains in the same order (constant chain indices keep acc in registers) */
    UNROLL for (int c = 0; c < CHAINS - 1; c++) {
        if (k + c >= K) break;
        __m512 w = load16(g + 32 * (size_t)(k + c), bf16);
        UNROLL for (int t = 0; t < RN; t++) acc[c][t] = _mm512_fmadd_ps(w, _mm512_set1_ps(xr[t][k + c]), acc[c][t]);
    }
    UNROLL for (int t = 0; t < RN; t++) {
        __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]), _mm512_add_ps(acc[2][t], acc[3][t]));
        float *yt = y + t * ldy;
        if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(yt), v);
        _mm512_storeu_ps(yt, v);
    }
}

/* Tokens in passes of at most 6, split evenly (8 tokens: 4 + 4 rather than 6 + 2, so no pass is short
 * of work for each weight it converts). */
#define ZMM_ENTRY(NAME, BF16)                                                                              \
    TGTZ void NAME(int K, const uint8_t *w, const void *x, size_t xs, int rn, float *y, size_t ldy,         \
                   bool accumulate) {                                                                      \
        int passes = (rn + ZMM_MAX_RN - 1) / ZMM_MAX_RN;                                                   \
        for (int p = 0, t = 0; p < passes; p++) {                                                          \
            int n = (rn - t) / (passes - p);                                                               \
            const uint8_t *xt = (const uint8_t *)x + t * xs;                                               \
            float *yt = y + t * ldy;                                                                       \
            switch (2 * n + (p == 0)) {                                                                    \
            PASS(tile16_impl, 1, BF16) PASS(tile16_impl, 2, BF16) PASS(tile16_impl, 3, BF16)               \
            PASS(tile16_impl, 4, BF16) PASS(tile16_impl, 5, BF16) PASS(tile16_impl, 6, BF16)               \
            }                                                                                              \
            t += n;                                                                                        \
        }                                                                                                  \
    }

ZMM_ENTRY(pith_tile_packed_f16_x16, false)
ZMM_ENTRY(pith_tile_packed_bf16_x16, true)

#endif
