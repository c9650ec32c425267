/* AVX-512 VNNI packed tiles for Q4_K, Q5_K, Q6_K and IQ4_XS: 16 rows (one group, layout in pack_kquant.c) against up
 * to 4 tokens of q8k activations per pass, every weight vector loaded and unpacked once per pass.
 *
 * Int32 lane r of every vector is row r. Per sub-block, vpdpbusd of the unsigned quants with 4
 * activations broadcast to all lanes gives the 16 rows' exact integer dot products; vpmulld weighs
 * them by the sub-block scales, and the super-block's offset term (Q4_K: the mins against sums of 32
 * activations, Q6_K: -32 times the scales against sums of 16) comes from vpdpwssd of the scales as int16
 * pairs against the activation block sums. All of it stays exact in int32 (bounds below); one float
 * multiply-add per super-block and token adds d * d_x * sum to the accumulator. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/prefetch.h"
#include "backend/cpu/kernels_kquant.h"
#include "backend/cpu/unroll.h"

#define TGTZ __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINEZ static inline __attribute__((always_inline)) TGTZ
#define MAX_RN 4
/* Software prefetch distance of the group stream (as for the Q4_0 / Q8_0 tiles: 12 KiB ahead on
 * 16-row groups; the hint: prefetch.h). */
#ifndef PITH_KQ_PREFETCH_BYTES
#define PITH_KQ_PREFETCH_BYTES 12288
#endif
#define PREFETCH_BYTES PITH_KQ_PREFETCH_BYTES

/* Settles a running sum in a register at this point of the program. Without it gcc 12 moves every
 * sub-block's products to the end of the super-block, keeps their chains alive meanwhile and spills them
 * to the stack (15-40 spills per super-block): 1.2-1.5x slower from L2 for one token, Q6_K worst
 * (tools/kquant_tile_bench.c). The same instructions, so the same bits. */
#define SETTLE(v) __asm__("" : "+v"(v))

INLINEZ __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Lines of the group stream PREFETCH_BYTES ahead into L1 (p), and with far as far again into L2
 * (prefetch.h). far is for one-token passes (decode), whose speed is the stream's: there it lifts Q6_K
 * from 0.54-0.71 to 0.80-1.00 of a plain read (tools/stream_tile_bench.c); with more tokens each group
 * is read from cache again per token tile and the extra instructions only cost. */
INLINEZ void prefetch_lines(const uint8_t *p, const int lines, const bool far) {
    UNROLL for (int l = 0; l < lines; l++) {
        pith_prefetch_stream((const char *)p + 64 * l);
        if (far) pith_prefetch_far((const char *)p + PREFETCH_BYTES + 64 * l);
    }
}

INLINEZ void store16(float *y, __m512 v, bool accumulate) {
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(y), v);
    _mm512_storeu_ps(y, v);
}

/* Q4_K (Q5 false): x = d sc q - dmin m per sub-block of 32. Per super-block and token, with the high
 * nibbles kept in place (16 q: a mask instead of a shift) and the even sub-blocks' scales shifted by 4 to
 * match:
 *   I = sum_s 16 sc_s <q_s, x_s>   |I| <= 16 * 63 * 8 * 32 * 15 * 127 < 2^29
 *   M = sum_s m_s sum(x_s)         |M| <= 8 * 63 * 32 * 127
 *   y += d_x (d / 16 I - dmin M)
 * The /16 is exact, so the result is the same as with plain sums.
 * Q5_K (Q5 true): the same with 5-bit quants (nibble | qh bit << 4, so no 16 q trick: plain I, d),
 * |I| <= 63 * 8 * 32 * 31 * 127. */
