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
#include "server/media.h"
#include "server/metrics.h"

struct MHD_Daemon;
struct job;
typedef struct conn_guard conn_guard;

struct pith_server {
    /* configuration (strings owned) */
    char *model_path, *tokenizer_path, *chat_template_path, *model_name, *host, *device;
    char *gpu_layers;      /* partial offload (pith_server_options.gpu_layers), or NULL */
    int n_cpu_moe;
    struct pith_comm *comm;   /* tensor parallelism (pith_server_options.comm, tp, pp) */
    char job_failure[256];    /* why another rank's failure ends the job (server_rank_failed), or "";
                               * written once, before the error events that point at it */
    int tp, pp;
    bool no_ep;
    size_t max_body;
    /* Request bodies held in memory at once, all connections together (parsed JSON takes a multiple
     * of its text): a body that would go over waits a moment for room, then gets 503 (http.c). */
    size_t body_budget;
    size_t body_held;            /* under body_lock */
    pthread_mutex_t body_lock;
    pthread_cond_t body_freed;
    int max_connections;
    int max_conns_per_ip;       /* 0: no per-address limit */
    int idle_timeout_s;
    double header_timeout_s;    /* conn_guard.h; a huge value when off */
    double min_body_rate;       /* bytes/s; 0 when off */
    bool host_check;            /* bound to a loopback address: Host must name it (http.c) */
    char **allowed_hosts;       /* --allowed-hosts: more accepted Host names, or "*" */
    int n_allowed_hosts;
    int n_threads;
    pith_engine_options engine_opt;
    /* Images (docs/multimodal.md): the projector file given (--mmproj FILE, or NAME=FILE for a model
     * server), the directory a model server's model came from in --models-dir (its mmproj*.gguf), the
     * projector chosen at load (server_model_projector), its encoder once loaded (the engine's encoder:
     * engine_opt.encoder points at `encoder`), and where image URLs may come from (a model server's
     * `media` is a copy of its front's: the domains are borrowed). */
    char *mmproj_path, *mmproj_dir;
    char *projector;
    struct pith_vision *vision;
    pith_encoder encoder;
    char **media_domains;
    int n_media_domains;
    media_limits media;        /* points into media_domains */
    int image_max_tokens;      /* pith_server_options': the cap given to the encoder at load */
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
    conn_guard *guard;  /* header and body deadlines (conn_guard.h) */

    /* loaded once (see above) */
    pith_model *model;
    pith_tokenizer *tok;
    pith_chat_template *chat;
    char *bos_text, *eos_text;  /* for templates; NULL when the tokenizer has none */
    pith_engine *engine;
    pith_grammar_vocab *grammar_vocab;   /* structured output: built from tok at first use (structured.c) */
    struct grammar_cache *grammar_cache; /* compiled grammars kept, under their own lock (structured.c) */
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
    int pooling;                   /* under model_lock: srv->model's embedding pooling (PITH_EMBED_*), */
    char pooling_error[200];       /* or PITH_EMBED_OFF and why; set with the model (server_model_pooling) */
    char *weights_path;            /* where the weights served now came from */
    pith_model *asleep_job;        /* under admin_lock: asleep under --tp, the served model with its weights
                                    * released on every rank (pith_dist_release), kept to load them again */
    auth_keys admin_keys;          /* none: every admin endpoint answers 403 */
    pthread_mutex_t admin_lock;    /* one admin operation at a time; lock order: admin_lock, then
                                    * model_lock or versions_lock (never both); jobs_lock is never held
                                    * with any of them */
    bool admin_paused;             /* under admin_lock: /v1/admin/pause in effect (a reload keeps it) */
    pthread_mutex_t versions_lock;
    char **versions;               /* the label of each weight generation (append-only) */
    int n_versions;
    uint64_t reloads;              /* under versions_lock, as the two below */
    double last_pause_s;           /* admission paused by the last reload */
    double last_load_s;            /* reading the last reload's weights */

    /* KV-cache events (kv_events.h); NULL: off. The publisher is the front's (a model server borrows
     * it); the source is this server's engine's, attached at load. */
    struct kv_events *kv_events;
    struct kv_source *kv_source;
    /* Several models (models.h): the front server has the registry; each model server is a
     * pith_server of its own with no listener, whose keys, CORS origins and log are the front's
     * (borrowed: not freed with it). */
    struct models *models;
    bool model_server;

    atomic_uint_fast64_t serial; /* response ids */
    atomic_uint_fast64_t n_requests; /* request numbers in log lines */
};

/* A model server for `name` at `path` sharing front's configuration (models.h); not loaded yet. mmproj:
 * its projector given (-m NAME=PATH with --mmproj NAME=FILE), or NULL; dir: the --models-dir directory
 * it came from, where a mmproj*.gguf is its projector, or NULL (server_model_projector decides at load). */
int server_create_model(pith_server *front, const char *name, const char *path, const char *mmproj, const char *dir,
                        pith_server **out, pith_err *err);
/* The vision projector a model is served with (docs/api.md, Images), one rule for every server: `given`
 * (--mmproj) when set; else, for a model from a --models-dir directory `dir`, the one file there whose
 * name starts with "mmproj" and ends in ".gguf" (two or more: an error naming them); else model_path
 * itself when it carries its own vision tower (pith_vision_in_model); else none. *out: malloc'd, or
 * NULL for none. 0, or -1 with err. Reads directory listings and a config, never weights. */
int server_model_projector(const char *model_path, const char *given, const char *dir, char **out, pith_err *err);
/* Whether a file name is a projector's by llama.cpp's convention (mmproj*.gguf): never a model. */
bool server_is_mmproj_name(const char *name);
/* The front server's model listing entry for a loaded model server (routes_info.c). */
struct cJSON;
struct cJSON *server_model_json(pith_server *srv);

/* A line at `level` (PITH_LOG_*) with only a message; log_emit(&s->log, ...) for lines with fields. */
void server_log(pith_server *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double server_now(void); /* monotonic seconds */
/* Waits on c (with m held) for at most `seconds`; a wakeup may come early. */
void server_cond_wait(pthread_cond_t *c, pthread_mutex_t *m, double seconds);
/* The vocabulary size requests are checked against: the engine's (it outlives reloads and sleeps, which
 * keep the shape), or the model's where there is no engine (tests' stand-in servers). */
static inline int server_n_vocab(const pith_server *s) {
    return s->engine ? pith_engine_n_vocab(s->engine) : s->model ? s->model->hp.n_vocab : 0;
}
/* The embedding pooling model `m` asks for (PITH_EMBED_MEAN..LAST) from its own files (embeddings.c);
 * PITH_EMBED_OFF with why when it names one that cannot be served or its config cannot be read (a FIFO
 * or device there is refused without blocking). Called when weights load, never per request. */
int server_model_pooling(const pith_model *m, char *why, size_t cap);
/* The label of weight generation `gen` ("0" before any is known), copied into buf. */
const char *server_weight_version(pith_server *s, uint64_t gen, char *buf, size_t cap);

#endif
