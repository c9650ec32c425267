/* The recurrent kernels (src/backend/cpu/recurrent.h) against scalar float64 references written from
 * the definitions: the causal depthwise conv1d with carried state, the Gated DeltaNet recurrence (both
 * the recurrent and the chunked kernel) and partial / multi-section RoPE. Shapes are chosen to be
 * awkward: one token, one head, runs that end inside a chunk (chunk tails), runs split across several
 * calls so the state is carried, channel ranges that do not cover a whole block, in-place outputs.
 *
 * Tolerances. conv1d: each output is a sum of K + 1 float products, |y - ref| <= (K + 2) u sum|terms|
 * with u = 2^-24, checked as 1e-6 * (sum|terms| + 1). RoPE: one rotation of float cos/sin rounded
 * once, |err| <= 4u (|x0| + |x1|). Gated DeltaNet: the state is a decayed sum of rank-one updates over
 * the whole sequence, each of whose dk * dv entries the float kernels accumulate in another order than
 * the reference (the chunked one through the forward substitution of the WY form); with L2-normalised
 * q and k, beta < 1 and decays <= 1 every term is bounded by max|v|, and an output collects dk + 64
 * such terms per chunk, so the error grows like (dk + 64) u per chunk times a few chunks of memory
 * (decays >= exp(-1.5) per token make older chunks vanish, but the no-decay case keeps them): we allow
 * 1e-5 * (max |ref| + max |v|), about 15 times the worst error measured here (7e-7, the no-decay
 * state) and far below a
 * real mistake (dropping one token's update or using a wrong decay moves outputs by 1e-2 or more). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/recurrent.h"
#include "check.h"

#define U 5.9604645e-08

static uint64_t rng = 0x9e3779b97f4a7c15ull;
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

/* ---- conv1d ---- */

/* SiLU by expf (NULL) or by the best kernel table's vector silu_mul */
static const pith_cpu_kernels *conv_kernels;

static void conv_case(int n_tokens, int channels, int K, bool bias, bool silu, bool in_place, const int *splits) {
    size_t ld = (size_t)channels + 3;
    float *x = rnd_vec((size_t)n_tokens * ld, -2, 2), *w = rnd_vec((size_t)channels * K, -1, 1);
    float *b = bias ? rnd_vec((size_t)channels, -1, 1) : NULL;
    float *state0 = rnd_vec((size_t)(K > 1 ? K - 1 : 1) * channels, -2, 2);
    float *state = malloc((size_t)(K > 1 ? K - 1 : 1) * channels * sizeof *state);
    memcpy(state, state0, (size_t)(K > 1 ? K - 1 : 1) * channels * sizeof *state);
    float *xin = malloc((size_t)n_tokens * ld * sizeof *xin);
    memcpy(xin, x, (size_t)n_tokens * ld * sizeof *xin);
    float *y = in_place ? x : calloc((size_t)n_tokens * ld, sizeof *y);
    /* the run in pieces (state carried), each piece's channels in two uneven ranges */
    int t0 = 0;
    for (int p = 0; t0 < n_tokens; p++) {
        int n = splits && splits[p] ? splits[p] : n_tokens - t0;
        if (n > n_tokens - t0) n = n_tokens - t0;
        pith_conv1d_args a = {n, channels, K, x + (size_t)t0 * ld, ld, w, b, state, y + (size_t)t0 * ld, ld, silu,
                              conv_kernels};
        int mid = channels / 3;
        pith_conv1d(&a, 0, mid);
        pith_conv1d(&a, mid, channels);
        t0 += n;
    }
    double worst = 0;
    int bad = 0;
    for (int t = 0; t < n_tokens; t++)
        for (int c = 0; c < channels; c++) {
            double acc = b ? b[c] : 0, mag = fabs(acc);
            for (int k = 0; k < K; k++) {
                int s = t - K + 1 + k;
                double in = s >= 0 ? xin[(size_t)s * ld + c] : state0[(size_t)(K - 1 + s) * channels + c];
                acc += (double)w[(size_t)c * K + k] * in;
                mag += fabs((double)w[(size_t)c * K + k] * in);
            }
            double ref = silu ? acc / (1 + exp(-acc)) : acc;
            double e = fabs(y[(size_t)t * ld + c] - ref);
            if (e > 1e-6 * (mag + 1)) bad++;
            if (e > worst) worst = e;
        }
    CHECKF(bad == 0, "conv1d T=%d C=%d K=%d (%s SiLU): %d outputs off, worst %g", n_tokens, channels, K,
           conv_kernels ? conv_kernels->name : "expf", bad, worst);
    /* the state holds the last K-1 inputs */
    int sbad = 0;
    for (int j = 0; j < K - 1; j++)
        for (int c = 0; c < channels; c++) {
            int s = n_tokens - (K - 1) + j;
            float want = s >= 0 ? xin[(size_t)s * ld + c] : state0[(size_t)(K - 1 + s) * channels + c];
            sbad += state[(size_t)j * channels + c] != want;
        }
    CHECKF(sbad == 0, "conv1d T=%d C=%d K=%d: %d state entries wrong", n_tokens, channels, K, sbad);
    if (!in_place) free(y);
    free(x), free(w), free(b), free(state0), free(state), free(xin);
}

