/* Scheduler: decides, once per step, which sequences run and how many of their tokens.
 *
 * Owns the waiting and running queues (not the sequences themselves) and moves sequences between
 * them. Both queues are kept in scheduling order: higher priority first, then earlier arrival. A step:
 *   1. running sequences, in order, get their next decode token while the token budget lasts; one that
 *      needs a new block and finds none preempts the last running sequence (lowest priority, latest
 *      arrival), itself included. Then running sequences still prefilling get prompt chunks from what
 *      is left of the budget (their blocks were reserved at admission);
 *   2. waiting sequences, in order, are admitted while the budget, max_num_seqs and memory allow. A
 *      sequence is admitted only when blocks for all its current tokens can be reserved (after taking
 *      what the prefix cache holds); when it cannot be, a running sequence of strictly lower priority
 *      is preempted to make room, else admission stops (no overtaking within the queue).
 * A preempted sequence frees its blocks (its computed full blocks stay in the prefix cache), returns to
 * the waiting queue and later recomputes its tokens.
 *
 * Invariant: a running sequence holds blocks for all positions it has computed or is about to compute
 * in this step; a waiting one holds none. */
#ifndef PITH_CORE_SCHED_H
#define PITH_CORE_SCHED_H

#include <stdbool.h>

#include "core/kv_pool.h"
#include "core/seq.h"

typedef struct sched {
    kv_pool *pool;
    bool prefix_cache;
    int max_num_seqs;
    int max_batch_tokens;

    seq **waiting;
    int n_waiting;
    int cap_waiting;
    seq **running;             /* [max_num_seqs] */
    int n_running;
    seq **batch;               /* [max_num_seqs]: scheduled this step, n_sched set */
    int n_batch;
    int n_batch_tokens;

    uint64_t step;
    uint64_t preemptions;
    uint64_t cache_queries;    /* tokens looked up at admission */
    uint64_t cache_hits;       /* of those, found in the cache */
} sched;

int sched_init(sched *sc, kv_pool *pool, int max_num_seqs, int max_batch_tokens, bool prefix_cache, pith_err *err);
void sched_free(sched *sc);

/* Queues a new sequence (state WAITING, no blocks). -1 when out of memory. */
int sched_add(sched *sc, seq *s);
/* Takes a sequence out of whichever queue holds it and frees its blocks (finish, cancel, error). */
void sched_remove(sched *sc, seq *s);

/* Fills sc->batch for this step. */
void sched_schedule(sched *sc);
/* After the batch's forward pass succeeded: its tokens are computed; full blocks get their names. */
void sched_commit(sched *sc);

#endif
