/* Mamba2's SSD scan and its gated RMSNorm (recurrent.h).
 *
 * The recurrent form walks the tokens of one head in order, each one decaying and updating the whole
 * head_dim x d_state state and reading one output row per state row. The chunked form computes a chunk
 * of c tokens from the state S0 at its start, with dt_j, the log-decays l_j = dt_j A, their cumulative
 * sums a_i = l_0 + ... + l_i and G[i][j] = C_i . B_j:
 *   y_i = exp(a_i) S0 C_i + sum_{j<=i} exp(a_i - a_j) dt_j G[i][j] x_j + D x_i
 *   S   = exp(a_{c-1}) S0 + sum_j exp(a_{c-1} - a_j) dt_j x_j B_j^T
 * which unrolls S_i = exp(l_i) S_{i-1} + dt_i x_i B_i^T exactly; every exp() is of a non-positive number. */
#include <math.h>
#include <string.h>

#include "backend/cpu/recurrent.h"
#include "backend/cpu/recurrent_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SSD_AVX2 1
#endif

#define CH PITH_SSD_CHUNK

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

size_t pith_ssd_scratch_floats(int head_dim, int d_state) {
    (void)head_dim, (void)d_state;
    /* dt, a (cumulative), weights of one row: CH each; G: CH x CH */
    return (size_t)CH * (3 + CH);
}

/* One token on one head: S = decay S + (dt x) B^T, y = S C + d x. */
static void step_scalar(float *S, const float *x, const float *B, const float *C, float decay, float dt, float d,
                        float *y, int P, int N) {
    for (int p = 0; p < P; p++) {
        float *row = S + (size_t)p * N, s = dt * x[p], acc[8] = {0};
        int n = 0;
        for (; n + 8 <= N; n += 8)
            for (int k = 0; k < 8; k++) {
                row[n + k] = decay * row[n + k] + s * B[n + k];
                acc[k] += C[n + k] * row[n + k];
            }
        float sum = 0;
        for (; n < N; n++) {
            row[n] = decay * row[n] + s * B[n];
            sum += C[n] * row[n];
        }
        sum += ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        y[p] = sum + d * x[p];
    }
}

#ifdef SSD_AVX2
#define TGT __attribute__((target("avx2,fma")))

TGT static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* The same step, 8 state entries at a time (N a multiple of 8): two state rows per pass share each load
 * of B and C, each row with its own two accumulators. */
TGT static void step_avx2(float *S, const float *x, const float *B, const float *C, float decay, float dt, float d,
                          float *y, int P, int N) {
    const __m256 vd = _mm256_set1_ps(decay);
    int p = 0;
    for (; p + 2 <= P; p += 2) {
        float *r0 = S + (size_t)p * N, *r1 = r0 + N;
        const __m256 s0 = _mm256_set1_ps(dt * x[p]), s1 = _mm256_set1_ps(dt * x[p + 1]);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
        int n = 0;
        for (; n + 16 <= N; n += 16) {
            const __m256 B0 = _mm256_loadu_ps(B + n), B1 = _mm256_loadu_ps(B + n + 8);
            const __m256 C0 = _mm256_loadu_ps(C + n), C1 = _mm256_loadu_ps(C + n + 8);
            __m256 u0 = _mm256_fmadd_ps(s0, B0, _mm256_mul_ps(vd, _mm256_loadu_ps(r0 + n)));
            __m256 u1 = _mm256_fmadd_ps(s0, B1, _mm256_mul_ps(vd, _mm256_loadu_ps(r0 + n + 8)));
            __m256 v0 = _mm256_fmadd_ps(s1, B0, _mm256_mul_ps(vd, _mm256_loadu_ps(r1 + n)));
            __m256 v1 = _mm256_fmadd_ps(s1, B1, _mm256_mul_ps(vd, _mm256_loadu_ps(r1 + n + 8)));
            _mm256_storeu_ps(r0 + n, u0);
            _mm256_storeu_ps(r0 + n + 8, u1);
            _mm256_storeu_ps(r1 + n, v0);
            _mm256_storeu_ps(r1 + n + 8, v1);
            a0 = _mm256_fmadd_ps(C0, u0, a0);
            a1 = _mm256_fmadd_ps(C1, u1, a1);
            b0 = _mm256_fmadd_ps(C0, v0, b0);
            b1 = _mm256_fmadd_ps(C1, v1, b1);
        }
        for (; n < N; n += 8) {
            const __m256 B0 = _mm256_loadu_ps(B + n), C0 = _mm256_loadu_ps(C + n);
            __m256 u0 = _mm256_fmadd_ps(s0, B0, _mm256_mul_ps(vd, _mm256_loadu_ps(r0 + n)));
            __m256 v0 = _mm256_fmadd_ps(s1, B0, _mm256_mul_ps(vd, _mm256_loadu_ps(r1 + n)));
            _mm256_storeu_ps(r0 + n, u0);
            _mm256_storeu_ps(r1 + n, v0);
            a0 = _mm256_fmadd_ps(C0, u0, a0);
            b0 = _mm256_fmadd_ps(C0, v0, b0);
        }
        y[p] = hsum(_mm256_add_ps(a0, a1)) + d * x[p];
        y[p + 1] = hsum(_mm256_add_ps(b0, b1)) + d * x[p + 1];
    }
    for (; p < P; p++) {
        float *row = S + (size_t)p * N;
        const __m256 vs = _mm256_set1_ps(dt * x[p]);
        __m256 a0 = _mm256_setzero_ps();
        for (int n = 0; n < N; n += 8) {
            __m256 r0 = _mm256_fmadd_ps(vs, _mm256_loadu_ps(B + n), _mm256_mul_ps(vd, _mm256_loadu_ps(row + n)));
            _mm256_storeu_ps(row + n, r0);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(C + n), r0, a0);
        }
        y[p] = hsum(a0) + d * x[p];
    }
}

