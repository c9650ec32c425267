/* POST /v1/responses (OpenAI's Responses API), stateless: the request is rewritten as the equivalent
 * chat completions body (instructions and input items become messages; function_call items become an
 * assistant message's tool_calls, function_call_output items tool messages; tools, tool_choice,
 * text.format, max_output_tokens, temperature and top_p map onto their chat names), which then runs
 * through the chat path (template, tools, grammar); responses_out.c writes the answer in the Responses
 * shapes. Nothing is stored: previous_response_id and background are refused. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/generate.h"
#include "server/handlers.h"
#include "server/tools.h"

#define MAX_ITEMS 4096

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static cJSON *message(const char *role, cJSON *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddItemToObject(m, "content", content);
    return m;
}

/* A message item's content as chat content: a string, or a list of input_text / output_text parts
 * (joined into one string); with input_image parts, a list of chat parts (text and image_url, in order),
 * which the chat path flattens the same way with the model's image marker in place of each image. */
static int item_content(const cJSON *content, int i, cJSON **out, api_error *err) {
    *out = NULL;
    if (cJSON_IsString(content)) {
        *out = cJSON_CreateString(content->valuestring);
        return *out ? 0 : api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    if (!cJSON_IsArray(content))
        return api_errorf(err, 400, "invalid_type", "input", "input[%d].content must be a string or a list of parts", i);
    bool images = false;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = field(part, "type");
        images |= cJSON_IsString(type) && !strcmp(type->valuestring, "input_image");
    }
    buf text = {0};
    cJSON *parts = images ? cJSON_CreateArray() : NULL;
    int k = 0, rc = 0;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = field(part, "type"), *t = field(part, "text");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "input_image")) {
            const cJSON *url = field(part, "image_url");
            if (!cJSON_IsString(url)) {
                rc = api_errorf(err, 400, "invalid_value", "input",
                                "input[%d].content[%d]: an input_image part needs image_url (file_id is not supported)", i, k);
                break;
            }
            cJSON *p = cJSON_CreateObject(), *iu = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "image_url");
            cJSON_AddStringToObject(iu, "url", url->valuestring);
            cJSON_AddItemToObject(p, "image_url", iu);
            cJSON_AddItemToArray(parts, p);
        } else if (!cJSON_IsString(type) || !cJSON_IsString(t) ||
                   (strcmp(type->valuestring, "input_text") && strcmp(type->valuestring, "output_text") &&
                    strcmp(type->valuestring, "text"))) {
            rc = api_errorf(err, 400, "unsupported_content", "input",
                            "input[%d].content[%d]: only text parts (input_text, output_text) and input_image are supported",
                            i, k);
            break;
        } else if (parts) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", t->valuestring);
            cJSON_AddItemToArray(parts, p);
        } else {
            if (k) buf_puts(&text, "\n");
            buf_puts(&text, t->valuestring);
        }
        k++;
    }
    if (!rc) *out = parts ? parts : cJSON_CreateString(text.data ? text.data : "");
    else cJSON_Delete(parts);
    bool failed = text.failed;
    buf_free(&text);
    if (!rc && (failed || !*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    return rc;
}

/* The assistant message that function_call items attach to: the last message when it is an assistant
 * one, else a new one with content null. */
static cJSON *assistant_for_calls(cJSON *msgs) {
    int n = cJSON_GetArraySize(msgs);
    cJSON *last = n ? cJSON_GetArrayItem(msgs, n - 1) : NULL;
    const cJSON *role = last ? field(last, "role") : NULL;
    if (role && !strcmp(role->valuestring, "assistant")) return last;
    cJSON *m = message("assistant", cJSON_CreateNull());
    cJSON_AddItemToArray(msgs, m);
    return m;
}

static int input_items(const cJSON *input, cJSON *msgs, api_error *err) {
    if (cJSON_IsString(input)) {
        cJSON_AddItemToArray(msgs, message("user", cJSON_CreateString(input->valuestring)));
        return 0;
    }
    if (!cJSON_IsArray(input)) return api_errorf(err, 400, "invalid_type", "input", "'input' must be a string or a list of items");
    if (cJSON_GetArraySize(input) > MAX_ITEMS) return api_errorf(err, 400, "invalid_value", "input", "at most %d input items", MAX_ITEMS);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        if (!cJSON_IsObject(it)) return api_errorf(err, 400, "invalid_type", "input", "input[%d] must be an object", i);
        const cJSON *type = field(it, "type"), *role = field(it, "role");
        const char *t = cJSON_IsString(type) ? type->valuestring : "message";
        if (!strcmp(t, "message")) {
            if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
                                          strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer")))
                return api_errorf(err, 400, "invalid_value", "input",
                                  "input[%d].role must be \"user\", \"assistant\", \"system\" or \"developer\"", i);
            cJSON *content;
            if (item_content(field(it, "content"), i, &content, err)) return -1;
            const char *r = !strcmp(role->valuestring, "developer") ? "system" : role->valuestring;
            cJSON_AddItemToArray(msgs, message(r, content));
        } else if (!strcmp(t, "function_call")) {
            const cJSON *call_id = field(it, "call_id"), *name = field(it, "name"), *args = field(it, "arguments");
            if (!cJSON_IsString(call_id) || !cJSON_IsString(name) || !cJSON_IsString(args))
                return api_errorf(err, 400, "invalid_value", "input",
                                  "input[%d]: a function_call item needs call_id, name and arguments strings", i);
            cJSON *m = assistant_for_calls(msgs);
            cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", call_id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            cJSON_AddStringToObject(f, "arguments", args->valuestring);
            cJSON_AddItemToArray(calls, c);
        } else if (!strcmp(t, "function_call_output")) {
            const cJSON *call_id = field(it, "call_id"), *output = field(it, "output");
            if (!cJSON_IsString(call_id) || !cJSON_IsString(output))
                return api_errorf(err, 400, "invalid_value", "input",
                                  "input[%d]: a function_call_output item needs call_id and output strings", i);
            cJSON *m = message("tool", cJSON_CreateString(output->valuestring));
            cJSON_AddStringToObject(m, "tool_call_id", call_id->valuestring);
            cJSON_AddItemToArray(msgs, m);
        } else if (!strcmp(t, "reasoning")) {
            /* Earlier reasoning is not shown to the model again (templates drop it too). */
        } else {
            return api_errorf(err, 400, "unsupported_parameter", "input", "input[%d]: items of type '%.40s' are not supported", i, t);
        }
        i++;
    }
    if (!cJSON_GetArraySize(msgs)) return api_errorf(err, 400, "invalid_value", "input", "'input' is empty");
    return 0;
}

