/* Names read from files go into error messages; this keeps them short and printable, so a hostile file
 * cannot put control characters or megabytes of text into a message. */
#ifndef PITH_FORMAT_PRINTABLE_H
#define PITH_FORMAT_PRINTABLE_H

#include <stddef.h>
#include <stdint.h>

/* Writes at most 64 characters of (p, len) into buf (NUL-terminated), '?' for unprintable bytes and
 * "..." when cut. Returns buf. */
static inline const char *pith_printable(char *buf, size_t cap, const char *p, uint64_t len) {
    size_t keep = cap > 4 ? cap - 4 : 0;
    if (keep > 64) keep = 64;
    size_t n = 0;
    for (; n < keep && n < len; n++) {
        unsigned char c = (unsigned char)p[n];
        buf[n] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n < len && cap >= 4) {
        buf[n++] = '.';
        buf[n++] = '.';
        buf[n++] = '.';
    }
    if (cap) buf[n < cap ? n : cap - 1] = '\0';
    return buf;
}

#define PITH_PRINTABLE_CAP 80

#endif
