/* Structured output parameters (docs/api.md#structured-output): OpenAI's response_format (json_object,
 * json_schema), llama.cpp's grammar and json_schema, vLLM's structured_outputs and guided_json /
 * guided_regex / guided_choice / guided_grammar. At most one may be given. Read by gen_params_parse
 * into (kind, source); compiled against the served tokenizer's vocabulary by gen_params_compile, where a
 * grammar that does not compile is a 400 naming the problem: the output is never silently
 * unconstrained. */
#include <stdlib.h>
#include <string.h>

#include "server/params.h"
#include "server/server_internal.h"

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Records one constraint; a second one is an error. src: a string's text or a JSON value printed. */
static int take(gen_params *p, pith_grammar_kind kind, const cJSON *v, const char *param, bool want_string,
                api_error *err) {
    if (p->grammar_param)
        return api_errorf(err, 400, "invalid_request", param, "'%s' and '%s' both constrain the output; give one",
                          p->grammar_param, param);
    char *src;
    if (want_string) {
        if (!cJSON_IsString(v)) return api_errorf(err, 400, "invalid_type", param, "'%s' must be a string", param);
        src = strdup(v->valuestring);
    } else if (cJSON_IsString(v)) { /* a schema or choice list given as JSON text */
        src = strdup(v->valuestring);
    } else {
        src = cJSON_PrintUnformatted(v);
    }
    if (!src) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    p->grammar_kind = kind;
    p->grammar_src = src;
    p->grammar_param = param;
    return 0;
}

