/* POST /v1/completions: prompt as a string, a list of strings, a list of token ids, or a list of such
 * lists; each prompt gets n choices. Strings are encoded with BOS (when the tokenizer adds one) and with
 * special tokens recognised; token ids are used as given. */
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
    if (!(*prompts = calloc((size_t)n, sizeof **prompts))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    *n_prompts = n;
    if (single_ids) return read_ids(srv, pr, &(*prompts)[0], err);
    int i = 0;
    const cJSON *item = first;
    for (; item && i < n; item = item->next, i++) {
        if (cJSON_IsString(item)) {
            if (encode_text(srv, item->valuestring, &(*prompts)[i], err)) return -1;
        } else if (cJSON_IsArray(item)) {
            if (read_ids(srv, item, &(*prompts)[i], err)) return -1;
        } else {
            return api_errorf(err, 400, "invalid_type", "prompt", "'prompt' must be a string, a list of strings or token ids");
        }
    }
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
    if (gen_params_parse(body, GEN_COMPLETION, &p, &e) || gen_check_model(r->srv, p.model, &e) ||
        gen_params_compile(r->srv, &p, &e) ||
        read_prompts(r->srv, body, &prompts, &n_prompts, &e)) {
        gen_prompts_free(prompts, n_prompts);
        gen_params_free(&p);
        cJSON_Delete(body);
        return http_send_error(r, &e);
    }
    if (n_prompts * p.n > MAX_CHOICES) {
        api_errorf(&e, 400, "invalid_value", "n", "at most %d choices per request (prompts times n)", MAX_CHOICES);
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
