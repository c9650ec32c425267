/* The 8-row packed K-quant tiles on ymm registers (layouts in pack_kquant.c, R = 8), written once and
 * included twice by kernels_kquant_ymm.c: with YMM_VNNI 1 for the AVX-VNNI table (vpdpbusd, vpdpwssd),
 * with YMM_VNNI 0 for the plain AVX2 one (vpmaddubsw + vpmaddwd). The including file defines YMM_VNNI,
 * YMM_TGT (the target attribute) and YMM_SUFFIX (the entry points' name suffix), and undefines them
 * afterwards. Not a header for anything else.
 *
 * The arithmetic is the zmm tiles' (kernels_kquant_zmm.c) on 8 rows: int32 lane r of every vector is row
 * r; per super-block and token the rows' dot products are exact int32 sums, and one float multiply-add
 * per super-block and token adds them to the accumulator, so every output is computed the same way for
 * any number of tokens in the call. The two variants differ only in how the exact integer sums are
 * formed:
 *   - AVX-VNNI: vpdpbusd of the unsigned quants against 4 broadcast activations, vpmulld by the
 *     sub-block scale, as the zmm tiles (Q4_K's high nibbles kept in place, 16 x their value; IQ4_XS's
 *     table biased by +128, taken out through the activation sums).
 *   - AVX2: vpmaddubsw gives int16 sums of 2 products, a few of them are added in int16 while they
 *     cannot overflow (bounds at each tile), and vpmaddwd against the scale duplicated into both int16
 *     halves of each row's dword weighs and widens them in one step. Q4_K's high nibbles are shifted
 *     down (16 x 15 x 127 per product pair would saturate int16), IQ4_XS uses its signed values with the
 *     sign trick (|v| <= 127: pairs below 2 x 127 x 127). */

#define INL static inline __attribute__((always_inline)) YMM_TGT
#define YMM_CAT2(a, b) a##b
#define YMM_CAT(a, b) YMM_CAT2(a, b)
#define YMM_FN(name) YMM_CAT(name, YMM_SUFFIX)

