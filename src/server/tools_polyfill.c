/* Tool calling for chat templates that know nothing of tools (Gemma 3's, Llama 2's, ChatML-only ones):
 * such a template drops the `tools` variable and raises on a "tool" role or renders tool calls as
 * nothing, so an agent's history cannot be sent at all. As llama.cpp does for templates without tool
 * support, the conversation is rewritten, in the copy the template renders, into turns it does know:
 *   - the tools are described at the start of the system message (one is added when there is none),
 *     with the call syntax: <tool_call>{"name": N, "arguments": A}</tool_call>, the Hermes form, which
 *     the output parser reads (tools_format_of gives HERMES for these templates);
 *   - an assistant turn's tool_calls become that text after its content;
 *   - the results of one round ("tool" messages in a row) become one user turn of
 *     <tool_response>...</tool_response> blocks, so user and assistant turns still alternate. */
#include <string.h>

#include "server/buf.h"
#include "server/tools.h"

bool tools_template_knows_tools(const char *source) { return !source || strstr(source, "tool") != NULL; }

static const char *str_field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void put_json(buf *b, const cJSON *v) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (s) buf_puts(b, s);
    else b->failed = true;
    cJSON_free(s);
}

static void describe_tools(buf *b, const cJSON *tools) {
    buf_puts(b, "You can call these tools (JSON Schema of their arguments in \"parameters\"):\n<tools>\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        put_json(b, cJSON_GetObjectItemCaseSensitive(t, "function"));
        buf_puts(b, "\n");
    }
    buf_puts(b, "</tools>\nTo call tools, reply with one block per call:\n<tool_call>\n"
                "{\"name\": <tool name>, \"arguments\": <arguments object>}\n</tool_call>");
}

static void write_calls(buf *b, const cJSON *calls) {
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        if (b->len) buf_puts(b, "\n");
        buf_puts(b, "<tool_call>\n{\"name\": ");
        put_json(b, cJSON_GetObjectItemCaseSensitive(fn, "name"));
        buf_puts(b, ", \"arguments\": ");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (args) put_json(b, args);
        else buf_puts(b, "{}");
        buf_puts(b, "}\n</tool_call>");
    }
}

static bool set_content(cJSON *m, buf *b) {
    if (b->failed) return false;
    cJSON *s = cJSON_CreateString(b->data ? b->data : "");
    if (!s) return false;
    if (cJSON_GetObjectItemCaseSensitive(m, "content")) return cJSON_ReplaceItemInObjectCaseSensitive(m, "content", s);
    cJSON_AddItemToObject(m, "content", s);
    return true;
}

static bool is_role(const cJSON *m, const char *role) {
    const char *r = str_field(m, "role");
    return r && !strcmp(r, role);
}

int tools_polyfill(cJSON *msgs, const cJSON *tools, api_error *err) {
    bool ok = true;
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) {
        buf b = {0};
        describe_tools(&b, tools);
        cJSON *first = cJSON_GetArrayItem(msgs, 0);
        if (first && is_role(first, "system")) {
            const char *sys = str_field(first, "content");
            if (sys && *sys) {
                buf_puts(&b, "\n\n");
                buf_puts(&b, sys);
            }
            ok = set_content(first, &b);
        } else {
            cJSON *m = cJSON_CreateObject();
            ok = m && cJSON_AddStringToObject(m, "role", "system") && set_content(m, &b) &&
                 cJSON_InsertItemInArray(msgs, 0, m);
            if (!ok) cJSON_Delete(m);
        }
        buf_free(&b);
    }
    for (cJSON *m = msgs->child; ok && m; m = m->next) {
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (is_role(m, "assistant") && cJSON_IsArray(calls)) {
            buf b = {0};
            const char *content = str_field(m, "content");
            if (content) buf_puts(&b, content);
            write_calls(&b, calls);
            ok = set_content(m, &b);
            buf_free(&b);
            cJSON_DeleteItemFromObjectCaseSensitive(m, "tool_calls");
        } else if (is_role(m, "tool")) {
            buf b = {0};
            for (cJSON *r = m; r && is_role(r, "tool"); r = r->next) {
                const char *text = str_field(r, "content");
                buf_printf(&b, "%s<tool_response>\n%s\n</tool_response>", b.len ? "\n" : "", text ? text : "");
            }
            while (m->next && is_role(m->next, "tool")) cJSON_Delete(cJSON_DetachItemViaPointer(msgs, m->next));
            cJSON_DeleteItemFromObjectCaseSensitive(m, "tool_call_id");
            cJSON_DeleteItemFromObjectCaseSensitive(m, "name");
            ok = cJSON_ReplaceItemInObjectCaseSensitive(m, "role", cJSON_CreateString("user")) && set_content(m, &b);
            buf_free(&b);
        }
    }
    return ok ? 0 : api_errorf(err, 500, "internal_error", NULL, "out of memory");
}
