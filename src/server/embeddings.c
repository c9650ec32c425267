/* POST /v1/embeddings (OpenAI's shape): `input` as a string, a list of strings, a list of token ids or a
 * list of such lists; `encoding_format` "float" (default) or "base64" (the little-endian float32 bytes);
 * `dimensions`, when given, must be the model's width (vectors are not truncated). Each input becomes one
 * engine request with embed set (engine.h), batched with whatever else runs; strings are encoded as
 * /v1/completions encodes them. The pooling comes from the model: GGUF `{arch}.pooling_type` (1 mean,
 * 2 cls, 3 last; 0, one vector per token, is refused), else a Hugging Face directory's
 * 1_Pooling/config.json (sentence-transformers), else mean. Vectors are L2-normalised.
 *
 * The handler waits for its requests' final events. The wait state is shared with the engine's callback
 * and reference-counted (one for the handler, one per submitted request), so a client that goes away
 * leaves nothing behind for a callback to touch. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/generate.h"
#include "server/handlers.h"

#define MAX_INPUTS 2048

typedef struct emb_wait emb_wait;

typedef struct emb_slot {
    emb_wait *w;
    int index;
} emb_slot;

struct emb_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    int n, n_done, dim;
    float *vecs;        /* [n * dim] */
    emb_slot *slots;    /* [n] */
    uint64_t *ids;      /* [n] engine ids; 0: not submitted */
    bool failed;
    char why[256];      /* the first failure */
    uint64_t gen;       /* the latest weight generation an input was computed with */
};

static void wait_unref_locked(emb_wait *w) {
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->lock);
    if (!last) return;
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w->vecs);
    free(w->slots);
    free(w->ids);
    free(w);
}

static void on_event(const pith_token_event *ev, void *user) {
    if (!ev->final) return;
    emb_slot *sl = user;
    emb_wait *w = sl->w;
    pthread_mutex_lock(&w->lock);
    if (ev->weight_generation > w->gen) w->gen = ev->weight_generation;
    if (ev->finish_reason == PITH_FINISH_STOP && ev->embedding && ev->n_embedding == w->dim) {
        memcpy(w->vecs + (size_t)sl->index * w->dim, ev->embedding, (size_t)w->dim * sizeof(float));
    } else if (!w->failed) {
        w->failed = true;
        snprintf(w->why, sizeof w->why, "%s", ev->error && ev->error[0] ? ev->error : pith_finish_reason_str(ev->finish_reason));
    }
    w->n_done++;
    pthread_cond_broadcast(&w->cond);
    wait_unref_locked(w);
}

/* The served model's pooling; -1 with err for one we cannot serve. */
static int model_pooling_locked(pith_server *srv, api_error *err);
static int model_pooling(pith_server *srv, api_error *err) {
    pthread_rwlock_rdlock(&srv->model_lock); /* a reload or a sleep may change srv->model */
    int rc = srv->model ? model_pooling_locked(srv, err)
                        : api_errorf(err, 503, "asleep", NULL, "the server is asleep; retry after it wakes");
    pthread_rwlock_unlock(&srv->model_lock);
    return rc;
}

static int model_pooling_locked(pith_server *srv, api_error *err) {
    const pith_model_file *f = srv->model->file;
    const pith_gguf *g = f ? pith_model_file_gguf(f) : NULL;
    pith_str arch;
    if (g && pith_gguf_get_str(g, "general.architecture", &arch) && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.pooling_type", (int)arch.len, arch.ptr);
        int64_t v;
        if (pith_gguf_get_i64(g, key, &v)) {
            if (v >= PITH_EMBED_MEAN && v <= PITH_EMBED_LAST) return (int)v;
            return api_errorf(err, 400, "invalid_request", NULL,
                              "the model's pooling type %lld is not supported (mean, cls or last)", (long long)v);
        }
    }
    const char *dir = f ? pith_model_file_dir(f) : NULL;
    if (!g && dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
        FILE *fp = fopen(path, "rb");
        char buf[4096];
        size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
        if (fp) fclose(fp);
        buf[n] = 0;
        cJSON *cfg = n ? cJSON_Parse(buf) : NULL;
        int mode = PITH_EMBED_MEAN;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "pooling_mode_lasttoken"))) mode = PITH_EMBED_LAST;
        else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "pooling_mode_cls_token"))) mode = PITH_EMBED_CLS;
        cJSON_Delete(cfg);
        return mode;
    }
    return PITH_EMBED_MEAN;
}

