/* llama.cpp's extra samplers (sampler.h): DRY with its sequence breakers, XTC, typical-p, top-n-sigma.
 *
 * Run with no arguments (ctest): checks in C against values worked out here in double precision --
 * DRY's exact penalty multiplier * base^(len - allowed) on hand-made histories (breakers, allowed length,
 * window, the exponent cap), breakers resolved from strings against the default model's tokenizer, XTC
 * at probability 1, the defaults (everything new off, old draws unchanged) and validation naming each
 * parameter; and DRY over a long history staying linear.
 *
 * With --case (tests/test_sampler_ref.py): reads one case from stdin -- the sampling parameters, a
 * logits row, a history and DRY restart sequences of ids -- samples once with recording on and prints
 * the token, the row after sampling (for greedy: the penalised and DRY logits) and the recorded
 * distribution, for the Python reference to compare. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pith/sampler.h"
#include "pith/tokenizer.h"

static int run_case(void) {
    pith_sampling_params p = pith_sampling_defaults();
    unsigned long long seed;
    int nv, nh, nr;
    if (scanf("%f %d %f %f %f %f %f %f %f %d %d %f %f %f %f %llu", &p.temperature, &p.top_k, &p.top_p,
              &p.min_p, &p.repetition_penalty, &p.presence_penalty, &p.frequency_penalty, &p.dry_multiplier,
              &p.dry_base, &p.dry_allowed_length, &p.dry_penalty_last_n, &p.xtc_probability,
              &p.xtc_threshold, &p.typical_p, &p.top_n_sigma, &seed) != 16 ||
        scanf("%d", &nv) != 1 || nv <= 0)
        return 2;
    p.seed = seed;
    pith_sampling_set_dry_breakers(&p, NULL, 0, NULL); /* restarts come as ids below */
    float *logits = malloc((size_t)nv * sizeof *logits);
    for (int i = 0; i < nv; i++) {
        char buf[64];
        if (scanf("%63s", buf) != 1) return 2;
        logits[i] = !strcmp(buf, "-inf") ? -INFINITY : strtof(buf, NULL);
    }
    if (scanf("%d", &nh) != 1 || nh < 0) return 2;
    int32_t *hist = malloc(((size_t)nh + 1) * sizeof *hist);
    for (int i = 0; i < nh; i++)
        if (scanf("%d", &hist[i]) != 1) return 2;
    pith_sampler *s;
    pith_err err;
    if (pith_sampler_new(&p, nv, &s, &err)) {
        printf("error %s\n", err.msg);
        return 0;
    }
    if (scanf("%d", &nr) != 1) return 2;
    for (int r = 0; r < nr; r++) {
        int n;
        int32_t ids[32];
        if (scanf("%d", &n) != 1 || n < 1 || n > 32) return 2;
        for (int i = 0; i < n; i++)
            if (scanf("%d", &ids[i]) != 1) return 2;
        if (pith_sampler_add_dry_restart(s, ids, n)) return 2;
    }
    pith_sampler_record(s, true);
    int32_t tok = pith_sampler_sample(s, logits, hist, nh);
    printf("token %d\nrow", tok);
    for (int i = 0; i < nv; i++) printf(" %.9g", logits[i]);
    int n = pith_sampler_dist_size(s);
    printf("\ndist %d\n", n);
    for (int i = 0; i < n; i++) {
        int32_t id;
        float lp;
        pith_sampler_dist_at(s, i, &id, &lp);
        printf("%d %.9g\n", id, lp);
    }
    pith_sampler_free(s);
    free(logits);
    free(hist);
    return 0;
}

static pith_sampling_params greedy_dry(float mult, float base, int allowed, int last_n) {
    pith_sampling_params p = pith_sampling_defaults();
    p.temperature = 0;
    p.dry_multiplier = mult;
    p.dry_base = base;
    p.dry_allowed_length = allowed;
    p.dry_penalty_last_n = last_n;
    return p;
}

