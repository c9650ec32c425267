/* POST /v1/messages (Anthropic's Messages API) and POST /v1/messages/count_tokens. The request is
 * rewritten as the equivalent chat completions body, which then runs through the chat path (template,
 * tools, grammar); messages_out.c writes the answer in Anthropic's shapes.
 *
 * system becomes a system message; a message's content is a string or blocks: text blocks are joined
 * with "\n"; an assistant's tool_use blocks become its tool_calls (arguments: the input as JSON) and
 * its thinking blocks its reasoning_content; a user's tool_result blocks become "tool" messages (before
 * the user's text, as Anthropic places them). tools, tool_choice (auto, any, tool, none, and
 * disable_parallel_tool_use), stop_sequences, max_tokens, temperature, top_p, top_k, thinking (the
 * template's enable_thinking) and output_config (format: a JSON schema; effort) map onto their chat
 * names. Images and documents are refused: no served model reads them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/generate.h"
#include "server/handlers.h"
#include "server/tools.h"

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

static const char *type_of(const cJSON *block) {
    const cJSON *t = field(block, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Text blocks (or a string) joined with "\n" into out; -1 when content is something else. */
static int text_blocks(const cJSON *content, buf *out) {
    if (cJSON_IsString(content)) {
        buf_puts(out, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content)) return -1;
    int n = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *type = type_of(b);
        const cJSON *text = field(b, "text");
        if (!type || strcmp(type, "text") || !cJSON_IsString(text)) return -1;
        if (n++) buf_puts(out, "\n");
        buf_puts(out, text->valuestring);
    }
    return 0;
}

static int refuse_media(const char *type, int i, int k, api_error *err) {
    return api_errorf(err, 400, "unsupported_content", "messages",
                      "messages[%d].content[%d]: %s blocks are not supported: the served model reads text only", i, k, type);
}

/* The name of the tool_use with this id in the chat messages so far (for the tool message), or NULL. */
static const char *call_name(const cJSON *msgs, const char *id) {
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *c;
        cJSON_ArrayForEach(c, field(m, "tool_calls")) {
            const cJSON *cid = field(c, "id");
            if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id)) {
                const cJSON *name = field(field(c, "function"), "name");
                return cJSON_IsString(name) ? name->valuestring : NULL;
            }
        }
    }
    return NULL;
}

/* An image block as a chat image_url part: base64 sources become data: URLs, url sources stay URLs
 * (fetched only from the allowed hosts: media.h). NULL with err when malformed. */
