/* POST /tokenize {"prompt": text, "add_special_tokens": true} or {"messages": [...]} gives
 * {"tokens", "count", "max_model_len"}; POST /detokenize {"tokens": [...]} gives {"prompt": text}.
 * The shapes follow vLLM's endpoints of the same names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"

#include "server/generate.h"
#include "server/handlers.h"

static enum MHD_Result fail(http_request *r, cJSON *body, const api_error *e) {
    cJSON_Delete(body);
    return http_send_error(r, e);
}

static enum MHD_Result tokenize(http_request *r) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    api_error e;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (!cJSON_IsObject(body)) return fail(r, body, (api_errorf(&e, 400, "invalid_type", NULL, "the request body must be a JSON object"), &e));
    if (cJSON_IsString(model) && gen_check_model(srv, model->valuestring, &e)) return fail(r, body, &e);
    gen_prompt p = {0};
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (cJSON_GetObjectItemCaseSensitive(body, "messages")) {
        if (chat_build_prompt(srv, body, &p, &e)) return fail(r, body, &e);
    } else if (cJSON_IsString(prompt)) {
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(body, "add_special_tokens");
        if (special && !cJSON_IsBool(special))
            return fail(r, body, (api_errorf(&e, 400, "invalid_type", "add_special_tokens", "'add_special_tokens' must be a boolean"), &e));
        int flags = PITH_TOK_PARSE_SPECIAL | (special && cJSON_IsFalse(special) ? 0 : PITH_TOK_ADD_BOS);
        pith_err why;
        if (pith_tokenizer_encode(srv->tok, prompt->valuestring, strlen(prompt->valuestring), flags, &p.ids, &p.n, &why)) {
            server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
            return fail(r, body, (api_errorf(&e, 400, "invalid_value", "prompt", "the prompt could not be tokenized"), &e));
        }
    } else {
        return fail(r, body, (api_errorf(&e, 400, "missing_parameter", "prompt", "'prompt' (a string) or 'messages' is required"), &e));
    }
    cJSON_Delete(body);
    if (p.n > GEN_MAX_JSON_ITEMS) { /* an answer a client could not send back (gen_parse_body) */
        free(p.ids);
        return http_send_error(r, (api_errorf(&e, 400, "too_many_tokens", "prompt",
                                              "the prompt gives %d tokens; /tokenize answers at most %d", p.n,
                                              GEN_MAX_JSON_ITEMS), &e));
    }
    /* Written out directly: a cJSON node per token cost 80 bytes each before the text was printed. */
    buf out = {0};
    buf_puts(&out, "{\"tokens\":[");
    for (int i = 0; i < p.n; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, i ? ",%d" : "%d", (int)p.ids[i]);
        buf_append(&out, num, (size_t)k);
    }
    buf_printf(&out, "],\"count\":%d,\"max_model_len\":%d}", p.n, srv->max_seq_len);
    free(p.ids);
    rc = out.failed ? http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e))
                    : http_send_text(r, 200, "application/json", out.data, out.len);
    buf_free(&out);
    return rc;
}

static enum MHD_Result detokenize(http_request *r) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    api_error e;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(body, "tokens");
    if (!cJSON_IsArray(toks)) return fail(r, body, (api_errorf(&e, 400, "missing_parameter", "tokens", "'tokens' (a list of token ids) is required"), &e));
    int n = cJSON_GetArraySize(toks), n_vocab = server_n_vocab(srv);
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) return fail(r, body, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    int k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, toks) {
        int64_t id;
        if (!json_get_int(v, &id) || id < 0 || id >= n_vocab) {
            free(ids);
            return fail(r, body, (api_errorf(&e, 400, "invalid_value", "tokens", "token ids must be integers in [0, %d)", n_vocab), &e));
        }
        ids[k++] = (int32_t)id;
    }
    cJSON_Delete(body);
    char *text = NULL;
    size_t len = 0;
    pith_err why;
    if (pith_tokenizer_decode(srv->tok, ids, k, false, &text, &len, &why)) {
        free(ids);
        server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
        return http_send_error(r, (api_errorf(&e, 400, "invalid_value", "tokens", "the tokens could not be decoded"), &e));
    }
    free(ids);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_tokenize(http_request *r) {
    enum MHD_Result rc = tokenize(r);
    gen_trim_after(r);
    return rc;
}

enum MHD_Result handle_detokenize(http_request *r) {
    enum MHD_Result rc = detokenize(r);
    gen_trim_after(r);
    return rc;
}
