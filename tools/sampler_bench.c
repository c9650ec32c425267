/* Sampling cost per token: pith_sampler_sample on one logits row, for the vocabulary sizes of the model
 * families Pith runs and the parameter sets users send, against copying the row (the least any sampler
 * does: it reads every logit). Uses only the public API, so the same file measures any version of the
 * library. Not part of the build; compile against the library:
 *
 *   cc -D_GNU_SOURCE -std=c11 -O2 -Iinclude tools/sampler_bench.c build/libpith.a \
 *      $(pkg-config --libs libcjson libpcre2-8 libmicrohttpd) -lm -lpthread -o build/sampler_bench
 *   build/sampler_bench
 *
 * Two rows per vocabulary: "peaked" (a trained model's shape: a normal bulk of sd 2 and ten tokens 12-16
 * above it, so top-p keeps a handful) and "flat" (uniform on [0, 3]: top-p keeps tens of thousands, the
 * worst case for any filter that sorts). Median of 15 calls after 2 warm-ups, one thread, wall time; the
 * copy is the fastest of 15. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pith/sampler.h"

enum { REPS = 15, WARM = 2 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned long long rng = 88172645463325252ull;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

static void fill(float *l, int n, int peaked) {
    for (int i = 0; i < n; i++) {
        if (peaked) {
            double u = uniform() + 1e-300, v = uniform();
            l[i] = (float)(2.0 * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
        } else {
            l[i] = (float)(3.0 * uniform());
        }
    }
    if (peaked)
        for (int k = 0; k < 10; k++) l[(int)(uniform() * n)] = (float)(12.0 + 0.4 * k);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Fastest of the copies of the row into the scratch row (the limit: no noise in it). */
static double time_copy(const float *row, float *work, int n) {
    double t[REPS];
    for (int r = 0; r < REPS + WARM; r++) {
        double t0 = now();
        memcpy(work, row, sizeof(float) * (size_t)n);
        __asm__ volatile("" : : "r"(work) : "memory");
        if (r >= WARM) t[r - WARM] = now() - t0;
    }
    double best = t[0];
    for (int r = 1; r < REPS; r++) best = t[r] < best ? t[r] : best;
    return best;
}

/* Median seconds of copying the row and sampling from the copy, less the copy. */
static double time_sample(const pith_sampling_params *p, const float *row, float *work, int n, double copy) {
    pith_sampler *s;
    pith_err err;
    if (pith_sampler_new(p, n, &s, &err)) {
        fprintf(stderr, "sampler_bench: %s\n", err.msg);
        exit(1);
    }
    double t[REPS];
    for (int r = 0; r < REPS + WARM; r++) {
        double t0 = now();
        memcpy(work, row, sizeof(float) * (size_t)n);
        volatile int32_t tok = pith_sampler_sample(s, work, NULL, 0);
        (void)tok;
        if (r >= WARM) t[r - WARM] = now() - t0;
    }
    pith_sampler_free(s);
    double m = median(t, REPS) - copy;
    return m > 0 ? m : 0;
}

int main(void) {
    const struct {
        int n;
        const char *family;
    } vocabs[] = {{32000, "Llama 2"}, {151936, "Qwen3"}, {201088, "GPT-OSS"}, {262144, "Gemma 3"}};
    struct {
        const char *name;
        float temp, top_p, min_p;
        int top_k;
    } sets[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 0},
        {"CLI defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05)", 0.8f, 0.95f, 0.05f, 40},
        {"OpenAI defaults (T 1, no filter)", 1.0f, 1.0f, 0.0f, 0},
        {"T 1, top-p 0.9", 1.0f, 0.9f, 0.0f, 0},
        {"T 1, min-p 0.05", 1.0f, 1.0f, 0.05f, 0},
    };
    printf("pith_sampler_sample per token, microseconds (median of %d), and as a multiple of copying the row (fastest copy)\n",
           REPS);
    printf("| vocabulary | row | copy us | parameters | sample us | x copy |\n|---|---|---:|---|---:|---:|\n");
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        int n = vocabs[v].n;
        float *row = malloc(sizeof(float) * (size_t)n), *work = malloc(sizeof(float) * (size_t)n);
        for (int peaked = 1; peaked >= 0; peaked--) {
            fill(row, n, peaked);
            double copy = time_copy(row, work, n);
            for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
                pith_sampling_params p = pith_sampling_defaults();
                p.temperature = sets[k].temp;
                p.top_k = sets[k].top_k;
                p.top_p = sets[k].top_p;
                p.min_p = sets[k].min_p;
                double t = time_sample(&p, row, work, n, copy);
                printf("| %d (%s) | %s | %.1f | %s | %.1f | %.1f |\n", n, vocabs[v].family, peaked ? "peaked" : "flat",
                       copy * 1e6, sets[k].name, t * 1e6, t / copy);
            }
        }
        free(row);
        free(work);
    }
    return 0;
}
