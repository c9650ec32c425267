#include "server/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A label value with \, " and newline escaped (the exposition format's rules). */
static void label_value(buf *out, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') buf_printf(out, "\\%c", *v);
        else if (*v == '\n') buf_puts(out, "\\n");
        else buf_printf(out, "%c", *v);
    }
}

/* What one model's lines read, copied first so that no lock is held while text is written and each
 * model's lines are one consistent snapshot. */
typedef struct model_view {
    const char *name;
    bool loaded;
    pith_engine_stats st;   /* zeros when not loaded */
    metrics_weights w;
    uint64_t success[3];
    uint64_t errors[METRICS_N_ERROR_CODES];
    histogram ttft, tpot, e2e;
} model_view;

/* Starts a sample: NAME{model_name="..." — the caller adds its other labels, then "} VALUE\n". */
static void sample(buf *out, const char *name, const model_view *v) {
    buf_printf(out, "%s{model_name=\"", name);
    label_value(out, v->name);
    buf_puts(out, "\"");
}

/* A family of one unlabelled number per model, read from the engine snapshot. */
typedef struct stat_family {
    const char *name, *type, *help;
    size_t off;   /* in pith_engine_stats */
    char kind;    /* the field's type: 'i' int, 'u' uint64_t, 'z' size_t, 'b' bool */
} stat_family;

#define STAT(name, type, help, field, kind) {name, type, help, offsetof(pith_engine_stats, field), kind}

