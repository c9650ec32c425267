/* Special and added tokens, matched whole in the raw text before any normalization or splitting.
 *
 * Two matching orders exist in the reference implementations and they differ only when special
 * texts overlap in the input: Hugging Face scans left to right and takes the longest token starting
 * at the leftmost match; llama.cpp takes the tokens longest first and, for each, every
 * non-overlapping occurrence left in the still-raw text. Both are computed from one pass of a byte
 * trie over the text, so the cost is linear in the text rather than in texts x tokens. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static bool is_strip_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int tok_build_special_trie(pith_tokenizer *t, pith_err *err) {
    size_t total = 1;
    for (int i = 0; i < t->n_specials; i++) total += t->len[t->specials[i].id];
    if (total > (size_t)INT32_MAX) return pith_errf(err, "tokenizer: special tokens too long");
    t->trie = malloc(total * sizeof *t->trie);
    if (!t->trie) return pith_errf(err, "tokenizer: out of memory");
    t->n_trie = 1;
    t->trie[0] = (tok_trie_node){-1, -1, -1, 0};
    for (int b = 0; b < 256; b++) t->trie_root[b] = -1;
    for (int i = 0; i < t->n_specials; i++) {
        const unsigned char *p = (const unsigned char *)t->arena + t->off[t->specials[i].id];
        size_t n = t->len[t->specials[i].id];
        int32_t node = 0;
        for (size_t k = 0; k < n; k++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != p[k]) c = t->trie[c].sibling;
            if (c < 0) {
                c = t->n_trie++;
                t->trie[c] = (tok_trie_node){-1, t->trie[node].child, -1, p[k]};
                t->trie[node].child = c;
                if (node == 0) t->trie_root[p[k]] = c;
            }
            node = c;
        }
        /* Texts sort longest first, then by id: the first token with a given text keeps it. */
        if (t->trie[node].special < 0) t->trie[node].special = i;
    }
    return 0;
}

void tok_special_set_strip(pith_tokenizer *t, int32_t id, bool lstrip, bool rstrip) {
    for (int i = 0; i < t->n_specials; i++) {
        if (t->specials[i].id == id) {
            t->specials[i].lstrip = lstrip;
            t->specials[i].rstrip = rstrip;
        }
    }
}

static int frag_push(tok_fragments *f, size_t off, size_t len, int32_t id) {
    if (id < 0 && len == 0) return 0;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        tok_fragment *v = realloc(f->v, cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (tok_fragment){off, len, id};
    return 0;
}

static bool enabled(const pith_tokenizer *t, int32_t special, bool parse_special) {
    return special >= 0 && (parse_special || !t->specials[special].needs_parse_special);
}

/* Extends [*start, *end) over the whitespace its token strips, never past [lo, hi). */
static void apply_strip(const pith_tokenizer *t, int32_t special, const char *text, size_t lo, size_t hi,
                        size_t *start, size_t *end) {
    if (t->specials[special].lstrip)
        while (*start > lo && is_strip_space((unsigned char)text[*start - 1])) (*start)--;
    if (t->specials[special].rstrip)
        while (*end < hi && is_strip_space((unsigned char)text[*end])) (*end)++;
}

static int split_leftmost_longest(const pith_tokenizer *t, const char *text, size_t n, bool parse_special,
                                  tok_fragments *out) {
    size_t last = 0;
    for (size_t p = 0; p < n;) {
        int32_t node = t->trie_root[(unsigned char)text[p]];
        int32_t best = -1;
        size_t best_len = 0;
        for (size_t q = p; node >= 0;) {
            if (enabled(t, t->trie[node].special, parse_special)) {
                best = t->trie[node].special;
                best_len = q + 1 - p;
            }
            if (++q >= n) break;
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != (unsigned char)text[q]) c = t->trie[c].sibling;
            node = c;
        }
        if (best < 0) {
            p++;
            continue;
        }
        size_t start = p, end = p + best_len;
        apply_strip(t, best, text, last, n, &start, &end);
        if (frag_push(out, last, start - last, -1) != 0 || frag_push(out, 0, 0, t->specials[best].id) != 0)
            return -1;
        last = p = end;
    }
    return frag_push(out, last, n - last, -1);
}

