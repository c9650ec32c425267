/* The answers of /v1/messages (Anthropic's Messages API): the message object, its stream of events, and
 * errors in Anthropic's shape.
 *
 * The output parser's operations (tools_out.h) become content blocks in the order they happened: a
 * "thinking" block (signature ""), a "text" block, one "tool_use" block per call (id "toolu_...", input
 * the parsed arguments). A call whose arguments are not a JSON object becomes a text block saying so.
 * Whitespace alone never opens a block. stop_reason: "max_tokens" when the output was cut, "tool_use"
 * when a tool_use block was produced, "stop_sequence" (with stop_sequence, the string) when one of the
 * request's stop sequences ended it, else "end_turn".
 *
 * Streams (`event: TYPE` + `data: {"type": TYPE, ...}`): message_start (the message with empty content
 * and usage.input_tokens), ping, then per block content_block_start, content_block_delta (text_delta,
 * thinking_delta, input_json_delta) ..., content_block_stop, with index counting up from 0; last
 * message_delta ({stop_reason, stop_sequence}, usage) and message_stop. A failure mid-stream sends an
 * `error` event ({"type": "error", "error": {"type", "message"}}) instead. A tool call's input is sent in
 * pieces as it is generated when the tools' grammar constrains it (it is then JSON); otherwise the call
 * is held until it ends, and sent whole (or as a text block when it is not JSON). */
#ifndef PITH_SERVER_MESSAGES_OUT_H
#define PITH_SERVER_MESSAGES_OUT_H

#include <cjson/cJSON.h>

#include "server/api_error.h"
#include "server/format.h"

typedef struct msg_out msg_out;
/* Takes data (an event object with its "type"). */
typedef void (*msg_put)(void *ctx, cJSON *data);

/* The input token count the message reports is read from o->p->tools->echo's "input_tokens" (set by
 * messages.c); the stop sequences need o->p->return_token_ids (the output's and prompt's ids). */
msg_out *msg_out_new(gen_output *o);
void msg_out_free(msg_out *s);
/* Streams: message_start and a ping. */
void msg_stream_open(msg_out *s, msg_put put, void *ctx);
/* Streams: feeds one job event and sends what it produced. Returns -1 when out of memory. */
int msg_stream_event(msg_out *s, const job_event *ev, msg_put put, void *ctx);
/* Streams: message_delta and message_stop. */
void msg_stream_close(msg_out *s, msg_put put, void *ctx);
/* Streams: the error event for an HTTP status and message. */
void msg_stream_error(msg_out *s, int status, const char *message, msg_put put, void *ctx);
/* The whole message once generation ended (every event went through out_apply). */
cJSON *messages_object(gen_output *o);

/* Errors: Anthropic's error type for an HTTP status, the status Anthropic uses (529 for 503: overloaded),
 * and {"type": "error", "error": {"type", "message"}} (NULL when out of memory). */
const char *anthropic_error_type(int status);
int anthropic_status(int status);
cJSON *anthropic_error_json(const api_error *e);

#endif
