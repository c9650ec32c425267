/* Gated DeltaNet (recurrent.h): the recurrent form for decode and short runs, the chunked (WY) form for
 * prefill. Per chunk of c tokens with state S0, cumulative log-decay G_i = g_0 + ... + g_i and
 * A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j) for j < i:
 *   U_i  = beta_i v_i - sum_{j<i} A[i][j] U_j                  (c x dv)
 *   W_i  = beta_i exp(G_i) k_i - sum_{j<i} A[i][j] W_j         (c x dk)
 *   Vn_i = U_i - S0^T W_i                                       (the deltas of the recurrence)
 *   out_i = exp(G_i) S0^T q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) Vn_j
 *   S = exp(G_c) S0 + sum_j exp(G_c - G_j) k_j Vn_j^T
 * which unrolls S_i = exp(g_i) (I - beta_i k_i k_i^T) S_{i-1} + beta_i k_i v_i^T exactly. With g <= 0
 * every exp() here is at most 1. */
#include <math.h>
#include <string.h>

#include "backend/cpu/recurrent.h"
#include "backend/cpu/recurrent_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GDN_AVX2 1
#endif

#define C PITH_GDN_CHUNK

size_t pith_gdn_scratch_floats(int dk, int dv) {
    /* qn, kn, W: C x dk; U: C x dv; G and the decays: C each; one row of dv */
    return (size_t)C * (3 * (size_t)dk + (size_t)dv + 2) + (size_t)dv;
}

/* out = x * scale / sqrt(sum x^2 + eps) */
static void l2norm(float *out, const float *x, int n, float eps, float scale) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(scale / sqrt(ss + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One token of the recurrence on a dk x dv state: S = decay S, kv = S^T k, delta = beta (v - kv),
 * S += k delta^T, o = S^T q; kv is scratch of dv floats. */
static void step_scalar(float *S, const float *qn, const float *kn, const float *v, float decay, float beta,
                        float *kv, float *o, int dk, int dv) {
    memset(kv, 0, (size_t)dv * sizeof(float));
    for (int d = 0; d < dk; d++) {
        float *row = S + (size_t)d * dv, kd = kn[d];
        for (int e = 0; e < dv; e++) {
            row[e] *= decay;
            kv[e] += kd * row[e];
        }
    }
    for (int e = 0; e < dv; e++) kv[e] = beta * (v[e] - kv[e]); /* delta */
    memset(o, 0, (size_t)dv * sizeof(float));
    for (int d = 0; d < dk; d++) {
        float *row = S + (size_t)d * dv, kd = kn[d], qd = qn[d];
        for (int e = 0; e < dv; e++) {
            row[e] += kd * kv[e];
            o[e] += qd * row[e];
        }
    }
}

#ifdef GDN_AVX2
#define TGT __attribute__((target("avx2,fma")))

/* The same step, 32 columns of the state at a time held in registers across its dk rows. The sums
 * run over d in the same order as step_scalar's, but FMA rounds once where it rounds twice. */
TGT static void step_avx2(float *S, const float *qn, const float *kn, const float *v, float decay, float beta,
                          float *kv, float *o, int dk, int dv) {
    const __m256 vd = _mm256_set1_ps(decay), vb = _mm256_set1_ps(beta);
    for (int e = 0; e < dv; e += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < dk; d++) {
            float *r = S + (size_t)d * dv + e;
            __m256 kd = _mm256_set1_ps(kn[d]);
            __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(r), vd), r1 = _mm256_mul_ps(_mm256_loadu_ps(r + 8), vd);
            __m256 r2 = _mm256_mul_ps(_mm256_loadu_ps(r + 16), vd), r3 = _mm256_mul_ps(_mm256_loadu_ps(r + 24), vd);
            _mm256_storeu_ps(r, r0), _mm256_storeu_ps(r + 8, r1), _mm256_storeu_ps(r + 16, r2), _mm256_storeu_ps(r + 24, r3);
            a0 = _mm256_fmadd_ps(kd, r0, a0), a1 = _mm256_fmadd_ps(kd, r1, a1);
            a2 = _mm256_fmadd_ps(kd, r2, a2), a3 = _mm256_fmadd_ps(kd, r3, a3);
        }
        /* delta = beta (v - kv) */
        __m256 d0 = _mm256_mul_ps(vb, _mm256_sub_ps(_mm256_loadu_ps(v + e), a0));
        __m256 d1 = _mm256_mul_ps(vb, _mm256_sub_ps(_mm256_loadu_ps(v + e + 8), a1));
        __m256 d2 = _mm256_mul_ps(vb, _mm256_sub_ps(_mm256_loadu_ps(v + e + 16), a2));
        __m256 d3 = _mm256_mul_ps(vb, _mm256_sub_ps(_mm256_loadu_ps(v + e + 24), a3));
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int d = 0; d < dk; d++) {
            float *r = S + (size_t)d * dv + e;
            __m256 kd = _mm256_set1_ps(kn[d]), qd = _mm256_set1_ps(qn[d]);
            __m256 r0 = _mm256_fmadd_ps(kd, d0, _mm256_loadu_ps(r)), r1 = _mm256_fmadd_ps(kd, d1, _mm256_loadu_ps(r + 8));
            __m256 r2 = _mm256_fmadd_ps(kd, d2, _mm256_loadu_ps(r + 16)), r3 = _mm256_fmadd_ps(kd, d3, _mm256_loadu_ps(r + 24));
            _mm256_storeu_ps(r, r0), _mm256_storeu_ps(r + 8, r1), _mm256_storeu_ps(r + 16, r2), _mm256_storeu_ps(r + 24, r3);
            o0 = _mm256_fmadd_ps(qd, r0, o0), o1 = _mm256_fmadd_ps(qd, r1, o1);
            o2 = _mm256_fmadd_ps(qd, r2, o2), o3 = _mm256_fmadd_ps(qd, r3, o3);
        }
        _mm256_storeu_ps(o + e, o0), _mm256_storeu_ps(o + e + 8, o1);
        _mm256_storeu_ps(o + e + 16, o2), _mm256_storeu_ps(o + e + 24, o3);
    }
    (void)kv;
}

