#include "core/kv_pool.h"

#include <stdlib.h>
#include <string.h>

/* A 64-bit finaliser (from splitmix64): spreads FNV-style accumulations over all bits, so the low bits
 * used as a bucket index are as good as the high ones. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const uint64_t FNV_OFFSET = 0xcbf29ce484222325ull;
static const uint64_t FNV_PRIME = 0x100000001b3ull;

uint64_t kv_pool_chain_hash(uint64_t parent, const int32_t *tokens, int block_size) {
    uint64_t h = FNV_OFFSET ^ mix64(parent);
    for (int i = 0; i < block_size; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int b = 0; b < 4; b++) {
            h ^= (t >> (8 * b)) & 0xff;
            h *= FNV_PRIME;
        }
    }
    h = mix64(h);
    return h ? h : 1; /* 0 is reserved for "no salt" */
}

uint64_t kv_pool_salt_hash(const char *salt) {
    if (!salt || !*salt) return 0;
    uint64_t h = FNV_OFFSET;
    for (const unsigned char *s = (const unsigned char *)salt; *s; s++) {
        h ^= *s;
        h *= FNV_PRIME;
    }
    h = mix64(h);
    return h ? h : 1;
}

int kv_pool_init(kv_pool *p, int block_size, int n_blocks, pith_err *err) {
    memset(p, 0, sizeof *p);
    if (block_size <= 0 || n_blocks <= 0 || block_size > (1 << 16) || n_blocks > (1 << 28))
        return pith_errf(err, "KV pool: bad size (%d blocks of %d tokens)", n_blocks, block_size);
    if ((size_t)n_blocks * (size_t)block_size > (size_t)INT32_MAX)
        return pith_errf(err, "KV pool: %d blocks of %d tokens exceed the slot index range", n_blocks, block_size);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_buckets = 1;
    while (p->n_buckets < 2 * n_blocks) p->n_buckets *= 2;
    p->blocks = calloc((size_t)n_blocks, sizeof *p->blocks);
    p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
    p->buckets = malloc((size_t)p->n_buckets * sizeof *p->buckets);
    p->free_stack = malloc((size_t)n_blocks * sizeof *p->free_stack);
    if (!p->blocks || !p->tokens || !p->buckets || !p->free_stack) {
        kv_pool_free(p);
        return pith_errf(err, "KV pool: out of memory for %d blocks", n_blocks);
    }
    for (int i = 0; i < p->n_buckets; i++) p->buckets[i] = -1;
    for (int i = 0; i < n_blocks; i++) {
        p->blocks[i].hash_next = p->blocks[i].lru_prev = p->blocks[i].lru_next = -1;
        /* Lowest ids on top of the stack: allocation order is easy to follow in tests. */
        p->free_stack[i] = n_blocks - 1 - i;
    }
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void kv_pool_free(kv_pool *p) {
    if (!p) return;
    free(p->blocks);
    free(p->tokens);
    free(p->buckets);
    free(p->free_stack);
    memset(p, 0, sizeof *p);
}

static int bucket_of(const kv_pool *p, uint64_t name) { return (int)(name & (uint64_t)(p->n_buckets - 1)); }

static void lru_unlink(kv_pool *p, int b) {
    kv_block *k = &p->blocks[b];
    if (k->lru_prev >= 0) p->blocks[k->lru_prev].lru_next = k->lru_next;
    else p->lru_head = k->lru_next;
    if (k->lru_next >= 0) p->blocks[k->lru_next].lru_prev = k->lru_prev;
    else p->lru_tail = k->lru_prev;
    k->lru_prev = k->lru_next = -1;
    p->n_cached--;
}

static void lru_push_newest(kv_pool *p, int b) {
    kv_block *k = &p->blocks[b];
    k->lru_prev = p->lru_tail;
    k->lru_next = -1;
    if (p->lru_tail >= 0) p->blocks[p->lru_tail].lru_next = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

void kv_event_log_push(kv_event_log *l, kv_event_type type, uint64_t name, uint64_t parent, bool root,
                       const int32_t *tokens) {
    if (l->lost) return; /* the read that follows reports the loss; later events alone would mislead */
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        kv_event_rec *ev = realloc(l->ev, (size_t)cap * sizeof *ev);
        if (ev) l->ev = ev;
        int32_t *tok = ev ? realloc(l->tokens, (size_t)cap * (size_t)l->block_size * sizeof *tok) : NULL;
        if (tok) l->tokens = tok;
        if (!ev || !tok) {
            l->lost = true;
            return;
        }
        l->cap = cap;
    }
    l->ev[l->n] = (kv_event_rec){.type = (uint8_t)type, .root = root, .name = name, .parent = parent};
    if (tokens) memcpy(&l->tokens[(size_t)l->n * l->block_size], tokens, (size_t)l->block_size * sizeof *tokens);
    l->n++;
}

void kv_event_log_cleared(kv_event_log *l) {
    l->n = 0;
    l->lost = false;
    kv_event_log_push(l, KV_EVENT_CLEARED, 0, 0, false, NULL); /* cap >= 64 after the first push, or lost */
}

void kv_event_log_free(kv_event_log *l) {
    free(l->ev);
    free(l->tokens);
    l->ev = NULL;
    l->tokens = NULL;
    l->n = l->cap = 0;
    l->lost = false;
}

static void unname(kv_pool *p, int b) {
    if (!p->blocks[b].named) return;
    kv_block *k = &p->blocks[b];
    if (p->log) kv_event_log_push(p->log, KV_EVENT_REMOVED, k->name, 0, false, NULL);
    int *link = &p->buckets[bucket_of(p, k->name)];
    while (*link != b) link = &p->blocks[*link].hash_next;
    *link = k->hash_next;
    k->hash_next = -1;
    k->named = k->root = false;
    k->name = k->parent = 0;
}

int kv_pool_alloc(kv_pool *p) {
    int b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_unlink(p, b);
        unname(p, b);
        p->evictions++;
    } else {
        return -1;
    }
    p->blocks[b].ref = 1;
    p->n_used++;
    return b;
}

