/* pith tokbench: tokenizer throughput (a benchmark, not a test).
 *
 * For each tokenizer given, encodes a text file (default ../shared/text/war-and-peace.txt) and reports
 * MB/s for the whole file as one call, for the file cut at blank lines into paragraph-sized calls (what
 * prompts look like: the per-call word cache starts empty every time), and for decoding. Times are
 * the calling thread's CPU time (everything here runs on one thread), so that a busy machine slows
 * the numbers less than wall-clock time would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "pith/tokenizer.h"


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, len = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: pith tokbench [-f TEXT] [-r REPEATS] TOKENIZER...\n"
            "\n"
            "Prints encode and decode throughput (MB per CPU second, one thread) for each TOKENIZER\n"
            "(anything pith tokenize -m accepts).\n"
            "  -f FILE      text to encode (default: $PITH_SHARED or ../shared, text/war-and-peace.txt)\n"
            "  -r N         repetitions; the best is reported (default 3)\n");
}

static int bench_one(const char *path, const char *text, size_t n, int repeats) {
    pith_err err = {{0}};
    pith_tokenizer *t;
    double t0 = now_s();
    if (pith_tokenizer_load(path, 0, &t, &err) != 0) {
        fprintf(stderr, "pith tokbench: %s\n", err.msg);
        return 1;
    }
    double load_s = now_s() - t0, whole = 1e30, paras = 1e30, dec = 1e30;
    int n_ids = 0;
    int32_t *ids = NULL;
    for (int r = 0; r < repeats; r++) {
        free(ids);
        t0 = now_s();
        if (pith_tokenizer_encode(t, text, n, 0, &ids, &n_ids, &err) != 0) {
            fprintf(stderr, "pith tokbench: %s\n", err.msg);
            pith_tokenizer_free(t);
            return 1;
        }
        double s = now_s() - t0;
        if (s < whole) whole = s;

        t0 = now_s();
        for (const char *p = text, *end = text + n; p < end;) {
            const char *q = strstr(p, "\n\n");
            q = q ? q + 2 : end;
            int32_t *pids;
            int pn;
            if (pith_tokenizer_encode(t, p, (size_t)(q - p), 0, &pids, &pn, &err) != 0) break;
            free(pids);
            p = q;
        }
        s = now_s() - t0;
        if (s < paras) paras = s;

        t0 = now_s();
        char *out;
        size_t out_n;
        if (pith_tokenizer_decode(t, ids, n_ids, false, &out, &out_n, &err) == 0) free(out);
        s = now_s() - t0;
        if (s < dec) dec = s;
    }
    double mb = (double)n / 1e6;
    printf("%-60s load %6.3f s  %8d tokens (%.2f bytes/token)  encode %7.2f MB/s whole, %7.2f MB/s by paragraph"
           "  decode %7.1f MB/s\n",
           path, load_s, n_ids, (double)n / (n_ids ? n_ids : 1), mb / whole, mb / paras, mb / dec);
    free(ids);
    pith_tokenizer_free(t);
    return 0;
}

int pith_cmd_tokbench(int argc, char **argv) {
    const char *file = NULL;
    long long repeats = 3;
    int first = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-f")) {
            if (!(file = cli_value("tokbench", argc, argv, &i))) return PITH_EXIT_USAGE;
        } else if (!strcmp(argv[i], "-r")) {
            const char *v = cli_value("tokbench", argc, argv, &i);
            if (!v || !cli_parse_int("tokbench", "-r", v, 1, 1000, &repeats)) return PITH_EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "pith tokbench: unknown option '%s'\n", argv[i]);
            return PITH_EXIT_USAGE;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc) {
        usage(stderr);
        return PITH_EXIT_USAGE;
    }
    char def[4096];
    if (!file) {
        const char *shared = getenv("PITH_SHARED");
        snprintf(def, sizeof def, "%s/text/war-and-peace.txt", shared && *shared ? shared : "../shared");
        file = def;
    }
    size_t n;
    char *text = read_file(file, &n);
    if (!text) {
        fprintf(stderr, "pith tokbench: cannot read %s\n", file);
        return 1;
    }
    printf("%s: %.2f MB, best of %lld\n", file, (double)n / 1e6, repeats);
    int rc = 0;
    for (int i = first; i < argc; i++) rc |= bench_one(argv[i], text, n, (int)repeats);
    free(text);
    return rc;
}
