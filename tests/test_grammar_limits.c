/* The grammar compiler's size limits (include/pith/grammar.h, src/grammar/gr_internal.h): a grammar whose
 * repetitions would unroll past 1048576 elements is refused before it is built, in milliseconds and a few
 * MB, with an error naming the limit (an 84 KB GBNF of 6,500 x "a"{10000} took 1.8 GB and seconds, and
 * 16 of them in the server's cache 1.6 GB each); GBNF, regex and JSON Schema alike. Grammars up to the
 * limit compile in linear time (a chain of x{0,n} rules was quadratic: 100 of them, 1.3 KB of GBNF, took
 * 25 s) and count what they hold, lazily grown tables included. CPU time and memory are measured with
 * getrusage against bounds many times what the code needs (sanitizers included), and far below what it
 * took before. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "pith/grammar.h"

static pith_grammar_vocab *V;

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static long peak_rss_mb(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_maxrss / 1024;
}

/* The 256 bytes, a few runs of 'a', an end token. */
static pith_grammar_vocab *vocab(void) {
    const char *b[262];
    size_t l[262];
    uint8_t k[262] = {0};
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        l[i] = 1;
    }
    static const char *runs[] = {"aa", "aaaa", "aaaaaaaa", "ab", "abc"};
    for (int i = 0; i < 5; i++) {
        b[256 + i] = runs[i];
        l[256 + i] = strlen(runs[i]);
    }
    b[261] = "</s>";
    l[261] = 4;
    k[261] = PITH_GRAMMAR_TOKEN_END;
    pith_grammar_vocab *v = NULL;
    pith_err err = {{0}};
    if (pith_grammar_vocab_new(262, b, l, k, &v, &err)) fprintf(stderr, "vocab: %s\n", err.msg);
    return v;
}

/* `head` then `n` copies of `term` (separated by `sep`), then `tail`. */
static char *repeat(const char *head, const char *term, const char *sep, int n, const char *tail) {
    /* room for 4 more bytes per copy: the schema tests number their copies in place */
    size_t cap = strlen(head) + (size_t)n * (strlen(term) + strlen(sep) + 4) + strlen(tail) + 1;
    char *s = malloc(cap), *p = s;
    p += sprintf(p, "%s", head);
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%s", i ? sep : "", term);
    sprintf(p, "%s", tail);
    return s;
}

/* Compiling src is refused with the expansion limit's message, quickly and without the memory (the peak
 * RSS of the whole process, so later cases are bounded by the largest before them). */
static void expect_refused(pith_grammar_kind kind, const char *what, const char *src, long max_rss_mb) {
    double t0 = cpu_s();
    pith_grammar *g = NULL;
    pith_err err = {{0}};
    int rc = pith_grammar_compile(V, kind, src, strlen(src), &g, &err);
    double t = cpu_s() - t0;
    CHECKF(rc != 0 && !g && strstr(err.msg, "more than 1048576 elements, the limit") &&
               strstr(err.msg, "reduce the repetition counts"),
           "%s (%zu bytes): rc %d, '%s'", what, strlen(src), rc, err.msg);
    CHECKF(t < 2.0, "%s: refusing took %.2f s of CPU", what, t);
    CHECKF(peak_rss_mb() < max_rss_mb, "%s: peak RSS %ld MB", what, peak_rss_mb());
    pith_grammar_release(g);
}

static void test_refused(void) {
    /* the grammar: 6,500 x "a"{10000}, 65 million elements unrolled (1.2 GB before; it is the
     * first case, so the process peak is its own) */
    char *s = repeat("root ::= ", "\"a\"{10000}", " ", 6500, "\n");
    expect_refused(PITH_GRAMMAR_GBNF, "6500 x \"a\"{10000}", s, 128);
    free(s);
    /* optional copies are chains of rules: 100 x {0,10000} */
    s = repeat("root ::= ", "[a-z]{0,10000}", " ", 100, "\n");
    expect_refused(PITH_GRAMMAR_GBNF, "100 x [a-z]{0,10000}", s, 1024);
    free(s);
    /* one huge sequence inside nested groups: the parser's pending sequences count too */
    s = repeat("root ::= ((((", "\"ab\"{10000}", " ", 120, ")))) \"c\"\n");
    expect_refused(PITH_GRAMMAR_GBNF, "nested groups of 120 x \"ab\"{10000}", s, 1024);
    free(s);
    /* guided_regex with bounded repeats */
    s = repeat("", "a{10000}", "", 200, "");
    expect_refused(PITH_GRAMMAR_REGEX, "regex 200 x a{10000}", s, 1024);
    free(s);
    s = repeat("(", "[a-z]{2,10000}", "|", 40, ")");
    expect_refused(PITH_GRAMMAR_REGEX, "regex of 40 x [a-z]{2,10000}", s, 1024);
    free(s);
    /* a JSON Schema of 40 strings of maxLength 10000 */
    s = repeat("{\"type\":\"object\",\"properties\":{", "\"p\":{\"type\":\"string\",\"maxLength\":10000}", ",", 40,
               "}}");
    for (int i = 0; i < 40; i++) { /* distinct property names p00 .. p39 */
        char *at = strstr(s, "\"p\":");
        char name[16];
        snprintf(name, sizeof name, "%02d", i);
        memmove(at + 4, at + 2, strlen(at + 2) + 1);
        memcpy(at + 2, name, 2);
    }
    expect_refused(PITH_GRAMMAR_JSON_SCHEMA, "schema of 40 x maxLength 10000", s, 1024);
    free(s);
}