/* Responses tools {type: function, name, description, parameters, strict} as chat tools. */
static int map_tools(const cJSON *tools, cJSON *body, api_error *err) {
    if (!cJSON_IsArray(tools)) return api_errorf(err, 400, "invalid_type", "tools", "'tools' must be a list");
    cJSON *out = cJSON_AddArrayToObject(body, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = field(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return api_errorf(err, 400, "unsupported_parameter", "tools",
                              "tools[%d]: only function tools are supported (no built-in tools such as web search)", i);
        cJSON *fn = cJSON_CreateObject();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = field(t, keys[k]);
            if (v) cJSON_AddItemToObject(fn, keys[k], cJSON_Duplicate(v, true));
        }
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", fn);
        cJSON_AddItemToArray(out, w);
        i++;
    }
    return 0;
}

/* text.format as response_format. */
static int map_text(const cJSON *text, cJSON *body, api_error *err) {
    if (!cJSON_IsObject(text)) return api_errorf(err, 400, "invalid_type", "text", "'text' must be an object");
    const cJSON *f = field(text, "format");
    if (!f) return 0;
    const cJSON *type = field(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return api_errorf(err, 400, "invalid_type", "text.format", "'text.format' must be an object with a 'type'");
    cJSON *rf = cJSON_AddObjectToObject(body, "response_format");
    cJSON_AddStringToObject(rf, "type", type->valuestring);
    if (!strcmp(type->valuestring, "json_schema")) {
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        static const char *const keys[] = {"name", "schema", "strict", "description"};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = field(f, keys[k]);
            if (v) cJSON_AddItemToObject(js, keys[k], cJSON_Duplicate(v, true));
        }
    }
    return 0;
}

static void copy(const cJSON *from, const char *name, cJSON *to, const char *as) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, name);
    if (v) cJSON_AddItemToObject(to, as, cJSON_Duplicate(v, true));
}

static int refuse(const cJSON *req, api_error *err) {
    const cJSON *v;
    if (field(req, "previous_response_id"))
        return api_errorf(err, 400, "unsupported_parameter", "previous_response_id",
                          "'previous_response_id' is not supported: this server stores no responses; send the whole conversation as input");
    if (field(req, "conversation"))
        return api_errorf(err, 400, "unsupported_parameter", "conversation", "'conversation' is not supported: this server stores nothing");
    if ((v = field(req, "background")) && cJSON_IsTrue(v))
        return api_errorf(err, 400, "unsupported_parameter", "background", "'background' is not supported");
    if ((v = field(req, "prompt")))
        return api_errorf(err, 400, "unsupported_parameter", "prompt", "stored prompt templates ('prompt') are not supported");
    return 0;
}

