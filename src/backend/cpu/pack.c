/* Load-time repacking of Q4_0 and Q8_0 weights into groups of 8 rows (AVX2 and AVX-VNNI packed tiles)
 * or 16 rows (AVX-512 VNNI).
 *
 * In the file layout every row is a run of blocks (f16 scale, then quants), so a kernel reading one
 * row's block must fetch its scale on its own, unpack Q4_0's nibbles across 128-bit lanes and finish
 * each dot product with a horizontal sum. Grouped by 8 rows and block column, one vector load gives the
 * 8 rows' scales, one byte mask gives a row's 32 quants in element order, and the 8 rows' sums reduce
 * together into one vector of 8 outputs. A group takes exactly the bytes of its 8 rows (no float scales:
 * decoding is bound by memory bandwidth, and every byte read costs).
 *
 * Group layout, per block column b (blocks of 32 elements), in order:
 *   f16 d[R]                        the R rows' block scales, row order (R = 8 or 16)
 *   Q4_0: uint8 q[4][32]            q[p][i] = n(2p, i) | n(2p + 1, i) << 4, where n(r, i) in 0..15 is the
 *                                   nibble of element i of row r's block (as stored: value + 8)
 *   Q8_0: int8 q[8][32]             row r's 32 quants, as stored
 * The lanes layouts put 4 consecutive quants of row r in int32 lane r:
 *   Q4_0 lanes: uint8 q[4][R][4]    q[v][r][j] = n(r, 4v + j) | n(r, 16 + 4v + j) << 4
 *   Q8_0 lanes: uint8 q[8][R][4]    q[v][r][j] = quant(r, 4v + j) + 128 (xor 0x80: unsigned)
 * The AVX2 table reads Q4_0 in the lanes layout too (maddubs per lane, no horizontal sums); the 8-row
 * nibble layout above is IQ4_NL's there. MXFP4 takes the Q4_0 lanes layout with each row's E8M0 scale
 * byte in place of the f16 scale, so a group is again exactly its rows' bytes (17 per block):
 *   MXFP4 lanes: uint8 e[R], then uint8 q[4][R][4] as Q4_0's (the E2M1 codes) */
#include <string.h>

#include "backend/cpu/kernels.h"

void pith_pack_q4_0_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * 8 * PITH_Q4_0_BYTES;
        for (int r = 0; r < 8; r++) memcpy(col + 2 * r, w + r * w_stride + (size_t)b * PITH_Q4_0_BYTES, 2);
        for (int p = 0; p < 4; p++) {
            const uint8_t *lo = w + (size_t)(2 * p) * w_stride + (size_t)b * PITH_Q4_0_BYTES + 2;
            const uint8_t *hi = lo + w_stride;
            for (int i = 0; i < 32; i++) {
                int nl = i < 16 ? lo[i] & 15 : lo[i - 16] >> 4;
                int nh = i < 16 ? hi[i] & 15 : hi[i - 16] >> 4;
                col[16 + 32 * p + i] = (uint8_t)(nl | nh << 4);
            }
        }
    }
}

void pith_pack_q8_0_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * 8 * PITH_Q8_0_BYTES;
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q8_0_BYTES;
            memcpy(col + 2 * r, blk, 2);
            memcpy(col + 16 + 32 * r, blk + 2, 32);
        }
    }
}

/* The lanes layouts for R rows (8: AVX-VNNI, 16: AVX-512 VNNI) of blocks of 32 nibbles after a scale of
 * scale_bytes (Q4_0 and IQ4_NL: an f16; MXFP4: its E8M0 byte). */
static void pack_nibble_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, int R, int scale_bytes) {
    const int nb = K / PITH_QK, bytes = scale_bytes + 16;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * bytes;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * bytes;
            memcpy(col + scale_bytes * r, blk, (size_t)scale_bytes);
            /* stored byte i holds element i (low nibble) and element i + 16 (high nibble) */
            for (int v = 0; v < 4; v++)
                for (int j = 0; j < 4; j++) col[scale_bytes * R + 4 * R * v + 4 * r + j] = blk[scale_bytes + 4 * v + j];
        }
    }
}

static void pack_q4_0_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, int R) {
    pack_nibble_lanes(K, w, w_stride, dst, R, 2);
}

static void pack_q8_0_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst, int R) {
    const int nb = K / PITH_QK;
    for (int b = 0; b < nb; b++) {
        uint8_t *col = dst + (size_t)b * R * PITH_Q8_0_BYTES;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * w_stride + (size_t)b * PITH_Q8_0_BYTES;
            memcpy(col + 2 * r, blk, 2);
            for (int v = 0; v < 8; v++)
                for (int j = 0; j < 4; j++) col[2 * R + 4 * R * v + 4 * r + j] = blk[2 + 4 * v + j] ^ 0x80;
        }
    }
}

void pith_pack_mxfp4_x16_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    pack_nibble_lanes(K, w, w_stride, dst, 16, 1);
}

void pith_pack_mxfp4_x8_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst) {
    pack_nibble_lanes(K, w, w_stride, dst, 8, 1);
}

void pith_pack_q4_0_x8_lanes(int K, const uint8_t *w, size_t ws, uint8_t *dst) { pack_q4_0_lanes(K, w, ws, dst, 8); }
void pith_pack_q8_0_x8_lanes(int K, const uint8_t *w, size_t ws, uint8_t *dst) { pack_q8_0_lanes(K, w, ws, dst, 8); }
void pith_pack_q4_0_x16_lanes(int K, const uint8_t *w, size_t ws, uint8_t *dst) { pack_q4_0_lanes(K, w, ws, dst, 16); }
void pith_pack_q8_0_x16_lanes(int K, const uint8_t *w, size_t ws, uint8_t *dst) { pack_q8_0_lanes(K, w, ws, dst, 16); }
