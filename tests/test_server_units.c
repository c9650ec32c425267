/* Unit tests of the server's pieces that need no model: API key checks and key files, the metrics
 * exposition (histogram buckets cumulative, sums, every labelled series present, several models in one
 * exposition, the Gateway API Inference Extension's vllm: gauges), the reading of
 * generation parameters (defaults, ranges, refusals), and CORS origin checks and matching. The HTTP behaviour as a whole is tested by
 * the Node tests in tests/server against a real server. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/auth.h"
#include "server/buf.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "server/params.h"

static void test_auth(const char *tmp) {
    auth_keys a = {0};
    pith_err err;
    CHECK(!auth_enabled(&a));
    CHECK(auth_check(&a, NULL)); /* no keys: open */
    CHECK(auth_add_key(&a, "sk-alpha", &err) == 0);
    CHECK(auth_enabled(&a));
    CHECK(auth_check(&a, "Bearer sk-alpha"));
    CHECK(auth_check(&a, "bearer sk-alpha"));
    CHECK(!auth_check(&a, NULL));
    CHECK(!auth_check(&a, ""));
    CHECK(!auth_check(&a, "sk-alpha"));
    CHECK(!auth_check(&a, "Bearer "));
    CHECK(!auth_check(&a, "Bearer sk-alph"));   /* a prefix */
    CHECK(!auth_check(&a, "Bearer sk-alphaa")); /* longer */
    CHECK(!auth_check(&a, "Bearer sk-alphb"));
    CHECK(!auth_check(&a, "Basic sk-alpha"));
    CHECK(auth_add_key(&a, "", &err) == -1);
    CHECK(auth_add_key(&a, "has space", &err) == -1);
    char longkey[AUTH_MAX_KEY + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK(auth_add_key(&a, longkey, &err) == -1);
    char hdr[AUTH_MAX_KEY + 16];
    snprintf(hdr, sizeof hdr, "Bearer %s", longkey);
    CHECK(!auth_check(&a, hdr));

    char path[4096];
    snprintf(path, sizeof path, "%s/server_units_keys.txt", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("# comment\n\n  sk-one \t\nsk-two\n#sk-three\n", f);
    fclose(f);
    CHECK(auth_add_key_file(&a, path, &err) == 0);
    CHECK(a.n == 3);
    CHECK(auth_check(&a, "Bearer sk-one"));
    CHECK(auth_check(&a, "Bearer sk-two"));
    CHECK(auth_check(&a, "Bearer sk-alpha"));
    CHECK(!auth_check(&a, "Bearer sk-three"));
    CHECK(!auth_check(&a, "Bearer # comment"));
    f = fopen(path, "w");
    if (f) {
        fputs("# nothing\n\n", f);
        fclose(f);
    }
    CHECKF(auth_add_key_file(&a, path, &err) == -1 && strstr(err.msg, "no key"), "%s", err.msg);
    snprintf(path, sizeof path, "%s/does-not-exist-keys.txt", tmp);
    CHECK(auth_add_key_file(&a, path, &err) == -1);
    auth_free(&a);
    CHECK(a.n == 0 && !auth_enabled(&a));
}

/* The value of the exposition line starting with `prefix ` (NAN when absent). */
static double sample(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return NAN;
}

/* The value of model M's sample NAME{model_name="M"[,LABELS]} (NAN when absent). */
static double msample(const char *text, const char *model, const char *name, const char *labels) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s{model_name=\"%s\"%s%s}", name, model, labels ? "," : "", labels ? labels : "");
    return sample(text, prefix);
}

/* One model's exposition, as the server renders it. */
static void render_one(metrics *m, const pith_engine_stats *st, const metrics_weights *w, buf *out) {
    metrics_model mm = {.name = "m", .m = m, .st = st, .w = w};
    metrics_render_models(&mm, 1, out);
}

/* The weights' series: the version as a label (escaped), reloads, the last reload's times, the engine's
 * generation, restarts and pause / sleep states. */
