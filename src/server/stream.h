/* Server-Sent Events for a running generation: `data: {chunk}` + blank line per event, a chunk with
 * finish_reason per choice, the usage chunk (choices: []) when stream_options.include_usage, then
 * `data: [DONE]`. A choice that fails or is cancelled by a drain ends the stream with
 * `data: {"error": {...}}` instead. Comment lines (": keep-alive") go out when nothing else has for a
 * while, so idle timeouts on the way do not cut a request that waits in the queue. A client that goes
 * away cancels the job at once. */
#ifndef PITH_SERVER_STREAM_H
#define PITH_SERVER_STREAM_H

#include "server/format.h"
#include "server/http.h"
#include "server/job.h"

/* Queues the stream response for r (whose r->job is submitted). Takes p's contents. */
enum MHD_Result stream_start(http_request *r, gen_kind kind, gen_params *p);

#endif
