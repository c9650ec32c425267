/* Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering of combining
 * marks, then canonical composition. The data tables are generated from Python's unicodedata by
 * tools/gen_nfc_tables.py. Bytes that are not valid UTF-8 are copied through unchanged and act as
 * starters that nothing composes with. */
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_nfc_tables.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))
#define RAW_BYTE 0x80000000u /* marks an invalid input byte kept as is */

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static int ccc_of(uint32_t cp) {
    size_t lo = 0, hi = N_ELEMS(NFC_CCC);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NFC_CCC[mid][0]) hi = mid;
        else if (cp > NFC_CCC[mid][1]) lo = mid + 1;
        else return (int)NFC_CCC[mid][2];
    }
    return 0;
}

static bool in_check(uint32_t cp) {
    size_t lo = 0, hi = N_ELEMS(NFC_CHECK);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NFC_CHECK[mid][0]) hi = mid;
        else if (cp > NFC_CHECK[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

static const uint32_t *decomp_of(uint32_t cp, size_t *n) {
    size_t lo = 0, hi = N_ELEMS(NFC_DECOMP);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NFC_DECOMP[mid][0]) hi = mid;
        else if (cp > NFC_DECOMP[mid][0]) lo = mid + 1;
        else {
            *n = NFC_DECOMP[mid][2];
            return &NFC_DECOMP_DATA[NFC_DECOMP[mid][1]];
        }
    }
    return NULL;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = N_ELEMS(NFC_COMPOSE);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = NFC_COMPOSE[mid];
        if (a < e[0] || (a == e[0] && b < e[1])) hi = mid;
        else if (a > e[0] || b > e[1]) lo = mid + 1;
        else return e[2];
    }
    return 0;
}

bool tok_nfc_maybe_changes(const char *text, size_t n) {
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    /* Everything below U+0300 is stable under NFC: lead bytes below 0xCC only start such chars. */
    while (i < n && p[i] < 0xCC) i++;
    while (i < n) {
        uint32_t cp;
        int len = pith_utf8_decode(p + i, n - i, &cp);
        if (len == 0) {
            i++;
            continue;
        }
        if (cp >= 0x300 && in_check(cp)) return true;
        i += (size_t)len;
    }
    return false;
}

typedef struct cpbuf {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

static int cp_push(cpbuf *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

static int decompose(uint32_t cp, cpbuf *b) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        if (cp_push(b, L_BASE + s / N_COUNT) != 0 || cp_push(b, V_BASE + (s % N_COUNT) / T_COUNT) != 0) return -1;
        if (s % T_COUNT && cp_push(b, T_BASE + s % T_COUNT) != 0) return -1;
        return 0;
    }
    size_t dn;
    const uint32_t *d = decomp_of(cp, &dn);
    if (!d) return cp_push(b, cp);
    for (size_t i = 0; i < dn; i++)
        if (cp_push(b, d[i]) != 0) return -1;
    return 0;
}

static int class_of(uint32_t v) { return (v & RAW_BYTE) ? 0 : ccc_of(v); }

int tok_nfc(const char *text, size_t n, tok_buf *out) {
    cpbuf b = {0};
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = pith_utf8_decode(p + i, n - i, &cp);
        int rc = len ? decompose(cp, &b) : cp_push(&b, RAW_BYTE | p[i]);
        if (rc != 0) goto fail;
        i += len ? (size_t)len : 1;
    }
    /* Canonical ordering: stable insertion sort of each run of non-starters by class. */
    for (size_t i = 1; i < b.n; i++) {
        int c = class_of(b.v[i]);
        if (c == 0) continue;
        size_t j = i;
        uint32_t v = b.v[i];
        while (j > 0 && class_of(b.v[j - 1]) > c) {
            b.v[j] = b.v[j - 1];
            j--;
        }
        b.v[j] = v;
    }
    /* Canonical composition. */
    if (b.n > 0) {
        size_t starter = 0, w = 1;
        int last = class_of(b.v[0]) ? 256 : 0;
        bool starter_ok = !(b.v[0] & RAW_BYTE) && last == 0;
        for (size_t i = 1; i < b.n; i++) {
            uint32_t ch = b.v[i];
            int c = class_of(ch);
            uint32_t comp = 0;
            if (starter_ok && !(ch & RAW_BYTE) && (last < c || last == 0))
                comp = compose_pair(b.v[starter], ch);
            if (comp) {
                b.v[starter] = comp;
                continue;
            }
            if (c == 0) {
                starter = w;
                starter_ok = !(ch & RAW_BYTE);
            }
            last = c;
            b.v[w++] = ch;
        }
        b.n = w;
    }
    for (size_t i = 0; i < b.n; i++) {
        char enc[4];
        int len = (b.v[i] & RAW_BYTE) ? (enc[0] = (char)(b.v[i] & 0xFF), 1) : pith_utf8_encode(b.v[i], enc);
        if (tok_buf_append(out, enc, (size_t)len) != 0) goto fail;
    }
    free(b.v);
    return 0;
fail:
    free(b.v);
    return -1;
}
