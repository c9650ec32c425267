/* Speculative decoding: where drafts come from and how long they are (engine.h: spec_type).
 *
 * A decoding sequence may carry up to spec_max_draft proposed tokens (seq.draft). The step runs the
 * sequence's last sampled token and its draft as one chunk with a logits row at every position; the
 * engine then samples row by row, exactly as decoding one token at a time would, and keeps going while
 * the token it sampled is the draft's next one. So the output is the target model's own (greedy: the
 * same tokens; sampled: the same distribution, since for a draft that proposes one token "sample, accept
 * if equal" is the rejection rule), and a rejected tail costs only its share of that forward pass: its
 * K/V sits past n_computed, is never named, and is overwritten by later tokens.
 *
 * The policy per sequence: the draft length follows the acceptance (all accepted: two more, up to the
 * maximum; otherwise one more than were accepted), and a sequence whose drafts keep failing (smoothed
 * acceptance under pith_spec_backoff_rate after three tries: 1/5 for a free source such as prompt lookup, more
 * for one whose draft steps cost, such as an MTP head) drafts nothing for 16 steps, then tries a
 * 2-token draft; each further failed try backs off twice as long (up to 256 steps), until the
 * acceptance recovers. An expensive source starts at 2 tokens instead of 4. Drafts are made only
 * while at most spec_max_seqs sequences decode. */
#ifndef PITH_CORE_SPEC_H
#define PITH_CORE_SPEC_H

#include <stdint.h>

#include "core/seq.h"
#include "pith/engine.h"

#define PITH_SPEC_MAX_DRAFT 16

/* Proposes up to max tokens to follow s's tokens into s->draft; returns how many. */
int spec_propose(const pith_engine_options *o, seq *s, int max);
/* The longest n-gram lookup: for n from 4 down to 2, the latest earlier occurrence of the last n tokens
 * of tokens[0..len) and up to max of the tokens that followed it. Returns how many it copied. */
int spec_ngram(const int32_t *tokens, int len, int32_t *draft, int max);
/* After a verification of `drafted` tokens of which `accepted` were: the next draft length and the
 * back-off, below min_rate (pith_spec_backoff_rate, engine.h) of smoothed acceptance. */
void spec_update(seq *s, int max_draft, int drafted, int accepted, float min_rate);
/* The draft length s may try this step (0 while backing off; counts the step); an expensive source
 * (min_rate over 0.3) starts at 2 tokens instead of 4. */
int spec_want(seq *s, int max_draft, float min_rate);

#endif
