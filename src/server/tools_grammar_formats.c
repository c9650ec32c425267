/* tools_grammar_formats.h. The XML forms: a function's parameters in the order of its schema's
 * `properties`, the `required` ones always written, the others optional; a value whose schema is a string
 * (tp_param_is_string: the parser reads it as text) is one of its enum's values or free text without
 * "</", any other value is JSON following the parameter's schema. */
#include "server/tools_grammar_formats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_parse.h"

#define DS_CALLS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The GBNF literal of s (quotes, backslashes and control characters escaped). */
void tools_gbnf_literal(buf *g, const char *s) {
    buf_puts(g, "\"");
    for (; *s; s++) {
        if (*s == '"') buf_puts(g, "\\\"");
        else if (*s == '\n') buf_puts(g, "\\n");
        else if (*s == '\\') buf_puts(g, "\\\\");
        else if (*s == '\r') buf_puts(g, "\\r");
        else if (*s == '\t') buf_puts(g, "\\t");
        else buf_append(g, s, 1);
    }
    buf_puts(g, "\"");
}

static int schema_rules(const cJSON *schema, const char *root, buf *g, const char *param, api_error *err) {
    char *gbnf = NULL, *src = schema ? cJSON_PrintUnformatted(schema) : NULL;
    pith_err why;
    int rc = src ? pith_grammar_json_schema_to_gbnf(src, strlen(src), root, &gbnf, &why)
                 : pith_grammar_json_to_gbnf(!schema, root, &gbnf, &why);
    if (schema && !src) snprintf(why.msg, sizeof why.msg, "out of memory");
    cJSON_free(src);
    if (rc) return api_errorf(err, 400, "invalid_grammar", param, "'%s': %s", param, why.msg);
    buf_puts(g, gbnf);
    buf_puts(g, "\n");
    free(gbnf);
    return 0;
}

static bool is_required(const cJSON *params, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, field(params, "required")) if (cJSON_IsString(r) && !strcmp(r->valuestring, key)) return true;
    return false;
}

/* The rule `aKpI` of a parameter's value. */
static int value_rule(const cJSON *schema, int k, int i, buf *g, api_error *err) {
    char root[32], param[96];
    snprintf(root, sizeof root, "a%dp%d", k, i);
    if (!tp_param_is_string(schema)) {
        snprintf(param, sizeof param, "tools[%d].function.parameters", k);
        return schema_rules(schema, root, g, param, err);
    }
    const cJSON *en = field(schema, "enum"), *c = field(schema, "const"), *v;
    buf_printf(g, "%s ::= ", root);
    if (cJSON_IsString(c)) {
        tools_gbnf_literal(g, c->valuestring);
    } else if (cJSON_IsArray(en) && en->child) {
        int n = 0;
        cJSON_ArrayForEach(v, en) if (cJSON_IsString(v)) {
            buf_puts(g, n++ ? " | " : "");
            tools_gbnf_literal(g, v->valuestring);
        }
    } else {
        buf_puts(g, "xtext");
    }
    buf_puts(g, "\n");
    return 0;
}

/* callK for an XML format. */
static int xml_call(tp_format fmt, int k, const char *name, const cJSON *params, buf *g, api_error *err) {
    buf body = {0};
    const cJSON *prop;
    int i = 0;
    cJSON_ArrayForEach(prop, field(params, "properties")) {
        const char *key = prop->string;
        if (!key) continue;
        if (value_rule(prop, k, i, g, err)) {
            buf_free(&body);
            return -1;
        }
        char open[TP_MAX_NAME + 64];
        bool req = is_required(params, key);
        buf_puts(&body, req ? " " : " (");
        if (fmt == TP_FMT_QWEN3_XML) {
            snprintf(open, sizeof open, "<parameter=%s>\n", key);
            tools_gbnf_literal(&body, open);
            buf_printf(&body, " a%dp%d ", k, i);
            tools_gbnf_literal(&body, "\n</parameter>\n");
        } else {
            snprintf(open, sizeof open, "<arg_key>%s</arg_key>\n<arg_value>", key);
            tools_gbnf_literal(&body, open);
            buf_printf(&body, " a%dp%d ", k, i);
            tools_gbnf_literal(&body, "</arg_value>\n");
        }
        if (!req) buf_puts(&body, ")?");
        i++;
    }
    char head[TP_MAX_NAME + 64];
    if (fmt == TP_FMT_QWEN3_XML) snprintf(head, sizeof head, "<tool_call>\n<function=%s>\n", name);
    else snprintf(head, sizeof head, "<tool_call>%s\n", name);
    buf_printf(g, "call%d ::= ", k);
    tools_gbnf_literal(g, head);
    buf_append(g, body.data ? body.data : "", body.len);
    buf_puts(g, " ");
    tools_gbnf_literal(g, fmt == TP_FMT_QWEN3_XML ? "</function>\n</tool_call>" : "</tool_call>");
    buf_puts(g, "\n");
    buf_free(&body);
    return 0;
}

