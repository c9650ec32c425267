/* The grammar engine (include/pith/grammar.h): GBNF constructs accept and reject the strings they
 * should; masks equal a brute-force reference (every token tried alone through the automaton) along
 * random walks, on small vocabularies; end and special tokens; errors name the problem. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pith/grammar.h"

/* A small vocabulary: the 256 single bytes, some multi-byte pieces, one end and one special token. */
static const char *PIECES[] = {"ab", "abc", "\"", "\",", "\"}", "{\"", "\":", " \"", "true", "false", "null",
                               "12", "123", "-1", ".5", "e+", "\\n", "\\u00", "a\"b", "}}", "]]", "[[", ", ",
                               "\n  ", "xyz", "\xc3\xa9", "\xe2\x82", "\xac", "hello", " world", "{}", "[]",
                               "0.", "00", "\": \"", "\"]", "aa", "aaa", "aaaa"};
#define N_PIECES ((int)(sizeof PIECES / sizeof PIECES[0]))

static pith_grammar_vocab *small_vocab(int *n_out, int *end_id, int *special_id) {
    int n = 256 + N_PIECES + 2;
    const char **b = calloc((size_t)n, sizeof *b);
    size_t *l = calloc((size_t)n, sizeof *l);
    uint8_t *k = calloc((size_t)n, 1);
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        l[i] = 1;
    }
    for (int i = 0; i < N_PIECES; i++) {
        b[256 + i] = PIECES[i];
        l[256 + i] = strlen(PIECES[i]);
    }
    b[n - 2] = "</s>";
    l[n - 2] = 4;
    k[n - 2] = PITH_GRAMMAR_TOKEN_END;
    b[n - 1] = "<|im_start|>";
    l[n - 1] = 12;
    k[n - 1] = PITH_GRAMMAR_TOKEN_SPECIAL;
    pith_grammar_vocab *v = NULL;
    pith_err err = {{0}};
    if (pith_grammar_vocab_new(n, b, l, k, &v, &err)) fprintf(stderr, "vocab: %s\n", err.msg);
    free(b);
    free(l);
    free(k);
    *n_out = n;
    *end_id = n - 2;
    *special_id = n - 1;
    return v;
}

static pith_grammar_vocab *V;
static int NV, END, SPECIAL;

static pith_grammar *compile(pith_grammar_kind kind, const char *src) {
    pith_grammar *g = NULL;
    pith_err err = {{0}};
    if (pith_grammar_compile(V, kind, src, strlen(src), &g, &err)) fprintf(stderr, "compile: %s\n", err.msg);
    return g;
}

/* Whether the whole string matches (bytes accepted and the grammar may end). */
static bool matches(pith_grammar *g, const char *s, size_t n) {
    pith_grammar_matcher *m;
    pith_err err;
    if (pith_grammar_matcher_new(g, &m, &err)) return false;
    bool ok = pith_grammar_matcher_accept_bytes(m, s, n, &err) == 0 && pith_grammar_matcher_can_end(m);
    pith_grammar_matcher_free(m);
    return ok;
}

#define ACCEPTS(g, s) CHECKF(matches(g, s, strlen(s)), "should match: %s", s)
#define REJECTS(g, s) CHECKF(!matches(g, s, strlen(s)), "should not match: %s", s)

/* Along a random walk, the mask equals allows() of every token; returns the steps taken. */
static int check_masks(pith_grammar *g, uint64_t seed, int steps) {
    pith_grammar_matcher *m;
    pith_err err;
    if (pith_grammar_matcher_new(g, &m, &err)) return -1;
    size_t words = pith_grammar_mask_words(g);
    uint32_t *mask = malloc(words * sizeof *mask);
    int32_t *allowed = malloc((size_t)NV * sizeof *allowed);
    int taken = 0;
    uint64_t x = seed * 2654435761u + 1;
    for (int step = 0; step < steps; step++) {
        int n = pith_grammar_matcher_fill_mask(m, mask, &err);
        int na = 0, bad = 0;
        for (int t = 0; t < NV; t++) {
            bool in = (mask[t >> 5] >> (t & 31)) & 1u;
            bool ref = pith_grammar_matcher_allows(m, t);
            if (in != ref) bad++;
            if (ref) allowed[na++] = t;
        }
        CHECKF(bad == 0 && n == na, "step %d: %d tokens differ from the reference (%d vs %d allowed)", step, bad,
               n, na);
        CHECK(!(mask[SPECIAL >> 5] >> (SPECIAL & 31) & 1u));
        CHECK(((mask[END >> 5] >> (END & 31)) & 1u) == pith_grammar_matcher_can_end(m));
        if (na == 0) break;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int32_t t = allowed[x % (uint64_t)na];
        CHECK(pith_grammar_matcher_accept(m, t, &err) == 0);
        taken++;
        if (pith_grammar_matcher_is_done(m)) break;
    }
    free(mask);
    free(allowed);
    pith_grammar_matcher_free(m);
    return taken;
}

