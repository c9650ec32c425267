/* POST /tokenize {"prompt": text, "add_special_tokens": true} or {"messages": [...]} gives
 * {"tokens", "count", "max_model_len"}; POST /detokenize {"tokens": [...]} gives {"prompt": text}.
 * The shapes follow vLLM's endpoints of the same names; llama.cpp's names are taken too: "content" for
 * "prompt", "add_special" for "add_special_tokens", "parse_special" (default true), and "with_pieces",
 * which makes each token {"id", "piece"}: the token's bytes, a string when they are valid UTF-8, else a
 * list of byte values. Both routes also answer under /v1/. */
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

/* The body's boolean `name` (or its alias), default dflt; -1 with err when it is not a boolean. */
static int get_flag(const cJSON *body, const char *name, const char *alias, bool dflt, bool *out, api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    if ((!v || cJSON_IsNull(v)) && alias) {
        v = cJSON_GetObjectItemCaseSensitive(body, alias);
        name = alias;
    }
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return api_errorf(err, 400, "invalid_type", name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Whether s[0..n) is valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF). */
static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return false;
        i += len;
    }
    return true;
}

/* {"id": id, "piece": ...} for /tokenize with_pieces. */
static void put_piece(buf *out, const pith_tokenizer *tok, int32_t id, char *piece, size_t cap, bool first) {
    size_t n = pith_tokenizer_token_bytes(tok, id, piece, cap);
    buf_printf(out, "%s{\"id\":%d,\"piece\":", first ? "" : ",", (int)id);
    if (valid_utf8((const unsigned char *)piece, n) && !memchr(piece, 0, n)) { /* a <0x00> piece: bytes */
        cJSON *str = cJSON_CreateString(piece);
        char *json = str ? cJSON_PrintUnformatted(str) : NULL;
        if (json) buf_puts(out, json);
        else out->failed = true;
        free(json);
        cJSON_Delete(str);
    } else {
        buf_puts(out, "[");
        for (size_t i = 0; i < n; i++) buf_printf(out, i ? ",%u" : "%u", (unsigned)(unsigned char)piece[i]);
        buf_puts(out, "]");
    }
    buf_puts(out, "}");
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
    if (!prompt || cJSON_IsNull(prompt)) prompt = cJSON_GetObjectItemCaseSensitive(body, "content"); /* llama.cpp's */
    bool with_pieces;
    if (get_flag(body, "with_pieces", NULL, false, &with_pieces, &e)) return fail(r, body, &e);
    if (cJSON_GetObjectItemCaseSensitive(body, "messages")) {
        if (chat_build_prompt(srv, body, &p, &e)) return fail(r, body, &e);
        if (p.images) { /* the ids are the answer: the images' pixels are not needed */
            int32_t *ids = p.ids;
            p.ids = NULL;
            int n = p.n;
            gen_prompt_clear(&p);
            p.ids = ids;
            p.n = n;
        }
    } else if (cJSON_IsString(prompt)) {
        bool add_special, parse_special;
        if (get_flag(body, "add_special_tokens", "add_special", true, &add_special, &e) ||
            get_flag(body, "parse_special", NULL, true, &parse_special, &e))
            return fail(r, body, &e);
        int flags = (parse_special ? PITH_TOK_PARSE_SPECIAL : 0) | (add_special ? PITH_TOK_ADD_BOS : 0);
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
    size_t piece_cap = with_pieces ? pith_detok_max_piece(srv->tok) : 0;
    char *piece = with_pieces ? malloc(piece_cap) : NULL;
    if (with_pieces && !piece) out.failed = true;
    for (int i = 0; i < p.n && !out.failed; i++) {
        if (piece) {
            put_piece(&out, srv->tok, p.ids[i], piece, piece_cap, i == 0);
            continue;
        }
        char num[16];
        int k = snprintf(num, sizeof num, i ? ",%d" : "%d", (int)p.ids[i]);
        buf_append(&out, num, (size_t)k);
    }
    free(piece);
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