static void test_metrics_weights(void) {
    metrics m;
    metrics_init(&m);
    metrics_weights w = {.version = "step\"7\\x", .reloads = 3, .last_pause_s = 0.25, .last_load_s = 1.5};
    pith_engine_stats st = {.weight_generation = 3, .requests_restarted = 5, .paused = true};
    buf out = {0};
    render_one(&m, &st, &w, &out);
    const char *t = out.data;
    CHECK(!out.failed && t);
    CHECK(msample(t, "m", "pith_weight_version_info", "version=\"step\\\"7\\\\x\"") == 1);
    CHECK(msample(t, "m", "pith_weight_generation", NULL) == 3);
    CHECK(msample(t, "m", "pith_weight_reloads_total", NULL) == 3);
    CHECK(msample(t, "m", "pith_weight_reload_pause_seconds", NULL) == 0.25);
    CHECK(msample(t, "m", "pith_weight_reload_load_seconds", NULL) == 1.5);
    CHECK(msample(t, "m", "pith_requests_restarted_total", NULL) == 5);
    CHECK(msample(t, "m", "pith_admission_paused", NULL) == 1);
    CHECK(msample(t, "m", "pith_asleep", NULL) == 0);
    buf_free(&out);
    /* No weights given: version "0", nothing reloaded. */
    render_one(&m, NULL, NULL, &out);
    CHECK(out.data && msample(out.data, "m", "pith_weight_version_info", "version=\"0\"") == 1);
    CHECK(out.data && msample(out.data, "m", "pith_weight_reloads_total", NULL) == 0);
    buf_free(&out);
    metrics_destroy(&m);
}

