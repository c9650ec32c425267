/* Growable text buffers for the front ends that write GBNF. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

void gr_buf_put(gr_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = cap > ((size_t)64 << 20) ? NULL : realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void gr_buf_puts(gr_buf *b, const char *s) { gr_buf_put(b, s, strlen(s)); }

void gr_buf_printf(gr_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = true; return; }
    if ((size_t)n < sizeof tmp) { gr_buf_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gr_buf_put(b, big, (size_t)n);
    free(big);
}

void gr_buf_literal(gr_buf *b, const char *s, size_t n) {
    gr_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; gr_buf_put(b, e, 2); }
        else if (c == '\n') gr_buf_put(b, "\\n", 2);
        else if (c == '\r') gr_buf_put(b, "\\r", 2);
        else if (c == '\t') gr_buf_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) gr_buf_printf(b, "\\x%02X", c);
        else gr_buf_put(b, (const char *)&c, 1);
    }
    gr_buf_put(b, "\"", 1);
}