static cJSON *image_part(const cJSON *block, int i, int k, api_error *err) {
    const cJSON *src = field(block, "source");
    const char *st = type_of(src);
    buf url = {0};
    if (st && !strcmp(st, "base64")) {
        const cJSON *mt = field(src, "media_type"), *data = field(src, "data");
        if (!cJSON_IsString(mt) || !cJSON_IsString(data)) {
            api_errorf(err, 400, "invalid_value", "messages",
                       "messages[%d].content[%d]: a base64 image source needs media_type and data", i, k);
            return NULL;
        }
        buf_printf(&url, "data:%s;base64,", mt->valuestring);
        buf_puts(&url, data->valuestring);
    } else if (st && !strcmp(st, "url") && cJSON_IsString(field(src, "url"))) {
        buf_puts(&url, field(src, "url")->valuestring);
    } else {
        api_errorf(err, 400, "invalid_value", "messages",
                   "messages[%d].content[%d]: an image block needs a base64 or url source", i, k);
        return NULL;
    }
    cJSON *p = url.failed ? NULL : cJSON_CreateObject(), *iu = p ? cJSON_AddObjectToObject(p, "image_url") : NULL;
    if (!iu || !cJSON_AddStringToObject(p, "type", "image_url") || !cJSON_AddStringToObject(iu, "url", url.data)) {
        cJSON_Delete(p);
        p = NULL;
        api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    buf_free(&url);
    return p;
}

static int user_message(const cJSON *content, int i, cJSON *msgs, api_error *err) {
    buf text = {0};
    int rc = 0, n_text = 0, n_results = 0, k = 0, n_images = 0;
    cJSON *parts = cJSON_CreateArray(); /* text and images in order, used when there are images */
    if (!parts) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    if (cJSON_IsString(content)) {
        buf_puts(&text, content->valuestring);
        n_text = 1;
    } else if (!cJSON_IsArray(content)) {
        return api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content must be a string or a list of blocks", i);
    }
    const cJSON *b, *blocks = cJSON_IsArray(content) ? content : NULL;
    cJSON_ArrayForEach(b, blocks) {
        const char *type = type_of(b);
        if (!type) {
            rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d] must be a block with a 'type'", i, k);
            break;
        }
        if (!strcmp(type, "text")) {
            const cJSON *t = field(b, "text");
            if (!cJSON_IsString(t)) {
                rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d]: a text block needs 'text'", i, k);
                break;
            }
            if (n_text++) buf_puts(&text, "\n");
            buf_puts(&text, t->valuestring);
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", t->valuestring);
            cJSON_AddItemToArray(parts, p);
        } else if (!strcmp(type, "image")) {
            cJSON *p = image_part(b, i, k, err);
            if (!p) {
                rc = -1;
                break;
            }
            cJSON_AddItemToArray(parts, p);
            n_images++;
        } else if (!strcmp(type, "tool_result")) {
            const cJSON *id = field(b, "tool_use_id"), *c = field(b, "content"), *is_error = field(b, "is_error");
            if (!cJSON_IsString(id)) {
                rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d]: a tool_result block needs 'tool_use_id'", i, k);
                break;
            }
            buf out = {0};
            if (cJSON_IsTrue(is_error)) buf_puts(&out, "Error: ");
            if (c && text_blocks(c, &out)) {
                api_errorf(err, 400, "unsupported_content", "messages",
                           "messages[%d].content[%d].content must be a string or a list of text blocks (images are not supported)", i, k);
                buf_free(&out);
                rc = -1;
                break;
            }
            cJSON *m = message("tool", out.len ? out.data : "");
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            const char *name = call_name(msgs, id->valuestring);
            if (name) cJSON_AddStringToObject(m, "name", name);
            if (out.failed) rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
            buf_free(&out);
            cJSON_AddItemToArray(msgs, m);
            n_results++;
        } else if (!strcmp(type, "document")) {
            rc = refuse_media(type, i, k, err);
            break;
        } else {
            rc = api_errorf(err, 400, "unsupported_content", "messages",
                            "messages[%d].content[%d]: blocks of type '%.40s' are not supported in a user message", i, k, type);
            break;
        }
        if (rc) break;
        k++;
    }
    if (!rc && n_images) { /* the chat path places the images where they were (chat_completions.c) */
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddItemToObject(m, "content", parts);
        parts = NULL;
        cJSON_AddItemToArray(msgs, m);
    } else if (!rc && (n_text || !n_results)) {
        cJSON_AddItemToArray(msgs, message("user", text.len ? text.data : ""));
    }
    if (!rc && text.failed) rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
    cJSON_Delete(parts);
    buf_free(&text);
    return rc;
}