INLINEZ void q45_k_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy, bool accumulate,
                        const bool Q5, const int RN) {
    const pith_block_q8k *xr[MAX_RN];
    __m512 acc[MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(15), six = _mm512_set1_epi8(63), top2 = _mm512_set1_epi8(0x30);
    const __m512i byte0 = _mm512_set1_epi32(0xff), byte0x16 = _mm512_set1_epi32(0xff0), bit4 = _mm512_set1_epi8(16);
    const size_t cb = 16 * (Q5 ? PITH_Q5_K_BYTES : PITH_Q4_K_BYTES);
    const int qoff = Q5 ? 768 : 256; /* the nibbles, after Q5_K's qh */
    /* int16 pairs (byte 0, byte 1) and (byte 2, byte 3) of every dword, zero-extended */
    const __m512i pick01 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128));
    const __m512i pick23 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128));
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += cb) {
        __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        if (!Q5) d16 = _mm512_mul_ps(d16, _mm512_set1_ps(0.0625f));
        __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
        __m512i A = _mm512_loadu_si512((const void *)(g + 64));
        __m512i B = _mm512_loadu_si512((const void *)(g + 128));
        __m512i C = _mm512_loadu_si512((const void *)(g + 192));
        /* the 6-bit fields of all 16 rows (pith_q4k_scale_min, one dword of 4 bytes per row) */
        __m512i sc03 = _mm512_and_si512(A, six);
        __m512i sc47 = _mm512_or_si512(_mm512_and_si512(C, low), _mm512_and_si512(_mm512_srli_epi32(A, 2), top2));
        __m512i m03 = _mm512_and_si512(B, six);
        __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(C, 4), low),
                                      _mm512_and_si512(_mm512_srli_epi32(B, 2), top2));
        __m512i sc[8];
        UNROLL for (int s = 0; s < 8; s++) {
            __m512i v = s < 4 ? sc03 : sc47;
            int k = s % 4;
            sc[s] = Q5 ? _mm512_and_si512(k ? _mm512_srli_epi32(v, 8 * k) : v, byte0)
                  : s % 2 == 0 ? _mm512_and_si512(k ? _mm512_srli_epi32(v, 8 * k - 4) : _mm512_slli_epi32(v, 4), byte0x16)
                               : _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), byte0);
        }
        __m512i iacc[MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm512_setzero_si512();
        UNROLL for (int c = 0; c < 4; c++) {
            if (Q5) prefetch_lines(g + PREFETCH_BYTES + 704 * c, 11, RN == 1);
            else prefetch_lines(g + PREFETCH_BYTES + 576 * c, 9, RN == 1);
            /* One token (decode) gets 4 chains per sum, so it is not bound by vpdpbusd latency; more
             * tokens have enough independent chains. Integer sums: the same result either way. */
            enum { CH = 4 };
            const int ch = RN == 1 ? CH : 1;
            __m512i slo[MAX_RN][CH], shi[MAX_RN][CH];
            UNROLL for (int t = 0; t < RN; t++)
                UNROLL for (int i = 0; i < ch; i++) slo[t][i] = shi[t][i] = _mm512_setzero_si512();
            UNROLL for (int half = 0; half < 2; half++) {
                __m512i lo[4], hi[4];
                UNROLL for (int v = 0; v < 4; v++) {
                    __m512i raw = _mm512_loadu_si512((const void *)(g + qoff + 64 * (8 * c + 4 * half + v)));
                    __asm__("" : "+v"(raw)); /* one load, not one per use */
                    if (Q5) {
                        /* bits 2c and 2c + 1 of qh moved to bit 4 of each byte (by at most 4 places:
                         * the bits 32-bit shifts carry across bytes never land on bit 4) */
                        __m512i qh = _mm512_loadu_si512((const void *)(g + 256 + 64 * (4 * half + v)));
                        __m512i h0 = c < 2 ? _mm512_slli_epi32(qh, 4 - 2 * c) : _mm512_srli_epi32(qh, 2 * c - 4);
                        __m512i h1 = c < 2 ? _mm512_slli_epi32(qh, 3 - 2 * c) : _mm512_srli_epi32(qh, 2 * c - 3);
                        lo[v] = _mm512_ternarylogic_epi32(_mm512_and_si512(raw, low), h0, bit4, 0xf8);
                        hi[v] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(raw, 4), low), h1, bit4, 0xf8);
                    } else {
                        lo[v] = _mm512_and_si512(raw, low);
                        hi[v] = _mm512_andnot_si512(low, raw);
                    }
                }
                UNROLL for (int t = 0; t < RN; t++) {
                    const int8_t *xq = xr[t][b].qs + 64 * c + 16 * half;
                    UNROLL for (int v = 0; v < 4; v++) {
                        slo[t][v % ch] = _mm512_dpbusd_epi32(slo[t][v % ch], lo[v], bcast4(xq + 4 * v));
                        shi[t][v % ch] = _mm512_dpbusd_epi32(shi[t][v % ch], hi[v], bcast4(xq + 32 + 4 * v));
                    }
                }
            }
            UNROLL for (int t = 0; t < RN; t++) {
                __m512i l = slo[t][0], h = shi[t][0];
                if (ch == CH) {
                    l = _mm512_add_epi32(_mm512_add_epi32(l, slo[t][1]), _mm512_add_epi32(slo[t][2], slo[t][3]));
                    h = _mm512_add_epi32(_mm512_add_epi32(h, shi[t][1]), _mm512_add_epi32(shi[t][2], shi[t][3]));
                }
                iacc[t] = _mm512_add_epi32(iacc[t], _mm512_add_epi32(_mm512_mullo_epi32(l, sc[2 * c]),
                                                                     _mm512_mullo_epi32(h, sc[2 * c + 1])));
                SETTLE(iacc[t]);
            }
        }
        __m512i m01 = _mm512_shuffle_epi8(m03, pick01), m23 = _mm512_shuffle_epi8(m03, pick23);
        __m512i m45 = _mm512_shuffle_epi8(m47, pick01), m67 = _mm512_shuffle_epi8(m47, pick23);
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            /* sums of each 32 activations, as int16 pairs (s, s + 1) in 4 dwords */
            int32_t p[4];
            _mm_storeu_si128((__m128i *)p, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                         _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
            __m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m01, _mm512_set1_epi32(p[0]));
            ms = _mm512_dpwssd_epi32(ms, m23, _mm512_set1_epi32(p[1]));
            ms = _mm512_dpwssd_epi32(ms, m45, _mm512_set1_epi32(p[2]));
            ms = _mm512_dpwssd_epi32(ms, m67, _mm512_set1_epi32(p[3]));
            __m512 f = _mm512_fmsub_ps(_mm512_cvtepi32_ps(iacc[t]), d16, _mm512_mul_ps(_mm512_cvtepi32_ps(ms), dmin));
            acc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(xb->d), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) store16(y + t * ldy, acc[t], accumulate);
}

