/* pith_tokenizer_encode: special tokens, then per raw fragment normalize, pre-tokenize and merge.
 *
 * All working memory is per call (tok_scratch), so a tokenizer can encode on many threads at once.
 * BPE results are cached per pre-token within a call: natural text repeats its words so often that
 * most pre-tokens of a long text are cache hits. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

int tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

/* Pre-token -> ids cache. Keys live in `keys`, values in `vals`; the table stores offsets. */
typedef struct cache_slot {
    uint64_t hash;
    uint32_t key_off, key_len;
    uint32_t val_off, val_len;
    bool used;
} cache_slot;

typedef struct word_cache {
    cache_slot *slots;
    size_t mask, count;
    tok_buf keys;
    tok_ids vals;
    bool full;
} word_cache;

enum { CACHE_MAX_WORD = 256, CACHE_MAX_BYTES = 64 << 20 };

static void cache_free(word_cache *c) {
    free(c->slots);
    free(c->keys.p);
    free(c->vals.v);
}

static cache_slot *cache_find(word_cache *c, const char *w, size_t n, uint64_t h) {
    if (!c->slots) return NULL;
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        cache_slot *s = &c->slots[i];
        if (!s->used) return s;
        if (s->hash == h && s->key_len == n && memcmp(c->keys.p + s->key_off, w, n) == 0) return s;
    }
}

static int cache_grow(word_cache *c) {
    size_t cap = c->slots ? (c->mask + 1) * 2 : 1024;
    cache_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    if (c->slots) {
        for (size_t i = 0; i <= c->mask; i++) {
            if (!c->slots[i].used) continue;
            size_t j = c->slots[i].hash & (cap - 1);
            while (slots[j].used) j = (j + 1) & (cap - 1);
            slots[j] = c->slots[i];
        }
        free(c->slots);
    }
    c->slots = slots;
    c->mask = cap - 1;
    return 0;
}

static int merge_word(const pith_tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *out) {
    return t->model == TOK_MODEL_SPM ? tok_spm_encode(t, s, w, n, out) : tok_bpe_encode(t, s, w, n, out);
}

static int encode_word(const pith_tokenizer *t, tok_scratch *s, word_cache *c, const char *w, size_t n,
                       tok_ids *out) {
    if (n > CACHE_MAX_WORD || c->full) return merge_word(t, s, w, n, out);
    uint64_t h = tok_hash(w, n);
    cache_slot *slot = cache_find(c, w, n, h);
    if (slot && slot->used) {
        for (uint32_t i = 0; i < slot->val_len; i++)
            if (tok_ids_push(out, c->vals.v[slot->val_off + i]) != 0) return -1;
        return 0;
    }
    size_t before = out->n;
    if (merge_word(t, s, w, n, out) != 0) return -1;
    if (c->keys.n + n > CACHE_MAX_BYTES || c->vals.n + (out->n - before) > CACHE_MAX_BYTES / 4) {
        c->full = true;
        return 0;
    }
    if (!c->slots || 2 * (c->count + 1) > c->mask) {
        if (cache_grow(c) != 0) return -1;
    }
    slot = cache_find(c, w, n, h);
    slot->used = true;
    slot->hash = h;
    slot->key_off = (uint32_t)c->keys.n;
    slot->key_len = (uint32_t)n;
    slot->val_off = (uint32_t)c->vals.n;
    slot->val_len = (uint32_t)(out->n - before);
    c->count++;
    if (tok_buf_append(&c->keys, w, n) != 0) return -1;
    for (size_t i = before; i < out->n; i++)
        if (tok_ids_push(&c->vals, out->v[i]) != 0) return -1;
    return 0;
}

