/* Model-level tests drive a model without the engine: these helpers allocate its declared memory and
 * build batches whose every memory group uses the same slots and block tables (each group has its own
 * pool of the same size, so the same ids are valid in all of them). */
#ifndef PITH_TEST_MODEL_MEM_H
#define PITH_TEST_MODEL_MEM_H

#include "pith/model.h"

/* Every KV group gets n_blocks blocks of bs slots of `type`; a RECURRENT group n_blocks state slots. */
static int tm_alloc(pith_model *m, int bs, int n_blocks, int max_batch, pith_dtype type, pith_err *err) {
    pith_mem_layout lay = {.block_size = bs, .n_groups = m->mem.n_groups};
    for (int g = 0; g < lay.n_groups; g++) {
        lay.n_blocks[g] = n_blocks;
        lay.type[g] = type;
    }
    pith_model_limits lim = {.max_batch_tokens = max_batch, .max_num_seqs = 8, .max_seq_len = n_blocks * bs,
                             .max_logits = max_batch};
    if (pith_model_prepare(m, &lim, err)) return -1;
    return pith_model_mem_alloc(m, &lay, err);
}

typedef struct tm_batch {
    pith_batch b;
    pith_batch_mem mem[PITH_MAX_MEM_GROUPS];
} tm_batch;

/* state_slots: sequence s uses state slot s. */
static const int32_t tm_identity_slots[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static void tm_batch_init(tm_batch *t, const pith_model *m, int n, const int32_t *tok, const int32_t *pos,
                          const int32_t *seq, const int32_t *slot, const uint8_t *want, int n_seqs, int max_blocks,
                          const int32_t *tables) {
    for (int g = 0; g < PITH_MAX_MEM_GROUPS; g++)
        t->mem[g] = (pith_batch_mem){.slots = slot, .block_tables = tables, .max_blocks = max_blocks,
                                     .state_slots = tm_identity_slots};
    t->b = (pith_batch){.n_tokens = n, .tokens = tok, .positions = pos, .seq = seq, .want_logits = want,
                        .n_seqs = n_seqs, .n_groups = m->mem.n_groups, .mem = t->mem};
}

#endif
