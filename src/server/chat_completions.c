/* POST /v1/chat/completions: messages rendered with the model's chat template (chat.h), then encoded
 * with special tokens recognised. BOS is added when the tokenizer adds one, unless the template already
 * wrote it (llama.cpp does the same), so the prompt never starts with two. */
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/generate.h"
#include "server/handlers.h"
#include "server/images.h"
#include "server/server_internal.h"
#include "server/tools.h"
#include "model/vision.h"

#define MAX_MESSAGES 4096

static int check_content(const cJSON *content, int i, api_error *err) {
    if (!content || cJSON_IsNull(content) || cJSON_IsString(content)) return 0;
    if (!cJSON_IsArray(content))
        return api_errorf(err, 400, "invalid_type", "messages", "messages[%d].content must be a string or a list of parts", i);
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        const char *url;
        if (server_image_part(part, &url)) continue; /* checked when loaded (images.c) */
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return api_errorf(err, 400, "unsupported_content", "messages",
                              "messages[%d]: only text and image_url content parts are supported", i);
    }
    return 0;
}

static int check_messages(const cJSON *msgs, api_error *err) {
    if (!msgs || cJSON_IsNull(msgs)) return api_errorf(err, 400, "missing_parameter", "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return api_errorf(err, 400, "invalid_type", "messages", "'messages' must be a list");
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return api_errorf(err, 400, "invalid_value", "messages", "'messages' is empty");
    if (n > MAX_MESSAGES) return api_errorf(err, 400, "invalid_value", "messages", "at most %d messages", MAX_MESSAGES);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !role->valuestring[0])
            return api_errorf(err, 400, "invalid_value", "messages", "messages[%d] must be an object with a 'role'", i);
        if (check_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, err)) return -1;
        i++;
    }
    return 0;
}

/* A copy of the messages where each list of text parts becomes one string (parts joined by "\n", as
 * vLLM does): most templates only know string content. An image part becomes the model's image marker
 * (marker; NULL: no images are served, and check_content let none through to here unless loading them
 * refuses first). */
static cJSON *flatten_messages(const cJSON *msgs, const char *marker) {
    cJSON *copy = cJSON_Duplicate(msgs, true);
    cJSON *m;
    cJSON_ArrayForEach(m, copy) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsArray(content)) continue;
        buf text = {0};
        const cJSON *part;
        int i = 0;
        cJSON_ArrayForEach(part, content) {
            if (i++) buf_puts(&text, "\n");
            const char *url;
            if (server_image_part(part, &url)) buf_puts(&text, marker ? marker : "");
            else buf_puts(&text, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
        }
        bool ok = !text.failed && cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(text.data ? text.data : ""));
        buf_free(&text);
        if (!ok) {
            cJSON_Delete(copy);
            return NULL;
        }
    }
    return copy;
}

/* Template variables beyond messages: tools (also with tool_choice "none", as vLLM renders them; see
 * docs/api.md), reasoning_effort, and the extension chat_template_kwargs, whose keys win. */
static cJSON *template_vars(const cJSON *body, api_error *err) {
    const char *effort;
    if (params_reasoning_effort(body, &effort, err)) return NULL;
    cJSON *vars = cJSON_CreateObject();
    if (!vars) return NULL;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (cJSON_IsArray(tools)) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, true));
    if (effort) cJSON_AddStringToObject(vars, "reasoning_effort", effort);
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) {
            cJSON_Delete(vars);
            api_errorf(err, 400, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            return NULL;
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, kw) {
            if (!strcmp(v->string, "messages")) continue;
            cJSON_DeleteItemFromObjectCaseSensitive(vars, v->string);
            cJSON_AddItemToObject(vars, v->string, cJSON_Duplicate(v, true));
        }
    }
    return vars;
}

/* Renders the conversation with the chat template into *text (malloc'd, NUL-terminated; *len bytes).
 * Also what POST /apply-template answers (apply_template.c). */
