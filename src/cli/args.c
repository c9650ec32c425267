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

const char *cli_default_model(void) {
    static char path[PATH_MAX + 32];
    const char *env = getenv("PITH_DEFAULT_MODEL");
    if (env && *env) return env;
    ssize_t n = readlink("/proc/self/exe", path, PATH_MAX);
    if (n <= 0) return NULL;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "pith-default.gguf");
    return access(path, R_OK) == 0 ? path : NULL;
}
