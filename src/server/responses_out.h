/* The answers of /v1/responses: the response object, and its stream of events. The output parser's
 * operations (tools_out.h) become output items in the order they happened: a "reasoning" item (its text
 * as a reasoning_text part), a "message" item (one output_text part) and one "function_call" item per
 * call. Streams send OpenAI's sequence: response.created, response.in_progress, then per item
 * response.output_item.added, response.content_part.added, response.output_text.delta (or
 * reasoning_text.delta, or function_call_arguments.delta) ..., the matching .done events,
 * response.content_part.done, response.output_item.done, and last response.completed (or
 * response.incomplete when max_output_tokens cut the output); each event carries type and a growing
 * sequence_number. */
#ifndef PITH_SERVER_RESPONSES_OUT_H
#define PITH_SERVER_RESPONSES_OUT_H

#include <cjson/cJSON.h>

#include "server/format.h"

typedef struct resp_items resp_items;
/* Takes data (an event object with its "type"). */
typedef void (*resp_put)(void *ctx, cJSON *data);

resp_items *resp_items_new(gen_output *o);
void resp_items_free(resp_items *s);
/* Streams: the opening events. */
void resp_stream_open(resp_items *s, resp_put put, void *ctx);
/* Streams: feeds one job event and sends what it produced. Returns -1 when out of memory. */
int resp_stream_event(resp_items *s, const job_event *ev, resp_put put, void *ctx);
/* Streams: the closing event (response.completed or response.incomplete). */
void resp_stream_close(resp_items *s, resp_put put, void *ctx);
/* Streams: an error event ({"type": "error", "code", "message", "param"}). */
void resp_stream_error(resp_items *s, const char *code, const char *message, resp_put put, void *ctx);
/* The response object once generation ended. s: the stream's items, or NULL for a whole response. */
cJSON *responses_object(gen_output *o, resp_items *s);

#endif
