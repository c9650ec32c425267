/* The seam between the engine core and a model: one flat batch per step.
 *
 * A batch is a list of tokens from one or more sequences, in any mix of prefill chunks and decode steps.
 * The model never sees requests or sequences as objects: only these arrays. For each token the core says
 * where its K/V goes (kv_slot) and which sequence it belongs to; for each sequence, where its earlier K/V
 * lives (a block table into the paged KV cache, see kv.h).
 *
 * Invariants the core guarantees (and the model may rely on):
 *   - tokens of one sequence appear in increasing position order;
 *   - a token at position p of sequence s attends to positions 0..p of s: positions below the first
 *     position of s in this batch are already in the cache, the rest are written by this batch;
 *   - block_tables[s * max_blocks + p / block_size] is the block holding position p, for every p the
 *     token attends to, and kv_slot[i] == block * block_size + position % block_size for its own slot;
 *   - no two tokens in a batch share a kv_slot.
 *
 * Output: forward fills one row of n_vocab logits for each token with want_logits[i] != 0, in batch
 * order (row r belongs to the r-th such token). */
#ifndef PITH_BATCH_H
#define PITH_BATCH_H

#include <stdint.h>

typedef struct pith_batch {
    int n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const int32_t *positions;   /* [n_tokens] position of each token within its sequence */
    const int32_t *seq;         /* [n_tokens] sequence index in 0..n_seqs-1 */
    const int32_t *kv_slots;    /* [n_tokens] cache slot this token's K/V is written to */
    const uint8_t *want_logits; /* [n_tokens] nonzero: produce a logits row for this token */

    int n_seqs;
    int max_blocks;             /* row stride of block_tables */
    const int32_t *block_tables;/* [n_seqs * max_blocks] */
} pith_batch;

/* Number of tokens with want_logits set: the number of rows forward writes. */
int pith_batch_n_logits(const pith_batch *b);

#endif