/* ---- Gated DeltaNet ---- */

typedef struct gdn_case {
    int n_tokens, n_heads, n_qk_heads, dk, dv;
    float g_lo, g_hi;   /* log-decay range */
    bool chunked;
    int splits[4];      /* run lengths of successive calls (0: the rest) */
    bool tiled;         /* value head h reads qk head h % n_qk_heads */
} gdn_case;

static void gdn_ref(const gdn_case *c, const float *q, const float *k, const float *v, const float *g,
                    const float *beta, double *S, double *out) {
    int H = c->n_heads, dk = c->dk, dv = c->dv, ratio = H / c->n_qk_heads;
    size_t ldqk = (size_t)c->n_qk_heads * dk;
    double *qn = malloc(dk * sizeof *qn), *kn = malloc(dk * sizeof *kn), *kv = malloc(dv * sizeof *kv);
    for (int t = 0; t < c->n_tokens; t++)
        for (int h = 0; h < H; h++) {
            int qh = c->tiled ? h % c->n_qk_heads : h / ratio;
            const float *qt = q + t * ldqk + (size_t)qh * dk, *kt = k + t * ldqk + (size_t)qh * dk;
            double sq = 0, sk = 0;
            for (int d = 0; d < dk; d++) sq += (double)qt[d] * qt[d], sk += (double)kt[d] * kt[d];
            for (int d = 0; d < dk; d++) {
                qn[d] = qt[d] / sqrt(sq + 1e-6) / sqrt((double)dk);
                kn[d] = kt[d] / sqrt(sk + 1e-6);
            }
            double *Sh = S + (size_t)h * dk * dv, a = exp((double)g[t * H + h]), b = beta[t * H + h];
            for (size_t i = 0; i < (size_t)dk * dv; i++) Sh[i] *= a;
            for (int e = 0; e < dv; e++) {
                double s = 0;
                for (int d = 0; d < dk; d++) s += kn[d] * Sh[(size_t)d * dv + e];
                kv[e] = b * (v[(size_t)t * H * dv + (size_t)h * dv + e] - s);
            }
            for (int d = 0; d < dk; d++)
                for (int e = 0; e < dv; e++) Sh[(size_t)d * dv + e] += kn[d] * kv[e];
            for (int e = 0; e < dv; e++) {
                double s = 0;
                for (int d = 0; d < dk; d++) s += qn[d] * Sh[(size_t)d * dv + e];
                out[(size_t)t * H * dv + (size_t)h * dv + e] = s;
            }
        }
    free(qn), free(kn), free(kv);
}

/* the portable loops of the recurrent kernel, or its SIMD versions where the CPU has them: AVX-512
 * (value widths that are multiples of 64) unless no512, else AVX2 */
