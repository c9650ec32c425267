#include "server/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/admin.h"
#include "server/kv_events.h"
#include "server/conn_guard.h"
#include "server/handlers.h"
#include "server/job.h"
#include "server/messages_out.h"
#include "server/models.h"
#include "server/web.h"

static const route routes[] = {
    {"GET", "/", false, handle_web_page, false},
    {"GET", "/health", false, handle_health, false},
    {"GET", "/health/live", false, handle_health_live, false},
    {"GET", "/metrics", true, handle_metrics, false},
    {"GET", "/v1/models", true, handle_models, false},
    {"GET", "/v1/models/", true, handle_models, false},
    {"POST", "/v1/completions", true, handle_completions, true},
    {"POST", "/v1/chat/completions", true, handle_chat_completions, true},
    {"POST", "/v1/responses", true, handle_responses, true},
    {"POST", "/v1/messages", true, handle_messages, true},
    {"POST", "/v1/messages/count_tokens", true, handle_messages_count_tokens, true},
    {"POST", "/v1/embeddings", true, handle_embeddings, true},
    {"POST", "/tokenize", true, handle_tokenize, true},
    {"POST", "/detokenize", true, handle_detokenize, true},
    {"POST", "/v1/tokenize", true, handle_tokenize, true},
    {"POST", "/v1/detokenize", true, handle_detokenize, true},
    {"POST", "/apply-template", true, handle_apply_template, true},
    {"POST", "/v1/completions/render", true, handle_render_completions, true},
    {"POST", "/v1/chat/completions/render", true, handle_render_chat_completions, true},
    {"POST", "/v1/rerank", true, handle_rerank, true},
    {"POST", "/v1/reranking", true, handle_rerank, true},
    {"POST", "/rerank", true, handle_rerank, true},
    {"POST", "/infill", true, handle_infill, true},
    /* admin keys of their own (admin.h), not the API keys */
    {"POST", "/v1/admin/reload", false, handle_admin_reload, true},
    {"POST", "/v1/admin/pause", false, handle_admin_pause, true},
    {"POST", "/v1/admin/resume", false, handle_admin_resume, true},
    {"POST", "/v1/admin/sleep", false, handle_admin_sleep, true},
    {"POST", "/v1/admin/wake", false, handle_admin_wake, true},
    {"POST", "/v1/admin/abort", false, handle_admin_abort, true},
    {"GET", "/v1/admin/kv_cache", false, handle_admin_kv_cache, true}, /* kv_events.h */
    /* several models (models.h): the front answers these itself */
    {"POST", "/v1/admin/models/load", false, handle_admin_models_load, false},
    {"POST", "/v1/admin/models/unload", false, handle_admin_models_unload, false},
};
#define N_ROUTES ((int)(sizeof routes / sizeof *routes))

static bool path_matches(const route *rt, const char *url) {
    size_t n = strlen(rt->path);
    if (n > 1 && rt->path[n - 1] == '/') return strncmp(url, rt->path, n) == 0 && url[n] != 0;
    return strcmp(url, rt->path) == 0;
}

/* The route for method + url (HEAD is answered by the GET route, without the body); NULL with
 * *path_known telling 405 from 404. `allow` gets the path's methods, e.g. "GET, HEAD, OPTIONS". */
static const route *find_route(const char *method, const char *url, bool *path_known, char *allow, size_t cap) {
    *path_known = false;
    const route *found = NULL;
    const char *want = strcmp(method, "HEAD") ? method : "GET";
    allow[0] = 0;
    for (int i = 0; i < N_ROUTES; i++) {
        if (!path_matches(&routes[i], url)) continue;
        *path_known = true;
        const char *m = routes[i].method;
        if (!strstr(allow, m)) {
            size_t len = strlen(allow);
            snprintf(allow + len, cap - len, "%s%s%s", len ? ", " : "", m, strcmp(m, "GET") ? "" : ", HEAD");
        }
        if (!found && !strcmp(m, want)) found = &routes[i];
    }
    if (*path_known) {
        size_t len = strlen(allow);
        snprintf(allow + len, cap - len, ", OPTIONS");
    }
    return found;
}

