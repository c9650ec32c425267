/* The merge loop shared by SentencePiece BPE and byte-level/HF BPE.
 *
 * Symbols form a doubly linked chain over the text; candidate merges of adjacent symbols sit in a
 * binary heap ordered by priority (best first) and then by left position (leftmost first), which is
 * the order SentencePiece, llama.cpp and Hugging Face all use. A merge invalidates heap entries lazily:
 * an entry whose symbols changed size since it was pushed is stale and skipped when popped. Each merge
 * removes a symbol and pushes at most two entries, so the whole loop is O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static inline bool heap_before(const tok_bigram *a, const tok_bigram *b) { return a->key < b->key; }

static inline int32_t bigram_left(const tok_bigram *bg) { return (int32_t)(uint32_t)bg->key; }

/* Float scores as unsigned integers in the same order, inverted so the best score sorts first. */
static inline uint64_t score_key(float score) {
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)(~u);
}

/* Restores the heap property over the whole array (Floyd): O(n) for the initial candidates. */
static void heapify(tok_scratch *s) {
    size_t n = s->heap_n;
    for (size_t start = n / 2; start-- > 0;) {
        tok_bigram v = s->heap[start];
        size_t i = start;
        for (;;) {
            size_t c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && heap_before(&s->heap[c + 1], &s->heap[c])) c++;
            if (!heap_before(&s->heap[c], &v)) break;
            s->heap[i] = s->heap[c];
            i = c;
        }
        s->heap[i] = v;
    }
}

/* Appends without ordering; heapify() must follow before any pop. */
static int heap_append(tok_scratch *s, tok_bigram bg) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        tok_bigram *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = cap;
    }
    s->heap[s->heap_n++] = bg;
    return 0;
}

static int heap_push(tok_scratch *s, tok_bigram bg) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        tok_bigram *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(&bg, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = bg;
    return 0;
}

static tok_bigram heap_pop(tok_scratch *s) {
    tok_bigram top = s->heap[0];
    tok_bigram last = s->heap[--s->heap_n];
    size_t n = s->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int reserve_syms(tok_scratch *s, size_t n) {
    if (n <= s->syms_cap) return 0;
    size_t cap = s->syms_cap ? s->syms_cap : 64;
    while (cap < n) cap *= 2;
    tok_sym *p = realloc(s->syms, cap * sizeof *p);
    if (!p) return -1;
    s->syms = p;
    s->syms_cap = cap;
    return 0;
}

/* A merge target for SentencePiece: pieces the model could produce by merging. Control, unknown and
 * byte pieces are reserved in SentencePiece and never come out of merges. */
static bool spm_mergeable(const pith_tokenizer *t, int32_t id) {
    int ty = t->types[id];
    return ty == TOK_NORMAL || ty == TOK_USER_DEFINED || ty == TOK_UNUSED;
}

static int spm_try_pair(const pith_tokenizer *t, tok_scratch *s, const char *text, int32_t l, int32_t r,
                        bool initial) {
    if (l < 0 || r < 0) return 0;
    const tok_sym *a = &s->syms[l], *b = &s->syms[r];
    int32_t size = a->n + b->n;
    int32_t id = tok_lookup(t, text + a->start, (size_t)size);
    if (id < 0 || !spm_mergeable(t, id)) return 0;
    tok_bigram bg = {score_key(t->scores[id]) << 32 | (uint32_t)l, size, id};
    return initial ? heap_append(s, bg) : heap_push(s, bg);
}

/* A popped candidate still applies when its left symbol is alive and it and its current right
 * neighbour have the sizes they had when it was pushed (symbols only ever grow, so any merge on
 * either side since then changes the sum). */
static int32_t bigram_live(const tok_scratch *s, const tok_bigram *bg) {
    const tok_sym *a = &s->syms[bigram_left(bg)];
    if (a->n == 0 || a->next < 0) return -1;
    return a->n + s->syms[a->next].n == bg->size ? a->next : -1;
}

static void merge_pair(tok_scratch *s, int32_t left, int32_t right, int32_t result) {
    tok_sym *a = &s->syms[left], *b = &s->syms[right];
    a->n += b->n;
    a->id = result;
    b->n = 0;
    a->next = b->next;
    if (b->next >= 0) s->syms[b->next].prev = left;
}

/* Bytes that formed no token: <0xNN> pieces when the vocabulary has them all, else one unknown. */
static int emit_fallback(const pith_tokenizer *t, const char *p, size_t n, tok_ids *out) {
    bool all = true;
    for (size_t i = 0; i < n; i++)
        if (t->byte_token[(unsigned char)p[i]] < 0) all = false;
    if (all) {
        for (size_t i = 0; i < n; i++)
            if (tok_ids_push(out, t->byte_token[(unsigned char)p[i]]) != 0) return -1;
        return 0;
    }
    return t->unk >= 0 ? tok_ids_push(out, t->unk) : 0;
}

int tok_spm_encode(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, tok_ids *out) {
    if (n == 0) return 0;
    if (n > INT32_MAX / 2) return -1;
    if (reserve_syms(s, n) != 0) return -1;
    int32_t count = 0;
    for (size_t off = 0; off < n;) {
        size_t len = (size_t)tok_utf8_len((unsigned char)text[off]);
        if (len > n - off) len = n - off;
        tok_sym *sym = &s->syms[count];
        sym->start = (int32_t)off;
        sym->n = (int32_t)len;
        sym->prev = count - 1;
        off += len;
        sym->next = off == n ? -1 : count + 1;
        sym->id = -2;
        count++;
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < count; i++)
        if (spm_try_pair(t, s, text, i - 1, i, true) != 0) return -1;
    heapify(s);
    while (s->heap_n) {
        tok_bigram bg = heap_pop(s);
        int32_t l = bigram_left(&bg), r = bigram_live(s, &bg);
        if (r < 0) continue;
        merge_pair(s, l, r, bg.result);
        if (spm_try_pair(t, s, text, s->syms[l].prev, l, false) != 0) return -1;
        if (spm_try_pair(t, s, text, l, s->syms[l].next, false) != 0) return -1;
    }
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        tok_sym *sym = &s->syms[i];
        int32_t id = sym->id;
        if (id == -2) id = tok_lookup(t, text + sym->start, (size_t)sym->n);
        if (id >= 0 && t->types[id] != TOK_BYTE) {
            if (tok_ids_push(out, id) != 0) return -1;
        } else if (emit_fallback(t, text + sym->start, (size_t)sym->n, out) != 0) {
            return -1;
        }
    }
    return 0;
}