/* The row after DRY alone: zeros in, so out[i] is minus token i's penalty. */
static void dry_row(pith_sampling_params p, const int32_t *h, int nh, const int32_t *restart, int nrestart, float *out,
                    int nv) {
    pith_sampler *s;
    pith_err err;
    CHECKF(pith_sampler_new(&p, nv, &s, &err) == 0, "%s", err.msg);
    if (restart) CHECK(pith_sampler_add_dry_restart(s, restart, nrestart) == 0);
    for (int i = 0; i < nv; i++) out[i] = 0.0f;
    pith_sampler_sample(s, out, h, nh);
    pith_sampler_free(s);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-6 * (1 + fabs(b)); }

static void test_dry_exact(void) {
    enum { V = 8 };
    float row[V];
    /* 0 1 2 3 0 1 2: emitting 3 would repeat "0 1 2 3" (a repeat of 3 tokens extended): 0.8 * 1.75^(3-2) */
    int32_t h[] = {0, 1, 2, 3, 0, 1, 2};
    dry_row(greedy_dry(0.8f, 1.75f, 2, -1), h, 7, NULL, 0, row, V);
    CHECK(near(row[3], -0.8 * 1.75));
    for (int i = 0; i < V; i++)
        if (i != 3) CHECK(row[i] == 0.0f);
    /* allowed length 3: exponent 0; allowed length 4: a repeat of 3 is free */
    dry_row(greedy_dry(0.8f, 1.75f, 3, -1), h, 7, NULL, 0, row, V);
    CHECK(near(row[3], -0.8));
    dry_row(greedy_dry(0.8f, 1.75f, 4, -1), h, 7, NULL, 0, row, V);
    CHECK(row[3] == 0.0f);
    /* the window: the last 5 tokens (2 3 0 1 2) hold only the repeat "2" (length 1 < 2) */
    dry_row(greedy_dry(0.8f, 1.75f, 2, 5), h, 7, NULL, 0, row, V);
    CHECK(row[3] == 0.0f);
    dry_row(greedy_dry(0.8f, 1.75f, 2, 6), h, 7, NULL, 0, row, V);
    CHECK(near(row[3], -0.8)); /* 1 2 3 0 1 2: "1 2" then 3, length 2: 0.8 * 1.75^0 */
    dry_row(greedy_dry(0.8f, 1.75f, 1, 6), h, 7, NULL, 0, row, V);
    CHECK(near(row[3], -0.8 * 1.75));
    /* a one-token breaker inside the repeated run stops it: 1 is the last breaker, one token back */
    int32_t one = 1;
    dry_row(greedy_dry(0.8f, 1.75f, 2, -1), h, 7, &one, 1, row, V);
    CHECK(row[3] == 0.0f);
    /* a breaker that is the continuation itself: the repeat counts, but the breaker is never penalised */
    int32_t three = 3;
    dry_row(greedy_dry(0.8f, 1.75f, 2, -1), h, 7, &three, 1, row, V);
    CHECK(row[3] == 0.0f);
    /* a long repeat: 5 6 0 1 2 3 4 7 5 6 0 1 2 3 -> 4 extends a repeat of 6: 2 * 3^(6-2) */
    int32_t h2[] = {5, 6, 0, 1, 2, 3, 4, 7, 5, 6, 0, 1, 2, 3};
    dry_row(greedy_dry(2.0f, 3.0f, 2, -1), h2, 14, NULL, 0, row, V);
    CHECK(near(row[4], -2.0 * 81.0));
    /* a two-token restart sequence 0 1 limits the repeat to what follows it (2 3: length 2) */
    int32_t seq01[] = {0, 1};
    dry_row(greedy_dry(2.0f, 3.0f, 2, -1), h2, 14, seq01, 2, row, V);
    CHECK(near(row[4], -2.0 * 1.0));
    /* the sequence 0 2 never occurs: no limit */
    int32_t seq02[] = {0, 2};
    dry_row(greedy_dry(2.0f, 3.0f, 2, -1), h2, 14, seq02, 2, row, V);
    CHECK(near(row[4], -2.0 * 81.0));
    /* the exponent cap: base 100 gives at most 100^19 (llama.cpp's 88.72 / ln 100, truncated) */
    int32_t h3[64];
    for (int i = 0; i < 64; i++) h3[i] = i % 2 ? 1 : 0;
    dry_row(greedy_dry(1.0f, 100.0f, 2, -1), h3, 64, NULL, 0, row, V);
    CHECK(near(row[0], -1e38) && isfinite(row[0]));
    /* DRY changes the greedy pick */
    pith_sampling_params p = greedy_dry(0.8f, 1.75f, 2, -1);
    pith_sampler *s;
    pith_err err;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    float l[V] = {0, 0, 0, 1.0f, 0.5f, 0, 0, 0};
    CHECK(pith_sampler_sample(s, l, h, 7) == 4);
    pith_sampler_free(s);
}