/* Set on a connection's thread (one thread per connection) once its request was cancelled for a
 * vanished client: libmicrohttpd's report of the dropped connection is then left out of the log. */
static _Thread_local bool quiet_drop;

const char *http_header(http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static enum MHD_Result queue(http_request *r, int status, struct MHD_Response *resp, const char *content_type) {
    if (!resp) return MHD_NO;
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    const cors_origins *cors = &r->srv->cors;
    if (cors_enabled(cors)) {
        const char *allowed = cors_allow_origin(cors, http_header(r, "Origin"));
        if (allowed) MHD_add_response_header(resp, "Access-Control-Allow-Origin", allowed);
        if (!cors->any) MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
        if (allowed && r->preflight) {
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", r->allow);
            MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "7200");
        }
    }
    if (status == 405 || r->preflight) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    /* A drain closes kept-alive connections: replies to requests that came in during it, and refusals
     * once it is on. A success decided before the drain began keeps its connection, so that the
     * client's next request on it gets the drain's answer rather than a connection closed under it. */
    if (r->close || r->drain_seen || (status >= 500 && atomic_load(&r->srv->draining)))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (rc == MHD_YES) {
        r->responded = true;
        r->status = status;
    }
    return rc;
}

enum MHD_Result http_send_text(http_request *r, int status, const char *content_type, const char *data, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    return queue(r, status, resp, content_type);
}

enum MHD_Result http_send_json(http_request *r, int status, cJSON *body) {
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!text) {
        server_log(r->srv, PITH_LOG_ERROR, "out of memory formatting a response");
        return MHD_NO;
    }
    size_t len = strlen(text);
    /* cJSON allocates with malloc (no hooks are installed), so MHD may free() it. */
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    return queue(r, status, resp, "application/json");
}

/* Anthropic's routes (/v1/messages...): x-api-key is a key too, and errors are in Anthropic's shape. */
static bool anthropic_path(const char *url) {
    return url && (!strcmp(url, "/v1/messages") || !strncmp(url, "/v1/messages/", 13));
}

enum MHD_Result http_send_error(http_request *r, const api_error *e) {
    metrics_error(&r->srv->metrics, e->status);
    if (anthropic_path(r->url)) return http_send_json(r, anthropic_status(e->status), anthropic_error_json(e));
    return http_send_json(r, e->status, api_error_json(e));
}

enum MHD_Result http_send_stream(http_request *r, MHD_ContentReaderCallback reader) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, r->stream, NULL);
    if (resp) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    }
    return queue(r, 200, resp, "text/event-stream");
}

