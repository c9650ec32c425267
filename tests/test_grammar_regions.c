/* Class regions (src/grammar/region.c): a position whose byte set is wide takes its mask from a
 * summary of the trie's tokens made only of that set's bytes, when the automaton's run over those bytes
 * is deterministic. On a random vocabulary of runs over a small alphabet, with the size thresholds
 * lowered so that every byte set gets a region (with bitmaps), the mask along random walks equals the
 * brute-force reference (every token tried alone) for loops, counted chains deeper and shallower than
 * the longest token, chains that end into an unknown context, non-deterministic runs (overlapping
 * classes), and JSON Schema strings with maxLength and formats; and the region path was taken. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/gr_internal.h"
#include "pith/grammar.h"

static uint64_t rng(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The 256 single bytes, then n_runs random strings of 2..24 bytes over an alphabet weighted to long
 * runs of letters (so that tokens leave a class at every depth), then an end token. */
static pith_grammar_vocab *run_vocab(int n_runs, int *n_out, int *end_id) {
    static const char ALPHA[] = "aaaabbbccdexyzAB01239-_.@\" ,:{}[]\\\xc3\xa9";
    int n = 256 + n_runs + 1;
    const char **b = calloc((size_t)n, sizeof *b);
    size_t *l = calloc((size_t)n, sizeof *l);
    uint8_t *k = calloc((size_t)n, 1);
    char *store = malloc((size_t)n_runs * 25 + 256);
    if (!b || !l || !k || !store) return NULL;
    for (int i = 0; i < 256; i++) {
        store[i] = (char)i;
        b[i] = store + i;
        l[i] = 1;
    }
    uint64_t x = 0x1234567;
    char *q = store + 256;
    for (int i = 0; i < n_runs; i++) {
        int len = 2 + (int)(rng(&x) % 23);
        /* mostly letters: a run of one class with a tail that may leave it */
        int letters = (int)(rng(&x) % (uint64_t)(len + 1));
        for (int j = 0; j < len; j++)
            q[j] = j < letters ? "abcdexyz"[rng(&x) % 8] : ALPHA[rng(&x) % (sizeof ALPHA - 1)];
        b[256 + i] = q;
        l[256 + i] = (size_t)len;
        q += len;
    }
    b[n - 1] = "</s>";
    l[n - 1] = 4;
    k[n - 1] = PITH_GRAMMAR_TOKEN_END;
    pith_grammar_vocab *v = NULL;
    pith_err err = {{0}};
    if (pith_grammar_vocab_new(n, b, l, k, &v, &err)) fprintf(stderr, "vocab: %s\n", err.msg);
    free(b);
    free(l);
    free(k);
    free(store);
    *n_out = n;
    *end_id = n - 1;
    return v;
}

/* Random walks; every step's mask against allows() of every token. Returns the steps taken. */
static int walk(pith_grammar *g, int nv, int end, uint64_t seed, int steps) {
    pith_grammar_matcher *m;
    pith_err err = {{0}};
    if (pith_grammar_matcher_new(g, &m, &err)) return 0;
    uint32_t *mask = malloc(pith_grammar_mask_words(g) * sizeof *mask);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    int taken = 0;
    for (int s = 0; s < steps; s++) {
        int n = pith_grammar_matcher_fill_mask(m, mask, &err);
        CHECKF(n >= 0, "fill_mask: %s", err.msg);
        int bad = 0, na = 0;
        int32_t pick = -1, seen = 0, any = -1;
        for (int32_t t = 0; t < nv; t++) {
            bool in = (mask[t >> 5] >> (t & 31)) & 1u, ref = pith_grammar_matcher_allows(m, t);
            if (in != ref && bad++ < 3) fprintf(stderr, "  token %d: mask %d, alone %d\n", (int)t, in, ref);
            na += ref;
            if (ref && t != end && (any < 0 || rng(&x) % 4 == 0)) any = t;
            /* prefer long tokens (deep into the regions), end now and then */
            if (ref && (t >= 256 || rng(&x) % 8 == 0) && (t != end || s > 20) && rng(&x) % (uint64_t)++seen == 0) pick = t;
        }
        CHECKF(bad == 0 && na == n, "seed %d step %d: %d tokens differ", (int)seed, s, bad);
        if (pick < 0) pick = any >= 0 ? any : (pith_grammar_matcher_can_end(m) ? end : -1);
        if (pick < 0 || bad) break;
        CHECK(pith_grammar_matcher_accept(m, pick, &err) == 0);
        taken++;
        if (pick == end || pith_grammar_matcher_is_done(m)) break;
    }
    free(mask);
    pith_grammar_matcher_free(m);
    return taken;
}

int main(void) {
    gr_region_min_nodes = 1;
    gr_region_bitmap_tokens = 1;
    int nv, end;
    pith_grammar_vocab *v = run_vocab(3000, &nv, &end);
    if (!v) return 1;
    static const struct {
        pith_grammar_kind kind;
        const char *src;
    } CASES[] = {
        /* a loop */
        {PITH_GRAMMAR_GBNF, "root ::= \"<\" [a-e]* \">\" | [a-z]+ \"\\\"\" [^\"]*"},
        /* chains shorter and longer than the longest token, min counts, a chain ending the grammar */
        {PITH_GRAMMAR_GBNF, "root ::= [a-z]{2,5} \"-\" [a-z0-9]{1,40} \".\" [a-e]{3}"},
        /* one chain used at two sites (its return is unknown), so a run may die into the context */
        {PITH_GRAMMAR_GBNF, "root ::= w \"@\" w (\".\" w){0,2}\nw ::= [a-zA-Z0-9]{1,6}"},
        /* ... and where the context goes on with the same bytes (a token runs from one w into the next) */
        {PITH_GRAMMAR_GBNF, "root ::= w w w \"!\" | \"<\" w \">\"\nw ::= [a-e]{1,3}"},
        /* overlapping classes: the run over [a-z] is not deterministic */
        {PITH_GRAMMAR_GBNF, "root ::= [a-z]{0,8} [a-c] [x-z]* | [b-e]+ \"_\""},
        /* strings: shared and bounded, formats */
        {PITH_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":12},\"b\":{\"type\":\"string\"},"
         "\"c\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":30},\"maxItems\":3},"
         "\"e\":{\"type\":\"string\",\"format\":\"email\"},\"u\":{\"type\":\"string\",\"format\":\"uuid\"}},"
         "\"required\":[\"a\",\"b\",\"c\",\"e\",\"u\"]}"},
        {PITH_GRAMMAR_JSON, ""},
    };
    uint64_t region_walks = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        pith_grammar *g = NULL;
        pith_err err = {{0}};
        int rc = pith_grammar_compile(v, CASES[c].kind, CASES[c].src, strlen(CASES[c].src), &g, &err);
        CHECKF(rc == 0, "case %d: %s", (int)c, err.msg);
        if (rc) continue;
        int steps = 0;
        for (uint64_t seed = 1; seed <= 12; seed++) steps += walk(g, nv, end, seed, 40);
        CHECKF(steps > 40, "case %d: the walks took only %d steps", (int)c, steps);
        CHECKF(g->n_region_walks > 0, "case %d: no position mask came from a region", (int)c);
        region_walks += g->n_region_walks;
        pith_grammar_release(g);
    }
    printf("position masks from regions: %llu\n", (unsigned long long)region_walks);
    pith_grammar_vocab_free(v);
    return check_summary("test_grammar_regions");
}
