/* The vocabulary as the grammar engine sees it: each token's bytes and kind, and a trie of the normal
 * tokens in preorder (siblings sorted by byte), walked against the automaton to build masks. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"
#include "tokenizer/tok_internal.h"

#define GR_MAX_TOKEN_BYTES 4096

void pith_grammar_vocab_free(pith_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->kind);
    free(v->end_tokens);
    free(v->tb);
    free(v->td);
    free(v->tskip);
    free(v->ttok_off);
    free(v->ttok);
    free(v);
}

int pith_grammar_vocab_size(const pith_grammar_vocab *v) { return v ? v->n_vocab : 0; }

typedef struct tok_key {
    const char *p;
    size_t len;
    int32_t id;
} tok_key;

static int cmp_tok(const void *a, const void *b) {
    const tok_key *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_trie(pith_grammar_vocab *v, pith_err *err) {
    int n = v->n_vocab;
    int32_t *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return pith_errf(err, "out of memory");
    int m = 0;
    size_t total = 0;
    v->n_end = 0;
    for (int i = 0; i < n; i++) {
        size_t len = v->off[i + 1] - v->off[i];
        if (v->kind[i] == PITH_GRAMMAR_TOKEN_END) v->n_end++;
        if (v->kind[i] != PITH_GRAMMAR_TOKEN_NORMAL || len == 0 || len > GR_MAX_TOKEN_BYTES) continue;
        order[m++] = i;
        total += len;
    }
    v->end_tokens = malloc(((size_t)v->n_end + 1) * sizeof *v->end_tokens);
    if (!v->end_tokens) { free(order); return pith_errf(err, "out of memory"); }
    v->n_end = 0;
    for (int i = 0; i < n; i++)
        if (v->kind[i] == PITH_GRAMMAR_TOKEN_END) v->end_tokens[v->n_end++] = i;
    tok_key *keys = malloc(((size_t)m + 1) * sizeof *keys);
    if (!keys) { free(order); return pith_errf(err, "out of memory"); }
    for (int k = 0; k < m; k++) {
        keys[k].p = v->bytes + v->off[order[k]];
        keys[k].len = v->off[order[k] + 1] - v->off[order[k]];
        keys[k].id = order[k];
    }
    qsort(keys, (size_t)m, sizeof *keys, cmp_tok);
    for (int k = 0; k < m; k++) order[k] = keys[k].id;
    free(keys);
    v->tb = malloc(total + 1);
    v->td = malloc((total + 1) * sizeof *v->td);
    v->tskip = malloc((total + 1) * sizeof *v->tskip);
    int32_t *count = calloc(total + 1, sizeof *count);
    int32_t *tnode = malloc(((size_t)m + 1) * sizeof *tnode);
    int32_t path[GR_MAX_TOKEN_BYTES + 1];
    if (!v->tb || !v->td || !v->tskip || !count || !tnode) {
        free(order); free(count); free(tnode);
        return pith_errf(err, "out of memory");
    }
    int nn = 0, depth = 0, max_depth = 0;
    const unsigned char *prev = NULL;
    size_t prev_len = 0;
    for (int k = 0; k < m; k++) {
        int id = order[k];
        const unsigned char *b = (const unsigned char *)v->bytes + v->off[id];
        size_t len = v->off[id + 1] - v->off[id];
        size_t lcp = 0;
        if (prev)
            while (lcp < len && lcp < prev_len && prev[lcp] == b[lcp]) lcp++;
        while (depth > (int)lcp) v->tskip[path[depth--]] = nn;
        for (size_t d = lcp + 1; d <= len; d++) {
            v->tb[nn] = b[d - 1];
            v->td[nn] = (uint16_t)d;
            path[d] = nn++;
        }
        depth = (int)len;
        if (depth > max_depth) max_depth = depth;
        count[path[len]]++;
        tnode[k] = path[len];
        prev = b;
        prev_len = len;
    }
    while (depth > 0) v->tskip[path[depth--]] = nn;
    v->n_nodes = nn;
    v->max_depth = max_depth;
    v->ttok_off = malloc(((size_t)nn + 1) * sizeof *v->ttok_off);
    v->ttok = malloc(((size_t)m + 1) * sizeof *v->ttok);
    if (!v->ttok_off || !v->ttok) {
        free(order); free(count); free(tnode);
        return pith_errf(err, "out of memory");
    }
    int32_t s = 0;
    for (int i = 0; i < nn; i++) {
        v->ttok_off[i] = s;
        s += count[i];
    }
    v->ttok_off[nn] = s;
    for (int k = 0; k < m; k++) v->ttok[k] = order[k]; /* sorted order is node order */
    free(order);
    free(count);
    free(tnode);
    return 0;
}

