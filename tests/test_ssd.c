/* Mamba2's SSD scan (src/backend/cpu/recurrent_ssd.c, both the recurrent and the chunked kernel, the
 * AVX2 and the portable loops) and its gated, grouped RMSNorm against scalar float64 references written
 * from the definition (recurrent.h). Awkward shapes: one token, one head, d_state not a multiple of 8
 * (the portable tail), runs ending inside a chunk, runs longer than two chunks, several B/C groups, runs
 * split across calls so the state is carried, a nonzero starting state, no D.
 *
 * Tolerance. An output is sum_n C[n] S[p][n] over d_state entries plus D x; each state entry is a
 * decayed sum of dt x B terms whose float rounding (each token adds one rounding per entry, the chunked
 * form sums a chunk's terms in another order) stays within a few u = 2^-24 of the entry's magnitude
 * times the number of tokens still remembered (decays here are exp(-dt |A|) <= exp(-0.02)). So
 * |y - ref| <= (d_state + remembered tokens) u max|S| max|C|; we check 4e-6 * (|ref| + max|S|) per
 * element, which holds with a margin of about 3.5 over the worst case measured here (1.15e-6, the long slow-decay
 * head with d_state 128) and is far below a real mistake (a dropped token, a wrong group or a wrong
 * decay moves outputs by 1e-2 or more). The state after the run is checked the same way. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/recurrent.h"
#include "check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rnd_f(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() >> 8) * (1.0f / 16777216.0f); }
static float *rnd_vec(size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rnd_f(lo, hi);
    return v;
}

static double softplus_d(double x) { return x > 20 ? x : log1p(exp(x)); }

/* The definition in float64, token by token; S0 and S in double. */
static void ssd_ref(const pith_ssd_args *a, double *S, double *y) {
    int H = a->n_heads, P = a->head_dim, N = a->d_state, rep = H / a->n_groups;
    for (int t = 0; t < a->n_tokens; t++)
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            double dt = softplus_d((double)a->dt[(size_t)t * a->ld_dt + h] + a->dt_bias[h]);
            double decay = exp(dt * a->A[h]);
            const float *x = a->x + (size_t)t * a->ld_x + (size_t)h * P;
            const float *B = a->B + (size_t)t * a->ld_bc + (size_t)g * N, *C = a->C + (size_t)t * a->ld_bc + (size_t)g * N;
            for (int p = 0; p < P; p++) {
                double *row = S + ((size_t)h * P + p) * N, acc = 0;
                for (int n = 0; n < N; n++) {
                    row[n] = decay * row[n] + dt * x[p] * B[n];
                    acc += C[n] * row[n];
                }
                y[((size_t)t * H + h) * P + p] = acc + (a->D ? a->D[h] : 0.0) * x[p];
            }
        }
}

