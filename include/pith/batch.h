/* The seam between the engine core and a model: one flat batch per step.
 *
 * A batch is a list of tokens from one or more sequences, in any mix of prefill chunks and decode steps.
 * The model never sees requests or sequences as objects: only these arrays. For each token the core says
 * which sequence it belongs to and its position; for each memory group the model declared (memory.h),
 * where each token's memory goes and where each sequence's earlier memory lives.
 *
 * Invariants the core guarantees (and the model may rely on):
 *   - sequences are numbered 0..n_seqs-1 and each has at least one token in the batch; the tokens of
 *     one sequence are contiguous and at consecutive positions, increasing;
 *   - a token at position p of sequence s attends to positions 0..p of s (in a WINDOW group of window W:
 *     to max(0, p - W + 1)..p): positions below the first position of s in this batch are already stored,
 *     the rest are written by this batch, earlier tokens first;
 *   - a position is the token's index in its sequence: position p is stored in block p / block_size,
 *     slot p % block_size of that block, in every KV group;
 *   - KV group g (mem[g]): block_tables[s * max_blocks + i] is the block of that group holding
 *     positions [i * block_size, (i + 1) * block_size) of s, for every block a token of s attends to or
 *     writes. Entries of blocks no token of s can see are -1 (a WINDOW group releases the blocks that
 *     fell out of the window), as are entries at or past the blocks the sequence holds; slots[t] ==
 *     block * block_size + p % block_size for token t at position p;
 *   - no two tokens of a batch share a slot of a group; a block whose content was named in the prefix
 *     cache (complete and shared) is never written again: tokens only write slots past the sequence's
 *     stored positions;
 *   - RECURRENT group g: state_slots[s] is s's state slot, which holds the state after positions
 *     0..p-1, where p is s's first position in this batch; p == 0 means the state starts from zero
 *     and the model must not read the slot's old contents;
 *   - RECURRENT group g, only for a model with state_checkpoints set (model.h): checkpoints is NULL,
 *     or checkpoints[t] is -1 or a state slot (never another sequence's, never repeated) into which
 *     the model copies the state of t's sequence right after token t (speculative decoding rolls the
 *     state back to the last accepted token this way);
 *   - any set of tokens may ask for logits (want_logits), several per sequence included;
 *   - want_hidden is NULL, or any set of tokens asks for their final hidden state (a token may want both);
 *     it is non-NULL only for a model with has_hidden set (model.h);
 *   - embed_rows is NULL, or token t with embed_rows[t] >= 0 enters the model as row embed_rows[t] of
 *     embeds (its first hp.dim floats: an image's encoded patches, already in the text model's width)
 *     instead of its id's embedding, unscaled (an embedding scale such as Gemma's sqrt(dim) is the token
 *     table's); its id is then only a placeholder (the image token). Non-NULL only for a model with
 *     has_embeds. Rows are embed_stride floats apart: hp.dim, or embed_parts * hp.dim for a model with
 *     embed_parts > 1 (model.h: Qwen3-VL's DeepStack), whose part i > 0 joins the token's hidden state
 *     after layer i - 1;
 *   - attend_last is NULL, or token t at position p attends to positions lo..attend_last[t] of its
 *     sequence, where p <= attend_last[t] <= the sequence's last position in this batch (Gemma 3's image
 *     tokens see their whole image: the core keeps an image span in one batch and sets its last position
 *     for each of its tokens, their own position for the others). Non-NULL only for a model with
 *     bidirectional_spans (model.h);
 *   - rope_pos is NULL, or token t's RoPE turns by the three positions rope_pos[3t .. 3t + 2] (temporal,
 *     row, column) instead of its position: M-RoPE (Qwen2/3-VL, Qwen3.5), whose image tokens sit on their
 *     image's grid and whose later tokens continue from the grid's largest position + 1, so the three may
 *     differ from the token's position and from one another. Attention and memory still follow
 *     positions. Non-NULL only for a model with has_mrope (model.h).
 *
 * Output: forward fills one row of n_vocab logits for each token with want_logits[i] != 0, in batch
 * order (row r belongs to the r-th such token). When want_hidden is non-NULL it also fills hidden with
 * one row of hp.dim floats for each token with want_hidden[i] != 0, in batch order: the output of the
 * final norm for that token, the very row the vocabulary projection would multiply (embeddings). */
#ifndef PITH_BATCH_H
#define PITH_BATCH_H

#include <stdint.h>

#include "pith/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where one memory group's data is for this batch. KV groups use slots, block_tables and max_blocks;
 * RECURRENT groups use state_slots. */
typedef struct pith_batch_mem {
    const int32_t *slots;        /* [n_tokens] slot this token's K/V is written to */
    const int32_t *block_tables; /* [n_seqs * max_blocks] */
    int max_blocks;              /* row stride of block_tables (>= 1) */
    const int32_t *state_slots;  /* [n_seqs] */
    const int32_t *checkpoints;  /* [n_tokens] or NULL (RECURRENT, see above) */
} pith_batch_mem;

typedef struct pith_batch {
    int n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const int32_t *positions;   /* [n_tokens] position of each token within its sequence */
    const int32_t *seq;         /* [n_tokens] sequence index in 0..n_seqs-1 */
    const uint8_t *want_logits; /* [n_tokens] nonzero: produce a logits row for this token */
    const uint8_t *want_hidden; /* [n_tokens] nonzero: produce a final hidden-state row; or NULL */
    float *hidden;              /* output, [pith_batch_n_hidden(b) * hp.dim]; used when want_hidden is set */
    const int32_t *embed_rows;  /* [n_tokens] a row of embeds, or -1: the token's embedding; or NULL */
    const float *embeds;        /* [n_embeds][embed_stride], host memory; used when embed_rows is set */
    int n_embeds;
    int embed_stride;           /* floats per embeds row; 0 means hp.dim */
    const int32_t *attend_last; /* [n_tokens] the last position each token attends to; or NULL (causal) */
    const int32_t *rope_pos;    /* [n_tokens * 3] M-RoPE positions (temporal, row, column); or NULL */
    int n_seqs;
    int n_groups;               /* the model's memory groups, in the order of its spec */
    const pith_batch_mem *mem;  /* [n_groups] */
} pith_batch;

/* Number of tokens with want_logits set: the number of rows forward writes. */
PITH_API int pith_batch_n_logits(const pith_batch *b);
/* Number of tokens with want_hidden set (0 when it is NULL): the hidden rows forward writes. */
PITH_API int pith_batch_n_hidden(const pith_batch *b);

#ifdef __cplusplus
}
#endif

#endif
