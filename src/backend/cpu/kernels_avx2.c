/* AVX2 + FMA + F16C kernels, and the AVX-VNNI / AVX-512 VNNI packed integer tiles of the tables built on
 * them. Every function carries its target attribute, so this file builds without -m flags, and each runs
 * only after its table's constructor (pith_cpu_kernels_avx2 and friends) has checked the processor.
 *
 * Tiles are written once as always-inline templates over (RM rows, RN tokens) and instantiated for the
 * shapes the entry points pick (see TILE_ENTRY): with constant RM and RN the compiler keeps the
 * accumulators in registers. Every (row, token) output is computed by the same sequence of operations
 * whatever the tile shape, so results never depend on how a batch was split.
 *
 * Integer tiles (Q8_0, Q4_0 weights against q8a activations) use the sign trick: maddubs multiplies
 * unsigned by signed bytes, so feed it |w| and x with w's sign moved onto it; pairs of products
 * (at most 2 * 128 * 127) fit in int16, and madd with ones widens them to int32 exactly. K-quant tiles
 * feed maddubs their unsigned quants directly and apply the offsets (mins, -32) through the activation
 * block sums. Packed tiles (Q8_0, Q4_0, IQ4_NL repacked at load, pack.c; the other K-quants in
 * kernels_kquant_ymm.c and kernels_kquant_zmm.c) compute 8 or 16 rows at once. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <math.h>
#include <immintrin.h>

#include "backend/cpu/prefetch.h"
#include "backend/cpu/half_load.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/unroll.h"
#include "backend/cpu/kernels_half.h"
#include "backend/cpu/kernels_kquant.h"
#include "backend/cpu/mxfp4.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT
/* the most tokens one tile instantiation takes */
#define IMPL_MAX_RN 4

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE void store_out(float *y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

/* ---- float weights (F32, F16, BF16) against float activations ---- */

INLINE __m256 load_w8(const uint8_t *w, int k, pith_wtype type) {
    if (type == PITH_W_F32) return _mm256_loadu_ps((const float *)(w + 4 * (size_t)k));
    return pith_half8_to_f32(w + 2 * (size_t)k, type == PITH_W_BF16);
}

INLINE float load_w1(const uint8_t *w, int k, pith_wtype type) {
    if (type == PITH_W_F32) {
        float f;
        memcpy(&f, w + 4 * (size_t)k, 4);
        return f;
    }
    return pith_half1_to_f32(w + 2 * (size_t)k, type == PITH_W_BF16);
}

INLINE void tile_float_impl(int K, const uint8_t *w, size_t ws, const void *x, size_t xs, float *y,
                            size_t ldy, bool accumulate, pith_wtype type, const int RM, const int RN) {
    const float *xr[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) xr[t] = (const float *)((const uint8_t *)x + t * xs);
    __m256 acc[PITH_TILE_MAX_RM][IMPL_MAX_RN];
    UNROLL for (int r = 0; r < RM; r++)
        UNROLL for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[IMPL_MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) xv[t] = _mm256_loadu_ps(xr[t] + k);
        UNROLL for (int r = 0; r < RM; r++) {
            __m256 wv = load_w8(w + r * ws, k, type);
            UNROLL for (int t = 0; t < RN; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    UNROLL for (int r = 0; r < RM; r++) {
        UNROLL for (int t = 0; t < RN; t++) {
            float s = hsum(acc[r][t]);
            for (int kk = k; kk < K; kk++) s += load_w1(w + r * ws, kk, type) * xr[t][kk];
            store_out(&y[t * ldy + r], s, accumulate);
        }
    }
}

/* ---- Q8_0 / Q4_0 weights against q8a activations ---- */

/* 16 bytes of nibbles (low nibbles elements 0-15, high ones 16-31) as 32 bytes in element order. */
INLINE __m256i nibbles32(const uint8_t *p) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_insertf128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* IQ4_NL / IQ4_XS: nibbles to their signed values (pith_iq4_values), a byte shuffle per 128-bit lane. */
INLINE __m256i iq4_lookup(__m256i nibbles) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pith_iq4_values)), nibbles);
}

/* The 32 quants of a Q8_0 or IQ4_NL block (signed) or of a Q4_0 block (its unsigned nibbles, 0..15). */
INLINE __m256i unpack_q32(const uint8_t *blk, pith_wtype type) {
    if (type == PITH_W_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    if (type == PITH_W_IQ4_NL) return iq4_lookup(nibbles32(blk + 2));
    return nibbles32(blk + 2);
}

/* Q8_0: sum_b dw dx <w, x> with the sign trick. Q4_0: its nibbles n = w + 8 are unsigned already, so
 * maddubs takes them as they are and the kernel subtracts 8 dw s (s = dx * sum(x quants), stored with
 * the activations) per block; that saves the sign trick and the -8 on every (row, token) block. */
INLINE void tile_q32_impl(int K, const uint8_t *w, size_t ws, const void *x, size_t xs, float *y,
                          size_t ldy, bool accumulate, pith_wtype type, const int RM, const int RN) {
    const size_t bb = type == PITH_W_Q8_0 ? PITH_Q8_0_BYTES : PITH_Q4_0_BYTES;
    const pith_block_q8a *xr[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
    const __m256i ones = _mm256_set1_epi16(1);
    /* Even and odd blocks go to separate accumulators: a single row against a single token is one
     * dependent chain of FMAs otherwise. Every shape does the same, so an output never depends on how
     * many tokens shared its tile (a batch gives bit-identical results to single steps). */
    __m256 acc[2][PITH_TILE_MAX_RM][IMPL_MAX_RN];
    float offset[PITH_TILE_MAX_RM][IMPL_MAX_RN];
    UNROLL for (int r = 0; r < RM; r++)
        UNROLL for (int t = 0; t < RN; t++) {
            acc[0][r][t] = acc[1][r][t] = _mm256_setzero_ps();
            offset[r][t] = 0.0f;
        }
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b += 2) {
        UNROLL for (int h = 0; h < 2; h++) {
            if (h == 1 && b + 1 == nb) break; /* odd block count */
            __m256i xq[IMPL_MAX_RN];
            float dx[IMPL_MAX_RN];
            UNROLL for (int t = 0; t < RN; t++) {
                xq[t] = _mm256_loadu_si256((const __m256i *)xr[t][b + h].qs);
                dx[t] = xr[t][b + h].d;
            }
            UNROLL for (int r = 0; r < RM; r++) {
                const uint8_t *blk = w + r * ws + (b + h) * bb;
                /* the hardware prefetcher alone leaves gaps between short rows */
                _mm_prefetch((const char *)blk + 512, _MM_HINT_T0);
                __m256i wq = unpack_q32(blk, type);
                float dw = f16_at(blk);
                if (type != PITH_W_Q4_0) { /* signed quants: Q8_0, IQ4_NL */
                    __m256i aw = _mm256_abs_epi8(wq);
                    UNROLL for (int t = 0; t < RN; t++) {
                        __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[t], wq));
                        __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                        acc[h][r][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * dx[t]), acc[h][r][t]);
                    }
                } else {
                    UNROLL for (int t = 0; t < RN; t++) {
                        __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(wq, xq[t]), ones));
                        acc[h][r][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * dx[t]), acc[h][r][t]);
                        offset[r][t] += dw * xr[t][b + h].s;
                    }
                }
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++)
        UNROLL for (int t = 0; t < RN; t++) {
            float v = hsum(_mm256_add_ps(acc[0][r][t], acc[1][r][t]));
            store_out(&y[t * ldy + r], type != PITH_W_Q4_0 ? v : v - 8.0f * offset[r][t], accumulate);
        }
}

