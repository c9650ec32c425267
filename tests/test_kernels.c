/* CPU kernels against straightforward float64 references written here from the format definitions.
 *
 * Tolerances (u = 2^-24, float's unit roundoff):
 *   - Dot products of K terms in float, in any summation order, err <= (K + 8) u sum|w_k x_k| (Higham's
 *     gamma_K bound plus a few roundings for the final horizontal add). Used for every float-weight tile
 *     and, with the *quantized* activations as x, for the integer tiles: there the integer block sums
 *     are exact, so only the float accumulation of block terms errs.
 *   - Against the unquantized activations, the integer tiles also carry the activation quantization
 *     error: each element moves by at most d/2 with d = max|x over its block| / 127, so the output
 *     moves by at most sum_k |w_k| d_k / 2.
 *   - K-quant block terms subtract two products (d * dots - dmin * mins) whose integer factors can
 *     exceed 2^24 and round when converted; the bound uses |d sc q| + |dmin m| per element instead of |w|.
 *   - Dequantization: the library and the reference multiply the same three factors in a different
 *     order, 2 roundings apart: 4u relative.
 * Shapes are chosen awkward on purpose: 1 row, odd row counts, rows not a multiple of the 4-row tile,
 * 1..9 tokens (tails of every token tile), float K not a multiple of 8 or 64. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/threadpool.h"
#include "check.h"
#include "quant_ref.h"

#define U 5.9604645e-08 /* 2^-24 */

/* ---------- tests ---------- */

static const pith_dtype all_types[] = {PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0, PITH_Q4_0, PITH_Q4_K, PITH_Q6_K, PITH_Q5_K,
                                    PITH_IQ4_NL, PITH_IQ4_XS};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

static void test_dequantize(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        pith_dtype t = all_types[ti];
        int n = 4 * 256;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        uint8_t *q = malloc(pith_dtype_row_bytes(t, n));
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0) {
                for (int i = 0; i < n; i++) x[i] = rnd_uniform(-1, 1) * (i % 97 == 0 ? 4.0f : 1.0f);
                ref_quantize(t, x, n, q);
            } else {
                if (block_elems(t) == 1) break;
                random_blocks(t, n, q);
            }
            pith_dequantize_row(t, q, y, n);
            double worst = 0, worst_rt = 0;
            for (int i = 0; i < n; i++) {
                double mag, v = ref_elem(t, q, i, &mag);
                worst = fmax(worst, fabs(y[i] - v) / (4 * U * mag + 1e-30));
                if (pass == 0) worst_rt = fmax(worst_rt, fabs(v - x[i]));
            }
            CHECKF(worst <= 1.0, "%s pass %d: dequantize off by %.3g of the 4u bound", pith_dtype_name(t), pass, worst);
            /* The reference quantizer itself must be sane, or the other tests prove little:
             * round trip error well under the range (|x| <= 4). */
            if (pass == 0) {
                double lim = t == PITH_F32 ? 0 : t == PITH_F16 ? 4 * 1e-3 : t == PITH_BF16 ? 4 * 8e-3 :
                             t == PITH_Q8_0 ? 4.0 / 127 : 0.45;
                CHECKF(worst_rt <= lim, "%s: reference round trip error %g > %g", pith_dtype_name(t), worst_rt, lim);
            }
        }
        free(x);
        free(y);
        free(q);
    }
}

static void check_q8_block(const float *x, int n, float d, const int8_t *q, const char *what) {
    double amax = 0;
    for (int i = 0; i < n; i++) amax = fmax(amax, fabs(x[i]));
    CHECKF(fabs(d - amax / 127) <= 2 * U * amax / 127, "%s: scale %g for max %g", what, d, amax);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double r = d ? x[i] / d : 0;
        if (q[i] == -128 || fabs(q[i] - r) > 0.5 + 1e-4) bad++;
    }
    CHECKF(bad == 0, "%s: %d quants are not round(x / d)", what, bad);
}

