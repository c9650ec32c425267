/* Distributed inference: a model split over ranks that run in lockstep (docs/distributed.md).
 *
 * A communicator (pith_comm) joins the ranks of one job: the processes `mpirun -np N` started (MPI, where
 * the build found it), or N threads of one process (a local group: tests, and a build without MPI).
 *
 * Tensor parallelism (pith_model_options.comm and .tp): every rank loads its shard of the model (its
 * attention heads and their KV, its columns of the FFN, its rows of the vocabulary), and the ranks run
 * each op of the forward pass together, summing the partial products of the attention output and FFN
 * down projections across ranks (an allreduce). Rank 0 owns the engine: pith_model_load there returns a
 * model that, for each op the engine calls (prepare, mem_alloc, copy_blocks, forward ...), first hands the
 * op and its data to the other ranks, then runs its own shard, gathers the logits rows of every rank and
 * agrees with them on the outcome. On the other ranks pith_model_load returns the shard, and the caller
 * runs pith_dist_worker with it until rank 0 frees its model (and any it reloaded since).
 *
 * Invariants: every rank of a communicator calls the same collective operations in the same order
 * (rank 0's model is the only caller on rank 0, the worker loop the only one elsewhere); an op fails on
 * every rank or on none (the ranks agree on each op's status before returning). */
#ifndef PITH_DIST_H
#define PITH_DIST_H

#include <stdint.h>

#include "pith/api.h"
#include "pith/model.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_comm pith_comm;

/* True when the library was built with MPI (pith_comm_mpi works). */
PITH_API bool pith_dist_have_mpi(void);
/* Joins the MPI job this process was started in (MPI_Init_thread, serialized: any one thread at a time
 * may run collective ops, the engine's thread included). Once per process; pith_comm_free finalizes. An
 * error when built without MPI. */
PITH_API int pith_comm_mpi(int *argc, char ***argv, pith_comm **out, pith_err *err);
/* n communicators of one group whose ranks are threads of this process: out[r] is rank r's, to be used
 * by one thread each; free each (the group goes with the last). */
PITH_API int pith_comm_local_group(int n, pith_comm **out, pith_err *err);
PITH_API int pith_comm_rank(const pith_comm *c);
PITH_API int pith_comm_size(const pith_comm *c);
PITH_API void pith_comm_free(pith_comm *c);
/* A thread that ends the job (pith_comm_fail) when this rank has been inside one collective for longer
 * than timeout_s (another rank stopped answering, or died without the launcher noticing), or, every
 * 100 ms, when a rank on this host (the same host name and process namespace) is gone or a zombie: a
 * rank that died, found before the launcher's SIGTERM and SIGKILL reach this one. A worker waiting for
 * rank 0's next op is idle, not inside a collective, however long it waits. Stopped by pith_comm_free. */
PITH_API int pith_comm_watchdog(pith_comm *c, double timeout_s, pith_err *err);
/* What runs when the job fails (pith_comm_fail), on the thread that found it, before the job ends: rank
 * 0's server answers its requests in flight with an error there (the engine's thread may be blocked in
 * a collective that will never end). It should return within about a second: a launcher that noticed a
 * rank die sends the others SIGTERM, then SIGKILL a second later (Open MPI's odls_base_sigkill_timeout).
 * Set before the watchdog may fire; one per job, on its world communicator. */
typedef void (*pith_comm_failure_fn)(void *user, const char *why);
PITH_API void pith_comm_on_failure(pith_comm *c, pith_comm_failure_fn fn, void *user);
/* The job cannot go on, because of why: says so on stderr, runs the failure hook (once, whichever thread
 * comes first; a second caller only ends the job), then ends it (pith_comm_abort_job). */
PITH_API void pith_comm_fail(pith_comm *c, const char *why);
/* Ends the job on every rank at once (MPI_Abort; a local group: every later op fails), for a rank that
 * fails where the others may be waiting for it. */
PITH_API void pith_comm_abort_job(pith_comm *c, int code);

/* Rank r's share of n_vocab logits columns under tensor parallelism over `size` ranks: [*v0, *v0 + *nv). */
PITH_API void pith_dist_vocab_share(int n_vocab, int size, int rank, int *v0, int *nv);

/* What a rank's collectives cost so far: how many, the bytes they carried (a gather: what rank 0
 * receives) and the wall time spent in them, waiting for the other ranks included. */
typedef struct pith_dist_stats {
    uint64_t collectives;
    uint64_t bytes;
    double seconds;
    uint64_t forwards, micro_batches; /* forward steps, and the micro-batches they ran in (pipeline stages) */
} pith_dist_stats;
/* Rank 0's, for a model pith_model_load returned there under tensor parallelism; false for another model. */
PITH_API bool pith_dist_get_stats(const pith_model *m, pith_dist_stats *out);

/* The links between the ranks, measured now on all of them (rank 0's model, between steps): the time of
 * one allreduce of 4 bytes (latency) and the rate of allreduces of 1 MiB of floats (payload bytes per
 * second). */
typedef struct pith_dist_probe {
    double latency_s;
    double allreduce_bytes_per_s;
} pith_dist_probe;
PITH_API int pith_dist_probe_links(pith_model *m, pith_dist_probe *out, pith_err *err);

/* A rank other than 0: runs the ops rank 0's models send, first to `shard` (pith_model_load's model
 * there, which it takes over), then also to each model rank 0 reloads (pith_dist_reload), loading its
 * shard with rank 0; it frees each when rank 0 frees its own, and returns when rank 0 has freed them all.
 * 0 then; -1 (err set) when the job cannot go on (the shard failed an op in a way the ranks cannot agree
 * on, or the communicator failed). */
PITH_API int pith_dist_worker(pith_model *shard, pith_comm *c, pith_err *err);
/* Rank 0: loads the model at path (mo: its options; the job's communicator and layout are m's) on every
 * rank, each its shard, beside m, which runs on (an op of m in flight finishes first; m's ops wait while
 * this loads). The ranks agree on the outcome: *out, a model of the same job, or -1 with err (the
 * others then failed too, and m runs on). The other ranks load with rank 0's threads. For a weight
 * reload: the engine swaps to *out (pith_engine_swap_model), then the caller frees m. */
PITH_API int pith_dist_reload(pith_model *m, const char *path, const pith_model_options *mo, pith_model **out,
                              pith_err *err);
/* Rank 0: frees m's weights on every rank (a server's sleep; the engine no longer uses m) and keeps m as
 * the job's handle for pith_dist_reload only (wake), to be freed after. No op may run on m after this. */
PITH_API int pith_dist_release(pith_model *m, pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
