/* The engine's state, shared by engine.c (API, lifecycle, thread) and step.c (the step loop), and
 * visible to tests for the integrity check. Not a public header. */
#ifndef PITH_CORE_ENGINE_INTERNAL_H
#define PITH_CORE_ENGINE_INTERNAL_H

#include <pthread.h>

#include "core/enc_cache.h"
#include "core/mem.h"
#include "core/sched.h"
#include "core/seq.h"
#include "pith/engine.h"

#define PITH_ENGINE_MAX_TOP_LOGPROBS 20
/* Logits rows a batch may ask for beyond one per sequence: prompt rows of prompt_logprobs requests
 * (a longer prompt takes more steps). */
#define ENGINE_PROMPT_ROWS 32

/* One media span's rows for the current step (step_media.c): in the encoder cache (pinned) or, when
 * larger than its budget, in memory of the step's own (own, freed after the step). */
typedef struct engine_media_item {
    uint64_t hash;
    int rows;
    const float *data;
    float *own;
    bool fresh;                /* encoded this step (not found in the cache) */
} engine_media_item;

/* What must not change when weights are swapped (engine_admin.c): kept at sleep, when the model may be
 * freed before the wake. */
typedef struct engine_shape {
    pith_hparams hp;
    pith_mem_spec mem;         /* layers pointers cleared; their lists are in layers_hash */
    uint64_t layers_hash;
    bool has_hidden;
    bool state_checkpoints;    /* sizing counted spare state slots for them (speculation) */
} engine_shape;

struct pith_engine {
    pith_model *model;
    const pith_tokenizer *tok;
    pith_engine_options opt;   /* resolved: no zero "default" fields left */
    int n_vocab;
    int n_embd;                /* hp.dim when the model has_hidden, else 0 (kept: the model may be freed
                                  while the engine sleeps) */
    int max_blocks_per_seq;
    int max_logits;            /* logits rows one batch may ask for */
    int state_spares;          /* RECURRENT groups: running slots beyond max_num_seqs, for checkpoints */

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
    int32_t *b_ckpt[PITH_MAX_MEM_GROUPS];    /* [max_batch_tokens] per RECURRENT group (batch.h) */
    pith_batch_mem b_mem[PITH_MAX_MEM_GROUPS];
    bool mem_allocated;        /* the model's memory is ours and must be freed */
    float *logits;             /* [(max_num_seqs + ENGINE_PROMPT_ROWS) * n_vocab] */
    int *b_row0, *b_nrows;     /* [max_num_seqs] each batch sequence's first logits row and row count */
    float *raw_row;            /* [n_vocab] logits before sampling changed them (for logprobs) */
    float *fork_row;           /* [n_vocab] a forked sibling's copy of the shared logits row */
    uint64_t n_forked;         /* siblings forked from a computed prompt */
    uint64_t spec_drafted, spec_accepted, spec_verifies;
    float spec_min_rate;     /* pith_spec_backoff_rate of this engine's draft source */
    struct spec_model *draft;  /* PITH_SPEC_DRAFT: the draft model's engine (spec_model.h) */
    uint8_t *b_want_hidden;    /* [max_batch_tokens], allocated at the first embedding request */
    float *hidden;             /* [max_batch_tokens * n_embd] final hidden rows, likewise */
    float *emb_out;            /* [n_embd] the normalised vector of a final event, likewise */
    /* Media spans (step_media.c): the encoder cache and, allocated at the first batch with a span, the
     * batch's embedding rows and attention ends (batch.h). */
    enc_cache enc;
    int32_t *b_embed_rows;     /* [max_batch_tokens] */
    float *b_embeds;           /* [max_batch_tokens * hp.dim] */
    int32_t *b_attend_last;    /* [max_batch_tokens] */
    int32_t *b_rope_pos;       /* [3 * max_batch_tokens]: M-RoPE positions (step_media.c) */
    engine_media_item *m_items; /* this step's spans */
    int n_m_items, cap_m_items;
    uint64_t n_media_encoded, n_media_hits;
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

