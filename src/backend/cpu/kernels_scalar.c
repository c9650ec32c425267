/* Portable kernels: the reference behaviour of every table entry, used when the processor has no AVX2
 * or PITH_FORCE_SCALAR is set. The integer kernels compute the same integer sums as the AVX2 ones. */
#include <math.h>

#include "backend/cpu/kernels.h"

static inline void store(float *y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

static float load_weight(const uint8_t *w, int k, pith_wtype type) {
    uint16_t h;
    switch (type) {
    case PITH_W_F32: {
        float f;
        memcpy(&f, w + 4 * (size_t)k, 4);
        return f;
    }
    case PITH_W_F16:
        memcpy(&h, w + 2 * (size_t)k, 2);
        return pith_f16_to_f32(h);
    default:
        memcpy(&h, w + 2 * (size_t)k, 2);
        return pith_bf16_to_f32(h);
    }
}

static void tile_float(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                       float *y, size_t ldy, bool accumulate, pith_wtype type) {
    for (int r = 0; r < rm; r++) {
        for (int t = 0; t < rn; t++) {
            const float *xt = (const float *)((const uint8_t *)x + t * xs);
            const uint8_t *wr = w + r * ws;
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += load_weight(wr, k, type) * xt[k];
            store(&y[t * ldy + r], sum, accumulate);
        }
    }
}

#define FLOAT_TILE(NAME, TYPE)                                                                       \
    static void NAME(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,  \
                     float *y, size_t ldy, bool accumulate) {                                       \
        tile_float(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, TYPE);                              \
    }
FLOAT_TILE(tile_f32, PITH_W_F32)
FLOAT_TILE(tile_f16, PITH_W_F16)
FLOAT_TILE(tile_bf16, PITH_W_BF16)

/* The 32 signed quants of a Q8_0, Q4_0 or IQ4_NL weight block. */
static void unpack_q32(const uint8_t *blk, int8_t q[PITH_QK], pith_wtype type) {
    if (type == PITH_W_Q8_0) {
        memcpy(q, blk + 2, PITH_QK);
    } else if (type == PITH_W_IQ4_NL) {
        for (int j = 0; j < PITH_QK / 2; j++) {
            q[j] = pith_iq4_values[blk[2 + j] & 15];
            q[j + PITH_QK / 2] = pith_iq4_values[blk[2 + j] >> 4];
        }
    } else {
        for (int j = 0; j < PITH_QK / 2; j++) {
            q[j] = (int8_t)((blk[2 + j] & 15) - 8);
            q[j + PITH_QK / 2] = (int8_t)((blk[2 + j] >> 4) - 8);
        }
    }
}

static void tile_q32(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                     float *y, size_t ldy, bool accumulate, pith_wtype type) {
    size_t bb = type == PITH_W_Q8_0 ? PITH_Q8_0_BYTES : PITH_Q4_0_BYTES; /* IQ4_NL: as Q4_0 */
    int nb = K / PITH_QK;
    for (int r = 0; r < rm; r++) {
        for (int t = 0; t < rn; t++) {
            const pith_block_q8a *xb = (const pith_block_q8a *)((const uint8_t *)x + t * xs);
            const uint8_t *blk = w + r * ws;
            float sum = 0.0f;
            for (int b = 0; b < nb; b++, blk += bb) {
                int8_t q[PITH_QK];
                unpack_q32(blk, q, type);
                int isum = 0;
                for (int j = 0; j < PITH_QK; j++) isum += q[j] * xb[b].qs[j];
                sum += pith_load_f16(blk) * xb[b].d * (float)isum;
            }
            store(&y[t * ldy + r], sum, accumulate);
        }
    }
}

static void tile_q8_0(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                      float *y, size_t ldy, bool accumulate) {
    tile_q32(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_Q8_0);
}

static void tile_iq4_nl(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                        float *y, size_t ldy, bool accumulate) {
    tile_q32(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_IQ4_NL);
}

static void tile_q4_0(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                      float *y, size_t ldy, bool accumulate) {
    tile_q32(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_Q4_0);
}

/* One Q4_K super-block against one q8k block: d_x * (d * sum_s scale_s * <q_s, x_s>
 * - dmin * sum_s min_s * sum(x_s)), every sum an exact integer. */
static float dot_q4_k_block(const uint8_t *blk, const pith_block_q8k *xb) {
    const uint8_t *scales = blk + 4, *q = blk + 16;
    int dots = 0, mins = 0;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        pith_q4k_scale_min(scales, s, &sc, &m);
        const uint8_t *qs = q + (s / 2) * 32;
        int shift = (s & 1) * 4, isum = 0;
        for (int l = 0; l < 32; l++) isum += ((qs[l] >> shift) & 15) * xb->qs[s * 32 + l];
        dots += sc * isum;
        mins += m * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
    }
    return xb->d * (pith_load_f16(blk) * (float)dots - pith_load_f16(blk + 2) * (float)mins);
}

/* Q5_K: as Q4_K, the quants carrying a fifth bit (bit s of qh[l] for element l of sub-block s). */
static float dot_q5_k_block(const uint8_t *blk, const pith_block_q8k *xb) {
    const uint8_t *scales = blk + 4, *qh = blk + 16, *q = blk + 48;
    int dots = 0, mins = 0;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        pith_q4k_scale_min(scales, s, &sc, &m);
        const uint8_t *qs = q + (s / 2) * 32;
        int shift = (s & 1) * 4, isum = 0;
        for (int l = 0; l < 32; l++) isum += (((qs[l] >> shift) & 15) | ((qh[l] >> s) & 1) << 4) * xb->qs[s * 32 + l];
        dots += sc * isum;
        mins += m * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
    }
    return xb->d * (pith_load_f16(blk) * (float)dots - pith_load_f16(blk + 2) * (float)mins);
}

