/* pith_server lifecycle: bind, serve (503 until loaded), load, drain, free (see pith/server.h). */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "backend/info.h"
#include "model/vision.h"
#include "pith/assets.h"
#include "pith/bench.h"
#include "pith/dist.h"
#include "server/http.h"
#include "server/models.h"
#include "server/job.h"
#include "server/kv_events.h"
#include "server/params.h"
#include "server/server_internal.h"

void server_log(pith_server *s, int level, const char *fmt, ...) {
    if (!log_enabled(&s->log, level)) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log_emit(&s->log, level, line, NULL);
}

const char *server_weight_version(pith_server *s, uint64_t gen, char *buf, size_t cap) {
    pthread_mutex_lock(&s->versions_lock);
    snprintf(buf, cap, "%s", gen < (uint64_t)s->n_versions ? s->versions[gen] : "0");
    pthread_mutex_unlock(&s->versions_lock);
    return buf;
}

static int dup_opt(char **dst, const char *src) {
    *dst = NULL;
    return src && !(*dst = strdup(src)) ? -1 : 0;
}

/* The model's id when none is given: the file's base name without its extension. */
static char *default_model_name(const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *base = path;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/') base = path + i + 1;
    size_t n = (size_t)(path + len - base);
    char *name = malloc(n + 1);
    if (!name) return NULL;
    memcpy(name, base, n);
    name[n] = 0;
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = 0;
    return name;
}

static int bind_listener(pith_server *s, pith_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    int gai = getaddrinfo(s->host, port, &hints, &res);
    if (gai) return pith_errf(err, "cannot resolve %s: %s", s->host, gai_strerror(gai));
    int fd = -1, last_errno = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return pith_errf(err, "cannot listen on %s:%d: %s", s->host, s->port, strerror(last_errno));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
            s->port = ntohs(a4->sin_port);
            s->host_check = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
            s->port = ntohs(a6->sin6_port);
            s->host_check = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ||
                            (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127);
        }
    }
    s->listen_fd = fd;
    return 0;
}

/* A server with its locks and metrics set up and nothing else (pith_server_free frees it). */
static pith_server *server_alloc(void) {
    pith_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->listen_fd = -1;
    pthread_mutex_init(&s->jobs_lock, NULL);
    pthread_cond_init(&s->jobs_changed, NULL);
    pthread_rwlock_init(&s->model_lock, NULL);
    pthread_mutex_init(&s->admin_lock, NULL);
    pthread_mutex_init(&s->versions_lock, NULL);
    pthread_mutex_init(&s->body_lock, NULL);
    pthread_cond_init(&s->body_freed, NULL);
    metrics_init(&s->metrics);
    s->created_unix = (int64_t)time(NULL);
    return s;
}

/* Another rank of a tensor-parallel job failed (pith_comm_on_failure), on the thread that found it: the
 * engine's thread may never come back from the collective it is in, so the requests in flight are
 * answered here (each with an error saying why), new ones refused, and the job ends when this returns:
 * within about 0.8 s, before a launcher's SIGKILL (see pith_comm_on_failure). */
