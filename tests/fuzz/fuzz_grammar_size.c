/* The grammar compiler's size behaviour (src/grammar/gr_internal.h: GR_MAX_ELEMS, GR_MAX_BYTES). The
 * first byte picks the front end (GBNF, regex, JSON Schema), the rest is its source, up to MAX_INPUT
 * bytes. The oracle: compiling either succeeds or is refused, in under MAX_COMPILE_S of CPU (sanitized);
 * a grammar that compiles has at most GR_MAX_ELEMS elements and counts at most GR_MAX_BYTES, and stays
 * within them while a matcher takes a few steps (each step's masks and states are counted as they are
 * made); a refusal for size names its limit. tests/fuzz/grammar_size.dict gives the fuzzer large
 * repetition counts, so small inputs reach the limits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "grammar/gr_internal.h"

#define MAX_INPUT 4096
#define MAX_COMPILE_S 5.0

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/* The 256 bytes, runs of 'a' and of "ab" up to 64 bytes (so masks of long repetitions are computed
 * from multi-byte tokens), an end token. */
static pith_grammar_vocab *vocab(void) {
    static pith_grammar_vocab *v;
    if (v) return v;
    enum { N = 256 + 12 + 1 };
    static char bytes[256], runs[12][65];
    const char *b[N];
    size_t l[N];
    uint8_t k[N] = {0};
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        l[i] = 1;
    }
    for (int i = 0; i < 12; i++) {
        size_t n = (size_t)2 << (i / 2); /* 2, 2, 4, 4, ... 64, 64 */
        for (size_t j = 0; j < n; j++) runs[i][j] = i % 2 ? "ab"[j % 2] : 'a';
        b[256 + i] = runs[i];
        l[256 + i] = n;
    }
    b[N - 1] = "</s>";
    l[N - 1] = 4;
    k[N - 1] = PITH_GRAMMAR_TOKEN_END;
    pith_err err;
    if (pith_grammar_vocab_new(N, b, l, k, &v, &err)) abort();
    return v;
}

static void within_limits(pith_grammar *g) {
    if (g->pda.n_elems > GR_MAX_ELEMS || g->pda.bytes_used > GR_MAX_BYTES) abort();
    if (pith_grammar_bytes(g) > GR_MAX_BYTES + sizeof *g) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT) return 0;
    static const pith_grammar_kind kinds[] = {PITH_GRAMMAR_GBNF, PITH_GRAMMAR_REGEX, PITH_GRAMMAR_JSON_SCHEMA};
    pith_grammar_kind kind = kinds[data[0] % 3];
    pith_grammar_vocab *v = vocab();
    pith_grammar *g = NULL;
    pith_err err = {{0}};
    double t0 = cpu_s();
    int rc = pith_grammar_compile(v, kind, (const char *)data + 1, size - 1, &g, &err);
    if (cpu_s() - t0 > MAX_COMPILE_S) abort();
    if (rc) {
        if (g) abort();
        /* a size refusal says which limit (other errors may say "too large" of one construct) */
        if (strncmp(err.msg, "grammar: too large", 18) == 0 && !strstr(err.msg, "limit")) abort();
        return 0;
    }
    within_limits(g);
    pith_grammar_matcher *m = NULL;
    if (pith_grammar_matcher_new(g, &m, &err) == 0) {
        uint32_t mask[16];
        int nv = pith_grammar_vocab_size(v);
        for (int step = 0; step < 16; step++) {
            int n = pith_grammar_matcher_fill_mask(m, mask, &err);
            within_limits(g);
            if (n <= 0) break;
            int32_t pick = -1;
            for (int t = nv - 1; t >= 0 && pick < 0; t--) /* the longest tokens first: deep into repetitions */
                if ((mask[t >> 5] >> (t & 31)) & 1u) pick = t;
            if (pith_grammar_matcher_accept(m, pick, &err)) {
                if (!pith_grammar_outgrown(g)) abort(); /* the mask allowed it and nothing outgrew */
                break;
            }
            if (pith_grammar_matcher_is_done(m)) break;
        }
        within_limits(g);
        pith_grammar_matcher_free(m);
    }
    pith_grammar_release(g);
    return 0;
}
