/* The engine: serves many generation requests at once over one model.
 *
 * Owns the requests (waiting, running, finishing), one pool per memory group the model declared
 * (memory.h: paged KV blocks with a prefix cache, or state slots), the scheduler and, after
 * pith_engine_start, the thread that runs the step loop. It does not own the model or the tokenizer:
 * both must outlive the engine. It allocates the model's memory through the model (mem_alloc) at
 * creation and releases it when freed, so one model serves one engine at a time. Each step schedules one flat batch (batch.h) mixing
 * the decode tokens of running sequences with prompt chunks of new ones, runs the model once, samples,
 * and reports tokens through each request's callback. Embedding requests (pith_request.embed) share the
 * same batches: their prompt tokens ask the model for final hidden states instead of logits, and the
 * engine pools them.
 *
 * Guarantees:
 *   - every accepted request gets exactly one final event (finish reason stop, length, cancelled or
 *     error) and no event after it; a request that can never fit is rejected by pith_engine_submit,
 *     which then returns a negative code and calls nothing;
 *   - greedy outputs do not depend on how requests were batched, preempted or served from the cache;
 *   - pith_engine_submit, pith_engine_cancel and pith_engine_get_stats are thread-safe;
 *   - callbacks run on the thread that steps the engine (the engine's own thread after
 *     pith_engine_start, otherwise the caller of pith_engine_step / pith_engine_run_until). A callback may
 *     call submit and cancel, never step, run, stop or free.
 *
 * Priorities: a larger `priority` is more important. Within a priority, first come first served. */
#ifndef PITH_ENGINE_H
#define PITH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/grammar.h"
#include "pith/model.h"
#include "pith/sampler.h"
#include "pith/status.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_engine pith_engine;

/* Where speculative decoding gets its drafts. */
typedef enum pith_spec_type {
    PITH_SPEC_OFF = 0,
    PITH_SPEC_NGRAM,         /* prompt lookup: what followed the latest earlier occurrence of the last
                                few tokens, in the prompt and the output so far (model-free) */
    PITH_SPEC_CUSTOM,        /* options.spec_draft (tests, other sources) */
    PITH_SPEC_DRAFT,         /* a draft model of the target's vocabulary proposes greedily (options
                                draft_model or draft_model_path; src/core/spec_model.h) */
    PITH_SPEC_MTP,           /* the target's own multi-token-prediction head proposes greedily (a model
                                loaded with pith_model_options.mtp: model.h, mtp_draft) */
} pith_spec_type;

/* The smoothed acceptance under which a sequence stops drafting for a while (src/core/spec.h), for a
 * source whose draft step costs draft_cost of a target decode step (0: free, as prompt lookup; an MTP
 * head: pith_model.mtp_cost): at least 1/5, else draft_cost + 1/10. */
PITH_API float pith_spec_backoff_rate(float draft_cost);

/* Element type of the K/V cache (kv.h). Q8_0 holds blocks of 32 along the head dimension (half the
 * bytes of F16; it needs head dimensions that are multiples of 32); BF16 keeps F32's range with 8
 * significant bits; F16 has 11. docs/performance.md has the accuracy each costs. */
typedef enum pith_kv_type {
    PITH_KV_DEFAULT = 0,     /* the model's (F16 for every model Pith runs) */
    PITH_KV_F32,
    PITH_KV_F16,
    PITH_KV_BF16,
    PITH_KV_Q8_0,
} pith_kv_type;

/* "f32", "f16", "bf16", "q8_0" (and "default"); pith_kv_type_parse: the inverse, -1 for none. */
PITH_API const char *pith_kv_type_name(pith_kv_type t);
PITH_API int pith_kv_type_parse(const char *s);

