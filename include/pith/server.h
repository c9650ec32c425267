/* The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (plain JSON or Server-Sent
 * Events), /v1/models, /health, /metrics, /tokenize, /detokenize, and the admin endpoints for RL
 * rollouts (/v1/admin/...: hot weight reload, pause, sleep). docs/api.md is the reference.
 *
 * Owns the listening socket, the HTTP connection threads (libmicrohttpd, one thread per connection,
 * bounded), and once loaded the model, tokenizer, chat template and the engine with its thread.
 *
 * Lifecycle: pith_server_create starts listening at once and answers 503 "not ready" to generation
 * requests (and to /health) until pith_server_load has finished; the caller may run the load on another
 * thread. pith_server_drain stops accepting connections, lets requests in flight finish up to a
 * deadline, cancels the rest and closes every connection; pith_server_free releases everything.
 *
 * Invariants:
 *   - a client never sees internal details (paths, library messages): errors it gets are OpenAI-shaped
 *     {"error": {"message", "type", "param", "code"}} with fixed wording; the details go to the log;
 *   - a request whose client goes away is cancelled at once, which frees its KV blocks;
 *   - API keys are compared in constant time (time depends on the length of the key presented only);
 *   - the library prints nothing: log lines go to options.log. */
#ifndef PITH_SERVER_H
#define PITH_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "pith/api.h"
#include "pith/engine.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_server pith_server;

/* KV-cache events for prefix-aware routers (docs/kv-events.md): the engine's prefix-cache changes
 * (pith/engine.h, pith_kv_event) published over ZeroMQ as vLLM's KVEventBatch messages, which llm-d's
 * KV indexer and other routers consume. Needs libzmq at build time (otherwise asking for it fails). */
typedef struct pith_kv_events_options {
    const char *endpoint;        /* ZMQ PUB address; NULL: no events. It binds when its host is '*' or
                                    '::' (tcp, port 5557 in llm-d's setups) or it is ipc, else it connects
                                    (to a subscriber that binds) */
    const char *replay_endpoint; /* ZMQ ROUTER address (bound) where a subscriber asks for the batches
                                    from a sequence number on; NULL: no replay */
    const char *topic;           /* first frame of every message; NULL: "kv@HOSTNAME@MODEL_NAME" (llm-d
                                    reads the pod and the model from kv@<pod>@<model>) */
    const char *hash;            /* block hash: "sha256_cbor" (NULL: the default) or "sha256_cbor_64bit" */
    const char *hash_seed;       /* the chain's seed, as vLLM's PYTHONHASHSEED; NULL: "" */
    int buffer_steps;            /* batches kept for replay; 0: 10000 */
} pith_kv_events_options;

typedef struct pith_server_model {
    const char *name;               /* the id clients use */
    const char *path;               /* GGUF file, Hugging Face directory or llama2.c checkpoint */
    const char *mmproj_path;        /* its vision projector (llama.cpp's mmproj GGUF); NULL: the model's
                                       own vision tower if it carries one (docs/api.md, Images), else none */
} pith_server_model;

/* Zero-initialised options are valid (except model_path, needed unless models or models_dir are given)
 * and mean the defaults given here. Strings are copied by pith_server_create. */