#ifndef PITH_PACKED_PREFETCH_BYTES
#define PITH_PACKED_PREFETCH_BYTES 6144
#endif
#define PACKED_PREFETCH_BYTES PITH_PACKED_PREFETCH_BYTES
/* ---- packed Q8_0 / Q4_0 groups (pack.c) against q8a activations ---- */

/* Lane r of the result: the sum of all int32 lanes of v[r]. Half sums of 4 rows per 128-bit lane first,
 * then the lanes' halves added. */
INLINE __m256i reduce8_i32(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* 8 rows x RN tokens, Q8_0 and IQ4_NL (Q4_0's bytes in its 8-row layout). Per block column and token,
 * the 8 rows' exact integer dot products come out as one vector, scaled by dw * dx and added to the
 * token's accumulator with one FMA; each output's sequence of operations is the same for every RN
 * (batches give the same bits as single steps). Q8_0 uses the sign trick and widens at once (a pair can
 * reach 2 * 128 * 127); IQ4_NL looks its nibbles up and then goes as Q8_0. */
INLINE void tile_packed_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                             bool accumulate, pith_wtype type, const int RN) {
    const size_t cb = 8 * (type == PITH_W_Q8_0 ? PITH_Q8_0_BYTES : PITH_Q4_0_BYTES);
    const pith_block_q8a *xr[IMPL_MAX_RN];
    __m256 acc[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
        acc[t] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(15);
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++, g += cb) {
        /* A group is one long sequential stream; a software prefetch this far ahead (measured: 1 KiB
         * loses a fifth of decode speed, 4-6 KiB is best) covers DRAM latency at full bandwidth.
         * The hint: prefetch.h. */
        const char *pf = (const char *)g + PACKED_PREFETCH_BYTES;
        pith_prefetch_stream(pf);
        pith_prefetch_stream(pf + 64);
        if (type == PITH_W_Q8_0) {
            pith_prefetch_stream(pf + 128);
            pith_prefetch_stream(pf + 192);
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        __m256i q[8];
        if (type == PITH_W_IQ4_NL) {
            UNROLL for (int p = 0; p < 4; p++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * p));
                __asm__("" : "+x"(raw)); /* one load, not one per use */
                q[2 * p] = iq4_lookup(_mm256_and_si256(raw, low));
                q[2 * p + 1] = iq4_lookup(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low));
            }
        } else {
            UNROLL for (int r = 0; r < 8; r++) q[r] = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * r));
        }
        UNROLL for (int t = 0; t < RN; t++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)xr[t][b].qs);
            __m256i p32[8];
            UNROLL for (int r = 0; r < 8; r++)
                p32[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q[r]), _mm256_sign_epi8(xq, q[r])), ones);
            __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&xr[t][b].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8_i32(p32)), scale, acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) {
        float *yt = y + t * ldy;
        __m256 v = accumulate ? _mm256_add_ps(_mm256_loadu_ps(yt), acc[t]) : acc[t];
        _mm256_storeu_ps(yt, v);
    }
}

/* The packed-tile entry points of every table: split the tokens into tiles of at most IMPL_MAX_RN and
 * call the table's tile (ATTR: its target attribute, IMPL: its tile) with a compile-time tile width. */
#define PACKED_ENTRY(NAME, ATTR, IMPL, TYPE)                                                             \
    static ATTR void NAME(int K, const uint8_t *g, const void *x, size_t xs, int rn, float *y, size_t ldy, \
                          bool accumulate) {                                                             \
        for (int t = 0; t < rn; t += IMPL_MAX_RN) {                                                      \
            const uint8_t *xt = (const uint8_t *)x + t * xs;                                             \
            float *yt = y + t * ldy;                                                                     \
            switch (rn - t < IMPL_MAX_RN ? rn - t : IMPL_MAX_RN) {                                       \
            case 1: IMPL(K, g, xt, xs, yt, ldy, accumulate, TYPE, 1); break;                             \
            case 2: IMPL(K, g, xt, xs, yt, ldy, accumulate, TYPE, 2); break;                             \
            case 3: IMPL(K, g, xt, xs, yt, ldy, accumulate, TYPE, 3); break;                             \
            default: IMPL(K, g, xt, xs, yt, ldy, accumulate, TYPE, 4); break;                            \
            }                                                                                            \
        }                                                                                                \
    }

/* Q4_0 and MXFP4 in the 8-row lanes layout (pack.c) with plain AVX2: int32 lane r holds 4 consecutive
 * quants of row r (MXFP4's looked up as their doubled values + 12), so vpmaddubsw against 4 activations
 * broadcast to every lane gives each row's int16 pair sums in its own lane, the pairs of several
 * vectors add in int16, and one vpmaddwd widens them: no horizontal reduction (the other layout's
 * vphaddw and vperm2i128 cost Zen 1-class cores more than the products). Bounds: a pair is at most
 * 2 * 15 * 127 = 3810 for Q4_0 (all 8 vectors add in int16: 30480), 2 * 24 * 127 = 6096 for MXFP4 (4 at a
 * time: 24384). The offsets (8, 12) come out through the activation sums as in tile_packed_impl, whose
 * arithmetic per output this is (the same integers, the same float steps). */
INLINE void tile_lanes_ub_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                               bool accumulate, pith_wtype type, const int RN) {
    const bool mx = type == PITH_W_MXFP4;
    const size_t cb = 8 * (mx ? PITH_MXFP4_BYTES : PITH_Q4_0_BYTES);
    const int qoff = mx ? 8 : 16; /* the quants, after the scales */
    const pith_block_q8a *xr[IMPL_MAX_RN];
    __m256 acc[IMPL_MAX_RN], off[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
        acc[t] = off[t] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(15);
    const __m256i mx12 = _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pith_mxfp4_values)),
                                         _mm256_set1_epi8(12));
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++, g += cb) {
        const char *pf = (const char *)g + PACKED_PREFETCH_BYTES;
        pith_prefetch_stream(pf);
        pith_prefetch_stream(pf + 64);
        __m256 dw;
        if (mx) {
            /* 2^(e - 128) as float bits, as in tile_packed_impl */
            __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)g));
            __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
            __m256i denorm = _mm256_sllv_epi32(_mm256_set1_epi32(0x200000), e);
            __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
            dw = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, denorm, small));
        } else {
            dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        }
        __m256i q[8]; /* q[k]: elements 4k..4k+3 of every row */
        UNROLL for (int v = 0; v < 4; v++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(g + qoff + 32 * v));
            __asm__("" : "+x"(raw)); /* one load, not one per use */
            q[v] = _mm256_and_si256(raw, low);
            q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            if (mx) {
                q[v] = _mm256_shuffle_epi8(mx12, q[v]);
                q[v + 4] = _mm256_shuffle_epi8(mx12, q[v + 4]);
            }
        }
        UNROLL for (int t = 0; t < RN; t++) {
            const int8_t *xq = xr[t][b].qs;
            __m256i p[8];
            UNROLL for (int k = 0; k < 8; k++) {
                int32_t xk;
                memcpy(&xk, xq + 4 * k, 4);
                p[k] = _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(xk));
            }
            /* two chains of int16 sums (elements 0-15 and 16-31) */
            __m256i lo = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
            __m256i hi = _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
            __m256i dots = mx ? _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones))
                              : _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones);
            __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&xr[t][b].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), scale, acc[t]);
            off[t] = _mm256_fmadd_ps(dw, _mm256_broadcast_ss(&xr[t][b].s), off[t]);
        }
    }
    const __m256 offset = _mm256_set1_ps(mx ? 12.0f : 8.0f);
    UNROLL for (int t = 0; t < RN; t++) {
        __m256 v = _mm256_fnmadd_ps(offset, off[t], acc[t]);
        float *yt = y + t * ldy;
        if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(yt), v);
        _mm256_storeu_ps(yt, v);
    }
}

