/* The tool-call output formats of Qwen3-Coder / Qwen3.5 (XML), GLM-4.5..4.7, DeepSeek V3 / V3.1, Kimi K2,
 * Gemma 4 and Mistral's [CALL_ID] (src/server/tool_parse.h), calls inside reasoning, malformed output and
 * output cut off by max_tokens (tp_finish_truncated). Every input is also fed split in two at every byte,
 * one byte at a time and in random pieces, which must all give the same events as the whole input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "server/tool_parse.h"

typedef struct result {
    buf content, reasoning;
    char names[8][64];
    buf args[8];
    int n_calls;
    bool in_call, bad_order;
    unsigned notes;
} result;

static void sink(void *user, tp_event ev, const char *s, size_t n) {
    result *r = user;
    switch (ev) {
    case TP_CONTENT:
    case TP_REASONING:
        if (r->in_call) r->bad_order = true;
        buf_append(ev == TP_CONTENT ? &r->content : &r->reasoning, s, n);
        break;
    case TP_CALL_BEGIN:
        if (r->in_call || r->n_calls >= 8 || n == 0 || n >= 64) {
            r->bad_order = true;
            return;
        }
        memcpy(r->names[r->n_calls], s, n);
        r->names[r->n_calls][n] = 0;
        r->in_call = true;
        break;
    case TP_CALL_ARGS:
        if (!r->in_call) r->bad_order = true;
        else buf_append(&r->args[r->n_calls], s, n);
        break;
    case TP_CALL_END:
        if (!r->in_call) r->bad_order = true;
        r->in_call = false;
        r->n_calls++;
        break;
    }
}

static void result_free(result *r) {
    buf_free(&r->content);
    buf_free(&r->reasoning);
    for (int i = 0; i < 8; i++) buf_free(&r->args[i]);
}

static const char *str(const buf *b) { return b->data ? b->data : ""; }

static unsigned rng = 12345;
static size_t rnd(size_t n) {
    rng = rng * 1103515245u + 12345u;
    return (rng >> 16) % n;
}

/* split 0: whole; > 0: in two at that byte; -1: byte by byte; -2: random pieces. */
static void parse(const tp_config *cfg, const char *text, long split, bool cut, result *r) {
    memset(r, 0, sizeof *r);
    tp_parser p;
    tp_init(&p, cfg, sink, r);
    size_t n = strlen(text);
    if (split == -1) {
        for (size_t i = 0; i < n; i++) CHECK(tp_feed(&p, text + i, 1) == 0);
    } else if (split == -2) {
        for (size_t i = 0; i < n;) {
            size_t k = 1 + rnd(7);
            if (k > n - i) k = n - i;
            CHECK(tp_feed(&p, text + i, k) == 0);
            i += k;
        }
    } else {
        size_t k = (size_t)split < n ? (size_t)split : n;
        CHECK(tp_feed(&p, text, k) == 0);
        CHECK(tp_feed(&p, text + k, n - k) == 0);
    }
    CHECK((cut ? tp_finish_truncated(&p) : tp_finish(&p)) == 0);
    r->notes = p.notes;
    tp_free(&p);
}

typedef struct expect {
    const char *content, *reasoning;
    int n_calls;
    const char *names[3], *args[3];
    int notes; /* -1: not checked */
} expect;

static int n_cases;

static void check_run(const char *what, const tp_config *cfg, const char *text, const expect *e, bool cut) {
    long n = (long)strlen(text);
    for (long split = -2; split <= n + 20; split++) {
        result r;
        parse(cfg, text, split > n ? -2 : split, cut, &r);
        bool ok = !r.bad_order && !r.in_call && !strcmp(str(&r.content), e->content ? e->content : "") &&
                  !strcmp(str(&r.reasoning), e->reasoning ? e->reasoning : "") && r.n_calls == e->n_calls &&
                  (e->notes < 0 || (unsigned)e->notes == r.notes);
        for (int i = 0; ok && i < e->n_calls; i++)
            ok = !strcmp(r.names[i], e->names[i]) && !strcmp(str(&r.args[i]), e->args[i]);
        CHECKF(ok, "%s (split %ld%s): content [%s] reasoning [%s] calls %d notes %u%s%s%s%s", what, split,
               cut ? ", cut" : "", str(&r.content), str(&r.reasoning), r.n_calls, r.notes, r.n_calls ? " first " : "",
               r.n_calls ? r.names[0] : "", r.n_calls ? " " : "", r.n_calls ? str(&r.args[0]) : "");
        result_free(&r);
        if (!ok) break;
    }
    n_cases++;
}

