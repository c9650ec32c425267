/* MXFP4 (GGUF type 39, OCP Microscaling FP4; GPT-OSS's expert weights): blocks of 32 values, each block
 * one E8M0 scale byte e followed by 16 bytes of 4-bit E2M1 codes (17 bytes; byte j holds element j in
 * its low nibble and element j + 16 in its high nibble, as Q4_0 does). An E2M1 code is sign (bit 3),
 * exponent (bits 2-1) and mantissa (bit 0): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. Stored here,
 * as in llama.cpp, as the doubled integers 0, 1, 2, 3, 4, 6, 8, 12 (sign bit: negated) with the scale
 * halved:  x = kv[code] * 2^(e - 128)  (= E2M1(code) * 2^(e - 127)).
 *
 * Products run against q8a activation blocks (quants.h): per block d_w * d_x * sum kv[code_j] * q_j,
 * an exact integer sum. Tiles on the file layout, so that memory-mapped experts run on them:
 * portable scalar; AVX2 (the 16 doubled values are looked up with one byte shuffle, multiplied with
 * maddubs and the sign trick), the AVX2 and AVX-VNNI tables'; AVX-512 VNNI (mxfp4_zmm.c: four blocks per
 * register, vpdpbusd), the avx512-vnni table's. Where experts are repacked, the avx512-vnni table packs
 * MXFP4 into Q4_0's 16-row lanes layout with the scale bytes in place of the f16 scales (pack.c; the same
 * bytes) and runs the IQ4_NL packed tile on it with this table of values (kernels_avx2.c): the rows
 * of 16 in one register, about twice the file-layout tile's rate. The AVX2 and AVX-VNNI tables pack it
 * into the 8-row lanes layout and run the maddubs lanes tile with the values + 12 (kernels_avx2.c):
 * 2.5 -> 7.6 GB/s per thread streamed on a Zen 1 core. */
#ifndef PITH_CPU_MXFP4_H
#define PITH_CPU_MXFP4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"

#define PITH_MXFP4_BYTES 17

/* The doubled E2M1 values of the 16 codes. */
extern const int8_t pith_mxfp4_values[16];

/* 2^(e - 128): the halved E8M0 scale (e = 0 and 1 give the float denormals 2^-128 and 2^-127). */
float pith_mxfp4_scale(uint8_t e);

void pith_dequant_mxfp4(const uint8_t *src, float *dst, int64_t n_blocks);

/* Tiles as kernels.h describes, x in q8a blocks. */
void pith_tile_mxfp4_scalar(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                            size_t ldy, bool accumulate);
/* Only on a processor with AVX2 (and FMA). */
void pith_tile_mxfp4_avx2(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                          size_t ldy, bool accumulate);

/* Only on a processor with AVX-512 F, BW, VL and VNNI (pith_cpu_kernels_avx512_vnni() not NULL). */
void pith_tile_mxfp4_avx512(int K, const uint8_t *w, size_t ws, int rm, const void *x, size_t xs, int rn, float *y,
                            size_t ldy, bool accumulate);

/* A kernel table with the MXFP4 tile added to k's (one copy per table, made once). */
const pith_cpu_kernels *pith_kernels_with_mxfp4(const pith_cpu_kernels *k);

#endif
