/* The memory manager: the engine's view of the memory groups a model declared (memory.h), one pool per
 * group, and what each sequence holds in each of them (seq.h: blocks, lo/hi, state slots).
 *
 * Owns the pools: one kv_pool (blocks, prefix cache, LRU) per KV group, a free list of state slots per
 * RECURRENT group. It decides per group what a sequence must hold:
 *   FULL       every block from 0 up to the last position computed or about to be;
 *   WINDOW     only the blocks the next token's window [p - W + 1, p] touches, plus those of the chunk
 *              about to be computed: after each step the blocks that fell out of the window go back to
 *              the pool (named ones stay in the prefix cache, evictable);
 *   RECURRENT  one state slot while the sequence runs.
 * Invariants (mem_check): in every KV group a running sequence holds exactly [lo, hi), all valid ids;
 * lo == 0 in FULL groups and lo == the first block the window of position n_computed touches in
 * WINDOW groups; hi * block_size >= n_computed; each block's refcount equals the running sequences
 * holding it; a waiting sequence holds nothing.
 *
 * Prefix cache: a full block is named by its chain hash (kv_pool.h) in every group that holds it when
 * it completes. A hit of length H = k * block_size (k full blocks, never the block of the last prompt
 * token, which must run to produce logits) needs every FULL group to hold blocks [0, k) and every
 * WINDOW group the blocks covering [H - W + 1, H); the longest H that all groups can serve is used.
 * A model with a RECURRENT group gets no prefix hits (its state cannot be rebuilt from blocks; state
 * snapshots are future work). */
#ifndef PITH_CORE_MEM_H
#define PITH_CORE_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "core/kv_pool.h"
#include "core/seq.h"
#include "pith/memory.h"

typedef struct mem_group {
    pith_mem_kind kind;
    int window;
    size_t unit_bytes;     /* one block (KV) or one state slot (RECURRENT) */
    kv_pool pool;          /* KV groups */
    int n_slots;           /* RECURRENT: slots in all */
    int *free_slots;
    int n_free_slots;
} mem_group;

typedef struct mem {
    int n_groups;
    int block_size;
    bool prefix_cache;
    mem_group g[PITH_MAX_MEM_GROUPS];
} mem;

/* Pools sized by the layout. prefix_cache is forced off when a RECURRENT group exists. */
int mem_init(mem *m, const pith_mem_spec *spec, const pith_mem_layout *layout, bool prefix_cache, pith_err *err);
void mem_free(mem *m);

/* The first block index that the window of a token at position p touches in group g (0 unless WINDOW). */
int mem_first_needed(const mem *m, int g, int p);

/* Admission of a sequence that holds nothing: finds the longest cached prefix every group can serve,
 * takes it, and takes what the first uncached token needs besides (FULL groups: blocks for all current
 * tokens; WINDOW groups: the block of that token; RECURRENT: a state slot). Sets n_computed to the hit
 * length and returns the tokens it looked up and found through *hit. Returns false, changing nothing,
 * when a pool cannot supply that much. */
bool mem_admit(mem *m, seq *s, int *hit);
/* Takes blocks so positions [n_computed, upto) can be computed in every KV group. Returns the position
 * it covered in all groups (n_computed <= result <= upto); below upto when a pool ran out (blocks
 * taken stay held). */
int mem_grow(mem *m, seq *s, int upto);
/* After n_computed advanced: names the blocks that completed, and releases the WINDOW blocks no later
 * token can see. */
void mem_commit(mem *m, seq *s);
/* Releases everything s holds (tail first in each group, so a sequence's tail is evicted before its
 * head) and resets it to hold nothing. */
void mem_release(mem *m, seq *s);

/* Free plus evictable units of group g. */
int mem_available(const mem *m, int g);

/* Checks the invariants above for these running sequences (and every pool's own check). 0 or -1. */
int mem_check(const mem *m, seq *const *running, int n_running, pith_err *err);

#endif
