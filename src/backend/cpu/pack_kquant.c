/* Load-time repacking of Q4_K, Q5_K, Q6_K and IQ4_XS weights into groups of R rows: R = 16 for the
 * AVX-512 VNNI packed tiles (kernels_kquant_zmm.c), R = 8 for the AVX2 and AVX-VNNI ones
 * (kernels_kquant_ymm.c). One layout, written once with R as a parameter.
 *
 * In the file layout each row's super-block (256 elements) carries its scales packed in 6-bit fields
 * and its quants in an order made for 128-bit shuffles, so a kernel reading one row at a time unpacks
 * the scales of every row at every matmul and finishes each dot product with horizontal sums. Grouped by
 * R rows and block column, every field of the R rows sits side by side: int32 lane r of a 4R-byte
 * vector (zmm for R = 16, ymm for R = 8) belongs to row r, so one vector operation unpacks a field of
 * all R rows at once, and vpdpbusd against 4 activations broadcast to every lane advances all R rows'
 * dot products with no horizontal reduction. A group takes exactly the bytes of its R rows: decoding
 * reads every weight byte once per token, and widening the 6-bit Q4_K scales and mins to bytes would
 * make that stream 2.8 % longer, while unpacking them from the side-by-side layout costs the tile 8
 * vector operations per R x 256 weights.
 *
 * Q4_K group, per block column b (R x 144 bytes), in order:
 *   f16 d[R], f16 dmin[R]             the rows' super-block scales
 *   u32 A[R], B[R], C[R]              row r's 12 scale bytes: bytes 0-3 in A[r], 4-7 in B[r], 8-11 in C[r]
 *   u8 q[4][8][R][4]                  q[c][v][r][j] = stored byte 32 c + 4 v + j of row r: low nibble is
 *                                     element 64 c + 4 v + j, high nibble element 64 c + 32 + 4 v + j
 * Q5_K group, per block column b (R x 176 bytes): Q4_K's, with the fifth bits between the scales and
 * the nibbles:
 *   f16 d[R], f16 dmin[R], u32 A[R], B[R], C[R]
 *   u8 qh[8][R][4]                    qh[v][r][j] = row r's qh byte 4 v + j: bit s is the fifth bit of
 *                                     element 32 s + 4 v + j
 *   u8 q[4][8][R][4]                  as Q4_K's
 * IQ4_XS group, per block column b (R x 136 bytes):
 *   f16 d[R], u16 scales_h[R], u32 scales_l[R]
 *   u8 q[8][4][R][4]                  q[s][v][r][j] = row r's byte 16 s + 4 v + j of nibbles: low nibble is
 *                                     element 32 s + 4 v + j, high nibble element 32 s + 16 + 4 v + j
 * Q6_K group, per block column b (R x 210 bytes):
 *   f16 d[R]
 *   i8 sc[4][R][4]                    sc[p][r][j] = row r's scale 4 p + j (sub-blocks of 16)
 *   u8 ql[2][2][8][R][4]              ql[h][a][v][r][j] = row r's ql byte 64 h + 32 a + 4 v + j: low nibble
 *                                     of element 128 h + 32 a + 4 v + j, high nibble of element + 64
 *   u8 qh[2][8][R][4]                 qh[h][v][r][j] = row r's qh byte 32 h + 4 v + j: bit pair g holds the
 *                                     high 2 bits of element 128 h + 32 g + 4 v + j
 * Every field's offset is a multiple of R bytes (Q4_K: d 0, dmin 2R, A 4R, B 8R, C 12R, q 16R; Q5_K: qh
 * 16R, q 48R; IQ4_XS: scales_h 2R, scales_l 4R, q 8R; Q6_K: sc 2R, ql 18R, qh 146R). */
#include <string.h>

#include "backend/cpu/kernels_kquant.h"


static void pack_q4_k(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, const int R) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q4_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q4_K_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 2 * R + 2 * r, blk + 2, 2);
            for (int p = 0; p < 3; p++) memcpy(col + 4 * R + 4 * R * p + 4 * r, blk + 4 + 4 * p, 4);
            for (int c = 0; c < 4; c++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 16 * R + 4 * R * (8 * c + v) + 4 * r, blk + 16 + 32 * c + 4 * v, 4);
        }
    }
}

static void pack_q5_k(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, const int R) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q5_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q5_K_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 2 * R + 2 * r, blk + 2, 2);
            for (int p = 0; p < 3; p++) memcpy(col + 4 * R + 4 * R * p + 4 * r, blk + 4 + 4 * p, 4);
            for (int v = 0; v < 8; v++) memcpy(col + 16 * R + 4 * R * v + 4 * r, blk + 16 + 4 * v, 4);
            for (int c = 0; c < 4; c++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 48 * R + 4 * R * (8 * c + v) + 4 * r, blk + 48 + 32 * c + 4 * v, 4);
        }
    }
}

static void pack_iq4_xs(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, const int R) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_IQ4_XS_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_IQ4_XS_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 2 * R + 2 * r, blk + 2, 2);
            memcpy(col + 4 * R + 4 * r, blk + 4, 4);
            for (int s = 0; s < 8; s++)
                for (int v = 0; v < 4; v++) memcpy(col + 8 * R + 4 * R * (4 * s + v) + 4 * r, blk + 8 + 16 * s + 4 * v, 4);
        }
    }
}

static void pack_q6_k(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, const int R) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q6_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q6_K_BYTES;
            memcpy(col + 2 * r, blk + 208, 2);
            for (int p = 0; p < 4; p++) memcpy(col + 2 * R + 4 * R * p + 4 * r, blk + 192 + 4 * p, 4);
            for (int h = 0; h < 2; h++)
                for (int a = 0; a < 2; a++)
                    for (int v = 0; v < 8; v++)
                        memcpy(col + 18 * R + 4 * R * (16 * h + 8 * a + v) + 4 * r, blk + 64 * h + 32 * a + 4 * v, 4);
            for (int h = 0; h < 2; h++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 146 * R + 4 * R * (8 * h + v) + 4 * r, blk + 128 + 32 * h + 4 * v, 4);
        }
    }
}

void pith_pack_q4_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q4_k(K, w, w_stride, dst, 16); }
void pith_pack_q5_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q5_k(K, w, w_stride, dst, 16); }
void pith_pack_q6_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q6_k(K, w, w_stride, dst, 16); }
void pith_pack_iq4_xs_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_iq4_xs(K, w, w_stride, dst, 16); }
void pith_pack_q4_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q4_k(K, w, w_stride, dst, 8); }
void pith_pack_q5_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q5_k(K, w, w_stride, dst, 8); }
void pith_pack_q6_k_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_q6_k(K, w, w_stride, dst, 8); }
void pith_pack_iq4_xs_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) { pack_iq4_xs(K, w, w_stride, dst, 8); }
