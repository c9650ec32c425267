/* MXFP4 (GGUF type 39) against its definition: each code decoded from its E2M1 bits (sign, two exponent
 * bits, one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6), each scale as 2^(e - 127) from the E8M0 byte,
 * element j of a block in the low nibble of byte j and element j + 16 in its high nibble (llama.cpp's
 * block_mxfp4: one scale byte, then 16 bytes). Then the scalar, AVX2 and AVX-512 VNNI tiles against the double sum of
 * the dequantized weights times the q8a activations they are given (the same function exactly, up to
 * float rounding: 1e-5 of the sum of |w x|), and a whole matmul against the dequantized F32 weights
 * with float activations, where the 8-bit activation rounding bounds the difference by
 * sum_j |w_j| * d_j / 2 (d_j: the activation block's step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quants.h"
#include "check.h"
#include "quant_ref.h"

static double e2m1(int code) {
    int s = code >> 3 & 1, e = code >> 1 & 3, m = code & 1;
    double v = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * ldexp(1.0, e - 1);
    return s ? -v : v;
}

static double def_elem(const uint8_t *row, int i) {
    const uint8_t *b = row + (size_t)(i / 32) * 17;
    int j = i % 32, code = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
    return e2m1(code) * ldexp(1.0, (int)b[0] - 127);
}

static void random_mxfp4(uint8_t *row, int K, int e_lo, int e_hi) {
    for (int b = 0; b < K / 32; b++) {
        row[b * 17] = (uint8_t)(e_lo + (int)(rnd_u64() % (uint64_t)(e_hi - e_lo + 1)));
        for (int j = 1; j < 17; j++) row[b * 17 + j] = (uint8_t)rnd_u64();
    }
}

static void test_definition(void) {
    CHECK(pith_dtype_valid(39) && pith_dtype_block_elems(PITH_MXFP4) == 32 && pith_dtype_block_bytes(PITH_MXFP4) == 17);
    CHECK(strcmp(pith_dtype_name(PITH_MXFP4), "MXFP4") == 0);
    CHECK(pith_dtype_row_bytes(PITH_MXFP4, 2880) == 90 * 17 && pith_dtype_row_bytes(PITH_MXFP4, 33) == 0);
    for (int e = 0; e < 255; e++) CHECKF(pith_mxfp4_scale((uint8_t)e) == (float)ldexp(0.5, e - 127), "scale %d", e);
    for (int c = 0; c < 16; c++) CHECKF(pith_mxfp4_values[c] == 2 * e2m1(c), "code %d", c);
    /* every code at every position, scales from the denormal ends to the largest */
    const int K = 32 * 16;
    uint8_t row[16 * 17];
    float out[32 * 16];
    for (int b = 0; b < 16; b++) {
        static const uint8_t es[16] = {0, 1, 2, 100, 120, 126, 127, 128, 129, 130, 135, 140, 200, 250, 253, 254};
        row[b * 17] = es[b];
        for (int j = 0; j < 16; j++) row[b * 17 + 1 + j] = (uint8_t)((j + b) % 16 | ((j + 3 * b + 5) % 16) << 4);
    }
    pith_dequantize_row(PITH_MXFP4, row, out, K);
    int bad = 0;
    /* as floats: 6 * 2^127 and up overflow to infinity in any float decoder */
    for (int i = 0; i < K; i++) bad += out[i] != (float)def_elem(row, i);
    CHECKF(bad == 0, "%d of %d dequantized values differ from the definition", bad, K);
}

typedef void (*tile_fn)(int, const uint8_t *, size_t, int, const void *, size_t, int, float *, size_t, bool);

/* One MXFP4 row against one token's q8a blocks in double, from the definition; *mag: the sum of the
 * products' magnitudes (what the relative errors divide by). */
static double ref_dot(const uint8_t *row, const pith_block_q8a *x, int K, double *mag) {
    double s = 0;
    *mag = 0;
    for (int i = 0; i < K; i++) {
        double v = def_elem(row, i) * x[i / 32].d * x[i / 32].qs[i % 32];
        s += v, *mag += fabs(v);
    }
    return s;
}