static bool portable, no512;

static void gdn_run(const gdn_case *c) {
    int T = c->n_tokens, H = c->n_heads, dk = c->dk, dv = c->dv;
    size_t ldqk = (size_t)c->n_qk_heads * dk, nS = (size_t)H * dk * dv;
    float *q = rnd_vec(T * ldqk, -1, 1), *k = rnd_vec(T * ldqk, -1, 1), *v = rnd_vec((size_t)T * H * dv, -1, 1);
    float *g = rnd_vec((size_t)T * H, c->g_lo, c->g_hi), *beta = rnd_vec((size_t)T * H, 0.02f, 0.98f);
    float *S = rnd_vec(nS, -0.5f, 0.5f), *out = calloc((size_t)T * H * dv, sizeof *out);
    double *Sr = malloc(nS * sizeof *Sr), *ref = malloc((size_t)T * H * dv * sizeof *ref);
    for (size_t i = 0; i < nS; i++) Sr[i] = S[i];
    gdn_ref(c, q, k, v, g, beta, Sr, ref);
    float *scratch = malloc(pith_gdn_scratch_floats(dk, dv) * sizeof *scratch);
    int t0 = 0;
    for (int p = 0; t0 < T; p++) {
        int n = p < 4 && c->splits[p] ? c->splits[p] : T - t0;
        if (n > T - t0) n = T - t0;
        pith_gdn_args a = {n, H, c->n_qk_heads, c->tiled, dk, dv, q + t0 * ldqk, k + t0 * ldqk, ldqk,
                           v + (size_t)t0 * H * dv, (size_t)H * dv, g + (size_t)t0 * H, beta + (size_t)t0 * H, (size_t)H,
                           1e-6f, S, out + (size_t)t0 * H * dv, (size_t)H * dv, portable, no512};
        for (int h = 0; h < H; h++) (c->chunked ? pith_gdn_chunked : pith_gdn_recurrent)(&a, h, scratch);
        t0 += n;
    }
    double mref = 0, worst = 0, sworst = 0, mS = 0;
    for (size_t i = 0; i < (size_t)T * H * dv; i++) mref = fmax(mref, fabs(ref[i]));
    for (size_t i = 0; i < (size_t)T * H * dv; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
    for (size_t i = 0; i < nS; i++) mS = fmax(mS, fabs(Sr[i])), sworst = fmax(sworst, fabs(S[i] - Sr[i]));
    double tol = 1e-5 * (mref + 1.0); /* max |v| is 1 */
    CHECKF(worst <= tol && sworst <= 1e-5 * (mS + 1.0),
           "gdn %s T=%d H=%d/%d dk=%d dv=%d: output error %g (tol %g), state error %g", c->chunked ? "chunked" : "recurrent",
           T, H, c->n_qk_heads, dk, dv, worst, tol, sworst);
    printf("gdn %-9s%s T=%4d H=%d/%d dk=%3d dv=%3d g in [%g, %g]: max error %.2e of max |out| %.3f, state %.2e\n",
           c->chunked ? "chunked" : "recurrent", c->chunked ? "" : portable ? " (portable)" : no512 ? " (avx2)" : " (simd)", T, H,
           c->n_qk_heads, dk, dv, c->g_lo, c->g_hi, worst, mref, sworst);
    free(q), free(k), free(v), free(g), free(beta), free(S), free(out), free(Sr), free(ref), free(scratch);
}

/* The chunked kernel writes outputs only for its own run and reads no scratch it did not write: the
 * same run twice from the same state gives the same bits, whatever the scratch held. */
static void gdn_deterministic(void) {
    int T = 77, H = 2, dk = 8, dv = 4;
    size_t ldqk = (size_t)H * dk, nS = (size_t)H * dk * dv;
    float *q = rnd_vec(T * ldqk, -1, 1), *k = rnd_vec(T * ldqk, -1, 1), *v = rnd_vec((size_t)T * H * dv, -1, 1);
    float *g = rnd_vec((size_t)T * H, -1, 0), *beta = rnd_vec((size_t)T * H, 0, 1);
    float *S1 = rnd_vec(nS, -1, 1), *S2 = malloc(nS * sizeof *S2);
    memcpy(S2, S1, nS * sizeof *S2);
    float *o1 = calloc((size_t)T * H * dv, sizeof *o1), *o2 = calloc((size_t)T * H * dv, sizeof *o2);
    size_t ns = pith_gdn_scratch_floats(dk, dv);
    float *s1 = calloc(ns, sizeof *s1), *s2 = malloc(ns * sizeof *s2);
    for (size_t i = 0; i < ns; i++) s2[i] = NAN;
    pith_gdn_args a = {T, H, H, false, dk, dv, q, k, ldqk, v, (size_t)H * dv, g, beta, (size_t)H, 1e-6f, S1, o1, (size_t)H * dv, false, false};
    for (int h = 0; h < H; h++) pith_gdn_chunked(&a, h, s1);
    a.state = S2, a.out = o2;
    for (int h = 0; h < H; h++) pith_gdn_chunked(&a, h, s2);
    CHECK(!memcmp(o1, o2, (size_t)T * H * dv * sizeof *o1) && !memcmp(S1, S2, nS * sizeof *S1));
    free(q), free(k), free(v), free(g), free(beta), free(S1), free(S2), free(o1), free(o2), free(s1), free(s2);
}

static void gated_norm(void) {
    int n = 37;
    float *x = rnd_vec(n, -3, 3), *z = rnd_vec(n, -4, 4), *w = rnd_vec(n, -2, 2), *x0 = malloc(n * sizeof *x0);
    memcpy(x0, x, n * sizeof *x0);
    pith_gated_rmsnorm(x, z, w, n, 1e-6f);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x0[i] * x0[i];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double ref = x0[i] / sqrt(ss / n + 1e-6) * w[i] * (z[i] / (1 + exp(-(double)z[i])));
        bad += fabs(x[i] - ref) > 16 * U * (fabs(ref) + 1e-30);
    }
    CHECKF(bad == 0, "gated rmsnorm: %d of %d off", bad, n);
    free(x), free(z), free(w), free(x0);
}

