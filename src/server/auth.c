#include "server/auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static bool key_chars_ok(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) return false;
    return true;
}

static int add_span(auth_keys *a, const char *s, size_t len, pith_err *err) {
    if (len == 0 || len > AUTH_MAX_KEY) return pith_errf(err, "an API key must hold 1 to %d bytes", AUTH_MAX_KEY);
    if (!key_chars_ok(s, len)) return pith_errf(err, "an API key may only hold printable ASCII without spaces");
    if (a->n >= AUTH_MAX_KEYS) return pith_errf(err, "too many API keys (at most %d)", AUTH_MAX_KEYS);
    auth_key *k = realloc(a->keys, (size_t)(a->n + 1) * sizeof *k);
    if (!k) return pith_errf(err, "out of memory");
    a->keys = k;
    memset(&k[a->n], 0, sizeof k[a->n]);
    memcpy(k[a->n].bytes, s, len);
    k[a->n].len = len;
    a->n++;
    return 0;
}

int auth_add_key(auth_keys *a, const char *key, pith_err *err) {
    return add_span(a, key ? key : "", key ? strlen(key) : 0, err);
}

int auth_add_key_file(auth_keys *a, const char *path, pith_err *err) {
    /* O_NONBLOCK: a FIFO or a device named by mistake must not hang the start; only a regular file
     * is read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return pith_errf(err, "cannot open the API key file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pith_errf(err, "the API key file %s is not a regular file", path);
    }
    if (st.st_size > (off_t)AUTH_MAX_KEYS * (AUTH_MAX_KEY + 64)) {
        close(fd);
        return pith_errf(err, "the API key file %s is too large to hold API keys", path);
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return pith_errf(err, "cannot open the API key file %s: %s", path, strerror(errno));
    }
    char line[AUTH_MAX_KEY + 64];
    int lineno = 0, before = a->n, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = pith_errf(err, "%s line %d: line too long for an API key", path, lineno);
            break;
        }
        char *s = line;
        while (*s && isspace((unsigned char)*s)) s++;
        char *end = s + strlen(s);
        while (end > s && isspace((unsigned char)end[-1])) end--;
        if (end == s || *s == '#') continue;
        if (add_span(a, s, (size_t)(end - s), err)) rc = pith_err_prefix(err, "%s line %d", path, lineno);
    }
    if (rc == 0 && ferror(f)) rc = pith_errf(err, "cannot read the API key file %s", path);
    fclose(f);
    if (rc == 0 && a->n == before) rc = pith_errf(err, "the API key file %s holds no key", path);
    return rc;
}

bool auth_key_file_shared(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0;
}

void auth_free(auth_keys *a) {
    if (a->keys) memset(a->keys, 0, (size_t)a->n * sizeof *a->keys);
    free(a->keys);
    a->keys = NULL;
    a->n = 0;
}

bool auth_enabled(const auth_keys *a) { return a->n > 0; }

bool auth_check(const auth_keys *a, const char *header) {
    if (a->n == 0) return true;
    if (!header || strncasecmp(header, "Bearer ", 7) != 0) return false;
    return auth_check_key(a, header + 7);
}

bool auth_check_key(const auth_keys *a, const char *given) {
    if (a->n == 0) return true;
    if (!given) return false;
    while (*given == ' ') given++;
    size_t glen = strlen(given);
    while (glen > 0 && (given[glen - 1] == ' ' || given[glen - 1] == '\t')) glen--;
    /* The length of the presented key is the client's own information; beyond it, nothing branches on
     * key contents. */
    if (glen == 0 || glen > AUTH_MAX_KEY) return false;
    unsigned char padded[AUTH_MAX_KEY] = {0};
    memcpy(padded, given, glen);
    volatile unsigned match = 0;
    for (int k = 0; k < a->n; k++) {
        const auth_key *key = &a->keys[k];
        unsigned diff = (unsigned)(key->len ^ glen);
        for (size_t i = 0; i < AUTH_MAX_KEY; i++) diff |= (unsigned)(padded[i] ^ key->bytes[i]);
        /* 1 when diff == 0, else 0, without a branch. */
        match |= 1u & (((diff | (0u - diff)) >> (sizeof diff * 8 - 1)) ^ 1u);
    }
    return match != 0;
}
