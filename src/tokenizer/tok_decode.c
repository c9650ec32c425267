/* Decoding: token ids back to text, one token at a time.
 *
 * Each token's bytes (after undoing the SentencePiece space marker, byte-fallback pieces or the
 * GPT-2 byte alphabet) go through a UTF-8 assembler that emits only complete, valid sequences. The
 * bytes of a sequence still missing its continuation are held in the pith_detok (at most 3); a
 * sequence that turns out invalid becomes U+FFFD, one per maximal invalid subpart as the Unicode
 * standard recommends, so the output is always valid UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

typedef struct sink {
    char *out;
    size_t cap, pos;
    bool raw;   /* the token's bytes as they are, no UTF-8 assembly (pith_tokenizer_token_bytes) */
} sink;

/* Writes whole sequences only; one that does not fit (with the NUL) is dropped. */
static void sink_put(sink *k, const char *p, size_t n) {
    if (k->cap == 0 || k->pos + n + 1 > k->cap) return;
    memcpy(k->out + k->pos, p, n);
    k->pos += n;
}

static int seq_len(unsigned char c) {
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether c may follow the held bytes (lead byte `lead`, `have` bytes held so far). */
static bool continues(unsigned char lead, int have, unsigned char c) {
    if (have == 1) {
        switch (lead) {
        case 0xE0: return c >= 0xA0 && c <= 0xBF;
        case 0xED: return c >= 0x80 && c <= 0x9F;
        case 0xF0: return c >= 0x90 && c <= 0xBF;
        case 0xF4: return c >= 0x80 && c <= 0x8F;
        default: break;
        }
    }
    return c >= 0x80 && c <= 0xBF;
}

static void feed_byte(pith_detok *d, sink *k, unsigned char c) {
    if (k->raw) {
        char ch = (char)c;
        sink_put(k, &ch, 1);
        return;
    }
    if (d->n_pending > 0) {
        unsigned char lead = d->pending[0];
        if (continues(lead, d->n_pending, c)) {
            d->pending[d->n_pending++] = c;
            if (d->n_pending == seq_len(lead)) {
                sink_put(k, (const char *)d->pending, (size_t)d->n_pending);
                d->n_pending = 0;
            }
            return;
        }
        sink_put(k, REPLACEMENT, 3);
        d->n_pending = 0;
    }
    if (c < 0x80) {
        char ch = (char)c;
        sink_put(k, &ch, 1);
    } else if (seq_len(c)) {
        d->pending[0] = c;
        d->n_pending = 1;
    } else {
        sink_put(k, REPLACEMENT, 3);
    }
}

/* Feeds one byte of a token's decoded text, dropping the sequence's leading space where the
 * tokenizer adds one when encoding. */
static void feed(pith_detok *d, sink *k, unsigned char c) {
    if (d->at_start) {
        d->at_start = false;
        if (c == ' ' && d->tok->strip_leading_space) return;
    }
    feed_byte(d, k, c);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a <0xNN> piece, or -1 when the text is not one. */
static int byte_piece(const char *p, size_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static void feed_spm_text(pith_detok *d, sink *k, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && (unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 &&
            (unsigned char)p[i + 2] == 0x81) {
            feed(d, k, ' ');
            i += 2;
        } else {
            feed(d, k, (unsigned char)p[i]);
        }
    }
}

static void feed_bytelevel_text(pith_detok *d, sink *k, const char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x80) {
            int b = tok_bytelevel_decode(c);
            feed(d, k, (unsigned char)(b >= 0 ? b : c));
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0 && i + 1 < n && ((unsigned char)p[i + 1] & 0xC0) == 0x80) {
            uint32_t cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)p[i + 1] & 0x3F);
            int b = tok_bytelevel_decode(cp);
            if (b >= 0) {
                feed(d, k, (unsigned char)b);
                i += 2;
                continue;
            }
        }
        /* Not a byte-alphabet char: its own UTF-8 bytes. */
        feed(d, k, c);
        i++;
    }
}

