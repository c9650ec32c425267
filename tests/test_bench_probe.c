/* Machine probes and benchmark statistics (include/pith/bench.h).
 *
 * Probe results depend on the machine and on whoever else is using it, so they are checked for what
 * must hold anywhere: positive, finite, below absurd bounds, and (in optimized builds, where the
 * compiler keeps the chains in registers) AVX2 loops well ahead of the portable ones they replace.
 * Statistics are checked against values worked out by hand. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "pith/bench.h"

static void test_stats(void) {
    pith_bench_stats s;
    const double x[] = {2, 4, 4, 4, 5, 5, 7, 9};
    pith_bench_stats_of(x, 8, &s);
    CHECK(fabs(s.mean - 5) < 1e-12);
    /* Sum of squared deviations is 32; the sample variance divides by n - 1 = 7. */
    CHECK(fabs(s.stddev - sqrt(32.0 / 7)) < 1e-12);
    CHECK(fabs(s.median - 4.5) < 1e-12);
    CHECK(s.min == 2 && s.max == 9);
    const double y[] = {3, 1, 2};
    pith_bench_stats_of(y, 3, &s);
    CHECK(s.median == 2 && s.mean == 2 && fabs(s.stddev - 1) < 1e-12);
    CHECK(y[0] == 3 && y[1] == 1); /* the caller's array is not sorted in place */
    const double one = 42;
    pith_bench_stats_of(&one, 1, &s);
    CHECK(s.mean == 42 && s.median == 42 && s.stddev == 0);
}

typedef struct probe_figures {
    double bw, fma, int8;
} probe_figures;

/* Runs every probe once; returns 0 when all succeeded and look sane. */
static int measure(bool force_scalar, int threads, probe_figures *f) {
    pith_err err = {{0}};
    pith_probe *p = NULL;
    /* 3 MiB + 5 bytes: rounded down to a multiple of 64 bytes per thread. */
    size_t ask = (3u << 20) + 5;
    if (pith_probe_new(threads, ask, force_scalar, &p, &err)) {
        fprintf(stderr, "probe_new: %s\n", err.msg);
        CHECK(0);
        return -1;
    }
    CHECK(pith_probe_threads(p) == threads);
    size_t bytes = pith_probe_bw_bytes(p);
    CHECK(bytes <= ask && ask - bytes < (size_t)64 * threads && bytes % ((size_t)64 * threads) == 0);
    if (force_scalar) CHECK(!strcmp(pith_probe_isa(p), "scalar"));
    int rc = pith_probe_bandwidth(p, 3, &f->bw, &err);
    rc = rc ? rc : pith_probe_fma_peak(p, 2, &f->fma, &err);
    rc = rc ? rc : pith_probe_int8_peak(p, 2, &f->int8, &err);
    CHECKF(rc == 0, "%s", err.msg);
    printf("%s, %d thread(s): %.1f GB/s (3 MiB, cached), FMA %.1f GFLOP/s, int8 %.1f GOP/s\n", pith_probe_isa(p),
           threads, f->bw / 1e9, f->fma / 1e9, f->int8 / 1e9);
    /* Bounds no processor comes near: 100 TB/s, 1 POP/s per thread. */
    CHECK(isfinite(f->bw) && f->bw > 1e6 && f->bw < 1e14);
    CHECK(isfinite(f->fma) && f->fma > 1e6 && f->fma < 1e15 * threads);
    CHECK(isfinite(f->int8) && f->int8 > 1e6 && f->int8 < 1e15 * threads);
    pith_probe_free(p);
    return rc;
}

/* Whether the AVX2 probes are faster than the portable ones is a benchmark question (pith bench prints
 * both under PITH_FORCE_SCALAR); this test only checks that every probe runs and reports a sane figure. */
static void test_probes(void) {
    probe_figures scalar, best;
    measure(true, 1, &scalar);
    measure(false, 2, &best);
    measure(false, 1, &best);
}

static void test_errors(void) {
    pith_err err = {{0}};
    pith_probe *p = (pith_probe *)&err; /* must be reset to NULL on failure */
    CHECK(pith_probe_new(0, 1 << 20, false, &p, &err) == -1 && p == NULL);
    CHECK(strstr(err.msg, "threads") != NULL);
    CHECK(pith_probe_new(1, 0, true, &p, &err) == 0);
    CHECK(pith_probe_bw_bytes(p) == (size_t)1 << 20); /* raised to the 1 MiB minimum */
    double v = -1;
    err.msg[0] = 0;
    CHECK(pith_probe_bandwidth(p, 0, &v, &err) == -1 && v == -1 && strstr(err.msg, "repetitions"));
    CHECK(pith_probe_fma_peak(p, 1001, &v, &err) == -1 && v == -1);
    CHECK(pith_probe_int8_peak(p, -3, &v, &err) == -1 && v == -1);
    pith_probe_free(p);
    pith_probe_free(NULL);
}

int main(void) {
    test_stats();
    test_errors();
    test_probes();
    return check_summary("test_bench_probe");
}