static void test_activation_quantizers(const pith_cpu_kernels *k) {
    int n = 5 * 256;
    float *x = malloc(n * sizeof *x);
    pith_block_q8a *a = malloc((n / 32) * sizeof *a), *as = malloc((n / 32) * sizeof *as);
    pith_block_q8k *b = malloc((n / 256) * sizeof *b), *bs = malloc((n / 256) * sizeof *bs);
    for (int i = 0; i < n; i++) x[i] = rnd_uniform(-2, 2) * (i % 50 == 0 ? 10.0f : 1.0f);
    for (int i = 64; i < 96; i++) x[i] = 0; /* an all-zero block */
    for (int i = 96; i < 128; i++) x[i] = (float)(i - 112) + 0.5f; /* many exact ties after scaling */
    k->quantize_q8a(x, a, n);
    k->quantize_q8k(x, b, n);
    for (int i = 0; i < n / 32; i++) check_q8_block(x + 32 * i, 32, a[i].d, a[i].qs, "q8a");
    for (int i = 0; i < n / 256; i++) {
        check_q8_block(x + 256 * i, 256, b[i].d, b[i].qs, "q8k");
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[i].qs[16 * s + j];
            CHECKF(b[i].bsums[s] == sum, "q8k bsums[%d] %d != %d", s, b[i].bsums[s], sum);
        }
    }
    /* The SIMD quantizers do the same float arithmetic as the scalar ones: identical output. */
    pith_quantize_q8a_scalar(x, as, n);
    pith_quantize_q8k_scalar(x, bs, n);
    CHECKF(!memcmp(a, as, (n / 32) * sizeof *a), "%s q8a differs from scalar", k->name);
    CHECKF(!memcmp(b, bs, (n / 256) * sizeof *b), "%s q8k differs from scalar", k->name);
    free(x);
    free(a);
    free(as);
    free(b);
    free(bs);
}

/* One matmul case: rows x K weights of type t (random bytes or quantized floats), n tokens. */
static void matmul_case(pith_cpu *cpu, pith_dtype t, int rows, int K, int n, bool random_bytes, bool accumulate) {
    size_t rb = pith_dtype_row_bytes(t, K);
    uint8_t *w = malloc(rb * rows);
    float *wf = malloc((size_t)K * sizeof *wf);
    for (int r = 0; r < rows; r++) {
        if (random_bytes && block_elems(t) > 1) {
            random_blocks(t, K, w + r * rb);
        } else {
            for (int i = 0; i < K; i++) wf[i] = rnd_uniform(-1, 1);
            ref_quantize(t, wf, K, w + r * rb);
        }
    }
    size_t ldx = (size_t)K + 3, ldy = (size_t)rows + 2; /* padded strides */
    float *x = malloc(ldx * n * sizeof *x);
    float *y = malloc(ldy * n * sizeof *y);
    for (size_t i = 0; i < ldx * n; i++) x[i] = rnd_uniform(-1, 1);
    for (size_t i = 0; i < ldy * n; i++) y[i] = accumulate ? rnd_uniform(-1, 1) : NAN;
    float *y0 = malloc(ldy * n * sizeof *y0);
    memcpy(y0, y, ldy * n * sizeof *y0);

    pith_act_format fmt = pith_act_format_of(pith_wtype_of(t));
    /* the quantized activations, as the kernel sees them (the quantizers are checked separately) */
    float *xq = malloc((size_t)K * n * sizeof *xq), *dx = malloc((size_t)K * n * sizeof *dx);
    for (int tok = 0; tok < n; tok++) {
        const float *xt = x + tok * ldx;
        if (fmt == PITH_ACT_F32) {
            for (int i = 0; i < K; i++) xq[tok * K + i] = xt[i], dx[tok * K + i] = 0;
        } else if (fmt == PITH_ACT_Q8A) {
            pith_block_q8a *blk = malloc((K / 32) * sizeof *blk);
            cpu->k->quantize_q8a(xt, blk, K);
            for (int i = 0; i < K; i++) xq[tok * K + i] = blk[i / 32].d * blk[i / 32].qs[i % 32], dx[tok * K + i] = blk[i / 32].d;
            free(blk);
        } else {
            pith_block_q8k *blk = malloc((K / 256) * sizeof *blk);
            cpu->k->quantize_q8k(xt, blk, K);
            for (int i = 0; i < K; i++) xq[tok * K + i] = blk[i / 256].d * blk[i / 256].qs[i % 256], dx[tok * K + i] = blk[i / 256].d;
            free(blk);
        }
    }

    pith_matrix m = {.type = pith_wtype_of(t), .rows = rows, .cols = K, .data = w, .row_bytes = rb};
    pith_acts acts;
    pith_err err = {{0}};
    /* the table's packed layout where it has one: whole groups of 8 rows packed, the rest as stored */
    CHECKF(pith_matrix_pack(cpu, &m, &err) == 0, "%s", err.msg);
    int gr = cpu->k->pack_rows;
    CHECK(m.packed_rows == (cpu->k->pack[m.type] ? rows / gr * gr : 0));
    CHECK(pith_cpu_reserve(cpu, n, K, &err) == 0);
    pith_acts_bind(cpu, &acts, x, n, K, ldx);
    CHECKF(pith_cpu_matmul(cpu, &m, &acts, y, ldy, accumulate, &err) == 0, "%s", err.msg);

    int bad_sharp = 0, bad_loose = 0;
    double worst = 0;
    for (int tok = 0; tok < n; tok++) {
        for (int r = 0; r < rows; r++) {
            double sq = 0, sx = 0, mag = 0, qerr = 0;
            for (int i = 0; i < K; i++) {
                double em, e = ref_elem(t, w + r * rb, i, &em);
                double xv = xq[tok * K + i];
                sq += e * xv;
                sx += e * x[tok * ldx + i];
                mag += em * (fabs(xv) + dx[tok * K + i]);
                qerr += fabs(e) * (dx[tok * K + i] * 0.5 * (1 + 1e-5) + 1e-6 * fabs(x[tok * ldx + i]));
            }
            double base = accumulate ? y0[tok * ldy + r] : 0;
            double got = y[tok * ldy + r] - base;
            double tol = (K + 8) * U * mag + (accumulate ? 2 * U * (fabs(base) + fabs(sq)) : 0) + 1e-30;
            double e_sharp = fabs(got - sq);
            if (!(e_sharp <= tol)) bad_sharp++;
            worst = fmax(worst, e_sharp / tol);
            if (!(fabs(got - sx) <= tol + qerr)) bad_loose++;
        }
    }
    CHECKF(bad_sharp == 0 && bad_loose == 0,
           "%s %s rows %d K %d tokens %d %s%s: %d outside the rounding bound (worst %.2f x), %d outside the quantization bound",
           cpu->k->name, pith_dtype_name(t), rows, K, n, random_bytes ? "random blocks" : "quantized",
           accumulate ? " accumulate" : "", bad_sharp, worst, bad_loose);
    /* padding columns of y are untouched */
    int touched = 0;
    for (int tok = 0; tok < n; tok++)
        for (size_t r = rows; r < ldy; r++) touched += !(isnan(y[tok * ldy + r]) || y[tok * ldy + r] == y0[tok * ldy + r]);
    CHECK(touched == 0);
    pith_matrix_free(&m);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(y0);
    free(xq);
    free(dx);
}

