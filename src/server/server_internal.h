/* The server's shared state, seen by its modules (HTTP layer, handlers, jobs). pith_server is opaque to
 * library users (pith/server.h).
 *
 * Loading publishes the model, tokenizer, chat template and engine once, then sets `ready` (release);
 * handlers read `ready` (acquire) before touching any of them, and they never change afterwards until
 * pith_server_free, which runs after every connection is closed. */
#ifndef PITH_SERVER_INTERNAL_H
#define PITH_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pith/chat.h"
#include "pith/engine.h"
#include "pith/model.h"
#include "pith/server.h"
#include "pith/grammar.h"
#include "pith/tokenizer.h"
#include "server/auth.h"
#include "server/cors.h"
#include "server/log.h"
#include "server/metrics.h"

struct MHD_Daemon;
struct job;

struct pith_server {
    /* configuration (strings owned) */
    char *model_path, *tokenizer_path, *chat_template_path, *model_name, *host, *device;
    size_t max_body;
    int max_connections;
    int idle_timeout_s;
    int n_threads;
    pith_engine_options engine_opt;
    bool log_requests;
    log_ctx log;
    auth_keys keys;
    cors_origins cors;
    metrics metrics;
    int64_t created_unix;

    /* network */
    int listen_fd;   /* -1 once handed back by quiesce and closed */
    int port;
    struct MHD_Daemon *mhd;

    /* loaded once (see above) */
    pith_model *model;
    pith_tokenizer *tok;
    pith_chat_template *chat;
    char *bos_text, *eos_text;  /* for templates; NULL when the tokenizer has none */
    pith_engine *engine;
    pith_grammar_vocab *grammar_vocab; /* structured output: built from tok at first use, under jobs_lock */
    int max_seq_len;
    atomic_bool ready;
    atomic_bool load_claimed;

    atomic_bool draining;  /* no new generation requests */
    atomic_bool stopping;  /* connections are closing: blocked handlers give up */
    bool drained;

    /* generation jobs in flight (job.c) */
    pthread_mutex_t jobs_lock;
    pthread_cond_t jobs_changed;
    struct job *jobs;
    int n_jobs;

    /* Weights and administration (admin.c, admin_weights.c; docs/rl.md). srv->model changes at a
     * reload and is NULL while asleep: a handler that reads it holds model_lock for reading (the
     * engine has its own reference and needs no lock). */
    pthread_rwlock_t model_lock;
    char *weights_path;            /* where the weights served now came from */
    auth_keys admin_keys;          /* none: every admin endpoint answers 403 */
    pthread_mutex_t admin_lock;    /* one admin operation at a time */
    bool admin_paused;             /* under admin_lock: /v1/admin/pause in effect (a reload keeps it) */
    pthread_mutex_t versions_lock;
    char **versions;               /* the label of each weight generation (append-only) */
    int n_versions;
    uint64_t reloads;              /* under versions_lock, as the two below */
    double last_pause_s;           /* admission paused by the last reload */
    double last_load_s;            /* reading the last reload's weights */

    atomic_uint_fast64_t serial; /* response ids */
    atomic_uint_fast64_t n_requests; /* request numbers in log lines */
};

/* A line at `level` (PITH_LOG_*) with only a message; log_emit(&s->log, ...) for lines with fields. */
void server_log(pith_server *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double server_now(void); /* monotonic seconds */
/* The vocabulary size requests are checked against: the engine's (it outlives reloads and sleeps, which
 * keep the shape), or the model's where there is no engine (tests' stand-in servers). */
static inline int server_n_vocab(const pith_server *s) {
    return s->engine ? pith_engine_n_vocab(s->engine) : s->model ? s->model->hp.n_vocab : 0;
}
/* The label of weight generation `gen` ("0" before any is known), copied into buf. */
const char *server_weight_version(pith_server *s, uint64_t gen, char *buf, size_t cap);

#endif
