/* The MPI communicator (pith_comm_mpi): the only file that includes mpi.h. Built when CMake finds MPI
 * (Debian: libopenmpi-dev); comm_mpi_absent.c stands in otherwise.
 *
 * Errors: MPI_COMM_WORLD keeps MPI's default handler (errors are fatal), so a rank that dies takes the
 * job down through the launcher (mpirun, srun) rather than leaving the others blocked in a collective;
 * pith_comm_abort is MPI_Abort. Messages larger than an int's count go in pieces. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "dist/comm.h"

typedef struct mpi_comm {
    pith_comm c;
    MPI_Comm comm;   /* MPI_COMM_WORLD, or a part of it (pith_comm_split) */
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
    MPI_Comm_rank(m->comm, &m->c.rank);
    MPI_Comm_size(m->comm, &m->c.size);
    *out = &m->c;
    return 0;
}

static void mpi_part_free(pith_comm *c) {
    MPI_Comm_free(&((mpi_comm *)c)->comm);
    free(c);
}

static void mpi_abort(pith_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void mpi_free(pith_comm *c) {
    free(c);
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static const pith_comm_vt mpi_vt = {
    .bcast = mpi_bcast, .bcast_idle = mpi_bcast_idle, .allreduce_sum = mpi_allreduce_sum, .allreduce_max = mpi_allreduce_max,
    .gather = mpi_gather, .send = mpi_send, .recv = mpi_recv, .split = mpi_split, .abort = mpi_abort, .free = mpi_free,
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
    *out = &m->c;
    return 0;
}
