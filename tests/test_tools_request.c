/* The request side of tool calling (src/server/tools.h, tools_grammar.c) without a model: the output
 * format picked from real templates (tests/chat), reasoning on where the template writes </think> and
 * the start inside <think> when the prompt opens it, tool_choice / tools / parallel_tool_calls reading
 * and refusals, and the grammar of the call for each format (its wrapper, one call or up to four). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/params.h"
#include "server/tools.h"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* A server stand-in with only a chat template (NULL file: the ChatML fallback). */
static int with_template(pith_server *srv, const char *file) {
    memset(srv, 0, sizeof *srv);
    char *src = NULL;
    if (file) {
        char path[1024];
        const char *dir = getenv("PITH_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/tests/chat/%s", dir ? dir : "..", file);
        if (!(src = read_file(path))) return -1;
    }
    pith_err err;
    int rc = pith_chat_template_compile(src, &srv->chat, &err);
    free(src);
    return rc;
}

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}]";

/* tools_request on a body of extra fields plus the tools; returns the status (0 when accepted). */
static int request(pith_server *srv, const char *extra, bool with_tools, chat_tools **out, char *param) {
    char body[2048];
    snprintf(body, sizeof body, "{%s%s%s%s}", with_tools ? "\"tools\": " : "", with_tools ? TOOLS : "",
             with_tools && *extra ? ", " : "", extra);
    cJSON *b = cJSON_Parse(body);
    if (!b) return -2;
    api_error e = {0};
    int rc = tools_request(srv, b, out, &e);
    cJSON_Delete(b);
    if (param) snprintf(param, 64, "%s", e.param);
    return rc ? e.status : 0;
}

static void test_formats(void) {
    static const struct {
        const char *file;
        tp_format fmt;
        bool think;
    } cases[] = {
        {NULL, TP_FMT_HERMES, false},           {"qwen2.5.jinja", TP_FMT_HERMES, false},
        {"hermes-tools.jinja", TP_FMT_HERMES, false}, {"llama3.1.jinja", TP_FMT_LLAMA3, false},
        {"mistral-v0.3.jinja", TP_FMT_MISTRAL, false}, {"deepseek-r1.jinja", TP_FMT_DEEPSEEK, true},
        {"llama2.jinja", TP_FMT_HERMES, false},
        {"qwen3-coder-tools.jinja", TP_FMT_QWEN3_XML, false}, {"glm-4.5-tools.jinja", TP_FMT_GLM, true},
        {"deepseek-v3.1-tools.jinja", TP_FMT_DEEPSEEK, true}, {"kimi-k2-tools.jinja", TP_FMT_KIMI_K2, false},
        {"gemma4-tools.jinja", TP_FMT_GEMMA4, false}, {"gemma3.jinja", TP_FMT_HERMES, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pith_server srv;
        CHECKF(with_template(&srv, cases[i].file) == 0, "%s", cases[i].file);
        CHECKF(tools_format_of(&srv) == cases[i].fmt, "%s: format %d", cases[i].file ? cases[i].file : "chatml",
               tools_format_of(&srv));
        chat_tools *t = NULL;
        CHECK(request(&srv, "", true, &t, NULL) == 0);
        CHECK(t && t->parse.format == cases[i].fmt && t->parse.tools && t->parse.parallel && t->choice == TOOL_CHOICE_AUTO);
        CHECK(t && t->parse.think == cases[i].think);
        chat_tools_free(t);
        /* Without tools: parsing only where the template thinks. */
        t = NULL;
        CHECK(request(&srv, "", false, &t, NULL) == 0);
        CHECK((t != NULL) == cases[i].think);
        if (t) {
            tools_note_prompt(t, "x<think>\n", 9);
            CHECK(t->parse.in_think);
            tools_note_prompt(t, "<think>\n\n</think>\n\n", 19);
            CHECK(!t->parse.in_think);
        }
        chat_tools_free(t);
        t = NULL;
        CHECK(request(&srv, "\"reasoning_format\": \"none\"", false, &t, NULL) == 0 && t == NULL);
        pith_chat_template_free(srv.chat);
    }
}

static void test_choice(void) {
    pith_server srv;
    CHECK(with_template(&srv, NULL) == 0);
    chat_tools *t = NULL;
    char param[64];
    CHECK(request(&srv, "\"tool_choice\": \"none\"", true, &t, NULL) == 0);
    CHECK(t == NULL); /* nothing to parse */
    CHECK(request(&srv, "\"tool_choice\": \"required\", \"parallel_tool_calls\": false", true, &t, NULL) == 0);
    CHECK(t && t->choice == TOOL_CHOICE_REQUIRED && !t->parse.parallel);
    chat_tools_free(t);
    t = NULL;
    CHECK(request(&srv, "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}", true, &t, NULL) == 0);
    CHECK(t && t->choice == TOOL_CHOICE_NAMED && !strcmp(t->named, "noop") && !t->parse.parallel);
    chat_tools_free(t);
    t = NULL;
    CHECK(request(&srv, "\"tool_choice\": {\"type\": \"function\", \"name\": \"get_weather\"}", true, &t, NULL) == 0);
    CHECK(t && t->choice == TOOL_CHOICE_NAMED && !strcmp(t->named, "get_weather"));
    chat_tools_free(t);
    static const struct {
        const char *extra;
        bool tools;
        const char *param;
    } bad[] = {
        {"\"tool_choice\": \"required\"", false, "tool_choice"},
        {"\"tool_choice\": \"any\"", true, "tool_choice"},
        {"\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}", true, "tool_choice"},
        {"\"tool_choice\": 3", true, "tool_choice"},
        {"\"parallel_tool_calls\": 1", true, "parallel_tool_calls"},
        {"\"tools\": {}", false, "tools"},
        {"\"tools\": [{\"type\": \"function\"}]", false, "tools[0]"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]", false, "tools[0]"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": []}}]", false, "tools[0]"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]",
         false, "tools[1]"},
        {"\"reasoning_format\": \"xml\"", false, "reasoning_format"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        t = NULL;
        int st = request(&srv, bad[i].extra, bad[i].tools, &t, param);
        CHECKF(st == 400 && !strcmp(param, bad[i].param) && t == NULL, "%s: status %d param '%s'", bad[i].extra, st, param);
    }
    pith_chat_template_free(srv.chat);
}