static void test_matmul(pith_cpu *cpu) {
    static const int rows_list[] = {1, 3, 4, 5, 8, 21, 33};
    static const int tokens_list[] = {1, 2, 3, 4, 5, 7, 9};
    for (int ti = 0; ti < N_TYPES; ti++) {
        pith_dtype t = all_types[ti];
        int be = block_elems(t);
        int ks_float[] = {1, 7, 8, 13, 64, 100, 257};
        int ks_q32[] = {32, 96, 160, 544};
        int ks_k[] = {256, 768};
        const int *ks = be == 1 ? ks_float : be == 32 ? ks_q32 : ks_k;
        int nk = be == 1 ? 7 : be == 32 ? 4 : 2;
        for (int ki = 0; ki < nk; ki++)
            for (int ri = 0; ri < 7; ri++)
                for (int ni = 0; ni < 7; ni++) {
                    bool rbytes = (ri + ni) % 2 == 1;
                    matmul_case(cpu, t, rows_list[ri], ks[ki], tokens_list[ni], rbytes, (ri + ni + ki) % 3 == 0);
                }
    }
    /* Half-precision weights take any K: their packed tiles (kernels_half.c) have tails at K % 4
     * (AVX-512) and K % 8 (AVX2) and split tokens into passes up to tile_rn and beyond it. */
    static const int ks_half[] = {2, 3, 6, 258, 1031};
    static const int tokens_half[] = {6, 8, 11, 12, 13, 25};
    for (int ki = 0; ki < 5; ki++)
        for (int ni = 0; ni < 6; ni++) {
            matmul_case(cpu, PITH_F16, ni % 2 ? 16 : 40, ks_half[ki], tokens_half[ni], false, ni % 3 == 0);
            matmul_case(cpu, PITH_BF16, ni % 2 ? 24 : 17, ks_half[ki], tokens_half[ni], false, ni % 3 == 1);
        }
    /* K-quants around the packed groups (16 rows for AVX-512 VNNI, 8 for AVX2 and AVX-VNNI): short of
     * one 8-row group, a group and a row, one 16-row group, a 16-row group and a row, rows short of a
     * group boundary, three or six groups; token counts around the 4-token passes. */
    static const int rows_k[] = {7, 9, 16, 17, 31, 48};
    static const int tokens_k[] = {1, 4, 5, 8, 13};
    static const pith_dtype kquants[] = {PITH_Q4_K, PITH_Q5_K, PITH_Q6_K, PITH_IQ4_XS, PITH_IQ4_NL};
    for (int ti = 0; ti < 5; ti++)
        for (int ri = 0; ri < 6; ri++)
            for (int ni = 0; ni < 5; ni++)
                matmul_case(cpu, kquants[ti], rows_k[ri], ri % 2 ? 512 : 256, tokens_k[ni], (ri + ni) % 2 == 0,
                            (ri + ni) % 3 == 1);
    /* A larger prefill-like shape, where token tiles and units matter. */
    matmul_case(cpu, PITH_Q4_K, 70, 1024, 300, true, false);
    matmul_case(cpu, PITH_Q6_K, 40, 768, 130, false, true);
    matmul_case(cpu, PITH_Q5_K, 33, 512, 70, false, false);
    matmul_case(cpu, PITH_IQ4_XS, 48, 512, 70, true, true);
    matmul_case(cpu, PITH_IQ4_NL, 70, 1024, 100, false, false);
    matmul_case(cpu, PITH_Q8_0, 70, 1024, 300, false, false);
    matmul_case(cpu, PITH_Q4_0, 70, 1024, 300, true, true);
    matmul_case(cpu, PITH_F16, 37, 200, 130, false, true);
    matmul_case(cpu, PITH_BF16, 70, 203, 40, false, false);
}

