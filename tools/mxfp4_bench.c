/* The MXFP4 tiles' own speed per CPU-second of one thread: the AVX-512 VNNI tile against the AVX2 one
 * (and the scalar one) in the same run, on an L2-sized matrix, so that memory does not enter. Not part
 * of the build; compile against the library:
 *
 *   cc -D_GNU_SOURCE -std=c11 -O2 -Isrc -Iinclude tools/mxfp4_bench.c build/libpith_internal.a -lm -lpthread -o build/mxfp4_bench
 *   build/mxfp4_bench [ROWS [K]]      (default 256 x 2880, GPT-OSS-20B's expert width)
 *
 * Each tile computes ROWS x 64 tokens of q8a activations, 4 rows per call and either 1 token per call
 * (the decode pattern) or 4; timed with CLOCK_THREAD_CPUTIME_ID (CPU time: on a shared machine the
 * neighbours stretch wall time, much less this), best of 40 repetitions. Prints GMAC/s (multiply-adds,
 * weights x tokens), the weight bytes read per CPU-second, and the AVX-512 / AVX2 ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quants.h"

typedef void (*tile_fn)(int, const uint8_t *, size_t, int, const void *, size_t, int, float *, size_t, bool);

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t state = 0x9e3779b97f4a7c15u;
static uint32_t rnd(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (uint32_t)(state >> 16);
}

/* Best seconds for the whole ROWS x 64 product, rn tokens per call. */
static double time_tile(tile_fn f, int rows, int K, const uint8_t *w, size_t ws, const pith_block_q8a *x, int T,
                        int rn, float *y, int reps) {
    size_t xs = (size_t)(K / 32) * sizeof *x;
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = thread_seconds();
        for (int t = 0; t < T; t += rn)
            for (int r = 0; r < rows; r += 4)
                f(K, w + (size_t)r * ws, ws, 4, (const uint8_t *)x + (size_t)t * xs, xs, rn, y + (size_t)t * rows + r,
                  (size_t)rows, false);
        double dt = thread_seconds() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 256, K = argc > 2 ? atoi(argv[2]) : 2880;
    if (rows <= 0 || rows % 4 || K <= 0 || K % 32) {
        fprintf(stderr, "usage: mxfp4_bench [ROWS (multiple of 4) [K (multiple of 32)]]\n");
        return 2;
    }
    const int T = 64, nb = K / 32;
    size_t ws = (size_t)nb * PITH_MXFP4_BYTES;
    uint8_t *w = malloc((size_t)rows * ws);
    pith_block_q8a *x = malloc((size_t)T * nb * sizeof *x);
    float *xf = malloc((size_t)K * sizeof(float)), *y = malloc((size_t)T * rows * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * ws; i++) w[i] = (uint8_t)rnd();
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) w[(size_t)r * ws + (size_t)b * PITH_MXFP4_BYTES] = (uint8_t)(118 + rnd() % 12);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < K; i++) xf[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
        pith_quantize_q8a_scalar(xf, x + (size_t)t * nb, K);
    }
    struct {
        const char *name;
        tile_fn f;
        int reps;
    } tiles[3] = {{"scalar", pith_tile_mxfp4_scalar, 3}, {"avx2", NULL, 40}, {"avx512-vnni", NULL, 40}};
    if (pith_cpu_kernels_avx2()) tiles[1].f = pith_tile_mxfp4_avx2;
    if (pith_cpu_kernels_avx512_vnni()) tiles[2].f = pith_tile_mxfp4_avx512;
    double macs = (double)rows * K * T, bytes = (double)rows * ws; /* bytes per MAC: ws / K */
    double res[3][2] = {{0}};
    printf("MXFP4 tile, %d x %d weights (%.0f KiB), %d tokens of q8a activations, 4 rows per call, best CPU time\n",
           rows, K, bytes / 1024, T);
    printf("| tile | 1 token per call: GMAC/s | weight GB/s | 4 tokens per call: GMAC/s |\n|---|---:|---:|---:|\n");
    for (int i = 0; i < 3; i++) {
        if (!tiles[i].f) {
            printf("| %s | not on this processor | | |\n", tiles[i].name);
            continue;
        }
        for (int k = 0; k < 2; k++) {
            int rn = k ? 4 : 1;
            double s = time_tile(tiles[i].f, rows, K, w, ws, x, T, rn, y, tiles[i].reps);
            res[i][k] = macs / s / 1e9;
        }
        /* 1 token per call reads the weights once per token: T passes over them */
        printf("| %s | %.1f | %.1f | %.1f |\n", tiles[i].name, res[i][0], res[i][0] * (double)ws / K, res[i][1]);
    }
    if (res[1][0] > 0 && res[2][0] > 0)
        printf("avx512-vnni / avx2: %.2fx at 1 token per call, %.2fx at 4\n", res[2][0] / res[1][0],
               res[2][1] / res[1][1]);
    free(w), free(x), free(xf), free(y);
    return 0;
}
