#include "backend/batch_check.h"

#include "backend/backend.h"

#include <stdlib.h>

static int check_kv_group(const pith_batch *b, int g, const pith_mem_group *mg, const pith_kv_cache *c, pith_err *err) {
    const pith_batch_mem *bm = &b->mem[g];
    const int bs = c->block_size;
    const long long n_slots = (long long)c->n_blocks * bs;
    if (!bm->slots || !bm->block_tables || bm->max_blocks < 1)
        return pith_errf(err, "batch: memory group %d has no slots or block tables", g);
    for (int i = 0; i < b->n_tokens; i++) {
        int pos = b->positions[i], s = b->seq[i], slot = bm->slots[i];
        if (pos / bs >= bm->max_blocks)
            return pith_errf(err, "batch: position %d does not fit a block table of %d blocks (group %d)", pos,
                             bm->max_blocks, g);
        if (slot < 0 || slot >= n_slots) return pith_errf(err, "batch: slot %d out of range (group %d)", slot, g);
        const int32_t *bt = bm->block_tables + (size_t)s * bm->max_blocks;
        int first = 0;
        if (mg->kind == PITH_MEM_WINDOW && pos - mg->window + 1 > 0) first = (pos - mg->window + 1) / bs;
        /* every block this token attends to, its own included */
        for (int blk = first; blk <= pos / bs; blk++)
            if (bt[blk] < 0 || bt[blk] >= c->n_blocks)
                return pith_errf(err, "batch: block table entry %d of sequence %d is %d (group %d has %d blocks)", blk,
                                 s, bt[blk], g, c->n_blocks);
        if ((long long)bt[pos / bs] * bs + pos % bs != slot)
            return pith_errf(err, "batch: slot %d of token %d disagrees with its block table (group %d)", slot, i, g);
    }
    return 0;
}

int pith_batch_check(const pith_batch *b, const pith_mem_spec *spec, const pith_kv_host *mem, int n_vocab,
                     pith_err *err) {
    if (b->n_tokens < 0 || b->n_seqs < 0 || (b->n_tokens > 0 && b->n_seqs < 1))
        return pith_errf(err, "batch: bad sizes (%d tokens, %d sequences)", b->n_tokens, b->n_seqs);
    if (b->n_groups != spec->n_groups || mem->n_groups != spec->n_groups || (b->n_groups > 0 && !b->mem))
        return pith_errf(err, "batch: %d memory groups, the model has %d (%d allocated)", b->n_groups, spec->n_groups,
                         mem->n_groups);
    int *last = malloc((size_t)(b->n_seqs ? b->n_seqs : 1) * 2 * sizeof *last);
    if (!last) return pith_errf(err, "out of memory");
    int rc = 0;
    for (int s = 0; s < b->n_seqs; s++) last[2 * s] = -1, last[2 * s + 1] = -1;
    for (int i = 0; i < b->n_tokens && !rc; i++) {
        int tok = b->tokens[i], pos = b->positions[i], s = b->seq[i];
        if (tok < 0 || tok >= n_vocab) rc = pith_errf(err, "batch: token %d is outside the vocabulary", tok);
        else if (s < 0 || s >= b->n_seqs) rc = pith_errf(err, "batch: sequence index %d out of range", s);
        else if (pos < 0) rc = pith_errf(err, "batch: negative position %d", pos);
        else if (last[2 * s] >= 0 && (last[2 * s + 1] != i - 1 || pos != last[2 * s] + 1))
            rc = pith_errf(err, "batch: tokens of sequence %d are not contiguous at consecutive positions", s);
        else
            last[2 * s] = pos, last[2 * s + 1] = i;
    }
    if (!rc && b->embed_rows && (!b->embeds || b->n_embeds < 0))
        rc = pith_errf(err, "batch: embedding rows without their embeddings");
    for (int i = 0; i < b->n_tokens && !rc && b->embed_rows; i++)
        if (b->embed_rows[i] < -1 || b->embed_rows[i] >= b->n_embeds)
            rc = pith_errf(err, "batch: token %d reads embedding row %d of %d", i, b->embed_rows[i], b->n_embeds);
    /* a token may look ahead only at positions this batch writes (its sequence's last one here) */
    for (int i = 0; i < b->n_tokens && !rc && b->attend_last; i++)
        if (b->attend_last[i] < b->positions[i] || b->attend_last[i] > last[2 * b->seq[i]])
            rc = pith_errf(err, "batch: token %d (position %d) attends up to position %d, outside [%d, %d]", i,
                           b->positions[i], b->attend_last[i], b->positions[i], last[2 * b->seq[i]]);
    free(last);
    if (rc) return -1;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        const pith_kv_cache *c = &mem->groups[g];
        if (mg->kind == PITH_MEM_RECURRENT) {
            if (!b->mem[g].state_slots) return pith_errf(err, "batch: memory group %d has no state slots", g);
            for (int s = 0; s < b->n_seqs; s++)
                if (b->mem[g].state_slots[s] < 0 || b->mem[g].state_slots[s] >= c->n_slots)
                    return pith_errf(err, "batch: state slot %d of sequence %d out of range (group %d)",
                                     b->mem[g].state_slots[s], s, g);
            for (int t = 0; b->mem[g].checkpoints && t < b->n_tokens; t++) {
                int ck = b->mem[g].checkpoints[t];
                if (ck < -1 || ck >= c->n_slots) return pith_errf(err, "batch: checkpoint slot %d out of range (group %d)", ck, g);
                for (int s = 0; ck >= 0 && s < b->n_seqs; s++)
                    if (b->mem[g].state_slots[s] == ck)
                        return pith_errf(err, "batch: checkpoint slot %d is sequence %d's state slot (group %d)", ck, s, g);
            }
            continue;
        }
        if (c->k_dim != mg->k_dim || c->v_dim != mg->v_dim || c->n_layers != mg->n_layers)
            return pith_errf(err, "memory group %d was allocated for another shape", g);
        if (check_kv_group(b, g, mg, c, err)) return -1;
    }
    return 0;
}