/* A batch gives the same bits as the same tokens one at a time: every tile computes an output the same
 * way whatever the number of tokens it shares a call with (what lets batched serving reproduce single
 * requests exactly). */
static void test_batch_invariance(pith_cpu *cpu) {
    enum { ROWS = 37, N = 13 };
    static const int ks[] = {256, 96, 1031};
    for (int ti = 0; ti < N_TYPES; ti++) {
        pith_dtype t = all_types[ti];
        int K = ks[block_elems(t) == 1 ? 2 : block_elems(t) == 32 ? 1 : 0];
        size_t rb = pith_dtype_row_bytes(t, K);
        uint8_t *w = malloc(rb * ROWS);
        float *wf = malloc((size_t)K * sizeof *wf), *x = malloc((size_t)K * N * sizeof *x);
        float *yb = malloc((size_t)ROWS * N * sizeof *yb), *y1 = malloc((size_t)ROWS * N * sizeof *y1);
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < K; i++) wf[i] = rnd_uniform(-1, 1);
            ref_quantize(t, wf, K, w + r * rb);
        }
        for (int i = 0; i < K * N; i++) x[i] = rnd_uniform(-1, 1);
        pith_matrix m = {.type = pith_wtype_of(t), .rows = ROWS, .cols = K, .data = w, .row_bytes = rb};
        pith_acts acts;
        pith_err err = {{0}};
        CHECKF(pith_matrix_pack(cpu, &m, &err) == 0, "%s", err.msg);
        CHECK(pith_cpu_reserve(cpu, N, K, &err) == 0);
        pith_acts_bind(cpu, &acts, x, N, K, K);
        CHECKF(pith_cpu_matmul(cpu, &m, &acts, yb, ROWS, false, &err) == 0, "%s", err.msg);
        for (int tok = 0; tok < N; tok++) {
            pith_acts_bind(cpu, &acts, x + (size_t)tok * K, 1, K, K);
            CHECKF(pith_cpu_matmul(cpu, &m, &acts, y1 + (size_t)tok * ROWS, ROWS, false, &err) == 0, "%s", err.msg);
        }
        CHECKF(!memcmp(yb, y1, (size_t)ROWS * N * sizeof *yb), "%s %s: a batch of %d differs from single tokens",
               cpu->k->name, pith_dtype_name(t), N);
        pith_matrix_free(&m);
        free(w);
        free(wf);
        free(x);
        free(yb);
        free(y1);
    }
}

