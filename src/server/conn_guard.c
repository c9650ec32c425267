/* Header and body deadlines for the connections libmicrohttpd serves (see conn_guard.h). */
#include "server/conn_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#ifdef __linux__
#include <linux/tcp.h>
#endif

enum { PHASE_HEADERS, PHASE_BODY, PHASE_BUSY, PHASE_IDLE };

typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    int phase;
    double t_phase;       /* when the phase began (server_now) */
    size_t body_bytes;    /* received in PHASE_BODY */
    uint64_t rx_mark;     /* bytes the kernel had received when the connection went idle */
    bool dropped;
    char peer[48];
} conn_track;

struct conn_guard {
    pthread_mutex_t lock; /* the list and every tracker's fields */
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    conn_track *head;
    /* conn_guard_log's rate limit, one per kind of line */
    pthread_mutex_t log_lock;
    double log_last[CONN_LOG_KINDS];
    unsigned long log_suppressed[CONN_LOG_KINDS];
};

static const char *const kind_names[CONN_LOG_KINDS] = {"libmicrohttpd", "dropped-connection"};

void conn_guard_log(pith_server *srv, int kind, const char *fmt, ...) {
    conn_guard *g = srv->guard;
    if (!log_enabled(&srv->log, PITH_LOG_WARN) || kind < 0 || kind >= CONN_LOG_KINDS) return;
    unsigned long suppressed = 0;
    if (g) {
        pthread_mutex_lock(&g->log_lock);
        double now = server_now();
        bool emit = g->log_last[kind] == 0 || now - g->log_last[kind] >= 1.0;
        if (emit) {
            suppressed = g->log_suppressed[kind];
            g->log_suppressed[kind] = 0;
            g->log_last[kind] = now;
        } else {
            g->log_suppressed[kind]++;
        }
        pthread_mutex_unlock(&g->log_lock);
        if (!emit) return;
    }
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (suppressed)
        server_log(srv, PITH_LOG_WARN, "%s (and %lu more %s line(s) left out before it)", line, suppressed, kind_names[kind]);
    else
        server_log(srv, PITH_LOG_WARN, "%s", line);
}

/* Reports lines left out once a second has passed without one getting through. */
static void log_flush(pith_server *srv) {
    conn_guard *g = srv->guard;
    double now = server_now();
    for (int k = 0; k < CONN_LOG_KINDS; k++) {
        pthread_mutex_lock(&g->log_lock);
        unsigned long n = 0;
        if (g->log_suppressed[k] && now - g->log_last[k] >= 1.0) {
            n = g->log_suppressed[k];
            g->log_suppressed[k] = 0;
            g->log_last[k] = now;
        }
        pthread_mutex_unlock(&g->log_lock);
        if (n) server_log(srv, PITH_LOG_WARN, "http: %lu more %s line(s) left out in the last second", n, kind_names[k]);
    }
}

/* Total bytes the kernel received on the socket; false where unknown. */
static bool rx_bytes(int fd, uint64_t *out) {
#if defined(__linux__) && defined(TCP_INFO)
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return false;
    /* older kernels fill less of the struct: the field must be within what came back */
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return false;
    *out = ti.tcpi_bytes_received;
    return true;
#else
    (void)fd;
    (void)out;
    return false;
#endif
}

static void drop(pith_server *srv, conn_track *t, const char *why) {
    t->dropped = true;
    conn_guard_log(srv, CONN_LOG_DROP, "http: closed the connection from %s: %s", t->peer, why);
    /* shutdown, not close: the connection's thread owns the descriptor and closes it (after telling
     * conn_guard_notify, under the lock held here, so it cannot be a reused one) */
    shutdown(t->fd, SHUT_RDWR);
}

