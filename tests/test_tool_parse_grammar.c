/* The forced-call grammars of the XML and special-token formats (src/server/tools_grammar_formats.c):
 * each compiles, accepts the call the model should write (which the parser then reads as that call with
 * JSON arguments), and refuses calls that break the format or the parameters' schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pith/grammar.h"
#include "server/tool_parse.h"
#include "server/tools_grammar_formats.h"

static pith_grammar_vocab *V;

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}},"
    " \"required\": [\"city\", \"unit\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}]";

static pith_grammar *grammar(tp_format fmt, cJSON *tools, int max) {
    chat_tools t = {.parse = {.format = fmt, .tools = true, .parallel = max > 1}, .choice = TOOL_CHOICE_REQUIRED, .tools = tools};
    buf g = {0};
    api_error err = {0};
    CHECK(tools_grammar_format_calls(&t, max, &g, &err) == 1);
    buf_puts(&g, "root ::= calls\n");
    pith_grammar *out = NULL;
    pith_err e = {{0}};
    int rc = pith_grammar_compile(V, PITH_GRAMMAR_GBNF, g.data, g.len, &out, &e);
    CHECKF(rc == 0, "format %d: %s\n%s", fmt, e.msg, g.data);
    buf_free(&g);
    return rc ? NULL : out;
}

static bool matches(pith_grammar *g, const char *s) {
    pith_grammar_matcher *m;
    pith_err err;
    if (!g || pith_grammar_matcher_new(g, &m, &err)) return false;
    bool ok = pith_grammar_matcher_accept_bytes(m, s, strlen(s), &err) == 0 && pith_grammar_matcher_can_end(m);
    pith_grammar_matcher_free(m);
    return ok;
}

typedef struct got {
    int calls;
    buf name, args;
} got;

static void sink(void *user, tp_event ev, const char *s, size_t n) {
    got *r = user;
    if (ev == TP_CALL_BEGIN && !r->calls) buf_append(&r->name, s, n);
    if (ev == TP_CALL_ARGS && !r->calls) buf_append(&r->args, s, n);
    if (ev == TP_CALL_END) r->calls++;
}

/* The parser reads s as calls: the first is name with args. */
static void parses(tp_format fmt, cJSON *tools, const char *s, int calls, const char *name, const char *args) {
    tp_config c = {.format = fmt, .tools = true, .parallel = true, .tool_defs = tools};
    got r = {0};
    tp_parser p;
    tp_init(&p, &c, sink, &r);
    tp_feed(&p, s, strlen(s));
    tp_finish(&p);
    tp_free(&p);
    CHECKF(r.calls == calls && r.name.data && !strcmp(r.name.data, name) && r.args.data && !strcmp(r.args.data, args),
           "format %d: %d calls, %s %s", fmt, r.calls, r.name.data ? r.name.data : "", r.args.data ? r.args.data : "");
    buf_free(&r.name);
    buf_free(&r.args);
}

#define DS(x) "<\xef\xbd\x9ctool\xe2\x96\x81" x "\xef\xbd\x9c>"

int main(void) {
    const char *bytes[257];
    size_t lens[257];
    static char one[256][2];
    for (int i = 0; i < 256; i++) {
        one[i][0] = (char)i;
        bytes[i] = one[i];
        lens[i] = 1;
    }
    bytes[256] = "";
    lens[256] = 0;
    pith_err err = {{0}};
    CHECK(pith_grammar_vocab_new(256, bytes, lens, NULL, &V, &err) == 0);
    cJSON *tools = cJSON_Parse(TOOLS);

    pith_grammar *g = grammar(TP_FMT_QWEN3_XML, tools, 2);
    const char *q = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
                    "</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>";
    CHECK(matches(g, q));
    CHECK(matches(g, "<tool_call>\n<function=noop>\n</function>\n</tool_call>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>"));
    CHECK(!matches(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>")); /* unit required */
    CHECK(!matches(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n<parameter=days>\nmany\n"
                      "</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>"));
    CHECK(!matches(g, "<tool_call>\n<function=other>\n</function>\n</tool_call>"));
    parses(TP_FMT_QWEN3_XML, tools, q, 1, "get_weather", "{\"city\": \"New York\", \"days\": 3, \"unit\": \"c\"}");
    pith_grammar_release(g);

    g = grammar(TP_FMT_GLM, tools, 1);
    const char *z = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n"
                    "<arg_value>f</arg_value>\n</tool_call>";
    CHECK(matches(g, z));
    CHECK(!matches(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n"
                      "<arg_value>kelvin</arg_value>\n</tool_call>"));
    parses(TP_FMT_GLM, tools, z, 1, "get_weather", "{\"city\": \"Paris\", \"unit\": \"f\"}");
    pith_grammar_release(g);

    g = grammar(TP_FMT_DEEPSEEK, tools, 4);
    const char *d = DS("calls\xe2\x96\x81" "begin") DS("call\xe2\x96\x81" "begin") "get_weather" DS("sep")
        "{\"city\": \"Rome\", \"unit\": \"c\"}" DS("call\xe2\x96\x81" "end") DS("calls\xe2\x96\x81" "end");
    CHECK(matches(g, d));
    parses(TP_FMT_DEEPSEEK, tools, d, 1, "get_weather", "{\"city\": \"Rome\", \"unit\": \"c\"}");
    pith_grammar_release(g);

    g = grammar(TP_FMT_KIMI_K2, tools, 4);
    const char *k = "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop:0<|tool_call_argument_begin|>{}"
                    "<|tool_call_end|><|tool_call_begin|>functions.noop:1<|tool_call_argument_begin|>{\"a\": 1}"
                    "<|tool_call_end|><|tool_calls_section_end|>";
    CHECK(matches(g, k));
    parses(TP_FMT_KIMI_K2, tools, k, 2, "noop", "{}");
    pith_grammar_release(g);

    g = grammar(TP_FMT_GEMMA4, tools, 1);
    const char *m = "<|tool_call>call:get_weather{\"city\": \"Oslo\", \"unit\": \"c\"}<tool_call|>";
    CHECK(matches(g, m));
    CHECK(!matches(g, "<|tool_call>call:get_weather{\"city\": \"Oslo\"}<tool_call|>"));
    parses(TP_FMT_GEMMA4, tools, m, 1, "get_weather", "{\"city\": \"Oslo\", \"unit\": \"c\"}");
    pith_grammar_release(g);

    cJSON_Delete(tools);
    pith_grammar_vocab_free(V);
    return check_summary("test_tool_parse_grammar");
}
