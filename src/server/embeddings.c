/* POST /v1/embeddings (OpenAI's shape): `input` as a string, a list of strings, a list of token ids or a
 * list of such lists; `encoding_format` "float" (default) or "base64" (the little-endian float32 bytes);
 * `dimensions`, when given, must be the model's width (vectors are not truncated). Each input becomes one
 * engine request with embed set (engine.h), batched with whatever else runs; strings are encoded as
 * /v1/completions encodes them. The pooling comes from the model: GGUF `{arch}.pooling_type` (1 mean,
 * 2 cls, 3 last; 0, one vector per token, is refused), else a Hugging Face directory's
 * 1_Pooling/config.json (sentence-transformers), else mean, found once when the weights load (start-up,
 * reload, wake: server_model_pooling), never per request. Vectors are L2-normalised.
 *
 * The inputs' requests are one job (job.h), as a generation's choices are: the handler takes their final
 * events from it, and a client that goes away, a drain or an admin abort cancels them the same way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/json_file.h"
#include "server/buf.h"
#include "server/generate.h"
#include "server/handlers.h"
#include "server/job.h"

#define MAX_INPUTS 2048

/* The pooling config a sentence-transformers directory carries, checked before it is read: opening a FIFO
 * or a device there must not block a load (a wake that never finishes leaves the server asleep), and a
 * regular file larger than any real config is refused rather than read. Mean when there is none;
 * PITH_EMBED_OFF with why when it cannot be used. */
#define POOLING_CONFIG_MAX 65536
static int read_pooling_config(const char *dir, char *why, size_t cap) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir) >= (int)sizeof path) return PITH_EMBED_MEAN;
    cJSON *cfg;
    pith_err e;
    if (pith_json_read(path, POOLING_CONFIG_MAX, 4096, true, &cfg, &e)) {
        /* clients see the file's name in the model directory, not where the directory is */
        const char *msg = e.msg;
        size_t dl = strlen(dir);
        if (!strncmp(msg, dir, dl) && msg[dl] == '/') msg += dl + 1;
        snprintf(why, cap, "%s", msg);
        return PITH_EMBED_OFF;
    }
    if (!cfg) return PITH_EMBED_MEAN;
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        snprintf(why, cap, "1_Pooling/config.json is not a JSON object");
        return PITH_EMBED_OFF;
    }
    int mode = PITH_EMBED_MEAN;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "pooling_mode_lasttoken"))) mode = PITH_EMBED_LAST;
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "pooling_mode_cls_token"))) mode = PITH_EMBED_CLS;
    cJSON_Delete(cfg);
    return mode;
}

int server_model_pooling(const pith_model *m, char *why, size_t cap) {
    if (cap) why[0] = 0;
    const pith_model_file *f = m ? m->file : NULL;
    const pith_gguf *g = f ? pith_model_file_gguf(f) : NULL;
    pith_str arch;
    if (g && pith_gguf_get_str(g, "general.architecture", &arch) && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.pooling_type", (int)arch.len, arch.ptr);
        int64_t v;
        if (pith_gguf_get_i64(g, key, &v)) {
            if (v >= PITH_EMBED_MEAN && v <= PITH_EMBED_LAST) return (int)v;
            snprintf(why, cap, "the model's pooling type %lld is not supported (mean, cls or last)", (long long)v);
            return PITH_EMBED_OFF;
        }
    }
    const char *dir = f ? pith_model_file_dir(f) : NULL;
    if (!g && dir) return read_pooling_config(dir, why, cap);
    return PITH_EMBED_MEAN;
}

/* The pooling found when the served weights were loaded (never read per request: see server_internal.h). */
static int model_pooling(pith_server *srv, api_error *err) {
    pthread_rwlock_rdlock(&srv->model_lock);
    int pooling = srv->pooling;
    char why[sizeof srv->pooling_error];
    memcpy(why, srv->pooling_error, sizeof why);
    pthread_rwlock_unlock(&srv->model_lock);
    if (pooling >= PITH_EMBED_MEAN && pooling <= PITH_EMBED_LAST) return pooling;
    return api_errorf(err, 400, "invalid_request", NULL, "this model cannot serve embeddings: %s",
                      why[0] ? why : "its pooling is unknown");
}

static int read_ids(pith_server *srv, const cJSON *arr, gen_prompt *out, api_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return api_errorf(err, 400, "invalid_value", "input", "a token input must hold at least one token");
    if (!(out->ids = malloc((size_t)n * sizeof *out->ids))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    int n_vocab = server_n_vocab(srv); /* the engine's: srv->model is NULL while asleep, freed by a reload */
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        int64_t id;
        if (!json_get_int(v, &id) || id < 0 || id >= n_vocab)
            return api_errorf(err, 400, "invalid_value", "input", "token ids must be integers in [0, %d)", n_vocab);
        out->ids[out->n++] = (int32_t)id;
    }
    return 0;
}