/* Breakers as strings, resolved against the default model's vocabulary by the engine's constructor. */
static void test_breakers_vocab(void) {
    const char *src = getenv("PITH_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/assets/default.gguf", src ? src : "..");
    pith_tokenizer *tok;
    pith_err err;
    if (pith_tokenizer_load(path, 0, &tok, &err)) {
        printf("SKIP part: no tokenizer at %s: %s\n", path, err.msg);
        return;
    }
    int nv = pith_tokenizer_n_vocab(tok);
    /* a: a token with a newline in its piece; b, c, d: plain letters */
    int32_t nl = -1, b = -1, c = -1, d = -1;
    char piece[512];
    for (int32_t id = 0; id < nv; id++) {
        size_t n = pith_tokenizer_token_bytes(tok, id, piece, sizeof piece);
        if (nl < 0 && memchr(piece, '\n', n)) nl = id;
        bool letters = n >= 2;
        for (size_t i = 0; i < n; i++) letters = letters && piece[i] >= 'a' && piece[i] <= 'z';
        if (letters && !strstr(piece, "th")) {
            if (b < 0) b = id;
            else if (c < 0) c = id;
            else if (d < 0) d = id;
        }
    }
    CHECK(nl >= 0 && d >= 0);
    if (nl < 0 || d < 0) {
        pith_tokenizer_free(tok);
        return;
    }
    pith_sampling_params p = greedy_dry(1.0f, 2.0f, 2, -1); /* default breakers */
    CHECK(pith_sampling_dry_breaker_count(&p) == 4 && !strcmp(pith_sampling_dry_breaker(&p, 2), "\""));
    float *row = calloc((size_t)nv, sizeof *row);
    pith_sampler *s;
    /* b c d nl b c d nl b c -> d repeats "b c" then d... across nl, which stops the repeat at "b c" */
    int32_t h[] = {b, c, d, nl, b, c, d, nl, b, c};
    CHECK(pith_sampler_new_vocab(&p, tok, nv, &s, &err) == 0);
    pith_sampler_sample(s, row, h, 10);
    CHECK(near(row[d], -1.0)); /* length 2: 1 * 2^0, not the 5 of "b c d nl b c" */
    pith_sampler_free(s);
    /* without the vocabulary the strings are not resolved: the repeat runs back 6 tokens */
    memset(row, 0, (size_t)nv * sizeof *row);
    CHECK(pith_sampler_new(&p, nv, &s, &err) == 0);
    pith_sampler_sample(s, row, h, 10);
    CHECK(near(row[d], -16.0));
    CHECK(row[nl] == 0.0f && row[b] == 0.0f); /* only d ever followed "... b c" */
    pith_sampler_free(s);
    /* nl is a one-token breaker: never penalised, even extending "b c d nl b c d" */
    int32_t h2[] = {b, c, d, nl, b, c, d};
    memset(row, 0, (size_t)nv * sizeof *row);
    CHECK(pith_sampler_new_vocab(&p, tok, nv, &s, &err) == 0);
    pith_sampler_sample(s, row, h2, 7);
    CHECK(row[nl] == 0.0f);
    pith_sampler_free(s);
    /* a breaker given as a string: the piece of c itself (contained in c): the repeat stops after c */
    size_t cl = pith_tokenizer_token_bytes(tok, c, piece, sizeof piece);
    const char *cb = piece[0] == ' ' && cl > 1 ? piece + 1 : piece;
    CHECK(pith_sampling_set_dry_breakers(&p, &cb, 1, &err) == 0);
    CHECK(pith_sampling_dry_breaker_count(&p) == 1);
    int32_t h3[] = {b, c, d, b, c, d, b, c};
    memset(row, 0, (size_t)nv * sizeof *row);
    CHECK(pith_sampler_new_vocab(&p, tok, nv, &s, &err) == 0);
    pith_sampler_sample(s, row, h3, 8);
    CHECK(row[d] == 0.0f); /* the last c is 0 tokens back: limit 0 < 2 */
    pith_sampler_free(s);
    /* a multi-character breaker spanning tokens resolves without trouble */
    const char *multi[] = {"\n\n", "the end", "*"};
    CHECK(pith_sampling_set_dry_breakers(&p, multi, 3, &err) == 0);
    CHECK(pith_sampler_new_vocab(&p, tok, nv, &s, &err) == 0);
    pith_sampler_free(s);
    free(row);
    pith_tokenizer_free(tok);
}

