/* The output side of tool calling and reasoning: each choice's text runs through a tool_parse parser,
 * which fills the choice's content, reasoning and calls (for whole responses) and records what changed
 * as a list of operations (for streams: each becomes a chunk or an event). Special tokens that are
 * markers of a format (<|python_tag|>, [TOOL_CALLS], <|channel|>, ...; the engine releases no text for
 * special tokens) are put back into the text the parser reads, right after the event's own text.
 * Tool call ids are "call_" + the response id's serial + the choice and call numbers: unique per server
 * run. */
#ifndef PITH_SERVER_TOOLS_OUT_H
#define PITH_SERVER_TOOLS_OUT_H

#include <cjson/cJSON.h>

#include "pith/tokenizer.h"
#include "server/buf.h"
#include "server/job.h"
#include "server/tools.h"

struct gen_output;

typedef struct tools_call {
    char id[64];
    buf name, args;
} tools_call;

typedef struct tools_op {
    tp_event ev;
    int call;               /* index of the call (CALL_* operations) */
    size_t start, len;      /* the text, in ops_text */
} tools_op;

typedef struct tools_choice {
    tp_parser parser;
    buf content, reasoning;
    tools_call *calls;
    int n_calls, cap_calls;
    bool in_call, finished;
    tools_op *ops;          /* since the last tools_ops_clear */
    int n_ops, cap_ops;
    buf ops_text;
    bool oom;
    const char *id_base;
    int index;
} tools_choice;

typedef struct tools_out {
    const chat_tools *cfg;
    const pith_tokenizer *tok;
    char id_base[48];
    int n_choices;
    tools_choice *ch;
} tools_out;

tools_out *tools_out_new(const chat_tools *cfg, const pith_tokenizer *tok, const char *response_id, int n_choices);
void tools_out_free(tools_out *t);
/* Feeds one job event of a choice (text, a marker token, or the end). Returns -1 when out of memory. */
int tools_out_event(tools_out *t, const job_event *ev);
void tools_ops_clear(tools_choice *c);
const char *tools_op_text(const tools_choice *c, const tools_op *op);

/* Whole chat responses: the message's content (null when only calls were made), reasoning_content
 * and tool_calls, and finish_reason "tool_calls" when the model stopped after calling. */
void tools_out_fix_choice(tools_out *t, int i, cJSON *message, cJSON *choice);
/* Streaming chat: the chunks for one event, each passed to put (which takes it). Returns -1 when out
 * of memory. */
int tools_out_chat_stream(struct gen_output *o, const job_event *ev, void (*put)(void *ctx, cJSON *chunk), void *ctx);

#endif