static void test_constructs(void) {
    pith_grammar *g = compile(PITH_GRAMMAR_GBNF, "root ::= \"ab\" | \"cd\" \"e\"");
    ACCEPTS(g, "ab");
    ACCEPTS(g, "cde");
    REJECTS(g, "a");
    REJECTS(g, "abe");
    REJECTS(g, "");
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_GBNF, "root ::= [a-c]* \"x\"+ [0-9]? (\"-\" | \"+\"){2,3}");
    ACCEPTS(g, "x--");
    ACCEPTS(g, "abcxx5+-+");
    REJECTS(g, "x-");
    REJECTS(g, "x-+-+");
    REJECTS(g, "dx--");
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_GBNF, "root ::= [^a-z\"]{1,} # comment\n");
    ACCEPTS(g, "ABC");
    ACCEPTS(g, "\xc3\xa9\xe2\x82\xac");
    REJECTS(g, "aB");
    REJECTS(g, "\"");
    REJECTS(g, "\xc3"); /* half a character: not complete */
    REJECTS(g, "\xed\xa0\x80"); /* a surrogate is never a character */
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_GBNF, "root ::= item (\",\" item){0,2}\nitem ::=\n  \"\\x41\" | \"\\u00e9\" | \"\\n\" | [\\]\\-]\n");
    ACCEPTS(g, "A");
    ACCEPTS(g, "A,\xc3\xa9,\n");
    ACCEPTS(g, "],-");
    REJECTS(g, "A,A,A,A");
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_GBNF, "root ::= . \".\" .{2}");
    ACCEPTS(g, "x.\xc3\xa9y");
    REJECTS(g, "x.y");
    pith_grammar_release(g);

    /* nesting (a real stack) */
    g = compile(PITH_GRAMMAR_GBNF, "root ::= p\np ::= \"(\" p* \")\"");
    ACCEPTS(g, "()");
    ACCEPTS(g, "(()(()))");
    REJECTS(g, "(()");
    REJECTS(g, "())");
    pith_grammar_release(g);

    /* the shape of llama.cpp's grammars/json.gbnf: leading empty alternatives, multi-line rules */
    g = compile(PITH_GRAMMAR_GBNF,
                "root   ::= object\n"
                "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n\n"
                "object ::=\n  \"{\" ws (\n            string \":\" ws value\n"
                "    (\",\" ws string \":\" ws value)*\n  )? \"}\" ws\n\n"
                "array  ::=\n  \"[\" ws (\n            value\n    (\",\" ws value)*\n  )? \"]\" ws\n\n"
                "string ::=\n  \"\\\"\" (\n    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
                "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n  )* \"\\\"\" ws\n\n"
                "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n\n"
                "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
    ACCEPTS(g, "{\"a\": [1, 2.5, \"x\\u00e9\"], \"b\":{}}\n  ");
    REJECTS(g, "{\"a\": tru}");
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_JSON, "");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"a\": [1, -2.5e+3, true, null, \"x\\n\\u00e9\"], \"b\": {}}");
    REJECTS(g, "[1]");
    REJECTS(g, "{\"a\": 01}");
    REJECTS(g, "{\"a\" 1}");
    pith_grammar_release(g);

    g = compile(PITH_GRAMMAR_CHOICE, "[\"yes\", \"no\", \"maybe so\"]");
    ACCEPTS(g, "yes");
    ACCEPTS(g, "maybe so");
    REJECTS(g, "maybe");
    pith_grammar_release(g);
}