#define TGT512 __attribute__((target("avx512f,fma")))

/* The step, 64 columns at a time in zmm registers, with the decay folded in: S^T k is taken from the
 * undecayed rows and scaled once (decay (S^T k)), and the rows are decayed and updated in one pass,
 * S_d = decay S_d + k_d delta, so the state is written once per token instead of twice. The new state
 * rounds as step_avx2's does; S^T k rounds once more differently (the product by decay comes last). */
TGT512 static void step_avx512(float *S, const float *qn, const float *kn, const float *v, float decay, float beta,
                               float *o, int dk, int dv) {
    const __m512 vd = _mm512_set1_ps(decay), vb = _mm512_set1_ps(beta);
    for (int e = 0; e < dv; e += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < dk; d++) {
            const float *r = S + (size_t)d * dv + e;
            __m512 kd = _mm512_set1_ps(kn[d]);
            a0 = _mm512_fmadd_ps(kd, _mm512_loadu_ps(r), a0), a1 = _mm512_fmadd_ps(kd, _mm512_loadu_ps(r + 16), a1);
            a2 = _mm512_fmadd_ps(kd, _mm512_loadu_ps(r + 32), a2), a3 = _mm512_fmadd_ps(kd, _mm512_loadu_ps(r + 48), a3);
        }
        /* delta = beta (v - decay S^T k) */
        __m512 d0 = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, a0, _mm512_loadu_ps(v + e)));
        __m512 d1 = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, a1, _mm512_loadu_ps(v + e + 16)));
        __m512 d2 = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, a2, _mm512_loadu_ps(v + e + 32)));
        __m512 d3 = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, a3, _mm512_loadu_ps(v + e + 48)));
        __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int d = 0; d < dk; d++) {
            float *r = S + (size_t)d * dv + e;
            __m512 kd = _mm512_set1_ps(kn[d]), qd = _mm512_set1_ps(qn[d]);
            __m512 r0 = _mm512_fmadd_ps(kd, d0, _mm512_mul_ps(_mm512_loadu_ps(r), vd));
            __m512 r1 = _mm512_fmadd_ps(kd, d1, _mm512_mul_ps(_mm512_loadu_ps(r + 16), vd));
            __m512 r2 = _mm512_fmadd_ps(kd, d2, _mm512_mul_ps(_mm512_loadu_ps(r + 32), vd));
            __m512 r3 = _mm512_fmadd_ps(kd, d3, _mm512_mul_ps(_mm512_loadu_ps(r + 48), vd));
            _mm512_storeu_ps(r, r0), _mm512_storeu_ps(r + 16, r1), _mm512_storeu_ps(r + 32, r2), _mm512_storeu_ps(r + 48, r3);
            o0 = _mm512_fmadd_ps(qd, r0, o0), o1 = _mm512_fmadd_ps(qd, r1, o1);
            o2 = _mm512_fmadd_ps(qd, r2, o2), o3 = _mm512_fmadd_ps(qd, r3, o3);
        }
        _mm512_storeu_ps(o + e, o0), _mm512_storeu_ps(o + e + 16, o1);
        _mm512_storeu_ps(o + e + 32, o2), _mm512_storeu_ps(o + e + 48, o3);
    }
}
#endif

