#include "backend/cpu/quants.h"

#include "backend/cpu/mxfp4.h"

#include <math.h>

static void dequant_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_Q8_0_BYTES, y += PITH_QK) {
        float d = pith_load_f16(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < PITH_QK; j++) y[j] = d * q[j];
    }
}

static void dequant_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_Q4_0_BYTES, y += PITH_QK) {
        float d = pith_load_f16(b);
        const uint8_t *q = b + 2;
        for (int j = 0; j < PITH_QK / 2; j++) {
            y[j] = d * ((q[j] & 15) - 8);
            y[j + PITH_QK / 2] = d * ((q[j] >> 4) - 8);
        }
    }
}

const int8_t pith_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void dequant_iq4_nl(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_IQ4_NL_BYTES, y += PITH_QK) {
        float d = pith_load_f16(b);
        for (int j = 0; j < PITH_QK / 2; j++) {
            y[j] = d * pith_iq4_values[b[2 + j] & 15];
            y[j + PITH_QK / 2] = d * pith_iq4_values[b[2 + j] >> 4];
        }
    }
}

static void dequant_iq4_xs(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_IQ4_XS_BYTES) {
        float d = pith_load_f16(b);
        for (int s = 0; s < 8; s++, y += 32) {
            float dl = d * (float)pith_iq4xs_scale(b, s);
            const uint8_t *q = b + 8 + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * pith_iq4_values[q[j] & 15];
                y[j + 16] = dl * pith_iq4_values[q[j] >> 4];
            }
        }
    }
}

static void dequant_q4_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_Q4_K_BYTES) {
        float d = pith_load_f16(b), dmin = pith_load_f16(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        /* 64 elements per 32 bytes of nibbles: low nibbles are sub-block 2s, high ones 2s+1 */
        for (int s = 0; s < 8; s += 2, q += 32) {
            int sc0, m0, sc1, m1;
            pith_q4k_scale_min(scales, s, &sc0, &m0);
            pith_q4k_scale_min(scales, s + 1, &sc1, &m1);
            for (int l = 0; l < 32; l++) *y++ = d * sc0 * (q[l] & 15) - dmin * m0;
            for (int l = 0; l < 32; l++) *y++ = d * sc1 * (q[l] >> 4) - dmin * m1;
        }
    }
}

static void dequant_q5_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_Q5_K_BYTES) {
        float d = pith_load_f16(b), dmin = pith_load_f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 48;
        /* as Q4_K, with bit s of qh[l] adding 16 to element l of sub-block s */
        for (int s = 0; s < 8; s += 2, q += 32) {
            int sc0, m0, sc1, m1;
            pith_q4k_scale_min(scales, s, &sc0, &m0);
            pith_q4k_scale_min(scales, s + 1, &sc1, &m1);
            for (int l = 0; l < 32; l++) *y++ = d * sc0 * ((q[l] & 15) | ((qh[l] >> s) & 1) << 4) - dmin * m0;
            for (int l = 0; l < 32; l++) *y++ = d * sc1 * ((q[l] >> 4) | ((qh[l] >> (s + 1)) & 1) << 4) - dmin * m1;
        }
    }
}

static void dequant_q6_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += PITH_Q6_K_BYTES) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = pith_load_f16(b + 208);
        /* each half (128 elements) uses 64 bytes of ql, 32 of qh and 8 scales */
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int s = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[s] * q1;
                y[l + 32] = d * sc[s + 2] * q2;
                y[l + 64] = d * sc[s + 4] * q3;
                y[l + 96] = d * sc[s + 6] * q4;
            }
        }
    }
}

void pith_dequantize_row(pith_dtype type, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    switch (type) {
    case PITH_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case PITH_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = pith_load_f16(b + 2 * i);
        break;
    case PITH_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            dst[i] = pith_bf16_to_f32(h);
        }
        break;
    case PITH_Q8_0: dequant_q8_0(b, dst, n / PITH_QK); break;
    case PITH_Q4_0: dequant_q4_0(b, dst, n / PITH_QK); break;
    case PITH_Q4_K: dequant_q4_k(b, dst, n / PITH_QK_K); break;
    case PITH_Q5_K: dequant_q5_k(b, dst, n / PITH_QK_K); break;
    case PITH_Q6_K: dequant_q6_k(b, dst, n / PITH_QK_K); break;
    case PITH_IQ4_NL: dequant_iq4_nl(b, dst, n / PITH_QK); break;
    case PITH_IQ4_XS: dequant_iq4_xs(b, dst, n / PITH_QK_K); break;
    case PITH_MXFP4: pith_dequant_mxfp4(b, dst, n / PITH_QK); break;
    }
}

/* Quantizes one block of n values: returns the scale, writes round(x / d) (half to even). */
static float quantize_block(const float *x, int8_t *q, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < n; j++) q[j] = (int8_t)lrintf(x[j] * id);
    return d;
}

void pith_quantize_q8a_scalar(const float *x, pith_block_q8a *out, int n) {
    for (int i = 0; i < n / PITH_QK; i++) {
        out[i].d = quantize_block(x + i * PITH_QK, out[i].qs, PITH_QK);
        int sum = 0;
        for (int j = 0; j < PITH_QK; j++) sum += out[i].qs[j];
        out[i].s = out[i].d * (float)sum;
    }
}

void pith_quantize_q8k_scalar(const float *x, pith_block_q8k *out, int n) {
    for (int i = 0; i < n / PITH_QK_K; i++) {
        out[i].d = quantize_block(x + i * PITH_QK_K, out[i].qs, PITH_QK_K);
        for (int s = 0; s < PITH_QK_K / 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += out[i].qs[s * 16 + j];
            out[i].bsums[s] = (int16_t)sum;
        }
    }
}
