#include "server/job.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int job_create(pith_server *srv, int n_choices, double t_arrival, job **out) {
    *out = NULL;
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->choices = calloc((size_t)n_choices, sizeof *j->choices))) {
        free(j);
        return -1;
    }
    j->srv = srv;
    j->refs = 1;
    j->t_arrival = t_arrival;
    j->n_choices = n_choices;
    for (int i = 0; i < n_choices; i++) {
        j->choices[i].job = j;
        j->choices[i].index = i;
    }
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    pthread_mutex_lock(&srv->jobs_lock);
    j->next = srv->jobs;
    if (srv->jobs) srv->jobs->prev = j;
    srv->jobs = j;
    srv->n_jobs++;
    pthread_mutex_unlock(&srv->jobs_lock);
    *out = j;
    return 0;
}

static void job_destroy(job *j) {
    job_events_free(j->events, j->n_events);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j->choices);
    free(j);
}

/* Drops one reference; the last one unlists and frees the job. */
static void job_unref(job *j) {
    pith_server *srv = j->srv;
    pthread_mutex_lock(&srv->jobs_lock);
    pthread_mutex_lock(&j->lock);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (last) {
        if (j->prev) j->prev->next = j->next;
        else srv->jobs = j->next;
        if (j->next) j->next->prev = j->prev;
        srv->n_jobs--;
        pthread_cond_broadcast(&srv->jobs_changed);
    }
    pthread_mutex_unlock(&srv->jobs_lock);
    if (last) job_destroy(j);
}

static bool push_event(job *j, const pith_token_event *ev, int choice) {
    if (j->n_events == j->cap_events) {
        int cap = j->cap_events ? j->cap_events * 2 : 16;
        job_event *e = realloc(j->events, (size_t)cap * sizeof *e);
        if (!e) return false;
        j->events = e;
        j->cap_events = cap;
    }
    job_event *e = &j->events[j->n_events];
    memset(e, 0, sizeof *e);
    e->choice = choice;
    e->final = ev->final;
    e->token = ev->token;
    if (ev->text_len > 0) {
        if (!(e->text = malloc(ev->text_len + 1))) return false;
        memcpy(e->text, ev->text, ev->text_len);
        e->text[ev->text_len] = 0;
        e->text_len = ev->text_len;
    }
    e->has_logprob = ev->has_logprob;
    e->logprob = ev->logprob;
    e->n_top = ev->n_top < 0 ? 0 : ev->n_top > JOB_MAX_TOP ? JOB_MAX_TOP : ev->n_top;
    if (e->n_top) memcpy(e->top, ev->top, (size_t)e->n_top * sizeof *e->top);
    e->finish = ev->finish_reason;
    e->usage = ev->usage;
    e->prompt = ev->prompt;
    e->prompt_index = ev->prompt_index;
    e->prompt_rank = ev->prompt_rank;
    e->restart = ev->restart;
    e->weight_generation = ev->weight_generation;
    j->n_events++; /* counted before the vector, so that job_events_free frees the text if it fails */
    if (ev->embedding && ev->n_embedding > 0) {
        if (!(e->embedding = malloc((size_t)ev->n_embedding * sizeof *e->embedding))) return false;
        memcpy(e->embedding, ev->embedding, (size_t)ev->n_embedding * sizeof *e->embedding);
        e->n_embedding = ev->n_embedding;
    }
    return true;
}

/* Engine thread. */
static void on_token(const pith_token_event *ev, void *user) {
    job_choice *c = (job_choice *)user + ev->index;
    job *j = c->job;
    double now = server_now();
    pthread_mutex_lock(&j->lock);
    if (!push_event(j, ev, c->index)) j->oom = true;
    if (ev->restart) {
        c->n_tokens = 0;
    } else if (ev->prompt) {
        /* not an output token */
    } else if (!ev->final) {
        if (c->n_tokens++ == 0) c->t_first = now;
        c->t_last = now;
    } else {
        c->usage = ev->usage;
        c->done = true;
        j->n_done++;
    }
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    if (ev->final) {
        if (ev->finish_reason == PITH_FINISH_ERROR)
            server_log(j->srv, PITH_LOG_ERROR, "request %llu failed in the model: %s", (unsigned long long)ev->request_id, ev->error);
        double ttft = c->n_tokens > 0 ? c->t_first - j->t_arrival : -1;
        double tpot = c->n_tokens > 1 ? (c->t_last - c->t_first) / (c->n_tokens - 1) : -1;
        metrics_request_done(&j->srv->metrics, ev->finish_reason, ttft, tpot, now - j->t_arrival);
        job_unref(j);
    }
}