int pith_draft_check(const pith_batch *b, const pith_kv_host *mem, int n_vocab, int n_steps, int max_tokens,
                     pith_err *err) {
    if (n_steps < 1 || n_steps > PITH_BE_MTP_MAX_STEPS)
        return pith_errf(err, "mtp_draft: %d steps (1..%d)", n_steps, PITH_BE_MTP_MAX_STEPS);
    if (b->n_tokens < 1 || b->n_tokens != b->n_seqs || b->n_tokens > max_tokens)
        return pith_errf(err, "mtp_draft: %d tokens for %d sequences (one each, at most %d)", b->n_tokens, b->n_seqs,
                         max_tokens);
    if (b->n_groups != mem->n_groups)
        return pith_errf(err, "mtp_draft: the batch has %d memory groups, the model %d", b->n_groups, mem->n_groups);
    for (int s = 0; s < b->n_seqs; s++) {
        int p = b->positions[s];
        if (b->seq[s] != s || b->tokens[s] < 0 || b->tokens[s] >= n_vocab || p < 1)
            return pith_errf(err, "mtp_draft: token %d is not a sequence's next token at a position >= 1", s);
        for (int g = 0; g < mem->n_groups; g++) {
            const pith_kv_cache *kv = &mem->groups[g];
            const pith_batch_mem *bm = &b->mem[g];
            if (kv->kind == PITH_MEM_RECURRENT) {
                int32_t slot = bm->state_slots ? bm->state_slots[s] : -1;
                if (slot < 0 || slot >= kv->n_slots)
                    return pith_errf(err, "mtp_draft: sequence %d: state slot %d out of range", s, (int)slot);
                continue;
            }
            if (!bm->block_tables || (p - 1) / kv->block_size >= bm->max_blocks)
                return pith_errf(err, "mtp_draft: sequence %d's block table does not reach position %d", s, p - 1);
            for (int k = 0; k <= (p - 1) / kv->block_size; k++) {
                int32_t blk = bm->block_tables[(size_t)s * bm->max_blocks + k];
                if (blk < 0 || blk >= kv->n_blocks)
                    return pith_errf(err, "mtp_draft: sequence %d: block %d out of range", s, (int)blk);
            }
        }
    }
    return 0;
}
