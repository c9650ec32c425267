/* Block-quantized formats: the weight layouts of GGUF files and the 8-bit activation blocks that the
 * integer matmul kernels multiply them with.
 *
 * Weight blocks (byte-exact GGML layouts, read through byte offsets since mapped files promise no
 * alignment):
 *   Q8_0: f16 d, int8 q[32]                      x = d * q
 *   Q4_0: f16 d, uint8 nibbles[16]               x[j] = d * ((n[j] & 15) - 8), x[j+16] = d * ((n[j] >> 4) - 8)
 *   Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32, 128 bytes of
 *         nibbles                                x = d * scale_s * q - dmin * min_s
 *   Q5_K: as Q4_K with 32 bytes qh between the scales and the nibbles: q = nibble + 16 * bit, bit s of
 *         qh[l] the fifth bit of element l of sub-block s (q in 0..31)
 *   IQ4_NL: f16 d, uint8 nibbles[16] (as Q4_0)    x[j] = d * V[n[j] & 15], x[j+16] = d * V[n[j] >> 4],
 *                                                V = pith_iq4_values
 *   IQ4_XS: f16 d, uint16 scales_h, uint8 scales_l[4], 128 bytes of nibbles: 8 sub-blocks of 32, each
 *         with a 6-bit scale ls = (nibble s of scales_l) | (bit pair s of scales_h) << 4 and 16 bytes
 *         of nibbles as IQ4_NL's            x = d * (ls - 32) * V[n]
 *   Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, int8 scales[16] (sub-blocks of 16), f16 d
 *                                                x = d * scale_s * (q - 32)
 *
 * Activation blocks are ours (in scratch memory, aligned): a row of activations quantized with one
 * float scale per block, d = max|x| / 127, q = round(x / d), so |x - d*q| <= d/2 per element.
 *   q8a: for Q8_0/Q4_0/IQ4_NL weights, blocks of 32, with s = d * sum(q): Q4_0 kernels multiply the unsigned
 *        nibbles directly and subtract 8 * s per block.
 *   q8k: for Q4_K/Q5_K/Q6_K/IQ4_XS weights, blocks of 256 with the sums of each 16 quants (bsums), which the
 *        kernels use to apply the K-quants' offsets (Q4_K mins, Q6_K's -32) once per 16 elements. */
#ifndef PITH_CPU_QUANTS_H
#define PITH_CPU_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pith/tensor.h"

#define PITH_QK 32
#define PITH_QK_K 256

#define PITH_Q8_0_BYTES 34
#define PITH_Q4_0_BYTES 18
#define PITH_Q4_K_BYTES 144
#define PITH_Q5_K_BYTES 176
#define PITH_Q6_K_BYTES 210
#define PITH_IQ4_NL_BYTES 18
#define PITH_IQ4_XS_BYTES 136

/* The 16 values IQ4_NL and IQ4_XS nibbles stand for (GGML's kvalues_iq4nl: a non-linear grid). */
extern const int8_t pith_iq4_values[16];

typedef struct pith_block_q8a {
    float d;
    float s;
    int8_t qs[PITH_QK];
} pith_block_q8a;

typedef struct pith_block_q8k {
    float d;
    int16_t bsums[PITH_QK_K / 16];
    int8_t qs[PITH_QK_K];
} pith_block_q8k;

static inline float pith_load_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return pith_f16_to_f32(h);
}

/* Q4_K packs eight 6-bit scales and eight 6-bit mins in 12 bytes; sub-block j's pair. */
static inline void pith_q4k_scale_min(const uint8_t *scales, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = scales[j] & 63;
        *min = scales[j + 4] & 63;
    } else {
        *scale = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
        *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

/* IQ4_XS's 6-bit scale of sub-block s, with its offset: ls - 32 in -32..31. */
static inline int pith_iq4xs_scale(const uint8_t *blk, int s) {
    uint16_t h;
    memcpy(&h, blk + 2, 2);
    return (((blk[4 + s / 2] >> 4 * (s % 2)) & 15) | ((h >> 2 * s) & 3) << 4) - 32;
}

/* Expands n elements (a multiple of the type's block size) of a row of `type` to float. */
void pith_dequantize_row(pith_dtype type, const void *src, float *dst, int64_t n);

/* Scalar activation quantizers (n a multiple of the block size). The AVX2 ones live with their kernels. */
void pith_quantize_q8a_scalar(const float *x, pith_block_q8a *out, int n);
void pith_quantize_q8k_scalar(const float *x, pith_block_q8k *out, int n);

#endif