static int read_ids(pith_server *srv, const cJSON *arr, gen_prompt *out, api_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return api_errorf(err, 400, "invalid_value", "input", "a token input must hold at least one token");
    if (!(out->ids = malloc((size_t)n * sizeof *out->ids))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    int n_vocab = srv->model->hp.n_vocab;
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

enum MHD_Result handle_embeddings(http_request *r) {
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

    emb_wait *w = calloc(1, sizeof *w);
    if (w) {
        w->vecs = malloc((size_t)n_in * dim * sizeof *w->vecs);
        w->slots = calloc((size_t)n_in, sizeof *w->slots);
        w->ids = calloc((size_t)n_in, sizeof *w->ids);
    }
    if (!w || !w->vecs || !w->slots || !w->ids) {
        if (w) {
            free(w->vecs);
            free(w->slots);
            free(w->ids);
        }
        free(w);
        return fail(r, NULL, in, n_in, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->refs = 1;
    w->n = n_in;
    w->dim = dim;
    int prompt_tokens = 0, n_sub = 0;
    for (int i = 0; i < n_in; i++) {
        w->slots[i] = (emb_slot){.w = w, .index = i};
        pith_request q = {.prompt = in[i].ids, .n_prompt = in[i].n, .embed = (pith_embed_pooling)pooling,
                          .on_token = on_event, .user = &w->slots[i]};
        pthread_mutex_lock(&w->lock);
        w->refs++;
        pthread_mutex_unlock(&w->lock);
        pith_err why;
        int src = pith_engine_submit(srv->engine, &q, &w->ids[i], &why);
        if (src) {
            pthread_mutex_lock(&w->lock);
            w->refs--;
            pthread_mutex_unlock(&w->lock);
            if (src == PITH_SUBMIT_BUSY && atomic_load(&srv->draining))
                api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
            else if (src == PITH_SUBMIT_BUSY)
                api_errorf(&e, 429, "queue_full", NULL, "too many requests are waiting; retry later");
            else
                api_errorf(&e, 400, "invalid_request", NULL, "the request cannot be served with these parameters");
            server_log(srv, PITH_LOG_WARN, "request refused by the engine: %s", why.msg);
            break;
        }
        prompt_tokens += in[i].n;
        n_sub++;
    }
    gen_prompts_free(in, n_in);

    pthread_mutex_lock(&w->lock);
    bool gone = false;
    while (w->n_done < n_sub) {
        if (n_sub < n_in || gone) { /* a refused input or a vanished client: cancel the rest, wait for them */
            pthread_mutex_unlock(&w->lock);
            for (int i = 0; i < n_sub; i++) pith_engine_cancel(srv->engine, w->ids[i]);
            pthread_mutex_lock(&w->lock);
            while (w->n_done < n_sub) pthread_cond_wait(&w->cond, &w->lock);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        if (w->n_done < n_sub) {
            pthread_mutex_unlock(&w->lock);
            gone = http_client_gone(r);
            pthread_mutex_lock(&w->lock);
        }
    }
    bool failed = w->failed;
    uint64_t gen = w->gen;
    char why[256];
    snprintf(why, sizeof why, "%s", w->why);
    pthread_mutex_unlock(&w->lock);

    if (gone) {
        pthread_mutex_lock(&w->lock);
        wait_unref_locked(w);
        return http_client_cancelled(r);
    }
    if (n_sub < n_in || failed) {
        if (n_sub == n_in) {
            server_log(srv, PITH_LOG_ERROR, "embedding request %llu failed: %s", (unsigned long long)r->id, why);
            api_errorf(&e, 500, "internal_error", NULL, "the model failed during the request");
        }
        pthread_mutex_lock(&w->lock);
        wait_unref_locked(w);
        return http_send_error(r, &e);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    bool oom = !o || !data;
    for (int i = 0; i < n_in && !oom; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(data, d);
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", i);
        const float *v = w->vecs + (size_t)i * dim;
        if (b64) {
            char *s = base64_floats(v, dim);
            oom = !s;
            if (s) cJSON_AddStringToObject(d, "embedding", s);
            free(s);
        } else {
            cJSON *arr = cJSON_AddArrayToObject(d, "embedding");
            for (int k = 0; k < dim && arr; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)v[k]));
        }
    }
    cJSON_AddStringToObject(o, "model", srv->model_name);
    char version[160];
    cJSON_AddStringToObject(o, "weight_version", server_weight_version(srv, gen, version, sizeof version));
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    pthread_mutex_lock(&w->lock);
    wait_unref_locked(w);
    if (oom) {
        cJSON_Delete(o);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    return http_send_json(r, 200, o);
}
