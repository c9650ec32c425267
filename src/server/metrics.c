#include "server/metrics.h"

#include <math.h>
#include <string.h>

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double tpot_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03,
                                     0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
static const double e2e_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0,
                                    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

static const char *const success_labels[3] = {"stop", "length", "cancelled"};
static const int error_codes[METRICS_N_ERROR_CODES] = {400, 401, 403, 404, 405, 409, 413, 415, 429, 500, 503, 504};

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

static void hist_init(histogram *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n;
}

static void hist_observe(histogram *h, double v) {
    if (!(v >= 0) || !isfinite(v)) return;
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void metrics_init(metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    hist_init(&m->ttft, ttft_bounds, N_OF(ttft_bounds));
    hist_init(&m->tpot, tpot_bounds, N_OF(tpot_bounds));
    hist_init(&m->e2e, e2e_bounds, N_OF(e2e_bounds));
}

void metrics_destroy(metrics *m) { pthread_mutex_destroy(&m->lock); }

void metrics_request_done(metrics *m, pith_finish_reason why, double first_token_s, double per_token_s, double e2e_s) {
    pthread_mutex_lock(&m->lock);
    if (why == PITH_FINISH_STOP) m->success[0]++;
    else if (why == PITH_FINISH_LENGTH) m->success[1]++;
    else if (why == PITH_FINISH_CANCELLED) m->success[2]++;
    if (first_token_s >= 0) hist_observe(&m->ttft, first_token_s);
    if (per_token_s >= 0) hist_observe(&m->tpot, per_token_s);
    hist_observe(&m->e2e, e2e_s);
    pthread_mutex_unlock(&m->lock);
}

void metrics_error(metrics *m, int status) {
    int slot = -1, slot_500 = 0;
    for (int i = 0; i < METRICS_N_ERROR_CODES; i++) {
        if (error_codes[i] == status) slot = i;
        if (error_codes[i] == 500) slot_500 = i;
    }
    if (slot < 0) slot = slot_500;
    pthread_mutex_lock(&m->lock);
    m->errors[slot]++;
    pthread_mutex_unlock(&m->lock);
}

static void header(buf *out, const char *name, const char *type, const char *help) {
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(buf *out, const char *name, const char *help, long long v) {
    header(out, name, "gauge", help);
    buf_printf(out, "%s %lld\n", name, v);
}

static void counter(buf *out, const char *name, const char *help, unsigned long long v) {
    header(out, name, "counter", help);
    buf_printf(out, "%s %llu\n", name, v);
}

static void hist_render(buf *out, const char *name, const char *help, const histogram *h) {
    header(out, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    buf_printf(out, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

void metrics_render(metrics *m, const pith_engine_stats *st, buf *out) {
    pith_engine_stats zero = {0};
    if (!st) st = &zero;
    gauge(out, "pith_requests_running", "Requests running in the engine (holding KV blocks).", st->running);
    gauge(out, "pith_requests_waiting", "Requests accepted and waiting to run (new or preempted).", st->waiting);
    gauge(out, "pith_kv_blocks_in_use", "KV cache blocks held by requests (evictable cached blocks not counted).",
          st->kv_blocks_used);
    /* A constant, so a counter is lawful; Prometheus' linter refuses the _total suffix on a gauge. */
    counter(out, "pith_kv_blocks_total", "KV cache blocks in the pool (constant while the server runs).",
            (unsigned long long)(st->kv_blocks_total > 0 ? st->kv_blocks_total : 0));
    /* One series per memory group and state: a window group's blocks behave unlike a full group's. */
    header(out, "pith_memory_units", "gauge",
           "Blocks (KV groups) or state slots (recurrent groups) of each memory group the model declared, by state.");
    for (int g = 0; g < st->n_mem_groups && g < PITH_MAX_MEM_GROUPS; g++) {
        const pith_engine_mem_stats *ms = &st->mem[g];
        const char *states[3] = {"used", "cached", "free"};
        const int counts[3] = {ms->units_used, ms->units_cached, ms->units_free};
        for (int k = 0; k < 3; k++)
            buf_printf(out, "pith_memory_units{group=\"%d\",kind=\"%s\",window=\"%d\",state=\"%s\"} %d\n", g,
                       pith_mem_kind_name(ms->kind), ms->window, states[k], counts[k]);
    }
    gauge(out, "pith_memory_bytes", "Bytes of every memory group's pool together (constant while the server runs).",
          (long long)st->mem_bytes);
    counter(out, "pith_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
            (unsigned long long)st->prefix_cache_hits);
    counter(out, "pith_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.",
            (unsigned long long)st->prefix_cache_queries);
    counter(out, "pith_state_snapshots_total", "Recurrent-state snapshots taken for the prefix cache.",
            (unsigned long long)st->state_snapshots);
    counter(out, "pith_state_restores_total", "Prefix cache hits resumed from a recurrent-state snapshot.",
            (unsigned long long)st->state_restores);
    counter(out, "pith_prompt_tokens_total", "Prompt tokens of accepted requests.",
            (unsigned long long)st->prompt_tokens);
    counter(out, "pith_generation_tokens_total", "Tokens generated.", (unsigned long long)st->generation_tokens);
    counter(out, "pith_computed_tokens_total", "Tokens run through the model (prefill, recompute and decode).",
            (unsigned long long)st->computed_tokens);
    counter(out, "pith_spec_draft_tokens_total", "Speculative decoding: draft tokens proposed.",
            (unsigned long long)st->spec_draft_tokens);
    counter(out, "pith_spec_accepted_tokens_total", "Speculative decoding: draft tokens accepted by verification.",
            (unsigned long long)st->spec_accepted_tokens);
    counter(out, "pith_forked_sequences_total", "Samples of n > 1 requests forked from a prompt computed once.",
            (unsigned long long)st->forked_sequences);
    counter(out, "pith_preemptions_total", "Requests preempted to free KV blocks (recomputed later).",
            (unsigned long long)st->preemptions);

    pthread_mutex_lock(&m->lock);
    header(out, "pith_request_success_total", "counter",
           "Generation requests (one per choice) finished, by finish reason.");
    for (int i = 0; i < 3; i++)
        buf_printf(out, "pith_request_success_total{finish_reason=\"%s\"} %llu\n", success_labels[i],
                   (unsigned long long)m->success[i]);
    header(out, "pith_request_errors_total", "counter", "Error responses, by HTTP status code.");
    for (int i = 0; i < METRICS_N_ERROR_CODES; i++)
        buf_printf(out, "pith_request_errors_total{code=\"%d\"} %llu\n", error_codes[i],
                   (unsigned long long)m->errors[i]);
    hist_render(out, "pith_time_to_first_token_seconds", "Seconds from request arrival to the first token.", &m->ttft);
    hist_render(out, "pith_time_per_output_token_seconds",
                "Mean seconds between output tokens after the first, per request.", &m->tpot);
    hist_render(out, "pith_e2e_request_latency_seconds", "Seconds from request arrival to its last token.", &m->e2e);
    pthread_mutex_unlock(&m->lock);
}

/* A label value with \, " and newline escaped (the exposition format's rules). */
static void label_value(buf *out, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') buf_printf(out, "\\%c", *v);
        else if (*v == '\n') buf_puts(out, "\\n");
        else buf_printf(out, "%c", *v);
    }
}

void metrics_render_weights(const metrics_weights *w, const pith_engine_stats *st, buf *out) {
    pith_engine_stats zero = {0};
    if (!st) st = &zero;
    header(out, "pith_weight_version_info", "gauge", "The weights being served: 1, labelled with their version.");
    buf_puts(out, "pith_weight_version_info{version=\"");
    label_value(out, w->version ? w->version : "0");
    buf_puts(out, "\"} 1\n");
    gauge(out, "pith_weight_generation", "Weight swaps since the server started (the engine's weight generation).",
          (long long)st->weight_generation);
    counter(out, "pith_weight_reloads_total", "Hot weight reloads done (POST /v1/admin/reload).", (unsigned long long)w->reloads);
    header(out, "pith_weight_reload_pause_seconds", "gauge", "Seconds admission was paused by the last reload.");
    buf_printf(out, "pith_weight_reload_pause_seconds %.6f\n", w->last_pause_s);
    header(out, "pith_weight_reload_load_seconds", "gauge", "Seconds the last reload took to read its weights.");
    buf_printf(out, "pith_weight_reload_load_seconds %.6f\n", w->last_load_s);
    counter(out, "pith_requests_restarted_total", "Requests restarted on new weights by reloads in recompute mode.",
            (unsigned long long)st->requests_restarted);
    gauge(out, "pith_admission_paused", "1 while admission is paused (/v1/admin/pause, a reload, or asleep).", st->paused);
    gauge(out, "pith_asleep", "1 while asleep (/v1/admin/sleep): KV cache and weights released.", st->asleep);
}
