/* Helpers shared by the tokenizer tests: golden-suite runner, UTF-8 validation, robustness loops.
 *
 * Suite files (llama.cpp's .inp/.out format): the .inp holds texts separated by the line
 * "__ggml_vocab_test__" (llama.cpp's files also end with one); the .out holds one line of expected ids
 * per text, without BOS. */
#ifndef PITH_TEST_TOKENIZER_UTIL_H
#define PITH_TEST_TOKENIZER_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pith/tokenizer.h"

static inline char *tt_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    *n = len;
    return buf;
}

static inline bool tt_file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Strict UTF-8 validity (no overlongs, surrogates or code points past U+10FFFF). */
static inline bool tt_valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
        else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

static uint64_t tt_rng = 0x2545F4914F6CDD1DULL;
static inline uint32_t tt_rand(void) {
    tt_rng ^= tt_rng << 13;
    tt_rng ^= tt_rng >> 7;
    tt_rng ^= tt_rng << 17;
    return (uint32_t)(tt_rng >> 11);
}

/* Runs every case of a suite; checks ids exactly and, when roundtrip, that decoding gives the text
 * back. Returns the number of cases run (0 when the files are missing). */
static inline int tt_run_suite(const pith_tokenizer *t, const char *inp_path, const char *out_path, bool roundtrip) {
    size_t in_n, out_n;
    char *in = tt_slurp(inp_path, &in_n), *out = tt_slurp(out_path, &out_n);
    CHECKF(in && out, "cannot read %s / %s", inp_path, out_path);
    if (!in || !out) {
        free(in);
        free(out);
        return 0;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_n = sizeof sep - 1;
    int cases = 0, id_fail = 0, rt_fail = 0;
    char *p = in, *end = in + in_n, *o = out, *o_end = out + out_n;
    while (p <= end) {
        char *e = strstr(p, sep);
        if (!e) {
            if (p == end) break; /* the file ended with a separator */
            e = end;
        }
        size_t text_n = (size_t)(e - p);
        char *line_end = memchr(o, '\n', (size_t)(o_end - o));
        if (!line_end) line_end = o_end;
        cases++;
        CHECKF(o < o_end || text_n == 0, "%s: case %d has no expected line", out_path, cases);
        int32_t *ids = NULL;
        int n_ids = 0;
        pith_err err = {{0}};
        int rc = pith_tokenizer_encode(t, p, text_n, 0, &ids, &n_ids, &err);
        CHECKF(rc == 0, "%s: case %d: %s", inp_path, cases, err.msg);
        /* Compare with the expected line's integers. */
        bool same = true;
        int k = 0;
        for (char *q = o, *qe; q < line_end; q = qe) {
            long v = strtol(q, &qe, 10);
            if (qe == q || qe > line_end) break;
            if (k >= n_ids || ids[k] != v) same = false;
            k++;
        }
        if (k != n_ids) same = false;
        if (!same && ++id_fail <= 3) {
            fprintf(stderr, "%s case %d: [%.*s]\n  want: %.*s\n  got: ", inp_path, cases, (int)(text_n > 200 ? 200 : text_n),
                    p, (int)(line_end - o > 300 ? 300 : line_end - o), o);
            for (int i = 0; i < n_ids && i < 60; i++) fprintf(stderr, " %d", ids[i]);
            fputc('\n', stderr);
        }
        if (roundtrip) {
            char *dec = NULL;
            size_t dec_n = 0;
            CHECK(pith_tokenizer_decode(t, ids, n_ids, false, &dec, &dec_n, &err) == 0);
            if (!(dec && dec_n == text_n && memcmp(dec, p, text_n) == 0) && ++rt_fail <= 3)
                fprintf(stderr, "%s case %d: decode(encode(text)) differs: [%s]\n", inp_path, cases, dec ? dec : "");
            free(dec);
        }
        free(ids);
        o = line_end < o_end ? line_end + 1 : o_end;
        p = e + sep_n;
    }
    CHECKF(id_fail == 0, "%s: %d of %d cases differ", inp_path, id_fail, cases);
    CHECKF(rt_fail == 0, "%s: %d of %d cases do not round-trip", inp_path, rt_fail, cases);
    CHECKF(o >= o_end, "%s has more expected lines than %s has cases", out_path, inp_path);
    printf("%s: %d cases, %d differ, %d fail the round trip\n", inp_path, cases, id_fail, rt_fail);
    free(in);
    free(out);
    return cases;
}

static inline double tt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void tt_encode_decode_ok(const pith_tokenizer *t, const char *text, size_t n, bool expect_roundtrip) {
    int32_t *ids = NULL;
    int n_ids = 0;
    pith_err err = {{0}};
    CHECKF(pith_tokenizer_encode(t, text, n, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n_ids, &err) == 0,
           "%s", err.msg);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= pith_tokenizer_n_vocab(t)) {
            CHECKF(false, "id %d out of range", ids[i]);
            break;
        }
    char *dec = NULL;
    size_t dec_n = 0;
    CHECK(pith_tokenizer_decode(t, ids, n_ids, false, &dec, &dec_n, &err) == 0);
    CHECK(dec && tt_valid_utf8(dec, dec_n));
    if (expect_roundtrip) CHECKF(dec && dec_n == n && memcmp(dec, text, n) == 0, "long input does not round-trip");
    free(dec);
    free(ids);
}

/* Random bytes, invalid UTF-8 and long inputs: no crash, ids in range, valid UTF-8 out, bounded time. */
static inline void tt_robustness(const pith_tokenizer *t, const char *name) {
    for (int round = 0; round < 60; round++) {
        size_t n = tt_rand() % 2000;
        char *buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) buf[i] = (char)tt_rand();
        /* Every other round: mostly ASCII with stray invalid bytes, like damaged text. */
        if (round % 2)
            for (size_t i = 0; i < n; i++) buf[i] = (tt_rand() % 8) ? (char)(32 + tt_rand() % 95) : (char)(0x80 + tt_rand() % 128);
        tt_encode_decode_ok(t, buf, n, false);
        free(buf);
    }
    /* 1 MB of one letter (a single 1 MB pre-token for most regexes) and of an invalid byte; 256 KB runs
     * of whitespace, digits, CJK and special-token prefixes exercise the other regex branches. */
    static const char *const fills[] = {"a", "\xff", " ", "\n", "7", "\xe4\xb8\x80", "<|"};
    for (size_t k = 0; k < sizeof fills / sizeof fills[0]; k++) {
        size_t unit = strlen(fills[k]), n = (size_t)1 << (k < 2 ? 20 : 18);
        char *buf = malloc(n);
        for (size_t i = 0; i + unit <= n; i += unit) memcpy(buf + i, fills[k], unit);
        n -= n % unit;
        double t0 = tt_now();
        tt_encode_decode_ok(t, buf, n, fills[k][0] != '\xff');
        double secs = tt_now() - t0;
        if (getenv("PITH_TOK_TIMING")) fprintf(stderr, "%s: %zu bytes of '%s': %.3f s\n", name, n, fills[k], secs);
        CHECKF(secs < 60, "%s: %zu bytes of '%s' took %.1f s", name, n, fills[k], secs);
        free(buf);
    }
}

#endif
