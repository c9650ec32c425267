/* Normalizers: text rewrites applied to each raw fragment before pre-tokenization (Hugging Face's
 * Prepend / Replace / NFC, and the SentencePiece space escaping expressed with them). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

int tok_buf_reserve(tok_buf *b, size_t n) {
    if (n <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_append(tok_buf *b, const char *s, size_t n) {
    if (n > SIZE_MAX - b->n || tok_buf_reserve(b, b->n + n) != 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int replace_literal(const tok_norm_step *st, const char *p, size_t n, tok_buf *out) {
    if (st->a_len == 0) return tok_buf_append(out, p, n);
    size_t prev = 0;
    for (size_t i = 0; i + st->a_len <= n;) {
        if (p[i] == st->a[0] && memcmp(p + i, st->a, st->a_len) == 0) {
            if (tok_buf_append(out, p + prev, i - prev) != 0 || tok_buf_append(out, st->b, st->b_len) != 0)
                return -1;
            i += st->a_len;
            prev = i;
        } else {
            i++;
        }
    }
    return tok_buf_append(out, p + prev, n - prev);
}

static int replace_regex(tok_scratch *s, const tok_norm_step *st, const char *p, size_t n, tok_buf *out) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return -1;
    size_t prev = 0, off = 0;
    int ret = 0;
    (void)s;
    while (off <= n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)p, n, off, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) {
            off = ov[0] + 1;
            continue;
        }
        if (tok_buf_append(out, p + prev, ov[0] - prev) != 0 || tok_buf_append(out, st->b, st->b_len) != 0) {
            ret = -1;
            break;
        }
        prev = off = ov[1];
    }
    pcre2_match_data_free(md);
    if (ret == 0) ret = tok_buf_append(out, p + prev, n - prev);
    return ret;
}

static int apply_step(tok_scratch *s, const tok_norm_step *st, const char *p, size_t n, tok_buf *out) {
    out->n = 0;
    switch (st->kind) {
    case TOK_NORM_PREPEND:
        if (n == 0) return 0;
        if (tok_buf_append(out, st->a, st->a_len) != 0) return -1;
        return tok_buf_append(out, p, n);
    case TOK_NORM_REPLACE:
        return st->re ? replace_regex(s, st, p, n, out) : replace_literal(st, p, n, out);
    case TOK_NORM_NFC:
        return tok_nfc(p, n, out);
    }
    return -1;
}

int tok_normalize(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, const char **out,
                  size_t *out_n) {
    const char *cur = text;
    size_t cur_n = n;
    int which = 0;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm_step *st = &t->norm[i];
        if (st->kind == TOK_NORM_NFC && !tok_nfc_maybe_changes(cur, cur_n)) continue;
        tok_buf *dst = &s->norm[which];
        if (apply_step(s, st, cur, cur_n, dst) != 0) return -1;
        cur = dst->p ? dst->p : "";
        cur_n = dst->n;
        which ^= 1;
    }
    *out = cur;
    *out_n = cur_n;
    return 0;
}

int tok_add_norm(pith_tokenizer *t, tok_norm_kind kind, const char *a, size_t a_len, const char *b, size_t b_len,
                 pith_err *err) {
    tok_norm_step *steps = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *steps);
    if (!steps) return pith_errf(err, "tokenizer: out of memory");
    t->norm = steps;
    tok_norm_step *st = &t->norm[t->n_norm];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->a = tok_strndup(a ? a : "", a ? a_len : 0);
    st->a_len = a ? a_len : 0;
    st->b = tok_strndup(b ? b : "", b ? b_len : 0);
    st->b_len = b ? b_len : 0;
    t->n_norm++;
    if (!st->a || !st->b) return pith_errf(err, "tokenizer: out of memory");
    return 0;
}
