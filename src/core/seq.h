/* A sequence: one request's state inside the engine, from submission to its final event.
 *
 * Tokens are prompt followed by generated ids. The first n_computed of them are stored in the model's
 * memory groups (memory.h). In KV group g the sequence holds exactly the block indices [lo[g], hi[g]):
 * block index i covers positions i*block_size .. and blocks[g * cap_blocks + i] is the group's block
 * id, -1 outside [lo, hi). A FULL group has lo == 0; a WINDOW group's lo is the first block the next
 * token can see (its older blocks went back to the pool). A RECURRENT group holds one state slot. The
 * chain hashes of the first n_hashed full blocks are in names; the first n_named blocks have been named
 * in every group that held them when they completed. A sequence that is not running holds no memory
 * and has n_computed == 0; preemption returns it to that state, keeping its tokens so it can recompute
 * them (mostly from the prefix cache).
 *
 * Output text passes through `held`: text that could be the start of a stop string waits there until
 * the next token shows it is not. */
#ifndef PITH_CORE_SEQ_H
#define PITH_CORE_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/media.h"
#include "pith/engine.h"
#include "pith/memory.h"

typedef enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct seq {
    uint64_t id;
    uint64_t arrival;          /* submission order: FCFS within a priority */
    int priority;
    seq_state state;

    int32_t *tokens;
    int n_tokens;
    int cap_tokens;
    int n_prompt;
    int max_len;               /* n_tokens never exceeds this (prompt + max_tokens, capped) */

    int n_groups;
    int cap_blocks;            /* block indices the sequence can reach: ceil(max_len / block_size) */
    int *blocks;               /* [n_groups * cap_blocks], -1 where not held */
    int lo[PITH_MAX_MEM_GROUPS], hi[PITH_MAX_MEM_GROUPS];
    int state_slot[PITH_MAX_MEM_GROUPS]; /* RECURRENT groups: -1 when not held */
    int snap_held[PITH_MAX_MEM_GROUPS];  /* RECURRENT groups: the decode snapshot held (mem.h), -1 none */
    int snap_div;              /* snapshot point where this prompt left the cached ones (mem.h), 0 none */
    uint64_t *names;           /* [cap_blocks] */
    int n_hashed;
    int n_named;
    int n_computed;
    uint64_t salt;             /* parent name of block 0 */

    /* Siblings of a request with n > 1 (engine.h): the first one computes the prompt; the others wait
     * in its forks list, in no scheduler queue, until it does, then fork from its memory. A sibling
     * whose first one ends before that becomes an ordinary waiting request. */
    int sibling;               /* index among the siblings */
    struct seq *fork_parent;   /* while waiting to fork */
    struct seq **forks;        /* siblings waiting for this one's prompt */
    int n_forks;

    /* Speculative decoding (spec.h): this step's draft (scheduled after the last sampled token), the
     * draft length policy, and the request's counts. */
    int32_t draft[16];
    int n_draft;
    int ckpt[PITH_MAX_MEM_GROUPS][16]; /* RECURRENT: state after each draft position (batch.h), held
                                          from batch building to verification */
    int n_ckpt;
    int spec_k, spec_tries, spec_cooldown, spec_backoffs;
    float spec_rate;
    int drafted, accepted;

    int n_sched;               /* tokens scheduled in the current step */
    uint64_t preempted_step;   /* step of the last preemption (+1; 0: never) */
    bool admitted_once;
    int cached_tokens;         /* prefix cache hit at first admission */

    /* request parameters */
    pith_sampling_params sampling;
    pith_sampler *sampler;     /* created at the first sample: a queued request costs no vocab-sized
                                  buffers */
    int32_t *stop_ids;
    int n_stop_ids;
    char **stop;
    int n_stop;
    int max_stop_len;
    bool ignore_eos;
    bool logprobs;
    int top_logprobs;
    bool return_logits;
    pith_logprobs_mode logprobs_mode;
    bool prompt_logprobs;      /* report prompt events (engine.h) */
    int prompt_top_logprobs;
    int plp_next;              /* prompt positions below this have had their row's event reported */
    pith_embed_pooling embed;  /* OFF: generate; else compute the prompt only and pool (engine.h) */
    double *pool;              /* embedding requests: [n_embd] sum (MEAN) or row (CLS, LAST) so far; NULL
                                  until the first hidden row */
    int n_pooled;              /* positions 0..n_pooled-1 are in pool (a recompute after preemption
                                  skips them) */
    media_set *media;          /* the prompt's media spans (media.h), shared with siblings; NULL: none */
    pith_grammar_matcher *matcher; /* structured output (request.grammar), or NULL; kept over preemption */
    pith_token_cb on_token;
    void *user;

    /* output */
    pith_detok detok;
    bool has_detok;
    char *held;
    int n_held;
    int cap_held;
    char *released;            /* what seq_push_text last released */
    int cap_released;

    bool cancel_requested;     /* written under the engine lock by pith_engine_cancel */
    pith_finish_reason finish;
} seq;

/* Copies the request. Validation of ranges happens in the engine before this. */
int seq_create(const pith_request *r, int max_len, int block_size, int n_groups, const pith_tokenizer *tok,
               seq **out, pith_err *err);
/* Group g's block for index i (-1 when not held). */
static inline int *seq_block(seq *s, int g, int i) { return &s->blocks[(size_t)g * s->cap_blocks + i]; }
void seq_free(seq *s);

int seq_append(seq *s, int32_t token);
bool seq_is_stop_id(const seq *s, int32_t token);

/* Adds text produced by the detokenizer and sets *out and *out_len to what may be released now (pointing
 * into an internal buffer valid until the next call). Returns true when a stop string matched: the
 * released text then ends before it and the sequence must finish. `final` releases everything held. */
bool seq_push_text(seq *s, const char *text, int len, bool final, const char **out, int *out_len);

#endif
