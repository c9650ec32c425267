/* Decode-shaped streaming of packed weights from memory: one token against a 512 MiB matrix (far past
 * the caches) with the best kernel table's tiles (packed where the table packs the type, else the file
 * layout's), on 1 and 2 threads, beside a plain read of the same bytes measured in the same run (the
 * limit). Where tools/kquant_tile_bench.c measures what a tile
 * computes from L2, this measures what it sustains when every byte comes from DRAM, which is what decode
 * is. Not part of the build; compile against the library:
 *
 *   cc -D_GNU_SOURCE -std=c11 -O2 -Isrc -Iinclude tools/stream_tile_bench.c build/libpith_internal.a -lm \
 *      -lpthread -o build/stream_tile_bench
 *   build/stream_tile_bench [repetitions]
 *
 * Prints wall-clock GB/s of weight bytes (best and mean of the repetitions after a first, discarded) and
 * each format's share of the plain read with the same threads. This host's memory flips between a slow
 * and a fast state minute to minute: compare formats within one run, and run it more than once. The
 * software prefetch distance and hint can be changed for experiments at compile time of the library
 * (-DPITH_KQ_PREFETCH_BYTES=..., -DPITH_PACKED_PREFETCH_BYTES=..., -DPITH_PREFETCH_HINT=...). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quants.h"

enum { K = 2048, ROW_STEP = 16 }; /* a multiple of every table's pack_rows and of PITH_TILE_MAX_RM */
#define TOTAL_BYTES ((size_t)512 << 20)

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct stream_job {
    const pith_cpu_kernels *k;
    pith_wtype wt; /* PITH_W_N_TYPES: the plain read */
    const uint8_t *w;
    size_t row_bytes;
    int r0, r1;
    const void *x;
    float *y;
    long long sink;
} stream_job;

/* ymm loads: the read rate is the memory's, not the register width's */
__attribute__((target("avx2"))) static long long plain_read(const uint8_t *p, const uint8_t *end) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
    for (; p + 64 <= end; p += 64) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)p));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(p + 32)));
    }
    s0 = _mm256_add_epi64(s0, s1);
    long long v[4];
    _mm256_storeu_si256((__m256i *)v, s0);
    return v[0] + v[1] + v[2] + v[3];
}

static void *stream_rows(void *arg) {
    stream_job *j = arg;
    if (j->wt == PITH_W_N_TYPES) {
        j->sink = plain_read(j->w + (size_t)j->r0 * j->row_bytes, j->w + (size_t)j->r1 * j->row_bytes);
        return NULL;
    }
    if (j->k->pack[j->wt]) {
        const int g = j->k->pack_rows;
        for (int r = j->r0; r < j->r1; r += g)
            j->k->tile_packed[j->wt](K, j->w + (size_t)r * j->row_bytes, j->x, 0, 1, j->y + r, 0, false);
    } else {
        const size_t xs = pith_act_row_bytes(pith_act_format_of(j->wt), K);
        for (int r = j->r0; r < j->r1; r += PITH_TILE_MAX_RM)
            j->k->tile[j->wt](K, j->w + (size_t)r * j->row_bytes, j->row_bytes, PITH_TILE_MAX_RM, j->x, xs, 1,
                              j->y + r, 0, false);
    }
    return NULL;
}

/* seconds of one pass over rows [0, rows) split in n_threads contiguous parts */
static double time_pass(stream_job proto, int rows, int n_threads) {
    stream_job j[2];
    pthread_t th[2];
    int part = rows / n_threads / ROW_STEP * ROW_STEP;
    double t0 = wall_seconds();
    for (int i = 0; i < n_threads; i++) {
        j[i] = proto;
        j[i].r0 = part * i;
        j[i].r1 = i == n_threads - 1 ? rows : part * (i + 1);
        pthread_create(&th[i], NULL, stream_rows, &j[i]);
    }
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    return wall_seconds() - t0;
}

