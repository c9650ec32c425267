#include "backend/cpu/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* Spin about this long before sleeping: longer than the gap between two jobs of one forward pass
 * (so workers never sleep mid-forward), much shorter than a scheduler time slice. */
#define SPIN_NS 100000

struct pith_pool {
    int n;
    pthread_t *threads;
    pith_pool_fn fn;
    void *arg;
    _Atomic uint32_t gen;      /* bumped once per job (and on shutdown); workers wait for it to change */
    _Atomic uint32_t pending;  /* workers that have not finished the current job */
    _Atomic uint32_t stop;
    _Atomic uint32_t bar_count;
    _Atomic uint32_t bar_gen;
    /* Threads asleep (or about to sleep) on each word: a notifier only makes a syscall when one is. */
    _Atomic int gen_sleepers;
    _Atomic int pending_sleepers;
    _Atomic int bar_sleepers;
};

typedef struct worker_start {
    pith_pool *pool;
    int ith;
} worker_start;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
    (void)word, (void)expected;
    sched_yield();
#endif
}

static void futex_wake_all(_Atomic uint32_t *word) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Returns once *word != old (want_zero == 0) or once *word == 0 (want_zero != 0). The sleeper count and
 * the word are both seq_cst, so a notifier that changes the word and then sees no sleeper is ordered
 * before the sleeper's re-check, which then sees the change (no lost wake-up). */
static void wait_word(_Atomic uint32_t *word, uint32_t old, int want_zero, _Atomic int *sleepers) {
#define DONE(v) (want_zero ? (v) == 0 : (v) != old)
    uint64_t start = 0;
    for (unsigned i = 0;; i++) {
        if (DONE(atomic_load(word))) return;
        cpu_relax();
        if ((i & 255) == 255) {
            uint64_t t = now_ns();
            if (!start) start = t;
            else if (t - start > SPIN_NS) break;
        }
    }
    atomic_fetch_add(sleepers, 1);
    for (;;) {
        uint32_t v = atomic_load(word);
        if (DONE(v)) break;
        futex_wait(word, v);
    }
    atomic_fetch_sub(sleepers, 1);
#undef DONE
}

static void notify_word(_Atomic uint32_t *word, _Atomic int *sleepers) {
    if (atomic_load(sleepers) > 0) futex_wake_all(word);
}

static void *worker_main(void *p_) {
    worker_start *ws = p_;
    pith_pool *p = ws->pool;
    int ith = ws->ith;
    free(ws);
    uint32_t seen = 0;
    for (;;) {
        wait_word(&p->gen, seen, 0, &p->gen_sleepers);
        seen = atomic_load(&p->gen);
        if (atomic_load(&p->stop)) break;
        p->fn(p->arg, ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1) notify_word(&p->pending, &p->pending_sleepers);
    }
    return NULL;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

int pith_pool_create(int n_threads, pith_pool **out, pith_err *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = online_cpus();
    if (n_threads > 1024) return pith_errf(err, "too many threads (%d, at most 1024)", n_threads);
    pith_pool *p = calloc(1, sizeof *p);
    if (!p) return pith_errf(err, "out of memory creating a thread pool");
    p->n = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return pith_errf(err, "out of memory creating a thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_start *ws = malloc(sizeof *ws);
        int rc = ws ? 0 : -1;
        if (ws) {
            ws->pool = p;
            ws->ith = i;
            rc = pthread_create(&p->threads[i], NULL, worker_main, ws);
            if (rc) free(ws);
        }
        if (rc) {
            p->n = i; /* shut down the workers started so far */
            pith_pool_destroy(p);
            return pith_errf(err, "cannot start worker thread %d of %d (%s)", i, n_threads,
                             rc > 0 ? strerror(rc) : "out of memory");
        }
    }
    *out = p;
    return 0;
}

void pith_pool_destroy(pith_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake_all(&p->gen);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

int pith_pool_size(const pith_pool *p) { return p->n; }

void pith_pool_run(pith_pool *p, pith_pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, (uint32_t)(p->n - 1));
    atomic_fetch_add(&p->gen, 1);
    notify_word(&p->gen, &p->gen_sleepers);
    fn(arg, 0, p->n);
    wait_word(&p->pending, 0, 1, &p->pending_sleepers);
}

void pith_pool_barrier(pith_pool *p) {
    if (p->n == 1) return;
    uint32_t g = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)p->n - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_fetch_add(&p->bar_gen, 1);
        notify_word(&p->bar_gen, &p->bar_sleepers);
    } else {
        wait_word(&p->bar_gen, g, 0, &p->bar_sleepers);
    }
}