#if YMM_VNNI
/* acc + the 8 rows' exact sums of 4 products of unsigned u and signed s bytes */
INL __m256i YMM_FN(dot4_)(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#endif

/* acc + int16 pairs a times b, summed per dword (vpdpwssd) */
INL __m256i YMM_FN(dotw_)(__m256i acc, __m256i a, __m256i b) {
#if YMM_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* an int32 lane value v (|v| < 2^15) as the int16 pair (v, v) */
INL __m256i YMM_FN(pair_)(__m256i v) {
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(v, 16));
}

/* p, hidden from the optimizer: loads through it are done again rather than merged with earlier ones
 * (which would keep their values live in registers, and spill them: ymm has 16) */
INL const uint8_t *YMM_FN(launder_)(const uint8_t *p) {
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* a + b, in this order: the compiler may not regroup a chain of these into a tree of partial sums
 * (which keeps them all live at once, and spills them) */
INL __m256i YMM_FN(acc_)(__m256i a, __m256i b) {
    a = _mm256_add_epi32(a, b);
    __asm__("" : "+x"(a));
    return a;
}

INL __m256i YMM_FN(bcast4_)(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

INL void YMM_FN(store8_)(float *y, __m256 v, bool accumulate) {
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(y), v);
    _mm256_storeu_ps(y, v);
}

/* Q4_K (Q5 false) and Q5_K (Q5 true): x = d sc q - dmin m per sub-block of 32. Per super-block, token:
 *   I = sum_s sc_s <q_s, x_s>   (AVX-VNNI Q4_K: 16 I, exactly as the zmm tile; d is scaled by 1/16)
 *   M = sum_s m_s sum(x_s)
 *   y += d_x (d I - dmin M)
 * AVX2 int16 steps: 4 maddubs of one sub-block added, at most 4 x 2 x 31 x 127 = 31496 (Q5_K). */
INL void YMM_FN(q45_k_impl_)(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                             bool accumulate, const bool Q5, const int RN) {
    const pith_block_q8k *xr[YMM_MAX_RN];
    __m256 acc[YMM_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm256_setzero_ps();
    }
    const bool HI16 = YMM_VNNI && !Q5; /* Q4_K's high nibbles left in place */
    const __m256i low = _mm256_set1_epi8(15), six = _mm256_set1_epi8(63), top2 = _mm256_set1_epi8(0x30);
    const __m256i byte0 = _mm256_set1_epi32(0xff), byte0x16 = _mm256_set1_epi32(0xff0), bit4 = _mm256_set1_epi8(16);
    const size_t cb = 8 * (Q5 ? PITH_Q5_K_BYTES : PITH_Q4_K_BYTES);
    const int qoff = Q5 ? 384 : 128; /* the nibbles, after Q5_K's qh */
    const __m256i pick01 = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128));
    const __m256i pick23 = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128));
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += cb) {
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        if (HI16) d = _mm256_mul_ps(d, _mm256_set1_ps(0.0625f));
        __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
        __m256i A = _mm256_loadu_si256((const __m256i *)(g + 32));
        __m256i B = _mm256_loadu_si256((const __m256i *)(g + 64));
        __m256i C = _mm256_loadu_si256((const __m256i *)(g + 96));
        __m256i sc03 = _mm256_and_si256(A, six);
        __m256i sc47 = _mm256_or_si256(_mm256_and_si256(C, low), _mm256_and_si256(_mm256_srli_epi32(A, 2), top2));
        __m256i m03 = _mm256_and_si256(B, six);
        __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(C, 4), low),
                                      _mm256_and_si256(_mm256_srli_epi32(B, 2), top2));
        /* sc[s]: scale s of every row in its int32 lane (HI16: the even ones x 16); AVX2: as int16 pairs */
        __m256i sc[8];
        UNROLL for (int s = 0; s < 8; s++) {
            __m256i v = s < 4 ? sc03 : sc47;
            int k = s % 4;
            sc[s] = HI16 && s % 2 == 0
                        ? _mm256_and_si256(k ? _mm256_srli_epi32(v, 8 * k - 4) : _mm256_slli_epi32(v, 4), byte0x16)
                        : _mm256_and_si256(k ? _mm256_srli_epi32(v, 8 * k) : v, byte0);
            if (!YMM_VNNI) sc[s] = YMM_FN(pair_)(sc[s]);
        }
        __m256i iacc[YMM_MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm256_setzero_si256();
        /* Sub-block s = 2 c + part: the low nibbles (part 0) or high nibbles (part 1) of chunk c. Each
         * part loads its chunk again (from L1) so that only 4 quant vectors are live at a time: ymm has
         * 16 registers, and spilling costs more than the reload. */
        UNROLL for (int c = 0; c < 4; c++) {
            if (Q5) prefetch_lines(g + YMM_PREFETCH_BYTES + 352 * c, 6);
            else prefetch_lines(g + YMM_PREFETCH_BYTES + 288 * c, 5);
            UNROLL for (int part = 0; part < 2; part++) {
#if YMM_VNNI
                /* one token: 2 chains, so decode is not bound by vpdpbusd latency */
                enum { CH = 2 };
                const int ch = RN == 1 ? CH : 1;
                __m256i chain[YMM_MAX_RN][CH];
                UNROLL for (int t = 0; t < RN; t++)
                    UNROLL for (int i = 0; i < ch; i++) chain[t][i] = _mm256_setzero_si256();
#endif
                const uint8_t *gl = YMM_FN(launder_)(g);
                UNROLL for (int half = 0; half < 2; half++) {
                    __m256i q[4];
                    UNROLL for (int v = 0; v < 4; v++) {
                        __m256i raw = _mm256_loadu_si256((const __m256i *)(gl + qoff + 32 * (8 * c + 4 * half + v)));
                        if (Q5) {
                            /* bit 2c + part of qh moved to bit 4 of each byte (32-bit shifts by at most 4
                             * places: the bits carried across bytes never land on bit 4) */
                            __m256i qh = _mm256_loadu_si256((const __m256i *)(gl + 128 + 32 * (4 * half + v)));
                            const int bit = 2 * c + part;
                            __m256i h = bit < 4 ? _mm256_slli_epi32(qh, 4 - bit) : _mm256_srli_epi32(qh, bit - 4);
                            __m256i n = part ? _mm256_and_si256(_mm256_srli_epi32(raw, 4), low) : _mm256_and_si256(raw, low);
                            q[v] = _mm256_or_si256(n, _mm256_and_si256(h, bit4));
                        } else if (part == 0) {
                            q[v] = _mm256_and_si256(raw, low);
                        } else {
                            q[v] = HI16 ? _mm256_andnot_si256(low, raw) : _mm256_and_si256(_mm256_srli_epi32(raw, 4), low);
                        }
                    }
                    UNROLL for (int t = 0; t < RN; t++) {
                        const int8_t *xq = xr[t][b].qs + 64 * c + 32 * part + 16 * half;
#if YMM_VNNI
                        UNROLL for (int v = 0; v < 4; v++)
                            chain[t][v % ch] = YMM_FN(dot4_)(chain[t][v % ch], q[v], YMM_FN(bcast4_)(xq + 4 * v));
#else
                        __m256i p16 = _mm256_maddubs_epi16(q[0], YMM_FN(bcast4_)(xq));
                        UNROLL for (int v = 1; v < 4; v++)
                            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(q[v], YMM_FN(bcast4_)(xq + 4 * v)));
                        iacc[t] = YMM_FN(acc_)(iacc[t], _mm256_madd_epi16(p16, sc[2 * c + part]));
#endif
                    }
                }
#if YMM_VNNI
                UNROLL for (int t = 0; t < RN; t++) {
                    __m256i sum = ch == CH ? _mm256_add_epi32(chain[t][0], chain[t][1]) : chain[t][0];
                    iacc[t] = YMM_FN(acc_)(iacc[t], _mm256_mullo_epi32(sum, sc[2 * c + part]));
                }
#endif
            }
        }
        __m256i m01 = _mm256_shuffle_epi8(m03, pick01), m23 = _mm256_shuffle_epi8(m03, pick23);
        __m256i m45 = _mm256_shuffle_epi8(m47, pick01), m67 = _mm256_shuffle_epi8(m47, pick23);
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            /* sums of each 32 activations, as int16 pairs (s, s + 1) in 4 dwords */
            int32_t p[4];
            _mm_storeu_si128((__m128i *)p, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                         _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
            __m256i ms = YMM_FN(dotw_)(_mm256_setzero_si256(), m01, _mm256_set1_epi32(p[0]));
            ms = YMM_FN(dotw_)(ms, m23, _mm256_set1_epi32(p[1]));
            ms = YMM_FN(dotw_)(ms, m45, _mm256_set1_epi32(p[2]));
            ms = YMM_FN(dotw_)(ms, m67, _mm256_set1_epi32(p[3]));
            __m256 f = _mm256_fmsub_ps(_mm256_cvtepi32_ps(iacc[t]), d, _mm256_mul_ps(_mm256_cvtepi32_ps(ms), dmin));
            acc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(xb->d), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) YMM_FN(store8_)(y + t * ldy, acc[t], accumulate);
}

