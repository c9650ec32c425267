/* The encoder cache: encoder outputs (a media span's rows) by content hash, within a byte budget, least
 * recently used first out. It lets an image be encoded once however many times its span is computed:
 * recompute after preemption, siblings, a chat's next turn, the same image in other requests.
 *
 * Invariants (enc_cache_check): bytes is the sum of the entries' sizes and never exceeds the budget
 * after an insert returns; entries are distinct by key; an entry pinned in the current step is never
 * evicted (the step's batch reads it), so a step may briefly hold more than the budget when its own
 * items need it; enc_cache_unpin_all ends the step. Keys are (hash, rows, width): the same content
 * encoded to another shape is another entry. */
#ifndef PITH_CORE_ENC_CACHE_H
#define PITH_CORE_ENC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/status.h"

typedef struct enc_entry {
    uint64_t hash;
    int rows, width;
    float *data;               /* [rows * width] */
    uint64_t last_use;
    bool pinned;
} enc_entry;

typedef struct enc_cache {
    size_t budget;
    size_t bytes;
    enc_entry *e;
    int n, cap;
    uint64_t clock;
} enc_cache;

void enc_cache_init(enc_cache *c, size_t budget);
void enc_cache_free(enc_cache *c);

/* The rows of (hash, rows, width), pinned for this step; NULL when not cached. */
const float *enc_cache_get(enc_cache *c, uint64_t hash, int rows, int width);
/* Space for a new entry's rows, pinned: evicts unpinned entries, oldest first, until it fits the
 * budget. NULL when out of memory, or when the entry alone would exceed the budget (the caller then
 * encodes into memory of its own for this step). The caller fills the rows before the step's batch. */
float *enc_cache_put(enc_cache *c, uint64_t hash, int rows, int width);
/* Drops an entry put this step whose encoding failed. */
void enc_cache_drop(enc_cache *c, const float *data);
void enc_cache_unpin_all(enc_cache *c);
/* Drops every entry (the weights changed). */
void enc_cache_clear(enc_cache *c);
/* The invariants above; 0, or -1 with err. */
int enc_cache_check(const enc_cache *c, pith_err *err);

#endif
