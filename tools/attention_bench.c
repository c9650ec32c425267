/* One layer's attention, TinyLlama-shaped (32 query heads, 4 KV heads of 64), on the path this CPU runs
 * (the tiled AVX-512 one where the kernel table is avx512-vnni) against the portable path on the AVX2
 * table, in the same run. Not part of the build; compile against the library:
 *
 *   cc -D_GNU_SOURCE -std=c11 -O2 -Isrc -Iinclude tools/attention_bench.c build/libpith_internal.a -lm -lpthread -o build/attention_bench
 *   build/attention_bench DEPTH TOKENS [f16|bf16|q8_0|f32]
 *
 * TOKENS queries at positions DEPTH .. DEPTH + TOKENS - 1 of one sequence (a prefill chunk; 1 is a
 * decode step), 2 threads. Prints the process CPU time per call (robust to other work sharing the
 * machine, which only stretches wall time) and the wall time (best of the repetitions), for both paths,
 * and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/kv_rows.h"
#include "pith/engine.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6;
}

/* CPU seconds per call; *wall: best wall time. */
static double measure(pith_cpu *c, pith_attn_scratch *s, const pith_attn_args *a, int reps, double *wall) {
    pith_attention(c, s, a);
    double c0 = cpu_seconds();
    *wall = 1e9;
    for (int r = 0; r < reps; r++) {
        double t = now();
        pith_attention(c, s, a);
        t = now() - t;
        *wall = t < *wall ? t : *wall;
    }
    return (cpu_seconds() - c0) / reps;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: attention_bench DEPTH TOKENS [f16|bf16|q8_0|f32]\n");
        return 2;
    }
    int depth = atoi(argv[1]), ntok = atoi(argv[2]);
    int kvt = argc > 3 ? pith_kv_type_parse(argv[3]) : PITH_KV_F16;
    static const pith_dtype dt[] = {PITH_F16, PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0};
    if (depth < 0 || ntok < 1 || kvt < 0) return fprintf(stderr, "bad arguments\n"), 2;
    const pith_dtype kt = dt[kvt];
    const int nh = 32, nkv = 4, hd = 64, bs = 16, kvd = nkv * hd, threads = 2;
    int nb = (depth + ntok + bs - 1) / bs;
    pith_cpu c;
    pith_err err;
    if (pith_cpu_init(&c, threads, false, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    const pith_cpu_kernels *best = c.k, *avx2 = pith_cpu_kernels_avx2();
    size_t elems = (size_t)nb * bs * kvd;
    void *K = malloc(pith_kv_bytes(kt, elems)), *V = malloc(pith_kv_bytes(kt, elems));
    float *rows = malloc(sizeof(float) * elems), *q = malloc(sizeof(float) * (size_t)ntok * nh * hd);
    float *out = malloc(sizeof(float) * (size_t)ntok * nh * hd);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb), *pos = malloc(sizeof(int32_t) * (size_t)ntok);
    int32_t *seq = calloc((size_t)ntok, sizeof(int32_t));
    for (size_t i = 0; i < elems; i++) rows[i] = (float)rand() / RAND_MAX - 0.5f;
    pith_kv_store_f32(best, kt, rows, K, 0, elems);
    pith_kv_store_f32(best, kt, rows, V, 0, elems);
    for (int i = 0; i < nb; i++) bt[i] = i;
    for (int i = 0; i < ntok; i++) pos[i] = depth + i;
    for (int i = 0; i < ntok * nh * hd; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
    pith_attn_shape sh = {nh, nkv, hd, 0.125f};
    pith_attn_scratch s;
    if (pith_attn_scratch_init(&s, &sh, threads, &err) || pith_attn_scratch_reserve(&s, ntok, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    pith_attn_args a = {.n_tokens = ntok, .positions = pos, .seq = seq, .block_tables = bt, .max_blocks = nb,
                        .block_size = bs, .k_cache = K, .v_cache = V, .kv_type = kt, .kv_dim = kvd, .q = q,
                        .q_ld = (size_t)nh * hd, .out = out, .out_ld = (size_t)nh * hd};
    int reps = ntok == 1 ? 200 : 3;
    double w_best, w_avx2 = 0, c_avx2 = 0;
    double c_best = measure(&c, &s, &a, reps, &w_best);
    if (avx2 && avx2 != best) {
        c.k = avx2;
        c_avx2 = measure(&c, &s, &a, reps, &w_avx2);
    }
    printf("attention: 32/4 heads of 64, %s cache, %d threads, %d queries at positions %d..%d\n",
           pith_kv_type_name((pith_kv_type)kvt), threads, ntok, depth, depth + ntok - 1);
    printf("  %-12s CPU %.3f ms per call, wall %.3f ms\n", best->name, c_best * 1e3, w_best * 1e3);
    if (c_avx2 > 0)
        printf("  %-12s CPU %.3f ms per call, wall %.3f ms; CPU-time ratio %.2fx\n", avx2->name, c_avx2 * 1e3,
               w_avx2 * 1e3, c_avx2 / c_best);
    pith_attn_scratch_free(&s);
    pith_cpu_free(&c);
    free(K), free(V), free(rows), free(q), free(out), free(bt), free(pos), free(seq);
    return 0;
}