/* Inputs that are not tokens (images; audio later): a span of prompt positions that the model reads as
 * an encoder's output rows instead of its tokens' embeddings (batch.h: embed_rows). The prompt holds
 * placeholder ids there (the model's image token), so lengths, positions and usage count them as
 * tokens. The engine runs the encoder inside its steps, for the spans a step computes, batched across
 * requests, and keeps the output in an encoder cache (by content hash, within a byte budget), so an
 * image is encoded once however often it is computed (preemption, n > 1, a second turn). The prefix
 * cache names blocks by the hashes of the spans they overlap as well as their tokens: the same image
 * in a follow-up turn is a hit, another image at the same place is not. For a model whose image tokens
 * attend to each other both ways (model.h: bidirectional_spans), a span is always computed in one
 * batch: it must fit max_batch_tokens. For a model with M-RoPE (model.h: has_mrope), every span gives its
 * grid (rows x cols tokens, row-major): its tokens turn by their place on it, and the tokens after it
 * continue from the grid's largest position + 1 (transformers' get_rope_index; batch.h: rope_pos). */
typedef struct pith_media {
    int pos;                 /* first prompt position of the span */
    int n_tokens;            /* positions it covers: the rows the encoder makes of it */
    const float *input;      /* the encoder's input (an image's pixels as the model's processor prepares them) */
    size_t n_input;          /* floats */
    uint64_t hash;           /* names the content for the caches; 0: the engine hashes input */
    int rows, cols;          /* the tokens as a grid (rows * cols == n_tokens); 0, 0: none (required for a
                                model with has_mrope, and by an encoder of images of any size) */
} pith_media;

/* The encoder the engine runs for media spans (a vision tower and its projector). */
typedef struct pith_encoder {
    int out_dim;             /* floats per output row: the model's hp.dim (times its embed_parts, model.h) */
    /* Encodes n items: out[i] receives items[i]->n_tokens rows of out_dim floats. Called on the stepping
     * thread, once per step that needs items not in the encoder cache. 0, or -1 with err (the requests
     * that needed these items then finish with PITH_FINISH_ERROR; the rest of the step goes on). */
    int (*encode)(void *user, const pith_media *const *items, int n, float *const *out, pith_err *err);
    void *user;
} pith_encoder;

/* Zero-initialised options are valid and mean the defaults given here. */
typedef struct pith_engine_options {
    int block_size;          /* tokens per KV block, every group; 0: 16 */
    int kv_blocks;           /* blocks of each FULL group's pool; a WINDOW group gets as many, or fewer
                                when max_num_seqs windows need fewer (memory.h); 0: from kv_mem_bytes */
    size_t kv_mem_bytes;     /* all groups' pools together, in bytes, when kv_blocks is 0; 0 as well:
                                enough for max_num_seqs full-length sequences, at most 1 GiB */
    bool kv_f32;             /* store K/V as F32 instead of the model's F16: kv_type F32 */
    pith_kv_type kv_type;    /* K/V element type; 0: the model's (or F32 with kv_f32) */
    int max_num_seqs;        /* sequences in one batch; 0: 64 */
    int max_batch_tokens;    /* tokens in one batch (decode tokens + prompt chunks); 0: 2048 */
    int max_seq_len;         /* prompt + generated tokens; 0: the model's context length. Always capped
                                to the model's context length and to what the pool can hold. */
    int max_waiting;         /* requests queued beyond the running ones; 0: 4096 */
    bool no_prefix_cache;    /* disable prefix caching (and state snapshots) */
    /* RECURRENT groups (memory.h): state snapshots for prefix caching, beside the running sequences'
     * slots and outside kv_mem_bytes. Bytes for snapshots of every RECURRENT group together; 0: room for
     * two per sequence that can run, at most 1 GiB; SIZE_MAX: none (no prefix hits on such models). */
    size_t snapshot_mem_bytes;
    int snapshot_interval;   /* tokens between snapshots of a long prompt, rounded up to whole blocks;
                                0: 1024; -1: only prompt ends, divergence points and decode (mem.h) */
    /* Speculative decoding (spec.h): a decoding sequence carries up to spec_max_draft proposed tokens,
     * verified in one forward pass; the output is exactly what decoding one token at a time gives
     * (greedy: the same tokens; sampled: the same distribution, and with the same seed the same draws
     * when the logits are the same). A model with recurrent state speculates only if it takes state
     * checkpoints (model.h: state_checkpoints), through which its state rolls back. */
    pith_spec_type spec_type;
    int spec_max_draft;      /* tokens per draft, 1..16; 0: 8 */
    int spec_max_seqs;       /* drafts only while at most this many sequences decode (a large batch
                                is compute-bound, and verification would cost more than it saves; measured:
                                docs/performance.md); 0: 2 */
    /* PITH_SPEC_CUSTOM: proposes up to max tokens that follow tokens[0..n) into draft; returns how
     * many (0: none). Called on the stepping thread; must not call the engine. */
    int (*spec_draft)(void *user, uint64_t request_id, const int32_t *tokens, int n, int32_t *draft, int max);
    void *spec_user;
    /* PITH_SPEC_DRAFT: the draft model, any architecture Pith loads, with the target's vocabulary (the
     * same size and, where both files carry a tokenizer, the same tokens: refused otherwise). It runs in
     * an engine of its own inside this one, with memory of its own sized for spec_max_seqs sequences
     * (kv_mem_bytes and the other options above are the target's only). draft_model: loaded by the
     * caller, who frees it after the engine (its memory is the engine's while the engine lives); or,
     * when NULL, draft_model_path, loaded by the engine with draft_threads worker threads (0: one per
     * online CPU) on draft_device (pith_model_options.device: NULL is PITH_DEVICE, else the CPU) and
     * freed with it. */
    pith_model *draft_model;
    const char *draft_model_path;
    int draft_threads;
    const char *draft_device;
    /* Media spans (pith_media): the encoder (NULL: requests with media are refused), which must outlive
     * the engine, and the encoder cache's budget in bytes (0: 256 MiB; outputs larger than the budget
     * are used for their step and not kept). */
    const pith_encoder *encoder;
    size_t encoder_cache_bytes;
} pith_engine_options;