#define TGT512 __attribute__((target("avx512f,fma")))

/* step_avx2 at 16 entries a time (N a multiple of 16), two rows per pass; each row's sum is one zmm
 * accumulator, reduced once. */
TGT512 static void step_avx512(float *S, const float *x, const float *B, const float *C, float decay, float dt,
                               float d, float *y, int P, int N) {
    const __m512 vd = _mm512_set1_ps(decay);
    int p = 0;
    for (; p + 2 <= P; p += 2) {
        float *r0 = S + (size_t)p * N, *r1 = r0 + N;
        const __m512 s0 = _mm512_set1_ps(dt * x[p]), s1 = _mm512_set1_ps(dt * x[p + 1]);
        __m512 a0 = _mm512_setzero_ps(), b0 = a0;
        for (int n = 0; n < N; n += 16) {
            const __m512 B0 = _mm512_loadu_ps(B + n), C0 = _mm512_loadu_ps(C + n);
            __m512 u0 = _mm512_fmadd_ps(s0, B0, _mm512_mul_ps(vd, _mm512_loadu_ps(r0 + n)));
            __m512 v0 = _mm512_fmadd_ps(s1, B0, _mm512_mul_ps(vd, _mm512_loadu_ps(r1 + n)));
            _mm512_storeu_ps(r0 + n, u0);
            _mm512_storeu_ps(r1 + n, v0);
            a0 = _mm512_fmadd_ps(C0, u0, a0);
            b0 = _mm512_fmadd_ps(C0, v0, b0);
        }
        y[p] = _mm512_reduce_add_ps(a0) + d * x[p];
        y[p + 1] = _mm512_reduce_add_ps(b0) + d * x[p + 1];
    }
    for (; p < P; p++) {
        float *row = S + (size_t)p * N;
        const __m512 vs = _mm512_set1_ps(dt * x[p]);
        __m512 a0 = _mm512_setzero_ps();
        for (int n = 0; n < N; n += 16) {
            __m512 r0 = _mm512_fmadd_ps(vs, _mm512_loadu_ps(B + n), _mm512_mul_ps(vd, _mm512_loadu_ps(row + n)));
            _mm512_storeu_ps(row + n, r0);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(C + n), r0, a0);
        }
        y[p] = _mm512_reduce_add_ps(a0) + d * x[p];
    }
}
#endif

