#include "tokenizer/tok_map.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t tok_hash(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ mix64(w)) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    h = (h ^ mix64(w ^ 0xa0761d6478bd642fULL)) * 0x9e3779b97f4a7c15ULL;
    return mix64(h);
}

/* Load factor at most 2/3: linear probing stays short (tags make misses cheap) and the tables stay
 * small enough to keep cache and TLB misses down. */
static uint64_t table_size(size_t n_items) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n_items + (uint64_t)n_items / 2 + 2) cap <<= 1;
    return cap;
}

int tok_strmap_init(tok_strmap *m, size_t n_items) {
    uint64_t cap = table_size(n_items);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].id = -1;
    m->mask = cap - 1;
    return 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
}

static inline bool text_equals(tok_texts tx, int32_t id, const char *s, size_t n) {
    return tx.len[id] == n && memcmp(tx.arena + tx.off[id], s, n) == 0;
}

bool tok_strmap_insert(tok_strmap *m, tok_texts tx, int32_t id) {
    /* A later id with the same text replaces the earlier one, as llama.cpp's token_to_id does. */
    const char *s = tx.arena + tx.off[id];
    size_t n = tx.len[id];
    uint64_t h = tok_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tok_strslot *sl = &m->slots[i];
        if (sl->id < 0) {
            sl->id = id;
            sl->tag = tag;
            return true;
        }
        if (sl->tag == tag && text_equals(tx, sl->id, s, n)) {
            sl->id = id;
            return false;
        }
    }
}

int32_t tok_strmap_find(const tok_strmap *m, tok_texts tx, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = tok_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const tok_strslot *sl = &m->slots[i];
        if (sl->id < 0) return -1;
        if (sl->tag == tag && text_equals(tx, sl->id, s, n)) return sl->id;
    }
}

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

int tok_pairmap_init(tok_pairmap *m, size_t n_items) {
    uint64_t cap = table_size(n_items);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
}

void tok_pairmap_insert(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result) {
    uint64_t key = pair_key(a, b);
    if (m->count + 1 > m->mask) return; /* never fill up: lookups rely on an empty slot */
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        tok_pairslot *sl = &m->slots[i];
        if (sl->key == UINT64_MAX) {
            sl->key = key;
            sl->rank = rank;
            sl->result = result;
            m->count++;
            return;
        }
        if (sl->key == key) return;
    }
}

const tok_pairslot *tok_pairmap_find(const tok_pairmap *m, int32_t a, int32_t b) {
    if (!m->slots) return NULL;
    uint64_t key = pair_key(a, b);
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const tok_pairslot *sl = &m->slots[i];
        if (sl->key == UINT64_MAX) return NULL;
        if (sl->key == key) return sl;
    }
}