static void test_metrics(void) {
    metrics m;
    metrics_init(&m);
    metrics_request_done(&m, PITH_FINISH_STOP, 0.003, 0.002, 0.5);
    metrics_request_done(&m, PITH_FINISH_LENGTH, 0.03, -1, 1.5);
    metrics_request_done(&m, PITH_FINISH_CANCELLED, -1, -1, 0.2);
    metrics_request_done(&m, PITH_FINISH_ERROR, 0.5, 0.1, 2.0);
    metrics_error(&m, 429);
    metrics_error(&m, 429);
    metrics_error(&m, 418); /* unknown: counted as 500 */
    metrics_error(&m, 403); /* admin endpoints without --admin-key */
    pith_engine_stats st = {.running = 2, .waiting = 3, .kv_blocks_used = 7, .kv_blocks_cached = 5,
                            .kv_blocks_total = 64, .prefix_cache_hits = 11, .prompt_tokens = 100,
                            .generation_tokens = 50, .preemptions = 1, .mem_bytes = 4096, .n_mem_groups = 2,
                            .mem = {{.kind = PITH_MEM_WINDOW, .window = 8, .units_total = 20, .units_used = 3,
                                     .units_cached = 2, .units_free = 15},
                                    {.kind = PITH_MEM_FULL, .units_total = 44, .units_used = 4, .units_cached = 3,
                                     .units_free = 37}}};
    buf out = {0};
    render_one(&m, &st, NULL, &out);
    CHECK(!out.failed && out.len > 0);
    const char *t = out.data;
    CHECK(msample(t, "m", "pith_requests_running", NULL) == 2);
    CHECK(msample(t, "m", "pith_requests_waiting", NULL) == 3);
    CHECK(msample(t, "m", "pith_kv_blocks_in_use", NULL) == 7); /* cached blocks are not in use */
    CHECK(msample(t, "m", "pith_kv_blocks_total", NULL) == 64);
    CHECK(msample(t, "m", "pith_memory_units", "group=\"0\",kind=\"window\",window=\"8\",state=\"used\"") == 3);
    CHECK(msample(t, "m", "pith_memory_units", "group=\"0\",kind=\"window\",window=\"8\",state=\"free\"") == 15);
    CHECK(msample(t, "m", "pith_memory_units", "group=\"1\",kind=\"full\",window=\"0\",state=\"cached\"") == 3);
    CHECK(msample(t, "m", "pith_memory_bytes", NULL) == 4096);
    CHECK(msample(t, "m", "pith_prefix_cache_hit_tokens_total", NULL) == 11);
    CHECK(msample(t, "m", "pith_prompt_tokens_total", NULL) == 100);
    CHECK(msample(t, "m", "pith_generation_tokens_total", NULL) == 50);
    CHECK(msample(t, "m", "pith_preemptions_total", NULL) == 1);
    CHECK(msample(t, "m", "pith_request_success_total", "finish_reason=\"stop\"") == 1);
    CHECK(msample(t, "m", "pith_request_success_total", "finish_reason=\"length\"") == 1);
    CHECK(msample(t, "m", "pith_request_success_total", "finish_reason=\"cancelled\"") == 1);
    CHECK(msample(t, "m", "pith_request_errors_total", "code=\"429\"") == 2);
    CHECK(msample(t, "m", "pith_request_errors_total", "code=\"500\"") == 1);
    CHECK(msample(t, "m", "pith_request_errors_total", "code=\"400\"") == 0); /* present from the start */
    CHECK(msample(t, "m", "pith_request_errors_total", "code=\"403\"") == 1);
    CHECK(msample(t, "m", "pith_request_errors_total", "code=\"504\"") == 0);
    /* TTFT observations 0.003, 0.03, 0.5 (the cancelled request had no token). */
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_count", NULL) == 3);
    CHECK(fabs(msample(t, "m", "pith_time_to_first_token_seconds_sum", NULL) - 0.533) < 1e-9);
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_bucket", "le=\"0.001\"") == 0);
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_bucket", "le=\"0.005\"") == 1);
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_bucket", "le=\"0.04\"") == 2);
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_bucket", "le=\"0.5\"") == 3); /* le is inclusive */
    CHECK(msample(t, "m", "pith_time_to_first_token_seconds_bucket", "le=\"+Inf\"") == 3);
    CHECK(msample(t, "m", "pith_time_per_output_token_seconds_count", NULL) == 2);
    CHECK(msample(t, "m", "pith_e2e_request_latency_seconds_count", NULL) == 4);
    CHECK(fabs(msample(t, "m", "pith_e2e_request_latency_seconds_sum", NULL) - 4.2) < 1e-9);
    /* Buckets never decrease. */
    double prev = -1;
    bool monotone = true;
    for (const char *p = strstr(t, "pith_e2e_request_latency_seconds_bucket"); p; p = strstr(p + 1, "pith_e2e_request_latency_seconds_bucket")) {
        double v = strtod(strchr(p, ' ') + 1, NULL);
        monotone &= v >= prev;
        prev = v;
    }
    CHECK(monotone && prev == 4);
    /* The endpoint picker's gauges: the same counts; KV usage of the fullest KV group (the window group:
     * 3/20 against the full group's 4/44); the pool of the full group. */
    CHECK(msample(t, "m", "vllm:num_requests_running", NULL) == 2);
    CHECK(msample(t, "m", "vllm:num_requests_waiting", NULL) == 3);
    CHECKF(fabs(msample(t, "m", "vllm:kv_cache_usage_perc", NULL) - 0.15) < 1e-9, "%g",
           msample(t, "m", "vllm:kv_cache_usage_perc", NULL));
    CHECK(msample(t, "m", "vllm:cache_config_info", "block_size=\"0\",num_gpu_blocks=\"44\"") == 1);
    CHECK(!strstr(t, "lora")); /* no adapters: no vllm:lora_requests_info */
    buf_free(&out);
    /* Before the engine exists the gauges read 0 and there is no pool to describe. */
    render_one(&m, NULL, NULL, &out);
    CHECK(msample(out.data, "m", "pith_requests_running", NULL) == 0 && msample(out.data, "m", "pith_kv_blocks_total", NULL) == 0);
    CHECK(msample(out.data, "m", "vllm:kv_cache_usage_perc", NULL) == 0);
    CHECK(strstr(out.data, "# TYPE vllm:cache_config_info gauge\n") && !strstr(out.data, "vllm:cache_config_info{"));
    buf_free(&out);
    metrics_destroy(&m);
}

/* KV usage and the pool's size on the shapes models declare: recurrent groups are not KV, a model with
 * window layers only describes its window pool, usage is the fullest group and never above 1. */
static void test_metrics_kv(void) {
    pith_engine_stats st = {.n_mem_groups = 2,
                            .mem = {{.kind = PITH_MEM_RECURRENT, .units_total = 4, .units_used = 4},
                                    {.kind = PITH_MEM_FULL, .units_total = 100, .units_used = 25}}};
    CHECK(fabs(metrics_kv_usage(&st) - 0.25) < 1e-12);
    CHECK(metrics_kv_pool_blocks(&st) == 100);
    pith_engine_stats win = {.n_mem_groups = 2,
                             .mem = {{.kind = PITH_MEM_WINDOW, .window = 4, .units_total = 30, .units_used = 30},
                                     {.kind = PITH_MEM_WINDOW, .window = 8, .units_total = 60, .units_used = 6}}};
    CHECK(metrics_kv_usage(&win) == 1);
    CHECK(metrics_kv_pool_blocks(&win) == 30);
    pith_engine_stats none = {0};
    CHECK(metrics_kv_usage(&none) == 0 && metrics_kv_pool_blocks(&none) == 0);
    pith_engine_stats asleep = {.n_mem_groups = 1, .mem = {{.kind = PITH_MEM_FULL}}}; /* pools released */
    CHECK(metrics_kv_usage(&asleep) == 0 && metrics_kv_pool_blocks(&asleep) == 0);
}

