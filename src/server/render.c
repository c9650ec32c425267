/* POST /v1/completions/render and POST /v1/chat/completions/render (vLLM's render endpoints): the body
 * of /v1/completions or /v1/chat/completions, checked and turned into prompt token ids exactly as those
 * endpoints do, answered without generating. Routers that score endpoints by their prefix caches (llm-d's
 * precise prefix-cache scorer) call them to learn the ids a request will run, so that the block hashes
 * they compute match the server's without a tokenizer of their own.
 *
 * The answer is vLLM's GenerateRequest (the token-in request a render produces): for chat one object,
 * for completions a list with one object per prompt:
 *   {"request_id", "token_ids", "features": null, "sampling_params", "model", "stream", "stream_options",
 *    "cache_salt", "priority", "kv_transfer_params": null}
 * The ids come from completions_prepare / chat_prepare, the very functions the generation handlers
 * call, and the length checks are gen_run's (gen_check_lengths), so a body that the real endpoint
 * refuses is refused here with the same error, and one it accepts renders to the ids it would run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/generate.h"
#include "server/handlers.h"

/* The shortest decimal text that reads back as v: a client that sent temperature 0.123 sees 0.123,
 * not the float's exact binary value printed as a double (0.12300000339746475). */
static void float_text(float v, char out[32]) {
    for (int prec = 6; prec <= 9; prec++) { /* 9 significant digits always round-trip a float */
        snprintf(out, 32, "%.*g", prec, (double)v);
        if (strtof(out, NULL) == v) return;
    }
}

/* Adds a raw JSON value (a number already formatted); false when out of memory. */
static bool add_float(cJSON *o, const char *name, float v) {
    char t[32];
    float_text(v, t);
    return cJSON_AddRawToObject(o, name, t) != NULL;
}

/* "[id,id,...]": written out directly, one cJSON node per token would cost 80 bytes each (tokenize.c). */
static char *ids_text(const int32_t *ids, int n) {
    buf b = {0};
    buf_puts(&b, "[");
    for (int i = 0; i < n && !b.failed; i++) buf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    buf_puts(&b, "]");
    if (b.failed) {
        buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* vLLM's SamplingParams, the fields Pith has, with their values as the engine gets them (max_tokens as
 * gen_run resolves it for this prompt; top_k 0 is off; seed null when the body gave none). */
static cJSON *sampling_params(const gen_params *p, int max_tokens) {
    const pith_sampling_params *s = &p->sampling;
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "n", p->n) && add_float(o, "temperature", s->temperature) &&
              add_float(o, "top_p", s->top_p) && cJSON_AddNumberToObject(o, "top_k", s->top_k) &&
              add_float(o, "min_p", s->min_p) && add_float(o, "presence_penalty", s->presence_penalty) &&
              add_float(o, "frequency_penalty", s->frequency_penalty) &&
              add_float(o, "repetition_penalty", s->repetition_penalty);
    if (ok && p->seed_given) {
        char t[32]; /* as text: a 64-bit seed does not survive a double */
        snprintf(t, sizeof t, "%lld", (long long)(int64_t)s->seed);
        ok = cJSON_AddRawToObject(o, "seed", t) != NULL;
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "seed") != NULL;
    }
    cJSON *stop = ok ? cJSON_AddArrayToObject(o, "stop") : NULL;
    for (int i = 0; stop && i < p->n_stop; i++) ok &= cJSON_AddItemToArray(stop, cJSON_CreateString(p->stop[i]));
    cJSON *stop_ids = ok && stop ? cJSON_AddArrayToObject(o, "stop_token_ids") : NULL;
    for (int i = 0; stop_ids && i < p->n_stop_ids; i++) ok &= cJSON_AddItemToArray(stop_ids, cJSON_CreateNumber(p->stop_ids[i]));
    ok = ok && stop && stop_ids && cJSON_AddBoolToObject(o, "ignore_eos", p->ignore_eos) &&
         cJSON_AddNumberToObject(o, "max_tokens", max_tokens) &&
         /* vLLM's logprobs is the number of alternatives (chat: top_logprobs), null when off */
         (p->logprobs ? cJSON_AddNumberToObject(o, "logprobs", p->top_logprobs) : cJSON_AddNullToObject(o, "logprobs")) &&
         (p->prompt_logprobs >= 0 ? cJSON_AddNumberToObject(o, "prompt_logprobs", p->prompt_logprobs)
                                  : cJSON_AddNullToObject(o, "prompt_logprobs"));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One GenerateRequest for prompt pr; NULL when out of memory. */