int pith_grammar_vocab_new(int n_vocab, const char *const *bytes, const size_t *lens, const uint8_t *kinds,
                           pith_grammar_vocab **out, pith_err *err) {
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return pith_errf(err, "grammar vocabulary: bad size %d", n_vocab);
    pith_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return pith_errf(err, "out of memory");
    v->n_vocab = n_vocab;
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->kind = malloc((size_t)n_vocab);
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) total += bytes[i] ? lens[i] : 0;
    v->bytes = malloc(total + 1);
    if (!v->off || !v->kind || !v->bytes) {
        pith_grammar_vocab_free(v);
        return pith_errf(err, "out of memory");
    }
    size_t o = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->off[i] = o;
        if (bytes[i] && lens[i]) memcpy(v->bytes + o, bytes[i], lens[i]);
        o += bytes[i] ? lens[i] : 0;
        v->kind[i] = kinds ? kinds[i] : PITH_GRAMMAR_TOKEN_NORMAL;
        if (v->kind[i] > PITH_GRAMMAR_TOKEN_END) {
            pith_grammar_vocab_free(v);
            return pith_errf(err, "grammar vocabulary: token %d has bad kind %u", i, v->kind[i]);
        }
    }
    v->off[n_vocab] = o;
    if (build_trie(v, err)) {
        pith_grammar_vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* A token's text as stored -> the bytes it decodes to; returns the length written to out. */
static size_t decode_token(const pith_tokenizer *t, const char *p, size_t n, char *out) {
    size_t k = 0;
    if (t->decode == TOK_DECODE_SPM) {
        if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && hexval(p[3]) >= 0 &&
            hexval(p[4]) >= 0) {
            out[0] = (char)(hexval(p[3]) * 16 + hexval(p[4]));
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && (unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 &&
                (unsigned char)p[i + 2] == 0x81) {
                out[k++] = ' ';
                i += 2;
            } else {
                out[k++] = p[i];
            }
        }
        return k;
    }
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x80) {
            int b = tok_bytelevel_decode(c);
            out[k++] = (char)(b >= 0 ? b : c);
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0 && i + 1 < n && ((unsigned char)p[i + 1] & 0xC0) == 0x80) {
            uint32_t cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)p[i + 1] & 0x3F);
            int b = tok_bytelevel_decode(cp);
            if (b >= 0) {
                out[k++] = (char)b;
                i += 2;
                continue;
            }
        }
        out[k++] = (char)c;
        i++;
    }
    return k;
}

int pith_grammar_vocab_from_tokenizer(const pith_tokenizer *t, int n_rows, pith_grammar_vocab **out, pith_err *err) {
    *out = NULL;
    int n_tok = pith_tokenizer_n_vocab(t);
    if (n_tok <= 0) return pith_errf(err, "grammar vocabulary: the tokenizer has no tokens");
    int n = n_rows > 0 ? n_rows : n_tok;
    const char **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *kinds = calloc((size_t)n, 1);
    size_t total = 0;
    for (int i = 0; i < n && i < n_tok; i++) {
        size_t len = 0;
        pith_tokenizer_token_text(t, i, &len);
        total += len;
    }
    char *arena = malloc(total + 1);
    if (!bytes || !lens || !kinds || !arena) {
        free(bytes); free(lens); free(kinds); free(arena);
        return pith_errf(err, "out of memory");
    }
    size_t o = 0;
    int eos = pith_tokenizer_eos(t);
    for (int i = 0; i < n; i++) {
        bytes[i] = arena + o;
        if (i >= n_tok) { /* a row of the model with no token (padding): never allowed */
            kinds[i] = PITH_GRAMMAR_TOKEN_SPECIAL;
            continue;
        }
        size_t len = 0;
        const char *p = pith_tokenizer_token_text(t, i, &len);
        lens[i] = p ? decode_token(t, p, len, arena + o) : 0;
        o += lens[i];
        if (pith_tokenizer_is_eog(t, i) || i == eos) kinds[i] = PITH_GRAMMAR_TOKEN_END;
        else if (pith_tokenizer_is_special(t, i)) kinds[i] = PITH_GRAMMAR_TOKEN_SPECIAL;
    }
    int rc = pith_grammar_vocab_new(n, bytes, lens, kinds, out, err);
    free(bytes);
    free(lens);
    free(kinds);
    free(arena);
    return rc;
}
