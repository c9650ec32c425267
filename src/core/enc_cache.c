#include "core/enc_cache.h"

#include <stdlib.h>
#include <string.h>

static size_t entry_bytes(int rows, int width) { return (size_t)rows * (size_t)width * sizeof(float); }

void enc_cache_init(enc_cache *c, size_t budget) {
    memset(c, 0, sizeof *c);
    c->budget = budget;
}

void enc_cache_clear(enc_cache *c) {
    for (int i = 0; i < c->n; i++) free(c->e[i].data);
    c->n = 0;
    c->bytes = 0;
}

void enc_cache_free(enc_cache *c) {
    enc_cache_clear(c);
    free(c->e);
    memset(c, 0, sizeof *c);
}

static int find(const enc_cache *c, uint64_t hash, int rows, int width) {
    for (int i = 0; i < c->n; i++) /* a few hundred entries at most: a scan is cheaper than an index */
        if (c->e[i].hash == hash && c->e[i].rows == rows && c->e[i].width == width) return i;
    return -1;
}

const float *enc_cache_get(enc_cache *c, uint64_t hash, int rows, int width) {
    int i = find(c, hash, rows, width);
    if (i < 0) return NULL;
    c->e[i].last_use = ++c->clock;
    c->e[i].pinned = true;
    return c->e[i].data;
}

static void remove_at(enc_cache *c, int i) {
    c->bytes -= entry_bytes(c->e[i].rows, c->e[i].width);
    free(c->e[i].data);
    c->e[i] = c->e[--c->n];
}

float *enc_cache_put(enc_cache *c, uint64_t hash, int rows, int width) {
    size_t need = entry_bytes(rows, width);
    if (need > c->budget || find(c, hash, rows, width) >= 0) return NULL;
    while (c->bytes + need > c->budget) {
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (!c->e[i].pinned && (victim < 0 || c->e[i].last_use < c->e[victim].last_use)) victim = i;
        if (victim < 0) return NULL; /* this step's own entries fill the budget */
        remove_at(c, victim);
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        enc_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        c->e = e;
        c->cap = cap;
    }
    float *data = malloc(need);
    if (!data) return NULL;
    c->e[c->n++] = (enc_entry){.hash = hash, .rows = rows, .width = width, .data = data, .last_use = ++c->clock, .pinned = true};
    c->bytes += need;
    return data;
}

void enc_cache_drop(enc_cache *c, const float *data) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].data == data) {
            remove_at(c, i);
            return;
        }
}

void enc_cache_unpin_all(enc_cache *c) {
    for (int i = 0; i < c->n; i++) c->e[i].pinned = false;
}

int enc_cache_check(const enc_cache *c, pith_err *err) {
    size_t sum = 0;
    bool pinned = false;
    for (int i = 0; i < c->n; i++) {
        const enc_entry *x = &c->e[i];
        if (!x->data || x->rows < 1 || x->width < 1) return pith_errf(err, "encoder cache entry %d is empty", i);
        if (find(c, x->hash, x->rows, x->width) != i) return pith_errf(err, "encoder cache entry %d is duplicated", i);
        sum += entry_bytes(x->rows, x->width);
        pinned |= x->pinned;
    }
    if (sum != c->bytes) return pith_errf(err, "encoder cache counts %zu bytes, its entries hold %zu", c->bytes, sum);
    if (!pinned && c->bytes > c->budget)
        return pith_errf(err, "encoder cache holds %zu bytes over its budget of %zu", c->bytes, c->budget);
    return 0;
}