/* ---- RoPE ---- */

static void rope_case(int n_heads, int head_dim, int n_rot, pith_rope_sections s, const double pos[4]) {
    float *x = rnd_vec((size_t)n_heads * head_dim, -2, 2), *x0 = malloc((size_t)n_heads * head_dim * sizeof *x0);
    memcpy(x0, x, (size_t)n_heads * head_dim * sizeof *x0);
    float cs[256], sn[256];
    pith_rope_angles(&s, pos, 1e7, n_rot, cs, sn);
    pith_rope_partial(x, n_heads, head_dim, n_rot, cs, sn);
    int bad = 0, half = n_rot / 2;
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < head_dim; i++) {
            const float *v = x0 + (size_t)h * head_dim;
            double ref;
            if (i >= n_rot) {
                ref = v[i];
            } else {
                int f = i % half, sec;
                /* the section of frequency f, from the definition */
                if (s.interleaved) sec = (f % 3 == 1 && f < 3 * s.n[1]) ? 1 : (f % 3 == 2 && f < 3 * s.n[2]) ? 2 : 0;
                else sec = f < s.n[0] ? 0 : f < s.n[0] + s.n[1] ? 1 : f < s.n[0] + s.n[1] + s.n[2] ? 2 : f < s.n[0] + s.n[1] + s.n[2] + s.n[3] ? 3 : 0;
                double ang = pos[sec] * pow(1e7, -2.0 * f / n_rot);
                ref = i < half ? v[f] * cos(ang) - v[f + half] * sin(ang) : v[f] * sin(ang) + v[f + half] * cos(ang);
            }
            double mag = i < n_rot ? fabs(v[i % half]) + fabs(v[i % half + half]) : 0;
            /* float cos/sin of a double angle near 1e5 rad: 2u each, plus the rotation's 2u */
            bad += fabs(x[(size_t)h * head_dim + i] - ref) > 6 * U * mag;
        }
    CHECKF(bad == 0, "rope head_dim=%d n_rot=%d: %d values off", head_dim, n_rot, bad);
    free(x), free(x0);
}