void pith_detok_init(pith_detok *d, const pith_tokenizer *t, bool keep_special) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->keep_special = keep_special;
    d->at_start = true;
}

/* Feeds token id's bytes into k. */
static void push_token(pith_detok *d, sink *k, int32_t id) {
    const pith_tokenizer *t = d->tok;
    int type = t->types[id];
    const char *p = t->arena + t->off[id];
    size_t n = t->len[id];
    if (type == TOK_CONTROL || type == TOK_UNKNOWN) {
        if (!d->keep_special) return;
        d->at_start = false;
        for (size_t i = 0; i < n; i++) feed_byte(d, k, (unsigned char)p[i]);
    } else if (byte_piece(p, n) >= 0 && (type == TOK_BYTE || t->byte_token[byte_piece(p, n)] == id)) {
        feed(d, k, (unsigned char)byte_piece(p, n));
    } else if (t->decode == TOK_DECODE_BYTELEVEL && type != TOK_USER_DEFINED) {
        feed_bytelevel_text(d, k, p, n);
    } else if (t->decode == TOK_DECODE_BYTELEVEL) {
        for (size_t i = 0; i < n; i++) feed(d, k, (unsigned char)p[i]);
    } else {
        feed_spm_text(d, k, p, n);
    }
}

size_t pith_detok_push(pith_detok *d, int32_t id, char *out, size_t cap) {
    sink k = {out, cap, 0, false};
    const pith_tokenizer *t = d->tok;
    if (cap > 0) out[0] = '\0';
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    push_token(d, &k, id);
    if (cap > 0) out[k.pos] = '\0';
    return k.pos;
}

size_t pith_tokenizer_token_bytes(const pith_tokenizer *t, int32_t id, char *out, size_t cap) {
    sink k = {out, cap, 0, true};
    if (cap > 0) out[0] = '\0';
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    pith_detok d;
    pith_detok_init(&d, t, true);
    d.at_start = false; /* a piece keeps its leading space */
    push_token(&d, &k, id);
    if (cap > 0) out[k.pos] = '\0';
    return k.pos;
}

size_t pith_detok_flush(pith_detok *d, char *out, size_t cap) {
    sink k = {out, cap, 0, false};
    if (cap > 0) out[0] = '\0';
    if (d->n_pending > 0) {
        sink_put(&k, REPLACEMENT, 3);
        d->n_pending = 0;
    }
    if (cap > 0) out[k.pos] = '\0';
    return k.pos;
}

void pith_detok_skip(pith_detok *d, const int32_t *ids, int n) {
    for (int i = 0; ids && i < n; i++) pith_detok_push(d, ids[i], NULL, 0);
    d->n_pending = 0;
}

size_t pith_detok_max_piece(const pith_tokenizer *t) {
    /* Worst case: every byte of the longest token (plus held bytes) turns into U+FFFD. */
    return 3 * (t->max_token_len + 4) + 1;
}

int pith_tokenizer_decode(const pith_tokenizer *t, const int32_t *ids, int n_ids, bool keep_special, char **text,
                          size_t *len, pith_err *err) {
    *text = NULL;
    if (len) *len = 0;
    if (n_ids < 0 || (n_ids > 0 && !ids)) return pith_errf(err, "tokenizer: bad id array");
    size_t piece_cap = pith_detok_max_piece(t);
    char *piece = malloc(piece_cap);
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    if (!piece || !buf) goto oom;
    pith_detok d;
    pith_detok_init(&d, t, keep_special);
    for (int i = 0; i <= n_ids; i++) {
        size_t got = i < n_ids ? pith_detok_push(&d, ids[i], piece, piece_cap) : pith_detok_flush(&d, piece, piece_cap);
        if (n + got + 1 > cap) {
            while (n + got + 1 > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) goto oom;
            buf = nb;
        }
        memcpy(buf + n, piece, got);
        n += got;
    }
    buf[n] = '\0';
    free(piece);
    *text = buf;
    if (len) *len = n;
    return 0;
oom:
    free(piece);
    free(buf);
    return pith_errf(err, "tokenizer: out of memory");
}
