/* Machine probes: run one probe loop on every thread at once and time it.
 *
 * Threads are created per probe (a probe is rare and lasts tenths of a second) and released together by
 * a barrier before each repetition; a repetition lasts from the earliest start to the latest end, so a
 * thread that was descheduled makes the whole measurement slower, as it would make a matmul slower. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "bench/probe_kernels.h"
#include "pith/bench.h"

#define ALIGN 64
#define MIN_BW_BYTES ((size_t)1 << 20)
/* Compute probes aim for this long per repetition: long enough to dwarf timer and barrier costs and a
 * frequency ramp, short enough that five repetitions take well under a second. */
#define TARGET_SECONDS 0.05

struct pith_probe {
    int n_threads;
    const pith_cpu_kernels *kt; /* the kernel table a model loaded with the same force_scalar runs */
    const pith_probe_kernels *k;
    uint8_t *buf;
    size_t bw_bytes;
};

double pith_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double pith_bench_cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef enum probe_kind { PROBE_READ, PROBE_COMPUTE } probe_kind;

typedef struct probe_job {
    const pith_probe *p;
    probe_kind kind;
    const pith_probe_loop *loop; /* PROBE_COMPUTE: the loop */
    int reps;
    int64_t iters;
    _Atomic int gate; /* 0: wait, 1: go, -1: give up (not every thread could be started) */
    pthread_barrier_t barrier;
    double *t_start;  /* [reps * n_threads] */
    double *t_end;
} probe_job;

typedef struct probe_thread {
    probe_job *job;
    int ith;
    pthread_t tid;
    /* Padded so threads storing their results never share a cache line. */
    union {
        volatile uint64_t sink;
        char pad[ALIGN];
    } out;
} probe_thread;

static void run_once(const probe_job *j, probe_thread *t) {
    const pith_probe *p = j->p;
    switch (j->kind) {
    case PROBE_READ: {
        size_t share = p->bw_bytes / (size_t)p->n_threads;
        t->out.sink += p->k->read_sum(p->buf + (size_t)t->ith * share, share);
        break;
    }
    case PROBE_COMPUTE:
        t->out.sink += j->loop->loop(j->iters);
        break;
    }
}

static void *thread_main(void *arg) {
    probe_thread *t = arg;
    probe_job *j = t->job;
    int n = j->p->n_threads;
    int gate;
    while ((gate = atomic_load(&j->gate)) == 0) sched_yield();
    if (gate < 0) return NULL;
    for (int r = 0; r < j->reps; r++) {
        pthread_barrier_wait(&j->barrier);
        j->t_start[r * n + t->ith] = pith_bench_now();
        run_once(j, t);
        j->t_end[r * n + t->ith] = pith_bench_now();
    }
    return NULL;
}

/* Runs the job on n_threads threads (the caller is thread 0); *best: the shortest repetition. */
static int run_job(probe_job *j, double *best, pith_err *err) {
    int n = j->p->n_threads;
    int rc = -1, started = 0;
    bool barrier_ok = false;
    probe_thread *th = calloc((size_t)n, sizeof *th);
    j->t_start = calloc((size_t)j->reps * (size_t)n, sizeof *j->t_start);
    j->t_end = calloc((size_t)j->reps * (size_t)n, sizeof *j->t_end);
    if (!th || !j->t_start || !j->t_end) {
        pith_errf(err, "out of memory");
        goto done;
    }
    atomic_store(&j->gate, 0);
    for (int i = 0; i < n; i++) {
        th[i].job = j;
        th[i].ith = i;
    }
    for (started = 1; started < n; started++) {
        if (pthread_create(&th[started].tid, NULL, thread_main, &th[started])) break;
    }
    if (started == n && pthread_barrier_init(&j->barrier, NULL, (unsigned)n) == 0) barrier_ok = true;
    atomic_store(&j->gate, barrier_ok ? 1 : -1);
    if (!barrier_ok) {
        for (int i = 1; i < started; i++) pthread_join(th[i].tid, NULL);
        pith_errf(err, "cannot start %d probe threads", n);
        goto done;
    }
    thread_main(&th[0]);
    for (int i = 1; i < n; i++) pthread_join(th[i].tid, NULL);
    *best = 0;
    for (int r = 0; r < j->reps; r++) {
        double t0 = j->t_start[r * n], t1 = j->t_end[r * n];
        for (int i = 1; i < n; i++) {
            if (j->t_start[r * n + i] < t0) t0 = j->t_start[r * n + i];
            if (j->t_end[r * n + i] > t1) t1 = j->t_end[r * n + i];
        }
        if (r == 0 || t1 - t0 < *best) *best = t1 - t0;
    }
    if (*best <= 0) *best = 1e-9; /* a clock that did not move: report a huge rate, never divide by 0 */
    rc = 0;
done:
    if (barrier_ok) pthread_barrier_destroy(&j->barrier);
    free(th);
    free(j->t_start);
    free(j->t_end);
    j->t_start = j->t_end = NULL;
    return rc;
}

/* The probe table named like the kernel table the model runs; each exists exactly when its kernel table
 * does. A kernel table without probes of its own (none today; the test checks) gets the best there are. */