typedef enum pith_finish_reason {
    PITH_FINISH_NONE = 0,    /* not finished: an ordinary token event */
    PITH_FINISH_STOP,        /* EOS / end-of-generation token, a stop token id or a stop string */
    PITH_FINISH_LENGTH,      /* max_tokens reached, or the sequence length limit */
    PITH_FINISH_CANCELLED,   /* pith_engine_cancel, or the engine was freed with the request live */
    PITH_FINISH_ERROR,       /* the model failed on a batch holding this request */
} pith_finish_reason;

/* "stop", "length", "cancelled", "error" (and "" for NONE). */
PITH_API const char *pith_finish_reason_str(pith_finish_reason r);

typedef struct pith_usage {
    int prompt_tokens;
    int completion_tokens;   /* tokens sampled, including a final EOS / stop token */
    int cached_tokens;       /* prompt tokens served from the prefix cache at first admission (a forked
                                sibling of n > 1: all of them) */
    int draft_tokens;        /* speculative decoding: tokens proposed for this request */
    int accepted_tokens;     /* of those, accepted by verification */
} pith_usage;

typedef struct pith_logprob {
    int32_t token;
    float logprob;           /* natural log of the token's probability: of the model's (raw logits,
                                before sampling parameters are applied), or with PITH_LOGPROBS_PROCESSED
                                of the distribution the sampler drew from (-INFINITY outside it) */
} pith_logprob;

/* Which distribution a request's logprobs describe. */
typedef enum pith_logprobs_mode {
    PITH_LOGPROBS_RAW = 0,       /* log-softmax of the model's logits */
    PITH_LOGPROBS_PROCESSED = 1, /* the distribution sampled from: after penalties, temperature, top-k,
                                    top-p and min-p, renormalised (sampler.h: pith_sampler_dist); greedy
                                    requests: log-softmax of the penalised logits */
} pith_logprobs_mode;

/* One callback call. A token event has final == false and carries one sampled token; the final event
 * has final == true, token == -1, the finish reason and usage, and may carry text released at the end
 * (a held-back partial stop-string match that never completed, or incomplete UTF-8 as U+FFFD). */
