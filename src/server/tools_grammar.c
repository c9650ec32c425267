/* tool_choice "required" or a named function: the output is constrained by a grammar (grammar.h) of the
 * whole call in the model's format, wrapper included, with each function's arguments matching its
 * parameters schema, so the call always parses and its arguments validate. Calls in parallel are allowed
 * up to four ("required" with parallel_tool_calls not false); a named function gets exactly one call.
 * Markers that are special tokens in the model's vocabulary ([TOOL_CALLS], harmony's <|channel|>) are
 * written as plain text, which the grammar can match and the parser reads the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/params.h"
#include "server/tools.h"

#define MAX_PARALLEL 4

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The GBNF literal of s (tool names are letters, digits, '_', '-', '.': nothing to escape). */
static void lit(buf *g, const char *s) {
    buf_puts(g, "\"");
    for (; *s; s++) {
        if (*s == '"') buf_puts(g, "\\\"");
        else if (*s == '\n') buf_puts(g, "\\n");
        else if (*s == '\\') buf_puts(g, "\\\\");
        else buf_append(g, s, 1);
    }
    buf_puts(g, "\"");
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
    lit(g, head);
    buf_printf(g, " args%d", k);
    if (tail[0]) {
        buf_puts(g, " ");
        lit(g, tail);
    }
    buf_puts(g, "\n");
}

static const char *separator(tp_format fmt) {
    return fmt == TP_FMT_LLAMA3 ? "; " : fmt == TP_FMT_HARMONY ? "<|start|>assistant" : fmt == TP_FMT_MISTRAL ? "" : "\n";
}

int tools_constrain(pith_server *srv, gen_params *p, api_error *err) {
    (void)srv;
    chat_tools *t = p->tools;
    if (!t || (t->choice != TOOL_CHOICE_REQUIRED && t->choice != TOOL_CHOICE_NAMED)) return 0;
    if (p->grammar_param)
        return api_errorf(err, 400, "invalid_request", "tool_choice",
                          "'tool_choice' %s and '%s' both constrain the output; give one",
                          t->choice == TOOL_CHOICE_NAMED ? "naming a function" : "\"required\"", p->grammar_param);
    tp_format fmt = t->parse.format;
    buf g = {0};
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
            buf_free(&g);
            buf_free(&alts);
            char param[64];
            snprintf(param, sizeof param, "tools[%d].function.parameters", k);
            return api_errorf(err, 400, "invalid_grammar", param, "'%s': %s", param, why.msg);
        }
        buf_puts(&g, gbnf);
        buf_puts(&g, "\n");
        free(gbnf);
        call_rule(&g, fmt, k, name);
        buf_printf(&alts, "%scall%d", n ? " | " : "", k);
        n++;
        k++;
    }
    buf_printf(&g, "call ::= %s\n", alts.data ? alts.data : "");
    buf_free(&alts);
    int max = t->parse.parallel ? MAX_PARALLEL : 1;
    buf_puts(&g, "root ::= call");
    const char *sep = separator(fmt);
    for (int i = 1; i < max; i++) {
        buf_puts(&g, " (");
        if (*sep) {
            lit(&g, sep);
            buf_puts(&g, " ");
        }
        buf_puts(&g, "call");
    }
    for (int i = 1; i < max; i++) buf_puts(&g, ")?");
    buf_puts(&g, "\n");
    if (g.failed) {
        buf_free(&g);
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    p->grammar_kind = PITH_GRAMMAR_GBNF;
    p->grammar_src = g.data; /* owned by p now */
    p->grammar_param = "tools";
    /* The output is the call from its first byte: nothing opens a <think> block. */
    t->parse.in_think = false;
    t->constrained = true;
    return 0;
}
