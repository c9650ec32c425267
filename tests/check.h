/* Minimal assertion helpers for the C tests, which ctest runs one executable at a time.
 * A test's main returns check_summary(): 0 when every CHECK held, 1 otherwise. A test that cannot run
 * (for example because ../shared is absent) prints why and returns CHECK_SKIP, which ctest reports as
 * skipped, never as passed. */
#ifndef PITH_TEST_CHECK_H
#define PITH_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP 77

static int check_failures_;
static int check_count_;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count_++;                                                              \
        if (!(cond)) {                                                               \
            check_failures_++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECKF(cond, ...)                                                            \
    do {                                                                             \
        check_count_++;                                                              \
        if (!(cond)) {                                                               \
            check_failures_++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

static inline int check_summary(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

/* Directory of the shared test assets, or NULL (after printing why) when absent. */
static inline const char *check_shared_dir(void) {
    const char *d = getenv("PITH_SHARED");
    static char buf[4096];
    if (!d || !*d) {
        snprintf(buf, sizeof buf, "../shared");
        d = buf;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/README.md", d);
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("SKIP: shared test assets not found at %s (set PITH_SHARED)\n", d);
        return NULL;
    }
    fclose(f);
    return d;
}

#endif