/* Q6_K: x = d sc (q - 32) per sub-block of 16, q unsigned 6-bit. Per super-block and token:
 *   I = sum_s sc_s <q_s, x_s>      |I| <= 16 * 128 * 16 * 63 * 127 < 2^25
 *   O = sum_s sc_s sum(x_s)        |O| <= 16 * 128 * 16 * 127
 *   y += d d_x (I - 32 O)          exact in int32 */
INLINEZ void q6_k_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy, bool accumulate,
                       const int RN) {
    const pith_block_q8k *xr[MAX_RN];
    __m512 acc[MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(15), bits45 = _mm512_set1_epi8(0x30);
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += 16 * PITH_Q6_K_BYTES) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512i S[4];
        UNROLL for (int p = 0; p < 4; p++) S[p] = _mm512_loadu_si512((const void *)(g + 32 + 64 * p));
        __m512i iacc[MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm512_setzero_si512();
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int vh = 0; vh < 2; vh++) {
                prefetch_lines(g + PREFETCH_BYTES + 840 * (2 * h + vh), 14, RN == 1);
                /* q[v][gr]: elements 128 h + 32 gr + 4 (4 vh + v) + j of every row */
                __m512i q[4][4];
                UNROLL for (int v = 0; v < 4; v++) {
                    int vv = 4 * vh + v;
                    __m512i qa = _mm512_loadu_si512((const void *)(g + 288 + 64 * (16 * h + vv)));
                    __m512i qb = _mm512_loadu_si512((const void *)(g + 288 + 64 * (16 * h + 8 + vv)));
                    __m512i qh = _mm512_loadu_si512((const void *)(g + 2336 + 64 * (8 * h + vv)));
                    __asm__("" : "+v"(qa), "+v"(qb), "+v"(qh)); /* one load each, not one per use */
                    /* low 4 bits from ql, bits 4-5 from qh's pair (32-bit shifts leak only into bits the
                     * masks drop); ternary logic 0xf8: a | (b & c) */
                    q[v][0] = _mm512_ternarylogic_epi32(_mm512_and_si512(qa, low), _mm512_slli_epi32(qh, 4), bits45, 0xf8);
                    q[v][1] = _mm512_ternarylogic_epi32(_mm512_and_si512(qb, low), _mm512_slli_epi32(qh, 2), bits45, 0xf8);
                    q[v][2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(qa, 4), low), qh, bits45, 0xf8);
                    q[v][3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(qb, 4), low),
                                                        _mm512_srli_epi32(qh, 2), bits45, 0xf8);
                }
                UNROLL for (int t = 0; t < RN; t++) {
                    const int8_t *xq = xr[t][b].qs + 128 * h + 16 * vh;
                    UNROLL for (int gr = 0; gr < 4; gr++) {
                        __m512i chain = _mm512_setzero_si512();
                        UNROLL for (int v = 0; v < 4; v++)
                            chain = _mm512_dpbusd_epi32(chain, q[v][gr], bcast4(xq + 32 * gr + 4 * v));
                        int s = 8 * h + 2 * gr + vh, k = s % 4;
                        /* scale s, sign-extended: byte k of plane s / 4 */
                        __m512i scale = _mm512_srai_epi32(_mm512_slli_epi32(S[s / 4], 24 - 8 * k), 24);
                        iacc[t] = _mm512_add_epi32(iacc[t], _mm512_mullo_epi32(chain, scale));
                        SETTLE(iacc[t]);
                    }
                }
            }
        }
        /* the scales as int16 pairs: bytes (0, 2) and (1, 3) of each row's dword in plane p */
        __m512i slo[4], shi[4];
        UNROLL for (int p = 0; p < 4; p++) {
            slo[p] = _mm512_srai_epi16(_mm512_slli_epi16(S[p], 8), 8);
            shi[p] = _mm512_srai_epi16(S[p], 8);
        }
        const __m128i pairs = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            /* bsums (4p, 4p + 2) and (4p + 1, 4p + 3) as int16 pairs, p = 0..3 */
            int32_t bp[8];
            _mm_storeu_si128((__m128i *)bp, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)xb->bsums), pairs));
            _mm_storeu_si128((__m128i *)(bp + 4), _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(xb->bsums + 8)), pairs));
            __m512i o = _mm512_setzero_si512();
            UNROLL for (int p = 0; p < 4; p++) {
                o = _mm512_dpwssd_epi32(o, slo[p], _mm512_set1_epi32(bp[2 * p]));
                o = _mm512_dpwssd_epi32(o, shi[p], _mm512_set1_epi32(bp[2 * p + 1]));
            }
            __m512i tot = _mm512_sub_epi32(iacc[t], _mm512_slli_epi32(o, 5));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) store16(y + t * ldy, acc[t], accumulate);
}