static void check(pith_server *srv, conn_track *t, double now) {
    if (t->dropped) return;
    double since = now - t->t_phase;
    char why[160];
    if (t->phase == PHASE_IDLE) {
        uint64_t rx;
        if (rx_bytes(t->fd, &rx) && rx != t->rx_mark) { /* the next request began to arrive */
            t->phase = PHASE_HEADERS;
            t->t_phase = now;
        }
    } else if (t->phase == PHASE_HEADERS && since > srv->header_timeout_s) {
        snprintf(why, sizeof why, "request headers not complete after %.0f s (--header-timeout)", srv->header_timeout_s);
        drop(srv, t, why);
    } else if (t->phase == PHASE_BODY && srv->min_body_rate > 0 && since > srv->header_timeout_s &&
               (double)t->body_bytes < srv->min_body_rate * since) {
        snprintf(why, sizeof why, "request body at %.0f bytes/s, under --min-body-rate %.0f",
                 (double)t->body_bytes / since, srv->min_body_rate);
        drop(srv, t, why);
    }
}

static void *watchdog(void *arg) {
    pith_server *srv = arg;
    conn_guard *g = srv->guard;
    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        server_cond_wait(&g->wake, &g->lock, 0.25);
        if (g->stop) break;
        double now = server_now();
        for (conn_track *t = g->head; t; t = t->next) check(srv, t, now);
        if (log_enabled(&srv->log, PITH_LOG_WARN)) log_flush(srv);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

int conn_guard_start(pith_server *srv, pith_err *err) {
    conn_guard *g = calloc(1, sizeof *g);
    if (!g) return pith_errf(err, "out of memory");
    pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_init(&g->log_lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    srv->guard = g;
    if (pthread_create(&g->thread, NULL, watchdog, srv)) {
        srv->guard = NULL;
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->log_lock);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return pith_errf(err, "cannot start the connection watchdog thread");
    }
    return 0;
}

void conn_guard_stop(pith_server *srv) {
    conn_guard *g = srv->guard;
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    srv->guard = NULL;
    /* the daemon is stopped by now: every connection reported its close; free any stragglers anyway */
    while (g->head) {
        conn_track *t = g->head;
        g->head = t->next;
        free(t);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->log_lock);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static void peer_name(struct MHD_Connection *conn, char *out, size_t cap) {
    snprintf(out, cap, "?");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof ip);
    else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof ip);
    snprintf(out, cap, "%s", ip);
}

void conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe) {
    pith_server *srv = cls;
    conn_guard *g = srv->guard;
    if (!g) return;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_track *t = ci ? calloc(1, sizeof *t) : NULL;
        if (!t) return; /* untracked: only --timeout applies to it */
        t->fd = ci->connect_fd;
        t->phase = PHASE_HEADERS;
        t->t_phase = server_now();
        peer_name(conn, t->peer, sizeof t->peer);
        pthread_mutex_lock(&g->lock);
        t->next = g->head;
        if (g->head) g->head->prev = t;
        g->head = t;
        pthread_mutex_unlock(&g->lock);
        *socket_context = t;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_track *t = *socket_context;
        if (!t) return;
        *socket_context = NULL;
        pthread_mutex_lock(&g->lock);
        if (t->prev) t->prev->next = t->next;
        else g->head = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&g->lock);
        free(t);
    }
}

conn_track *conn_guard_track(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_phase(pith_server *srv, conn_track *t, int phase) {
    if (!t || !srv->guard) return;
    pthread_mutex_lock(&srv->guard->lock);
    t->phase = phase;
    t->t_phase = server_now();
    t->body_bytes = 0;
    if (phase == PHASE_IDLE && !rx_bytes(t->fd, &t->rx_mark)) t->phase = PHASE_HEADERS; /* no count: idle time counts */
    pthread_mutex_unlock(&srv->guard->lock);
}

void conn_guard_headers_in(pith_server *srv, conn_track *t) { set_phase(srv, t, PHASE_BODY); }
void conn_guard_busy(pith_server *srv, conn_track *t) { set_phase(srv, t, PHASE_BUSY); }
void conn_guard_idle(pith_server *srv, conn_track *t) { set_phase(srv, t, PHASE_IDLE); }

void conn_guard_body_bytes(pith_server *srv, conn_track *t, size_t n) {
    if (!t || !srv->guard) return;
    pthread_mutex_lock(&srv->guard->lock);
    t->body_bytes += n;
    pthread_mutex_unlock(&srv->guard->lock);
}