/* The name of a sample line's family: the metric name, less a histogram's _bucket, _sum or _count. */
static void family_of(const char *line, size_t len, char *fam, size_t cap, const char *const *hists, int n_hists) {
    size_t k = 0;
    while (k < len && line[k] != '{' && line[k] != ' ' && k + 1 < cap) {
        fam[k] = line[k];
        k++;
    }
    fam[k] = 0;
    for (int h = 0; h < n_hists; h++) {
        size_t hl = strlen(hists[h]);
        if (!strncmp(fam, hists[h], hl) &&
            (!strcmp(fam + hl, "_bucket") || !strcmp(fam + hl, "_sum") || !strcmp(fam + hl, "_count")))
            fam[hl] = 0;
    }
}

/* Several models in one exposition: each family's HELP and TYPE once, then its samples, contiguous,
 * one series (set) per model with its model_name; a name that needs escaping is escaped; a model not
 * loaded reads 0 and has no cache_config_info series. */
static void test_metrics_models(void) {
    metrics ma, mb;
    metrics_init(&ma);
    metrics_init(&mb);
    metrics_request_done(&ma, PITH_FINISH_STOP, 0.01, 0.01, 0.1);
    metrics_error(&mb, 404);
    pith_engine_stats sa = {.running = 4, .waiting = 9, .kv_blocks_used = 10, .kv_blocks_total = 40, .block_size = 16,
                            .n_mem_groups = 1, .mem = {{.kind = PITH_MEM_FULL, .units_total = 40, .units_used = 10}}};
    metrics_weights wa = {.version = "a1", .reloads = 2};
    metrics_model models[2] = {{.name = "model-a", .m = &ma, .st = &sa, .w = &wa},
                               {.name = "b\"q", .m = &mb, .st = NULL, .w = NULL}};
    buf out = {0};
    metrics_render_models(models, 2, &out);
    CHECK(!out.failed && out.data);
    const char *t = out.data ? out.data : "";
    CHECK(msample(t, "model-a", "vllm:num_requests_running", NULL) == 4);
    CHECK(msample(t, "model-a", "vllm:num_requests_waiting", NULL) == 9);
    CHECK(msample(t, "model-a", "vllm:kv_cache_usage_perc", NULL) == 0.25);
    CHECK(msample(t, "model-a", "vllm:cache_config_info", "block_size=\"16\",num_gpu_blocks=\"40\"") == 1);
    CHECK(msample(t, "b\\\"q", "vllm:num_requests_running", NULL) == 0);
    CHECK(msample(t, "b\\\"q", "vllm:kv_cache_usage_perc", NULL) == 0);
    CHECK(!strstr(t, "vllm:cache_config_info{model_name=\"b"));
    CHECK(msample(t, "model-a", "pith_request_success_total", "finish_reason=\"stop\"") == 1);
    CHECK(msample(t, "b\\\"q", "pith_request_success_total", "finish_reason=\"stop\"") == 0);
    CHECK(msample(t, "b\\\"q", "pith_request_errors_total", "code=\"404\"") == 1);
    CHECK(msample(t, "model-a", "pith_request_errors_total", "code=\"404\"") == 0);
    CHECK(msample(t, "model-a", "pith_weight_version_info", "version=\"a1\"") == 1);
    CHECK(msample(t, "b\\\"q", "pith_weight_version_info", "version=\"0\"") == 1);
    CHECK(msample(t, "model-a", "pith_time_to_first_token_seconds_count", NULL) == 1);
    CHECK(msample(t, "b\\\"q", "pith_time_to_first_token_seconds_bucket", "le=\"+Inf\"") == 0);

    /* Strict structure: HELP then TYPE once per family, and no family's samples after another began. */
    enum { MAX_FAMS = 128 };
    char fams[MAX_FAMS][96];
    char hists[MAX_FAMS][96];
    const char *hist_ptrs[MAX_FAMS];
    int n_fams = 0, n_hists = 0, per_model[2] = {0, 0};
    bool ok = true;
    char current[96] = "";
    for (const char *p = t; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char fam[96];
        if (!strncmp(p, "# HELP ", 7)) {
            family_of(p + 7, len - 7, fam, sizeof fam, hist_ptrs, 0);
            for (int f = 0; f < n_fams; f++)
                if (!strcmp(fams[f], fam)) {
                    ok = false;
                    CHECKF(0, "HELP %s twice", fam);
                }
            const char *type = nl ? nl + 1 : "";
            char want[128];
            snprintf(want, sizeof want, "# TYPE %s ", fam);
            CHECKF(!strncmp(type, want, strlen(want)), "no TYPE right after HELP %s", fam);
            if (n_fams < MAX_FAMS) snprintf(fams[n_fams++], sizeof fams[0], "%s", fam);
            if (!strncmp(type + strlen(want), "histogram", 9) && n_hists < MAX_FAMS) {
                snprintf(hists[n_hists], sizeof hists[0], "%s", fam);
                hist_ptrs[n_hists] = hists[n_hists];
                n_hists++;
            }
            snprintf(current, sizeof current, "%s", fam);
        } else if (len && p[0] != '#') {
            family_of(p, len, fam, sizeof fam, hist_ptrs, n_hists);
            if (strcmp(fam, current)) {
                ok = false;
                CHECKF(0, "sample of %s under %s", fam, current);
            }
            const char *labels = memchr(p, '{', len);
            if (labels && !strncmp(labels, "{model_name=\"model-a\"", 21)) per_model[0]++;
            else if (labels && !strncmp(labels, "{model_name=\"b\\\"q\"", 18)) per_model[1]++;
            else {
                ok = false;
                CHECKF(0, "a sample without model_name first: %.*s", (int)len, p);
            }
        }
        p = nl ? nl + 1 : p + len;
    }
    CHECK(ok);
    CHECK(n_fams >= 34);
    /* model b has every series but cache_config_info and its memory groups' (it is not loaded) */
    CHECKF(per_model[1] > 0 && per_model[0] == per_model[1] + 1 + 3, "%d %d", per_model[0], per_model[1]);
    buf_free(&out);
    metrics_destroy(&ma);
    metrics_destroy(&mb);
}

