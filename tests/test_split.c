/* The row-block splitter (backend/cpu/split.h): every item handed out exactly once, whatever the number
 * of threads, however they interleave, and when some thread never shows up or stalls holding a unit. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "backend/cpu/split.h"
#include "check.h"

#define MAX_ITEMS 5000
#define MAX_THREADS 80

typedef struct run {
    pith_split split;
    int n_items;
    int min_unit, max_unit;
    _Atomic int claimed[MAX_ITEMS];
    _Atomic int bad_unit;     /* claims larger than max_unit, empty or out of range */
    int stall_ith;            /* this thread sleeps after its first claim (-1: none) */
    pthread_barrier_t start;
    int n_started;
} run;

typedef struct worker {
    run *r;
    int ith;
    int claims;
    int contiguous; /* claims that began where this thread's previous claim ended */
    int sizes[4096]; /* of the first claims */
} worker;

static void *work(void *arg) {
    worker *w = arg;
    run *r = w->r;
    pthread_barrier_wait(&r->start);
    int b, e, prev_end = -1;
    while (pith_split_next(&r->split, w->ith, &b, &e)) {
        if (b < 0 || e > r->n_items || e <= b || e - b > r->max_unit) atomic_fetch_add(&r->bad_unit, 1);
        if (w->claims < 4096) w->sizes[w->claims] = e - b;
        for (int i = b; i < e && i >= 0 && i < r->n_items; i++) atomic_fetch_add(&r->claimed[i], 1);
        w->contiguous += b == prev_end;
        prev_end = e;
        if (w->ith == r->stall_ith && w->claims == 0) {
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        w->claims++;
        if ((w->claims & 7) == 0) sched_yield(); /* vary the interleaving */
    }
    return NULL;
}

/* n_threads ranges, of which only n_started threads run (the others never join, as a pool worker may not). */
static void check_run(int n_items, int n_threads, int n_started, int min_unit, int max_unit, int stall_ith,
                      worker *ws) {
    static run r;
    memset(&r, 0, sizeof r);
    r.n_items = n_items;
    r.min_unit = min_unit;
    r.max_unit = max_unit;
    r.stall_ith = stall_ith;
    pith_split_init(&r.split, n_items, n_threads, min_unit, max_unit);
    pthread_barrier_init(&r.start, NULL, (unsigned)n_started);
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < n_started; i++) {
        ws[i] = (worker){.r = &r, .ith = i};
        pthread_create(&tid[i], NULL, work, &ws[i]);
    }
    for (int i = 0; i < n_started; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&r.start);
    int missing = 0, twice = 0;
    for (int i = 0; i < n_items; i++) missing += r.claimed[i] == 0, twice += r.claimed[i] > 1;
    CHECKF(missing == 0 && twice == 0 && r.bad_unit == 0,
           "items %d threads %d started %d units %d-%d: %d never claimed, %d claimed twice, %d bad units",
           n_items, n_threads, n_started, min_unit, max_unit, missing, twice, (int)r.bad_unit);
    int b, e;
    CHECK(!pith_split_next(&r.split, 0, &b, &e)); /* and nothing is left afterwards */
}

int main(void) {
    static worker ws[MAX_THREADS];
    const int items[] = {0, 1, 2, 7, 64, 1000, 4999};
    const int threads[] = {1, 2, 3, 8, 70};
    const int units[][2] = {{1, 1}, {1, 3}, {2, 64}, {64, 64}};
    for (size_t a = 0; a < sizeof items / sizeof *items; a++)
        for (size_t b = 0; b < sizeof threads / sizeof *threads; b++)
            for (size_t c = 0; c < sizeof units / sizeof *units; c++)
                for (int rep = 0; rep < 3; rep++)
                    check_run(items[a], threads[b], threads[b], units[c][0], units[c][1], -1, ws);

    /* Threads that never join: the ones that do take over their ranges. */
    check_run(4000, 8, 1, 2, 4, -1, ws);
    check_run(4000, 8, 3, 2, 4, -1, ws);

    /* A thread that stalls after its first unit (or before it, when the OS is slow to start it): the
     * other finishes all the rest. */
    check_run(2000, 2, 2, 2, 4, 1, ws);
    CHECKF(ws[1].claims <= 1, "the stalled thread made %d claims", ws[1].claims);
    CHECKF(ws[0].claims >= 2000 / 4 - 1, "the running thread made %d claims", ws[0].claims);

    /* Single thread: one contiguous stream of units that shrink from max_unit (a quarter of what is
     * left, capped) to min_unit, only the last one smaller. */
    check_run(1001, 1, 1, 5, 100, -1, ws);
    CHECK(ws[0].contiguous == ws[0].claims - 1);
    CHECK(ws[0].claims > 0 && ws[0].sizes[0] == 100);
    int shrinking = 1, small = 0;
    for (int i = 1; i < ws[0].claims; i++) shrinking &= ws[0].sizes[i] <= ws[0].sizes[i - 1];
    for (int i = 0; i + 1 < ws[0].claims; i++) small += ws[0].sizes[i] < 5;
    CHECK(shrinking && small == 0);
    /* fewer claims than fixed units of min_unit would take, more than of max_unit */
    CHECKF(ws[0].claims > 1001 / 100 && ws[0].claims < 1001 / 5, "%d claims", ws[0].claims);
    return check_summary("test_split");
}
