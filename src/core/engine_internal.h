/* The engine's state, shared by engine.c (API, lifecycle, thread) and step.c (the step loop), and
 * visible to tests for the integrity check. Not a public header. */
#ifndef PITH_CORE_ENGINE_INTERNAL_H
#define PITH_CORE_ENGINE_INTERNAL_H

#include <pthread.h>

#include "core/mem.h"
#include "core/sched.h"
#include "core/seq.h"
#include "pith/engine.h"

#define PITH_ENGINE_MAX_TOP_LOGPROBS 20

struct pith_engine {
    pith_model *model;
    const pith_tokenizer *tok;
    pith_engine_options opt;   /* resolved: no zero "default" fields left */
    int n_vocab;
    int max_blocks_per_seq;
    int max_logits;            /* logits rows one batch may ask for */

    /* Owned by the stepping thread. */
    mem mem;                   /* one pool per memory group of the model */
    pith_mem_layout layout;
    sched sc;
    seq **intake;              /* incoming requests taken over for this step */
    int cap_intake;
    seq **cancels;             /* cancelled requests collected for this step */
    int cap_cancels;
    seq **step_seqs;           /* [max_num_seqs] copy of the batch, stable while sequences finish */
    int32_t *b_tokens, *b_positions, *b_seq;
    uint8_t *b_want;
    int32_t *b_slots[PITH_MAX_MEM_GROUPS];   /* [max_batch_tokens] per KV group */
    int32_t *b_tables[PITH_MAX_MEM_GROUPS];  /* [max_num_seqs * max_blocks_per_seq] per KV group */
    int32_t *b_states[PITH_MAX_MEM_GROUPS];  /* [max_num_seqs] per RECURRENT group */
    pith_batch_mem b_mem[PITH_MAX_MEM_GROUPS];
    bool mem_allocated;        /* the model's memory is ours and must be freed */
    float *logits;             /* [max_num_seqs * n_vocab] */
    float *raw_row;            /* [n_vocab] logits before sampling changed them (for logprobs) */
    float *fork_row;           /* [n_vocab] a forked sibling's copy of the shared logits row */
    uint64_t n_forked;         /* siblings forked from a computed prompt */
    uint64_t spec_drafted, spec_accepted, spec_verifies;
    uint8_t *b_want_hidden;    /* [max_batch_tokens], allocated at the first embedding request */
    float *hidden;             /* [max_batch_tokens * n_embd] final hidden rows, likewise */
    float *emb_out;            /* [n_embd] the normalised vector of a final event, likewise */
    uint64_t n_forwards;
    uint64_t n_computed_tokens;
    uint64_t n_generated;

    /* Guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    seq **incoming;            /* submitted, not yet taken by a step */
    int n_incoming;
    int cap_incoming;
    seq **live;                /* every request without its final event yet */
    int n_live;
    int cap_live;
    int n_cancel_pending;      /* live requests with cancel_requested set */
    uint64_t next_id;
    bool shutting_down;
    bool stop_requested;
    pith_engine_stats stats;

    pthread_t thread;
    bool thread_started;
};

/* One step (see pith_engine_step). Returns true when it ran a batch or finished a request; fills err
 * (leaving it "" otherwise) when the model failed. */
bool engine_step(pith_engine *e, pith_err *err);
/* Final event for a sequence already taken out of the scheduler; frees it. */
void engine_finish(pith_engine *e, seq *s, pith_finish_reason why, bool stop_string, const char *error);
void engine_publish_stats(pith_engine *e);
/* Grows a list of sequence pointers (doubling). 0 or -1. */
int engine_grow_list(seq ***list, int *cap, int need);

/* Integrity check for tests: every group's pool invariants and what sequences hold (mem_check: every
 * block's refcount equals the running sequences holding it, windows hold only what they need), per
 * sequence bookkeeping, and waiting sequences hold nothing. Call between steps. 0 or -1. */
int engine_check(pith_engine *e, pith_err *err);

#endif
