#include "server/generate.h"
#include "server/images.h"

#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "format/json_file.h"
#include "server/format.h"
#include "server/job.h"
#include "server/messages_out.h"
#include "server/stream.h"

bool gen_refuse_unready(http_request *r, enum MHD_Result *rc) {
    api_error e;
    if (atomic_load(&r->srv->draining)) api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
    else if (!atomic_load(&r->srv->ready)) api_errorf(&e, 503, "model_not_ready", NULL, "the model is still loading; retry shortly");
    else return false;
    *rc = http_send_error(r, &e);
    return true;
}

cJSON *gen_parse_body(http_request *r, enum MHD_Result *rc) {
    api_error e;
    if (r->body && pith_json_count_values(r->body, r->body_len) > GEN_MAX_JSON_ITEMS) {
        api_errorf(&e, 413, "request_too_large", NULL,
                   "the request body holds more than %d JSON values (array and object items); send fewer per request",
                   GEN_MAX_JSON_ITEMS);
        *rc = http_send_error(r, &e);
        return NULL;
    }
    cJSON *body = r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
    if (!body) {
        api_errorf(&e, 400, "invalid_json", NULL, "the request body is not valid JSON");
        *rc = http_send_error(r, &e);
    }
    return body;
}

void gen_trim_after(const http_request *r) {
#ifdef __GLIBC__
    if (r->body_len >= GEN_TRIM_BODY) malloc_trim(0);
#else
    (void)r;
#endif
}

int gen_check_model(pith_server *srv, const char *model, api_error *err) {
    if (!model || !strcmp(model, srv->model_name)) return 0;
    return api_errorf(err, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves '%.100s'",
                      model, srv->model_name);
}

void gen_prompt_clear(gen_prompt *p) {
    free(p->ids);
    if (p->images) server_images_free(p->images);
    free(p->images);
    memset(p, 0, sizeof *p);
}

void gen_prompts_free(gen_prompt *prompts, int n) {
    for (int i = 0; prompts && i < n; i++) gen_prompt_clear(&prompts[i]);
    free(prompts);
}

static uint64_t random_seed(void) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    return s;
}

/* Length checks with OpenAI's wording; sets *max_tokens to what the engine gets. */
int gen_check_lengths(pith_server *srv, gen_kind kind, const gen_params *p, const gen_prompt *pr, int *max_tokens,
                      api_error *err) {
    int limit = srv->max_seq_len;
    const char *what = kind == GEN_CHAT || kind == GEN_MESSAGES ? "messages" : kind == GEN_RESPONSES ? "input" : "prompt";
    if (pr->n < 1) return api_errorf(err, 400, "invalid_value", what, "the prompt is empty");
    if (pr->n >= limit)
        return api_errorf(err, 400, "context_length_exceeded", what,
                          "this model's maximum context length is %d tokens, but the prompt has %d tokens", limit, pr->n);
    int room = limit - pr->n;
    if (p->max_tokens > 0) {
        if (p->max_tokens > room)
            return api_errorf(err, 400, "context_length_exceeded", kind == GEN_RESPONSES ? "max_output_tokens" : "max_tokens",
                              "this model's maximum context length is %d tokens; you requested %d tokens "
                              "(%d in the prompt, %d for the completion)",
                              limit, pr->n + p->max_tokens, pr->n, p->max_tokens);
        *max_tokens = p->max_tokens;
    } else {
        /* OpenAI's default for completions is 16 tokens; chat runs until the context is full. */
        *max_tokens = kind == GEN_COMPLETION ? (room < 16 ? room : 16) : room;
    }
    return 0;
}

void gen_cancelled_error(pith_server *srv, api_error *e) {
    if (atomic_load(&srv->draining)) api_errorf(e, 503, "shutting_down", NULL, "the server is shutting down");
    else api_errorf(e, 503, "aborted", NULL, "the request was aborted by the server's administrator");
}

void server_model_error(pith_server *srv, api_error *e) {
    if (srv->job_failure[0]) api_errorf(e, 503, "job_failed", NULL, "%s", srv->job_failure);
    else api_errorf(e, 500, "internal_error", NULL, "the model failed while generating");
}

/* Moves the prompts' ids into p for the response (return_token_ids, prompt_logprobs). 0 or -1. */
static int keep_prompts(gen_params *p, gen_prompt *prompts, int n) {
    if (!(p->prompt_ids = calloc((size_t)n, sizeof *p->prompt_ids)) || !(p->prompt_n = calloc((size_t)n, sizeof *p->prompt_n)))
        return -1;
    for (int i = 0; i < n; i++) {
        p->prompt_ids[i] = prompts[i].ids;
        p->prompt_n[i] = prompts[i].n;
        prompts[i].ids = NULL;
    }
    p->n_prompt_ids = n;
    return 0;
}