static cJSON *generate_request(pith_server *srv, const char *id_prefix, const gen_prompt *pr, const gen_params *p,
                               int max_tokens, const cJSON *body) {
    char id[64];
    /* the response ids' scheme (format.c): unique within this server's life */
    unsigned long long serial = (unsigned long long)atomic_fetch_add(&srv->serial, 1) + 1;
    snprintf(id, sizeof id, "%s%llx%06llx", id_prefix, (unsigned long long)srv->created_unix, serial);
    cJSON *o = cJSON_CreateObject();
    char *ids = ids_text(pr->ids, pr->n);
    cJSON *sp = sampling_params(p, max_tokens);
    /* vLLM echoes stream_options only for a streamed request, as the body gave it */
    const cJSON *so = p->stream ? cJSON_GetObjectItemCaseSensitive(body, "stream_options") : NULL;
    cJSON *so_copy = so ? cJSON_Duplicate(so, true) : cJSON_CreateNull();
    bool ok = o && ids && sp && so_copy && cJSON_AddStringToObject(o, "request_id", id) &&
              cJSON_AddRawToObject(o, "token_ids", ids) && cJSON_AddNullToObject(o, "features") &&
              cJSON_AddItemToObject(o, "sampling_params", sp);
    if (ok) sp = NULL; /* owned by o now */
    ok = ok && cJSON_AddStringToObject(o, "model", srv->model_name) && cJSON_AddBoolToObject(o, "stream", p->stream) &&
         cJSON_AddItemToObject(o, "stream_options", so_copy);
    if (ok) so_copy = NULL;
    ok = ok &&
         (p->cache_salt ? cJSON_AddStringToObject(o, "cache_salt", p->cache_salt) : cJSON_AddNullToObject(o, "cache_salt")) &&
         cJSON_AddNumberToObject(o, "priority", p->priority) && cJSON_AddNullToObject(o, "kv_transfer_params");
    free(ids);
    cJSON_Delete(sp);
    cJSON_Delete(so_copy);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Each prompt's GenerateRequest, after gen_run's length checks: into `list` when it is an array (the
 * completions answer), else *one (chat's single prompt). 0, or -1 with err. */
static int render_prompts(pith_server *srv, gen_kind kind, const gen_params *p, const gen_prompt *prompts, int n,
                          const cJSON *body, cJSON *list, cJSON **one, api_error *err) {
    for (int i = 0; i < n; i++) {
        int max_tokens;
        if (gen_check_lengths(srv, kind, p, &prompts[i], &max_tokens, err)) return -1;
        cJSON *item = generate_request(srv, kind == GEN_CHAT ? "chatcmpl-" : "cmpl-", &prompts[i], p, max_tokens, body);
        if (!item || (list && !cJSON_AddItemToArray(list, item))) {
            cJSON_Delete(item);
            return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        }
        if (!list) *one = item;
    }
    return 0;
}

static enum MHD_Result render(http_request *r, gen_kind kind) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    gen_params p;
    gen_prompt *prompts = NULL;
    int n_prompts = 0;
    api_error e;
    cJSON *out = NULL;
    int failed;
    if (kind == GEN_CHAT) {
        prompts = calloc(1, sizeof *prompts);
        if (!prompts) {
            memset(&p, 0, sizeof p);
            failed = api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        } else {
            n_prompts = 1;
            failed = chat_prepare(srv, body, &p, prompts, &e);
        }
    } else {
        failed = completions_prepare(srv, body, &p, &prompts, &n_prompts, &e);
        if (!failed && !(out = cJSON_CreateArray())) failed = api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    }
    if (!failed) failed = render_prompts(srv, kind, &p, prompts, n_prompts, body, out, &out, &e);
    gen_prompts_free(prompts, n_prompts);
    gen_params_free(&p);
    cJSON_Delete(body);
    if (failed) {
        cJSON_Delete(out);
        return http_send_error(r, &e);
    }
    return http_send_json(r, 200, out);
}

enum MHD_Result handle_render_completions(http_request *r) {
    enum MHD_Result rc = render(r, GEN_COMPLETION);
    gen_trim_after(r);
    return rc;
}

enum MHD_Result handle_render_chat_completions(http_request *r) {
    enum MHD_Result rc = render(r, GEN_CHAT);
    gen_trim_after(r);
    return rc;
}