PACKED_ENTRY(tile_packed_q8_0, TGT, tile_packed_impl, PITH_W_Q8_0)
PACKED_ENTRY(tile_packed_iq4_nl, TGT, tile_packed_impl, PITH_W_IQ4_NL)
PACKED_ENTRY(tile_packed_ub_q4_0, TGT, tile_lanes_ub_impl, PITH_W_Q4_0)
PACKED_ENTRY(tile_packed_ub_mxfp4, TGT, tile_lanes_ub_impl, PITH_W_MXFP4)

/* AVX-VNNI: vpdpbusd multiplies unsigned by signed bytes and adds each 4 products to an int32 lane
 * without an int16 step (no saturation, no madd). */
#define TGTV __attribute__((target("avx2,fma,f16c,avxvnni")))
#define INLINEV static inline __attribute__((always_inline)) TGTV

/* Q4_0, Q8_0 and IQ4_NL in the lanes layouts (pack.c): int32 lane r holds 4 consecutive quants of row r, so
 * vpdpbusd against 4 activations broadcast to every lane accumulates all 8 rows at once, with no
 * horizontal reduction. The unsigned quants' offset (Q4_0: +8, Q8_0 and IQ4_NL's looked-up values: +128) is taken out in floats
 * through the activation sums, as in the AVX2 Q4_0 tile: per block, dw (dx sum(n x) - offset s). */
INLINEV void tile_lanes_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                             bool accumulate, pith_wtype type, const int RN) {
    const size_t cb = 8 * (type == PITH_W_Q8_0 ? PITH_Q8_0_BYTES : PITH_Q4_0_BYTES);
    const pith_block_q8a *xr[IMPL_MAX_RN];
    __m256 acc[IMPL_MAX_RN], off[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
        acc[t] = off[t] = _mm256_setzero_ps();
    }
    const __m256i low = _mm256_set1_epi8(15);
    /* IQ4_NL: its values + 128 (unsigned for vpdpbusd; the offset comes out like Q8_0's) */
    const __m256i iq4 = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pith_iq4_values)),
                                         _mm256_set1_epi8((char)0x80));
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++, g += cb) {
        const char *pf = (const char *)g + PACKED_PREFETCH_BYTES;
        pith_prefetch_stream(pf);
        pith_prefetch_stream(pf + 64);
        if (type == PITH_W_Q8_0) {
            pith_prefetch_stream(pf + 128);
            pith_prefetch_stream(pf + 192);
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        __m256i q[8]; /* q[k]: elements 4k..4k+3 of every row */
        if (type == PITH_W_Q4_0 || type == PITH_W_IQ4_NL) {
            UNROLL for (int v = 0; v < 4; v++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * v));
                __asm__("" : "+x"(raw)); /* one load, not one per use */
                q[v] = _mm256_and_si256(raw, low);
                q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                if (type == PITH_W_IQ4_NL) {
                    q[v] = _mm256_shuffle_epi8(iq4, q[v]);
                    q[v + 4] = _mm256_shuffle_epi8(iq4, q[v + 4]);
                }
            }
        } else {
            UNROLL for (int v = 0; v < 8; v++) q[v] = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * v));
        }
        UNROLL for (int t = 0; t < RN; t++) {
            const int8_t *xq = xr[t][b].qs;
            /* two independent chains, so the adds do not wait on each other's latency */
            __m256i d0 = _mm256_setzero_si256(), d1 = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k += 2) {
                int32_t x0, x1;
                memcpy(&x0, xq + 4 * k, 4);
                memcpy(&x1, xq + 4 * k + 4, 4);
                d0 = _mm256_dpbusd_avx_epi32(d0, q[k], _mm256_set1_epi32(x0));
                d1 = _mm256_dpbusd_avx_epi32(d1, q[k + 1], _mm256_set1_epi32(x1));
            }
            __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&xr[t][b].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(d0, d1)), scale, acc[t]);
            off[t] = _mm256_fmadd_ps(dw, _mm256_broadcast_ss(&xr[t][b].s), off[t]);
        }
    }
    const __m256 offset = _mm256_set1_ps(type == PITH_W_Q4_0 ? 8.0f : 128.0f);
    UNROLL for (int t = 0; t < RN; t++) {
        __m256 v = _mm256_fnmadd_ps(offset, off[t], acc[t]);
        float *yt = y + t * ldy;
        if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(yt), v);
        _mm256_storeu_ps(yt, v);
    }
}


PACKED_ENTRY(tile_packed_vnni_q8_0, TGTV, tile_lanes_impl, PITH_W_Q8_0)
PACKED_ENTRY(tile_packed_vnni_q4_0, TGTV, tile_lanes_impl, PITH_W_Q4_0)
PACKED_ENTRY(tile_packed_vnni_iq4_nl, TGTV, tile_lanes_impl, PITH_W_IQ4_NL)

/* AVX-512 VNNI: the lanes tile on 16 rows (16-row groups, pack.c), one zmm holding all 16 rows' int32
 * sums, so each instruction does twice the work of the AVX-VNNI tile. Same arithmetic per output. */
#define TGTZ __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINEZ static inline __attribute__((always_inline)) TGTZ

/* The 16 rows' scales of a block: f16, or MXFP4's E8M0 bytes as 2^(e - 128) in float bits, as the
 * file-layout tiles' table has them: (e - 1) << 23 for e >= 2, the denormals 2^-127 and 2^-128 below. */
INLINEZ __m512 group_scales16(const uint8_t *g, const bool mx) {
    if (!mx) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
    __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)g));
    __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    __m512i denorm = _mm512_sllv_epi32(_mm512_set1_epi32(0x200000), e);
    __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, denorm));
}

/* The nibble lookup of IQ4_NL (its values + 128: unsigned for vpdpbusd, the offset comes out like
 * Q8_0's) or MXFP4 (the doubled E2M1 values, integers -12..12, + 128, against a scale of 2^(e - 128)),
 * in every 128-bit lane. */
INLINEZ __m512i lookup16(const bool mx) {
    return _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(mx ? pith_mxfp4_values : pith_iq4_values))),
        _mm512_set1_epi8((char)0x80));
}