/* The two-group packed tiles (tile_packed2) give exactly the bits of two one-group calls, for every
 * token count around their 4-token passes, with and without accumulate, and leave the columns past the
 * two groups alone. MXFP4's tiles come from the table mxfp4.c extends. */
static void test_packed_pairs(const pith_cpu_kernels *base) {
    const pith_cpu_kernels *k = pith_kernels_with_mxfp4(base);
    static const pith_dtype types[] = {PITH_Q8_0, PITH_Q4_0, PITH_IQ4_NL, PITH_MXFP4};
    static const int ks[] = {32, 96, 544};
    static const int rns[] = {1, 2, 3, 4, 5, 7, 9};
    enum { LDY = 2 * PITH_PACK_ROWS_MAX + 5, MAX_N = 9 };
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        pith_wtype wt = pith_wtype_of(types[ti]);
        if (!k->tile_packed2[wt]) continue;
        CHECK(k->pack[wt] && k->tile_packed[wt]);
        const int R = k->pack_rows;
        for (int ki = 0; ki < 3; ki++) {
            const int K = ks[ki];
            size_t rb = pith_dtype_row_bytes(types[ti], K);
            uint8_t *w = malloc(rb * 2 * R), *packed = malloc(rb * 2 * R);
            for (int r = 0; r < 2 * R; r++) {
                if (types[ti] == PITH_MXFP4) {
                    for (size_t i = 0; i < rb; i++) w[r * rb + i] = (uint8_t)rnd_u64();
                    for (int b = 0; b < K / 32; b++) w[r * rb + (size_t)b * PITH_MXFP4_BYTES] = (uint8_t)(118 + rnd_u64() % 16);
                } else {
                    random_blocks(types[ti], K, w + r * rb);
                }
            }
            for (int gi = 0; gi < 2; gi++) k->pack[wt](K, w + (size_t)gi * R * rb, rb, packed + (size_t)gi * R * rb);
            size_t xs = pith_act_row_bytes(PITH_ACT_Q8A, K);
            uint8_t *x = malloc(xs * MAX_N);
            float *xf = malloc(sizeof(float) * K);
            for (int t = 0; t < MAX_N; t++) {
                for (int i = 0; i < K; i++) xf[i] = rnd_uniform(-1, 1);
                k->quantize_q8a(xf, (pith_block_q8a *)(x + t * xs), K);
            }
            for (int ni = 0; ni < 7; ni++)
                for (int accumulate = 0; accumulate < 2; accumulate++) {
                    const int n = rns[ni];
                    float y1[MAX_N * LDY], y2[MAX_N * LDY];
                    for (int i = 0; i < MAX_N * LDY; i++) y1[i] = y2[i] = rnd_uniform(-1, 1);
                    k->tile_packed[wt](K, packed, x, xs, n, y1, LDY, accumulate);
                    k->tile_packed[wt](K, packed + (size_t)R * rb, x, xs, n, y1 + R, LDY, accumulate);
                    k->tile_packed2[wt](K, packed, (size_t)R * rb, x, xs, n, y2, LDY, accumulate);
                    CHECKF(!memcmp(y1, y2, sizeof y1), "%s %s K %d tokens %d%s: two groups in one pass differ from two calls",
                           k->name, pith_dtype_name(types[ti]), K, n, accumulate ? " accumulate" : "");
                    checked++;
                }
            free(w);
            free(packed);
            free(x);
            free(xf);
        }
    }
    /* the AVX-512 table pairs every type it packs in lanes; the others pair none (yet) */
    CHECK(strcmp(base->name, "avx512-vnni") != 0 || checked == 4 * 3 * 7 * 2);
}

