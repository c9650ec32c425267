/* A persistent pool of worker threads for data-parallel kernels.
 *
 * The pool owns n - 1 worker threads; the thread calling pith_pool_run is the n-th. A job is a function
 * that every participating thread runs once with its own ith (0 for the caller, distinct and < nth for
 * the others). Participation is optional: a worker joins a job only while the caller is still inside
 * its own call of fn, and the caller then waits only for the workers that joined. So a job must claim
 * its work dynamically (atomic counters) and be complete once any set of participants, the caller among
 * them, has returned. The point: on a shared, oversubscribed machine a descheduled worker never stalls
 * the caller; at worst the caller does all the work itself.
 *
 * Between jobs the workers spin briefly (jobs of one forward pass follow each other within
 * microseconds) and then sleep on a futex, so an idle model costs no CPU. Not reentrant: one
 * pith_pool_run at a time, and a job must not start another. */
#ifndef PITH_CPU_THREADPOOL_H
#define PITH_CPU_THREADPOOL_H

#include <stdatomic.h>

#include "pith/status.h"

typedef struct pith_pool pith_pool;
typedef void (*pith_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means one per online CPU. */
int pith_pool_create(int n_threads, pith_pool **out, pith_err *err);
void pith_pool_destroy(pith_pool *p);
int pith_pool_size(const pith_pool *p);

/* Runs fn as described above and returns when every participant has returned. */
void pith_pool_run(pith_pool *p, pith_pool_fn fn, void *arg);

/* Waking a worker and sharing cache lines with it costs a few microseconds: jobs with less work than
 * this (in multiply-adds or element operations) run on the caller alone. */
#define PITH_POOL_MIN_WORK 65536

/* pith_pool_run, or fn(arg, 0, 1) on the caller when work < PITH_POOL_MIN_WORK. */
void pith_pool_run_sized(pith_pool *p, pith_pool_fn fn, void *arg, double work);

/* For jobs with phases: spins (then yields) until *counter reaches target, i.e. until every claimed
 * piece of the previous phase is finished. */
void pith_pool_wait_count(_Atomic int *counter, int target);

#endif