typedef struct match {
    size_t pos;
    int32_t special;
} match;

static int cmp_match(const void *pa, const void *pb) {
    const match *a = pa, *b = pb;
    if (a->special != b->special) return a->special < b->special ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

typedef struct claim {
    size_t start, end;
    int32_t id;
} claim;

static int cmp_claim(const void *pa, const void *pb) {
    const claim *a = pa, *b = pb;
    return (a->start > b->start) - (a->start < b->start);
}

static int split_longest_first(const pith_tokenizer *t, const char *text, size_t n, bool parse_special,
                               tok_fragments *out) {
    match *m = NULL;
    size_t nm = 0, cap = 0;
    int ret = -1;
    for (size_t p = 0; p < n; p++) {
        int32_t node = t->trie_root[(unsigned char)text[p]];
        for (size_t q = p; node >= 0;) {
            if (enabled(t, t->trie[node].special, parse_special)) {
                if (nm == cap) {
                    cap = cap ? cap * 2 : 16;
                    match *mm = realloc(m, cap * sizeof *mm);
                    if (!mm) goto done;
                    m = mm;
                }
                m[nm++] = (match){p, t->trie[node].special};
            }
            if (++q >= n) break;
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != (unsigned char)text[q]) c = t->trie[c].sibling;
            node = c;
        }
    }
    if (nm == 0) {
        ret = frag_push(out, 0, n, -1);
        goto done;
    }
    qsort(m, nm, sizeof *m, cmp_match);
    bool *claimed = calloc(n, 1);
    claim *cl = malloc(nm * sizeof *cl);
    size_t ncl = 0;
    if (!claimed || !cl) {
        free(claimed);
        free(cl);
        goto done;
    }
    size_t last_end = 0;
    for (size_t i = 0; i < nm; i++) {
        if (i == 0 || m[i].special != m[i - 1].special) last_end = 0;
        size_t len = t->len[t->specials[m[i].special].id], pos = m[i].pos;
        if (pos < last_end) continue;
        bool free_span = true;
        for (size_t k = pos; k < pos + len && free_span; k++) free_span = !claimed[k];
        if (!free_span) continue;
        /* The raw fragment around this occurrence bounds the whitespace it may strip. */
        size_t lo = pos, hi = pos + len;
        while (lo > 0 && !claimed[lo - 1]) lo--;
        while (hi < n && !claimed[hi]) hi++;
        size_t start = pos, end = pos + len;
        apply_strip(t, m[i].special, text, lo, hi, &start, &end);
        memset(claimed + start, 1, end - start);
        cl[ncl++] = (claim){start, end, t->specials[m[i].special].id};
        last_end = pos + len;
    }
    qsort(cl, ncl, sizeof *cl, cmp_claim);
    size_t last = 0;
    ret = 0;
    for (size_t i = 0; i < ncl && ret == 0; i++) {
        ret = frag_push(out, last, cl[i].start - last, -1);
        if (ret == 0) ret = frag_push(out, 0, 0, cl[i].id);
        last = cl[i].end;
    }
    if (ret == 0) ret = frag_push(out, last, n - last, -1);
    free(claimed);
    free(cl);
done:
    free(m);
    return ret;
}

int tok_split_specials(const pith_tokenizer *t, const char *text, size_t n, bool parse_special,
                       tok_fragments *out) {
    out->n = 0;
    if (t->n_specials == 0 || !t->trie) return frag_push(out, 0, n, -1);
    return t->specials_leftmost ? split_leftmost_longest(t, text, n, parse_special, out)
                                : split_longest_first(t, text, n, parse_special, out);
}