int chat_render_text(pith_server *srv, const cJSON *body, char **text, size_t *len, api_error *err) {
    *text = NULL;
    *len = 0;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (check_messages(msgs, err)) return -1;
    bool add_gen = true;
    const cJSON *ag = cJSON_GetObjectItemCaseSensitive(body, "add_generation_prompt");
    if (cJSON_IsBool(ag)) add_gen = cJSON_IsTrue(ag);
    else if (ag && !cJSON_IsNull(ag))
        return api_errorf(err, 400, "invalid_type", "add_generation_prompt", "'add_generation_prompt' must be a boolean");
    api_error verr = {0};
    cJSON *vars = template_vars(body, &verr);
    if (!vars) return verr.status ? (*err = verr, -1) : api_errorf(err, 500, "internal_error", NULL, "out of memory");
    cJSON *flat = flatten_messages(msgs, srv->vision ? pith_vision_marker(srv->vision) : NULL);
    if (!flat) {
        cJSON_Delete(vars);
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    tp_format fmt = tools_format_of(srv);
    if (fmt == TP_FMT_HARMONY) tools_prepare_harmony(flat);
    if (fmt == TP_FMT_MISTRAL) tools_prepare_mistral(flat);
    if (tools_prepare_messages(flat, err) ||
        (!tools_template_knows_tools(srv->chat ? pith_chat_template_source(srv->chat) : NULL) &&
         tools_polyfill(flat, cJSON_GetObjectItemCaseSensitive(vars, "tools"), err))) {
        cJSON_Delete(vars);
        cJSON_Delete(flat);
        return -1;
    }
    pith_chat_options opts = {
        .add_generation_prompt = add_gen, .bos_token = srv->bos_text, .eos_token = srv->eos_text, .vars = vars,
    };
    pith_err why;
    int rc = pith_chat_template_render(srv->chat, flat, &opts, text, len, &why);
    cJSON_Delete(vars);
    cJSON_Delete(flat);
    if (rc) {
        server_log(srv, PITH_LOG_ERROR, "chat template: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "messages", "the messages cannot be rendered with this model's chat template: %s",
                          why.msg);
    }
    return 0;
}

/* Renders and encodes the conversation; on success *out holds the prompt. tools (may be NULL) learns
 * how the prompt ends (an open <think>). */
int chat_build_prompt_tools(pith_server *srv, const cJSON *body, chat_tools *tools, gen_prompt *out, api_error *err) {
    memset(out, 0, sizeof *out);
    char *text;
    size_t len;
    server_images im;
    /* images first: a bad one is refused before the template runs */
    if (server_images_load(srv, cJSON_GetObjectItemCaseSensitive(body, "messages"), &im, err)) return -1;
    if (chat_render_text(srv, body, &text, &len, err)) {
        server_images_free(&im);
        return -1;
    }
    pith_err why;
    int rc;
    tools_note_prompt(tools, text, len);
    if (im.n > 0) {
        rc = server_images_prompt(srv, &im, text, len, &out->ids, &out->n, err);
        free(text);
        if (rc || !(out->images = malloc(sizeof *out->images))) {
            server_images_free(&im);
            free(out->ids);
            memset(out, 0, sizeof *out);
            return rc ? -1 : api_errorf(err, 500, "internal_error", NULL, "out of memory");
        }
        *out->images = im;
    } else {
        rc = pith_tokenizer_encode(srv->tok, text, len, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &out->ids, &out->n, &why);
        free(text);
        if (rc) {
            server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
            return api_errorf(err, 400, "invalid_value", "messages", "the messages could not be tokenized");
        }
    }
    int bos = pith_tokenizer_bos(srv->tok);
    if (out->n >= 2 && bos >= 0 && out->ids[0] == bos && out->ids[1] == bos) {
        memmove(out->ids, out->ids + 1, (size_t)(out->n - 1) * sizeof *out->ids);
        out->n--;
        for (int i = 0; out->images && i < out->images->n; i++) out->images->media[i].pos--;
    }
    return 0;
}

/* vLLM's prompt_token_ids: the prompt as token ids, used as given instead of rendering messages (for
 * trainers that tokenize themselves). 0 when absent (*used false), -1 with err when malformed. */
static int read_prompt_token_ids(pith_server *srv, const cJSON *body, gen_prompt *out, bool *used, api_error *err) {
    *used = false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "prompt_token_ids");
    if (!v || cJSON_IsNull(v)) return 0;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n == 0) return api_errorf(err, 400, "invalid_value", "prompt_token_ids", "'prompt_token_ids' must be a non-empty list of token ids");
    if (!(out->ids = malloc((size_t)n * sizeof *out->ids))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    int n_vocab = server_n_vocab(srv);
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        int64_t id;
        if (!json_get_int(t, &id) || id < 0 || id >= n_vocab)
            return api_errorf(err, 400, "invalid_value", "prompt_token_ids", "token ids must be integers in [0, %d)", n_vocab);
        out->ids[out->n++] = (int32_t)id;
    }
    *used = true;
    return 0;
}

int chat_build_prompt(pith_server *srv, const cJSON *body, gen_prompt *out, api_error *err) {
    return chat_build_prompt_tools(srv, body, NULL, out, err);
}

int chat_prepare(pith_server *srv, const cJSON *body, gen_params *p, gen_prompt *prompt, api_error *err) {
    bool ids_given = false;
    if (gen_params_parse(body, GEN_CHAT, p, err) || gen_check_model(srv, p->model, err) ||
        read_prompt_token_ids(srv, body, prompt, &ids_given, err) || tools_request(srv, body, &p->tools, err) ||
        tools_constrain(srv, p, err) || gen_params_compile(srv, p, err) ||
        (!ids_given && chat_build_prompt_tools(srv, body, p->tools, prompt, err)))
        return -1;
    return 0;
}

static enum MHD_Result chat_completions(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    gen_params p;
    gen_prompt *prompt = calloc(1, sizeof *prompt);
    api_error e;
    if (!prompt) {
        api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        memset(&p, 0, sizeof p);
    }
    if (!prompt || chat_prepare(r->srv, body, &p, prompt, &e)) {
        gen_prompts_free(prompt, 1);
        gen_params_free(&p);
        cJSON_Delete(body);
        return http_send_error(r, &e);
    }
    p.model = NULL;
    cJSON_Delete(body);
    return gen_run(r, GEN_CHAT, &p, prompt, 1);
}

enum MHD_Result handle_chat_completions(http_request *r) {
    enum MHD_Result rc = chat_completions(r);
    gen_trim_after(r);
    return rc;
}
