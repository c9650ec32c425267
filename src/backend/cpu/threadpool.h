/* A persistent pool of worker threads for data-parallel kernels.
 *
 * The pool owns n - 1 worker threads; the thread calling pith_pool_run is the n-th and does its share.
 * A job is a function run once on every thread with (ith, nth); it splits the work itself. Between jobs
 * the workers spin briefly (jobs of one forward pass follow each other within microseconds) and then
 * sleep on a futex, so an idle model costs no CPU. Not reentrant: one pith_pool_run at a time, and a job
 * must not start another. */
#ifndef PITH_CPU_THREADPOOL_H
#define PITH_CPU_THREADPOOL_H

#include "pith/status.h"

typedef struct pith_pool pith_pool;
typedef void (*pith_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means one per online CPU. */
int pith_pool_create(int n_threads, pith_pool **out, pith_err *err);
void pith_pool_destroy(pith_pool *p);
int pith_pool_size(const pith_pool *p);

/* Runs fn(arg, ith, nth) on every thread of the pool (the caller is ith 0) and returns when all are done. */
void pith_pool_run(pith_pool *p, pith_pool_fn fn, void *arg);

/* Inside a job: waits until every thread of the pool has reached the barrier. Everything written
 * before the barrier by any thread is visible after it to all. */
void pith_pool_barrier(pith_pool *p);

#endif