bool http_client_gone(http_request *r) {
    if (atomic_load(&r->srv->stopping)) return true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    char c;
    ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;   /* the next pipelined request: still there */
    if (n == 0) return true;   /* orderly close */
    return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

enum MHD_Result http_client_cancelled(http_request *r) {
    if (r->job) job_cancel(r->job);
    quiet_drop = true;
    if (!r->gone && !atomic_load(&r->srv->stopping))
        server_log(r->srv, PITH_LOG_INFO, "request %llu cancelled: client disconnected", (unsigned long long)r->id);
    r->gone = true;
    return MHD_NO;
}

/* Takes `n` more bytes of the server's body budget for r, waiting up to a couple of seconds for other
 * requests to give some back; false when there is no room. */
static bool body_reserve(http_request *r, size_t n) {
    pith_server *srv = r->home;
    pthread_mutex_lock(&srv->body_lock);
    double until = server_now() + 2.0;
    while (srv->body_held + n > srv->body_budget && srv->body_held > 0 && !atomic_load(&srv->stopping)) {
        double left = until - server_now();
        if (left <= 0) break;
        server_cond_wait(&srv->body_freed, &srv->body_lock, left < 0.1 ? left : 0.1);
    }
    /* one body alone always fits (it is under --max-body) */
    bool ok = srv->body_held + n <= srv->body_budget || srv->body_held == 0;
    if (ok) {
        srv->body_held += n;
        r->held += n;
    }
    pthread_mutex_unlock(&srv->body_lock);
    return ok;
}

static void body_release(http_request *r) {
    if (!r->held) return;
    pith_server *srv = r->home;
    pthread_mutex_lock(&srv->body_lock);
    srv->body_held -= r->held;
    r->held = 0;
    pthread_cond_broadcast(&srv->body_freed);
    pthread_mutex_unlock(&srv->body_lock);
}

/* A body that will not be used (an error is answered once it is in): libmicrohttpd takes a response only
 * once the body is in (or before it starts), so the rest is read and dropped, and what r held of it goes
 * back to the budget; a sender that keeps going far beyond the limit is closed. */
static enum MHD_Result drop_body(http_request *r, size_t n) {
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    body_release(r);
    r->dropped += n;
    return r->dropped > 8 * r->home->max_body + ((size_t)1 << 20) ? MHD_NO : MHD_YES;
}

static enum MHD_Result reply_error(http_request *r, int status, const char *code, const char *fmt, const char *arg) {
    api_error e;
    api_errorf(&e, status, code, NULL, fmt, arg);
    return http_send_error(r, &e);
}

/* The Host header when the server listens on a loopback address: a page in a browser can reach such a
 * server only through a name that resolves to it, and DNS rebinding makes an attacker's own name do so;
 * the page's requests then carry that name. Only loopback names (and --allowed-hosts) are accepted.
 * No Host (HTTP/1.0) is not a browser's request and passes. */
static bool host_allowed(const pith_server *srv, const char *host) {
    if (!srv->host_check || !host) return true;
    char name[256];
    size_t n = strlen(host);
    const char *port = NULL;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (!close) return false;
        n = (size_t)(close - host) + 1;
        if (close[1] == ':') port = close + 2;
        else if (close[1]) return false;
    } else {
        const char *colon = strchr(host, ':');
        if (colon) {
            if (strchr(colon + 1, ':')) return false;
            n = (size_t)(colon - host);
            port = colon + 1;
        }
    }
    if (n == 0 || n >= sizeof name) return false;
    if (port)
        for (const char *p = port; *p; p++)
            if (!isdigit((unsigned char)*p)) return false;
    memcpy(name, host, n);
    name[n] = 0;
    if (!strcasecmp(name, "localhost") || !strcasecmp(name, "localhost.")) return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) return true;
    struct in6_addr a6;
    if (name[0] == '[') {
        name[n - 1] = 0;
        bool loop = inet_pton(AF_INET6, name + 1, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
        name[n - 1] = ']';
        if (loop) return true;
    }
    for (int i = 0; i < srv->n_allowed_hosts; i++)
        if (!strcmp(srv->allowed_hosts[i], "*") || !strcasecmp(srv->allowed_hosts[i], name)) return true;
    return false;
}

/* "application/json", any case, with parameters or not ("application/json; charset=utf-8"). */
static bool json_content_type(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1)) return false;
    char c = ct[sizeof want - 1];
    return c == 0 || c == ';' || c == ' ' || c == '\t';
}

/* A request carries a body when it declares a non-zero length or a transfer coding. */
static bool has_body(http_request *r) {
    const char *cl = http_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        while (*cl == ' ' || *cl == '\t' || *cl == '0') cl++;
        if (*cl && *cl != ' ' && *cl != '\t') return true;
    }
    return http_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* Checks that need only the headers. An error is kept in r->early_error and answered once the body
 * is in, since libmicrohttpd closes a connection whose response is queued before its body is read;
 * only a body declared too large is refused at once (and the connection closed). Returns true when
 * a response was queued. */