static void test_schema_and_regex(void) {
    struct { const char *schema, *yes[4], *no[4]; } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12},\"b\":{\"type\":\"string\",\"maxLength\":2}},\"required\":[\"a\"],\"additionalProperties\":false}",
         {"{\"a\":-3}", "{\"a\": 12, \"b\": \"xy\"}", "{ \"a\":0,\"b\":\"\"}"}, {"{\"a\":13}", "{\"b\":\"x\"}", "{\"a\":1,\"b\":\"xyz\"}", "{\"a\":1,\"c\":1}"}},
        {"{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"null\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
         {"{\"ab\":null,\"a\":true}", "{\"abc\":false}", "{}"}, {"{\"ab\":true}", "{\"x\":1}"}},
        {"{\"type\":\"array\",\"items\":{\"enum\":[1,\"x\",null]},\"minItems\":1,\"maxItems\":2}",
         {"[1]", "[\"x\", null]"}, {"[]", "[1,1,1]", "[2]"}},
        {"{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"const\":{\"k\":[true]}}]}",
         {"\"2024-02-28\"", "{\"k\":[true]}"}, {"\"2024-02-30\"", "\"2024-13-01\"", "{\"k\":[false]}"}},
        {"{\"$ref\":\"#/$defs/n\",\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}}}",
         {"[]", "[[],[[]]]"}, {"[[],[],[]]", "[1]"}},
        {"{\"type\":[\"number\",\"null\"],\"minimum\":2,\"maximum\":5}", {"2", "4.75", "5", "null"}, {"5.5", "1.9", "-3"}},
        {"{\"type\":\"string\",\"pattern\":\"^a\\\\d{2}(x|\\\")?$\"}", {"\"a12\"", "\"a00x\"", "\"a99\\\"\""}, {"\"a1\"", "\"ba12\"", "\"a12y\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"0123abcd-0000-1111-2222-333344445555\""}, {"\"0123abcd-0000-1111-2222\""}},
        /* formats sharing helper rules in one schema (each helper written once) */
        {"{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"string\",\"format\":"
         "\"time\"},{\"type\":\"string\",\"format\":\"date-time\"},{\"type\":\"string\",\"format\":\"email\"},{\"type\":"
         "\"string\",\"format\":\"hostname\"}]}}",
         {"[\"2024-01-31\",\"10:00:00Z\"]", "[\"2024-01-31T10:00:00Z\"]", "[\"a@b.io\",\"b.io\"]"}, {"[\"2024-01-32\"]", "[\"a@b\"]"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_grammar *g = compile(PITH_GRAMMAR_JSON_SCHEMA, cases[i].schema);
        CHECKF(g != NULL, "schema %d", (int)i);
        if (!g) continue;
        for (int k = 0; k < 4 && cases[i].yes[k]; k++) CHECKF(matches(g, cases[i].yes[k], strlen(cases[i].yes[k])), "schema %d should accept %s", (int)i, cases[i].yes[k]);
        for (int k = 0; k < 4 && cases[i].no[k]; k++) CHECKF(!matches(g, cases[i].no[k], strlen(cases[i].no[k])), "schema %d should reject %s", (int)i, cases[i].no[k]);
        pith_grammar_release(g);
    }
    pith_grammar *g = compile(PITH_GRAMMAR_REGEX, "(?:[a-c]+|\\d{2,3})[^\\s]?\\.?");
    ACCEPTS(g, "abc");
    ACCEPTS(g, "123x.");
    REJECTS(g, "1");
    REJECTS(g, "ab .");
    pith_grammar_release(g);
}

static void expect_error(pith_grammar_kind kind, const char *src, const char *needle) {
    pith_grammar *g = NULL;
    pith_err err = {{0}};
    int rc = pith_grammar_compile(V, kind, src, strlen(src), &g, &err);
    CHECKF(rc != 0 && g == NULL && strstr(err.msg, needle), "'%s': got rc %d, '%s', want '%s'", src, rc, err.msg,
           needle);
    pith_grammar_release(g);
}

