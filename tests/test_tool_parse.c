/* The tool-call / reasoning output parser (src/server/tool_parse.h) on each family's text: whole, split
 * in two at every byte, and fed one byte at a time, which must all give the same content, reasoning and
 * calls; malformed calls come out as content; events arrive in a legal order (a call's name before its
 * arguments, every call ended). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/tool_parse.h"

typedef struct result {
    buf content, reasoning;
    char names[8][64];
    buf args[8];
    int n_calls;
    bool in_call;
    bool bad_order;
} result;

static void sink(void *user, tp_event ev, const char *s, size_t n) {
    result *r = user;
    switch (ev) {
    case TP_CONTENT:
        if (r->in_call) r->bad_order = true;
        buf_append(&r->content, s, n);
        break;
    case TP_REASONING:
        if (r->in_call) r->bad_order = true;
        buf_append(&r->reasoning, s, n);
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

/* Feeds text in pieces: split == 0 whole, split > 0 at that byte, split < 0 one byte at a time. */
static void parse(const tp_config *cfg, const char *text, long split, result *r) {
    memset(r, 0, sizeof *r);
    tp_parser p;
    tp_init(&p, cfg, sink, r);
    size_t n = strlen(text);
    if (split < 0) {
        for (size_t i = 0; i < n; i++) CHECK(tp_feed(&p, text + i, 1) == 0);
    } else {
        size_t k = (size_t)split < n ? (size_t)split : n;
        CHECK(tp_feed(&p, text, k) == 0);
        CHECK(tp_feed(&p, text + k, n - k) == 0);
    }
    CHECK(tp_finish(&p) == 0);
    tp_free(&p);
}

typedef struct expect {
    const char *content, *reasoning;
    int n_calls;
    const char *names[3], *args[3];
} expect;

static int n_cases;

static void check_case(const char *what, const tp_config *cfg, const char *text, const expect *e) {
    long n = (long)strlen(text);
    for (long split = -1; split <= n; split++) {
        result r;
        parse(cfg, text, split, &r);
        bool ok = !r.bad_order && !r.in_call && !strcmp(str(&r.content), e->content ? e->content : "") &&
                  !strcmp(str(&r.reasoning), e->reasoning ? e->reasoning : "") && r.n_calls == e->n_calls;
        for (int i = 0; ok && i < e->n_calls; i++)
            ok = !strcmp(r.names[i], e->names[i]) && !strcmp(str(&r.args[i]), e->args[i]);
        CHECKF(ok, "%s (split %ld): content [%s] reasoning [%s] calls %d%s%s%s%s", what, split, str(&r.content),
               str(&r.reasoning), r.n_calls, r.n_calls ? " first " : "", r.n_calls ? r.names[0] : "",
               r.n_calls ? " " : "", r.n_calls ? str(&r.args[0]) : "");
        result_free(&r);
        if (!ok) break;
    }
    n_cases++;
}