/* callK around argsK for a special-token format. */
static void framed_call(tp_format fmt, int k, const char *name, buf *g) {
    char head[TP_MAX_NAME + 96];
    const char *tail;
    buf_printf(g, "call%d ::= ", k);
    if (fmt == TP_FMT_DEEPSEEK) {
        snprintf(head, sizeof head, "%s%s%s", DS_CALL, name, DS_SEP);
        tail = DS_END;
        tools_gbnf_literal(g, head);
    } else if (fmt == TP_FMT_KIMI_K2) {
        snprintf(head, sizeof head, "<|tool_call_begin|>functions.%s:", name);
        tail = "<|tool_call_end|>";
        tools_gbnf_literal(g, head);
        buf_puts(g, " [0-9] ");
        tools_gbnf_literal(g, "<|tool_call_argument_begin|>");
    } else {
        snprintf(head, sizeof head, "<|tool_call>call:%s", name);
        tail = "<tool_call|>";
        tools_gbnf_literal(g, head);
    }
    buf_printf(g, " args%d ", k);
    tools_gbnf_literal(g, tail);
    buf_puts(g, "\n");
}

int tools_grammar_format_calls(const chat_tools *t, int max_calls, buf *g, api_error *err) {
    tp_format fmt = t->parse.format;
    bool xml = fmt == TP_FMT_QWEN3_XML || fmt == TP_FMT_GLM;
    if (!xml && fmt != TP_FMT_DEEPSEEK && fmt != TP_FMT_KIMI_K2 && fmt != TP_FMT_GEMMA4) return 0;
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
        int rc;
        if (xml) {
            rc = xml_call(fmt, k, name, params, g, err);
        } else {
            char root[32], param[64];
            snprintf(root, sizeof root, "args%d", k);
            snprintf(param, sizeof param, "tools[%d].function.parameters", k);
            rc = schema_rules(params && params->child ? params : NULL, root, g, param, err);
            if (!rc) framed_call(fmt, k, name, g);
        }
        if (rc) {
            buf_free(&alts);
            return -1;
        }
        buf_printf(&alts, "%scall%d", n ? " | " : "", k);
        n++;
        k++;
    }
    if (xml) buf_puts(g, "xtext ::= ([^<] | \"<\" [^/])*\n");
    buf_printf(g, "call ::= %s\n", alts.data ? alts.data : "");
    buf_free(&alts);
    const char *open = fmt == TP_FMT_DEEPSEEK ? DS_CALLS : fmt == TP_FMT_KIMI_K2 ? "<|tool_calls_section_begin|>" : "";
    const char *close = fmt == TP_FMT_DEEPSEEK ? DS_CALLS_END : fmt == TP_FMT_KIMI_K2 ? "<|tool_calls_section_end|>" : "";
    buf_puts(g, "calls ::= ");
    if (*open) {
        tools_gbnf_literal(g, open);
        buf_puts(g, " ");
    }
    buf_puts(g, "call");
    for (int i = 1; i < max_calls; i++) buf_puts(g, xml ? " (\"\\n\" call" : " (call");
    for (int i = 1; i < max_calls; i++) buf_puts(g, ")?");
    if (*close) {
        buf_puts(g, " ");
        tools_gbnf_literal(g, close);
    }
    buf_puts(g, "\n");
    return g->failed ? api_errorf(err, 500, "internal_error", NULL, "out of memory") : 1;
}