/* The grammar source tools_constrain writes for a format. */
static char *grammar_for(tp_format fmt, const char *choice, bool parallel) {
    pith_server srv;
    memset(&srv, 0, sizeof srv);
    char extra[256];
    snprintf(extra, sizeof extra, "\"tool_choice\": %s, \"parallel_tool_calls\": %s", choice, parallel ? "true" : "false");
    gen_params p = {0};
    if (request(&srv, extra, true, &p.tools, NULL) || !p.tools) return NULL;
    p.tools->parse.format = fmt;
    api_error e;
    char *g = NULL;
    if (tools_constrain(&srv, &p, &e) == 0 && p.grammar_src) g = strdup(p.grammar_src);
    CHECK(p.tools->constrained && !p.tools->parse.in_think && !strcmp(p.grammar_param, "tools"));
    gen_params_free(&p);
    return g;
}

static void test_grammar(void) {
    char *g = grammar_for(TP_FMT_HERMES, "\"required\"", true);
    CHECK(g && strstr(g, "\"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" args0"));
    CHECK(g && strstr(g, "call ::= call0 | call1"));
    CHECK(g && strstr(g, "calls ::= call (\"\\n\" call (\"\\n\" call (\"\\n\" call)?)?)?") && strstr(g, "root ::= calls\n"));
    free(g);
    g = grammar_for(TP_FMT_LLAMA3, "{\"type\": \"function\", \"function\": {\"name\": \"noop\"}}", true);
    CHECK(g && strstr(g, "\\\"parameters\\\": \" args1") && strstr(g, "call ::= call1\n") && strstr(g, "calls ::= call\n"));
    CHECK(g && !strstr(g, "call0 ::="));
    free(g);
    g = grammar_for(TP_FMT_MISTRAL, "\"required\"", false);
    CHECK(g && strstr(g, "\"[TOOL_CALLS]get_weather[ARGS]\" args0") && strstr(g, "calls ::= call\n"));
    free(g);
    g = grammar_for(TP_FMT_HARMONY, "\"required\"", false);
    CHECK(g && strstr(g, "to=functions.noop <|constrain|>json<|message|>\" args1 \"<|call|>\""));
    free(g);
    /* Another constraint as well is refused; a response_format is for the final answer (set aside). */
    pith_server srv;
    memset(&srv, 0, sizeof srv);
    gen_params p = {0};
    CHECK(request(&srv, "\"tool_choice\": \"required\"", true, &p.tools, NULL) == 0);
    p.grammar_param = "guided_regex";
    api_error e;
    CHECK(tools_constrain(&srv, &p, &e) == -1 && e.status == 400 && !strcmp(e.param, "tool_choice"));
    p.grammar_param = "response_format.json_schema.schema";
    p.grammar_kind = PITH_GRAMMAR_JSON_SCHEMA;
    p.grammar_src = strdup("{\"type\": \"object\"}");
    CHECK(tools_constrain(&srv, &p, &e) == 0 && !strcmp(p.grammar_param, "tools") && strstr(p.grammar_src, "root ::= calls\n"));
    gen_params_free(&p);
    /* "auto" with a response_format: calls or the answer. */
    memset(&p, 0, sizeof p);
    CHECK(request(&srv, "\"tool_choice\": \"auto\"", true, &p.tools, NULL) == 0);
    p.grammar_param = "response_format";
    p.grammar_kind = PITH_GRAMMAR_JSON;
    p.grammar_src = strdup("");
    CHECK(tools_constrain(&srv, &p, &e) == 0 && strstr(p.grammar_src, "root ::= calls | answer\n") &&
          strstr(p.grammar_src, "answer ::="));
    gen_params_free(&p);
}

/* GPT-OSS's real template is harmony; its output is always parsed (channels), with tool_choice "none"
 * without calls; reasoning_effort is read and checked; the history fix-ups for its template. */
static void test_harmony(void) {
    pith_server srv;
    CHECK(with_template(&srv, "gpt-oss.jinja") == 0);
    CHECK(tools_format_of(&srv) == TP_FMT_HARMONY);
    chat_tools *t = NULL;
    CHECK(request(&srv, "", false, &t, NULL) == 0);
    CHECK(t && t->parse.format == TP_FMT_HARMONY && !t->parse.tools);
    chat_tools_free(t);
    t = NULL;
    CHECK(request(&srv, "\"tool_choice\": \"none\"", true, &t, NULL) == 0);
    CHECK(t && t->parse.format == TP_FMT_HARMONY && !t->parse.tools && t->choice == TOOL_CHOICE_NONE);
    chat_tools_free(t);
    t = NULL;
    CHECK(request(&srv, "", true, &t, NULL) == 0);
    CHECK(t && t->parse.format == TP_FMT_HARMONY && t->parse.tools);
    chat_tools_free(t);
    pith_chat_template_free(srv.chat);

    static const struct {
        const char *body, *want; /* want NULL: absent; "400": refused */
    } efforts[] = {{"{}", NULL}, {"{\"reasoning_effort\": null}", NULL}, {"{\"reasoning_effort\": \"low\"}", "low"},
                   {"{\"reasoning_effort\": \"medium\"}", "medium"}, {"{\"reasoning_effort\": \"high\"}", "high"},
                   {"{\"reasoning_effort\": \"HIGH\"}", "400"}, {"{\"reasoning_effort\": \"minimal\"}", "400"},
                   {"{\"reasoning_effort\": 1}", "400"}, {"{\"reasoning_effort\": {}}", "400"}};
    for (size_t i = 0; i < sizeof efforts / sizeof *efforts; i++) {
        cJSON *b = cJSON_Parse(efforts[i].body);
        api_error e = {0};
        const char *got = "unset";
        int rc = params_reasoning_effort(b, &got, &e);
        if (efforts[i].want && !strcmp(efforts[i].want, "400"))
            CHECKF(rc && e.status == 400 && !strcmp(e.param, "reasoning_effort"), "%s", efforts[i].body);
        else
            CHECKF(!rc && (efforts[i].want ? got && !strcmp(got, efforts[i].want) : got == NULL), "%s", efforts[i].body);
        cJSON_Delete(b);
    }

    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": null},"
                              " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r1\", \"tool_calls\": []},"
                              " {\"role\": \"assistant\", \"content\": \"x\", \"reasoning\": \"r2\"},"
                              " {\"role\": \"assistant\", \"thinking\": \"own\", \"reasoning_content\": \"r3\"}]");
    tools_prepare_harmony(msgs);
    const cJSON *m0 = cJSON_GetArrayItem(msgs, 0), *m1 = cJSON_GetArrayItem(msgs, 1), *m2 = cJSON_GetArrayItem(msgs, 2),
                *m3 = cJSON_GetArrayItem(msgs, 3);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(m0, "content"))); /* only assistant messages change */
    CHECK(!cJSON_GetObjectItem(m1, "content") && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m1, "thinking")), "r1"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m2, "thinking")), "r2"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m3, "thinking")), "own"));
    cJSON_Delete(msgs);
}

int main(void) {
    test_formats();
    test_harmony();
    test_choice();
    test_grammar();
    return check_summary("test_tools_request");
}