static enum MHD_Result wait_and_answer(http_request *r, gen_kind kind, gen_params *p) {
    gen_output out;
    api_error e;
    if (out_init(&out, r->srv, kind, p, r->job->n_choices)) {
        gen_params_free(p);
        return MHD_NO;
    }
    bool failed = false;
    for (;;) {
        job_event *evs;
        int n;
        bool all_done, oom;
        job_take(r->job, 50, &evs, &n, &all_done, &oom);
        for (int i = 0; i < n; i++) failed |= out_apply(&out, &evs[i]) != 0;
        job_events_free(evs, n);
        failed |= oom;
        if (all_done) break;
        if (failed || http_client_gone(r)) {
            out_free(&out);
            gen_params_free(p);
            if (!failed) return http_client_cancelled(r);
            job_cancel(r->job);
            return MHD_NO;
        }
    }
    enum MHD_Result rc;
    bool cancelled = false, errored = false;
    for (int i = 0; i < out.n_choices; i++) {
        cancelled |= out.choices[i].finish == PITH_FINISH_CANCELLED;
        errored |= out.choices[i].finish == PITH_FINISH_ERROR;
    }
    if (failed) rc = http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    else if (errored) rc = http_send_error(r, (server_model_error(r->srv, &e), &e));
    else if (cancelled) rc = http_send_error(r, (gen_cancelled_error(r->srv, &e), &e));
    else rc = http_send_json(r, 200, kind == GEN_MESSAGES ? messages_object(&out) : out_response(&out));
    out_free(&out);
    gen_params_free(p);
    return rc;
}

enum MHD_Result gen_run(http_request *r, gen_kind kind, gen_params *p, gen_prompt *prompts, int n_prompts) {
    pith_server *srv = r->srv;
    api_error e;
    enum MHD_Result rc;
    int *max_tokens = calloc((size_t)n_prompts, sizeof *max_tokens);
    if (!max_tokens) goto oom;
    for (int i = 0; i < n_prompts; i++) {
        if (gen_check_lengths(srv, kind, p, &prompts[i], &max_tokens[i], &e)) {
            rc = http_send_error(r, &e);
            goto done;
        }
    }
    int n_choices = n_prompts * p->n;
    if (job_create(srv, n_choices, r->t_arrival, &r->job)) goto oom;
    uint64_t seed = p->seed_given ? p->sampling.seed : random_seed();
    /* One request per prompt: its n siblings share the prompt's prefill (engine.h), choice i * n + k. */
    for (int i = 0; i < n_choices; i += p->n) {
        const gen_prompt *pr = &prompts[i / p->n];
        pith_request q = {
            .prompt = pr->ids, .n_prompt = pr->n, .sampling = p->sampling, .max_tokens = max_tokens[i / p->n],
            .n = p->n,
            .stop_ids = p->stop_ids, .n_stop_ids = p->n_stop_ids, .stop = (const char *const *)p->stop,
            .n_stop = p->n_stop, .ignore_eos = p->ignore_eos, .priority = p->priority, .cache_salt = p->cache_salt,
            .logprobs = p->logprobs, .top_logprobs = p->logprobs ? p->top_logprobs : 0,
            .logprobs_mode = p->processed_logprobs ? PITH_LOGPROBS_PROCESSED : PITH_LOGPROBS_RAW,
            /* one choice per prompt computes them; the response shows them for all its choices */
            .prompt_logprobs = p->prompt_logprobs >= 0 && i % p->n == 0,
            .prompt_top_logprobs = p->prompt_logprobs > 0 ? p->prompt_logprobs : 0,
            .grammar = p->grammar,
            .media = pr->images ? pr->images->media : NULL, .n_media = pr->images ? pr->images->n : 0,
        };
        q.sampling.seed = seed + (uint64_t)i;
        pith_err why;
        int sr = job_submit(r->job, i, &q, &why);
        if (sr == 0) continue;
        job_cancel(r->job);
        if (sr == PITH_SUBMIT_BUSY && atomic_load(&srv->draining))
            api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
        else if (sr == PITH_SUBMIT_BUSY)
            api_errorf(&e, 429, "queue_full", NULL, "too many requests are waiting; retry later");
        else
            api_errorf(&e, 400, "invalid_request", NULL, "the request cannot be served: %s", why.msg);
        server_log(srv, PITH_LOG_WARN, "request refused by the engine: %s", why.msg);
        rc = http_send_error(r, &e);
        goto done;
    }
    if ((p->return_token_ids || p->prompt_logprobs >= 0) && keep_prompts(p, prompts, n_prompts)) {
        job_cancel(r->job);
        goto oom;
    }
    gen_prompts_free(prompts, n_prompts);
    free(max_tokens);
    return p->stream ? stream_start(r, kind, p) : wait_and_answer(r, kind, p);
oom:
    rc = http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
done:
    gen_prompts_free(prompts, n_prompts);
    free(max_tokens);
    gen_params_free(p);
    return rc;
}