static bool early_checks(http_request *r, enum MHD_Result *rc) {
    pith_server *srv = r->srv;
    bool path_known;
    r->route = find_route(r->method, r->url, &path_known, r->allow, sizeof r->allow);
    api_error *e = &r->early_error;
    const char *host = http_header(r, MHD_HTTP_HEADER_HOST);
    if (!host_allowed(srv, host)) {
        r->has_early = true;
        api_errorf(e, 403, "host_not_allowed", NULL,
                   "the Host '%.100s' is not accepted: this server listens on a loopback address and answers "
                   "localhost, 127.0.0.1 and [::1] (pith serve --allowed-hosts adds names)", host);
    } else if (!r->route && path_known && !strcmp(r->method, "OPTIONS")) {
        r->preflight = true; /* CORS preflight or plain OPTIONS: no key needed */
    } else if (!r->route) {
        r->has_early = true;
        if (path_known) api_errorf(e, 405, "method_not_allowed", NULL, "method %s is not allowed here", r->method);
        else api_errorf(e, 404, "not_found", NULL, "unknown route %s", r->url);
    } else if (r->route->needs_key && !auth_check(&srv->keys, http_header(r, MHD_HTTP_HEADER_AUTHORIZATION)) &&
               !(anthropic_path(r->url) && auth_check_key(&srv->keys, http_header(r, "x-api-key")))) {
        bool anthropic = anthropic_path(r->url);
        bool given = http_header(r, MHD_HTTP_HEADER_AUTHORIZATION) != NULL || (anthropic && http_header(r, "x-api-key"));
        r->has_early = true;
        api_errorf(e, 401, "invalid_api_key", NULL, "%s",
                   given ? "incorrect API key provided"
                   : anthropic ? "missing API key (send 'x-api-key: KEY' or 'Authorization: Bearer KEY')"
                               : "missing API key (send 'Authorization: Bearer KEY')");
    }
    const char *cl = http_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || n > srv->max_body) {
            if (!r->has_early) {
                char limit[32];
                snprintf(limit, sizeof limit, "%zu", srv->max_body);
                api_errorf(e, 413, "request_too_large", NULL, "the request body exceeds the limit of %s bytes", limit);
            }
            r->has_early = false;
            r->close = true;
            *rc = http_send_error(r, e);
            return true;
        }
    }
    /* after the size check: a body declared too large gets its 413 whatever its type */
    if (!r->has_early && !r->preflight && r->route && !strcmp(r->route->method, "POST") && has_body(r) &&
        !json_content_type(http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        /* A page in a browser may POST text/plain or a form anywhere without asking (no preflight);
         * requiring JSON's type makes it ask, and CORS (--cors-origin) decides. */
        const char *ct = http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        r->has_early = true;
        api_errorf(e, 415, "unsupported_media_type", NULL, "the request body must be sent as "
                   "'Content-Type: application/json'%s%.80s%s", ct ? " (got '" : " (no Content-Type given)",
                   ct ? ct : "", ct ? "')" : "");
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
    (void)version;
    pith_server *srv = cls;
    http_request *r = *req_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->srv = r->home = srv;
        r->conn = conn;
        r->method = method;
        r->url = url;
        r->t_arrival = server_now();
        r->id = (uint64_t)atomic_fetch_add(&srv->n_requests, 1) + 1;
        r->drain_seen = atomic_load(&srv->draining);
        quiet_drop = false;
        *req_cls = r;
        r->track = conn_guard_track(conn);
        conn_guard_headers_in(srv, r->track);
        enum MHD_Result rc;
        if (early_checks(r, &rc)) {
            conn_guard_busy(srv, r->track);
            return rc;
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        conn_guard_body_bytes(srv, r->track, n);
        if (r->responded) return MHD_YES; /* an early error is on its way; the rest is dropped */
        if (r->has_early || r->preflight || r->no_room) return drop_body(r, n); /* answered at the end */
        if (r->too_large || n > srv->max_body - r->body_len) {
            r->too_large = true;
            return drop_body(r, n);
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + n + 1) cap *= 2;
            if (!body_reserve(r, cap - r->body_cap)) {
                r->no_room = true;
                server_log(srv, PITH_LOG_WARN, "request %llu refused: request bodies in memory reached --max-body-memory",
                           (unsigned long long)r->id);
                return drop_body(r, n);
            }
            char *b = realloc(r->body, cap);
            if (!b) return MHD_NO;
            r->body = b;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    conn_guard_busy(srv, r->track);
    if (r->has_early) return http_send_error(r, &r->early_error);
    if (r->preflight) return http_send_text(r, 204, NULL, "", 0);
    if (r->no_room) {
        api_error e;
        api_errorf(&e, 503, "server_busy", NULL, "%s", "the server holds too many large request bodies at once; retry shortly");
        return http_send_error(r, &e);
    }
    if (r->too_large) {
        char limit[32];
        snprintf(limit, sizeof limit, "%zu", srv->max_body);
        return reply_error(r, 413, "request_too_large", "the request body exceeds the limit of %s bytes", limit);
    }
    if (srv->models && r->route->per_model) {
        enum MHD_Result rc;
        if (!models_route(srv->models, r, &rc)) return rc;
    }
    return r->route->handler(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    pith_server *srv = cls;
    http_request *r = *req_cls;
    if (!r) return;
    *req_cls = NULL;
    int prompt_tokens = 0, completion_tokens = 0;
    double t_first = 0;
    bool generated = r->job != NULL;
    if (r->job) {
        /* Still running here only when the connection ended early: the client went away. */
        if (job_cancel(r->job) > 0 && !r->gone && !atomic_load(&srv->stopping)) {
            bool timeout = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED;
            server_log(srv, PITH_LOG_INFO, "request %llu cancelled: %s", (unsigned long long)r->id,
                       timeout ? "the client stopped reading (--timeout)" : "client disconnected");
            r->gone = !timeout;
        }
        job_totals(r->job, &prompt_tokens, &completion_tokens, &t_first);
        job_release(r->job);
    }
    quiet_drop = false;
    conn_guard_idle(srv, r->track);
    if (r->stream && r->stream_free) r->stream_free(r->stream);
    if (srv->log_requests && log_enabled(&srv->log, PITH_LOG_INFO)) {
        static const char *const why[] = {NULL, "error", "timeout", "shutdown", "read error", "client gone"};
        int status = r->responded ? r->status : 0;
        char msg[200];
        snprintf(msg, sizeof msg, "%.16s %.160s %d", r->method, r->url, status);
        log_fields f = {0};
        log_int(&f, "id", (long long)r->id);
        log_str(&f, "method", r->method);
        log_str(&f, "path", r->url);
        if (r->slot) log_str(&f, "model", r->srv->model_name);
        log_int(&f, "status", status);
        if (generated) {
            log_int(&f, "prompt_tokens", prompt_tokens);
            log_int(&f, "completion_tokens", completion_tokens);
            if (t_first > 0) log_num(&f, "ttft_s", t_first - r->t_arrival);
        }
        log_num(&f, "total_s", server_now() - r->t_arrival);
        log_str(&f, "ended", r->gone ? why[5] : (unsigned)toe < 6 ? why[toe] : "unknown");
        log_emit(&srv->log, PITH_LOG_INFO, msg, &f);
    }
    if (r->slot) models_release(srv->models, r); /* after everything that used the model's server */
    free(r->body);
    body_release(r);
    free(r);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    /* A client that went away is logged as a cancel (http_client_cancelled, on_completed), not as
     * libmicrohttpd's report of the connection it then drops or could not write to. */
    if (quiet_drop && (strstr(line, "Application reported internal error") || strstr(line, "Closing connection (application")))
        return;
    if (strstr(line, "Failed to send") && (strstr(line, "Broken pipe") || strstr(line, "Connection reset by peer")))
        return;
    /* What libmicrohttpd reports is about connections, most of them driven by clients (refused at the
     * limits, malformed requests): rate-limited, so that a flood of them cannot flood the log. */
    if (strstr(line, "reached connection limit"))
        conn_guard_log(cls, CONN_LOG_MHD, "http: refused a connection: --max-connections or --max-conns-per-ip reached");
    else
        conn_guard_log(cls, CONN_LOG_MHD, "http: %s", line);
}

int http_start(pith_server *srv, pith_err *err) {
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (conn_guard_start(srv, err)) return -1;
    /* 0 is libmicrohttpd's "no per-address limit" */
    unsigned per_ip = srv->max_conns_per_ip > 0 ? (unsigned)srv->max_conns_per_ip : 0;
    srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv,
                                MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv,
                                MHD_OPTION_LISTEN_SOCKET, srv->listen_fd,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->max_connections,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->idle_timeout_s,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                MHD_OPTION_NOTIFY_CONNECTION, conn_guard_notify, srv,
                                MHD_OPTION_END);
    if (!srv->mhd) {
        conn_guard_stop(srv);
        return pith_errf(err, "cannot start the HTTP server");
    }
    return 0;
}

void http_stop(pith_server *srv) {
    if (srv->mhd) MHD_stop_daemon(srv->mhd);
    srv->mhd = NULL;
    conn_guard_stop(srv); /* after the daemon: its connections report their close to the guard */
}
