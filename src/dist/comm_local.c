/* A group whose ranks are threads of one process (pith_comm_local_group): tests of tensor parallelism
 * without MPI, under the sanitizers. Each op publishes the rank's pointer in the group's table, meets the
 * others at a barrier, reads what it needs, and meets them again before anyone may reuse its buffer.
 * Sums run over the ranks in rank order on every rank, so every rank gets the same bits. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

/* One direction between two ranks: a send waits for the receive to copy (a rendezvous). */
typedef struct mailbox {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    const void *buf;
    size_t bytes;
    int state;                /* 0 empty, 1 posted by the sender, 2 copied by the receiver */
} mailbox;

typedef struct local_group {
    pthread_barrier_t barrier;
    pthread_mutex_t lock;
    int n, refs;
    int failed;               /* set by abort: every later op fails (a part's abort fails its world) */
    const void **slot;        /* [n]: each rank's published pointer */
    mailbox *mail;            /* [n * n]: mail[src * n + dst] */
    struct local_group *world; /* the group this one is a part of, or itself */
} local_group;

typedef struct local_comm {
    pith_comm c;
    local_group *g;
    float *sum;               /* this rank's scratch for allreduce */
    size_t sum_cap;
} local_comm;

static bool group_failed(const local_group *g) {
    return __atomic_load_n(&g->failed, __ATOMIC_ACQUIRE) || __atomic_load_n(&g->world->failed, __ATOMIC_ACQUIRE);
}

static int meet(local_comm *lc, pith_err *err) {
    pthread_barrier_wait(&lc->g->barrier);
    if (group_failed(lc->g)) return pith_errf(err, "the local group was aborted");
    return 0;
}

/* Waits on m's condition for a while, so an abort elsewhere is seen within 100 ms. */
static void nap(mailbox *m) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&m->cond, &m->lock, &until);
}

static int local_send(pith_comm *c, int dst, const void *buf, size_t bytes, pith_err *err) {
    local_group *g = ((local_comm *)c)->g;
    if (dst < 0 || dst >= c->size || dst == c->rank) return pith_errf(err, "send to rank %d", dst);
    mailbox *m = &g->mail[c->rank * g->n + dst];
    pthread_mutex_lock(&m->lock);
    while (m->state != 0 && !group_failed(g)) nap(m);
    m->buf = buf, m->bytes = bytes, m->state = 1;
    pthread_cond_broadcast(&m->cond);
    while (m->state != 2 && !group_failed(g)) nap(m);
    bool ok = m->state == 2;
    m->state = 0;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return ok ? 0 : pith_errf(err, "the local group was aborted");
}

static int local_recv(pith_comm *c, int src, void *buf, size_t bytes, pith_err *err) {
    local_group *g = ((local_comm *)c)->g;
    if (src < 0 || src >= c->size || src == c->rank) return pith_errf(err, "receive from rank %d", src);
    mailbox *m = &g->mail[src * g->n + c->rank];
    pthread_mutex_lock(&m->lock);
    while (m->state != 1 && !group_failed(g)) nap(m);
    int rc = 0;
    if (m->state != 1) rc = pith_errf(err, "the local group was aborted");
    else if (m->bytes != bytes) rc = pith_errf(err, "rank %d sent %zu bytes, %zu expected", src, m->bytes, bytes);
    else memcpy(buf, m->buf, bytes);
    if (m->state == 1) m->state = 2; /* the sender goes on either way */
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    if (rc) pith_comm_abort(c, 1);
    return rc;
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
    local_group *g = ((local_comm *)c)->g;
    __atomic_store_n(&g->failed, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g->world->failed, 1, __ATOMIC_RELEASE);
}

static void group_free(local_group *g) {
    pthread_barrier_destroy(&g->barrier);
    pthread_mutex_destroy(&g->lock);
    for (int i = 0; g->mail && i < g->n * g->n; i++) {
        pthread_mutex_destroy(&g->mail[i].lock);
        pthread_cond_destroy(&g->mail[i].cond);
    }
    free(g->mail);
    free(g->slot);
    free(g);
}

