#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/info.h"
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

bool cli_parse_device(const char *cmd, const char *opt, const char *s) {
    int index;
    bool vulkan;
    pith_err err;
    if (!*s || pith_backend_parse_device(s, &index, &vulkan, &err)) {
        fprintf(stderr, "pith %s: %s: %s\n", cmd, opt, *s ? err.msg : "the device is empty (cpu, vulkan or vulkan:N)");
        return false;
    }
    return true;
}

bool cli_parse_gpu_layers(const char *cmd, const char *opt, const char *s) {
    int n;
    pith_err err;
    if (pith_backend_parse_gpu_layers(s, &n, &err)) {
        fprintf(stderr, "pith %s: %s %s: expected a number of layers (0 or more) or auto\n", cmd, opt, s);
        return false;
    }
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

/* SIGINT: the first sets the flag (the command finishes what it can and reports), the handler is then
 * reset, so a second Ctrl-C ends the process at once. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

void cli_sigint_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

bool cli_interrupted(void) {
    return interrupted != 0;
}

pith_run_action cli_run_check(void *interrupted_flag) {
    if (!cli_interrupted()) return PITH_RUN_CONTINUE;
    *(bool *)interrupted_flag = true;
    return PITH_RUN_CANCEL; /* again at every later step: cancelling a cancelled request does nothing */
}

int cli_read_file(const char *path, char **data, size_t *len, pith_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return pith_errf(err, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b2 = realloc(buf, cap * 2 + 1);
        if (!b2) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b2;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return pith_errf(err, "%s: out of memory", path);
    if (bad) {
        free(buf);
        return pith_errf(err, "cannot read %s", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}