INLINEZ void tile_lanes16_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                               bool accumulate, pith_wtype type, const int RN) {
    const bool mx = type == PITH_W_MXFP4;
    const size_t cb = 16 * (type == PITH_W_Q8_0 ? PITH_Q8_0_BYTES : mx ? PITH_MXFP4_BYTES : PITH_Q4_0_BYTES);
    const int qoff = mx ? 16 : 32; /* the quants, after the scales */
    const pith_block_q8a *xr[IMPL_MAX_RN];
    __m512 acc[IMPL_MAX_RN], off[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
        acc[t] = off[t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(15);
    const __m512i iq4 = lookup16(mx);
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++, g += cb) {
        const char *pf = (const char *)g + 2 * PACKED_PREFETCH_BYTES;
        const int lines = type == PITH_W_Q8_0 ? 9 : 5; /* cb / 64, rounded up (IQ4_NL: Q4_0's size) */
        UNROLL for (int l = 0; l < lines; l++) pith_prefetch_stream(pf + 64 * l);
        const __m512 dw = group_scales16(g, mx);
        /* q[k]: elements 4k..4k+3 of every row. Q4_0's high nibbles stay in place (16 x their value):
         * masking alone is cheaper than shifting, and the low nibbles' sums are scaled by 16 to match,
         * once per block, so the block sums come out 16 x too large, exactly (see the end). */
        __m512i q[8];
        if (type == PITH_W_Q4_0) {
            UNROLL for (int v = 0; v < 4; v++) {
                __m512i raw = _mm512_loadu_si512((const void *)(g + 32 + 64 * v));
                __asm__("" : "+v"(raw)); /* one load, not one per use */
                q[v] = _mm512_and_si512(raw, low);
                q[v + 4] = _mm512_andnot_si512(low, raw);
            }
        } else if (type == PITH_W_IQ4_NL || mx) {
            UNROLL for (int v = 0; v < 4; v++) {
                __m512i raw = _mm512_loadu_si512((const void *)(g + qoff + 64 * v));
                __asm__("" : "+v"(raw));
                q[v] = _mm512_shuffle_epi8(iq4, _mm512_and_si512(raw, low));
                q[v + 4] = _mm512_shuffle_epi8(iq4, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low));
            }
        } else {
            UNROLL for (int v = 0; v < 8; v++) q[v] = _mm512_loadu_si512((const void *)(g + 32 + 64 * v));
        }
        UNROLL for (int t = 0; t < RN; t++) {
            const int8_t *xq = xr[t][b].qs;
            /* four chains of two (d[c]: q[2c] and q[2c + 1]): the block's sum is ready a few cycles
             * after its loads, so one token's loop is not bound by vpdpbusd latency */
            __m512i d[4];
            UNROLL for (int c = 0; c < 4; c++) {
                int32_t x0, x1;
                memcpy(&x0, xq + 8 * c, 4);
                memcpy(&x1, xq + 8 * c + 4, 4);
                d[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * c], _mm512_set1_epi32(x0));
                d[c] = _mm512_dpbusd_epi32(d[c], q[2 * c + 1], _mm512_set1_epi32(x1));
            }
            __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xr[t][b].d));
            __m512i lo = _mm512_add_epi32(d[0], d[1]), hi = _mm512_add_epi32(d[2], d[3]), sum;
            if (type == PITH_W_Q4_0) {
                sum = _mm512_add_epi32(_mm512_slli_epi32(lo, 4), hi); /* 16 x the block's sum */
            } else {
                sum = _mm512_add_epi32(lo, hi);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[t]);
            off[t] = _mm512_fmadd_ps(dw, _mm512_set1_ps(xr[t][b].s), off[t]);
        }
    }
    /* Q4_0's acc holds 16 x its sums (above): 16 (acc / 16 - 8 off) = acc - 128 off, then / 16, all
     * exact powers of two, so the same bits as accumulating the plain sums. */
    const __m512 offset = _mm512_set1_ps(128.0f);
    UNROLL for (int t = 0; t < RN; t++) {
        __m512 v = _mm512_fnmadd_ps(offset, off[t], acc[t]);
        if (type == PITH_W_Q4_0) v = _mm512_mul_ps(v, _mm512_set1_ps(0.0625f));
        float *yt = y + t * ldy;
        if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(yt), v);
        _mm512_storeu_ps(yt, v);
    }
}


/* Two adjacent 16-row groups (g and g + gs) in one pass: each activation broadcast feeds both groups'
 * products, which the one-group tile spends a broadcast on each (+12-25 % from cache, one thread). Per
 * output it computes exactly tile_lanes16_impl's integers and float steps, so the bits are the same
 * as two one-group calls (test_kernels): the block's 8 products in one vpdpbusd chain per group and
 * token (integer, so the same sum as the one-group tile's four chains), Q4_0's high nibbles shifted down
 * and the sum scaled by 16 after (the one-group tile's 16 x sum, the same integer). */
INLINEZ void tile_lanes16x2_impl(int K, const uint8_t *g, size_t gs, const void *x, size_t xs, float *y, size_t ldy,
                                 bool accumulate, pith_wtype type, const int RN) {
    const bool mx = type == PITH_W_MXFP4, q4 = type == PITH_W_Q4_0, q8 = type == PITH_W_Q8_0;
    const size_t cb = 16 * (q8 ? PITH_Q8_0_BYTES : mx ? PITH_MXFP4_BYTES : PITH_Q4_0_BYTES);
    const int qoff = mx ? 16 : 32;
    const pith_block_q8a *xr[IMPL_MAX_RN];
    __m512 acc[2][IMPL_MAX_RN], off[2][IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
        UNROLL for (int h = 0; h < 2; h++) acc[h][t] = off[h][t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(15);
    const __m512i iq4 = lookup16(mx);
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++, g += cb) {
        const uint8_t *gg[2] = {g, g + gs};
        UNROLL for (int h = 0; h < 2; h++) {
            const char *pf = (const char *)gg[h] + 2 * PACKED_PREFETCH_BYTES;
            const int lines = q8 ? 9 : 5; /* cb / 64, rounded up */
            for (int l = 0; l < lines; l++) pith_prefetch_stream(pf + 64 * l);
        }
        __m512i sum[2][IMPL_MAX_RN];
        UNROLL for (int h = 0; h < 2; h++) UNROLL for (int t = 0; t < RN; t++) sum[h][t] = _mm512_setzero_si512();
        /* q[h][0], q[h][1]: elements 4v..4v+3 and 16+4v..19+4v of group h's rows (Q8_0: 8v.. and 8v+4..) */
        UNROLL for (int v = 0; v < 4; v++) {
            __m512i q[2][2];
            UNROLL for (int h = 0; h < 2; h++) {
                if (q8) {
                    q[h][0] = _mm512_loadu_si512((const void *)(gg[h] + 32 + 64 * (2 * v)));
                    q[h][1] = _mm512_loadu_si512((const void *)(gg[h] + 32 + 64 * (2 * v + 1)));
                    continue;
                }
                __m512i raw = _mm512_loadu_si512((const void *)(gg[h] + qoff + 64 * v));
                __asm__("" : "+v"(raw)); /* one load, not one per use */
                __m512i lo = _mm512_and_si512(raw, low), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
                q[h][0] = q4 ? lo : _mm512_shuffle_epi8(iq4, lo);
                q[h][1] = q4 ? hi : _mm512_shuffle_epi8(iq4, hi);
            }
            UNROLL for (int t = 0; t < RN; t++) {
                int32_t x0, x1;
                memcpy(&x0, xr[t][b].qs + (q8 ? 8 * v : 4 * v), 4);
                memcpy(&x1, xr[t][b].qs + (q8 ? 8 * v + 4 : 16 + 4 * v), 4);
                const __m512i b0 = _mm512_set1_epi32(x0), b1 = _mm512_set1_epi32(x1);
                UNROLL for (int h = 0; h < 2; h++) {
                    sum[h][t] = _mm512_dpbusd_epi32(sum[h][t], q[h][0], b0);
                    sum[h][t] = _mm512_dpbusd_epi32(sum[h][t], q[h][1], b1);
                }
            }
        }
        UNROLL for (int h = 0; h < 2; h++) {
            const __m512 dw = group_scales16(gg[h], mx);
            UNROLL for (int t = 0; t < RN; t++) {
                __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xr[t][b].d));
                __m512i s16 = q4 ? _mm512_slli_epi32(sum[h][t], 4) : sum[h][t];
                acc[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s16), scale, acc[h][t]);
                off[h][t] = _mm512_fmadd_ps(dw, _mm512_set1_ps(xr[t][b].s), off[h][t]);
            }
        }
    }
    const __m512 offset = _mm512_set1_ps(128.0f);
    UNROLL for (int h = 0; h < 2; h++)
        UNROLL for (int t = 0; t < RN; t++) {
            __m512 v = _mm512_fnmadd_ps(offset, off[h][t], acc[h][t]);
            if (q4) v = _mm512_mul_ps(v, _mm512_set1_ps(0.0625f));
            float *yt = y + t * ldy + 16 * h;
            if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(yt), v);
            _mm512_storeu_ps(yt, v);
        }
}

