/* Reference block formats for the tests, written from the GGML format definitions independently of
 * src/backend/cpu: element-wise dequantization (with a magnitude for rounding bounds) and simple
 * quantizers that produce valid blocks of every type. Also a small deterministic random source. */
#ifndef PITH_TEST_QUANT_REF_H
#define PITH_TEST_QUANT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pith/tensor.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd_u64(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static inline float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)((rnd_u64() >> 40) * (1.0 / 16777216.0)); }

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = pith_f32_to_f16(v);
    memcpy(p, &h, 2);
}
static inline double get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return pith_f16_to_f32(h);
}

/* GGML's kvalues_iq4nl: the values IQ4_NL and IQ4_XS nibbles stand for. */
static const int ref_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_XS sub-block j's scale: 6 bits, low 4 in nibble j of scales_l[4], high 2 in bits 2j of scales_h,
 * stored with +32. */
static inline int ref_iq4xs_scale(const uint8_t *b, int j) {
    int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
    int hi = ((b[2] | b[3] << 8) >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* index of the nearest table value to v */
static inline int ref_iq4_nearest(double v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabs(v - ref_iq4[k]) < fabs(v - ref_iq4[best])) best = k;
    return best;
}

/* ---------- reference formats: element i of a row, and "magnitude" terms for the error bounds ---------- */

static inline size_t block_bytes(pith_dtype t) { return pith_dtype_block_bytes(t); }
static inline int block_elems(pith_dtype t) { return (int)pith_dtype_block_elems(t); }

static inline void q4k_sm(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Value of element i of a row; *mag receives the magnitude used in rounding bounds: |value|, or the sum
 * of the magnitudes of the terms a kernel may compute separately and subtract (Q4_0: d n and 8 d;
 * Q4_K: d sc q and dmin m). */
static inline double ref_elem(pith_dtype t, const uint8_t *row, int i, double *mag) {
    double v;
    const uint8_t *b = row + (size_t)(i / block_elems(t)) * block_bytes(t);
    int e = i % block_elems(t);
    *mag = -1;
    switch (t) {
    case PITH_F32: {
        float f;
        memcpy(&f, row + 4 * (size_t)i, 4);
        v = f;
        break;
    }
    case PITH_F16: v = get_f16(row + 2 * (size_t)i); break;
    case PITH_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)i, 2);
        v = pith_bf16_to_f32(h);
        break;
    }
    case PITH_Q8_0: v = get_f16(b) * (int8_t)b[2 + e]; break;
    case PITH_Q4_0: {
        int byte = b[2 + e % 16];
        int nib = e < 16 ? byte & 15 : byte >> 4;
        v = get_f16(b) * (nib - 8);
        /* kernels may multiply the nibble and the -8 separately */
        *mag = fabs(get_f16(b)) * (nib + 8);
        break;
    }
    case PITH_Q4_K: {
        int sc, m;
        q4k_sm(b + 4, e / 32, &sc, &m);
        int within = e % 64;
        int byte = b[16 + (e / 64) * 32 + within % 32];
        int nib = within < 32 ? byte & 15 : byte >> 4;
        double pos = get_f16(b) * sc * nib, neg = get_f16(b + 2) * m;
        v = pos - neg;
        *mag = fabs(pos) + fabs(neg);
        break;
    }
    case PITH_IQ4_NL: {
        /* f16 d, 16 bytes: byte j holds element j (low nibble) and j + 16 (high) */
        int byte = b[2 + e % 16];
        v = get_f16(b) * ref_iq4[e < 16 ? byte & 15 : byte >> 4];
        /* kernels may multiply the value + 128 and the -128 separately */
        *mag = fabs(get_f16(b)) * (ref_iq4[e < 16 ? byte & 15 : byte >> 4] + 256);
        break;
    }
    case PITH_IQ4_XS: {
        /* f16 d, u16 scales_h, u8 scales_l[4], then 16 bytes per sub-block of 32 laid out as IQ4_NL's */
        int s = e / 32, w = e % 32;
        int byte = b[8 + 16 * s + w % 16];
        v = get_f16(b) * ref_iq4xs_scale(b, s) * ref_iq4[w < 16 ? byte & 15 : byte >> 4];
        *mag = fabs(get_f16(b) * ref_iq4xs_scale(b, s)) * (ref_iq4[w < 16 ? byte & 15 : byte >> 4] + 256);
        break;
    }
    case PITH_Q5_K: {
        /* Q4_K's fields, then qh[32]: bit s of qh[l] is the fifth bit of element 32 s + l */
        int sc, m;
        q4k_sm(b + 4, e / 32, &sc, &m);
        int within = e % 64;
        int byte = b[48 + (e / 64) * 32 + within % 32];
        int nib = within < 32 ? byte & 15 : byte >> 4;
        int q = nib + 16 * ((b[16 + e % 32] >> (e / 32)) & 1);
        double pos = get_f16(b) * sc * q, neg = get_f16(b + 2) * m;
        v = pos - neg;
        *mag = fabs(pos) + fabs(neg);
        break;
    }
    case PITH_Q6_K: {
        int half = e / 128, w = e % 128, g = w / 32, l = w % 32;
        int byte = b[half * 64 + l + (g & 1) * 32];
        int nib = g < 2 ? byte & 15 : byte >> 4;
        int hi = (b[128 + half * 32 + l] >> (2 * g)) & 3;
        v = get_f16(b + 208) * (int8_t)b[192 + e / 16] * ((nib | hi << 4) - 32);
        break;
    }
    default: v = 0;
    }
    if (*mag < 0) *mag = fabs(v);
    return v;
}