typedef struct pith_token_event {
    uint64_t request_id;
    void *user;              /* the request's user pointer */
    int index;               /* which sibling of a request with n > 1 (0 otherwise) */
    int32_t token;           /* sampled id, or -1 in the final event */
    /* Text newly released for output (NUL-terminated, never NULL, possibly empty). Text that might be the
     * start of a stop string is held back until it is known not to be; a matched stop string and
     * everything after it is never released. EOS, stop token ids and special tokens release no text.
     * Always empty when the engine has no tokenizer. Valid only during the callback. */
    const char *text;
    size_t text_len;
    /* When the request asked for logprobs: the sampled token's logprob and the top_logprobs most likely
     * tokens, best first. n_top is 0 otherwise. Valid only during the callback. */
    bool has_logprob;
    float logprob;
    int n_top;
    const pith_logprob *top;
    /* When the request set return_logits: the logits row this token was sampled from, before sampling
     * parameters changed it (pith_engine_n_vocab floats). NULL otherwise, and in the final event. Valid
     * only during the callback. */
    const float *logits;
    bool final;
    pith_finish_reason finish_reason; /* NONE unless final */
    pith_usage usage;                 /* meaningful in the final event */
    const char *error;                /* for PITH_FINISH_ERROR: what failed; "" otherwise */
    /* For an embedding request (pith_request.embed) that finished with PITH_FINISH_STOP: the pooled final
     * hidden states, L2-normalised (unit length; all zeros only if the pooled vector was zero),
     * n_embedding == pith_engine_n_embd floats. NULL and 0 otherwise. Valid only during the callback. */
    const float *embedding;
    int n_embedding;
    /* A prompt event (request.prompt_logprobs): not a sampled token but prompt token `prompt_index`
     * (1..n_prompt-1, in order, before the first sampled token) with its raw logprob given the tokens
     * before it in has_logprob/logprob and the most likely alternatives in n_top/top; `token` is that
     * prompt token, text is empty. */
    bool prompt;
    int prompt_index;
    int prompt_rank;         /* the prompt token's rank in its distribution: 1 + tokens more likely */
    /* A restart event (pith_engine_swap_model with PITH_SWAP_RECOMPUTE): every token and prompt event
     * delivered so far for this request came from the old weights and is void; generation starts again
     * from the prompt, with the same seed. token is -1, text empty. */
    bool restart;
    /* The engine's weight generation this event was produced with: 0 at creation, +1 per
     * pith_engine_swap_model. One request's events after its last restart all carry the same one. */
    uint64_t weight_generation;
} pith_token_event;

typedef void (*pith_token_cb)(const pith_token_event *ev, void *user);

/* Embedding requests: how the final hidden states of the prompt's tokens become one vector. The values
 * 1..3 are GGUF's `{arch}.pooling_type` (llama.cpp: 0 none, 1 mean, 2 cls, 3 last). */
typedef enum pith_embed_pooling {
    PITH_EMBED_OFF = 0,      /* not an embedding request: generate */
    PITH_EMBED_MEAN = 1,     /* the mean over every prompt token */
    PITH_EMBED_CLS = 2,      /* the first prompt token's */
    PITH_EMBED_LAST = 3,     /* the last prompt token's (Qwen3-Embedding) */
} pith_embed_pooling;

