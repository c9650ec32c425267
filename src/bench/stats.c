/* Summary statistics of benchmark repetitions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pith/bench.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pith_bench_stats_of(const double *x, int n, pith_bench_stats *s) {
    memset(s, 0, sizeof *s);
    if (n < 1) return;
    double sum = 0;
    s->min = s->max = x[0];
    for (int i = 0; i < n; i++) {
        sum += x[i];
        if (x[i] < s->min) s->min = x[i];
        if (x[i] > s->max) s->max = x[i];
    }
    s->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - s->mean) * (x[i] - s->mean);
    s->stddev = n > 1 ? sqrt(ss / (n - 1)) : 0;
    /* Median without sorting the caller's array; repetitions are few, so a small copy is fine. */
    double small[64];
    double *tmp = n <= 64 ? small : malloc((size_t)n * sizeof *tmp);
    if (!tmp) {
        s->median = s->mean;
        return;
    }
    memcpy(tmp, x, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    s->median = n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
    if (tmp != small) free(tmp);
}
