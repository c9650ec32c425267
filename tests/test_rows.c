/* Row reductions (src/util/rows.h) against plain double-precision loops: maximum, argmax (ties to the
 * lowest id, NaN never wins), log-sum-exp and the tempered softmax terms, on lengths around the block
 * and lane sizes, with NaN, -inf and spreads that push terms to underflow. Tolerances: the exp is a
 * degree-7 polynomial good to a few float ulps, so terms to 1e-6 relative and log-sum-exp to 1e-6
 * absolute (it is O(1)-O(100) here; a relative error e in every term moves it by about e). The terms
 * measured under 2e-7 relative when this was written. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "util/rows.h"

static uint64_t lcg(uint64_t *x) { return (*x = *x * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

static void fill(float *x, int n, uint64_t seed, float spread, int specials) {
    for (int i = 0; i < n; i++) x[i] = spread * ((float)(lcg(&seed) % 200001) / 100000.0f - 1.0f);
    if (specials)
        for (int i = (int)(lcg(&seed) % 7); i < n; i += 7 + (int)(lcg(&seed) % 5)) x[i] = i % 2 ? NAN : -INFINITY;
}

int main(void) {
    const int sizes[] = {1, 3, 15, 16, 17, 255, 256, 257, 1000, 32000, 151936};
    const float spreads[] = {0.5f, 10.0f, 200.0f};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const int n = sizes[k];
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        float *e = malloc(sizeof(float) * (size_t)n);
        double *bsum = malloc(sizeof(double) * ((size_t)n / PITH_ROW_BLOCK + 1));
        for (size_t sp = 0; sp < sizeof spreads / sizeof *spreads; sp++)
            for (int specials = 0; specials < 2; specials++) {
                fill(x, n, 100 * k + 10 * sp + (uint64_t)specials, spreads[sp], specials);
                if (n > 300) x[n - 2] = x[40] = 2 * spreads[sp]; /* a tie for the maximum, blocks apart */
                double mx = -INFINITY;
                int32_t want = -1;
                for (int i = 0; i < n; i++)
                    if (!isnan(x[i]) && (want < 0 || x[i] > x[want])) want = i;
                if (want >= 0) mx = x[want];
                else want = 0;
                CHECKF(pith_row_max(x, n) == (float)mx, "n %d: max %g, want %g", n, pith_row_max(x, n), mx);
                CHECKF(pith_row_argmax(x, n) == want, "n %d: argmax %d, want %d", n, pith_row_argmax(x, n), want);
                if (!(mx > -INFINITY)) {
                    CHECK(pith_row_logsumexp(x, n) == -INFINITY);
                    continue;
                }
                double sum = 0;
                for (int i = 0; i < n; i++)
                    if (!isnan(x[i])) sum += exp((double)x[i] - mx);
                double lse = mx + log(sum), got = pith_row_logsumexp(x, n);
                CHECKF(fabs(got - lse) <= 1e-6 * (1 + fabs(lse)), "n %d spread %g: logsumexp %.9g, want %.9g", n,
                       spreads[sp], got, lse);
                /* the tempered terms */
                const float temp = 0.7f;
                for (int i = 0; i < n; i++) y[i] = x[i];
                double total = pith_row_softmax(y, n, temp, (float)mx, e, bsum), want_total = 0, worst = 0;
                int bad_temper = 0;
                for (int i = 0; i < n; i++) {
                    /* the exp's own error: its argument as the code rounds it, in float */
                    double w = isnan(x[i]) ? 0 : exp((double)(x[i] / temp - (float)mx / temp));
                    want_total += w;
                    double err = fabs(e[i] - w) / (w > 1e-30 ? w : 1);
                    if (w < 1e-36) err = e[i] <= 1e-36 ? 0 : 1; /* under FLT_MIN: 0 or as tiny */
                    worst = err > worst ? err : worst;
                    bad_temper += !(y[i] == x[i] / temp || (isnan(x[i]) && isnan(y[i])));
                }
                CHECKF(worst <= 1e-6, "n %d spread %g: softmax term off by %.3g relative", n, spreads[sp], worst);
                CHECKF(fabs(total - want_total) <= 1e-6 * want_total, "n %d: total %.9g, want %.9g", n, total,
                       want_total);
                CHECKF(bad_temper == 0, "n %d: %d logits not tempered in place", n, bad_temper);
                double blocks = 0;
                for (int b = 0; b * PITH_ROW_BLOCK < n; b++) blocks += bsum[b];
                CHECK(blocks == total);
            }
        free(x);
        free(y);
        free(e);
        free(bsum);
    }
    /* every value NaN or -inf: no maximum */
    float none[5] = {NAN, -INFINITY, NAN, -INFINITY, NAN};
    CHECK(pith_row_max(none, 5) == -INFINITY);
    CHECK(pith_row_argmax(none, 5) == 1);
    CHECK(pith_row_logsumexp(none, 5) == -INFINITY);
    float nans[3] = {NAN, NAN, NAN};
    CHECK(pith_row_argmax(nans, 3) == 0);
    return check_summary("test_rows");
}