static void test_xtc(void) {
    enum { V = 6 };
    pith_sampling_params p = pith_sampling_defaults();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.1f;
    /* probabilities about .4 .3 .2 .06 .03 .01: three above 0.1; all but the least likely (.2) go */
    const double pr[V] = {0.4, 0.3, 0.2, 0.06, 0.03, 0.01};
    for (int round = 0; round < 2; round++) {
        pith_sampler *s;
        pith_err err;
        CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
        pith_sampler_record(s, true);
        float l[V];
        for (int i = 0; i < V; i++) l[i] = (float)log(pr[i]);
        int32_t t = pith_sampler_sample(s, l, NULL, 0);
        CHECK(t >= 2);
        CHECK(pith_sampler_dist_size(s) == (round ? 3 : 4)); /* top-k 5 drops the .01 */
        int32_t id;
        float lp;
        pith_sampler_dist_at(s, 0, &id, &lp);
        CHECK(id == 2 && fabs(lp - log(0.2 / (round ? 0.29 : 0.3))) < 1e-5);
        CHECK(pith_sampler_dist_logprob(s, 0) == -INFINITY);
        pith_sampler_free(s);
        p.top_k = 5; /* the same through the top-k path */
    }
    /* one token above the threshold: nothing removed */
    p.top_k = 0;
    p.xtc_threshold = 0.35f;
    pith_sampler *s;
    pith_err err;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    pith_sampler_record(s, true);
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)log(pr[i]);
    pith_sampler_sample(s, l, NULL, 0);
    CHECK(pith_sampler_dist_size(s) == V);
    pith_sampler_free(s);
}

