/* The MPI communicator (pith_comm_mpi): the only file that includes mpi.h. Built when CMake finds MPI
 * (Debian: libopenmpi-dev); comm_mpi_absent.c stands in otherwise.
 *
 * Errors: MPI_COMM_WORLD keeps MPI's default handler (errors are fatal), so a rank that dies takes the
 * job down through the launcher (mpirun, srun) rather than leaving the others blocked in a collective;
 * pith_comm_abort is MPI_Abort. Each rank knows where every other runs (pid, host and pid namespace), so
 * the watchdog sees a rank on its own host die before the launcher does. Messages larger than an int's
 * count go in pieces. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"

/* Where a rank runs: its pid, and a hash of its host name and pid namespace (pids mean the same only
 * where both match: two containers may share a host name). */
typedef struct rank_place {
    int64_t pid;
    uint64_t where;
} rank_place;

typedef struct mpi_comm {
    pith_comm c;
    MPI_Comm comm;        /* MPI_COMM_WORLD, or a part of it (pith_comm_split) */
    rank_place *places;   /* the world's: every rank's, from the start */
} mpi_comm;

static MPI_Comm comm_of(const pith_comm *c) { return ((const mpi_comm *)c)->comm; }

#define PIECE ((size_t)1 << 30)

static int fail(int rc, const char *what, pith_err *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return pith_errf(err, "MPI %s: %.*s", what, len, msg);
}

static int mpi_bcast(pith_comm *c, void *buf, size_t bytes, pith_err *err) {
    for (size_t off = 0; off < bytes; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, 0, comm_of(c));
        if (rc != MPI_SUCCESS) return fail(rc, "broadcast", err);
    }
    return 0;
}

/* A nonblocking broadcast polled: spinning for the first 200 us (the next step usually comes that soon),
 * then sleeping between polls, 50 us growing to 1 ms, so an idle rank does not hold a core (MPI's blocking
 * calls spin for as long as they wait). */
static int mpi_bcast_idle(pith_comm *c, void *buf, size_t bytes, pith_err *err) {
    if (bytes > PIECE) return pith_errf(err, "MPI broadcast: an op header of %zu bytes", bytes);
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, comm_of(c), &req);
    if (rc != MPI_SUCCESS) return fail(rc, "broadcast", err);
    if (c->rank == 0) { /* the root sends: nothing to wait for but the send */
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        return rc == MPI_SUCCESS ? 0 : fail(rc, "broadcast", err);
    }
    int64_t t0 = pith_comm_now_ns();
    long nap_us = 50;
    for (;;) {
        int done = 0;
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, "broadcast", err);
        if (done) return 0;
        if (pith_comm_now_ns() - t0 < 200000) continue;
        struct timespec nap = {0, nap_us * 1000};
        nanosleep(&nap, NULL);
        if (nap_us < 1000) nap_us *= 2;
    }
}

static int mpi_allreduce_sum(pith_comm *c, float *x, size_t n, pith_err *err) {
    for (size_t off = 0; off < n; off += PIECE / 4) {
        size_t k = n - off < PIECE / 4 ? n - off : PIECE / 4;
        int rc = MPI_Allreduce(MPI_IN_PLACE, x + off, (int)k, MPI_FLOAT, MPI_SUM, comm_of(c));
        if (rc != MPI_SUCCESS) return fail(rc, "allreduce", err);
    }
    return 0;
}

static int mpi_allreduce_max(pith_comm *c, int *v, pith_err *err) {
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, comm_of(c));
    return rc == MPI_SUCCESS ? 0 : fail(rc, "allreduce", err);
}

static int mpi_gather(pith_comm *c, const void *send, size_t bytes, void *recv, pith_err *err) {
    if (bytes > INT_MAX) return pith_errf(err, "MPI gather: %zu bytes per rank is too many", bytes);
    int rc = MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, comm_of(c));
    return rc == MPI_SUCCESS ? 0 : fail(rc, "gather", err);
}

static int mpi_send(pith_comm *c, int dst, const void *buf, size_t bytes, pith_err *err) {
    for (size_t off = 0; off < bytes || off == 0; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Send((const char *)buf + off, (int)n, MPI_BYTE, dst, 0, comm_of(c));
        if (rc != MPI_SUCCESS) return fail(rc, "send", err);
        if (!bytes) break;
    }
    return 0;
}