static void server_rank_failed(void *user, const char *why) {
    pith_server *s = user;
    atomic_store(&s->ready, false);
    atomic_store(&s->draining, true);
    snprintf(s->job_failure, sizeof s->job_failure, "another rank of this tensor-parallel job failed (%s)", why);
    jobs_fail_all(s);
    for (int waited_ms = 0; waited_ms < 800; waited_ms += 10) { /* the connection threads send the errors */
        if (jobs_unanswered(s) == 0) break;
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    server_log(s, PITH_LOG_ERROR, "%s: the requests in flight were answered with an error", s->job_failure);
}

int pith_server_create(const pith_server_options *o, pith_server **out, pith_err *err) {
    *out = NULL;
    bool several = o->n_models > 0 || (o->models_dir && *o->models_dir);
    if (!several && (!o->model_path || !*o->model_path)) return pith_errf(err, "no model given");
    if (o->port < 0 || o->port > 65535) return pith_errf(err, "port %d is out of range", o->port);
    pith_server *s = server_alloc();
    if (!s) return pith_errf(err, "out of memory");
    s->max_body = o->max_body_bytes ? o->max_body_bytes : (size_t)4 << 20;
    s->body_budget = o->max_body_memory ? o->max_body_memory : (size_t)64 << 20;
    if (s->body_budget < 2 * s->max_body + 4096) s->body_budget = 2 * s->max_body + 4096; /* a body's buffer doubles */
    s->max_connections = o->max_connections > 0 ? o->max_connections : 256;
    s->idle_timeout_s = o->idle_timeout_s > 0 ? o->idle_timeout_s : 60;
    s->max_conns_per_ip = o->max_conns_per_ip > 0 ? o->max_conns_per_ip : o->max_conns_per_ip < 0 ? 0 : 64;
    s->header_timeout_s = o->header_timeout_s > 0 ? o->header_timeout_s : o->header_timeout_s < 0 ? 1e18 : 10;
    s->min_body_rate = o->min_body_rate > 0 ? o->min_body_rate : o->min_body_rate < 0 ? 0 : 1024;
    s->n_threads = o->n_threads;
    s->engine_opt = o->engine;
    if (!s->engine_opt.draft_threads) s->engine_opt.draft_threads = o->n_threads; /* a draft model's threads */
    s->log_requests = o->log_requests;
    s->log = (log_ctx){.level = o->log_level, .json = o->log_json, .sink = o->log, .user = o->log_user};
    s->port = o->port;
    const char *model_path = several ? "" : o->model_path;
    if (dup_opt(&s->model_path, model_path) || dup_opt(&s->tokenizer_path, o->tokenizer_path) ||
        dup_opt(&s->chat_template_path, o->chat_template_path) || dup_opt(&s->device, o->device) ||
        dup_opt(&s->gpu_layers, o->gpu_layers) ||
        dup_opt(&s->host, o->host ? o->host : "127.0.0.1") ||
        (o->model_name ? dup_opt(&s->model_name, o->model_name) : !(s->model_name = default_model_name(model_path)))) {
        pith_server_free(s);
        return pith_errf(err, "out of memory");
    }
    s->n_cpu_moe = o->n_cpu_moe;
    s->comm = o->comm;
    s->tp = o->tp;
    s->pp = o->pp;
    s->no_ep = o->no_ep;
    if (s->comm) pith_comm_on_failure(s->comm, server_rank_failed, s);
    if (!s->engine_opt.draft_device) s->engine_opt.draft_device = s->device; /* a draft runs beside its target */
    for (int i = 0; i < o->n_api_keys; i++) {
        if (auth_add_key(&s->keys, o->api_keys[i], err)) {
            pith_server_free(s);
            return -1;
        }
    }
    if (o->api_key_file && auth_add_key_file(&s->keys, o->api_key_file, err)) {
        pith_server_free(s);
        return -1;
    }
    if (o->api_key_file && auth_key_file_shared(o->api_key_file))
        server_log(s, PITH_LOG_WARN, "the API key file %s can be read by other users (chmod 600 it)", o->api_key_file);
    for (int i = 0; i < o->n_admin_keys; i++) {
        if (auth_add_key(&s->admin_keys, o->admin_keys[i], err)) {
            pith_server_free(s);
            return pith_err_prefix(err, "admin key");
        }
    }
    if (o->admin_key_file && auth_add_key_file(&s->admin_keys, o->admin_key_file, err)) {
        pith_server_free(s);
        return pith_err_prefix(err, "admin key file");
    }
    if (o->admin_key_file && auth_key_file_shared(o->admin_key_file))
        server_log(s, PITH_LOG_WARN, "the admin key file %s can be read by other users (chmod 600 it)", o->admin_key_file);
    const char *version = o->weight_version ? o->weight_version : "0";
    if (strlen(version) > 128) {
        pith_server_free(s);
        return pith_errf(err, "the weight version label is longer than 128 bytes");
    }
    if (!(s->weights_path = strdup(model_path)) || !(s->versions = malloc(sizeof *s->versions)) ||
        !(s->versions[0] = strdup(version))) {
        pith_server_free(s);
        return pith_errf(err, "out of memory");
    }
    s->n_versions = 1;
    for (int i = 0; i < o->n_cors_origins; i++) {
        if (cors_add(&s->cors, o->cors_origins[i], err)) {
            pith_server_free(s);
            return -1;
        }
    }
    if (o->n_allowed_hosts > 0 && !(s->allowed_hosts = calloc((size_t)o->n_allowed_hosts, sizeof *s->allowed_hosts))) {
        pith_server_free(s);
        return pith_errf(err, "out of memory");
    }
    for (int i = 0; i < o->n_allowed_hosts; i++) {
        const char *h = o->allowed_hosts[i];
        if (!h || !*h || strlen(h) > 253 || strpbrk(h, " /\t\r\n")) {
            pith_server_free(s);
            return pith_errf(err, "allowed host '%.100s' is not '*' or a host name (no port, no path)", h ? h : "");
        }
        if (!(s->allowed_hosts[s->n_allowed_hosts++] = strdup(h))) {
            pith_server_free(s);
            return pith_errf(err, "out of memory");
        }
    }
    if (several && o->mmproj_path) { /* which model would it go with? */
        pith_server_free(s);
        return pith_errf(err, "--mmproj %s: with several models, pair each projector with its model: --mmproj NAME=FILE "
                              "(NAME as in -m NAME=PATH)", o->mmproj_path);
    }
    if (dup_opt(&s->mmproj_path, o->mmproj_path) ||
        (o->n_allowed_media_domains > 0 &&
         !(s->media_domains = calloc((size_t)o->n_allowed_media_domains, sizeof *s->media_domains)))) {
        pith_server_free(s);
        return pith_errf(err, "out of memory");
    }
    for (int i = 0; i < o->n_allowed_media_domains; i++) {
        const char *h = o->allowed_media_domains[i];
        if (!h || !*h || strlen(h) > 253 || strpbrk(h, " /\t\r\n:@") || !strcmp(h, "*")) {
            pith_server_free(s);
            return pith_errf(err, "allowed media domain '%.100s' is not a host name or *.domain", h ? h : "");
        }
        if (!(s->media_domains[s->n_media_domains++] = strdup(h))) {
            pith_server_free(s);
            return pith_errf(err, "out of memory");
        }
    }
    s->media = (media_limits){.allowed_domains = (const char *const *)s->media_domains, .n_allowed = s->n_media_domains,
                              .max_bytes = o->media_max_bytes, .timeout_s = o->media_timeout_s};
    s->image_max_tokens = o->image_max_tokens;
    if (o->kv_events.endpoint && kv_events_new(&o->kv_events, &s->kv_events, err)) { /* before binding */
        pith_server_free(s);
        return -1;
    }
    /* Each model publishes under a topic of its own, kv@HOST@NAME (llm-d keys its index by the
     * topic's model): one given topic cannot name them all. */
    if (several && s->kv_events && kv_events_has_topic(s->kv_events)) {
        pith_server_free(s);
        return pith_errf(err, "--kv-events-topic names one model's topic: with several models each publishes under kv@HOST@NAME; leave it out");
    }
    if (several) {
        if (models_create(s, o, &s->models, err)) {
            pith_server_free(s);
            return -1;
        }
        atomic_store(&s->load_claimed, true); /* the models load on demand, each on its own server */
        atomic_store(&s->ready, true);
        /* One publisher for every model, open before any loads (the loads attach to it concurrently) */
        if (s->kv_events && kv_events_open(s->kv_events, s, err)) {
            pith_server_free(s);
            return -1;
        }
    }
    if (bind_listener(s, err) || http_start(s, err)) {
        pith_server_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int server_create_model(pith_server *front, const char *name, const char *path, const char *mmproj, const char *dir,
                        pith_server **out, pith_err *err) {
    *out = NULL;
    pith_server *s = server_alloc();
    if (!s) return pith_errf(err, "out of memory");
    s->model_server = true;
    /* what handlers read of the configuration; the keys, origins and hosts are borrowed */
    s->max_body = front->max_body;
    s->body_budget = front->body_budget;
    s->max_connections = front->max_connections;
    s->idle_timeout_s = front->idle_timeout_s;
    s->n_threads = front->n_threads;
    s->engine_opt = front->engine_opt;
    s->log_requests = front->log_requests;
    s->log = front->log;
    s->keys = front->keys;
    s->admin_keys = front->admin_keys;
    s->cors = front->cors;
    s->kv_events = front->kv_events; /* borrowed: its engine attaches a source at load */
    s->media = front->media;         /* its allowed domains borrowed too */
    s->image_max_tokens = front->image_max_tokens;
    s->port = front->port;
    if (dup_opt(&s->model_path, path) || dup_opt(&s->model_name, name) || dup_opt(&s->host, front->host) ||
        dup_opt(&s->mmproj_path, mmproj) || dup_opt(&s->mmproj_dir, dir) ||
        dup_opt(&s->tokenizer_path, front->tokenizer_path) || dup_opt(&s->chat_template_path, front->chat_template_path) ||
        dup_opt(&s->device, front->device) || dup_opt(&s->gpu_layers, front->gpu_layers) || !(s->weights_path = strdup(path)) ||
        !(s->versions = malloc(sizeof *s->versions)) || !(s->versions[0] = strdup("0"))) {
        pith_server_free(s);
        return pith_errf(err, "out of memory");
    }
    s->n_versions = 1;
    s->n_cpu_moe = front->n_cpu_moe;
    if (front->engine_opt.draft_device == front->device) s->engine_opt.draft_device = s->device;
    *out = s;
    return 0;
}

int pith_server_port(const pith_server *s) { return s->port; }

bool pith_server_ready(const pith_server *s) { return atomic_load(&((pith_server *)s)->ready); }

static void assets_log(void *ctx, const char *msg) { server_log(ctx, PITH_LOG_INFO, "%s", msg); }

/* The start-up summary: what was loaded, how it runs, its memory, where it listens. */
static void log_summary(pith_server *s, double load_s) {
    if (!log_enabled(&s->log, PITH_LOG_INFO)) return;
    log_fields f = {0};
    log_str(&f, "model", s->model_name);
    log_str(&f, "path", s->model_path);
    if (s->vision) log_str(&f, "projector", s->projector);
    log_str(&f, "arch", s->model->hp.arch);
    pith_bench_weights w;
    pith_err why;
    if (!pith_bench_weights_of(s->model, &w, &why)) log_str(&f, "weights", w.format);
    log_int(&f, "layers", s->model->hp.n_layers);
    log_int(&f, "vocab", s->model->hp.n_vocab);
    log_int(&f, "max_seq_len", s->max_seq_len);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    log_int(&f, "threads", s->n_threads > 0 ? s->n_threads : cpus > 0 ? cpus : 1);
    log_str(&f, "device", pith_backend_device_or_env(s->device));
    if (s->model->placement[0]) log_str(&f, "offload", s->model->placement);
    log_str(&f, "kernels", pith_backend_cpu_kernel_name(pith_backend_force_scalar()));
    pith_engine_stats st;
    pith_engine_get_stats(s->engine, &st);
    log_int(&f, "mem_groups", st.n_mem_groups);
    for (int g = 0; g < st.n_mem_groups && g < PITH_MAX_MEM_GROUPS; g++) {
        const pith_engine_mem_stats *m = &st.mem[g];
        char key[32], val[96];
        snprintf(key, sizeof key, "mem%d", g);
        if (m->kind == PITH_MEM_WINDOW)
            snprintf(val, sizeof val, "%s(%d) %d layers %d blocks %zu bytes", pith_mem_kind_name(m->kind), m->window,
                     m->n_layers, m->units_total, (size_t)m->units_total * m->unit_bytes);
        else
            snprintf(val, sizeof val, "%s %d layers %d %s %zu bytes", pith_mem_kind_name(m->kind), m->n_layers,
                     m->units_total, m->kind == PITH_MEM_RECURRENT ? "states" : "blocks",
                     (size_t)m->units_total * m->unit_bytes);
        log_str(&f, key, val);
    }
    log_int(&f, "mem_bytes", (long long)st.mem_bytes);
    char addr[300];
    bool v6 = strchr(s->host, ':') != NULL;
    snprintf(addr, sizeof addr, "http://%s%s%s:%d", v6 ? "[" : "", s->host, v6 ? "]" : "", s->port);
    log_str(&f, "listen", addr);
    log_num(&f, "load_s", load_s);
    char msg[160];
    snprintf(msg, sizeof msg, "model %.64s loaded in %.2f s (weights read in)", s->model_name, load_s);
    log_emit(&s->log, PITH_LOG_INFO, msg, &f);
}

int pith_server_load(pith_server *s, pith_err *err) {
    if (atomic_exchange(&s->load_claimed, true)) return pith_errf(err, "the model is already loaded");
    double t0 = server_now();
    pith_assets a;
    pith_assets_options ao = {
        .model_path = s->model_path, .tokenizer_path = s->tokenizer_path,
        .chat_template_path = s->chat_template_path, .n_threads = s->n_threads, .device = s->device,
        .gpu_layers = s->gpu_layers, .n_cpu_moe = s->n_cpu_moe, .comm = s->comm, .tp = s->tp, .pp = s->pp, .no_ep = s->no_ep,
        .mtp = s->engine_opt.spec_type == PITH_SPEC_MTP, .log = assets_log, .log_ctx = s,
    };
    /* The projector (server_model_projector: --mmproj, a mmproj*.gguf beside a --models-dir model, or the
     * model's own vision tower). Under --tp/--pp only one given: the ranks take no images, so a model
     * carrying a vision tower serves text there rather than failing to load. */
    if (s->comm ? dup_opt(&s->projector, s->mmproj_path)
                : server_model_projector(s->model_path, s->mmproj_path, s->mmproj_dir, &s->projector, err)) {
        if (s->comm) pith_errf(err, "out of memory");
        return -1;
    }
    if (pith_assets_load(&ao, &a, err)) return -1;
    /* A vision tower found in the model's own directory (nobody asked for it) that cannot serve images
     * leaves the model serving text, as before it was looked for; a projector that was asked for fails. */
    bool own = s->projector && !s->mmproj_path && !strcmp(s->projector, s->model_path);
    if (own && !a.model->has_embeds) {
        server_log(s, PITH_LOG_WARN, "the model's vision tower is not used: this model takes no image inputs here");
        free(s->projector);
        s->projector = NULL;
    }
    if (s->projector) { /* the vision encoder beside the model: the engine runs it (engine.h, pith_media) */
        const int cap = s->image_max_tokens == 0  ? PITH_VISION_DEFAULT_MAX_TOKENS
                        : s->image_max_tokens < 0 ? 0
                                                  : s->image_max_tokens;
        int vrc = pith_vision_load(s->projector, s->n_threads, &s->vision, err);
        if (!vrc && pith_vision_set_max_tokens(s->vision, cap, err)) { /* the user's cap, not the tower, is wrong */
            pith_vision_free(s->vision);
            s->vision = NULL;
            pith_assets_free(&a);
            return pith_err_prefix(err, "--image-max-tokens");
        }
        if (vrc) {
            if (own) {
                server_log(s, PITH_LOG_WARN, "the model's vision tower is not used, images are refused: %s", err->msg);
                free(s->projector);
                s->projector = NULL;
                *err = (pith_err){{0}};
            } else {
                pith_assets_free(&a);
                if (s->mmproj_path) return pith_err_prefix(err, "--mmproj");
                return pith_err_prefix(err, "the projector %.200s", s->projector);
            }
        }
    }
    if (s->vision) {
        pith_vision_encoder(s->vision, &s->encoder);
        s->engine_opt.encoder = &s->encoder;
    }
    pith_engine *e = NULL;
    kv_source *src = NULL;
    /* KV events start before the engine's thread, so the sink sees every block named */
    if (pith_engine_create(a.model, a.tok, &s->engine_opt, &e, err) ||
        (s->kv_events && kv_events_start(s->kv_events, s, e, &src, err)) || pith_engine_start(e, err)) {
        pith_err_prefix(err, "engine");
        pith_engine_free(e);
        kv_source_free(src); /* after its engine */
        pith_assets_free(&a);
        pith_vision_free(s->vision);
        s->vision = NULL;
        s->engine_opt.encoder = NULL;
        return -1;
    }
    s->kv_source = src;
    s->model = a.model;
    s->pooling = server_model_pooling(a.model, s->pooling_error, sizeof s->pooling_error);
    if (!s->pooling) server_log(s, PITH_LOG_WARN, "embeddings are unavailable: %s", s->pooling_error);
    s->tok = a.tok;
    s->chat = a.chat;
    s->bos_text = a.bos_text;
    s->eos_text = a.eos_text;
    s->engine = e;
    s->max_seq_len = pith_engine_max_seq_len(e);
    log_summary(s, server_now() - t0);
    atomic_store(&s->ready, true);
    return 0;
}

/* Waits until no job is live or `until` (monotonic seconds) passes; returns the jobs left. */
static int wait_jobs(pith_server *s, double until) {
    pthread_mutex_lock(&s->jobs_lock);
    while (s->n_jobs > 0) {
        double left = until - server_now();
        if (left <= 0) break;
        server_cond_wait(&s->jobs_changed, &s->jobs_lock, left < 0.1 ? left : 0.1);
    }
    int n = s->n_jobs;
    pthread_mutex_unlock(&s->jobs_lock);
    return n;
}

void pith_server_drain(pith_server *s, double deadline_s) {
    if (s->drained) return;
    s->drained = true;
    atomic_store(&s->draining, true);
    if (s->models) models_stop(s->models, false);
    if (s->mhd) {
        int fd = MHD_quiesce_daemon(s->mhd);
        if (fd >= 0) close(fd);
        s->listen_fd = -1;
    }
    double t0 = server_now();
    double until = t0 + (deadline_s > 0 ? deadline_s : 0);
    int left = s->models ? models_wait_idle(s->models, until) : wait_jobs(s, until);
    if (left > 0) {
        server_log(s, PITH_LOG_WARN, "drain: cancelling %d request(s) still running after %.1f s", left, server_now() - t0);
        if (s->models) models_cancel_all(s->models);
        else jobs_cancel_all(s);
        /* Cancelled requests end at the engine's next step; give their responses a moment to go out
         * (a client that does not read is cut off when the connections close below). */
        if (s->models) models_wait_idle(s->models, server_now() + 2.0);
        else wait_jobs(s, server_now() + 2.0);
    }
    atomic_store(&s->stopping, true);
    if (s->models) models_stop(s->models, true);
    http_stop(s);
}

void pith_server_free(pith_server *s) {
    if (!s) return;
    pith_server_drain(s, 0);
    if (s->listen_fd >= 0) close(s->listen_fd);
    models_free(s->models); /* the connections are closed: no request holds a model */
    /* Cancels what is left; the final events release the jobs. */
    pith_engine_free(s->engine);
    kv_source_free(s->kv_source);              /* after the engine: its sink runs no more */
    if (!s->model_server) kv_events_free(s->kv_events); /* after every model's source (models_free) */
    structured_cache_free(s);                  /* after the engine: its requests held grammars too */
    pith_grammar_vocab_free(s->grammar_vocab);
    pith_assets a = {.model = s->model, .tok = s->tok, .chat = s->chat, .bos_text = s->bos_text, .eos_text = s->eos_text};
    pith_assets_free(&a);
    pith_vision_free(s->vision); /* after the engine, which ran it */
    pith_model_free(s->asleep_job); /* asleep under --tp: the job's handle (its ranks end with it) */
    if (!s->model_server) { /* a model server borrows these from its front */
        auth_free(&s->keys);
        auth_free(&s->admin_keys);
        cors_free(&s->cors);
    }
    for (int i = 0; i < s->n_versions; i++) free(s->versions[i]);
    free(s->versions);
    free(s->weights_path);
    pthread_rwlock_destroy(&s->model_lock);
    pthread_mutex_destroy(&s->admin_lock);
    pthread_mutex_destroy(&s->versions_lock);
    for (int i = 0; i < s->n_allowed_hosts; i++) free(s->allowed_hosts[i]);
    free(s->allowed_hosts);
    for (int i = 0; i < s->n_media_domains; i++) free(s->media_domains[i]);
    free(s->media_domains);
    free(s->mmproj_path);
    free(s->mmproj_dir);
    free(s->projector);
    metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->jobs_changed);
    pthread_cond_destroy(&s->body_freed);
    pthread_mutex_destroy(&s->body_lock);
    pthread_mutex_destroy(&s->jobs_lock);
    free(s->model_path);
    free(s->device);
    free(s->gpu_layers);
    free(s->tokenizer_path);
    free(s->chat_template_path);
    free(s->model_name);
    free(s->host);
    free(s);
}