static const pith_probe_kernels *probe_kernels_for(const pith_cpu_kernels *kt) {
    const pith_probe_kernels *all[] = {pith_probe_kernels_avx512_vnni(), pith_probe_kernels_avx2_vnni(),
                                       pith_probe_kernels_avx2(), pith_probe_kernels_scalar()};
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++)
        if (all[i] && !strcmp(all[i]->name, kt->name)) return all[i];
    for (size_t i = 0; i < n; i++)
        if (all[i]) return all[i];
    return pith_probe_kernels_scalar();
}

int pith_probe_new(int n_threads, size_t bw_bytes, bool force_scalar, pith_probe **out, pith_err *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096) return pith_errf(err, "probe threads %d out of range [1, 4096]", n_threads);
    size_t unit = (size_t)ALIGN * (size_t)n_threads;
    if (bw_bytes < MIN_BW_BYTES) bw_bytes = MIN_BW_BYTES;
    bw_bytes = bw_bytes / unit * unit;
    if (bw_bytes == 0) bw_bytes = unit;
    pith_probe *p = calloc(1, sizeof *p);
    if (!p) return pith_errf(err, "out of memory");
    p->n_threads = n_threads;
    p->bw_bytes = bw_bytes;
    p->kt = pith_cpu_kernels_best(force_scalar);
    p->k = probe_kernels_for(p->kt);
    p->buf = aligned_alloc(ALIGN, bw_bytes);
    if (!p->buf) {
        free(p);
        return pith_errf(err, "out of memory allocating a %zu-byte bandwidth buffer", bw_bytes);
    }
    /* Written, not just allocated: untouched pages would all map the zero page and be read from cache. */
    uint64_t *words = (uint64_t *)p->buf;
    for (size_t i = 0; i < bw_bytes / sizeof *words; i++) words[i] = i * 0x9e3779b97f4a7c15ull;
    *out = p;
    return 0;
}

void pith_probe_free(pith_probe *p) {
    if (!p) return;
    free(p->buf);
    free(p);
}

const char *pith_probe_isa(const pith_probe *p) { return p->k->name; }

/* Whether the kernel table repacks weights of `type` at load time and they are float weights (float_tiles)
 * or integer ones (!float_tiles): then the packed tiles of that kind do nearly all their work (only rows
 * past the last whole group stay in the file layout), so the packed loop times them. A type of the other
 * kind (F16 asked for its int8 peak) gets the file-layout loop, like a type the table does not repack. */
static bool packed(const pith_probe *p, pith_dtype type, bool float_tiles) {
    int wt = pith_wtype_of(type);
    return wt >= 0 && p->kt->pack[wt] != NULL && (pith_act_format_of((pith_wtype)wt) == PITH_ACT_F32) == float_tiles;
}

static const pith_probe_loop *int8_for(const pith_probe *p, pith_dtype type) {
    return packed(p, type, false) ? &p->k->int8_packed : &p->k->int8;
}

static const pith_probe_loop *fma_for(const pith_probe *p, pith_dtype type) {
    return packed(p, type, true) ? &p->k->fma_packed : &p->k->fma;
}

const char *pith_probe_int8_isa(const pith_probe *p, pith_dtype type) { return int8_for(p, type)->isa; }
const char *pith_probe_fma_isa(const pith_probe *p, pith_dtype type) { return fma_for(p, type)->isa; }
int pith_probe_threads(const pith_probe *p) { return p->n_threads; }
size_t pith_probe_bw_bytes(const pith_probe *p) { return p->bw_bytes; }

static int check_reps(int reps, pith_err *err) {
    if (reps < 1 || reps > 1000) return pith_errf(err, "probe repetitions %d out of range [1, 1000]", reps);
    return 0;
}

int pith_probe_bandwidth(pith_probe *p, int passes, double *bytes_per_s, pith_err *err) {
    if (check_reps(passes, err)) return -1;
    probe_job j = {.p = p, .kind = PROBE_READ, .reps = passes};
    double t;
    if (run_job(&j, &t, err)) return -1;
    *bytes_per_s = (double)p->bw_bytes / t;
    return 0;
}

/* Iterations that take about TARGET_SECONDS on one thread, from a short timed run (doubling until it
 * lasts long enough to time). */
static int64_t calibrate(const pith_probe_loop *loop) {
    int64_t iters = 1024;
    for (;;) {
        double t0 = pith_bench_now();
        volatile uint64_t sink = loop->loop(iters);
        (void)sink;
        double dt = pith_bench_now() - t0;
        if (dt >= TARGET_SECONDS / 10 || iters >= ((int64_t)1 << 40)) {
            double scaled = (double)iters * TARGET_SECONDS / (dt > 0 ? dt : 1e-9);
            return scaled < 1 ? 1 : (int64_t)scaled;
        }
        iters *= 2;
    }
}

static int compute_peak(pith_probe *p, const pith_probe_loop *loop, int reps, double *ops, pith_err *err) {
    if (check_reps(reps, err)) return -1;
    probe_job j = {.p = p, .kind = PROBE_COMPUTE, .loop = loop, .reps = reps, .iters = calibrate(loop)};
    double t;
    if (run_job(&j, &t, err)) return -1;
    *ops = (double)j.iters * loop->ops_per_iter * p->n_threads / t;
    return 0;
}

int pith_probe_fma_peak(pith_probe *p, pith_dtype type, int reps, double *flops, pith_err *err) {
    return compute_peak(p, fma_for(p, type), reps, flops, err);
}

int pith_probe_int8_peak(pith_probe *p, pith_dtype type, int reps, double *ops, pith_err *err) {
    return compute_peak(p, int8_for(p, type), reps, ops, err);
}