typedef struct pith_server_options {
    const char *model_path;         /* GGUF, Hugging Face directory or llama2.c checkpoint */
    const char *tokenizer_path;     /* NULL: the model file's own tokenizer */
    const char *chat_template_path; /* NULL: the model's template (GGUF tokenizer.chat_template, or
                                       tokenizer_config.json / chat_template.jinja), else ChatML */
    const char *model_name;         /* id in /v1/models and responses; NULL: the model file's base name
                                       without its extension */
    /* Several models (docs/api.md, Several models): with models or models_dir, the request's "model"
     * picks one, loaded on first use and unloaded least recently used under the limits below;
     * model_path and model_name are then unused. The other model options apply to every model. */
    const pith_server_model *models; /* n_models named model paths */
    int n_models;
    const char *models_dir;         /* each entry a model named after it: NAME.gguf (the first file of a
                                       split one), or a directory NAME holding config.json or one model's
                                       GGUF file(s), and maybe its projector, mmproj*.gguf */
    int models_max;                 /* loaded at once; 0: no limit */
    size_t models_mem;              /* bytes loaded at once (weights + memory pools); 0: no limit */
    double models_ttl_s;            /* unload a model idle this long; 0: never */
    double models_load_timeout_s;   /* a request waits this long for its model to load; 0: 300 */
    const char *host;               /* address to bind; NULL: 127.0.0.1 */
    int port;                       /* 0: any free port (read it back with pith_server_port) */
    const char *const *api_keys;    /* n_api_keys keys; none (and no key file): no authentication */
    int n_api_keys;
    const char *api_key_file;       /* more keys, one per line ('#' comments and blank lines skipped) */
    const char *const *cors_origins; /* n_cors_origins browser origins allowed (scheme://host[:port], or
                                       "*"); none: no CORS headers at all */
    int n_cors_origins;
    size_t max_body_bytes;          /* largest request body; 0: 4 MiB */
    size_t max_body_memory;         /* request bodies held at once, all connections together (parsing
                                       takes a multiple of it); one over waits up to 2 s for room, then
                                       gets 503; 0: 64 MiB (at least twice max_body_bytes) */
    int max_connections;            /* open connections at once; 0: 256 */
    int idle_timeout_s;             /* a connection with no progress (reading a request or sending a
                                       response) for this long is closed; 0: 60 */
    int n_threads;                  /* model worker threads; 0: one per online CPU */
    const char *device;             /* where the model runs (pith_model_options.device); NULL: default */
    pith_engine_options engine;     /* see engine.h; engine.max_waiting bounds the queue (429 beyond) */
    bool log_requests;              /* one log line per HTTP request */
    void (*log)(void *user, const char *line); /* NULL: no logging */
    void *log_user;
    int log_level;                  /* PITH_LOG_*: lines up to this level; 0: PITH_LOG_INFO */
    bool log_json;                  /* lines are JSON objects {ts, level, msg, fields...} (docs/api.md) */
    /* Administration (/v1/admin/...: reload, pause, resume, sleep, wake, abort; docs/rl.md): keys of its
     * own, given like api_keys; with none, every admin endpoint answers 403. */
    const char *const *admin_keys;
    int n_admin_keys;
    const char *admin_key_file;
    const char *weight_version;     /* label of the weights loaded at start; NULL: "0" */
    /* Slow and hostile clients (docs/api.md, Limits). */
    int max_conns_per_ip;           /* open connections from one client address; 0: 64; < 0: no limit */
    double header_timeout_s;        /* a request's headers must be in within this long of the connection
                                       opening (or of its first byte on a kept-alive one), else the
                                       connection is closed; 0: 10; < 0: no deadline */
    double min_body_rate;           /* bytes/s a request body must average from the end of its headers,
                                       checked once header_timeout_s has passed; 0: 1024; < 0: no floor */
    const char *const *allowed_hosts; /* when bound to a loopback address, Host names accepted besides
                                       localhost, 127.0.0.0/8 and [::1] ("*": any); others get 403 */
    int n_allowed_hosts;
    /* Images in requests (docs/multimodal.md): the vision projector file (llama.cpp's mmproj GGUF; NULL:
     * the model's own vision tower if it carries one, else no images), loaded beside the model. One model
     * only: with several, each pith_server_model names its own (setting this too is an error). Image
     * parts may be data: URLs always, http(s) URLs only from these hosts (and only when built with
     * libcurl); these limits apply to every model. */
    const char *mmproj_path;
    const char *const *allowed_media_domains; /* n_allowed_media_domains hosts: "example.com" (exact, any
                                       case), or "*.example.com" for any name below it; none: http(s)
                                       image URLs are refused */
    int n_allowed_media_domains;
    size_t media_max_bytes;         /* largest image, decoded or fetched; 0: 20 MiB; larger gets 413 */
    double media_timeout_s;         /* a fetch (connect, redirects, transfer) lasts at most this; 0: 10 */
    /* Each image's tokens at most, for dynamic-resolution towers (Qwen3-VL's; a fixed-size one, Gemma 3's,
     * is unaffected): larger images are resized to fit, as the processor's max_pixels would (llama.cpp's
     * --image-max-tokens). 0: 1280; negative: the processor's own budget (Qwen3-VL's allows 16384 tokens,
     * an encode of many minutes on a CPU). Besides, a request's images may not take more tokens than the
     * context holds (400 context_length_exceeded, checked as each is prepared). */
    int image_max_tokens;
    pith_kv_events_options kv_events; /* KV-cache events (above); zero: none */
    const char *gpu_layers;         /* partial offload (pith_model_options.gpu_layers); NULL: none */
    int n_cpu_moe;                  /* experts kept on the CPU (pith_model_options.n_cpu_moe) */
    /* Tensor parallelism (pith/dist.h): rank 0 serves, the other ranks run pith_dist_worker; one model
     * only (a reload, a sleep and a wake act on every rank); no_ep: pith_model_options.no_ep */
    struct pith_comm *comm;
    int tp, pp;
    bool no_ep;
} pith_server_options;

enum { PITH_LOG_ERROR = 1, PITH_LOG_WARN = 2, PITH_LOG_INFO = 3, PITH_LOG_DEBUG = 4 };

/* Binds and starts answering (503 for generation until loaded). */
PITH_API int pith_server_create(const pith_server_options *opt, pith_server **out, pith_err *err);
/* The bound TCP port. */
PITH_API int pith_server_port(const pith_server *s);
/* Loads the model, tokenizer and chat template and starts the engine; the server is ready after it.
 * May run on any one thread, once. */
PITH_API int pith_server_load(pith_server *s, pith_err *err);
PITH_API bool pith_server_ready(const pith_server *s);
/* Stops accepting, waits up to deadline_s seconds for requests in flight to finish, cancels the rest
 * and closes every connection. Idempotent. */
PITH_API void pith_server_drain(pith_server *s, double deadline_s);
/* Drains with no deadline left (cancelling everything) if not drained, then frees everything. */
PITH_API void pith_server_free(pith_server *s);

#ifdef __cplusplus
}
#endif

#endif
