/* Running a generation request: checks shared by both endpoints, submitting one engine request per
 * choice, then either streaming the events (stream.c) or waiting and answering with one JSON body. */
#ifndef PITH_SERVER_GENERATE_H
#define PITH_SERVER_GENERATE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "server/http.h"
#include "server/params.h"

typedef struct gen_prompt {
    int32_t *ids;   /* owned */
    int n;
    struct server_images *images; /* owned; NULL: none (images.h: their spans in ids) */
} gen_prompt;

/* Refuses with 503 while the model is loading or the server drains. Returns true when a response was
 * queued (then *rc is what the handler returns). */
bool gen_refuse_unready(http_request *r, enum MHD_Result *rc);
/* A parsed body costs about 80 bytes a JSON value (a cJSON node and its allocation) whatever its text:
 * a 4 MB body of [0,0,...] would be 2M nodes, 160 MB. Values are counted on the text first, and a body
 * with more than this many is refused with 413 before it is parsed (docs/reliability.md). */
#define GEN_MAX_JSON_ITEMS (1 << 20)
/* Parses the body as JSON; on failure queues 400 (413 past GEN_MAX_JSON_ITEMS) and returns NULL (then
 * *rc is set). */
cJSON *gen_parse_body(http_request *r, enum MHD_Result *rc);
/* Called by a handler when it is done with a request: after a large body (GEN_TRIM_BODY bytes or more;
 * its parsed tree and what came of it were many small blocks) the freed heap pages go back to the system,
 * which glibc otherwise keeps, so the server's RSS returns to its baseline. */
#define GEN_TRIM_BODY ((size_t)1 << 20)
void gen_trim_after(const http_request *r);
/* 404 unless `model` is NULL or the served model's name. */
int gen_check_model(pith_server *srv, const char *model, api_error *err);

/* Runs the prompts (each n times) and answers. Takes ownership of the prompts' ids (frees them and the
 * array) but not of p, which must stay valid until the request completes: the caller passes one that
 * it allocated and hands over with it (freed with the request). */
enum MHD_Result gen_run(http_request *r, gen_kind kind, gen_params *p, gen_prompt *prompts, int n_prompts);

/* The length checks gen_run makes on each prompt (400 context_length_exceeded with OpenAI's wording)
 * and the max_tokens the engine then gets (the default when the body gave none): exposed so that the
 * render endpoints (render.c) refuse and report exactly what generation would. */
int gen_check_lengths(pith_server *srv, gen_kind kind, const gen_params *p, const gen_prompt *pr, int *max_tokens,
                      api_error *err);

void gen_prompts_free(gen_prompt *prompts, int n);
/* Frees one prompt's ids and images (a prompt held by value: /tokenize, count_tokens) and zeroes it. */
void gen_prompt_clear(gen_prompt *p);
/* The error for a choice cancelled by the server: shutting down (drain), or aborted by an admin. */
void gen_cancelled_error(pith_server *srv, api_error *e);
/* The error for a choice the model failed: 503 when another rank of a tensor-parallel job failed (the
 * request may succeed elsewhere), else 500. */
void server_model_error(pith_server *srv, api_error *e);

/* chat_completions.c: renders body.messages with the chat template and encodes it. */
int chat_build_prompt(pith_server *srv, const cJSON *body, gen_prompt *out, api_error *err);
struct chat_tools;
int chat_build_prompt_tools(pith_server *srv, const cJSON *body, struct chat_tools *tools, gen_prompt *out, api_error *err);

#endif