static int encode_raw(const pith_tokenizer *t, tok_scratch *s, word_cache *c, const char *text, size_t n,
                      bool at_origin, tok_ids *out, pith_err *err) {
    const char *norm;
    size_t norm_n;
    if (tok_normalize(t, s, text, n, &norm, &norm_n) != 0) return pith_errf(err, "tokenizer: out of memory");
    /* (ignore_merges looks the whole pre-token up, so BPE words must then stay whole.) */
    if (t->split_words && (t->model == TOK_MODEL_SPM || (t->n_pre == 0 && !t->ignore_merges))) {
        /* Words start at a marker that follows a non-marker, unless a token may hold the byte before it
         * followed by the marker (see split_words). */
        const char *m = t->space_marker;
        size_t ml = t->space_marker_len, start = 0;
        for (size_t i = 1; i + ml <= norm_n; i++) {
            if (memcmp(norm + i, m, ml) != 0 || (i >= ml && memcmp(norm + i - ml, m, ml) == 0)) continue;
            if (t->word_sticky[(unsigned char)norm[i - 1]]) continue;
            if (encode_word(t, s, c, norm + start, i - start, out) != 0) return pith_errf(err, "tokenizer: out of memory");
            start = i;
        }
        if (encode_word(t, s, c, norm + start, norm_n - start, out) != 0) return pith_errf(err, "tokenizer: out of memory");
        return 0;
    }
    if (t->model == TOK_MODEL_SPM) {
        if (tok_spm_encode(t, s, norm, norm_n, out) != 0) return pith_errf(err, "tokenizer: out of memory");
        return 0;
    }
    if (t->n_pre == 0) {
        if (encode_word(t, s, c, norm, norm_n, out) != 0) return pith_errf(err, "tokenizer: out of memory");
        return 0;
    }
    const char *base;
    tok_pieces *pieces;
    int rc = tok_pretokenize(t, s, norm, norm_n, at_origin, &base, &pieces);
    if (rc == -2) return pith_errf(err, "tokenizer: pre-tokenizer regex failed on the input");
    if (rc != 0) return pith_errf(err, "tokenizer: out of memory");
    for (size_t i = 0; i < pieces->n; i++)
        if (encode_word(t, s, c, base + pieces->v[i].off, pieces->v[i].len, out) != 0)
            return pith_errf(err, "tokenizer: out of memory");
    return 0;
}

static void scratch_free(tok_scratch *s) {
    free(s->syms);
    free(s->heap);
    free(s->tmp.p);
    for (int i = 0; i < 2; i++) {
        free(s->norm[i].p);
        free(s->pre[i].p);
        free(s->pieces[i].v);
    }
    free(s->segs.v);
    if (s->match_data) pcre2_match_data_free(s->match_data);
    if (s->match_ctx) pcre2_match_context_free(s->match_ctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
}

int pith_tokenizer_encode(const pith_tokenizer *t, const char *text, size_t len, int flags, int32_t **ids,
                          int *n_ids, pith_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!t) return pith_errf(err, "tokenizer: no tokenizer");
    if (!text && len) return pith_errf(err, "tokenizer: NULL text");
    if (len > (size_t)INT32_MAX / 2) return pith_errf(err, "tokenizer: text of %zu bytes is too long", len);
    tok_scratch s = {0};
    word_cache cache = {0};
    tok_fragments frags = {0};
    tok_ids out = {0};
    int ret = -1;
    if (tok_ids_push(&out, 0) != 0) goto oom; /* ensure a non-NULL array even for empty output */
    out.n = 0;
    if ((flags & PITH_TOK_ADD_BOS) && t->add_bos && t->bos >= 0 && tok_ids_push(&out, t->bos) != 0) goto oom;
    if (tok_split_specials(t, text ? text : "", len, (flags & PITH_TOK_PARSE_SPECIAL) != 0, &frags) != 0)
        goto oom;
    for (size_t i = 0; i < frags.n; i++) {
        const tok_fragment *f = &frags.v[i];
        if (f->id >= 0) {
            if (tok_ids_push(&out, f->id) != 0) goto oom;
        } else if (encode_raw(t, &s, &cache, text + f->off, f->len, f->off == 0, &out, err) != 0) {
            goto done;
        }
    }
    if ((flags & PITH_TOK_ADD_BOS) && t->add_eos && t->eos >= 0 && tok_ids_push(&out, t->eos) != 0) goto oom;
    if (out.n > (size_t)INT32_MAX) {
        pith_errf(err, "tokenizer: too many tokens");
        goto done;
    }
    *ids = out.v;
    *n_ids = (int)out.n;
    out.v = NULL;
    ret = 0;
    goto done;
oom:
    pith_errf(err, "tokenizer: out of memory");
done:
    free(out.v);
    free(frags.v);
    cache_free(&cache);
    scratch_free(&s);
    return ret;
}
