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

/* The weights being served and the admin state (docs/rl.md): version label, reloads, the last
 * reload's pause and load times. */
typedef struct metrics_weights {
    const char *version;
    uint64_t reloads;
    double last_pause_s, last_load_s;
} metrics_weights;

/* One model of the exposition. name is its model_name label value (any bytes: escaped); m its
 * request counters and histograms; st a snapshot of its engine, or NULL while not loaded (its engine
 * families then read 0 and it has no vllm:cache_config_info series); w its weights, or NULL for the
 * defaults (version "0", no reload). */
typedef struct metrics_model {
    const char *name;
    metrics *m;
    const pith_engine_stats *st;
    const metrics_weights *w;
} metrics_model;

/* Appends the exposition of n >= 1 models (a server with one model passes n = 1). Invariants the
 * scrapers rely on (Prometheus text format 0.0.4):
 *   - each family's # HELP and # TYPE lines appear once, followed by all of its samples, so a
 *     family's samples are contiguous whatever n is (models are the inner loop, families the outer);
 *   - every sample carries model_name="NAME" as its first label, Pith's families and the vllm: ones
 *     alike, so that series of different models never collide;
 *   - the Gateway API Inference Extension's names (vllm:num_requests_waiting,
 *     vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:cache_config_info) are emitted beside
 *     Pith's own; docs/api.md says what each reads. vllm:lora_requests_info is never emitted: it describes
 *     LoRA adapters (max_lora, running and waiting adapters) and Pith has none.
 * Each model's counters are copied under its lock before any text is written, so one model's lines
 * are a consistent snapshot and no lock is held while formatting. Out of memory leaves out->failed. */
void metrics_render_models(const metrics_model *models, int n, buf *out);

/* vllm:kv_cache_usage_perc of a snapshot: the fullest KV memory group's blocks held by requests over
 * its pool (0..1; recurrent groups are not KV; 0 without a pool). */
double metrics_kv_usage(const pith_engine_stats *st);
/* vllm:cache_config_info's num_gpu_blocks: the blocks of the first FULL attention group's pool, else
 * of the first window group (a model with window layers only), else 0. */
int metrics_kv_pool_blocks(const pith_engine_stats *st);

#endif
