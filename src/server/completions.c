/* POST /v1/completions: prompt as a string, a list of strings, a list of token ids, or a list of such
 * lists; each prompt gets n choices. Strings are encoded with BOS (when the tokenizer adds one) and with
 * special tokens recognised; token ids are used as given.
 *
 * With a non-empty `suffix` (OpenAI's insertion), each prompt, which must then be text, is the prefix of a
 * fill-in-the-middle prompt (fim_build, below; also used by POST /infill, infill.c) and the model writes
 * the middle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/generate.h"
#include "server/handlers.h"

#define MAX_CHOICES 64

static int encode_text(pith_server *srv, const char *text, gen_prompt *out, api_error *err) {
    pith_err why;
    if (pith_tokenizer_encode(srv->tok, text, strlen(text), PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &out->ids,
                              &out->n, &why)) {
        server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "prompt", "the prompt could not be tokenized");
    }
    return 0;
}

static int read_ids(pith_server *srv, const cJSON *arr, gen_prompt *out, api_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return api_errorf(err, 400, "invalid_value", "prompt", "a token prompt must hold at least one token");
    if (!(out->ids = malloc((size_t)n * sizeof *out->ids))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    int n_vocab = server_n_vocab(srv);
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        int64_t id;
        if (!json_get_int(v, &id) || id < 0 || id >= n_vocab)
            return api_errorf(err, 400, "invalid_value", "prompt", "token ids must be integers in [0, %d)", n_vocab);
        out->ids[out->n++] = (int32_t)id;
    }
    return 0;
}

/* Appends text's tokens (no BOS, special-token texts read as plain text) to out. */
static int fim_append_text(pith_server *srv, gen_prompt *out, int *cap, const char *text, size_t len, api_error *err) {
    int32_t *ids = NULL;
    int n = 0;
    pith_err why;
    if (len && pith_tokenizer_encode(srv->tok, text, len, 0, &ids, &n, &why)) {
        server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "prompt", "the text could not be tokenized");
    }
    if (out->n + n > *cap) {
        int c = *cap ? *cap : 64;
        while (c < out->n + n) c = c > (1 << 29) ? out->n + n : c * 2;
        int32_t *grown = realloc(out->ids, (size_t)c * sizeof *grown);
        if (!grown) {
            free(ids);
            return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        }
        out->ids = grown;
        *cap = c;
    }
    if (n) memcpy(out->ids + out->n, ids, (size_t)n * sizeof *ids);
    out->n += n;
    free(ids);
    return 0;
}

static int fim_append_id(gen_prompt *out, int *cap, int32_t id, api_error *err) {
    if (out->n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        int32_t *grown = realloc(out->ids, (size_t)c * sizeof *grown);
        if (!grown) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        out->ids = grown;
        *cap = c;
    }
    out->ids[out->n++] = id;
    return 0;
}

int fim_check(pith_server *srv, const char *param, api_error *err) {
    if (pith_tokenizer_fim(srv->tok, PITH_TOK_FIM_PRE) < 0 || pith_tokenizer_fim(srv->tok, PITH_TOK_FIM_SUF) < 0 ||
        pith_tokenizer_fim(srv->tok, PITH_TOK_FIM_MID) < 0)
        return api_errorf(err, 400, "invalid_request", param,
                          "this model has no fill-in-the-middle tokens (prefix, suffix and middle), so it cannot infill");
    return 0;
}

int fim_build(pith_server *srv, const char *prefix, const char *suffix, const cJSON *extra, const char *middle,
              gen_prompt *out, api_error *err) {
    memset(out, 0, sizeof *out);
    if (fim_check(srv, NULL, err)) return -1;
    const pith_tokenizer *tok = srv->tok;
    int32_t pre = pith_tokenizer_fim(tok, PITH_TOK_FIM_PRE), suf = pith_tokenizer_fim(tok, PITH_TOK_FIM_SUF),
            mid = pith_tokenizer_fim(tok, PITH_TOK_FIM_MID), rep = pith_tokenizer_fim(tok, PITH_TOK_FIM_REP),
            sep = pith_tokenizer_fim(tok, PITH_TOK_FIM_SEP);
    int cap = 0;
    /* BOS where the tokenizer adds one: what encoding "" with it gives */
    int32_t *b = NULL;
    int nb = 0;
    pith_err why;
    int bos = pith_tokenizer_bos(tok);
    if (!pith_tokenizer_encode(tok, "", 0, PITH_TOK_ADD_BOS, &b, &nb, &why) && nb > 0 && b[0] == bos &&
        fim_append_id(out, &cap, bos, err)) {
        free(b);
        return -1;
    }
    free(b);
    bool repo = rep >= 0 && sep >= 0; /* the repo-level pattern (Qwen2.5-Coder): files, then the current one */
    int n_extra = cJSON_GetArraySize(extra);
    if (repo && n_extra > 0 &&
        (fim_append_id(out, &cap, rep, err) || fim_append_text(srv, out, &cap, "myproject\n", 10, err)))
        return -1;
    const cJSON *chunk;
    cJSON_ArrayForEach(chunk, extra) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(chunk, "filename");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(chunk, "text");
        const char *name = cJSON_IsString(fn) ? fn->valuestring : "tmp";
        const char *text = cJSON_IsString(tx) ? tx->valuestring : "";
        size_t head_len = strlen(name) + 16;
        char *head = malloc(head_len);
        if (!head) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        /* with the separator token: <sep>name\n text; without: a plain-text header before the text */
        int hl = repo ? snprintf(head, head_len, "%s\n", name) : snprintf(head, head_len, "--- %s ---\n", name);
        int rc = (repo && fim_append_id(out, &cap, sep, err)) || fim_append_text(srv, out, &cap, head, (size_t)hl, err) ||
                 fim_append_text(srv, out, &cap, text, strlen(text), err) ||
                 (!repo && fim_append_text(srv, out, &cap, "\n", 1, err));
        free(head);
        if (rc) return -1;
    }
    if (repo && n_extra > 0 &&
        (fim_append_id(out, &cap, sep, err) || fim_append_text(srv, out, &cap, "filename\n", 9, err)))
        return -1;
    if (fim_append_id(out, &cap, pre, err) || fim_append_text(srv, out, &cap, prefix, strlen(prefix), err) ||
        fim_append_id(out, &cap, suf, err) || fim_append_text(srv, out, &cap, suffix, strlen(suffix), err) ||
        fim_append_id(out, &cap, mid, err) || (middle && fim_append_text(srv, out, &cap, middle, strlen(middle), err)))
        return -1;
    return 0;
}