void job_totals(job *j, int *prompt_tokens, int *completion_tokens, double *t_first) {
    *prompt_tokens = *completion_tokens = 0;
    *t_first = 0;
    pthread_mutex_lock(&j->lock);
    for (int i = 0; i < j->n_choices; i++) {
        const job_choice *c = &j->choices[i];
        /* A choice still running (its client went away; the engine takes the cancel at its next step)
         * counts what it was given and what it produced so far. */
        *prompt_tokens += c->done ? c->usage.prompt_tokens : c->submitted ? c->n_prompt : 0;
        *completion_tokens += c->done ? c->usage.completion_tokens : c->n_tokens;
        if (c->n_tokens > 0 && (*t_first == 0 || c->t_first < *t_first)) *t_first = c->t_first;
    }
    pthread_mutex_unlock(&j->lock);
}

int job_submit(job *j, int i, const pith_request *r, pith_err *err) {
    pith_request q = *r;
    const int n = q.n > 1 ? q.n : 1;
    job_choice *c = &j->choices[i];
    q.on_token = on_token;
    q.user = c; /* sibling k's events (engine.h: index k) belong to choice i + k */
    pthread_mutex_lock(&j->lock);
    j->refs += n; /* final events may come before submit returns */
    for (int k = 0; k < n; k++) {
        c[k].submitted = true;
        c[k].n_prompt = q.n_prompt;
    }
    pthread_mutex_unlock(&j->lock);
    uint64_t id;
    int rc = pith_engine_submit(j->srv->engine, &q, &id, err);
    pthread_mutex_lock(&j->lock);
    for (int k = 0; k < n; k++) {
        if (rc == 0) c[k].id = id + (uint64_t)k;
        else c[k].submitted = false;
    }
    if (rc) j->refs -= n; /* never the last: the HTTP side holds one */
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void job_take(job *j, int timeout_ms, job_event **events, int *n, bool *all_done, bool *oom) {
    pthread_mutex_lock(&j->lock);
    int n_submitted = 0;
    for (int i = 0; i < j->n_choices; i++) n_submitted += j->choices[i].submitted;
    if (j->n_events == 0 && j->n_done < n_submitted && timeout_ms > 0) {
        server_cond_wait(&j->cond, &j->lock, timeout_ms / 1000.0);
    }
    *events = j->events;
    *n = j->n_events;
    j->events = NULL;
    j->n_events = j->cap_events = 0;
    *all_done = j->n_done >= n_submitted;
    *oom = j->oom;
    pthread_mutex_unlock(&j->lock);
}

void job_events_free(job_event *events, int n) {
    for (int i = 0; i < n; i++) {
        free(events[i].text);
        free(events[i].embedding);
    }
    free(events);
}

int job_cancel(job *j) {
    uint64_t ids[64];
    int at = 0, total = 0;
    /* Collect under the lock, cancel outside it (the engine may be calling back into this job). */
    while (at < j->n_choices) {
        int n = 0;
        pthread_mutex_lock(&j->lock);
        for (; at < j->n_choices && n < 64; at++)
            if (j->choices[at].submitted && !j->choices[at].done && j->choices[at].id) ids[n++] = j->choices[at].id;
        pthread_mutex_unlock(&j->lock);
        for (int i = 0; i < n; i++) pith_engine_cancel(j->srv->engine, ids[i]);
        total += n;
    }
    return total;
}

void job_release(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->lock);
    j->released = true;
    pthread_mutex_unlock(&j->lock);
    job_unref(j);
}

int jobs_unanswered(pith_server *srv) {
    int n = 0;
    pthread_mutex_lock(&srv->jobs_lock);
    for (job *j = srv->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->lock);
        n += !j->released;
        pthread_mutex_unlock(&j->lock);
    }
    pthread_mutex_unlock(&srv->jobs_lock);
    return n;
}

void jobs_cancel_all(pith_server *srv) {
    /* Hold a reference on each job while cancelling, so none is freed under us. */
    pthread_mutex_lock(&srv->jobs_lock);
    int n = srv->n_jobs, k = 0;
    job **list = n ? malloc((size_t)n * sizeof *list) : NULL;
    for (job *j = srv->jobs; j && list; j = j->next) {
        pthread_mutex_lock(&j->lock);
        j->refs++;
        pthread_mutex_unlock(&j->lock);
        list[k++] = j;
    }
    pthread_mutex_unlock(&srv->jobs_lock);
    for (int i = 0; i < k; i++) {
        job_cancel(list[i]);
        job_unref(list[i]);
    }
    free(list);
}

void jobs_fail_all(pith_server *srv) {
    pthread_mutex_lock(&srv->jobs_lock);
    for (job *j = srv->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->lock);
        for (int i = 0; i < j->n_choices; i++) {
            job_choice *c = &j->choices[i];
            if (!c->submitted || c->done) continue;
            pith_token_event ev = {.index = 0, .token = -1, .text = "", .final = true,
                                   .finish_reason = PITH_FINISH_ERROR, .error = ""};
            if (!push_event(j, &ev, c->index)) j->oom = true;
            c->done = true;
            j->n_done++;
            /* the engine's reference stays: its thread will never deliver this request's final event */
        }
        pthread_cond_broadcast(&j->cond);
        pthread_mutex_unlock(&j->lock);
    }
    pthread_mutex_unlock(&srv->jobs_lock);
}