static void check_case(const char *what, const tp_config *cfg, const char *text, const expect *e) {
    check_run(what, cfg, text, e, false);
}
static void check_cut(const char *what, const tp_config *cfg, const char *text, const expect *e) {
    check_run(what, cfg, text, e, true);
}

#define DS_CALLS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"opts\": {\"type\": "
    "\"object\"}, \"metric\": {\"type\": [\"boolean\", \"null\"]}, \"unit\": {\"enum\": [\"c\", \"f\"]}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}]";

static void test_qwen3_xml(const cJSON *tools) {
    tp_config c = {.format = TP_FMT_QWEN3_XML, .tools = true, .parallel = true, .think = true, .tool_defs = tools};
    check_case("qwen3 xml: typed parameters", &c,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
               "</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 3, \"metric\": true, \"unit\": \"c\"}"}, 0});
    check_case("qwen3 xml: a multi-line string with quotes and <", &c,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nline 1\n\"q\" a<b\\\n\n</parameter>\n</function>\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"line 1\\n\\\"q\\\" a<b\\\\\\n\"}"}, 0});
    check_case("qwen3 xml: not JSON where the schema wants a number, an object, an undescribed parameter", &c,
               "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n"
               "</parameter>\n<parameter=x>\n42\n</parameter>\n</function>\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"days\": \"three\", \"opts\": {\"a\": [1]}, \"x\": \"42\"}"}, 0});
    check_case("qwen3 xml: </parameter> left out", &c,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</function>\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Oslo\", \"days\": 2}"}, 0});
    check_case("qwen3 xml: text, then two calls, one without parameters", &c,
               "Checking.\n<tool_call>\n<function=noop>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
               "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
               &(expect){"Checking.\n", "", 2, {"noop", "get_weather"}, {"{}", "{\"city\": \"Rome\"}"}, 0});
    check_case("qwen3 xml: a Hermes JSON body is read too", &c,
               "<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"a\": 1}}\n</tool_call>",
               &(expect){"", "", 1, {"noop"}, {"{\"a\": 1}"}, 0});
    check_case("qwen3 xml: a call inside reasoning", &c,
               "<think>\nNeed the weather.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
               "</function>\n</tool_call>\n</think>\n\nDone.",
               &(expect){"Done.", "Need the weather.", 1, {"get_weather"}, {"{\"city\": \"Oslo\"}"}, TP_NOTE_IN_REASONING});
    check_case("qwen3 xml: a mention of <tool_call> inside reasoning stays reasoning", &c,
               "<think>I could use <tool_call> here.</think>Hi",
               &(expect){"Hi", "I could use <tool_call> here.", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("qwen3 xml: malformed body is content", &c, "<tool_call>hello</tool_call> ok",
               &(expect){"<tool_call>hello</tool_call> ok", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("qwen3 xml: a bad function name is content", &c, "<tool_call>\n<function=a b>\n</function>",
               &(expect){"<tool_call>\n<function=a b>\n</function>", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("qwen3 xml: truncated marker at the end is content", &c, "See <tool_call>\n<funct",
               &(expect){"See <tool_call>\n<funct", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("qwen3 xml: stopped after a parameter: the call is complete", &c,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}, 0});
    check_cut("qwen3 xml: cut inside a value", &c, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
              &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Par"}, TP_NOTE_CUT_CALL});
    check_cut("qwen3 xml: cut inside the name", &c, "<tool_call>\n<function=get_wea",
              &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
}

static void test_glm(const cJSON *tools) {
    tp_config c = {.format = TP_FMT_GLM, .tools = true, .parallel = true, .think = true, .tool_defs = tools};
    check_case("glm 4.5", &c,
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
               "<arg_value>2</arg_value>\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 2}"}, 0});
    check_case("glm 4.7 (no newlines), two calls", &c,
               "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>opts</arg_key>"
               "<arg_value>{\"x\": null}</arg_value></tool_call><tool_call>noop</tool_call>",
               &(expect){"", "", 2, {"get_weather", "noop"}, {"{\"city\": \"Rome\", \"opts\": {\"x\": null}}", "{}"}, 0});
    check_case("glm: a call before </think>", &c,
               "<think>hmm<tool_call>get_weather<arg_key>city</arg_key><arg_value>X</arg_value></tool_call></think>ok",
               &(expect){"ok", "hmm", 1, {"get_weather"}, {"{\"city\": \"X\"}"}, TP_NOTE_IN_REASONING});
    check_case("glm: malformed body is content", &c, "<tool_call>not json</tool_call> ok",
               &(expect){"<tool_call>not json</tool_call> ok", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("glm: a key without a value ends the call", &c,
               "<tool_call>noop<arg_key>a</arg_key>oops</tool_call> rest",
               &(expect){"oops</tool_call> rest", "", 1, {"noop"}, {"{}"}, TP_NOTE_FELL_BACK});
    check_cut("glm: cut inside the name", &c, "<tool_call>get_wea", &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    check_cut("glm: cut inside a value", &c, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa",
              &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Pa"}, TP_NOTE_CUT_CALL});
}

static void test_deepseek(void) {
    tp_config c = {.format = TP_FMT_DEEPSEEK, .tools = true, .parallel = true, .think = true};
    check_case("deepseek v3.1: two calls", &c,
               DS_CALLS DS_CALL "get_weather" DS_SEP "{\"city\": \"Paris\"}" DS_END DS_CALL "noop" DS_SEP "{}" DS_END DS_CALLS_END,
               &(expect){"", "", 2, {"get_weather", "noop"}, {"{\"city\": \"Paris\"}", "{}"}, 0});
    check_case("deepseek v3: fenced JSON", &c,
               "Sure." DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DS_END DS_CALLS_END,
               &(expect){"Sure.", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}, 0});
    check_case("deepseek: a call without the section marker, text after", &c,
               "<think>plan</think>" DS_CALL "noop" DS_SEP " {\"a\": 1} " DS_END " Done.",
               &(expect){"Done.", "plan", 1, {"noop"}, {"{\"a\": 1}"}, 0});
    check_case("deepseek: a section with no call is content", &c, DS_CALLS "oops",
               &(expect){DS_CALLS "oops", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_case("deepseek: an empty name is content", &c, DS_CALLS DS_CALL DS_SEP "{}" DS_END,
               &(expect){DS_CALLS DS_CALL DS_SEP "{}" DS_END, "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_cut("deepseek: cut inside the header", &c, "Hi" DS_CALLS DS_CALL "get_wea",
              &(expect){"Hi", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    check_cut("deepseek: cut inside the arguments", &c, DS_CALLS DS_CALL "get_weather" DS_SEP "{\"city\": \"Pa",
              &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Pa"}, TP_NOTE_CUT_CALL});
    tp_config one = c;
    one.parallel = false;
    check_case("deepseek: parallel off keeps the first", &one,
               DS_CALLS DS_CALL "a" DS_SEP "{}" DS_END DS_CALL "b" DS_SEP "{}" DS_END DS_CALLS_END,
               &(expect){"", "", 1, {"a"}, {"{}"}, 0});
}

static void test_kimi(void) {
    tp_config c = {.format = TP_FMT_KIMI_K2, .tools = true, .parallel = true, .think = true};
    check_case("kimi k2: two calls", &c,
               "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
               "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.noop:1"
               "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
               &(expect){"Let me check.", "", 2, {"get_weather", "noop"}, {"{\"city\": \"Paris\"}", "{}"}, 0});
    check_case("kimi k2: a bad name is content", &c,
               "<|tool_calls_section_begin|><|tool_call_begin|>functions.bad name:0<|tool_call_argument_begin|>{}",
               &(expect){"<|tool_calls_section_begin|><|tool_call_begin|>functions.bad name:0<|tool_call_argument_begin|>{}",
                         "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_cut("kimi k2: cut in the section marker (not forced: text)", &c, "ok <|tool_calls_sec",
              &(expect){"ok <|tool_calls_sec", "", 0, {0}, {0}, 0});
    tp_config f = c;
    f.forced = true;
    check_cut("kimi k2: a forced call cut in its marker leaves no marker text", &f, "<|tool_calls_sec",
              &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    check_cut("kimi k2: cut between calls", &c,
              "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_ca",
              &(expect){"", "", 1, {"noop"}, {"{}"}, TP_NOTE_DROPPED});
}

static void test_gemma4(void) {
    tp_config c = {.format = TP_FMT_GEMMA4, .tools = true, .parallel = true};
    check_case("gemma 4: one call", &c, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\":\"Paris\",\"days\":3}"}, 0});
    check_case("gemma 4: nested values, two calls", &c,
               "<|tool_call>call:f{a:{b:[1,<|\"|>x,y<|\"|>]},c:true}<tool_call|><|tool_call>call:noop{}<tool_call|>",
               &(expect){"", "", 2, {"f", "noop"}, {"{\"a\":{\"b\":[1,\"x,y\"]},\"c\":true}", "{}"}, 0});
    check_case("gemma 4: quotes and newlines in a string; JSON passes through", &c,
               "<|tool_call>call:f{s:<|\"|>he said \"hi\"\n<|\"|>, \"q\": \"a\\\"}\"}<tool_call|>",
               &(expect){"", "", 1, {"f"}, {"{\"s\":\"he said \\\"hi\\\"\\n\", \"q\": \"a\\\"}\"}"}, 0});
    check_case("gemma 4: malformed is content", &c, "<|tool_call>hello", &(expect){"<|tool_call>hello", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    check_cut("gemma 4: cut in a string", &c, "<|tool_call>call:f{s:<|\"|>abc",
              &(expect){"", "", 1, {"f"}, {"{\"s\":\"abc"}, TP_NOTE_CUT_CALL});
}

static void test_mistral_and_truncation(void) {
    tp_config m = {.format = TP_FMT_MISTRAL, .tools = true, .parallel = true};
    check_case("mistral [CALL_ID]", &m, "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\"}",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}, 0});
    check_cut("mistral: cut in the name", &m, "[TOOL_CALLS]get_wea", &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    tp_config h = {.format = TP_FMT_HERMES, .tools = true, .parallel = true};
    check_cut("hermes: cut inside the name drops the partial call", &h, "<tool_call>\n{\"name\": \"get_wea",
              &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    check_cut("hermes: cut after the name: a call with no arguments yet", &h, "<tool_call>\n{\"name\": \"get_weather\"",
              &(expect){"", "", 1, {"get_weather"}, {""}, TP_NOTE_CUT_CALL});
    check_cut("hermes: cut in the arguments", &h, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"b",
              &(expect){"", "", 1, {"f"}, {"{\"a\": \"b"}, TP_NOTE_CUT_CALL});
    check_cut("hermes: text then a cut call", &h, "Sure. <tool_call>{\"na", &(expect){"Sure. ", "", 0, {0}, {0}, TP_NOTE_DROPPED});
    check_case("hermes: not cut: a broken call is content", &h, "<tool_call>\n{\"name\": \"get_wea",
               &(expect){"<tool_call>\n{\"name\": \"get_wea", "", 0, {0}, {0}, TP_NOTE_FELL_BACK});
    tp_config l = {.format = TP_FMT_LLAMA3, .tools = true, .parallel = true};
    check_cut("llama: a cut reply that starts with { is content when not forced", &l, "{\"na",
              &(expect){"{\"na", "", 0, {0}, {0}, 0});
    l.forced = true;
    check_cut("llama: forced, it is a dropped call", &l, "{\"na", &(expect){"", "", 0, {0}, {0}, TP_NOTE_DROPPED});
}

int main(void) {
    cJSON *tools = cJSON_Parse(TOOLS);
    CHECK(tools != NULL);
    CHECK(tp_param_is_string(NULL) && tp_param_is_string(cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "function"), "parameters"), "properties"), "unit")));
    test_qwen3_xml(tools);
    test_glm(tools);
    test_deepseek();
    test_kimi();
    test_gemma4();
    test_mistral_and_truncation();
    cJSON_Delete(tools);
    printf("%d cases, each whole, split at every byte, byte by byte and in random pieces\n", n_cases);
    return check_summary("test_tool_parse_formats");
}
