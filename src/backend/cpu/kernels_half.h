/* Packed half-precision weights (F16, BF16): the load-time layouts and the packed tiles that read them
 * (kernels_half.c), for the AVX2 tables (8-row groups) and the AVX-512 table (16-row groups). Both
 * layouts take exactly the group's rows' bytes, for any K (half weights have no blocks), and a tile
 * reads them as sequential streams, which decode needs to run at memory speed.
 *
 * x8 (AVX2): two quads of 4 rows, quad h (rows 4h..4h+3) at byte 8 K h. In a quad, per block of 8
 *   elements b < K / 8, the 4 rows' 8 elements (row r at byte 64 b + 16 r: one cache line per block),
 *   then the K % 8 tail elements row after row (row r's at byte 64 (K / 8) + 2 (K % 8) r).
 * x16 (AVX-512): the transpose ("k-major"), element (r, k) at element offset 16 k + r: per k, one
 *   vector of the 16 rows' weights, multiplied by x[k] broadcast, so the 16 outputs accumulate side
 *   by side with no horizontal sums.
 *
 * Each tile computes every output in one fixed order whatever the number of tokens in the call (x8:
 * 8 lane sums over the blocks, their horizontal sum, then the tail in order; x16: 4 chains by k mod 4,
 * added as (c0 + c1) + (c2 + c3)), so a batch gives the same bits as single steps. */
#ifndef PITH_CPU_KERNELS_HALF_H
#define PITH_CPU_KERNELS_HALF_H

#include "backend/cpu/kernels.h"

/* Portable packers, for 2-byte elements of either type. */
void pith_pack_half_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_half_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);

/* x86-64 only; each runs only once its table's constructor has checked the processor: x8 needs AVX2,
 * FMA and F16C, x16 also AVX-512 F. */
void pith_tile_packed_f16_x8(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y, size_t ldy,
                             bool accumulate);
void pith_tile_packed_bf16_x8(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y, size_t ldy,
                              bool accumulate);
void pith_tile_packed_f16_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                              size_t ldy, bool accumulate);
void pith_tile_packed_bf16_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                               size_t ldy, bool accumulate);

#endif