/* The chat completions body equivalent to the Responses request. */
static cJSON *chat_body(const cJSON *req, api_error *err) {
    if (!cJSON_IsObject(req)) {
        api_errorf(err, 400, "invalid_type", NULL, "the request body must be a JSON object");
        return NULL;
    }
    if (refuse(req, err)) return NULL;
    const cJSON *input = field(req, "input");
    if (!input) {
        api_errorf(err, 400, "missing_parameter", "input", "'input' is required");
        return NULL;
    }
    cJSON *body = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
    const cJSON *ins = field(req, "instructions");
    if (ins && !cJSON_IsString(ins)) {
        api_errorf(err, 400, "invalid_type", "instructions", "'instructions' must be a string");
        goto fail;
    }
    if (ins) cJSON_AddItemToArray(msgs, message("system", cJSON_CreateString(ins->valuestring)));
    if (input_items(input, msgs, err)) goto fail;
    const cJSON *tools = field(req, "tools");
    if (tools && map_tools(tools, body, err)) goto fail;
    const cJSON *text = field(req, "text");
    if (text && map_text(text, body, err)) goto fail;
    const cJSON *reasoning = field(req, "reasoning");
    if (reasoning && !cJSON_IsObject(reasoning)) {
        api_errorf(err, 400, "invalid_type", "reasoning", "'reasoning' must be an object");
        goto fail;
    }
    copy(reasoning, "effort", body, "reasoning_effort");
    copy(req, "model", body, "model");
    copy(req, "tool_choice", body, "tool_choice");
    copy(req, "parallel_tool_calls", body, "parallel_tool_calls");
    copy(req, "max_output_tokens", body, "max_completion_tokens");
    copy(req, "temperature", body, "temperature");
    copy(req, "top_p", body, "top_p");
    copy(req, "stream", body, "stream");
    copy(req, "user", body, "user");
    /* Extensions shared with chat. */
    static const char *const ext[] = {"seed", "top_k", "min_p", "stop", "reasoning_format", "chat_template_kwargs",
                                      "repetition_penalty", "presence_penalty", "frequency_penalty", "ignore_eos",
                                      "priority", "cache_salt", "grammar"};
    for (size_t k = 0; k < sizeof ext / sizeof *ext; k++) copy(req, ext[k], body, ext[k]);
    return body;
fail:
    cJSON_Delete(body);
    return NULL;
}

/* The request fields the response object echoes. */
static cJSON *echo_fields(const cJSON *req) {
    cJSON *e = cJSON_CreateObject();
    static const char *const keys[] = {"instructions", "max_output_tokens", "parallel_tool_calls", "temperature", "top_p",
                                       "tool_choice", "tools", "text", "metadata", "user", "reasoning"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) copy(req, keys[k], e, keys[k]);
    return e;
}

static enum MHD_Result responses(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *req = gen_parse_body(r, &rc);
    if (!req) return rc;
    api_error e;
    gen_params p;
    memset(&p, 0, sizeof p);
    gen_prompt *prompt = calloc(1, sizeof *prompt);
    cJSON *body = prompt ? chat_body(req, &e) : NULL;
    if (!prompt) api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    bool ok = body && !gen_params_parse(body, GEN_CHAT, &p, &e) && !gen_check_model(r->srv, p.model, &e) &&
              !tools_request(r->srv, body, &p.tools, &e);
    if (ok && !p.tools && !(p.tools = calloc(1, sizeof *p.tools))) {
        api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        ok = false;
    }
    if (ok) {
        if (!(p.tools->echo = echo_fields(req))) ok = !api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    }
    ok = ok && !tools_constrain(r->srv, &p, &e) && !gen_params_compile(r->srv, &p, &e) &&
         !chat_build_prompt_tools(r->srv, body, p.tools, prompt, &e);
    if (!ok) {
        /* Parameter names as the Responses API spells them. */
        if (!strcmp(e.param, "messages")) snprintf(e.param, sizeof e.param, "input");
        else if (!strcmp(e.param, "max_completion_tokens") || !strcmp(e.param, "max_tokens")) snprintf(e.param, sizeof e.param, "max_output_tokens");
        else if (!strncmp(e.param, "response_format", 15)) snprintf(e.param, sizeof e.param, "text.format");
        else if (!strcmp(e.param, "reasoning_effort")) snprintf(e.param, sizeof e.param, "reasoning.effort");
        gen_prompts_free(prompt, 1);
        gen_params_free(&p);
        cJSON_Delete(body);
        cJSON_Delete(req);
        return http_send_error(r, &e);
    }
    p.model = NULL;
    p.include_usage = false;
    cJSON_Delete(body);
    cJSON_Delete(req);
    return gen_run(r, GEN_RESPONSES, &p, prompt, 1);
}

enum MHD_Result handle_responses(http_request *r) {
    enum MHD_Result rc = responses(r);
    gen_trim_after(r);
    return rc;
}
