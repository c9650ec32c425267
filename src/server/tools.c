#include "server/tools.h"

#include <stdio.h>
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

tp_format tools_format_of(const pith_server *srv) {
    const char *t = srv->chat ? pith_chat_template_source(srv->chat) : NULL;
    if (!t) return TP_FMT_HERMES;
    /* GPT-OSS's template writes "to=" and "functions." + name apart, so the channel markers name it. */
    if (strstr(t, "<|channel|>") && strstr(t, "<|message|>") && strstr(t, "<|start|>")) return TP_FMT_HARMONY;
    /* DeepSeek V3 / R1 / V3.1: <｜tool▁calls▁begin｜> */
    if (strstr(t, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>")) return TP_FMT_DEEPSEEK;
    if (strstr(t, "<|tool_calls_section_begin|>")) return TP_FMT_KIMI_K2;
    if (strstr(t, "<arg_key>") && strstr(t, "<arg_value>")) return TP_FMT_GLM;
    /* Qwen3-Coder and Qwen3.5 teach <function=NAME> and <parameter=NAME> inside <tool_call>. */
    if (strstr(t, "<function=") && strstr(t, "<parameter=")) return TP_FMT_QWEN3_XML;
    if (strstr(t, "<|tool_call>")) return TP_FMT_GEMMA4;
    if (strstr(t, "[TOOL_CALLS]")) return TP_FMT_MISTRAL;
    if (strstr(t, "<|python_tag|>") || strstr(t, "ipython")) return TP_FMT_LLAMA3;
    return TP_FMT_HERMES;
}

static bool template_thinks(const pith_server *srv) {
    const char *t = srv->chat ? pith_chat_template_source(srv->chat) : NULL;
    return t && strstr(t, "</think>");
}

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static int check_tools(const cJSON *tools, api_error *err) {
    if (!cJSON_IsArray(tools)) return api_errorf(err, 400, "invalid_type", "tools", "'tools' must be a list");
    int n = cJSON_GetArraySize(tools), i = 0;
    if (n > TOOLS_MAX) return api_errorf(err, 400, "invalid_value", "tools", "at most %d tools", TOOLS_MAX);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = field(t, "type"), *fn = field(t, "function");
        char param[64];
        snprintf(param, sizeof param, "tools[%d]", i);
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return api_errorf(err, 400, "invalid_value", param, "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
        const cJSON *name = field(fn, "name"), *params = field(fn, "parameters"), *desc = field(fn, "description");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !valid_name(name->valuestring))
            return api_errorf(err, 400, "invalid_value", param,
                              "tools[%d].function.name must be 1 to 64 letters, digits, '_', '-' or '.'", i);
        if (params && !cJSON_IsObject(params))
            return api_errorf(err, 400, "invalid_type", param, "tools[%d].function.parameters must be a JSON Schema object", i);
        if (desc && !cJSON_IsString(desc))
            return api_errorf(err, 400, "invalid_type", param, "tools[%d].function.description must be a string", i);
        const cJSON *u;
        for (u = tools->child; u != t; u = u->next)
            if (!strcmp(field(field(u, "function"), "name")->valuestring, name->valuestring))
                return api_errorf(err, 400, "invalid_value", param, "two tools are named '%.64s'", name->valuestring);
        i++;
    }
    return 0;
}

static bool has_tool(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) if (!strcmp(field(field(t, "function"), "name")->valuestring, name)) return true;
    return false;
}

