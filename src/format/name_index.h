/* A sorted index from names (byte strings with explicit lengths) to positions in some array.
 *
 * Built once after a loader has collected its names; lookups are binary searches, and building reports a
 * duplicate name, which every loader treats as a malformed file. */
#ifndef PITH_FORMAT_NAME_INDEX_H
#define PITH_FORMAT_NAME_INDEX_H

#include <stdint.h>

#include "pith/gguf.h"

typedef struct pith_name_entry {
    pith_str name;
    int64_t pos;
} pith_name_entry;

typedef struct pith_name_index {
    pith_name_entry *entries; /* sorted by name */
    int64_t n;
} pith_name_index;

/* Takes ownership of `entries` (heap, n items, any order; n may be 0 with entries NULL). Returns 0, or
 * 1 when two names are equal (then *dup_pos is one of them and the index is still usable). */
int pith_name_index_build(pith_name_index *idx, pith_name_entry *entries, int64_t n, int64_t *dup_pos);
/* Position of the name, or -1. */
int64_t pith_name_index_find(const pith_name_index *idx, const char *name, uint64_t len);
void pith_name_index_free(pith_name_index *idx);

#endif
