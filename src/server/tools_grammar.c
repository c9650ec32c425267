/* tool_choice "required" or a named function: the output is constrained by a grammar (grammar.h) of the
 * whole call in the model's format, wrapper included, with each function's arguments matching its
 * parameters schema, so the call always parses and its arguments validate. tool_choice "auto" with a
 * json_object / json_schema response_format: the output is either such calls or the answer the schema
 * describes (the model may call tools; its final text follows the schema). Calls in parallel are allowed
 * up to four ("required" with parallel_tool_calls not false); a named function gets exactly one call.
 * Markers that are special tokens in the model's vocabulary ([TOOL_CALLS], harmony's <|channel|>) are
 * written as plain text, which the grammar can match and the parser reads the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/params.h"
#include "server/tools.h"
#include "server/tools_grammar_formats.h"

#define MAX_PARALLEL 4

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The rule `callK` for tool K: the format's wrapper around its name and the arguments rule argsK. */
static void call_rule(buf *g, tp_format fmt, int k, const char *name) {
    char head[512], tail[64];
    switch (fmt) {
    case TP_FMT_LLAMA3:
        snprintf(head, sizeof head, "{\"name\": \"%s\", \"parameters\": ", name);
        snprintf(tail, sizeof tail, "}");
        break;
    case TP_FMT_MISTRAL:
        snprintf(head, sizeof head, "[TOOL_CALLS]%s[ARGS]", name);
        tail[0] = 0;
        break;
    case TP_FMT_HARMONY:
        snprintf(head, sizeof head, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", name);
        snprintf(tail, sizeof tail, "<|call|>");
        break;
    default:
        snprintf(head, sizeof head, "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name);
        snprintf(tail, sizeof tail, "}\n</tool_call>");
        break;
    }
    buf_printf(g, "call%d ::= ", k);
    tools_gbnf_literal(g, head);
    buf_printf(g, " args%d", k);
    if (tail[0]) {
        buf_puts(g, " ");
        tools_gbnf_literal(g, tail);
    }
    buf_puts(g, "\n");
}

static const char *separator(tp_format fmt) {
    return fmt == TP_FMT_LLAMA3 ? "; " : fmt == TP_FMT_HARMONY ? "<|start|>assistant" : fmt == TP_FMT_MISTRAL ? "" : "\n";
}

/* The rules of the calls (`calls` is the start rule): each function's arguments from its parameters
 * schema, the format's wrapper, up to MAX_PARALLEL calls when parallel. 0, or -1 with err. */
static int calls_rules(const chat_tools *t, buf *g, api_error *err) {
    int other = tools_grammar_format_calls(t, t->parse.parallel ? MAX_PARALLEL : 1, g, err); /* XML, special tokens */
    if (other) return other < 0 ? -1 : 0;
    tp_format fmt = t->parse.format;
    buf alts = {0};
    int k = 0, n = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, t->tools) {
        const cJSON *fn = field(tool, "function");
        const char *name = field(fn, "name")->valuestring;
        if (t->choice == TOOL_CHOICE_NAMED && strcmp(name, t->named)) {
            k++;
            continue;
        }
        const cJSON *params = field(fn, "parameters");
        char root[32], *gbnf = NULL;
        snprintf(root, sizeof root, "args%d", k);
        pith_err why;
        int rc;
        if (params && params->child) {
            char *schema = cJSON_PrintUnformatted(params);
            rc = schema ? pith_grammar_json_schema_to_gbnf(schema, strlen(schema), root, &gbnf, &why)
                        : (snprintf(why.msg, sizeof why.msg, "out of memory"), -1);
            cJSON_free(schema);
        } else {
            rc = pith_grammar_json_to_gbnf(true, root, &gbnf, &why);
        }
        if (rc) {
            buf_free(&alts);
            char param[64];
            snprintf(param, sizeof param, "tools[%d].function.parameters", k);
            return api_errorf(err, 400, "invalid_grammar", param, "'%s': %s", param, why.msg);
        }
        buf_puts(g, gbnf);
        buf_puts(g, "\n");
        free(gbnf);
        call_rule(g, fmt, k, name);
        buf_printf(&alts, "%scall%d", n ? " | " : "", k);
        n++;
        k++;
    }
    buf_printf(g, "call ::= %s\n", alts.data ? alts.data : "");
    buf_free(&alts);
    int max = t->parse.parallel ? MAX_PARALLEL : 1;
    buf_puts(g, "calls ::= call");
    const char *sep = separator(fmt);
    for (int i = 1; i < max; i++) {
        buf_puts(g, " (");
        if (*sep) {
            tools_gbnf_literal(g, sep);
            buf_puts(g, " ");
        }
        buf_puts(g, "call");
    }
    for (int i = 1; i < max; i++) buf_puts(g, ")?");
    buf_puts(g, "\n");
    return 0;
}

/* response_format (json_object or json_schema, Responses' text.format): what the final answer follows,
 * not a constraint on tool calls. */
static bool is_answer_format(const gen_params *p) {
    return p->grammar_param && !strncmp(p->grammar_param, "response_format", 15);
}

/* The answer's constraint as GBNF rules with start rule `answer` (p's kind is a JSON one). */
static int answer_rules(const gen_params *p, buf *g, api_error *err) {
    char *gbnf = NULL;
    pith_err why;
    int rc = p->grammar_kind == PITH_GRAMMAR_JSON
                 ? pith_grammar_json_to_gbnf(true, "answer", &gbnf, &why)
                 : pith_grammar_json_schema_to_gbnf_strict(p->grammar_src, strlen(p->grammar_src), "answer",
                                                           p->grammar_kind == PITH_GRAMMAR_JSON_SCHEMA_STRICT, &gbnf, &why);
    if (rc) return api_errorf(err, 400, "invalid_grammar", p->grammar_param, "'%s': %s", p->grammar_param, why.msg);
    buf_puts(g, gbnf);
    buf_puts(g, "\n");
    free(gbnf);
    return 0;
}

int tools_constrain(pith_server *srv, gen_params *p, api_error *err) {
    (void)srv;
    chat_tools *t = p->tools;
    if (!t || !t->tools || !t->parse.tools) return 0;
    bool forced = t->choice == TOOL_CHOICE_REQUIRED || t->choice == TOOL_CHOICE_NAMED;
    /* tool_choice "auto" with a structured final answer: the output is either calls or the answer. Any
     * other constraint with "auto" covers the whole output, as it always did. */
    bool either = t->choice == TOOL_CHOICE_AUTO && is_answer_format(p);
    if (!forced && !either) return 0;
    if (forced && p->grammar_param && !is_answer_format(p))
        return api_errorf(err, 400, "invalid_request", "tool_choice",
                          "'tool_choice' %s and '%s' both constrain the output; give one",
                          t->choice == TOOL_CHOICE_NAMED ? "naming a function" : "\"required\"", p->grammar_param);
    buf g = {0};
    if (calls_rules(t, &g, err) || (either && answer_rules(p, &g, err))) {
        buf_free(&g);
        return -1;
    }
    /* A forced call is this turn's whole output; response_format applies to the final answer, a later
     * turn (OpenAI accepts both, and agent SDKs send both). */
    buf_puts(&g, either ? "root ::= calls | answer\n" : "root ::= calls\n");
    if (g.failed) {
        buf_free(&g);
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    free(p->grammar_src);
    p->grammar_kind = PITH_GRAMMAR_GBNF;
    p->grammar_src = g.data; /* owned by p now */
    p->grammar_param = "tools";
    /* The output is the call (or the answer) from its first byte: nothing opens a <think> block. */
    t->parse.in_think = false;
    t->constrained = true;
    return 0;
}
