/* oneOf (src/grammar/schema_disjoint.c, json_schema.c): each rule that proves two branches disjoint,
 * the cases it must not claim (overlaps), and both outcomes of compiling a oneOf: strict mode refuses
 * one that is not provably exact (naming the schema path and anyOf), without strict it compiles as
 * anyOf; a provably exact one compiles in strict mode and accepts a value of each branch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "grammar/gr_internal.h"
#include "pith/grammar.h"

/* doc is {"a": schema, "b": schema, "$defs": ...}: whether a and b are proven disjoint. */
static bool disjoint(const char *doc) {
    cJSON *j = cJSON_Parse(doc);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s\n", doc);
        return false;
    }
    bool r = gr_schema_disjoint(j, cJSON_GetObjectItem(j, "a"), cJSON_GetObjectItem(j, "b"));
    bool r2 = gr_schema_disjoint(j, cJSON_GetObjectItem(j, "b"), cJSON_GetObjectItem(j, "a"));
    CHECKF(r == r2, "not symmetric: %s", doc);
    cJSON_Delete(j);
    return r;
}

#define DISJOINT(doc) CHECKF(disjoint(doc), "should be disjoint: %s", doc)
#define OVERLAP(doc) CHECKF(!disjoint(doc), "should not be proven disjoint: %s", doc)

static void test_rules(void) {
    /* 1. types */
    DISJOINT("{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}}");
    DISJOINT("{\"a\":{\"type\":[\"string\",\"null\"]},\"b\":{\"type\":[\"object\",\"array\"]}}");
    DISJOINT("{\"a\":{\"type\":\"object\"},\"b\":{\"const\":\"x\"}}");
    DISJOINT("{\"a\":{\"enum\":[1,2]},\"b\":{\"type\":\"boolean\"}}");
    DISJOINT("{\"a\":{\"$ref\":\"#/$defs/s\"},\"b\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}]},"
             "\"$defs\":{\"s\":{\"type\":\"string\"}}}");
    OVERLAP("{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"number\"}}");
    OVERLAP("{\"a\":{\"type\":\"string\",\"nullable\":true},\"b\":{\"type\":\"null\"}}");
    OVERLAP("{\"a\":{\"type\":\"string\"},\"b\":{\"maxLength\":3}}");   /* no type: every type */
    OVERLAP("{\"a\":{\"type\":\"string\"},\"b\":true}");
    OVERLAP("{\"a\":{\"$ref\":\"#/$defs/nowhere\"},\"b\":{\"type\":\"null\"}}");
    /* 2. enumerations */
    DISJOINT("{\"a\":{\"const\":\"cat\"},\"b\":{\"const\":\"dog\"}}");
    DISJOINT("{\"a\":{\"enum\":[\"x\",1,null]},\"b\":{\"enum\":[\"y\",2,false]}}");
    DISJOINT("{\"a\":{\"const\":{\"k\":1}},\"b\":{\"const\":{\"k\":2}}}");
    OVERLAP("{\"a\":{\"enum\":[\"x\",\"y\"]},\"b\":{\"enum\":[\"y\",\"z\"]}}");
    OVERLAP("{\"a\":{\"const\":1},\"b\":{\"const\":1.0}}");
    OVERLAP("{\"a\":{\"const\":\"x\"},\"b\":{\"type\":\"string\"}}");
    /* 3. a discriminator: a property both require, with disjoint schemas */
    DISJOINT("{\"a\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},\"n\":{\"type\":\"string\"}},"
             "\"required\":[\"kind\"]},\"b\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"dog\"}},"
             "\"required\":[\"kind\",\"x\"]}}");
    DISJOINT("{\"a\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"}},\"required\":[\"v\"]},"
             "\"b\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"string\"}},\"required\":[\"v\"]}}");
    OVERLAP("{\"a\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"}},\"required\":[\"kind\"]},"
            "\"b\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"dog\"}}}}"); /* b need not have it */
    /* b allows every non-object too, but a allows only objects, and as objects they differ */
    DISJOINT("{\"a\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"}},\"required\":[\"kind\"]},"
             "\"b\":{\"properties\":{\"kind\":{\"const\":\"dog\"}},\"required\":[\"kind\"]}}");
    /* both allow strings (no type on either) */
    OVERLAP("{\"a\":{\"properties\":{\"kind\":{\"const\":\"cat\"}},\"required\":[\"kind\"]},"
            "\"b\":{\"properties\":{\"kind\":{\"const\":\"dog\"}},\"required\":[\"kind\"]}}");
    /* 4. a property one requires and the other forbids */
    DISJOINT("{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{}},\"required\":[\"x\"],\"additionalProperties\":false},"
             "\"b\":{\"type\":\"object\",\"properties\":{\"y\":{}},\"required\":[\"y\"],\"additionalProperties\":false}}");
    DISJOINT("{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{}},\"required\":[\"x\"]},"
             "\"b\":{\"type\":\"object\",\"properties\":{\"y\":{}},\"additionalProperties\":false}}");
    OVERLAP("{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{}},\"required\":[\"x\"]},"
            "\"b\":{\"type\":\"object\",\"properties\":{\"y\":{}},\"required\":[\"y\"]}}"); /* {x, y} is both */
    OVERLAP("{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{}},\"additionalProperties\":false},"
            "\"b\":{\"type\":\"object\",\"properties\":{\"y\":{}},\"additionalProperties\":false}}"); /* {} is both */
    /* objects that may also be null share null */
    OVERLAP("{\"a\":{\"type\":[\"object\",\"null\"],\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
            "\"b\":{\"type\":[\"object\",\"null\"],\"properties\":{\"k\":{\"const\":2}},\"required\":[\"k\"]}}");
}