/* IQ4_XS: x = d (ls - 32) V[n] per sub-block of 32. The table lookup gives V + 128 (unsigned, for
 * vpdpbusd), whose excess comes out through the activation sums:
 *   I = sum_s sc_s <V_s + 128, x_s>   |I| <= 8 * 32 * 32 * 241 * 127 < 2^28  (sc_s = ls_s - 32)
 *   O = sum_s sc_s sum(x_s)           |O| <= 8 * 32 * 32 * 127
 *   y += d d_x (I - 128 O)            exact in int32 */
INLINEZ void iq4_xs_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy, bool accumulate,
                         const int RN) {
    const pith_block_q8k *xr[MAX_RN];
    __m512 acc[MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi8(15), three = _mm512_set1_epi32(3), nib = _mm512_set1_epi32(15);
    const __m512i table = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pith_iq4_values)),
                                           _mm512_set1_epi8((char)0x80));
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += 16 * PITH_IQ4_XS_BYTES) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512i H = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(g + 32)));
        __m512i L = _mm512_loadu_si512((const void *)(g + 64));
        __m512i sc[8];
        UNROLL for (int s = 0; s < 8; s++) {
            __m512i lo4 = _mm512_and_si512(_mm512_srli_epi32(L, 4 * s), nib);
            __m512i hi2 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(H, 2 * s), three), 4);
            sc[s] = _mm512_sub_epi32(_mm512_or_si512(lo4, hi2), _mm512_set1_epi32(32));
        }
        /* the scales as int16 pairs (2k, 2k + 1), for the offset term */
        __m512i scp[4];
        UNROLL for (int k = 0; k < 4; k++)
            scp[k] = _mm512_or_si512(_mm512_and_si512(sc[2 * k], _mm512_set1_epi32(0xffff)),
                                     _mm512_slli_epi32(sc[2 * k + 1], 16));
        __m512i iacc[MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm512_setzero_si512();
        UNROLL for (int s = 0; s < 8; s++) {
            prefetch_lines(g + PREFETCH_BYTES + 272 * s, 5, RN == 1);
            __m512i lo[4], hi[4];
            UNROLL for (int v = 0; v < 4; v++) {
                __m512i raw = _mm512_loadu_si512((const void *)(g + 128 + 64 * (4 * s + v)));
                __asm__("" : "+v"(raw)); /* one load, not one per use */
                lo[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, low));
                hi[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low));
            }
            UNROLL for (int t = 0; t < RN; t++) {
                const int8_t *xq = xr[t][b].qs + 32 * s;
                /* 4 chains for one token (decode), 2 otherwise: integer sums, the same result */
                __m512i c[4];
                const int ch = RN == 1 ? 2 : 1;
                UNROLL for (int i = 0; i < 2 * ch; i++) c[i] = _mm512_setzero_si512();
                UNROLL for (int v = 0; v < 4; v++) {
                    c[v % ch] = _mm512_dpbusd_epi32(c[v % ch], lo[v], bcast4(xq + 4 * v));
                    c[ch + v % ch] = _mm512_dpbusd_epi32(c[ch + v % ch], hi[v], bcast4(xq + 16 + 4 * v));
                }
                __m512i sum = _mm512_add_epi32(c[0], c[ch]);
                if (ch == 2) sum = _mm512_add_epi32(sum, _mm512_add_epi32(c[1], c[3]));
                iacc[t] = _mm512_add_epi32(iacc[t], _mm512_mullo_epi32(sum, sc[s]));
                SETTLE(iacc[t]);
            }
        }
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            int32_t p[4]; /* sums of each 32 activations, as int16 pairs (2k, 2k + 1) */
            _mm_storeu_si128((__m128i *)p, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                         _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
            __m512i o = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 4; k++) o = _mm512_dpwssd_epi32(o, scp[k], _mm512_set1_epi32(p[k]));
            __m512i tot = _mm512_sub_epi32(iacc[t], _mm512_slli_epi32(o, 7));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) store16(y + t * ldy, acc[t], accumulate);
}