static int assistant_message(const cJSON *content, int i, cJSON *msgs, api_error *err) {
    if (cJSON_IsString(content)) {
        cJSON_AddItemToArray(msgs, message("assistant", content->valuestring));
        return 0;
    }
    if (!cJSON_IsArray(content))
        return api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content must be a string or a list of blocks", i);
    buf text = {0}, thinking = {0};
    cJSON *calls = cJSON_CreateArray();
    int rc = 0, k = 0, n_text = 0, n_think = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *type = type_of(b);
        if (!type) {
            rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d] must be a block with a 'type'", i, k);
        } else if (!strcmp(type, "text")) {
            const cJSON *t = field(b, "text");
            if (!cJSON_IsString(t)) rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d]: a text block needs 'text'", i, k);
            else if (n_text++) buf_puts(&text, "\n");
            if (!rc) buf_puts(&text, t->valuestring);
        } else if (!strcmp(type, "thinking")) {
            const cJSON *t = field(b, "thinking");
            if (!cJSON_IsString(t)) rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d]: a thinking block needs 'thinking'", i, k);
            else if (n_think++) buf_puts(&thinking, "\n");
            if (!rc) buf_puts(&thinking, t->valuestring);
        } else if (!strcmp(type, "redacted_thinking")) {
            /* nothing to show the model */
        } else if (!strcmp(type, "tool_use")) {
            const cJSON *id = field(b, "id"), *name = field(b, "name"), *input = field(b, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name)) {
                rc = api_errorf(err, 400, "invalid_value", "messages", "messages[%d].content[%d]: a tool_use block needs 'id', 'name' and 'input'", i, k);
            } else {
                char *args = input ? cJSON_PrintUnformatted(input) : NULL;
                cJSON *c = cJSON_CreateObject();
                cJSON_AddStringToObject(c, "id", id->valuestring);
                cJSON_AddStringToObject(c, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(c, "function");
                cJSON_AddStringToObject(f, "name", name->valuestring);
                cJSON_AddStringToObject(f, "arguments", args ? args : "{}");
                cJSON_free(args);
                cJSON_AddItemToArray(calls, c);
            }
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            rc = refuse_media(type, i, k, err);
        } else {
            rc = api_errorf(err, 400, "unsupported_content", "messages",
                            "messages[%d].content[%d]: blocks of type '%.40s' are not supported in an assistant message", i, k, type);
        }
        if (rc) break;
        k++;
    }
    if (!rc && (text.failed || thinking.failed || !calls)) rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
    if (!rc) {
        cJSON *m = message("assistant", text.len ? text.data : "");
        if (thinking.len) cJSON_AddStringToObject(m, "reasoning_content", thinking.data);
        if (cJSON_GetArraySize(calls)) {
            cJSON_AddItemToObject(m, "tool_calls", calls);
            calls = NULL;
        }
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_Delete(calls);
    buf_free(&text);
    buf_free(&thinking);
    return rc;
}

static int map_messages(const cJSON *req, cJSON *msgs, api_error *err) {
    const cJSON *system = field(req, "system");
    if (system) {
        buf text = {0};
        if (text_blocks(system, &text)) {
            buf_free(&text);
            return api_errorf(err, 400, "invalid_value", "system", "'system' must be a string or a list of text blocks");
        }
        cJSON_AddItemToArray(msgs, message("system", text.len ? text.data : ""));
        buf_free(&text);
    }
    const cJSON *list = field(req, "messages");
    if (!list) return api_errorf(err, 400, "missing_parameter", "messages", "messages: field required");
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
        return api_errorf(err, 400, "invalid_value", "messages", "'messages' must be a non-empty list");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, list) {
        const cJSON *role = field(m, "role"), *content = field(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
            return api_errorf(err, 400, "invalid_value", "messages",
                              "messages[%d].role must be \"user\" or \"assistant\" (the system prompt goes in 'system')", i);
        if (!content) return api_errorf(err, 400, "missing_parameter", "messages", "messages[%d].content: field required", i);
        int rc = !strcmp(role->valuestring, "user") ? user_message(content, i, msgs, err) : assistant_message(content, i, msgs, err);
        if (rc) return -1;
        i++;
    }
    return 0;
}

/* Anthropic tools {name, description, input_schema} as chat tools; server tools (web search, bash, ...)
 * are refused. */
