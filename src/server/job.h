/* A job: the engine requests behind one HTTP request (one per choice of a generation, one per input of
 * an embeddings request), and the queue of their events for the connection thread. Every request the
 * server submits goes through a job, so cancelling on disconnect, draining, metrics and the access
 * log's token counts treat them all alike.
 *
 * The engine thread appends events (copying what it must: text and logprobs are only valid during the
 * callback); the connection thread takes them in batches. A job is reference-counted: one reference for
 * the HTTP side, one per engine request until its final event, so whichever side ends last frees it,
 * and a callback never touches a freed job nor the HTTP connection. Live jobs are listed in the server
 * so that a drain can cancel them. Lock order: server jobs_lock before a job's lock; engine calls are
 * never made with a job's lock held. */
#ifndef PITH_SERVER_JOB_H
#define PITH_SERVER_JOB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "pith/engine.h"
#include "server/server_internal.h"

#define JOB_MAX_TOP 20

typedef struct job_event {
    int choice;
    bool final;
    int32_t token;              /* -1 in a final event */
    char *text;                 /* owned; NULL when no text was released */
    size_t text_len;
    bool has_logprob;
    float logprob;
    int n_top;
    pith_logprob top[JOB_MAX_TOP];
    pith_finish_reason finish;  /* final events */
    pith_usage usage;
    bool prompt;                /* a prompt logprob (engine.h), for prompt token prompt_index */
    int prompt_index, prompt_rank;
    bool restart;               /* the choice restarts from its prompt: drop what it produced */
    uint64_t weight_generation;
    float *embedding;           /* owned: an embedding request's pooled vector (final event); NULL otherwise */
    int n_embedding;
} job_event;

typedef struct job_choice {
    struct job *job;
    int index;
    uint64_t id;                /* engine id; 0 until submitted */
    bool submitted;
    bool done;
    int n_tokens;               /* output tokens so far */
    int n_prompt;               /* the prompt's tokens, from the submission */
    double t_first, t_last;
    pith_usage usage;           /* from the final event */
} job_choice;

typedef struct job {
    pith_server *srv;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    double t_arrival;
    int n_choices;
    int n_done;
    job_choice *choices;
    job_event *events;
    int n_events, cap_events;
    bool oom;                   /* an event could not be stored: the response is failed */
    bool released;              /* the HTTP side is done with it (its response went out) */
    struct job *prev, *next;    /* in srv->jobs */
} job;

/* Creates and lists a job (one HTTP-side reference). */
int job_create(pith_server *srv, int n_choices, double t_arrival, job **out);
/* Submits choice i's request (on_token and user are set here); with r->n > 1 its siblings are choices
 * i + 1 .. i + n - 1. Returns pith_engine_submit's result. */
int job_submit(job *j, int i, const pith_request *r, pith_err *err);
/* Waits up to timeout_ms for events, then hands over every queued event (caller frees them with
 * job_events_free). *all_done: every submitted request has delivered its final event. */
void job_take(job *j, int timeout_ms, job_event **events, int *n, bool *all_done, bool *oom);
void job_events_free(job_event *events, int n);
/* Cancels every submitted request that has not finished (their final events follow); returns how many
 * it cancelled (0: everything had finished). */
int job_cancel(job *j);
/* For the access log: prompt and completion tokens over the choices (a choice not finished yet, as
 * when its client went away, counts its prompt and the tokens it produced so far), and the first
 * token's time (monotonic seconds; 0: none yet). */
void job_totals(job *j, int *prompt_tokens, int *completion_tokens, double *t_first);
/* Drops the HTTP side's reference. */
void job_release(job *j);

/* Cancels every live job's requests (drain deadline). */
void jobs_cancel_all(pith_server *srv);
/* Ends every live job's unfinished requests with an error event, without the engine: another rank of a
 * tensor-parallel job failed, and the engine's thread may never return from its collective. */
void jobs_fail_all(pith_server *srv);
/* Live jobs whose HTTP side has not finished its response. */
int jobs_unanswered(pith_server *srv);

#endif
