/* Helpers shared by the libFuzzer targets in tests/fuzz (built by scripts/fuzz.sh, not by CMake).
 *
 * Targets that exercise file readers write the input to a scratch path private to the process
 * ($TMPDIR or /tmp, named by pid) and open that path, so the reader sees exactly the fuzzer's bytes.
 * FUZZ_SOURCE_DIR (a -D from the script) is the repository root, for the fixed small tokenizer some
 * targets run their input through. */
#ifndef PITH_FUZZ_UTIL_H
#define PITH_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pith/tokenizer.h"

#ifndef FUZZ_SOURCE_DIR
#define FUZZ_SOURCE_DIR "."
#endif

/* A scratch path "<tmp>/pith-fuzz-<pid>-<name>" in buf. */
static inline const char *fuzz_path(char *buf, size_t cap, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/pith-fuzz-%ld-%s", tmp && *tmp ? tmp : "/tmp", (long)getpid(), name);
    return buf;
}

static inline int fuzz_write(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t put = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) == 0 && put == size ? 0 : -1;
}

/* Splits data at its first NUL byte: [0, *first) and (*first, size) ("" when there is none). */
static inline void fuzz_split(const uint8_t *data, size_t size, size_t *first, const uint8_t **rest,
                              size_t *rest_len) {
    const uint8_t *nul = memchr(data, 0, size);
    *first = nul ? (size_t)(nul - data) : size;
    *rest = nul ? nul + 1 : data + size;
    *rest_len = nul ? size - *first - 1 : 0;
}

/* Decodes ids with a small output buffer and a large one, and through the streaming detokenizer with
 * skip/push/flush, so every path that turns ids into text runs. */
static inline void fuzz_decode_all(const pith_tokenizer *t, const int32_t *ids, int n) {
    char *text = NULL;
    size_t len = 0;
    pith_err err;
    if (pith_tokenizer_decode(t, ids, n, n % 2 == 0, &text, &len, &err) == 0) free(text);
    pith_detok d;
    pith_detok_init(&d, t, n % 3 == 0);
    pith_detok_skip(&d, ids, n / 4);
    char small[7], big[1024];
    for (int i = n / 4; i < n; i++) {
        if (i % 2) pith_detok_push(&d, ids[i], small, sizeof small);
        else pith_detok_push(&d, ids[i], big, sizeof big);
    }
    pith_detok_flush(&d, small, (size_t)n % sizeof small);
}

#endif
