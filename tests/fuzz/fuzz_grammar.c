/* Grammar compilation (grammar.h): the first byte picks the front end (GBNF, JSON Schema, regex, choice
 * list), the rest is its source. A grammar that compiles is then followed for a few steps against a
 * small vocabulary: each step builds the mask, checks it against allows() for every token, and accepts
 * the first allowed token. The one allowed difference: a token in the mask that allows() refuses
 * because taking it made the automaton outgrow its memory limit (grammar.h); the walk stops there. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pith/grammar.h"

static pith_grammar_vocab *vocab(void) {
    static pith_grammar_vocab *v;
    if (v) return v;
    static const char *pieces[] = {"{", "}", "\"", "\":", ", ", "[", "]", "true", "null", "12", "-", ".", "e",
                                   "ab", "\\n", "\\u00e9", "\xc3\xa9", " ", "\n", "x", "0"};
    int n = 256 + (int)(sizeof pieces / sizeof pieces[0]) + 1;
    const char *b[300];
    size_t l[300];
    uint8_t k[300] = {0};
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        l[i] = 1;
    }
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        b[256 + i] = pieces[i];
        l[256 + i] = strlen(pieces[i]);
    }
    b[n - 1] = "</s>";
    l[n - 1] = 4;
    k[n - 1] = PITH_GRAMMAR_TOKEN_END;
    pith_err err;
    if (pith_grammar_vocab_new(n, b, l, k, &v, &err)) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const pith_grammar_kind kinds[] = {PITH_GRAMMAR_GBNF, PITH_GRAMMAR_JSON_SCHEMA, PITH_GRAMMAR_REGEX,
                                              PITH_GRAMMAR_CHOICE, PITH_GRAMMAR_JSON_SCHEMA_STRICT};
    pith_grammar_kind kind = kinds[data[0] % 5];
    pith_grammar_vocab *v = vocab();
    pith_grammar *g = NULL;
    pith_err err;
    if (pith_grammar_compile(v, kind, (const char *)data + 1, size - 1, &g, &err)) return 0;
    pith_grammar_matcher *m = NULL;
    if (pith_grammar_matcher_new(g, &m, &err) == 0) {
        int nv = pith_grammar_vocab_size(v);
        uint32_t mask[16];
        bool outgrown = false;
        for (int step = 0; step < 8; step++) {
            int n = pith_grammar_matcher_fill_mask(m, mask, &err);
            if (n <= 0) break;
            int32_t pick = -1;
            for (int t = 0; t < nv; t++) {
                bool in = (mask[t >> 5] >> (t & 31)) & 1u;
                if (in != pith_grammar_matcher_allows(m, t)) {
                    if (in && pith_grammar_outgrown(g)) {
                        outgrown = true;
                        break;
                    }
                    abort();
                }
                if (in && pick < 0 && (t + step) % 3 == 0) pick = t;
            }
            if (outgrown) break;
            for (int t = 0; t < nv && pick < 0; t++)
                if ((mask[t >> 5] >> (t & 31)) & 1u) pick = t;
            if (pith_grammar_matcher_accept(m, pick, &err)) abort();
            if (pith_grammar_matcher_is_done(m)) break;
        }
        pith_grammar_matcher_free(m);
    }
    pith_grammar_release(g);
    return 0;
}