/* Q6_K: x = d sc (q - 32) per sub-block of 16, q unsigned 6-bit. Per super-block and token:
 *   I = sum_s sc_s <q_s, x_s>,  O = sum_s sc_s sum(x_s),  y += d d_x (I - 32 O)   exact in int32
 * AVX2 int16 steps: 2 maddubs added, at most 2 x 2 x 63 x 127 = 32004. */
INL void YMM_FN(q6_k_impl_)(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                            bool accumulate, const int RN) {
    const pith_block_q8k *xr[YMM_MAX_RN];
    __m256 acc[YMM_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm256_setzero_ps();
    }
    const __m256i low = _mm256_set1_epi8(15), bits45 = _mm256_set1_epi8(0x30);
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += 8 * PITH_Q6_K_BYTES) {
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        __m256i S[4];
        UNROLL for (int p = 0; p < 4; p++) S[p] = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * p));
        __m256i iacc[YMM_MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int vh = 0; vh < 2; vh++) {
                prefetch_lines(g + YMM_PREFETCH_BYTES + 420 * (2 * h + vh), 7);
                /* Sub-block s = 8 h + 2 gr + vh, one gr at a time so that only its 4 quant vectors are
                 * live (ymm has 16 registers): the ql and qh vectors are reloaded from L1 for each gr.
                 * q[v]: elements 128 h + 32 gr + 4 (4 vh + v) + j of every row. */
                UNROLL for (int gr = 0; gr < 4; gr++) {
                    const uint8_t *gl = YMM_FN(launder_)(g);
                    __m256i q[4];
                    UNROLL for (int v = 0; v < 4; v++) {
                        int vv = 4 * vh + v;
                        __m256i ql = _mm256_loadu_si256((const __m256i *)(gl + 144 + 32 * (16 * h + 8 * (gr % 2) + vv)));
                        __m256i qh = _mm256_loadu_si256((const __m256i *)(gl + 1168 + 32 * (8 * h + vv)));
                        /* low 4 bits from ql's low (gr < 2) or high nibble, bits 4-5 from qh's pair gr
                         * (32-bit shifts leak only into bits the masks drop) */
                        __m256i lo4 = _mm256_and_si256(gr < 2 ? ql : _mm256_srli_epi32(ql, 4), low);
                        __m256i hi2 = gr == 0 ? _mm256_slli_epi32(qh, 4) : gr == 1 ? _mm256_slli_epi32(qh, 2)
                                    : gr == 2 ? qh : _mm256_srli_epi32(qh, 2);
                        q[v] = _mm256_or_si256(lo4, _mm256_and_si256(hi2, bits45));
                    }
                    int s = 8 * h + 2 * gr + vh, k = s % 4;
                    /* scale s, sign-extended: byte k of plane s / 4 (AVX2: as an int16 pair) */
                    __m256i scale = _mm256_srai_epi32(_mm256_slli_epi32(S[s / 4], 24 - 8 * k), 24);
                    if (!YMM_VNNI) scale = YMM_FN(pair_)(scale);
                    UNROLL for (int t = 0; t < RN; t++) {
                        const int8_t *xq = xr[t][b].qs + 128 * h + 16 * vh + 32 * gr;
#if YMM_VNNI
                        __m256i c0 = YMM_FN(dot4_)(_mm256_setzero_si256(), q[0], YMM_FN(bcast4_)(xq));
                        __m256i c1 = YMM_FN(dot4_)(_mm256_setzero_si256(), q[1], YMM_FN(bcast4_)(xq + 4));
                        c0 = YMM_FN(dot4_)(c0, q[2], YMM_FN(bcast4_)(xq + 8));
                        c1 = YMM_FN(dot4_)(c1, q[3], YMM_FN(bcast4_)(xq + 12));
                        iacc[t] = YMM_FN(acc_)(iacc[t], _mm256_mullo_epi32(_mm256_add_epi32(c0, c1), scale));
#else
                        __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], YMM_FN(bcast4_)(xq)),
                                                       _mm256_maddubs_epi16(q[1], YMM_FN(bcast4_)(xq + 4)));
                        __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], YMM_FN(bcast4_)(xq + 8)),
                                                       _mm256_maddubs_epi16(q[3], YMM_FN(bcast4_)(xq + 12)));
                        iacc[t] = YMM_FN(acc_)(iacc[t], _mm256_add_epi32(_mm256_madd_epi16(p01, scale),
                                                                             _mm256_madd_epi16(p23, scale)));
