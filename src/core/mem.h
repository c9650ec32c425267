/* The memory manager: the engine's view of the memory groups a model declared (memory.h), one pool per
 * group, and what each sequence holds in each of them (seq.h: blocks, lo/hi, state slots).
 *
 * Owns the pools: one kv_pool (blocks, prefix cache, LRU) per KV group; per RECURRENT group a free
 * list of running state slots and a snapshot pool. It decides per group what a sequence must hold:
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
 * token, which must run to produce logits) needs every FULL group to hold blocks [0, k), every
 * WINDOW group the blocks covering [H - W + 1, H), and every RECURRENT group a snapshot at exactly H;
 * the longest H that all groups can serve is used.
 *
 * State snapshots (RECURRENT groups): a state cannot be rebuilt from blocks, so the state after H
 * tokens is copied into a snapshot slot, named like block k - 1 (the chain hash of all H tokens, its
 * parent and its tokens, so a lookup is confirmed as for blocks). Snapshot slots are a kv_pool of their
 * own per group (slot ids n_slots + b): free, held or cached, with an LRU and a size set by its byte
 * budget. A hit copies the snapshot into the sequence's own slot (copy-on-write: a cached snapshot is
 * never written by a forward pass). Where snapshots are taken (the policy), all at block boundaries:
 *   - the last block boundary before the prompt's last token: the same prompt again (n > 1, retries)
 *     and a chat's next turn can resume there;
 *   - the divergence point: where the FULL groups' cache matched further than any snapshot, i.e. where
 *     this prompt leaves one seen before (a shared system prompt, the second request onwards);
 *   - every `interval` tokens of a long prompt (and of recomputed output);
 *   - while decoding, every block boundary into one slot the sequence holds and renames as it goes,
 *     released to the cache when the sequence ends: the end of the reply, where the next turn's prompt
 *     continues.
 * The scheduler ends prefill chunks on these points (mem_chunk_end). The model does the copies: mem
 * only queues them (mem_take_copies) and the engine runs each queue before the memory is used: restores
 * right after scheduling (before the forward pass), snapshots right after the commit (before the next
 * forward pass changes the state). */
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
    int n_slots;           /* RECURRENT: running state slots, ids 0..n_slots-1 */
    int *free_slots;
    int n_free_slots;
    int n_snaps;           /* RECURRENT: snapshot slots, ids n_slots + b for snaps block b */
    kv_pool snaps;         /* RECURRENT with n_snaps > 0 */
    int32_t *q_src, *q_dst; /* queued copies (slot ids), run by the engine through copy_blocks */
    int n_q, cap_q;
} mem_group;

typedef struct mem_config {
    bool prefix_cache;
    int n_state_slots;     /* RECURRENT groups: running slots; the layout's n_blocks beyond are snapshots */
    int snapshot_interval; /* tokens between snapshots of a long prompt, a multiple of the block size; 0: none */
} mem_config;

typedef struct mem {
    int n_groups;
    int block_size;
    bool prefix_cache;
    bool snapshots;        /* prefix caching with RECURRENT groups, all with snapshot slots */
    bool has_recurrent;
    int snapshot_interval;
    uint64_t snaps_taken;  /* snapshot copies queued (taken or renamed) */
    uint64_t snaps_restored;
    mem_group g[PITH_MAX_MEM_GROUPS];
} mem;

/* Pools sized by the layout. Prefix caching stays off when a RECURRENT group has no snapshot slots. */
int mem_init(mem *m, const pith_mem_spec *spec, const pith_mem_layout *layout, const mem_config *cfg, pith_err *err);
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
/* Forks child (holding nothing, same tokens) from parent, whose first n_computed tokens are computed:
 * full blocks shared by reference, the partial last block and every recurrent state copied (queued:
 * run the copies before parent's next forward pass). Returns false, changing nothing, when a pool
 * cannot supply the copies' blocks or slots. */
bool mem_fork(mem *m, seq *parent, seq *child);
/* Where the next chunk of s must end: the first snapshot point after n_computed, else n_tokens. */
int mem_chunk_end(const mem *m, const seq *s);
/* Hands over group g's queued copies (src[i] -> dst[i], slot ids for copy_blocks; dst distinct, never a
 * src) and empties the queue. The arrays stay valid until the next call that queues. Returns n. */
int mem_take_copies(mem *m, int g, const int32_t **src, const int32_t **dst);
/* Releases everything s holds (tail first in each group, so a sequence's tail is evicted before its
 * head) and resets it to hold nothing. */
void mem_release(mem *m, seq *s);

/* Free plus evictable units of group g. */
int mem_available(const mem *m, int g);

/* Checks the invariants above for these running sequences (and every pool's own check). 0 or -1. */
int mem_check(const mem *m, seq *const *running, int n_running, pith_err *err);

#endif
