/* Memory for the chat-template interpreter: a bump arena with a byte budget, growable buffers, strings,
 * lists and dicts built on it, and the error helper. Everything a render allocates goes through the
 * arena, so one jarena_free releases it all, and the budget bounds what a hostile template can take. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

struct jarena_chunk {
    jarena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

enum { CHUNK_MIN = 64 * 1024 };

void jarena_init(jarena *a, size_t limit) {
    a->head = NULL;
    a->used_total = 0;
    a->limit = limit;
}

void *jarena_alloc(jarena *a, size_t n) {
    if (n > a->limit) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jarena_chunk *h = a->head;
    if (!h || h->size - h->used < n) {
        size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
        if (a->used_total + size + sizeof(jarena_chunk) > a->limit) {
            /* A smaller chunk may still fit under the budget. */
            size = n;
            if (a->used_total + size + sizeof(jarena_chunk) > a->limit) return NULL;
        }
        h = malloc(sizeof(jarena_chunk) + size);
        if (!h) return NULL;
        h->size = size;
        h->used = 0;
        h->next = a->head;
        a->head = h;
        a->used_total += size + sizeof(jarena_chunk);
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    jarena_chunk *h = a->head;
    while (h) {
        jarena_chunk *next = h->next;
        free(h);
        h = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

int jerr(jctx *c, const char *fmt, ...) {
    if (!c->err) return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->line > 0)
        snprintf(c->err->msg, sizeof c->err->msg, "chat template: %s at line %d", what, c->line);
    else
        snprintf(c->err->msg, sizeof c->err->msg, "chat template: %s", what);
    return -1;
}

void *jalloc(jctx *c, size_t n) {
    void *p = jarena_alloc(c->arena, n);
    if (!p) jerr(c, "memory limit of %zu bytes exceeded", c->arena->limit);
    return p;
}

void *jalloc_array(jctx *c, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        jerr(c, "memory limit of %zu bytes exceeded", c->arena->limit);
        return NULL;
    }
    return jalloc(c, n * size);
}

int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n) {
    if (n == 0) return 0;
    if (n > c->lim.max_output_bytes || b->n > c->lim.max_output_bytes - n)
        return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = jalloc(c, cap);
        if (!p) return -1;
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

int jbuf_putc(jctx *c, jbuf *b, char ch) { return jbuf_put(c, b, &ch, 1); }

int jbuf_puts(jctx *c, jbuf *b, const char *s) { return jbuf_put(c, b, s, strlen(s)); }

int jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return jerr(c, "internal formatting overflow");
    return jbuf_put(c, b, tmp, (size_t)n);
}

bool jstr_eq(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }

bool jstr_eq_c(jstr a, const char *s) {
    size_t n = strlen(s);
    return a.n == n && memcmp(a.p, s, n) == 0;
}

int jstr_dup(jctx *c, const char *s, size_t n, jstr *out) {
    if (n > c->lim.max_output_bytes)
        return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
    char *p = jalloc(c, n + 1);
    if (!p) return -1;
    if (n) memcpy(p, s, n);
    *out = (jstr){p, n};
    return 0;
}

int jstr_cat(jctx *c, jstr a, jstr b, jstr *out) {
    if (b.n == 0) { *out = a; return 0; }
    if (a.n == 0) { *out = b; return 0; }
    if (a.n > c->lim.max_output_bytes || b.n > c->lim.max_output_bytes - a.n)
        return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
    char *p = jalloc(c, a.n + b.n + 1);
    if (!p) return -1;
    memcpy(p, a.p, a.n);
    memcpy(p + a.n, b.p, b.n);
    *out = (jstr){p, a.n + b.n};
    return 0;
}

int jlist_new(jctx *c, size_t n, bool tuple, jv *out) {
    jlist *l = jalloc(c, sizeof *l);
    if (!l) return -1;
    if (n) {
        l->items = jalloc_array(c, n, sizeof(jv));
        if (!l->items) return -1;
        for (size_t i = 0; i < n; i++) l->items[i] = jv_none();
    }
    l->n = n;
    l->tuple = tuple;
    out->kind = JV_LIST;
    out->u.list = l;
    return 0;
}

int jdict_new(jctx *c, jv *out) {
    jdict *d = jalloc(c, sizeof *d);
    if (!d) return -1;
    out->kind = JV_DICT;
    out->u.dict = d;
    return 0;
}

static uint64_t hash_str(jstr s) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s.n; i++) h = (h ^ (unsigned char)s.p[i]) * 1099511628211ull;
    return h;
}

static void index_insert(jdict *d, size_t i) {
    if (d->keys[i].kind != JV_STR) return;
    size_t mask = d->index_cap - 1, h = (size_t)hash_str(d->keys[i].u.s) & mask;
    while (d->index[h]) h = (h + 1) & mask;
    d->index[h] = (uint32_t)(i + 1);
}

static int index_rebuild(jctx *c, jdict *d) {
    size_t cap = 16;
    while (cap < 2 * d->cap) cap *= 2;
    uint32_t *index = jalloc_array(c, cap, sizeof *index);
    if (!index) return -1;
    d->index = index;
    d->index_cap = cap;
    for (size_t i = 0; i < d->n; i++) index_insert(d, i);
    return 0;
}

static size_t find_str(const jdict *d, jstr key) {
    if (d->index) {
        size_t mask = d->index_cap - 1, h = (size_t)hash_str(key) & mask;
        for (; d->index[h]; h = (h + 1) & mask) {
            size_t i = d->index[h] - 1;
            if (jstr_eq(d->keys[i].u.s, key)) return i;
        }
        return SIZE_MAX;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].kind == JV_STR && jstr_eq(d->keys[i].u.s, key)) return i;
    return SIZE_MAX;
}

static size_t find_key(const jdict *d, jv key) {
    if (key.kind == JV_STR) return find_str(d, key.u.s);
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].kind != JV_STR && jv_equal(d->keys[i], key)) return i;
    return SIZE_MAX;
}

const jv *jdict_get(const jdict *d, jv key) {
    size_t i = find_key(d, key);
    return i == SIZE_MAX ? NULL : &d->vals[i];
}

const jv *jdict_get_str(const jdict *d, jstr key) {
    size_t i = find_str(d, key);
    return i == SIZE_MAX ? NULL : &d->vals[i];
}

int jdict_set(jctx *c, jdict *d, jv key, jv val) {
    size_t i = find_key(d, key);
    if (i != SIZE_MAX) {
        d->vals[i] = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *k = jalloc_array(c, cap, sizeof(jv));
        jv *v = jalloc_array(c, cap, sizeof(jv));
        if (!k || !v) return -1;
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof(jv));
            memcpy(v, d->vals, d->n * sizeof(jv));
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
        if (d->index) d->index = NULL; /* rebuilt below at the new size */
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->index) {
        index_insert(d, d->n - 1);
    } else if (d->n > 8 && index_rebuild(c, d) < 0) {
        return -1;
    }
    return 0;
}

int jcharge(jctx *c, size_t units) {
    if (units > c->lim.max_steps || c->steps > c->lim.max_steps - units)
        return jerr(c, "evaluation step limit of %llu exceeded", (unsigned long long)c->lim.max_steps);
    c->steps += units;
    return 0;
}
