/* The communicator behind pith/dist.h: the few collective operations lockstep inference needs, over
 * MPI (comm_mpi.c, the only file that includes mpi.h) or threads of one process (comm_local.c).
 *
 * Every op is collective: each rank of the group calls it, in the same order, with the same sizes; rank 0
 * is the root of bcast and gather. Results are bit-identical on every rank (allreduce sums in one fixed
 * order for a given group), which keeps the ranks' replicated state (the residual stream) equal. An op
 * that fails returns -1 with err set; the group cannot be used after that (pith_comm_abort ends it). */
#ifndef PITH_DIST_COMM_H
#define PITH_DIST_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "pith/dist.h"

typedef struct pith_comm_vt {
    int (*bcast)(pith_comm *c, void *buf, size_t bytes, pith_err *err);
    /* the same, for a wait that may last (a worker waiting for rank 0's next op): it may sleep between
     * polls instead of spinning, so idle ranks leave the cores to others; NULL: bcast */
    int (*bcast_idle)(pith_comm *c, void *buf, size_t bytes, pith_err *err);
    int (*allreduce_sum)(pith_comm *c, float *x, size_t n, pith_err *err);
    int (*allreduce_max)(pith_comm *c, int *v, pith_err *err);
    /* rank 0's recv gets every rank's `bytes` in rank order ([size * bytes]); elsewhere recv is unused */
    int (*gather)(pith_comm *c, const void *send, size_t bytes, void *recv, pith_err *err);
    /* point to point (pipeline stages): send returns once dst may have the bytes (it may wait for dst's
     * recv); recv waits for src's send of exactly that many bytes */
    int (*send)(pith_comm *c, int dst, const void *buf, size_t bytes, pith_err *err);
    int (*recv)(pith_comm *c, int src, void *buf, size_t bytes, pith_err *err);
    /* collective: the ranks that give the same color form a communicator of their own, ranked by key */
    int (*split)(pith_comm *c, int color, int key, pith_comm **out, pith_err *err);
    void (*abort)(pith_comm *c, int code);
    /* a rank of this job on this host that is gone (its description in why), or 0; NULL: none can be seen */
    int (*dead_peer)(pith_comm *c, char *why, size_t n);
    void (*free)(pith_comm *c);
} pith_comm_vt;

struct pith_comm {
    const pith_comm_vt *vt;
    int rank, size;
    pith_comm *world;       /* the communicator this one is a part of (pith_comm_split), or itself: its
                               stats and busy mark cover every collective of the rank */
    pith_dist_stats stats;  /* the world's: this rank's collectives so far (pith_dist_get_stats) */
    /* When the collective this rank is in began (CLOCK_MONOTONIC ns), 0 outside one and while a worker
     * waits for rank 0's next op (idle, however long): what the watchdog (pith_comm_watchdog) reads. */
    _Atomic int64_t busy_since_ns;
    struct comm_watchdog *watchdog;
    /* the world's, on rank 0: one model op at a time across the models loaded on this job (the engine's
     * thread runs ops, an admin thread a reload: lockstep.c); and how many models the job has loaded
     * (each rank counts alike: a model's ops carry its number) */
    pthread_mutex_t lockstep_lock;
    int lockstep_models;
    /* the world's: pith_comm_on_failure's hook, and whether pith_comm_fail ran */
    pith_comm_failure_fn on_failure;
    void *on_failure_user;
    atomic_bool failing;
};

static inline int64_t pith_comm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static inline double pith_comm_now(void) { return 1e-9 * (double)pith_comm_now_ns(); }

static inline int64_t pith_comm_enter(pith_comm *c) {
    int64_t t0 = pith_comm_now_ns();
    atomic_store_explicit(&c->world->busy_since_ns, t0, memory_order_relaxed);
    return t0;
}

/* Each op counts itself: one collective, its payload's bytes (a gather: what the root receives), and the
 * wall time inside it, waiting for the others included (the price of lockstep). */
static inline int pith_comm_counted(pith_comm *c, int64_t t0, size_t bytes, int rc) {
    pith_comm *w = c->world;
    atomic_store_explicit(&w->busy_since_ns, 0, memory_order_relaxed);
    w->stats.collectives++;
    w->stats.bytes += bytes;
    w->stats.seconds += 1e-9 * (double)(pith_comm_now_ns() - t0);
    return rc;
}
static inline int pith_comm_bcast(pith_comm *c, void *buf, size_t bytes, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, bytes, c->vt->bcast(c, buf, bytes, err));
}
/* The broadcast of each op's header, which every rank calls as this one (an MPI nonblocking collective
 * matches only its kind): on a worker, waiting for rank 0's next op, idle for the watchdog and the stats
 * however long it takes; on rank 0 counted as any collective. */
static inline int pith_comm_bcast_op(pith_comm *c, void *buf, size_t bytes, pith_err *err) {
    int (*op)(pith_comm *, void *, size_t, pith_err *) = c->vt->bcast_idle ? c->vt->bcast_idle : c->vt->bcast;
    if (c->rank != 0) return op(c, buf, bytes, err);
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, bytes, op(c, buf, bytes, err));
}
static inline int pith_comm_allreduce_sum(pith_comm *c, float *x, size_t n, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, n * sizeof *x, c->vt->allreduce_sum(c, x, n, err));
}
static inline int pith_comm_allreduce_max(pith_comm *c, int *v, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, sizeof *v, c->vt->allreduce_max(c, v, err));
}
static inline int pith_comm_gather(pith_comm *c, const void *send, size_t bytes, void *recv, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, bytes * (size_t)c->size, c->vt->gather(c, send, bytes, recv, err));
}
static inline int pith_comm_send(pith_comm *c, int dst, const void *buf, size_t bytes, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, bytes, c->vt->send(c, dst, buf, bytes, err));
}
static inline int pith_comm_recv(pith_comm *c, int src, void *buf, size_t bytes, pith_err *err) {
    int64_t t0 = pith_comm_enter(c);
    return pith_comm_counted(c, t0, bytes, c->vt->recv(c, src, buf, bytes, err));
}
/* The part of c of the ranks with this color (collective over c); freed with pith_comm_free, before
 * its world. Its collectives count in the world's stats and busy mark, so the world's watchdog watches
 * them too. */
static inline int pith_comm_split(pith_comm *c, int color, int key, pith_comm **out, pith_err *err) {
    return c->vt->split(c, color, key, out, err);
}
/* Ends the whole job (MPI_Abort) or, for a local group, marks it failed so every later op fails. */
static inline void pith_comm_abort(pith_comm *c, int code) { c->vt->abort(c, code); }

#endif
