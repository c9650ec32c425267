/* The HTTP layer over libmicrohttpd: one thread per connection (bounded), request bodies collected up
 * to the size limit, routing, authentication, and the response helpers the handlers use.
 *
 * A handler runs on its connection's thread once the whole body is in, and must queue exactly one
 * response (or return MHD_NO to drop the connection). It may block, e.g. waiting for a generation,
 * but must give up when the client goes away (http_client_gone) or the server stops. Everything a
 * request owns (its job, its stream) is released when libmicrohttpd reports the request complete. */
#ifndef PITH_SERVER_HTTP_H
#define PITH_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server/api_error.h"
#include "server/server_internal.h"

struct job;
struct conn_track;

typedef struct http_request {
    pith_server *srv;           /* the server that answers: the front, or the model server the request
                                 * was routed to (models.h) */
    pith_server *home;          /* the front: the listener, body budget and connection limits */
    void *slot;                 /* the model slot routing took (models_release gives it back) */
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    const struct route *route;
    uint64_t id;                /* request number, for log lines */
    bool gone;                  /* the client went away and the request was cancelled (logged) */
    bool has_early;             /* early_error is answered once the body is in (keeps the connection) */
    api_error early_error;
    bool preflight;             /* an OPTIONS request: 204 once the body is in */
    bool close;                 /* answer with Connection: close */
    bool drain_seen;            /* the server was draining when the request came in: its reply closes */
    char allow[48];             /* the path's methods, for Allow and preflight replies */
    char *body;                 /* NUL-terminated once complete */
    size_t body_len, body_cap;
    bool too_large;             /* the body went past the limit: the rest is dropped, 413 follows */
    bool no_room;               /* no room in srv->body_budget: the rest is dropped, 503 follows */
    size_t held;                /* bytes of srv->body_budget this request holds (its body's capacity) */
    size_t dropped;
    bool responded;
    int status;                 /* of the queued response, for the access log */
    double t_arrival;
    struct job *job;            /* released when the request completes */
    void *stream;               /* stream state (stream.c), freed when the request completes */
    void (*stream_free)(void *);
    struct conn_track *track;   /* the connection's deadlines (conn_guard.h); may be NULL */
} http_request;

typedef enum MHD_Result (*http_handler)(http_request *r);

typedef struct route {
    const char *method;
    const char *path;           /* exact, or a prefix when it ends with '/' */
    bool needs_key;             /* when keys are configured */
    http_handler handler;
    bool per_model;             /* with several models, answered by the model the body names (models.h) */
} route;

/* Starts the daemon on srv->listen_fd, with the connection watchdog (conn_guard.h). */
int http_start(pith_server *srv, pith_err *err);
/* Stops the daemon (closing every connection) and the watchdog; idempotent. */
void http_stop(pith_server *srv);

/* Response helpers; each returns what the handler should return. http_send_json takes `body`. */
enum MHD_Result http_send_json(http_request *r, int status, cJSON *body);
enum MHD_Result http_send_error(http_request *r, const api_error *e);
enum MHD_Result http_send_text(http_request *r, int status, const char *content_type, const char *data, size_t len);
/* Queues a 200 text/event-stream response read from `reader` (MHD content reader, cls = r->stream). */
enum MHD_Result http_send_stream(http_request *r, MHD_ContentReaderCallback reader);

const char *http_header(http_request *r, const char *name);
/* True when the peer has closed its end (or the socket failed), or the server is stopping. */
bool http_client_gone(http_request *r);
/* For a handler that stops because http_client_gone said so: cancels the request's job, logs
 * "request N cancelled: client disconnected" (not when the server is stopping) and keeps
 * libmicrohttpd's own "internal error" report of the dropped connection out of the log. Returns
 * MHD_NO, which the handler (or content reader, after returning its error code) passes on. */
enum MHD_Result http_client_cancelled(http_request *r);

#endif
