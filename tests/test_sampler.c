/* Sampler: greedy, filters, penalties, determinism, and that draws follow the filtered softmax. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "pith/sampler.h"

static pith_sampler *make(pith_sampling_params p, int n) {
    pith_sampler *s = NULL;
    pith_err err;
    if (pith_sampler_new(&p, n, &s, &err)) fprintf(stderr, "sampler: %s\n", err.msg);
    return s;
}

static pith_sampling_params plain(float temp) {
    pith_sampling_params p = pith_sampling_defaults();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static void test_greedy(void) {
    pith_sampler *s = make(plain(0), 5);
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    CHECK(pith_sampler_sample(s, l, NULL, 0) == 1); /* ties go to the lowest id */
    pith_sampler_free(s);
}

static void test_penalties(void) {
    pith_sampling_params p = plain(0);
    p.repetition_penalty = 2.0f;
    pith_sampler *s = make(p, 4);
    float l[4] = {3.0f, 2.0f, -1.0f, 0.0f};
    int32_t hist[] = {0, 0, 2};
    CHECK(pith_sampler_sample(s, l, hist, 3) == 1);
    CHECK(fabsf(l[0] - 1.5f) < 1e-6f); /* positive logit divided once, however often it occurred */
    CHECK(fabsf(l[2] + 2.0f) < 1e-6f); /* negative logit multiplied */
    CHECK(l[1] == 2.0f && l[3] == 0.0f);
    pith_sampler_free(s);

    p = plain(0);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    s = make(p, 4);
    float m[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    int32_t h2[] = {0, 0, 1, 99, -3}; /* out-of-range ids are ignored */
    pith_sampler_sample(s, m, h2, 5);
    CHECK(fabsf(m[0] - (1.0f - 0.5f - 0.5f)) < 1e-6f);
    CHECK(fabsf(m[1] - (1.0f - 0.5f - 0.25f)) < 1e-6f);
    CHECK(m[2] == 1.0f && m[3] == 1.0f);
    /* the scratch counts were reset: a second call with no history changes nothing */
    float q[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    pith_sampler_sample(s, q, NULL, 0);
    CHECK(q[0] == 1.0f && q[1] == 1.0f);
    pith_sampler_free(s);
}

/* Empirical frequencies over many draws match the expected distribution within 5 standard errors. */
static void check_distribution(pith_sampling_params p, const float *logits, int n, const double *expect) {
    enum { DRAWS = 200000 };
    pith_sampler *s = make(p, n);
    int counts[16] = {0};
    float l[16];
    for (int d = 0; d < DRAWS; d++) {
        for (int i = 0; i < n; i++) l[i] = logits[i];
        int32_t t = pith_sampler_sample(s, l, NULL, 0);
        CHECK(t >= 0 && t < n);
        if (t >= 0 && t < n) counts[t]++;
    }
    for (int i = 0; i < n; i++) {
        double f = (double)counts[i] / DRAWS;
        double se = sqrt(expect[i] * (1 - expect[i]) / DRAWS) + 1e-12;
        CHECKF(fabs(f - expect[i]) <= 5 * se + (expect[i] == 0 ? 0 : 1e-4), "token %d: freq %.5f expected %.5f", i, f, expect[i]);
    }
    pith_sampler_free(s);
}

static void test_distributions(void) {
    float logits[4] = {2.0f, 1.0f, 0.5f, -1.0f};
    double z[4], sum = 0;
    for (int i = 0; i < 4; i++) sum += z[i] = exp(logits[i] / 0.7);
    double soft[4];
    for (int i = 0; i < 4; i++) soft[i] = z[i] / sum;
    check_distribution(plain(0.7f), logits, 4, soft);

    /* top-k 2: renormalised over the two best */
    pith_sampling_params p = plain(0.7f);
    p.top_k = 2;
    double k2[4] = {z[0] / (z[0] + z[1]), z[1] / (z[0] + z[1]), 0, 0};
    check_distribution(p, logits, 4, k2);

    /* top-p: keep the smallest prefix whose mass reaches p */
    p = plain(0.7f);
    p.top_p = (float)(soft[0] + 0.5 * soft[1]);
    check_distribution(p, logits, 4, k2);

    /* min-p: drop tokens below min_p * p(best) */
    p = plain(0.7f);
    p.min_p = (float)(soft[2] / soft[0] + 1e-3);
    check_distribution(p, logits, 4, k2);
}

static void test_seed(void) {
    pith_sampling_params p = plain(1.0f);
    p.seed = 1234;
    float base[64];
    for (int i = 0; i < 64; i++) base[i] = sinf((float)i);
    int32_t a[50], b[50], c[50];
    pith_sampler *s1 = make(p, 64), *s2 = make(p, 64);
    p.seed = 1235;
    pith_sampler *s3 = make(p, 64);
    int diff = 0;
    for (int i = 0; i < 50; i++) {
        float l[64];
        memcpy(l, base, sizeof l);
        a[i] = pith_sampler_sample(s1, l, NULL, 0);
        memcpy(l, base, sizeof l);
        b[i] = pith_sampler_sample(s2, l, NULL, 0);
        memcpy(l, base, sizeof l);
        c[i] = pith_sampler_sample(s3, l, NULL, 0);
        diff += a[i] != c[i];
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(diff > 0);
    pith_sampler_free(s1);
    pith_sampler_free(s2);
    pith_sampler_free(s3);
}

static void test_validation(void) {
    pith_err err;
    pith_sampling_params p = plain(0.5f);
    p.top_p = 0.0f;
    CHECK(pith_sampling_validate(&p, &err) == -1 && strstr(err.msg, "top_p"));
    p = plain(-1.0f);
    CHECK(pith_sampling_validate(&p, &err) == -1 && strstr(err.msg, "temperature"));
    p = plain(NAN);
    CHECK(pith_sampling_validate(&p, &err) == -1);
    p = plain(0.5f);
    p.top_k = -2;
    pith_sampler *s = NULL;
    CHECK(pith_sampler_new(&p, 10, &s, &err) == -1 && s == NULL && strstr(err.msg, "top_k"));
}

/* Large vocabularies: the fast paths (blocked argmax, heap top-k, whole-row softmax, thresholded top-p /
 * min-p, radix sort) against a plain reference: every candidate sorted by (logit desc, id asc), softmax
 * in double. Rows mix ties across block boundaries, NaN, -inf and lengths that are not multiples of the
 * blocks (64, 256). */
typedef struct ref_cand {
    int32_t id;
    float logit;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

static uint64_t lcg(uint64_t *x) { return (*x = *x * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

/* Logits with structure: a few shared maxima far apart, NaN and -inf sprinkled, the rest spread over
 * `spread` (small: flat, many candidates kept by top-p; large: peaked). */
static void fill_row(float *l, int n, uint64_t seed, float spread) {
    for (int i = 0; i < n; i++) l[i] = spread * (float)(lcg(&seed) % 100000) / 100000.0f;
    for (int i = 0; i < n; i += 997) l[i] = NAN;
    for (int i = 5; i < n; i += 1499) l[i] = -INFINITY;
    l[n - 1] = l[n / 2 + 3] = l[257] = spread + 1.0f; /* ties for the best, in different blocks */
}

/* The reference's sorted candidates (NaN dropped; -inf too when masked) and their probabilities at
 * temperature t, after top-k (0: off); returns the count. */
static int ref_softmax(const float *l, int n, float t, int top_k, bool masked, ref_cand *c, double *prob) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(l[i]) && !(masked && l[i] == -INFINITY)) c[m++] = (ref_cand){i, l[i]};
    qsort(c, (size_t)m, sizeof *c, ref_cmp);
    if (top_k > 0 && top_k < m) m = top_k;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += prob[i] = exp(((double)c[i].logit - c[0].logit) / t);
    for (int i = 0; i < m; i++) prob[i] /= sum;
    return m;
}

static void test_large_greedy(void) {
    const int sizes[] = {1, 63, 64, 255, 256, 257, 1000, 151936};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int n = sizes[k];
        float *l = malloc(sizeof(float) * (size_t)n), *r = malloc(sizeof(float) * (size_t)n);
        for (int round = 0; round < 4; round++) {
            uint64_t seed = 77 + (uint64_t)round;
            for (int i = 0; i < n; i++) l[i] = (float)(lcg(&seed) % 1000) / 10.0f; /* many ties */
            if (round == 1)
                for (int i = 0; i < n; i += 3) l[i] = NAN;
            if (round == 2) l[0] = NAN;
            if (round == 3)
                for (int i = 0; i < n; i++) l[i] = i % 2 ? -INFINITY : NAN;
            int32_t want = -1;
            for (int i = 0; i < n; i++)
                if (!isnan(l[i]) && (want < 0 || l[i] > l[want])) want = i;
            if (want < 0) want = 0;
            pith_sampler *s = make(plain(0), n);
            memcpy(r, l, sizeof(float) * (size_t)n);
            int32_t got = pith_sampler_sample(s, r, NULL, 0);
            CHECKF(got == want, "n %d round %d: greedy %d, the first maximum is %d", n, round, got, want);
            pith_sampler_free(s);
        }
        free(l);
        free(r);
    }
}

/* The recorded distribution equals the reference's: same ids in the same order wherever the
 * probabilities are apart by more than the tolerance, probabilities within it. 2e-6 relative: the
 * sampler's exp is good to a few float ulps, its normalisation is float. */
static void check_recorded(pith_sampler *s, const ref_cand *c, const double *prob, int m, const char *what) {
    int n = pith_sampler_dist_size(s);
    CHECKF(n == m, "%s: %d candidates recorded, the reference keeps %d", what, n, m);
    double total = 0;
    for (int i = 0; i < m; i++) total += prob[i];
    int first_bad = -1;
    int32_t bad_id = 0;
    double bad_p = 0;
    for (int i = 0; i < n && i < m && first_bad < 0; i++) {
        int32_t id;
        float lp;
        pith_sampler_dist_at(s, i, &id, &lp);
        double want = prob[i] / total;
        bool near_tie = (i > 0 && prob[i - 1] - prob[i] < 1e-6 * prob[i]) ||
                        (i + 1 < m && prob[i] - prob[i + 1] < 1e-6 * prob[i]);
        if ((id != c[i].id && !near_tie) || fabs(exp(lp) - want) > 2e-6 * want + 1e-30) {
            first_bad = i;
            bad_id = id;
            bad_p = exp(lp);
        }
    }
    CHECKF(first_bad < 0, "%s: entry %d is token %d p %.9g, the reference's token %d p %.9g", what, first_bad,
           bad_id, bad_p, first_bad < 0 ? 0 : c[first_bad].id, first_bad < 0 ? 0 : prob[first_bad] / total);
}

static void test_large_filters(void) {
    enum { N = 151936 };
    float *l = malloc(sizeof(float) * N), *r = malloc(sizeof(float) * N);
    ref_cand *c = malloc(sizeof(ref_cand) * N);
    double *prob = malloc(sizeof(double) * N);
    const struct {
        float spread, temp, top_p, min_p;
        int top_k;
    } cases[] = {
        {20.0f, 1.0f, 1.0f, 0.0f, 0},    /* the whole row, no sorting */
        {20.0f, 0.7f, 1.0f, 0.0f, 40},   /* top-k by heap */
        {20.0f, 1.0f, 0.9f, 0.0f, 0},    /* top-p alone: thresholds lowered until the mass is reached */
        {3.0f, 1.3f, 0.95f, 0.0f, 0},    /* flat: tens of thousands kept */
        {20.0f, 1.0f, 1.0f, 0.05f, 0},   /* min-p's floor */
        {20.0f, 0.8f, 0.95f, 0.05f, 40}, /* the CLI's defaults */
        {20.0f, 1.0f, 0.5f, 0.2f, 0},    /* both, min-p the shorter */
        {3.0f, 1.0f, 0.99f, 0.0f, 5000}, /* a k past the heap's: every candidate sorted, then cut */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char what[96];
        snprintf(what, sizeof what, "case %zu (spread %g, T %g, top_p %g, min_p %g, top_k %d)", k, cases[k].spread,
                 cases[k].temp, cases[k].top_p, cases[k].min_p, cases[k].top_k);
        fill_row(l, N, 1000 + k, cases[k].spread);
        int m = ref_softmax(l, N, cases[k].temp, cases[k].top_k, false, c, prob);
        if (cases[k].top_p < 1.0f) {
            double cum = 0;
            for (int i = 0; i < m; i++)
                if ((cum += prob[i]) >= cases[k].top_p) {
                    m = i + 1;
                    break;
                }
        }
        if (cases[k].min_p > 0.0f) {
            int keep = 1;
            while (keep < m && prob[keep] >= prob[0] * cases[k].min_p) keep++;
            m = keep;
        }
        pith_sampling_params p = plain(cases[k].temp);
        p.top_k = cases[k].top_k;
        p.top_p = cases[k].top_p;
        p.min_p = cases[k].min_p;
        p.seed = 9;
        pith_sampler *s = make(p, N);
        pith_sampler_record(s, true);
        memcpy(r, l, sizeof(float) * N);
        int32_t tok = pith_sampler_sample(s, r, NULL, 0);
        bool kept = false;
        for (int i = 0; i < m; i++) kept |= c[i].id == tok;
        CHECKF(kept, "%s: drew token %d outside the kept set", what, tok);
        check_recorded(s, c, prob, m, what);
        /* the same draw without recording (recording sorts after the draw) */
        pith_sampler *s2 = make(p, N);
        memcpy(r, l, sizeof(float) * N);
        CHECKF(pith_sampler_sample(s2, r, NULL, 0) == tok, "%s: recording changed the draw", what);
        pith_sampler_free(s);
        pith_sampler_free(s2);
    }
    free(l);
    free(r);
    free(c);
    free(prob);
}

/* Draws over a row longer than a block, whole-row path: frequencies follow the softmax (the draw finds
 * the block, then the token in it). */
static void test_row_distribution(void) {
    enum { N = 600, DRAWS = 200000 };
    float base[N], l[N];
    double z[N], sum = 0;
    for (int i = 0; i < N; i++) base[i] = -8.0f;
    const int hot[] = {3, 255, 256, 511, 599};
    for (int h = 0; h < 5; h++) base[hot[h]] = (float)h * 0.5f;
    for (int i = 0; i < N; i++) sum += z[i] = exp(base[i]);
    pith_sampler *s = make(plain(1.0f), N);
    int *counts = calloc(N, sizeof *counts);
    for (int d = 0; d < DRAWS; d++) {
        memcpy(l, base, sizeof l);
        int32_t t = pith_sampler_sample(s, l, NULL, 0);
        if (t >= 0 && t < N) counts[t]++;
    }
    double cold = 0, cold_want = 0;
    for (int i = 0; i < N; i++) {
        bool is_hot = false;
        for (int h = 0; h < 5; h++) is_hot |= hot[h] == i;
        double want = z[i] / sum, f = (double)counts[i] / DRAWS;
        if (!is_hot) {
            cold += f;
            cold_want += want;
            continue;
        }
        double se = sqrt(want * (1 - want) / DRAWS);
        CHECKF(fabs(f - want) <= 5 * se + 1e-4, "token %d: freq %.5f expected %.5f", i, f, want);
    }
    double se = sqrt(cold_want * (1 - cold_want) / DRAWS);
    CHECKF(fabs(cold - cold_want) <= 5 * se + 1e-4, "the 595 cold tokens: freq %.5f expected %.5f", cold, cold_want);
    free(counts);
    pith_sampler_free(s);
}

int main(void) {
    test_greedy();
    test_penalties();
    test_distributions();
    test_seed();
    test_validation();
    test_large_greedy();
    test_large_filters();
    test_row_distribution();
    return check_summary("test_sampler");
}