int main(void) {
    tp_config hermes = {.format = TP_FMT_HERMES, .tools = true, .parallel = true, .think = true};
    check_case("hermes one call", &hermes,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}});
    check_case("hermes text then two calls", &hermes,
               "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
               "<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>",
               &(expect){"Let me look.\n", "", 2, {"a", "b"}, {"{\"x\": [1, {\"y\": \"}\"}]}", "{}"}});
    check_case("hermes arguments as a string", &hermes,
               "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
               &(expect){"", "", 1, {"f"}, {"{\"q\": 1}"}});
    check_case("hermes no arguments, escaped name", &hermes, "<tool_call>{\"name\": \"f\\u0031\"}</tool_call>",
               &(expect){"", "", 1, {"f1"}, {"{}"}});
    check_case("hermes malformed body is content", &hermes, "<tool_call>not json</tool_call> ok",
               &(expect){"<tool_call>not json</tool_call> ok", "", 0, {0}, {0}});
    check_case("hermes object without name is content", &hermes, "<tool_call>{\"arguments\": {}}</tool_call>",
               &(expect){"<tool_call>{\"arguments\": {}}</tool_call>", "", 0, {0}, {0}});
    check_case("hermes truncated before the name", &hermes, "Hi <tool_call>{\"na",
               &(expect){"Hi <tool_call>{\"na", "", 0, {0}, {0}});
    check_case("hermes truncated in the arguments", &hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"b",
               &(expect){"", "", 1, {"f"}, {"{\"a\": \"b"}});
    check_case("hermes a lone <", &hermes, "a < b <tool", &(expect){"a < b <tool", "", 0, {0}, {0}});
    check_case("hermes think then call", &hermes,
               "<think>\nI should call f.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": -1.5e3}}\n</tool_call>",
               &(expect){"", "I should call f.", 1, {"f"}, {"{\"n\": -1.5e3}"}});
    check_case("hermes scalar arguments", &hermes, "<tool_call>{\"name\": \"f\", \"arguments\": 12}</tool_call>",
               &(expect){"", "", 1, {"f"}, {"12"}});
    tp_config hermes_one = hermes;
    hermes_one.parallel = false;
    check_case("hermes parallel off keeps the first", &hermes_one,
               "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
               &(expect){"", "", 1, {"a"}, {"{}"}});
    tp_config no_tools = hermes;
    no_tools.tools = false;
    check_case("tools off: calls are content", &no_tools, "<tool_call>{\"name\": \"a\"}</tool_call>",
               &(expect){"<tool_call>{\"name\": \"a\"}</tool_call>", "", 0, {0}, {0}});

    tp_config r1 = {.format = TP_FMT_NONE, .think = true, .in_think = true};
    check_case("deepseek-r1 opened by the prompt", &r1, "\nWe add 2 and 2.\n</think>\n\nThe answer is 4.",
               &(expect){"The answer is 4.", "We add 2 and 2.", 0, {0}, {0}});
    check_case("reasoning cut off", &r1, "thinking... ", &(expect){"", "thinking... ", 0, {0}, {0}});
    tp_config plain = {.format = TP_FMT_NONE};
    check_case("plain text is untouched", &plain, "  <think>x</think> {\"name\": 1}",
               &(expect){"  <think>x</think> {\"name\": 1}", "", 0, {0}, {0}});

    tp_config llama = {.format = TP_FMT_LLAMA3, .tools = true, .parallel = true};
    check_case("llama bare json", &llama, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
               &(expect){"", "", 1, {"get_weather"}, {"{\"city\": \"Rome\"}"}});
    check_case("llama two calls with ;", &llama,
               " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": true}}",
               &(expect){"", "", 2, {"a", "b"}, {"{}", "{\"k\": true}"}});
    check_case("llama python_tag", &llama, "<|python_tag|>{\"name\": \"s\", \"parameters\": {\"q\": \"x\"}}",
               &(expect){"", "", 1, {"s"}, {"{\"q\": \"x\"}"}});
    check_case("llama json answer that is not a call", &llama, "{\"answer\": 42} is the JSON",
               &(expect){"{\"answer\": 42} is the JSON", "", 0, {0}, {0}});
    check_case("llama text", &llama, "Hello {\"name\": \"a\"}", &(expect){"Hello {\"name\": \"a\"}", "", 0, {0}, {0}});

    tp_config mistral = {.format = TP_FMT_MISTRAL, .tools = true, .parallel = true};
    check_case("mistral v0.3 array", &mistral,
               "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
               &(expect){"", "", 2, {"a", "b"}, {"{\"x\": 1}", "{}"}});
    check_case("mistral v11", &mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]b[ARGS]{}",
               &(expect){"", "", 2, {"get_weather", "b"}, {"{\"city\": \"Oslo\"}", "{}"}});
    check_case("mistral v11, whitespace before the arguments", &mistral, "[TOOL_CALLS]f[ARGS]\n {\"a\": 1}",
               &(expect){"", "", 1, {"f"}, {"{\"a\": 1}"}});
    check_case("mistral empty name is content", &mistral, "[TOOL_CALLS][ARGS]{}", &(expect){"[TOOL_CALLS][ARGS]{}", "", 0, {0}, {0}});
    check_case("mistral list that holds no call is content", &mistral, "[TOOL_CALLS] [1, 2]", &(expect){"[TOOL_CALLS] [1, 2]", "", 0, {0}, {0}});
    check_case("mistral list with a broken first call is content", &mistral, "[TOOL_CALLS][{\"x\": 1}]",
               &(expect){"[TOOL_CALLS][{\"x\": 1}]", "", 0, {0}, {0}});
    check_case("mistral text", &mistral, "No call [TOOL", &(expect){"No call [TOOL", "", 0, {0}, {0}});

    tp_config harmony = {.format = TP_FMT_HARMONY, .tools = true, .parallel = true};
    check_case("harmony analysis then call", &harmony,
               "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"SF\"}<|call|>",
               &(expect){"", "Need weather.", 1, {"get_weather"}, {"{\"city\":\"SF\"}"}});
    check_case("harmony final", &harmony, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi there.<|return|>",
               &(expect){"Hi there.", "hm", 0, {0}, {0}});
    check_case("harmony recipient before the channel", &harmony,
               "<|channel|>final<|message|>Checking.<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
               &(expect){"Checking.", "", 1, {"f"}, {"{}"}});
    check_case("not harmony after all", &harmony, "plain words", &(expect){"plain words", "", 0, {0}, {0}});
    check_case("harmony: a later header cut short shows nothing", &harmony,
               "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>comm",
               &(expect){"", "hm", 0, {0}, {0}});
    tp_config harmony_none = {.format = TP_FMT_HARMONY, .tools = false, .parallel = true};
    check_case("harmony with tool_choice none: a call is content", &harmony_none,
               "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>",
               &(expect){"{\"a\": 1}", "", 0, {0}, {0}});

    printf("%d cases, each whole, split at every byte and byte by byte\n", n_cases);
    return check_summary("test_tool_parse");
}