static void test_vector_helpers(const pith_cpu_kernels *k) {
    for (int n = 0; n < 70; n += 1 + n / 8) {
        float a[80], y[80], y2[80];
        uint16_t h[80], h2[80];
        for (int i = 0; i < n; i++) {
            a[i] = rnd_uniform(-3, 3);
            y2[i] = rnd_uniform(-1, 1);
        }
        int bad;
        float y3[80];
        memcpy(y3, y2, sizeof y3);
        k->scale(y2, -1.5f, n);
        bad = 0;
        for (int i = 0; i < n; i++) bad += y2[i] != y3[i] * -1.5f;
        CHECKF(bad == 0, "%s scale n=%d", k->name, n);
        k->f32_to_f16(a, h, n);
        k->f16_to_f32(h, y, n);
        bad = 0;
        for (int i = 0; i < n; i++) {
            h2[i] = pith_f32_to_f16(a[i]);
            bad += h[i] != h2[i] || y[i] != pith_f16_to_f32(h[i]);
        }
        CHECKF(bad == 0, "%s f16 conversions n=%d", k->name, n);
    }
    /* exp and silu against libm in double: a few ulp (8u). At the extremes the kernels clamp exp's
     * argument (to stay off libm's slow underflow/overflow paths), leaving results below 1e-30 where
     * the true value is smaller still: nothing an activation of order 1 could notice. */
    for (int n = 0; n < 40; n += 1 + n / 4) {
        float s[40], s0[40], g[40], u[40], g0[40];
        for (int i = 0; i < n; i++) {
            s[i] = s0[i] = i % 5 == 0 ? -200.0f : rnd_uniform(-30, 2);
            g[i] = g0[i] = i % 7 == 0 ? (i % 2 ? 120.0f : -120.0f) : rnd_uniform(-20, 20);
            u[i] = rnd_uniform(-2, 2);
        }
        float m = 2.0f;
        float sum = k->exp_shifted(s, m, n);
        double ref_sum = 0;
        int bad = 0;
        for (int i = 0; i < n; i++) {
            double e = exp((double)s0[i] - m);
            ref_sum += e;
            bad += !(fabs(s[i] - e) <= 8 * U * e + 1e-30);
        }
        CHECKF(bad == 0 && fabs(sum - ref_sum) <= (n + 8) * 2 * U * ref_sum + 1e-30, "%s exp_shifted n=%d: %d bad", k->name, n, bad);
        k->silu_mul(g, u, n);
        bad = 0;
        for (int i = 0; i < n; i++) {
            double ref = g0[i] / (1 + exp(-(double)g0[i])) * u[i];
            bad += !(fabs(g[i] - ref) <= 8 * U * fabs(ref) + 1e-30);
        }
        CHECKF(bad == 0, "%s silu_mul n=%d: %d bad", k->name, n, bad);
    }
    /* attention's P V: float sums of jn terms against float64 (Higham bound), and bit-identical when
     * zero-probability positions are appended (what makes decode and prefill agree exactly) */
    static const int hds[] = {8, 10, 16, 24, 64};
    for (int hi = 0; hi < 5; hi++)
        for (int nq = 1; nq <= 6; nq++)
            for (int jn = 1; jn < 70; jn += 11) {
                int hd = hds[hi], pl = 80;
                float p[6 * 80], v[80 * 64], acc[6 * 64], acc2[6 * 64];
                for (int i = 0; i < nq * pl; i++) p[i] = (i % pl) < jn ? rnd_uniform(0, 1) : 0.0f;
                for (int i = 0; i < 80 * hd; i++) v[i] = rnd_uniform(-2, 2);
                for (int i = 0; i < nq * hd; i++) acc[i] = acc2[i] = rnd_uniform(-1, 1);
                float acc0[6 * 64];
                memcpy(acc0, acc, sizeof acc0);
                k->pv_accumulate(acc, hd, p, pl, nq, v, hd, jn, hd);
                k->pv_accumulate(acc2, hd, p, pl, nq, v, hd, jn + 7, hd); /* 7 more positions, p = 0 */
                int bad = 0;
                for (int i = 0; i < nq; i++)
                    for (int d = 0; d < hd; d++) {
                        double ref = acc0[i * hd + d], mag = fabs(ref);
                        for (int j = 0; j < jn; j++) {
                            ref += (double)p[i * pl + j] * v[j * hd + d];
                            mag += fabs((double)p[i * pl + j] * v[j * hd + d]);
                        }
                        bad += !(fabs(acc[i * hd + d] - ref) <= (jn + 2) * U * mag);
                    }
                CHECKF(bad == 0, "%s pv_accumulate nq %d hd %d jn %d: %d bad", k->name, nq, hd, jn, bad);
                CHECKF(!memcmp(acc, acc2, sizeof(float) * nq * hd), "%s pv_accumulate: zero rows changed the sum", k->name);
            }
    float y[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    k->scale(y, -1.5f, 9);
    CHECK(y[0] == -1.5f && y[8] == -13.5f);
}

/* Pool jobs: two phases of dynamically claimed items, the second reading what the first wrote. Every
 * item must be done exactly once, by participants with distinct ids below nth, the caller being 0. */
typedef struct pool_job {
    int n_items;
    int *first;              /* phase 1 output */
    _Atomic int *count;      /* phase 2: how often each item ran */
    _Atomic int next1, done1, next2;
    _Atomic int seen_ids;    /* bit per participant id */
    int bad;
} pool_job;

static void pool_fn(void *arg, int ith, int nth) {
    pool_job *j = arg;
    if (ith < 0 || ith >= nth || (atomic_fetch_or(&j->seen_ids, 1 << ith) & (1 << ith))) j->bad = 1;
    for (int i; (i = atomic_fetch_add(&j->next1, 1)) < j->n_items;) {
        j->first[i] = 3 * i + 1;
        atomic_fetch_add(&j->done1, 1);
    }
    pith_pool_wait_count(&j->done1, j->n_items);
    for (int i; (i = atomic_fetch_add(&j->next2, 1)) < j->n_items;) {
        if (j->first[i] != 3 * i + 1) j->bad = 1;
        atomic_fetch_add(&j->count[i], 1);
    }
}

static void test_pool(int n_threads) {
    pith_pool *pool;
    pith_err err;
    if (pith_pool_create(n_threads, &pool, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    CHECK(pith_pool_size(pool) == n_threads);
    enum { N = 257 };
    int first[N];
    _Atomic int count[N];
    int bad = 0, wrong_count = 0, caller_missing = 0;
    for (int run = 0; run < 300; run++) {
        pool_job j = {.n_items = run % 7 == 0 ? 1 : N, .first = first, .count = count};
        for (int i = 0; i < N; i++) atomic_init(&count[i], 0);
        pith_pool_run(pool, pool_fn, &j);
        bad |= j.bad;
        caller_missing += !(atomic_load(&j.seen_ids) & 1);
        for (int i = 0; i < j.n_items; i++) wrong_count += atomic_load(&count[i]) != 1;
    }
    CHECKF(!bad && !wrong_count && !caller_missing, "pool of %d: bad %d, items not run once %d, caller absent %d",
           n_threads, bad, wrong_count, caller_missing);
    pith_pool_destroy(pool);
}

int main(void) {
    test_pool(1);
    test_pool(3);
    test_dequantize();
    const pith_cpu_kernels *tables[4] = {pith_cpu_kernels_scalar(), pith_cpu_kernels_avx2(),
                                         pith_cpu_kernels_avx2_vnni(), pith_cpu_kernels_avx512_vnni()};
    if (!tables[1]) printf("note: no AVX2/FMA/F16C on this machine; testing the scalar kernels only\n");
    if (tables[1] && !tables[2]) printf("note: no AVX-VNNI on this machine; its packed tiles are not tested\n");
    if (tables[1] && !tables[3]) printf("note: no AVX-512 VNNI on this machine; its packed tiles are not tested\n");
    CHECK(pith_cpu_kernels_best(true) == tables[0]);
    const pith_cpu_kernels *best = tables[3] ? tables[3] : tables[2] ? tables[2] : tables[1] ? tables[1] : tables[0];
    CHECK(pith_cpu_kernels_best(false) == best);
    for (int ti = 0; ti < 4; ti++) {
        if (!tables[ti]) continue;
        test_activation_quantizers(tables[ti]);
        test_vector_helpers(tables[ti]);
        test_packed_pairs(tables[ti]);
        for (int threads = 1; threads <= 2; threads++) {
            pith_cpu cpu;
            pith_err err;
            if (pith_cpu_init(&cpu, threads, ti == 0, &err)) {
                CHECKF(0, "%s", err.msg);
                continue;
            }
            cpu.k = tables[ti]; /* every table, not only the best one */
            test_matmul(&cpu);
            test_batch_invariance(&cpu);
            pith_cpu_free(&cpu);
        }
    }
    return check_summary("test_kernels");
}
