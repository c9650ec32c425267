/* Unit tests of the server's pieces that need no model: API key checks and key files, the metrics
 * exposition (histogram buckets cumulative, sums, every labelled series present), the reading of
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

/* The weights' series: the version as a label (escaped), reloads, the last reload's times, the engine's
 * generation, restarts and pause / sleep states. */
static void test_metrics_weights(void) {
    metrics_weights w = {.version = "step\"7\\x", .reloads = 3, .last_pause_s = 0.25, .last_load_s = 1.5};
    pith_engine_stats st = {.weight_generation = 3, .requests_restarted = 5, .paused = true};
    buf out = {0};
    metrics_render_weights(&w, &st, &out);
    const char *t = out.data;
    CHECK(!out.failed && t);
    CHECK(sample(t, "pith_weight_version_info{version=\"step\\\"7\\\\x\"}") == 1);
    CHECK(sample(t, "pith_weight_generation") == 3);
    CHECK(sample(t, "pith_weight_reloads_total") == 3);
    CHECK(sample(t, "pith_weight_reload_pause_seconds") == 0.25);
    CHECK(sample(t, "pith_weight_reload_load_seconds") == 1.5);
    CHECK(sample(t, "pith_requests_restarted_total") == 5);
    CHECK(sample(t, "pith_admission_paused") == 1);
    CHECK(sample(t, "pith_asleep") == 0);
    buf_free(&out);
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
    metrics_render(&m, &st, &out);
    CHECK(!out.failed && out.len > 0);
    const char *t = out.data;
    CHECK(sample(t, "pith_requests_running") == 2);
    CHECK(sample(t, "pith_requests_waiting") == 3);
    CHECK(sample(t, "pith_kv_blocks_in_use") == 7); /* cached blocks are not in use */
    CHECK(sample(t, "pith_kv_blocks_total") == 64);
    CHECK(sample(t, "pith_memory_units{group=\"0\",kind=\"window\",window=\"8\",state=\"used\"}") == 3);
    CHECK(sample(t, "pith_memory_units{group=\"0\",kind=\"window\",window=\"8\",state=\"free\"}") == 15);
    CHECK(sample(t, "pith_memory_units{group=\"1\",kind=\"full\",window=\"0\",state=\"cached\"}") == 3);
    CHECK(sample(t, "pith_memory_bytes") == 4096);
    CHECK(sample(t, "pith_prefix_cache_hit_tokens_total") == 11);
    CHECK(sample(t, "pith_prompt_tokens_total") == 100);
    CHECK(sample(t, "pith_generation_tokens_total") == 50);
    CHECK(sample(t, "pith_preemptions_total") == 1);
    CHECK(sample(t, "pith_request_success_total{finish_reason=\"stop\"}") == 1);
    CHECK(sample(t, "pith_request_success_total{finish_reason=\"length\"}") == 1);
    CHECK(sample(t, "pith_request_success_total{finish_reason=\"cancelled\"}") == 1);
    CHECK(sample(t, "pith_request_errors_total{code=\"429\"}") == 2);
    CHECK(sample(t, "pith_request_errors_total{code=\"500\"}") == 1);
    CHECK(sample(t, "pith_request_errors_total{code=\"400\"}") == 0); /* present from the start */
    CHECK(sample(t, "pith_request_errors_total{code=\"403\"}") == 1);
    CHECK(sample(t, "pith_request_errors_total{code=\"504\"}") == 0);
    /* TTFT observations 0.003, 0.03, 0.5 (the cancelled request had no token). */
    CHECK(sample(t, "pith_time_to_first_token_seconds_count") == 3);
    CHECK(fabs(sample(t, "pith_time_to_first_token_seconds_sum") - 0.533) < 1e-9);
    CHECK(sample(t, "pith_time_to_first_token_seconds_bucket{le=\"0.001\"}") == 0);
    CHECK(sample(t, "pith_time_to_first_token_seconds_bucket{le=\"0.005\"}") == 1);
    CHECK(sample(t, "pith_time_to_first_token_seconds_bucket{le=\"0.04\"}") == 2);
    CHECK(sample(t, "pith_time_to_first_token_seconds_bucket{le=\"0.5\"}") == 3); /* le is inclusive */
    CHECK(sample(t, "pith_time_to_first_token_seconds_bucket{le=\"+Inf\"}") == 3);
    CHECK(sample(t, "pith_time_per_output_token_seconds_count") == 2);
    CHECK(sample(t, "pith_e2e_request_latency_seconds_count") == 4);
    CHECK(fabs(sample(t, "pith_e2e_request_latency_seconds_sum") - 4.2) < 1e-9);
    /* Buckets never decrease. */
    double prev = -1;
    bool monotone = true;
    for (const char *p = strstr(t, "pith_e2e_request_latency_seconds_bucket"); p; p = strstr(p + 1, "pith_e2e_request_latency_seconds_bucket")) {
        double v = strtod(strchr(p, ' ') + 1, NULL);
        monotone &= v >= prev;
        prev = v;
    }
    CHECK(monotone && prev == 4);
    buf_free(&out);
    /* Before the engine exists the gauges read 0. */
    metrics_render(&m, NULL, &out);
    CHECK(sample(out.data, "pith_requests_running") == 0 && sample(out.data, "pith_kv_blocks_total") == 0);
    buf_free(&out);
    metrics_destroy(&m);
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
    test_params();
    test_buf();
    test_cors();
    return check_summary("test_server_units");
}
