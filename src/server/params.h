/* Generation parameters of /v1/completions and /v1/chat/completions: read from the JSON body, checked,
 * and mapped to the engine's request fields. Defaults follow OpenAI (temperature 1, top_p 1, n 1;
 * max_tokens 16 for completions, up to the context for chat). Unknown fields are ignored; fields Pith
 * knows but does not implement (echo, best_of > 1, logit_bias) are refused with 400 rather than
 * silently ignored. Structured output (response_format, grammar, guided_*...) is read by structured.c. */
#ifndef PITH_SERVER_PARAMS_H
#define PITH_SERVER_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pith/grammar.h"
#include "pith/sampler.h"
#include "pith/server.h"
#include "server/api_error.h"

#define PARAMS_MAX_N 16         /* choices per prompt */
#define PARAMS_MAX_STOP 16      /* stop strings */
#define PARAMS_MAX_STOP_LEN 256 /* bytes per stop string */
#define PARAMS_MAX_TOP_LOGPROBS 20

typedef struct gen_params {
    const char *model;         /* as requested (view into the body), NULL when absent */
    bool stream;
    bool include_usage;        /* stream_options.include_usage */
    int n;
    int max_tokens;            /* 0: not given */
    pith_sampling_params sampling;
    bool seed_given;
    char **stop;               /* owned */
    int n_stop;
    int32_t *stop_ids;         /* owned; extension stop_token_ids */
    int n_stop_ids;
    bool logprobs;
    int top_logprobs;
    bool ignore_eos;           /* extension */
    int priority;              /* extension: larger is more important */
    char *cache_salt;          /* extension; owned, NULL when absent */
    /* RL serving extensions (vLLM's names, docs/rl.md) */
    bool return_token_ids;     /* prompt_token_ids on the response, token_ids on each choice */
    int prompt_logprobs;       /* -1: off; else the alternatives per prompt token (0..20) */
    bool processed_logprobs;   /* logprobs_mode "processed_logprobs" (default "raw_logprobs") */
    /* The prompts' token ids, kept for the response when return_token_ids or prompt_logprobs asks for
     * them (owned; set by gen_run). */
    int32_t **prompt_ids;
    int *prompt_n;
    int n_prompt_ids;
    struct chat_tools *tools;  /* tools.h; owned, NULL when the output needs no parsing */
    /* structured output (structured.c): what constrains the output, NULL grammar_src when nothing */
    pith_grammar_kind grammar_kind;
    char *grammar_src;         /* owned */
    const char *grammar_param; /* the parameter it came from, for errors */
    pith_grammar *grammar;     /* one reference, after gen_params_compile */
} gen_params;

typedef enum gen_kind { GEN_COMPLETION, GEN_CHAT, GEN_RESPONSES, GEN_MESSAGES } gen_kind; /* RESPONSES: /v1/responses, MESSAGES: /v1/messages, parsed as chat */

/* Fills p from body (a JSON object). On failure fills err (400) and returns -1; p is freed either way
 * by gen_params_free. */
int gen_params_parse(const cJSON *body, gen_kind kind, gen_params *p, api_error *err);
void gen_params_free(gen_params *p);
/* Compiles the structured-output constraint, if any, for the served vocabulary (400 naming the
 * parameter and the problem when it does not compile). */
int gen_params_compile(pith_server *srv, gen_params *p, api_error *err);
/* structured.c: reads response_format, grammar, json_schema, guided_*, structured_outputs. */
int structured_parse(const cJSON *body, gen_params *p, api_error *err);
/* Releases the compiled grammars kept for srv (before its vocabulary is freed). */
void structured_cache_free(pith_server *srv);

/* reasoning_effort (OpenAI's chat field; the Responses API's reasoning.effort maps onto it): NULL when
 * absent or null, else "low", "medium" or "high" (the values harmony's system message knows); anything
 * else is a 400 naming the parameter. The chat template sees it as the variable reasoning_effort. */
int params_reasoning_effort(const cJSON *body, const char **out, api_error *err);

/* Helpers shared by the request readers. A JSON number is an integer when it has no fractional part
 * and fits in int64. */
bool json_get_int(const cJSON *v, int64_t *out);

#endif