static int map_tools(const cJSON *tools, cJSON *body, api_error *err) {
    if (!cJSON_IsArray(tools)) return api_errorf(err, 400, "invalid_type", "tools", "'tools' must be a list");
    cJSON *out = cJSON_AddArrayToObject(body, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const char *type = type_of(t);
        const cJSON *name = field(t, "name"), *schema = field(t, "input_schema"), *desc = field(t, "description");
        if (type && strcmp(type, "custom"))
            return api_errorf(err, 400, "unsupported_parameter", "tools",
                              "tools[%d]: tools of type '%.60s' are not supported; only client tools {name, description, input_schema}", i, type);
        if (!cJSON_IsObject(t) || !cJSON_IsString(name))
            return api_errorf(err, 400, "invalid_value", "tools", "tools[%d]: a tool needs a 'name'", i);
        if (!cJSON_IsObject(schema))
            return api_errorf(err, 400, "invalid_value", "tools", "tools[%d].input_schema: a JSON Schema object is required", i);
        if (desc && !cJSON_IsString(desc))
            return api_errorf(err, 400, "invalid_type", "tools", "tools[%d].description must be a string", i);
        cJSON *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (desc) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, true));
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", fn);
        cJSON_AddItemToArray(out, w);
        i++;
    }
    return 0;
}