void pith_gdn_recurrent(const pith_gdn_args *a, int h, float *scratch) {
    const int dk = a->dk, dv = a->dv, qh = a->qk_tiled ? h % a->n_qk_heads : h / (a->n_heads / a->n_qk_heads);
    const float scale = 1.0f / sqrtf((float)dk);
    float *S = a->state + (size_t)h * dk * dv;
    float *qn = scratch, *kn = qn + dk, *kv = kn + dk;
    for (int t = 0; t < a->n_tokens; t++) {
        l2norm(qn, a->q + t * a->ld_qk + (size_t)qh * dk, dk, a->eps, scale);
        l2norm(kn, a->k + t * a->ld_qk + (size_t)qh * dk, dk, a->eps, 1.0f);
        const float *v = a->v + t * a->ld_v + (size_t)h * dv;
        float decay = expf(a->g[t * a->ld_gb + h]), beta = a->beta[t * a->ld_gb + h];
        float *o = a->out + t * a->ld_out + (size_t)h * dv;
#ifdef GDN_AVX2
        if (!a->portable && !a->no_avx512 && dv % 64 == 0 && pith_recurrent_have_avx512()) {
            step_avx512(S, qn, kn, v, decay, beta, o, dk, dv);
            continue;
        }
        if (!a->portable && dv % 32 == 0 && pith_recurrent_have_avx2_fma()) {
            step_avx2(S, qn, kn, v, decay, beta, kv, o, dk, dv);
            continue;
        }
#endif
        step_scalar(S, qn, kn, v, decay, beta, kv, o, dk, dv);
    }
}

