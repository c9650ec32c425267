/* Structured output parameters (docs/api.md#structured-output): OpenAI's response_format (json_object,
 * json_schema), llama.cpp's grammar and json_schema, vLLM's structured_outputs and guided_json /
 * guided_regex / guided_choice / guided_grammar. At most one may be given. Read by gen_params_parse
 * into (kind, source); compiled against the served tokenizer's vocabulary by gen_params_compile, where a
 * grammar that does not compile is a 400 naming the problem: the output is never silently
 * unconstrained. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Compiled grammars are kept (the last GRAMMAR_CACHE by use, keyed by kind and source, GRAMMAR_CACHE_BYTES
 * in all as pith_grammar_bytes counts them at each insertion): a repeated schema skips compilation, and
 * its automaton and per-position masks, learnt by earlier requests, are shared. The cache has its own
 * lock, never jobs_lock, and evicted grammars are released after it is unlocked: freeing one walks all
 * its tables, and no request or engine step may wait on that. At most GRAMMAR_COMPILES compilations run
 * at once (each is bounded by the grammar's own limits, pith/grammar.h); a request beyond them waits for
 * one to finish, then looks in the cache again (parallel requests with one new schema compile it once
 * or twice, not once each), and after GRAMMAR_COMPILE_WAIT_S gets a 429. */
#define GRAMMAR_CACHE 16
#define GRAMMAR_CACHE_BYTES ((size_t)256 << 20)
#define GRAMMAR_COMPILES 2
#define GRAMMAR_COMPILE_WAIT_S 30.0

typedef struct cached_grammar {
    pith_grammar_kind kind;
    char *src;
    pith_grammar *g;
    uint64_t used;
} cached_grammar;

typedef struct grammar_cache grammar_cache;
struct grammar_cache {
    pthread_mutex_t lock;
    pthread_cond_t done; /* a compilation finished */
    int compiling;
    uint64_t clock;
    cached_grammar e[GRAMMAR_CACHE];
};

void structured_cache_free(pith_server *srv) {
    grammar_cache *c = srv->grammar_cache;
    if (!c) return;
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        free(c->e[i].src);
        pith_grammar_release(c->e[i].g);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done);
    free(c);
    srv->grammar_cache = NULL;
}

/* The server's cache, made at first use (jobs_lock guards only that moment). */
static grammar_cache *cache_of(pith_server *srv) {
    pthread_mutex_lock(&srv->jobs_lock);
    grammar_cache *c = srv->grammar_cache;
    if (!c && (c = calloc(1, sizeof *c))) {
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->done, NULL);
        srv->grammar_cache = c;
    }
    pthread_mutex_unlock(&srv->jobs_lock);
    return c;
}

static pith_grammar *lookup(grammar_cache *c, pith_grammar_kind kind, const char *src) {
    for (int i = 0; i < GRAMMAR_CACHE; i++)
        if (c->e[i].g && c->e[i].kind == kind && strcmp(c->e[i].src, src) == 0) {
            c->e[i].used = ++c->clock;
            return pith_grammar_retain(c->e[i].g);
        }
    return NULL;
}

/* Keeps g under key (taking key), moving the entries it displaces into out[] (c->lock held; the caller
 * releases them after unlocking). Returns how many were moved. */
static int insert(grammar_cache *c, pith_grammar_kind kind, char *key, pith_grammar *g, cached_grammar *out) {
    size_t size = pith_grammar_bytes(g), total = size;
    int n_out = 0;
    if (size > GRAMMAR_CACHE_BYTES) { /* larger than the whole cache: not kept */
        out[n_out++] = (cached_grammar){.src = key};
        return n_out;
    }
    int free_slot = -1;
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        if (c->e[i].g) total += pith_grammar_bytes(c->e[i].g);
        else if (free_slot < 0) free_slot = i;
    }
    while (free_slot < 0 || total > GRAMMAR_CACHE_BYTES) {
        int victim = -1;
        for (int i = 0; i < GRAMMAR_CACHE; i++)
            if (c->e[i].g && (victim < 0 || c->e[i].used < c->e[victim].used)) victim = i;
        if (victim < 0) break;
        total -= pith_grammar_bytes(c->e[victim].g);
        out[n_out++] = c->e[victim];
        c->e[victim] = (cached_grammar){0};
        if (free_slot < 0) free_slot = victim;
    }
    c->e[free_slot] = (cached_grammar){.kind = kind, .src = key, .g = pith_grammar_retain(g), .used = ++c->clock};
    return n_out;
}

/* Waits (c->lock held) until a compilation may start or the grammar is in the cache: 0 with *hit set
 * or a slot taken, else the error. */
static int wait_turn(pith_server *srv, grammar_cache *c, gen_params *p, api_error *err) {
    double until = server_now() + GRAMMAR_COMPILE_WAIT_S;
    for (;;) {
        if ((p->grammar = lookup(c, p->grammar_kind, p->grammar_src))) return 0;
        if (c->compiling < GRAMMAR_COMPILES) {
            c->compiling++;
            return 0;
        }
        double left = until - server_now();
        if (atomic_load(&srv->stopping))
            return api_errorf(err, 503, "shutting_down", NULL, "the server is shutting down");
        if (left <= 0)
            return api_errorf(err, 429, "too_many_compilations", p->grammar_param,
                              "%d grammar compilations are running (the limit) and none finished within %.0f s; "
                              "retry later", GRAMMAR_COMPILES, GRAMMAR_COMPILE_WAIT_S);
        server_cond_wait(&c->done, &c->lock, left < 0.25 ? left : 0.25); /* short steps: shutdown is noticed */
    }
}

int gen_params_compile(pith_server *srv, gen_params *p, api_error *err) {
    if (!p->grammar_src) return 0;
    grammar_cache *c = cache_of(srv);
    if (!c) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    pthread_mutex_lock(&c->lock);
    pith_err e = {{0}};
    /* under the cache's lock: requests without a grammar never wait for it */
    if (!srv->grammar_vocab && pith_grammar_vocab_from_tokenizer(srv->tok, server_n_vocab(srv), &srv->grammar_vocab, &e)) {
        pthread_mutex_unlock(&c->lock);
        return api_errorf(err, 500, "internal_error", NULL, "structured output: %s", e.msg);
    }
    const pith_grammar_vocab *v = srv->grammar_vocab;
    int rc = wait_turn(srv, c, p, err);
    pthread_mutex_unlock(&c->lock);
    if (rc || p->grammar) return rc;
    rc = pith_grammar_compile(v, p->grammar_kind, p->grammar_src, strlen(p->grammar_src), &p->grammar, &e);
    char *key = rc ? NULL : strdup(p->grammar_src);
    cached_grammar gone[GRAMMAR_CACHE + 1];
    int n_gone = 0;
    pthread_mutex_lock(&c->lock);
    c->compiling--;
    pthread_cond_broadcast(&c->done);
    if (key) n_gone = insert(c, p->grammar_kind, key, p->grammar, gone);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < n_gone; i++) {
        free(gone[i].src);
        pith_grammar_release(gone[i].g);
    }
    if (rc) return api_errorf(err, 400, "invalid_grammar", p->grammar_param, "'%s': %s", p->grammar_param, e.msg);
    return 0;
}