static int response_format(const cJSON *rf, gen_params *p, api_error *err) {
    const cJSON *t = field(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
        return api_errorf(err, 400, "invalid_type", "response_format", "'response_format' must be an object with a 'type'");
    if (strcmp(t->valuestring, "text") == 0) return 0;
    if (strcmp(t->valuestring, "json_object") == 0) {
        const cJSON *schema = field(rf, "schema"); /* llama.cpp's extension */
        if (schema) return take(p, PITH_GRAMMAR_JSON_SCHEMA, schema, "response_format.schema", false, err);
        if (p->grammar_param)
            return api_errorf(err, 400, "invalid_request", "response_format",
                              "'%s' and 'response_format' both constrain the output; give one", p->grammar_param);
        p->grammar_kind = PITH_GRAMMAR_JSON;
        p->grammar_src = strdup("");
        p->grammar_param = "response_format";
        return p->grammar_src ? 0 : api_errorf(err, 500, "internal_error", NULL, "out of memory");
    }
    if (strcmp(t->valuestring, "json_schema") == 0) {
        const cJSON *js = field(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return api_errorf(err, 400, "invalid_type", "response_format.json_schema",
                              "'response_format.json_schema' must be an object");
        const cJSON *strict = field(js, "strict");
        if (strict && !cJSON_IsBool(strict))
            return api_errorf(err, 400, "invalid_type", "response_format.json_schema.strict",
                              "'response_format.json_schema.strict' must be a boolean");
        const cJSON *schema = field(js, "schema");
        if (!schema)
            return api_errorf(err, 400, "invalid_value", "response_format.json_schema.schema",
                              "'response_format.json_schema.schema' is required");
        /* strict: a oneOf that might match twice is a 400 rather than output that may not validate */
        return take(p, cJSON_IsTrue(strict) ? PITH_GRAMMAR_JSON_SCHEMA_STRICT : PITH_GRAMMAR_JSON_SCHEMA, schema,
                    "response_format.json_schema.schema", false, err);
    }
    return api_errorf(err, 400, "invalid_value", "response_format",
                      "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
}

int structured_parse(const cJSON *body, gen_params *p, api_error *err) {
    const cJSON *v;
    if ((v = field(body, "response_format")) && response_format(v, p, err)) return -1;
    if ((v = field(body, "grammar")) && take(p, PITH_GRAMMAR_GBNF, v, "grammar", true, err)) return -1;
    if ((v = field(body, "json_schema")) && take(p, PITH_GRAMMAR_JSON_SCHEMA, v, "json_schema", false, err)) return -1;
    if ((v = field(body, "guided_json")) && take(p, PITH_GRAMMAR_JSON_SCHEMA, v, "guided_json", false, err)) return -1;
    if ((v = field(body, "guided_regex")) && take(p, PITH_GRAMMAR_REGEX, v, "guided_regex", true, err)) return -1;
    if ((v = field(body, "guided_choice")) && take(p, PITH_GRAMMAR_CHOICE, v, "guided_choice", false, err)) return -1;
    if ((v = field(body, "guided_grammar")) && take(p, PITH_GRAMMAR_GBNF, v, "guided_grammar", true, err)) return -1;
    if ((v = field(body, "guided_whitespace_pattern")))
        return api_errorf(err, 400, "unsupported_parameter", "guided_whitespace_pattern",
                          "'guided_whitespace_pattern' is not supported");
    const cJSON *so = field(body, "structured_outputs");
    if (so) {
        if (!cJSON_IsObject(so))
            return api_errorf(err, 400, "invalid_type", "structured_outputs", "'structured_outputs' must be an object");
        for (const cJSON *k = so->child; k; k = k->next) {
            if (cJSON_IsNull(k)) continue;
            int rc;
            if (strcmp(k->string, "json") == 0) rc = take(p, PITH_GRAMMAR_JSON_SCHEMA, k, "structured_outputs.json", false, err);
            else if (strcmp(k->string, "regex") == 0) rc = take(p, PITH_GRAMMAR_REGEX, k, "structured_outputs.regex", true, err);
            else if (strcmp(k->string, "choice") == 0) rc = take(p, PITH_GRAMMAR_CHOICE, k, "structured_outputs.choice", false, err);
            else if (strcmp(k->string, "grammar") == 0) rc = take(p, PITH_GRAMMAR_GBNF, k, "structured_outputs.grammar", true, err);
            else if (strcmp(k->string, "json_object") == 0) {
                if (!cJSON_IsBool(k))
                    return api_errorf(err, 400, "invalid_type", "structured_outputs.json_object",
                                      "'structured_outputs.json_object' must be a boolean");
                if (!cJSON_IsTrue(k)) continue;
                cJSON empty = {0};
                empty.type = cJSON_String;
                empty.valuestring = "";
                rc = take(p, PITH_GRAMMAR_JSON, &empty, "structured_outputs.json_object", true, err);
            } else if (strcmp(k->string, "disable_fallback") == 0 || strcmp(k->string, "disable_any_whitespace") == 0 ||
                       strcmp(k->string, "disable_additional_properties") == 0 || strcmp(k->string, "backend") == 0) {
                continue; /* backend choices: Pith has one engine and never falls back */
            } else {
                return api_errorf(err, 400, "unsupported_parameter", "structured_outputs",
                                  "'structured_outputs.%s' is not supported", k->string);
            }
            if (rc) return -1;
        }
    }
    return 0;
}

/* Compiled grammars are kept (the last GRAMMAR_CACHE by use, keyed by kind and source): a repeated
 * schema skips compilation, and its automaton and per-position masks, learnt by earlier requests, are
 * shared. Guarded by jobs_lock. */
#define GRAMMAR_CACHE 16

typedef struct cached_grammar {
    pith_grammar_kind kind;
    char *src;
    pith_grammar *g;
    uint64_t used;
} cached_grammar;

static cached_grammar cache[GRAMMAR_CACHE];
static const pith_server *cache_owner;
static uint64_t cache_clock;

static void cache_clear(void) {
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        free(cache[i].src);
        pith_grammar_release(cache[i].g);
        memset(&cache[i], 0, sizeof cache[i]);
    }
}

void structured_cache_free(const pith_server *srv) {
    if (cache_owner == srv) {
        cache_clear();
        cache_owner = NULL;
    }
}

int gen_params_compile(pith_server *srv, gen_params *p, api_error *err) {
    if (!p->grammar_src) return 0;
    pthread_mutex_lock(&srv->jobs_lock);
    pith_err e = {{0}};
    int rc = 0;
    if (!srv->grammar_vocab) rc = pith_grammar_vocab_from_tokenizer(srv->tok, &srv->grammar_vocab, &e);
    const pith_grammar_vocab *v = srv->grammar_vocab;
    if (!rc && cache_owner != srv) { /* one server per process in practice; another one starts afresh */
        cache_clear();
        cache_owner = srv;
    }
    for (int i = 0; !rc && i < GRAMMAR_CACHE; i++)
        if (cache[i].g && cache[i].kind == p->grammar_kind && strcmp(cache[i].src, p->grammar_src) == 0) {
            p->grammar = pith_grammar_retain(cache[i].g);
            cache[i].used = ++cache_clock;
            break;
        }
    pthread_mutex_unlock(&srv->jobs_lock);
    if (rc) return api_errorf(err, 500, "internal_error", NULL, "structured output: %s", e.msg);
    if (p->grammar) return 0;
    if (pith_grammar_compile(v, p->grammar_kind, p->grammar_src, strlen(p->grammar_src), &p->grammar, &e))
        return api_errorf(err, 400, "invalid_grammar", p->grammar_param, "'%s': %s", p->grammar_param, e.msg);
    char *key = strdup(p->grammar_src);
    if (!key) return 0;
    pthread_mutex_lock(&srv->jobs_lock);
    if (cache_owner == srv) {
        int victim = 0;
        for (int i = 1; i < GRAMMAR_CACHE; i++)
            if (cache[i].used < cache[victim].used) victim = i;
        free(cache[victim].src);
        pith_grammar_release(cache[victim].g);
        cache[victim] = (cached_grammar){.kind = p->grammar_kind, .src = key, .g = pith_grammar_retain(p->grammar),
                                         .used = ++cache_clock};
        key = NULL;
    }
    pthread_mutex_unlock(&srv->jobs_lock);
    free(key);
    return 0;
}