/* A request. Everything pointed to is copied by pith_engine_submit. */
typedef struct pith_request {
    const int32_t *prompt;   /* token ids, already including BOS if wanted; at least one */
    int n_prompt;
    pith_sampling_params sampling;
    int max_tokens;          /* tokens to generate; <= 0: until the sequence length limit */
    const int32_t *stop_ids; /* extra token ids that end generation */
    int n_stop_ids;
    const char *const *stop; /* stop strings, matched on the detokenized output (needs a tokenizer) */
    int n_stop;
    bool ignore_eos;         /* do not stop at end-of-generation tokens */
    int priority;            /* larger is more important; 0 is normal */
    const char *cache_salt;  /* NULL or "": none. Requests share cached prefixes only with requests that
                                give the same salt. */
    bool logprobs;           /* report the sampled token's logprob */
    int top_logprobs;        /* with logprobs: also the N most likely tokens (0..20) */
    bool return_logits;      /* pass each token's raw logits row to the callback (numerical checks) */
    pith_logprobs_mode logprobs_mode; /* with logprobs: raw (default) or processed */
    /* Report each prompt token's raw logprob given the tokens before it (prompt events, above), with the
     * prompt_top_logprobs (0..20) most likely alternatives. Such a request never reads other requests'
     * cached prefixes (each position's logits are needed). */
    bool prompt_logprobs;
    int prompt_top_logprobs;
    /* Not OFF: an embedding request. The engine computes the prompt only (no sampling, no token events;
     * sampling, max_tokens, stop and logprobs fields are ignored) and the final event (stop, completion
     * tokens 0) carries the pooled vector. Needs a model with has_hidden (model.h), else the submit is
     * refused. MEAN and CLS requests never read other requests' cached prefixes (every position's hidden
     * state is needed); LAST ones may. */
    pith_embed_pooling embed;
    /* Samples to draw from this prompt (0 or 1: one). The siblings share one prefill: the prompt is
     * computed once, then each sibling forks from it (full blocks shared by reference, the partial last
     * block and any recurrent state copied) and samples its own continuation from the same logits.
     * Sibling i has request id (the id submit returns) + i, uses sampling seed + i, and reports events
     * with index i, so sibling i's output is what this request alone with seed + i gives. Each sibling
     * is a request of its own for cancel, events and stats. 1..1024; not with embed. */
    int n;
    /* NULL: unconstrained. Otherwise every sampled token must be allowed by this grammar (grammar.h):
     * the engine retains it for the request's life and keeps one matcher for the sequence (a preempted
     * sequence keeps its matcher); tokens it disallows are masked before penalties, temperature and
     * the filters; where the grammar is complete and nothing may follow, the request finishes with
     * stop. The grammar must be compiled for the engine tokenizer's vocabulary (same size). */
    pith_grammar *grammar;
    /* Media spans of the prompt (pith_media), in increasing pos, not overlapping, inside the prompt;
     * needs the engine's encoder and a model with has_embeds (model.h), else the submit is refused. Not
     * with embed. */
    const pith_media *media;
    int n_media;
    pith_token_cb on_token;  /* may be NULL (the request then runs for its stats alone) */
    void *user;
} pith_request;

/* Rejections from pith_engine_submit (err says why in words). */
enum {
    PITH_SUBMIT_INVALID = -1, /* bad parameters, or the prompt cannot fit even alone */
    PITH_SUBMIT_BUSY = -2,    /* the waiting queue is full, or the engine is shutting down */
};

/* One memory group's pool (memory.h). */
typedef struct pith_engine_mem_stats {
    pith_mem_kind kind;
    int window;              /* WINDOW groups */
    int n_layers;
    int units_total;         /* blocks (KV groups) or state slots (RECURRENT: running and snapshot) */
    int units_used;          /* referenced by at least one sequence */
    int units_cached;        /* unreferenced but holding a reusable prefix (evictable): RECURRENT
                                groups' cached snapshots */
    int units_free;
    int snapshot_units;      /* RECURRENT: of units_total, the snapshot slots */
    size_t unit_bytes;       /* one block of all the group's layers, K and V; or one state */
} pith_engine_mem_stats;

typedef struct pith_engine_stats {
    int running;             /* sequences holding memory */
    int waiting;             /* accepted, not running (new, or preempted and waiting to recompute) */
    int kv_blocks_total;     /* the kv_blocks_* counts sum every KV group's pool */
    int kv_blocks_used;      /* referenced by at least one sequence */
    int kv_blocks_cached;    /* unreferenced but holding a reusable prefix (evictable) */
    int kv_blocks_free;
    size_t mem_bytes;        /* every group's pool together */
    int n_mem_groups;
    pith_engine_mem_stats mem[PITH_MAX_MEM_GROUPS];
    int block_size;
    int max_num_seqs;
    int max_batch_tokens;
    int max_seq_len;
    uint64_t prefix_cache_queries;  /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_cache_hits;     /* of those, tokens served from the cache */
    uint64_t prompt_tokens;         /* prompt tokens of accepted requests */
    uint64_t generation_tokens;     /* tokens sampled */
    uint64_t computed_tokens;       /* tokens run through the model (prefill, recompute and decode) */
    uint64_t preemptions;
    uint64_t state_snapshots;       /* state snapshots taken (RECURRENT groups; one per point) */
    uint64_t state_restores;        /* prefix hits served from a state snapshot */
    uint64_t forked_sequences;      /* siblings (pith_request.n) forked from a prompt computed once */
    uint64_t spec_draft_tokens;     /* speculative decoding: tokens proposed */
    uint64_t spec_accepted_tokens;  /* of those, accepted */
    uint64_t spec_verify_steps;     /* sequence-steps that verified a draft */
    uint64_t steps;                 /* forward passes */
    uint64_t requests_submitted;
    uint64_t requests_rejected;
    uint64_t requests_finished;     /* all final events, whatever the reason */
    uint64_t requests_cancelled;
    uint64_t requests_failed;       /* finished with PITH_FINISH_ERROR */
    uint64_t weight_generation;     /* pith_engine_weight_generation */
    uint64_t requests_restarted;    /* restart events sent by swaps in recompute mode */
    uint64_t media_encoded;         /* media items run through the encoder */
    uint64_t media_cache_hits;      /* media items a step needed and found in the encoder cache */
    size_t encoder_cache_bytes;     /* held by the encoder cache now */
    bool paused;                    /* admission paused (pith_engine_pause, or asleep) */
    bool asleep;                    /* KV memory released (pith_engine_sleep) */
} pith_engine_stats;

