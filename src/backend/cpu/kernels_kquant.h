/* Packed K-quant weights (Q4_K, Q5_K, Q6_K, and IQ4_XS with its 256-element super-blocks): the load-time
 * layouts in groups of 16 rows (AVX-512 VNNI) or 8 rows (AVX2, AVX-VNNI), described in pack_kquant.c, and
 * the packed tiles that read them (kernels_kquant_zmm.c, kernels_kquant_ymm.c).
 *
 * Each tile computes every output of its group's rows in one fixed order whatever the number of tokens in
 * the call (exact int32 sums per super-block, one float multiply-add per super-block), so a batch gives
 * the same bits as single steps. */
#ifndef PITH_CPU_KERNELS_KQUANT_H
#define PITH_CPU_KERNELS_KQUANT_H

#include "backend/cpu/kernels.h"

/* Portable packers: 16 rows of K elements (w_stride bytes apart) into one group at dst. */
void pith_pack_q4_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q5_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q6_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_iq4_xs_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
/* The same layouts on 8 rows. */
void pith_pack_q4_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q5_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q6_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_iq4_xs_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);

/* x86-64 only; run only once the AVX-512 VNNI table's constructor has checked the processor. */
void pith_tile_packed_q4_k_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                               size_t ldy, bool accumulate);
void pith_tile_packed_q5_k_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                               size_t ldy, bool accumulate);
void pith_tile_packed_q6_k_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                               size_t ldy, bool accumulate);
void pith_tile_packed_iq4_xs_x16(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y,
                                 size_t ldy, bool accumulate);

/* x86-64 only: the 8-row tiles, with AVX-VNNI (_vnni) and with plain AVX2 (_avx2); run only once the
 * AVX-VNNI or AVX2 table's constructor has checked the processor. */
#define PITH_KQ_X8_TILE(NAME)                                                                                  \
    void NAME(int K, const uint8_t *g, const void *x, size_t x_stride, int rn, float *y, size_t ldy, bool accumulate);
PITH_KQ_X8_TILE(pith_tile_packed_q4_k_x8_avx2)
PITH_KQ_X8_TILE(pith_tile_packed_q5_k_x8_avx2)
PITH_KQ_X8_TILE(pith_tile_packed_q6_k_x8_avx2)
PITH_KQ_X8_TILE(pith_tile_packed_iq4_xs_x8_avx2)
PITH_KQ_X8_TILE(pith_tile_packed_q4_k_x8_vnni)
PITH_KQ_X8_TILE(pith_tile_packed_q5_k_x8_vnni)
PITH_KQ_X8_TILE(pith_tile_packed_q6_k_x8_vnni)
PITH_KQ_X8_TILE(pith_tile_packed_iq4_xs_x8_vnni)
#undef PITH_KQ_X8_TILE

#endif