#define PACKED2_ENTRY(NAME, TYPE)                                                                        \
    static TGTZ void NAME(int K, const uint8_t *g, size_t gs, const void *x, size_t xs, int rn, float *y,   \
                          size_t ldy, bool accumulate) {                                                 \
        for (int t = 0; t < rn; t += IMPL_MAX_RN) {                                                      \
            const uint8_t *xt = (const uint8_t *)x + t * xs;                                             \
            float *yt = y + t * ldy;                                                                     \
            switch (rn - t < IMPL_MAX_RN ? rn - t : IMPL_MAX_RN) {                                       \
            case 1: tile_lanes16x2_impl(K, g, gs, xt, xs, yt, ldy, accumulate, TYPE, 1); break;           \
            case 2: tile_lanes16x2_impl(K, g, gs, xt, xs, yt, ldy, accumulate, TYPE, 2); break;           \
            case 3: tile_lanes16x2_impl(K, g, gs, xt, xs, yt, ldy, accumulate, TYPE, 3); break;           \
            default: tile_lanes16x2_impl(K, g, gs, xt, xs, yt, ldy, accumulate, TYPE, 4); break;          \
            }                                                                                            \
        }                                                                                                \
    }

PACKED2_ENTRY(tile_packed2_zmm_q8_0, PITH_W_Q8_0)
PACKED2_ENTRY(tile_packed2_zmm_q4_0, PITH_W_Q4_0)
PACKED2_ENTRY(tile_packed2_zmm_iq4_nl, PITH_W_IQ4_NL)
PACKED2_ENTRY(tile_packed2_zmm_mxfp4, PITH_W_MXFP4)

PACKED_ENTRY(tile_packed_zmm_q8_0, TGTZ, tile_lanes16_impl, PITH_W_Q8_0)
PACKED_ENTRY(tile_packed_zmm_q4_0, TGTZ, tile_lanes16_impl, PITH_W_Q4_0)
PACKED_ENTRY(tile_packed_zmm_iq4_nl, TGTZ, tile_lanes16_impl, PITH_W_IQ4_NL)
PACKED_ENTRY(tile_packed_zmm_mxfp4, TGTZ, tile_lanes16_impl, PITH_W_MXFP4)

/* ---- K-quants against q8k activations ---- */

/* One super-block of one weight row, unpacked once and then used for up to 4 tokens: 8 vectors of 32
 * unsigned quants (in activation order), the int16 multipliers madd applies per 16-lane half (the
 * sub-block scales), and what the offset term needs: Q4_K its 8 mins (int16), to weigh the sums of
 * each sub-block's activations; Q6_K its 16 scales (int16), to weigh the activation bsums (its quants
 * carry +32). */
typedef struct kq_unpacked {
    __m256i q[8];
    __m256i scale[8];
    __m128i mins;     /* Q4_K */
    __m256i scales16; /* Q6_K */
    float d, dmin;
} kq_unpacked;

/* Q4_K's 12 scale bytes hold eight 6-bit scales and eight 6-bit mins: bytes 0-3 keep scales 0-3 and
 * bytes 4-7 mins 0-3 in their low 6 bits, their top 2 bits are the high bits of scales/mins 4-7, whose
 * low 4 bits are the nibbles of bytes 8-11. Rearranged with 32-bit masks into 8 scale bytes, then 8 min
 * bytes (the same values pith_q4k_scale_min gives one at a time). */
INLINE void q4k_scales_mins(const uint8_t *packed, uint8_t out[16]) {
    uint32_t a, b, c;
    memcpy(&a, packed, 4);
    memcpy(&b, packed + 4, 4);
    memcpy(&c, packed + 8, 4);
    uint32_t w[4] = {
        a & 0x3f3f3f3fu,                                            /* scales 0-3 */
        (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4),        /* scales 4-7 */
        b & 0x3f3f3f3fu,                                            /* mins 0-3 */
        ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4), /* mins 4-7 */
    };
    memcpy(out, w, 16);
}

INLINE void unpack_q4_k(const uint8_t *blk, kq_unpacked *u) {
    const __m256i low = _mm256_set1_epi8(15);
    uint8_t sm[16];
    q4k_scales_mins(blk + 4, sm);
    __m128i sm16 = _mm_loadu_si128((const __m128i *)sm);
    __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm16)); /* scale s in int16 lane s */
    u->mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm16, 8));
    for (int p = 0; p < 4; p++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * p));
        u->q[2 * p] = _mm256_and_si256(raw, low);
        u->q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
    }
    for (int g = 0; g < 8; g++) /* broadcast int16 lane g: bytes 2g, 2g+1 everywhere */
        u->scale[g] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * g + 1) << 8 | 2 * g)));
    u->d = f16_at(blk);
    u->dmin = f16_at(blk + 2);
}

/* Q5_K: Q4_K's nibbles with bit s of qh[l] as the fifth bit of element l of sub-block s (quants up
 * to 31: maddubs pairs stay below 2 * 31 * 127). */
INLINE void unpack_q5_k(const uint8_t *blk, kq_unpacked *u) {
    const __m256i low = _mm256_set1_epi8(15), bit4 = _mm256_set1_epi8(16);
    uint8_t sm[16];
    q4k_scales_mins(blk + 4, sm);
    __m128i sm16 = _mm_loadu_si128((const __m128i *)sm);
    __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm16));
    u->mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm16, 8));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
    for (int p = 0; p < 4; p++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 48 + 32 * p));
        /* bits 2p and 2p + 1 of qh moved to bit 0, then to bit 4 (16-bit shifts: the bits that cross into
         * the other byte are the ones the mask drops) */
        __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), 4), bit4);
        __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), 4), bit4);
        u->q[2 * p] = _mm256_or_si256(_mm256_and_si256(raw, low), h0);
        u->q[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), h1);
    }
    for (int g = 0; g < 8; g++)
        u->scale[g] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * g + 1) << 8 | 2 * g)));
    u->d = f16_at(blk);
    u->dmin = f16_at(blk + 2);
}

/* IQ4_XS: each sub-block's 32 values (signed, from the table) and its scale ls - 32. */
INLINE void unpack_iq4_xs(const uint8_t *blk, kq_unpacked *u) {
    for (int g = 0; g < 8; g++) {
        u->q[g] = iq4_lookup(nibbles32(blk + 8 + 16 * g));
        u->scale[g] = _mm256_set1_epi16((short)pith_iq4xs_scale(blk, g));
    }
    u->d = f16_at(blk);
    u->dmin = 0.0f;
}