#endif
                    }
                }
            }
        }
        /* the scales as int16 pairs: bytes (0, 2) and (1, 3) of each row's dword in plane p */
        __m256i slo[4], shi[4];
        UNROLL for (int p = 0; p < 4; p++) {
            slo[p] = _mm256_srai_epi16(_mm256_slli_epi16(S[p], 8), 8);
            shi[p] = _mm256_srai_epi16(S[p], 8);
        }
        const __m128i pairs = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            /* bsums (4p, 4p + 2) and (4p + 1, 4p + 3) as int16 pairs, p = 0..3 */
            int32_t bp[8];
            _mm_storeu_si128((__m128i *)bp, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)xb->bsums), pairs));
            _mm_storeu_si128((__m128i *)(bp + 4), _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(xb->bsums + 8)), pairs));
            __m256i o = _mm256_setzero_si256();
            UNROLL for (int p = 0; p < 4; p++) {
                o = YMM_FN(dotw_)(o, slo[p], _mm256_set1_epi32(bp[2 * p]));
                o = YMM_FN(dotw_)(o, shi[p], _mm256_set1_epi32(bp[2 * p + 1]));
            }
            __m256i tot = _mm256_sub_epi32(iacc[t], _mm256_slli_epi32(o, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, _mm256_set1_ps(xb->d)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) YMM_FN(store8_)(y + t * ldy, acc[t], accumulate);
}