static void test_defaults_and_validation(void) {
    pith_sampling_params d = pith_sampling_defaults();
    pith_err err;
    CHECK(pith_sampling_validate(&d, &err) == 0);
    CHECK(d.dry_multiplier == 0 && d.dry_base == 1.75f && d.dry_allowed_length == 2 && d.dry_penalty_last_n == -1);
    CHECK(d.xtc_probability == 0 && d.xtc_threshold == 0.1f && d.typical_p == 1.0f && d.top_n_sigma == -1.0f);
    CHECK(pith_sampling_dry_breaker_count(&d) == 4);
    CHECK(!strcmp(pith_sampling_dry_breaker(&d, 0), "\n") && !strcmp(pith_sampling_dry_breaker(&d, 1), ":") &&
          !strcmp(pith_sampling_dry_breaker(&d, 3), "*"));
    pith_sampling_params z = {.temperature = 1, .top_p = 1, .repetition_penalty = 1};
    CHECK(pith_sampling_validate(&z, &err) == 0); /* zero-initialised new fields: all off */
    CHECK(pith_sampling_dry_breaker_count(&z) == 0);
#define EXPECT_BAD(stmt, name)                                                                  \
    do {                                                                                        \
        pith_sampling_params q = pith_sampling_defaults();                                      \
        stmt;                                                                                   \
        CHECKF(pith_sampling_validate(&q, &err) != 0 && strstr(err.msg, name), "%s", name);   \
    } while (0)
    EXPECT_BAD(q.dry_multiplier = -1, "dry_multiplier");
    EXPECT_BAD((q.dry_multiplier = 1, q.dry_base = 0.5f), "dry_base");
    EXPECT_BAD(q.dry_allowed_length = -1, "dry_allowed_length");
    EXPECT_BAD(q.dry_penalty_last_n = -2, "dry_penalty_last_n");
    EXPECT_BAD(memset(q.dry_sequence_breakers, 'x', sizeof q.dry_sequence_breakers), "dry_sequence_breakers");
    EXPECT_BAD(q.xtc_probability = 1.5f, "xtc_probability");
    EXPECT_BAD(q.xtc_threshold = -0.1f, "xtc_threshold");
    EXPECT_BAD(q.typical_p = 1.01f, "typical_p");
    EXPECT_BAD(q.top_n_sigma = NAN, "top_n_sigma");
#undef EXPECT_BAD
    /* breakers: "none" is an empty list; too many bytes together is refused, leaving p as it was */
    const char *many[64];
    for (int i = 0; i < 64; i++) many[i] = "0123456789";
    CHECK(pith_sampling_set_dry_breakers(&d, many, 64, &err) != 0 && pith_sampling_dry_breaker_count(&d) == 4);
    const char *longb = "0123456789012345678901234567890123456789012345"; /* cut to 40 bytes */
    CHECK(pith_sampling_set_dry_breakers(&d, &longb, 1, &err) == 0 && strlen(pith_sampling_dry_breaker(&d, 0)) == 40);
    CHECK(pith_sampling_set_dry_breakers(&d, NULL, 0, &err) == 0 && pith_sampling_dry_breaker_count(&d) == 0);

    /* off by default: the same draws as parameters without the new fields touched */
    pith_sampling_params a = pith_sampling_defaults();
    a.temperature = 1.0f;
    pith_sampling_params b = a;
    b.top_n_sigma = 0; /* 0 is off too */
    b.typical_p = 0;   /* 0: off */
    b.xtc_threshold = 0.9f;
    b.xtc_probability = 1; /* threshold above 0.5: off */
    pith_sampler *sa, *sb;
    CHECK(pith_sampler_new(&a, 50, &sa, &err) == 0 && pith_sampler_new(&b, 50, &sb, &err) == 0);
    uint64_t x = 99;
    for (int it = 0; it < 200; it++) {
        float la[50], lb[50];
        for (int i = 0; i < 50; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            la[i] = lb[i] = (float)((x >> 40) % 1000) / 200.0f;
        }
        CHECK(pith_sampler_sample(sa, la, NULL, 0) == pith_sampler_sample(sb, lb, NULL, 0));
    }
    pith_sampler_free(sa);
    pith_sampler_free(sb);
}

/* DRY over a long history: linear in the window (a Z-function), so 400k tokens take milliseconds. */
static void test_dry_long(void) {
    enum { V = 1000, N = 400000 };
    int32_t *h = malloc(N * sizeof *h);
    for (int i = 0; i < N; i++) h[i] = i % 7 == 3 ? 5 : (i % 3); /* heavily repetitive */
    pith_sampling_params p = greedy_dry(0.8f, 1.75f, 2, -1);
    pith_sampler *s;
    pith_err err;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    float *row = calloc(V, sizeof *row);
    clock_t t0 = clock();
    for (int k = 0; k < 5; k++) {
        memset(row, 0, V * sizeof *row);
        pith_sampler_sample(s, row, h, N);
    }
    double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECKF(sec < 5.0, "DRY over %d tokens took %.2f s for 5 samples", N, sec);
    CHECK(isfinite(row[1]) && row[1] < 0); /* the last token is 0, most often followed by 1 */
    pith_sampler_free(s);
    free(row);
    free(h);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--case")) return run_case();
    test_defaults_and_validation();
    test_dry_exact();
    test_breakers_vocab();
    test_xtc();
    test_dry_long();
    return check_summary("test_sampler_llamacpp");
}