INLINE void unpack_q6_k(const uint8_t *blk, kq_unpacked *u) {
    const __m256i low = _mm256_set1_epi8(15), bits45 = _mm256_set1_epi8(0x30);
    __m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + 192));
    u->scales16 = _mm256_cvtepi8_epi16(sc8); /* scale s in int16 lane s */
    for (int h = 0; h < 2; h++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
        __m256i qb = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        __m256i v[4];
        v[0] = _mm256_and_si256(qa, low);
        v[1] = _mm256_and_si256(qb, low);
        v[2] = _mm256_and_si256(_mm256_srli_epi16(qa, 4), low);
        v[3] = _mm256_and_si256(_mm256_srli_epi16(qb, 4), low);
        /* this half's 8 scales in both 128-bit lanes, so each lane's byte shuffle can reach them */
        __m256i sc = _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(u->scales16, 1)
                                                   : _mm256_castsi256_si128(u->scales16));
        for (int g = 0; g < 4; g++) {
            /* bit pair g of qh moved to bits 4-5 (16-bit shifts leak only into bits the mask drops) */
            __m256i hi = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2)
                       : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
            u->q[4 * h + g] = _mm256_or_si256(v[g], _mm256_and_si256(hi, bits45));
            /* low lane: scale 2g of this half (first 16 quants), high lane: scale 2g + 1 */
            __m128i lo_pick = _mm_set1_epi16((short)((4 * g + 1) << 8 | 4 * g));
            __m128i hi_pick = _mm_set1_epi16((short)((4 * g + 3) << 8 | (4 * g + 2)));
            u->scale[4 * h + g] =
                _mm256_shuffle_epi8(sc, _mm256_insertf128_si256(_mm256_castsi128_si256(lo_pick), hi_pick, 1));
        }
    }
    u->d = f16_at(blk + 208);
    u->dmin = 0.0f;
}

/* One row against RN tokens. Per super-block and token: exact integer sums (maddubs pairs stay below
 * 2 * 63 * 127, the scaled sums below 2^31), then Q4_K: d_x (d dots - dmin mins), Q6_K: d d_x (dots -
 * 32 offset). Each (row, token) pair computes the same way whatever RN is. */
INLINE void tile_kquant_impl(int K, const uint8_t *w, const void *x, size_t xs, float *y, size_t ldy,
                             bool accumulate, pith_wtype type, const int RN) {
    const size_t bb = type == PITH_W_Q4_K   ? PITH_Q4_K_BYTES
                    : type == PITH_W_Q5_K   ? PITH_Q5_K_BYTES
                    : type == PITH_W_IQ4_XS ? PITH_IQ4_XS_BYTES
                                            : PITH_Q6_K_BYTES;
    const pith_block_q8k *xr[IMPL_MAX_RN];
    float sum[IMPL_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        sum[t] = 0.0f;
    }
    kq_unpacked u;
    for (int b = 0; b < K / PITH_QK_K; b++) {
        const uint8_t *blk = w + b * bb;
        _mm_prefetch((const char *)blk + 512, _MM_HINT_T0);
        if (type == PITH_W_Q4_K) unpack_q4_k(blk, &u);
        else if (type == PITH_W_Q5_K) unpack_q5_k(blk, &u);
        else if (type == PITH_W_IQ4_XS) unpack_iq4_xs(blk, &u);
        else unpack_q6_k(blk, &u);
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            __m256i dots = _mm256_setzero_si256();
            UNROLL for (int g = 0; g < 8; g++) {
                __m256i xq = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * g));
                /* IQ4_XS's values are signed: the sign trick (pairs below 2 * 127 * 127) */
                __m256i p16 = type == PITH_W_IQ4_XS
                                  ? _mm256_maddubs_epi16(_mm256_abs_epi8(u.q[g]), _mm256_sign_epi8(xq, u.q[g]))
                                  : _mm256_maddubs_epi16(u.q[g], xq);
                dots = _mm256_add_epi32(dots, _mm256_madd_epi16(p16, u.scale[g]));
            }
            if (type == PITH_W_IQ4_XS) {
                sum[t] += u.d * xb->d * (float)hsum_i32(dots);
            } else if (type != PITH_W_Q6_K) {
                /* sums of each 32 activations (pairs of bsums) weighed by the mins */
                __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                               _mm_loadu_si128((const __m128i *)(xb->bsums + 8)));
                __m128i m = _mm_madd_epi16(u.mins, pairs);
                m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4e));
                m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0xb1));
                sum[t] += xb->d * (u.d * (float)hsum_i32(dots) - u.dmin * (float)_mm_cvtsi128_si32(m));
            } else {
                int off = hsum_i32(_mm256_madd_epi16(u.scales16, _mm256_loadu_si256((const __m256i *)xb->bsums)));
                sum[t] += u.d * xb->d * (float)(hsum_i32(dots) - 32 * off);
            }
        }
    }
    UNROLL for (int t = 0; t < RN; t++) store_out(&y[t * ldy], sum[t], accumulate);
}

/* ---- instantiations ---- */

/* Tiles of 4 rows x QUAD_RN tokens (register blocking: each weight load serves QUAD_RN tokens) while
 * that many tokens remain, then row by row for up to 4 tokens at a time. Row by row is what decode uses:
 * the weights then stream from memory strictly sequentially, which the hardware prefetcher follows far
 * better than four interleaved short rows. QUAD_RN 0: always row by row (the integer tiles amortize
 * their per-row unpacking over 4 tokens that way and need no more registers). */
#define TILE_ENTRY(NAME, IMPL, TYPE, QUAD_RN)                                                            \
    static TGT void NAME(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,  \
                         float *y, size_t ldy, bool accumulate) {                                       \
        int t0 = 0;                                                                                     \
        if (QUAD_RN && rm == PITH_TILE_MAX_RM)                                                          \
            for (; rn - t0 >= QUAD_RN; t0 += QUAD_RN)                                                   \
                IMPL(K, w, ws, (const uint8_t *)x + t0 * xs, xs, y + t0 * ldy, ldy, accumulate, TYPE,   \
                     PITH_TILE_MAX_RM, QUAD_RN ? QUAD_RN : 1);                                          \
        for (int r = 0; r < rm; r++) {                                                                  \
            for (int t = t0; t < rn; t += IMPL_MAX_RN) {                                                \
                const uint8_t *wr = w + r * ws, *xt = (const uint8_t *)x + t * xs;                      \
                float *yt = y + t * ldy + r;                                                            \
                switch (rn - t < IMPL_MAX_RN ? rn - t : IMPL_MAX_RN) {                                  \
                case 1: IMPL(K, wr, ws, xt, xs, yt, ldy, accumulate, TYPE, 1, 1); break;                \
                case 2: IMPL(K, wr, ws, xt, xs, yt, ldy, accumulate, TYPE, 1, 2); break;                \
                case 3: IMPL(K, wr, ws, xt, xs, yt, ldy, accumulate, TYPE, 1, 3); break;                \
                default: IMPL(K, wr, ws, xt, xs, yt, ldy, accumulate, TYPE, 1, 4); break;               \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }

TILE_ENTRY(tile_f32, tile_float_impl, PITH_W_F32, 3)
TILE_ENTRY(tile_f16, tile_float_impl, PITH_W_F16, 3)
TILE_ENTRY(tile_bf16, tile_float_impl, PITH_W_BF16, 3)
TILE_ENTRY(tile_q8_0, tile_q32_impl, PITH_W_Q8_0, 0)
TILE_ENTRY(tile_q4_0, tile_q32_impl, PITH_W_Q4_0, 0)
TILE_ENTRY(tile_iq4_nl, tile_q32_impl, PITH_W_IQ4_NL, 0)

/* K-quant tiles: row by row, up to 4 tokens per unpacked super-block. */
#define KQUANT_ENTRY(NAME, TYPE)                                                                         \
    static TGT void NAME(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,  \
                         float *y, size_t ldy, bool accumulate) {                                       \
        for (int r = 0; r < rm; r++) {                                                                  \
            for (int t = 0; t < rn; t += IMPL_MAX_RN) {                                                 \
                const uint8_t *wr = w + r * ws, *xt = (const uint8_t *)x + t * xs;                      \
                float *yt = y + t * ldy + r;                                                            \
                switch (rn - t < IMPL_MAX_RN ? rn - t : IMPL_MAX_RN) {                                  \
                case 1: tile_kquant_impl(K, wr, xt, xs, yt, ldy, accumulate, TYPE, 1); break;           \
                case 2: tile_kquant_impl(K, wr, xt, xs, yt, ldy, accumulate, TYPE, 2); break;           \
                case 3: tile_kquant_impl(K, wr, xt, xs, yt, ldy, accumulate, TYPE, 3); break;           \
                default: tile_kquant_impl(K, wr, xt, xs, yt, ldy, accumulate, TYPE, 4); break;          \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }

KQUANT_ENTRY(tile_q4_k, PITH_W_Q4_K)
KQUANT_ENTRY(tile_q6_k, PITH_W_Q6_K)
KQUANT_ENTRY(tile_q5_k, PITH_W_Q5_K)
KQUANT_ENTRY(tile_iq4_xs, PITH_W_IQ4_XS)

/* ---- activation quantizers ---- */

/* Quantizes 32 floats: returns the scale, stores the quants (same arithmetic as the scalar version:
 * q = round_half_even(x * (127 / amax))). */
INLINE float quantize32(const float *x, int8_t *q) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float a = _mm_cvtss_f32(m);
    __m256 id = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
    /* packs work within 128-bit lanes: undo the interleaving with one cross-lane permute */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    return a / 127.0f;
}

static TGT void quantize_q8a_avx2(const float *x, pith_block_q8a *out, int n) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int i = 0; i < n / PITH_QK; i++) {
        out[i].d = quantize32(x + i * PITH_QK, out[i].qs);
        __m256i q = _mm256_loadu_si256((const __m256i *)out[i].qs);
        int sum = hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        out[i].s = out[i].d * (float)sum;
    }
}

static TGT void quantize_q8k_avx2(const float *x, pith_block_q8k *out, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n / PITH_QK_K; i++, x += PITH_QK_K) {
        __m256 amax = _mm256_setzero_ps();
        for (int j = 0; j < PITH_QK_K; j += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float a = _mm_cvtss_f32(m);
        __m256 id = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
        for (int j = 0; j < PITH_QK_K; j += 32) {
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), id));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), id));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16), id));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24), id));
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(out[i].qs + j), p);
            /* sums of each 16 quants, for the K-quants' offsets */
            const __m256i ones = _mm256_set1_epi16(1);
            out[i].bsums[j / 16] = (int16_t)hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(p)), ones));
            out[i].bsums[j / 16 + 1] =
                (int16_t)hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(p, 1)), ones));
        }
        out[i].d = a / 127.0f;
    }
}