static void test_errors(void) {
    expect_error(PITH_GRAMMAR_GBNF, "", "empty grammar");
    expect_error(PITH_GRAMMAR_GBNF, "start ::= \"a\"", "no 'root' rule");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= foo", "'foo' is used (line 1) but never defined");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"a", "unterminated string literal at line 1, column 10");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= [a-", "unterminated character class");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= (\"a\"", "unclosed '('");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= root \"a\" | \"b\"", "left-recursive");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", "left-recursive");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= (\"a\"?)*", "left-recursive");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"a\"{3,2}", "n < m");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"a\"{20000}", "over 10000");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"\\q\"", "unknown escape");
    expect_error(PITH_GRAMMAR_GBNF, "root ::= \"a\" @", "unexpected character at line 1, column 14");
    expect_error(PITH_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"uniqueItems\":true}}}",
                 "keyword 'uniqueItems' is not supported at /properties/a");
    expect_error(PITH_GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0.5}", "number bounds");
    expect_error(PITH_GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"#/$defs/x\"}", "points nowhere");
    expect_error(PITH_GRAMMAR_JSON_SCHEMA, "false", "matches nothing");
    expect_error(PITH_GRAMMAR_REGEX, "a\\1", "backreferences");
    expect_error(PITH_GRAMMAR_REGEX, "a$b", "anchors");
    expect_error(PITH_GRAMMAR_CHOICE, "[1]", "choice 0 is not a string");
    expect_error(PITH_GRAMMAR_CHOICE, "[]", "non-empty JSON array");
}

static void test_masks(void) {
    const char *grammars[] = {
        "root ::= \"ab\" | \"abc\" \"d\"*",
        "root ::= [a-c]* \"x\"+ [0-9]? (\"-\" | \"+\"){2,3}",
        "root ::= p\np ::= \"(\" p* \")\" | \"[\" p? \"]\"",
        "root ::= \"{\" ws (kv (\",\" ws kv)*)? \"}\"\nkv ::= \"\\\"\" [a-z]+ \"\\\":\" ws (\"true\" | \"null\" | [0-9]+)\nws ::= \" \"?",
    };
    for (size_t i = 0; i < sizeof grammars / sizeof grammars[0]; i++) {
        pith_grammar *g = compile(PITH_GRAMMAR_GBNF, grammars[i]);
        CHECK(g != NULL);
        if (!g) continue;
        for (uint64_t seed = 1; seed <= 20; seed++) check_masks(g, seed, 60);
        pith_grammar_release(g);
    }
    pith_grammar *g = compile(PITH_GRAMMAR_JSON, "");
    int total = 0;
    for (uint64_t seed = 1; seed <= 30; seed++) total += check_masks(g, seed, 80);
    CHECKF(total > 300, "json random walks took only %d steps", total);
    pith_grammar_release(g);
}

/* Ends: an end token only where the grammar may end; done once nothing may follow. */
static void test_end(void) {
    pith_grammar *g = compile(PITH_GRAMMAR_GBNF, "root ::= \"a\" \"b\"?");
    pith_grammar_matcher *m;
    pith_err err;
    CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
    CHECK(!pith_grammar_matcher_allows(m, END));
    CHECK(pith_grammar_matcher_accept(m, END, &err) != 0 && strstr(err.msg, "not allowed"));
    CHECK(pith_grammar_matcher_accept(m, 'a', &err) == 0);
    CHECK(pith_grammar_matcher_can_end(m) && !pith_grammar_matcher_is_done(m));
    CHECK(pith_grammar_matcher_allows(m, END) && pith_grammar_matcher_allows(m, 'b'));
    CHECK(!pith_grammar_matcher_allows(m, SPECIAL));
    CHECK(pith_grammar_matcher_accept(m, 'b', &err) == 0);
    CHECK(pith_grammar_matcher_is_done(m));
    CHECK(pith_grammar_matcher_accept(m, END, &err) == 0);
    CHECK(pith_grammar_matcher_is_done(m) && !pith_grammar_matcher_can_end(m));
    CHECK(pith_grammar_matcher_accept(m, 'a', &err) != 0);
    pith_grammar_matcher_free(m);
    pith_grammar_release(g);
}