/* IQ4_XS: x = d (ls - 32) V[n] per sub-block of 32.
 *   AVX-VNNI: the table gives V + 128 (unsigned); y += d d_x (I - 128 O), I = sum_s sc_s <V_s + 128, x_s>,
 *             O = sum_s sc_s sum(x_s), as the zmm tile.
 *   AVX2: y += d d_x sum_s sc_s <V_s, x_s> with the sign trick, one maddubs per madd (a pair reaches
 *         2 x 127 x 127 = 32258: two would overflow int16).
 * The same exact integer either way. */
INL void YMM_FN(iq4_xs_impl_)(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                              bool accumulate, const int RN) {
    const pith_block_q8k *xr[YMM_MAX_RN];
    __m256 acc[YMM_MAX_RN];
    UNROLL for (int t = 0; t < RN; t++) {
        xr[t] = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
        acc[t] = _mm256_setzero_ps();
    }
    const __m256i low = _mm256_set1_epi8(15), three = _mm256_set1_epi32(3), nib = _mm256_set1_epi32(15);
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pith_iq4_values));
    const __m256i table = YMM_VNNI ? _mm256_xor_si256(values, _mm256_set1_epi8((char)0x80)) : values;
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++, g += 8 * PITH_IQ4_XS_BYTES) {
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        __m256i H = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(g + 16)));
        __m256i L = _mm256_loadu_si256((const __m256i *)(g + 32));
        __m256i sc[8];
        UNROLL for (int s = 0; s < 8; s++) {
            __m256i lo4 = _mm256_and_si256(_mm256_srli_epi32(L, 4 * s), nib);
            __m256i hi2 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(H, 2 * s), three), 4);
            sc[s] = _mm256_sub_epi32(_mm256_or_si256(lo4, hi2), _mm256_set1_epi32(32));
        }
#if YMM_VNNI
        /* the scales as int16 pairs (2k, 2k + 1), for the offset term */
        __m256i scp[4];
        UNROLL for (int k = 0; k < 4; k++)
            scp[k] = _mm256_or_si256(_mm256_and_si256(sc[2 * k], _mm256_set1_epi32(0xffff)),
                                     _mm256_slli_epi32(sc[2 * k + 1], 16));
#else
        UNROLL for (int s = 0; s < 8; s++) sc[s] = YMM_FN(pair_)(sc[s]);
#endif
        __m256i iacc[YMM_MAX_RN];
        UNROLL for (int t = 0; t < RN; t++) iacc[t] = _mm256_setzero_si256();
        UNROLL for (int s = 0; s < 8; s++) {
            prefetch_lines(g + YMM_PREFETCH_BYTES + 136 * s, 3);
            /* one vector of low and one of high nibbles at a time (ymm has 16 registers) */
#if YMM_VNNI
            /* 2 chains per token for one token (decode), 1 otherwise: integer sums, the same result */
            const int ch = RN == 1 ? 2 : 1;
            __m256i c[YMM_MAX_RN][4];
            UNROLL for (int t = 0; t < RN; t++)
                UNROLL for (int i = 0; i < 2 * ch; i++) c[t][i] = _mm256_setzero_si256();
#else
            __m256i sum[YMM_MAX_RN];
            UNROLL for (int t = 0; t < RN; t++) sum[t] = _mm256_setzero_si256();
#endif
            UNROLL for (int v = 0; v < 4; v++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 64 + 32 * (4 * s + v)));
                __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, low));
                __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low));
#if !YMM_VNNI
                __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