static double max_abs_d(const double *v, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

/* One case: the run cut at `splits` (0-terminated piece lengths; NULL: one call), every head through
 * the chosen kernel. */
static void ssd_case(const char *name, int n_tokens, int H, int G, int P, int N, bool with_d, bool nonzero_state,
                     bool slow_decay, const int *splits) {
    size_t ld_x = (size_t)H * P + 5, ld_bc = (size_t)2 * G * N + 3, ld_dt = (size_t)H + 2, ld_y = (size_t)H * P + 1;
    size_t states = (size_t)H * P * N;
    float *x = rnd_vec((size_t)n_tokens * ld_x, -1, 1);
    float *bc = rnd_vec((size_t)n_tokens * ld_bc, -1, 1);
    float *dt = rnd_vec((size_t)n_tokens * ld_dt, -3, 1);
    float *dt_bias = rnd_vec((size_t)H, -1, 1), *A = malloc((size_t)H * sizeof *A), *D = rnd_vec((size_t)H, 0, 2);
    for (int h = 0; h < H; h++) A[h] = slow_decay && h == 0 ? -0.02f : -expf(rnd_f(-1, 2));
    float *s0 = nonzero_state ? rnd_vec(states, -1, 1) : calloc(states, sizeof(float));
    double *Sref = malloc(states * sizeof *Sref), *yref = malloc((size_t)n_tokens * H * P * sizeof *yref);
    for (size_t i = 0; i < states; i++) Sref[i] = s0[i];
    pith_ssd_args ref = {n_tokens, H, G, P, N, x, ld_x, bc, bc + (size_t)G * N, ld_bc, dt, ld_dt, dt_bias, A,
                         with_d ? D : NULL, NULL, NULL, 0, false, false};
    ssd_ref(&ref, Sref, yref);
    double smax = max_abs_d(Sref, states);
    float *scratch = malloc(pith_ssd_scratch_floats(P, N) * sizeof *scratch);
    for (int kind = 0; kind < 4; kind++) { /* recurrent (SIMD where it exists), portable, chunked, AVX2 */
        float *S = malloc(states * sizeof *S), *y = malloc((size_t)n_tokens * ld_y * sizeof *y);
        memcpy(S, s0, states * sizeof *S);
        for (size_t i = 0; i < (size_t)n_tokens * ld_y; i++) y[i] = NAN;
        for (int t0 = 0, piece = 0; t0 < n_tokens; piece++) {
            int n = splits && splits[piece] ? splits[piece] : n_tokens - t0;
            if (n > n_tokens - t0) n = n_tokens - t0;
            pith_ssd_args a = ref;
            a.n_tokens = n;
            a.x = x + (size_t)t0 * ld_x, a.B = bc + (size_t)t0 * ld_bc, a.C = a.B + (size_t)G * N;
            a.dt = dt + (size_t)t0 * ld_dt, a.state = S, a.y = y + (size_t)t0 * ld_y, a.ld_y = ld_y;
            a.portable = kind == 1;
            a.no_avx512 = kind == 3;
            for (int h = 0; h < H; h++) {
                if (kind == 2) pith_ssd_chunked(&a, h, scratch);
                else pith_ssd_recurrent(&a, h);
            }
            t0 += n;
        }
        double worst = 0;
        for (int t = 0; t < n_tokens; t++)
            for (int i = 0; i < H * P; i++) {
                double r = yref[(size_t)t * H * P + i], e = fabs(y[(size_t)t * ld_y + i] - r) / (fabs(r) + smax);
                worst = isnan(e) ? INFINITY : e > worst ? e : worst;
            }
        for (size_t i = 0; i < states; i++) {
            double e = fabs(S[i] - Sref[i]) / (fabs(Sref[i]) + smax);
            worst = isnan(e) ? INFINITY : e > worst ? e : worst;
        }
        static const char *kinds[] = {"recurrent", "recurrent portable", "chunked", "recurrent avx2"};
        printf("%-28s %-18s tokens %4d heads %d groups %d P %3d N %3d: worst %.2e\n", name, kinds[kind], n_tokens, H,
               G, P, N, worst);
        CHECK(worst <= 4e-6);
        free(S);
        free(y);
    }
    free(x), free(bc), free(dt), free(dt_bias), free(A), free(D), free(s0), free(Sref), free(yref), free(scratch);
}

static void norm_case(int n, int group) {
    float *x = rnd_vec((size_t)n, -2, 2), *z = rnd_vec((size_t)n, -3, 3), *w = rnd_vec((size_t)n, 0.5f, 1.5f);
    double *ref = malloc((size_t)n * sizeof *ref);
    for (int i = 0; i < n; i++) ref[i] = x[i] * (z[i] / (1 + exp(-(double)z[i])));
    for (int g0 = 0; g0 < n; g0 += group) {
        double ss = 0;
        for (int i = g0; i < g0 + group; i++) ss += ref[i] * ref[i];
        double r = 1 / sqrt(ss / group + 1e-5);
        for (int i = g0; i < g0 + group; i++) ref[i] *= r * w[i];
    }
    pith_gated_rmsnorm_grouped(x, z, w, n, group, 1e-5f);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(x[i] - ref[i]) / (fabs(ref[i]) + 1e-3);
        worst = e > worst ? e : worst;
    }
    printf("gated rmsnorm n %d group %d: worst %.2e\n", n, group, worst);
    /* silu, the square sum (double) and three products, each rounded once: a few u of each element */
    CHECK(worst <= 1e-6);
    free(x), free(z), free(w), free(ref);
}

int main(void) {
    static const int thirds[] = {1, 63, 2, 70, 0};
    static const int tail[] = {65, 0};
    ssd_case("one token, one head", 1, 1, 1, 4, 8, true, false, false, NULL);
    ssd_case("one token, carried state", 1, 3, 1, 5, 12, true, true, false, NULL);
    ssd_case("chunk tail, odd head width", 70, 2, 1, 7, 16, true, true, false, NULL);
    ssd_case("three chunks, groups", 2 * PITH_SSD_CHUNK + 9, 4, 2, 8, 24, true, false, false, NULL);
    ssd_case("split runs, no D", 140, 4, 4, 6, 13, false, true, false, thirds);
    ssd_case("granite-like head, slow decay", 2 * PITH_SSD_CHUNK + 1, 2, 1, 64, 128, true, true, true, tail);
    norm_case(1, 1);
    norm_case(96, 96);
    norm_case(96, 24);
    norm_case(1000, 250);
    return check_summary("test_ssd");
}