/* tok may be NULL: then no text, no stop strings and no EOS detection beyond stop_ids (tests with fake
 * models). opt may be NULL for the defaults. */
PITH_API int pith_engine_create(pith_model *model, const pith_tokenizer *tok, const pith_engine_options *opt,
                                pith_engine **out, pith_err *err);
/* Stops the thread if started, finishes every live request as cancelled (callbacks run on the caller's
 * thread), and frees everything. */
PITH_API void pith_engine_free(pith_engine *e);

/* Returns 0 and sets *id (ids start at 1 and are never reused), or PITH_SUBMIT_INVALID / PITH_SUBMIT_BUSY
 * with err filled. */
PITH_API int pith_engine_submit(pith_engine *e, const pith_request *r, uint64_t *id, pith_err *err);
/* Asks to cancel: the request's final event (cancelled) comes at the next step, and its blocks are freed
 * there. Returns 0 when the request was live, -1 when unknown or already finished. */
PITH_API int pith_engine_cancel(pith_engine *e, uint64_t id);

/* Synchronous driving (CLI, tests). Not to be mixed with pith_engine_start. pith_engine_run_until is the
 * one loop: a caller that owns the engine submits, then hands control to it, deciding between steps
 * through its check callback (an interrupt, a failed output, a step budget); pith_engine_run is it
 * without a check, and pith_engine_step the one step it repeats. */

/* What pith_engine_run_until does next, as its check callback says before each step. */
typedef enum pith_run_action {
    PITH_RUN_CONTINUE = 0,   /* step */
    PITH_RUN_STOP = 1,       /* return now: live requests stay as they are (no event, nothing freed); a
                                later call resumes them, pith_engine_cancel ends them */
    PITH_RUN_CANCEL = 2,     /* cancel every live request (as pith_engine_cancel on each), then step on
                                so that their final events (cancelled, with any held-back text) come
                                before the call returns. For a caller that owns every request, as a
                                command on Ctrl-C. */
} pith_run_action;

/* Called on the caller's thread before every step, with no engine lock held. It may submit and cancel
 * (and read stats), never step, run, start, stop, free, nor call the administration below. */
typedef pith_run_action (*pith_run_check)(void *user);

/* Steps while there is work (pith_engine_has_work) and check, asked before every step, says CONTINUE
 * or CANCEL; check NULL: always CONTINUE. check is not called when there is no work (so not at all on an
 * idle engine). Returns:
 *   0   no work is left (every request has had its final event);
 *   1   check said STOP; the requests still live stay so;
 *  -1   with err: a step failed (the model failed on a batch, whose requests finished with
 *       PITH_FINISH_ERROR; the engine stays usable), and err describes the first failure. The call
 *       still went on to the end or to a STOP, as if the step had not failed: pith_engine_has_work tells
 *       which. Also -1, doing nothing, while the engine's own thread runs (pith_engine_start).
 * It does not return while held requests wait on a paused engine (pith_engine_pause) unless check says
 * STOP: held requests are work. */
PITH_API int pith_engine_run_until(pith_engine *e, pith_run_check check, void *user, pith_err *err);
/* pith_engine_run_until without a check: steps until no work is left. 0 or -1 as above. */
PITH_API int pith_engine_run(pith_engine *e, pith_err *err);
/* One scheduling step: admits, cancels, runs at most one forward pass, delivers events. Returns 0, or -1
 * when the model failed (the requests of that batch are finished with PITH_FINISH_ERROR, and the engine
 * stays usable). */
