/* Vectorised row reductions (rows.h). Lanes are plain arrays or GCC / clang vector extensions, which
 * compile to SSE2 on x86-64 (the baseline; no target attributes needed), NEON on arm64 and ordinary code
 * elsewhere. gcc does not vectorise the scalar form of the exp (its float-to-int step), hence the
 * explicit 4-float vectors there. */
#include "util/rows.h"

#include <math.h>
#include <string.h>

enum { LANES = 16 };

typedef float rows_v4f __attribute__((vector_size(16)));
typedef uint32_t rows_v4u __attribute__((vector_size(16)));

/* e^x for x <= 0: e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 (Cody-Waite: ln 2 in two
 * parts, the first with few enough bits that n times it is exact), |r| <= ln 2 / 2; e^r by its Taylor
 * polynomial to degree 7 (truncation below 6e-9 relative), so the result is good to a few float ulps
 * over the whole range. n comes from the rounding constant's low mantissa bits, so no float-to-int
 * conversion. Below -87 (under FLT_MIN after scaling), and for NaN: 0. */
static inline rows_v4f exp4(rows_v4f x) {
    const rows_v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f};
    const rows_v4u ok = (rows_v4u)(x > lo); /* all ones where x > -87; NaN compares false */
    const rows_v4f xc = (rows_v4f)(((rows_v4u)x & ok) | ((rows_v4u)lo & ~ok));
    const rows_v4f big = xc * 1.44269504f + 0x1.8p23f; /* 1.5 * 2^23 + n, |n| < 2^22 */
    const rows_v4f n = big - 0x1.8p23f;
    const rows_v4f r = (xc - n * 0.693145751953125f) - n * 1.428606820e-6f;
    rows_v4f q = r * (1.0f / 5040) + 1.0f / 720;
    q = q * r + 1.0f / 120;
    q = q * r + 1.0f / 24;
    q = q * r + 1.0f / 6;
    q = q * r + 0.5f;
    q = q * r + 1.0f;
    q = q * r + 1.0f;
    /* n in [-126, 0] added to the exponent field (mod 2^32: a negative n borrows, as it should) */
    const rows_v4u bits = (rows_v4u)q + (((rows_v4u)big - 0x4B400000u) << 23);
    return (rows_v4f)(bits & ok);
}

static float exp1(float x) { return exp4((rows_v4f){x, 0.0f, 0.0f, 0.0f})[0]; }

float pith_row_max(const float *x, int n) {
    float lane[LANES];
    for (int j = 0; j < LANES; j++) lane[j] = -INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float m = -INFINITY;
    for (int j = 0; j < LANES; j++) m = lane[j] > m ? lane[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* Block maxima in one pass; only the first block holding the maximum is read again. */
int32_t pith_row_argmax(const float *x, int n) {
    float best = -INFINITY;
    int lo = 0, hi = 0;
    for (int b = 0; b * PITH_ROW_BLOCK < n; b++) {
        const int start = b * PITH_ROW_BLOCK, len = n - start < PITH_ROW_BLOCK ? n - start : PITH_ROW_BLOCK;
        float m = pith_row_max(x + start, len);
        if (m > best) {
            best = m;
            lo = start;
            hi = start + len;
        }
    }
    if (hi == 0) hi = n; /* nothing above -inf: the first -inf, if any */
    for (int i = lo; i < hi; i++)
        if (x[i] == best) return i;
    return 0;
}

/* The sum of exp(x[i] / temp - shift) over x[0..len), in 16 float lanes then in double; with out and e
 * (constant NULLs or not at each inlined call, so each caller gets its own loop), also writes the
 * tempered x[i] to out[i] (out may be x) and each term to e[i]. */
static inline __attribute__((always_inline)) double block_terms(const float *x, int len, float temp, float shift,
                                                                 float *out, float *e) {
    rows_v4f acc[4] = {{0}};
    int i = 0;
    for (; i + 16 <= len; i += 16)
        for (int j = 0; j < 4; j++) {
            rows_v4f v;
            memcpy(&v, x + i + 4 * j, sizeof v);
            if (temp != 1.0f) v = v / temp;
            rows_v4f ev = exp4(v - shift);
            if (e) {
                memcpy(out + i + 4 * j, &v, sizeof v);
                memcpy(e + i + 4 * j, &ev, sizeof ev);
            }
            acc[j] += ev;
        }
    double sum = 0.0;
    for (; i < len; i++) {
        float v = temp != 1.0f ? x[i] / temp : x[i];
        float ev = exp1(v - shift);
        if (e) {
            out[i] = v;
            e[i] = ev;
        }
        sum += ev;
    }
    for (int j = 0; j < 4; j++) sum += (double)acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    return sum;
}

double pith_row_softmax(float *x, int n, float temp, float maxl, float *e, double *bsum) {
    const float maxt = maxl / temp;
    double total = 0.0;
    for (int b = 0; b * PITH_ROW_BLOCK < n; b++) {
        const int lo = b * PITH_ROW_BLOCK, len = n - lo < PITH_ROW_BLOCK ? n - lo : PITH_ROW_BLOCK;
        bsum[b] = block_terms(x + lo, len, temp, maxt, x + lo, e + lo);
        total += bsum[b];
    }
    return total;
}

double pith_row_logsumexp(const float *x, int n) {
    const float m = pith_row_max(x, n);
    if (!(m > -INFINITY)) return -INFINITY;
    double total = 0.0;
    for (int b = 0; b * PITH_ROW_BLOCK < n; b++) {
        const int lo = b * PITH_ROW_BLOCK, len = n - lo < PITH_ROW_BLOCK ? n - lo : PITH_ROW_BLOCK;
        total += block_terms(x + lo, len, 1.0f, m, NULL, NULL);
    }
    return m + log(total);
}