/* ---------- reference quantizers (float row -> blocks) ---------- */

static inline int iround(double x) { return (int)lrint(x); }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline void ref_quantize(pith_dtype t, const float *x, int n, uint8_t *out) {
    int be = block_elems(t);
    for (int b0 = 0; b0 < n; b0 += be) {
        const float *xb = x + b0;
        uint8_t *o = out + (size_t)(b0 / be) * block_bytes(t);
        double amax = 0, mn = 0, mx = 0;
        for (int i = 0; i < be; i++) {
            amax = fmax(amax, fabs(xb[i]));
            mn = fmin(mn, xb[i]);
            mx = fmax(mx, xb[i]);
        }
        switch (t) {
        case PITH_F32: memcpy(o, xb, 4); break;
        case PITH_F16: put_f16(o, xb[0]); break;
        case PITH_BF16: {
            uint16_t h = pith_f32_to_bf16(xb[0]);
            memcpy(o, &h, 2);
            break;
        }
        case PITH_Q8_0: {
            put_f16(o, (float)(amax / 127));
            double d = get_f16(o);
            for (int i = 0; i < 32; i++) o[2 + i] = (uint8_t)(int8_t)(d ? clampi(iround(xb[i] / d), -127, 127) : 0);
            break;
        }
        case PITH_Q4_0: {
            put_f16(o, (float)(amax / 7));
            double d = get_f16(o);
            for (int i = 0; i < 16; i++) {
                int lo = d ? clampi(iround(xb[i] / d) + 8, 0, 15) : 8;
                int hi = d ? clampi(iround(xb[i + 16] / d) + 8, 0, 15) : 8;
                o[2 + i] = (uint8_t)(lo | hi << 4);
            }
            break;
        }
        case PITH_Q4_K:
        case PITH_Q5_K: {
            /* x ~ d*sc*q - dmin*m per sub-block of 32, with m >= 0 the negated sub-block minimum;
             * q in 0..15 (Q4_K) or 0..31 (Q5_K, whose fifth bits go to qh[32] before the nibbles) */
            const int qmax = t == PITH_Q5_K ? 31 : 15;
            uint8_t *q = o + (t == PITH_Q5_K ? 48 : 16);
            double scale[8], minv[8], smax = 0, mmax = 0;
            for (int s = 0; s < 8; s++) {
                double lo = 0, hi = 0;
                for (int i = 0; i < 32; i++) {
                    lo = fmin(lo, xb[s * 32 + i]);
                    hi = fmax(hi, xb[s * 32 + i]);
                }
                scale[s] = (hi - lo) / qmax;
                minv[s] = -lo;
                smax = fmax(smax, scale[s]);
                mmax = fmax(mmax, minv[s]);
            }
            put_f16(o, (float)(smax / 63));
            put_f16(o + 2, (float)(mmax / 63));
            double d = get_f16(o), dmin = get_f16(o + 2);
            int sc[8], m[8];
            for (int s = 0; s < 8; s++) {
                sc[s] = d ? clampi(iround(scale[s] / d), 0, 63) : 0;
                m[s] = dmin ? clampi(iround(minv[s] / dmin), 0, 63) : 0;
            }
            uint8_t *S = o + 4;
            for (int j = 0; j < 4; j++) {
                S[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
                S[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
                S[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
            }
            memset(q, 0, 128);
            if (t == PITH_Q5_K) memset(o + 16, 0, 32);
            for (int i = 0; i < 256; i++) {
                int s = i / 32;
                double step = d * sc[s];
                int v = step ? clampi(iround((xb[i] + dmin * m[s]) / step), 0, qmax) : 0;
                int within = i % 64;
                q[(i / 64) * 32 + within % 32] |= (uint8_t)(within < 32 ? (v & 15) : (v & 15) << 4);
                if (v & 16) o[16 + i % 32] |= (uint8_t)(1 << s);
            }
            break;
        }
        case PITH_IQ4_NL: {
            /* the element of largest magnitude maps onto -127, the table's end */
            double big = 0;
            for (int i = 0; i < 32; i++)
                if (fabs(xb[i]) > fabs(big)) big = xb[i];
            put_f16(o, (float)(-big / 127));
            double d = get_f16(o);
            memset(o + 2, 0, 16);
            for (int i = 0; i < 32; i++) {
                int k = d ? ref_iq4_nearest(xb[i] / d) : 8;
                o[2 + i % 16] |= (uint8_t)(i < 16 ? k : k << 4);
            }
            break;
        }
        case PITH_IQ4_XS: {
            double dl[8], dmax = 0;
            for (int s = 0; s < 8; s++) {
                double big = 0;
                for (int i = 0; i < 32; i++)
                    if (fabs(xb[32 * s + i]) > fabs(big)) big = xb[32 * s + i];
                dl[s] = -big / 127;
                dmax = fmax(dmax, fabs(dl[s]));
            }
            put_f16(o, (float)(dmax / 31));
            double d = get_f16(o);
            memset(o + 2, 0, 134);
            for (int s = 0; s < 8; s++) {
                int sc = d ? clampi(iround(dl[s] / d), -32, 31) : 0;
                int ls = sc + 32;
                o[4 + s / 2] |= (uint8_t)((ls & 15) << (4 * (s % 2)));
                int hb = (ls >> 4) << (2 * s);
                o[2] |= (uint8_t)(hb & 255);
                o[3] |= (uint8_t)(hb >> 8);
                double step = d * sc;
                for (int i = 0; i < 32; i++) {
                    int k = step ? ref_iq4_nearest(xb[32 * s + i] / step) : 8;
                    o[8 + 16 * s + i % 16] |= (uint8_t)(i < 16 ? k : k << 4);
                }
            }
            break;
        }
        case PITH_Q6_K: {
            double scale[16], smax = 0;
            for (int s = 0; s < 16; s++) {
                double a = 0;
                for (int i = 0; i < 16; i++) a = fmax(a, fabs(xb[s * 16 + i]));
                scale[s] = a / 31;
                smax = fmax(smax, scale[s]);
            }
            put_f16(o + 208, (float)(smax / 127));
            double d = get_f16(o + 208);
            memset(o, 0, 192);
            for (int s = 0; s < 16; s++) o[192 + s] = (uint8_t)(int8_t)(d ? clampi(iround(scale[s] / d), -128, 127) : 0);
            for (int i = 0; i < 256; i++) {
                double step = d * (int8_t)o[192 + i / 16];
                int q = (step ? clampi(iround(xb[i] / step), -32, 31) : 0) + 32;
                int half = i / 128, w = i % 128, g = w / 32, l = w % 32;
                o[half * 64 + l + (g & 1) * 32] |= (uint8_t)(g < 2 ? (q & 15) : (q & 15) << 4);
                o[128 + half * 32 + l] |= (uint8_t)((q >> 4) << (2 * g));
            }
            break;
        }
        default: break;
        }
    }
}

/* Random bytes as blocks: every bit pattern of the quants and scales, with sane (finite) f16 scales. */
static inline void random_blocks(pith_dtype t, int n, uint8_t *out) {
    size_t bytes = pith_dtype_row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++) out[i] = (uint8_t)rnd_u64();
    int nb = n / block_elems(t);
    for (int b = 0; b < nb; b++) {
        uint8_t *o = out + (size_t)b * block_bytes(t);
        switch (t) {
        case PITH_Q8_0: case PITH_Q4_0: case PITH_IQ4_NL: put_f16(o, rnd_uniform(-0.05f, 0.05f)); break;
        case PITH_IQ4_XS: put_f16(o, rnd_uniform(-0.002f, 0.002f)); break;
        case PITH_Q4_K:
        case PITH_Q5_K:
            put_f16(o, rnd_uniform(0.0f, 0.01f));
            put_f16(o + 2, rnd_uniform(0.0f, 0.01f));
            break;
        case PITH_Q6_K: put_f16(o + 208, rnd_uniform(-0.002f, 0.002f)); break;
        case PITH_MXFP4: o[0] = (uint8_t)(118 + rnd_u64() % 8); break; /* scales 2^-10..2^-3 */
        default: break;
        }
    }
}

#endif
