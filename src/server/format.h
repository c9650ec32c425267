/* Response shapes of the generation endpoints, streamed or not: text_completion for /v1/completions,
 * chat.completion(.chunk) for /v1/chat/completions, their logprobs (the legacy per-field arrays for
 * completions, the per-token objects for chat), and usage.
 *
 * A gen_output holds the per-choice state both modes need (text so far, logprobs, finish reason,
 * usage). Choice i answers prompt i / n; usage counts each prompt's tokens once (from its first
 * choice) and every choice's completion tokens. */
#ifndef PITH_SERVER_FORMAT_H
#define PITH_SERVER_FORMAT_H

#include <cjson/cJSON.h>

#include "server/buf.h"
#include "server/job.h"
#include "server/params.h"

typedef struct out_choice {
    buf text;
    size_t text_offset;       /* bytes of text released so far (completions logprobs text_offset) */
    cJSON *logprobs;          /* non-streaming: accumulated logprobs object, NULL when not asked */
    bool done;
    pith_finish_reason finish;
    pith_usage usage;
    /* format_rl.c: token ids, prompt logprobs, weight generation, restarts */
    int32_t *ids;             /* output token ids (return_token_ids) */
    int n_ids, cap_ids;
    cJSON *prompt_lp;         /* prompt_logprobs so far ([null, {...}, ...]); streaming: not yet sent */
    bool sent_prompt_ids;     /* streaming: prompt_token_ids went out */
    uint64_t gen;             /* weight generation of the last event */
    bool restarted;
} out_choice;

typedef struct gen_output {
    pith_server *srv;
    gen_kind kind;
    const gen_params *p;
    char id[48];
    long long created;
    int n_choices;
    out_choice *choices;
    struct tools_out *tools;  /* tools_out.h: the output is parsed for tool calls and reasoning */
} gen_output;

int out_init(gen_output *o, pith_server *srv, gen_kind kind, const gen_params *p, int n_choices);
void out_free(gen_output *o);

/* Non-streaming: folds one event into its choice. Returns -1 when out of memory. */
int out_apply(gen_output *o, const job_event *ev);
/* The whole response once every choice is done. */
cJSON *out_response(gen_output *o);

/* Streaming. The chunk for one event (also recording finish and usage), or NULL when the event carries
 * nothing to send (no text, no logprobs, not final). Sets *oom on allocation failure. */
cJSON *out_chunk(gen_output *o, const job_event *ev, bool *oom);
/* Chat streams open each choice with a chunk carrying the assistant role (gen: its weight generation). */
cJSON *out_role_chunk(gen_output *o, int choice, uint64_t gen);
/* The final usage chunk (choices: []). */
cJSON *out_usage_chunk(gen_output *o);

/* "stop" / "length"; NULL for other reasons. */
const char *out_finish_str(pith_finish_reason r);

#endif