/* IQ4_XS: d_x * d * sum_s (ls_s - 32) <V[n_s], x_s>. */
static float dot_iq4_xs_block(const uint8_t *blk, const pith_block_q8k *xb) {
    int total = 0;
    for (int s = 0; s < 8; s++) {
        const uint8_t *q = blk + 8 + 16 * s;
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += pith_iq4_values[q[j] & 15] * xb->qs[32 * s + j] + pith_iq4_values[q[j] >> 4] * xb->qs[32 * s + 16 + j];
        total += pith_iq4xs_scale(blk, s) * isum;
    }
    return xb->d * pith_load_f16(blk) * (float)total;
}

/* One Q6_K super-block against one q8k block: d * d_x * sum_s scale_s * (<u_s, x_s> - 32 sum(x_s)),
 * with u the unsigned 6-bit quants. */
static float dot_q6_k_block(const uint8_t *blk, const pith_block_q8k *xb) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    int total = 0;
    for (int h = 0; h < 2; h++) {
        for (int g = 0; g < 4; g++) {       /* 32 elements: ql nibble and qh bit pair chosen by g */
            for (int half = 0; half < 2; half++) {
                int s = h * 8 + g * 2 + half, isum = 0;
                for (int i = 0; i < 16; i++) {
                    int l = half * 16 + i;
                    int lo = (ql[h * 64 + l + (g & 1) * 32] >> ((g >> 1) * 4)) & 15;
                    int hi = (qh[h * 32 + l] >> (2 * g)) & 3;
                    isum += (lo | hi << 4) * xb->qs[s * 16 + i];
                }
                total += sc[s] * (isum - 32 * xb->bsums[s]);
            }
        }
    }
    return pith_load_f16(blk + 208) * xb->d * (float)total;
}

static void tile_kquant(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                        float *y, size_t ldy, bool accumulate, pith_wtype type) {
    size_t bb = type == PITH_W_Q4_K   ? PITH_Q4_K_BYTES
              : type == PITH_W_Q5_K   ? PITH_Q5_K_BYTES
              : type == PITH_W_IQ4_XS ? PITH_IQ4_XS_BYTES
                                      : PITH_Q6_K_BYTES;
    int nb = K / PITH_QK_K;
    for (int r = 0; r < rm; r++) {
        for (int t = 0; t < rn; t++) {
            const pith_block_q8k *xb = (const pith_block_q8k *)((const uint8_t *)x + t * xs);
            const uint8_t *blk = w + r * ws;
            float sum = 0.0f;
            for (int b = 0; b < nb; b++, blk += bb)
                sum += type == PITH_W_Q4_K   ? dot_q4_k_block(blk, &xb[b])
                       : type == PITH_W_Q5_K ? dot_q5_k_block(blk, &xb[b])
                       : type == PITH_W_IQ4_XS ? dot_iq4_xs_block(blk, &xb[b])
                                             : dot_q6_k_block(blk, &xb[b]);
            store(&y[t * ldy + r], sum, accumulate);
        }
    }
}

static void tile_q4_k(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                      float *y, size_t ldy, bool accumulate) {
    tile_kquant(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_Q4_K);
}

static void tile_q6_k(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                      float *y, size_t ldy, bool accumulate) {
    tile_kquant(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_Q6_K);
}

static void tile_q5_k(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                      float *y, size_t ldy, bool accumulate) {
    tile_kquant(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_Q5_K);
}

static void tile_iq4_xs(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn,
                        float *y, size_t ldy, bool accumulate) {
    tile_kquant(K, w, ws, rm, x, xs, rn, y, ldy, accumulate, PITH_W_IQ4_XS);
}

static void scale_scalar(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

static void f16_to_f32_scalar(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = pith_f16_to_f32(src[i]);
}

static void f32_to_f16_scalar(const float *src, uint16_t *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = pith_f32_to_f16(src[i]);
}

/* expf's arguments are clamped so it never takes its (slow) underflow or overflow path: below -87
 * the result is under FLT_MIN anyway, above 88 the silu quotient is 0 either way. */
static float exp_shifted_scalar(float *s, float m, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += s[i] = expf(fmaxf(s[i] - m, -87.0f));
    return sum;
}

static void silu_mul_scalar(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(fminf(-g[i], 88.0f))) * u[i];
}

static void pv_accumulate_scalar(float *acc, int acc_ld, const float *p, int p_ld, int nq, const float *v, int v_ld,
                                 int jn, int hd) {
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < jn; j++) {
            float a = p[(size_t)i * p_ld + j];
            for (int d = 0; d < hd; d++) acc[(size_t)i * acc_ld + d] += a * v[(size_t)j * v_ld + d];
        }
}

static const pith_cpu_kernels scalar_kernels = {
    .name = "scalar",
    .tile = {tile_f32, tile_f16, tile_bf16, tile_q8_0, tile_q4_0, tile_q4_k, tile_q6_k, tile_q5_k, tile_iq4_nl,
             tile_iq4_xs},
    .tile_rn = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    .quantize_q8a = pith_quantize_q8a_scalar,
    .quantize_q8k = pith_quantize_q8k_scalar,
    .scale = scale_scalar,
    .f16_to_f32 = f16_to_f32_scalar,
    .f32_to_f16 = f32_to_f16_scalar,
    .exp_shifted = exp_shifted_scalar,
    .silu_mul = silu_mul_scalar,
    .pv_accumulate = pv_accumulate_scalar,
};

const pith_cpu_kernels *pith_cpu_kernels_scalar(void) { return &scalar_kernels; }