int main(int argc, char **argv) {
    const pith_cpu_kernels *k = pith_cpu_kernels_best(false);
    if (!k || !strcmp(k->name, "scalar")) {
        printf("no SIMD kernel table on this machine: nothing to measure\n");
        return 0;
    }
    k = pith_kernels_with_mxfp4(k);
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    reps = reps < 1 ? 1 : reps;
    static const pith_dtype types[] = {PITH_Q4_0, PITH_Q8_0, PITH_Q4_K, PITH_Q6_K, PITH_MXFP4};
    float *xf = malloc(sizeof(float) * K);
    for (int i = 0; i < K; i++) xf[i] = (float)((i * 37) % 255 - 127) / 64.0f;
    enum { NF = 1 + sizeof types / sizeof types[0] };
    stream_job jobs[NF];
    int rows_of[NF], n_jobs = 0;
    size_t bytes_of[NF];
    const char *name_of[NF], *layout_of[NF];
    for (int ti = -1; ti < NF - 1; ti++) {
        pith_dtype t = ti < 0 ? PITH_Q8_0 : types[ti];
        pith_wtype wt = (pith_wtype)pith_wtype_of(t);
        if (ti >= 0 && !k->pack[wt] && !k->tile[wt]) continue;
        size_t rb = pith_dtype_row_bytes(t, K);
        int rows = (int)(TOTAL_BYTES / rb) / ROW_STEP * ROW_STEP;
        size_t bytes = rb * (size_t)rows;
        uint8_t *w = aligned_alloc(64, (bytes + 63) / 64 * 64);
        /* zero quants, a scale of 1.0 (or MXFP4's 2^-1) in every block: nothing NaN or subnormal */
        memset(w, 0, bytes);
        size_t bb = pith_dtype_row_bytes(t, t == PITH_Q4_K || t == PITH_Q6_K ? 256 : 32);
        for (size_t o = 0; ti >= 0 && o + bb <= bytes; o += bb) {
            size_t d = t == PITH_Q6_K ? 208 : 0;
            if (t != PITH_MXFP4) w[o + d + 1] = 0x3c;
            else w[o] = 127;
        }
        uint8_t *packed = w;
        if (ti >= 0 && k->pack[wt]) {
            packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
            for (int r = 0; r < rows; r += k->pack_rows)
                k->pack[wt](K, w + (size_t)r * rb, rb, packed + (size_t)r * rb);
            free(w);
        }
        pith_act_format f = pith_act_format_of(wt);
        void *x = malloc(pith_act_row_bytes(f, K));
        if (f == PITH_ACT_Q8A) k->quantize_q8a(xf, x, K);
        else k->quantize_q8k(xf, x, K);
        jobs[n_jobs] = (stream_job){.k = k, .wt = ti < 0 ? PITH_W_N_TYPES : wt, .w = packed, .row_bytes = rb,
                                    .x = x, .y = malloc(sizeof(float) * (size_t)rows)};
        rows_of[n_jobs] = rows;
        bytes_of[n_jobs] = bytes;
        name_of[n_jobs] = ti < 0 ? "read" : pith_dtype_name(t);
        layout_of[n_jobs++] = ti < 0 ? "" : k->pack[wt] ? "packed" : "file";
    }
    /* the repetitions take turns over the formats, the plain read first, so that the host's memory
     * state changes them alike; each share is of the read in the same repetition */
    double best[NF][3], sum[NF][3], share[NF][3];
    for (int i = 0; i < n_jobs; i++)
        for (int nt = 1; nt <= 2; nt++) best[i][nt] = 1e30, sum[i][nt] = 0, share[i][nt] = 0;
    for (int rep = 0; rep <= reps; rep++)
        for (int nt = 1; nt <= 2; nt++) {
            double read_s = 0;
            for (int i = 0; i < n_jobs; i++) {
                double s = time_pass(jobs[i], rows_of[i], nt);
                if (i == 0) read_s = s;
                if (rep == 0) continue; /* first touch and warm-up */
                sum[i][nt] += s;
                if (s < best[i][nt]) best[i][nt] = s;
                share[i][nt] += ((double)bytes_of[i] / s) / ((double)bytes_of[0] / read_s) / reps;
            }
        }
    printf("one token, %zu MiB of weights per format, dim %d, table %s, %d passes each, wall GB/s\n",
           TOTAL_BYTES >> 20, K, k->name, reps);
    printf("%-13s %30s %30s\n", "format", "1 thread: best / mean (share)", "2 threads: best / mean (share)");
    for (int i = 0; i < n_jobs; i++) {
        printf("%-6s %-6s", name_of[i], layout_of[i]);
        for (int nt = 1; nt <= 2; nt++)
            printf("       %5.1f / %5.1f (%4.2f)", (double)bytes_of[i] / best[i][nt] * 1e-9,
                   (double)bytes_of[i] / (sum[i][nt] / reps) * 1e-9, share[i][nt]);
        printf("\n");
        free((void *)jobs[i].w);
        free((void *)jobs[i].x);
        free(jobs[i].y);
    }
    free(xf);
    return 0;
}
