/* Sampling: logits row to one token id.
 *
 * Order of operations (llama.cpp's default chain -- penalties, dry, top_n_sigma, top_k, typical_p, top_p,
 * min_p, xtc, temperature, dist -- with the temperature moved before the probability filters, as Pith
 * and vLLM have always applied it):
 *   1. penalties (repetition, presence, frequency) over the whole history the caller passes;
 *   2. DRY over the last dry_penalty_last_n tokens of that history;
 *   then temperature 0 means greedy: the argmax of the logits so far (ties to the lowest id), none of the
 *   filters below (top-k, top-p, min-p and top-n-sigma always keep the best token anyway);
 *   otherwise:
 *   3. top-n-sigma on the logits (scale-free, so before or after the temperature is the same);
 *   4. top-k; 5. temperature and softmax;
 *   6. typical-p; 7. top-p; 8. min-p; 9. XTC, each on the probabilities of the candidates the step
 *   before left, renormalised (as llama.cpp's filters re-run the softmax);
 *   10. a draw from the seeded generator.
 * Typical-p, top-p, min-p and XTC therefore see probabilities at the request's temperature, where
 * llama.cpp's see them at temperature 1 (its temperature comes last): the same at temperature 1.
 * Same seed and same inputs give the same draws (XTC, when on and two or more candidates are left, takes
 * one uniform number from the same generator before the draw). A constraint (pith_sampler_sample_constrained) masks disallowed tokens before
 * all of it. A sampler is per sequence and not thread-safe.
 *
 * DRY's sequence breakers are strings (pith_sampling_params.dry_sequence_breakers); matching them needs the
 * vocabulary's token texts, so pith_sampler_new_vocab resolves them against a tokenizer once, when the
 * sampler is created, into restart sequences of token ids, as llama.cpp does: every token whose text
 * contains a breaker is a one-token restart, and a token whose text ends with the start of a breaker is
 * the head of a restart sequence whose tail is the rest of the breaker, encoded (at most 20 tokens).
 * pith_sampler_new has no vocabulary and ignores the strings; pith_sampler_add_dry_restart adds restart
 * sequences of ids directly. The engine creates its samplers with its tokenizer.
 *
 * Cost: a few passes over the row. Top-k keeps its k by a heap; without top-k, top-p and min-p sort only
 * the candidates above a threshold they imply, and with no filter nothing is sorted (the draw walks the
 * ids in order). Only a recorded distribution over a whole vocabulary, or typical-p without top-k, sorts
 * all of it (tools/sampler_bench.c; docs/performance.md, "Sampling"). DRY costs O(history window) per
 * token (a Z-function over the window) plus O(vocabulary) when the sampler is created with breakers;
 * top-n-sigma two passes over the row. */
#ifndef PITH_SAMPLER_H
#define PITH_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/status.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes for DRY's sequence breakers: each breaker's bytes and a NUL, then an empty string (one more NUL). */
#define PITH_DRY_BREAKERS_BYTES 256
/* Longest breaker, in bytes; longer ones are cut to it (llama.cpp's limit). */
#define PITH_DRY_BREAKER_MAX 40

typedef struct pith_sampling_params {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; >1 discourages tokens in the history (divides positive logits) */
    float presence_penalty;   /* 0: off; subtracted once for each token present in the history */
    float frequency_penalty;  /* 0: off; subtracted per occurrence in the history */
    uint64_t seed;
    /* Every field below is off when zero, so a zero-initialised struct keeps them all off. */
    /* DRY ("don't repeat yourself", llama.cpp's definition): a token that would extend a sequence of
     * the window that already occurred in it -- the window's last L tokens, with L >= dry_allowed_length,
     * also occurring earlier followed by that token -- loses dry_multiplier * dry_base^(L -
     * dry_allowed_length) from its logit (L the longest such; the exponent capped so the power stays
     * finite). Repeats do not reach back across the last sequence breaker, and a one-token breaker is
     * never penalised. */
    float dry_multiplier;     /* 0: off; >= 0 */
    float dry_base;           /* >= 1 when DRY is on (default 1.75) */
    int dry_allowed_length;   /* >= 0 (default 2) */
    int dry_penalty_last_n;   /* the window: the last N tokens of the history; -1: all of it; 0: off */
    /* The breakers, one after another, each NUL-terminated, ended by an empty string (so all zero: none;
     * default "\n", ":", "\"", "*"). Set with pith_sampling_set_dry_breakers. */
    char dry_sequence_breakers[PITH_DRY_BREAKERS_BYTES];
    /* XTC ("exclude top choices"): with probability xtc_probability per token, when at least two
     * candidates have probability >= xtc_threshold, every one of those but the least likely is removed.
     * A threshold above 0.5 turns it off (llama.cpp's convention: two tokens cannot both exceed it). */
    float xtc_probability;    /* 0: off; [0, 1] */
    float xtc_threshold;      /* [0, 1] (default 0.1) */
    /* Locally typical sampling: keeps the tokens whose surprise (-log p) is closest to the entropy of the
     * distribution, fewest first, until their probability sums to more than typical_p. */
    float typical_p;          /* 1: off (the default); 0 also means off; (0, 1] */
    /* Top-n-sigma: keeps the tokens whose logit is at least max - top_n_sigma * sigma, sigma the standard
     * deviation of the finite logits. <= 0: off (llama.cpp's convention; its default is -1). */
    float top_n_sigma;        /* [-1, 100] */
} pith_sampling_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off, seed 0; DRY off
 * (multiplier 0) with base 1.75, allowed length 2, window -1 and breakers "\n", ":", "\"", "*"; XTC off
 * (probability 0) with threshold 0.1; typical_p 1; top_n_sigma -1. */