static int read_choice(const cJSON *body, const cJSON *tools, chat_tools *t, api_error *err) {
    const cJSON *c = field(body, "tool_choice");
    t->choice = tools ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    if (!c) return 0;
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        if (!strcmp(s, "none")) t->choice = TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto")) t->choice = TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "required")) t->choice = TOOL_CHOICE_REQUIRED;
        else return api_errorf(err, 400, "invalid_value", "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
    } else {
        const cJSON *type = field(c, "type"), *name = field(field(c, "function"), "name");
        if (!name) name = field(c, "name"); /* the Responses API's shape: {"type": "function", "name": ...} */
        if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return api_errorf(err, 400, "invalid_value", "tool_choice",
                              "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!tools || !has_tool(tools, name->valuestring))
            return api_errorf(err, 400, "invalid_value", "tool_choice", "tool_choice names '%.64s', which is not in 'tools'",
                              name->valuestring);
        t->choice = TOOL_CHOICE_NAMED;
        snprintf(t->named, sizeof t->named, "%s", name->valuestring);
    }
    if (!tools && t->choice != TOOL_CHOICE_NONE)
        return api_errorf(err, 400, "invalid_value", "tool_choice", "'tool_choice' needs 'tools'");
    return 0;
}

int tools_request(const pith_server *srv, const cJSON *body, chat_tools **out, api_error *err) {
    *out = NULL;
    const cJSON *tools = field(body, "tools");
    if (tools && check_tools(tools, err)) return -1;
    if (tools && !cJSON_GetArraySize(tools)) tools = NULL;
    chat_tools t = {0};
    if (read_choice(body, tools, &t, err)) return -1;
    bool parallel = true;
    const cJSON *pc = field(body, "parallel_tool_calls");
    if (pc && !cJSON_IsBool(pc))
        return api_errorf(err, 400, "invalid_type", "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (pc) parallel = cJSON_IsTrue(pc);
    bool think = template_thinks(srv);
    const cJSON *rf = field(body, "reasoning_format");
    if (rf) {
        if (!cJSON_IsString(rf) || (strcmp(rf->valuestring, "none") && strcmp(rf->valuestring, "auto") &&
                                    strcmp(rf->valuestring, "deepseek")))
            return api_errorf(err, 400, "invalid_value", "reasoning_format",
                              "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
        if (!strcmp(rf->valuestring, "none")) think = false;
    }
    tp_format fmt = tools_format_of(srv);
    bool parse_tools = tools && t.choice != TOOL_CHOICE_NONE;
    /* Harmony always needs parsing: its channels are reasoning and content. */
    if (!parse_tools && !think && fmt != TP_FMT_HARMONY) return 0;
    t.parse = (tp_config){
        .format = parse_tools || fmt == TP_FMT_HARMONY ? fmt : TP_FMT_NONE, .tools = parse_tools,
        .parallel = parallel && t.choice != TOOL_CHOICE_NAMED, .think = think,
    };
    if (tools && !(t.tools = cJSON_Duplicate(tools, true)))
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    if (!(*out = malloc(sizeof **out))) {
        cJSON_Delete(t.tools);
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    **out = t;
    return 0;
}

int tools_prepare_messages(cJSON *msgs, api_error *err) {
    int i = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        /* OpenAI clients send an assistant turn that only calls tools with content null; templates test
         * or search the content as a string (Qwen3's `'</think>' in content`), so it renders as "". */
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!strcmp(role, "assistant") && content && cJSON_IsNull(content) &&
            !cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString("")))
            return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        if (calls && !cJSON_IsNull(calls)) {
            if (strcmp(role, "assistant") || !cJSON_IsArray(calls))
                return api_errorf(err, 400, "invalid_value", "messages", "messages[%d].tool_calls must be a list on an assistant message", i);
            cJSON *c;
            int k = 0;
            cJSON_ArrayForEach(c, calls) {
                cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || (args && !cJSON_IsString(args) && !cJSON_IsObject(args)))
                    return api_errorf(err, 400, "invalid_value", "messages",
                                      "messages[%d].tool_calls[%d] must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", i, k);
                if (cJSON_IsString(args)) {
                    cJSON *obj = cJSON_Parse(args->valuestring);
                    if (cJSON_IsObject(obj)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
                    else cJSON_Delete(obj);
                }
                k++;
            }
        }
        if (!strcmp(role, "tool")) {
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(content) && !cJSON_IsArray(content))
                return api_errorf(err, 400, "invalid_value", "messages", "messages[%d]: a tool message needs 'content'", i);
        }
        i++;
    }
    return 0;
}

/* id as Mistral's templates take it: 9 letters or digits. An id that is not: its last 9 alphanumerics
 * (vLLM's choice), or when it has fewer, 9 base-62 digits of its FNV-1a hash. out holds 10 bytes. */
static void mistral_id(const char *id, char *out) {
    size_t n = strlen(id), alnum = 0;
    for (size_t i = 0; i < n; i++) alnum += isalnum((unsigned char)id[i]) != 0;
    if (n == 9 && alnum == 9) {
        memcpy(out, id, 10);
        return;
    }
    if (alnum >= 9) {
        int k = 9;
        out[9] = 0;
        for (size_t i = n; i-- > 0 && k > 0;)
            if (isalnum((unsigned char)id[i])) out[--k] = id[i];
        return;
    }
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ull;
    for (int i = 0; i < 9; i++, h /= 62) out[i] = digits[h % 62];
    out[9] = 0;
}

static void rewrite_id(cJSON *o, const char *key) {
    cJSON *id = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(id)) return;
    char fixed[10];
    mistral_id(id->valuestring, fixed);
    if (strcmp(fixed, id->valuestring)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(fixed));
}

void tools_prepare_mistral(cJSON *msgs) {
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        rewrite_id(m, "tool_call_id");
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
        if (cJSON_IsArray(calls)) cJSON_ArrayForEach(c, calls) rewrite_id(c, "id");
    }
}

void tools_prepare_harmony(cJSON *msgs) {
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant")) continue;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (content && cJSON_IsNull(content)) cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        if (cJSON_GetObjectItemCaseSensitive(m, "thinking")) continue;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (!cJSON_IsString(r)) r = cJSON_GetObjectItemCaseSensitive(m, "reasoning");
        if (cJSON_IsString(r)) cJSON_AddStringToObject(m, "thinking", r->valuestring);
    }
}

void tools_note_prompt(chat_tools *t, const char *prompt, size_t len) {
    if (!t || !t->parse.think || t->constrained) return;
    while (len && (prompt[len - 1] == ' ' || prompt[len - 1] == '\n' || prompt[len - 1] == '\r' || prompt[len - 1] == '\t')) len--;
    static const char open[] = "<think>";
    size_t ol = sizeof open - 1;
    t->parse.in_think = len >= ol && !memcmp(prompt + len - ol, open, ol);
}

void chat_tools_free(chat_tools *t) {
    if (!t) return;
    cJSON_Delete(t->tools);
    cJSON_Delete(t->echo);
    free(t);
}