/* Parses `json` as the body of the given endpoint; returns the status (0 when accepted) and the
 * parameter blamed. */
static int parse(const char *json, gen_kind kind, gen_params *p, char *param) {
    cJSON *body = cJSON_Parse(json);
    api_error e = {0};
    int rc = gen_params_parse(body, kind, p, &e);
    strcpy(param, e.param);
    /* The model name points into the body: drop it before the body goes. */
    p->model = NULL;
    cJSON_Delete(body);
    return rc ? e.status : 0;
}

#define REFUSED(json, kind, name)                                                                  \
    do {                                                                                           \
        gen_params p_;                                                                             \
        char param_[64];                                                                           \
        int st_ = parse(json, kind, &p_, param_);                                                  \
        CHECKF(st_ == 400 && !strcmp(param_, name), "%s: status %d, param '%s'", json, st_, param_); \
        gen_params_free(&p_);                                                                      \
    } while (0)

static void test_params(void) {
    gen_params p;
    char param[64];
    CHECK(parse("{\"prompt\": \"x\"}", GEN_COMPLETION, &p, param) == 0);
    CHECK(p.n == 1 && p.max_tokens == 0 && !p.stream && !p.logprobs && !p.seed_given);
    CHECK(p.sampling.temperature == 1.0f && p.sampling.top_p == 1.0f && p.sampling.top_k == 0 &&
          p.sampling.min_p == 0.0f && p.sampling.repetition_penalty == 1.0f);
    gen_params_free(&p);

    CHECK(parse("{\"temperature\": 0, \"top_k\": -1, \"top_p\": 0.5, \"min_p\": 0.1, \"seed\": -3, \"n\": 3,"
                "\"max_tokens\": 7, \"stop\": \"END\", \"stream\": true, \"stream_options\": {\"include_usage\": true},"
                "\"logprobs\": 2, \"priority\": 5, \"cache_salt\": \"s\", \"ignore_eos\": true, \"stop_token_ids\": [2, 3],"
                "\"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, \"repetition_penalty\": 1.1, \"user\": \"u\","
                "\"unknown_field\": {\"x\": 1}, \"suffix\": \"\", \"best_of\": 1, \"logit_bias\": {}}",
                GEN_COMPLETION, &p, param) == 0);
    CHECK(p.sampling.temperature == 0 && p.sampling.top_k == 0 && p.sampling.top_p == 0.5f && p.n == 3 &&
          p.max_tokens == 7 && p.seed_given && p.sampling.seed == (uint64_t)-3);
    CHECK(p.n_stop == 1 && !strcmp(p.stop[0], "END") && p.stream && p.include_usage);
    CHECK(p.logprobs && p.top_logprobs == 2 && p.priority == 5 && p.cache_salt && !strcmp(p.cache_salt, "s"));
    CHECK(p.ignore_eos && p.n_stop_ids == 2 && p.stop_ids[1] == 3);
    CHECK(p.sampling.presence_penalty == 0.5f && p.sampling.frequency_penalty == -0.5f);
    gen_params_free(&p);

    /* Chat: logprobs is a boolean; max_completion_tokens wins over max_tokens. */
    CHECK(parse("{\"logprobs\": true, \"top_logprobs\": 4, \"max_tokens\": 9, \"max_completion_tokens\": 5}",
                GEN_CHAT, &p, param) == 0);
    CHECK(p.logprobs && p.top_logprobs == 4 && p.max_tokens == 5);
    gen_params_free(&p);
    CHECK(parse("{\"logprobs\": null, \"temperature\": null}", GEN_CHAT, &p, param) == 0); /* null = default */
    CHECK(!p.logprobs && p.sampling.temperature == 1.0f);
    gen_params_free(&p);

    REFUSED("[1]", GEN_COMPLETION, "");
    REFUSED("{\"temperature\": 2.5}", GEN_COMPLETION, "temperature");
    REFUSED("{\"temperature\": \"1\"}", GEN_COMPLETION, "temperature");
    REFUSED("{\"top_p\": 0}", GEN_COMPLETION, "top_p");
    REFUSED("{\"top_p\": 1.01}", GEN_COMPLETION, "top_p");
    REFUSED("{\"top_k\": -2}", GEN_COMPLETION, "top_k");
    REFUSED("{\"min_p\": -0.1}", GEN_COMPLETION, "min_p");
    REFUSED("{\"repetition_penalty\": 0}", GEN_COMPLETION, "repetition_penalty");
    REFUSED("{\"frequency_penalty\": 2.1}", GEN_COMPLETION, "frequency_penalty");
    REFUSED("{\"n\": 17}", GEN_COMPLETION, "n");
    REFUSED("{\"n\": 2.5}", GEN_COMPLETION, "n");
    REFUSED("{\"max_tokens\": 0}", GEN_COMPLETION, "max_tokens");
    REFUSED("{\"max_tokens\": 1e300}", GEN_COMPLETION, "max_tokens");
    REFUSED("{\"seed\": 1.5}", GEN_COMPLETION, "seed");
    REFUSED("{\"stop\": 5}", GEN_COMPLETION, "stop");
    REFUSED("{\"stop\": [\"a\", 5]}", GEN_COMPLETION, "stop");
    REFUSED("{\"stop\": [\"\"]}", GEN_COMPLETION, "stop");
    REFUSED("{\"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}",
            GEN_COMPLETION, "stop");
    REFUSED("{\"stop_token_ids\": [-1]}", GEN_COMPLETION, "stop_token_ids");
    REFUSED("{\"logprobs\": 21}", GEN_COMPLETION, "logprobs");
    REFUSED("{\"logprobs\": 1}", GEN_CHAT, "logprobs");
    REFUSED("{\"top_logprobs\": 3}", GEN_CHAT, "top_logprobs");
    REFUSED("{\"top_logprobs\": 21, \"logprobs\": true}", GEN_CHAT, "top_logprobs");
    REFUSED("{\"stream\": 1}", GEN_COMPLETION, "stream");
    REFUSED("{\"stream_options\": {\"include_usage\": true}}", GEN_COMPLETION, "stream_options");
    REFUSED("{\"stream\": true, \"stream_options\": {\"include_usage\": 1}}", GEN_COMPLETION, "stream_options.include_usage");
    REFUSED("{\"echo\": true}", GEN_COMPLETION, "echo");
    REFUSED("{\"best_of\": 2}", GEN_COMPLETION, "best_of");
    REFUSED("{\"logit_bias\": {\"5\": 1}}", GEN_COMPLETION, "logit_bias");
    REFUSED("{\"response_format\": {\"type\": \"xml\"}}", GEN_CHAT, "response_format");
    REFUSED("{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {}}}", GEN_CHAT,
            "response_format.json_schema.schema");
    REFUSED("{\"grammar\": \"root ::= \\\"a\\\"\", \"guided_json\": {}}", GEN_COMPLETION, "guided_json");
    REFUSED("{\"guided_regex\": 5}", GEN_COMPLETION, "guided_regex");
    REFUSED("{\"structured_outputs\": {\"xml\": 1}}", GEN_COMPLETION, "structured_outputs");
    REFUSED("{\"model\": 3}", GEN_COMPLETION, "model");
    REFUSED("{\"user\": 3}", GEN_COMPLETION, "user");
    REFUSED("{\"priority\": 1e12}", GEN_COMPLETION, "priority");
    REFUSED("{\"cache_salt\": \"\"}", GEN_COMPLETION, "cache_salt");
    REFUSED("{\"max_completion_tokens\": 0}", GEN_CHAT, "max_completion_tokens");
}