void kv_pool_acquire(kv_pool *p, int block) {
    kv_block *k = &p->blocks[block];
    if (k->ref == 0) {
        lru_unlink(p, block); /* only named blocks are ever looked up, so a ref-0 one is cached */
        p->n_used++;
    }
    k->ref++;
}

void kv_pool_release(kv_pool *p, int block) {
    kv_block *k = &p->blocks[block];
    if (--k->ref > 0) return;
    p->n_used--;
    k->last_used = ++p->tick;
    if (k->named) lru_push_newest(p, block);
    else p->free_stack[p->n_free++] = block;
}

int kv_pool_lookup(const kv_pool *p, uint64_t name, uint64_t parent, const int32_t *tokens) {
    for (int b = p->buckets[bucket_of(p, name)]; b >= 0; b = p->blocks[b].hash_next) {
        const kv_block *k = &p->blocks[b];
        if (k->name == name && k->parent == parent &&
            !memcmp(&p->tokens[(size_t)b * p->block_size], tokens, (size_t)p->block_size * sizeof *tokens))
            return b;
    }
    return -1;
}

void kv_pool_name(kv_pool *p, int block, uint64_t name, uint64_t parent, bool root, const int32_t *tokens) {
    kv_block *k = &p->blocks[block];
    if (k->named || kv_pool_lookup(p, name, parent, tokens) >= 0) return;
    memcpy(&p->tokens[(size_t)block * p->block_size], tokens, (size_t)p->block_size * sizeof *tokens);
    if (p->log) kv_event_log_push(p->log, KV_EVENT_STORED, name, parent, root, tokens);
    k->named = true;
    k->root = root;
    k->name = name;
    k->parent = parent;
    int *head = &p->buckets[bucket_of(p, name)];
    k->hash_next = *head;
    *head = block;
}

