/* Sampler: greedy, filters, penalties, determinism, and that draws follow the filtered softmax. */
#include <math.h>

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

int main(void) {
    test_greedy();
    test_penalties();
    test_distributions();
    test_seed();
    test_validation();
    return check_summary("test_sampler");
}