/* A rule that recurses before a choice it never closes multiplies its stacks by the choice's
 * alternatives per step (here the UTF-8 ranges of [^b]) until the automaton hits its memory limit:
 * masks agree with allows() until then, the limit comes back as an error naming it, the grammar reports
 * itself outgrown, and other grammars still compile and match (found by fuzz_grammar: the mask of the
 * step before allowed a token whose step then overflowed). */
static void test_outgrown(void) {
    pith_grammar *g = compile(PITH_GRAMMAR_GBNF, "root ::= \"a\" root [^b]");
    CHECK(g != NULL);
    if (!g) return;
    pith_grammar_matcher *m;
    pith_err err = {{0}};
    CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
    size_t words = pith_grammar_mask_words(g);
    uint32_t *mask = malloc(words * sizeof *mask);
    int step = 0, failed = 0, differ = 0;
    for (; step < 40 && !failed; step++) {
        if (pith_grammar_matcher_fill_mask(m, mask, &err) < 0) { /* also once allows() below hit the limit */
            failed = 1;
            break;
        }
        for (int t = 0; t < NV; t++) {
            bool in = (mask[t >> 5] >> (t & 31)) & 1u;
            if (in != pith_grammar_matcher_allows(m, t) && !(in && pith_grammar_outgrown(g))) differ++;
        }
        CHECK(((mask['a' >> 5] >> ('a' & 31)) & 1u) && !((mask['b' >> 5] >> ('b' & 31)) & 1u));
        if (pith_grammar_matcher_accept(m, 'a', &err)) failed = 2;
    }
    CHECKF(differ == 0, "%d mask bits differ from allows() with the automaton within its limit", differ);
    /* this grammar does reach the limit today; an engine that shares the stacks' common parts would
     * not, and then nothing may have failed */
    CHECKF(failed ? strstr(err.msg, "outgrew its limits") && pith_grammar_outgrown(g) : !pith_grammar_outgrown(g),
           "after %d steps: %s", step, failed ? err.msg : "no limit reached");
    if (failed) CHECK(pith_grammar_matcher_fill_mask(m, mask, &err) < 0);
    free(mask);
    pith_grammar_matcher_free(m);
    pith_grammar_release(g);
    g = compile(PITH_GRAMMAR_GBNF, "root ::= \"a\" [^b]");
    CHECK(g && !pith_grammar_outgrown(g));
    if (!g) return;
    ACCEPTS(g, "ac");
    pith_grammar_release(g);
}

/* Twenty [a-z]{0,10000} in a row are ambiguous: after k letters a state holds every split of them, 20k
 * stacks, and every byte makes a new state. Memory alone let that run for 1.5 s in one request
 * (fuzz_grammar_size); the work budget (GR_MAX_WORK) ends it within a few hundred bytes with the limits'
 * error, and the matcher agrees with allows() until then. */
static void test_outgrown_by_work(void) {
    char src[1024] = "root ::=";
    for (int i = 0; i < 20; i++) strcat(src, " [a-z]{0,10000}");
    strcat(src, " \"!\"");
    pith_grammar *g = compile(PITH_GRAMMAR_GBNF, src);
    CHECK(g != NULL);
    if (!g) return;
    pith_grammar_matcher *m;
    pith_err err = {{0}};
    CHECK(pith_grammar_matcher_new(g, &m, &err) == 0);
    int step = 0, failed = 0;
    for (; step < 4000 && !failed; step++) {
        CHECK(pith_grammar_matcher_allows(m, 'a') || pith_grammar_outgrown(g));
        if (pith_grammar_matcher_accept(m, 'a', &err)) failed = 1;
    }
    CHECKF(failed && strstr(err.msg, "outgrew its limits") && pith_grammar_outgrown(g), "after %d bytes: %s", step,
           failed ? err.msg : "no limit reached");
    CHECKF(step > 100, "the limit came after only %d bytes", step);
    pith_grammar_matcher_free(m);
    pith_grammar_release(g);
}

int main(void) {
    V = small_vocab(&NV, &END, &SPECIAL);
    if (!V) return 1;
    test_constructs();
    test_schema_and_regex();
    test_errors();
    test_end();
    test_masks();
    test_outgrown();
    test_outgrown_by_work();
    pith_grammar_vocab_free(V);
    return check_summary("test_grammar");
}
