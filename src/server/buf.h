/* A growable byte buffer for building response bodies and event streams. An allocation failure is
 * sticky (`failed`): appends after it do nothing, so callers check once at the end. */
#ifndef PITH_SERVER_BUF_H
#define PITH_SERVER_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct buf {
    char *data;     /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
    bool failed;
} buf;

void buf_append(buf *b, const void *data, size_t len);
void buf_puts(buf *b, const char *s);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void buf_consume(buf *b, size_t n);
void buf_free(buf *b);

#endif