static pith_grammar_vocab *V;

static int compile(pith_grammar_kind kind, const char *src, pith_grammar **g, pith_err *err) {
    *g = NULL;
    return pith_grammar_compile(V, kind, src, strlen(src), g, err);
}

static bool matches(pith_grammar *g, const char *s) {
    pith_grammar_matcher *m;
    pith_err err;
    if (pith_grammar_matcher_new(g, &m, &err)) return false;
    bool ok = pith_grammar_matcher_accept_bytes(m, s, strlen(s), &err) == 0 && pith_grammar_matcher_can_end(m);
    pith_grammar_matcher_free(m);
    return ok;
}

static void test_outcomes(void) {
    const char *overlap = "{\"type\":\"object\",\"properties\":{\"pet\":{\"oneOf\":[{\"type\":\"string\"},"
                          "{\"type\":\"string\",\"maxLength\":3}]}},\"required\":[\"pet\"]}";
    pith_grammar *g;
    pith_err err = {{0}};
    /* strict: refused, naming the path, the branches and anyOf */
    CHECK(compile(PITH_GRAMMAR_JSON_SCHEMA_STRICT, overlap, &g, &err) != 0 && g == NULL);
    CHECKF(strstr(err.msg, "/properties/pet") && strstr(err.msg, "oneOf branches 0 and 1") && strstr(err.msg, "anyOf"),
           "message: %s", err.msg);
    char *gbnf = NULL;
    CHECK(pith_grammar_json_schema_to_gbnf_strict(overlap, strlen(overlap), "x", true, &gbnf, &err) != 0 && !gbnf);
    /* not strict: compiled as anyOf */
    CHECK(compile(PITH_GRAMMAR_JSON_SCHEMA, overlap, &g, &err) == 0);
    CHECK(g && matches(g, "{\"pet\":\"ab\"}") && matches(g, "{\"pet\":\"abcdef\"}"));
    pith_grammar_release(g);
    /* provably exact: strict compiles, each branch's values pass, others do not */
    const char *exact =
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},\"lives\":{\"type\":\"integer\"}},"
        "\"required\":[\"kind\",\"lives\"],\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"kind\":"
        "{\"const\":\"dog\"},\"good\":{\"type\":\"boolean\"}},\"required\":[\"kind\",\"good\"],\"additionalProperties\":"
        "false},{\"type\":\"string\"},{\"type\":\"null\"}]}";
    int rc = compile(PITH_GRAMMAR_JSON_SCHEMA_STRICT, exact, &g, &err);
    CHECKF(rc == 0, "exact oneOf in strict mode: %s", err.msg);
    if (!rc) {
        CHECK(matches(g, "{\"kind\":\"cat\",\"lives\":9}"));
        CHECK(matches(g, "{\"kind\":\"dog\",\"good\":true}"));
        CHECK(matches(g, "\"x\"") && matches(g, "null"));
        CHECK(!matches(g, "{\"kind\":\"cat\",\"good\":true}"));
        pith_grammar_release(g);
    }
    /* a oneOf nested in a branch is checked too */
    const char *nested = "{\"anyOf\":[{\"type\":\"null\"},{\"oneOf\":[{\"enum\":[1,2]},{\"enum\":[2,3]}]}]}";
    CHECK(compile(PITH_GRAMMAR_JSON_SCHEMA_STRICT, nested, &g, &err) != 0 && strstr(err.msg, "/anyOf/1"));
    CHECK(compile(PITH_GRAMMAR_JSON_SCHEMA, nested, &g, &err) == 0);
    pith_grammar_release(g);
}

int main(void) {
    test_rules();
    static const char *const bytes[] = {"{", "}", "\"", ":", ",", "a", "b", "c", "d", "e", "f", "g", "i", "k", "l",
                                        "n", "o", "p", "s", "t", "u", "v", "x", "9", "1", "2", "3", " ", "r", "ab"};
    size_t lens[sizeof bytes / sizeof bytes[0]];
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) lens[i] = strlen(bytes[i]);
    pith_err err = {{0}};
    CHECK(pith_grammar_vocab_new((int)(sizeof bytes / sizeof bytes[0]), bytes, lens, NULL, &V, &err) == 0);
    if (V) test_outcomes();
    pith_grammar_vocab_free(V);
    return check_summary("test_grammar_oneof");
}
