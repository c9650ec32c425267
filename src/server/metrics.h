/* The server's metrics registry and its Prometheus text exposition (format 0.0.4).
 *
 * Owns the request-level counters and latency histograms; the engine owns the rest (queue gauges, KV
 * blocks, token counters), read from a pith_engine_stats snapshot when rendering. Names are fixed by the
 * API (docs/api.md): renaming one breaks dashboards. Every series of a labelled counter is present from
 * the start (at 0), so rates work from the first scrape. Thread-safe. */
#ifndef PITH_SERVER_METRICS_H
#define PITH_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "pith/engine.h"
#include "server/buf.h"

#define METRICS_MAX_BUCKETS 24

typedef struct histogram {
    const double *bounds;   /* upper bounds, increasing; +Inf is implicit */
    int n_bounds;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
    double sum;
    uint64_t count;
} histogram;

/* HTTP statuses counted in pith_request_errors_total{code}. */
#define METRICS_N_ERROR_CODES 12

typedef struct metrics {
    pthread_mutex_t lock;
    uint64_t success[3];    /* by finish reason: stop, length, cancelled */
    uint64_t errors[METRICS_N_ERROR_CODES];
    histogram ttft;         /* pith_time_to_first_token_seconds */
    histogram tpot;         /* pith_time_per_output_token_seconds */
    histogram e2e;          /* pith_e2e_request_latency_seconds */
} metrics;

void metrics_init(metrics *m);
void metrics_destroy(metrics *m);

/* One engine request (one choice) finished: reason stop, length or cancelled count as a success with
 * that label; error does not (the HTTP layer counts the 500). first_token_s: seconds from arrival to
 * the first token (< 0: no token), per_token_s: mean seconds between later tokens (< 0: fewer than
 * two tokens), e2e_s: arrival to finish. */
void metrics_request_done(metrics *m, pith_finish_reason why, double first_token_s, double per_token_s, double e2e_s);
/* An error response with this HTTP status was sent (unknown statuses are counted as 500). */
void metrics_error(metrics *m, int status);

/* Appends the exposition. st: engine snapshot, or NULL before the engine exists (gauges and engine
 * counters read 0). */
void metrics_render(metrics *m, const pith_engine_stats *st, buf *out);

/* The weights being served and the admin state (docs/rl.md): version label, reloads, the last
 * reload's pause and load times. st may be NULL as above. */
typedef struct metrics_weights {
    const char *version;
    uint64_t reloads;
    double last_pause_s, last_load_s;
} metrics_weights;
void metrics_render_weights(const metrics_weights *w, const pith_engine_stats *st, buf *out);

#endif