static void test_tile(const char *name, tile_fn tile) {
    const int Ks[] = {32, 96, 128, 224, 2880}; /* 1, 3, 4, 7 and 90 blocks: the AVX-512 tile's groups of 4 */
    double worst = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        int K = Ks[ki], nb = K / 32;
        size_t ws = (size_t)nb * 17 + 5; /* rows not packed back to back */
        uint8_t *w = malloc(4 * ws);
        pith_block_q8a *x = malloc((size_t)9 * nb * sizeof *x);
        float *xf = malloc((size_t)K * sizeof(float));
        /* rows 0-2 ordinary scales, row 3 the smallest (e = 0 and 1: denormal scales) */
        for (int r = 0; r < 4; r++) random_mxfp4(w + r * ws, K, r < 3 ? 118 : 0, r < 3 ? 130 : 3);
        for (int t = 0; t < 9; t++) {
            for (int i = 0; i < K; i++) xf[i] = rnd_uniform(-2.0f, 2.0f);
            pith_quantize_q8a_scalar(xf, x + (size_t)t * nb, K);
        }
        for (int rm = 1; rm <= 4; rm++)
            for (int rn = 1; rn <= 9; rn++)
                for (int acc = 0; acc < 2; acc++) {
                    float y[9 * 4];
                    for (int i = 0; i < 36; i++) y[i] = 0.25f * i;
                    tile(K, w, ws, rm, x, (size_t)nb * sizeof *x, rn, y, 4, acc);
                    for (int r = 0; r < rm; r++)
                        for (int t = 0; t < rn; t++) {
                            double mag, s = ref_dot(w + r * ws, x + (size_t)t * nb, K, &mag);
                            if (acc) s += 0.25 * (t * 4 + r);
                            double err = fabs(y[t * 4 + r] - s) / (mag + 1e-30);
                            worst = err > worst ? err : worst;
                        }
                }
        free(w), free(x), free(xf);
    }
    CHECKF(worst < 1e-5, "%s: relative error %.2e", name, worst);
    printf("%s tile: worst relative error %.1e\n", name, worst);
}

/* A table's packed MXFP4 tile (avx512-vnni: 16 rows in Q4_0's lanes layout; avx2 and avx2-vnni: 8 rows
 * in Q4_0's 8-row layout, pack.c) against the definition, as test_tile: rows with ordinary scales
 * (e 118..130), 1-9 tokens, storing and accumulating. The packed tiles add an offset to the values
 * (unsigned: 128 for vpdpbusd, 12 for maddubs) and take offset x the activations' sum out in floats at
 * the end, as the IQ4_NL and Q8_0 packed tiles do: with 128 that term is about 128 / 5 = 25 times the
 * result's magnitude, so float rounding gives about 25 x 2^-24 x sqrt(90 blocks) = 1.4e-5 of it (the
 * file-layout tiles, which have no offset, 4e-7; an offset of 12, about 1.5e-6): held to 3e-5. Every fourth row has only the smallest scales (e 0..3: values below 2^-122):
 * the packed tile weighs a block's sum by the product d_w d_x, which is then a float denormal with few
 * significant bits (the file-layout tiles multiply in another order), so those rows are held to an
 * absolute 1e-36 instead, far below anything a real weight contributes. */
static void test_packed_tile(const pith_cpu_kernels *k) {
    const int Ks[] = {32, 96, 2880}, R = k->pack_rows;
    CHECKF(k->pack[PITH_W_MXFP4] && k->tile_packed[PITH_W_MXFP4], "%s: no packed MXFP4 tile", k->name);
    if (!k->pack[PITH_W_MXFP4] || !k->tile_packed[PITH_W_MXFP4]) return;
    double worst = 0, worst_tiny = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        int K = Ks[ki], nb = K / 32;
        size_t ws = (size_t)nb * 17;
        uint8_t *w = malloc(16 * ws), *g = malloc(16 * ws);
        pith_block_q8a *x = malloc((size_t)9 * nb * sizeof *x);
        float *xf = malloc((size_t)K * sizeof(float));
        for (int r = 0; r < R; r++) random_mxfp4(w + r * ws, K, r % 4 == 3 ? 0 : 118, r % 4 == 3 ? 3 : 130);
        for (int t = 0; t < 9; t++) {
            for (int i = 0; i < K; i++) xf[i] = rnd_uniform(-2.0f, 2.0f);
            pith_quantize_q8a_scalar(xf, x + (size_t)t * nb, K);
        }
        k->pack[PITH_W_MXFP4](K, w, ws, g);
        for (int rn = 1; rn <= 9; rn++)
            for (int acc = 0; acc < 2; acc++) {
                float y[9 * 16];
                for (int i = 0; i < 9 * 16; i++) y[i] = 0.25f * i;
                k->tile_packed[PITH_W_MXFP4](K, g, x, (size_t)nb * sizeof *x, rn, y, 16, acc);
                for (int r = 0; r < R; r++)
                    for (int t = 0; t < rn; t++) {
                        double mag, s = ref_dot(w + r * ws, x + (size_t)t * nb, K, &mag);
                        if (acc) s += 0.25 * (t * 16 + r);
                        if (r % 4 == 3) {
                            double err = fabs(y[t * 16 + r] - s);
                            worst_tiny = err > worst_tiny ? err : worst_tiny;
                        } else {
                            double err = fabs(y[t * 16 + r] - s) / (mag + 1e-30);
                            worst = err > worst ? err : worst;
                        }
                    }
            }
        free(w), free(g), free(x), free(xf);
    }
    CHECKF(worst < 3e-5, "%s packed tile: relative error %.2e", k->name, worst);
    CHECKF(worst_tiny < 1e-36, "%s packed tile, denormal scales: absolute error %.2e", k->name, worst_tiny);
    printf("%s packed tile (%d rows): worst relative error %.1e; rows of denormal scales: absolute %.1e\n",
           k->name, R, worst, worst_tiny);
}

