/* Load-time repacking of Q4_K, Q5_K, Q6_K and IQ4_XS weights into 16-row groups for the AVX-512 VNNI packed tiles
 * (kernels_kquant_zmm.c).
 *
 * In the file layout each row's super-block (256 elements) carries its scales packed in 6-bit fields
 * and its quants in an order made for 128-bit shuffles, so a kernel reading one row at a time unpacks
 * the scales of every row at every matmul and finishes each dot product with horizontal sums. Grouped by
 * 16 rows and block column, every field of the 16 rows sits side by side: int32 lane r of a 64-byte
 * vector belongs to row r, so one vector operation unpacks a field of all 16 rows at once, and vpdpbusd
 * against 4 activations broadcast to every lane advances all 16 rows' dot products with no horizontal
 * reduction. A group takes exactly the bytes of its 16 rows: decoding reads every weight byte once per
 * token, and widening the 6-bit Q4_K scales and mins to bytes would make that stream 2.8 % longer, while
 * unpacking them from the side-by-side layout costs the tile 8 vector operations per 16 x 256 weights.
 *
 * Q4_K group, per block column b (16 x 144 = 2304 bytes), in order:
 *   f16 d[16], f16 dmin[16]           the rows' super-block scales
 *   u32 A[16], B[16], C[16]           row r's 12 scale bytes: bytes 0-3 in A[r], 4-7 in B[r], 8-11 in C[r]
 *   u8 q[4][8][16][4]                 q[c][v][r][j] = stored byte 32 c + 4 v + j of row r: low nibble is
 *                                     element 64 c + 4 v + j, high nibble element 64 c + 32 + 4 v + j
 * Q5_K group, per block column b (16 x 176 = 2816 bytes): Q4_K's, with the fifth bits between the
 * scales and the nibbles:
 *   f16 d[16], f16 dmin[16], u32 A[16], B[16], C[16]
 *   u8 qh[8][16][4]                   qh[v][r][j] = row r's qh byte 4 v + j: bit s is the fifth bit of
 *                                     element 32 s + 4 v + j
 *   u8 q[4][8][16][4]                 as Q4_K's
 * IQ4_XS group, per block column b (16 x 136 = 2176 bytes):
 *   f16 d[16], u16 scales_h[16], u32 scales_l[16]
 *   u8 q[8][4][16][4]                 q[s][v][r][j] = row r's byte 16 s + 4 v + j of nibbles: low nibble is
 *                                     element 32 s + 4 v + j, high nibble element 32 s + 16 + 4 v + j
 * Q6_K group, per block column b (16 x 210 = 3360 bytes):
 *   f16 d[16]
 *   i8 sc[4][16][4]                   sc[p][r][j] = row r's scale 4 p + j (sub-blocks of 16)
 *   u8 ql[2][2][8][16][4]             ql[h][a][v][r][j] = row r's ql byte 64 h + 32 a + 4 v + j: low nibble
 *                                     of element 128 h + 32 a + 4 v + j, high nibble of element + 64
 *   u8 qh[2][8][16][4]                qh[h][v][r][j] = row r's qh byte 32 h + 4 v + j: bit pair g holds the
 *                                     high 2 bits of element 128 h + 32 g + 4 v + j */
#include <string.h>

#include "backend/cpu/kernels_kquant.h"

#define R 16

void pith_pack_q4_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q4_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q4_K_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 32 + 2 * r, blk + 2, 2);
            for (int p = 0; p < 3; p++) memcpy(col + 64 + 64 * p + 4 * r, blk + 4 + 4 * p, 4);
            for (int c = 0; c < 4; c++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 256 + 64 * (8 * c + v) + 4 * r, blk + 16 + 32 * c + 4 * v, 4);
        }
    }
}

void pith_pack_q5_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q5_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q5_K_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 32 + 2 * r, blk + 2, 2);
            for (int p = 0; p < 3; p++) memcpy(col + 64 + 64 * p + 4 * r, blk + 4 + 4 * p, 4);
            for (int v = 0; v < 8; v++) memcpy(col + 256 + 64 * v + 4 * r, blk + 16 + 4 * v, 4);
            for (int c = 0; c < 4; c++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 768 + 64 * (8 * c + v) + 4 * r, blk + 48 + 32 * c + 4 * v, 4);
        }
    }
}

void pith_pack_iq4_xs_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_IQ4_XS_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_IQ4_XS_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 32 + 2 * r, blk + 2, 2);
            memcpy(col + 64 + 4 * r, blk + 4, 4);
            for (int s = 0; s < 8; s++)
                for (int v = 0; v < 4; v++) memcpy(col + 128 + 64 * (4 * s + v) + 4 * r, blk + 8 + 16 * s + 4 * v, 4);
        }
    }
}

void pith_pack_q6_k_x16(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK_K;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q6_K_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q6_K_BYTES;
            memcpy(col + 2 * r, blk + 208, 2);
            for (int p = 0; p < 4; p++) memcpy(col + 32 + 64 * p + 4 * r, blk + 192 + 4 * p, 4);
            for (int h = 0; h < 2; h++)
                for (int a = 0; a < 2; a++)
                    for (int v = 0; v < 8; v++)
                        memcpy(col + 288 + 64 * (16 * h + 8 * a + v) + 4 * r, blk + 64 * h + 32 * a + 4 * v, 4);
            for (int h = 0; h < 2; h++)
                for (int v = 0; v < 8; v++)
                    memcpy(col + 2336 + 64 * (8 * h + v) + 4 * r, blk + 128 + 32 * h + 4 * v, 4);
        }
    }
}
