/* Deadlines libmicrohttpd does not enforce itself: a request's headers must be in within
 * --header-timeout, and its body must then arrive at --min-body-rate bytes/s or more (averaged from
 * the end of the headers, once --header-timeout has passed). Its own --timeout only counts inactivity,
 * so a client sending one byte every few seconds could hold a connection (a thread) for ever, and a
 * few hundred of them every connection slot.
 *
 * A watchdog thread walks the open connections four times a second and shuts down (never closes: the
 * connection's thread owns the descriptor) the socket of one past its deadline; its thread then sees
 * the end of the stream and closes the connection. Nothing can be answered to a client whose headers
 * are not in, so it gets no 408, only the closed connection.
 *
 * Phases of a connection: HEADERS from its start until the access handler first runs, BODY until the
 * body is in, BUSY while the handler answers, IDLE after a request completes on a kept-alive
 * connection. An idle connection is left to --timeout until its next request's first byte arrives
 * (seen in the kernel's count of bytes received, Linux); the header deadline runs from there.
 *
 * Lines about refused or dropped connections go through conn_guard_log: at most one a second of each
 * kind, and the number left out is reported within a second or so, so that a flood of connections
 * cannot flood the log. */
#ifndef PITH_SERVER_CONN_GUARD_H
#define PITH_SERVER_CONN_GUARD_H

#include <stddef.h>

#include <microhttpd.h>

#include "pith/status.h"
#include "server/server_internal.h"

struct conn_track;

/* Starts the watchdog (srv->guard); conn_guard_stop joins it and frees what is left (idempotent). */
int conn_guard_start(pith_server *srv, pith_err *err);
void conn_guard_stop(pith_server *srv);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls = srv). */
void conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe);

/* The connection's tracker, NULL when untracked; the calls below accept NULL. */
struct conn_track *conn_guard_track(struct MHD_Connection *conn);
void conn_guard_headers_in(pith_server *srv, struct conn_track *t);
void conn_guard_body_bytes(pith_server *srv, struct conn_track *t, size_t n);
void conn_guard_busy(pith_server *srv, struct conn_track *t);
void conn_guard_idle(pith_server *srv, struct conn_track *t);

/* A warning line about connections, rate-limited per kind (see above): what libmicrohttpd reports
 * (refusals at the limits, malformed requests) or a connection the watchdog closed. */
enum { CONN_LOG_MHD, CONN_LOG_DROP, CONN_LOG_KINDS };
void conn_guard_log(pith_server *srv, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