static unsigned long long stat_value(const pith_engine_stats *st, const stat_family *f) {
    const char *p = (const char *)st + f->off;
    switch (f->kind) {
    case 'i': {
        int v;
        memcpy(&v, p, sizeof v);
        return v > 0 ? (unsigned long long)v : 0; /* a pool not yet sized reads 0, never negative */
    }
    case 'u': {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case 'z': {
        size_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    default: {
        bool v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    }
}

static void stat_families(buf *out, const stat_family *fams, int n_fams, const model_view *v, int n) {
    for (int f = 0; f < n_fams; f++) {
        header(out, fams[f].name, fams[f].type, fams[f].help);
        for (int i = 0; i < n; i++) {
            sample(out, fams[f].name, &v[i]);
            buf_printf(out, "} %llu\n", stat_value(&v[i].st, &fams[f]));
        }
    }
}

/* Pith's engine families before pith_memory_units, then those after it (the order of old releases). */
static const stat_family engine_head[] = {
    STAT("pith_requests_running", "gauge", "Requests running in the engine (holding KV blocks).", running, 'i'),
    STAT("pith_requests_waiting", "gauge", "Requests accepted and waiting to run (new or preempted).", waiting, 'i'),
    STAT("pith_kv_blocks_in_use", "gauge", "KV cache blocks held by requests (evictable cached blocks not counted).",
         kv_blocks_used, 'i'),
    /* A constant, so a counter is lawful; Prometheus' linter refuses the _total suffix on a gauge. */
    STAT("pith_kv_blocks_total", "counter", "KV cache blocks in the pool (constant while the server runs).",
         kv_blocks_total, 'i'),
};

static const stat_family engine_tail[] = {
    STAT("pith_memory_bytes", "gauge", "Bytes of every memory group's pool together (constant while the server runs).",
         mem_bytes, 'z'),
    STAT("pith_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
         prefix_cache_hits, 'u'),
    STAT("pith_prefix_cache_query_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
         prefix_cache_queries, 'u'),
    STAT("pith_state_snapshots_total", "counter", "Recurrent-state snapshots taken for the prefix cache.",
         state_snapshots, 'u'),
    STAT("pith_state_restores_total", "counter", "Prefix cache hits resumed from a recurrent-state snapshot.",
         state_restores, 'u'),
    STAT("pith_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", prompt_tokens, 'u'),
    STAT("pith_generation_tokens_total", "counter", "Tokens generated.", generation_tokens, 'u'),
    STAT("pith_computed_tokens_total", "counter", "Tokens run through the model (prefill, recompute and decode).",
         computed_tokens, 'u'),
    STAT("pith_spec_draft_tokens_total", "counter", "Speculative decoding: draft tokens proposed.",
         spec_draft_tokens, 'u'),
    STAT("pith_spec_accepted_tokens_total", "counter", "Speculative decoding: draft tokens accepted by verification.",
         spec_accepted_tokens, 'u'),
    STAT("pith_forked_sequences_total", "counter", "Samples of n > 1 requests forked from a prompt computed once.",
         forked_sequences, 'u'),
    STAT("pith_preemptions_total", "counter", "Requests preempted to free KV blocks (recomputed later).",
         preemptions, 'u'),
};

static const stat_family admin_families[] = {
    STAT("pith_weight_generation", "gauge", "Weight swaps since the server started (the engine's weight generation).",
         weight_generation, 'u'),
    STAT("pith_requests_restarted_total", "counter", "Requests restarted on new weights by reloads in recompute mode.",
         requests_restarted, 'u'),
    STAT("pith_admission_paused", "gauge", "1 while admission is paused (/v1/admin/pause, a reload, or asleep).",
         paused, 'b'),
    STAT("pith_asleep", "gauge", "1 while asleep (/v1/admin/sleep): KV cache and weights released.", asleep, 'b'),
};

static void hist_family(buf *out, const char *name, const char *help, const model_view *v, int n, size_t off) {
    header(out, name, "histogram", help);
    char series[128];
    for (int i = 0; i < n; i++) {
        const histogram *h = (const histogram *)((const char *)&v[i] + off);
        uint64_t cum = 0;
        snprintf(series, sizeof series, "%s_bucket", name);
        for (int b = 0; b <= h->n_bounds; b++) {
            cum += h->counts[b];
            sample(out, series, &v[i]);
            if (b < h->n_bounds) buf_printf(out, ",le=\"%g\"} %llu\n", h->bounds[b], (unsigned long long)cum);
            else buf_printf(out, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        snprintf(series, sizeof series, "%s_sum", name);
        sample(out, series, &v[i]);
        buf_printf(out, "} %.9g\n", h->sum);
        snprintf(series, sizeof series, "%s_count", name);
        sample(out, series, &v[i]);
        buf_printf(out, "} %llu\n", (unsigned long long)h->count);
    }
}

double metrics_kv_usage(const pith_engine_stats *st) {
    /* The fullest group, not used/total summed over the groups: a request is admitted only when every
     * KV group has room, so the fullest one is what makes requests wait, which is what the endpoint
     * picker reads this gauge for. With one KV group (most models) both are the same number. */
    double usage = 0;
    for (int g = 0; g < st->n_mem_groups && g < PITH_MAX_MEM_GROUPS; g++) {
        const pith_engine_mem_stats *ms = &st->mem[g];
        if (ms->kind == PITH_MEM_RECURRENT || ms->units_total <= 0) continue;
        double u = (double)ms->units_used / ms->units_total;
        if (u > usage) usage = u;
    }
    return usage > 1 ? 1 : usage;
}

int metrics_kv_pool_blocks(const pith_engine_stats *st) {
    int window = -1;
    for (int g = 0; g < st->n_mem_groups && g < PITH_MAX_MEM_GROUPS; g++) {
        const pith_engine_mem_stats *ms = &st->mem[g];
        if (ms->kind == PITH_MEM_FULL) return ms->units_total > 0 ? ms->units_total : 0;
        if (ms->kind == PITH_MEM_WINDOW && window < 0) window = ms->units_total > 0 ? ms->units_total : 0;
    }
    return window > 0 ? window : 0;
}

/* The families the Gateway API Inference Extension's endpoint picker reads by default, as vLLM names
 * and describes them (gateway-api-inference-extension docs/proposals/003-model-server-protocol). */
static void gateway_families(buf *out, const model_view *v, int n) {
    header(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
    for (int i = 0; i < n; i++) {
        sample(out, "vllm:num_requests_running", &v[i]);
        buf_printf(out, "} %d\n", v[i].st.running > 0 ? v[i].st.running : 0);
    }
    header(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
    for (int i = 0; i < n; i++) {
        sample(out, "vllm:num_requests_waiting", &v[i]);
        buf_printf(out, "} %d\n", v[i].st.waiting > 0 ? v[i].st.waiting : 0);
    }
    header(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
    for (int i = 0; i < n; i++) {
        sample(out, "vllm:kv_cache_usage_perc", &v[i]);
        buf_printf(out, "} %.9g\n", metrics_kv_usage(&v[i].st));
    }
    /* An info gauge: its value is 1 and its labels carry the numbers. A model not loaded has no pool
     * to describe and no series (a family without samples is lawful). */
    header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    for (int i = 0; i < n; i++) {
        if (!v[i].loaded) continue;
        sample(out, "vllm:cache_config_info", &v[i]);
        buf_printf(out, ",block_size=\"%d\",num_gpu_blocks=\"%d\"} 1\n", v[i].st.block_size > 0 ? v[i].st.block_size : 0,
                   metrics_kv_pool_blocks(&v[i].st));
    }
}

void metrics_render_models(const metrics_model *models, int n, buf *out) {
    if (n <= 0) return;
    model_view *v = calloc((size_t)n, sizeof *v);
    if (!v) {
        out->failed = true;
        return;
    }
    for (int i = 0; i < n; i++) {
        const metrics_model *mm = &models[i];
        v[i].name = mm->name ? mm->name : "";
        v[i].loaded = mm->st != NULL;
        if (mm->st) v[i].st = *mm->st;
        if (mm->w) v[i].w = *mm->w;
        if (!v[i].w.version) v[i].w.version = "0";
        metrics *m = mm->m;
        pthread_mutex_lock(&m->lock);
        memcpy(v[i].success, m->success, sizeof v[i].success);
        memcpy(v[i].errors, m->errors, sizeof v[i].errors);
        v[i].ttft = m->ttft;
        v[i].tpot = m->tpot;
        v[i].e2e = m->e2e;
        pthread_mutex_unlock(&m->lock);
    }

    stat_families(out, engine_head, N_OF(engine_head), v, n);
    /* One series per memory group and state: a window group's blocks behave unlike a full group's. */
    header(out, "pith_memory_units", "gauge",
           "Blocks (KV groups) or state slots (recurrent groups) of each memory group the model declared, by state.");
    for (int i = 0; i < n; i++) {
        const pith_engine_stats *st = &v[i].st;
        for (int g = 0; g < st->n_mem_groups && g < PITH_MAX_MEM_GROUPS; g++) {
            const pith_engine_mem_stats *ms = &st->mem[g];
            const char *states[3] = {"used", "cached", "free"};
            const int counts[3] = {ms->units_used, ms->units_cached, ms->units_free};
            for (int k = 0; k < 3; k++) {
                sample(out, "pith_memory_units", &v[i]);
                buf_printf(out, ",group=\"%d\",kind=\"%s\",window=\"%d\",state=\"%s\"} %d\n", g,
                           pith_mem_kind_name(ms->kind), ms->window, states[k], counts[k]);
            }
        }
    }
    stat_families(out, engine_tail, N_OF(engine_tail), v, n);

    header(out, "pith_request_success_total", "counter",
           "Generation requests (one per choice) finished, by finish reason.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            sample(out, "pith_request_success_total", &v[i]);
            buf_printf(out, ",finish_reason=\"%s\"} %llu\n", success_labels[k], (unsigned long long)v[i].success[k]);
        }
    header(out, "pith_request_errors_total", "counter", "Error responses, by HTTP status code.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < METRICS_N_ERROR_CODES; k++) {
            sample(out, "pith_request_errors_total", &v[i]);
            buf_printf(out, ",code=\"%d\"} %llu\n", error_codes[k], (unsigned long long)v[i].errors[k]);
        }
    hist_family(out, "pith_time_to_first_token_seconds", "Seconds from request arrival to the first token.", v, n,
                offsetof(model_view, ttft));
    hist_family(out, "pith_time_per_output_token_seconds", "Mean seconds between output tokens after the first, per request.",
                v, n, offsetof(model_view, tpot));
    hist_family(out, "pith_e2e_request_latency_seconds", "Seconds from request arrival to its last token.", v, n,
                offsetof(model_view, e2e));

    header(out, "pith_weight_version_info", "gauge", "The weights being served: 1, labelled with their version.");
    for (int i = 0; i < n; i++) {
        sample(out, "pith_weight_version_info", &v[i]);
        buf_puts(out, ",version=\"");
        label_value(out, v[i].w.version);
        buf_puts(out, "\"} 1\n");
    }
    header(out, "pith_weight_reloads_total", "counter", "Hot weight reloads done (POST /v1/admin/reload).");
    for (int i = 0; i < n; i++) {
        sample(out, "pith_weight_reloads_total", &v[i]);
        buf_printf(out, "} %llu\n", (unsigned long long)v[i].w.reloads);
    }
    header(out, "pith_weight_reload_pause_seconds", "gauge", "Seconds admission was paused by the last reload.");
    for (int i = 0; i < n; i++) {
        sample(out, "pith_weight_reload_pause_seconds", &v[i]);
        buf_printf(out, "} %.6f\n", v[i].w.last_pause_s);
    }
    header(out, "pith_weight_reload_load_seconds", "gauge", "Seconds the last reload took to read its weights.");
    for (int i = 0; i < n; i++) {
        sample(out, "pith_weight_reload_load_seconds", &v[i]);
        buf_printf(out, "} %.6f\n", v[i].w.last_load_s);
    }
    stat_families(out, admin_families, N_OF(admin_families), v, n);

    gateway_families(out, v, n);
    free(v);
}
