/* KV pool: the block manager of one memory group. Decides which block is free, which is held by
 * sequences and which holds a reusable prefix (the prefix cache). It never sees the bytes: the model owns
 * the storage (model.h, mem_alloc); a block here is only an id into it.
 *
 * Every block is in exactly one of three states:
 *   free   - ref == 0, unnamed, on the free stack;
 *   used   - ref > 0 (held by that many sequences), named or not;
 *   cached - ref == 0 but named: its K/V is a known prefix, kept on an LRU list until evicted.
 * so n_free + n_cached + n_used == n_blocks always (kv_pool_check verifies this and the lists).
 *
 * A full block is named by a hash chain: name = H(parent name, its block_size token ids), where the
 * first block's parent is the request's cache salt hash. Lookups confirm a name by comparing the
 * parent name and the token ids, so a hash collision can only make a lookup miss, not return the wrong
 * K/V. Allocation takes a free block, else evicts the least recently released cached block. Callers
 * release a sequence's blocks tail first, so its tail is evicted before its head.
 *
 * Events (KV-cache events for routers: pith/engine.h, pith_kv_event): a pool with an event log records
 * every change to the set of named blocks, in order: STORED when kv_pool_name names a block, REMOVED
 * when a named block loses its name (evicted by kv_pool_alloc, or kv_pool_unname), CLEARED when the
 * owner drops the whole pool (kv_event_log_cleared). Replaying a pool's events from its creation
 * gives exactly its named blocks (cached or used). Without a log (log == NULL, the default) nothing is
 * recorded and the only cost is that one test of the pointer. */
#ifndef PITH_CORE_KV_POOL_H
#define PITH_CORE_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/status.h"

typedef struct kv_block {
    int ref;
    bool named;
    bool root;           /* named as the first block of a sequence (parent is the salt hash) */
    uint64_t name;       /* chain hash, when named */
    uint64_t parent;     /* parent's chain hash (or salt hash for a first block), when named */
    int hash_next;       /* next block in the same hash bucket, -1 ends */
    int lru_prev;        /* cached list links (older / newer), -1 ends */
    int lru_next;
    uint64_t last_used;  /* tick of the last release, for tests and debugging */
} kv_block;

/* What a pool records for its listener. STORED events keep a copy of the block's tokens (the block may
 * be evicted and renamed before the log is read); the log is the listener's, emptied as it reads. */
typedef enum kv_event_type { KV_EVENT_STORED = 1, KV_EVENT_REMOVED = 2, KV_EVENT_CLEARED = 3 } kv_event_type;

typedef struct kv_event_rec {
    uint8_t type;        /* kv_event_type */
    bool root;           /* STORED: the first block of a sequence */
    uint64_t name;       /* STORED, REMOVED */
    uint64_t parent;     /* STORED: the parent's name, or the salt hash of a root block */
} kv_event_rec;

typedef struct kv_event_log {
    kv_event_rec *ev;    /* [cap] */
    int32_t *tokens;     /* [cap * block_size]: event i's tokens (STORED) at i * block_size */
    int n, cap;
    int block_size;
    bool lost;           /* out of memory while recording: events were dropped since the last read */
} kv_event_log;

/* Appends an event (tokens: block_size ids for STORED, else NULL); on allocation failure sets lost. */
void kv_event_log_push(kv_event_log *l, kv_event_type type, uint64_t name, uint64_t parent, bool root,
                       const int32_t *tokens);
/* The whole pool was dropped: earlier unread events no longer matter, so they are replaced by one
 * CLEARED (which also clears lost). */
void kv_event_log_cleared(kv_event_log *l);
void kv_event_log_free(kv_event_log *l);

typedef struct kv_pool {
    int n_blocks;
    int block_size;
    kv_block *blocks;
    int32_t *tokens;     /* [n_blocks * block_size]: the token ids of named blocks */
    int *buckets;        /* hash table heads, -1 empty */
    int n_buckets;       /* power of two */
    int *free_stack;
    int n_free;
    int lru_head;        /* oldest cached block (evicted first) */
    int lru_tail;
    int n_cached;
    int n_used;
    uint64_t tick;
    uint64_t evictions;
    kv_event_log *log;   /* NULL: no events recorded (the owner sets it; block_size must match) */
} kv_pool;

int kv_pool_init(kv_pool *p, int block_size, int n_blocks, pith_err *err);
void kv_pool_free(kv_pool *p);

/* Blocks an allocation can get right now: free plus evictable cached ones. */
static inline int kv_pool_available(const kv_pool *p) { return p->n_free + p->n_cached; }

/* Takes a block (ref 1, unnamed): a free one, else evicts the oldest cached one. -1 when none. */
int kv_pool_alloc(kv_pool *p);
/* Adds a reference to a used or cached block (a cached block becomes used). */
void kv_pool_acquire(kv_pool *p, int block);
/* Drops a reference; at zero a named block becomes cached (newest), an unnamed one free. */
void kv_pool_release(kv_pool *p, int block);

/* Chain hash of one full block. */
uint64_t kv_pool_chain_hash(uint64_t parent, const int32_t *tokens, int block_size);
/* Hash of a cache salt; 0 for NULL or "" (no salt). */
uint64_t kv_pool_salt_hash(const char *salt);
/* The block named `name` with this parent and these tokens, or -1. Takes no reference. */
int kv_pool_lookup(const kv_pool *p, uint64_t name, uint64_t parent, const int32_t *tokens);
/* Names a used block whose K/V for `tokens` is now computed; root: it is a sequence's first block (its
 * parent is the salt hash), which an event listener needs to start a chain. Does nothing when the block
 * is already named or another block has this name already (the content is then cached once). */
void kv_pool_name(kv_pool *p, int block, uint64_t name, uint64_t parent, bool root, const int32_t *tokens);

/* Takes the name off a used block (whose holder is about to overwrite its content). */
void kv_pool_unname(kv_pool *p, int block);

/* Checks the invariants above (counts, list membership, hash table). When expected_refs is not NULL
 * it must hold, for every block, the number of references the caller's sequences hold. Returns 0 or
 * -1 with err saying what is wrong. */
int kv_pool_check(const kv_pool *p, const int *expected_refs, pith_err *err);

#endif