static int mpi_recv(pith_comm *c, int src, void *buf, size_t bytes, pith_err *err) {
    for (size_t off = 0; off < bytes || off == 0; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Recv((char *)buf + off, (int)n, MPI_BYTE, src, 0, comm_of(c), MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, "receive", err);
        if (!bytes) break;
    }
    return 0;
}

static const pith_comm_vt mpi_part_vt;

static int mpi_split(pith_comm *c, int color, int key, pith_comm **out, pith_err *err) {
    *out = NULL;
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) {
        pith_comm_abort(c, 1);
        return pith_errf(err, "out of memory");
    }
    int rc = MPI_Comm_split(comm_of(c), color, key, &m->comm);
    if (rc != MPI_SUCCESS) {
        free(m);
        return fail(rc, "split", err);
    }
    m->c.vt = &mpi_part_vt;
    m->c.world = c->world;
    pthread_mutex_init(&m->c.lockstep_lock, NULL);
    MPI_Comm_rank(m->comm, &m->c.rank);
    MPI_Comm_size(m->comm, &m->c.size);
    *out = &m->c;
    return 0;
}

static void mpi_part_free(pith_comm *c) {
    MPI_Comm_free(&((mpi_comm *)c)->comm);
    free(c);
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static rank_place my_place(void) {
    char host[MPI_MAX_PROCESSOR_NAME] = "", ns[128] = "";
    int len = 0;
    MPI_Get_processor_name(host, &len);
    ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    uint64_t h = fnv1a(14695981039346656037ull, host, (size_t)(len > 0 ? len : 0));
    h = fnv1a(h, ns, k > 0 ? (size_t)k : 0);
    return (rank_place){.pid = (int64_t)getpid(), .where = h};
}

/* A process gone from /proc, or a zombie its launcher has not reaped yet. */
static bool process_gone(int64_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); /* the state follows the command name, which may hold spaces */
    return paren && (paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

static int mpi_dead_peer(pith_comm *c, char *why, size_t n) {
    const rank_place *p = ((mpi_comm *)c)->places;
    if (!p) return 0;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank || p[r].where != p[c->rank].where || !process_gone(p[r].pid)) continue;
        snprintf(why, n, "rank %d (pid %lld on this host) died", r, (long long)p[r].pid);
        return 1;
    }
    return 0;
}

static void mpi_abort(pith_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void mpi_free(pith_comm *c) {
    free(((mpi_comm *)c)->places);
    free(c);
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static const pith_comm_vt mpi_vt = {
    .bcast = mpi_bcast, .bcast_idle = mpi_bcast_idle, .allreduce_sum = mpi_allreduce_sum, .allreduce_max = mpi_allreduce_max,
    .gather = mpi_gather, .send = mpi_send, .recv = mpi_recv, .split = mpi_split, .abort = mpi_abort, .free = mpi_free,
    .dead_peer = mpi_dead_peer,
};

/* A part of the world (pith_comm_split): freed without finalizing MPI. */
static const pith_comm_vt mpi_part_vt = {
    .bcast = mpi_bcast, .bcast_idle = mpi_bcast_idle, .allreduce_sum = mpi_allreduce_sum, .allreduce_max = mpi_allreduce_max,
    .gather = mpi_gather, .send = mpi_send, .recv = mpi_recv, .split = mpi_split, .abort = mpi_abort,
    .free = mpi_part_free,
};

bool pith_dist_have_mpi(void) { return true; }

int pith_comm_mpi(int *argc, char ***argv, pith_comm **out, pith_err *err) {
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (inited) return pith_errf(err, "MPI is already initialized in this process");
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return fail(rc, "init", err);
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return pith_errf(err, "this MPI library offers no serialized thread support (the engine's thread "
                              "runs the collectives)");
    }
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) {
        MPI_Finalize();
        return pith_errf(err, "out of memory");
    }
    m->c.vt = &mpi_vt;
    m->comm = MPI_COMM_WORLD;
    m->c.world = &m->c;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->c.size);
    rank_place me = my_place();
    if (!(m->places = calloc((size_t)m->c.size, sizeof *m->places))) {
        free(m);
        MPI_Abort(MPI_COMM_WORLD, 1); /* the others are in the allgather below */
        return pith_errf(err, "out of memory");
    }
    rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, m->places, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(m->places);
        free(m);
        MPI_Finalize();
        return fail(rc, "allgather", err);
    }
    pthread_mutex_init(&m->c.lockstep_lock, NULL);
    *out = &m->c;
    return 0;
}
