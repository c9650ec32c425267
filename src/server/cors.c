#include "server/cors.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* scheme "://" host [":" port], nothing else: what a browser puts in an Origin header. */
static bool origin_form_ok(const char *o) {
    const char *sep = strstr(o, "://");
    if (!sep || sep == o) return false;
    for (const char *p = o; p < sep; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '+' ||
              *p == '-' || *p == '.'))
            return false;
    const char *host = sep + 3;
    if (!*host) return false;
    for (const char *p = host; *p; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == '@' || *p <= ' ' || *p == 0x7f) return false;
    return true;
}

int cors_add(cors_origins *c, const char *origin, pith_err *err) {
    if (!origin) return pith_errf(err, "empty CORS origin");
    if (!strcmp(origin, "*")) {
        c->any = true;
        return 0;
    }
    if (!origin_form_ok(origin))
        return pith_errf(err, "CORS origin '%.200s' is not '*' or scheme://host[:port] (no path, no trailing slash)",
                         origin);
    char **grown = realloc(c->origins, (size_t)(c->n + 1) * sizeof *grown);
    if (!grown) return pith_errf(err, "out of memory");
    c->origins = grown;
    if (!(c->origins[c->n] = strdup(origin))) return pith_errf(err, "out of memory");
    c->n++;
    return 0;
}

void cors_free(cors_origins *c) {
    for (int i = 0; i < c->n; i++) free(c->origins[i]);
    free(c->origins);
    *c = (cors_origins){0};
}

bool cors_enabled(const cors_origins *c) { return c->any || c->n > 0; }

const char *cors_allow_origin(const cors_origins *c, const char *origin) {
    if (!origin || !cors_enabled(c)) return NULL;
    if (c->any) return "*";
    for (int i = 0; i < c->n; i++)
        if (!strcasecmp(c->origins[i], origin)) return origin;
    return NULL;
}