/* Grammars just under the limit compile quickly, match, and count their memory. */
static void test_under_limit(void) {
    /* 100 x "a"{10000}: 1,000,001 elements */
    char *s = repeat("root ::= ", "\"a\"{10000}", " ", 100, "\n");
    double t0 = cpu_s();
    pith_grammar *g = NULL;
    pith_err err = {{0}};
    int rc = pith_grammar_compile(V, PITH_GRAMMAR_GBNF, s, strlen(s), &g, &err);
    CHECKF(rc == 0 && g, "100 x \"a\"{10000}: %s", err.msg);
    CHECKF(cpu_s() - t0 < 2.0, "100 x \"a\"{10000} took %.2f s", cpu_s() - t0);
    free(s);
    if (g) {
        size_t b0 = pith_grammar_bytes(g);
        /* its per-element tables, counted: 8-byte elements and more per position, far below the limit */
        CHECKF(b0 > (size_t)8 * 1000000 && b0 < ((size_t)128 << 20), "counted %zu bytes", b0);
        pith_grammar_matcher *m = NULL;
        CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
        uint32_t mask[16];
        int n = m ? pith_grammar_matcher_fill_mask(m, mask, &err) : -1;
        CHECKF(n > 0 && ((mask['a' >> 5] >> ('a' & 31)) & 1u) && !((mask['b' >> 5] >> ('b' & 31)) & 1u),
               "mask: %d", n);
        /* the position's mask parts, computed on first use, are counted too */
        CHECKF(pith_grammar_bytes(g) > b0, "bytes %zu after a mask, %zu before", pith_grammar_bytes(g), b0);
        if (m) CHECK(pith_grammar_matcher_accept_bytes(m, "aaaaaaaa", 8, &err) == 0);
        pith_grammar_matcher_free(m);
        pith_grammar_release(g);
    }
    /* chains of x{0,n} rules: linear (this took ~8 s when the return contexts swept every element once
     * per link) */
    s = repeat("root ::= ", "[a-z]{0,10000}", " ", 20, " \"!\"\n");
    t0 = cpu_s();
    g = NULL;
    rc = pith_grammar_compile(V, PITH_GRAMMAR_GBNF, s, strlen(s), &g, &err);
    double t = cpu_s() - t0;
    CHECKF(rc == 0 && g, "20 x [a-z]{0,10000}: %s", err.msg);
    CHECKF(t < 2.0, "20 x [a-z]{0,10000} took %.2f s of CPU", t);
    free(s);
    if (g) {
        pith_grammar_matcher *m = NULL;
        CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
        if (m) CHECK(pith_grammar_matcher_accept_bytes(m, "abcxyz!", 7, &err) == 0 && pith_grammar_matcher_can_end(m));
        pith_grammar_matcher_free(m);
        pith_grammar_release(g);
    }
    /* a realistic schema: 10 strings of maxLength 10000 */
    s = repeat("{\"type\":\"object\",\"properties\":{", "\"p\":{\"type\":\"string\",\"maxLength\":10000}", ",", 10,
               "}}");
    for (int i = 0; i < 10; i++) {
        char *at = strstr(s, "\"p\":");
        memmove(at + 3, at + 2, strlen(at + 2) + 1);
        at[2] = (char)('0' + i);
    }
    g = NULL;
    rc = pith_grammar_compile(V, PITH_GRAMMAR_JSON_SCHEMA, s, strlen(s), &g, &err);
    CHECKF(rc == 0 && g, "schema of 10 x maxLength 10000: %s", err.msg);
    pith_grammar_release(g);
    free(s);
    CHECKF(peak_rss_mb() < 1024, "peak RSS %ld MB", peak_rss_mb());
}

int main(void) {
    V = vocab();
    if (!V) return 1;
    test_refused();
    test_under_limit();
    pith_grammar_vocab_free(V);
    return check_summary("test_grammar_limits");
}