static int map_tool_choice(const cJSON *tc, cJSON *body, api_error *err) {
    const char *type = type_of(tc);
    const cJSON *name = field(tc, "name"), *dp = field(tc, "disable_parallel_tool_use");
    if (!cJSON_IsObject(tc) || !type)
        return api_errorf(err, 400, "invalid_value", "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (dp && !cJSON_IsBool(dp))
        return api_errorf(err, 400, "invalid_type", "tool_choice", "tool_choice.disable_parallel_tool_use must be a boolean");
    if (!strcmp(type, "auto") || !strcmp(type, "none")) {
        cJSON_AddStringToObject(body, "tool_choice", type);
    } else if (!strcmp(type, "any")) {
        cJSON_AddStringToObject(body, "tool_choice", "required");
    } else if (!strcmp(type, "tool")) {
        if (!cJSON_IsString(name))
            return api_errorf(err, 400, "invalid_value", "tool_choice", "tool_choice {\"type\": \"tool\"} needs the tool's 'name'");
        cJSON *c = cJSON_AddObjectToObject(body, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    } else {
        return api_errorf(err, 400, "invalid_value", "tool_choice", "tool_choice.type must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(body, "parallel_tool_calls");
    return 0;
}

/* thinking → chat_template_kwargs.enable_thinking (kept beside the extension's own kwargs): enabled (with
 * budget_tokens, a positive integer) turns it on, disabled off; adaptive leaves the template's default. */
static int map_thinking(const cJSON *req, cJSON *body, api_error *err) {
    const cJSON *kw = field(req, "chat_template_kwargs"), *th = field(req, "thinking");
    if (kw && !cJSON_IsObject(kw))
        return api_errorf(err, 400, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    cJSON *out = kw ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
    if (th) {
        const char *type = type_of(th);
        int64_t budget;
        if (!cJSON_IsObject(th) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive"))) {
            cJSON_Delete(out);
            return api_errorf(err, 400, "invalid_value", "thinking", "thinking.type must be \"enabled\", \"disabled\" or \"adaptive\"");
        }
        if (!strcmp(type, "enabled") && (!json_get_int(field(th, "budget_tokens"), &budget) || budget < 1)) {
            cJSON_Delete(out);
            return api_errorf(err, 400, "invalid_value", "thinking", "thinking.budget_tokens: a positive integer is required");
        }
        if (strcmp(type, "adaptive")) {
            cJSON_DeleteItemFromObjectCaseSensitive(out, "enable_thinking");
            cJSON_AddBoolToObject(out, "enable_thinking", !strcmp(type, "enabled"));
        }
    }
    if (cJSON_GetArraySize(out)) cJSON_AddItemToObject(body, "chat_template_kwargs", out);
    else cJSON_Delete(out);
    return 0;
}

/* output_config: format {type: json_schema, schema} → response_format; effort → reasoning_effort. */
static int map_output_config(const cJSON *oc, cJSON *body, api_error *err) {
    if (!cJSON_IsObject(oc)) return api_errorf(err, 400, "invalid_type", "output_config", "'output_config' must be an object");
    const cJSON *f = field(oc, "format"), *effort = field(oc, "effort");
    if (f) {
        const char *type = type_of(f);
        const cJSON *schema = field(f, "schema");
        if (!type || strcmp(type, "json_schema") || !cJSON_IsObject(schema))
            return api_errorf(err, 400, "invalid_value", "output_config",
                              "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}");
        cJSON *rf = cJSON_AddObjectToObject(body, "response_format");
        cJSON_AddStringToObject(rf, "type", "json_schema");
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        cJSON_AddStringToObject(js, "name", "output");
        cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
        cJSON_AddTrueToObject(js, "strict");
    }
    if (effort) {
        static const char *const ok[] = {"low", "medium", "high", "xhigh", "max"};
        size_t k = 0;
        while (cJSON_IsString(effort) && k < 5 && strcmp(effort->valuestring, ok[k])) k++;
        if (!cJSON_IsString(effort) || k == 5)
            return api_errorf(err, 400, "invalid_value", "output_config", "output_config.effort must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\"");
        cJSON_AddStringToObject(body, "reasoning_effort", k < 3 ? ok[k] : "high");
    }
    return 0;
}

static void copy(const cJSON *from, const char *name, cJSON *to, const char *as) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, name);
    if (v) cJSON_AddItemToObject(to, as, cJSON_Duplicate(v, true));
}

/* The chat completions body equivalent to the Messages request. counting: for count_tokens (no
 * max_tokens needed, sampling fields ignored). */
static cJSON *chat_body(const cJSON *req, bool counting, api_error *err) {
    if (!cJSON_IsObject(req)) {
        api_errorf(err, 400, "invalid_type", NULL, "the request body must be a JSON object");
        return NULL;
    }
    const cJSON *model = field(req, "model"), *max = field(req, "max_tokens"), *v;
    if (!cJSON_IsString(model)) {
        api_errorf(err, 400, model ? "invalid_type" : "missing_parameter", "model", "model: %s", model ? "must be a string" : "field required");
        return NULL;
    }
    int64_t n;
    if (!counting && !max) {
        api_errorf(err, 400, "missing_parameter", "max_tokens", "max_tokens: field required");
        return NULL;
    }
    if (!counting && (!json_get_int(max, &n) || n < 1)) {
        api_errorf(err, 400, "invalid_value", "max_tokens", "max_tokens: must be a positive integer");
        return NULL;
    }
    cJSON *body = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
    if (map_messages(req, msgs, err)) goto fail;
    if ((v = field(req, "tools")) && map_tools(v, body, err)) goto fail;
    if ((v = field(req, "tool_choice")) && map_tool_choice(v, body, err)) goto fail;
    if (map_thinking(req, body, err)) goto fail;
    if ((v = field(req, "output_config")) && map_output_config(v, body, err)) goto fail;
    copy(req, "model", body, "model");
    if (!counting) {
        v = field(req, "stop_sequences");
        if (v && !cJSON_IsArray(v)) {
            api_errorf(err, 400, "invalid_type", "stop_sequences", "'stop_sequences' must be a list of strings");
            goto fail;
        }
        if (v && cJSON_GetArraySize(v) > PARAMS_MAX_STOP) {
            api_errorf(err, 400, "invalid_value", "stop_sequences", "'stop_sequences' may hold at most %d strings", PARAMS_MAX_STOP);
            goto fail;
        }
        if (v && cJSON_GetArraySize(v)) copy(req, "stop_sequences", body, "stop");
        copy(req, "max_tokens", body, "max_tokens");
        static const char *const same[] = {"temperature", "top_p", "top_k", "stream",
                                           /* extensions shared with chat */
                                           "seed", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                           "ignore_eos", "priority", "cache_salt", "reasoning_format"};
        for (size_t k = 0; k < sizeof same / sizeof *same; k++) copy(req, same[k], body, same[k]);
    }
    return body;
fail:
    cJSON_Delete(body);
    return NULL;
}

/* Chat parameter names as the Messages API spells them. */
static void rename_param(api_error *e) {
    static const char *const map[][2] = {
        {"max_completion_tokens", "max_tokens"}, {"stop", "stop_sequences"}, {"response_format", "output_config"},
        {"reasoning_effort", "output_config"}, {"parallel_tool_calls", "tool_choice"},
    };
    for (size_t k = 0; k < sizeof map / sizeof *map; k++)
        if (!strncmp(e->param, map[k][0], strlen(map[k][0]))) snprintf(e->param, sizeof e->param, "%s", map[k][1]);
    if (!strncmp(e->param, "tools[", 6)) snprintf(e->param, sizeof e->param, "tools");
}

static enum MHD_Result messages(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *req = gen_parse_body(r, &rc);
    if (!req) return rc;
    api_error e;
    gen_params p;
    memset(&p, 0, sizeof p);
    gen_prompt *prompt = calloc(1, sizeof *prompt);
    cJSON *body = prompt ? chat_body(req, false, &e) : NULL;
    if (!prompt) api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    bool ok = body && !gen_params_parse(body, GEN_CHAT, &p, &e) && !gen_check_model(r->srv, p.model, &e) &&
              !tools_request(r->srv, body, &p.tools, &e);
    /* Every answer goes through the output parser (messages_out.c reads its operations). */
    if (ok && !p.tools && !(p.tools = calloc(1, sizeof *p.tools))) ok = !api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    ok = ok && !tools_constrain(r->srv, &p, &e) && !gen_params_compile(r->srv, &p, &e) &&
         !chat_build_prompt_tools(r->srv, body, p.tools, prompt, &e);
    if (ok && (!(p.tools->echo = cJSON_CreateObject()) || !cJSON_AddNumberToObject(p.tools->echo, "input_tokens", prompt->n)))
        ok = !api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    if (!ok) {
        rename_param(&e);
        gen_prompts_free(prompt, 1);
        gen_params_free(&p);
        cJSON_Delete(body);
        cJSON_Delete(req);
        return http_send_error(r, &e);
    }
    /* The output's and the prompt's token ids tell which stop sequence ended it (messages_out.c). */
    p.return_token_ids = p.n_stop > 0;
    p.model = NULL;
    p.include_usage = false;
    cJSON_Delete(body);
    cJSON_Delete(req);
    return gen_run(r, GEN_MESSAGES, &p, prompt, 1);
}

static enum MHD_Result count_tokens(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *req = gen_parse_body(r, &rc);
    if (!req) return rc;
    api_error e;
    gen_prompt prompt = {0};
    chat_tools *tools = NULL;
    cJSON *body = chat_body(req, true, &e);
    const cJSON *model = body ? field(body, "model") : NULL;
    bool ok = body && !gen_check_model(r->srv, model ? model->valuestring : NULL, &e) &&
              !tools_request(r->srv, body, &tools, &e) && !chat_build_prompt_tools(r->srv, body, tools, &prompt, &e);
    chat_tools_free(tools);
    int n_tokens = prompt.n;
    gen_prompt_clear(&prompt);
    cJSON_Delete(body);
    cJSON_Delete(req);
    if (!ok) {
        rename_param(&e);
        return http_send_error(r, &e);
    }
    cJSON *out = cJSON_CreateObject();
    if (!out || !cJSON_AddNumberToObject(out, "input_tokens", n_tokens)) {
        cJSON_Delete(out);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    return http_send_json(r, 200, out);
}

enum MHD_Result handle_messages(http_request *r) {
    enum MHD_Result rc = messages(r);
    gen_trim_after(r);
    return rc;
}

enum MHD_Result handle_messages_count_tokens(http_request *r) {
    enum MHD_Result rc = count_tokens(r);
    gen_trim_after(r);
    return rc;
}
