#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

bool cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "pith %s: %s: '%s' is not an integer\n", cmd, opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pith %s: %s: %lld is out of range [%lld, %lld]\n", cmd, opt, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "pith %s: %s: '%s' is not a number\n", cmd, opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pith %s: %s: %g is out of range [%g, %g]\n", cmd, opt, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_size(const char *cmd, const char *opt, const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (errno || end == s || *end || s[0] == '-' || n == 0 || n > (SIZE_MAX >> shift)) {
        fprintf(stderr, "pith %s: %s: '%s' is not a size (bytes, or a number with K, M or G)\n", cmd, opt, s);
        return false;
    }
    *out = (size_t)n << shift;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "pith %s: option %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* Where the default model may lie, from the binary's own path: next to it (the build tree) and in
 * ../share/pith (an installed binary: PREFIX/bin/pith finds PREFIX/share/pith/pith-default.gguf).
 * False when the binary's path cannot be read. */
static bool default_model_candidates(char next[static PATH_MAX + 32], char share[static PATH_MAX + 64]) {
    char exe[PATH_MAX + 1];
    ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX);
    if (n <= 0) return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = 0; /* exe is now the binary's directory ("" for /) */
    snprintf(next, PATH_MAX + 32, "%s/pith-default.gguf", exe);
    char *up = strrchr(exe, '/');
    if (up) *up = 0; /* its parent */
    snprintf(share, PATH_MAX + 64, "%s/share/pith/pith-default.gguf", exe);
    return true;
}

const char *cli_default_model(void) {
    static char next[PATH_MAX + 32], share[PATH_MAX + 64];
    const char *env = getenv("PITH_DEFAULT_MODEL");
    if (env && *env) return env;
    if (!default_model_candidates(next, share)) return NULL;
    if (access(next, R_OK) == 0) return next;
    if (access(share, R_OK) == 0) return share;
    return NULL;
}

void cli_no_default_model(const char *cmd) {
    char next[PATH_MAX + 32], share[PATH_MAX + 64];
    if (default_model_candidates(next, share))
        fprintf(stderr,
                "pith %s: no model given (-m) and no default model found: looked for %s and %s, and "
                "$PITH_DEFAULT_MODEL is not set\n",
                cmd, next, share);
    else
        fprintf(stderr,
                "pith %s: no model given (-m) and no default model found: cannot read the binary's path "
                "(/proc/self/exe) to look next to it or in ../share/pith, and $PITH_DEFAULT_MODEL is not set\n",
                cmd);
}