    /* Administration (engine_admin.c). admin_lock serialises admin calls; the flags are written under
     * `lock` with the thread stopped (or by the caller that steps) and read by the stepping thread. */
    pthread_mutex_t admin_lock;
    bool hold;                 /* incoming requests stay on the incoming list (not admitted) */
    bool frozen;               /* no steps beyond intake and cancellations */
    bool asleep;               /* the KV memory is released */
    uint64_t generation;       /* weight generation */
    uint64_t n_restarted;
    engine_shape shape;        /* the served model's, taken at sleep */

    /* KV-cache events (engine_kv_events.c). The sink is changed only with the thread stopped, under
     * admin_lock; the log belongs to the stepping thread (or the admin caller, thread stopped) and hangs
     * on the published group's pool only while a sink is installed. */
    pith_kv_event_sink kv_sink;
    void *kv_sink_user;
    kv_event_log kv_log;
    pith_kv_event *kv_out;     /* [kv_out_cap] the events handed to the sink */
    int kv_out_cap;
};

/* One step (see pith_engine_step). Returns true when it ran a batch or finished a request; fills err
 * (leaving it "" otherwise) when the model failed. */
bool engine_step(pith_engine *e, pith_err *err);
/* Final event for a sequence already taken out of the scheduler; frees it. */
void engine_finish(pith_engine *e, seq *s, pith_finish_reason why, bool stop_string, const char *error);
void engine_publish_stats(pith_engine *e);
/* Sets the cancel flag of every live request (held ones too); their final events come at the next step.
 * Thread-safe. Returns how many it set. */
int engine_cancel_live(pith_engine *e);
/* Grows a list of sequence pointers (doubling). 0 or -1. */
int engine_grow_list(seq ***list, int *cap, int need);

/* step_media.c. After scheduling, before build_batch: encodes (or finds in the encoder cache) every media
 * span this step's tokens enter. A request whose encoding failed finishes with an error and leaves the
 * batch. Returns how many sequences were finished so. */
int engine_media_prepare(pith_engine *e);
/* Sets b's embed_rows/embeds (and attend_last for whole spans) from what engine_media_prepare found;
 * leaves them NULL when no token of b is in a span. 0, or -1 with err (out of memory). */
int engine_media_batch(pith_engine *e, pith_batch *b, pith_err *err);
/* After the forward pass: the cache's rows may go (unpins them). */
/* M-RoPE positions for the batch (batch.h: rope_pos) when the model has them and a sequence has images. */
int engine_media_rope(pith_engine *e, pith_batch *b, pith_err *err);
void engine_media_done(pith_engine *e);

/* logprobs.c: prompt rows and logprobs. */
/* True when the token at position p of s asks for a logits row. */
bool engine_wants_row(const seq *s, int p);
/* Cuts the scheduled chunks of prompt_logprobs requests so the batch's rows fit the logits buffer. */
void engine_fit_rows(pith_engine *e);
/* After the forward pass, before sched_commit: the prompt events of batch sequence s (its rows start at
 * rows), for the positions computed this step. */
void engine_prompt_events(pith_engine *e, seq *s, const float *rows);
/* Log-probabilities from raw logits: the chosen token's, and the top n (best first). */
float engine_logprobs(const float *row, int n_vocab, int32_t chosen, pith_logprob *top, int n_top);

/* engine_kv_events.c. The published group: the first FULL one, -1 when there is none. */
int engine_kv_group(const pith_engine *e);
/* After mem_init: hangs the event log on the published pool when a sink is installed. */
void engine_kv_events_attach(pith_engine *e);
/* Hands the recorded events to the sink (nothing when there are none). */
void engine_kv_events_flush(pith_engine *e);
/* Before the pools are dropped (mem_free): records CLEARED and flushes. */
void engine_kv_events_cleared(pith_engine *e);
void engine_kv_events_free(pith_engine *e);

/* Integrity check for tests: every group's pool invariants and what sequences hold (mem_check: every
 * block's refcount equals the running sequences holding it, windows hold only what they need), per
 * sequence bookkeeping, and waiting sequences hold nothing. Call between steps. 0 or -1. */
int engine_check(pith_engine *e, pith_err *err);

#endif
