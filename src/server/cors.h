/* Cross-origin resource sharing: which browser origins may call the API (pith serve --cors-origin).
 *
 * An allowed origin is "*" (any) or an exact origin, scheme://host[:port] as browsers send it in the
 * Origin header (no path, no trailing slash); matching ignores ASCII case. With no origins configured
 * the server adds no CORS header at all. */
#ifndef PITH_SERVER_CORS_H
#define PITH_SERVER_CORS_H

#include <stdbool.h>

#include "pith/status.h"

typedef struct cors_origins {
    char **origins;
    int n;
    bool any; /* "*" was given */
} cors_origins;

/* Adds one allowed origin after checking its form; the error names it. */
int cors_add(cors_origins *c, const char *origin, pith_err *err);
void cors_free(cors_origins *c);
bool cors_enabled(const cors_origins *c);
/* The Access-Control-Allow-Origin value for a request's Origin header (NULL when absent): "*", the
 * origin itself, or NULL when it is not allowed (or CORS is off). */
const char *cors_allow_origin(const cors_origins *c, const char *origin);

#endif
