#include "format/name_index.h"

#include <stdlib.h>
#include <string.h>

static int cmp_str(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    uint64_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, (size_t)n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int cmp_entry(const void *pa, const void *pb) {
    const pith_name_entry *a = pa, *b = pb;
    int c = cmp_str(a->name.ptr, a->name.len, b->name.ptr, b->name.len);
    if (c) return c;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

int pith_name_index_build(pith_name_index *idx, pith_name_entry *entries, int64_t n, int64_t *dup_pos) {
    idx->entries = entries;
    idx->n = n;
    if (n > 1) qsort(entries, (size_t)n, sizeof *entries, cmp_entry);
    for (int64_t i = 1; i < n; i++) {
        const pith_str *a = &entries[i - 1].name, *b = &entries[i].name;
        if (!cmp_str(a->ptr, a->len, b->ptr, b->len)) {
            if (dup_pos) *dup_pos = entries[i].pos;
            return 1;
        }
    }
    return 0;
}

int64_t pith_name_index_find(const pith_name_index *idx, const char *name, uint64_t len) {
    int64_t lo = 0, hi = idx->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const pith_str *s = &idx->entries[mid].name;
        int c = cmp_str(s->ptr, s->len, name, len);
        if (c == 0) return idx->entries[mid].pos;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

void pith_name_index_free(pith_name_index *idx) {
    free(idx->entries);
    idx->entries = NULL;
    idx->n = 0;
}