void kv_pool_unname(kv_pool *p, int block) {
    if (p->blocks[block].ref > 0) unname(p, block);
}

int kv_pool_check(const kv_pool *p, const int *expected_refs, pith_err *err) {
    int n = p->n_blocks;
    if (p->n_free < 0 || p->n_cached < 0 || p->n_used < 0 || p->n_free + p->n_cached + p->n_used != n)
        return pith_errf(err, "KV pool: free %d + cached %d + used %d != total %d", p->n_free, p->n_cached,
                         p->n_used, n);
    /* seen: 1 on the free stack, 2 on the LRU list, 4 in the hash table */
    unsigned char *seen = calloc((size_t)n, 1);
    if (!seen) return pith_errf(err, "KV pool check: out of memory");
    int rc = -1;
    for (int i = 0; i < p->n_free; i++) {
        int b = p->free_stack[i];
        if (b < 0 || b >= n || seen[b]) { pith_errf(err, "KV pool: free stack entry %d is bad or repeated", b); goto done; }
        seen[b] |= 1;
    }
    int count = 0, prev = -1;
    for (int b = p->lru_head; b >= 0; prev = b, b = p->blocks[b].lru_next) {
        if (b >= n || (seen[b] & 2) || ++count > n) { pith_errf(err, "KV pool: LRU list is corrupt at block %d", b); goto done; }
        if (p->blocks[b].lru_prev != prev) { pith_errf(err, "KV pool: LRU back link of block %d is wrong", b); goto done; }
        if (prev >= 0 && p->blocks[prev].last_used > p->blocks[b].last_used) { pith_errf(err, "KV pool: LRU list out of order at block %d", b); goto done; }
        seen[b] |= 2;
    }
    if (prev != p->lru_tail || count != p->n_cached) { pith_errf(err, "KV pool: LRU list holds %d blocks, counted %d", count, p->n_cached); goto done; }
    count = 0;
    for (int h = 0; h < p->n_buckets; h++) {
        for (int b = p->buckets[h]; b >= 0; b = p->blocks[b].hash_next) {
            if (b >= n || (seen[b] & 4) || ++count > n) { pith_errf(err, "KV pool: hash chain is corrupt at block %d", b); goto done; }
            if (!p->blocks[b].named || bucket_of(p, p->blocks[b].name) != h) { pith_errf(err, "KV pool: block %d is in the wrong bucket", b); goto done; }
            seen[b] |= 4;
        }
    }
    int n_used = 0;
    for (int b = 0; b < n; b++) {
        const kv_block *k = &p->blocks[b];
        bool is_free = seen[b] & 1, is_cached = seen[b] & 2, hashed = seen[b] & 4;
        if (k->ref < 0) { pith_errf(err, "KV pool: block %d has ref %d", b, k->ref); goto done; }
        if (k->named != hashed) { pith_errf(err, "KV pool: block %d named %d but hashed %d", b, k->named, hashed); goto done; }
        if (k->ref > 0 && (is_free || is_cached)) { pith_errf(err, "KV pool: block %d has ref %d but is on a free list", b, k->ref); goto done; }
        if (k->ref == 0 && is_free == is_cached) { pith_errf(err, "KV pool: unreferenced block %d is %s", b, is_free ? "both free and cached" : "lost (on no list)"); goto done; }
        if (is_free && k->named) { pith_errf(err, "KV pool: free block %d is still named", b); goto done; }
        if (is_cached && !k->named) { pith_errf(err, "KV pool: cached block %d has no name", b); goto done; }
        if (expected_refs && expected_refs[b] != k->ref) { pith_errf(err, "KV pool: block %d has ref %d but sequences hold %d", b, k->ref, expected_refs[b]); goto done; }
        n_used += k->ref > 0;
    }
    if (n_used != p->n_used) { pith_errf(err, "KV pool: %d blocks referenced, counted %d", n_used, p->n_used); goto done; }
    rc = 0;
done:
    free(seen);
    return rc;
}
