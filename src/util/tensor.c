#include "pith/tensor.h"

#include <string.h>

bool pith_dtype_valid(uint32_t type) {
    switch (type) {
    case PITH_F32: case PITH_F16: case PITH_Q4_0: case PITH_Q8_0:
    case PITH_Q4_K: case PITH_Q5_K: case PITH_Q6_K: case PITH_IQ4_NL: case PITH_IQ4_XS: case PITH_BF16:
    case PITH_MXFP4:
        return true;
    default:
        return false;
    }
}

const char *pith_dtype_name(pith_dtype type) {
    switch (type) {
    case PITH_F32: return "F32";
    case PITH_F16: return "F16";
    case PITH_Q4_0: return "Q4_0";
    case PITH_Q8_0: return "Q8_0";
    case PITH_Q4_K: return "Q4_K";
    case PITH_Q5_K: return "Q5_K";
    case PITH_Q6_K: return "Q6_K";
    case PITH_IQ4_NL: return "IQ4_NL";
    case PITH_IQ4_XS: return "IQ4_XS";
    case PITH_BF16: return "BF16";
    case PITH_MXFP4: return "MXFP4";
    }
    return "?";
}

int64_t pith_dtype_block_elems(pith_dtype type) {
    switch (type) {
    case PITH_Q4_0: case PITH_Q8_0: case PITH_IQ4_NL: case PITH_MXFP4: return 32;
    case PITH_Q4_K: case PITH_Q5_K: case PITH_Q6_K: case PITH_IQ4_XS: return 256;
    default: return 1;
    }
}

size_t pith_dtype_block_bytes(pith_dtype type) {
    switch (type) {
    case PITH_F32: return 4;
    case PITH_F16: case PITH_BF16: return 2;
    case PITH_Q4_0: return 2 + 16;
    case PITH_Q8_0: return 2 + 32;
    case PITH_Q4_K: return 2 + 2 + 12 + 128;
    case PITH_Q5_K: return 2 + 2 + 12 + 32 + 128;
    case PITH_Q6_K: return 128 + 64 + 16 + 2;
    case PITH_IQ4_NL: return 2 + 16;
    case PITH_IQ4_XS: return 2 + 2 + 4 + 128;
    case PITH_MXFP4: return 1 + 16;
    }
    return 0;
}

size_t pith_dtype_row_bytes(pith_dtype type, int64_t n) {
    int64_t be = pith_dtype_block_elems(type);
    if (n < 0 || n % be) return 0;
    return (size_t)(n / be) * pith_dtype_block_bytes(type);
}

int64_t pith_tensor_nelems(const pith_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < PITH_MAX_DIMS; i++) {
        if (t->ne[i] < 0) return -1;
        if (t->ne[i] && n > INT64_MAX / t->ne[i]) return -1;
        n *= t->ne[i];
    }
    return n;
}

float pith_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pith_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    /* normal: round to nearest even on the 13 dropped bits */
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float pith_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pith_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

bool pith_tensor_floats(const pith_tensor *t, int64_t first, int64_t n, float *out) {
    size_t width = t->type == PITH_F32 ? 4 : t->type == PITH_F16 || t->type == PITH_BF16 ? 2 : 0;
    if (!width || first < 0 || n < 0 || t->nbytes < (size_t)(first + n) * width) return false;
    const uint8_t *src = (const uint8_t *)t->data + (size_t)first * width;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = 0;
        if (width == 2) memcpy(&h, src + 2 * (size_t)i, 2);
        if (t->type == PITH_F32) memcpy(&out[i], src + 4 * (size_t)i, 4);
        else out[i] = t->type == PITH_F16 ? pith_f16_to_f32(h) : pith_bf16_to_f32(h);
    }
    return true;
}