/* pith_cpu_matmul over an MXFP4 tensor against the dequantized F32 weights and float activations. */
static void test_matmul(bool scalar) {
    pith_cpu cpu;
    pith_err err = {0};
    CHECK(pith_cpu_init(&cpu, 2, scalar, &err) == 0);
    const int K = 2880, rows = 67, n = 13, nb = K / 32;
    uint8_t *data = malloc((size_t)rows * nb * 17);
    for (int r = 0; r < rows; r++) random_mxfp4(data + (size_t)r * nb * 17, K, 115, 128);
    pith_tensor t = {.name = "w", .type = PITH_MXFP4, .n_dims = 2, .ne = {K, rows, 1, 1}, .data = data,
                     .nbytes = (size_t)rows * nb * 17};
    pith_matrix m;
    CHECK(pith_matrix_from_tensor(&m, &t, &err) == 0);
    CHECK(pith_matrix_pack(&cpu, &m, &err) == 0);
    /* the SIMD tables repack whole groups of pack_rows rows (the packed tile); the rows past them, and
     * every row on the scalar table, stay on the file-layout tiles: both run below */
    bool packs = cpu.k->pack[PITH_W_MXFP4] != NULL;
    CHECKF(packs == (strcmp(cpu.k->name, "scalar") != 0), "%s: packs MXFP4: %d", cpu.k->name, packs);
    CHECKF(m.packed_rows == (packs ? rows / cpu.k->pack_rows * cpu.k->pack_rows : 0), "%s: %d rows packed",
           cpu.k->name, m.packed_rows);
    float *x = malloc((size_t)n * K * sizeof(float)), *y = malloc((size_t)n * rows * sizeof(float));
    float *wf = malloc((size_t)rows * K * sizeof(float));
    pith_dequantize_row(PITH_MXFP4, data, wf, (int64_t)rows * K);
    for (int i = 0; i < n * K; i++) x[i] = rnd_uniform(-1.0f, 1.0f) * (i % 7 == 0 ? 4.0f : 1.0f);
    CHECK(pith_cpu_reserve(&cpu, n, K, &err) == 0);
    pith_acts a;
    pith_acts_bind(&cpu, &a, x, n, K, K);
    CHECK(pith_cpu_matmul(&cpu, &m, &a, y, rows, false, &err) == 0);
    int over = 0;
    double worst = 0;
    for (int tk = 0; tk < n; tk++)
        for (int r = 0; r < rows; r++) {
            double s = 0, bound = 0;
            for (int b = 0; b < nb; b++) {
                double amax = 0, wsum = 0;
                for (int j = 0; j < 32; j++) {
                    int i = b * 32 + j;
                    s += (double)wf[(size_t)r * K + i] * x[(size_t)tk * K + i];
                    amax = fmax(amax, fabs(x[(size_t)tk * K + i]));
                    wsum += fabs(wf[(size_t)r * K + i]);
                }
                bound += wsum * amax / 127 / 2 * 1.0001 + 1e-6 * wsum * amax;
            }
            double e = fabs(y[(size_t)tk * rows + r] - s);
            over += e > bound;
            worst = fmax(worst, e / bound);
        }
    CHECKF(over == 0, "%s: %d products beyond the activation-rounding bound", cpu.k->name, over);
    printf("%s matmul vs dequantized F32 (%d of %d rows packed): worst error %.2f of the activation-rounding bound\n",
           cpu.k->name, m.packed_rows, rows, worst);
    free(data), free(x), free(y), free(wf);
    pith_matrix_free(&m);
    pith_cpu_free(&cpu);
}

int main(void) {
    test_definition();
    test_tile("scalar", pith_tile_mxfp4_scalar);
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) test_tile("avx2", pith_tile_mxfp4_avx2);
    else printf("avx2 tile not tested: the processor lacks AVX2 or FMA\n");
    if (pith_cpu_kernels_avx512_vnni()) test_tile("avx512", pith_tile_mxfp4_avx512);
    else printf("avx512 tile not tested: the processor lacks AVX-512 F, BW, VL or VNNI\n");
    const pith_cpu_kernels *simd[] = {pith_cpu_kernels_avx2(), pith_cpu_kernels_avx2_vnni(), pith_cpu_kernels_avx512_vnni()};
    const char *lacks[] = {"AVX2, FMA or F16C", "AVX-VNNI", "AVX-512 F, BW, VL or VNNI"};
    for (int i = 0; i < 3; i++) {
        if (simd[i]) test_packed_tile(simd[i]);
        else printf("packed tile %d of 3 not tested: the processor lacks %s\n", i + 1, lacks[i]);
    }
#endif
    test_matmul(false);
    test_matmul(true);
    return check_summary("test_mxfp4");
}