PITH_API pith_sampling_params pith_sampling_defaults(void);
/* Sets DRY's sequence breakers to breakers[0..n) (n 0: none). Each must hold at least one byte (no NUL);
 * one longer than PITH_DRY_BREAKER_MAX bytes is cut to that many. Fails, leaving p unchanged, when they
 * do not fit in PITH_DRY_BREAKERS_BYTES together. */
PITH_API int pith_sampling_set_dry_breakers(pith_sampling_params *p, const char *const *breakers, int n,
                                            pith_err *err);
/* The number of breakers in p, and breaker i (0 <= i < that count). */
PITH_API int pith_sampling_dry_breaker_count(const pith_sampling_params *p);
PITH_API const char *pith_sampling_dry_breaker(const pith_sampling_params *p, int i);
/* Checks ranges; fills err naming the bad parameter. */
PITH_API int pith_sampling_validate(const pith_sampling_params *p, pith_err *err);

typedef struct pith_sampler pith_sampler;

PITH_API int pith_sampler_new(const pith_sampling_params *p, int n_vocab, pith_sampler **out, pith_err *err);
/* pith_sampler_new, and with DRY on (dry_multiplier > 0, dry_penalty_last_n != 0), its sequence breakers
 * resolved against tok's vocabulary (the token texts are llama.cpp's pieces, pith_tokenizer_token_bytes;
 * the tails are encoded without special tokens, as llama.cpp's tokenize(text, false, false)). Tokens of
 * ids at or above tok's vocabulary size (a padded model) are never breakers. tok NULL: pith_sampler_new. */
PITH_API int pith_sampler_new_vocab(const pith_sampling_params *p, const pith_tokenizer *tok, int n_vocab,
                                    pith_sampler **out, pith_err *err);
/* Adds a DRY restart sequence of token ids: ids[0] the head, ids[1..n) the tail (n 1: a one-token
 * breaker). A tail longer than 20 tokens is cut to 20. Returns 0 (also when DRY is off: nothing to add
 * to), or -1 for bad ids or out of memory. */
PITH_API int pith_sampler_add_dry_restart(pith_sampler *s, const int32_t *ids, int n);
PITH_API void pith_sampler_free(pith_sampler *s);
/* Picks a token from logits[n_vocab] (modified in place: penalties, DRY and temperature are applied to it,
 * and tokens top-n-sigma removes become -inf). history: the sequence so far (prompt and output), which
 * the penalties and DRY look at (may be NULL when n_history is 0). */
PITH_API int32_t pith_sampler_sample(pith_sampler *s, float *logits, const int32_t *history, int n_history);

/* The processed distribution (logprobs_mode "processed_logprobs"): with recording on, each
 * pith_sampler_sample keeps the distribution it drew from: the candidates left after top-n-sigma, top-k,
 * typical-p, top-p, min-p and XTC, with their probabilities from the softmax of the penalised (and DRY)
 * logits over temperature, renormalised over those left. Greedy sampling (temperature 0) records the
 * log-softmax of the penalised (and DRY) logits over the whole vocabulary (temperature 1, no truncation). Off by default (it costs a
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
