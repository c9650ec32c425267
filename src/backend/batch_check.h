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

/* The batch of an MTP draft (model.h: mtp_draft; backend.h: set_draft): 1..max_steps steps, one token
 * per sequence (sequence s's at row s, at most max_tokens) at a position p >= 1 whose blocks
 * 0..(p - 1) / block_size are in each KV group's table, a state slot in each RECURRENT group. 0 or -1. */
int pith_draft_check(const pith_batch *b, const pith_kv_host *mem, int n_vocab, int n_steps, int max_tokens,
                     pith_err *err);

#endif
