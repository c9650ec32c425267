/* The RL-serving parts of the response shapes (format.h): weight versions on every response object and
 * streamed chunk (system_fingerprint "pith-<version>", weight_version), token ids (return_token_ids:
 * prompt_token_ids, token_ids), prompt_logprobs (vLLM's shape: a list with null for the first prompt
 * token, then {"<token id>": {"logprob", "rank", "decoded_token"}} holding the prompt token and its
 * alternatives), and restarts (a choice restarted on new weights by a reload in recompute mode: what
 * it produced before is dropped; a streamed restart is a chunk with "restarted": true, after which the
 * client starts the choice's text over). docs/api.md and docs/rl.md describe them. */
#ifndef PITH_SERVER_FORMAT_RL_H
#define PITH_SERVER_FORMAT_RL_H

#include "server/format.h"

/* A logprob as JSON: finite (a token outside a processed distribution, -inf, is written -9999.0, as
 * vLLM does). */
double rl_logprob_value(float lp);
/* system_fingerprint and weight_version for weight generation gen (replacing a null fingerprint). */
void rl_envelope(gen_output *o, cJSON *r, uint64_t gen);
/* Non-streaming: takes prompt and restart events (returns 1: consumed) and records token ids and the
 * generation of token events (returns 0). -1 when out of memory. */
int rl_apply(gen_output *o, out_choice *c, const job_event *ev);
/* Response fields: per choice (token_ids, completions' prompt_token_ids and prompt_logprobs,
 * restarted), and on the response (chat's prompt_token_ids and prompt_logprobs). */
void rl_choice_fields(gen_output *o, int i, cJSON *choice);
void rl_response_fields(gen_output *o, cJSON *r);
/* The generation a whole response reports: the latest its choices ended with. */
uint64_t rl_response_gen(const gen_output *o);
/* Streaming: a prompt event is kept for the choice's next chunk (returns NULL, *consumed); a restart
 * event gives its chunk (*consumed). Otherwise NULL and !*consumed. */
cJSON *rl_stream_event(gen_output *o, const job_event *ev, bool *consumed, bool *oom);
/* Fields of a streamed token or final chunk: token_ids, pending prompt_logprobs, completions'
 * prompt_token_ids on a choice's first chunk. */
void rl_chunk_fields(gen_output *o, const job_event *ev, cJSON *r, cJSON *choice);
/* Chat's first chunk: prompt_token_ids on the response object. */
void rl_role_fields(gen_output *o, cJSON *r);
/* A streamed token event needs a chunk even without text (its token id is asked for). */
bool rl_wants_chunk(const gen_output *o, const job_event *ev);

#endif