PITH_API int pith_engine_step(pith_engine *e, pith_err *err);
/* True while any request is waiting, running or has an undelivered final event. */
PITH_API bool pith_engine_has_work(pith_engine *e);

/* Background driving (server): a thread steps while there is work and sleeps otherwise. */
PITH_API int pith_engine_start(pith_engine *e, pith_err *err);
/* Returns after the current step; live requests stay queued (pith_engine_free cancels them). */
PITH_API void pith_engine_stop(pith_engine *e);

PITH_API void pith_engine_get_stats(pith_engine *e, pith_engine_stats *out);
/* The longest sequence (prompt + generated tokens) a request may reach. */
PITH_API int pith_engine_max_seq_len(const pith_engine *e);
/* Entries in a logits row (the model's vocabulary). */
PITH_API int pith_engine_n_vocab(const pith_engine *e);
/* Entries in an embedding (the model's width, hp.dim), or 0 when the model cannot serve embeddings. */
PITH_API int pith_engine_n_embd(const pith_engine *e);

/* KV-cache events (src/core/engine_kv_events.c): what a prefix-aware router needs to know which prefixes
 * this engine holds (docs/kv-events.md; pith serve --kv-events publishes them in vLLM's format). The
 * published memory group is the model's first FULL group (memory.h): every FULL group names the same
 * blocks, so one tells all. WINDOW and RECURRENT groups are not published: a window group drops the
 * blocks behind its window while the prefix stays servable through the FULL groups' blocks and the
 * window's last blocks, and a recurrent group holds state snapshots at a few points, not blocks. On a
 * hybrid model (Gemma 3's window layers, Qwen3.5 / LFM2 / Granite's recurrent layers) a hit needs every
 * group, so the FULL group's blocks are an upper bound on what a request can reuse: a router that
 * trusts them may sometimes send a request where part of its prefix must be recomputed, never where a
 * wrong prefix would be used. A model with no FULL group has nothing to publish (the sink is refused).
 *
 * Events, in the order the cache changed:
 *   STORED   a full block's K/V became reusable: its name (Pith's 64-bit chain hash), its parent's
 *            name (for a sequence's first block, root: the hash of the request's cache salt, 0 for
 *            none), and its block_size token ids;
 *   REMOVED  a named block was evicted or overwritten: its name;
 *   CLEARED  every block was dropped (a weight swap, sleep): nothing is cached any more.
 * Replaying every event from the sink's installation gives exactly the named (cached or in use) blocks
 * of the published group, which pith_engine_kv_cache_blocks reports directly. */
typedef enum pith_kv_event_type {
    PITH_KV_EVENT_STORED = 1,
    PITH_KV_EVENT_REMOVED = 2,
    PITH_KV_EVENT_CLEARED = 3,
} pith_kv_event_type;

typedef struct pith_kv_event {
    pith_kv_event_type type;
    bool root;               /* STORED: a sequence's first block */
    uint64_t block;          /* STORED, REMOVED: the block's name */
    uint64_t parent;         /* STORED: the parent block's name; for a root block the cache salt's hash */
    const int32_t *tokens;   /* STORED: n_tokens (the block size) token ids; valid during the call only */
    int n_tokens;
} pith_kv_event;

/* Receives events: n of them, oldest first. The engine calls it once per step that changed the
 * published group's named blocks, on the stepping thread with no engine lock held, and from an
 * administration call that dropped the cache (pith_engine_swap_model, pith_engine_sleep) on that
 * caller's thread; never two calls at once. It must not call the engine; it should be quick (copy the
 * events and return). */
typedef void (*pith_kv_event_sink)(void *user, const pith_kv_event *ev, int n);

/* Installs (sink non-NULL) or removes the sink. Serialised with the administration calls below; briefly
 * stops the engine's thread. Install it before the first request: blocks named earlier are never
 * reported (nor their removal). While none is installed, the pools record nothing. -1 with err when
 * the model has no FULL group. If recording runs out of memory, that step's events are replaced by one
 * CLEARED (listeners forget everything; blocks cached before stay unreported). */