int main(void) {
    /* conv1d: one token, a chunk, in place, K = 1 (no state), channels past one block, carried state */
    for (int v = 0; v < 2; v++) {
        conv_kernels = v ? pith_cpu_kernels_best(false) : NULL;
        conv_case(1, 5, 4, true, true, false, NULL);
        conv_case(1, 130, 3, false, false, false, NULL);
        conv_case(37, 70, 3, false, false, true, (const int[]){1, 17, 2, 0});
        conv_case(64, 129, 4, true, true, false, (const int[]){63, 1, 0});
        conv_case(9, 3, 1, true, false, true, NULL);
        conv_case(20, 8, 6, false, true, false, (const int[]){2, 2, 2, 0});
        conv_case(5, 200, 4, true, true, true, (const int[]){2, 0});
    }

    /* Gated DeltaNet: each case through both kernels */
    const gdn_case cases[] = {
        {1, 1, 1, 4, 4, -1.5f, -0.001f, false, {0}, false},
        {1, 3, 1, 16, 8, -1.5f, -0.001f, false, {0}, false},
        {64, 2, 2, 16, 16, -1.5f, -0.001f, false, {0}, false},        /* exactly one chunk */
        {65, 2, 1, 16, 8, -1.5f, -0.001f, false, {0}, false},         /* one-token tail */
        {201, 4, 2, 32, 16, -1.5f, -0.001f, false, {70, 1, 63, 0}, false}, /* split runs, chunk tails */
        {70, 6, 2, 16, 8, -1.5f, -0.001f, false, {0}, true},     /* llama.cpp's tiled head order */
        {150, 1, 1, 64, 64, -0.0001f, 0.0f, false, {0}, false},       /* almost no decay: long memory */
        {129, 2, 2, 128, 128, -0.2f, -0.0f, false, {128, 0}, false},  /* Qwen3.5's head size */
        {40, 3, 3, 16, 96, -1.0f, -0.01f, false, {1, 1, 0}, true},   /* three SIMD column blocks */
        {33, 2, 1, 32, 192, -1.0f, -0.01f, false, {1, 5, 0}, false}, /* three AVX-512 column blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gdn_case c = cases[i];
        portable = true;
        gdn_run(&c);
        portable = false;
        gdn_run(&c);
        no512 = true;
        gdn_run(&c);
        no512 = false;
        c.chunked = true;
        gdn_run(&c);
    }
    gdn_deterministic();
    gated_norm();

    /* RoPE: plain partial (Qwen3.5 text: 64 of 256), full, interleaved and contiguous sections with
     * different components, a far position */
    const double same[4] = {1234, 1234, 1234, 1234}, diff[4] = {17, 5, 3000, 9};
    rope_case(3, 256, 64, (pith_rope_sections){{0}, false}, same);
    rope_case(2, 16, 16, (pith_rope_sections){{0}, false}, diff);
    rope_case(2, 256, 64, (pith_rope_sections){{11, 11, 10, 0}, true}, diff);
    rope_case(1, 128, 128, (pith_rope_sections){{16, 24, 24, 0}, false}, diff);
    rope_case(1, 64, 2, (pith_rope_sections){{0}, false}, (const double[4]){100000, 0, 0, 0});
    /* with every component equal, M-RoPE is plain partial RoPE */
    pith_rope_sections m = {{11, 11, 10, 0}, true}, p = {{0}, false};
    float c1[32], s1[32], c2[32], s2[32];
    pith_rope_angles(&m, same, 1e7, 64, c1, s1);
    pith_rope_angles(&p, same, 1e7, 64, c2, s2);
    CHECK(!memcmp(c1, c2, sizeof c1) && !memcmp(s1, s2, sizeof s1));
    return check_summary("test_recurrent");
}