void pith_ssd_recurrent(const pith_ssd_args *a, int h) {
    const int P = a->head_dim, N = a->d_state, g = h / (a->n_heads / a->n_groups);
    float *S = a->state + (size_t)h * P * N;
    const float A = a->A[h], d = a->D ? a->D[h] : 0.0f;
#ifdef SSD_AVX2
    const bool simd = !a->portable && N % 8 == 0 && pith_recurrent_have_avx2_fma();
    const bool zmm = !a->portable && !a->no_avx512 && N % 16 == 0 && pith_recurrent_have_avx512();
#endif
    for (int t = 0; t < a->n_tokens; t++) {
        const float dt = softplus(a->dt[(size_t)t * a->ld_dt + h] + a->dt_bias[h]);
        const float decay = expf(dt * A);
        const float *x = a->x + (size_t)t * a->ld_x + (size_t)h * P;
        const float *B = a->B + (size_t)t * a->ld_bc + (size_t)g * N, *C = a->C + (size_t)t * a->ld_bc + (size_t)g * N;
        float *y = a->y + (size_t)t * a->ld_y + (size_t)h * P;
#ifdef SSD_AVX2
        if (zmm) {
            step_avx512(S, x, B, C, decay, dt, d, y, P, N);
            continue;
        }
        if (simd) {
            step_avx2(S, x, B, C, decay, dt, d, y, P, N);
            continue;
        }
#endif
        step_scalar(S, x, B, C, decay, dt, d, y, P, N);
    }
}

static float dotf(const float *u, const float *v, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += u[i] * v[i];
    return s;
}

void pith_ssd_chunked(const pith_ssd_args *a, int h, float *scratch) {
    const int P = a->head_dim, N = a->d_state, g = h / (a->n_heads / a->n_groups);
    float *S = a->state + (size_t)h * P * N;
    const float A = a->A[h], d = a->D ? a->D[h] : 0.0f;
    /* the cumulative log-decays in double: they reach hundreds within a chunk, where a float would
     * round each exp(a_i - a_j) by 1e-5 */
    double cum[CH];
    float *dt = scratch, *w = dt + 2 * CH, *G = w + CH;
    for (int c0 = 0; c0 < a->n_tokens; c0 += CH) {
        const int c = a->n_tokens - c0 < CH ? a->n_tokens - c0 : CH;
#define X(i) (a->x + (size_t)(c0 + (i)) * a->ld_x + (size_t)h * P)
#define BB(i) (a->B + (size_t)(c0 + (i)) * a->ld_bc + (size_t)g * N)
#define CC(i) (a->C + (size_t)(c0 + (i)) * a->ld_bc + (size_t)g * N)
#define Y(i) (a->y + (size_t)(c0 + (i)) * a->ld_y + (size_t)h * P)
        double run = 0;
        for (int i = 0; i < c; i++) {
            dt[i] = softplus(a->dt[(size_t)(c0 + i) * a->ld_dt + h] + a->dt_bias[h]);
            run += (double)(dt[i] * A);
            cum[i] = run;
        }
        for (int i = 0; i < c; i++)
            for (int j = 0; j <= i; j++) G[i * CH + j] = dotf(CC(i), BB(j), N);
        /* outputs: the carried state's part, then the chunk's own tokens */
        for (int i = 0; i < c; i++) {
            float *y = Y(i);
            const float *Ci = CC(i), *xi = X(i), e = expf((float)cum[i]);
            for (int p = 0; p < P; p++) y[p] = e * dotf(S + (size_t)p * N, Ci, N);
            for (int j = 0; j <= i; j++) w[j] = expf((float)(cum[i] - cum[j])) * dt[j] * G[i * CH + j];
            for (int j = 0; j <= i; j++) {
                const float *xj = X(j), wj = w[j];
                for (int p = 0; p < P; p++) y[p] += wj * xj[p];
            }
            for (int p = 0; p < P; p++) y[p] += d * xi[p];
        }
        /* the state at the chunk's end */
        const double last = cum[c - 1];
        const float e = expf((float)last);
        for (int j = 0; j < c; j++) w[j] = expf((float)(last - cum[j])) * dt[j];
        for (int p = 0; p < P; p++) {
            float *row = S + (size_t)p * N;
            for (int n = 0; n < N; n++) row[n] *= e;
            for (int j = 0; j < c; j++) {
                const float s = w[j] * X(j)[p], *Bj = BB(j);
                for (int n = 0; n < N; n++) row[n] += s * Bj[n];
            }
        }
#undef X
#undef BB
#undef CC
#undef Y
    }
}

void pith_gated_rmsnorm_grouped(float *x, const float *z, const float *w, int n, int group, float eps) {
    for (int i = 0; i < n; i++) x[i] *= z[i] / (1.0f + expf(-z[i]));
    for (int g0 = 0; g0 < n; g0 += group) {
        double ss = 0;
        for (int i = g0; i < g0 + group; i++) ss += (double)x[i] * x[i];
        const float r = (float)(1.0 / sqrt(ss / group + eps));
        for (int i = g0; i < g0 + group; i++) x[i] = x[i] * r * w[i];
    }
}