/* ---- vector helpers ---- */

static TGT void scale_avx2(float *y, float a, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

static TGT void f16_to_f32_avx2(const uint16_t *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static TGT void f32_to_f16_avx2(const float *src, uint16_t *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = pith_f32_to_f16(src[i]);
}

/* exp(x) for x in [-87, 88] (clamped): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to
 * degree 7 (truncation error below 6e-9 relative), times 2^n built in the exponent bits. ln2 is split
 * in two parts so n * ln2 is exact enough for |n| <= 127. A few ulp, like expf. */
INLINE __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static TGT float exp_shifted_avx2(float *s, float m, int n) {
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum(sum);
    if (i < n) { /* tail through a padded vector, so every element gets the same exp */
        float tmp[8] = {0};
        memcpy(tmp, s + i, (size_t)(n - i) * sizeof(float));
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(tmp), mv));
        _mm256_storeu_ps(tmp, e);
        for (int k = 0; k < n - i; k++) total += s[i + k] = tmp[k];
    }
    return total;
}

static TGT void silu_mul_avx2(float *g, const float *u, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_xor_ps(v, sign)));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(v, d), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        float tmp[8] = {0};
        tmp[0] = -g[i];
        _mm256_storeu_ps(tmp, exp8(_mm256_loadu_ps(tmp)));
        g[i] = g[i] / (1.0f + tmp[0]) * u[i];
    }
}

/* NQ queries x NV vectors of 8 output lanes, accumulated over j in registers. */
INLINE void pv_block(float *acc, int acc_ld, const float *p, int p_ld, const float *v, int v_ld, int jn, const int NQ,
                     const int NV) {
    __m256 a[4][2];
    UNROLL for (int i = 0; i < NQ; i++)
        UNROLL for (int u = 0; u < NV; u++) a[i][u] = _mm256_loadu_ps(acc + (size_t)i * acc_ld + 8 * u);
    for (int j = 0; j < jn; j++) {
        __m256 vv[2];
        UNROLL for (int u = 0; u < NV; u++) vv[u] = _mm256_loadu_ps(v + (size_t)j * v_ld + 8 * u);
        UNROLL for (int i = 0; i < NQ; i++) {
            __m256 pb = _mm256_broadcast_ss(p + (size_t)i * p_ld + j);
            UNROLL for (int u = 0; u < NV; u++) a[i][u] = _mm256_fmadd_ps(pb, vv[u], a[i][u]);
        }
    }
    UNROLL for (int i = 0; i < NQ; i++)
        UNROLL for (int u = 0; u < NV; u++) _mm256_storeu_ps(acc + (size_t)i * acc_ld + 8 * u, a[i][u]);
}

static TGT void pv_accumulate_avx2(float *acc, int acc_ld, const float *p, int p_ld, int nq, const float *v, int v_ld,
                                   int jn, int hd) {
    for (int i = 0; i < nq; i += 4) {
        int n = nq - i < 4 ? nq - i : 4;
        float *ai = acc + (size_t)i * acc_ld;
        const float *pi = p + (size_t)i * p_ld;
        int d = 0;
        for (; d + 16 <= hd; d += 16) {
            switch (n) {
            case 1: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 1, 2); break;
            case 2: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 2, 2); break;
            case 3: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 3, 2); break;
            default: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 4, 2); break;
            }
        }
        for (; d + 8 <= hd; d += 8) {
            switch (n) {
            case 1: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 1, 1); break;
            case 2: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 2, 1); break;
            case 3: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 3, 1); break;
            default: pv_block(ai + d, acc_ld, pi, p_ld, v + d, v_ld, jn, 4, 1); break;
            }
        }
        for (; d < hd; d++) /* head_dim not a multiple of 8: same order, one lane at a time */
            for (int q = 0; q < n; q++)
                for (int j = 0; j < jn; j++)
                    ai[(size_t)q * acc_ld + d] = fmaf(pi[(size_t)q * p_ld + j], v[(size_t)j * v_ld + d], ai[(size_t)q * acc_ld + d]);
    }
}

/* F16 and BF16 take 12 tokens per call: their packed tiles (kernels_half.c) split them into passes that
 * fit the registers (two of 6 on AVX-512, four of 3 on AVX2), and only the first reads memory. */
#define AVX2_COMMON                                                                                     \
    .tile = {tile_f32, tile_f16, tile_bf16, tile_q8_0, tile_q4_0, tile_q4_k, tile_q6_k, tile_q5_k,       \
             tile_iq4_nl, tile_iq4_xs},                                                                  \
    .tile_rn = {6, 12, 12, 4, 4, 4, 4, 4, 4, 4}, .quantize_q8a = quantize_q8a_avx2, .quantize_q8k = quantize_q8k_avx2, \
    .scale = scale_avx2, .f16_to_f32 = f16_to_f32_avx2, .f32_to_f16 = f32_to_f16_avx2,                  \
    .exp_shifted = exp_shifted_avx2, .silu_mul = silu_mul_avx2, .pv_accumulate = pv_accumulate_avx2