static int encode_text(pith_server *srv, const char *text, gen_prompt *out, api_error *err) {
    pith_err why;
    if (pith_tokenizer_encode(srv->tok, text, strlen(text), PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &out->ids,
                              &out->n, &why)) {
        server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "input", "the input could not be tokenized");
    }
    if (out->n == 0) return api_errorf(err, 400, "invalid_value", "input", "an input string gave no tokens");
    return 0;
}

static int read_inputs(pith_server *srv, const cJSON *in, gen_prompt **out, int *n_out, api_error *err) {
    *out = NULL;
    *n_out = 0;
    if (!in || cJSON_IsNull(in)) return api_errorf(err, 400, "missing_parameter", "input", "'input' is required");
    bool one = cJSON_IsString(in);
    if (!one && !cJSON_IsArray(in))
        return api_errorf(err, 400, "invalid_type", "input", "'input' must be a string, a list of strings or token ids");
    int n_items = one ? 1 : cJSON_GetArraySize(in);
    if (n_items == 0) return api_errorf(err, 400, "invalid_value", "input", "'input' is empty");
    const cJSON *first = one ? in : in->child;
    bool single_ids = !one && cJSON_IsNumber(first);
    int n = single_ids ? 1 : n_items;
    if (n > MAX_INPUTS) return api_errorf(err, 400, "invalid_value", "input", "at most %d inputs per request", MAX_INPUTS);
    if (!(*out = calloc((size_t)n, sizeof **out))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    *n_out = n;
    if (single_ids) return read_ids(srv, in, &(*out)[0], err);
    int i = 0;
    for (const cJSON *item = first; item && i < n; item = item->next, i++) {
        if (cJSON_IsString(item)) {
            if (encode_text(srv, item->valuestring, &(*out)[i], err)) return -1;
        } else if (cJSON_IsArray(item)) {
            if (read_ids(srv, item, &(*out)[i], err)) return -1;
        } else {
            return api_errorf(err, 400, "invalid_type", "input", "'input' must be a string, a list of strings or token ids");
        }
    }
    return 0;
}

static char *base64_floats(const float *v, int n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4;
    unsigned char *b = malloc(len ? len : 1);
    char *s = malloc((len + 2) / 3 * 4 + 1);
    if (!b || !s) {
        free(b);
        free(s);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + k] = (unsigned char)(u >> (8 * k)); /* little-endian */
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        s[o++] = tab[x >> 18 & 63];
        s[o++] = tab[x >> 12 & 63];
        s[o++] = i + 1 < len ? tab[x >> 6 & 63] : '=';
        s[o++] = i + 2 < len ? tab[x & 63] : '=';
    }
    s[o] = 0;
    free(b);
    return s;
}

static enum MHD_Result fail(http_request *r, cJSON *body, gen_prompt *in, int n_in, const api_error *e) {
    gen_prompts_free(in, n_in);
    cJSON_Delete(body);
    return http_send_error(r, e);
}

