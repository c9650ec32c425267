#include "backend/cpu/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
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
 * (so workers stay awake through a forward), much shorter than a scheduler time slice. */
#define SPIN_NS 100000

/* The job word: generation in the high 16 bits, a closed flag, and the number of workers that joined.
 * Generations wrap; a worker that slept through exactly 65536 jobs and finds the current one open may
 * join it, which is correct since it is the current one. */
#define GEN_SHIFT 16
#define CLOSED 0x8000u
#define COUNT_MASK 0x7fffu

struct pith_pool {
    int n;
    pthread_t *threads;
    pith_pool_fn fn;           /* written before the job word publishes a generation */
    void *arg;
    _Atomic uint32_t job;
    _Atomic uint32_t done;     /* workers that finished the current job */
    _Atomic uint32_t stop;
    _Atomic int job_sleepers;  /* threads asleep (or about to sleep) on each word */
    _Atomic int done_sleepers;
};

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

/* Returns the first value of *word that satisfies done(value, ref). The sleeper count and the word are
 * both seq_cst, so a notifier that changes the word and then sees no sleeper is ordered before the
 * sleeper's re-check, which then sees the change (no lost wake-up). */
static uint32_t wait_word(_Atomic uint32_t *word, uint32_t ref, int (*done)(uint32_t v, uint32_t ref),
                          _Atomic int *sleepers) {
    uint64_t start = 0;
    uint32_t v;
    for (unsigned i = 0;; i++) {
        if (done(v = atomic_load(word), ref)) return v;
        cpu_relax();
        if ((i & 255) == 255) {
            uint64_t t = now_ns();
            if (!start) start = t;
            else if (t - start > SPIN_NS) break;
        }
    }
    atomic_fetch_add(sleepers, 1);
    while (!done(v = atomic_load(word), ref)) futex_wait(word, v);
    atomic_fetch_sub(sleepers, 1);
    return v;
}

static void notify_word(_Atomic uint32_t *word, _Atomic int *sleepers) {
    if (atomic_load(sleepers) > 0) futex_wake_all(word);
}

static int gen_changed(uint32_t v, uint32_t seen_gen) { return (v >> GEN_SHIFT) != seen_gen; }
static int reached(uint32_t v, uint32_t target) { return v == target; }

static void *worker_main(void *p_) {
    pith_pool *p = p_;
    uint32_t seen = 0;
    for (;;) {
        uint32_t w = wait_word(&p->job, seen, gen_changed, &p->job_sleepers);
        if (atomic_load(&p->stop)) break;
        seen = w >> GEN_SHIFT;
        /* join only the job of that generation, and only while it is open */
        while (!(w & CLOSED) && (w >> GEN_SHIFT) == seen &&
               !atomic_compare_exchange_weak(&p->job, &w, w + 1)) {
        }
        if ((w & CLOSED) || (w >> GEN_SHIFT) != seen) continue;
        int ith = (int)(w & COUNT_MASK) + 1;
        p->fn(p->arg, ith, p->n);
        atomic_fetch_add(&p->done, 1);
        notify_word(&p->done, &p->done_sleepers);
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
        int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
        if (rc) {
            p->n = i; /* shut down the workers started so far */
            pith_pool_destroy(p);
            return pith_errf(err, "cannot start worker thread %d of %d (%s)", i, n_threads, strerror(rc));
        }
    }
    *out = p;
    return 0;
}

void pith_pool_destroy(pith_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    /* a new, closed generation wakes every worker without letting any join */
    uint32_t gen = (atomic_load(&p->job) >> GEN_SHIFT) + 1;
    atomic_store(&p->job, (gen << GEN_SHIFT) | CLOSED);
    futex_wake_all(&p->job);
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
    atomic_store(&p->done, 0);
    uint32_t gen = ((atomic_load(&p->job) >> GEN_SHIFT) + 1) & 0xffffu;
    atomic_store(&p->job, gen << GEN_SHIFT);
    notify_word(&p->job, &p->job_sleepers);
    fn(arg, 0, p->n);
    uint32_t joined = atomic_fetch_or(&p->job, CLOSED) & COUNT_MASK;
    if (joined) wait_word(&p->done, joined, reached, &p->done_sleepers);
}

void pith_pool_run_sized(pith_pool *p, pith_pool_fn fn, void *arg, double work) {
    if (work < PITH_POOL_MIN_WORK) fn(arg, 0, 1);
    else pith_pool_run(p, fn, arg);
}

void pith_pool_wait_count(_Atomic int *counter, int target) {
    for (unsigned i = 0; atomic_load(counter) < target; i++) {
        cpu_relax();
        if ((i & 1023) == 1023) sched_yield();
    }
}