static local_group *group_new(int n, local_group *world) {
    local_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->slot = calloc((size_t)n, sizeof *g->slot);
    g->mail = calloc((size_t)n * (size_t)n, sizeof *g->mail);
    if (!g->slot || !g->mail) {
        free(g->slot);
        free(g->mail);
        free(g);
        return NULL;
    }
    g->n = g->refs = n;
    g->world = world ? world : g;
    pthread_barrier_init(&g->barrier, NULL, (unsigned)n);
    pthread_mutex_init(&g->lock, NULL);
    for (int i = 0; i < n * n; i++) {
        pthread_mutex_init(&g->mail[i].lock, NULL);
        pthread_cond_init(&g->mail[i].cond, NULL);
    }
    return g;
}

static void local_free(pith_comm *c) {
    local_comm *lc = (local_comm *)c;
    local_group *g = lc->g;
    pthread_mutex_lock(&g->lock);
    int left = --g->refs;
    pthread_mutex_unlock(&g->lock);
    if (left == 0) group_free(g);
    free(lc->sum);
    free(lc);
}

static const pith_comm_vt local_vt;

static local_comm *comm_new(local_group *g, int rank, pith_comm *world) {
    local_comm *lc = calloc(1, sizeof *lc);
    if (!lc) return NULL;
    lc->c = (pith_comm){.vt = &local_vt, .rank = rank, .size = g->n};
    lc->c.world = world ? world : &lc->c;
    pthread_mutex_init(&lc->c.lockstep_lock, NULL);
    lc->g = g;
    return lc;
}

typedef struct split_entry {
    int color, key;
    local_group *made;
} split_entry;

/* Every rank publishes its color and key; the first rank of each color (by key, then rank) makes the
 * part's group and publishes it; each rank then joins its part. */
static int local_split(pith_comm *c, int color, int key, pith_comm **out, pith_err *err) {
    local_comm *lc = (local_comm *)c;
    local_group *g = lc->g;
    *out = NULL;
    split_entry me = {color, key, NULL};
    g->slot[c->rank] = &me;
    if (meet(lc, err)) return -1;
    int members = 0, my_rank = 0, first = -1;
    for (int r = 0; r < c->size; r++) {
        const split_entry *o = g->slot[r];
        if (o->color != color) continue;
        members++;
        if (o->key < key || (o->key == key && r < c->rank)) my_rank++;
        if (first < 0 || o->key < ((const split_entry *)g->slot[first])->key) first = r;
    }
    if (first == c->rank) me.made = group_new(members, g->world);
    if (meet(lc, err)) return -1;
    local_group *part = ((const split_entry *)g->slot[first])->made;
    int rc = meet(lc, err); /* nobody reads a slot after this */
    if (rc) return -1;
    if (!part) return pith_errf(err, "out of memory");
    local_comm *p = comm_new(part, my_rank, c->world);
    if (!p) {
        pith_comm_abort(c, 1);
        return pith_errf(err, "out of memory");
    }
    *out = &p->c;
    return 0;
}

static const pith_comm_vt local_vt = {
    .bcast = local_bcast, .allreduce_sum = local_allreduce_sum, .allreduce_max = local_allreduce_max,
    .gather = local_gather, .send = local_send, .recv = local_recv, .split = local_split, .abort = local_abort,
    .free = local_free,
};

int pith_comm_local_group(int n, pith_comm **out, pith_err *err) {
    if (n < 1 || n > 1024) return pith_errf(err, "a local group of %d ranks (1..1024)", n);
    for (int r = 0; r < n; r++) out[r] = NULL;
    local_group *g = group_new(n, NULL);
    if (!g) return pith_errf(err, "out of memory");
    for (int r = 0; r < n; r++) {
        local_comm *lc = comm_new(g, r, NULL);
        if (!lc) {
            for (int k = 0; k < r; k++) pthread_mutex_destroy(&out[k]->lockstep_lock), free(out[k]), out[k] = NULL;
            group_free(g);
            return pith_errf(err, "out of memory");
        }
        out[r] = &lc->c;
    }
    return 0;
}