static enum MHD_Result embeddings(http_request *r) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    api_error e;
    if (!cJSON_IsObject(body))
        return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_type", NULL, "the request body must be a JSON object"), &e));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_type", "model", "'model' must be a string"), &e));
    if (cJSON_IsString(model) && gen_check_model(srv, model->valuestring, &e)) return fail(r, body, NULL, 0, &e);
    int dim = pith_engine_n_embd(srv->engine);
    if (dim <= 0)
        return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_request", NULL, "this model cannot serve embeddings"), &e));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(body, "encoding_format");
    bool b64 = false;
    if (fmt && !cJSON_IsNull(fmt)) {
        if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))
            return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_value", "encoding_format", "'encoding_format' must be \"float\" or \"base64\""), &e));
        b64 = !strcmp(fmt->valuestring, "base64");
    }
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(body, "dimensions");
    int64_t want_dim;
    if (dims && !cJSON_IsNull(dims) && (!json_get_int(dims, &want_dim) || want_dim != dim))
        return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_value", "dimensions", "'dimensions' must be the model's width, %d (vectors are not truncated)", dim), &e));
    int pooling = model_pooling(srv, &e);
    if (pooling < 0) return fail(r, body, NULL, 0, &e);
    gen_prompt *in = NULL;
    int n_in = 0;
    if (read_inputs(srv, cJSON_GetObjectItemCaseSensitive(body, "input"), &in, &n_in, &e)) return fail(r, body, in, n_in, &e);
    for (int i = 0; i < n_in; i++)
        if (in[i].n >= srv->max_seq_len)
            return fail(r, body, in, n_in, (api_errorf(&e, 400, "context_length_exceeded", "input",
                                                       "this model's maximum context length is %d tokens, but input %d has %d tokens",
                                                       srv->max_seq_len, i, in[i].n), &e));
    cJSON_Delete(body);

    float *vecs = malloc((size_t)n_in * dim * sizeof *vecs);
    if (!vecs || job_create(srv, n_in, r->t_arrival, &r->job)) {
        free(vecs);
        return fail(r, NULL, in, n_in, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    int prompt_tokens = 0;
    for (int i = 0; i < n_in; i++) {
        pith_request q = {.prompt = in[i].ids, .n_prompt = in[i].n, .embed = (pith_embed_pooling)pooling};
        pith_err why;
        int sr = job_submit(r->job, i, &q, &why);
        if (sr == 0) {
            prompt_tokens += in[i].n;
            continue;
        }
        job_cancel(r->job); /* the inputs already submitted; the job outlives them (job.h) */
        if (sr == PITH_SUBMIT_BUSY && atomic_load(&srv->draining))
            api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
        else if (sr == PITH_SUBMIT_BUSY)
            api_errorf(&e, 429, "queue_full", NULL, "too many requests are waiting; retry later");
        else
            api_errorf(&e, 400, "invalid_request", NULL, "the request cannot be served: %s", why.msg);
        server_log(srv, PITH_LOG_WARN, "request refused by the engine: %s", why.msg);
        free(vecs);
        return fail(r, NULL, in, n_in, &e);
    }
    gen_prompts_free(in, n_in);

    /* Input i is choice i: its final event carries its vector. */
    bool failed = false, cancelled = false, oom = false;
    uint64_t gen = 0;
    for (;;) {
        job_event *evs;
        int n;
        bool all_done, take_oom;
        job_take(r->job, 100, &evs, &n, &all_done, &take_oom);
        for (int i = 0; i < n; i++) {
            const job_event *ev = &evs[i];
            if (!ev->final) continue;
            if (ev->weight_generation > gen) gen = ev->weight_generation;
            if (ev->finish == PITH_FINISH_STOP && ev->embedding && ev->n_embedding == dim)
                memcpy(vecs + (size_t)ev->choice * dim, ev->embedding, (size_t)dim * sizeof *vecs);
            else if (ev->finish == PITH_FINISH_CANCELLED)
                cancelled = true;
            else
                failed = true; /* the model failed on it: job.c logged why */
        }
        job_events_free(evs, n);
        if (take_oom) { /* a vector was lost: the answer is a 500 whatever the rest gives */
            oom = true;
            job_cancel(r->job);
            break;
        }
        if (all_done) break;
        if (http_client_gone(r)) {
            free(vecs);
            return http_client_cancelled(r);
        }
    }
    if (oom || failed || cancelled) {
        free(vecs);
        if (oom) api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        else if (failed) api_errorf(&e, 500, "internal_error", NULL, "the model failed during the request");
        else gen_cancelled_error(srv, &e);
        return http_send_error(r, &e);
    }
    /* The vectors are written out directly: a cJSON node per number cost 80 bytes each (2048 inputs of
     * 4096 floats: 640 MB) before the text was printed. The rest is a small object printed after them. */
    cJSON *tail = cJSON_CreateObject();
    cJSON_AddStringToObject(tail, "model", srv->model_name);
    char version[160];
    cJSON_AddStringToObject(tail, "weight_version", server_weight_version(srv, gen, version, sizeof version));
    cJSON *usage = cJSON_AddObjectToObject(tail, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    char *tail_text = usage ? cJSON_PrintUnformatted(tail) : NULL;
    cJSON_Delete(tail);
    buf out = {0};
    buf_puts(&out, "{\"object\":\"list\",\"data\":[");
    oom = !tail_text;
    for (int i = 0; i < n_in && !oom; i++) {
        buf_printf(&out, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        const float *v = vecs + (size_t)i * dim;
        if (b64) {
            char *b = base64_floats(v, dim);
            oom = !b;
            buf_printf(&out, "\"%s\"}", b ? b : "");
            free(b);
            continue;
        }
        buf_puts(&out, "[");
        for (int k = 0; k < dim; k++) {
            char num[32]; /* %.9g reads back as the same float; JSON has no NaN (cJSON writes null) */
            int len = isfinite(v[k]) ? snprintf(num, sizeof num, "%s%.9g", k ? "," : "", (double)v[k])
                                     : snprintf(num, sizeof num, "%snull", k ? "," : "");
            buf_append(&out, num, (size_t)len);
        }
        buf_puts(&out, "]}");
    }
    if (!oom) {
        buf_puts(&out, "],");
        buf_puts(&out, tail_text + 1); /* past its '{' */
    }
    free(tail_text);
    free(vecs);
    if (oom || out.failed) rc = http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    else rc = http_send_text(r, 200, "application/json", out.data, out.len);
    buf_free(&out);
    return rc;
}

enum MHD_Result handle_embeddings(http_request *r) {
    enum MHD_Result rc = embeddings(r);
    gen_trim_after(r);
    return rc;
}