PITH_API int pith_engine_set_kv_event_sink(pith_engine *e, pith_kv_event_sink sink, void *user, pith_err *err);
/* Calls fn once, on the caller's thread, with every named block (cached or held by a request) of the
 * published group as STORED events, by block id: the engine's own state, for checks against what a
 * listener rebuilt from the events. Serialised with the administration calls; stops the engine's thread
 * while it reads. -1 with err when the model has no FULL group or memory runs out. */
PITH_API int pith_engine_kv_cache_blocks(pith_engine *e, pith_kv_event_sink fn, void *user, pith_err *err);

/* Administration (src/core/engine_admin.c): pausing, draining, swapping weights, sleeping. For a
 * serving process that must change weights without restarting (RL rollouts: docs/rl.md). These calls
 * are thread-safe and serialised among themselves; each returns once what it says is done. They work
 * with the background thread (it is stopped around each change and restarted) and without it (then
 * they step the engine themselves where they must wait for requests). A callback must not call them.
 *
 * While paused, submitted requests are accepted and held (not admitted) until pith_engine_resume;
 * requests that had not started when the pause began are held too. Held requests are work
 * (pith_engine_has_work), so pith_engine_run on a paused engine with held requests does not return:
 * synchronous callers resume first. */
typedef enum pith_pause_mode {
    PITH_PAUSE_KEEP = 0,     /* running requests stay where they are (KV kept, no steps) */
    PITH_PAUSE_DRAIN = 1,    /* running requests finish first (the call waits for them) */
    PITH_PAUSE_ABORT = 2,    /* every request live at the call is cancelled (the call waits for their
                                final events) */
} pith_pause_mode;

/* Pauses admission, handling running requests as `mode` says. Pausing a paused engine changes mode
 * (KEEP to DRAIN waits for the drain). timeout_s > 0 bounds a drain's wait: -1 and err when requests
 * are still running then (the engine stays paused, requests keep running). */
PITH_API int pith_engine_pause(pith_engine *e, pith_pause_mode mode, double timeout_s, pith_err *err);
/* Resumes admission and stepping (no-op when not paused). -1 while asleep. */
PITH_API int pith_engine_resume(pith_engine *e, pith_err *err);
PITH_API bool pith_engine_paused(pith_engine *e);
/* Cancels every live request (held ones too) and waits for their final events. Returns how many. */
PITH_API int pith_engine_abort_all(pith_engine *e);

typedef enum pith_swap_mode {
    PITH_SWAP_DRAIN = 0,     /* needs nothing running: call after pith_engine_pause(DRAIN) */
    PITH_SWAP_RECOMPUTE = 1, /* running and preempted requests restart from their prompt on the new
                                weights (a restart event each, then new tokens) */
} pith_swap_mode;

/* Replaces the model with `model` (same architecture, hyper-parameters and memory spec: refused
 * otherwise), which the engine then uses; the old one is given back through *old (the caller frees it:
 * nothing references it any more). The engine must be paused (pith_engine_pause, any mode); it stays
 * paused. The prefix cache is flushed (its KV came from the old weights) and the weight generation
 * (events, stats) increases by one. */
PITH_API int pith_engine_swap_model(pith_engine *e, pith_model *model, pith_swap_mode mode, pith_model **old,
                                    pith_err *err);
/* Weight generation: 0 at creation, +1 per swap. */
PITH_API uint64_t pith_engine_weight_generation(pith_engine *e);
/* Releases the KV memory (the model's mem_free: the pools' bytes) after preempting every running
 * request (they recompute after waking, keeping their tokens). The engine must be paused; it stays
 * paused and holds every request until pith_engine_wake. The model is not used while asleep: the
 * caller may free it and wake the engine with another of the same shape. */
PITH_API int pith_engine_sleep(pith_engine *e, pith_err *err);
/* Allocates the KV memory again and resumes. model: NULL for the model the engine slept with, or a
 * replacement of the same shape holding the same weights (e.g. loaded again from the same file, after
 * the caller freed the old one to give its memory back); the engine then no longer references the old. */
PITH_API int pith_engine_wake(pith_engine *e, pith_model *model, pith_err *err);
PITH_API bool pith_engine_asleep(pith_engine *e);

#ifdef __cplusplus
}
#endif

#endif
