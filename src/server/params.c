#include "server/params.h"
#include "server/tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool json_get_int(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18) return false;
    *out = (int64_t)d;
    return true;
}

/* The field, or NULL when absent or JSON null (both mean "default"). */
static const cJSON *field(const cJSON *body, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(const cJSON *body, const char *name, bool *out, api_error *err) {
    const cJSON *v = field(body, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return api_errorf(err, 400, "invalid_type", name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_int(const cJSON *body, const char *name, int64_t lo, int64_t hi, int64_t *out, bool *given,
                   api_error *err) {
    const cJSON *v = field(body, name);
    if (given) *given = v != NULL;
    if (!v) return 0;
    int64_t x;
    if (!json_get_int(v, &x)) return api_errorf(err, 400, "invalid_type", name, "'%s' must be an integer", name);
    if (x < lo || x > hi)
        return api_errorf(err, 400, "invalid_value", name, "'%s' must be between %lld and %lld, got %lld", name,
                          (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return 0;
}

/* lo_open: the lower bound itself is not allowed. */
static int get_float(const cJSON *body, const char *name, double lo, bool lo_open, double hi, float *out,
                     api_error *err) {
    const cJSON *v = field(body, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return api_errorf(err, 400, "invalid_type", name, "'%s' must be a number", name);
    double x = v->valuedouble;
    if (x < lo || (lo_open && x == lo) || x > hi)
        return api_errorf(err, 400, "invalid_value", name, "'%s' must be in %s%g, %g], got %g", name,
                          lo_open ? "(" : "[", lo, hi, x);
    *out = (float)x;
    return 0;
}

static int parse_stop(const cJSON *body, gen_params *p, api_error *err) {
    const cJSON *v = field(body, "stop");
    if (!v) return 0;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return api_errorf(err, 400, "invalid_type", "stop", "'stop' must be a string or a list of strings");
    if (n > PARAMS_MAX_STOP)
        return api_errorf(err, 400, "invalid_value", "stop", "'stop' may hold at most %d strings", PARAMS_MAX_STOP);
    if (n == 0) return 0;
    p->stop = calloc((size_t)n, sizeof *p->stop);
    if (!p->stop) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s))
            return api_errorf(err, 400, "invalid_type", "stop", "'stop' must be a string or a list of strings");
        size_t len = strlen(s->valuestring);
        if (len == 0 || len > PARAMS_MAX_STOP_LEN)
            return api_errorf(err, 400, "invalid_value", "stop", "each stop string must hold 1 to %d bytes",
                              PARAMS_MAX_STOP_LEN);
        if (!(p->stop[i] = strdup(s->valuestring))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        p->n_stop++;
    }
    return 0;
}

static int parse_stop_ids(const cJSON *body, gen_params *p, api_error *err) {
    const cJSON *v = field(body, "stop_token_ids");
    if (!v) return 0;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > 256)
        return api_errorf(err, 400, "invalid_value", "stop_token_ids", "'stop_token_ids' must be a list of at most 256 token ids");
    if (n == 0) return 0;
    if (!(p->stop_ids = malloc((size_t)n * sizeof *p->stop_ids)))
        return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        int64_t id;
        if (!json_get_int(cJSON_GetArrayItem(v, i), &id) || id < 0 || id > INT32_MAX)
            return api_errorf(err, 400, "invalid_value", "stop_token_ids", "'stop_token_ids' must hold token ids");
        p->stop_ids[p->n_stop_ids++] = (int32_t)id;
    }
    return 0;
}

static int parse_logprobs(const cJSON *body, gen_kind kind, gen_params *p, api_error *err) {
    int64_t x = 0;
    if (kind == GEN_COMPLETION) {
        /* The legacy API: logprobs is the number of alternatives per token (0 = the sampled one only). */
        const cJSON *v = field(body, "logprobs");
        if (cJSON_IsBool(v)) {
            p->logprobs = cJSON_IsTrue(v);
            return 0;
        }
        bool given;
        if (get_int(body, "logprobs", 0, PARAMS_MAX_TOP_LOGPROBS, &x, &given, err)) return -1;
        p->logprobs = given;
        p->top_logprobs = (int)x;
        return 0;
    }
    if (get_bool(body, "logprobs", &p->logprobs, err)) return -1;
    bool given;
    if (get_int(body, "top_logprobs", 0, PARAMS_MAX_TOP_LOGPROBS, &x, &given, err)) return -1;
    if (given && x > 0 && !p->logprobs)
        return api_errorf(err, 400, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    p->top_logprobs = (int)x;
    return 0;
}

/* return_token_ids, prompt_logprobs and logprobs_mode (vLLM's names). */
static int parse_rl(const cJSON *body, gen_params *p, api_error *err) {
    if (get_bool(body, "return_token_ids", &p->return_token_ids, err)) return -1;
    int64_t x = 0;
    bool given;
    if (get_int(body, "prompt_logprobs", 0, PARAMS_MAX_TOP_LOGPROBS, &x, &given, err)) return -1;
    p->prompt_logprobs = given ? (int)x : -1;
    const cJSON *mode = field(body, "logprobs_mode");
    if (mode) {
        if (!cJSON_IsString(mode) || (strcmp(mode->valuestring, "raw_logprobs") && strcmp(mode->valuestring, "processed_logprobs")))
            return api_errorf(err, 400, "invalid_value", "logprobs_mode",
                              "'logprobs_mode' must be \"raw_logprobs\" or \"processed_logprobs\"");
        p->processed_logprobs = !strcmp(mode->valuestring, "processed_logprobs");
    }
    return 0;
}

/* Fields this server knows and does not implement: refusing beats silently ignoring them. */
static int refuse_unsupported(const cJSON *body, api_error *err) {
    const cJSON *v;
    if ((v = field(body, "echo")) && cJSON_IsTrue(v))
        return api_errorf(err, 400, "unsupported_parameter", "echo", "'echo' is not supported");
    int64_t best_of = 1;
    if (get_int(body, "best_of", 1, 1, &best_of, NULL, err)) {
        api_errorf(err, 400, "unsupported_parameter", "best_of", "'best_of' other than 1 is not supported");
        return -1;
    }
    if ((v = field(body, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return api_errorf(err, 400, "unsupported_parameter", "logit_bias", "'logit_bias' is not supported");
    return 0;
}

/* llama.cpp's extra samplers (sampler.h): DRY, XTC, typical_p, top_n_sigma, with llama.cpp's defaults. */
static int parse_llama_samplers(const cJSON *body, pith_sampling_params *s, api_error *err) {
    const pith_sampling_params d = pith_sampling_defaults();
    s->dry_base = d.dry_base;
    s->dry_allowed_length = d.dry_allowed_length;
    s->dry_penalty_last_n = d.dry_penalty_last_n;
    memcpy(s->dry_sequence_breakers, d.dry_sequence_breakers, sizeof s->dry_sequence_breakers);
    s->xtc_threshold = d.xtc_threshold;
    s->typical_p = d.typical_p;
    s->top_n_sigma = d.top_n_sigma;
    int64_t x = 0;
    if (get_float(body, "dry_multiplier", 0, false, 100, &s->dry_multiplier, err) ||
        get_float(body, "dry_base", 1, false, 100, &s->dry_base, err) ||
        get_float(body, "xtc_probability", 0, false, 1, &s->xtc_probability, err) ||
        get_float(body, "xtc_threshold", 0, false, 1, &s->xtc_threshold, err) ||
        get_float(body, "typical_p", 0, true, 1, &s->typical_p, err) ||
        get_float(body, "top_n_sigma", -1, false, 100, &s->top_n_sigma, err))
        return -1;
    x = s->dry_allowed_length;
    if (get_int(body, "dry_allowed_length", 0, 1 << 30, &x, NULL, err)) return -1;
    s->dry_allowed_length = (int)x;
    x = s->dry_penalty_last_n;
    if (get_int(body, "dry_penalty_last_n", -1, 1 << 30, &x, NULL, err)) return -1;
    s->dry_penalty_last_n = (int)x;
    const cJSON *v = field(body, "dry_sequence_breakers");
    if (v) {
        const char *list[64];
        int n = 0;
        const cJSON *it;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 64)
            return api_errorf(err, 400, "invalid_type", "dry_sequence_breakers",
                              "'dry_sequence_breakers' must be an array of at most 64 strings");
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsString(it) || !it->valuestring[0])
                return api_errorf(err, 400, "invalid_value", "dry_sequence_breakers",
                                  "'dry_sequence_breakers' must hold non-empty strings");
            list[n++] = it->valuestring;
        }
        pith_err e;
        if (pith_sampling_set_dry_breakers(s, list, n, &e))
            return api_errorf(err, 400, "invalid_value", "dry_sequence_breakers", "%s", e.msg);
    }
    return 0;
}

int gen_params_parse(const cJSON *body, gen_kind kind, gen_params *p, api_error *err) {
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->prompt_logprobs = -1;
    p->sampling = (pith_sampling_params){
        .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f,
    };
    if (!cJSON_IsObject(body)) return api_errorf(err, 400, "invalid_type", NULL, "the request body must be a JSON object");

    const cJSON *model = field(body, "model");
    if (model && !cJSON_IsString(model)) return api_errorf(err, 400, "invalid_type", "model", "'model' must be a string");
    p->model = model ? model->valuestring : NULL;
    const cJSON *user = field(body, "user");
    if (user && !cJSON_IsString(user)) return api_errorf(err, 400, "invalid_type", "user", "'user' must be a string");
    if (refuse_unsupported(body, err)) return -1;
    const char *effort;
    if (kind != GEN_COMPLETION && params_reasoning_effort(body, &effort, err)) return -1;

    if (get_bool(body, "stream", &p->stream, err)) return -1;
    const cJSON *so = field(body, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return api_errorf(err, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
        if (!p->stream)
            return api_errorf(err, 400, "invalid_value", "stream_options", "'stream_options' needs 'stream' set to true");
        if (get_bool(so, "include_usage", &p->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return -1;
        }
    }

    int64_t x = 0;
    if (get_int(body, "n", 1, PARAMS_MAX_N, &x, NULL, err)) return -1;
    p->n = (int)(x ? x : 1);
    x = 0;
    if (get_int(body, "max_tokens", 1, 1 << 30, &x, NULL, err)) return -1;
    p->max_tokens = (int)x;
    if (kind == GEN_CHAT) {
        bool given;
        if (get_int(body, "max_completion_tokens", 1, 1 << 30, &x, &given, err)) return -1;
        if (given) p->max_tokens = (int)x;
    }

    pith_sampling_params *s = &p->sampling;
    if (get_float(body, "temperature", 0, false, 2, &s->temperature, err)) return -1;
    if (get_float(body, "top_p", 0, true, 1, &s->top_p, err)) return -1;
    if (get_float(body, "min_p", 0, false, 1, &s->min_p, err)) return -1;
    if (get_float(body, "presence_penalty", -2, false, 2, &s->presence_penalty, err)) return -1;
    if (get_float(body, "frequency_penalty", -2, false, 2, &s->frequency_penalty, err)) return -1;
    if (get_float(body, "repetition_penalty", 0, true, 10, &s->repetition_penalty, err)) return -1;
    if (parse_llama_samplers(body, s, err)) return -1;
    x = 0;
    if (get_int(body, "top_k", -1, 1 << 30, &x, NULL, err)) return -1;
    s->top_k = x > 0 ? (int)x : 0; /* -1 and 0 both mean off */
    if (get_int(body, "seed", INT64_MIN, INT64_MAX, &x, &p->seed_given, err)) return -1;
    if (p->seed_given) s->seed = (uint64_t)x;

    if (parse_stop(body, p, err) || parse_stop_ids(body, p, err) || parse_logprobs(body, kind, p, err)) return -1;
    if (get_bool(body, "ignore_eos", &p->ignore_eos, err) || parse_rl(body, p, err)) return -1;
    x = 0;
    if (get_int(body, "priority", -1000000, 1000000, &x, NULL, err)) return -1;
    p->priority = (int)x;
    const cJSON *salt = field(body, "cache_salt");
    if (salt) {
        if (!cJSON_IsString(salt) || !salt->valuestring[0] || strlen(salt->valuestring) > 1024)
            return api_errorf(err, 400, "invalid_value", "cache_salt", "'cache_salt' must be a string of 1 to 1024 bytes");
        if (!(p->cache_salt = strdup(salt->valuestring))) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    return structured_parse(body, p, err);
}

int params_reasoning_effort(const cJSON *body, const char **out, api_error *err) {
    *out = NULL;
    const cJSON *v = field(body, "reasoning_effort");
    if (!v) return 0;
    static const char *const ok[] = {"low", "medium", "high"};
    for (size_t i = 0; cJSON_IsString(v) && i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(v->valuestring, ok[i])) return (*out = ok[i]), 0;
    return api_errorf(err, 400, "invalid_value", "reasoning_effort", "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
}

void gen_params_free(gen_params *p) {
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
    free(p->cache_salt);
    for (int i = 0; i < p->n_prompt_ids; i++) free(p->prompt_ids[i]);
    free(p->prompt_ids);
    free(p->prompt_n);
    chat_tools_free(p->tools);
    free(p->grammar_src);
    pith_grammar_release(p->grammar);
    memset(p, 0, sizeof *p);
}
