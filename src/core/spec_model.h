/* A draft model for speculative decoding (engine.h: PITH_SPEC_DRAFT): a second, smaller model of the
 * same vocabulary proposes the next tokens greedily, and the target verifies them (spec.h).
 *
 * The draft model runs in an engine of its own (spec_model owns it): its memory is declared by the
 * draft model's memory spec and managed by the core's pools like the target's, so a windowed or
 * recurrent draft works too. A proposal is a greedy request on that engine: its prompt is the
 * sequence's tokens, its length the draft's. The draft engine's prefix cache (blocks of one token) is
 * what keeps, between proposals, the K/V (or the state snapshots) of the tokens it has computed: a
 * proposal finds the longest cached prefix of the sequence's tokens, runs the tokens past it as one
 * chunk and then decodes k - 1 more, one forward pass each. What a sequence computed stays cached, not
 * referenced, after its proposal ends; a full pool evicts the least recently used of it. A proposal
 * that cannot run (too long for the draft's context, the pool too small) proposes nothing: drafting
 * never fails a request.
 *
 * Proposals of several sequences queued with spec_model_add before one spec_model_run share the draft
 * engine's steps (one forward pass of the draft for all of them per step). */
#ifndef PITH_CORE_SPEC_MODEL_H
#define PITH_CORE_SPEC_MODEL_H

#include <stdint.h>

#include "pith/engine.h"

typedef struct spec_model spec_model;

/* A draft engine over `draft` for proposals to sequences of the target `target` (the tokenizer `tok`
 * of the target, may be NULL), up to max_seqs at once and max_seq_len tokens long. Refuses a draft
 * whose vocabulary differs from the target's: by size, or (when both files carry one) by the text of
 * a token. owned: spec_model_free frees the model too. */
int spec_model_create(pith_model *draft, bool owned, const pith_model *target, const pith_tokenizer *tok,
                      int max_seqs, int max_seq_len, spec_model **out, pith_err *err);
void spec_model_free(spec_model *d);

/* Queues a proposal of up to max tokens to follow tokens[0..n): spec_model_run writes them to draft
 * and their count to *n_out (0 until then, and 0 when it cannot propose). */
void spec_model_add(spec_model *d, const int32_t *tokens, int n, int32_t *draft, int max, int *n_out);
/* Runs the queued proposals. */
void spec_model_run(spec_model *d);

/* The draft engine, for its statistics and the integrity check (tests). */
pith_engine *spec_model_engine(spec_model *d);

#endif
