/* The communicator's common entry points (pith/dist.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist/comm.h"

int pith_comm_rank(const pith_comm *c) { return c ? c->rank : 0; }
int pith_comm_size(const pith_comm *c) { return c ? c->size : 1; }

static void watchdog_stop(pith_comm *c);

void pith_comm_free(pith_comm *c) {
    if (!c) return;
    watchdog_stop(c);
    pthread_mutex_destroy(&c->lockstep_lock);
    c->vt->free(c);
}

void pith_dist_vocab_share(int n_vocab, int size, int rank, int *v0, int *nv) {
    int per = size > 0 ? (n_vocab + size - 1) / size : n_vocab;
    int start = rank * per;
    if (start > n_vocab) start = n_vocab;
    *v0 = start;
    *nv = n_vocab - start < per ? n_vocab - start : per;
}

void pith_comm_abort_job(pith_comm *c, int code) {
    if (c) c->vt->abort(c, code);
}

void pith_comm_on_failure(pith_comm *c, pith_comm_failure_fn fn, void *user) {
    if (!c) return;
    c->world->on_failure_user = user;
    c->world->on_failure = fn;
}

void pith_comm_fail(pith_comm *c, const char *why) {
    if (!c) return;
    pith_comm *w = c->world;
    if (!atomic_exchange(&w->failing, true)) {
        fprintf(stderr, "pith rank %d of %d: %s: ending the job\n", w->rank, w->size, why);
        fflush(stderr);
        if (w->on_failure) w->on_failure(w->on_failure_user, why);
    }
    pith_comm_abort(w, 1);
}

/* ---- the watchdog ---- */

struct comm_watchdog {
    pthread_t thread;
    pith_comm *c;
    int64_t timeout_ns;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

/* Wakes every 100 ms: a dead rank on this host is found within that, a stopped one within the timeout. */
static void *watchdog_main(void *arg) {
    struct comm_watchdog *w = arg;
    pith_comm *c = w->c;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (w->stop) break;
        char why[256];
        int64_t since = atomic_load_explicit(&c->busy_since_ns, memory_order_relaxed);
        if (since && pith_comm_now_ns() - since > w->timeout_ns)
            snprintf(why, sizeof why, "no answer from the other ranks for %.0f s inside one collective (a rank "
                                      "died or stopped)", 1e-9 * (double)w->timeout_ns);
        else if (!(c->vt->dead_peer && c->vt->dead_peer(c, why, sizeof why)))
            continue;
        w->stop = true;
        pthread_mutex_unlock(&w->lock); /* pith_comm_free may be waiting to stop this thread */
        pith_comm_fail(c, why);
        return NULL;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int pith_comm_watchdog(pith_comm *c, double timeout_s, pith_err *err) {
    if (!c || c->watchdog) return pith_errf(err, "a watchdog needs a communicator without one");
    if (!(timeout_s > 0 && timeout_s < 1e6)) return pith_errf(err, "watchdog timeout %g s out of range", timeout_s);
    struct comm_watchdog *w = calloc(1, sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    w->c = c;
    w->timeout_ns = (int64_t)(timeout_s * 1e9);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->thread, NULL, watchdog_main, w)) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->wake);
        free(w);
        return pith_errf(err, "cannot start the watchdog thread");
    }
    c->watchdog = w;
    return 0;
}

static void watchdog_stop(pith_comm *c) {
    struct comm_watchdog *w = c->watchdog;
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    free(w);
    c->watchdog = NULL;
}
