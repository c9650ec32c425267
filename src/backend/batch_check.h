/* What a backend checks before it trusts a batch (batch.h) against the memory it allocated (kv.h):
 * everything a wrong caller could break in a way that reads or writes out of bounds. */
#ifndef PITH_MODEL_BATCH_CHECK_H
#define PITH_MODEL_BATCH_CHECK_H

#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/memory.h"

/* Tokens inside the vocabulary, sequence indices in range, each sequence's tokens contiguous at
 * consecutive positions, and per group: every block a token sees or writes inside the pool and its slot
 * agreeing with its block table (KV groups), every state slot inside the pool (RECURRENT). 0 or -1. */
int pith_batch_check(const pith_batch *b, const pith_mem_spec *spec, const pith_kv_host *mem, int n_vocab,
                     pith_err *err);

#endif