#endif
                UNROLL for (int t = 0; t < RN; t++) {
                    const int8_t *xq = xr[t][b].qs + 32 * s;
#if YMM_VNNI
                    c[t][v % ch] = YMM_FN(dot4_)(c[t][v % ch], lo, YMM_FN(bcast4_)(xq + 4 * v));
                    c[t][ch + v % ch] = YMM_FN(dot4_)(c[t][ch + v % ch], hi, YMM_FN(bcast4_)(xq + 16 + 4 * v));
#else
                    __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(YMM_FN(bcast4_)(xq + 4 * v), lo));
                    __m256i ph = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(YMM_FN(bcast4_)(xq + 16 + 4 * v), hi));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sc[s]), _mm256_madd_epi16(ph, sc[s])));
#endif
                }
            }
            UNROLL for (int t = 0; t < RN; t++) {
#if YMM_VNNI
                __m256i sum = _mm256_add_epi32(c[t][0], c[t][ch]);
                if (ch == 2) sum = _mm256_add_epi32(sum, _mm256_add_epi32(c[t][1], c[t][3]));
                iacc[t] = YMM_FN(acc_)(iacc[t], _mm256_mullo_epi32(sum, sc[s]));
#else
                iacc[t] = YMM_FN(acc_)(iacc[t], sum[t]);
#endif
            }
        }
        UNROLL for (int t = 0; t < RN; t++) {
            const pith_block_q8k *xb = &xr[t][b];
            __m256i tot = iacc[t];
#if YMM_VNNI
            int32_t p[4]; /* sums of each 32 activations, as int16 pairs (2k, 2k + 1) */
            _mm_storeu_si128((__m128i *)p, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                         _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
            __m256i o = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 4; k++) o = YMM_FN(dotw_)(o, scp[k], _mm256_set1_epi32(p[k]));
            tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(o, 7));
#endif
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, _mm256_set1_ps(xb->d)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < RN; t++) YMM_FN(store8_)(y + t * ldy, acc[t], accumulate);
}

INL void YMM_FN(q4_k_impl_)(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                            bool accumulate, const int RN) {
    YMM_FN(q45_k_impl_)(K, g, x, xs, y, ldy, accumulate, false, RN);
}

INL void YMM_FN(q5_k_impl_)(int K, const uint8_t *g, const void *x, size_t xs, float *y, size_t ldy,
                            bool accumulate, const int RN) {
    YMM_FN(q45_k_impl_)(K, g, x, xs, y, ldy, accumulate, true, RN);
}

#define YMM_ENTRY(NAME, IMPL)                                                                               \
    YMM_TGT void YMM_FN(NAME)(int K, const uint8_t *g, const void *x, size_t xs, int rn, float *y, size_t ldy, \
                              bool accumulate) {                                                            \
        for (int t = 0; t < rn; t += YMM_MAX_RN) {                                                          \
            const uint8_t *xt = (const uint8_t *)x + t * xs;                                                \
            float *yt = y + t * ldy;                                                                        \
            switch (rn - t < YMM_MAX_RN ? rn - t : YMM_MAX_RN) {                                            \
            case 1: YMM_FN(IMPL)(K, g, xt, xs, yt, ldy, accumulate, 1); break;                              \
            case 2: YMM_FN(IMPL)(K, g, xt, xs, yt, ldy, accumulate, 2); break;                              \
            case 3: YMM_FN(IMPL)(K, g, xt, xs, yt, ldy, accumulate, 3); break;                              \
            default: YMM_FN(IMPL)(K, g, xt, xs, yt, ldy, accumulate, 4); break;                             \
            }                                                                                               \
        }                                                                                                   \
    }

YMM_ENTRY(pith_tile_packed_q4_k_x8, q4_k_impl_)
YMM_ENTRY(pith_tile_packed_q5_k_x8, q5_k_impl_)
YMM_ENTRY(pith_tile_packed_q6_k_x8, q6_k_impl_)
YMM_ENTRY(pith_tile_packed_iq4_xs_x8, iq4_xs_impl_)

#undef YMM_ENTRY
#undef INL
#undef YMM_FN
#undef YMM_CAT
#undef YMM_CAT2
