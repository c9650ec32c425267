/* Strict UTF-8 decoding and encoding of one code point, shared by the tokenizers and the chat-template
 * interpreter. Strict means: no overlong forms, no surrogates, nothing above U+10FFFF. */
#ifndef PITH_UTIL_UTF8_H
#define PITH_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence at p (n bytes available, n >= 1). Returns its length (1..4) and sets *cp, or
 * returns 0 when the bytes there do not start a valid sequence. */
int pith_utf8_decode(const unsigned char *p, size_t n, uint32_t *cp);
/* Writes cp (<= U+10FFFF) to out and returns the number of bytes (1..4). */
int pith_utf8_encode(uint32_t cp, char out[4]);

#endif