void pith_gdn_chunked(const pith_gdn_args *a, int h, float *scratch) {
    const int dk = a->dk, dv = a->dv, qh = a->qk_tiled ? h % a->n_qk_heads : h / (a->n_heads / a->n_qk_heads);
    const float scale = 1.0f / sqrtf((float)dk);
    float *S = a->state + (size_t)h * dk * dv;
    float *qn = scratch, *kn = qn + (size_t)C * dk, *W = kn + (size_t)C * dk, *U = W + (size_t)C * dk;
    float *D = U + (size_t)C * dv, *G = D + C, *row = G + C;
    for (int t0 = 0; t0 < a->n_tokens; t0 += C) {
        const int c = a->n_tokens - t0 < C ? a->n_tokens - t0 : C;
        float acc = 0;
        for (int i = 0; i < c; i++) {
            size_t t = (size_t)(t0 + i);
            l2norm(qn + (size_t)i * dk, a->q + t * a->ld_qk + (size_t)qh * dk, dk, a->eps, scale);
            l2norm(kn + (size_t)i * dk, a->k + t * a->ld_qk + (size_t)qh * dk, dk, a->eps, 1.0f);
            acc += a->g[t * a->ld_gb + h];
            G[i] = acc;
        }
        /* U and W by forward substitution, row i from the rows before it */
        for (int i = 0; i < c; i++) {
            size_t t = (size_t)(t0 + i);
            float beta = a->beta[t * a->ld_gb + h], eg = expf(G[i]);
            const float *ki = kn + (size_t)i * dk, *v = a->v + t * a->ld_v + (size_t)h * dv;
            float *Ui = U + (size_t)i * dv, *Wi = W + (size_t)i * dk;
            for (int e = 0; e < dv; e++) Ui[e] = beta * v[e];
            for (int d = 0; d < dk; d++) Wi[d] = beta * eg * ki[d];
            for (int j = 0; j < i; j++) {
                float aij = beta * dot(ki, kn + (size_t)j * dk, dk) * expf(G[i] - G[j]);
                const float *Uj = U + (size_t)j * dv, *Wj = W + (size_t)j * dk;
                for (int e = 0; e < dv; e++) Ui[e] -= aij * Uj[e];
                for (int d = 0; d < dk; d++) Wi[d] -= aij * Wj[d];
            }
        }
        /* Vn = U - W S0 (into U) */
        for (int i = 0; i < c; i++) {
            float *Ui = U + (size_t)i * dv;
            const float *Wi = W + (size_t)i * dk;
            for (int d = 0; d < dk; d++) {
                const float *Sd = S + (size_t)d * dv;
                float wd = Wi[d];
                for (int e = 0; e < dv; e++) Ui[e] -= wd * Sd[e];
            }
        }
        /* outputs: the part through S0, then the chunk's own deltas */
        for (int i = 0; i < c; i++) {
            const float *qi = qn + (size_t)i * dk;
            float *o = a->out + (size_t)(t0 + i) * a->ld_out + (size_t)h * dv;
            memset(row, 0, (size_t)dv * sizeof(float));
            for (int d = 0; d < dk; d++) {
                const float *Sd = S + (size_t)d * dv;
                float qd = qi[d];
                for (int e = 0; e < dv; e++) row[e] += qd * Sd[e];
            }
            float eg = expf(G[i]);
            for (int e = 0; e < dv; e++) row[e] *= eg;
            for (int j = 0; j <= i; j++) {
                float w = dot(qi, kn + (size_t)j * dk, dk) * expf(G[i] - G[j]);
                const float *Vj = U + (size_t)j * dv;
                for (int e = 0; e < dv; e++) row[e] += w * Vj[e];
            }
            memcpy(o, row, (size_t)dv * sizeof(float));
        }
        /* S = exp(G_c) S0 + sum_j exp(G_c - G_j) k_j Vn_j^T */
        float egc = expf(G[c - 1]);
        for (int j = 0; j < c; j++) D[j] = expf(G[c - 1] - G[j]);
        for (int d = 0; d < dk; d++) {
            float *Sd = S + (size_t)d * dv;
            for (int e = 0; e < dv; e++) Sd[e] *= egc;
            for (int j = 0; j < c; j++) {
                float w = D[j] * kn[(size_t)j * dk + d];
                const float *Vj = U + (size_t)j * dv;
                for (int e = 0; e < dv; e++) Sd[e] += w * Vj[e];
            }
        }
    }
}

void pith_gated_rmsnorm(float *x, const float *z, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) {
        float zi = z[i];
        x[i] = x[i] * r * w[i] * (zi / (1.0f + expf(-zi)));
    }
}
