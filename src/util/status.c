#include "pith/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pith_errf(pith_err *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int pith_err_prefix(pith_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix), cap = sizeof err->msg;
    if (plen + 2 >= cap) plen = cap - 3;
    size_t olen = strnlen(err->msg, cap - 1);
    if (plen + 2 + olen >= cap) olen = cap - 1 - plen - 2;
    memmove(err->msg + plen + 2, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + olen] = 0;
    return -1;
}
