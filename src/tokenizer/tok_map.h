/* Hash tables for the tokenizer: token text -> id, and (id, id) -> BPE merge.
 *
 * Both are open-addressing tables sized once (load factor <= 2/3) and read-only afterwards, so
 * lookups need no locking. The text map does not own the texts: it stores ids and resolves them
 * through a tok_texts view of the tokenizer's arena, which must not move while the map is used. */
#ifndef PITH_TOK_MAP_H
#define PITH_TOK_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t tok_hash(const void *data, size_t n);

typedef struct tok_texts {
    const char *arena;
    const uint64_t *off;
    const uint32_t *len;
} tok_texts;

typedef struct tok_strslot {
    int32_t id;     /* -1: empty */
    uint32_t tag;   /* high bits of the hash, to skip most mismatches without touching the text */
} tok_strslot;

typedef struct tok_strmap {
    tok_strslot *slots;
    uint64_t mask;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t n_items);
void tok_strmap_free(tok_strmap *m);
/* Inserts id under its own text; returns false when that text was already present (the new id
 * replaces the old one). */
bool tok_strmap_insert(tok_strmap *m, tok_texts tx, int32_t id);
int32_t tok_strmap_find(const tok_strmap *m, tok_texts tx, const char *s, size_t n);

typedef struct tok_pairslot {
    uint64_t key;   /* UINT64_MAX: empty */
    int32_t rank;
    int32_t result;
} tok_pairslot;

typedef struct tok_pairmap {
    tok_pairslot *slots;
    uint64_t mask;
    size_t count;
} tok_pairmap;

int tok_pairmap_init(tok_pairmap *m, size_t n_items);
void tok_pairmap_free(tok_pairmap *m);
/* Keeps the existing entry when the pair is present (the earlier, higher-priority merge wins). */
void tok_pairmap_insert(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result);
const tok_pairslot *tok_pairmap_find(const tok_pairmap *m, int32_t a, int32_t b);

#endif