static void test_buf(void) {
    buf b = {0};
    buf_puts(&b, "hello");
    buf_printf(&b, " %d", 42);
    CHECK(b.len == 8 && !strcmp(b.data, "hello 42"));
    buf_consume(&b, 6);
    CHECK(b.len == 2 && !strcmp(b.data, "42"));
    for (int i = 0; i < 1000; i++) buf_append(&b, "0123456789", 10);
    CHECK(b.len == 10002 && !b.failed && b.data[b.len] == 0);
    buf_consume(&b, 1u << 20);
    CHECK(b.len == 0);
    buf_free(&b);
}

static void test_cors(void) {
    cors_origins c = {0};
    pith_err err;
    CHECK(!cors_enabled(&c));
    CHECK(cors_allow_origin(&c, "http://a.example") == NULL); /* off: never a header */
    CHECK(cors_add(&c, "http://a.example:5173", &err) == 0);
    CHECK(cors_add(&c, "https://b.example", &err) == 0);
    CHECK(cors_add(&c, "app-scheme+x://host", &err) == 0);
    CHECK(cors_enabled(&c) && !c.any);
    const char *o = "HTTP://A.example:5173";
    CHECK(cors_allow_origin(&c, o) == o); /* echoes the request's own value; case ignored */
    CHECK(cors_allow_origin(&c, "https://b.example") != NULL);
    CHECK(cors_allow_origin(&c, "http://b.example") == NULL);   /* scheme differs */
    CHECK(cors_allow_origin(&c, "http://a.example") == NULL);   /* port differs */
    CHECK(cors_allow_origin(&c, "http://a.example:51730") == NULL);
    CHECK(cors_allow_origin(&c, "https://b.example.evil") == NULL);
    CHECK(cors_allow_origin(&c, "null") == NULL);
    CHECK(cors_allow_origin(&c, "") == NULL);
    CHECK(cors_allow_origin(&c, NULL) == NULL);
    const char *bad[] = {"", "a.example", "http://", "://a.example", "http://a.example/", "http://a.example/x",
                         "http://a b", "http://a.example?q", "http://u@a.example", "ht tp://a", "*.example"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(cors_add(&c, bad[i], &err) == -1);
        CHECK(strstr(err.msg, "CORS origin") != NULL);
    }
    CHECK(cors_add(&c, NULL, &err) == -1);
    CHECK(c.n == 3);
    CHECK(cors_add(&c, "*", &err) == 0);
    CHECK(c.any && !strcmp(cors_allow_origin(&c, "http://anything"), "*"));
    CHECK(cors_allow_origin(&c, NULL) == NULL);
    cors_free(&c);
    CHECK(c.n == 0 && !c.any && !cors_enabled(&c));
}

int main(void) {
    const char *tmp = getenv("PITH_TEST_TMP");
    if (!tmp || !*tmp) tmp = ".";
    test_auth(tmp);
    test_metrics();
    test_metrics_weights();
    test_metrics_kv();
    test_metrics_models();
    test_params();
    test_buf();
    test_cors();
    return check_summary("test_server_units");
}
