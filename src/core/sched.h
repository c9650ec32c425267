/* Scheduler: decides, once per step, which sequences run and how many of their tokens.
 *
 * Owns the waiting and running queues (not the sequences themselves) and moves sequences between
 * them. Both queues are kept in scheduling order: higher priority first, then earlier arrival. A step:
 *   1. running sequences, in order, get their next decode token while the token budget lasts; one that
 *      needs a new block in some group and finds none preempts the last running sequence (lowest
 *      priority, latest arrival), itself included. Then running sequences still prefilling get prompt
 *      chunks from what is left of the budget; a chunk is cut short where a pool runs out (a WINDOW
 *      group takes blocks as the prefill advances), and preempts like a decode token when not even
 *      one token fits;
 *   2. waiting sequences, in order, are admitted while the budget, max_num_seqs and memory allow
 *      (mem_admit: the prefix cache's hit plus what the first uncached token needs in every group);
 *      when one cannot be, a running sequence of strictly lower priority is preempted to make room,
 *      else admission stops (no overtaking within the queue).
 * With whole_spans, a chunk that would end inside a media span ends before it, or, when it starts in the
 * span, takes the rest of it or waits for a step with room (never preempting for the budget).
 * A preempted sequence frees its memory (its computed full blocks stay in the prefix cache), returns to
 * the waiting queue and later recomputes its tokens.
 *
 * Invariant: a running sequence holds, in every group, what the positions it has computed or is about
 * to compute in this step need (mem.h); a waiting one holds nothing. */
#ifndef PITH_CORE_SCHED_H
#define PITH_CORE_SCHED_H

#include <stdbool.h>

#include "core/mem.h"
#include "core/seq.h"

typedef struct sched {
    mem *mem;
    int max_num_seqs;
    int max_batch_tokens;
    bool whole_spans;          /* media spans are computed in one batch (the model's bidirectional_spans):
                                  a chunk never ends inside one (media.h: media_chunk_end) */

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

int sched_init(sched *sc, mem *m, int max_num_seqs, int max_batch_tokens, pith_err *err);
void sched_free(sched *sc);

/* Queues a new sequence (state WAITING, no blocks). -1 when out of memory. */
int sched_add(sched *sc, seq *s);
/* Forks child from parent (mem_fork) and runs it at once: true when there was room (a running place
 * and the memory), false otherwise (nothing changed). The caller runs the queued copies. */
bool sched_fork(sched *sc, seq *parent, seq *child);
/* Takes a sequence out of whichever queue holds it and frees its memory (finish, cancel, error). */
void sched_remove(sched *sc, seq *s);

/* Fills sc->batch for this step. */
void sched_schedule(sched *sc);
/* After the batch's forward pass succeeded: its tokens are computed; full blocks get their names and
 * window blocks out of sight are released. */
void sched_commit(sched *sc);
/* A sequence with a draft (spec.h) is left out of sched_commit: as verification accepts its tokens,
 * this commits n more of them. */
void sched_commit_seq(sched *sc, seq *s, int n);

#endif