static const pith_cpu_kernels avx2_kernels = {
    .name = "avx2",
    AVX2_COMMON,
    .pack_rows = 8,
    .pack = {[PITH_W_F16] = pith_pack_half_x8, [PITH_W_BF16] = pith_pack_half_x8, [PITH_W_Q8_0] = pith_pack_q8_0_x8,
             [PITH_W_Q4_0] = pith_pack_q4_0_x8_lanes, [PITH_W_Q4_K] = pith_pack_q4_k_x8, [PITH_W_Q6_K] = pith_pack_q6_k_x8,
             [PITH_W_Q5_K] = pith_pack_q5_k_x8, [PITH_W_IQ4_NL] = pith_pack_q4_0_x8, [PITH_W_IQ4_XS] = pith_pack_iq4_xs_x8,
             [PITH_W_MXFP4] = pith_pack_mxfp4_x8_lanes},
    .tile_packed = {[PITH_W_F16] = pith_tile_packed_f16_x8, [PITH_W_BF16] = pith_tile_packed_bf16_x8,
                    [PITH_W_Q8_0] = tile_packed_q8_0, [PITH_W_Q4_0] = tile_packed_ub_q4_0, [PITH_W_IQ4_NL] = tile_packed_iq4_nl,
                    [PITH_W_Q4_K] = pith_tile_packed_q4_k_x8_avx2, [PITH_W_Q6_K] = pith_tile_packed_q6_k_x8_avx2,
                    [PITH_W_Q5_K] = pith_tile_packed_q5_k_x8_avx2, [PITH_W_IQ4_XS] = pith_tile_packed_iq4_xs_x8_avx2,
                    [PITH_W_MXFP4] = tile_packed_ub_mxfp4},
};

/* AVX2 with AVX-VNNI for the packed integer tiles; everything else is the AVX2 table's. */
static const pith_cpu_kernels avx2_vnni_kernels = {
    .name = "avx2-vnni",
    AVX2_COMMON,
    .pack_rows = 8,
    .pack = {[PITH_W_F16] = pith_pack_half_x8, [PITH_W_BF16] = pith_pack_half_x8,
             [PITH_W_Q8_0] = pith_pack_q8_0_x8_lanes, [PITH_W_Q4_0] = pith_pack_q4_0_x8_lanes,
             [PITH_W_Q4_K] = pith_pack_q4_k_x8, [PITH_W_Q6_K] = pith_pack_q6_k_x8, [PITH_W_Q5_K] = pith_pack_q5_k_x8,
             [PITH_W_IQ4_NL] = pith_pack_q4_0_x8_lanes, [PITH_W_IQ4_XS] = pith_pack_iq4_xs_x8,
             /* MXFP4: the AVX2 table's lanes tile (maddubs; no vpdpbusd version) */
             [PITH_W_MXFP4] = pith_pack_mxfp4_x8_lanes},
    .tile_packed = {[PITH_W_F16] = pith_tile_packed_f16_x8, [PITH_W_BF16] = pith_tile_packed_bf16_x8,
                    [PITH_W_Q8_0] = tile_packed_vnni_q8_0, [PITH_W_Q4_0] = tile_packed_vnni_q4_0,
                    [PITH_W_IQ4_NL] = tile_packed_vnni_iq4_nl,
                    [PITH_W_Q4_K] = pith_tile_packed_q4_k_x8_vnni, [PITH_W_Q6_K] = pith_tile_packed_q6_k_x8_vnni,
                    [PITH_W_Q5_K] = pith_tile_packed_q5_k_x8_vnni, [PITH_W_IQ4_XS] = pith_tile_packed_iq4_xs_x8_vnni,
                    [PITH_W_MXFP4] = tile_packed_ub_mxfp4},
};

/* AVX2 with AVX-512 VNNI for the packed integer tiles, on 16-row groups. */
static const pith_cpu_kernels avx512_vnni_kernels = {
    .name = "avx512-vnni",
    AVX2_COMMON,
    .pack_rows = 16,
    .pack = {[PITH_W_F16] = pith_pack_half_x16, [PITH_W_BF16] = pith_pack_half_x16,
             [PITH_W_Q8_0] = pith_pack_q8_0_x16_lanes, [PITH_W_Q4_0] = pith_pack_q4_0_x16_lanes,
             [PITH_W_Q4_K] = pith_pack_q4_k_x16, [PITH_W_Q6_K] = pith_pack_q6_k_x16, [PITH_W_Q5_K] = pith_pack_q5_k_x16,
             /* IQ4_NL blocks have Q4_0's bytes: the same packer */
             [PITH_W_IQ4_NL] = pith_pack_q4_0_x16_lanes, [PITH_W_IQ4_XS] = pith_pack_iq4_xs_x16,
             [PITH_W_MXFP4] = pith_pack_mxfp4_x16_lanes},
    .tile_packed = {[PITH_W_F16] = pith_tile_packed_f16_x16, [PITH_W_BF16] = pith_tile_packed_bf16_x16,
                    [PITH_W_Q8_0] = tile_packed_zmm_q8_0, [PITH_W_Q4_0] = tile_packed_zmm_q4_0,
                    [PITH_W_Q4_K] = pith_tile_packed_q4_k_x16, [PITH_W_Q6_K] = pith_tile_packed_q6_k_x16,
                    [PITH_W_Q5_K] = pith_tile_packed_q5_k_x16, [PITH_W_IQ4_NL] = tile_packed_zmm_iq4_nl,
                    [PITH_W_IQ4_XS] = pith_tile_packed_iq4_xs_x16, [PITH_W_MXFP4] = tile_packed_zmm_mxfp4},
    .tile_packed2 = {[PITH_W_Q8_0] = tile_packed2_zmm_q8_0, [PITH_W_Q4_0] = tile_packed2_zmm_q4_0,
                     [PITH_W_IQ4_NL] = tile_packed2_zmm_iq4_nl, [PITH_W_MXFP4] = tile_packed2_zmm_mxfp4},
};

/* CPUID by hand: not every compiler's __builtin_cpu_supports knows "f16c". AVX state must also be
 * enabled by the OS (OSXSAVE, and XCR0 saving SSE and AVX registers). */
static bool has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
    if (!fma || !osxsave || !f16c) return false;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 6) != 6) return false;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return b & (1u << 5);
}

/* AVX-VNNI (the VEX form): CPUID leaf 7 sub-leaf 1, EAX bit 4. */
static bool has_avx_vnni(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return a & (1u << 4);
}

const pith_cpu_kernels *pith_cpu_kernels_avx2(void) { return has_avx2_fma_f16c() ? &avx2_kernels : NULL; }

/* AVX-512 F (leaf 7 EBX bit 16), BW (30), VL (31), VNNI (ECX bit 11), and the OS saving opmask and
 * zmm state (XCR0 bits 5-7). */
static bool has_avx512_vnni(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(b & (1u << 16)) || !(b & (1u << 30)) || !(b & (1u << 31)) || !(c & (1u << 11))) return false;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 0xe6) == 0xe6;
}

const pith_cpu_kernels *pith_cpu_kernels_avx512_vnni(void) {
    return has_avx2_fma_f16c() && has_avx512_vnni() ? &avx512_vnni_kernels : NULL;
}

const pith_cpu_kernels *pith_cpu_kernels_avx2_vnni(void) {
    return has_avx2_fma_f16c() && has_avx_vnni() ? &avx2_vnni_kernels : NULL;
}

#else

#include "backend/cpu/kernels.h"

const pith_cpu_kernels *pith_cpu_kernels_avx2(void) { return NULL; }
const pith_cpu_kernels *pith_cpu_kernels_avx2_vnni(void) { return NULL; }
const pith_cpu_kernels *pith_cpu_kernels_avx512_vnni(void) { return NULL; }

#endif
