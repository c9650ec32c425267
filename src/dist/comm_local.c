/* A group whose ranks are threads of one process (pith_comm_local_group): tests of tensor parallelism
 * without MPI, under the sanitizers. Each op publishes the rank's pointer in the group's table, meets the
 * others at a barrier, reads what it needs, and meets them again before anyone may reuse its buffer.
 * Sums run over the ranks in rank order on every rank, so every rank gets the same bits. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

typedef struct local_group {
    pthread_barrier_t barrier;
    pthread_mutex_t lock;
    int n, refs;
    int failed;               /* set by abort: every later op fails */
    const void **slot;        /* [n]: each rank's published pointer */
} local_group;

typedef struct local_comm {
    pith_comm c;
    local_group *g;
    float *sum;               /* this rank's scratch for allreduce */
    size_t sum_cap;
} local_comm;

static int meet(local_comm *lc, pith_err *err) {
    pthread_barrier_wait(&lc->g->barrier);
    if (__atomic_load_n(&lc->g->failed, __ATOMIC_ACQUIRE)) return pith_errf(err, "the local group was aborted");
    return 0;
}

static int local_bcast(pith_comm *c, void *buf, size_t bytes, pith_err *err) {
    local_comm *lc = (local_comm *)c;
    lc->g->slot[c->rank] = buf;
    int rc = meet(lc, err);
    if (!rc && c->rank != 0 && bytes) memcpy(buf, lc->g->slot[0], bytes);
    int rc2 = meet(lc, err);
    return rc ? rc : rc2;
}

static int local_allreduce_sum(pith_comm *c, float *x, size_t n, pith_err *err) {
    local_comm *lc = (local_comm *)c;
    if (n > lc->sum_cap) {
        float *p = realloc(lc->sum, n * sizeof *p);
        if (!p) {
            pith_comm_abort(c, 1);
            pthread_barrier_wait(&lc->g->barrier);
            pthread_barrier_wait(&lc->g->barrier);
            return pith_errf(err, "out of memory");
        }
        lc->sum = p, lc->sum_cap = n;
    }
    lc->g->slot[c->rank] = x;
    int rc = meet(lc, err);
    if (!rc) {
        memcpy(lc->sum, lc->g->slot[0], n * sizeof *x);
        for (int r = 1; r < c->size; r++) {
            const float *y = lc->g->slot[r];
            for (size_t i = 0; i < n; i++) lc->sum[i] += y[i];
        }
    }
    int rc2 = meet(lc, err);
    if (!rc && !rc2) memcpy(x, lc->sum, n * sizeof *x);
    return rc ? rc : rc2;
}

static int local_allreduce_max(pith_comm *c, int *v, pith_err *err) {
    local_comm *lc = (local_comm *)c;
    lc->g->slot[c->rank] = v;
    int rc = meet(lc, err), m = *v;
    for (int r = 0; !rc && r < c->size; r++) {
        int y = *(const int *)lc->g->slot[r];
        if (y > m) m = y;
    }
    int rc2 = meet(lc, err);
    if (!rc && !rc2) *v = m;
    return rc ? rc : rc2;
}

static int local_gather(pith_comm *c, const void *send, size_t bytes, void *recv, pith_err *err) {
    local_comm *lc = (local_comm *)c;
    lc->g->slot[c->rank] = send;
    int rc = meet(lc, err);
    if (!rc && c->rank == 0)
        for (int r = 0; r < c->size; r++) memcpy((char *)recv + (size_t)r * bytes, lc->g->slot[r], bytes);
    int rc2 = meet(lc, err);
    return rc ? rc : rc2;
}

static void local_abort(pith_comm *c, int code) {
    (void)code;
    __atomic_store_n(&((local_comm *)c)->g->failed, 1, __ATOMIC_RELEASE);
}

static void local_free(pith_comm *c) {
    local_comm *lc = (local_comm *)c;
    local_group *g = lc->g;
    pthread_mutex_lock(&g->lock);
    int left = --g->refs;
    pthread_mutex_unlock(&g->lock);
    if (left == 0) {
        pthread_barrier_destroy(&g->barrier);
        pthread_mutex_destroy(&g->lock);
        free(g->slot);
        free(g);
    }
    free(lc->sum);
    free(lc);
}

static const pith_comm_vt local_vt = {
    .bcast = local_bcast, .allreduce_sum = local_allreduce_sum, .allreduce_max = local_allreduce_max,
    .gather = local_gather, .abort = local_abort, .free = local_free,
};

int pith_comm_local_group(int n, pith_comm **out, pith_err *err) {
    if (n < 1 || n > 1024) return pith_errf(err, "a local group of %d ranks (1..1024)", n);
    for (int r = 0; r < n; r++) out[r] = NULL;
    local_group *g = calloc(1, sizeof *g);
    if (!g || !(g->slot = calloc((size_t)n, sizeof *g->slot))) {
        if (g) free(g);
        return pith_errf(err, "out of memory");
    }
    g->n = n;
    pthread_barrier_init(&g->barrier, NULL, (unsigned)n);
    pthread_mutex_init(&g->lock, NULL);
    for (int r = 0; r < n; r++) {
        local_comm *lc = calloc(1, sizeof *lc);
        if (!lc) {
            for (int k = 0; k < r; k++) free(out[k]), out[k] = NULL;
            pthread_barrier_destroy(&g->barrier);
            pthread_mutex_destroy(&g->lock);
            free(g->slot);
            free(g);
            return pith_errf(err, "out of memory");
        }
        lc->c = (pith_comm){.vt = &local_vt, .rank = r, .size = n};
        lc->g = g;
        out[r] = &lc->c;
    }
    g->refs = n;
    return 0;
}