INLINEZ void q4_k_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy, bool accumulate,
                       const int RN) {
    q45_k_impl(K, g, x, xs, y, ldy, accumulate, false, RN);
}

INLINEZ void q5_k_impl(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy, bool accumulate,
                       const int RN) {
    q45_k_impl(K, g, x, xs, y, ldy, accumulate, true, RN);
}

#define ENTRY(NAME, IMPL)                                                                                   \
    TGTZ void NAME(int K, const uint8_t *g, const void *x, size_t xs, int rn, float *y, size_t ldy,         \
                   bool accumulate) {                                                                       \
        for (int t = 0; t < rn; t += MAX_RN) {                                                              \
            const uint8_t *xt = (const uint8_t *)x + t * xs;                                                \
            float *yt = y + t * ldy;                                                                        \
            switch (rn - t < MAX_RN ? rn - t : MAX_RN) {                                                    \
            case 1: IMPL(K, g, xt, xs, yt, ldy, accumulate, 1); break;                                      \
            case 2: IMPL(K, g, xt, xs, yt, ldy, accumulate, 2); break;                                      \
            case 3: IMPL(K, g, xt, xs, yt, ldy, accumulate, 3); break;                                      \
            default: IMPL(K, g, xt, xs, yt, ldy, accumulate, 4); break;                                     \
            }                                                                                               \
        }                                                                                                   \
    }

ENTRY(pith_tile_packed_q4_k_x16, q4_k_impl)
ENTRY(pith_tile_packed_q5_k_x16, q5_k_impl)
ENTRY(pith_tile_packed_q6_k_x16, q6_k_impl)
ENTRY(pith_tile_packed_iq4_xs_x16, iq4_xs_impl)

#else
/* ISO C forbids an empty translation unit. */
typedef int pith_kernels_kquant_zmm_unused;
#endif
