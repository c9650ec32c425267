/* Tile throughput per CPU-second of one thread: each kernel table's K-quant (and Q4_0, for scale) tiles on
 * a 256 x 2048 matrix (in L2), 1 and 4 tokens of q8 activations per call, best of 40 repetitions timed
 * with CLOCK_THREAD_CPUTIME_ID (robust to other work sharing the machine, which only stretches wall
 * time). Compares the row-by-row tile every table has (the file layout) with each table's packed tile.
 * Not part of the build; compile against the library:
 *
 *   cc -D_GNU_SOURCE -std=c11 -O2 -Isrc -Iinclude tools/kquant_tile_bench.c build/libpith_internal.a -lm -lpthread \
 *      -o build/kquant_tile_bench
 *   build/kquant_tile_bench
 *
 * Prints GMAC/s (rows x K x tokens multiply-adds per second) and, for one token, the weight bytes read
 * per second. Read the figures as ratios within one run: CPU time still moves with the neighbours'
 * cache and memory traffic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quants.h"

enum { ROWS = 256, K = 2048, REPS = 40, MAX_TOK = 4 };

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t rng = 12345;
static uint8_t rnd_byte(void) {
    rng = rng * 1664525u + 1013904223u;
    return (uint8_t)(rng >> 24);
}

/* random quants, every block scale 1.0 (f16 0x3c00) and min 0.5 so nothing is NaN or subnormal */
static void fill_weights(pith_dtype t, uint8_t *w, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) w[i] = rnd_byte();
    size_t bb = pith_dtype_row_bytes(t, t == PITH_Q4_0 || t == PITH_IQ4_NL ? 32 : 256);
    for (size_t o = 0; o + bb <= bytes; o += bb) {
        size_t d = t == PITH_Q6_K ? 208 : 0;
        w[o + d] = 0x00, w[o + d + 1] = 0x3c;
        if (t == PITH_Q4_K || t == PITH_Q5_K) w[o + 2] = 0x00, w[o + 3] = 0x38;
    }
}

/* thread-CPU seconds of one pass over the matrix, rn tokens, with the table's packed tile (packed) or
 * its row-by-row tile in calls of PITH_TILE_MAX_RM rows */
static double time_pass(const pith_cpu_kernels *k, pith_wtype wt, const uint8_t *w, const uint8_t *packed,
                        size_t rb, const void *x, size_t xs, int rn, float *y, bool use_packed) {
    double t0 = thread_seconds();
    if (use_packed) {
        for (int r = 0; r < ROWS; r += k->pack_rows)
            k->tile_packed[wt](K, packed + (size_t)r * rb, x, xs, rn, y + r, ROWS, false);
    } else {
        for (int r = 0; r < ROWS; r += PITH_TILE_MAX_RM)
            k->tile[wt](K, w + (size_t)r * rb, rb, PITH_TILE_MAX_RM, x, xs, rn, y + r, ROWS, false);
    }
    return thread_seconds() - t0;
}

int main(void) {
    const pith_cpu_kernels *tables[] = {pith_cpu_kernels_avx2(), pith_cpu_kernels_avx2_vnni(),
                                        pith_cpu_kernels_avx512_vnni()};
    static const pith_dtype types[] = {PITH_Q4_0, PITH_Q4_K, PITH_Q5_K, PITH_Q6_K, PITH_IQ4_NL, PITH_IQ4_XS};
    float *xf = malloc(sizeof(float) * K * MAX_TOK), *y = malloc(sizeof(float) * ROWS * MAX_TOK);
    for (int i = 0; i < K * MAX_TOK; i++) xf[i] = (float)(rnd_byte() - 128) / 64.0f;
    if (!tables[0]) {
        printf("no AVX2 on this machine: nothing to measure\n");
        return 0;
    }
    printf("%d x %d matrix, 1 thread, best of %d, thread CPU time; GMAC/s (GB/s of weights for 1 token)\n", ROWS, K,
           REPS);
    printf("%-8s %-12s %-10s %16s %10s\n", "format", "table", "tile", "1 token", "4 tokens");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        pith_dtype t = types[ti];
        pith_wtype wt = (pith_wtype)pith_wtype_of(t);
        size_t rb = pith_dtype_row_bytes(t, K);
        uint8_t *w = malloc(rb * ROWS);
        fill_weights(t, w, rb * ROWS);
        pith_act_format f = pith_act_format_of(wt);
        size_t xs = pith_act_row_bytes(f, K);
        void *x = malloc(xs * MAX_TOK);
        for (int tok = 0; tok < MAX_TOK; tok++) {
            if (f == PITH_ACT_Q8A) tables[0]->quantize_q8a(xf + tok * K, (pith_block_q8a *)((uint8_t *)x + tok * xs), K);
            else tables[0]->quantize_q8k(xf + tok * K, (pith_block_q8k *)((uint8_t *)x + tok * xs), K);
        }
        /* variant 0: the row-by-row tile (the same in every table), then each table's packed tile, each
         * in its own copy of the packed weights. The repetitions take turns over the variants, so a
         * neighbour's burst slows all of them alike and the best of each is comparable. */
        enum { NV = 4 };
        const pith_cpu_kernels *vk[NV];
        uint8_t *vp[NV] = {0};
        double best[NV][2];
        for (int v = 0; v < NV; v++) {
            vk[v] = v == 0 ? tables[0] : tables[v - 1];
            if (v > 0 && vk[v] && !vk[v]->pack[wt]) vk[v] = NULL;
            if (v > 0 && vk[v]) {
                vp[v] = malloc(rb * ROWS);
                for (int r = 0; r < ROWS; r += vk[v]->pack_rows)
                    vk[v]->pack[wt](K, w + (size_t)r * rb, rb, vp[v] + (size_t)r * rb);
            }
            best[v][0] = best[v][1] = 1e30;
        }
        for (int rep = 0; rep < REPS; rep++)
            for (int v = 0; v < NV; v++)
                for (int n = 0; n < 2; n++) {
                    if (!vk[v]) continue;
                    double s = time_pass(vk[v], wt, w, vp[v], rb, x, xs, n ? 4 : 1, y, v > 0);
                    if (s < best[v][n]) best[v][n] = s;
                }
        for (int v = 0; v < NV; v++) {
            if (!vk[v]) continue;
            double macs = (double)ROWS * K;
            printf("%-8s %-12s %-10s %7.1f (%5.1f) %10.1f\n", pith_dtype_name(t), v ? vk[v]->name : "any",
                   v ? "packed" : "row-by-row", macs / best[v][0] * 1e-9, (double)rb * ROWS / best[v][0] * 1e-9,
                   4 * macs / best[v][1] * 1e-9);
            free(vp[v]);
        }
        free(w);
        free(x);
    }
    free(xf);
    free(y);
    return 0;
}
