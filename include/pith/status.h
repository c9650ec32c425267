/* Errors are values.
 *
 * Every fallible library function returns 0 on success and -1 on failure, and on failure fills the
 * caller's pith_err (which may be NULL) with one human-readable line: what failed and, for files, the
 * file's name. Nothing in the library prints, exits or aborts on bad input. */
#ifndef PITH_STATUS_H
#define PITH_STATUS_H

#include <stddef.h>

#include "pith/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_err {
    char msg[512];
} pith_err;

/* Formats the message into err (if not NULL) and returns -1, so callers can write
 * `return pith_errf(err, "...", ...);`. */
PITH_API int pith_errf(pith_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes an existing message: "prefix: old message". Returns -1. */
PITH_API int pith_err_prefix(pith_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
