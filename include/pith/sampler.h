/* Sampling: logits row to one token id.
 *
 * Order of operations (as llama.cpp and vLLM do): penalties (repetition, presence, frequency) over the
 * history the caller passes, then temperature 0 means greedy (argmax, ties to the lowest id); otherwise
 * top-k, temperature, softmax, top-p, min-p, and a draw from the seeded generator. Same seed and same
 * inputs give the same draws. A constraint (pith_sampler_sample_constrained) masks disallowed tokens before
 * all of it. A sampler is per sequence and not thread-safe.
 *
 * Cost: a few passes over the row. Top-k keeps its k by a heap; without top-k, top-p and min-p sort only
 * the candidates above a threshold they imply, and with no filter nothing is sorted (the draw walks the
 * ids in order). Only a recorded distribution over a whole vocabulary sorts all of it
 * (tools/sampler_bench.c; docs/performance.md, "Sampling"). */
#ifndef PITH_SAMPLER_H
#define PITH_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_sampling_params {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; >1 discourages tokens in the history (divides positive logits) */
    float presence_penalty;   /* 0: off; subtracted once for each token present in the history */
    float frequency_penalty;  /* 0: off; subtracted per occurrence in the history */
    uint64_t seed;
} pith_sampling_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off, seed 0. */
PITH_API pith_sampling_params pith_sampling_defaults(void);
/* Checks ranges; fills err naming the bad parameter. */
PITH_API int pith_sampling_validate(const pith_sampling_params *p, pith_err *err);

typedef struct pith_sampler pith_sampler;

PITH_API int pith_sampler_new(const pith_sampling_params *p, int n_vocab, pith_sampler **out, pith_err *err);
PITH_API void pith_sampler_free(pith_sampler *s);
/* Picks a token from logits[n_vocab] (modified in place: penalties and temperature are applied to it).
 * history: tokens the penalties look at (may be NULL when n_history is 0). */
PITH_API int32_t pith_sampler_sample(pith_sampler *s, float *logits, const int32_t *history, int n_history);

/* The processed distribution (logprobs_mode "processed_logprobs"): with recording on, each
 * pith_sampler_sample keeps the distribution it drew from: the candidates left after top-k, top-p and
 * min-p, with their probabilities from the softmax of the penalised logits over temperature,
 * renormalised over those left. Greedy sampling (temperature 0) records the log-softmax of the
 * penalised logits over the whole vocabulary (temperature 1, no truncation). Off by default (it costs a
 * softmax per greedy step). */
PITH_API void pith_sampler_record(pith_sampler *s, bool on);
/* After a recorded sample: the number of tokens with nonzero probability; entry i (0 <= i < that, most
 * likely first, ties to the lower id) through *id and its natural-log probability through *logprob. */
PITH_API int pith_sampler_dist_size(const pith_sampler *s);
PITH_API void pith_sampler_dist_at(const pith_sampler *s, int i, int32_t *id, float *logprob);
/* Natural-log probability of `id` in the recorded distribution; -INFINITY outside it. */
PITH_API float pith_sampler_dist_logprob(const pith_sampler *s, int32_t id);
/* A constraint on the next token (structured output, grammar.h). fill writes the mask of allowed tokens
 * (bit id % 32 of word id / 32; 1 = allowed) and returns how many are allowed, or -1 on failure; allows
 * (may be NULL) answers for one token, cheaper than a whole mask. */
typedef struct pith_token_constraint {
    int (*fill)(void *ctx, uint32_t *mask);
    bool (*allows)(void *ctx, int32_t token);
    void *ctx;
} pith_token_constraint;

/* Sets the logits of the tokens the mask disallows to -inf. */
PITH_API void pith_sampler_apply_mask(float *logits, int n_vocab, const uint32_t *mask);
/* pith_sampler_sample over the allowed tokens only: the mask applies before penalties, temperature and
 * the filters, so they see only allowed tokens (a greedy sampler first checks the unconstrained best
 * token with allows, and builds the mask only when it is disallowed). Returns -1 when the constraint
 * allows no token or fails. c NULL: pith_sampler_sample. */
PITH_API int32_t pith_sampler_sample_constrained(pith_sampler *s, float *logits, const int32_t *history,
                                                 int n_history, const pith_token_constraint *c);

#ifdef __cplusplus
}
#endif

#endif