/* The prompts of the request; *n_prompts of them. */
static int read_prompts(pith_server *srv, const cJSON *body, gen_prompt **prompts, int *n_prompts, api_error *err) {
    *prompts = NULL;
    *n_prompts = 0;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!pr || cJSON_IsNull(pr)) return api_errorf(err, 400, "missing_parameter", "prompt", "'prompt' is required");
    bool one_string = cJSON_IsString(pr);
    if (!one_string && !cJSON_IsArray(pr))
        return api_errorf(err, 400, "invalid_type", "prompt", "'prompt' must be a string, a list of strings or token ids");
    int n_items = one_string ? 1 : cJSON_GetArraySize(pr);
    if (n_items == 0) return api_errorf(err, 400, "invalid_value", "prompt", "'prompt' is empty");
    const cJSON *first = one_string ? pr : pr->child;
    /* One list of ids is one prompt; otherwise every item is a prompt of its own. */
    bool single_ids = !one_string && cJSON_IsNumber(first);
    int n = single_ids ? 1 : n_items;
    if (n > MAX_CHOICES) return api_errorf(err, 400, "invalid_value", "prompt", "at most %d prompts per request", MAX_CHOICES);
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(body, "suffix");
    if (suffix && !cJSON_IsNull(suffix) && !cJSON_IsString(suffix))
        return api_errorf(err, 400, "invalid_type", "suffix", "'suffix' must be a string");
    bool fim = cJSON_IsString(suffix) && suffix->valuestring[0]; /* "" is no suffix, as before */
    if (fim && fim_check(srv, "suffix", err)) return -1;
    if (!(*prompts = calloc((size_t)n, sizeof **prompts))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    *n_prompts = n;
    if (single_ids && fim)
        return api_errorf(err, 400, "invalid_value", "suffix", "'suffix' needs the prompt as text, not token ids");
    if (single_ids) return read_ids(srv, pr, &(*prompts)[0], err);
    int i = 0;
    const cJSON *item = first;
    for (; item && i < n; item = item->next, i++) {
        if (cJSON_IsString(item) && fim) {
            if (fim_build(srv, item->valuestring, suffix->valuestring, NULL, NULL, &(*prompts)[i], err)) return -1;
        } else if (fim) {
            return api_errorf(err, 400, "invalid_value", "suffix", "'suffix' needs the prompt as text, not token ids");
        } else if (cJSON_IsString(item)) {
            if (encode_text(srv, item->valuestring, &(*prompts)[i], err)) return -1;
        } else if (cJSON_IsArray(item)) {
            if (read_ids(srv, item, &(*prompts)[i], err)) return -1;
        } else {
            return api_errorf(err, 400, "invalid_type", "prompt", "'prompt' must be a string, a list of strings or token ids");
        }
    }
    return 0;
}

int completions_prepare(pith_server *srv, const cJSON *body, gen_params *p, gen_prompt **prompts, int *n_prompts,
                        api_error *err) {
    *prompts = NULL;
    *n_prompts = 0;
    if (gen_params_parse(body, GEN_COMPLETION, p, err) || gen_check_model(srv, p->model, err) ||
        gen_params_compile(srv, p, err) || read_prompts(srv, body, prompts, n_prompts, err))
        return -1;
    if (*n_prompts * p->n > MAX_CHOICES)
        return api_errorf(err, 400, "invalid_value", "n", "at most %d choices per request (prompts times n)", MAX_CHOICES);
    return 0;
}

static enum MHD_Result completions(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    gen_params p;
    gen_prompt *prompts = NULL;
    int n_prompts = 0;
    api_error e;
    if (completions_prepare(r->srv, body, &p, &prompts, &n_prompts, &e)) {
        gen_prompts_free(prompts, n_prompts);
        gen_params_free(&p);
        cJSON_Delete(body);
        return http_send_error(r, &e);
    }
    p.model = NULL; /* points into the body, freed next */
    cJSON_Delete(body);
    return gen_run(r, GEN_COMPLETION, &p, prompts, n_prompts);
}

enum MHD_Result handle_completions(http_request *r) {
    enum MHD_Result rc = completions(r);
    gen_trim_after(r);
    return rc;
}