static int bpe_try_pair(const pith_tokenizer *t, tok_scratch *s, int32_t l, int32_t r, bool initial) {
    if (l < 0 || r < 0) return 0;
    const tok_sym *a = &s->syms[l], *b = &s->syms[r];
    if (a->id < 0 || b->id < 0) return 0;
    const tok_pairslot *m = tok_pairmap_find(&t->merges, a->id, b->id);
    if (!m) return 0;
    tok_bigram bg = {(uint64_t)(uint32_t)m->rank << 32 | (uint32_t)l, a->n + b->n, m->result};
    return initial ? heap_append(s, bg) : heap_push(s, bg);
}

static int add_sym(tok_scratch *s, int32_t *count, int32_t start, int32_t n, int32_t id) {
    tok_sym *sym = &s->syms[*count];
    sym->start = start;
    sym->n = n;
    sym->prev = *count - 1;
    sym->next = *count + 1;
    sym->id = id;
    (*count)++;
    return 0;
}

/* The symbols a word starts from: one per byte for byte-level BPE, one per character otherwise, with
 * unknown characters split into <0xNN> pieces (byte_fallback) or mapped to the unknown token. */
static int32_t bpe_init_symbols(const pith_tokenizer *t, tok_scratch *s, const char *w, size_t n) {
    int32_t count = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) add_sym(s, &count, (int32_t)i, 1, t->bytelevel_token[(unsigned char)w[i]]);
    } else {
        for (size_t off = 0; off < n;) {
            size_t len = (size_t)tok_utf8_len((unsigned char)w[off]);
            if (len > n - off) len = n - off;
            int32_t id = tok_lookup(t, w + off, len);
            if (id >= 0) {
                add_sym(s, &count, (int32_t)off, (int32_t)len, id);
            } else {
                bool all = t->byte_fallback;
                for (size_t i = 0; all && i < len; i++)
                    if (t->byte_token[(unsigned char)w[off + i]] < 0) all = false;
                if (all) {
                    for (size_t i = 0; i < len; i++)
                        add_sym(s, &count, (int32_t)(off + i), 1, t->byte_token[(unsigned char)w[off + i]]);
                } else if (t->fuse_unk && count > 0 && s->syms[count - 1].id == t->unk && t->unk >= 0) {
                    s->syms[count - 1].n += (int32_t)len;
                } else {
                    add_sym(s, &count, (int32_t)off, (int32_t)len, t->unk);
                }
            }
            off += len;
        }
    }
    if (count > 0) s->syms[count - 1].next = -1;
    return count;
}

int tok_bpe_encode(const pith_tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *out) {
    if (n == 0) return 0;
    if (n > INT32_MAX / 2) return -1;
    bool newlines = t->ignore_merges_newlines;
    for (size_t i = 0; newlines && i < n; i++) newlines = w[i] == '\n';
    if (t->ignore_merges || newlines) {
        const char *key = w;
        size_t key_n = n;
        if (t->byte_level) {
            s->tmp.n = 0;
            if (tok_buf_reserve(&s->tmp, 2 * n) != 0) return -1;
            for (size_t i = 0; i < n; i++) s->tmp.n += (size_t)tok_bytelevel_encode((uint8_t)w[i], s->tmp.p + s->tmp.n);
            key = s->tmp.p;
            key_n = s->tmp.n;
        }
        int32_t id = tok_lookup(t, key, key_n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (reserve_syms(s, n) != 0) return -1;
    int32_t count = bpe_init_symbols(t, s, w, n);
    s->heap_n = 0;
    for (int32_t i = 1; i < count; i++)
        if (bpe_try_pair(t, s, i - 1, i, true) != 0) return -1;
    heapify(s);
    while (s->heap_n) {
        tok_bigram bg = heap_pop(s);
        int32_t l = bigram_left(&bg), r = bigram_live(s, &bg);
        if (r < 0) continue;
        merge_pair(s, l, r, bg.result);
        if (bpe_try_pair(t, s, s->syms[l].prev, l, false) != 0) return -1;
        if (bpe_try_pair(t, s, l, s->syms[l].next, false) != 0) return -1;
    }
    for (int32_t i = 0; i != -1 && count > 0; i = s->syms[i].next) {
        int32_t id = s->syms[i].id;
        if (id < 0) id = t->unk;
        if (id >= 0 && tok_ids_push(out, id) != 0) return -1;
    }
    return 0;
}
